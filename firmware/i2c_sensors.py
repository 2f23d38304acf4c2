# i2c_sensors.py: the node's I2C sensors (MCP9600 thermocouples, ADS1115 ADC inputs), one transfer a poll.
"""I2CSensors polls the I2C sensors of a compiled plant description and writes them into
shared/readings.py. Entries (lists of ints, from the host's compiler):

    bus:      [bus_id, sda_pin, scl_pin, freq]                                             (`buses`)
    MCP9600:  [signal, bus_index, address, tc_type, mul, shift, add, period_ms]           (8 ints)
    ADS1115:  [signal, bus_index, address, channel, pga, mode, mul1, shift1, mul2, shift2, add2,
               period_ms]                                                                 (12 ints)

MCP9600 (firmware/mcp9600.py): first the device id is checked (0x40, or 0x41 for an MCP9601; another
chip answering at the address makes the signal BAD(SENSOR) with the id as detail, checked again every
period), then the thermocouple type is configured, then every period the hot junction is read:
value = lin(raw in 1/16 C, mul, shift, add); 85.5 C in hundredths is mul 25, shift 2.

ADS1115 (firmware/ads1115.py): signals on the same chip (bus and address) take turns: a poll starts
one due channel's single-shot conversion, a poll at least CONVERSION_MS later reads it: phys =
lin(raw, mul1, shift1, 0) in uA (mode 0, a loop through a shunt) or mV (mode 1), then as the board's
own ADC signals (firmware/analog.py put_phys: NAMUR NE 43 for loops).

An OSError of a transfer (no ACK, a timeout, a stuck bus) makes that signal BAD(I2C) with the errno as
detail; the sensor is tried again the next period and comes back by itself (an MCP9600 is checked and
configured again first: it may have lost power and its configuration).

One poll does at most `max_transfers` I2C transfers (default 1, each a few bytes: ~0.3-0.5 ms at 100
kHz, ~0.1 ms at 400 kHz), so a poll never blocks on the bus for longer than that; sensors take turns.

Ports: machine.I2C on both. RP2040: I2C0 or I2C1 on fixed pin pairs (I2C0: SDA GP0/4/8/12/16/20,
SCL the pin after it; I2C1: SDA GP2/6/10/14/18/26, SCL the pin after); ESP32-S3: I2C0 or I2C1 on any
GPIOs. Both raise OSError(ETIMEDOUT or EIO; ENODEV on the ESP32) for a device that does not answer.
CircuitPython: busio.I2C through firmware/cp_hal.py's I2C (the same pin pairs; the pins choose the
controller), OSError(ENODEV) for no answer, OSError(EIO) while the bus has no pull-ups.
poll(now) allocates nothing on MicroPython while the sensors answer (tests/shared/test_inputs_hw.py);
the port's OSError for a failed transfer is allocated by the port, once per failure.
"""
from array import array

from firmware import ads1115, mcp9600
from firmware.analog import check_entry, put_phys
from shared import readings as rd
from shared.compat import MASK30, const, ticks_add, ticks_diff
from shared.scaling import lin

# what a step did
_IDLE = const(0)  # no transfer
_OK = const(1)  # a transfer that worked
_FAILED = const(2)  # a transfer that raised OSError

# MCP9600 states
_CHECK = const(0)
_CONFIGURE = const(1)
_READ = const(2)


def _errno(e):
    a = e.args
    return a[0] if a and isinstance(a[0], int) else 0


def _next(due, period, now):
    # keep the cadence; a poll that came a whole period late starts a new one from now
    due = ticks_add(due, period)
    if ticks_diff(due, now) <= 0:
        due = ticks_add(now, period)
    return due


class _Thermocouple:
    """One MCP9600 signal: check the chip, configure it, then read it every period."""

    def __init__(self, dev, e, now):
        self.dev = dev
        self.s, _, _, self.tc_type, self.mul, self.shift, self.add, self.period = e
        self.state = _CHECK
        self.due = now

    def step(self, r, now):
        if ticks_diff(now, self.due) < 0:
            return _IDLE
        try:
            if self.state == _CHECK:
                did = self.dev.device_id()
                if did != mcp9600.ID_MCP9600 and did != mcp9600.ID_MCP9601:
                    r.bad(self.s, rd.SENSOR, did, now)  # another chip at this address
                    self.due = ticks_add(now, self.period)
                else:
                    self.state = _CONFIGURE
            elif self.state == _CONFIGURE:
                self.dev.configure(self.tc_type, 0)
                self.state = _READ
                self.due = ticks_add(now, mcp9600.CONVERSION_MS)  # the first conversion of this type
            else:
                r.put(self.s, lin(self.dev.read_raw(), self.mul, self.shift, self.add), now)
                self.due = _next(self.due, self.period, now)
        except OSError as e:
            r.bad(self.s, rd.I2C, _errno(e), now)
            self.state = _CHECK
            self.due = ticks_add(now, self.period)
            return _FAILED
        return _OK


