# contacts.py: digital inputs, debounced: contacts (run/trip, door, level switch) and 0/1 signals.
"""Contacts watches GPIO inputs for the contacts and DI signals of a compiled plant description and
writes them into shared/readings.py. Entries (lists of ints, from the host's compiler):

    contact:    [contact, pin, active, pull, debounce_ms]         (5 ints) -> readings.put_contact
    DI signal:  [signal, pin, active, pull, debounce_ms, one]     (6 ints) -> readings.put(one or 0)

    active   1: closed when the pin reads high, 0: closed when it reads low (a switch to GND with a pull-up)
    pull     0 none (an external resistor or a driven output), 1 the chip's pull-up, 2 its pull-down

Debouncing: a contact's blades bounce for a few ms when they meet. An edge interrupt on both edges only
records the tick of the last edge (a hard IRQ: one store into an array, nothing allocated), and poll()
takes the pin's level once no edge came for debounce_ms. So a burst of bounces gives one change, and a
poll that comes late (the main loop may be away ~100 ms while the model computes) still sees a settled
contact, because the IRQ kept the time of the last edge meanwhile. A state held for less than the gap
between two polls may go unseen: count short pulses with firmware/pulses.py instead.

The first poll reports every input at once (no debounce at boot); after that a reading is written on
every accepted change, and all inputs are written again every REFRESH_MS so the engine sees they are
alive. Those refreshes also read every pin: a level that changed without an edge interrupt (a missed
edge) is debounced from then on, and counted in `missed`. Between refreshes a quiet input costs one
byte test a poll (measured on the rp2 firmware in rp2040js: docs/INPUTS.md).

Ports: RP2040 (MicroPython rp2) runs Pin.irq(hard=True) handlers in interrupt context. The ESP32-S3
port has no hard pin IRQs (its irq() refuses `hard`): there the handler is scheduled, which is enough
for contacts. CircuitPython has no pin IRQs at all: there keypad.Keys scans the pins in the background
every 5 ms and poll() takes its timestamped events as the edges (firmware/cp_hal.py Keys), so the
lines are the same, with edge times to the scan interval. Any GPIO works on both chips; the RP2040's
pulls are ~50-80 kOhm, the ESP32-S3's ~45 kOhm: for a contact on a long cable in a cabinet use an
external 4.7-10 kOhm pull-up and an RC filter or an opto-coupler (docs/INPUTS.md).

poll(now) allocates nothing on MicroPython (tests/shared/test_inputs_hw.py).
"""
from array import array

from firmware.analog import check_entry
from shared.compat import MASK30, const, ticks_add, ticks_diff, ticks_ms

REFRESH_MS = const(1000)  # a reading at least this often, changed or not

_UNKNOWN = const(2)  # _state before the first poll


def pull_arg(pin_cls, pull):
    """The pull argument of machine.Pin for the description's code (0 none, 1 up, 2 down)."""
    if pull == 1:
        return pin_cls.PULL_UP
    if pull == 2:
        return pin_cls.PULL_DOWN
    if pull == 0:
        return None
    raise ValueError("pull=%d: 0 none, 1 up, 2 down" % pull)


def watch(pin_cls, num, pull, trigger, handler):
    """An input pin with `handler(pin)` on `trigger` edges: a hard IRQ where the port has one, else the
    port's scheduled one. Returns (pin, 1 if hard else 0)."""
    p = pin_cls(num, pin_cls.IN, pull_arg(pin_cls, pull))
    try:
        p.irq(handler=handler, trigger=trigger, hard=True)
        return p, 1
    except TypeError:  # esp32: "extra keyword arguments given"
        p.irq(handler=handler, trigger=trigger)
        return p, 0


def _on_edge(edge, dirty, i, clock):
    # One handler per input, made once here: it records when the last edge came, and that one came.
    # Runs in interrupt context: two array stores, no allocation, no lock (the main loop only reads).
    def handler(pin):
        edge[i] = clock()
        dirty[i] = 1

    return handler


