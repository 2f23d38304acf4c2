"""tools/train/line_notes.py: the target's reference notes on generated plants say what the lines show (judged by
tools/bench/note_judge.py, which knows no plant), fit the node's note cap, name a cause only from the description's
hints, and the training streams are made of seen kinds and naming schemes only."""

from __future__ import annotations

import copy
import random

import pytest

from host import plantdesc
from shared import episode
from tools.bench import note_judge, plant_notes
from tools.plants import generate, plantday, split
from tools.train import line_notes, plant_text


def _day(seed: int, side: str):
    day = plantday.day(generate.plant(seed, side), seed, hours=plant_notes.HOURS)
    return day, plantday.episodes(day, 30)


@pytest.mark.parametrize("side,seed", [("seen", 2001), ("unseen", 2002)])
def test_reference_notes_are_factual_covered_and_invent_no_cause(side: str, seed: int) -> None:
    day, eps = _day(seed, side)
    desc = plantdesc.from_dict(day.desc)
    rng = random.Random(seed)
    kinds, judged = set(), 0
    for ep in eps:
        note = line_notes.reference(ep["lines"], desc, rng)
        assert note.startswith(" ") and note.endswith("\n") and plant_text.note_tokens(note) <= episode.MAX_NOTE, note
        if ep["kind"] != "event":
            continue
        v = note_judge.note_verdict(note, ep["lines"], day.desc, ep["recent"])
        assert v["factual"] and v["covered"] and not v["hallucinated"] and not v["invented_cause"], (note, v, ep)
        kinds.add(v["main"])
        judged += 1
    assert judged >= 20 and {"alarm", "state"} <= kinds, (judged, kinds)


def test_without_cause_hints_no_note_names_a_cause() -> None:
    day, eps = _day(2001, "seen")
    bare = copy.deepcopy(day.desc)
    for m in bare["machines"]:
        for s in m["signals"]:
            for a in s.get("alarms", []):
                a.pop("causes", None)
    desc = plantdesc.from_dict(bare)
    rng = random.Random(1)
    notes = [line_notes.reference(ep["lines"], desc, rng) for ep in eps if ep["kind"] == "event"]
    assert notes and not [n for n in notes if "likely" in n]
    # the same lines with the hints: causes come back (the hints, not the lines, gave them)
    rng = random.Random(1)
    with_hints = [line_notes.reference(ep["lines"], plantdesc.from_dict(day.desc), rng) for ep in eps
                  if ep["kind"] == "event"]
    assert any("likely" in n for n in with_hints)


def test_a_lost_line_and_a_summary_get_their_own_words() -> None:
    day, eps = _day(2001, "seen")
    desc = plantdesc.from_dict(day.desc)
    rng = random.Random(0)
    lost = line_notes.reference(["2026-11-30T10:30:00Z LOST events=7"], desc, rng)
    assert "7" in lost and "lost" in lost
    summary = next(ep for ep in eps if ep["kind"] == "summary")
    note = line_notes.reference(summary["lines"], desc, rng)
    first = summary["lines"][0][21:].split()[0]
    assert first in note and "alarm" not in note, note


def test_training_streams_hold_only_seen_kinds_and_schemes_on_their_seeds() -> None:
    rows = line_notes.note_streams("validation", 1, per_day=6, hours=2.0)
    assert rows[0]["seed"] == line_notes.SEEDS["validation"] >= 1000
    assert rows[0]["plant"] == generate.plant(rows[0]["seed"], "seen")["name"]
    desc = generate.plant(rows[0]["seed"], "seen")
    assert {m["kind"] for m in desc["machines"]} <= set(split.TRAIN_KINDS)
    assert all(set(ep) == {"lines", "note"} and ep["lines"] for ep in rows[0]["episodes"])
    assert line_notes.SEEDS["validation"] + 999 < 2000  # the benchmarks' plants start at 2000
    with pytest.raises(ValueError, match="train or validation"):
        line_notes.note_streams("heldout", 1)
