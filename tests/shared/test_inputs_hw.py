# test_inputs_hw.py: the node's ADC, contact, pulse and I2C sensor sources, driven by fake hardware.
# The fakes behave like the real parts where it matters: a Pin calls its irq handler on the edges its
# trigger asks for, the ESP32's Pin refuses hard=True, an ADC returns scripted read_u16 codes, an I2C
# bus raises OSError for a device that is absent or faulted, an MCP9600 answers its id and temperature
# registers, and an ADS1115's conversion register keeps the old result until ~7.8 ms after a start.
# Every fake allocates nothing once built, so the locked loops prove the sources' poll paths do not.
import sys
from array import array

import testkit
from firmware import ads1115, analog, contacts, i2c_sensors, mcp9600, pulses
from shared import readings as rd
from shared.compat import MASK30

CLOCK = array("i", [0])  # the test's ticks_ms: what the IRQ handlers and the fake ADS1115 read
PINS = {}  # every FakePin made, by GPIO number
ADCS = {}  # every FakeADC made, by GPIO number


def clock():
    return CLOCK[0]


def at(t):
    CLOCK[0] = t & MASK30
    return CLOCK[0]


def _reset(t=0):
    PINS.clear()
    ADCS.clear()
    return at(t)


# ---------------------------------------------------------------- fakes

class FakePin:
    """machine.Pin as the rp2 port has it (IRQ_FALLING 4, IRQ_RISING 8, hard IRQs)."""
    IN = 0
    OUT = 1
    PULL_UP = 1
    PULL_DOWN = 2
    IRQ_FALLING = 4
    IRQ_RISING = 8

    def __init__(self, num, mode=-1, pull=-1):
        self.num = num
        self.mode = mode
        self.pull = pull
        self.level = 0
        self.handler = None
        self.trigger = 0
        self.hard = None
        PINS[num] = self

    def value(self):
        return self.level

    def irq(self, handler=None, trigger=12, hard=False):
        self.handler = handler
        self.trigger = trigger
        self.hard = hard

    def drive(self, level):
        """The outside world sets the pin; the edge's IRQ runs if its trigger asks for it."""
        if level == self.level:
            return
        self.level = level
        if self.handler is not None and self.trigger & (self.IRQ_RISING if level else self.IRQ_FALLING):
            self.handler(self)

    def pulse(self):
        self.drive(1 - self.level)
        self.drive(1 - self.level)


class FakePinEsp32(FakePin):
    """machine.Pin as the esp32 port has it: irq() takes no `hard` (TypeError), IRQ_RISING 1, IRQ_FALLING 2."""
    IRQ_RISING = 1
    IRQ_FALLING = 2

    def irq(self, handler=None, trigger=3, **kw):
        if kw:
            raise TypeError("extra keyword arguments given")
        FakePin.irq(self, handler, trigger)


class FakeADC:
    """machine.ADC: read_u16() returns the scripted codes in turn (one code: always that)."""

    def __init__(self, pin):
        self.pin = pin
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

    def read_u16(self):
        v = self.codes[self.i]
        self.i += 1
        if self.i == self.n:
            self.i = 0
        self.reads += 1
        return v


class FakeADCEsp32(FakeADC):
    ATTN_0DB = 0
    ATTN_11DB = 3

    def __init__(self, pin):
        FakeADC.__init__(self, pin)
        self.att = self.ATTN_0DB

    def atten(self, a):
        self.att = a


class FakeMCP9600:
    """The registers the driver uses: 0x00 hot junction, 0x05 sensor configuration, 0x20 device id."""

    def __init__(self, dev_id=0x40):
        self.regs = bytearray(2 * 0x21)
        self.regs[2 * 0x20] = dev_id
        self.regs[2 * 0x20 + 1] = 0x14  # silicon revision
        self.writes = 0

    def set_temp(self, sixteenths):
        v = sixteenths & 0xFFFF
        self.regs[0] = v >> 8
        self.regs[1] = v & 0xFF

    def read(self, reg, buf):
        for j in range(len(buf)):
            buf[j] = self.regs[2 * reg + j]

    def write(self, reg, buf):
        self.writes += 1
        for j in range(len(buf)):
            self.regs[2 * reg + j] = buf[j]


