"""firmware.uart.PtyUART on a virtual board, end to end: the real MicroPython unix port with the
rp2040_pico heap, the x64 build deployed with mpremote, the link opened by firmware.boardcfg from
/board.json, and the gateway side opened with pyserial as docs/GATEWAY.md section 1 says (do_not_open, dtr/rts False
before open, exclusive). Every byte value crosses in both directions; a read with nothing pending
returns 0 on the board; bad input gives clear errors on the board.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import serial

from firmware import boardcfg, uart
from tools.board import build, deploy
from tools.board.vboard import VirtualBoard

pytestmark = pytest.mark.slow

N = 256
READY = b"RDY!"
# Runs on the board. After READY it echoes N bytes XOR 0x5A, then sends the N byte values itself.
ECHO = """import gc, json, time
gc.collect()
h0 = gc.mem_alloc()
from firmware import boardcfg
link = boardcfg.open_link()
gc.collect()
heap = gc.mem_alloc() - h0
buf = bytearray(64)
empty = link.readinto(buf)
readable = link.readable()
link.write(b'%(ready)s')
got = 0
bad = 0
t0 = time.ticks_ms()
while got < %(n)d and time.ticks_diff(time.ticks_ms(), t0) < 15000:
    n = link.readinto(buf, min(64, %(n)d - got))
    for i in range(n):
        if buf[i] != (got + i) & 0xFF:
            bad += 1
        buf[i] ^= 0x5A
    w = 0
    while w < n:
        w += link.write(memoryview(buf)[w:], n - w)
    got += n
out = bytearray(%(n)d)
for i in range(%(n)d):
    out[i] = i
link.write(out)
import gc, micropython
after = after_readable = -1
gc.collect()
micropython.heap_lock()  # the receive path allocates nothing (any allocation raises MemoryError)
try:
    after = link.readinto(buf)
    after_readable = link.readable()
    alloc = 'none'
except MemoryError:
    alloc = 'allocated'
micropython.heap_unlock()
print(json.dumps({'adapter': type(link).__name__, 'empty': empty, 'readable': readable,
                  'got': got, 'bad': bad, 'after': after, 'after_readable': after_readable,
                  'alloc': alloc, 'heap': heap}))
link.close()
"""

ERRORS = """import json
from firmware import boardcfg, uart
from shared import profile
res = {}
def attempt(key, fn, *a):
    try:
        fn(*a)
        res[key] = 'no error'
    except ValueError as e:
        res[key] = type(e).__name__ + ': ' + str(e)
import os
path = os.getenv('EDGETWIN_UART')
os.unsetenv('EDGETWIN_UART')
try:
    attempt('no_env', uart.PtyUART)
    attempt('machine', boardcfg.open_link)
finally:
    os.putenv('EDGETWIN_UART', path)
attempt('back', lambda: boardcfg.open_link().close())
with open('/bad.json', 'w') as f:
    f.write('{"name": "x"}')
attempt('bad_profile', boardcfg.open_link, None, 'uart', '/bad.json')
cp = profile.load('/board.json')
cp['flavour'] = 'circuitpython'; cp['native'] = False; cp['threads'] = False
attempt('cp_profile', boardcfg.open_link, cp)
attempt('not_tty', uart.PtyUART, '/board.json')
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("halvb")
    out = build.build("rp2040_pico", arch="x64", out_dir=tmp / "rp2040_pico-x64")
    vb = VirtualBoard("rp2040_pico", root=tmp / "fs")
    vb.start()
    try:
        t0 = time.monotonic()
        report = deploy.deploy(out, vb.repl_port)
        report["deploy_s"] = round(time.monotonic() - t0, 2)
        yield vb
    finally:
        vb.stop()


def open_gateway(port: str) -> serial.Serial:
    s = serial.serial_for_url(port, baudrate=115200, timeout=0.2, do_not_open=True, exclusive=True)
    s.dtr = False  # before open(): a real ESP32 board resets when DTR/RTS toggle
    s.rts = False
    s.open()
    return s


