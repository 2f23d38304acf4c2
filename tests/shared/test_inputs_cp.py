# test_inputs_cp.py: the node's real inputs on CircuitPython (firmware/cp_hal.py), driven by fake modules.
# CircuitPython has no machine module and no pin IRQs; these fakes behave like its modules where it matters:
# board pins are claimed once ("GP5 in use"), analogio refuses a pin with no ADC and scales .value to 16 bits,
# keypad.Keys reports changes as timestamped events from a fixed queue (overflowed when it fills) and starts
# from "all released", countio refuses what the RP2040 cannot count (an even GPIO, both edges), busio.I2C
# needs try_lock, raises OSError(19) for a NACK and RuntimeError for a bus with no pull-ups, busio.UART's
# readinto takes no length. The same scenarios run through machine-like fakes with IRQs, and the readings
# (what the engine turns into lines) must come out the same. Every fake allocates nothing once built.
import sys
from array import array

import testkit
from firmware import analog, boardcfg, contacts, cp_hal, i2c_sensors, mcp9600, modbus, pulses, uart, uart_cp
from shared import compat, frame_codec, plantcfg
from shared import modbus_rtu as rtu
from shared import readings as rd
from shared.compat import MASK30

CLOCK = array("i", [0])
_FAKES = ("machine", "board", "microcontroller", "digitalio", "analogio", "countio", "keypad", "busio")


def clock():
    return CLOCK[0]


def at(t):
    CLOCK[0] = t & MASK30
    return CLOCK[0]


class _Module:
    """An object standing in for a module in sys.modules."""


# ---------------------------------------------------------------- the world outside the board

class BoardPin:
    """A GPIO: the level the outside world drives, who claimed it, and what watches it."""

    def __init__(self, num):
        self.num = num
        self.level = 0
        self.pull = None
        self.user = None
        self.out = -1  # the level driven as an output
        self.keys = None  # the Keys scanning it, as key number self.key
        self.key = 0
        self.counter = None  # the countio Counter counting it
        self.irq = None  # the machine-like IrqPin whose handler its edges call

    def claim(self, who):
        if self.user is not None:
            raise ValueError("GP%d in use" % self.num)
        self.user = who

    def release(self):
        self.user = None
        self.keys = None
        self.counter = None


def drive(pin, level):
    """The outside world sets a pin: countio counts the edge, keypad's background scan sees it at once."""
    if level == pin.level:
        return
    pin.level = level
    if pin.counter is not None:
        pin.counter.edge(level)
    if pin.irq is not None:
        pin.irq.edge(level)
    if pin.keys is not None:
        pin.keys.scan()


def pulse(pin):
    drive(pin, 1 - pin.level)
    drive(pin, 1 - pin.level)


# ---------------------------------------------------------------- digitalio, analogio

class Direction:
    INPUT = "INPUT"
    OUTPUT = "OUTPUT"


class Pull:
    UP = "UP"
    DOWN = "DOWN"


class DigitalInOut:
    def __init__(self, pin):
        pin.claim("digitalio")
        self.p = pin
        self.direction = Direction.INPUT
        self.pull = None

    def switch_to_output(self, value=False):
        self.direction = Direction.OUTPUT
        self.p.out = 1 if value else 0

    @property
    def value(self):
        return bool(self.p.out) if self.direction == Direction.OUTPUT else self.p.level == 1

    @value.setter
    def value(self, v):
        if self.direction != Direction.OUTPUT:
            raise AttributeError("Cannot set value when direction is input.")
        self.p.out = 1 if v else 0

    def deinit(self):
        self.p.release()


class AnalogIn:
    """analogio.AnalogIn: ADC on GP26..GP29 only; .value cycles through scripted 16-bit codes."""

    def __init__(self, pin):
        if not 26 <= pin.num <= 29:
            raise ValueError("Pin does not have ADC capabilities")
        pin.claim("analogio")
        self.p = pin
        self.reference_voltage = 3.3
        self.codes = array("H", bytearray(32))
        self.n = 1
        self.i = 0
        self.reads = 0
        ADCS[pin.num] = self

    def script(self, *codes):
        for j in range(len(codes)):
            self.codes[j] = codes[j]
        self.n = len(codes)
        self.i = 0

    @property
    def value(self):
        v = self.codes[self.i]
        self.i += 1
        if self.i == self.n:
            self.i = 0
        self.reads += 1
        return v

    def deinit(self):
        self.p.release()


ADCS = {}


# ---------------------------------------------------------------- keypad

class Event:
    def __init__(self, key_number=0, pressed=True):
        self.key_number = key_number
        self.pressed = pressed
        self.timestamp = 0

    @property
    def released(self):
        return not self.pressed


class EventQueue:
    """A fixed ring of events; a full queue drops the new one and sets overflowed, as keypad's does."""

    def __init__(self, size):
        self.key = array("i", bytearray(4 * size))
        self.down = bytearray(size)
        self.ts = array("i", bytearray(4 * size))
        self.size = size
        self.head = 0
        self.n = 0
        self.overflowed = False
        self.scanner = None

    def put(self, key, pressed, ts):
        if self.n == self.size:
            self.overflowed = True
            return
        j = (self.head + self.n) % self.size
        self.key[j] = key
        self.down[j] = pressed
        self.ts[j] = ts
        self.n += 1

    def get_into(self, ev):
        self.scanner.scan()  # what the background scans found since the last call
        if self.n == 0:
            return False
        j = self.head
        ev.key_number = self.key[j]
        ev.pressed = self.down[j] == 1
        ev.timestamp = self.ts[j]
        self.head = (j + 1) % self.size
        self.n -= 1
        return True

    def clear(self):
        self.n = 0
        self.overflowed = False

    def __len__(self):
        return self.n


