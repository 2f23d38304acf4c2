"""The real rp2 firmware (make firmware) on the emulated RP2040 (tools/board/emuboard.py, rp2040js).

The cache-key test is fast. The others are marked slow: they build the firmware through `make firmware`
(a few minutes the first time, then cached) and boot it in the emulator, about 0.5 s of host time per
boot. They skip only where the vendored sources are absent outside CI; in CI (CI set) the sources are
beside the checkout and their absence fails.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import serial

from tools.board import build, emuboard, firmware_build

ROOT = Path(__file__).resolve().parents[2]
MPREMOTE = str(Path(sys.executable).parent / "mpremote")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_cache_key_follows_sources_manifest_and_frozen_files(tmp_path: Path) -> None:
    vendor = tmp_path / "vendor"
    sha = write(vendor / (firmware_build.TARBALL + ".sha256"), "aa" * 32 + "  x\n")
    write(vendor / firmware_build.TARBALL, "not read by the key")
    manifest = write(tmp_path / "m" / "manifest.py",
                     'include("$(PORT_DIR)/boards/manifest.py")\n'
                     'package("pkg", files=("a.py",), base_path="..")\nmodule("b.py")\n')
    a = write(tmp_path / "pkg" / "a.py", "x = 1\n")
    write(tmp_path / "m" / "b.py", "y = 2\n")
    key = firmware_build.cache_key(vendor, manifest)
    assert firmware_build.cache_key(vendor, manifest) == key  # deterministic
    a.write_text("x = 2\n")  # a frozen file's contents
    key_a = firmware_build.cache_key(vendor, manifest)
    assert key_a != key
    manifest.write_text(manifest.read_text() + "# a comment\n")  # the manifest itself
    key_m = firmware_build.cache_key(vendor, manifest)
    assert key_m != key_a
    sha.write_text("bb" * 32 + "  x\n")  # the sources
    assert firmware_build.cache_key(vendor, manifest) not in (key, key_a, key_m)
    # without the tarball the sources are the clone's pinned tags: another key again
    (vendor / firmware_build.TARBALL).unlink()
    assert firmware_build.sources_key(vendor).startswith("git:")
    # the board folder (the ROMFS flash layout): its files are in the key; the stock layout keys apart
    board = tmp_path / "board"
    hdr = write(board / "mpconfigboard.h", "#define MICROPY_HW_ROMFS_BYTES (384 * 1024)\n")
    key_b = firmware_build.cache_key(vendor, manifest, board)
    hdr.write_text("#define MICROPY_HW_ROMFS_BYTES (256 * 1024)\n")
    assert firmware_build.cache_key(vendor, manifest, board) != key_b
    assert firmware_build.cache_key(vendor, manifest, None) not in (key_b, firmware_build.cache_key(vendor, manifest))
    assert firmware_build.board_dir() == firmware_build.ROMFS_BOARD_DIR and firmware_build.board_dir("stock") is None
    # the project's manifest freezes every file it names, the viper kernels included
    names = {p.relative_to(ROOT).as_posix() for p in firmware_build.frozen_files(ROOT / "boards" / "manifest.py")}
    assert {"boards/manifest.py", "shared/q4_viper.py", "shared/drafter.py", "firmware/node.py"} <= names




@pytest.fixture
def board(image: Path, tmp_path: Path):
    eb = emuboard.EmuBoard("rp2040_pico", image, tmp_path / "flash.bin").start()
    yield eb
    eb.stop()


def mpremote(port: str, *args: str, timeout: float = 60) -> str:
    proc = subprocess.run([MPREMOTE, "connect", port, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_mpremote_runs_code_on_the_emulated_firmware(board: emuboard.EmuBoard) -> None:
    out = mpremote(board.repl_port, "exec", "import gc, os, sys, shared.crc32, firmware.node\n"
                   "gc.collect(); print(1 + 1, gc.mem_free(), sys.platform, sys.implementation._build,"
                   " 'shared' in os.listdir('/'), sys.implementation.version[:2])")
    two, free, platform, build, on_fs, version = out.split(None, 5)
    assert (two, platform, build) == ("2", "rp2", "RPI_PICO")
    assert version.strip() == "(1, 28)"
    assert on_fs == "False"  # the node's code came from the firmware (frozen), not the filesystem
    assert 200_000 < int(free) < 264 * 1024  # the RP2040's SRAM, less the firmware's own
    print("boot %.2f s host, %.3f s board; gc.mem_free %s" % (board.boot_host_s, board.boot_emu_s, free))


@pytest.mark.slow
def test_flash_writes_survive_an_emulator_restart(board: emuboard.EmuBoard) -> None:
    # rp2040js alone does not erase or program flash: littlefs could not format, and writes read back 0xff
    mpremote(board.repl_port, "exec", "with open('probe.txt', 'w') as f: f.write('persist-%d' % (6 * 7))")
    board.restart()
    assert board.boots == 2
    out = mpremote(board.repl_port, "exec", "import os; print(open('probe.txt').read(), os.statvfs('/')[2])")
    text, blocks = out.split()
    assert text == "persist-42"
    assert int(blocks) * 4096 == board.profile["fs_bytes"]  # the profile's filesystem is the firmware's
    assert board.flash_path.stat().st_size == board.flash_bytes


@pytest.mark.slow
def test_uart0_carries_bytes_both_ways_at_the_baud_in_board_time(board: emuboard.EmuBoard) -> None:
    baud = board.profile["uart"]["baud"]
    msg = bytes(range(32, 127)) + b"\n"
    reply = b"reply-from-host-\x00\xff-0123456789\n"
    code = ("import time\nfrom machine import UART\n"
            "u = UART(0, %d, timeout=0)\n"
            "msg = bytes(range(32, 127)) + b'\\n'\n"
            "t0 = time.ticks_us(); u.write(msg); u.flush(); dt = time.ticks_diff(time.ticks_us(), t0)\n"
            "buf = b''\nt = time.ticks_ms()\n"
            "while not buf.endswith(b'9\\n') and time.ticks_diff(time.ticks_ms(), t) < 30000:\n"
            "    d = u.read()\n"
            "    if d: buf += d\n"
            "    time.sleep_ms(1)\n"
            "print(dt, buf.hex())\n" % baud)
    got = bytearray()
    with serial.Serial(board.uart_port, baud, timeout=0.1) as ser:
        def gateway_side() -> None:
            t = time.monotonic()
            while not got.endswith(b"\n") and time.monotonic() - t < 60:
                got.extend(ser.read(256))
            ser.write(reply)

        th = threading.Thread(target=gateway_side)
        th.start()
        out = mpremote(board.repl_port, "exec", code, timeout=90)
        th.join()
    dt_us, hexed = out.split()
    assert bytes(got) == msg  # the board's TX: with rp2040js's own UART, write() never returned
    assert bytes.fromhex(hexed) == reply  # and its RX
    expect_us = len(msg) * 10 * 1e6 / baud  # 10 bit times a byte, in the board's clock
    assert expect_us * 0.95 < int(dt_us) < expect_us * 1.3, (dt_us, expect_us)
    print("UART0: %d bytes in %s us of board time (%.0f expected)" % (len(msg), dt_us, expect_us))


@pytest.mark.slow
def test_machine_reset_reboots_from_flash(board: emuboard.EmuBoard) -> None:
    mpremote(board.repl_port, "exec", "with open('boot_mark.txt', 'w') as f: f.write('kept')")
    mpremote(board.repl_port, "exec", "--no-follow", "import machine; machine.reset()")
    t = time.monotonic()
    while board.boots < 2 and time.monotonic() - t < 30:
        time.sleep(0.05)
    assert board.boots == 2 and board.error is None
    assert any(e.get("event") == "reset" for e in board.events)
    time.sleep(0.5)
    assert mpremote(board.repl_port, "exec", "print(open('boot_mark.txt').read())").strip() == "kept"


# the build's own main.py (firmware/boardcfg.py must cope with the rp2 port's os, which has no getenv)
MAIN_PY = build.NODE_MAIN


@pytest.mark.slow
def test_logs_only_node_on_the_firmware_sends_log_frames_to_the_gateway(board: emuboard.EmuBoard,
                                                                          tmp_path: Path) -> None:
    import gwkit
    from host.store import LogStore

    # a 64 KB spill ring: the first boot preallocates it on flash; for the profile's 640 KB the emulator
    # (6-20x slower than a Pico) had not finished within this test's 90 s wait
    write(tmp_path / "node.json", '{"model": null, "spill_bytes": 65536}\n')
    write(tmp_path / "main.py", MAIN_PY)
    mpremote(board.repl_port, "fs", "cp", str(ROOT / "boards" / "rp2040_pico.json"), ":board.json", "+",
             "fs", "cp", str(tmp_path / "node.json"), ":node.json", "+", "fs", "cp", str(tmp_path / "main.py"),
             ":main.py", "+", "reset")
    t = time.monotonic()
    while board.boots < 2 and time.monotonic() - t < 30:  # machine.reset(): the emulator boots again
        time.sleep(0.05)
    assert board.boots == 2, board.events
    db = tmp_path / "g.db"
    gw = gwkit.GatewayProc(["pico=" + board.uart_port], db, tmp_path / "st.json",
                           baud=board.profile["uart"]["baud"], extra=["--peer-timeout", "30"])
    try:
        st = gw.wait_status(lambda s: s["logs_stored"] >= 5, timeout=90, what="5 LOG lines from the node")
    finally:
        gw.stop()
    sess = st["sessions"][0]
    assert sess["established"] and sess["bad_frames"] == 0 and sess["link_err_crc"] == 0
    assert sess["lost"] == 0  # --peer-timeout 30 covers the emulated board's slower heartbeat
    store = LogStore(db, readonly=True)
    try:
        texts = [r["text"] for r in store.logs("pico")]
    finally:
        store.close()
    assert len(texts) >= 5
    print("logs-only node on the emulated Pico: %d lines stored, peer lost %d times (gateway dead_ms vs "
          "board time), first %r" % (len(texts), sess["lost"], texts[:2]))


# rp2040js emulates core 0 only: _thread.start_new_thread (core 1 on rp2) never returns, so the self-test's
# two-thread check runs with the profile's threads off here (docs/BOARDS.md)
SELFTEST_PY = """import json
p = json.load(open('/board.json'))
p['threads'] = False
with open('/selftest.json', 'w') as f:
    f.write(json.dumps(p))