class _Converter:
    """One ADS1115 chip and its signals: one conversion at a time, started, then read CONVERSION_MS later."""

    def __init__(self, dev):
        self.dev = dev
        self.e = []
        self.due = None
        self.busy = -1  # the signal being converted (an index into self.e), -1 when idle
        self.since = 0  # when its conversion started
        self.turn = 0  # the signal tried first when the chip is next idle

    def add(self, e):
        if not 0 <= e[3] <= 3 or not 0 <= e[4] <= 5 or e[5] not in (0, 1):
            raise ValueError("ADS1115 signal entry %r: channel 0..3, pga 0..5, mode 0 or 1" % (e,))
        self.e.append(tuple(e))

    def step(self, r, now):
        k = self.busy
        if k >= 0:
            if ticks_diff(now, self.since) < ads1115.CONVERSION_MS:
                return _IDLE
            self.busy = -1
            s, _, _, _, _, mode, mul1, shift1, mul2, shift2, add2, _ = self.e[k]
            try:
                raw = self.dev.read_raw()
            except OSError as err:
                r.bad(s, rd.I2C, _errno(err), now)
                return _FAILED
            put_phys(r, s, mode, lin(raw, mul1, shift1, 0), mul2, shift2, add2, now)
            return _OK
        n = len(self.e)
        for j in range(n):
            k = self.turn + j
            if k >= n:
                k -= n
            if ticks_diff(now, self.due[k]) >= 0:
                e = self.e[k]
                self.due[k] = _next(self.due[k], e[11], now)
                self.turn = k + 1 if k + 1 < n else 0
                try:
                    self.dev.start(e[3], e[4])
                except OSError as err:
                    r.bad(e[0], rd.I2C, _errno(err), now)
                    return _FAILED
                self.busy = k
                self.since = now
                return _OK
        return _IDLE


class I2CSensors:
    def __init__(self, readings, entries, now, buses, i2c=None, pin=None, max_transfers=1):
        """entries: MCP9600 (8 ints) and ADS1115 (12 ints) signal entries; buses: the bus entries their
        bus_index counts in. i2c / pin: classes like machine.I2C / machine.Pin (the defaults; on
        CircuitPython firmware/cp_hal.py's, over busio.I2C), called as i2c(bus_id, sda=pin(sda),
        scl=pin(scl), freq=freq). Touches no bus: the sensors are checked and configured by the polls."""
        if i2c is None or pin is None:
            from firmware.boardcfg import hal  # here, so tests can put fakes in sys.modules first

            i2c = i2c or hal("I2C")
            pin = pin or hal("Pin")
        self.r = readings
        self.buses = []
        for b in buses:
            check_entry(b, 4, "I2C bus", 3)
            try:
                self.buses.append(i2c(b[0], sda=pin(b[1]), scl=pin(b[2]), freq=b[3]))
            except (ValueError, OSError) as err:  # rp2: "bad SCL pin"; busio: "Invalid pins", "GP4 in use"
                raise ValueError("I2C bus entry %r: the port's I2C refused it: %s" % (b, err))
        self._jobs = []
        chips = {}  # (bus_index, address) -> its _Converter
        for e in entries:
            if len(e) == 8:
                check_entry(e, 8, "MCP9600 signal", 7)
                if not 0 <= e[3] <= 7:
                    raise ValueError("MCP9600 signal entry %r: thermocouple type 0..7 (K J T N S E B R)" % (e,))
                self._jobs.append(_Thermocouple(mcp9600.MCP9600(self._bus(e), e[2]), e, now))
            else:
                check_entry(e, 12, "ADS1115 signal", 11)
                key = (e[1], e[2])
                if key not in chips:
                    chips[key] = _Converter(ads1115.ADS1115(self._bus(e), e[2]))
                    self._jobs.append(chips[key])
                chips[key].add(e)
        for c in chips.values():
            c.due = array("i", [now] * len(c.e))  # every channel's first conversion at once, in turn
        if max_transfers < 1:
            raise ValueError("max_transfers=%d: at least 1" % max_transfers)
        self.max_transfers = max_transfers
        self._turn = 0  # the job tried first next poll
        self.transfers = 0  # I2C transfers (mod 2**30)
        self.errors = 0  # transfers that raised OSError (mod 2**30)

    def _bus(self, e):
        if not 0 <= e[1] < len(self.buses):
            raise ValueError("I2C signal entry %r: bus_index %d, but %d buses" % (e, e[1], len(self.buses)))
        return self.buses[e[1]]

    def poll(self, now):
        """Do what is due, at most max_transfers transfers. Returns the transfers done."""
        jobs = self._jobs
        n = len(jobs)
        left = self.max_transfers
        i = self._turn
        for _ in range(n):
            if left == 0:
                break
            did = jobs[i].step(self.r, now)
            i += 1
            if i == n:
                i = 0
            if did != _IDLE:
                left -= 1
                if did == _FAILED:
                    self.errors = (self.errors + 1) & MASK30
        done = self.max_transfers - left
        self.transfers = (self.transfers + done) & MASK30
        self._turn = i
        return done
