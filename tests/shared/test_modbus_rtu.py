# The Modbus RTU frame layer (shared/modbus_rtu.py) and the node's master (firmware/modbus.py), on both
# interpreters. The master talks to FakeBus: a scripted bus whose slaves answer from register tables, or
# fail as told (silent, exception, bad CRC, wrong unit, cut short, noise), all from preallocated buffers,
# so whole runs can go with the heap locked. A real pymodbus slave on a pty: tests/host/test_modbus_pty.py.
from array import array

import testkit
from firmware import modbus
from firmware.modbus import BOOL, FLOAT32, INT16, INT32, UINT16, UINT32, ModbusMaster
from shared import modbus_rtu as rtu
from shared import readings as rd
from shared.compat import MASK30, ticks_add, ticks_diff, ticks_ms
from shared.readings import Readings

# FakeBus modes, per unit id
NORMAL = 0
SILENT = 1
EXC = 2
CORRUPT = 3
WRONG_UNIT = 4
SHORT = 5
GARBAGE = 6
BAD_COUNT = 7

_NOISE = b"\xa5\x5a\xff\x00\x13\x37\xc3"


def _b(*xs):
    return bytes(bytearray(xs))


class FakeBus:
    """The master's UART onto a scripted bus: readinto/write/flush, every answer built in place. The
    slaves share one table of 256 holding registers, 256 input registers, 256 coils and 256 discrete
    inputs (a read past them is exception 2, as a real slave answers). Registers hold the 16-bit words
    as they go on the wire, high byte first."""

    def __init__(self, chunk=300):
        self.hold = array("H", bytearray(512))
        self.inp = array("H", bytearray(512))
        self.coils = bytearray(256)
        self.dis = bytearray(256)
        self.mode = bytearray(248)
        self.code = bytearray(248)  # the exception code a unit in mode EXC answers
        self.q = bytearray(1024)  # what the master has yet to read
        self.qh = 0
        self.qt = 0
        self.ans = bytearray(300)
        self.log = bytearray(8 * 512)  # the first 512 requests, as written
        self.at = array("i", [0] * 512)  # the test's clock at each of them
        self.n_req = 0
        self.ev = bytearray(2048)  # H / L: DE high / low, W: write, F: flush
        self.n_ev = 0
        self.chunk = chunk  # the most bytes one readinto gives (an answer trickling in)
        self.now = 0

    def event(self, e):
        if self.n_ev < len(self.ev):
            self.ev[self.n_ev] = e
        self.n_ev += 1

    def push(self, src, n):
        for i in range(n):
            self.q[self.qt + i] = src[i]
        self.qt += n

    def readinto(self, buf, n=None):
        if n is None:
            n = len(buf)
        avail = self.qt - self.qh
        if n > avail:
            n = avail
        if n > self.chunk:
            n = self.chunk
        for i in range(n):
            buf[i] = self.q[self.qh + i]
        self.qh += n
        if self.qh == self.qt:
            self.qh = self.qt = 0
        return n

    def flush(self):
        self.event(70)

    def write(self, buf, n=None):
        if n is None:
            n = len(buf)
        self.event(87)
        k = self.n_req
        if k < 512:
            for i in range(8):
                self.log[k * 8 + i] = buf[i]
            self.at[k] = self.now
        self.n_req += 1
        unit = buf[0]
        mode = self.mode[unit]
        if mode != SILENT:
            self.push(self.ans, self._answer(buf, unit, mode))
        return n

    def _answer(self, req, unit, mode):
        a = self.ans
        fc = req[1]
        start = (req[2] << 8) | req[3]
        count = (req[4] << 8) | req[5]
        if mode == GARBAGE:
            for i in range(len(_NOISE)):
                a[i] = _NOISE[i]
            return len(_NOISE)
        a[0] = unit
        if mode == EXC or start + count > 256:
            a[1] = fc | 0x80
            a[2] = self.code[unit] if mode == EXC else 2
            m = 3
        else:
            a[1] = fc
            if fc <= 2:
                bits = self.coils if fc == 1 else self.dis
                nb = (count + 7) >> 3
                for i in range(nb):
                    a[3 + i] = 0
                for i in range(count):
                    if bits[start + i]:
                        a[3 + (i >> 3)] |= 1 << (i & 7)
            else:
                regs = self.hold if fc == 3 else self.inp
                nb = count * 2
                for i in range(count):
                    w = regs[start + i]
                    a[3 + 2 * i] = w >> 8
                    a[4 + 2 * i] = w & 0xFF
            a[2] = nb
            m = 3 + nb
            if mode == BAD_COUNT:  # one register short, CRC good: a slave that miscounts
                a[2] = nb - 2
                m -= 2
        if mode == WRONG_UNIT:
            a[0] = unit + 1
        c = rtu.crc16(a, m)
        a[m] = c & 0xFF
        a[m + 1] = c >> 8
        m += 2
        if mode == CORRUPT:
            a[m - 3] ^= 0x10  # one bit of the last data byte flipped on the line
        elif mode == SHORT:
            m -= 2  # the CRC never comes
        return m

    def request(self, k):
        """(unit, fc, start, count) of the k-th request written."""
        j = k * 8
        g = self.log
        return (g[j], g[j + 1], (g[j + 2] << 8) | g[j + 3], (g[j + 4] << 8) | g[j + 5])