class FakeADS1115:
    """Single-shot conversions: a start (config with OS=1) converts the input its MUX names, ready 8 ms
    later (the CLOCK's ms); until then the conversion register holds the previous result and OS reads 0.
    `log` records S<ch> for each start and R<ch> for each read of a finished conversion, X for an early one."""

    def __init__(self):
        self.inputs = array("i", bytearray(16))  # what each AINx converts to (int16)
        self.config = 0x8583  # power-up: idle, AIN0/AIN1, +-2.048 V, single-shot
        self.conv = 0
        self.ch = -1
        self.started = 0
        self.log = bytearray(64)
        self.n = 0

    def _note(self, a, b):
        if self.n + 2 <= len(self.log):
            self.log[self.n] = a
            self.log[self.n + 1] = b
            self.n += 2

    def _finish(self):
        if self.ch >= 0 and CLOCK[0] - self.started >= 8:
            self.conv = self.inputs[self.ch] & 0xFFFF
            self.config |= 0x8000
            self.ch = -1

    def write(self, reg, buf):
        if reg == ads1115.CONFIG:
            cfg = (buf[0] << 8) | buf[1]
            self.config = cfg & 0x7FFF
            if cfg & 0x8000:
                self.ch = ((cfg >> 12) & 7) - 4
                self.started = CLOCK[0]
                self._note(83, 48 + self.ch)  # "S<ch>"

    def read(self, reg, buf):
        self._finish()
        v = self.config if reg == ads1115.CONFIG else self.conv
        if reg == ads1115.CONVERSION:
            self._note(88 if self.ch >= 0 else 82, 48 + ((self.config >> 12) & 7) - 4)  # X or R
        buf[0] = v >> 8
        buf[1] = v & 0xFF

    def history(self):
        return bytes(self.log[:self.n])


class FakeI2C:
    """machine.I2C with devices by address; an absent device or a set fault raises OSError (made once)."""

    def __init__(self, bus_id, sda=None, scl=None, freq=400000):
        self.args = (bus_id, sda, scl, freq)
        self.devices = {}
        self.fault = None  # an OSError every transfer raises while set
        self.absent = OSError(5)  # EIO: no ACK
        self.transfers = 0

    def _device(self, addr):
        self.transfers += 1
        if self.fault is not None:
            raise self.fault
        d = self.devices.get(addr)
        if d is None:
            raise self.absent
        return d

    def readfrom_mem_into(self, addr, memaddr, buf):
        self._device(addr).read(memaddr, buf)

    def writeto_mem(self, addr, memaddr, buf):
        self._device(addr).write(memaddr, buf)


class _Module:
    """An object standing in for a module in sys.modules."""


# ---------------------------------------------------------------- helpers

def _adc(entries, n_signals=4, max_reads=16, adc=FakeADC):
    r = rd.Readings(n_signals, 0)
    return r, analog.AnalogInputs(r, entries, CLOCK[0], adc=adc, pin=FakePin, max_reads=max_reads)


def _took(r, s):
    """1 if signal s got a reading since the last call (and clears the flag), else 0."""
    f = r.fresh[s]
    r.fresh[s] = 0
    return f


def _ctook(r, c):
    f = r.cfresh[c]
    r.cfresh[c] = 0
    return f


# a 4-20 mA loop whose fake ADC codes are microamps (mul1 1, shift1 0), shown as 0..100.0 % in hundredths:
# (uA - 4000) * 5 >> 3 maps 0..16000 onto 0..10000
LOOP = [0, 26, 1, 0, 1, 0, 5, 3, 0, 1000]


# ---------------------------------------------------------------- ADC

def test_loop_4_20_ma_scaling():
    _reset()
    r, a = _adc([LOOP])
    ADCS[26].script(12000)
    a.poll(0)
    assert r.why[0] == rd.GOOD and r.value[0] == 5000, (r.why[0], r.value[0])  # 12 mA: mid range
    for ua, want in ((4000, 0), (20000, 10000), (8000, 2500)):
        ADCS[26].script(ua)
        a.poll(at(CLOCK[0] + 1000))
        assert r.value[0] == want and r.why[0] == rd.GOOD, (ua, r.value[0])
    # the same loop compiled for a real Pico: 150 Ohm to GND, 3.3 V over 65535 codes,
    # uA = code * 3.3e6 / 65535 / 150 = code * 0.3357 ~ code * 11000 >> 15
    _reset()
    r, a = _adc([[0, 27, 1, 0, 11000, 15, 5, 3, 0, 1000]])
    ADCS[27].script(35746)  # 1.8 V: 12 mA through 150 Ohm
    a.poll(0)
    assert abs(r.value[0] - 5000) <= 2, r.value[0]
    assert PINS[27].num == 27 and ADCS[27].pin is PINS[27]


