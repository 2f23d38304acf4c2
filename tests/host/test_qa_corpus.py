"""tools/train/qa_corpus.py: deterministic, split by plant seed, labels that agree with the simulator's ground truth."""

from __future__ import annotations

import re

import pytest

from tools.train import qa_corpus as qc

SEED = 2000  # the first held-out node (the bench's quick set uses it too, so the cache is shared)
WT = 256
ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) ")


@pytest.fixture(scope="module")
def node():
    return qc.node_log(SEED)


@pytest.fixture(scope="module")
def questions():
    return qc.build_questions(SEED, n_candidates=12, window_tokens=WT)


def _tick(line: str) -> int:
    from shared import plant
    import calendar
    import time

    stamp = ISO.match(line).group(1)
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - plant.START_EPOCH


def test_deterministic_and_cache_consistent(node, questions):
    fresh = qc.simulate(SEED, hours=1)  # no cache: the first hour again, line for line
    assert len(fresh["lines"]) > 300
    assert fresh["lines"] == node["lines"][:len(fresh["lines"])]
    assert fresh["ticks"] == node["ticks"][:len(fresh["ticks"])]
    assert node["ticks"][len(fresh["ticks"])] >= 3600
    early = [f for f in node["truth"] if f["since_tick"] < 3600]
    assert [(f["machine"], f["fault"], f["since_tick"]) for f in fresh["truth"]] == \
        [(f["machine"], f["fault"], f["since_tick"]) for f in early]
    again = qc.build_questions(SEED, n_candidates=12, window_tokens=WT)
    assert again == questions
    # a smaller n is a prefix of the split
    two = qc.load_split("held-out", 2, n_candidates=12, window_tokens=WT)
    assert [q["question"] for q in two] == [q["question"] for q in questions[:2]]


def test_split_by_seed():
    assert qc.split_seeds("train") == range(0, 1000)
    assert qc.split_seeds("validation") == range(1000, 2000)
    assert qc.split_seeds("held-out") == range(2000, 3000) == qc.split_seeds("heldout")
    qs = qc.load_split("held-out", 3, n_candidates=6, window_tokens=WT)
    assert len(qs) == 3 and all(q["seed"] >= 2000 for q in qs)
    assert all(c["node"] == "node-%d" % q["seed"] for q in qs for c in q["candidates"])


def test_question_shape_and_variety(questions):
    assert len(questions) >= 8
    assert len(set(q["question"] for q in questions)) == len(questions)
    types = set(q["type"] for q in questions)
    assert {"trip", "onset"} <= types and len(types) >= 4
    for q in questions:
        assert isinstance(q["question"], str) and q["question"].endswith("?")
        assert len(q["candidates"]) == 12
        for c in q["candidates"]:
            assert set(c) == {"text", "node", "t0_ms", "t1_ms", "relevance"}
            assert c["t0_ms"] <= c["t1_ms"] and c["relevance"] in (0, 1, 2)
        rels = [c["relevance"] for c in q["candidates"]]
        assert 2 in rels and 0 in rels


def test_windows_are_consecutive_lines_within_budget(node, questions):
    tok = qc._tokenizer()
    log = "\n".join(node["lines"])
    for q in questions[:4]:
        for c in q["candidates"]:
            assert c["text"] in log  # consecutive lines of the node's log
            n = len(tok.encode(c["text"], add_special_tokens=False).ids)
            assert n <= WT - qc.QUESTION_ROOM or c["text"].count("\n") == 0
            lines = c["text"].split("\n")
            assert (_tick(lines[0]) + 1796018400) * 1000 == c["t0_ms"]
            assert (_tick(lines[-1]) + 1796018400) * 1000 == c["t1_ms"]


def test_labels_match_ground_truth(node, questions):
    truth = node["truth"]
    for q in questions:
        answers = q["answer_lines"]
        m = q["machine"]
        for c in q["candidates"]:
            holds = any(a in c["text"].split("\n") for a in answers)
            assert holds == (c["relevance"] == 2), (q["question"], c["relevance"])
        a = answers[0]
        assert (" %s " % m) in a
        if q["type"] == "trip":
            assert "->TRIPPED interlock=" in a
        elif q["type"] in ("onset", "which", "sensor"):
            assert " RAISED" in a and a.split()[1] == "ALARM"
            t = _tick(a)
            faults = [f for f in truth if f["machine"] == m and f["since_tick"] <= t
                      and (f["until_tick"] is None or t <= f["until_tick"])]
            assert faults, "no fault of %s in the truth at %s" % (m, a)
            if q["type"] == "onset":  # the first alarm of the machine since one of its faults began
                raised = [_tick(ln) for ln in node["lines"] if ln.split()[1] == "ALARM" and (" %s " % m) in ln
                          and " RAISED" in ln]
                assert any(not [r for r in raised if f["since_tick"] <= r < t] for f in faults)
        elif q["type"] == "ack":
            assert a.split()[1] == "ACK"
        elif q["type"] == "clear":
            assert a.split()[1] == "CLEAR"
        if q["type"] != "which":  # the question names the machine (id or kind + number)
            num = str(int(m.split("-")[1]) % 100)
            assert m in q["question"] or (" %s" % num) in q["question"] or "the " in q["question"]


def test_hard_negatives_present(questions):
    # some 0-labelled candidates hold event lines of the same machine (same machine, other time)
    hard = 0
    for q in questions:
        for c in q["candidates"]:
            if c["relevance"] == 0 and any(qc.parse_event(ln) and qc.parse_event(ln)["machine"] == q["machine"]
                                           for ln in c["text"].split("\n")):
                hard += 1
    assert hard >= len(questions) // 2


@pytest.mark.parametrize("kwargs, match", [
    ({"split": "bogus"}, "unknown split"),
    ({"split": "train", "n": 0}, "n must be"),
    ({"split": "train", "n_candidates": 0}, "n_candidates"),
    ({"split": "train", "window_tokens": 16}, "window_tokens"),
    ({"split": "train", "window_tokens": "512"}, "window_tokens"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(qc.CorpusError, match=match):
        qc.load_split(**kwargs)
    assert issubclass(qc.CorpusError, ValueError)


def test_parse_event():
    e = qc.parse_event("2026-11-30T06:50:28Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB")
    assert e == {"verb": "STATE", "machine": "P-101", "from": "RUNNING", "to": "TRIPPED", "cause": "interlock=HIHI_VIB"}
    a = qc.parse_event("2026-11-30T06:44:58Z ALARM HI P-101 vibration 7.4mm/s prio=3 RAISED")
    assert a["level"] == "HI" and a["prio"] == 3 and a["state"] == "RAISED"
    assert qc.parse_event("2026-11-30T06:50:28Z P-101 RUNNING T=69.7C V=11.4mm/s") is None
    assert qc.parse_event("") is None
