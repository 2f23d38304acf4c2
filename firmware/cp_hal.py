# cp_hal.py: machine-like adapters over CircuitPython's board, analogio, digitalio, countio, keypad, busio.
"""CircuitPython has no `machine` module and no pin interrupts. The node's input sources and its RS-485
bus are written against machine's faces (firmware/analog.py, contacts.py, pulses.py, i2c_sensors.py,
boardcfg.open_bus); where there is no machine module, boardcfg.hal() hands them these instead:

    Pin(num[, mode, pull, value])  a GPIO by number; given a mode, a digitalio.DigitalInOut whose value()
                                   reads the level and value(v) drives an output (the RS-485 DE pin)
    ADC(pin)                       analogio.AnalogIn: read_u16() is its .value, 0..65535 as machine's
    I2C(bus_id, sda, scl, freq)    busio.I2C with machine.I2C's readfrom_mem_into / writeto_mem /
                                   readfrom_into / writeto / scan, locking the bus around each transfer
    Keys(nums, pulls, edge, dirty) contacts' edges from keypad.Keys' background scans (Contacts)
    Counter(num, edge, pull)       one pulse input counted by countio.Counter (PulseCounters)

The RS-485 bus's UART, like the link's, is firmware/uart_cp.py's BusioUART. Pins are GPIO numbers, as in
the plant description: board_pin() (firmware/uart_cp.py) finds the board's object for one (GPn on the
Pico, IOn on ESP32-S3 kits, else microcontroller.pin.GPIOn). Each CircuitPython module is imported when its adapter is built,
so a node loads only what its description uses. Once built, nothing the sources' polls call here
allocates (read_u16, value, the I2C transfers, Keys.scan, Counter.take): buffers and the keypad event
are made in the constructors.
"""
from firmware.uart import HalError
from firmware.uart_cp import board_pin
from shared.compat import MASK30, const, ticks_add, ticks_ms

_EIO = const(5)  # errno of an I2C bus that cannot be opened (no pull-ups yet)
_EBUSY = const(16)  # errno of an I2C bus someone else holds locked
COUNT_RESET = const(0x10000000)  # countio counts past this are reset: its int must stay a small int
_SCAN_MS = const(5)  # keypad's scan interval: the resolution of a contact's edge times
_TICKS29 = const(0x1FFFFFFF)  # keypad's timestamps are supervisor.ticks_ms: they wrap at 2**29


def _pull(code):
    # the description's pull code (0 none, 1 up, 2 down, as machine.Pin's PULL_UP / PULL_DOWN) -> digitalio
    import digitalio

    if code == 1:
        return digitalio.Pull.UP
    if code == 2:
        return digitalio.Pull.DOWN
    if code == 0 or code is None:
        return None
    raise ValueError("pull=%r: 0 none, 1 up, 2 down" % (code,))


class Pin:
    """machine.Pin's face for what the node does with a GPIO. Pin(num) only names it (for ADC and I2C,
    which claim it themselves); Pin(num, Pin.IN, pull) and Pin(num, Pin.OUT, value=v) claim it as a
    digitalio.DigitalInOut. It has no irq(): the sources take keypad (Keys) and countio (Counter) instead."""

    IN = 0
    OUT = 1
    PULL_UP = 1
    PULL_DOWN = 2

    def __init__(self, num, mode=-1, pull=None, value=0):
        self.num = num
        self.pin = board_pin(num)
        self._io = None
        if mode == Pin.OUT or mode == Pin.IN:
            import digitalio

            io = digitalio.DigitalInOut(self.pin)
            if mode == Pin.OUT:
                io.switch_to_output(value=bool(value))
            else:
                io.direction = digitalio.Direction.INPUT
                io.pull = _pull(pull)
            self._io = io

    def value(self, v=None):
        if v is None:
            return 1 if self._io.value else 0
        self._io.value = v

    def deinit(self):
        if self._io is not None:
            self._io.deinit()
            self._io = None


class ADC:
    """analogio.AnalogIn with machine.ADC's read_u16(): AnalogIn.value is already 16-bit scaled on every
    port (the RP2040's 12 bits shifted up, as machine's), against reference_voltage (3.3 V on both the
    RP2040 and the ESP32-S3, where CircuitPython sets the attenuation itself). ValueError for a pin with
    no ADC channel."""

    def __init__(self, pin):
        import analogio

        self._a = analogio.AnalogIn(pin.pin)

    def read_u16(self):
        return self._a.value

    def deinit(self):
        self._a.deinit()


