"""The node's Modbus RTU master (firmware/modbus.py) in the MicroPython unix port, on a pty through
firmware/uart.PtyUART, against a real Modbus RTU slave: pymodbus's serial server with two devices.

Between them a relay (two pty pairs and a thread copying bytes) plays the RS-485 bus: it only passes a
request on to the slaves when its unit is on the bus (unit 9 is not, so nobody answers it), and it
injects faults on demand: a flipped bit in every answer (bad CRC), noise between frames, a unit that
goes away and comes back. The board prints its readings every 50 ms; each test waits for what it
expects to see there, so it takes about as long as the bus needs and no longer.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path

import pytest
from pymodbus.server import ModbusSerialServer  # a main dependency (pyproject.toml): no skip if missing
from pymodbus.simulator import DataType, SimData, SimDevice

from shared import readings as rd
from tools.board.ptys import PtyEnd, write_all
from tools.board.vboard import micropython_exe

ROOT = Path(__file__).resolve().parent.parent.parent

INT16, UINT16, INT32, UINT32, FLOAT32, BOOL = range(6)
ON_BUS = (1, 2)  # the units the slave serves; the master also asks for unit 9
NOISE = b"\x00\xff\x55\xaa\x13"

# 19200 baud 8N1, no DE pin (a pty has none), 100 ms timeout, the standard gap
BUS = [1, 4, 5, -1, 19200, 0, 1, 100, 0]
UNITS = [
    [0, 1, 200, [[3, 0, 11], [4, 0, 3], [1, 0, 10], [2, 0, 8], [3, 500, 2]]],  # the last: no such address
    [0, 2, 200, [[3, 100, 4]]],
    [0, 9, 200, [[3, 0, 2]]],  # nobody on the bus answers unit 9
]
# [signal, unit, batch, offset, type, word_order, byte_order, bit, mul, shift, add]
SIGNALS = [
    [0, 0, 0, 0, INT16, 0, 0, -1, 1, 0, 0],
    [1, 0, 0, 1, UINT16, 0, 0, -1, 1, 1, 7],
    [2, 0, 0, 2, INT32, 0, 0, -1, 1, 0, 0],
    [3, 0, 0, 4, FLOAT32, 0, 0, -1, 100, 0, 0],
    [4, 0, 0, 6, BOOL, 0, 0, 3, 1, 0, 0],
    [5, 0, 0, 7, UINT32, 1, 0, -1, 1, 0, 0],
    [6, 0, 0, 9, FLOAT32, 0, 1, -1, 1000, 0, 0],
    [7, 0, 1, 0, FLOAT32, 0, 0, -1, 10, 0, 0],
    [8, 0, 1, 2, UINT16, 0, 0, -1, 1, 0, 0],
    [9, 0, 2, 9, BOOL, 0, 0, -1, 10, 0, 0],
    [10, 0, 4, 0, UINT16, 0, 0, -1, 1, 0, 0],
    [11, 1, 0, 0, INT32, 0, 0, -1, 1, 0, 0],
    [12, 1, 0, 2, FLOAT32, 0, 0, -1, 100, 0, 0],
    [13, 2, 0, 0, UINT16, 0, 0, -1, 1, 0, 0],
]
# [contact, unit, batch, offset, bit, invert]
CONTACTS = [
    [0, 0, 2, 1, -1, 0],
    [1, 0, 3, 1, -1, 0],
    [2, 0, 3, 0, -1, 1],
    [3, 0, 0, 6, 15, 0],
    [4, 2, 0, 0, 0, 0],
]
# What the board must read, worked by hand in each signal's internal unit ((raw * mul) >> shift) + add
WANT = {
    0: -1234,  # int16
    1: 25007,  # (50000 >> 1) + 7
    2: -100000,  # int32, high word first
    3: 1234,  # float32 12.34 in hundredths (its 14-bit significand 12636 / 1024 = 12.3398)
    4: 1,  # bit 3 of 0x8008
    5: 305419896,  # uint32 0x12345678, low word first
    6: -500,  # float32 -0.5 in thousandths, each register's bytes swapped
    7: 2305,  # float32 230.5 in tenths
    8: 65535,  # uint16
    9: 10,  # coil 9 on, x 10
    11: 123456789,  # int32 of unit 2
    12: -125,  # float32 -1.25 in hundredths
}
CLOSED = {0: 0, 1: 1, 2: 1, 3: 1}  # coil 1 off; discrete input 1 on; input 0 off, inverted; bit 15 of 0x8008
UNIT_OF = {s[0]: UNITS[s[1]][1] for s in SIGNALS}
CUNIT_OF = {c[0]: UNITS[c[1]][1] for c in CONTACTS}


def _devices() -> list[SimDevice]:
    """The two slaves: (coils, discrete inputs, holding registers, input registers), each its own table."""
    bits = lambda xs: [bool(x) for x in xs] + [False] * (16 - len(xs))  # noqa: E731  (whole 16-bit words)
    unit1 = SimDevice(id=1, simdata=(
        [SimData(0, values=bits([1, 0, 1, 1, 0, 0, 0, 0, 0, 1]), datatype=DataType.BITS)],
        [SimData(0, values=bits([0, 1]), datatype=DataType.BITS)],
        [SimData(0, values=-1234, datatype=DataType.INT16),
         SimData(1, values=50000, datatype=DataType.UINT16),
         SimData(2, values=-100000, datatype=DataType.INT32),
         SimData(4, values=12.34, datatype=DataType.FLOAT32),
         SimData(6, values=[0x8008, 0x5678, 0x1234, 0x00BF, 0x0000], datatype=DataType.REGISTERS)],
        [SimData(0, values=230.5, datatype=DataType.FLOAT32),
         SimData(2, values=65535, datatype=DataType.UINT16)],
    ))
    unit2 = SimDevice(id=2, simdata=(
        [SimData(0, values=bits([0]), datatype=DataType.BITS)],
        [SimData(0, values=bits([0]), datatype=DataType.BITS)],
        [SimData(100, values=123456789, datatype=DataType.INT32),
         SimData(102, values=-1.25, datatype=DataType.FLOAT32)],
        [SimData(0, values=0, datatype=DataType.UINT16)],
    ))
    return [unit1, unit2]


class Slave(threading.Thread):
    """pymodbus's RTU serial server on a pty, in its own asyncio loop."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001  (reported by the test)
            self.error = e
            self.ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.server = ModbusSerialServer(_devices(), port=self.path, baudrate=19200, bytesize=8, parity="N",
                                         stopbits=1)
        await self.server.serve_forever(background=True)
        self.ready.set()
        await self.server.serving

    def stop(self) -> None:
        if hasattr(self, "server"):
            asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(5)
        self.join(5)


