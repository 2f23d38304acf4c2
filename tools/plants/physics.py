"""The simulator of a generated plant description: machine states, signals with noise, faults, alarms, ground truth.

    sim = physics.Sim(desc, seed=3)                    # desc: generate.plant(...) (or the file it wrote)
    sim.inject("A3-KLN01", "overfiring", at_s=60, severity=5)
    for _ in range(600): sim.step()                    # one simulated second each
    sim.value("A3-KLN01", "AI01"); sim.state("A3-KLN01")
    sim.truth()      # per fault: since, its expected first signal, the first alarm raised, the trip, the repair
    sim.events       # the ground-truth event list, in order; sim.lines: this tick's log lines (docs/PLANT.md grammar)

It reads everything from the description: a machine's `kind` names its catalogue kind, a signal's Modbus
register names its role, the unit its system (metric or US), the alarm points their limits. Per machine the
seed draws a nominal running value for each signal (catalogue `nominal`), the plant's ambient temperature and
a slow load wander. A running signal lags toward nominal + fault effects (catalogue `tau_s`), a stopped one
toward its idle value; readings add noise. Alarm points are evaluated every second by shared/plant_alarms's
bank (the node's ISA-18.2 rules: limits, hysteresis, on/off delays, running-only arming after settle_s); an
interlock point that becomes active trips its running machine. A tripped machine is repaired `repair_s`
later (its process fault ends) and, in auto, restarted `restart_s` after that. Faults develop only while the
machine runs: fully after 4 h, 90 min, 30 min, 10 min or 3 min at severity 1..5.
"""

from __future__ import annotations

import datetime
import math
import random
from dataclasses import dataclass, field

from shared import plant as plantsim
from shared import plant_alarms as pa
from tools.plants import catalogue, units

DEVELOP_S = (0, 14400, 5400, 1800, 600, 180)  # seconds of running to full progress, by severity
LEVELS = {"HI": pa.HI, "HIHI": pa.HIHI, "LO": pa.LO, "LOLO": pa.LOLO}
PRIO = {"low": 1, "medium": 2, "high": 3, "critical": 4, 1: 1, 2: 2, 3: 3, 4: 4}
STATES = {plantsim.STOPPED: "STOPPED", plantsim.RUNNING: "RUNNING", plantsim.TRIPPED: "TRIPPED"}
EPOCH = 1796018400  # 2026-11-30T06:00:00Z, the simulator's usual start


class SimError(ValueError):
    pass


@dataclass
class _Point:
    index: int  # in the bank
    level: str
    limit: float
    running: bool
    interlock: str | None
    prio: int


@dataclass
class _Signal:
    spec: catalogue.Signal
    key: str
    tag: str
    unit: str
    decimals: int
    system: str
    nominal: float
    idle: float
    noise: float
    lo: float
    hi: float
    points: list[_Point]
    v: float = 0.0  # the process value (before noise)
    reading: float = 0.0

    def to_int(self, x: float) -> int:
        return int(round(x * 10 ** (self.decimals + 1)))

    def nearest_limit(self, sign: int) -> float:
        """The alarm limit a move of `sign` from nominal meets first (none: a quarter of the way to the range's end)."""
        if sign > 0:
            ups = [p.limit for p in self.points if p.level in ("HI", "HIHI") and p.limit > self.nominal]
            return min(ups) if ups else self.nominal + (self.hi - self.nominal) / 4
        downs = [p.limit for p in self.points if p.level in ("LO", "LOLO") and p.limit < self.nominal]
        return max(downs) if downs else self.nominal - (self.nominal - self.lo) / 4


@dataclass
class _Fault:
    spec: catalogue.Fault
    severity: int
    develop_s: int
    at: int
    progress: float = 0.0
    started: bool = False
    ended: int | None = None
    ended_by: str | None = None
    first_alarm: dict | None = None
    trip: dict | None = None


@dataclass
class _Machine:
    id: str
    kind: catalogue.Kind
    settle_s: int
    signals: list[_Signal]
    state: int = plantsim.STOPPED
    auto: bool = True
    since: int = 0  # tick of the last state change
    trip_at: int | None = None
    repaired_at: int | None = None
    faults: list[_Fault] = field(default_factory=list)
    wander: float = 0.0  # the load wander's phase


