"""tools/bench/prism.py end to end on a tiny random cross-encoder and ask's candidates from small plant stores:
one JSON object with every figure, the candidates as `ask` retrieves them, the variants interleaved. No timing bound."""

from __future__ import annotations

import json

import pytest
from test_prism_bert import make_tiny
from tools.bench import prism as bench_prism
from tools.bench import prism_questions

KEYS = ("latency_ratio", "latency_ratio_p25", "latency_ratio_p75", "latency_ratio_of_medians",
        "torch_latency_ratio", "torch_latency_ratio_p25", "torch_latency_ratio_p75", "torch_latency_ratio_of_medians",
        "peak_mem_ratio", "torch_peak_mem_ratio", "peak_mem_ratio_tracemalloc",
        "top5_agreement", "layers_per_candidate_mean", "final_ndcg10", "bm25_ndcg10", "prism_ndcg10",
        "io_hidden_fraction", "embed_cache_hit_rate", "numpy_vs_torch_layer_ratio", "numpy_vs_torch_full_ratio")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny model with exit heads beside it (as the shipped reranker has): every variant must score through them."""
    import numpy as np

    from host.prism.exits import EXITS_FILE, ExitHeads

    d = make_tiny(tmp_path_factory.mktemp("m"), num_hidden_layers=3, max_position_embeddings=64)
    cfg = json.loads((d / "config.json").read_text())
    h = cfg["hidden_size"]
    rng = np.random.default_rng(0)
    ExitHeads(rng.normal(0, 0.5, (2, 2 * h, 4)), np.zeros((2, 4)), rng.normal(0, 1, (2, 4)), np.zeros(2), h,
              3).save(str(d / EXITS_FILE))
    return d


@pytest.fixture(scope="module")
def bench(tiny):
    """One small run with every part on (torch, RSS workers, the curve), shared by the tests below."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = bench_prism.main(["--model", str(tiny), "--questions", "4", "--candidates", "8", "--calib-questions",
                                 "2", "--curve", "6,8", "--curve-questions", "2", "--rss-questions", "1",
                                 "--speed-reps", "2", "--speed-min-s", "0.01", "--json"])
    assert code == 0
    return json.loads(buf.getvalue())


def test_bench_prism_json_has_every_key(bench):
    out = bench
    assert out["model"].startswith("given:") and out["questions"] == 4 and out["candidates"] == 8
    for key in KEYS:
        assert isinstance(out[key], float), key
    for key in ("latency_ratio", "torch_latency_ratio", "peak_mem_ratio", "torch_peak_mem_ratio"):
        assert out[key] > 0 and out[key + "_p25" if "latency" in key else key] > 0, key
    for v in ("full", "prism", "torch"):
        s = out["latency_s"][v]
        assert 0 < s["p25"] <= s["median"] <= s["p75"], v
        assert out["rss"][v]["peak_above_imports"] > 0, v
    assert 0 <= out["top5_agreement"] <= 1 and 1 <= out["layers_per_candidate_mean"] <= 3
    assert 0 <= out["final_ndcg10"] <= 1 and 0 < out["bm25_ndcg10"] <= 1  # every question has a relevant window
    assert "prefetch" in out["threads_note"]
    assert out["exit_heads"] is True  # the model directory's exits.safetensors
    assert set(out["goals"]) == set(out["goals_met"]) == {
        "torch_latency_ratio", "torch_peak_mem_ratio", "top5_agreement", "layers_per_candidate_mean", "final_ndcg10"}
    assert out["goals"]["torch_latency_ratio"] == ["<=", 0.7] and out["goals"]["final_ndcg10"] == [">=", "bm25_ndcg10"]
    assert all(isinstance(v, bool) for v in out["goals_met"].values())


def test_bench_prism_curve(bench):
    curve = bench["curve"]
    assert [c["candidates"] for c in curve] == [6, 8]
    # 8 is the main run; at 6, a question the record answers keeps only the windows of the time it asks about,
    # which can leave too few to rank
    assert 1 <= curve[0]["questions"] <= 2 and curve[1]["questions"] == 4
    for c in curve:
        for key in ("latency_ratio", "torch_latency_ratio", "peak_mem_ratio", "torch_peak_mem_ratio"):
            assert c[key] > 0, (c["candidates"], key)
        assert c["candidates_used_min"] <= c["candidates_used_mean"] <= c["candidates"]


def test_bench_prism_variants_interleave(bench):
    """The order rotates question by question: each variant runs first once in every three questions."""
    order = bench["variant_order"]
    assert order[:4] == [["full", "prism", "torch"], ["prism", "torch", "full"], ["torch", "full", "prism"],
                         ["full", "prism", "torch"]]
    assert bench_prism.rotation(["a", "b"], 3) == ["b", "a"]


