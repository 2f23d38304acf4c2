# modbus.py: the node's Modbus RTU master on an RS-485 bus: a non-blocking state machine in fixed memory.
"""ModbusMaster reads the registers and bits a compiled plant description asks for (docs/PLANT.md) from
the units on one RS-485 bus and writes them into shared/readings.py. It is polled from the main loop
and never holds it longer than sending one request; docs/MODBUS.md has the timings and the tests.

Its inputs are the compiler's lists of ints (with bus_index given, units of other buses are left to
their own master):

    bus       [uart_id, tx_pin, rx_pin, de_pin, baud, parity (0 none 1 even 2 odd), stop_bits,
               timeout_ms, gap_us (0: 3.5 character times, 1750 us above 19200 baud)]
    units     [[bus_index, unit_id, poll_ms, [[fc, start, count], ...]], ...]
    signals   [[signal, unit, batch, offset, type, word_order, byte_order, bit, mul, shift, add], ...]
              type 0 int16, 1 uint16, 2 int32, 3 uint32, 4 float32, 5 bool
    contacts  [[contact, unit, batch, offset, bit (-1: a coil or discrete input), invert], ...]

The uart (firmware/uart.py's MachineUART, BusioUART or PtyUART, or anything with readinto/write and
optionally flush) is opened by the caller with the bus's baud, parity and stop bits (boardcfg.open_bus);
de is the driver-enable pin (anything with .value(v): machine.Pin, firmware/cp_hal.py's Pin) or None for
a transceiver that switches by itself.

poll(now) steps through these states, at most one request per call:

    IDLE  the next batch that is due, round robin over the units: a unit's batches go out in order,
          starting once its poll_ms has passed since its previous pass started
    GAP   wait until the bus has been silent for the inter-frame gap, discarding what arrives (noise,
          the tail of a garbled answer); then DE high, the 8-byte request, wait until it has left, DE low
    WAIT  collect the answer as it comes; it is complete at the length the request implies (normal or
          exception answer), or times out; then decode it into readings and go back to IDLE

A good answer writes every value it feeds; no answer makes them BAD TIMEOUT, an exception answer BAD
EXCEPTION (its code as the detail), a bad CRC, wrong unit, function or length BAD FRAME. Each batch
stands alone, so a unit that goes away turns BAD and comes back good by itself at its next pass.

Nothing in poll allocates on MicroPython: ints only, buffers and tables made here, counters kept below
2**30 (tests/shared/test_modbus_rtu.py proves it with the heap locked).
"""
import time
from array import array

from shared import modbus_rtu as rtu
from shared import readings as rd
from shared.compat import MASK30, const, ticks_add, ticks_diff
from shared.scaling import f32, lin, lin32

try:
    _sleep_us = time.sleep_us  # MicroPython: an int argument, no float
except AttributeError:
    try:
        # CircuitPython: a busy wait to the microsecond (its time.sleep rounds to whole milliseconds,
        # which would drop DE before the last byte has left at 115200 baud)
        from microcontroller import delay_us as _sleep_us
    except ImportError:  # CPython (the tests)
        def _sleep_us(us):
            time.sleep(us / 1000000)

INT16 = const(0)
UINT16 = const(1)
INT32 = const(2)
UINT32 = const(3)
FLOAT32 = const(4)
BOOL = const(5)

IDLE = const(0)
GAP = const(1)
WAIT = const(2)

_CHUNK = const(32)  # bytes read per call once an answer has started (then copied after what came)
_DRAIN_READS = const(8)  # reads a poll spends discarding noise before it leaves the rest for the next
_GAP_WAIT_US = const(5000)  # the longest inter-frame silence a poll waits out in place (9600 baud and up)

# one batch: 9 ints in self._b
_B_UNIT = const(0)
_B_FC = const(1)
_B_START = const(2)
_B_COUNT = const(3)
_B_WAIT = const(4)  # ms from the poll that sends the request to giving up on the answer
_B_S0 = const(5)  # its signal entries are self._s[S0 * _SF:S1 * _SF]
_B_S1 = const(6)
_B_C0 = const(7)  # its contact entries are self._c[C0 * _CF:C1 * _CF]
_B_C1 = const(8)
_BF = const(9)

