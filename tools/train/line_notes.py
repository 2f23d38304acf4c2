"""Reference notes for any plant, from an episode's log lines alone, in the words the node's model can read.

    note = line_notes.reference(lines, desc, rng)          # " P-101 pt11 HI 9.4bar, rising\n"
    streams = line_notes.note_streams("train", 200)        # train_target's note rows, generated plants
    rows = line_notes.builtin_streams(plant_text_rows)     # the built-in plant's streams, noted the same way

The model writes a note seeing only the episode's prompt (shared/episode.py: the lines without their timestamps),
and after its first token only what the cache still holds of it (sink 4 + the last 28 tokens on rp2040_pico).
So a note says what the lines show, copied from them in their order: the machine's id as the log writes it, the
signal by its tag as the log writes it, the level, the value as the line writes it, the direction the level gives
("rising" for a HI raised, "falling" for a HI cleared), who acknowledged, the new state, a trip's interlock (and
the tag and value of its point's alarm where that alarm line is in the episode). Nothing the lines do not hold:
the description's signal words, limits and cause hints are not in the prompt, and a note that names them on a
plant the model never saw guesses (tools/bench/note_judge.py counts a guessed cause as invented; the gateway, which
reads the description, may add them). The simulator's own fault model is never read.

The episode's main line is the one of the highest rank (a trip, a lost reading, an alarm raised, lost lines, a
state change, a clear or acknowledgement, a shelving; tools/bench/note_judge.RANK judges the same order). Among
the phrasings of its kind that fit episode.MAX_NOTE tokens, a seeded pick among the richest: varied wording, the
same facts. Summary episodes (sample lines only) get the states of their first machines; no judge reads them, and
a stream keeps at most one after each event episode (thin()): two thirds of a day's episodes are summaries, and a
model trained on them writes the summary's form for events.

The streams are tools/plants/plantday's days of tools/plants/generate's plants of a split, cut into the node's
episodes (tools/plants/plantday.episodes), on seeds below 1000 for training and 1000..1999 for validation: the
benchmarks' plants start at 2000, and the unseen kinds and naming schemes (tools/plants/split.py) are never made
here for training.
"""

from __future__ import annotations

import random
import re
import sys
import time
from typing import Any, Callable

from host import plantdesc, plantlines
from shared import episode

RANK = {"trip": 6, "bad": 5, "alarm": 4, "lost": 3, "state": 2, "clear": 1, "ack": 1, "shelve": 0}
DIRECTION = {"HI": "rising", "HIHI": "rising", "LO": "falling", "LOLO": "falling"}
CLEARED = {"HI": "falling", "HIHI": "falling", "LO": "rising", "LOLO": "rising"}
SEEDS = {"train": 0, "validation": 1000}  # the first seed of each split's plants (benchmarks use 2000 and on)
PER_DAY = 40  # event episodes of a training day at most: many plants, not a few busy days
HOURS = 8.0


_TOK = None


def note_tokenizer():
    """SmolLM2's tokenizer as host/qa builds it from the GGUF's own strings (no weights are loaded)."""
    global _TOK
    if _TOK is None:
        from host import qa, weights
        from host.gguf_load import _fields, _open, read_tokenizer

        _TOK = qa.bpe_tokenizer(read_tokenizer(_fields(_open(weights.smollm2_gguf()))))
    return _TOK


def note_tokens(note: str) -> int:
    """A note's length in the target's tokens (episode.MAX_NOTE caps it)."""
    return len(note_tokenizer().encode(note, add_special_tokens=False).ids)


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


def _said(ln: plantlines.Line) -> str | None:
    """The value of an alarm line as the line writes it ("9.4bar"), or None."""
    m = re.search(r" %s (-?\d[^ ]*)" % re.escape(ln.tag or ""), ln.text) if ln.tag else None
    return m.group(1) if m else None


