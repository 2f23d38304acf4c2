# plant_engine.py: a described plant's readings -> alarm, state and sample lines; fixed memory.
"""The node's engine for a real plant (docs/PLANT.md, "The node's engine"). The sources write readings
(shared/readings.py); step(now) turns them into log lines, machine by machine, in the order the
simulator writes a tick's lines: the sample line (when due), then the alarm events the readings raised,
then the machine's state change.

- Alarms: the ISA-18.2 bank (shared/plant_alarms.py). Each signal's points are evaluated on each new
  reading; a point marked `running` is armed only once its machine has been RUNNING for settle_s (it
  clears at once when disarmed); the signal's BAD point counts readings that are not good (a value out
  of the signal's range is not good) and its line says why (`why=timeout`). While a signal is BAD its
  other points hold their state.
- State: from the run contact (or the current threshold) and the trip contact. A running machine that
  stops while one of its interlock points is active or its condition holds on the latest reading, or
  whose trip contact closes, is TRIPPED on that interlock (`interlock=NAME`; `trip=contact` when no
  point explains it). Until its state is first read a machine counts as STOPPED, without a line, and
  its first sample line waits for that (at most one sample period).
- Samples: every sample_s, and at once (at most once a second) when a signal moved past its deadband.
- Operators: operator() applies an ACK / SHELVE / UNSHELVE the gateway sent and logs it naming who.

Lines go to emit(buf, n, level) (the node's line queue); timestamps come from clock.stamp(buf, j, now)
(shared/wallclock.py). Nothing allocates after construction on MicroPython.
"""
from array import array

from shared import readings as rd
from shared.compat import const, ticks_diff
from shared.linefmt import put_bytes, put_decimal, put_uint
from shared.plant_alarms import ACK, ALARM, BAD, HIHI, LEVELS, LOLO, SHELVE, STATES, UNACK, UNSHELVE, VERBS, AlarmBank

LINE_MAX = const(128)
STOPPED = const(0)  # the simulator's PLC codes (shared/plant.py STATES), so lines read the same
RUNNING = const(2)
TRIPPED = const(4)
PLC = (b"STOPPED", b"STARTING", b"RUNNING", b"STOPPING", b"TRIPPED")
# causes of a state change (the interlock's name follows C_INTERLOCK)
C_RUN_ON = const(0)
C_RUN_OFF = const(1)
C_CURRENT_ON = const(2)
C_CURRENT_OFF = const(3)
C_TRIP_CONTACT = const(4)
C_RESET_CONTACT = const(5)
C_INTERLOCK = const(6)
CAUSES = (b"run=on", b"run=off", b"current=on", b"current=off", b"trip=contact", b"reset=contact", b"interlock=")
_TRIP_LEVELS = (HIHI, LOLO)  # the levels an interlock point may have


