"""The README's "A real node and gateway" section, steps 2 and 4, run as written on a virtual board.

The commands are read from the README itself (its ```sh blocks in that section), so the test fails when
the README and the product part ways. Only what a virtual board changes is substituted: the board's
ports (/dev/ttyACM0 -> the REPL pty `edgetwin vboard` printed, /dev/ttyUSB0 -> its UART pty), the
store's path (into the test's folder), `.venv/bin/edgetwin` -> this interpreter's `-m host.cli` (the same
entry point, from this checkout), and the gateway's --peer-timeout (the emulated board runs several times
slower than a Pico: its heartbeats come that much later). The board is started the way the section's
paragraph after the steps says: `edgetwin vboard --board rp2040_pico --emulate --rig examples/pump_skid.json`,
the real rp2 firmware on an emulated RP2040 with the plant simulator wired to its pins and its RS-485 bus as
the pump skid's description says. The node is checked as a user would: its PLANT line names the
description's hash, its lines carry the pump's readings from the loop, the drive, the contact and the
thermocouple, the operator's acknowledgement reaches it, and `ask` answers naming the node, not a port.
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
PLANT = "examples/pump_skid.json"
PEER_TIMEOUT = "60"  # seconds: the emulated board's heartbeats come 5-20x later than a Pico's


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
    assert kinds == ["plant", "deploy", "gateway", "ack", "ask"], cmds
    assert cmds[0][2:4] == ["check", PLANT] and PLANT in cmds[1] and "--plant" in cmds[1]
    assert "--model" in cmds[2] and "--port" in cmds[2] and "--db" in cmds[2] and PLANT in cmds[2]
    assert "--by" in cmds[3] and "--db" in cmds[3]


def _substitute(cmd: list[str], ports: dict[str, str], db: Path) -> list[str]:
    assert cmd[0] == EDGETWIN, cmd
    out = [sys.executable, "-m", "host.cli"]
    for w in cmd[1:]:
        if w in ports:
            w = ports[w]
        elif w == "plant.db":
            w = str(db)
        out.append(w)
    if cmd[1] == "gateway":
        out += ["--peer-timeout", PEER_TIMEOUT]
    return out


def _start_vboard(root: Path, image: Path) -> tuple[subprocess.Popen, str, str, queue.Queue]:
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "vboard", "--board", "rp2040_pico", "--emulate", "--rig",
                          PLANT, "--image", str(image), "--flash", str(root / "flash.bin")],
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


def _rows(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []




@pytest.mark.slow
def test_readme_real_node_steps_2_and_4_on_a_virtual_board(tmp_path, image):
    from host import plantdesc

    cmds = readme_commands()
    vb, repl, uart, vb_lines = _start_vboard(tmp_path / "board", image)
    gw = None
    db = tmp_path / "plant.db"
    ports = {"/dev/ttyACM0": repl, "/dev/ttyUSB0": uart}
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    desc = plantdesc.load(ROOT / PLANT)

    def run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        res = subprocess.run(_substitute(cmd, ports, db), cwd=str(ROOT), env=env, capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, (cmd, res.stdout[-2000:], res.stderr[-2000:])
        assert "Traceback" not in res.stderr
        return res

    try:
        # step 2: the description checked against the board, the node deployed with it
        assert "%s: ok: pump-skid-1" % PLANT in run(cmds[0]).stdout
        run(cmds[1])
        # step 4: the gateway on the board's UART with the same description
        gw = subprocess.Popen(_substitute(cmds[2], ports, db), cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        sample = plant_line = None
        while time.monotonic() < deadline and gw.poll() is None and sample is None:
            texts = [r[0][21:] for r in _rows(db, "SELECT logs.text FROM logs JOIN nodes ON nodes.id=logs.node "
                                                  "WHERE nodes.name='pump-skid-1' ORDER BY logs.id")]
            plant_line = next((t for t in texts if t.startswith("PLANT ")), plant_line)
            sample = next((t for t in texts if t.startswith("P-1 ") and "=?" not in t), None)
            time.sleep(2)
        assert gw.poll() is None, "the gateway exited: " + _stop(gw)[-3000:]
        assert plant_line == "PLANT name=pump-skid-1 hash=%s machines=1 signals=3" % desc.hash, plant_line
        # the loop, the drive and the thermocouple read through: values in their units, the state from the contact
        assert sample is not None and re.fullmatch(
            r"P-1 (RUNNING|STOPPED|TRIPPED) P=\d+\.\dbar I=\d+\.\dA T=-?\d+\.\dC", sample), sample
        assert _rows(db, "SELECT count(*) FROM logs WHERE plant=?", (desc.hash,))[0][0] > 1
        # the operator's acknowledgement: queued, then taken by the node's link
        assert "queued ACK of P-1 discharge_press by alice for node pump-skid-1" in run(cmds[3]).stdout
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not _rows(db, "SELECT done_ms FROM commands WHERE done_ms IS NOT NULL"):
            time.sleep(2)
        assert _rows(db, "SELECT result FROM commands") == [("delivered",)], _rows(db, "SELECT * FROM commands")
        out = run(cmds[4], timeout=300).stdout
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
