"""tools/train/line_notes.py: the target's reference notes on generated plants say what the lines show, copied
from the lines (judged by tools/bench/note_judge.py, which knows no plant), fit the node's note cap where anything
can, name nothing the prompt does not hold (no cause, no limit, no description words), keep at most one summary
after each event, and the training streams are made of seen kinds and naming schemes only."""

from __future__ import annotations

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
def test_reference_notes_are_factual_covered_and_copied_from_the_prompt(side: str, seed: int) -> None:
    day, eps = _day(seed, side)
    desc = plantdesc.from_dict(day.desc)
    rng = random.Random(seed)
    kinds, judged, covered, over = set(), 0, 0, 0
    for ep in eps:
        note = line_notes.reference(ep["lines"], desc, rng)
        assert note.startswith(" ") and note.endswith("\n"), note
        if ep["kind"] != "event":
            continue
        v = note_judge.note_verdict(note, ep["lines"], day.desc, ep["recent"])
        assert v["factual"] and not v["hallucinated"] and not v["invented_cause"], (note, v, ep)
        # every word of the note that names something is in the prompt: the id and tag as the log writes them
        prompt = episode.prompt_text(ep["lines"])
        main = note_judge.window(ep["lines"], note_judge.words_of(day.desc))["main"][0][1]
        assert main.machine in note and main.machine in prompt and (not main.tag or main.tag in note), (note, prompt)
        assert "likely" not in note and "limit" not in note
        kinds.add(v["main"])
        judged += 1
        covered += v["covered"]
        over += plant_text.note_tokens(note) > episode.MAX_NOTE
    assert judged >= 20 and {"alarm", "state"} <= kinds, (judged, kinds)
    # the node cuts a note at 16 tokens: an unseen scheme's id and tag ("A3-KLN01 ai02_shell_temp", 14 tokens)
    # leave no room for more, and half its notes are cut there (13 of 28 on this day); the seen schemes' all fit
    assert covered >= judged - 2 and (over == 0 if side == "seen" else over <= judged // 2 + 1), (covered, over, judged)


def test_streams_keep_one_summary_after_an_event_and_every_event() -> None:
    day, eps = _day(2001, "seen")
    lines = [ep["lines"] for ep in eps]
    kept = line_notes.thin(lines)
    is_ev = [any(episode.is_event(x) for x in ls) for ls in kept]
    assert sum(is_ev) == sum(ep["kind"] == "event" for ep in eps) and is_ev[0]
    assert not any(not a and not b for a, b in zip(is_ev, is_ev[1:])), "two summaries in a row"
    assert sum(not x for x in is_ev) > 0 and len(kept) < len(lines)


def test_the_builtin_plants_streams_are_noted_from_their_lines() -> None:
    rows = [{"seed": 5, "episodes": [
        {"lines": ["2026-11-30T06:33:20Z ALARM HI P-101 vibration 7.5mm/s prio=3 RAISED"],
         "note": " P-101 vibration rising: likely bearing wear\n"},
        {"lines": ["2026-11-30T06:34:40Z ALARM HIHI P-101 vibration 13.6mm/s prio=4 RAISED",
                   "2026-11-30T06:34:41Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB"],
         "note": " P-101 tripped: bearing wear\n"}]}]
    out = line_notes.builtin_streams(rows)
    assert [e["lines"] for e in out[0]["episodes"]] == [e["lines"] for e in rows[0]["episodes"]]
    first, trip = (e["note"] for e in out[0]["episodes"])
    assert first.startswith(" P-101 vibration HI") and "likely" not in first and "wear" not in first, first
    assert trip.startswith(" P-101 trip") and "HIHI_VIB" in trip or "13.6mm/s" in trip, trip
    assert out == line_notes.builtin_streams(rows)  # seeded: the same rows, the same notes


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