def test_namur_low_and_high_are_bad_then_recover():
    _reset()
    r, a = _adc([LOOP])
    fake = ADCS[26]
    for ua, why, detail in ((3000, rd.LOOP_LOW, 30), (0, rd.LOOP_LOW, 0), (3599, rd.LOOP_LOW, 35),
                            (22000, rd.LOOP_HIGH, 220), (30000, rd.LOOP_HIGH, 255), (21001, rd.LOOP_HIGH, 210)):
        fake.script(ua)
        a.poll(at(CLOCK[0] + 1000))
        assert r.why[0] == why and r.detail[0] == detail, (ua, r.why[0], r.detail[0])
        assert _took(r, 0)
    fake.script(3600)  # the limits themselves are still good
    a.poll(at(CLOCK[0] + 1000))
    assert r.why[0] == rd.GOOD and r.value[0] == -250, (r.why[0], r.value[0])
    fake.script(21000)
    a.poll(at(CLOCK[0] + 1000))
    assert r.why[0] == rd.GOOD and r.value[0] == 10625 and r.detail[0] == 0
    assert a.faults == 6 and a.readings == 8


def test_averaging_and_read_budget():
    _reset()
    # 4 samples of a noisy voltage: the reading is their mean
    r, a = _adc([[1, 26, 4, 1, 1, 0, 1, 0, 0, 500]])
    ADCS[26].script(1000, 2000, 3000, 6000)
    a.poll(0)
    assert r.value[1] == 3000 and a.reads == 4 and ADCS[26].reads == 4
    # three channels of 16 samples and a budget of 16 reads a poll: one channel per poll, in turn
    _reset()
    entries = [[s, 26 + s, 16, 1, 1, 0, 1, 0, 0, 1000] for s in range(3)]
    r, a = _adc(entries, max_reads=16)
    for s in range(3):
        ADCS[26 + s].script(100 * (s + 1), 100 * (s + 1) + 2)
    for step in range(3):
        assert a.poll(at(step)) == 16
        assert [_took(r, s) for s in range(3)] == [1 if s == step else 0 for s in range(3)], step
        assert r.value[step] == 100 * (step + 1) + 1
    assert a.poll(at(3)) == 0  # nothing due until the period is over
    # all three are due at 1000 (the cadence of their first period); the turn goes on where it stopped
    assert a.poll(at(1000)) == 16 and _took(r, 2) and not _took(r, 0)
    assert a.poll(at(1001)) == 16 and _took(r, 0) and a.poll(at(1002)) == 16 and _took(r, 1)
    # a budget of 32 reads takes two channels a poll
    _reset()
    r, a = _adc(entries, max_reads=32)
    assert a.poll(0) == 32 and a.poll(at(1)) == 16 and a.reads == 48
    testkit.raises(ValueError, analog.AnalogInputs, r, entries, 0, FakeADC, FakePin, 8)


def test_voltage_mode_and_period():
    _reset()
    # 0..3.3 V on 0..65535 codes: mV = code * 1650 >> 15; a 0..10 bar sensor giving 0.5..2.5 V:
    # bar in hundredths = (mV - 500) * 5, as mul2 5, shift2 0, add2 -2500
    r, a = _adc([[2, 28, 8, 1, 1650, 15, 5, 0, -2500, 250]])
    ADCS[28].script(29789)  # 1.5 V
    a.poll(0)
    assert r.value[2] == 4995 and r.why[2] == rd.GOOD, r.value[2]  # 1499 mV: 4.99 bar
    for t in (1, 100, 249):
        assert a.poll(at(t)) == 0
    assert a.poll(at(250)) == 8 and _took(r, 2)
    assert a.poll(at(700)) == 8  # late, less than a period: the cadence goes on at 750
    assert a.poll(at(749)) == 0 and a.poll(at(750)) == 8
    assert a.poll(at(1900)) == 8  # a whole period late: the next one is a period from now
    assert a.poll(at(2149)) == 0 and a.poll(at(2150)) == 8
    assert r.at[2] == 2150


def test_esp32_adc_gets_full_range_and_defaults_from_machine():
    _reset()
    r, a = _adc([[0, 4, 1, 1, 1, 0, 1, 0, 0, 100]], adc=FakeADCEsp32)
    assert ADCS[4].att == FakeADCEsp32.ATTN_11DB
    # with no factories the sources take machine.Pin / ADC / I2C, imported when they are built
    saved = sys.modules.get("machine")
    m = _Module()
    m.Pin = FakePin
    m.ADC = FakeADC
    m.I2C = FakeI2C
    sys.modules["machine"] = m
    try:
        a = analog.AnalogInputs(r, [[0, 26, 1, 1, 1, 0, 1, 0, 0, 100]], 0)
        assert ADCS[26].pin is PINS[26]
        c = contacts.Contacts(rd.Readings(1, 1), [[0, 5, 1, 0, 10]], 0)
        assert PINS[5].handler is not None and c.hard == 1
        p = pulses.PulseCounters(rd.Readings(1, 1), [[0, 6, 0, 1, 0, 0, 1000, 1, 1]], 0)
        assert PINS[6].trigger == FakePin.IRQ_RISING and p.hard == 1
        i = i2c_sensors.I2CSensors(rd.Readings(1, 1), [], 0, [[1, 2, 3, 100000]])
        bus_id, sda, scl, freq = i.buses[0].args
        assert bus_id == 1 and sda is PINS[2] and scl is PINS[3] and freq == 100000
    finally:
        del sys.modules["machine"]
        if saved is not None:
            sys.modules["machine"] = saved