class Contacts:
    def __init__(self, readings, entries, now, pin=None, clock=None):
        """entries: contact (5 ints) and DI signal (6 ints) entries, in any order. pin: a class like
        machine.Pin (the default), or one without irq() (firmware/cp_hal.py's Pin, CircuitPython's
        default), which takes the edges from keypad instead (cp_hal.Keys). clock: what the IRQ handlers
        time edges with (default ticks_ms, the clock of `now`; keypad stamps its own on the same clock)."""
        if pin is None:
            from firmware.boardcfg import hal  # here, so tests can put fakes in sys.modules first

            pin = hal("Pin")
        if clock is None:
            clock = ticks_ms
        n = len(entries)
        m = n or 1
        self.r = readings
        self.n = n
        self._index = array("i", bytearray(4 * m))  # the contact or signal number
        self._signal = bytearray(m)  # 1: a DI signal, 0: a contact
        self._active = bytearray(m)
        self._debounce = array("i", bytearray(4 * m))
        self._one = array("i", bytearray(4 * m))
        self._edge = array("i", bytearray(4 * m))  # tick of the last edge (IRQ handler)
        self._dirty = bytearray(m)  # 1: an edge came since the level was last taken (IRQ handler)
        self._state = bytearray(bytes([_UNKNOWN]) * m)  # accepted: 1 closed, 0 open
        self._pins = []
        self._keys = None  # CircuitPython: the keypad scanners that stand in for the edge IRQs
        self.hard = 1  # 0 if any input got a scheduled (soft) IRQ, or none (keypad)
        irq = hasattr(pin, "irq")
        trigger = pin.IRQ_RISING | pin.IRQ_FALLING if irq else 0
        for i in range(n):
            e = entries[i]
            if len(e) == 6:
                check_entry(e, 6, "DI signal")
                self._signal[i] = 1
                self._one[i] = e[5]
            else:
                check_entry(e, 5, "contact")
            if e[2] not in (0, 1) or e[4] < 0:
                raise ValueError("input entry %r: active must be 0 or 1, debounce_ms >= 0" % (e,))
            self._index[i] = e[0]
            self._active[i] = e[2]
            self._debounce[i] = e[4]
            if irq:
                p, hard = watch(pin, e[1], e[3], trigger, _on_edge(self._edge, self._dirty, i, clock))
                self._pins.append(p)
                self.hard &= hard
        if not irq and n:
            self._watch_keys(entries)
        self._refresh = now  # when every input is written again (the first poll writes them all)
        self.changes = 0  # accepted changes (mod 2**30)
        self.missed = 0  # changes no edge interrupt announced (mod 2**30)

    def _watch_keys(self, entries):
        # CircuitPython has no pin IRQs: keypad scans the pins in the background and its events stand in
        # for the edges (why keypad and not digitalio polled here: firmware/cp_hal.py Keys)
        from firmware import cp_hal

        nums = [e[1] for e in entries]
        try:
            self._keys = cp_hal.Keys(nums, [e[3] for e in entries], self._edge, self._dirty)
        except (ValueError, RuntimeError) as err:  # no such pin, a pin in use, a bad pull
            raise ValueError("contact/DI inputs on GPIO %s: %s" % (nums, err))
        self._pins = self._keys.pins
        self.hard = 0

    def poll(self, now):
        """Accept the inputs that have settled; write changes, and every input once a REFRESH_MS."""
        if self._keys is not None:  # CircuitPython: keypad's events since the last poll are the edges
            self._keys.scan(now)
        # The quiet path (no edge, no refresh due) is one byte test per input: poll runs every loop.
        refresh = ticks_diff(now, self._refresh) >= 0
        if refresh:
            self._refresh = ticks_add(now, REFRESH_MS)
        for i in range(self.n):
            st = self._state[i]
            if st == _UNKNOWN:  # the first poll: take the level at once, bouncing or not
                self._dirty[i] = 0
                closed = self._closed(i)
                self._state[i] = closed
                self._write(i, closed, now)
                continue
            if self._dirty[i]:
                if ticks_diff(now, self._edge[i]) < self._debounce[i]:
                    closed = st  # not settled yet
                else:
                    self._dirty[i] = 0
                    closed = self._closed(i)
                    if self._dirty[i]:  # an edge while we read: that level may be a bounce
                        closed = st
            elif refresh:
                closed = self._closed(i)
                if closed != st:  # a change with no edge recorded (a missed IRQ): debounce it from now
                    self._edge[i] = now
                    self._dirty[i] = 1
                    self.missed = (self.missed + 1) & MASK30
                    closed = st
            else:
                continue
            if closed != st:
                self._state[i] = closed
                self.changes = (self.changes + 1) & MASK30
                self._write(i, closed, now)
            elif refresh:
                self._write(i, st, now)

    def _closed(self, i):
        return 1 if self._pins[i].value() == self._active[i] else 0

    def _write(self, i, closed, now):
        if self._signal[i]:
            self.r.put(self._index[i], self._one[i] if closed else 0, now)
        else:
            self.r.put_contact(self._index[i], closed, now)

    def state(self, i):
        """The accepted state of entry i: 1 closed, 0 open, 2 not read yet."""
        return self._state[i]

    def close(self):
        """Stop the edge interrupts (before the inputs are rebuilt for another plant description)."""
        if self._keys is not None:
            self._keys.deinit()
            return
        for p in self._pins:
            p.irq(handler=None)
