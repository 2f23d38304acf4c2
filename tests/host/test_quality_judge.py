"""tools/train/plant_judge.py and plant_text.py: the reference texts score perfectly under the judges on held-out
seeds (generator and judges agree), notes fit MAX_NOTE tokens of SmolLM2's own tokenizer, and hand-written wrong
notes and answers are each caught. No model generation: the judges read fixed strings."""

from __future__ import annotations

import os
import re

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # PRISM on shared cores (as test_spec_exact.py)

import pytest  # noqa: E402

from shared import episode  # noqa: E402
from tools.train import plant_judge as pj  # noqa: E402
from tools.train import plant_text as pt  # noqa: E402

SEEDS = 3  # held-out note streams (8 episodes each)


@pytest.fixture(scope="module")
def streams():
    return pt.note_streams("heldout", SEEDS)


@pytest.fixture(scope="module")
def questions():
    """One question of each of the first three kinds of the first held-out node, and two "none" ones, asked as ask asks them
    (a store of the node's log, FTS5, PRISM, fit_sources): 5-30 s a question of PRISM on 20 windows."""
    specs = pt.question_specs(2000)
    pick, kinds = [], set()
    for sp in specs:
        if sp[1] != "none" and sp[1] not in kinds and len(kinds) < 3:
            kinds.add(sp[1])
            pick.append(sp)
    pick += [sp for sp in specs if sp[1] == "none"][:2]
    return pt.with_answers(2000, pt.examples_of(2000, pick))


def test_none_questions_are_at_most_a_fifth():
    for seed in (2000, 2001, 2002):
        specs = pt.question_specs(seed)
        n_none = sum(1 for sp in specs if sp[1] == "none")
        assert 0 < n_none <= 0.2 * len(specs)
        for q, _, t in specs:  # a "none" question really has no such event in the node's log
            if t["event"] == "none" and t["asked"] == "trip":
                assert not any(" STATE %s " % t["machine"] in ln and "TRIPPED " in ln
                               for ln in pt.qa_corpus.node_log(seed)["lines"])


def _wording(question: str, node: dict) -> str:
    """A question with its machine names, times and fault words blanked: what only its wording says."""
    q = question.lower()
    forms = set()
    for m, kind in zip(node["ids"], node["kinds"]):
        n = int(m.split("-")[1]) % 100
        forms.update(("the %s %s" % (kind, m), "%s %s" % (kind, m), m, "the %s" % kind, "%s %d" % (kind, n)))
    # longest first across all machines: "the pump" of P-101 must not eat the start of "the pump P-102"
    for form in sorted(forms, key=len, reverse=True):
        q = q.replace(form.lower(), "<m>")
    q = re.sub(r"\d\d:\d\d", "<t>", q)
    for words in list(pt.qa_corpus.FAULT_VERB.values()) + list(pt.qa_corpus.FAULT_NOUN.values()):
        for w in sorted(words, key=len, reverse=True):
            q = q.replace(w.lower(), "<f>")
    return q


def test_none_questions_are_worded_as_real_ones():
    """Every wording a "nothing of the kind" question uses is one real trip / onset questions use too: a wording
    that only none-questions had ("when did P-101 trip?") taught the target to answer none whatever the log said."""
    real, none = set(), set()
    for seed in range(0, 40):
        node = pt.qa_corpus.node_log(seed)
        for q, kind, t in pt.question_specs(seed):
            if kind in ("trip", "onset"):
                real.add(_wording(q, node))
            elif kind == "none":
                none.add(_wording(q, node))
    assert len(none) >= 8  # varied, not one template
    assert none <= real, sorted(none - real)


def _ep(streams, kind):
    return next(e for s in streams for e in s["episodes"] if e["facts"]["kind"] == kind)


