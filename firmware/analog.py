# analog.py: the board's own ADC pins as signals: 4-20 mA loops through a shunt, or voltages; averaged.
"""AnalogInputs reads the microcontroller's ADC for the signals of a compiled plant description and
writes them into shared/readings.py. One entry per signal (lists of ints, from the host's compiler):

    [signal, pin, samples, mode, mul1, shift1, mul2, shift2, add2, period_ms]

    pin        the GPIO (Raspberry Pi Pico / RP2040: ADC0..3 are GP26..29; ESP32-S3: ADC1 is GPIO1..10)
    samples    1..16 read_u16() calls averaged into one reading
    mode       0: a 4-20 mA current loop through a shunt resistor, 1: a voltage
    mul1..     raw (0..65535) -> phys = lin(raw, mul1, shift1, 0): microamps (mode 0) or millivolts (mode 1)
    mul2..     mode 0: value = lin(phys - 4000, mul2, shift2, add2); mode 1: value = lin(phys, ...)
    period_ms  how often a reading is due

A loop under 3.6 mA or over 21 mA is BAD (LOOP_LOW / LOOP_HIGH, NAMUR NE 43), with the current in tenths
of a mA (at most 25.5) as the detail byte: 0 means a broken wire, 3.5 a transmitter saying it failed.
`put_phys` is that rule, shared with the ADS1115 signals (firmware/i2c_sensors.py).

Why average: the RP2040's ADC has about 8.9 effective bits and erratum E11 (its code steps near
512/1536/2560/3584 of 4095 are too wide), and a loop picks up noise on its way through the plant.
Measured on the rp2 firmware in rp2040js (emulated time at 125 MHz, docs/INPUTS.md): a read_u16() costs
~20 us, a 16-sample reading ~1.1 ms with its scaling, four such channels in one poll ~3.9 ms. So one
reading's samples are taken in one go (close in time), but `poll` stops after `max_reads` reads
(default 16: one full reading a poll, ~1.1 ms) and the next poll goes on where it stopped.

Ports: on the RP2040 machine.ADC reads 0..3.3 V (the ADC_VREF pin) and read_u16() scales 12 bits to
16. On the ESP32-S3 the default range is only about 0..1 V: the constructor asks for ATTN_11DB (about
0..3.1 V, less linear above ~2.5 V) where machine.ADC has it; ADC2 (GPIO11..20) stops working while
Wi-Fi is on, so use ADC1 pins. CircuitPython: analogio.AnalogIn through firmware/cp_hal.py, whose
.value is the same 16-bit scale (it sets the ESP32-S3's attenuation itself). The host's mul1 carries the
calibration either way.

poll(now) allocates nothing on MicroPython: ints only, arrays made here (tests/shared/test_inputs_hw.py).
"""
from array import array

from shared import readings as rd
from shared.compat import MASK30, const, ticks_add, ticks_diff
from shared.scaling import lin

LOOP_MIN_UA = const(3600)  # NAMUR NE 43: below this the loop is broken (or the transmitter says it failed)
LOOP_MAX_UA = const(21000)  # NAMUR NE 43: above this the loop is shorted (or the transmitter says it failed)
LOOP_ZERO_UA = const(4000)  # the live zero of a 4-20 mA loop
MAX_SAMPLES = const(16)

# entry fields
_SIG = const(0)
_PIN = const(1)
_SAMPLES = const(2)
_MODE = const(3)
_MUL1 = const(4)
_SHIFT1 = const(5)
_MUL2 = const(6)
_SHIFT2 = const(7)
_ADD2 = const(8)
_PERIOD = const(9)
_FIELDS = const(10)


