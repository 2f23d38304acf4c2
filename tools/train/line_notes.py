"""Reference notes for any plant, from an episode's log lines and the plant description alone.

    note = line_notes.reference(lines, desc, rng)          # " P-101 bearing vibration 0.185in/s HI, rising\n"
    streams = line_notes.note_streams("seen", 200)         # train_target's note rows, generated plants

What a note may say is what the log shows: the machine by its id as the log writes it, the signal by the first of
its words, its value against its limit, the direction the alarm level gives, the state change; a cause only where
the description carries cause hints for the alarm point of the lines (the point itself, or the other point of its
direction: HI with HIHI, LO with LOLO; a trip: its interlock's point), said as "likely <hint>". The simulator's
own fault model is never read: what it injected is not what the lines show (tools/train/plant_text.py's notes on
the built-in plant name what the simulator did, which is why the notes written on other plants named its causes).

The episode's main line is the one of the highest rank (a trip, a lost reading, an alarm raised, lost lines, a
state change, a clear or acknowledgement, a shelving; tools/bench/note_judge.RANK judges the same order). Among
the phrasings of its kind that fit episode.MAX_NOTE tokens, a seeded pick among the richest: varied wording, the
same facts. Summary episodes (sample lines only) get the states of their first machines; no judge reads them.

The streams are tools/plants/plantday's days of tools/plants/generate's plants of a split, cut into the node's
episodes (tools/plants/plantday.episodes), on seeds below 1000 for training and 1000..1999 for validation: the
benchmarks' plants start at 2000, and the unseen kinds and naming schemes (tools/plants/split.py) are never made
here for training.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any, Callable

from host import plantdesc, plantlines
from shared import episode

RANK = {"trip": 6, "bad": 5, "alarm": 4, "lost": 3, "state": 2, "clear": 1, "ack": 1, "shelve": 0}
DIRECTION = {"HI": "rising", "HIHI": "rising", "LO": "falling", "LOLO": "falling"}
CLEARED = {"HI": "falling", "HIHI": "falling", "LO": "rising", "LOLO": "rising"}
_UP, _DOWN = ("HI", "HIHI"), ("LO", "LOLO")
SEEDS = {"train": 0, "validation": 1000}  # the first seed of each split's plants (benchmarks use 2000 and on)
PER_DAY = 40  # event episodes of a training day at most: many plants, not a few busy days
HOURS = 8.0


def _desc(desc: plantdesc.PlantDesc | dict) -> plantdesc.PlantDesc:
    return plantdesc.from_dict(desc) if isinstance(desc, dict) else desc


def _main(parsed: list[plantlines.Line]) -> tuple[str, plantlines.Line] | None:
    """The episode's main line and its kind (the first of the highest rank)."""
    best = None
    for ln in parsed:
        kind = None
        if ln.kind == "lost":
            kind = "lost"
        elif ln.kind == "alarm":
            kind = {"ALARM": "alarm", "ACK": "ack", "CLEAR": "clear"}.get(ln.verb, "shelve")
            if ln.level == "BAD" and kind == "alarm":
                kind = "bad"
        elif ln.kind == "state":
            kind = "trip" if ln.to_state == "TRIPPED" else "state"
        if kind and (best is None or RANK[kind] > RANK[best[0]]):
            best = (kind, ln)
    return best


def _value(v: float | None, unit: str | None, decimals: int) -> str | None:
    return None if v is None else "%.*f%s" % (max(decimals, 0), v, unit or "")


def _hints(s: plantdesc.Signal, level: str) -> list[str]:
    levels = _UP if level in _UP else _DOWN if level in _DOWN else (level,)
    return [c for lv in levels for a in s.alarms if a.level == lv for c in a.causes]