class Keys:
    def __init__(self, pins, *, value_when_pressed, pull=True, interval=0.02, max_events=64):
        n = len(pins)
        for k in range(n):  # every pin checked before any is taken, as keypad does
            if pins[k].user is not None or pins[k] in pins[:k]:
                raise ValueError("GP%d in use" % pins[k].num)
        for k in range(n):
            pins[k].claim("keypad")
        self.pins = list(pins)
        self.vwp = 1 if value_when_pressed else 0
        self.interval = interval
        self.state = bytearray(n)  # 1: pressed at the last scan; all released at the start
        for k in range(n):
            p = pins[k]
            p.keys = self
            p.key = k
            p.pull = (Pull.DOWN if value_when_pressed else Pull.UP) if pull else None
        self.events = EventQueue(max_events)
        self.events.scanner = self
        KEYS.append(self)

    def scan(self):
        for k in range(len(self.pins)):
            pressed = 1 if self.pins[k].level == self.vwp else 0
            if pressed != self.state[k]:
                self.state[k] = pressed
                self.events.put(k, pressed, CLOCK[0] & 0x1FFFFFFF)  # supervisor.ticks_ms: 29 bits

    def reset(self):
        for k in range(len(self.state)):
            self.state[k] = 0

    def deinit(self):
        for p in self.pins:
            p.release()


KEYS = []


# ---------------------------------------------------------------- countio

class Edge:
    RISE = "RISE"
    FALL = "FALL"
    RISE_AND_FALL = "RISE_AND_FALL"


class Counter:
    """countio.Counter; `rp2040` (the default) refuses what the RP2040's PWM slices cannot count."""

    rp2040 = True

    def __init__(self, pin, *, edge=Edge.FALL, pull=None):
        if Counter.rp2040:
            if pin.num % 2 == 0:
                raise RuntimeError("Pin must be on PWM Channel B")
            if edge == Edge.RISE_AND_FALL:
                raise NotImplementedError("RISE_AND_FALL not available on this chip")
        pin.claim("countio")
        pin.counter = self
        pin.pull = pull
        self.p = pin
        self.kind = edge
        self.count = 0
        self.resets = 0

    def edge(self, level):
        if (level and self.kind != Edge.FALL) or (not level and self.kind != Edge.RISE):
            self.count += 1

    def reset(self):
        self.count = 0
        self.resets += 1

    def deinit(self):
        self.p.release()


# ---------------------------------------------------------------- busio.I2C and its devices

class RegChip:
    """An I2C chip with 16-bit registers (register r at bytes 2r, 2r+1); writes set the register pointer."""

    def __init__(self, nregs):
        self.regs = bytearray(2 * nregs)
        self.ptr = 0
        self.writes = 0

    def write(self, buf, start, end):
        self.ptr = buf[start]
        if end - start > 1:
            self.writes += 1
            for j in range(start + 1, end):
                self.regs[2 * self.ptr + j - start - 1] = buf[j]
            self.written(self.ptr)

    def written(self, reg):
        pass

    def read(self, buf, start, end):
        for j in range(start, end):
            buf[j] = self.regs[2 * self.ptr + j - start]

    def set16(self, reg, v):
        v &= 0xFFFF
        self.regs[2 * reg] = v >> 8
        self.regs[2 * reg + 1] = v & 0xFF


def mcp9600_chip(sixteenths, dev_id=0x40):
    c = RegChip(0x21)
    c.set16(mcp9600.HOT_JUNCTION, sixteenths)
    c.regs[2 * mcp9600.DEVICE_ID] = dev_id
    c.regs[2 * mcp9600.DEVICE_ID + 1] = 0x14
    return c


class ADS1115Chip(RegChip):
    """A start (config with OS=1) converts the input its MUX names into the conversion register at once."""

    def __init__(self):
        RegChip.__init__(self, 2)
        self.inputs = array("i", bytearray(16))

    def written(self, reg):
        if reg == 1 and self.regs[2] & 0x80:
            self.set16(0, self.inputs[((self.regs[2] >> 4) & 7) - 4])
            self.regs[2] &= 0x7F


class I2CBus:
    """busio.I2C on the RP2040's pin pairs (SDA an even GPIO, SCL the next); devices by address."""

    pullups = True
    devices = {}

    def __init__(self, scl, sda, *, frequency=100000, timeout=255):
        if sda.num % 2 or scl.num != sda.num + 1:
            raise ValueError("Invalid pins")
        if not I2CBus.pullups:
            raise RuntimeError("No pull up found on SDA or SCL; check your wiring")
        scl.claim("busio.I2C")
        sda.claim("busio.I2C")
        self.pins = (scl, sda)
        self.frequency = frequency
        self.locked = False
        self.nack = OSError(19)  # made once: a failing transfer allocates nothing here
        self.transfers = 0
        BUSES.append(self)

    def try_lock(self):
        if self.locked:
            return False
        self.locked = True
        return True

    def unlock(self):
        self.locked = False

    def _device(self, address):
        if not self.locked:
            raise RuntimeError("Function requires lock")
        self.transfers += 1
        d = I2CBus.devices.get(address)
        if d is None:
            raise self.nack
        return d

    def writeto(self, address, buffer, *, start=0, end=None):
        self._device(address).write(buffer, start, len(buffer) if end is None else end)

    def readfrom_into(self, address, buffer, *, start=0, end=None):
        self._device(address).read(buffer, start, len(buffer) if end is None else end)

    def writeto_then_readfrom(self, address, out_buffer, in_buffer, *, out_start=0, out_end=None, in_start=0,
                              in_end=None):
        d = self._device(address)
        d.write(out_buffer, out_start, len(out_buffer) if out_end is None else out_end)
        d.read(in_buffer, in_start, len(in_buffer) if in_end is None else in_end)

    def scan(self):
        if not self.locked:
            raise RuntimeError("Function requires lock")
        return sorted(I2CBus.devices)

    def deinit(self):
        for p in self.pins:
            p.release()


