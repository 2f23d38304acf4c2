# pulses.py: pulse inputs (flow, energy, gas meters) counted by a pin IRQ or countio: totals and rates.
"""PulseCounters counts the edges of meter pulse outputs for the signals of a compiled plant description
and writes them into shared/readings.py. One entry per signal (lists of ints, from the host's compiler):

    [signal, pin, measure, mul, shift, add, period_ms, edge, pull]

    measure    0: total, value = lin(count, mul, shift, add), the count since boot
               1: rate, value = lin(pulses in the period, mul, shift, add) (the compiler folds the
                  period into mul, so the value is e.g. litres per minute)
    period_ms  how often a reading is written (a total's first one at once, a rate's after one period)
    edge       1 rising, 2 falling, 3 both
    pull       0 none, 1 up, 2 down (an open-collector or reed output needs a pull-up)

A hard IRQ handler adds one to the pin's slot of an array('i') (mod 2**30: shared.compat.MASK30); the
main loop only reads it, so no lock is needed. From 65536 pulses on, a count is scaled as two 16-bit
halves (shared/scaling.py lin32: the same as lin for shift <= 16, else within one unit), so a total far
past 2**30 / mul still scales, or reads as RANGE when the value cannot be shown. A total wraps to 0
after 2**30 pulses (12 days at 1 kHz) and starts again at 0 when the node boots.

A late poll: a rate is the pulses counted between two readings, which is more than one period's worth
when the poll came late (the main loop may be away while the model computes). It is scaled back to one
period: delta * period_ms // elapsed_ms, in integers (`per_period`), so a late reading is the same rate,
not a spike, and no pulse is lost: the next period counts from this reading's count and starts at it.

Ports: RP2040 (MicroPython rp2) runs Pin.irq(hard=True) handlers in interrupt context (some 20-30 us of
latency), fine to a few kHz; faster meters want the RP2040's PIO. The ESP32-S3 port has no hard pin IRQs:
the handler is scheduled, and edges that come faster than the main loop lets it run are lost; there use
the chip's pulse counter (PCNT) for fast meters. CircuitPython has no pin IRQs: there countio.Counter
counts (a PWM slice on the RP2040, PCNT on the ESP32-S3: no edge lost to a busy loop) and poll() takes
its count when a reading is due (firmware/cp_hal.py Counter). On the RP2040 that needs an odd GPIO (a
PWM channel B pin), one per PWM slice, counting one edge: a both-edges entry is refused there. A
reed-contact meter output bounces: add an RC filter (docs/INPUTS.md).

poll(now) allocates nothing on MicroPython (tests/shared/test_inputs_hw.py).
"""
from array import array

from firmware.analog import check_entry
from firmware.contacts import watch
from shared.compat import MASK30, const, ticks_add, ticks_diff
from shared.scaling import lin, lin32

# entry fields
_SIG = const(0)
_PIN = const(1)
_MEASURE = const(2)
_MUL = const(3)
_SHIFT = const(4)
_ADD = const(5)
_PERIOD = const(6)
_EDGE = const(7)
_PULL = const(8)
_FIELDS = const(9)


def per_period(delta, period, elapsed):
    """delta * period // elapsed for 0 <= delta < 2**30 and 0 < period <= elapsed < 2**30, without a
    product that leaves the small ints: exact while elapsed < 2**15 ms, else both times are halved
    first (a relative error under 2**-14)."""
    while elapsed >= 0x8000:
        period >>= 1
        elapsed >>= 1
    if period <= 0:
        return 0
    q = delta // elapsed
    r = delta - q * elapsed
    return q * period + (r * period) // elapsed  # r, period < 2**15: r * period < 2**30


def _counter(count, i):
    # One handler per input, made once here. Interrupt context: one read-modify-write of an array slot.
    def handler(pin):
        count[i] = (count[i] + 1) & MASK30

    return handler