class Engine:
    def __init__(self, cfg, readings, emit, clock, now):
        self.cfg = cfg
        self.r = readings
        self.emit = emit
        self.clock = clock
        ns = cfg.n_signals
        nm = cfg.n_machines
        # signals grouped by machine: order[m_first[m] : m_first[m] + m_count[m]]
        self.order = bytearray(ns)
        self.m_first = bytearray(nm)
        self.m_count = bytearray(nm)
        k = 0
        for m in range(nm):
            self.m_first[m] = k
            for s in range(ns):
                if cfg.s_machine[s] == m:
                    self.order[k] = s
                    k += 1
            self.m_count[m] = k - self.m_first[m]
        # alarm points: the configured ones, then one BAD point per signal that has one
        npts = len(cfg.alarms) + len(cfg.bad)
        self.bank = AlarmBank(npts if npts else 1)
        self.p_signal = bytearray(npts or 1)
        self.p_running = bytearray(npts or 1)
        self.p_interlock = array("b", bytearray(npts or 1))
        self.s_pt = array("h", bytearray(2 * 5 * ns))  # per signal: up to 4 points + its BAD point, -1 none
        for i in range(5 * ns):
            self.s_pt[i] = -1
        p = 0
        for a in cfg.alarms:
            s, lv, lim, hyst, on, off, prio, run, il = a
            self.bank.configure(p, lv, lim, hyst, on, off, prio)
            self.p_signal[p] = s
            self.p_running[p] = run
            self.p_interlock[p] = il
            self.s_pt[5 * s + lv] = p
            p += 1
        for b in cfg.bad:
            s, on, off, prio = b
            self.bank.configure(p, BAD, 0, 0, on, off, prio)
            self.p_signal[p] = s
            self.p_interlock[p] = -1
            self.s_pt[5 * s + 4] = p
            p += 1
        self.s_why = bytearray(b"\x09" * ns)  # readings.NONE_YET until the first reading
        self.s_rep = array("i", bytearray(4 * ns))  # the value shown in the last sample line
        self.s_last = array("i", bytearray(4 * ns))  # tick of the last reading
        self.s_gap = array("i", bytearray(4 * ns))  # the longest time between two readings (ms): poll cycle
        self.s_seen = bytearray(ns)
        self.m_state = bytearray(nm)
        self.m_known = bytearray(nm)
        self.m_since = array("i", bytearray(4 * nm))  # tick the machine entered its state
        self.m_sample = array("i", bytearray(4 * nm))  # tick of its last sample line
        self.m_changed = bytearray(nm)  # a signal moved past its deadband since the last sample line
        for m in range(nm):
            self.m_since[m] = now
            self.m_sample[m] = now - cfg.m_sample[m]  # the first sample line comes once its state is read
        # this machine's events of the current step: (point, event code, value) and the state change
        self.ev_p = array("h", bytearray(2 * (npts + 1)))
        self.ev_code = bytearray(npts + 1)
        self.ev_v = array("i", bytearray(4 * (npts + 1)))
        self.nev = 0
        self.buf = bytearray(LINE_MAX)
        self.lines = 0
        self.trips = 0
        self.raised = 0
        self.cause = 0

    # ---- the step ----

    def step(self, now):
        """Lines for every reading that arrived since the last step; returns how many lines were written."""
        n0 = self.lines
        for m in range(self.cfg.n_machines):
            self._machine(m, now)
        return self.lines - n0

    def _machine(self, m, now):
        cfg = self.cfg
        r = self.r
        bank = self.bank
        st = self.m_state[m]
        armed = 1 if st == RUNNING and ticks_diff(now, self.m_since[m]) >= cfg.m_settle[m] else 0
        self.nev = 0
        first = self.m_first[m]
        for k in range(first, first + self.m_count[m]):
            s = self.order[k]
            if not r.fresh[s]:
                continue
            r.fresh[s] = 0
            if self.s_seen[s]:
                g = ticks_diff(r.at[s], self.s_last[s])
                if g > self.s_gap[s]:
                    self.s_gap[s] = g
            self.s_seen[s] = 1
            self.s_last[s] = r.at[s]
            v = r.value[s]
            why = r.why[s]
            if not why and cfg.s_lo[s] <= cfg.s_hi[s] and not cfg.s_lo[s] <= v <= cfg.s_hi[s]:
                why = rd.RANGE
            self.s_why[s] = why
            if not why:
                db = cfg.s_deadband[s]
                d = v - self.s_rep[s]
                if db and (d > db or -d > db):
                    self.m_changed[m] = 1
            base = 5 * s
            for lv in range(5):
                p = self.s_pt[base + lv]
                if p < 0:
                    continue
                if lv == BAD:
                    ev = bank.evaluate(p, 1 if why else 0, 1)
                elif why:  # hold the point's state on a bad reading, unless it is disarmed anyway
                    ev = bank.evaluate(p, 0, 0) if self.p_running[p] and not armed else -1
                else:
                    ev = bank.evaluate(p, v, armed if self.p_running[p] else 1)
                if ev >= 0:
                    self._event(p, ev, v)
        new = self._state(m, now)
        st = self.m_state[m]  # a machine whose state was just read for the first time changed it silently
        cause = self.cause
        if self._sample_due(m, now):
            self._sample_line(m, now)
        for i in range(self.nev):
            self._alarm_line(self.ev_p[i], self.ev_code[i], self.ev_v[i], now, None, 0, 0)
        if new != st:
            self._state_line(m, st, new, cause, now)
            self.m_state[m] = new
            self.m_since[m] = now

    def _event(self, p, ev, v):
        i = self.nev
        self.ev_p[i] = p
        self.ev_code[i] = ev
        self.ev_v[i] = v
        self.nev = i + 1
        if ev == ALARM << 3 | UNACK:
            self.raised += 1

    def _state(self, m, now):
        """The new state of machine m from its contacts or current, its cause in self.cause (C_INTERLOCK +
        the interlock's index for a trip on one). Returns ints only: a tuple would allocate."""
        cfg = self.cfg
        r = self.r
        st = self.m_state[m]
        runs = -1
        on = C_RUN_ON
        c = cfg.m_run[m]
        if c >= 0:
            if r.cwhy[c] == 0:
                runs = r.closed[c]
        else:
            s = cfg.m_cur[m]
            on = C_CURRENT_ON
            if self.s_why[s] == 0 and self.s_seen[s]:
                runs = 1 if r.value[s] > cfg.m_cur_lim[m] else 0
        tc = cfg.m_trip[m]
        tripped = r.closed[tc] if tc >= 0 and r.cwhy[tc] == 0 else -1
        self.cause = 0
        if not self.m_known[m]:
            if runs < 0 and tripped < 0:
                return st
            self.m_known[m] = 1
            st = TRIPPED if tripped == 1 else (RUNNING if runs == 1 else STOPPED)
            self.m_state[m] = st
            self.m_since[m] = now
            return st
        if tripped == 1 and st != TRIPPED:
            il = self._interlock(m)
            self.cause = C_INTERLOCK + il if il >= 0 else C_TRIP_CONTACT
            return TRIPPED
        if st == TRIPPED:
            if tc >= 0:
                if tripped == 0:
                    if runs == 1:
                        self.cause = on
                        return RUNNING
                    self.cause = C_RESET_CONTACT
                    return STOPPED
            elif runs == 1:
                self.cause = on
                return RUNNING
            return st
        if st == STOPPED and runs == 1:
            self.cause = on
            return RUNNING
        if st == RUNNING and runs == 0:
            il = self._interlock(m)
            self.cause = C_INTERLOCK + il if il >= 0 else on + 1
            return TRIPPED if il >= 0 else STOPPED
        return st

    def _interlock(self, m):
        """The interlock of machine m's first point that is active, else whose condition holds on its
        signal's latest good reading; -1 when none."""
        bank = self.bank
        cfg = self.cfg
        found = -1
        for k in range(self.m_first[m], self.m_first[m] + self.m_count[m]):
            s = self.order[k]
            for lv in _TRIP_LEVELS:
                p = self.s_pt[5 * s + lv]
                if p < 0 or self.p_interlock[p] < 0:
                    continue
                if bank.active[p]:
                    return self.p_interlock[p]
                if found < 0 and self.s_why[s] == 0 and self.s_seen[s]:
                    v = self.r.value[s]
                    lim = bank.limit[p]
                    if (v > lim) if lv == HIHI else (v < lim):
                        found = self.p_interlock[p]
        return found

    def _sample_due(self, m, now):
        ms = self.cfg.m_sample[m]
        dt = ticks_diff(now, self.m_sample[m])
        if not self.m_known[m] and dt < 2 * ms:  # wait (a little) for the first readings of its state
            return False
        if ms and dt >= ms:
            return True
        return self.m_changed[m] and dt >= 1000

    # ---- lines ----

    def _put_value(self, buf, j, s, v, why):
        if why or not self.s_seen[s]:
            buf[j] = 63
            return j + 1
        return put_bytes(buf, put_decimal(buf, j, v, self.cfg.s_dec[s]), self.cfg.units_of[s])

    def _emit(self, j, level):
        self.lines += 1
        self.emit(self.buf, j, level)

    def _sample_line(self, m, now):
        cfg = self.cfg
        r = self.r
        b = self.buf
        j = self.clock.stamp(b, 0, now)
        j = put_bytes(b, j, cfg.ids[m])
        b[j] = 32
        j = put_bytes(b, j + 1, PLC[self.m_state[m]])
        first = self.m_first[m]
        for k in range(first, first + self.m_count[m]):
            s = self.order[k]
            b[j] = 32
            j = put_bytes(b, j + 1, cfg.keys[s])
            b[j] = 61
            j = self._put_value(b, j + 1, s, r.value[s], self.s_why[s])
            if not self.s_why[s]:
                self.s_rep[s] = r.value[s]
        self.m_sample[m] = now
        self.m_changed[m] = 0
        self._emit(j, 1)

    def _alarm_line(self, p, ev, v, now, by, by_off, by_n):
        cfg = self.cfg
        b = self.buf
        s = self.p_signal[p]
        verb = ev >> 3
        j = self.clock.stamp(b, 0, now)
        j = put_bytes(b, j, VERBS[verb])
        b[j] = 32
        lv = self.bank.level[p]
        j = put_bytes(b, j + 1, LEVELS[lv])
        b[j] = 32
        j = put_bytes(b, j + 1, cfg.ids[cfg.s_machine[s]])
        b[j] = 32
        j = put_bytes(b, j + 1, cfg.tags[s])
        b[j] = 32
        j = self._put_value(b, j + 1, s, v, self.s_why[s])
        j = put_bytes(b, j, b" prio=")
        b[j] = 48 + self.bank.prio[p]
        b[j + 1] = 32
        j = put_bytes(b, j + 2, STATES[ev & 7])
        why = self.s_why[s]
        if lv == BAD and verb == ALARM and why and j + 5 + len(rd.WHY[why]) <= LINE_MAX:
            j = put_bytes(b, j, b" why=")
            j = put_bytes(b, j, rd.WHY[why])
        if by is not None and by_n and j + 5 <= LINE_MAX:
            j = put_bytes(b, j, b" by=")
            n = by_n if j + by_n <= LINE_MAX else LINE_MAX - j
            for i in range(n):
                b[j + i] = by[by_off + i]
            j += n
        self._emit(j, 2 if verb == ALARM or verb == ACK else 1)

    def _state_line(self, m, old, new, cause, now):
        cfg = self.cfg
        b = self.buf
        j = self.clock.stamp(b, 0, now)
        j = put_bytes(b, j, b"STATE ")
        j = put_bytes(b, j, cfg.ids[m])
        b[j] = 32
        j = put_bytes(b, j + 1, PLC[old])
        j = put_bytes(b, j, b"->")
        j = put_bytes(b, j, PLC[new])
        b[j] = 32
        trip = new == TRIPPED
        if cause >= C_INTERLOCK:
            j = put_bytes(b, j + 1, CAUSES[C_INTERLOCK])
            j = put_bytes(b, j, cfg.interlocks[cause - C_INTERLOCK])
        else:
            j = put_bytes(b, j + 1, CAUSES[cause])
        if trip:
            self.trips += 1
        self._emit(j, 3 if trip else 1)

    def plant_line(self, now):
        """The boot line naming the description: `PLANT name=... hash=... machines=N signals=N`."""
        cfg = self.cfg
        b = self.buf
        j = self.clock.stamp(b, 0, now)
        j = put_bytes(b, j, b"PLANT name=")
        j = put_bytes(b, j, cfg.name)
        j = put_bytes(b, j, b" hash=")
        j = put_bytes(b, j, cfg.hash.encode())
        j = put_bytes(b, j, b" machines=")
        j = put_uint(b, j, cfg.n_machines)
        j = put_bytes(b, j, b" signals=")
        j = put_uint(b, j, cfg.n_signals)
        self._emit(j, 1)

    # ---- operators (the gateway's ACK / SHELVE / UNSHELVE) ----

    def find(self, mid, mid_off, mid_n, tag, tag_off, tag_n):
        """The signal of machine id buf[mid_off:+mid_n] whose tag is tag[tag_off:+tag_n], or -1."""
        cfg = self.cfg
        for s in range(cfg.n_signals):
            if _eq(cfg.tags[s], tag, tag_off, tag_n) and _eq(cfg.ids[cfg.s_machine[s]], mid, mid_off, mid_n):
                return s
        return -1

    def operator(self, verb, s, level, by, by_off, by_n, now):
        """Apply an operator's verb (ACK, SHELVE, UNSHELVE of shared/plant_alarms) to signal s's points of
        `level` (-1: every level), logging each change naming who (by[by_off:+by_n]); returns how many."""
        bank = self.bank
        done = 0
        for lv in range(5):
            if level >= 0 and lv != level:
                continue
            p = self.s_pt[5 * s + lv]
            if p < 0:
                continue
            if verb == ACK:
                ev = bank.ack(p)
            elif verb == SHELVE:
                ev = bank.shelve(p)
            elif verb == UNSHELVE:
                ev = bank.unshelve(p)
            else:
                ev = -1
            if ev >= 0:
                self._alarm_line(p, ev, self.r.value[s], now, by, by_off, by_n)
                done += 1
        return done

    def poll_gap_max(self):
        """The longest time (ms) any signal went between two readings since boot: the worst poll cycle."""
        g = 0
        for s in range(self.cfg.n_signals):
            if self.s_gap[s] > g:
                g = self.s_gap[s]
        return g


def _eq(a, buf, off, n):
    if len(a) != n:
        return False
    for i in range(n):
        if a[i] != buf[off + i]:
            return False
    return True