class I2C:
    """busio.I2C with machine.I2C's methods, for firmware/mcp9600.py and ads1115.py. busio has no bus ids
    (the pins choose the controller: bus_id is ignored) and no register transfers: readfrom_mem_into
    writes the register address from a preallocated byte, then reads (writeto_then_readfrom, a repeated
    start); writeto_mem sends address and data in one write from a preallocated buffer. Every transfer
    takes the bus's lock (try_lock) and gives it back; a bus someone else holds raises OSError(EBUSY).
    busio refuses a bus without pull-ups (RuntimeError) where machine.I2C times out on it later: here
    that is OSError(EIO) from each transfer until the pull-ups are there (a breakout that carries them
    plugged in), so the signals go BAD(I2C) and come back, as on MicroPython. Register addresses are 8-bit."""

    def __init__(self, bus_id, sda=None, scl=None, freq=400000):
        if sda is None or scl is None:
            raise HalError("busio.I2C needs its pins: I2C(bus_id, sda=Pin(n), scl=Pin(n), freq=f)")
        self._scl = scl.pin
        self._sda = sda.pin
        self.freq = freq
        self._reg = bytearray(1)
        self._out = bytearray(17)  # register + data of writeto_mem: grows once if a longer write comes
        self._bus = None
        self._open()  # ValueError (pins that are no I2C pair, or in use) here, at construction

    def _open(self):
        import busio

        try:
            self._bus = busio.I2C(self._scl, self._sda, frequency=self.freq)
        except RuntimeError:  # "No pull up found on SDA or SCL": nothing on the bus yet
            self._bus = None

    def _lock(self):
        b = self._bus
        if b is None:
            self._open()
            b = self._bus
            if b is None:
                raise OSError(_EIO)
        if not b.try_lock():
            raise OSError(_EBUSY)
        return b

    def readfrom_mem_into(self, addr, memaddr, buf):
        self._reg[0] = memaddr
        b = self._lock()
        try:
            b.writeto_then_readfrom(addr, self._reg, buf)
        finally:
            b.unlock()

    def writeto_mem(self, addr, memaddr, buf):
        n = len(buf)
        out = self._out
        if n >= len(out):
            out = self._out = bytearray(n + 1)
        out[0] = memaddr
        for i in range(n):
            out[i + 1] = buf[i]
        b = self._lock()
        try:
            b.writeto(addr, out, end=n + 1)
        finally:
            b.unlock()

    def readfrom_into(self, addr, buf):
        b = self._lock()
        try:
            b.readfrom_into(addr, buf)
        finally:
            b.unlock()

    def writeto(self, addr, buf):
        b = self._lock()
        try:
            b.writeto(addr, buf)
        finally:
            b.unlock()
        return len(buf)

    def scan(self):
        b = self._lock()
        try:
            return b.scan()
        finally:
            b.unlock()

    def deinit(self):
        if self._bus is not None:
            self._bus.deinit()
            self._bus = None


class _Level:
    """One input of a Keys with machine.Pin's value(): its level as keypad last reported it."""

    def __init__(self, level, i):
        self._level = level
        self._i = i

    def value(self):
        return self._level[self._i]


