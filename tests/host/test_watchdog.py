"""The node's hardware watchdog (firmware/watchdog.py) on the virtual board and on the emulated RP2040.

A node whose inputs hang (the test aid /hang_ms: its poll never returns, as a driver stuck on its bus)
stops feeding the watchdog; the board resets itself `watchdog_ms` (the board profile's) later, boots the
node again, and the new boot's NODE reports say `reset=watchdog`. The reports reach the gateway's store
like every line, and every line the node saw acknowledged before the hang is there (gwkit.check_logs_acked).
The virtual board's watchdog is its relay's (tools/board/vboard.py: vboot.WDT tells it each feed); the
emulated one is rp2040js's model of the chip's WATCHDOG block counting down in the board's time, with the
runner carrying its REASON register across the restart (tools/board/emulator/run.mjs); CircuitPython's face
runs there too, on its real firmware. The mapping of both flavours' reset causes, the feed (no allocation) and
stop() run on all three interpreters in tests/shared/test_watchdog_faces.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gwkit
from host.store import LogStore
from tools.board import deploy
from tools.board.vboard import VirtualBoard

ROOT = Path(__file__).resolve().parents[2]
MPREMOTE = str(Path(sys.executable).parent / "mpremote")
WATCHDOG_MS = 1500  # the test board's profile: short, so the hang ends soon
HANG_MS = 3000  # the node runs twice the watchdog's timeout, fed, before it hangs
NODE_CFG = {"model": None, "tick_ms": 100, "report_ms": 500, "spill_bytes": 16384}


def mpremote(port: str, *args: str, timeout: float = 60) -> str:
    proc = subprocess.run([MPREMOTE, "connect", port, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def reports(db: Path, name: str) -> list[dict]:
    """The node's NODE reports in the store, in the order stored, with their boot epoch."""
    s = LogStore(db, readonly=True)
    try:
        rows = [r for r in s.logs(name) if r["text"].startswith("NODE heap=")]
    finally:
        s.close()
    return [dict(dict(kv.split("=", 1) for kv in r["text"].split()[1:]), epoch=r["epoch"]) for r in rows]


def epochs_with(db: Path, name: str) -> list[tuple[int, str]]:
    """(epoch, reset cause) per boot, in the order their reports were stored; each boot's reports must agree."""
    out: list[tuple[int, str]] = []
    for rep in reports(db, name):
        if out and out[-1][0] == rep["epoch"]:
            assert out[-1][1] == rep["reset"], rep
        else:
            out.append((rep["epoch"], rep["reset"]))
    return out


def test_virtual_board_watchdog_resets_unless_fed_and_says_why(tmp_path: Path) -> None:
    with VirtualBoard("rp2040_pico", root=tmp_path / "fs") as vb:
        assert mpremote(vb.repl_port, "exec", "import machine; print(machine.reset_cause())").strip() == "1"
        # fed for three timeouts, then stopped (deinit, as Ctrl-C does to the node's): no reset
        mpremote(vb.repl_port, "exec", "import machine, time\nw = machine.WDT(timeout=400)\n"
                 "for i in range(12):\n    time.sleep_ms(100)\n    w.feed()\nw.deinit()\n")
        time.sleep(0.8)
        assert vb.watchdog_resets == 0 and vb.reset_cause == 1
        # opened and never fed: the board resets itself; a soft reset (mpremote's) in between changes nothing
        before = vb.restarts
        mpremote(vb.repl_port, "exec", "import machine; w = machine.WDT(timeout=400)")
        wait_for(lambda: vb.watchdog_resets == 1, 10, "the watchdog reset")
        assert vb.restarts > before
        assert mpremote(vb.repl_port, "exec", "import machine; print(machine.reset_cause())").strip() == "3"
        mpremote(vb.repl_port, "exec", "--no-follow", "import machine; machine.reset()")
        wait_for(lambda: vb.reset_cause == 5, 10, "machine.reset()")
        assert mpremote(vb.repl_port, "exec", "import machine; print(machine.reset_cause())").strip() == "5"
        vb.reboot()  # a power cycle
        assert mpremote(vb.repl_port, "exec", "import machine; print(machine.reset_cause())").strip() == "1"
        assert vb.watchdog_resets == 1