# one signal entry: 9 ints in self._s, the compiler's fields from `offset` on, after the signal
_S_SIG = const(0)
_S_OFF = const(1)
_S_TYPE = const(2)
_S_WORD = const(3)
_S_BYTE = const(4)
_S_BIT = const(5)
_S_MUL = const(6)
_S_SHIFT = const(7)
_S_ADD = const(8)
_SF = const(9)

# one contact entry: 4 ints in self._c
_C_CON = const(0)
_C_OFF = const(1)
_C_BIT = const(2)
_C_INV = const(3)
_CF = const(4)


def _ints(e, n, what):
    if not isinstance(e, (list, tuple)) or len(e) != n:
        raise ValueError("modbus %s entry %r: expected a list of %d ints" % (what, e, n))
    for x in e:
        if not isinstance(x, int):
            raise ValueError("modbus %s entry %r: every field is an int" % (what, e))


def char_us(baud, parity, stop_bits):
    """Microseconds one character takes on the line: start bit, 8 data bits, parity bit, stop bits."""
    return (((10 if parity == 0 else 11) + stop_bits - 1) * 1000000 + baud - 1) // baud


def gap_us(baud, parity, stop_bits):
    """The inter-frame silence of the Modbus serial line spec: 3.5 character times, and a fixed 1750 us
    above 19200 baud, where 3.5 characters would be too short for a UART interrupt to tell apart."""
    if baud > 19200:
        return 1750
    return (35 * ((10 if parity == 0 else 11) + stop_bits - 1) * 100000 + baud - 1) // baud


