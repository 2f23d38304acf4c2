"""A day of a generated plant as its node logs it: faults injected into tools/plants' simulator, the node's event
lines, its sample lines and the operators' acknowledgements, with the ground truth of all of it.

    d = plantday.day(generate.unseen_plant(7), seed=7)   # 05:30 to 23:30 site time
    d.lines        # the log, in order (docs/PLANT.md grammar), what `edgetwin import` reads
    d.events       # physics.Sim.events plus the "ack" events of the operators, each with its "line"
    d.truth        # physics.Sim.truth(): per fault its start, first alarm, trip, repair
    d.peaks        # (machine, key) -> (highest reading any line shows, the line that shows it)

What the simulator does not write, this adds the way a node would (docs/PLANT.md, Node behaviour): a sample line
per machine every `sample_every` seconds (the description's own sample_s is 5 s; a bench day at that rate is
100,000 lines a plant for no more questions, so the description the lines are imported with says
`sample_every`), and an operator's ACK of some raised alarms (`by=NAME`, as `edgetwin ack` makes the node log
it), a CLEAR after an ACK then saying NORMAL rather than RTN_UNACK. `episodes(day)` cuts a day as the node does
into annotation episodes. Benches ask about the days of plants from seed 2000 on (tools/bench/ask_phrasings.py,
plant_notes.py); tools/train/line_notes.py writes reference notes on days of seen plants below seed 2000 and never
reads a question.
"""

from __future__ import annotations

import copy
import datetime
import random
import re
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from host import plantlines
from shared import episode
from tools.plants import physics

OPERATORS = ("alice", "bob", "chen", "dana", "emre", "farah", "gus", "ines")
RECENT = 5  # sample lines of a machine before an episode that give a note's judge its signals' trends
SAMPLE_EVERY = 60  # seconds between a machine's sample lines in a bench day
DATE, START, HOURS = "2026-11-30", "05:30", 18.0  # a plant day in site time: 05:30 to 23:30, two whole shifts
_CLEAR = re.compile(r" RTN_UNACK$")
_LOGGED = ("alarm", "clear", "state", "trip")  # the simulator's events that write a line (in order)


def _logged(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] in _LOGGED]


@dataclass
class Day:
    desc: dict  # the description the lines are imported with (sample_s = SAMPLE_EVERY)
    seed: int
    hours: float
    lines: list[str]
    ticks: list[int]  # each line's tick (seconds since the epoch of the simulation)
    events: list[dict]
    truth: list[dict]
    peaks: dict = field(default_factory=dict)
    epoch: int = physics.EPOCH

    @property
    def end_tick(self) -> int:
        return int(self.hours * 3600)

    def tz(self) -> datetime.tzinfo:
        return ZoneInfo(self.desc.get("timezone", "UTC"))

    def site(self, tick: int) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.epoch + tick, self.tz())

    def utc(self, tick: int) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.epoch + tick, datetime.timezone.utc)

    def tick_of_site(self, when: datetime.datetime) -> int:
        return int(when.timestamp()) - self.epoch


