# plant.py: a seeded, integer-only plant simulator: machines, faults, PLC interlocks, ISA-18.2 alarms, log lines.
"""The node's sensor source on the virtual board and the host's corpus generator, from the same file.

    p = Plant(seed, n_machines=4)        # pumps P-1xx, motors M-2xx, compressors C-3xx, conveyors CV-4xx
    buf = bytearray(LINE_MAX)
    n = p.step()                         # one tick (1 s); allocation-free on MicroPython
    for i in range(n):
        k = p.line_into(i, buf)          # the i-th log line of this tick, allocation-free
    p.lines()                            # the same lines as str (allocates the strings)

Everything that decides a line is integer arithmetic (values in hundredths of their unit, gains in
Q12, a two-half xorshift32 whose ints stay below 2**30, a field-by-field clock), so one seed gives
byte-identical lines on CPython and on MicroPython, whose floats are single precision on the boards.
The machines, their alarms and faults are documented in docs/SIMULATOR.md, the log grammar in docs/PLANT.md.
"""
from array import array

from shared.plant_alarms import ACKED, ALARM, BAD, LEVELS, RTN_UNACK, SHELVED, UNACK, VERBS, AlarmBank
from shared.plant_alarms import STATES as ALARM_STATES
from shared.plant_faults import (BEARING_WEAR, CAVITATION, CLOGGED_FILTER, DRIFT, MISSING, OVERHEATING, SENSOR_FIRST,
                                 Faults)
from shared.plant_faults import NAMES as FAULTS
from shared.compat import const
from shared.linefmt import date_into, put_decimal
from shared.linefmt import put_bytes as _put
from shared.linefmt import put_fixed as _put_fixed
from shared.linefmt import put_uint as _put_uint
# the catalogue: which kinds, signals, units, alarm points and interlocks the simulator's machines have
from shared.plant_catalogue import ALARMS as _ALARMS
from shared.plant_catalogue import BAD_POINT as _BAD_POINT
from shared.plant_catalogue import KEY as _KEY
from shared.plant_catalogue import SETTLE_S as _SETTLE
from shared.plant_catalogue import TAG as _TAG
from shared.plant_catalogue import UNIT as _UNIT
from shared.plant_catalogue import UNIT_X as _UNIT_X
from shared.plant_catalogue import KINDS, MAX_MACHINES, MAXP, NCH, PREFIXES, TRIPS, machine_id  # noqa: F401 (re-exported)

PUMP = const(0)  # = plant_catalogue.PUMP ...: kinds and channels are folded constants here (the hot path)
MOTOR = const(1)
COMPRESSOR = const(2)
CONVEYOR = const(3)

LINE_MAX = const(128)  # no line is longer (values are clamped to their sensor ranges)
START_EPOCH = const(1796018400)  # 2026-11-30T06:00:00Z
MAX_EPOCH = 253402300799 - (1 << 31)  # the clock stays within four-digit years

STOPPED = const(0)
STARTING = const(1)
RUNNING = const(2)
STOPPING = const(3)
TRIPPED = const(4)
STATES = (b"STOPPED", b"STARTING", b"RUNNING", b"STOPPING", b"TRIPPED")

# channels (= plant_catalogue.T ... X); readings are in hundredths of the unit
_T = const(0)
_V = const(1)
_I = const(2)
_P = const(3)
_Q = const(4)
_D = const(5)
_X = const(6)
# first-order lag gain per tick, Q12 (4096: follows at once; 14: time constant ~300 s)
_GAIN = (14, 2048, 3000, 2048, 1400, 1400, 0,
         7, 2048, 3000, 0, 0, 0, 1600,
         27, 2048, 3000, 4096, 1400, 1400, 0,
         5, 2048, 3000, 0, 0, 0, 1600)
# nominal parameter ranges: T = temperature rise at full duty, V = base vibration, I = rated current,
# P = pump pressure / compressor cut-in, Q = rated flow, D = filter dP at rated flow, X = rated speed
_NOM = ((2000, 3500), (100, 280), (1500, 4500), (250, 550), (2500, 8000), (1200, 2500), (0, 0),
        (5000, 7000), (80, 220), (2000, 9000), (0, 0), (0, 0), (0, 0), (0, 2),
        (5000, 6000), (150, 300), (4000, 12000), (650, 700), (20000, 60000), (250, 350), (0, 0),
        (2000, 3000), (100, 250), (1000, 4000), (0, 0), (0, 0), (0, 0), (150, 300))