def test_candidates_are_asks_fts5_windows():
    """The candidates are host.qa.retrieve's windows for the question, in its (bm25, record first) order."""
    from tools.train import plant_text, qa_corpus

    from host import qa

    qs, skipped = prism_questions.ask_questions("held-out", 3, 10, 5)
    assert len(qs) == 3 and sum(skipped.values()) >= 0
    seed = qs[0]["seed"]
    assert seed >= 2000
    db = None
    for db, question, kind, truth in prism_questions._seed_questions(seed):  # noqa: SLF001
        if question == qs[0]["question"]:
            found = qa.retrieve(db, question, limit=10, lines=plant_text.LINES)
            assert qs[0]["texts"] == [w.text for w in found.windows]
            if not found.pinned:  # no record window: exactly the FTS5 windows, best bm25 first
                assert qs[0]["texts"] == [w.text for w in qa.candidates(db, question, limit=10, lines=plant_text.LINES)]
            assert qs[0]["relevance"] == [prism_questions.relevance(t, truth["evidence"]) for t in qs[0]["texts"]]
            break
    assert db is not None and qa_corpus.split_seeds("held-out")[0] == 2000


def test_skipped_questions_are_counted(monkeypatch):
    """'none' questions (no evidence), too few windows for k, no relevant window: each skipped and counted."""
    from tools.train import plant_text

    kinds = [kind for _, kind, _ in plant_text.question_specs(2000)]
    used, skipped = prism_questions.ask_questions("held-out", 100, 20, 5, seeds=1)
    assert set(skipped) == set(prism_questions.SKIP_REASONS)
    assert len(used) + sum(skipped.values()) == len(kinds) and skipped["none_question"] == kinds.count("none") > 0
    monkeypatch.setattr(prism_questions, "ask_candidates", lambda db, q, limit, lines: {
        "texts": ["x"] * 5, "pinned": 0, "matched": True, "how": ""})
    few_used, few = prism_questions.ask_questions("held-out", 100, 20, 5, seeds=1)
    assert not few_used and few == dict(skipped, too_few_windows=len(kinds) - kinds.count("none"),
                                        no_relevant_window=0)
    monkeypatch.setattr(prism_questions, "ask_candidates", lambda db, q, limit, lines: {
        "texts": ["no evidence here"] * 8, "pinned": 0, "matched": True, "how": ""})
    _, no_rel = prism_questions.ask_questions("held-out", 100, 20, 5, seeds=1)
    assert no_rel == dict(few, too_few_windows=0, no_relevant_window=few["too_few_windows"])
    assert prism_questions.relevance("a\nb\nc", ["b", "c", "d"]) == 2


def test_ndcg():
    assert bench_prism.ndcg([0, 1, 2], [2, 1, 0]) == pytest.approx(1.0)
    assert bench_prism.ndcg([2, 1, 0], [2, 1, 0]) < 1.0
    assert bench_prism.ndcg([0, 1], [0, 0]) == 0.0


def test_ask_order_keeps_the_records_windows_first():
    """ask shows the record's pinned windows first whatever the model's order (host/qa.rerank)."""
    assert bench_prism.pinned_first([3, 1, 0, 2], 1) == [0, 3, 1, 2]
    assert bench_prism.pinned_first([3, 1, 0, 2], 0) == [3, 1, 0, 2]
    assert bench_prism.pinned_first([2, 0, 1], 2) == [0, 1, 2]
    assert bench_prism.ndcg(bench_prism.pinned_first([1, 0, 2], 1), [2, 1, 0]) == pytest.approx(1.0)
    assert bench_prism.ndcg([1, 0, 2], [2, 1, 0]) < 1.0  # the model alone would put the pinned window second


@pytest.mark.parametrize("argv, words", [
    (["--questions", "0"], "--questions must be at least 1"),
    (["--candidates", "5", "--k", "5"], "--candidates (5) must be larger than --k (5)"),
    (["--curve", "3,20"], "--curve"),
    (["--clusters", "1"], "--clusters"),
    (["--threshold", "0.3", "--clusters", "3,4"], "--threshold skips calibration"),
    (["--rss-questions", "-1"], "--rss-questions must be 0 or more"),
])
def test_bench_prism_bad_options(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        bench_prism.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_generated_plant_questions_are_asks_windows_on_the_imported_day():
    """--plants unseen: bench quality's operator questions on a generated plant of held-out kinds, each with
    ask's windows over that plant's imported day; relevance counts its evidence lines, and with_limit re-asks
    the same plant (not the node simulator's seed of that number)."""
    from host import qa

    qs, skipped = prism_questions.ask_questions("unseen", 100, 10, 5, seeds=1)
    assert qs and all(q["seed"] == 2000 and q["split"] == "unseen" for q in qs)
    assert skipped["none_question"] > 0  # "never" questions have nothing to rank
    db_seen = None
    for db, question, kind, truth in prism_questions._seed_questions(2000, "unseen"):  # noqa: SLF001
        if question == qs[0]["question"]:
            db_seen = db
            found = qa.retrieve(db, question, limit=10, lines=prism_questions.ask_lines())
            assert qs[0]["texts"] == [w.text for w in found.windows]
            assert qs[0]["relevance"] == [prism_questions.relevance(t, truth["evidence"]) for t in qs[0]["texts"]]
            assert any(qs[0]["relevance"]) and truth["evidence"]
            break
    assert db_seen is not None
    again = prism_questions.with_limit(qs[:1], 10)
    assert [q["texts"] for q in again] == [qs[0]["texts"]] and again[0]["split"] == "unseen"