BUSES = []


# ---------------------------------------------------------------- busio.UART: a Modbus slave on RS-485

class Parity:
    EVEN = "EVEN"
    ODD = "ODD"


class SlaveUART:
    """busio.UART wired to an RS-485 transceiver with one Modbus slave (unit 1, holding registers 0..7)
    behind it. write() takes the whole buffer only, readinto() too (None when nothing came); each request
    notes the DE pin's level in `log` (H high while writing, L after), and the slave's answer is queued."""

    Parity = Parity

    def __init__(self, tx, rx, *, baudrate=9600, bits=8, parity=None, stop=1, timeout=1, receiver_buffer_size=64):
        if not isinstance(timeout, (int, float)) or timeout < 0 or timeout > 100:
            raise ValueError("timeout must be 0.0-100.0")
        tx.claim("busio.UART")
        rx.claim("busio.UART")
        self.pins = (tx, rx)
        self.args = (tx.num, rx.num, baudrate, bits, parity, stop, timeout, receiver_buffer_size)
        self.regs = array("H", bytearray(16))
        self.q = bytearray(64)
        self.n = 0
        self.de = None  # the BoardPin of the transceiver's DE
        self.log = bytearray(64)
        self.n_log = 0
        self.requests = 0
        UARTS.append(self)

    def note(self, c):
        if self.n_log < len(self.log):
            self.log[self.n_log] = c
            self.n_log += 1

    @property
    def in_waiting(self):
        return self.n

    def readinto(self, buf):
        n = self.n
        if n == 0:
            return None
        if n > len(buf):
            n = len(buf)
        for i in range(n):
            buf[i] = self.q[i]
        for i in range(n, self.n):
            self.q[i - n] = self.q[i]
        self.n -= n
        return n

    def write(self, buf):
        self.note(72 if self.de is not None and self.de.out == 1 else 76)
        self.requests += 1
        # fc 3 from unit 1: the registers asked for
        start = (buf[2] << 8) | buf[3]
        count = (buf[4] << 8) | buf[5]
        q = self.q
        q[0] = 1
        q[1] = 3
        q[2] = 2 * count
        for i in range(count):
            q[3 + 2 * i] = self.regs[start + i] >> 8
            q[4 + 2 * i] = self.regs[start + i] & 0xFF
        m = 3 + 2 * count
        crc = rtu.crc16(q, m)
        q[m] = crc & 0xFF
        q[m + 1] = crc >> 8
        self.n = m + 2
        return len(buf)

    def reset_input_buffer(self):
        self.n = 0

    def deinit(self):
        for p in self.pins:
            p.release()


UARTS = []


# ---------------------------------------------------------------- installing the fake modules

def _install(t=0):
    """Fresh fakes for CircuitPython's modules; machine hidden, so boardcfg.hal() picks firmware/cp_hal.py."""
    saved = {}
    for name in _FAKES:
        saved[name] = sys.modules.get(name)
    board = _Module()
    mc = _Module()
    mc.pin = _Module()
    pins = [BoardPin(n) for n in range(30)]
    for n in range(29):  # the Pico's silkscreen names; GPIO29 (VSYS/3) only by its chip name
        setattr(board, "GP%d" % n, pins[n])
    for n in range(30):
        setattr(mc.pin, "GPIO%d" % n, pins[n])
    dio = _Module()
    dio.DigitalInOut = DigitalInOut
    dio.Direction = Direction
    dio.Pull = Pull
    aio = _Module()
    aio.AnalogIn = AnalogIn
    kp = _Module()
    kp.Keys = Keys
    kp.Event = Event
    cio = _Module()
    cio.Counter = Counter
    cio.Edge = Edge
    bio = _Module()
    bio.I2C = I2CBus
    bio.UART = SlaveUART
    sys.modules["machine"] = None  # CircuitPython has none
    sys.modules["board"] = board
    sys.modules["microcontroller"] = mc
    sys.modules["digitalio"] = dio
    sys.modules["analogio"] = aio
    sys.modules["keypad"] = kp
    sys.modules["countio"] = cio
    sys.modules["busio"] = bio
    ADCS.clear()
    del KEYS[:]
    del BUSES[:]
    del UARTS[:]
    I2CBus.pullups = True
    I2CBus.devices = {}
    Counter.rp2040 = True
    at(t)
    return saved, pins


def _restore(saved):
    for name in _FAKES:
        if name in sys.modules:
            del sys.modules[name]
        if saved[name] is not None:
            sys.modules[name] = saved[name]


# ---------------------------------------------------------------- machine-like fakes: the IRQ path to compare with