# ---------------------------------------------------------------- contacts

def _contact(entries, n_signals=2, n_contacts=2, pin=FakePin):
    r = rd.Readings(n_signals, n_contacts)
    return r, contacts.Contacts(r, entries, CLOCK[0], pin=pin, clock=clock)


def _debounce_burst(base):
    _reset(base)
    r, c = _contact([[0, 10, 1, 2, 20]])  # closed when high, pull-down, 20 ms
    pin = PINS[10]
    c.poll(at(base))
    assert _ctook(r, 0) and r.closed[0] == 0 and c.state(0) == 0  # the first reading at once
    writes = 0
    for t in range(1, 60):  # the contact closes with bounces for 5 ms; the loop polls every ms
        now = at(base + t)
        if t <= 5:
            pin.drive(t & 1)
        c.poll(now)
        writes += _ctook(r, 0)
        if t < 25:
            assert r.closed[0] == 0, t  # not settled yet: 20 ms after the last edge (t=5)
    assert writes == 1 and r.closed[0] == 1 and c.changes == 1, (writes, c.changes)
    assert r.cat[0] == (base + 25) & MASK30
    assert c.missed == 0


def test_contact_bounce_burst_gives_one_change():
    _debounce_burst(0)
    _debounce_burst(MASK30 - 30)  # across the wrap of the tick clock


def test_contact_slow_poll_still_debounces():
    _reset()
    r, c = _contact([[0, 10, 1, 2, 20], [1, 11, 1, 2, 20]])
    c.poll(0)
    _ctook(r, 0)
    _ctook(r, 1)
    # contact 0 bounces at 3..7 ms and settles closed; contact 1 bounces at 95..98 ms and settles open
    for t in range(3, 8):
        at(t)
        PINS[10].drive(1 - PINS[10].level)
    for t in range(95, 99):
        at(t)
        PINS[11].drive(1 - PINS[11].level)
    c.poll(at(100))  # the main loop was away 100 ms
    assert _ctook(r, 0) and r.closed[0] == 1  # settled 93 ms ago: taken at once
    assert not _ctook(r, 1) and r.closed[1] == 0  # its last edge was 2 ms ago: not yet
    c.poll(at(117))
    assert not _ctook(r, 1)
    c.poll(at(118))  # 20 ms after its last edge: an even number of edges, so it is open as before
    assert not _ctook(r, 1) and c.changes == 1 and c.state(1) == 0
    c.poll(at(1100))  # the once-a-second refresh, of both
    assert _ctook(r, 0) and _ctook(r, 1) and r.closed[0] == 1 and r.closed[1] == 0
    assert c.changes == 1


def test_contact_active_low_pull_and_di_signal():
    _reset()
    r, c = _contact([[1, 12, 0, 1, 10], [0, 13, 1, 2, 10, 7], [1, 14, 0, 0, 0, 100]])
    for num, pull in ((12, FakePin.PULL_UP), (13, FakePin.PULL_DOWN), (14, None)):
        p = PINS[num]
        assert p.mode == FakePin.IN and p.pull == pull, (num, p.mode, p.pull)
        assert p.trigger == FakePin.IRQ_RISING | FakePin.IRQ_FALLING and p.hard is True
    PINS[12].level = 1  # a pulled-up input with the switch open
    PINS[14].level = 1
    c.poll(0)
    assert r.closed[1] == 0 and r.cwhy[1] == rd.GOOD and r.closed[0] == 0  # contact 0 untouched
    assert r.value[0] == 0 and r.why[0] == rd.GOOD  # DI signal 0 open: 0
    assert r.value[1] == 0 and r.why[1] == rd.GOOD
    PINS[12].drive(0)  # the switch closes to GND
    PINS[13].drive(1)
    PINS[14].drive(0)  # debounce 0: taken at the next poll
    c.poll(at(1))
    assert r.value[1] == 100 and r.closed[1] == 0 and r.value[0] == 0
    c.poll(at(10))
    assert r.closed[1] == 1 and r.value[0] == 7 and c.changes == 3
    testkit.raises(ValueError, contacts.Contacts, r, [[0, 1, 1, 3, 10]], 0, FakePin, clock)
    e = testkit.raises(ValueError, contacts.Contacts, r, [[0, 1, 1, 0]], 0, FakePin, clock)
    assert "expected 5" in str(e), str(e)