class Sim:
    def __init__(self, desc: dict, seed: int = 1, running: bool = True, repair_s: int = 900, restart_s: int = 60,
                 epoch: int = EPOCH) -> None:
        """desc: a generated description (a dict; host/plantfile.load fills its defaults in, but raw is fine too);
        running: every machine starts at once and restarts after a repair (auto); else they wait for `command`."""
        self.desc = desc
        self.rng = random.Random("edgetwin-plants/sim/%d" % seed)
        self.ambient = self.rng.uniform(*catalogue.AMBIENT_C)
        self.repair_s = repair_s
        self.restart_s = restart_s
        self.epoch = epoch
        self.tick = 0
        self.events: list[dict] = []
        self.lines: list[str] = []
        self.machines: dict[str, _Machine] = {}
        n_points = sum(len(s.get("alarms", ())) for m in desc["machines"] for s in m["signals"])
        self.bank = pa.AlarmBank(max(1, n_points))
        self._n_points = 0
        for m in desc["machines"]:
            self.machines[m["id"]] = self._machine(m)
        for m in self.machines.values():
            for s in m.signals:
                s.v = s.reading = s.idle
            if running:
                self._set_state(m, plantsim.RUNNING, "cmd=schedule")
                for s in m.signals:  # a plant already running when the simulation begins
                    s.v = s.reading = s.nominal
            m.auto = running

    def _machine(self, m: dict) -> _Machine:
        kind = catalogue.kind(m["kind"])
        sigs = []
        for s in m["signals"]:
            spec = kind.signal(s["source"]["register"])
            system = units.system_of(spec.quantity, s["unit"])
            conv = lambda x: units.convert(spec.quantity, system, x)  # noqa: E731
            nominal = conv(self.rng.uniform(*spec.nominal))
            if spec.ambient:
                idle = conv(self.ambient)
            elif spec.idle_abs is not None:
                idle = conv(spec.idle_abs)
            else:
                idle = nominal * spec.idle
            lo, hi = s.get("range", [conv(spec.span[0]), conv(spec.span[1])])
            sig = _Signal(spec, s["key"], s["tag"], s["unit"], s.get("decimals", 1), system, nominal, idle,
                          units.scale(spec.quantity, system, spec.noise), lo, hi, [])
            for a in s.get("alarms", ()):
                p = _Point(self._n_points, a["level"], a["limit"], a.get("when") == "running", a.get("interlock"),
                           PRIO[a.get("priority", "medium")])
                self.bank.configure(p.index, LEVELS[p.level], sig.to_int(p.limit), sig.to_int(a.get("hysteresis", 0)),
                                    a.get("on_delay_s", 0), a.get("off_delay_s", 0), p.prio)
                sig.points.append(p)
                self._n_points += 1
            sigs.append(sig)
        return _Machine(m["id"], kind, m["state"].get("settle_s", 20), sigs, wander=self.rng.uniform(0, 6.28))

    # ---- what a test or a bench asks ----

    def _get(self, machine: str) -> _Machine:
        try:
            return self.machines[machine]
        except KeyError:
            raise SimError("no machine %r (the plant has %s)" % (machine, ", ".join(self.machines))) from None

    def inject(self, machine: str, fault: str, at_s: int | None = None, severity: int = 3,
               develop_s: int | None = None) -> None:
        """Schedule a process fault of the machine's kind at tick `at_s` (default: the next tick)."""
        m = self._get(machine)
        try:
            spec = m.kind.fault(fault)
        except KeyError as e:
            raise SimError(str(e.args[0])) from None
        if not 1 <= severity <= 5:
            raise SimError("severity must be 1..5, got %r" % (severity,))
        m.faults.append(_Fault(spec, severity, develop_s or DEVELOP_S[severity],
                               self.tick + 1 if at_s is None else at_s))

    def command(self, machine: str, what: str) -> None:
        """start / stop (hand), auto (restart after repairs), reset (a tripped machine to STOPPED)."""
        m = self._get(machine)
        if what == "start" and m.state == plantsim.STOPPED:
            self._set_state(m, plantsim.RUNNING, "cmd=operator")
        elif what == "stop" and m.state == plantsim.RUNNING:
            self._set_state(m, plantsim.STOPPED, "cmd=operator")
            m.auto = False
        elif what == "auto":
            m.auto = True
        elif what == "reset" and m.state == plantsim.TRIPPED:
            self._repair(m)
        elif what not in ("start", "stop", "auto", "reset"):
            raise SimError("command must be start, stop, auto or reset, got %r" % (what,))

    def value(self, machine: str, key: str) -> float:
        m = self._get(machine)
        for s in m.signals:
            if s.key == key or s.tag == key or s.spec.role == key:
                return s.reading
        raise SimError("machine %s has no signal %r" % (machine, key))

    def state(self, machine: str) -> int:
        """shared/plant.py's PLC state code: STOPPED, RUNNING or TRIPPED."""
        return self._get(machine).state

    def truth(self) -> list[dict]:
        """Every fault injected so far, in the order injected, with what happened."""
        out = []
        for m in self.machines.values():
            for f in m.faults:
                first = m.kind.signal(f.spec.first)
                sig = next(s for s in m.signals if s.spec is first)
                out.append({"machine": m.id, "kind": m.kind.name, "fault": f.spec.name, "severity": f.severity,
                            "since_tick": f.at if f.started else None, "active": f.started and f.ended is None,
                            "expected_first": {"key": sig.key, "tag": sig.tag, "role": first.role},
                            "first_alarm": f.first_alarm, "trip": f.trip, "until_tick": f.ended,
                            "ended_by": f.ended_by, "progress": round(f.progress, 3)})
        return out

    # ---- one simulated second ----

    def step(self) -> None:
        self.tick += 1
        self.lines = []
        t = self.tick
        for m in self.machines.values():
            self._faults(m, t)
            self._state_machine(m, t)
            self._signals(m, t)
            self._alarms(m, t)

    def _faults(self, m: _Machine, t: int) -> None:
        for f in m.faults:
            if not f.started and t >= f.at:
                f.started = True
                f.at = t
                self._event("fault_start", m, fault=f.spec.name, severity=f.severity)
            if f.started and f.ended is None and m.state == plantsim.RUNNING:
                f.progress = min(1.0, f.progress + 1.0 / f.develop_s)

    def _state_machine(self, m: _Machine, t: int) -> None:
        if m.state == plantsim.TRIPPED and t - m.since >= self.repair_s:
            self._repair(m)
        elif m.state == plantsim.STOPPED and m.auto and m.repaired_at is not None and \
                t - m.repaired_at >= self.restart_s:
            m.repaired_at = None
            self._set_state(m, plantsim.RUNNING, "cmd=schedule")

    def _repair(self, m: _Machine) -> None:
        for f in m.faults:
            if f.started and f.ended is None:
                f.ended, f.ended_by = self.tick, "repair"
                self._event("repair", m, fault=f.spec.name)
        m.repaired_at = self.tick
        self._set_state(m, plantsim.STOPPED, "reset=operator")

    def _signals(self, m: _Machine, t: int) -> None:
        run = m.state == plantsim.RUNNING
        load = 1.0 + 0.01 * math.sin(m.wander + t / 900.0)  # a slow load wander, +-1 %
        for s in m.signals:
            target = s.nominal * load if run else s.idle
            osc = 0.0
            for f in m.faults:
                if not f.started or f.ended is not None:
                    continue
                for e in f.spec.effects:
                    if e.role != s.spec.role or f.progress <= e.start:
                        continue
                    full = e.reach * (s.nearest_limit(e.sign) - s.nominal)
                    frac = ((f.progress - e.start) / (1.0 - e.start)) ** e.shape
                    if run:
                        target += full * frac
                        osc += abs(full) * e.osc * frac * math.sin(t * 2 * math.pi / 17)
            s.v += (target - s.v) * (1.0 - math.exp(-1.0 / max(0.5, s.spec.tau_s)))
            noise = sum(self.rng.random() for _ in range(3)) - 1.5  # roughly Gaussian, sd 0.5
            r = s.v + osc + 2 * s.noise * noise
            s.reading = min(s.hi, max(s.lo, round(r, s.decimals + 1)))

    def _alarms(self, m: _Machine, t: int) -> None:
        armed = m.state == plantsim.RUNNING and t - m.since >= m.settle_s
        for s in m.signals:
            vi = s.to_int(s.reading)
            for p in s.points:
                ev = self.bank.evaluate(p.index, vi, armed or not p.running)
                if ev < 0:
                    continue
                verb = ev >> 3
                if verb == pa.ALARM:
                    self._event("alarm", m, level=p.level, key=s.key, tag=s.tag, value=s.reading, prio=p.prio)
                    for f in m.faults:
                        if f.started and f.ended is None and f.first_alarm is None:
                            f.first_alarm = {"tick": t, "level": p.level, "key": s.key, "tag": s.tag}
                elif verb == pa.CLEAR:
                    self._event("clear", m, level=p.level, key=s.key, tag=s.tag, value=s.reading, prio=p.prio)
        if m.state != plantsim.RUNNING:
            return
        for s in m.signals:
            for p in s.points:
                if p.interlock and self.bank.active[p.index]:
                    for f in m.faults:
                        if f.started and f.ended is None and f.trip is None:
                            f.trip = {"tick": t, "interlock": p.interlock}
                    self._set_state(m, plantsim.TRIPPED, "interlock=" + p.interlock)
                    return

    # ---- events and their lines ----

    def _set_state(self, m: _Machine, new: int, cause: str) -> None:
        old, m.state, m.since = m.state, new, self.tick
        if old != new:
            self._event("trip" if new == plantsim.TRIPPED else "state", m, old=STATES[old], new=STATES[new],
                        cause=cause)

    def _event(self, what: str, m: _Machine, **kw) -> None:
        ev = {"tick": self.tick, "event": what, "machine": m.id, **kw}
        self.events.append(ev)
        ts = iso(self.epoch + self.tick)
        if what in ("alarm", "clear"):
            s = next(x for x in m.signals if x.key == kw["key"])
            self.lines.append("%s %s %s %s %s %s%s prio=%d %s" % (
                ts, "ALARM" if what == "alarm" else "CLEAR", kw["level"], m.id, kw["tag"],
                "%.*f" % (s.decimals, kw["value"]), s.unit, kw["prio"], "RAISED" if what == "alarm" else "RTN_UNACK"))
        elif what in ("state", "trip"):
            self.lines.append("%s STATE %s %s->%s %s" % (ts, m.id, kw["old"], kw["new"], kw["cause"]))


def iso(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