_MOTOR_RPM = (98000, 148000, 296000)
_SIG_ABS = (12, 4, 5, 2, 5, 5, 1)  # noise sigma = abs + value * rel / 1000
_SIG_REL = (0, 25, 8, 0, 8, 15, 2)
_DRIFT_H = (300, 40, 100, 20, 300, 300, 0)  # sensor drift per hour at severity 1 (speed: see _start)
# per kind: running time, rest time, load range, load hold time (s), load slew (per mille / s), ramps (s)
_RUN = ((1800, 14400), (3600, 28800), (900, 5400), (1200, 7200))
_REST = ((120, 1800), (300, 1800), (300, 1200), (60, 900))
_LOAD = ((0, 1000), (400, 950), (100, 900), (0, 1000))
_HOLD = ((60, 900), (120, 1800), (60, 600), (10, 120))
_SLEW = (3, 2, 2, 25)
_START = (5, 8, 10, 6)
_STOP = (4, 12, 15, 5)
_INRUSH = (3, 4, 3, 2)  # starting current at zero speed, times rated

_C_SCHEDULE = const(0)
_C_OPERATOR = const(1)
_C_RAMP = const(2)
_C_RESET = const(3)
_C_TRIP = const(8)  # + trip code
_CAUSES = (b"cmd=schedule", b"cmd=operator", b"ramp=done", b"reset=operator")
_ACK = ((0, 0), (60, 900), (30, 300), (15, 120), (5, 40))  # operator ack delay by prio: base, spread (s)
_SHELVE_AFTER = const(600)  # an acknowledged BAD alarm still active this long gets shelved ...
_SHELVE_FOR = const(3600)  # ... for an hour
_BLOCKED = const(900)  # a start held off this long by an interlock calls maintenance
_APPLIES = (0, 15, 1, 15, 5, 15, 15, 15)  # fault -> bit mask of kinds it can hit
_AUTO = const(0)
_HAND_ON = const(1)
_HAND_OFF = const(2)
_K_SAMPLE = const(0)
_K_STATE = const(1)
_K_ALARM = const(2)
_K_LOST = const(3)
_REC = const(5)  # queue record: kind, machine, a, b, c
_BUFS = (bytearray, memoryview)
_MDAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class PlantError(ValueError):
    pass


def _check_int(name, v, lo, hi):
    if type(v) is not int or not lo <= v <= hi:
        raise PlantError("%s must be an int in %d..%d, got %r" % (name, lo, hi, v))