def test_contact_change_without_edge_and_esp32_soft_irq():
    _reset()
    r, c = _contact([[0, 15, 1, 0, 20]], pin=FakePinEsp32)
    assert c.hard == 0 and PINS[15].hard is False and PINS[15].handler is not None
    assert PINS[15].trigger == FakePinEsp32.IRQ_RISING | FakePinEsp32.IRQ_FALLING
    c.poll(0)
    PINS[15].level = 1  # no IRQ: a missed edge
    c.poll(at(5))
    assert c.missed == 0 and r.closed[0] == 0  # a quiet input's pin is read at the refresh only
    c.poll(at(1000))
    assert c.missed == 1 and r.closed[0] == 0 and _ctook(r, 0)  # seen, refreshed as it was, debounced
    c.poll(at(1019))
    assert r.closed[0] == 0
    c.poll(at(1020))
    assert r.closed[0] == 1 and c.changes == 1
    c.close()
    assert PINS[15].handler is None


# ---------------------------------------------------------------- pulses

def _pulses(entries, pin=FakePin):
    r = rd.Readings(4, 0)
    return r, pulses.PulseCounters(r, entries, CLOCK[0], pin=pin)


def test_pulse_total():
    _reset()
    # a water meter, 10 L a pulse, shown in m3 with 2 decimals (thousandths): 10 a pulse
    r, p = _pulses([[0, 16, 0, 10, 0, 0, 1000, 1, 1], [1, 17, 0, 5, 0, 0, 1000, 3, 0]])
    assert PINS[16].trigger == FakePin.IRQ_RISING and PINS[16].pull == FakePin.PULL_UP
    assert PINS[17].trigger == FakePin.IRQ_RISING | FakePin.IRQ_FALLING and PINS[17].pull is None
    p.poll(0)
    assert _took(r, 0) and r.value[0] == 0 and r.why[0] == rd.GOOD  # a total's first reading at once
    for _ in range(25):
        PINS[16].pulse()
        PINS[17].pulse()
    p.poll(at(999))
    assert not _took(r, 0)
    p.poll(at(1000))
    assert r.value[0] == 250 and r.value[1] == 250 and p.count[1] == 50  # both edges of 17 count
    p.count[0] = 300000  # far past 2**30 / mul: scaled in two halves, still exact
    p.poll(at(2000))
    assert r.value[0] == 3000000, r.value[0]
    p.count[0] = 60000000  # 6e8: more than a board's int holds
    p.poll(at(3000))
    assert r.why[0] == rd.RANGE
    p.count[0] = MASK30  # the next edge wraps the count to 0
    PINS[16].pulse()
    assert p.count[0] == 0
    testkit.raises(ValueError, pulses.PulseCounters, r, [[0, 16, 0, 10, 0, 0, 1000, 0, 1]], 0, FakePin)


def test_pulse_rate_and_late_poll():
    _reset()
    # a flow meter: pulses a second, in hundredths, with an IRQ on the falling edge (esp32 constants)
    r, p = _pulses([[2, 18, 1, 100, 0, 0, 1000, 2, 1]], pin=FakePinEsp32)
    assert PINS[18].trigger == FakePinEsp32.IRQ_FALLING and p.hard == 0
    p.poll(0)
    assert not _took(r, 2) and r.why[2] == rd.NONE_YET  # a rate needs a whole period
    for _ in range(50):
        PINS[18].pulse()
    p.poll(at(1000))
    assert _took(r, 2) and r.value[2] == 5000
    for _ in range(60):
        PINS[18].pulse()
    p.poll(at(2500))  # half a period late: 60 pulses in 1.5 s is 40 a second, not 60
    assert _took(r, 2) and r.value[2] == 4000 and p.late == 1, r.value[2]
    for _ in range(30):
        PINS[18].pulse()
    p.poll(at(3499))
    assert not _took(r, 2)  # the next period started at the late reading
    p.poll(at(3500))
    assert r.value[2] == 3000 and p.late == 1
    p.poll(at(4510))  # 1 % late: scaled (0 pulses either way), not counted as late
    assert r.value[2] == 0 and p.late == 1
    # the scaling helper: exact for short periods, no overflow for long ones
    assert pulses.per_period(60, 1000, 1500) == 40
    assert pulses.per_period(7, 1000, 1000) == 7
    assert pulses.per_period(MASK30, 60000, 120000) == MASK30 // 2
    assert pulses.per_period(1000000, 3600000, 3600001) in (999999, 1000000)