def read_exactly(s: serial.Serial, n: int, timeout: float = 15.0) -> bytes:
    data = bytearray()
    deadline = time.monotonic() + timeout
    while len(data) < n and time.monotonic() < deadline:
        data += s.read(n - len(data))
    return bytes(data)


def test_all_byte_values_both_ways_and_empty_read_is_zero(board: VirtualBoard) -> None:
    gw = open_gateway(board.uart_port)
    try:
        gw.reset_input_buffer()
        result: dict = {}

        def run() -> None:
            try:
                result["out"] = deploy.run_on_board(board.repl_port, ECHO % {"n": N, "ready": READY.decode()},
                                                    timeout=60)
            except Exception as e:  # noqa: BLE001  (reported by the main thread)
                result["error"] = e

        t = threading.Thread(target=run)
        t.start()
        assert read_exactly(gw, len(READY)) == READY, "the board never said it was ready: %r" % result
        assert gw.read(1) == b"" and gw.in_waiting == 0  # pyserial's "nothing" is b'', not None
        sent = bytes(range(N))
        t0 = time.monotonic()
        for i in range(0, N, 32):  # in pieces, as a gateway's frames would arrive
            gw.write(sent[i:i + 32])
        echoed = read_exactly(gw, N)
        rtt = time.monotonic() - t0
        direct = read_exactly(gw, N)
        t.join(60)
        assert not t.is_alive()
        assert "error" not in result, result.get("error")
        report = json.loads(result["out"].strip().splitlines()[-1])
        heap = report.pop("heap")
    finally:
        gw.close()
    assert echoed == bytes(b ^ 0x5A for b in sent), echoed.hex()
    assert direct == sent, direct.hex()
    assert report == {"adapter": "PtyUART", "empty": 0, "readable": 0, "got": N, "bad": 0, "after": 0,
                      "after_readable": 0, "alloc": "none"}, report
    # importing boardcfg + uart + shared.profile and opening the link, on the 192 KiB board heap
    assert 0 < heap < 24 * 1024, heap
    print("HAL-VBOARD %s" % json.dumps({"echo_256_bytes_ms": round(rtt * 1000, 2), "board_heap_bytes": heap}))


def test_bad_input_on_the_board_is_clear(board: VirtualBoard) -> None:
    out = deploy.run_on_board(board.repl_port, ERRORS, timeout=60)
    res = json.loads(out.strip().splitlines()[-1])
    assert res["no_env"].startswith("HalError: EDGETWIN_UART is not set"), res
    assert res["machine"].startswith("HalError:") and "no UART" in res["machine"], res
    assert res["bad_profile"].startswith("ProfileError: /bad.json: missing field"), res
    assert "virtual board runs MicroPython" in res["cp_profile"], res
    assert res["back"] == "no error", res
    assert res["not_tty"].startswith("HalError:") and "not a tty" in res["not_tty"], res


def test_pty_uart_under_cpython_with_a_host_pty(tmp_path: Path) -> None:
    # The same adapter on the host (CPython), against a raw pty pair: no board needed.
    import os

    from tools.board.vboard import set_raw

    master, slave = os.openpty()
    set_raw(slave)
    try:
        link = boardcfg.open_link(boardcfg.load(str(build.ROOT / "boards" / "rp2040_pico.json")), virtual=os.ttyname(slave))
        assert isinstance(link, uart.PtyUART)
        buf = bytearray(300)
        assert link.readinto(buf) == 0 and link.readable() == 0
        os.write(master, bytes(range(256)))
        time.sleep(0.05)
        assert link.readable() == 1
        assert link.readinto(buf, 100) == 100 and link.readinto(buf, 200) == 156
        assert buf[:156] == bytes(range(100, 256))
        assert link.write(bytes(range(256)), 10) == 10
        assert os.read(master, 100) == bytes(range(10))
        link.close()
        import termios

        assert termios.tcgetattr(slave)[6][termios.VMIN] == 1  # the tty is back as it was
    finally:
        os.close(master)
        os.close(slave)
