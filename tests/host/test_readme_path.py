"""The README's "A real node and gateway" section, steps 2 and 4, run as written on a virtual board.

The commands are read from the README itself (its ```sh blocks in that section), so the test fails when
the README and the product part ways. Only what a virtual board changes is substituted: the board's
ports (/dev/ttyACM0 -> the REPL pty `edgetwin vboard` printed, /dev/ttyUSB0 -> its UART pty), the
store's path (into the test's folder) and `.venv/bin/edgetwin` -> this interpreter's `-m host.cli`
(the same entry point, from this checkout). The board is started the way the README's last paragraph
says, with `edgetwin vboard --board rp2040_pico` and its default heap.
"""

from __future__ import annotations

import os
import re
import queue
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## A real node and gateway"
EDGETWIN = ".venv/bin/edgetwin"


def readme_commands() -> list[list[str]]:
    """Every command line of the section's ```sh blocks, split as a shell would (comments dropped)."""
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, "the README lost its real-node section"
    sec = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", sec, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                cmds.append(words)
    return cmds


def test_readme_section_names_the_commands_the_test_runs():
    cmds = readme_commands()
    kinds = [c[1] if c[0] == EDGETWIN else c[0] for c in cmds]
    assert kinds == ["deploy", "deploy", "gateway", "ask"], cmds
    assert "--tool" in cmds[1] and "ampy" in cmds[1]
    assert "--model" in cmds[2] and "--port" in cmds[2] and "--db" in cmds[2]


def _substitute(cmd: list[str], ports: dict[str, str], db: Path) -> list[str]:
    assert cmd[0] == EDGETWIN, cmd
    out = [sys.executable, "-m", "host.cli"]
    for w in cmd[1:]:
        if w in ports:
            w = ports[w]
        elif w == "plant.db":
            w = str(db)
        out.append(w)
    return out


def _start_vboard(root: Path) -> tuple[subprocess.Popen, str, str, queue.Queue]:
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "vboard", "--board", "rp2040_pico", "--root", str(root)],
                         cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [q.put(ln) for ln in p.stdout], daemon=True).start()  # select() misses buffered lines
    deadline = time.monotonic() + 60
    repl = uart = None
    while time.monotonic() < deadline and not (repl and uart and any("Ctrl-C" in ln for ln in lines)):
        try:
            ln = q.get(timeout=1.0)
        except queue.Empty:
            if p.poll() is not None:
                break
            continue
        lines.append(ln)
        m = re.match(r"\s*(REPL|UART)\s+(/\S+)", ln)
        if m:
            if m.group(1) == "REPL":
                repl = m.group(2)
            else:
                uart = m.group(2)
    if not (repl and uart):
        p.kill()
        raise AssertionError("edgetwin vboard printed no ports:\n" + "".join(lines))
    return p, repl, uart, q


def _stop(p: subprocess.Popen, read: bool = True) -> str:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
    return p.stdout.read() if read and p.stdout else ""


def _annotations(db: Path) -> list[str]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        try:
            return [r[0] for r in con.execute("SELECT text FROM annotations ORDER BY id")]
        finally:
            con.close()
    except sqlite3.Error:
        return []


def _log_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        try:
            return con.execute("SELECT count(*) FROM logs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_readme_real_node_steps_2_and_4_on_a_virtual_board(tmp_path):
    cmds = readme_commands()
    vb, repl, uart, vb_lines = _start_vboard(tmp_path / "board")
    gw = None
    db = tmp_path / "plant.db"
    ports = {"/dev/ttyACM0": repl, "/dev/ttyUSB0": uart}
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    try:
        # step 2: deploy with mpremote, then with ampy, each as the README writes it
        for cmd in cmds[:2]:
            res = subprocess.run(_substitute(cmd, ports, db), cwd=str(ROOT), env=env, capture_output=True,
                                 text=True, timeout=600, stdin=subprocess.DEVNULL)
            assert res.returncode == 0, (cmd, res.stdout[-2000:], res.stderr[-2000:])
            assert "Traceback" not in res.stderr
        # step 4: the gateway on the board's UART, then a question while it runs
        gw = subprocess.Popen(_substitute(cmds[2], ports, db), cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 240
        notes: list[str] = []
        while time.monotonic() < deadline and gw.poll() is None:
            notes = [n for n in _annotations(db) if n.strip()]
            # the node annotates events and, at boot and every summary_s (600 plant s), a summary: on the default
            # plant, with no event in its first minutes, that first summary's note is what a user sees
            if len(notes) >= 1 and _log_count(db) > 10:  # the default plant logs 0.8 lines/s
                break
            time.sleep(2)
        assert gw.poll() is None, "the gateway exited: " + _stop(gw)[-3000:]
        assert len(notes) >= 1, "no annotation stored within 240 s"
        # annotations are text, not token ids
        assert not any(re.fullmatch(r"[\d\s]+", n) for n in notes), notes
        assert _log_count(db) > 10
        res = subprocess.run(_substitute(cmds[3], ports, db), cwd=str(ROOT), env=env, capture_output=True,
                             text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:])
        assert "Traceback" not in res.stderr
        out = res.stdout
        assert "Answer" in out, out
        assert "/dev/pts" not in out and str(tmp_path) not in out, "ask names a node by its port: " + out
    finally:
        gw_out = _stop(gw) if gw is not None else ""
        _stop(vb, read=False)
        time.sleep(0.5)
        vb_out = "".join(vb_lines.get() for _ in range(vb_lines.qsize()))
        if gw is not None:
            assert "Traceback" not in gw_out, gw_out[-3000:]
        assert "Traceback" not in vb_out, vb_out[-3000:]