def _forms(kind: str, ln: plantlines.Line, parsed: list[plantlines.Line], d: plantdesc.PlantDesc,
           rng: random.Random) -> list[list[str]]:
    """The phrasings of the main line, richest tier first (each tier's forms say the same facts)."""
    mid = ln.machine or ""
    m = d.machine(mid) if mid else None
    if kind == "lost":
        n = ln.events
        return [["node lost %d log lines" % n, "%d log lines lost on the node" % n], ["%d lines lost" % n]]
    if kind in ("trip", "state"):
        to, frm = ln.to_state, ln.from_state
        if kind == "trip":
            lock = ln.interlock
            sig = point = None
            for s in (m.signals if m else ()):
                for a in s.alarms:
                    if lock and a.interlock == lock:
                        sig, point = s, a
            if sig is None:
                return [["%s tripped" % mid, "%s trip" % mid]]
            name = sig.words[0] if sig.words else sig.tag
            alarm = next((x for x in parsed if x.kind == "alarm" and x.machine == mid and x.tag == sig.tag
                          and x.level == point.level and x.value is not None), None)
            val = _value(alarm.value, alarm.unit, sig.decimals) if alarm else None
            lim = _value(point.limit, sig.unit, sig.decimals)
            way = "high" if point.level in _UP else "low"
            hints = _hints(sig, point.level)
            tiers = []
            if hints:
                h = rng.choice(hints)
                tiers.append(["%s tripped on %s %s %s: likely %s" % (mid, way, name, val or point.level, h),
                              "%s tripped, %s %s: likely %s" % (mid, name, point.level, h),
                              "%s tripped on %s %s, likely %s" % (mid, way, name, h)])
            if val:
                tiers.append(["%s tripped on %s %s %s (limit %s)" % (mid, way, name, val, lim),
                              "%s tripped: %s %s, %s limit %s" % (mid, name, val, point.level, lim),
                              "%s tripped on %s %s %s" % (mid, way, name, val)])
            tiers.append(["%s tripped on %s %s" % (mid, way, name), "%s tripped, %s %s" % (mid, name, point.level)])
            return tiers
        if frm == "TRIPPED":
            return [["%s reset after its trip, now %s" % (mid, to.lower()), "%s reset after the trip" % mid]]
        if to in ("STARTING", "RUNNING"):
            how = {"cmd=schedule": "on its schedule", "cmd=operator": "by the operator"}.get(ln.cause or "", "")
            now = "now running" if to == "RUNNING" else "starting up"
            return [["%s started %s, %s" % (mid, how, now) if how else "%s started, %s" % (mid, now),
                     "%s %s" % (mid, now)], ["%s started" % mid]]
        return [["%s %s" % (mid, "stopping" if to == "STOPPING" else "stopped"),
                 "%s has %s" % (mid, "begun stopping" if to == "STOPPING" else "stopped")]]
    s = m.signal(ln.tag) if m and ln.tag else None
    name = (s.words[0] if s and s.words else (ln.tag or "").replace("_", " "))
    dec = s.decimals if s else 1
    val = _value(ln.value, ln.unit, dec)
    lvl = ln.level or ""
    if kind == "bad":
        return [["%s %s reading lost, check the sensor" % (mid, name), "%s %s sensor bad, no reading" % (mid, name),
                 "%s lost its %s reading" % (mid, name)], ["%s %s reading lost" % (mid, name)]]
    if kind == "ack":
        who = ln.extras.get("by")
        tiers = []
        if who:
            tiers.append(["%s %s %s alarm acknowledged by %s" % (mid, name, lvl, who),
                          "%s %s alarm acked by %s, %s" % (mid, name, who, val) if val else
                          "%s %s alarm acked by %s" % (mid, name, who)])
        tiers.append(["%s %s %s alarm acknowledged" % (mid, name, lvl), "%s %s alarm acked" % (mid, name)])
        return tiers
    if kind == "clear":
        way = CLEARED.get(lvl, "")
        return [["%s %s back to normal at %s" % (mid, name, val) if val else "%s %s back to normal" % (mid, name),
                 "%s %s %s alarm cleared, %s" % (mid, name, lvl, way) if way else "%s %s alarm cleared" % (mid, name)],
                ["%s %s alarm cleared" % (mid, name)]]
    if kind == "shelve":
        verb = "unshelved" if ln.verb == "UNSHELVE" else "shelved"
        return [["%s %s %s alarm %s" % (mid, name, lvl, verb), "%s %s alarm %s" % (mid, name, verb)]]
    # an alarm raised
    way = DIRECTION.get(lvl, "")
    point = s.alarm(lvl) if s else None
    lim = _value(point.limit, s.unit, dec) if point else None
    hints = _hints(s, lvl) if s else []
    tiers = []
    if hints and val:
        h = rng.choice(hints)
        tiers.append(["%s %s %s %s, likely %s" % (mid, name, lvl, val, h), "%s %s %s %s: likely %s" % (mid, name, val, way, h),
                      "%s %s %s, %s: likely %s" % (mid, name, lvl, way, h)])
    if val and lim:
        tiers.append(["%s %s %s %s, limit %s, %s" % (mid, name, lvl, val, lim, way),
                      "%s %s %s %s (limit %s)" % (mid, name, val, lvl, lim),
                      "%s %s %s at %s, %s" % (mid, name, lvl, val, way)])
    if val:
        tiers.append(["%s %s %s at %s" % (mid, name, lvl, val), "%s %s %s %s" % (mid, name, val, way)])
    tiers.append(["%s %s %s alarm, %s" % (mid, name, lvl, way), "%s %s %s" % (mid, name, lvl)])
    return tiers