# ---------------------------------------------------------------- I2C sensors

def _i2c(entries, devices, max_transfers=1):
    _reset()
    r = rd.Readings(6, 0)
    s = i2c_sensors.I2CSensors(r, entries, 0, [[0, 4, 5, 100000]], i2c=FakeI2C, pin=FakePin,
                               max_transfers=max_transfers)
    bus = s.buses[0]
    for addr in devices:
        bus.devices[addr] = devices[addr]
    return r, s, bus


# 1/16 C -> hundredths of a C: * 25 >> 2
TC_ENTRY = [3, 0, 0x60, mcp9600.TYPE_J, 25, 2, 0, 1000]


def test_mcp9600_temperature():
    chip = FakeMCP9600()
    chip.set_temp(1368)  # 85.5 C
    r, s, bus = _i2c([TC_ENTRY], {0x60: chip})
    assert s.poll(0) == 1 and chip.writes == 0  # the device id first
    assert s.poll(at(1)) == 1 and chip.regs[2 * 5] == 0x10  # then type J into the sensor configuration
    assert r.why[3] == rd.NONE_YET
    assert s.poll(at(2)) == 0 and s.poll(at(320)) == 0  # one 18-bit conversion of the new type
    assert s.poll(at(321)) == 1
    assert r.why[3] == rd.GOOD and r.value[3] == 8550, r.value[3]
    chip.set_temp(-196)  # -12.25 C
    assert s.poll(at(1320)) == 0
    s.poll(at(1321))
    assert r.value[3] == -1225 and s.transfers == 4 and s.errors == 0
    assert chip.writes == 1 and bus.args[3] == 100000


def test_mcp9600_wrong_device_is_sensor_fault():
    other = FakeMCP9600(dev_id=0x55)
    r, s, bus = _i2c([TC_ENTRY], {0x60: other})
    s.poll(0)
    assert r.why[3] == rd.SENSOR and r.detail[3] == 0x55
    assert s.poll(at(999)) == 0 and other.writes == 0  # never configures a chip it does not know
    bus.devices[0x60] = FakeMCP9600(dev_id=0x41)  # an MCP9601 fitted instead: the same registers
    bus.devices[0x60].set_temp(400)
    for t in (1000, 1001, 1321):
        s.poll(at(t))
    assert r.why[3] == rd.GOOD and r.value[3] == 2500


# an ADS1115 at 0x48: AIN0 a 4-20 mA loop through 150 Ohm at +-4.096 V (125 uV a code:
# uA = code * 0.8333 ~ code * 13653 >> 14), AIN2 a voltage at +-2.048 V (mV = code >> 4)
ADS_LOOP = [0, 0, 0x48, 0, 1, 0, 13653, 14, 5, 3, 0, 1000]
ADS_VOLT = [1, 0, 0x48, 2, 2, 1, 1, 4, 1, 0, 0, 1000]


def test_ads1115_sequences_channels_with_the_conversion_wait():
    chip = FakeADS1115()
    chip.inputs[0] = 14400  # 1.8 V: 12 mA
    chip.inputs[2] = 20000  # 1.25 V
    r, s, bus = _i2c([ADS_LOOP, ADS_VOLT], {0x48: chip})
    assert s.poll(0) == 1
    assert chip.config == 0xC383 & 0x7FFF  # AIN0/GND, +-4.096 V, single-shot, 128 SPS, comparator off
    for t in range(1, 9):
        assert s.poll(at(t)) == 0, t  # converting: no transfer
    assert s.poll(at(9)) == 1 and r.why[0] == rd.GOOD and abs(r.value[0] - 5000) <= 1, r.value[0]
    assert s.poll(at(10)) == 1 and (chip.config >> 12) & 7 == 6 and (chip.config >> 9) & 7 == 2
    assert s.poll(at(18)) == 0
    assert s.poll(at(19)) == 1 and r.value[1] == 1250
    assert s.poll(at(20)) == 0  # both done until the period is over
    assert chip.history() == b"S0R0S2R2", chip.history()
    assert s.poll(at(1000)) == 1 and chip.history()[-2:] == b"S0"
    # a late loop: both due again, read in turn, never two conversions at once
    chip.inputs[0] = 3000  # 0.375 V: 2.5 mA, a broken loop
    for t in (1150, 2000, 2001, 2009, 2010, 2100):
        s.poll(at(t))
    assert chip.history() == b"S0R0S2R2S0R0S2R2S0R0", chip.history()  # never read before it was done
    assert r.why[0] == rd.LOOP_LOW and r.detail[0] == 24, (r.why[0], r.detail[0])