def test_reference_notes_fit_and_score_perfectly(streams):
    eps = [e for s in streams for e in s["episodes"]]
    assert len(eps) == 8 * SEEDS
    summaries = [e for e in eps if e["facts"]["kind"] == "summary"]
    assert summaries and summaries[0] is next(e for s in streams for e in s["episodes"])  # the node's first episode
    for e in eps:
        n = e["note"]
        assert n.startswith(" ") and n.endswith("\n") and n.count("\n") == 1
        assert pt.note_tokens(n) <= episode.MAX_NOTE, n
        if e["facts"]["kind"] == "summary":  # named machines are the sampled ones; no event to judge
            assert any(m in n for m in e["facts"]["machines"]) or n == " Routine readings.\n", n
            continue
        v = pj.note_verdict(n, e["facts"])
        assert v["factual"] and v["covered"] and not v["hallucinated"], (n, v, e["lines"])
    # varied wording: the same kind of event is not always said the same way
    assert len({e["note"].split(" ", 2)[-1] for e in eps}) > len(eps) // 3


def test_every_episode_kind_has_notes_that_fit():
    """Every phrasing of every machine kind fits somewhere: the longest machine id, signal and value."""
    for kind in ("alarm", "ack", "clear", "trip", "sensor_lost", "shelve"):
        f = {"kind": kind, "machine": "CV-401", "signal": "intake_filter_dp", "signal_words": "intake filter dP",
             "value": "123.4kPa", "trend": "falling", "meaning": "clogged filter", "level": "HIHI",
             "astate": "SHELVED"}
        assert any(pt.note_tokens(t) <= episode.MAX_NOTE for t, _ in pt._note_forms(f)), kind


def test_episode_facts_follow_the_lines(streams):
    e = _ep(streams, "alarm")
    f = e["facts"]
    main = next(ln for ln in e["lines"] if " ALARM " in ln)
    w = main[21:].split()
    assert (f["machine"], f["signal"], f["value"], f["level"]) == (w[2], w[3], w[4], w[1])
    assert f["limit"] and f["limit"][-1] == f["value"][-1]  # the same unit as the value
    assert f["time"] == main[:16]


def _wrong(note, facts):
    v = pj.note_verdict(note, facts)
    return not v["factual"], v


def test_wrong_notes_are_caught(streams):
    e = _ep(streams, "alarm")
    f = e["facts"]
    m, sig, val = f["machine"], f["signal_words"], f["value"]
    other = next(x for x in ("P-101", "M-201", "C-301", "CV-401") if x not in f["window"]["machines"])
    bad, v = _wrong(" %s %s high at %s\n" % (other, sig, val), f)
    assert bad and v["hallucinated"] and not v["covered"]  # wrong machine, and one not in the window
    num = float(val.rstrip("Cmm/sAbar3hkPrpm")) + 3.3
    bad, v = _wrong(" %s %s high at %.1f%s\n" % (m, sig, num, val.lstrip("-0123456789.")), f)
    assert bad and v["hallucinated"]  # wrong number
    wrong_dir = "low" if "low" not in f["window"]["directions"] else "high"
    assert _wrong(" %s %s %s\n" % (m, sig, wrong_dir), f)[0]  # wrong direction
    assert _wrong(" %s %s high, likely cavitation and a stuck sensor\n" % (m, sig), f)[0]  # a fault not there
    assert _wrong(" %s tripped on %s\n" % (m, sig), f)[0] or f["window"]["tripped"]  # a trip not in the window
    bad, v = _wrong(" The speed of light in a vacuum\n", f)
    assert bad and not v["covered"]  # names the speed signal, not in this window
    bad, v = _wrong(" Nothing to see here.\n", f)
    assert bad and v["vacuous"] and not v["covered"]
    assert not pj.note_verdict(" %s alarm\n" % m, f)["covered"]  # vague: no signal, no value


def test_reference_answers_score_perfectly_and_none_is_bounded(questions):
    assert len(questions) == 5
    for q in questions:
        assert q["prompt"].startswith("<|im_start|>system\n") and q["question"] in q["prompt"]
        for s in q["sources"]:
            assert "[%d] " % s["n"] in q["prompt"] and s["text"].splitlines()[0] in q["prompt"]
        v = pj.answer_verdict(q["answer"], q["truth"], q["sources"])
        if q["truth"]["event"] == "none" or v["evidence_in"]:
            assert v["accurate"] and v["cited"] in (True, None), (q["question"], q["answer"], v)
        else:  # retrieval missed: the reference says what the windows show, and claims nothing
            assert "do not show" in q["answer"] and not v["accurate"]


def _event_q(questions, kind=None):
    return next(q for q in questions if q["truth"]["event"] not in ("none",) and
                pj.answer_verdict(q["answer"], q["truth"], q["sources"])["evidence_in"] and
                (kind is None or q["truth"]["event"] == kind))


