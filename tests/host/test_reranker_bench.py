"""tools/bench/models.py: metrics, the FTS5 bm25 baseline, and the quick bench (the reranker beats bm25)."""

from __future__ import annotations

import json
import math

import pytest

from tools.bench import models as bm


def test_ndcg_and_recall():
    rels = [0, 2, 1, 0]
    assert bm.ndcg_at([2, 1, 0, 0], rels) == pytest.approx(1.0)
    worst = bm.ndcg_at([0, 0, 1, 2], rels)
    assert 0.0 < worst < bm.ndcg_at([1, 2, 0, 0], rels) < 1.0
    assert bm.ndcg_at([0, 0], [0, 0]) == 0.0
    assert bm.ndcg_at([0, 2], [0, 2]) == pytest.approx(1 / math.log2(3))
    assert bm.rank([0.1, 0.5, 0.5, -1.0]) == [1, 2, 0, 3]
    assert bm.recall_at([1, 0, 2, 3], [0, 2, 2, 0], k=2) == 0.5


def test_bm25_prefers_matching_windows():
    texts = ["2026-11-30T06:00:00Z P-101 RUNNING T=40.0C",
             "2026-11-30T06:50:28Z STATE M-201 RUNNING->TRIPPED interlock=HIHI_VIB",
             "nothing here"]
    s = bm.bm25_scores("why did M-201 trip on vibration?", texts)
    assert s[1] > s[0] and s[2] == float("-inf")
    assert bm.bm25_scores("?!", texts) == [float("-inf")] * 3


def test_draft_figures_fallback(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "tools.train.eval_draft":
            raise ImportError("No module named 'tools.train.eval_draft'")
        return real(name, *a, **k)

    monkeypatch.setattr(bm.importlib, "import_module", fake)
    got = bm.draft_figures(quick=True)
    assert got["draft"] is None and "eval_draft" in got["draft_reason"]


@pytest.mark.slow
def test_quick_bench_reranker_beats_bm25(capsys):
    assert bm.main(["--quick", "--json", "--no-draft"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["questions"] == bm.QUICK["n"] and out["window_tokens"] == bm.QUICK["window_tokens"]
    for key in ("reranker_ndcg10", "bm25_ndcg10", "reranker_top5_recall"):
        assert 0.0 <= out[key] <= 1.0
    assert out["reranker_ndcg10"] > out["bm25_ndcg10"] + 0.05
    assert out["draft"] is None


def test_bad_model_dir_is_a_clear_error(tmp_path, capsys):
    assert bm.main(["--quick", "--no-draft", "--model", str(tmp_path / "absent")]) == 2
    out = json.loads(capsys.readouterr().out)
    assert "does not exist" in out["error"]