def test_a_hung_source_on_the_virtual_board_reboots_the_node_and_its_reports_say_why(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    log = tmp_path / "console.log"
    vb = VirtualBoard("rp2040_pico", root=root, heap_bytes=gwkit.unix_heap("rp2040_pico"), console_log=log)
    vb.start()
    gw = None
    try:
        deploy.deploy(gwkit.x64_build("rp2040_pico"), vb.repl_port)
        prof = json.loads((root / "board.json").read_text())
        prof["watchdog_ms"] = WATCHDOG_MS
        (root / "board.json").write_text(json.dumps(prof))
        (root / "node.json").write_text(json.dumps(NODE_CFG))
        (root / "main.py").write_text("import firmware.node as n\nn.main()\n")
        (root / "hang_ms").write_text("%d\n" % HANG_MS)
        db = tmp_path / "g.db"
        gw = gwkit.GatewayProc(["vnode=" + vb.uart_port], db, tmp_path / "st.json", extra=["--peer-timeout", "30"])
        t0 = time.monotonic()
        vb.reboot()  # a power cycle: the node boots, runs, hangs, the watchdog resets it, it boots again
        wait_for(lambda: vb.watchdog_resets == 1, 30, "the watchdog's reset")
        hung_s = time.monotonic() - t0
        boots = wait_for(lambda: (lambda e: e if len(e) >= 2 else None)(epochs_with(db, "vnode")), 30,
                         "NODE reports of the boot after the reset")
        wait_for(lambda: sum(r["epoch"] == boots[-1][0] for r in reports(db, "vnode")) >= 2, 30,
                 "two reports of the new boot")
    finally:
        if gw is not None:
            gw.stop()
        vb.stop()
    assert [cause for _, cause in epochs_with(db, "vnode")] == ["power_on", "watchdog"]
    assert vb.watchdog_resets == 1 and not (root / "hang_ms").exists()  # one boot hung, the next runs
    # the node ran fed for HANG_MS, longer than the timeout, before it hung; then the reset came
    assert hung_s >= (HANG_MS + WATCHDOG_MS) / 1000, hung_s
    first = [r for r in reports(db, "vnode") if r["epoch"] == boots[0][0]]
    assert len(first) >= 3 and int(first[-1]["logs_acked"]) > 0, first  # it logged and was acknowledged
    gwkit.check_logs_acked(db, "vnode")  # no line the gateway acknowledged before the hang was lost
    text = log.read_text(errors="replace")
    assert "reset=power_on watchdog_ms=%d" % WATCHDOG_MS in text and "reset=watchdog watchdog_ms=%d" % WATCHDOG_MS in text
    assert "the watchdog ran out" in text


# ---------------------------------------------------------------- the emulated RP2040: the chip's own watchdog

@pytest.fixture
def board(image: Path, tmp_path: Path):
    from tools.board import emuboard

    eb = emuboard.EmuBoard("rp2040_pico", image, tmp_path / "flash.bin").start()
    yield eb
    eb.stop()


@pytest.mark.slow
def test_a_hung_source_on_the_emulated_rp2040_is_reset_by_its_watchdog(board, tmp_path: Path) -> None:
    from tools.board import build

    prof = dict(board.profile, watchdog_ms=1000)  # the least a profile takes: the board's time runs slow here
    (tmp_path / "board.json").write_text(json.dumps(prof))
    (tmp_path / "node.json").write_text(json.dumps(NODE_CFG))
    (tmp_path / "main.py").write_text(build.NODE_MAIN)
    (tmp_path / "hang_ms").write_text("1500\n")
    mpremote(board.repl_port, "fs", "cp", str(tmp_path / "board.json"), ":board.json", "+", "fs", "cp",
             str(tmp_path / "node.json"), ":node.json", "+", "fs", "cp", str(tmp_path / "main.py"), ":main.py",
             "+", "fs", "cp", str(tmp_path / "hang_ms"), ":hang_ms", "+", "reset")
    db = tmp_path / "g.db"
    gw = gwkit.GatewayProc(["pico=" + board.uart_port], db, tmp_path / "st.json",
                           baud=board.profile["uart"]["baud"], extra=["--peer-timeout", "30"])
    try:
        wait_for(lambda: board.watchdog_resets == 1, 120, "the emulated chip's watchdog reset")
        boots = wait_for(lambda: (lambda e: e if len(e) >= 2 else None)(epochs_with(db, "pico")), 120,
                         "NODE reports of the boot after the reset")
    finally:
        gw.stop()
    # machine.reset() (mpremote's reset) is the watchdog's FORCE: soft; the hang's reset is its timer: watchdog
    assert [cause for _, cause in boots] == ["soft", "watchdog"], boots
    resets = [e for e in board.events if e.get("event") == "reset"]
    assert [e["reason"] for e in resets] == ["software", "watchdog"], resets
    assert resets[-1]["watchdog_reason"] & 1 and board.boots == 3
    gwkit.check_logs_acked(db, "pico")
    out = mpremote(board.repl_port, "exec", "import machine, os; print(machine.reset_cause() == machine.WDT_RESET,"
                   " 'hang_ms' in os.listdir('/'))")
    assert out.split() == ["True", "False"], out


@pytest.fixture
def cp_board(cp_image: Path, tmp_path: Path):
    from tools.board import emuboard

    eb = emuboard.EmuBoard("rp2040_pico_cp", cp_image, tmp_path / "flash.bin").start(60)
    yield eb
    eb.stop()


def ampy(port: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run([str(Path(sys.executable).parent / "ampy"), "--port", port, *args], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_circuitpython_on_the_emulated_rp2040_is_reset_by_its_watchdog_and_says_so(cp_board, tmp_path: Path) -> None:
    """CircuitPython's face of firmware/watchdog.py on the real firmware (frozen there): microcontroller.watchdog
    opened with seconds, never fed, resets the chip; the next boot's reset_reason maps to "watchdog"
    (firmware/resetcause.py)."""
    hang = tmp_path / "hang.py"
    hang.write_text("from firmware import watchdog\nw = watchdog.Watchdog(1000)\nassert w.ms == 1000\n"
                    "while True:\n    pass\n")
    ampy(cp_board.repl_port, "run", "--no-output", str(hang))
    wait_for(lambda: cp_board.watchdog_resets == 1, 120, "CircuitPython's watchdog reset")
    wait_for(lambda: sum(e.get("event") == "usb" for e in cp_board.events) >= 2, 60, "the board back on USB")
    ask = tmp_path / "ask.py"
    ask.write_text("import microcontroller\nfrom firmware import resetcause\n"
                   "print(resetcause.reset_cause(), microcontroller.cpu.reset_reason)\n")
    out = ampy(cp_board.repl_port, "run", str(ask)).split()
    assert out == ["watchdog", "microcontroller.ResetReason.WATCHDOG"], out
    reset = [e for e in cp_board.events if e.get("event") == "reset"]
    assert len(reset) == 1 and reset[0]["reason"] == "watchdog" and cp_board.boots == 2, reset