import firmware.selftest as t
t.run('/selftest.json')
"""
# the node in board time: 48-token notes from 48-token prompts (with the context it was distilled on, the
# shipped draft's tokens are accepted nearly all: 100 of 100 in one run, against about one a verdict from
# 12-token prompts, which took twice the host time), a 64 KB spill ring (its preallocation at first boot is
# slow on the emulator); summary_s 1: an episode at every sample tick, events or not (the node drafts without
# waiting for an alarm)
DRAFT_CFG = {"report_ms": 1000, "max_len": 48, "prompt_max": 48, "spill_bytes": 65536, "summary_s": 1}
# 24 tokens of the shipped draft, two or three notes (~10 tokens each) of greedy ids checked against SmolLM2's
# own, over ~10 NODE reports (the flat-heap check below needs 4). With the C kernels and the model read in place a
# step is about 35 ms of board time (docs/BOARDS.md), and each note's 48-token prompt is most of the board's work:
# 48 tokens took 106 s of host time and 100 took 134 s on an idle 2-core machine (the replay through SmolLM2
# grows with them too), and checked nothing more than two notes do; the 600 s the gateway waits leave room for
# a slower one.
DRAFT_TOKENS = 24


@pytest.mark.slow
def test_drafting_node_deployed_as_a_user_would_commits_target_greedy_tokens(board: emuboard.EmuBoard,
                                                                             tmp_path: Path) -> None:
    import json

    import gwkit
    from host.store import LogStore

    # the user's command with the shipped draft: the firmware carries the code, so the profile, node.json,
    # main.py, the C kernels and the model go; the model into the firmware's ROMFS partition (read in place)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "host.cli", "deploy", "--board", "rp2040_pico", "--port",
                          board.repl_port, "--node", "--no-reset"], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "frozen" in res.stdout
    report = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    paths = {f["path"] for f in report["files"]}
    # and the link key deploy provisions (its uid's entry in the keys file: the gateway below signs with it)
    assert paths == {"/board.json", "/node.json", "/main.py", "/lib/q4nat.mpy", "/rom/draft-rp2040.mbf", "/link.key"}, paths
    assert "link key for node uid" in res.stderr, res.stderr[-2000:]
    deploy_s = time.monotonic() - t0
    # the node's self-test on the firmware
    out = mpremote(board.repl_port, "exec", SELFTEST_PY, timeout=240)
    st = json.loads(out[out.index("SELFTEST ") + 9:].splitlines()[0])
    assert st["ok"] and st["interpreter"] == "micropython" and st["version"].startswith("1.28")
    assert st["ringkv"]["heap_locked"] and st["ringkv"]["heap_growth_after_run"] == 0
    # the node.json deploy wrote (the memory plan's choice), with the test's faster plant
    cfg = json.loads(mpremote(board.repl_port, "exec", "print(open('node.json').read())"))
    cfg.update(DRAFT_CFG)
    write(tmp_path / "node.json", json.dumps(cfg))
    mpremote(board.repl_port, "fs", "cp", str(tmp_path / "node.json"), ":node.json", "+", "reset")
    t = time.monotonic()
    while board.boots < 2 and time.monotonic() - t < 30:
        time.sleep(0.05)
    assert board.boots == 2, board.events
    # every verified token is SmolLM2's own greedy token after the same prefix (sink 4 + window 28)
    run = gwkit.tiny_drafting_run(board.uart_port, board.profile["uart"]["baud"], board.profile["kv"], tmp_path,
                                  DRAFT_TOKENS, target="smollm2", signed=True)
    db, replay, run_s, heaps = run["db"], run["replay"], run["run_s"], run["heaps"]
    sess = run["status"]["sessions"][0]
    spec = sess["spec"]
    # the heap stays flat while drafting, with room left, and every acknowledged line is stored
    assert len(heaps) >= 4, heaps
    assert max(heaps[2:]) == min(heaps[2:]), heaps
    assert board.profile["heap_bytes"] - max(heaps) >= 16 * 1024, heaps
    gwkit.check_logs_acked(db, "pico")
    store = LogStore(db, readonly=True)
    try:
        notes = store.annotations()
    finally:
        store.close()
    assert notes and all(n["verified"] == 1 for n in notes)
    print("drafting node on the emulated Pico, shipped draft: deploy %.0f s, %d verified tokens (all SmolLM2-greedy) "
          "in %.0f s of host time, heap in use %d B, lockstep_ok %d, link frames %d sent + %d resent; spec %r"
          % (deploy_s, replay["verified"], run_s, heaps[-1], spec["lockstep_ok"], sess["link_tx_data"],
             sess["link_tx_retx"], spec))


@pytest.mark.slow
def test_model_alone_on_the_firmware_computes_the_hosts_integers(board: emuboard.EmuBoard, tmp_path: Path) -> None:
    """The board computes the host's numbers with every kernel backend it has: the C kernels (q4nat.mpy, the
    whole layer in one call), the frozen armv6m viper ones and bytecode give the ids and the integer logits
    (hashed) that shared/llama.py gives on CPython, for the tiny seeded draft (seconds of host time)."""
    import json

    import gwkit
    from tools.bench import board as bench_board

    model = tmp_path / "tiny.mbf"
    model.write_bytes(gwkit.tiny_mbf())
    res = subprocess.run([sys.executable, "-m", "host.cli", "deploy", "--board", "rp2040_pico", "--port",
                          board.repl_port, "--node", "--model", str(model), "--no-reset"], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    cfg = json.loads(mpremote(board.repl_port, "exec", "print(open('node.json').read())"))
    prof = board.profile
    fig = bench_board.probe_model(board.repl_port, model, prof, cfg, 3, tmp_path)
    assert fig["draft_ids_match_host"], fig
    assert fig["fast_backend"] == "native" and fig["weights_in_place"], fig
    assert fig["steps"] == {"plain": bench_board.BASELINE_STEPS, "viper": bench_board.VIPER_STEPS, "native": 3}
    assert fig["draft_step_native_vs_viper"] > 1.5, fig  # the C kernels ran, not only loaded
    assert fig["step_breakdown"]["layer_us"] > 0, fig  # and the whole-layer call
    print("model alone on the emulated Pico (tiny draft): step %d us native, %d us viper, %d us bytecode; ids equal "
          "the host's" % (fig["draft_step_us"], fig["viper_step_us"], fig["plain_step_us"]))


def test_bench_board_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.uf2").write_bytes(b"UF2\n")
    for args, what in ((["--steps", "1"], "--steps"), (["--model", str(tmp_path / "none.mbf")], "no such file"),
                       (["--image", str(tmp_path / "none.uf2")], "--image"),
                       (["--board", "esp32s3_devkitc", "--model", "tiny", "--image", str(tmp_path / "x.uf2")],
                        "emulator")):
        proc = subprocess.run([sys.executable, "-m", "host.cli", "bench", "board", *args], cwd=str(ROOT),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        err = [x for x in proc.stderr.splitlines() if "still running" not in x]
        assert len(err) == 1 and what in err[0] and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_bench_board_takes_the_circuitpython_pico_and_refuses_what_is_no_model(tmp_path: Path) -> None:
    (tmp_path / "x.uf2").write_bytes(b"UF2\n")
    for args, what in ((["--board", "rp2040_pico_cp", "--steps", "1"], "--steps"),
                       (["--board", "rp2040_pico_cp", "--model", str(tmp_path / "x.uf2")], "not a draft model"),
                       (["--board", "esp32s3_devkitc"], "rp2040_pico_cp")):
        proc = subprocess.run([sys.executable, "-m", "host.cli", "bench", "board", *args], cwd=str(ROOT),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        err = [x for x in proc.stderr.splitlines() if "still running" not in x]
        assert len(err) == 1 and what in err[0] and "Traceback" not in proc.stderr, (args, proc.stderr)
    proc = subprocess.run([sys.executable, "-m", "host.cli", "bench", "board", "--help"], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "rp2040_pico_cp" in proc.stdout, proc.stdout
