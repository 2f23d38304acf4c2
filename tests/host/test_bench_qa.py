"""`edgetwin bench qa --json` run small (1 plant hour per node, 2 warm questions, 1 cold `edgetwin ask` process):
one JSON object whose figures are sane (p50 <= p90, the stages sum to at most the whole, the store as asked)."""

from __future__ import annotations

import json

import pytest

from host import cli

pytestmark = [pytest.mark.slow, pytest.mark.cpu]


def test_bench_qa_small_json(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["bench", "qa", "--json", "--questions", "2", "--cold", "1", "--hours", "1"]) == 0
    cap = capsys.readouterr()
    res = json.loads(cap.out.strip())
    assert res["bench"] == "qa" and res["candidates"] == 4 and res["k"] == 3
    assert res["store"]["nodes"] == 2 and res["store"]["plant_hours_per_node"] == 1.0
    assert res["store"]["lines"] > 2 * 60 * 4  # a sample line a minute per machine, and the events
    w, c = res["warm"], res["cold"]
    assert w["n"] == 2 and c["n"] == 1
    assert 0 < w["p50_s"] <= w["p90_s"] <= w["max_s"] and 0 < c["p50_s"] <= c["p90_s"]
    st = w["stages_p50"]
    assert 0 < st["rerank_s"] and 0 < st["prefill_s"] and 0 < st["decode_s"]
    assert 50 < st["prompt_tokens"] <= 1000 and 1 <= st["answer_tokens"] <= res["max_tokens"]
    assert st["retrieve_s"] + st["rerank_s"] + st["prefill_s"] + st["decode_s"] <= w["max_s"] + 0.5
    assert w["candidates_p50"] == 4 and 0 <= w["cited_fraction"] <= 1
    assert w["target"].startswith("domain target")  # what `edgetwin ask` (the cold runs) answers with
    assert all(e["answer"].strip() for e in w["examples"])
    assert res["goals"] == {"warm_p50_s": 10.0, "cold_p50_s": 20.0}
    assert res["goals_met"]["warm_p50"] == (w["p50_s"] <= 10.0)
    assert res["machine"]["cpus"] >= 1 and len(res["machine"]["loadavg_before"]) == 3
    # progress on stderr, one line per step
    assert "bench qa: store: " in cap.err and "bench qa: warm 2/2: " in cap.err and "bench qa: cold 1/1: " in cap.err
