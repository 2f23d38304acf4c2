"""edgetwin bench quality on generated plants (seen / unseen): the held-out questions stay held out, their truth
is the simulator's, the scorer marks right and wrong answers as a reader would, and a --quick run prints the
seen and unseen figures, answers and notes. (The full run takes minutes: its figures are in docs/QUALITY.md; the
note judge's own tests are tests/host/test_note_judge.py.)"""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import ask_phrasings as ap
from tools.plants import plantday
from tools.plants import generate

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.add(node.module or "")
            out.update("%s.%s" % (node.module or "", a.name) for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "ask_phrasings" in node.value:
            out.add(node.value)  # importlib / "-m" by name
    return out


def test_no_training_module_reads_the_held_out_phrasings() -> None:
    for path in sorted((ROOT / "tools" / "train").rglob("*.py")):
        # the plant days themselves (tools/plants/plantday.py) are the simulator's: training days are of seen plants
        # below seed 2000 (tests/host/test_line_notes.py); the questions, the notes' benchmark and its judge are not
        bad = [m for m in _imports(path) if m.rsplit(".", 1)[-1] in ("ask_phrasings", "plant_notes", "note_judge")]
        assert not bad, "%s imports the benchmark's held-out questions or notes: %s" % (path.relative_to(ROOT), bad)


@pytest.fixture(scope="module")
def days():
    return {split: plantday.day(generate.plant(2000, split), 2000, hours=8.0) for split in ("seen", "unseen")}


def test_questions_carry_the_simulators_truth(days) -> None:
    free = total = 0
    for split, day in days.items():
        qs = ap.questions(day, random.Random(1))
        assert {q.kind for q in qs} >= {"first_alarm", "count", "still_alarm", "between", "never", "peak"}, split
        lines = set(day.lines)
        for q in qs:
            assert q.kind in ap.KINDS
            assert all(e in lines for e in q.evidence), q.text  # proof lines are the log's own
            if q.truth.get("machine"):
                assert q.truth["machine"] in {m["id"] for m in day.desc["machines"]}
            if q.kind in ("first_alarm", "trip_when", "ack_when"):
                tick = next(e["tick"] for e in day.events if e.get("line") == q.evidence[0])
                assert q.truth["time"] == day.site(tick).strftime("%H:%M")
            if q.kind == "never":
                assert q.truth["none"] and not q.evidence
        free += sum(q.free for q in qs)
        total += len(qs)
    assert free >= 0.4 * total


def _trip(day):
    e = next(e for e in day.events if e["event"] == "trip")
    names = ap.Names(day.desc)
    qd = ap._trip_why(day, names, e, 1, random.Random(3), False).as_dict()  # noqa: SLF001
    qw = ap._trip_when(day, names, e, random.Random(3), False).as_dict()  # noqa: SLF001
    return e, qd, qw


def test_scorer_marks_right_and_wrong_answers(days) -> None:
    day = days["unseen"]
    start = [day.site(0).strftime("%H:%M"), day.utc(0).strftime("%H:%M")]
    e, why_q, when_q = _trip(day)
    mid, hhmm = e["machine"], day.site(e["tick"]).strftime("%H:%M")
    cause = why_q["truth"]["causes"][1]  # the interlock's signal, in its words
    window = "\n".join(day.lines[max(0, day.lines.index(e["line"]) - 2):day.lines.index(e["line"]) + 3])

    def judge(answer, q, cited=(window,), by_record=False):
        return ap.score(answer, list(cited), q, day.desc, by_record, start)

    right = judge("%s tripped at %s on high %s [1]." % (mid, hhmm, cause), when_q)
    assert right["right"] and right["cited"], right
    assert judge("%s tripped at %s on %s [1]." % (mid, hhmm, cause), why_q)["right"]
    h, m = map(int, hhmm.split(":"))
    wrong_time = "%02d:%02d" % ((h + (m + 7) // 60) % 24, (m + 7) % 60)
    v = judge("%s tripped at %s [1]." % (mid, wrong_time), when_q)
    assert not v["right"] and "time" in v["why"][0], v
    other = next(m["id"] for m in day.desc["machines"] if m["id"] != mid)
    v = judge("%s tripped at %s on %s [1]." % (other, hhmm, cause), when_q)
    assert not v["right"] and any("does not name" in w for w in v["why"]), v
    v = judge("Nothing of the kind in the log: %s did not trip." % mid, when_q, cited=())
    assert not v["right"] and any("absence" in w for w in v["why"]) and v["cited"] is False, v
    assert judge("%s tripped at %s [2]." % (mid, hhmm), when_q, cited=("unrelated line",))["cited"] is False
    # a machine that never tripped: the absence is right, an invented trip is not
    calm = next(m["id"] for m in day.desc["machines"]
                if not any(x["event"] == "trip" and x["machine"] == m["id"] for x in day.events))
    none_q = ap.Question("why did %s trip?" % calm, "never", False, {"machine": calm, "none": True}).as_dict()
    v = judge("Nothing of the kind in the log since %s: no trip of %s." % (start[0], calm), none_q, (), True)
    assert v["right"] and v["cited"] is None, v
    v = judge("%s tripped at %s on high vibration [1]." % (calm, hhmm), none_q)
    assert not v["right"], v


def test_scorer_reads_words_counts_and_values(days) -> None:
    day = days["seen"]
    names = ap.Names(day.desc)
    mid = day.desc["machines"][0]["id"]
    word = names.unique[mid][0]
    q = {"question": "how many alarms on %s today?" % word, "kind": "count", "free": True,
         "truth": {"count": 3, "machine": mid}, "evidence": []}
    assert ap.score("The %s raised three alarms today." % word, [], q, day.desc)["right"]
    assert not ap.score("The %s raised 4 alarms today." % word, [], q, day.desc)["right"]
    key = day.desc["machines"][0]["signals"][0]["key"]
    value, line = day.peaks[(mid, key)]
    pq = ap._peak(day, names, mid, key, random.Random(1), True).as_dict()  # noqa: SLF001
    assert ap.score("%s peaked at %s [1]." % (mid, value), [line], pq, day.desc)["right"]
    assert not ap.score("%s peaked at %s [1]." % (mid, round(value * 1.5 + 10, 1)), [line], pq, day.desc)["right"]


def test_note_episodes_are_the_nodes_cut(days) -> None:
    from shared import episode

    for day in days.values():
        eps = plantday.episodes(day, per_plant=10)
        assert sum(e["kind"] == "event" for e in eps) == 10 and eps[-1]["kind"] == "event"
        summaries = [e["tick"] for e in eps if e["kind"] == "summary"]
        assert summaries and all(b - a >= episode.SUMMARY_S for a, b in zip(summaries, summaries[1:]))
        for e in eps:  # an event episode holds its tick's event lines, a summary its sample lines
            assert 1 <= len(e["lines"]) <= episode.MAX_LINES
            assert all(episode.is_event(ln) == (e["kind"] == "event") for ln in e["lines"])
            assert all(day.ticks[day.lines.index(ln)] == e["tick"] for ln in e["lines"])
        events = {t for t, ln in zip(day.ticks, day.lines) if episode.is_event(ln) and t <= eps[-1]["tick"]}
        assert events == {e["tick"] for e in eps if e["kind"] == "event"}


def test_quick_run_prints_seen_and_unseen() -> None:
    from host import target_delta, weights
    from tools.bench import quality

    try:
        weights.smollm2_gguf()
    except OSError:
        pytest.skip("no SmolLM2 GGUF in this checkout")
    target = "domain" if target_delta.installed() else "stock"
    # as the user runs it, in a process of its own: the bench sets OPENBLAS_NUM_THREADS=1 before numpy loads (in
    # this process numpy is loaded already, and its BLAS threads made the run several times slower on 2 busy cores)
    r = subprocess.run([sys.executable, "-m", "host.cli", "bench", "quality", "--quick", "--target", target],
                       cwd=str(ROOT), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["corpus"] is None and out["plant_goals"] == quality.PLANT_GOALS
    for side in ("seen", "unseen"):
        s = out[side]
        assert s["questions"] == 3 and s["target"]["questions"] == 3
        for k in ("answer_accuracy", "answer_accuracy_free", "answer_citation_rate", "by_kind"):
            assert k in s["target"], k
        # the notes half: a note of each of three plants' first event, judged (tools/bench/note_judge.py)
        assert s["notes"] == 3 and s["target"]["notes"] == 3 and len(s["note_plants"]) == 3
        for k in ("note_factuality", "note_coverage", "note_hallucination_rate", "invented_cause_rate",
                  "main_in_window"):
            assert 0.0 <= s["target"][k] <= 1.0, k
        assert set(s["goals_met"]) == set(quality.PLANT_GOALS)
        if target == "domain":
            assert s["stock"]["questions"] == 1 and s["stock"]["notes"] == 1 and "first 1 notes" in \
                s["stock_notes_subset"]
    assert "seen (" in r.stderr and "unseen notes (" in r.stderr  # progress on stderr


def test_main_in_window_says_whether_the_cache_still_holds_the_main_lines_machine() -> None:
    """A short alarm line's machine id is inside the node's window once the prompt is committed; the same alarm
    first in an episode of four long lines is not (the note cannot copy an id the cache no longer holds)."""
    from host import plantlines
    from tools.bench import plant_notes
    from tools.train import corpus

    tok = corpus.tokenizer()
    alarm = "2026-11-30T10:00:00Z ALARM HI P-7 pt71 9.1bar prio=3 RAISED"
    assert plant_notes.main_in_window([alarm], plantlines.parse(alarm), tok)
    acks = ["2026-11-30T10:00:0%dZ ACK HI A3-BOILER-FEED-PUMP-0%d ai01_discharge_pressure_transmitter 4.2bar prio=2 "
            "ACKED by=operator" % (i, i) for i in range(1, 4)]
    lines = [alarm] + acks
    assert not plant_notes.main_in_window(lines, plantlines.parse(alarm), tok)