class Relay(threading.Thread):
    """The bus between the master's pty and the slave's: requests are whole 8-byte frames; a request to
    a unit not on the bus, or to one gone away, goes nowhere. Faults: `corrupt` flips a bit in every
    answer; `noise` "after" writes 5 noise bytes 1 ms after every answer (the master is between frames),
    "before" right after every request, ahead of the answer; `away` holds a unit id gone away."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.m = PtyEnd()  # the board opens self.m.path
        self.s = PtyEnd()  # the slave opens self.s.path
        self.corrupt = False
        self.noise = ""
        self.away = 0
        self.corrupted = 0  # answers corrupted
        self.noises = 0  # noise bursts written
        self.requests: dict[int, int] = {}  # unit id -> requests seen
        self.running = True

    def run(self) -> None:
        pending = b""
        while self.running:
            r, _, _ = select.select([self.m.master, self.s.master], [], [], 0.01)
            if self.m.master in r:
                try:
                    pending += os.read(self.m.master, 4096)
                except OSError:
                    pass
                while len(pending) >= 8:
                    frame, pending = pending[:8], pending[8:]
                    self.requests[frame[0]] = self.requests.get(frame[0], 0) + 1
                    if frame[0] in ON_BUS and frame[0] != self.away:
                        write_all(self.s.master, frame)
                        if self.noise == "before":
                            write_all(self.m.master, NOISE)
                            self.noises += 1
            if self.s.master in r:
                try:
                    data = bytearray(os.read(self.s.master, 4096))
                except OSError:
                    continue
                if self.corrupt:
                    data[min(3, len(data) - 1)] ^= 0x10
                    self.corrupted += 1
                write_all(self.m.master, bytes(data))
                if self.noise == "after":
                    time.sleep(0.001)
                    write_all(self.m.master, NOISE)
                    self.noises += 1

    def stop(self) -> None:
        self.running = False
        self.join(2)
        self.m.close()
        self.s.close()


# Runs on the board: the master on the pty, its readings printed every 50 ms; every poll runs with the
# heap locked, so an allocation shows as a count instead of passing unnoticed.
BOARD = """import json, sys, time, micropython
from shared.compat import ticks_ms, ticks_diff
from shared.readings import Readings
from firmware.uart import PtyUART
from firmware.modbus import ModbusMaster
cfg = json.loads(open(sys.argv[1]).read())
r = Readings(len(cfg["signals"]), len(cfg["contacts"]))
m = ModbusMaster(PtyUART(cfg["path"]), None, cfg["bus"], cfg["units"], cfg["signals"], cfg["contacts"], r, ticks_ms())
allocs = 0
polls = 0
gap = cfg.get("poll_ms", 1)  # the loop's pace: 1 ms idle, or tens of ms while a model steps
last = ticks_ms()
while True:
    now = ticks_ms()
    polls += 1
    micropython.heap_lock()
    try:
        m.poll(now)
    except MemoryError:
        allocs += 1
    micropython.heap_unlock()
    if ticks_diff(now, last) >= 50:
        last = now
        st = m.stats()
        st["allocs"] = allocs
        st["polls"] = polls
        print(json.dumps({"v": list(r.value), "why": list(r.why), "detail": list(r.detail),
                          "closed": list(r.closed), "cwhy": list(r.cwhy), "stats": st}))
    time.sleep_ms(gap)