def _schedule(desc: dict, rng: random.Random, hours: float) -> list[tuple[str, str, int, int]]:
    """(machine, fault, at_s, severity): most machines get one or two faults, some none (never-happened
    questions need a machine that did nothing)."""
    from tools.plants import catalogue

    out = []
    span = int(hours * 3600)
    for i, m in enumerate(desc["machines"]):
        kind = catalogue.kind(m["kind"])
        n = rng.choice((0, 1, 1, 2)) if i else rng.choice((1, 2))
        at = rng.randint(600, span // 3)
        for _ in range(n):
            if at >= span - 1800:
                break
            out.append((m["id"], rng.choice(kind.faults).name, at, rng.choice((2, 3, 4, 4, 5))))
            at += rng.randint(span // 4, span // 2)
    return out


def site_epoch(desc: dict, date: str = DATE, clock: str = START) -> int:
    """The UTC epoch of `clock` on `date` in the plant's own time zone (its description's `timezone`)."""
    local = datetime.datetime.fromisoformat("%sT%s" % (date, clock)).replace(tzinfo=ZoneInfo(desc.get("timezone",
                                                                                                     "UTC")))
    return int(local.timestamp())


def day(desc: dict, seed: int, hours: float = HOURS, sample_every: int = SAMPLE_EVERY) -> Day:
    """Simulate `hours` of the plant from START site time on DATE with faults drawn from `seed` (the site's
    clock, so that "this morning", "today" and a shift mean what an operator there means)."""
    rng = random.Random("edgetwin-bench/day/%d/%s" % (seed, desc["name"]))
    desc = copy.deepcopy(desc)
    for m in desc["machines"]:
        m["sample_s"] = sample_every
    sim = physics.Sim(desc, seed=seed, epoch=site_epoch(desc))
    for mid, fault, at, sev in _schedule(desc, rng, hours):
        sim.inject(mid, fault, at_s=at, severity=sev)
    out: list[tuple[int, str]] = [(0, ln) for ln in sim.lines]
    acks: dict[tuple, dict] = {}  # (machine, level, tag) -> the pending ACK of its raised alarm
    events: list[dict] = [dict(e, line=ln) for e, ln in zip(_logged(sim.events), sim.lines)]
    peaks: dict = {}
    keys = {m["id"]: [(s["key"], s["tag"], s["unit"], s.get("decimals", 1)) for s in m["signals"]]
            for m in desc["machines"]}
    n_ev = len(sim.events)
    for _ in range(int(hours * 3600)):
        sim.step()
        t = sim.tick
        ts = physics.iso(sim.epoch + t)
        new = sim.events[n_ev:]
        n_ev = len(sim.events)
        events += [dict(e, line=None) for e in new if e["event"] not in _LOGGED]  # fault_start, repair: no line
        for ev, ln in zip(_logged(new), sim.lines):
            pt = (ev["machine"], ev.get("level"), ev.get("tag"))
            if ev["event"] == "alarm":
                _peak(peaks, ev["machine"], ev["key"], ev["value"], ln)
                if ev["prio"] >= 2 and rng.random() < 0.6:
                    acks[pt] = {"tick": t + rng.randint(20, 600), "by": rng.choice(OPERATORS), "ev": ev}
            elif ev["event"] == "clear":
                if pt in acks and acks[pt].get("done"):
                    ln = _CLEAR.sub(" NORMAL", ln)
                acks.pop(pt, None)
            out.append((t, ln))
            events.append(dict(ev, line=ln))
        for pt, a in list(acks.items()):
            if not a.get("done") and a["tick"] == t:
                ev = a["ev"]
                s = next(x for x in keys[ev["machine"]] if x[0] == ev["key"])
                ln = "%s ACK %s %s %s %.*f%s prio=%d ACKED by=%s" % (ts, ev["level"], ev["machine"], ev["tag"], s[3],
                                                                     ev["value"], s[2], ev["prio"], a["by"])
                out.append((t, ln))
                events.append({"tick": t, "event": "ack", "machine": ev["machine"], "level": ev["level"],
                               "key": ev["key"], "tag": ev["tag"], "by": a["by"], "raised": ev["tick"], "line": ln})
                a["done"] = True
        if t % sample_every == 0:
            for m in desc["machines"]:
                plc = physics.STATES[sim.state(m["id"])]
                pairs = []
                for key, _tag, unit, dec in keys[m["id"]]:
                    v = sim.value(m["id"], key)
                    pairs.append("%s=%.*f%s" % (key, dec, v, unit))
                ln = "%s %s %s %s" % (ts, m["id"], plc, " ".join(pairs))
                for key, _tag, _unit, dec in keys[m["id"]]:
                    _peak(peaks, m["id"], key, round(sim.value(m["id"], key), dec), ln)
                out.append((t, ln))
    return Day(desc, seed, hours, [ln for _, ln in out], [t for t, _ in out], events, sim.truth(), peaks,
               sim.epoch)


def _peak(peaks: dict, machine: str, key: str, value: float, line: str) -> None:
    got = peaks.get((machine, key))
    if got is None or value > got[0]:
        peaks[(machine, key)] = (value, line)


def episodes(day: Day, per_plant: int = 25) -> list[dict[str, Any]]:
    """The node's episodes of the day up to its per_plant-th event episode: {"tick", "kind", "lines", "recent"}
    ("recent": each machine's last RECENT sample lines before the tick, for a note's judge only). A tick holding
    event lines is an event episode of them (the last episode.MAX_LINES), a tick of sample lines only a summary
    episode once episode.SUMMARY_S plant seconds have passed since the last (firmware/episodes.py)."""
    out: list[dict[str, Any]] = []
    next_summary, n_events = 0, 0
    recent: dict[str, list[str]] = {}
    i, n = 0, len(day.lines)
    while i < n and n_events < per_plant:
        tick = day.ticks[i]
        j = i
        while j < n and day.ticks[j] == tick:
            j += 1
        group = day.lines[i:j]
        events = [ln for ln in group if episode.is_event(ln)]
        samples = [ln for ln in group if not episode.is_event(ln)]
        kind = "event" if events else None
        if not events and samples and episode.SUMMARY_S and tick >= next_summary:
            kind, next_summary = "summary", tick + episode.SUMMARY_S
        if kind:
            ms = sorted({x.machine for x in map(plantlines.parse, events or samples) if x is not None and x.machine})
            out.append({"tick": tick, "kind": kind, "lines": (events or samples)[-episode.MAX_LINES:],
                        "recent": [x for m in ms for x in recent.get(m, [])]})
            n_events += kind == "event"
        for ln in samples:
            x = plantlines.parse(ln)
            if x is not None and x.machine:
                hist = recent.setdefault(x.machine, [])
                hist.append(ln)
                del hist[:-RECENT]
        i = j
    return out