class IrqPin:
    """machine.Pin as the rp2 port has it, on the same BoardPins: the IRQ handler runs at each edge."""
    IN = 0
    OUT = 1
    PULL_UP = 1
    PULL_DOWN = 2
    IRQ_FALLING = 4
    IRQ_RISING = 8
    board = None  # the BoardPins

    def __init__(self, num, mode=-1, pull=-1):
        self.p = IrqPin.board[num]
        self.pull = pull
        self.handler = None
        self.trigger = 0
        self.p.irq = self  # drive() calls edge(level)

    def value(self):
        return self.p.level

    def irq(self, handler=None, trigger=12, hard=False):
        self.handler = handler
        self.trigger = trigger

    def edge(self, level):
        if self.handler is not None and self.trigger & (self.IRQ_RISING if level else self.IRQ_FALLING):
            self.handler(self)


def _snapshot(r, out):
    # what one poll wrote: the readings the engine turns into lines (fresh flags cleared for the next)
    for s in range(r.n_signals):
        if r.fresh[s]:
            out.append((s, r.value[s], r.why[s], r.detail[s], r.at[s]))
            r.fresh[s] = 0
    for c in range(r.n_contacts):
        if r.cfresh[c]:
            out.append((-1 - c, r.closed[c], r.cwhy[c], r.cat[c]))
            r.cfresh[c] = 0


# ---------------------------------------------------------------- SHA-256 on every hashlib

ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
HMAC_RFC4231_1 = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"


def _hex(b):
    return "".join("%02x" % x for x in b)


def _sha_checks():
    assert _hex(compat.sha256(b"abc").digest()) == ABC
    h = compat.sha256()
    h.update(b"a")
    h.update(b"bc")
    assert _hex(h.digest()) == ABC
    assert plantcfg.digest(b"abc") == ABC[:16]
    # RFC 4231 test case 1 (a 20-byte key of 0x0b, "Hi There"): the link's HMAC
    assert _hex(frame_codec.Signer(b"\x0b" * 20).mac(b"Hi There")) == HMAC_RFC4231_1


def test_sha256_helper_on_every_hashlib():
    import hashlib as real

    _sha_checks()  # the interpreter's own hashlib
    ref = getattr(real, "sha256", None) or (lambda data=b"": real.new("sha256", data))
    fake = _Module()  # CircuitPython on a board: hashlib.new("sha256", data) and no hashlib.sha256
    calls = [0]

    def new(name, data=b""):
        if name != "sha256":
            raise ValueError("unsupported hash type")
        calls[0] += 1
        return ref(data)

    fake.new = new
    saved = sys.modules.get("hashlib")
    sys.modules["hashlib"] = fake
    try:
        _sha_checks()
        # every hash went through new(): compat's two and the description's; the link's HMAC needs no
        # hashlib on a board (shared/sha256.py), only CPython's goes through it
        assert calls[0] >= 3, calls[0]
        del fake.new  # a hashlib with neither: the description's hash is "", as without hashlib
        assert plantcfg.digest(b"abc") == ""
        testkit.raises(AttributeError, compat.sha256, b"abc")
    finally:
        if saved is not None:
            sys.modules["hashlib"] = saved
        else:
            del sys.modules["hashlib"]


# ---------------------------------------------------------------- CircuitPython's tick clock

def test_circuitpython_ticks_carry_supervisor_wraps():
    # shared.compat as a board's CircuitPython loads it: a time module without ticks_ms, supervisor.ticks_ms
    # wrapping at 2**29 (65 s after power-on the first time); a diff across that wrap must stay right
    import shared

    raw = array("i", [0])
    t = _Module()
    t.monotonic = lambda: 0.0
    sup = _Module()
    sup.ticks_ms = lambda: raw[0]
    old = sys.modules["shared.compat"]
    saved = sys.modules.get("time"), sys.modules.get("supervisor")
    sys.modules["time"] = t
    sys.modules["supervisor"] = sup
    del sys.modules["shared.compat"]
    try:
        cp = __import__("shared.compat", None, None, ("ticks_ms",))
        assert cp is not old
        raw[0] = 0x1FFFFFFD
        a = cp.ticks_ms()
        raw[0] = 2
        b = cp.ticks_ms()
        assert b == 0x20000002 and cp.ticks_diff(b, a) == 5, (b, cp.ticks_diff(b, a))
        raw[0] = 0x1FFFFFFF
        c = cp.ticks_ms()
        raw[0] = 1
        d = cp.ticks_ms()
        assert c == MASK30 and d == 1 and cp.ticks_diff(d, c) == 2
        assert cp.ticks_diff(cp.ticks_add(d, 1000), c) == 1002
    finally:
        sys.modules["shared.compat"] = old
        shared.compat = old
        for name, mod in (("time", saved[0]), ("supervisor", saved[1])):
            if mod is not None:
                sys.modules[name] = mod
            elif name in sys.modules:
                del sys.modules[name]


# ---------------------------------------------------------------- choosing the adapters