def _summary(parsed: list[plantlines.Line]) -> list[list[str]]:
    pairs = ["%s %s" % (x.machine, (x.plc or "").lower()) for x in parsed if x.kind == "sample" and x.machine]
    if not pairs:
        return [["routine readings"]]
    return [["Routine: %s" % ", ".join(pairs[:2]), "Readings: %s" % ", ".join(pairs[:2])],
            ["Routine: %s" % pairs[0]], ["Routine readings"]]


def reference(lines: list[str], desc: plantdesc.PlantDesc | dict, rng: random.Random,
              count: Callable[[str], int] | None = None) -> str:
    """The reference note of an episode (its log lines, timestamps included) of the plant `desc`: a leading space,
    at most episode.MAX_NOTE tokens with the newline that ends it."""
    if count is None:
        from tools.train import plant_text

        count = plant_text.note_tokens
    d = _desc(desc)
    parsed = [x for x in (plantlines.parse(t) for t in lines) if x is not None]
    main = _main(parsed)
    tiers = _forms(main[0], main[1], parsed, d, rng) if main else _summary(parsed)
    fits = [[" %s\n" % t for t in tier if count(" %s\n" % t) <= episode.MAX_NOTE] for tier in tiers]
    # an alarm's or trip's cause hint (its first tier, "likely ...") or its value against its limit (the second),
    # half and half where both fit: notes that say the value, and notes that say what a hint says it may mean
    hinted = main is not None and main[0] in ("alarm", "trip") and len(tiers) > 2 and " likely " in " ".join(tiers[0])
    if hinted and fits[0] and fits[1]:
        return rng.choice(fits[0] + fits[1])
    for fit in fits:
        if fit:
            return rng.choice(fit)
    return " %s\n" % tiers[-1][-1]  # over the cap: the node cuts it, as it cuts any note


def stream(seed: int, split: str = "seen", per_day: int = PER_DAY, hours: float = HOURS) -> dict[str, Any]:
    """One generated plant day's episodes with their reference notes: {"seed", "plant", "episodes": [{"lines",
    "note"}]} (train_target's note row)."""
    from tools.plants import generate, plantday

    desc = generate.plant(seed, split)
    day = plantday.day(desc, seed, hours=hours)
    rng = random.Random(seed * 7919 + 17)
    d = plantdesc.from_dict(desc)
    eps = [{"lines": e["lines"], "note": reference(e["lines"], d, rng)} for e in plantday.episodes(day, per_day)]
    return {"seed": seed, "plant": desc["name"], "episodes": eps}


def note_streams(which: str, n: int, per_day: int = PER_DAY, hours: float = HOURS) -> list[dict[str, Any]]:
    """The first n streams of `which` ("train" or "validation"): seen kinds and naming schemes only."""
    if which not in SEEDS:
        raise ValueError("which must be train or validation, got %r" % (which,))
    out = []
    t0 = time.monotonic()
    for i in range(n):
        out.append(stream(SEEDS[which] + i, "seen", per_day, hours))
        if (i + 1) % 20 == 0 or i + 1 == n:
            print("line_notes: %s: %d/%d plant days in %.0f s" % (which, i + 1, n, time.monotonic() - t0),
                  file=sys.stderr, flush=True)
    return out