class FakePin:
    def __init__(self, bus):
        self.bus = bus
        self.v = -1

    def value(self, v):
        self.v = v
        self.bus.event(72 if v else 76)


class NoFlush:
    """An adapter without flush (PtyUART's case): the master waits out the frame's air time itself."""

    def __init__(self, bus):
        self.bus = bus

    def readinto(self, buf, n=None):
        return self.bus.readinto(buf, n)

    def write(self, buf, n=None):
        return self.bus.write(buf, n)


class Clock:
    """The loop run_locked drives: `steps` polls, 1 ms apart (one argument, so the call allocates nothing).
    It starts at the `now` the master was made with."""

    def __init__(self, master, bus, now, steps=0):
        self.m = master
        self.bus = bus
        self.now = now
        self.steps = steps
        self.modes = b""  # run_faults: the modes unit 2 cycles through, one per 200 ms
        self.unit = 2


def _ms(c):
    for _ in range(c.steps):
        c.now = ticks_add(c.now, 1)
        c.bus.now = c.now
        c.m.poll(c.now)
    return c.now


def _run_faults(c):
    for i in range(c.steps):
        c.bus.mode[c.unit] = c.modes[(i // 200) % len(c.modes)]
        c.now = ticks_add(c.now, 1)
        c.bus.now = c.now
        c.m.poll(c.now)
    return c.now


def run(clock, ms):
    clock.steps = ms
    return _ms(clock)


BUS = [1, 4, 5, 3, 19200, 1, 1, 100, 0]  # UART1, GP4/GP5, DE on GP3, 19200 8E1, 100 ms timeout


# ---------------------------------------------------------------- frames

def test_crc_vectors():
    assert rtu.crc16(b"123456789", 9) == 0x4B37  # the CRC-16/MODBUS check value
    req = bytearray(8)
    assert rtu.put_read_request(req, 1, 3, 0, 10) == 8
    # CRC 0xCDC5, low byte first: C5 CD is what goes on the wire
    assert bytes(req) == _b(0x01, 0x03, 0x00, 0x00, 0x00, 0x0A, 0xC5, 0xCD), bytes(req)
    assert rtu.crc16(req, 8) == 0  # a whole good frame checks to 0
    assert rtu.crc16(_b(0x01, 0x83, 0x02), 3) == 0xF1C0
    assert rtu.crc16(b"", 0) == 0xFFFF


def test_read_requests_byte_for_byte():
    req = bytearray(8)
    cases = (
        ((0x11, 1, 0x0013, 0x0025), (0x11, 0x01, 0x00, 0x13, 0x00, 0x25, 0x0E, 0x84)),  # the spec's coil example
        ((0x11, 3, 0x006B, 3), (0x11, 0x03, 0x00, 0x6B, 0x00, 0x03, 0x76, 0x87)),  # its holding register example
        ((1, 4, 8, 1), (0x01, 0x04, 0x00, 0x08, 0x00, 0x01, 0xB0, 0x08)),
    )
    for args, want in cases:
        rtu.put_read_request(req, args[0], args[1], args[2], args[3])
        assert bytes(req) == _b(*want), (args, bytes(req))
    rtu.put_read_request(req, 247, 2, 65535, 1)
    assert req[0] == 247 and req[1] == 2 and req[2] == 0xFF and req[3] == 0xFF and req[5] == 1
    assert rtu.crc16(req, 8) == 0
    assert rtu.answer_len(3, 10) == 25 and rtu.answer_len(4, 125) == 255
    assert rtu.answer_len(1, 10) == 7 and rtu.answer_len(2, 2000) == 255 and rtu.answer_len(1, 8) == 6


def _sealed(*xs):
    f = bytearray(len(xs) + 2)
    for i in range(len(xs)):
        f[i] = xs[i]
    c = rtu.crc16(f, len(xs))
    f[len(xs)] = c & 0xFF
    f[len(xs) + 1] = c >> 8
    return f


def test_response_checks():
    good = _sealed(0x11, 0x03, 0x06, 0xAE, 0x41, 0x56, 0x52, 0x43, 0x40)  # the spec's answer to 11 03 00 6B 00 03
    assert bytes(good[-2:]) == _b(0x49, 0xAD)
    n = len(good)
    assert rtu.check(good, n, 0x11, 3, 3) == rtu.OK
    for k in range(n):  # every prefix is still incomplete
        assert rtu.check(good, k, 0x11, 3, 3) == rtu.NEED, k
    assert rtu.check(good + b"\x00\x00", n + 2, 0x11, 3, 3) == rtu.OK  # bytes after the frame are not read
    assert rtu.u16(good, 0, 0) == 0xAE41 and rtu.u16(good, 2, 0) == 0x4340 and rtu.u16(good, 1, 1) == 0x5256
    exc = _sealed(0x11, 0x83, 0x02)
    assert rtu.check(exc, 5, 0x11, 3, 3) == rtu.EXCEPTION and exc[2] == 2
    assert rtu.check(exc, 4, 0x11, 3, 3) == rtu.NEED
    bad = bytearray(good)
    bad[5] ^= 0x01
    assert rtu.check(bad, n, 0x11, 3, 3) == rtu.BAD_CRC
    exc[2] = 3  # the code changed on the line, the CRC did not
    assert rtu.check(exc, 5, 0x11, 3, 3) == rtu.BAD_CRC
    assert rtu.check(good, n, 0x12, 3, 3) == rtu.BAD_ID  # another unit
    assert rtu.check(good, 1, 0x12, 3, 3) == rtu.BAD_ID  # known from the first byte
    assert rtu.check(good, n, 0x11, 4, 3) == rtu.BAD_ID  # another function
    assert rtu.check(good, n, 0x11, 3, 4) == rtu.BAD_LEN  # not the count asked for
    assert rtu.check(good, n - 1, 0x11, 3, 3) == rtu.NEED  # short: keep waiting (the master times it out)
    coils = _sealed(0x11, 0x01, 0x05, 0xCD, 0x6B, 0xB2, 0x0E, 0x1B)  # the spec's 37 coils from 0x13
    assert rtu.check(coils, len(coils), 0x11, 1, 37) == rtu.OK
    assert rtu.check(coils, len(coils), 0x11, 1, 41) == rtu.BAD_LEN
    want = (1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0)  # 0xCD then 0x6B, lowest bit first
    for i in range(16):
        assert rtu.bit(coils, i) == want[i], i
    assert rtu.bit(coils, 32) == 1 and rtu.bit(coils, 34) == 0 and rtu.bit(coils, 36) == 1  # 0x1B


# ---------------------------------------------------------------- the master against FakeBus

def _plant():
    """One unit with four batches: every type and order, coils, discrete inputs, input registers."""
    bus = FakeBus()
    h = bus.hold
    h[100] = 0xFB2E  # int16 -1234
    h[101] = 0xC350  # uint16 50000
    h[102] = 0xFFFE  # int32 -100000 = 0xFFFE7960, high word first
    h[103] = 0x7960
    h[104] = 0x5678  # uint32 0x12345678 = 305419896, low word first
    h[105] = 0x1234
    h[106] = 0x4145  # float32 12.34 = 0x414570A4
    h[107] = 0x70A4
    h[108] = 0x00BF  # float32 -0.5 = 0xBF000000, each register's bytes swapped
    h[109] = 0x0000
    h[110] = 0x8008  # bits 15 and 3 set
    h[111] = 0x2C01  # int16 300 = 0x012C, bytes swapped
    for i, v in enumerate((1, 0, 1, 1, 0, 0, 0, 0, 0, 1)):
        bus.coils[i] = v
    bus.dis[5] = 1
    bus.dis[7] = 1
    bus.inp[0] = 0xFFFF  # uint32 4294967295: more than the board's small ints hold
    bus.inp[1] = 0xFFFF
    bus.inp[2] = 0x0000  # float32 1.5 = 0x3FC00000, low word first and bytes swapped
    bus.inp[3] = 0xC03F
    units = [[0, 1, 100, [[3, 100, 12], [1, 0, 10], [2, 5, 3], [4, 0, 4]]],
             [1, 9, 100, [[3, 0, 1]]]]  # on another bus: not this master's
    signals = [
        [0, 0, 0, 0, INT16, 0, 0, -1, 1, 0, 0],
        [1, 0, 0, 1, UINT16, 0, 0, -1, 1, 1, 7],
        [2, 0, 0, 2, INT32, 0, 0, -1, 1, 0, 0],
        [3, 0, 0, 4, UINT32, 1, 0, -1, 1, 0, 0],
        [4, 0, 0, 6, FLOAT32, 0, 0, -1, 100, 0, 0],
        [5, 0, 0, 8, FLOAT32, 0, 1, -1, 1000, 0, 0],
        [6, 0, 0, 10, BOOL, 0, 0, 3, 1, 0, 0],
        [7, 0, 0, 11, INT16, 0, 1, -1, 3, 2, -10],
        [8, 0, 1, 9, BOOL, 0, 0, -1, 10, 0, 0],
        [9, 0, 2, 2, BOOL, 0, 0, -1, 1, 0, 0],
        [10, 0, 3, 0, UINT32, 0, 0, -1, 1, 0, 0],
        [11, 0, 3, 2, FLOAT32, 1, 1, -1, 10, 0, 0],
        [12, 1, 0, 0, UINT16, 0, 0, -1, 1, 0, 0],
    ]
    contacts = [
        [0, 0, 1, 1, -1, 0],
        [1, 0, 1, 1, -1, 1],
        [2, 0, 0, 10, 15, 0],
        [3, 0, 0, 10, 0, 1],
        [4, 0, 2, 0, -1, 0],
    ]
    return bus, units, signals, contacts


# The values above, worked by hand in each signal's internal unit: ((raw * mul) >> shift) + add.
WANT = (
    -1234,  # int16 0xFB2E
    25007,  # (50000 * 1 >> 1) + 7
    -100000,  # int32 0xFFFE7960
    305419896,  # uint32 0x12345678 from two words, low first
    1234,  # 12.34 in hundredths: significand 12636 / 2**10 = 12.3398, x 100 = 1233.98 -> 1234
    -500,  # -0.5 in thousandths
    1,  # bit 3 of 0x8008
    215,  # (300 * 3 >> 2) - 10
    10,  # coil 9 is on, x 10
    1,  # discrete input 5 + 2 = 7
    None,  # RANGE: 2**32 - 1 does not fit
    15,  # 1.5 in tenths
)
CLOSED = (0, 1, 1, 1, 1)  # coil 1 off; inverted; bit 15 of 0x8008; bit 0 inverted; discrete input 5


def _master(bus, units, signals, contacts, now=0, de=None, uart=None, n_sig=13, n_con=5, busdef=None, bus_index=0):
    r = Readings(n_sig, n_con)
    m = ModbusMaster(uart or bus, de, busdef or BUS, units, signals, contacts, r, now, bus_index)
    return m, r


def test_every_type_and_order_decoded():
    bus, units, signals, contacts = _plant()
    m, r = _master(bus, units, signals, contacts)
    c = Clock(m, bus, 0)
    run(c, 100)
    assert bus.n_req == 4 and m.answers == 4, (bus.n_req, m.answers, m.frame_errors, m.timeouts)
    for s in range(12):
        if WANT[s] is None:
            assert r.why[s] == rd.RANGE, (s, r.why[s])
        else:
            assert r.why[s] == rd.GOOD, (s, r.why[s], r.detail[s])
            assert r.value[s] == WANT[s], (s, r.value[s], WANT[s])
        assert r.fresh[s] == 1
    assert r.why[12] == rd.NONE_YET  # its unit is on bus 1
    for k in range(5):
        assert r.cwhy[k] == rd.GOOD and r.closed[k] == CLOSED[k], (k, r.closed[k])
    for k in range(4):
        assert bus.request(k)[0] == 1  # unit 9 of bus 1 is never asked
    assert bus.request(0) == (1, 3, 100, 12) and bus.request(3) == (1, 4, 0, 4)
    # without bus_index every unit given is this master's (firmware/inputs.py picks a bus's units itself)
    bus2, units, signals, contacts = _plant()
    m2, r2 = _master(bus2, units, signals, contacts, bus_index=None)
    run(Clock(m2, bus2, 0), 100)
    assert bus2.request(1) == (9, 3, 0, 1) and r2.why[12] == rd.GOOD and r2.value[12] == 0  # holding 0


def test_answers_arriving_in_pieces():
    bus, units, signals, contacts = _plant()
    bus.chunk = 3  # at most 3 bytes per read: the answer is put together over several polls
    m, r = _master(bus, units, signals, contacts)
    run(Clock(m, bus, 0), 100)
    assert m.answers == 4 and m.frame_errors == 0
    assert r.value[4] == 1234 and r.value[2] == -100000 and r.closed[1] == 1


def _two_units():
    bus = FakeBus()
    bus.hold[0] = 11
    bus.hold[1] = 22
    units = [[0, 1, 100, [[3, 0, 1]]], [0, 2, 100, [[3, 1, 1]]]]
    signals = [[0, 0, 0, 0, UINT16, 0, 0, -1, 1, 0, 0], [1, 1, 0, 0, UINT16, 0, 0, -1, 1, 0, 0]]
    contacts = [[0, 1, 0, 0, 0, 0]]  # bit 0 of unit 2's register: 22 is even, open
    m, r = _master(bus, units, signals, contacts, n_sig=2, n_con=1)
    return bus, m, r


def test_timeout_then_recovery():
    bus, m, r = _two_units()
    c = Clock(m, bus, 0)
    run(c, 50)
    assert r.value[1] == 22 and r.why[1] == rd.GOOD and r.cwhy[0] == rd.GOOD
    bus.mode[2] = SILENT  # unit 2 goes away
    run(c, 300)
    assert r.why[1] == rd.TIMEOUT and r.cwhy[0] == rd.TIMEOUT and r.value[1] == 22  # the last value is kept
    assert r.why[0] == rd.GOOD and m.timeouts >= 1
    # a timeout costs the unit's batch its timeout plus the air time, never the loop: unit 1 kept its pace
    assert m.passes[0] >= 3, m.passes[0]
    bus.mode[2] = NORMAL
    bus.hold[1] = 23
    run(c, 250)
    assert r.why[1] == rd.GOOD and r.value[1] == 23 and r.cwhy[0] == rd.GOOD and r.closed[0] == 1
    n = m.requests
    assert n == m.answers + m.timeouts + m.exceptions + m.frame_errors + (1 if m.state == modbus.WAIT else 0)


def test_timeout_waits_for_timeout_plus_air_time():
    bus, m, r = _two_units()
    bus.mode[1] = SILENT
    c = Clock(m, bus, 0)
    run(c, 1)  # the gap since construction has not passed: nothing sent yet
    assert bus.n_req == 0
    t = 0
    while bus.n_req == 0:
        t = run(c, 1)
    sent = t
    # 100 ms, plus 8 + 1 + 7 characters of 11 bits at 19200 baud (573 us each): 9.2 ms -> 10
    while r.why[0] != rd.TIMEOUT:
        t = run(c, 1)
    assert ticks_diff(t, sent) == 110, ticks_diff(t, sent)
    assert m.char_us == 573 and m.gap_us == 2006 and m.gap_ms == 4


def test_exception_code_is_the_detail():
    bus, m, r = _two_units()
    bus.mode[2] = EXC
    bus.code[2] = 4  # slave device failure
    run(Clock(m, bus, 0), 60)
    assert r.why[1] == rd.EXCEPTION and r.detail[1] == 4 and r.cwhy[0] == rd.EXCEPTION
    assert r.why[0] == rd.GOOD and m.exceptions >= 1 and m.frame_errors == 0
    # an address past the slave's table: Illegal Data Address (2)
    bus.mode[2] = NORMAL
    units = [[0, 2, 100, [[3, 250, 10]]]]
    m2, r2 = _master(bus, units, [[0, 0, 0, 9, INT16, 0, 0, -1, 1, 0, 0]], [], n_sig=1, n_con=0)
    run(Clock(m2, bus, 0), 60)
    assert r2.why[0] == rd.EXCEPTION and r2.detail[0] == 2


def test_garbled_answers_are_frame_then_recover():
    for mode in (CORRUPT, WRONG_UNIT, GARBAGE, SHORT, BAD_COUNT):
        bus, m, r = _two_units()
        c = Clock(m, bus, 0)
        bus.mode[2] = mode
        run(c, 150)
        assert r.why[1] == rd.FRAME and r.cwhy[0] == rd.FRAME, (mode, r.why[1])
        assert r.why[0] == rd.GOOD and m.frame_errors >= 1 and m.timeouts == 0, (mode, m.timeouts)
        bus.mode[2] = NORMAL
        run(c, 150)
        assert r.why[1] == rd.GOOD and r.value[1] == 22, (mode, r.why[1])


def test_noise_between_frames_is_drained():
    bus, m, r = _two_units()
    c = Clock(m, bus, 0)
    run(c, 30)
    frames = m.frame_errors
    for k in range(20):  # noise lands while the master is idle or waiting out the gap
        if m.state != modbus.WAIT:
            bus.push(_NOISE, len(_NOISE))
        run(c, 7)
    run(c, 200)
    assert m.frame_errors == frames and m.timeouts == 0
    assert r.why[0] == rd.GOOD and r.why[1] == rd.GOOD


def test_a_bus_that_never_falls_silent():
    bus, m, r = _two_units()
    c = Clock(m, bus, 0)
    for _ in range(250):  # a babbling device: a byte every ms
        bus.push(_NOISE, 1)
        run(c, 1)
    assert bus.n_req == 0 and m.noisy >= 1
    assert r.why[0] == rd.FRAME and r.why[1] == rd.FRAME
    run(c, 100)
    assert r.why[0] == rd.GOOD and r.why[1] == rd.GOOD


def test_round_robin_and_poll_ms():
    bus = FakeBus()
    units = [[0, 1, 100, [[3, 0, 2], [3, 10, 2]]], [0, 2, 100, [[4, 0, 1]]], [0, 3, 300, [[1, 0, 8]]]]
    m, r = _master(bus, units, [], [], now=MASK30 - 400, n_sig=0, n_con=0)
    c = Clock(m, bus, MASK30 - 400)  # across the tick counter's wrap
    run(c, 1000)
    order = [bus.request(k)[:3] for k in range(4)]
    # unit 1's second batch waits its turn behind units 2 and 3
    assert order == [(1, 3, 0), (2, 4, 0), (3, 1, 0), (1, 3, 10)], order
    starts = {1: [], 2: [], 3: []}
    for k in range(bus.n_req):
        u, fc, start, _ = bus.request(k)
        if start == 0:
            starts[u].append(bus.at[k])
    for u, poll, most in ((1, 100, 10), (2, 100, 10), (3, 300, 4)):
        t = starts[u]
        assert len(t) in (most - 1, most), (u, len(t))
        for i in range(1, len(t)):
            d = ticks_diff(t[i], t[i - 1])
            assert poll - m.gap_ms <= d <= poll + 15, (u, i, d)  # a pass starts when due, its request after the gap
    for u in range(3):  # a pass's end to the next: its poll period, give or take the bus's turns
        assert m.passes[u] >= 3
        poll = 300 if u == 2 else 100
        assert poll - 15 <= m.cycle_last_ms[u] <= m.cycle_worst_ms[u] <= poll + 15, \
            (u, m.cycle_last_ms[u], m.cycle_worst_ms[u])
    st = m.stats()
    assert st["requests"] == bus.n_req and st["answers"] == bus.n_req - (1 if m.state == modbus.WAIT else 0)


def test_de_high_only_around_each_request():
    bus, units, signals, contacts = _plant()
    pin = FakePin(bus)
    m, r = _master(bus, units, signals, contacts, de=pin)
    assert pin.v == 0 and bytes(bus.ev[:bus.n_ev]) == b"L"  # listening from the start
    run(Clock(m, bus, 0), 300)
    n = bus.n_req
    assert n >= 8 and pin.v == 0
    assert bytes(bus.ev[:bus.n_ev]) == b"L" + b"HWFL" * n, bytes(bus.ev[:bus.n_ev])
    # without flush (a pty): the master waits the request's 8 characters and one more itself
    bus2, units, signals, contacts = _plant()
    pin2 = FakePin(bus2)
    slow = list(BUS)
    slow[4] = 9600  # 1146 us a character at 8E1
    m2, r2 = _master(bus2, units, signals, contacts, de=pin2, uart=NoFlush(bus2), busdef=slow)
    c = Clock(m2, bus2, 0)
    t0 = ticks_ms()
    run(c, 20)
    waited = ticks_diff(ticks_ms(), t0)
    k = bus2.n_req
    assert k >= 1 and bytes(bus2.ev[:bus2.n_ev]) == b"L" + b"HWL" * k
    assert waited >= k * 9 * 1146 // 1000, (waited, k)


def test_poll_allocates_nothing():
    bus, units, signals, contacts = _plant()
    bus.chunk = 5
    units = [units[0], [0, 2, 50, [[3, 100, 4]]]]
    signals = signals[:12] + [[12, 1, 0, 0, INT32, 0, 0, -1, 1, 0, 0]]
    pin = FakePin(bus)
    m, r = _master(bus, units, signals, contacts, now=MASK30 - 1000, de=pin)
    c = Clock(m, bus, MASK30 - 1000)
    c.modes = bytes(bytearray((NORMAL, SILENT, EXC, CORRUPT, WRONG_UNIT, GARBAGE, SHORT, BAD_COUNT, NORMAL)))
    bus.code[2] = 6
    c.steps = 1800
    testkit.run_locked(_run_faults, c)
    assert m.answers > 20 and m.timeouts >= 1 and m.exceptions >= 1 and m.frame_errors >= 5, m.stats()
    assert r.why[12] == rd.GOOD and r.value[12] == -80821424  # int32 0xFB2EC350: -1234 * 65536 + 50000
    for s in range(12):
        assert (r.why[s] == rd.GOOD) == (WANT[s] is not None), s


def test_config_errors_are_clear():
    bus, units, signals, contacts = _plant()

    def make(b=BUS, u=units, s=signals, k=contacts):
        return _master(bus, u, s, k, busdef=b)

    cases = (
        ((BUS[:8],), "modbus bus"),
        (([1, 4, 5, 3, 19200, 3, 1, 100, 0],), "parity 0..2"),
        ((BUS, [[0, 0, 100, [[3, 0, 1]]]]), "unit_id 1..247"),
        ((BUS, [[0, 1, 100, []]]), "at least one batch"),
        ((BUS, [[0, 1, 100, [[5, 0, 1]]]]), "fc 1..4"),
        ((BUS, [[0, 1, 100, [[3, 0, 126]]]]), "count 1..125"),
        ((BUS, [[0, 1, 100, [[1, 65535, 2]]]]), "start + count"),
        ((BUS, units, [[0, 5, 0, 0, INT16, 0, 0, -1, 1, 0, 0]]), "no unit 5"),
        ((BUS, units, [[0, 0, 7, 0, INT16, 0, 0, -1, 1, 0, 0]]), "has no batch 7"),
        ((BUS, units, [[0, 0, 0, 11, INT32, 0, 0, -1, 1, 0, 0]]), "outside its batch of 12"),
        ((BUS, units, [[0, 0, 1, 0, INT16, 0, 0, -1, 1, 0, 0]]), "gives bools with bit -1"),
        ((BUS, units, [[0, 0, 0, 0, BOOL, 0, 0, -1, 1, 0, 0]]), "needs bit 0..15"),
        ((BUS, units, [[0, 0, 0, 0, INT16, 0, 0, 4, 1, 0, 0]]), "bit is for bools only"),
        ((BUS, units, [[0, 0, 0, 0, 6, 0, 0, -1, 1, 0, 0]]), "type 0..5"),
        ((BUS, units, [[99, 0, 0, 0, INT16, 0, 0, -1, 1, 0, 0]]), "signal 0..12"),
        ((BUS, units, [[0, 0, 0, 0, INT16, 0, 0, -1, 1, 0]]), "11 ints"),
        ((BUS, units, [], [[0, 0, 1, 0, 3, 0]]), "gives bools with bit -1"),
        ((BUS, units, [], [[0, 0, 0, 0, -1, 0]]), "needs bit 0..15"),
        ((BUS, units, [], [[0, 0, 2, 3, -1, 0]]), "outside its batch of 3"),
        ((BUS, units, [], [[0, 0, 2, 0, -1, 2]]), "invert 0|1"),
    )
    for args, words in cases:
        e = testkit.raises(ValueError, make, *args)
        assert words in str(e), (words, str(e))


def test_timing_figures():
    assert modbus.char_us(9600, 1, 1) == 1146 and modbus.char_us(9600, 0, 1) == 1042
    assert modbus.char_us(19200, 0, 2) == 573 and modbus.char_us(115200, 1, 1) == 96
    assert modbus.gap_us(9600, 1, 1) == 4011 and modbus.gap_us(19200, 0, 1) == 1823
    assert modbus.gap_us(38400, 1, 1) == 1750 and modbus.gap_us(115200, 0, 1) == 1750
    bus = FakeBus()
    b = [1, 4, 5, 3, 115200, 0, 1, 100, 500]  # gap_us given: taken as it is
    m, r = _master(bus, [[0, 1, 100, [[3, 0, 1]]]], [], [], busdef=b, n_sig=0, n_con=0)
    assert m.gap_us == 500 and m.gap_ms == 2
