# plant_faults.py: the simulator's fault catalogue and per-machine fault state: onset, growth, sensor effects, truth.
"""Each machine has two fault slots: a process fault (bearing wear, cavitation, overheating, clogged
filter) whose progress grows from 0 to PROG_FULL while the machine is energized (how fast: the
severity, 1..5), and a sensor fault on one channel (dropout, stuck value, drift) that lasts a given
number of ticks or until the machine is repaired. Every onset and end goes into a bounded history
ring, the ground truth a corpus is labelled with. Integers only; nothing allocates after construction
except truth(), which builds the report.
"""
from array import array

from shared.compat import const

NONE = const(0)
BEARING_WEAR = const(1)
CAVITATION = const(2)
OVERHEATING = const(3)
CLOGGED_FILTER = const(4)
SENSOR_DROPOUT = const(5)
STUCK_VALUE = const(6)
DRIFT = const(7)
SENSOR_FIRST = const(5)
NAMES = ("none", "bearing_wear", "cavitation", "overheating", "clogged_filter", "sensor_dropout",
         "stuck_value", "drift")

PROG_FULL = const(1000000)
# progress per energized tick by severity: full after ~4 h, 90 min, 30 min, 10 min, 3 min
RATE = (0, 69, 185, 556, 1667, 5556)
MISSING = const(-(1 << 29))  # a reading that did not arrive
DRIFT_CAP = const(1 << 28)  # |drift accumulator| (offset * 3600), keeps ints small on the boards

ACTIVE = const(0)
REPAIRED = const(1)
EXPIRED = const(2)
ENDINGS = (None, "repair", "expired")


class Faults:
    def __init__(self, n, history):
        z = bytearray(4 * n)
        self.pf = bytearray(n)  # process fault code per machine
        self.psev = bytearray(n)
        self.prog = array("i", z)
        self.ph = array("i", z)  # history number of the process fault (its slot: number % history)
        self.sf = bytearray(n)  # sensor fault code
        self.ssev = bytearray(n)
        self.sch = bytearray(n)  # channel the sensor fault sits on
        self.sleft = array("i", z)  # ticks left; -1: until repaired
        self.sval = array("i", z)  # stuck: the frozen reading; drift: offset * 3600
        self.srate = array("i", z)  # drift per tick (offset * 3600 units), signed
        self.sh = array("i", z)
        h = bytearray(4 * history)
        self.hn = history
        self.hm = bytearray(history)
        self.hf = bytearray(history)
        self.hsev = bytearray(history)
        self.hch = bytearray(history)
        self.hstart = array("i", h)
        self.hend = array("i", h)
        self.hhow = bytearray(history)
        self.started = 0  # faults begun so far (the history keeps the last `history`)
        self.version = 0  # bumps on every onset or end: poll truth() when it changes

    def _record(self, m, f, sev, ch, tick):
        k = self.started
        i = k % self.hn
        self.hm[i] = m
        self.hf[i] = f
        self.hsev[i] = sev
        self.hch[i] = ch
        self.hstart[i] = tick
        self.hend[i] = -1
        self.hhow[i] = ACTIVE
        self.started = k + 1
        self.version += 1
        return k

    def start(self, m, f, sev, ch, ticks, tick, reading, drift_per_tick):
        """Begin fault f (the caller checked that the slot is free and f applies to the machine)."""
        if f < SENSOR_FIRST:
            self.pf[m] = f
            self.psev[m] = sev
            self.prog[m] = 0
            self.ph[m] = self._record(m, f, sev, 0, tick)
            return
        self.sf[m] = f
        self.ssev[m] = sev
        self.sch[m] = ch
        self.sleft[m] = ticks if ticks > 0 else -1
        self.sval[m] = reading if f == STUCK_VALUE else 0
        self.srate[m] = drift_per_tick
        self.sh[m] = self._record(m, f, sev, ch, tick)

    def effect(self, m):
        """How far the process fault has developed, per mille (0: none)."""
        return self.prog[m] // 1000 if self.pf[m] else 0

    def advance(self, m, energized, tick):
        if self.pf[m] and energized:
            p = self.prog[m] + RATE[self.psev[m]]
            self.prog[m] = p if p < PROG_FULL else PROG_FULL
        if self.sf[m]:
            if self.sf[m] == DRIFT:
                a = self.sval[m] + self.srate[m]
                self.sval[m] = DRIFT_CAP if a > DRIFT_CAP else (-DRIFT_CAP if a < -DRIFT_CAP else a)
            left = self.sleft[m]
            if left > 0:
                self.sleft[m] = left - 1
                if left == 1:
                    self._end(self.sh[m], tick, EXPIRED)
                    self.sf[m] = NONE

    def sense(self, m, value, r):
        """The reading of the faulty channel given its true value (r: a random number >= 0)."""
        f = self.sf[m]
        if f == SENSOR_DROPOUT:
            return MISSING if r % 5 < self.ssev[m] else value
        if f == STUCK_VALUE:
            return self.sval[m]
        return value + self.sval[m] // 3600

    def _end(self, k, tick, how):
        if self.started - k > self.hn:  # its record has left the history ring
            return
        i = k % self.hn
        if self.hend[i] < 0:
            self.hend[i] = tick
            self.hhow[i] = how
            self.version += 1

    def repair(self, m, tick):
        """Maintenance fixed machine m: both slots end."""
        if self.pf[m]:
            self._end(self.ph[m], tick, REPAIRED)
            self.pf[m] = NONE
            self.prog[m] = 0
        if self.sf[m]:
            self._end(self.sh[m], tick, REPAIRED)
            self.sf[m] = NONE

    def has_fault(self, m):
        return self.pf[m] or self.sf[m]

    def truth(self, when, machine_ids, channel_names):
        """The history, oldest first: a list of dicts. when(tick) -> ISO time; channel_names(m, ch) -> str."""
        out = []
        first = self.started - self.hn if self.started > self.hn else 0
        for k in range(first, self.started):
            i = k % self.hn
            m = self.hm[i]
            f = self.hf[i]
            end = self.hend[i]
            active = end < 0
            prog = self.prog[m] // 1000 if active and f < SENSOR_FIRST else None
            signal = channel_names(m, self.hch[i]) if f >= SENSOR_FIRST else None
            out.append({"machine": machine_ids[m], "fault": NAMES[f], "severity": self.hsev[i], "signal": signal,
                        "since": when(self.hstart[i]), "since_tick": self.hstart[i], "active": active,
                        "until": None if active else when(end), "until_tick": None if active else end,
                        "ended_by": ENDINGS[self.hhow[i]], "progress_permille": prog})
        return out