def test_i2c_oserror_is_bad_then_recovers():
    tc = FakeMCP9600()
    tc.set_temp(320)  # 20 C
    adc = FakeADS1115()
    adc.inputs[2] = 16000
    r, s, bus = _i2c([TC_ENTRY, ADS_VOLT], {0x60: tc, 0x48: adc}, max_transfers=2)
    for t in (0, 1, 9, 321):
        s.poll(at(t))
    assert r.why[3] == rd.GOOD and r.value[3] == 2000 and r.why[1] == rd.GOOD and r.value[1] == 1000
    bus.fault = OSError(110)  # ETIMEDOUT: a stuck bus
    s.poll(at(1000))
    s.poll(at(1321))
    assert r.why[3] == rd.I2C and r.detail[3] == 110 and r.why[1] == rd.I2C and r.detail[1] == 110
    assert s.errors == 2
    bus.fault = None
    del bus.devices[0x48]  # the ADS1115's cable pulled: no ACK
    for t in (2000, 2321, 2700):
        s.poll(at(t))
    assert r.why[1] == rd.I2C and r.detail[1] == 5, (r.why[1], r.detail[1])
    assert r.why[3] == rd.I2C  # the MCP9600 was checked again, still to be configured and read
    tc.set_temp(336)
    bus.devices[0x48] = adc
    for t in range(2700, 4700, 5):
        s.poll(at(t))
    assert r.why[3] == rd.GOOD and r.value[3] == 2100 and r.why[1] == rd.GOOD and r.value[1] == 1000
    assert tc.writes == 2  # configured again after the fault: it may have lost power


def test_bad_entries_are_clear():
    r = rd.Readings(2, 2)
    e = testkit.raises(ValueError, analog.AnalogInputs, r, [[0, 26, 17, 0, 1, 0, 1, 0, 0, 100]], 0, FakeADC, FakePin)
    assert "samples" in str(e), str(e)
    e = testkit.raises(ValueError, analog.AnalogInputs, r, [[0, 26, 1, 0, 1, 0, 1, 0, 0, 0]], 0, FakeADC, FakePin)
    assert "period_ms" in str(e), str(e)
    e = testkit.raises(ValueError, i2c_sensors.I2CSensors, r, [[0, 1, 0x60, 0, 1, 0, 0, 100]], 0,
                       [[0, 4, 5, 100000]], FakeI2C, FakePin)
    assert "bus_index 1" in str(e), str(e)
    e = testkit.raises(ValueError, i2c_sensors.I2CSensors, r, [[0, 0, 0x50, 0, 1, 0, 0, 100]], 0,
                       [[0, 4, 5, 100000]], FakeI2C, FakePin)
    assert "0x60..0x67" in str(e), str(e)
    e = testkit.raises(ValueError, i2c_sensors.I2CSensors, r, [[0, 0, 0x48, 4, 1, 0, 1, 0, 1, 0, 0, 100]], 0,
                       [[0, 4, 5, 100000]], FakeI2C, FakePin)
    assert "channel 0..3" in str(e), str(e)


class PickyADC(FakeADC):
    def __init__(self, pin):
        if not 26 <= pin.num <= 29:
            raise ValueError("Pin(%d) doesn't have ADC capabilities" % pin.num)
        FakeADC.__init__(self, pin)


class PickyI2C(FakeI2C):
    def __init__(self, bus_id, sda=None, scl=None, freq=400000):
        if scl.num != sda.num + 1:
            raise ValueError("bad SCL pin")
        FakeI2C.__init__(self, bus_id, sda, scl, freq)


def test_hardware_refusals_name_the_entry():
    _reset()
    r = rd.Readings(2, 2)
    e = testkit.raises(ValueError, analog.AnalogInputs, r, [[0, 5, 1, 0, 1, 0, 1, 0, 0, 100]], 0, PickyADC, FakePin)
    assert "GPIO5 has no ADC" in str(e) and "capabilities" in str(e), str(e)
    e = testkit.raises(ValueError, i2c_sensors.I2CSensors, r, [], 0, [[0, 4, 7, 100000]], PickyI2C, FakePin)
    assert "[0, 4, 7, 100000]" in str(e) and "bad SCL pin" in str(e), str(e)
    i2c_sensors.I2CSensors(r, [], 0, [[0, 4, 5, 100000]], PickyI2C, FakePin)