def _forms(kind: str, ln: plantlines.Line, parsed: list[plantlines.Line], d: plantdesc.PlantDesc) -> list[list[str]]:
    """The phrasings of the main line, richest tier first (each tier's forms say the same facts)."""
    mid = ln.machine or ""
    if kind == "lost":
        n = ln.events
        return [["node lost %d log lines" % n, "%d log lines lost on the node" % n], ["%d lines lost" % n]]
    if kind in ("trip", "state"):
        to, frm = ln.to_state, ln.from_state
        if kind == "trip":
            lock = ln.interlock
            if not lock:
                return [["%s tripped" % mid, "%s trip" % mid]]
            m = d.machine(mid)
            tags = {(s.tag, a.level) for s in (m.signals if m else ()) for a in s.alarms if a.interlock == lock}
            # the point's alarm line, where the episode holds it: its tag and value are in the prompt too
            alarm = next((x for x in parsed if x.kind == "alarm" and x.verb == "ALARM" and x.machine == mid
                          and (x.tag, x.level) in tags), None)
            tiers = []
            if alarm is not None and _said(alarm):
                tiers.append(["%s tripped on %s, %s %s" % (mid, lock, alarm.tag, _said(alarm)),
                              "%s tripped: %s %s %s" % (mid, alarm.tag, alarm.level, _said(alarm)),
                              "%s tripped, interlock %s, %s at %s" % (mid, lock, alarm.tag, _said(alarm))])
            tiers.append(["%s tripped on %s" % (mid, lock), "%s tripped, interlock %s" % (mid, lock)])
            tiers.append(["%s trip %s" % (mid, lock), "%s tripped" % mid])
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
    tag = ln.tag or ""
    val = _said(ln)
    lvl = ln.level or ""
    if kind == "bad":
        return [["%s %s reading lost, check the sensor" % (mid, tag), "%s %s sensor bad, no reading" % (mid, tag),
                 "%s lost its %s reading" % (mid, tag)], ["%s %s reading lost" % (mid, tag)]]
    if kind == "ack":
        who = ln.extras.get("by")
        tiers = []
        if who:
            tiers.append(["%s %s %s alarm acknowledged by %s" % (mid, tag, lvl, who),
                          "%s %s %s acked by %s" % (mid, tag, lvl, who)])
        tiers.append(["%s %s %s alarm acknowledged" % (mid, tag, lvl), "%s %s alarm acked" % (mid, tag)])
        return tiers
    if kind == "clear":
        way = CLEARED.get(lvl, "")
        tiers = []
        if val and way:
            tiers.append(["%s %s %s cleared at %s, %s" % (mid, tag, lvl, val, way),
                          "%s %s back to normal at %s, %s" % (mid, tag, val, way)])
        tiers.append(["%s %s %s alarm cleared" % (mid, tag, lvl), "%s %s back to normal" % (mid, tag)])
        tiers.append(["%s %s cleared" % (mid, tag)])
        return tiers
    if kind == "shelve":
        verb = "unshelved" if ln.verb == "UNSHELVE" else "shelved"
        return [["%s %s %s alarm %s" % (mid, tag, lvl, verb), "%s %s alarm %s" % (mid, tag, verb)]]
    # an alarm raised
    way = DIRECTION.get(lvl, "")
    tiers = []
    if val and way:
        tiers.append(["%s %s %s %s, %s" % (mid, tag, lvl, val, way),
                      "%s %s %s alarm at %s, %s" % (mid, tag, lvl, val, way),
                      "%s %s %s %s, %s" % (mid, tag, val, lvl, way)])
    if val:
        tiers.append(["%s %s %s %s" % (mid, tag, lvl, val), "%s %s %s at %s" % (mid, tag, lvl, val)])
    tiers.append(["%s %s %s alarm, %s" % (mid, tag, lvl, way) if way else "%s %s %s alarm" % (mid, tag, lvl),
                  "%s %s %s" % (mid, tag, lvl)])
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
        count = note_tokens
    d = _desc(desc)
    parsed = [x for x in (plantlines.parse(t) for t in lines) if x is not None]
    main = _main(parsed)
    tiers = _forms(main[0], main[1], parsed, d) if main else _summary(parsed)
    fits = [[" %s\n" % t for t in tier if count(" %s\n" % t) <= episode.MAX_NOTE] for tier in tiers]
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
    eps = notes_of(seed, [e["lines"] for e in plantday.episodes(day, per_day)], plantdesc.from_dict(desc))
    return {"seed": seed, "plant": desc["name"], "episodes": eps}


def thin(episodes: list[list[str]]) -> list[list[str]]:
    """The episodes (each its lines) with at most one summary after each event episode (and none first)."""
    out: list[list[str]] = []
    for lines in episodes:
        if any(episode.is_event(x) for x in lines) or (out and any(episode.is_event(x) for x in out[-1])):
            out.append(lines)
    return out


def notes_of(seed: int, episodes: list[list[str]], d: plantdesc.PlantDesc) -> list[dict[str, Any]]:
    """A stream's episodes, thinned, each with its reference note (the stream's seed seeds the wording)."""
    rng = random.Random(seed * 7919 + 17)
    return [{"lines": lines, "note": reference(lines, d, rng)} for lines in thin(episodes)]


def builtin_streams(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tools/train/plant_text's note streams of the built-in plant, their notes made again from their lines and
    the built-in description (plant_text's notes name what the simulator injected: its causes)."""
    d = plantdesc.builtin()
    return [{"seed": r["seed"], "episodes": notes_of(r["seed"], [e["lines"] for e in r["episodes"]], d)}
            for r in rows]


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