"""


class Rig:
    def __init__(self, tmp: Path, poll_ms: int = 1) -> None:
        self.poll_ms = poll_ms
        self.relay = Relay()
        self.slave = Slave(self.relay.s.path)
        self.tmp = tmp
        self.lines: list[dict] = []
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.relay.start()
        self.slave.start()
        assert self.slave.ready.wait(10), "pymodbus server did not start"
        assert self.slave.error is None, repr(self.slave.error)
        cfg = {"path": self.relay.m.path, "bus": BUS, "units": UNITS, "signals": SIGNALS, "contacts": CONTACTS,
               "poll_ms": self.poll_ms}
        (self.tmp / "cfg.json").write_text(json.dumps(cfg))
        (self.tmp / "board.py").write_text(BOARD)
        self.proc = subprocess.Popen([micropython_exe(), str(self.tmp / "board.py"), str(self.tmp / "cfg.json")],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(ROOT),
                                     env=dict(os.environ, MICROPYPATH=str(ROOT)))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                self.lines.append({"text": line})

    def wait(self, what: str, pred, timeout: float = 5.0) -> dict:
        """The first snapshot printed from now on for which pred holds; fails naming `what` after timeout."""
        i = len(self.lines)
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            while i < len(self.lines):
                snap = self.lines[i]
                i += 1
                if "text" in snap:
                    time.sleep(0.1)  # the rest of a traceback
                    pytest.fail("the board printed: " + "".join(s.get("text", "") for s in self.lines[-20:]))
                if pred(snap):
                    return snap
            if self.proc is not None and self.proc.poll() is not None:
                time.sleep(0.1)
                pytest.fail("the board exited (%s): %s" % (self.proc.returncode, self.lines[-5:]))
            time.sleep(0.02)
        last = self.lines[-1] if self.lines else None
        pytest.fail("%s: not seen in %.1f s; last snapshot: %s" % (what, timeout, last))

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.slave.stop()
        self.relay.stop()


@pytest.fixture
def rig(tmp_path, request):
    r = Rig(tmp_path, getattr(request, "param", 1))
    r.start()
    try:
        yield r
    finally:
        r.stop()


def good(snap: dict, unit: int) -> bool:
    """Every signal and contact of `unit` (an id) that can be good is good, in a snapshot."""
    return (all(snap["why"][s] == rd.GOOD for s in WANT if UNIT_OF[s] == unit)
            and all(snap["cwhy"][c] == rd.GOOD for c in CLOSED if CUNIT_OF[c] == unit))


def all_good(snap: dict) -> bool:
    return good(snap, 1) and good(snap, 2)


def check_values(snap: dict) -> None:
    for s, want in WANT.items():
        assert snap["why"][s] == rd.GOOD, (s, snap["why"][s])
        assert snap["v"][s] == want, (s, snap["v"][s], want)
    for c, want in CLOSED.items():
        assert snap["cwhy"][c] == rd.GOOD and snap["closed"][c] == want, (c, snap["closed"][c])
    assert snap["stats"]["allocs"] == 0


def test_every_value_read_from_a_pymodbus_slave(rig):
    snap = rig.wait("every value good", all_good)
    check_values(snap)
    # the batch at an address the slave does not have: exception 2 (Illegal Data Address)
    snap = rig.wait("exception 2", lambda s: s["why"][10] == rd.EXCEPTION)
    assert snap["detail"][10] == 2 and snap["stats"]["exceptions"] >= 1
    assert good(snap, 1) and good(snap, 2)  # the other batches of that unit are unaffected


def test_a_silent_unit_times_out_and_the_others_go_on(rig):
    snap = rig.wait("unit 9 timed out", lambda s: s["why"][13] == rd.TIMEOUT and s["cwhy"][4] == rd.TIMEOUT)
    passes = snap["stats"]["passes"]
    later = rig.wait("three more passes of units 1 and 2",
                     lambda s: s["stats"]["passes"][0] >= passes[0] + 3 and s["stats"]["passes"][1] >= passes[1] + 3)
    check_values(later)
    assert later["why"][13] == rd.TIMEOUT and later["stats"]["timeouts"] >= 3
    assert rig.relay.requests.get(9, 0) >= 3  # it was asked, again and again
    # a dead unit costs its timeout plus air time per pass (~110 ms), not the others' cadence (200 ms)
    assert max(later["stats"]["cycle_worst_ms"][:2]) < 400, later["stats"]


def test_corrupted_answers_are_frame_then_recover(rig):
    rig.wait("every value good", all_good)
    rig.relay.corrupt = True
    snap = rig.wait("FRAME on both units",
                    lambda s: all(s["why"][k] == rd.FRAME for k in WANT) and s["stats"]["frame_errors"] >= 6)
    assert all(snap["cwhy"][c] == rd.FRAME for c in CLOSED)
    rig.relay.corrupt = False
    check_values(rig.wait("every value good again", all_good))


def test_noise_between_frames_is_recovered_at_the_next_request(rig):
    before = rig.wait("every value good", all_good)["stats"]
    # noise after each answer, while the master waits out the gap: drained, no reading suffers
    rig.relay.noise = "after"
    snap = rig.wait("15 answers with noise after them", lambda s: rig.relay.noises >= 15)
    assert all_good(snap)
    # (a burst can only hit an answer when the relay thread is held up past the 3 ms gap: a loaded host)
    assert snap["stats"]["frame_errors"] - before["frame_errors"] <= rig.relay.noises // 4, snap["stats"]
    # noise ahead of each answer: the master takes it for the answer (FRAME) and drains the real one
    rig.relay.noise = "before"
    rig.wait("FRAME on both units", lambda s: all(s["why"][k] == rd.FRAME for k in WANT)
             and all(s["cwhy"][c] == rd.FRAME for c in CLOSED))
    rig.relay.noise = ""
    after = rig.wait("every value good again", all_good)
    check_values(after)
    assert after["stats"]["frame_errors"] >= before["frame_errors"] + 5  # the 5 batches feeding WANT and CLOSED
    assert after["stats"]["timeouts"] - before["timeouts"] <= after["stats"]["passes"][2] - before["passes"][2] + 1


def test_a_unit_that_goes_away_and_comes_back(rig):
    rig.wait("every value good", all_good)
    rig.relay.away = 2
    snap = rig.wait("unit 2 timed out", lambda s: s["why"][11] == rd.TIMEOUT and s["why"][12] == rd.TIMEOUT)
    assert good(snap, 1)
    rig.relay.away = 0
    check_values(rig.wait("unit 2 back", all_good))


@pytest.mark.parametrize("rig", [60], indirect=True)
def test_polls_far_apart_send_a_request_in_each(rig):
    # While the model steps, the loop polls the bus tens of ms apart: the poll that takes an answer sends the
    # next due request after the silence, so a pass costs a poll per batch, not two (an answer later than a
    # poll on a loaded host costs one more, hence the margin).
    before = rig.wait("every value good", all_good)["stats"]
    after = rig.wait("40 more requests", lambda s: s["stats"]["requests"] >= before["requests"] + 40, timeout=20)
    check_values(after)
    polls = after["stats"]["polls"] - before["polls"]
    requests = after["stats"]["requests"] - before["requests"]
    assert polls < 1.5 * requests, (polls, requests)