def test_drivers_on_their_own():
    _reset()
    bus = FakeI2C(0)
    chip = FakeMCP9600()
    chip.set_temp(1368)
    bus.devices[0x60] = chip
    tc = mcp9600.MCP9600(bus, 0x60)
    assert tc.device_id() == mcp9600.ID_MCP9600 and tc.revision() == 0x14
    tc.configure(mcp9600.TYPE_R, 3)
    assert chip.regs[2 * mcp9600.SENSOR_CONFIG] == 0x73
    assert tc.read_raw() == 1368 and tc.celsius() == 85.5
    testkit.raises(ValueError, tc.configure, 8)
    testkit.raises(ValueError, mcp9600.MCP9600, bus, 0x48)
    conv = FakeADS1115()
    conv.inputs[3] = -12
    bus.devices[0x4B] = conv
    adc = ads1115.ADS1115(bus, 0x4B)
    adc.start(3, 5)
    assert adc.busy()
    at(8)
    assert not adc.busy() and adc.read_raw() == -12
    assert conv.config == 0xF000 | (5 << 9) | 0x0183  # AIN3/GND, +-0.256 V, single-shot, 128 SPS, idle
    assert ads1115.ADS1115.millivolts(16000, 2) == 1000 and adc.millivolts(32767, 0) == 6143
    testkit.raises(ValueError, adc.start, 4, 0)
    testkit.raises(ValueError, ads1115.ADS1115, bus, 0x60)


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
    # edges fired from the loop, as IRQs would come between polls
    pins = s.pins
    for k in range(s.n):
        s.t += s.step
        CLOCK[0] = s.t
        if k % 7 < 3:
            for p in pins:
                p.drive(1 - p.level)
        s.source.poll(s.t)


def test_every_poll_path_allocates_nothing():
    _reset()
    # ADC: loops good, low, high and a voltage, averaged; budget spread over polls
    r, a = _adc([LOOP, [1, 27, 16, 0, 1, 0, 5, 3, 0, 3], [2, 28, 8, 0, 1, 0, 5, 3, 0, 2],
                 [3, 29, 16, 1, 1650, 15, 5, 0, -2500, 1]], max_reads=16)
    ADCS[26].script(12000, 12100)
    ADCS[27].script(1000)
    ADCS[28].script(22000, 23000)
    ADCS[29].script(30000, 31000, 29000)
    s = _Run(a, 300)
    testkit.run_locked(_poll, s)
    assert a.readings > 100 and a.faults > 50 and r.why[0] == rd.GOOD and r.why[1] == rd.LOOP_LOW

    # contacts and DI signals, with bouncing edges from the IRQ handlers
    _reset()
    r, c = _contact([[0, 10, 1, 2, 4], [1, 11, 0, 1, 0, 9], [1, 12, 1, 0, 3]])
    s = _Run(c, 2000)
    s.pins = [PINS[10], PINS[11], PINS[12]]
    testkit.run_locked(_poll_inputs, s)
    assert c.changes > 50 and r.cwhy[0] == rd.GOOD and r.why[1] == rd.GOOD

    # pulse totals and rates, polled late and on time
    _reset()
    r, p = _pulses([[0, 16, 0, 10, 0, 0, 50, 1, 1], [1, 17, 1, 100, 0, 0, 19, 3, 0]])
    s = _Run(p, 2000, step=3)
    s.pins = [PINS[16], PINS[17]]
    testkit.run_locked(_poll_inputs, s)
    assert p.count[0] > 300 and r.why[1] == rd.GOOD and p.late > 0

    # I2C: both sensors through configuration, conversions, a fault and the recovery
    tc = FakeMCP9600()
    tc.set_temp(1368)
    ads = FakeADS1115()
    ads.inputs[0] = 14400
    ads.inputs[2] = 3000
    r, i2c, bus = _i2c([TC_ENTRY, ADS_LOOP, ADS_VOLT], {0x60: tc, 0x48: ads}, max_transfers=2)
    s = _Run(i2c, 1500, step=2)
    testkit.run_locked(_poll, s)
    good = i2c.transfers
    assert r.why[3] == rd.GOOD and r.value[3] == 8550 and r.why[0] == rd.GOOD and r.why[1] == rd.GOOD
    bus.fault = OSError(110)
    s.n = 700
    testkit.run_locked(_poll, s)
    assert i2c.errors > 0 and r.why[3] == rd.I2C and r.why[0] == rd.I2C
    bus.fault = None
    s.n = 1500
    testkit.run_locked(_poll, s)
    assert i2c.transfers > good and r.why[3] == rd.GOOD and r.value[3] == 8550 and r.why[1] == rd.GOOD