def test_defaults_take_cp_hal_where_there_is_no_machine():
    saved, pins = _install()
    try:
        assert boardcfg.hal("Pin") is cp_hal.Pin and boardcfg.hal("ADC") is cp_hal.ADC
        assert boardcfg.hal("I2C") is cp_hal.I2C
        r = rd.Readings(4, 2)
        a = analog.AnalogInputs(r, [[0, 26, 1, 1, 1, 0, 1, 0, 0, 100]], 0)
        assert isinstance(a._adc[0], cp_hal.ADC) and ADCS[26].p is pins[26] and pins[26].user == "analogio"
        c = contacts.Contacts(r, [[0, 5, 1, 0, 10]], 0)
        assert c._keys is not None and c.hard == 0 and pins[5].user == "keypad"
        p = pulses.PulseCounters(r, [[1, 7, 0, 1, 0, 0, 1000, 1, 1]], 0)
        assert p._ctr is not None and pins[7].counter.kind == Edge.RISE and pins[7].pull == Pull.UP
        i = i2c_sensors.I2CSensors(r, [], 0, [[1, 2, 3, 100000]])
        bus = i.buses[0]
        assert isinstance(bus, cp_hal.I2C) and BUSES[0].pins == (pins[3], pins[2])
        assert BUSES[0].frequency == 100000
        c.close()
        p.close()
        assert pins[5].user is None and pins[7].user is None  # the pins are free for the next description
        inp = cp_hal.Pin(6, cp_hal.Pin.IN, cp_hal.Pin.PULL_UP)  # machine.Pin's face over digitalio
        assert pins[6].user == "digitalio" and inp._io.pull == Pull.UP and inp.value() == 0
        pins[6].level = 1
        assert inp.value() == 1
        out = cp_hal.Pin(8, cp_hal.Pin.OUT, value=1)
        assert pins[8].out == 1
        out.value(0)
        assert pins[8].out == 0 and out.value() == 0
        testkit.raises(AttributeError, inp.value, 1)  # digitalio: an input's value cannot be set
        # with a machine module (MicroPython) the defaults are machine's
        m = _Module()
        m.Pin = IrqPin
        sys.modules["machine"] = m
        assert boardcfg.hal("Pin") is IrqPin
    finally:
        _restore(saved)


# ---------------------------------------------------------------- ADC

LOOP = [0, 26, 1, 0, 1, 0, 5, 3, 0, 1000]  # a 4-20 mA loop whose codes are microamps, shown 0..100.00 %


def test_adc_reading_scaled_from_analogin_value():
    saved, pins = _install()
    try:
        r = rd.Readings(4, 0)
        a = analog.AnalogInputs(r, [LOOP, [1, 27, 4, 1, 1650, 15, 5, 0, -2500, 500]], 0)
        ADCS[26].script(12000)
        ADCS[27].script(29000, 29500, 30000, 30656)  # 1.5 V on average, over 4 samples
        a.poll(0)
        assert r.why[0] == rd.GOOD and r.value[0] == 5000, (r.why[0], r.value[0])  # 12 mA: mid range
        assert r.why[1] == rd.GOOD and r.value[1] == 4995, r.value[1]  # 1499 mV: 4.99 bar
        assert ADCS[27].reads == 4
        for ua, why, want in ((3000, rd.LOOP_LOW, 30), (22000, rd.LOOP_HIGH, 220), (20000, rd.GOOD, 10000)):
            ADCS[26].script(ua)
            a.poll(at(CLOCK[0] + 1000))
            assert r.why[0] == why and (r.detail[0] if why != rd.GOOD else r.value[0]) == want, (ua, r.why[0])
        assert a.faults == 2
    finally:
        _restore(saved)


# ---------------------------------------------------------------- contacts: keypad events against the IRQ path

# (contact/DI entries, then per ms of the scenario: the pins to toggle) - bounce bursts, a slow poll,
# active-low with a pull-up, DI signals, debounce 0, across the wrap of the tick clock
ENTRIES = [[0, 10, 1, 2, 20], [1, 11, 0, 1, 10], [0, 13, 1, 2, 10, 7], [1, 14, 0, 0, 0, 100]]


def _contact_run(start, machine_path):
    saved, pins = _install(start)
    try:
        pins[11].level = 1  # a pulled-up input with its switch open
        pins[14].level = 1
        r = rd.Readings(2, 2)
        if machine_path:
            IrqPin.board = pins
            c = contacts.Contacts(r, ENTRIES, CLOCK[0], pin=IrqPin, clock=clock)
        else:
            c = contacts.Contacts(r, ENTRIES, CLOCK[0])  # the default here: cp_hal.Pin, keypad
            assert pins[10].pull == Pull.DOWN and pins[11].pull == Pull.UP and pins[13].pull == Pull.DOWN
            assert pins[14].pull is None and pins[10].keys is not pins[11].keys
        out = []
        for t in range(0, 2300):
            now = at(start + t)
            if 3 <= t <= 7:  # contact 0 closes, bouncing
                drive(pins[10], t & 1)
            if t == 40 or t == 42 or t == 44:  # contact 1 (active low) closes with two bounces
                drive(pins[11], 0 if t != 42 else 1)
            if t == 60:
                drive(pins[13], 1)
                drive(pins[14], 0)
            if 300 <= t < 306:  # contact 0 opens, bouncing, while the loop is away (no polls 290..400)
                drive(pins[10], (t + 1) & 1)
            if 1500 <= t <= 1502:
                drive(pins[14], (t + 1) & 1)
            if 290 <= t < 400 or t % 3:
                continue
            c.poll(now)
            _snapshot(r, out)
        # contact 0 opened while the loop was away: accepted at the first poll after it, 20 ms past its
        # last edge at 305, because the edge times were kept meanwhile
        assert (-1, 0, 0, (start + 402) & MASK30) in out, out
        return out, c.changes
    finally:
        _restore(saved)


def test_contacts_give_the_same_readings_as_with_irqs():
    for start in (0, MASK30 - 50):
        want, n_irq = _contact_run(start, True)
        got, n_keys = _contact_run(start, False)
        assert n_irq == n_keys and n_keys >= 6, (n_irq, n_keys)
        assert len(got) == len(want) and len(want) >= 18, (len(got), len(want))
        for k in range(len(want)):
            assert got[k] == want[k], (start, k, got[k], want[k])


