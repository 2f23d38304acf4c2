"""package.json and package-logs.json (the mip manifests of the drafting and the logs-only node): up to date
with the sources, the logs-only package free of the model runtime and whole inside the drafting one, and
`mpremote mip install` of each onto a virtual board gives a core that imports and runs there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.board import build, deploy, mip_package
from tools.board.vboard import VirtualBoard

ROOT = Path(__file__).resolve().parents[2]


def test_package_json_is_current() -> None:
    assert mip_package.main(["--check"]) == 0, "package.json is stale: run python -m tools.board.mip_package"
    data = json.loads((ROOT / "package.json").read_text())
    paths = [dest for dest, src in data["urls"]]
    assert all(dest == src for dest, src in data["urls"])
    assert "shared/__init__.py" in paths and "shared/ringkv.py" in paths and "firmware/uart.py" in paths
    assert all((ROOT / p).is_file() for p in paths)
    assert not any(p in build.EXCLUDED["micropython"] for p in paths)  # host-only backends stay out


def test_the_logs_only_package_is_the_head_of_the_drafting_one() -> None:
    logs = json.loads((ROOT / "package-logs.json").read_text())
    draft = json.loads((ROOT / "package.json").read_text())
    paths = [dest for dest, src in logs["urls"]]
    assert draft["urls"][:len(paths)] == logs["urls"]  # the drafting node = the logs-only node + its own files
    assert paths == [str(p.relative_to(ROOT)) for p in build.sources("micropython", drafting=False)]
    assert "firmware/node.py" in paths and "shared/link.py" in paths and "shared/plant.py" in paths
    assert not {"shared/llama.py", "shared/bpe.py", "shared/q4.py", "shared/drafter.py", "firmware/annotator.py"} & set(paths)
    assert logs["version"] == draft["version"] and logs["deps"] == draft["deps"] == []


def test_check_reports_a_stale_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "repo"
    (fake / "shared").mkdir(parents=True)
    (fake / "firmware").mkdir()
    (fake / "shared" / "a.py").write_text("")
    (fake / "pyproject.toml").write_text('version = "9.9"\n')
    monkeypatch.setattr(mip_package, "ROOT", fake)
    assert mip_package.main(["--check"]) == 1  # no package.json yet
    assert mip_package.main([]) == 0
    assert mip_package.main(["--check"]) == 0
    (fake / "shared" / "b.py").write_text("")  # a new module makes it stale
    assert mip_package.main(["--check"]) == 1


@pytest.mark.slow
def test_mip_install_onto_a_virtual_board(tmp_path: Path) -> None:
    def install(name: str) -> None:
        out = subprocess.run([sys.executable, "-m", "mpremote", "connect", vb.repl_port, "mip", "install",
                              "--target", "/lib", str(ROOT / name)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Done" in out.stdout

    with VirtualBoard("rp2040_pico", root=tmp_path / "fs") as vb:
        install("package-logs.json")  # the logs-only node: its link and plant import, no model runtime there
        assert not (tmp_path / "fs" / "lib" / "shared" / "llama.py").exists()
        printed = deploy.run_on_board(vb.repl_port, "from firmware import logq, sampler\nprint('logs', logq.LINE_MAX)\n",
                                      timeout=60)
        assert "logs 1" in printed
        install("package.json")
        assert (tmp_path / "fs" / "lib" / "shared" / "ringkv.py").is_file()
        assert not (tmp_path / "fs" / "lib" / "shared" / "q4_numpy.py").exists()
        code = ("from shared import lruk, crc32\n"
                "c = lruk.LRUK(8, 2)\nprint('slot', c.insert(5), c.lookup(5))\n"
                "print('crc', crc32.crc32(b'123456789'))\n")
        printed = deploy.run_on_board(vb.repl_port, code, timeout=60)
        assert "crc %d" % 0xCBF43926 in printed
        assert "slot 0 0" in printed