def put_phys(readings, s, mode, phys, mul2, shift2, add2, now):
    """Write signal s from its physical reading (uA for mode 0, mV for mode 1): NAMUR check for loops.
    Returns 1 if the reading was BAD, else 0."""
    if phys == rd.OVER:  # a raw the compiled scale cannot hold: a compiler bug, shown as RANGE
        readings.bad(s, rd.RANGE, 0, now)
        return 1
    if mode == 0:
        if phys < LOOP_MIN_UA:
            readings.bad(s, rd.LOOP_LOW, 0 if phys < 0 else phys // 100, now)
            return 1
        if phys > LOOP_MAX_UA:
            readings.bad(s, rd.LOOP_HIGH, 255 if phys > 25500 else phys // 100, now)
            return 1
        phys -= LOOP_ZERO_UA
    readings.put(s, lin(phys, mul2, shift2, add2), now)
    return 0


def check_entry(e, n, what, period=-1):
    """Raise ValueError naming the entry unless it is n ints with e[period] > 0 (when period >= 0).
    Every input source checks the compiler's output once, here, at construction."""
    if len(e) != n:
        raise ValueError("%s entry %r has %d fields, expected %d" % (what, e, len(e), n))
    for x in e:
        if not isinstance(x, int):
            raise ValueError("%s entry %r: every field is an int" % (what, e))
    if period >= 0 and e[period] <= 0:
        raise ValueError("%s entry %r: period_ms must be > 0" % (what, e))


def machine_adc(pin, adc_cls=None, pin_cls=None):
    """machine.ADC on a GPIO, with the widest input range the port offers (ESP32: 11 dB attenuation);
    by default machine's classes, or on CircuitPython firmware/cp_hal.py's (boardcfg.hal)."""
    if adc_cls is None or pin_cls is None:
        from firmware.boardcfg import hal  # here, so tests can put fake modules in sys.modules first

        adc_cls = adc_cls or hal("ADC")
        pin_cls = pin_cls or hal("Pin")
    a = adc_cls(pin_cls(pin))
    atten = getattr(adc_cls, "ATTN_11DB", None)
    if atten is not None and hasattr(a, "atten"):
        a.atten(atten)
    return a


class AnalogInputs:
    def __init__(self, readings, entries, now, adc=None, pin=None, max_reads=16):
        """entries: the ADC signal entries above. adc / pin: classes like machine.ADC / machine.Pin
        (the defaults; firmware/cp_hal.py's on CircuitPython); adc(pin(gpio)) must give an object with
        read_u16(). max_reads (>= 16): the most ADC reads one poll takes."""
        if max_reads < MAX_SAMPLES:
            raise ValueError("max_reads=%d: one reading takes up to %d reads" % (max_reads, MAX_SAMPLES))
        self.r = readings
        self.n = len(entries)
        self._e = []
        self._adc = []
        for e in entries:
            check_entry(e, _FIELDS, "ADC signal", _PERIOD)
            if not 1 <= e[_SAMPLES] <= MAX_SAMPLES or e[_MODE] not in (0, 1):
                raise ValueError("ADC signal entry %r: samples must be 1..16 and mode 0 or 1" % (e,))
            self._e.append(tuple(e))
            try:
                self._adc.append(machine_adc(e[_PIN], adc, pin))
            except (ValueError, OSError) as err:  # a pin with no ADC channel
                raise ValueError("ADC signal entry %r: GPIO%d has no ADC: %s" % (e, e[_PIN], err))
        self._due = array("i", [now] * (self.n or 1))  # the first reading of every channel at once
        self._next = 0  # the channel the next poll starts with: those left out last time go first
        self.max_reads = max_reads
        self.reads = 0  # read_u16 calls (mod 2**30)
        self.readings = 0  # readings written, good or bad (mod 2**30)
        self.faults = 0  # NAMUR or RANGE readings (mod 2**30)

    def poll(self, now):
        """Take the readings that are due, at most max_reads ADC reads in all. Returns the reads taken."""
        n = self.n
        i = self._next
        left = self.max_reads
        for _ in range(n):
            due = self._due[i]
            if ticks_diff(now, due) >= 0:
                e = self._e[i]
                k = e[_SAMPLES]
                if k > left:
                    break  # this channel goes first next time
                self._read(i, e, k, now)
                left -= k
                # keep the cadence; a poll that came a whole period late starts a new one from now
                due = ticks_add(due, e[_PERIOD])
                if ticks_diff(due, now) <= 0:
                    due = ticks_add(now, e[_PERIOD])
                self._due[i] = due
            i += 1
            if i == n:
                i = 0
        self._next = i
        return self.max_reads - left

    def _read(self, i, e, k, now):
        a = self._adc[i]
        acc = 0
        for _ in range(k):
            acc += a.read_u16()  # at most 16 * 65535 < 2**20: a small int
        raw = acc // k
        self.reads = (self.reads + k) & MASK30
        self.readings = (self.readings + 1) & MASK30
        if put_phys(self.r, e[_SIG], e[_MODE], lin(raw, e[_MUL1], e[_SHIFT1], 0), e[_MUL2], e[_SHIFT2], e[_ADD2], now):
            self.faults = (self.faults + 1) & MASK30