def test_contacts_keypad_overflow_starts_over():
    saved, pins = _install()
    try:
        r = rd.Readings(0, 2)
        c = contacts.Contacts(r, [[0, 10, 1, 2, 20], [1, 12, 1, 2, 20]], 0)
        c.poll(0)
        assert r.closed[0] == 0 and r.closed[1] == 0
        for k in range(81):  # 81 changes between two polls: more than the queue's 64 events
            at(k + 1)
            drive(pins[10], 1 - pins[10].level)
        drive(pins[12], 1)
        c.poll(at(100))
        assert c._keys.overflows == 1 and r.closed[0] == 0
        c.poll(at(104))  # keypad's scan after the reset reports both closed contacts again
        assert r.closed[0] == 0 and r.closed[1] == 0
        c.poll(at(123))
        assert r.closed[0] == 0 and r.closed[1] == 0
        c.poll(at(124))  # 20 ms after those events: both settled closed
        assert r.closed[0] == 1 and r.closed[1] == 1 and c.changes == 2, (r.closed[0], r.closed[1])
    finally:
        _restore(saved)


# ---------------------------------------------------------------- pulses: countio against the IRQ path

PULSE_ENTRIES = [[0, 17, 0, 10, 0, 0, 1000, 1, 1], [1, 19, 1, 100, 0, 0, 1000, 2, 1], [2, 21, 1, 7, 0, 0, 250, 1, 0]]


def _pulse_run(machine_path):
    saved, pins = _install()
    try:
        r = rd.Readings(3, 0)
        if machine_path:
            IrqPin.board = pins
            p = pulses.PulseCounters(r, PULSE_ENTRIES, 0, pin=IrqPin)
        else:
            p = pulses.PulseCounters(r, PULSE_ENTRIES, 0)
            assert pins[17].counter.kind == Edge.RISE and pins[19].counter.kind == Edge.FALL
            assert pins[17].pull == Pull.UP and pins[21].pull is None
        out = []
        for t in range(0, 6000, 5):
            now = at(t)
            if t % 20 == 0:
                pulse(pins[17])
            if t % 15 == 0 and t < 3000:
                pulse(pins[19])
            if t % 10 == 0:
                pulse(pins[21])
            if 2000 < t < 2600:  # the loop away: a rate comes late and is scaled back, a total catches up
                continue
            p.poll(now)
            _snapshot(r, out)
        return out, p.late
    finally:
        _restore(saved)


def test_pulses_counted_by_countio_give_the_same_rates_and_totals():
    want, late_irq = _pulse_run(True)
    got, late = _pulse_run(False)
    assert late == late_irq and late >= 1
    assert len(got) == len(want) and len(want) > 30, (len(got), len(want))
    for k in range(len(want)):
        assert got[k] == want[k], (k, got[k], want[k])
    # the last readings: 251 pulses x 10 by 5 s; none on GP19 after 3 s; 25 pulses a 250 ms x 7
    assert want[-6:] == [(0, 2510, 0, 0, 5000), (1, 0, 0, 0, 5000), (2, 175, 0, 0, 5100), (2, 175, 0, 0, 5350),
                         (2, 175, 0, 0, 5600), (2, 175, 0, 0, 5850)], want[-6:]


def test_countio_reset_keeps_its_count_small_and_loses_nothing():
    saved, pins = _install()
    try:
        r = rd.Readings(1, 0)
        p = pulses.PulseCounters(r, [[0, 17, 0, 1, 0, 0, 100, 1, 0]], 0)
        ctr = pins[17].counter
        ctr.count = cp_hal.COUNT_RESET + 3
        p.poll(0)
        assert p.count[0] == cp_hal.COUNT_RESET + 3 and ctr.count == 0 and ctr.resets == 1
        pulse(pins[17])
        pulse(pins[17])
        p.poll(at(100))
        assert p.count[0] == cp_hal.COUNT_RESET + 5 and r.value[0] == (cp_hal.COUNT_RESET + 5) & MASK30
        Counter.rp2040 = False  # ESP32-S3: both edges, any pin
        b = pulses.PulseCounters(r, [[0, 16, 0, 1, 0, 0, 100, 3, 2]], 0)
        for _ in range(4):
            pulse(pins[16])
        b.poll(at(200))
        assert b.count[0] == 8 and pins[16].pull == Pull.DOWN
    finally:
        _restore(saved)


# ---------------------------------------------------------------- I2C through busio

TC_ENTRY = [3, 0, 0x60, mcp9600.TYPE_J, 25, 2, 0, 1000]  # 1/16 C -> hundredths of a C
ADS_LOOP = [0, 0, 0x48, 0, 1, 0, 13653, 14, 5, 3, 0, 1000]  # AIN0: 4-20 mA through 150 Ohm at +-4.096 V