class ModbusMaster:
    def __init__(self, uart, de, bus, units, signals, contacts, readings, now, bus_index=None):
        """The bus's timing from `bus`, its units' tables from units/signals/contacts; now: ticks_ms.
        bus_index None: every unit given is on this bus (the caller picked them); an int: units whose
        bus_index differs belong to another master, and their signals and contacts are skipped. A malformed
        entry raises ValueError naming it."""
        self.uart = uart
        self.de = de
        self.readings = readings
        self._flush = getattr(uart, "flush", None)
        self._take_bus(bus)
        batches = self._take_units(units, bus_index, now)
        sigs, cons = self._group(units, batches, signals, contacts)
        self._tables(batches, sigs, cons)
        self.tx = bytearray(rtu.REQUEST_LEN)
        self.rx = bytearray(rtu.MAX_FRAME)
        self._chunk = bytearray(_CHUNK)
        self.rx_n = 0
        self.state = IDLE
        self.batch = 0  # the batch being sent or waited for
        self._rr = self._n_mine - 1  # round robin: the index in _mine served last
        self._quiet = now  # the last time bytes were seen on the bus, or a batch was decided
        self._gap_from = now  # when the batch started waiting for a silent bus
        self._sent = now
        # stats, all mod 2**30: requests == answers + exceptions + timeouts + frame_errors (+ 1 in WAIT)
        self.requests = 0
        self.answers = 0  # good answers, decoded
        self.timeouts = 0  # no byte came back in time
        self.exceptions = 0  # exception answers
        self.frame_errors = 0  # bad CRC, wrong unit, function or length, or an answer cut short
        self.noisy = 0  # batches not sent: the bus never fell silent for a whole timeout (values BAD FRAME)
        if de is not None:
            de.value(0)  # listen: the bus belongs to the slaves until we send

    # ------------------------------------------------------------------ construction: the compiler's lists

    def _take_bus(self, bus):
        _ints(bus, 9, "bus")
        baud, parity, stop, timeout_ms, gap = bus[4], bus[5], bus[6], bus[7], bus[8]
        if baud < 300 or parity not in (0, 1, 2) or stop not in (1, 2) or not 1 <= timeout_ms <= 60000 or gap < 0:
            raise ValueError("modbus bus %r: baud >= 300, parity 0..2, stop_bits 1|2, timeout_ms 1..60000, "
                             "gap_us >= 0" % (bus,))
        self.char_us = char_us(baud, parity, stop)
        self.gap_us = gap if gap else gap_us(baud, parity, stop)
        # The clock is in ms: a silence of at least gap_us is sure once the tick moved ceil(gap/1000) + 1.
        self.gap_ms = (self.gap_us + 999) // 1000 + 1
        self.timeout_ms = timeout_ms

    def _take_units(self, units, bus_index, now):
        # Per-unit arrays (indexed as in `units`); returns [unit, fc, start, count] of this bus's batches,
        # each unit's in a row.
        nu = len(units)
        self.n_units = nu
        self._id = array("i", [0] * (nu or 1))
        self._poll = array("i", [0] * (nu or 1))
        self._b0 = array("i", [0] * (nu or 1))  # its first batch in self._b
        self._nb = array("i", [0] * (nu or 1))  # 0: not on this bus
        self._next = array("i", [-1] * (nu or 1))  # the batch its pass sends next, -1: between passes
        self._start = array("i", [0] * (nu or 1))  # when its current (or last) pass started
        self._done = array("i", [0] * (nu or 1))  # when its last pass ended
        self.passes = array("i", [0] * (nu or 1))  # passes over all its batches (mod 2**30)
        self.cycle_last_ms = array("i", [0] * (nu or 1))  # end of a pass to the end of the next
        self.cycle_worst_ms = array("i", [0] * (nu or 1))
        mine = []
        batches = []
        for u in range(nu):
            e = units[u]
            if not isinstance(e, (list, tuple)) or len(e) != 4 or not isinstance(e[3], (list, tuple)):
                raise ValueError("modbus unit entry %r: expected [bus, unit_id, poll_ms, [[fc, start, count], ...]]"
                                 % (e,))
            _ints(e[:3], 3, "unit")
            if bus_index is not None and e[0] != bus_index:
                continue
            if not 1 <= e[1] <= 247 or e[2] <= 0 or not e[3]:
                raise ValueError("modbus unit entry %r: unit_id 1..247, poll_ms > 0, at least one batch" % (e,))
            self._id[u] = e[1]
            self._poll[u] = e[2]
            self._b0[u] = len(batches)
            self._nb[u] = len(e[3])
            self._start[u] = ticks_add(now, -e[2])  # due at once
            mine.append(u)
            for q in e[3]:
                _ints(q, 3, "batch")
                fc, start, count = q
                most = 2000 if fc <= 2 else 125
                if not 1 <= fc <= 4 or not 1 <= count <= most or not 0 <= start <= 65536 - count:
                    raise ValueError("modbus batch %r of unit entry %d: fc 1..4, count 1..%d, start + count "
                                     "<= 65536" % (q, u, most))
                batches.append((u, fc, start, count))
        self._mine = array("i", mine or [0])
        self._n_mine = len(mine)
        return batches

    def _group(self, units, batches, signals, contacts):
        # The signal and contact entries of this bus, checked, in one list per batch.
        sigs = [[] for _ in batches]
        cons = [[] for _ in batches]
        n_sig = self.readings.n_signals
        n_con = self.readings.n_contacts
        for e in signals:
            _ints(e, 11, "signal")
            b = self._batch_of(e, units, "signal")
            if b < 0:
                continue
            s, typ, wo, bo, bit = e[0], e[4], e[5], e[6], e[7]
            if not 0 <= s < n_sig or not 0 <= typ <= 5 or wo not in (0, 1) or bo not in (0, 1):
                raise ValueError("modbus signal entry %r: signal 0..%d, type 0..5, word_order and byte_order 0|1"
                                 % (e, n_sig - 1))
            width = 2 if INT32 <= typ <= FLOAT32 else 1
            self._check_place(e, batches[b][1], batches[b][3], e[3], width, typ == BOOL, bit, "signal")
            sigs[b].append(e)
        for e in contacts:
            _ints(e, 6, "contact")
            b = self._batch_of(e, units, "contact")
            if b < 0:
                continue
            if not 0 <= e[0] < n_con or e[5] not in (0, 1):
                raise ValueError("modbus contact entry %r: contact 0..%d, invert 0|1" % (e, n_con - 1))
            self._check_place(e, batches[b][1], batches[b][3], e[3], 1, True, e[4], "contact")
            cons[b].append(e)
        return sigs, cons

    def _tables(self, batches, sigs, cons):
        # Flat int tables, so that decoding a batch walks its own entries and nothing else.
        nb = len(batches)
        self._b = array("i", [0] * (_BF * (nb or 1)))
        self._s = array("i", [0] * (_SF * (sum(len(x) for x in sigs) or 1)))
        self._c = array("i", [0] * (_CF * (sum(len(x) for x in cons) or 1)))
        ks = kc = 0
        for b in range(nb):
            u, fc, start, count = batches[b]
            o = b * _BF
            self._b[o + _B_UNIT] = u
            self._b[o + _B_FC] = fc
            self._b[o + _B_START] = start
            self._b[o + _B_COUNT] = count
            # the slave's timeout counts from the end of the request; the air time of the request (and its
            # DE guard character) and of the whole answer come on top
            air = (rtu.REQUEST_LEN + 1 + rtu.answer_len(fc, count)) * self.char_us
            self._b[o + _B_WAIT] = self.timeout_ms + (air + 999) // 1000
            self._b[o + _B_S0] = ks
            for e in sigs[b]:
                j = ks * _SF
                self._s[j + _S_SIG] = e[0]
                for f in range(1, _SF):
                    self._s[j + f] = e[f + 2]
                ks += 1
            self._b[o + _B_S1] = ks
            self._b[o + _B_C0] = kc
            for e in cons[b]:
                j = kc * _CF
                self._c[j + _C_CON] = e[0]
                self._c[j + _C_OFF] = e[3]
                self._c[j + _C_BIT] = e[4]
                self._c[j + _C_INV] = e[5]
                kc += 1
            self._b[o + _B_C1] = kc

    def _batch_of(self, e, units, what):
        # The index in `batches` of an entry's (unit, batch), or -1 for a unit on another bus.
        u, q = e[1], e[2]
        if not 0 <= u < len(units):
            raise ValueError("modbus %s entry %r: no unit %d" % (what, e, u))
        if not self._nb[u]:
            return -1
        if not 0 <= q < self._nb[u]:
            raise ValueError("modbus %s entry %r: unit %d has no batch %d" % (what, e, u, q))
        return self._b0[u] + q

    @staticmethod
    def _check_place(e, fc, count, off, width, is_bool, bit, what):
        if fc <= 2:  # coils and discrete inputs: one bit per item
            if not is_bool or bit != -1:
                raise ValueError("modbus %s entry %r: a coil or discrete input batch gives bools with bit -1"
                                 % (what, e))
        elif is_bool and not 0 <= bit <= 15:
            raise ValueError("modbus %s entry %r: a bool from a register needs bit 0..15" % (what, e))
        elif not is_bool and bit != -1:
            raise ValueError("modbus %s entry %r: bit is for bools only (-1 here)" % (what, e))
        if not 0 <= off <= count - width:
            raise ValueError("modbus %s entry %r: offset %d (+%d) is outside its batch of %d"
                             % (what, e, off, width, count))

    # ------------------------------------------------------------------ the state machine

    def poll(self, now):
        """Advance the bus by what is due at `now` (ticks_ms); sends at most one request."""
        if self.state == WAIT:
            self._collect(now)
            if self.state == WAIT or self.gap_us > _GAP_WAIT_US or not self._pick(now):
                return
            # The answer is in: the next due batch goes out in this poll, after the line's silence, rather
            # than two polls later. While the model steps, polls are tens of ms apart and a pass over the
            # bus would take three of them per batch. A byte in the silence: the GAP path below takes over.
            self.state = GAP
            self._gap_from = now
            _sleep_us(self.gap_us)
            if not self._drain(now):
                self._send(now)
            return
        self._drain(now)
        if self.state == IDLE:
            if not self._pick(now):
                return
            self.state = GAP
            self._gap_from = now
        if ticks_diff(now, self._quiet) >= self.gap_ms:
            self._send(now)
        elif ticks_diff(now, self._gap_from) >= self.timeout_ms:
            # something keeps talking (a second master, a babbling slave, a loose wire): the batch is BAD
            # rather than the loop waiting for a silence that may not come
            self.noisy = (self.noisy + 1) & MASK30
            self._fail(rd.FRAME, 0, now)
            self._end(now)

    def _pick(self, now):
        # The next batch, round robin from the unit after the one served last: a unit with many batches
        # takes turns with the others instead of holding the bus for its whole pass.
        n = self._n_mine
        j = self._rr
        for _ in range(n):
            j += 1
            if j >= n:
                j = 0
            u = self._mine[j]
            k = self._next[u]
            if k < 0:
                if ticks_diff(now, self._start[u]) < self._poll[u]:
                    continue
                self._start[u] = now
                k = 0
                self._next[u] = 0
            self._rr = j
            self.batch = self._b0[u] + k
            return True
        return False

    def _drain(self, now):
        # Bytes outside an answer are stale or noise: discard them, and the bus was not silent (True).
        rx = self.rx
        noise = False
        for _ in range(_DRAIN_READS):
            if not self.uart.readinto(rx):
                return noise
            self._quiet = now
            noise = True
        return noise

    def _send(self, now):
        o = self.batch * _BF
        b = self._b
        u = b[o + _B_UNIT]
        n = rtu.put_read_request(self.tx, self._id[u], b[o + _B_FC], b[o + _B_START], b[o + _B_COUNT])
        # RS-485 turnaround: the bus is one wire pair, and whoever has its driver enabled (DE high) holds
        # it. DE goes high just before the first start bit and must drop right after our last stop bit:
        # drop it early and the tail of the CRC is lost (the slave sees a broken frame and stays silent);
        # hold it too long and our driver fights the slave's, whose answer may begin as soon as the line
        # has been silent for 3.5 characters (some slaves answer sooner). flush() waits until the
        # transmitter is empty (on the RP2040 until its BUSY flag clears, the last stop bit included);
        # one character time more covers ports whose flush returns while the shift register still holds
        # the last byte, and still leaves 2.5 characters before a conforming answer can start.
        de = self.de
        if de is not None:
            de.value(1)
        self.uart.write(self.tx, n)  # a short write leaves a frame no slave answers: it times out
        fl = self._flush
        if fl is not None:
            try:
                fl()
            except OSError:  # the port's flush timed out (a stuck UART): the answer will time out
                pass
            _sleep_us(self.char_us)
        else:  # no way to ask the port: wait for the frame's own air time
            _sleep_us(self.char_us * (n + 1))
        if de is not None:
            de.value(0)
        self.requests = (self.requests + 1) & MASK30
        self.rx_n = 0
        self._sent = now
        self.state = WAIT

    def _collect(self, now):
        rx = self.rx
        n = self.rx_n
        while n < rtu.MAX_FRAME:
            if n == 0:
                k = self.uart.readinto(rx)
            else:  # after the bytes already there: through a small buffer, since a slice would allocate
                c = self._chunk
                # the whole chunk (busio takes no length: a shorter read would cost a memoryview); what
                # comes past the longest answer is noise, dropped here as _drain would drop it
                k = self.uart.readinto(c)
                if k > rtu.MAX_FRAME - n:
                    k = rtu.MAX_FRAME - n
                for i in range(k):
                    rx[n + i] = c[i]
            if not k:
                break
            n += k
        if n != self.rx_n:
            self._quiet = now
            self.rx_n = n
        o = self.batch * _BF
        b = self._b
        r = rtu.check(rx, n, self._id[b[o + _B_UNIT]], b[o + _B_FC], b[o + _B_COUNT])
        if r == rtu.NEED:
            if ticks_diff(now, self._sent) < b[o + _B_WAIT]:
                return
            if n == 0:
                self.timeouts = (self.timeouts + 1) & MASK30
                self._fail(rd.TIMEOUT, 0, now)
            else:  # an answer cut short
                self.frame_errors = (self.frame_errors + 1) & MASK30
                self._fail(rd.FRAME, 0, now)
        elif r == rtu.OK:
            self.answers = (self.answers + 1) & MASK30
            self._decode(now)
        elif r == rtu.EXCEPTION:
            self.exceptions = (self.exceptions + 1) & MASK30
            self._fail(rd.EXCEPTION, rx[2], now)
        else:
            self.frame_errors = (self.frame_errors + 1) & MASK30
            self._fail(rd.FRAME, 0, now)
        self._end(now)

    def _end(self, now):
        # The batch is decided: the unit's pass moves on, and ends after its last batch.
        self.state = IDLE
        self._quiet = now
        u = self._b[self.batch * _BF + _B_UNIT]
        k = self._next[u] + 1
        if k < self._nb[u]:
            self._next[u] = k
            return
        self._next[u] = -1
        if self.passes[u]:
            d = ticks_diff(now, self._done[u])
            self.cycle_last_ms[u] = d
            if d > self.cycle_worst_ms[u]:
                self.cycle_worst_ms[u] = d
        self._done[u] = now
        self.passes[u] = ((self.passes[u] + 1) & MASK30) or 1

    # ------------------------------------------------------------------ answers into readings

    def _decode(self, now):
        rx = self.rx
        out = self.readings
        o = self.batch * _BF
        b = self._b
        t = self._s
        for k in range(b[o + _B_S0], b[o + _B_S1]):
            j = k * _SF
            typ = t[j + _S_TYPE]
            off = t[j + _S_OFF]
            sw = t[j + _S_BYTE]
            if typ == BOOL:
                bit = t[j + _S_BIT]
                x = rtu.bit(rx, off) if bit < 0 else (rtu.u16(rx, off, sw) >> bit) & 1
                v = lin(x, t[j + _S_MUL], t[j + _S_SHIFT], t[j + _S_ADD])
            elif typ <= UINT16:
                x = rtu.u16(rx, off, sw)
                if typ == INT16 and x >= 0x8000:
                    x -= 0x10000
                v = lin(x, t[j + _S_MUL], t[j + _S_SHIFT], t[j + _S_ADD])
            else:
                if t[j + _S_WORD]:  # little: the first register is the low word
                    lo = rtu.u16(rx, off, sw)
                    hi = rtu.u16(rx, off + 1, sw)
                else:
                    hi = rtu.u16(rx, off, sw)
                    lo = rtu.u16(rx, off + 1, sw)
                if typ == FLOAT32:
                    v = f32(hi, lo, t[j + _S_MUL], t[j + _S_SHIFT], t[j + _S_ADD])
                else:
                    v = lin32(hi, lo, typ == INT32, t[j + _S_MUL], t[j + _S_SHIFT], t[j + _S_ADD])
            out.put(t[j + _S_SIG], v, now)
        c = self._c
        for k in range(b[o + _B_C0], b[o + _B_C1]):
            j = k * _CF
            bit = c[j + _C_BIT]
            off = c[j + _C_OFF]
            x = rtu.bit(rx, off) if bit < 0 else (rtu.u16(rx, off, 0) >> bit) & 1
            out.put_contact(c[j + _C_CON], x ^ c[j + _C_INV], now)

    def _fail(self, why, detail, now):
        out = self.readings
        o = self.batch * _BF
        b = self._b
        for k in range(b[o + _B_S0], b[o + _B_S1]):
            out.bad(self._s[k * _SF + _S_SIG], why, detail, now)
        for k in range(b[o + _B_C0], b[o + _B_C1]):
            out.bad_contact(self._c[k * _CF + _C_CON], why, now)

    def stats(self):
        """The counters as a dict, for logs and benchmarks (allocates: not for the hot path)."""
        mine = [self._mine[i] for i in range(self._n_mine)]
        return {"requests": self.requests, "answers": self.answers, "timeouts": self.timeouts,
                "exceptions": self.exceptions, "frame_errors": self.frame_errors, "noisy": self.noisy,
                "passes": [self.passes[u] for u in mine],
                "cycle_last_ms": [self.cycle_last_ms[u] for u in mine],
                "cycle_worst_ms": [self.cycle_worst_ms[u] for u in mine]}