def _countio(e):
    # CircuitPython has no pin IRQs: countio counts the edges (in hardware on the RP2040 and ESP32-S3)
    from firmware import cp_hal

    try:
        return cp_hal.Counter(e[_PIN], e[_EDGE], e[_PULL])
    except (ValueError, RuntimeError) as err:  # RuntimeError: NotImplementedError is one
        raise ValueError("pulse signal entry %r: countio cannot count GPIO%d: %s (RP2040: an odd GPIO, one "
                         "per PWM slice, rising or falling edge only)" % (e, e[_PIN], err))


class PulseCounters:
    def __init__(self, readings, entries, now, pin=None):
        """entries: the pulse signal entries above. pin: a class like machine.Pin (the default), or one
        without irq() (firmware/cp_hal.py's Pin, CircuitPython's default), where countio counts instead."""
        if pin is None:
            from firmware.boardcfg import hal  # here, so tests can put fakes in sys.modules first

            pin = hal("Pin")
        n = len(entries)
        m = n or 1
        self.r = readings
        self.n = n
        self._e = []
        self.count = array("i", bytearray(4 * m))  # edges since boot, mod 2**30 (IRQ handlers)
        self._last = array("i", bytearray(4 * m))  # count at the last rate reading
        self._at = array("i", bytearray(4 * m))  # tick of the last rate reading
        self._due = array("i", bytearray(4 * m))
        self._pins = []
        irq = hasattr(pin, "irq")
        self._ctr = None if irq else []  # CircuitPython: a cp_hal.Counter per input, read when due
        self.hard = 1 if irq else 0  # 0 if any input got a scheduled (soft) IRQ, or none (countio)
        for i in range(n):
            e = entries[i]
            check_entry(e, _FIELDS, "pulse signal", _PERIOD)
            if e[_MEASURE] not in (0, 1) or e[_EDGE] not in (1, 2, 3):
                raise ValueError("pulse signal entry %r: measure must be 0 or 1, edge 1, 2 or 3" % (e,))
            self._e.append(tuple(e))
            if irq:
                trigger = (pin.IRQ_RISING if e[_EDGE] & 1 else 0) | (pin.IRQ_FALLING if e[_EDGE] & 2 else 0)
                p, hard = watch(pin, e[_PIN], e[_PULL], trigger, _counter(self.count, i))
                self._pins.append(p)
                self.hard &= hard
            else:
                self._ctr.append(_countio(e))
            self._at[i] = now
            self._due[i] = now if e[_MEASURE] == 0 else ticks_add(now, e[_PERIOD])
        self.late = 0  # rate readings scaled back because the poll came a tenth of a period late or more

    def poll(self, now):
        """Write the readings that are due."""
        for i in range(self.n):
            due = self._due[i]
            if ticks_diff(now, due) < 0:
                continue
            e = self._e[i]
            period = e[_PERIOD]
            if self._ctr is not None:  # CircuitPython: what countio counted since the last reading
                self._ctr[i].take(self.count, i)
            c = self.count[i]
            if e[_MEASURE] == 0:
                x = c
            else:
                x = (c - self._last[i]) & MASK30
                elapsed = ticks_diff(now, self._at[i])
                if elapsed > period:
                    x = per_period(x, period, elapsed)
                    if elapsed - period >= period // 10:
                        self.late = (self.late + 1) & MASK30
                self._last[i] = c
                self._at[i] = now
            if x < 0x10000:
                v = lin(x, e[_MUL], e[_SHIFT], e[_ADD])
            else:  # x * mul may leave the small ints: scaled in two halves
                v = lin32(x >> 16, x & 0xFFFF, 0, e[_MUL], e[_SHIFT], e[_ADD])
            self.r.put(e[_SIG], v, now)
            if e[_MEASURE] == 0:
                # a total keeps its cadence; a poll that came a whole period late starts a new one
                due = ticks_add(due, period)
                if ticks_diff(due, now) <= 0:
                    due = ticks_add(now, period)
            else:
                # a rate's next period starts at this reading, so every interval is at least a period
                # long and only ever needs scaling down
                due = ticks_add(now, period)
            self._due[i] = due

    def close(self):
        """Stop the edge interrupts (before the inputs are rebuilt for another plant description)."""
        for c in self._ctr or ():
            c.deinit()
        for p in self._pins:
            p.irq(handler=None)