def test_mcp9600_and_ads1115_through_busio():
    saved, pins = _install()
    try:
        tc = mcp9600_chip(1368)  # 85.5 C
        ads = ADS1115Chip()
        ads.inputs[0] = 14400  # 1.8 V: 12 mA
        I2CBus.devices = {0x60: tc, 0x48: ads}
        r = rd.Readings(6, 0)
        s = i2c_sensors.I2CSensors(r, [TC_ENTRY, ADS_LOOP], 0, [[0, 4, 5, 100000]], max_transfers=2)
        bus = BUSES[0]
        assert bus.pins == (pins[5], pins[4]) and bus.frequency == 100000
        for t in (0, 1, 9, 321):
            s.poll(at(t))
            assert not bus.locked  # every transfer gave the lock back
        assert tc.regs[2 * mcp9600.SENSOR_CONFIG] == 0x10 and tc.writes == 1  # type J, written with its register
        assert r.why[3] == rd.GOOD and r.value[3] == 8550, (r.why[3], r.value[3])
        assert r.why[0] == rd.GOOD and abs(r.value[0] - 5000) <= 1, (r.why[0], r.value[0])
        assert (ads.regs[2] << 8 | ads.regs[3]) == 0xC383 & 0x7FFF  # AIN0/GND, +-4.096 V, single-shot, done
        # the adapter on its own: machine.I2C's other methods
        i2c = s.buses[0]
        assert i2c.scan() == [0x48, 0x60]
        got = bytearray(2)
        assert i2c.writeto(0x60, b"\x20") == 1
        i2c.readfrom_into(0x60, got)
        assert got == b"\x40\x14"
        dev = mcp9600.MCP9600(i2c, 0x60)
        assert dev.device_id() == 0x40 and dev.revision() == 0x14 and dev.celsius() == 85.5
        i2c.writeto_mem(0x60, 0x10, bytearray(range(20)))  # longer than the preallocated buffer: grows once
        assert tc.regs[0x20] == 0 and tc.regs[0x20 + 19] == 19
    finally:
        _restore(saved)


def test_i2c_faults_are_bad_then_recover():
    saved, pins = _install()
    try:
        I2CBus.pullups = False  # nothing on the bus yet: busio refuses it, the node does not
        r = rd.Readings(6, 0)
        s = i2c_sensors.I2CSensors(r, [TC_ENTRY], 0, [[0, 4, 5, 100000]])
        s.poll(0)
        assert r.why[3] == rd.I2C and r.detail[3] == 5 and not BUSES  # EIO until there are pull-ups
        I2CBus.pullups = True  # the breakout plugged in, but its chip is not at 0x60
        s.poll(at(1000))
        assert r.why[3] == rd.I2C and r.detail[3] == 19 and len(BUSES) == 1 and not BUSES[0].locked  # NACK
        I2CBus.devices = {0x60: mcp9600_chip(320)}
        BUSES[0].locked = True  # someone else holds the bus
        s.poll(at(2000))
        assert r.why[3] == rd.I2C and r.detail[3] == 16
        BUSES[0].locked = False
        for t in (3000, 3001, 3321):
            s.poll(at(t))
        assert r.why[3] == rd.GOOD and r.value[3] == 2000 and s.errors == 3
    finally:
        _restore(saved)


# ---------------------------------------------------------------- Modbus over busio.UART with DE

BUS = [1, 4, 5, 3, 115200, 1, 1, 100, 0]  # UART1 on GP4/GP5, DE on GP3, 115200 8E1, 100 ms timeout
PROF = {"uart": {"id": 0, "tx": 0, "rx": 1}}


def _modbus_master(pins):
    u, de = boardcfg.open_bus(PROF, BUS, impl="circuitpython")
    fake = UARTS[0]
    fake.de = pins[3]
    fake.regs[0] = 0xFB2E  # int16 -1234
    fake.regs[1] = 50000
    r = rd.Readings(2, 0)
    units = [[0, 1, 100, [[3, 0, 2]]]]
    signals = [[0, 0, 0, 0, modbus.INT16, 0, 0, -1, 1, 0, 0], [1, 0, 0, 1, modbus.UINT16, 0, 0, -1, 1, 0, 0]]
    return modbus.ModbusMaster(u, de, BUS, units, signals, [], r, 0), r, u, de, fake


def test_modbus_over_busio_uart_toggles_de():
    import os

    if os.getenv("EDGETWIN_UART"):
        testkit.skip("on the virtual board open_bus gives the bus's pty")
    saved, pins = _install()
    try:
        m, r, u, de, fake = _modbus_master(pins)
        assert isinstance(u, uart_cp.BusioUART) and isinstance(de, cp_hal.Pin)
        assert fake.args == (4, 5, 115200, 8, Parity.EVEN, 1, 0.0, 512), fake.args
        assert pins[3].user == "digitalio" and pins[3].out == 0  # DE low: listening
        assert not hasattr(u, "flush")  # so the master waits out the request's air time itself
        for t in range(8):
            m.poll(at(t))
        assert m.answers == 1 and r.why[0] == rd.GOOD and r.value[0] == -1234 and r.value[1] == 50000
        assert bytes(fake.log[:fake.n_log]) == b"H" and pins[3].out == 0  # high while writing, low after
        for t in range(8, 400):
            m.poll(at(t))
        assert fake.requests == 4 and m.answers == 4 and bytes(fake.log[:fake.n_log]) == b"HHHH"
    finally:
        _restore(saved)


# ---------------------------------------------------------------- bad pins and buses: one clear error

