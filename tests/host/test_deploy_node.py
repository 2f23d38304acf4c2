"""`edgetwin vboard` + `edgetwin deploy --node`: the README's path gives a node that boots and drafts.

The slow test runs the user's commands on the real MicroPython unix port with the real mpremote: a
default `edgetwin vboard --board rp2040_pico` (a subprocess: the heap it picks, the factor it prints,
its stable pty symlinks and console log), then `edgetwin deploy --board rp2040_pico --port DIR/repl
--node` (in process: per-file progress, the summary line, the reset), then a gateway without a target
(`edgetwin gateway`, logs only) on DIR/uart: the node's start line is in the console log, its session
is established, its log lines are stored and PROMPT/DRAFT frames arrive (the node drafts). The node's
free heap after boot (from its NODE reports in the store) is printed.

The fast tests check, for every MicroPython profile, that the node.json deploy writes follows the plan
`edgetwin plan` prints (stream unless the plan is resident, the shipped draft's tokenizer and newline
stop ids, the profile's k).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gwkit
from host import cli, node_config
from tools.board import build

ROOT = Path(__file__).resolve().parents[2]
MICROPYTHON_PROFILES = ("rp2040_pico", "esp32s3_devkitc", "esp32s3_n8r8")


def _plan(capsys: pytest.CaptureFixture[str], board: str) -> dict:
    assert cli.main(["plan", "--board", board, "--model", str(build.DRAFT), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("board", MICROPYTHON_PROFILES)
def test_node_json_follows_the_plan(board: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(capsys, board)
    out = build.build(board, arch="x64", out_dir=tmp_path / "b", node=True)
    cfg = json.loads((out / "node.json").read_text())
    manifest = json.loads((out / "MANIFEST.json").read_text())
    prof = json.loads((out / "board.json").read_text())
    assert cfg["stream"] == (plan["mode"] if plan["mode"] != "resident" else False)
    assert cfg["out_rows"] == plan["out_rows"]
    assert manifest["node"]["plan"]["mode"] == plan["mode"] and manifest["node"]["plan"]["load_peak"] == plan["load_peak"]
    assert cfg["tokenizer"] is True and cfg["k"] == prof["draft_k"]
    assert cfg["stop_ids"] and cfg["stop_ids"] == node_config.stop_ids(build.DRAFT)
    from firmware import node

    assert set(cfg) <= set(node.DEFAULTS)  # only keys the node knows
    assert (out / prof["model"]).read_bytes() == build.DRAFT.read_bytes()


def test_a_node_model_that_fits_no_plan_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from host import board_profile
    from tools.formats.make_tiny_llama import build_model

    big = tmp_path / "big.mbf"
    big.write_bytes(build_model(dim=256, hidden_dim=512, n_layers=4, vocab_size=256))
    monkeypatch.setattr(board_profile, "BUILD", tmp_path / "build" / "boards")
    assert cli.main(["build", "--board", "rp2040_pico", "--node", "--model", str(big)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "big.mbf" in err and "no memory plan fits rp2040_pico" in err
    assert not (tmp_path / "build").exists()  # a failed build creates nothing


def _wait_for(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    got = ""
    while time.monotonic() < deadline:
        got = path.read_text(errors="replace") if path.exists() else ""
        if text in got:
            return got
        time.sleep(0.2)
    raise AssertionError("%r not in %s within %.0f s; it holds:\n%s" % (text, path, timeout, got[-3000:]))


@pytest.mark.slow
def test_vboard_then_deploy_node_boots_and_drafts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vdir = tmp_path / "vb"
    proc = subprocess.Popen([sys.executable, "-m", "host.cli", "vboard", "--board", "rp2040_pico", "--root", str(vdir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    gw = None
    try:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Ctrl-C"):
            line = proc.stdout.readline()
            assert line, "vboard exited early: %s" % proc.stderr.read()
            lines.append(line)
        text = "".join(lines)
        m = re.search(r"heap (\d+) bytes = ([\d.]+)x the profile's 241664", text)  # boards/rp2040_pico.json
        assert m, text
        heap, factor = int(m.group(1)), float(m.group(2))
        assert heap == int(241664 * factor) and 2 <= factor <= 4, text
        repl, uart = vdir / "repl", vdir / "uart"
        assert repl.is_symlink() and uart.is_symlink()
        assert "%s -> %s" % (repl, repl.resolve()) in text and str(repl.resolve()).startswith("/dev/pts/")
        assert str(vdir / "console.log") in text

        assert cli.main(["deploy", "--board", "rp2040_pico", "--port", str(repl), "--node"]) == 0
        out, err = capsys.readouterr()
        report = json.loads(out[out.index("{"):out.rindex("}") + 1])
        n = len(report["files"])
        for f in report["files"]:  # one progress line per file, in order, numbered
            assert re.search(r"\[\d+/%d\] %s " % (n, re.escape(f["path"])), err), f["path"]
        assert 'stream "matrix", out_rows ' in out and "tokenizer true, k 4" in out
        assert err.strip().splitlines()[-1].startswith("deployed %d files" % n) and "the node runs" in err
        assert json.loads((vdir / "fs" / "node.json").read_text())["stream"] == "matrix"  # layer's arena is over memfit.MAX_BLOCK_PCT

        log = _wait_for(vdir / "console.log", "NODE start board=rp2040_pico model=yes", 60)
        assert "Traceback" not in log.split("NODE start")[-1]
        gw = gwkit.GatewayProc(["vboard=%s" % uart], tmp_path / "g.db", tmp_path / "st.json")

        def drafting(st: dict) -> bool:
            s = st["sessions"][0] if st.get("sessions") else {}
            return bool(s.get("established")) and s.get("other", 0) >= 2 and s.get("logs", 0) >= 3

        st = gw.wait_status(drafting, timeout=90, what="an established node sending logs and PROMPT/DRAFT frames")
        s = st["sessions"][0]
        assert s["bad_frames"] == 0
        gw.stop()
        reports = gwkit.node_reports(tmp_path / "g.db", "vboard")
        assert reports, "no NODE report stored"
        used = int(reports[-1]["heap"])
        assert 0 < used < heap
        print("rp2040_pico node on the virtual board: heap %d B (%gx), in use %d B, free %d B after boot; "
              "%d PROMPT/DRAFT frames, %d log lines; deploy %.1f s (%d files)"
              % (heap, factor, used, heap - used, s["other"], s["logs"], report["seconds"], n))
    finally:
        if gw is not None:
            gw.stop()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert not (vdir / "repl").exists() and not (vdir / "repl").is_symlink()  # links go with the board
    assert "NODE start" in (vdir / "console.log").read_text(errors="replace")  # the log stays