class Keys:
    """Contacts' edges without pin interrupts. keypad.Keys, not digitalio polled in scan(): its scanner
    runs in the background every _SCAN_MS whatever the main loop is doing, and stamps each change with
    supervisor.ticks_ms (the clock of `now`: shared.compat's ticks_ms is it, its 2**29 wraps carried into
    a 30th bit). So, as with the IRQ on MicroPython, a contact that changed while the loop was away is
    debounced from when it changed, and a quiet scan() costs one get_into per keypad.Keys, not a pin read
    per input.

    keypad pulls every pin of one Keys the same way (pull=True pulls away from value_when_pressed), so
    the inputs go into one Keys per pull: pull-up ("pressed" = low), pull-down or none ("pressed" =
    high). keypad starts from "all released" and reports the inputs already pressed at its first scan:
    the constructor waits for that scan, so every level is known before the first poll, and known the
    way keypad knows it (a level read apart from keypad could disagree with it for good). scan(now) turns
    the events into what the IRQ handlers write: edge[i] (the event's time), dirty[i] = 1, and level[i]
    for value(). If a queue overflowed (events lost), that Keys starts over: keypad.Keys.reset() reports
    every pressed input again at its next scan, and those inputs wait for it (their edge is set a scan
    interval ahead)."""

    def __init__(self, nums, pulls, edge, dirty):
        import keypad
        import time

        n = len(nums)
        for p in pulls:
            if p not in (0, 1, 2):
                raise ValueError("pull=%r: 0 none, 1 up, 2 down" % (p,))
        self.level = bytearray(n)
        self.pins = [_Level(self.level, i) for i in range(n)]
        self._edge = edge
        self._dirty = dirty
        self._ev = keypad.Event()  # filled in place by get_into: no event object per change
        self._keys = []
        self._index = []  # per Keys: the input each key_number is
        self._pressed = bytearray(3)  # per Keys: the level that keypad calls pressed
        self.overflows = 0
        try:
            for pull in (0, 1, 2):
                idx = [i for i in range(n) if pulls[i] == pull]
                if not idx:
                    continue
                high = 0 if pull == 1 else 1
                self._pressed[len(self._keys)] = high
                self._index.append(bytes(idx))
                self._keys.append(keypad.Keys([board_pin(nums[i]) for i in idx], value_when_pressed=bool(high),
                                              pull=pull != 0, interval=_SCAN_MS / 1000,
                                              max_events=max(64, 2 * len(idx))))
                for i in idx:
                    self.level[i] = 1 - high  # released, as keypad starts
        except Exception:  # a pin missing or in use: give back the pins the groups before it took
            self.deinit()
            raise
        time.sleep(3 * _SCAN_MS / 1000)  # keypad's first scan reports the inputs pressed already
        self.scan(ticks_ms())

    def scan(self, now):
        """Take the events since the last scan (poll-time work: allocates nothing)."""
        ev = self._ev
        for g in range(len(self._keys)):
            q = self._keys[g].events
            if q.overflowed:
                self._restart(g, now)
                continue
            idx = self._index[g]
            high = self._pressed[g]
            while q.get_into(ev):
                i = idx[ev.key_number]
                self.level[i] = high if ev.pressed else 1 - high
                # the event's supervisor tick wraps at 2**29, now (shared.compat) at 2**30: the edge is
                # now less the event's age
                self._edge[i] = ticks_add(now, -((now - ev.timestamp) & _TICKS29))
                self._dirty[i] = 1

    def _restart(self, g, now):
        keys = self._keys[g]
        keys.events.clear()
        keys.reset()
        t = ticks_add(now, _SCAN_MS)
        low = 1 - self._pressed[g]
        for i in self._index[g]:
            self.level[i] = low
            self._edge[i] = t
            self._dirty[i] = 1
        self.overflows = (self.overflows + 1) & MASK30

    def deinit(self):
        for k in self._keys:
            k.deinit()


class Counter:
    """One pulse input counted by countio.Counter, in hardware or in the background, never missed by a
    busy main loop; take() adds what it counted since the last look to the source's count array (the
    array the IRQ handler counts into on MicroPython). edge 1 rising, 2 falling, 3 both; pull as Pin's.
    The RP2040 counts with a PWM slice: only a channel B pin (an odd GPIO), one per slice (GP1 and GP17
    share one), and one edge, not both; the ESP32-S3 counts any pin, either or both edges (PCNT)."""

    def __init__(self, num, edge, pull):
        import countio

        kind = (countio.Edge.RISE, countio.Edge.FALL, countio.Edge.RISE_AND_FALL)[edge - 1]
        self._c = countio.Counter(board_pin(num), edge=kind, pull=_pull(pull))
        self._last = 0

    def take(self, count, i):
        c = self._c.count
        d = c - self._last
        if c >= COUNT_RESET:  # reset long before countio's int leaves the small ints (and allocates);
            self._c.reset()  # an edge between the read and the reset is lost, once per 2**28
            c = 0
        self._last = c
        count[i] = (count[i] + d) & MASK30

    def deinit(self):
        self._c.deinit()