def test_bad_pins_and_buses_give_one_clear_error():
    import os

    saved, pins = _install()
    try:
        r = rd.Readings(4, 4)
        e = testkit.raises(ValueError, analog.AnalogInputs, r, [[0, 5, 1, 0, 1, 0, 1, 0, 0, 100]], 0)
        assert "GPIO5 has no ADC" in str(e) and "ADC capabilities" in str(e), str(e)
        e = testkit.raises(ValueError, analog.AnalogInputs, r, [[0, 40, 1, 0, 1, 0, 1, 0, 0, 100]], 0)
        assert "GP40" in str(e) and "check the pin" in str(e), str(e)
        e = testkit.raises(ValueError, contacts.Contacts, r, [[0, 40, 1, 2, 10]], 0)
        assert "GP40" in str(e) and "[40]" in str(e), str(e)
        e = testkit.raises(ValueError, contacts.Contacts, r, [[0, 8, 1, 2, 10], [1, 8, 1, 2, 10]], 0)
        assert "GP8 in use" in str(e), str(e)
        e = testkit.raises(ValueError, contacts.Contacts, r, [[0, 8, 1, 2, 10], [1, 9, 1, 3, 10]], 0)
        assert "pull=3" in str(e) and pins[8].user is None, str(e)  # nothing left claimed
        e = testkit.raises(ValueError, pulses.PulseCounters, r, [[0, 16, 0, 1, 0, 0, 100, 1, 1]], 0)
        assert "GPIO16" in str(e) and "Channel B" in str(e) and "odd GPIO" in str(e), str(e)
        e = testkit.raises(ValueError, pulses.PulseCounters, r, [[0, 17, 0, 1, 0, 0, 100, 3, 1]], 0)
        assert "RISE_AND_FALL" in str(e), str(e)
        e = testkit.raises(ValueError, i2c_sensors.I2CSensors, r, [], 0, [[0, 4, 7, 100000]])
        assert "[0, 4, 7, 100000]" in str(e) and "Invalid pins" in str(e), str(e)
        if os.getenv("EDGETWIN_UART"):
            return  # on the virtual board open_bus gives the bus's pty
        e = testkit.raises(boardcfg.BoardConfigError, boardcfg.open_bus, PROF, [1, 4, 5, 40] + BUS[4:],
                           "circuitpython")
        assert pins[4].user is None  # the UART it had opened was closed again
        assert "DE pin GPIO40" in str(e) and "GP40" in str(e), str(e)
        e = testkit.raises(uart.HalError, boardcfg.open_bus, PROF, [1, 40, 5, 3] + BUS[4:], "circuitpython")
        assert "GP40" in str(e) and "RS-485 bus's tx/rx" in str(e), str(e)
        e = testkit.raises(boardcfg.BoardConfigError, boardcfg.open_bus, PROF, [0] + BUS[1:], "circuitpython")
        assert "UART0 is the link" in str(e), str(e)
    finally:
        _restore(saved)


# ---------------------------------------------------------------- allocation-free polls

class _Run:
    """State for a locked loop (run_locked passes one argument)."""

    def __init__(self, source, n, step=1):
        self.source = source
        self.n = n
        self.step = step
        self.pins = None
        self.t = 0


def _poll(s):
    for _ in range(s.n):
        s.t += s.step
        CLOCK[0] = s.t
        s.source.poll(s.t)


def _poll_inputs(s):
    # edges from the loop, as the world would make them between polls
    pins = s.pins
    for k in range(s.n):
        s.t += s.step
        CLOCK[0] = s.t
        if k % 7 < 3:
            for p in pins:
                drive(p, 1 - p.level)
        s.source.poll(s.t)


def test_every_cp_poll_path_allocates_nothing():
    saved, pins = _install()
    try:
        r = rd.Readings(6, 4)
        a = analog.AnalogInputs(r, [LOOP, [1, 27, 16, 0, 1, 0, 5, 3, 0, 3]], 0)
        ADCS[26].script(12000, 12100)
        ADCS[27].script(1000)
        testkit.run_locked(_poll, _Run(a, 300))
        assert a.readings > 100 and r.why[0] == rd.GOOD and r.why[1] == rd.LOOP_LOW

        c = contacts.Contacts(r, [[0, 10, 1, 2, 4], [2, 11, 0, 1, 0, 9], [1, 12, 1, 0, 3]], 0)
        s = _Run(c, 2000)
        s.pins = [pins[10], pins[11], pins[12]]
        testkit.run_locked(_poll_inputs, s)
        assert c.changes > 50 and r.cwhy[0] == rd.GOOD and r.why[2] == rd.GOOD

        p = pulses.PulseCounters(r, [[3, 17, 0, 10, 0, 0, 50, 1, 1], [4, 19, 1, 100, 0, 0, 19, 2, 0]], 0)
        s = _Run(p, 2000, step=3)
        s.pins = [pins[17], pins[19]]
        testkit.run_locked(_poll_inputs, s)
        assert p.count[0] > 300 and r.why[4] == rd.GOOD and p.late > 0

        tc = mcp9600_chip(1368)
        ads = ADS1115Chip()
        ads.inputs[0] = 14400
        I2CBus.devices = {0x60: tc, 0x48: ads}
        i2c = i2c_sensors.I2CSensors(r, [[5, 0, 0x60, 1, 25, 2, 0, 1000], ADS_LOOP], 0, [[0, 8, 9, 100000]],
                                     max_transfers=2)
        s = _Run(i2c, 1500, step=2)
        testkit.run_locked(_poll, s)
        assert r.why[5] == rd.GOOD and r.value[5] == 8550 and r.why[0] == rd.GOOD
        del I2CBus.devices[0x60]  # a NACK: the fake's OSError is made once, the adapter adds nothing
        s.n = 700
        testkit.run_locked(_poll, s)
        assert r.why[5] == rd.I2C and r.detail[5] == 19 and i2c.errors > 0 and not BUSES[0].locked

        m, r2, u, de, fake = _modbus_master(pins)
        testkit.run_locked(_poll, _Run(m, 500))
        assert m.answers >= 4 and r2.value[0] == -1234 and r2.why[1] == rd.GOOD
    finally:
        _restore(saved)