def test_wrong_answers_are_caught(questions):
    q = _event_q(questions)
    t, src = q["truth"], q["sources"]
    good = q["answer"]
    other = next(x for x in ("P-101", "M-201", "C-301", "CV-401", "P-102") if x != t["machine"])
    assert not pj.answer_verdict(good.replace(t["machine"], other), t, src)["accurate"]  # wrong machine
    holding = pj.answer_verdict(good, t, src)["evidence_in"]
    wrong_n = next(s["n"] for s in src if s["n"] not in holding) if len(holding) < len(src) else 9
    cite = pj.parse(good)["cites"][0]
    assert pj.answer_verdict(good.replace("[%d]" % cite, "[%d]" % wrong_n), t, src)["cited"] is False
    assert pj.answer_verdict(re.sub(r"\[\d+\]", "", good), t, src)["cited"] is False  # no citation at all
    none = "Nothing of the kind in the log since %s." % t["since"][11:16]
    assert not pj.answer_verdict(none, t, src)["accurate"]  # a "none" when there was an event
    hh, mm = t["time"][11:13], t["time"][14:16]
    moved = "%s:%02d" % (hh, (int(mm) + 7) % 60)
    tq = dict(t, asks_when=True)
    assert pj.answer_verdict(good, tq, src)["accurate"]
    assert not pj.answer_verdict(good.replace("%s:%s" % (hh, mm), moved), tq, src)["accurate"]  # wrong time
    nq = next(q for q in questions if q["truth"]["event"] == "none")
    assert pj.answer_verdict(nq["answer"], nq["truth"], nq["sources"])["accurate"]
    claim = "%s tripped at 07:12 on high vibration [1]." % nq["truth"]["machine"]
    assert not pj.answer_verdict(claim, nq["truth"], nq["sources"])["accurate"]  # an event that did not happen


def test_parse_reads_ids_numbers_units_and_directions():
    c = pj.parse(" CV-401 gearbox temperature 86.3C, rising at 06:50 [2]; P-101 2960rpm drop out\n")
    assert c["machines"] == ["CV-401", "P-101"]
    assert (86.3, "C") in c["numbers"] and (2960.0, "rpm") in c["numbers"]
    assert 401.0 not in [n for n, _ in c["numbers"]] and 50.0 not in [n for n, _ in c["numbers"]]
    assert c["times"] == ["06:50"] and c["cites"] == [2]
    assert "rising" in c["directions"] and "falling" not in c["directions"]  # "drop out" is a fault
    assert "sensor_dropout" in c["faults"]
    assert any("gearbox_temp" in s for s in c["signals"])


def test_cli_writes_one_stream_a_line(tmp_path, capsys):
    import json

    out = tmp_path / "notes.jsonl"
    assert pt.main(["--split", "heldout", "--kind", "notes", "--n", "2", "--out", str(out)]) == 0
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r["seed"] for r in rows] == [2000, 2001] and all(len(r["episodes"]) == 8 for r in rows)
    assert rows[0] == json.loads(json.dumps(pt.note_stream(2000)))
    with pytest.raises(SystemExit) as e:
        pt.main(["--split", "train", "--kind", "notes", "--n", "0", "--out", str(out)])
    assert e.value.code == 2 and "--n must be at least 1" in capsys.readouterr().err


def test_handling_questions_are_their_kinds_from_further_seeds_and_score_perfectly():
    qs = pt.handling_examples("validation", 3)
    assert len(qs) == 3
    assert {q["kind"] for q in qs} <= set(pt.HANDLING)
    assert all(q["seed"] >= 1000 + pt.HANDLING_FROM for q in qs)
    for q in qs:  # asked as ask asks them (the prompt holds the question and the windows), answered right
        assert q["question"] in q["prompt"] and all("[%d] " % s["n"] in q["prompt"] for s in q["sources"])
        v = pj.answer_verdict(q["answer"], q["truth"], q["sources"])
        assert v["accurate"] or ("do not show" in q["answer"] and not v["evidence_in"]), (q["question"], v)
    assert pt.handling_examples("validation", 2) == qs[:2]  # a smaller n is a prefix
