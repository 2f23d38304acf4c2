"""The node on CircuitPython: `make firmware-cp`'s image on the emulated RP2040 (rp2040js), deployed with
`edgetwin deploy --board rp2040_pico_cp` as a CircuitPython user would (ampy through the raw REPL, boot.py and
code.py on CIRCUITPY), logging over busio.UART and drafting against the real gateway.

Marked slow: they build the firmware (about a minute, then cached) and run the emulator. They skip only where
the vendored sources are absent outside CI; in CI their absence fails (tests/host/conftest.py cp_image).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.board import deploy, emuboard

ROOT = Path(__file__).resolve().parents[2]
AMPY = str(Path(sys.executable).parent / "ampy")
BOARD = "rp2040_pico_cp"
# the node in board time: 16-token notes from 6-token prompts (an episode's 22 tokens wrap the profile's 4 + 16
# ring), an episode every sample tick, a NODE report every half second, a 64 KB spill ring
DRAFT_CFG = {"report_ms": 500, "max_len": 16, "prompt_max": 6, "spill_bytes": 65536, "summary_s": 1}
# The tiny seeded draft, not the shipped one: CircuitPython's Pico has no native code emitter, and the shipped
# draft's step with the ulab and plain-Python kernels takes seconds of board time (docs/BOARDS.md), minutes
# of host time per note. Even the tiny draft's step with ulab is ~0.57 s of board time, ~2.3 s of host time, so
# the run is as short as its checks allow: 18 verified tokens, each checked greedy. The tiny draft's notes run to
# max_len, and a capped note is stored when the next episode's PROMPT comes, which a 17th verified token
# follows, so one whole note is stored and checked. Every model step costs the same, prompt or note: 24-token
# notes from 12-token prompts (60 steps to 32 tokens) took 151 s of host time for no check more than these
# (~30 steps); the half-second reports give the heap band below its 8 reports and more.
DRAFT_TOKENS = 18


def test_cp_cache_key_follows_sources_options_and_frozen_files(tmp_path: Path, monkeypatch) -> None:
    from tools.board import firmware_cp_build as fcb

    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / fcb.TARBALL).write_text("not read by the key")
    sha = vendor / (fcb.TARBALL + ".sha256")
    sha.write_text("aa" * 32 + "  x\n")
    key = fcb.cache_key(vendor)
    assert fcb.cache_key(vendor) == key and len(key) == 64  # deterministic
    sha.write_text("bb" * 32 + "  x\n")
    key_s = fcb.cache_key(vendor)
    monkeypatch.setattr(fcb, "MAKE_OFF", fcb.MAKE_OFF[1:])  # one module more in the image
    key_o = fcb.cache_key(vendor)
    monkeypatch.undo()
    frozen = fcb.frozen_sources()
    names = {p.relative_to(ROOT).as_posix() for p in frozen}
    # the CircuitPython build's sources: the ulab kernels and the CircuitPython adapters, no viper
    assert {"shared/q4_ulab.py", "firmware/cp_hal.py", "firmware/node.py", "shared/drafter.py"} <= names
    assert not {n for n in names if n.endswith("_viper.py")}
    # an edit to a frozen file changes the key (here a checkout of two files in tmp_path)
    monkeypatch.setattr(fcb, "ROOT", tmp_path)
    a = tmp_path / "shared" / "a.py"
    a.parent.mkdir()
    a.write_text("X = 1\n")
    monkeypatch.setattr(fcb, "frozen_sources", lambda: [a])
    key_f = fcb.cache_key(vendor)
    a.write_text("X = 2\n")
    assert fcb.cache_key(vendor) != key_f
    monkeypatch.undo()
    assert len({key, key_s, key_o, key_f}) == 4
    (vendor / fcb.TARBALL).unlink()
    with pytest.raises(fcb.BuildError, match="EDGETWIN_VENDOR"):
        fcb.cache_key(vendor)


@pytest.fixture
def cp_board(cp_image: Path, tmp_path: Path):
    eb = emuboard.EmuBoard(BOARD, cp_image, tmp_path / "flash.bin").start(60)
    yield eb
    eb.stop()


def ampy(port: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run([AMPY, "--port", port, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def run_code(port: str, code: str, tmp_path: Path) -> str:
    script = tmp_path / "snippet.py"
    script.write_text(code)
    return ampy(port, "run", str(script))


def deploy_node(board: emuboard.EmuBoard, model: Path, cfg: dict, tmp_path: Path) -> dict:
    """The user's command, then the test's node.json, then a reset into the node; returns deploy's report."""
    res = subprocess.run([sys.executable, "-m", "host.cli", "deploy", "--board", BOARD, "--port", board.repl_port,
                          "--node", "--model", str(model), "--no-reset"], cwd=str(ROOT), capture_output=True,
                         text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "frozen" in res.stdout and "make firmware-cp" in res.stdout
    report = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    node = json.loads(run_code(board.repl_port, "print(open('/node.json').read())", tmp_path))
    node.update(cfg)
    (tmp_path / "node.json").write_text(json.dumps(node))
    ampy(board.repl_port, "put", str(tmp_path / "node.json"), "/node.json")
    boots = board.boots
    deploy.reset_board(board.repl_port, "ampy", circuitpython=True)
    t = time.monotonic()
    while board.boots == boots and time.monotonic() - t < 30:
        time.sleep(0.05)
    assert board.boots == boots + 1, board.events
    return report


@pytest.mark.slow
def test_circuitpython_node_deployed_as_a_user_would_commits_target_greedy_tokens(cp_board: emuboard.EmuBoard,
                                                                                  tmp_path: Path) -> None:
    import gwkit
    from host.store import LogStore

    board = cp_board
    model = tmp_path / "tiny.mbf"
    model.write_bytes(gwkit.tiny_mbf())
    t0 = time.monotonic()
    report = deploy_node(board, model, DRAFT_CFG, tmp_path)
    paths = {f["path"] for f in report["files"]}
    # the firmware carries the code: the profile, node.json, boot.py (CIRCUITPY writable), code.py, the model, and
    # the link key deploy provisions (the gateway below holds it: the CircuitPython node signs every frame)
    assert paths == {"/board.json", "/node.json", "/boot.py", "/code.py", "/draft-rp2040.mbf", "/link.key"}, paths
    assert report["tool"] == "ampy"
    deploy_s = time.monotonic() - t0
    # every verified token is the target's own greedy token after the same prefix
    run = gwkit.tiny_drafting_run(board.uart_port, board.profile["uart"]["baud"], board.profile["kv"], tmp_path,
                                  DRAFT_TOKENS, signed=True)
    db, replay, run_s, heaps = run["db"], run["replay"], run["run_s"], run["heaps"]
    spec = run["status"]["sessions"][0]["spec"]
    # the heap stays flat while drafting, and every acknowledged line is stored (busio.UART, lossless)
    assert len(heaps) >= 8, heaps
    # Flat, but not to the byte as on MicroPython: the ulab kernels leave garbage each step, and the collector
    # (conservative, like MicroPython's) keeps one or two of those blocks alive when a stale stack word still
    # points at them (measured: 89,920-92,352 B, a band of up to 128 B, over 20-30 reports). Such a block can
    # outlive the earlier half's highest report by one or two blocks; a leak never comes back down: the later half
    # must come back to within the earlier half's band at least once.
    warm = heaps[len(heaps) // 3:]  # after warm-up: the first notes, the lazy paths taken once
    half = len(warm) // 2
    assert max(warm) - min(warm) <= 256 and min(warm[half:]) <= max(warm[:half]), \
        "heap in use moved after warm-up: %s" % " ".join(map(str, heaps))
    gwkit.check_logs_acked(db, "pico")
    store = LogStore(db, readonly=True)
    try:
        notes = store.annotations()
        loss = store.line_loss("pico")
    finally:
        store.close()
    assert notes and all(n["verified"] == 1 for n in notes)
    assert loss["missing"] == 0 and loss["reported"] == 0, loss
    # the board computes the host's numbers: its ulab kernels (on the real ulab, float32) and its plain ones
    # give the ids and the integer logits (hashed) that shared/llama.py gives on CPython (after a 4-token prompt:
    # the default 24 cost a minute of host time in prefill alone)
    from tools.bench import board as bench_board

    node = json.loads(run_code(board.repl_port, "print(open('/node.json').read())", tmp_path))
    fig = bench_board.probe_model(board.repl_port, model, board.profile, node, 2, tmp_path, prompt_limit=4)
    assert fig["draft_ids_match_host"] and fig["fast_backend"] == "ulab", fig
    assert fig["steps"] == {"plain": bench_board.BASELINE_STEPS, "ulab": 2}, fig
    print("CircuitPython node on the emulated Pico: deploy %.0f s, %d verified tokens (all target-greedy) in %.0f s "
          "of host time, heap in use %d-%d B, lockstep_ok %d, %d lines stored; model alone: step %d us ulab, %d us "
          "plain, ids equal the host's"
          % (deploy_s, replay["verified"], run_s, min(warm), max(warm), spec["lockstep_ok"], loss["stored"],
             fig["draft_step_us"], fig["plain_step_us"]))


# A logs-only plant that logs fast, a RAM queue of 2 lines: with no gateway every line goes to the spill ring
# on CIRCUITPY (written ahead, each loop's lines with one flush: a folder of block files on FAT)
SPILL_CFG = {"model": None, "tick_ms": 100, "sample_every": 1, "queue": 2, "report_ms": 1000, "spill_bytes": 65536}


@pytest.mark.slow
def test_spill_ring_on_circuitpy_survives_a_power_cycle(cp_board: emuboard.EmuBoard, tmp_path: Path) -> None:
    import gwkit
    from host.store import LogStore
    from shared import frame

    board = cp_board
    model = tmp_path / "tiny.mbf"
    model.write_bytes(gwkit.tiny_mbf())
    deploy_node(board, model, SPILL_CFG, tmp_path)
    time.sleep(15)  # the node logs alone: no gateway on its UART
    board.restart(60)  # the power is cut and comes back: the node boots from code.py again
    db = tmp_path / "g.db"
    gw = gwkit.GatewayProc(["pico=" + board.uart_port], db, tmp_path / "st.json", baud=board.profile["uart"]["baud"],
                           extra=["--peer-timeout", "30"])
    try:
        # the spilled lines go first, then the new boot's: 20 lines cover both
        gw.wait_status(lambda s: s["sessions"] and s["sessions"][0]["logs"] >= 20, timeout=180,
                       what="20 lines, the first boot's spilled ones first")
    finally:
        gw.stop()
    store = LogStore(db, readonly=True)
    try:
        rows = store.logs("pico")
        loss = store.line_loss("pico")
    finally:
        store.close()
    boots = sorted({r["boot"] for r in rows})
    assert len(boots) == 2 and boots[1] == boots[0] + 1, boots  # the ring's boot count survived too
    first = [r for r in rows if r["boot"] == boots[0] and r["lseq"]]
    seqs = [r["lseq"] for r in first]
    # the first boot's lines came back from the ring after the power cycle: in order, from its first line, none
    # missing between, every one flagged as spilled
    assert len(seqs) >= 10 and seqs == list(range(1, len(seqs) + 1)), seqs
    assert all(r["flags"] & frame.LG_SPILLED for r in first)
    assert loss["missing"] == 0, loss
    print("spill ring on CIRCUITPY across a power cycle: %d lines of boot %d recovered, %d of boot %d stored"
          % (len(seqs), boots[0], sum(1 for r in rows if r["boot"] == boots[1]), boots[1]))


@pytest.mark.slow
def test_real_inputs_through_circuitpython_modules(cp_board: emuboard.EmuBoard) -> None:
    """firmware/cp_hal.py on the firmware's own analogio, digitalio and busio, the plant wired by the emulator
    (ADC0 = GP26, ADC2 = GP28; a level on GP12; an MCP9600 on I2C0, GP4 / GP5); and the link's signer on
    the firmware's hashlib."""
    from test_emu_io import RawRepl

    board = cp_board
    repl = RawRepl(board.repl_port)
    try:
        board.set_adc(0, volts=1.65)
        board.set_adc(2, volts=0.4)  # 4 mA through a 100 ohm shunt
        a, c = map(int, repl.run("from firmware import cp_hal\nfrom array import array\n"
                                 "from shared.compat import ticks_ms\n"
                                 "a0, a2 = cp_hal.ADC(cp_hal.Pin(26)), cp_hal.ADC(cp_hal.Pin(28))\n"
                                 "print(a0.read_u16(), a2.read_u16())").split())
        assert abs(a - 32768) <= 3 * 16, a  # half the 3.3 V reference, within 3 LSB of 12 bits
        assert abs(c - round(0.4 / 3.3 * 65535)) <= 3 * 16, c

        # a digital input (the RS-485 DE pin and level inputs are digitalio pins)
        board.set_pin(12, 1)
        assert repl.run("p12 = cp_hal.Pin(12, cp_hal.Pin.IN)\nprint(p12.value())").strip() == "1"
        board.set_pin(12, 0)
        assert repl.run("print(p12.value())").strip() == "0"
        # Not run here: pulses through countio (constructing a countio.Counter hangs the emulated chip: rp2040js
        # 1.4.1 does not model the PWM edge-counting modes faithfully) and contacts through keypad (its
        # background scan reports no event on the emulator, where digitalio reads the same pin): those two
        # paths are checked against stand-ins in tests/shared/test_inputs_cp.py
        # an MCP9600 thermocouple amplifier through busio.I2C with machine.I2C's register reads
        board.i2c_device("mcp9600", 0, 0x60, hot_c=85.5, cold_c=-3.25, rev=0x14)
        # the breakout's pull-ups: busio.I2C reads both lines high before it takes the bus
        board.set_pin(4, 1)
        board.set_pin(5, 1)
        out = repl.run("i2c = cp_hal.I2C(0, sda=cp_hal.Pin(4), scl=cp_hal.Pin(5))\n"
                       "from firmware.mcp9600 import MCP9600\n"
                       "t = MCP9600(i2c, 0x60)\nprint(t.device_id(), t.celsius())")
        dev, hot = out.split()
        assert int(dev) == 0x40 and float(hot) == 85.5, out

        # the link's HMAC on the board's hashlib, which has hashlib.new("sha256") and no hashlib.sha256
        import hashlib
        import hmac

        key, data = bytes(range(16, 48)), b"edgetwin frame" * 9
        out = repl.run("import hashlib\nprint(hasattr(hashlib, 'sha256'))\n"
                       "from shared.frame_codec import Signer\n"
                       "print(Signer(%r).mac(%r).hex())" % (key, data))
        has_sha256, tag = out.split()
        assert has_sha256 == "False" and tag == hmac.new(key, data, hashlib.sha256).hexdigest(), out
    finally:
        repl.ser.close()