def civil(epoch_s):
    """(year, month, day, hour, minute, second) of a Unix time (integer arithmetic, proleptic Gregorian)."""
    days, sod = divmod(epoch_s, 86400)
    ymd = [0, 0, 0]
    date_into(days, ymd)
    return (ymd[0], ymd[1], ymd[2], sod // 3600, sod // 60 % 60, sod % 60)


def iso(epoch_s):
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % civil(epoch_s)


class Plant:
    """A seeded plant of 1..16 machines ticking once a simulated second.

    seed: 0..2**32-1; n_machines: default 4 (one of each kind; more are seeded picks); kinds: instead of
    n_machines, e.g. ["pump", "pump", "motor"] or ["P", "P", "M"]; start_epoch_s: the first timestamp;
    sample_every: seconds between a machine's sample lines (events are logged when they happen);
    fault_every_h: mean hours between spontaneous faults per machine (0: only injected ones);
    events: event lines one tick can hold (more are dropped, counted in `dropped`, and reported by a
    LOST line in the next tick). Counters: raised[prio], trips, trip_count[code], dropped."""

    def __init__(self, seed, n_machines=None, start_epoch_s=START_EPOCH, sample_every=1, fault_every_h=8,
                 events=32, kinds=None):
        _check_int("seed", seed, 0, 0xFFFFFFFF)
        _check_int("start_epoch_s", start_epoch_s, 0, MAX_EPOCH)
        _check_int("sample_every", sample_every, 1, 3600)
        _check_int("fault_every_h", fault_every_h, 0, 10000)
        _check_int("events", events, 1, 1024)
        s = (seed * 2654435761 + 0x6D2B79F5) & 0xFFFFFFFF or 1
        self._rh = s >> 16
        self._rl = s & 0xFFFF
        for _ in range(4):
            self._rand()
        kinds = self._layout(n_machines, kinds)
        n = self.n = len(kinds)
        self.sample_every = sample_every
        self.fault_every = fault_every_h * 3600
        self.start_epoch = start_epoch_s
        self.tick = -1
        z = bytearray(4 * n)
        zc = bytearray(4 * n * NCH)
        zp = bytearray(4 * n * MAXP)
        self.kind = bytearray(kinds)
        self.plc = bytearray(n)
        self.mode = bytearray(n)
        self.duty_on = bytearray(n)
        self.loaded = bytearray(n)
        self.trip_now = bytearray(n)
        self.speed = array("i", z)
        self.load = array("i", z)
        self.ltgt = array("i", z)
        self.lleft = array("i", z)
        self.duty_left = array("i", z)
        self.tin = array("i", z)
        self.repair_left = array("i", z)
        self.nom = array("i", zc)
        self.tv = array("i", zc)  # true values
        self.rem = array("i", zc)  # lag remainders
        self.meas = array("i", zc)  # readings (MISSING when absent)
        self.lo = array("i", zc)
        self.hi = array("i", zc)
        self._tgt = array("i", bytearray(4 * NCH))
        self.bank = AlarmBank(n * MAXP)
        self.pch = bytearray(n * MAXP)
        self.ptrip = bytearray(n * MAXP)
        self.prun = bytearray(n * MAXP)
        self.npts = bytearray(n)
        self.op_due = array("i", zp)  # tick of the operator's next action on the point; -1 none
        self.faults = Faults(n, 2 * n + 32)
        self.raised = array("i", bytearray(20))  # alarms raised, by prio 1..4
        self.trip_count = array("i", bytearray(4 * len(TRIPS)))
        self.trips = 0
        self.dropped = 0
        self.lost = 0
        self.ev_cap = events
        self.nev = 0
        self.nq = self.level = 0  # lines this tick; the level of the one line_into wrote last
        self._q = array("i", bytearray(4 * _REC * (n + events + 1)))
        self._buf = bytearray(LINE_MAX)
        self.ids = []
        count = [0, 0, 0, 0]
        for m in range(n):
            k = kinds[m]
            count[k] += 1
            self.ids.append(machine_id(k, count[k]))
            self._setup(m, k)
        self._idb = [i.encode() for i in self.ids]
        self.yy, self.mo, self.dd, self.hh, self.mi, self.ss = civil(start_epoch_s)
        self.amb_base = 1500 + self._below(1501)
        self._ambient()
        for m in range(n):
            self._physics(m, self.kind[m], self.plc[m], 1)
            for ch in range(NCH):
                self.meas[m * NCH + ch] = self.tv[m * NCH + ch]

    # ---- construction ----
    def _layout(self, n_machines, kinds):
        if kinds is None:
            n = 4 if n_machines is None else n_machines
            _check_int("n_machines", n, 1, MAX_MACHINES)
            out = [0, 1, 2, 3]
            for i in range(3, 0, -1):  # seeded shuffle: which kinds a small plant has
                j = self._below(i + 1)
                out[i], out[j] = out[j], out[i]
            out = out[:n] + [self._below(4) for _ in range(n - 4)]
        else:
            if not isinstance(kinds, (list, tuple)) or not 1 <= len(kinds) <= MAX_MACHINES:
                raise PlantError("kinds must be a list of 1..%d machine kinds" % MAX_MACHINES)
            if n_machines is not None and n_machines != len(kinds):
                raise PlantError("n_machines=%r disagrees with %d kinds" % (n_machines, len(kinds)))
            out = []
            for k in kinds:
                if k in KINDS:
                    out.append(KINDS.index(k))
                elif k in PREFIXES:
                    out.append(PREFIXES.index(k))
                else:
                    raise PlantError("unknown machine kind %r (one of %s or %s)" % (k, KINDS, PREFIXES))
        out.sort()
        return out

    def _setup(self, m, k):
        b = m * NCH
        for ch in range(NCH):
            lo, hi = _NOM[k * NCH + ch]
            self.nom[b + ch] = lo + self._below(hi - lo + 1)
        if k == MOTOR:
            self.nom[b + _X] = _MOTOR_RPM[self.nom[b + _X]]
        top = (25000, 5000, 6 * self.nom[b + _I], 2500, 2 * self.nom[b + _Q], 25000, 12 * self.nom[b + _X] // 10)
        for ch in range(NCH):
            self.lo[b + ch] = -4000 if ch == _T else 0
            self.hi[b + ch] = top[ch]
        pts = list(_ALARMS[k])
        for ch in range(NCH):
            if _KEY[k * NCH + ch] is not None:
                pts.append((ch, BAD) + _BAD_POINT)
        self.npts[m] = len(pts)
        for j in range(len(pts)):
            ch, level, lim, db, on, off, prio, trip, run_only, rel = pts[j]
            if rel:
                lim = self.nom[b + ch] * lim // 1000
                db = self.nom[b + ch] * db // 1000
            p = m * MAXP + j
            self.bank.configure(p, level, lim, db, on, off, prio)
            self.pch[p] = ch
            self.ptrip[p] = trip
            self.prun[p] = run_only
            self.op_due[p] = -1
        running = self._below(5) != 0
        self.plc[m] = RUNNING if running else STOPPED
        self.duty_on[m] = 1 if running else 0
        self.duty_left[m] = 1 + self._below(self._draw(_RUN[k] if running else _REST[k]))
        self.speed[m] = 1000 if running else 0
        self.tin[m] = 1000
        self.load[m] = self.ltgt[m] = self._draw(_LOAD[k])
        self.lleft[m] = self._draw(_HOLD[k])
        if k == COMPRESSOR and running:
            self.tv[b + _P] = self.nom[b + _P] + self._below(100)
            self.loaded[m] = 1

    # ---- the portable PRNG: xorshift32 in two 16-bit halves (no int reaches 2**30 on a board) ----
    def _rand(self):
        h = self._rh
        lw = self._rl
        h ^= ((h << 13) | (lw >> 3)) & 0xFFFF  # s ^= s << 13
        lw ^= (lw << 13) & 0xFFFF
        lw ^= h >> 1  # s ^= s >> 17
        h ^= ((h << 5) | (lw >> 11)) & 0xFFFF  # s ^= s << 5
        lw ^= (lw << 5) & 0xFFFF
        self._rh = h
        self._rl = lw
        return (h << 14) | (lw >> 2)  # 30 bits

    def _below(self, n):
        return self._rand() % n

    def _draw(self, rng):
        lo, hi = rng
        return lo + self._rand() % (hi - lo + 1)

    # ---- one tick ----
    def step(self):
        """Advance one second; returns how many log lines this tick has (line_into / line read them)."""
        t = self.tick + 1
        self.tick = t
        if t:
            self._advance_clock()
        self.nq = 0
        self.nev = 0
        if self.lost:
            self._rec(_K_LOST, 0, self.lost, 0, 0)
            self.lost = 0
        self._ambient()
        sample = 1 if t % self.sample_every == 0 else 0
        for m in range(self.n):
            self._machine(m, t, sample)
        return self.nq

    def _rec(self, kind, m, a, b, c):
        r = self.nq * _REC
        q = self._q
        q[r] = kind
        q[r + 1] = m
        q[r + 2] = a
        q[r + 3] = b
        q[r + 4] = c
        self.nq += 1

    def _event(self, kind, m, a, b, c):
        if self.nev >= self.ev_cap:
            self.dropped += 1
            self.lost += 1
            return
        self.nev += 1
        self._rec(kind, m, a, b, c)

    def _advance_clock(self):
        s = self.ss + 1
        if s == 60:
            s = 0
            mi = self.mi + 1
            if mi == 60:
                mi = 0
                h = self.hh + 1
                if h == 24:
                    h = 0
                    self._next_day()
                self.hh = h
            self.mi = mi
        self.ss = s

    def _next_day(self):
        y = self.yy
        d = self.dd + 1
        last = _MDAYS[self.mo]
        if self.mo == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
            last = 29
        if d > last:
            d = 1
            mo = self.mo + 1
            if mo > 12:
                mo = 1
                self.yy = y + 1
            self.mo = mo
        self.dd = d

    def _ambient(self):
        d = self.hh * 3600 + self.mi * 60 + self.ss - 54000  # warmest at 15:00, +-4 C over the day
        if d < 0:
            d = -d
        if d > 43200:
            d = 86400 - d
        self.amb = self.amb_base + 400 - d * 800 // 43200

    def _machine(self, m, t, sample):
        k = self.kind[m]
        st = self.plc[m]
        if self.fault_every and self._below(self.fault_every) == 0:
            self._spontaneous(m, k, t)
        self._schedule(m, k)
        self.faults.advance(m, self.speed[m] > 0, t)
        self._physics(m, k, st, 0)
        self._measure(m, k)
        if sample:
            self._rec(_K_SAMPLE, m, st, 0, 0)
        self._alarms(m, k, st, t)
        self._plc(m, k, st, t)

    def _schedule(self, m, k):
        left = self.lleft[m] - 1
        if left <= 0:
            self.ltgt[m] = self._draw(_LOAD[k])
            left = self._draw(_HOLD[k])
        self.lleft[m] = left
        ld = self.load[m]
        tg = self.ltgt[m]
        r = _SLEW[k]
        if ld < tg:
            ld = tg if ld + r > tg else ld + r
        elif ld > tg:
            ld = tg if ld - r < tg else ld - r
        self.load[m] = ld
        if self.mode[m] == _AUTO:
            d = self.duty_left[m] - 1
            if d <= 0:
                on = 1 - self.duty_on[m]
                self.duty_on[m] = on
                d = self._draw(_RUN[k] if on else _REST[k])
            self.duty_left[m] = d

    def _physics(self, m, k, st, snap):
        """Targets of the true values from speed, load, ambient and the process fault; then first-order lags."""
        b = m * NCH
        nom = self.nom
        tv = self.tv
        t = self._tgt
        s = self.speed[m]
        ld = self.load[m]
        e = self.faults.effect(m)
        pf = self.faults.pf[m]
        wear = e if pf == BEARING_WEAR else 0
        cav = e if pf == CAVITATION else 0
        heat = e if pf == OVERHEATING else 0
        clog = e if pf == CLOGGED_FILTER else 0
        amb = self.amb
        inom = nom[b + _I]
        inrush = inom * _INRUSH[k] * (1000 - s) // 1000 if st == STARTING else 0
        vib = wear * wear * 13 // 10000  # bearing wear: up to +13 mm/s at full speed
        if st == STARTING:
            vib += 150  # passing through resonance
        if k == PUMP:
            qf = (400 + 600 * ld // 1000) * s // 1000 * (1000 - 650 * clog // 1000) // 1000
            pres = 1000
            if cav:  # flow and pressure oscillate, vibration in bursts
                r = self._rand()
                qf = qf * (1000 - 60 * cav // 1000 - (r & 1023) * cav // 5000) // 1000
                pres = 1000 - ((r >> 10) & 511) * cav // 2000
                vib += 700 * cav // 1000
                if (r >> 19) % 1000 < cav // 4:
                    vib += (r >> 20) % 800 * cav // 1000
            t[_Q] = nom[b + _Q] * qf // 1000
            t[_P] = nom[b + _P] * s // 1000 * s // 1000 * (1250 - 350 * qf // 1000) // 1000 * pres // 1000
            t[_D] = nom[b + _D] * s // 1000 * s // 1000 * (1000 + 7 * clog) // 1000
            t[_I] = inom * (250 + 700 * qf // 1000 + 60 * wear // 1000) // 1000 * s // 1000 + inrush
            t[_T] = amb + nom[b + _T] * (500 + qf // 2) // 1000 * s // 1000 + 4 * wear + 8 * heat + cav // 2
        elif k == MOTOR:
            ifr = (300 + 700 * ld // 1000 + 80 * wear // 1000) * s // 1000
            x = nom[b + _X]
            t[_X] = (x - x // 1000 * 15 * ld // 1000) * s // 1000  # 1.5 % slip at full load
            t[_I] = inom * ifr // 1000 + inrush
            t[_T] = amb + nom[b + _T] * ifr // 1000 * ifr // 1000 * (1000 + 2 * heat) // 1000 + 3 * heat + 3 * wear // 2
        elif k == COMPRESSOR:  # load/unload between cut-in and cut-in + 1 bar
            p = tv[b + _P]
            cut_in = nom[b + _P]
            if st != RUNNING:
                self.loaded[m] = 0
            elif p < cut_in:
                self.loaded[m] = 1
            elif p > cut_in + 100:
                self.loaded[m] = 0
            on = self.loaded[m]
            if s:
                p += (6 - 3 * clog // 1000) * s // 1000 if on else 0
                p -= 1 + 3 * ld // 1000  # the plant's air demand
            elif self._below(6) == 0:
                p -= 1  # stopped: the receiver only leaks (~0.1 bar/min)
            t[_P] = p if p > 0 else 0
            t[_Q] = nom[b + _Q] * s // 1000 * (1000 - 400 * clog // 1000) // 1000 if on else 0
            duty = 1000 if on else 380
            t[_I] = inom * (duty - 150 * clog // 1000 + 50 * wear // 1000) // 1000 * s // 1000 + inrush
            t[_T] = amb + nom[b + _T] * (1000 if on else 450) // 1000 * s // 1000 + 3 * clog // 2 + 7 * heat + wear
            t[_D] = nom[b + _D] * (1000 if on else 300) // 1000 * s // 1000 * (1000 + 4 * clog) // 1000
        else:
            t[_X] = nom[b + _X] * s // 1000
            t[_I] = inom * (350 + 650 * ld // 1000 + 100 * wear // 1000) // 1000 * s // 1000 + inrush
            t[_T] = amb + nom[b + _T] * (500 + ld // 2) // 1000 * s // 1000 + 7 * wear // 2 + 9 * heat
        t[_V] = (nom[b + _V] + vib) * s // 1000
        rem = self.rem
        for ch in range(NCH):
            g = _GAIN[k * NCH + ch]
            if g == 0:
                continue
            i = b + ch
            if snap:
                tv[i] = t[ch]
                continue
            a = (t[ch] - tv[i]) * g + rem[i]
            d = a >> 12
            rem[i] = a - (d << 12)
            tv[i] += d

    def _measure(self, m, k):
        b = m * NCH
        f = self.faults
        sf = f.sf[m]
        sch = f.sch[m]
        tv = self.tv
        for ch in range(NCH):
            if _GAIN[k * NCH + ch] == 0:
                continue
            i = b + ch
            v = tv[i]
            r = self._rand()
            noise = (r & 1023) + ((r >> 10) & 1023) + (r >> 20) - 1534  # sum of 3 uniforms: sigma 512
            v += noise * (_SIG_ABS[ch] + v * _SIG_REL[ch] // 1000) >> 9
            if sf and ch == sch:
                v = f.sense(m, v, r >> 3)
                if v == MISSING:
                    self.meas[i] = MISSING
                    continue
            if v < self.lo[i]:
                v = self.lo[i]
            elif v > self.hi[i]:
                v = self.hi[i]
            self.meas[i] = v

    def _alarms(self, m, k, st, t):
        bank = self.bank
        b = m * NCH
        run_ok = 1 if st == RUNNING and self.tin[m] >= _SETTLE else 0
        trip = 0
        for j in range(self.npts[m]):
            p = m * MAXP + j
            v = self.meas[b + self.pch[p]]
            if bank.level[p] == BAD:
                ev = bank.evaluate(p, 1 if v == MISSING else 0, 1)
            elif v == MISSING:  # hold the last state, unless the point is disarmed anyway
                ev = bank.evaluate(p, 0, 0) if self.prun[p] and not run_ok else -1
            else:
                ev = bank.evaluate(p, v, run_ok if self.prun[p] else 1)
            if ev >= 0:
                self._event(_K_ALARM, m, j, ev, v)
                if ev == ALARM << 3 | UNACK:
                    self.raised[bank.prio[p]] += 1
                    self.op_due[p] = t + self._draw(_ACK[bank.prio[p]])
            due = self.op_due[p]
            if 0 <= due <= t:
                self._operator(m, j, p, v, t)
            if trip == 0 and self.ptrip[p] and bank.active[p]:
                trip = self.ptrip[p]
        self.trip_now[m] = trip

    def _operator(self, m, j, p, v, t):
        """The operator acknowledges after a delay; shelves a nuisance BAD alarm for an hour."""
        bank = self.bank
        st = bank.state[p]
        self.op_due[p] = -1
        if st == UNACK or st == RTN_UNACK:
            ev = bank.ack(p)
            if bank.level[p] == BAD and bank.state[p] == ACKED:
                self.op_due[p] = t + _SHELVE_AFTER
        elif st == ACKED:
            ev = bank.shelve(p)
            self.op_due[p] = t + _SHELVE_FOR
        elif st == SHELVED:
            ev = bank.unshelve(p)
            if bank.state[p] == UNACK:
                self.op_due[p] = t + self._draw(_ACK[bank.prio[p]])
        else:
            return
        self._event(_K_ALARM, m, j, ev, v)

    def _plc(self, m, k, st, t):
        """STOPPED -> STARTING -> RUNNING -> STOPPING -> STOPPED; any energized state -> TRIPPED on an interlock."""
        tin = self.tin[m] + 1 if self.tin[m] < (1 << 29) else self.tin[m]
        mode = self.mode[m]
        want = self.duty_on[m] if mode == _AUTO else (1 if mode == _HAND_ON else 0)
        cmd = _C_SCHEDULE if mode == _AUTO else _C_OPERATOR
        s = self.speed[m]
        trip = self.trip_now[m]
        new = st
        why = 0
        if trip and (st == STARTING or st == RUNNING or st == STOPPING):
            new = TRIPPED
            why = _C_TRIP + trip
            self.trips += 1
            self.trip_count[trip] += 1
            self.repair_left[m] = 900 + self._below(1801) if self.faults.has_fault(m) else 120 + self._below(481)
        elif st == STARTING:
            s += 1000 // _START[k]
            if s >= 1000:
                s = 1000
                new = RUNNING
                why = _C_RAMP
            elif not want:
                new = STOPPING
                why = cmd
        elif st == RUNNING:
            if not want:
                new = STOPPING
                why = cmd
        elif st == STOPPING:
            s -= 1000 // _STOP[k]
            if s <= 0:
                s = 0
                new = STOPPED
                why = _C_RAMP
        elif st == STOPPED:
            if want:
                if not trip:
                    new = STARTING
                    why = cmd
                elif tin > _BLOCKED:  # an interlock holds the start: maintenance finds the fault
                    self.faults.repair(m, t)
                    tin = 0
        else:  # TRIPPED: coast down, wait for maintenance, then reset
            s = s - 334 if s > 334 else 0
            r = self.repair_left[m]
            if r > 0:
                self.repair_left[m] = r - 1
                if r == 1:
                    self.faults.repair(m, t)
            elif not trip:
                new = STOPPED
                why = _C_RESET
                self.duty_on[m] = 0
                self.duty_left[m] = self._draw((30, 180))
        self.speed[m] = s
        if new != st:
            self.plc[m] = new
            tin = 0
            self._event(_K_STATE, m, st, new, why)
        self.tin[m] = tin

    def _spontaneous(self, m, k, t):
        f = 1 + self._below(7)
        if not _APPLIES[f] >> k & 1 or (self.faults.sf[m] if f >= SENSOR_FIRST else self.faults.pf[m]):
            return
        ch = self._channel(k)
        self._start(m, f, 1 + self._below(3), ch, 1800 + self._below(10801), t)

    def _channel(self, k):
        ch = self._below(NCH)
        while _KEY[k * NCH + ch] is None:
            ch = ch + 1 if ch + 1 < NCH else 0
        return ch

    def _start(self, m, f, sev, ch, ticks, t):
        i = m * NCH + ch
        reading = self.meas[i] if self.meas[i] != MISSING else self.tv[i]
        rate = 0
        if f == DRIFT:
            per_h = _DRIFT_H[ch] if ch != _X else self.nom[i] // 100  # speed: 1 % of rated per hour
            rate = per_h * sev * (1 if self._rl & 1 else -1)  # a seeded sign that leaves the stream alone
        self.faults.start(m, f, sev, ch, ticks, t, reading, rate)

    # ---- lines ----
    def line_into(self, i, buf):
        """Write line i of this tick into buf (a bytearray of at least LINE_MAX bytes); returns its length.
        Its level is then in self.level: 1 info (samples, alarms cleared or (un)shelved, state changes),
        2 warning (an alarm raised or acknowledged, LOST), 3 error (a state change an interlock tripped)."""
        if type(i) is not int or not 0 <= i < self.nq:
            raise PlantError("line %r out of range: this tick has %d lines" % (i, self.nq))
        if not isinstance(buf, _BUFS) or len(buf) < LINE_MAX:
            raise PlantError("buf must be a bytearray or memoryview of at least %d bytes" % LINE_MAX)
        q = self._q
        r = i * _REC
        kind = q[r]
        m = q[r + 1]  # 0 in a LOST record
        idb = self._idb[m]
        k = self.kind[m]
        j = self._put_ts(buf)
        lv = 1
        if kind == _K_SAMPLE:
            j = _put(buf, j, idb)
            buf[j] = 32
            j = _put(buf, j + 1, STATES[q[r + 2]])
            for ch in range(NCH):
                key = _KEY[k * NCH + ch]
                if key is not None:
                    buf[j] = 32
                    j = _put(buf, j + 1, key)
                    buf[j] = 61
                    j = self._put_value(buf, j + 1, k, ch, self.meas[m * NCH + ch])
        elif kind == _K_ALARM:
            p = m * MAXP + q[r + 2]
            ev = q[r + 3]
            if ev < 16:  # ALARM, ACK
                lv = 2
            j = _put(buf, j, VERBS[ev >> 3])
            buf[j] = 32
            j = _put(buf, j + 1, LEVELS[self.bank.level[p]])
            buf[j] = 32
            j = _put(buf, j + 1, idb)
            buf[j] = 32
            ch = self.pch[p]
            j = _put(buf, j + 1, _TAG[k * NCH + ch])
            buf[j] = 32
            j = self._put_value(buf, j + 1, k, ch, q[r + 4])
            j = _put(buf, j, b" prio=")
            buf[j] = 48 + self.bank.prio[p]
            buf[j + 1] = 32
            j = _put(buf, j + 2, ALARM_STATES[ev & 7])
        elif kind == _K_STATE:
            j = _put(buf, j, b"STATE ")
            j = _put(buf, j, idb)
            buf[j] = 32
            j = _put(buf, j + 1, STATES[q[r + 2]])
            j = _put(buf, j, b"->")
            j = _put(buf, j, STATES[q[r + 3]])
            buf[j] = 32
            why = q[r + 4]
            if why >= _C_TRIP:
                lv = 3
                j = _put(buf, j + 1, b"interlock=")
                j = _put(buf, j, TRIPS[why - _C_TRIP])
            else:
                j = _put(buf, j + 1, _CAUSES[why])
        else:
            lv = 2
            j = _put(buf, j, b"LOST events=")
            j = _put_uint(buf, j, q[r + 2])
        self.level = lv
        return j

    def _put_ts(self, buf):
        _put_fixed(buf, 0, self.yy, 4)
        buf[4] = 45
        _put_fixed(buf, 5, self.mo, 2)
        buf[7] = 45
        _put_fixed(buf, 8, self.dd, 2)
        buf[10] = 84
        _put_fixed(buf, 11, self.hh, 2)
        buf[13] = 58
        _put_fixed(buf, 14, self.mi, 2)
        buf[16] = 58
        _put_fixed(buf, 17, self.ss, 2)
        buf[19] = 90
        buf[20] = 32
        return 21

    def _put_value(self, buf, j, k, ch, v):
        if v == MISSING:
            buf[j] = 63
            return j + 1
        if ch == _X:
            if k == MOTOR:
                j = _put_uint(buf, j, (v + 50) // 100)
            else:
                j = put_decimal(buf, j, v, 1)
            return _put(buf, j, _UNIT_X[k])
        return _put(buf, put_decimal(buf, j, v, 1), _UNIT[ch])

    def line(self, i):
        """Line i of this tick as a str (allocates the string and one slice)."""
        n = self.line_into(i, self._buf)
        return self._buf[:n].decode()

    def lines(self):
        return [self.line(i) for i in range(self.nq)]

    # ---- control and inspection (not hot paths) ----
    def machine_index(self, machine):
        if type(machine) is int and 0 <= machine < self.n:
            return machine
        if machine in self.ids:
            return self.ids.index(machine)
        raise PlantError("unknown machine %r (this plant has %s)" % (machine, ", ".join(self.ids)))

    def _signal(self, m, signal):
        k = self.kind[m]
        for ch in range(NCH):
            key = _KEY[k * NCH + ch]
            if key is not None and signal in (key.decode(), _TAG[k * NCH + ch].decode()):
                return ch
        raise PlantError("%s has no signal %r" % (self.ids[m], signal))

    def signal_name(self, m, ch):
        return _TAG[self.kind[m] * NCH + ch].decode()

    def inject(self, machine, fault, severity=3, signal=None, duration_s=0):
        """Start a fault now (it acts from the next tick). Sensor faults sit on `signal` (a line key such as
        "T" or a tag such as "bearing_temp"; default: a seeded pick) for duration_s (0: until repaired)."""
        m = self.machine_index(machine)
        if fault not in FAULTS[1:]:
            raise PlantError("unknown fault %r (one of %s)" % (fault, ", ".join(FAULTS[1:])))
        f = FAULTS.index(fault)
        _check_int("severity", severity, 1, 5)
        _check_int("duration_s", duration_s, 0, 1 << 29)
        k = self.kind[m]
        if not _APPLIES[f] >> k & 1:
            raise PlantError("%s cannot develop %s (a %s)" % (self.ids[m], fault, KINDS[k]))
        busy = self.faults.sf[m] if f >= SENSOR_FIRST else self.faults.pf[m]
        if busy:
            raise PlantError("%s already has %s (one process and one sensor fault at a time)"
                             % (self.ids[m], FAULTS[busy]))
        if f < SENSOR_FIRST:
            if signal is not None or duration_s:
                raise PlantError("signal and duration_s are for sensor faults; %s lasts until repaired" % fault)
            ch = 0
        else:
            ch = self._channel(k) if signal is None else self._signal(m, signal)
        self._start(m, f, severity, ch, duration_s, self.tick + 1)

    def command(self, machine, cmd):
        """Operator: 'start' or 'stop' (hand mode), or 'auto' (back to the duty schedule)."""
        m = self.machine_index(machine)
        modes = ("auto", "start", "stop")
        if cmd not in modes:
            raise PlantError("command must be one of %s, got %r" % (modes, cmd))
        self.mode[m] = modes.index(cmd)

    def state(self, machine):
        return STATES[self.plc[self.machine_index(machine)]].decode()

    def reading(self, machine, signal):
        """The latest reading of a signal in hundredths of its unit, or None when it is missing."""
        m = self.machine_index(machine)
        v = self.meas[m * NCH + self._signal(m, signal)]
        return None if v == MISSING else v

    def epoch_s(self, tick=None):
        return self.start_epoch + (self.tick if tick is None else tick)

    def timestamp(self, tick=None):
        return iso(self.epoch_s(tick))

    def truth(self):
        """Ground truth: every fault of the recent history (machine, fault, severity, since, until, ...)."""
        return self.faults.truth(self.timestamp, self.ids, self.signal_name)

    def summary(self):
        return {"ticks": self.tick + 1, "alarms_by_prio": dict((p, self.raised[p]) for p in range(1, 5)),
                "trips": self.trips, "trips_by_interlock": dict((TRIPS[c].decode(), self.trip_count[c])
                                                                 for c in range(1, len(TRIPS))),
                "faults_started": self.faults.started, "events_dropped": self.dropped}
