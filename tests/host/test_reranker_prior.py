"""tools/train/reranker_prior.py: the retrieval prior's grid fit picks what the validation questions reward."""

from __future__ import annotations

import numpy as np
import pytest

from host.prism.prior import RetrievalPrior
from tools.train import reranker_prior


def _questions(rng, n: int, answer_at: str) -> tuple[list[np.ndarray], list[dict]]:
    """n questions of 20 candidates in retrieval's order, one answer window each; the head's logits are noise
    plus a small pull towards the answer."""
    logits, qs = [], []
    for _ in range(n):
        j = 0 if answer_at == "first" else int(rng.integers(5, 20))
        rel = [0] * 20
        rel[j] = 1
        z = rng.normal(0, 1.0, 20)
        z[j] += 0.8 if answer_at == "first" else 6.0
        logits.append(z)
        qs.append({"relevance": rel, "pinned": 0})
    return logits, qs


def test_fit_leans_on_retrieval_when_it_is_right_and_not_when_it_is_wrong():
    rng = np.random.default_rng(0)
    z, qs = _questions(rng, 40, "first")  # retrieval always right, the head weak: a strong prior wins
    got = reranker_prior.fit(z, qs)
    assert got["prior"].rank_log <= -2.0 and got["ndcg10"] == got["retrieval_ndcg10"] == 1.0
    assert got["head_only_ndcg10"] < 0.9
    z, qs = _questions(rng, 40, "late")  # retrieval wrong, the head right: the weakest prior (none) is kept
    got = reranker_prior.fit(z, qs)
    assert got["prior"] == RetrievalPrior(0.0, 0.0) and got["ndcg10"] == got["head_only_ndcg10"] == 1.0
    assert got["retrieval_ndcg10"] < 0.6


def test_fit_uses_the_pinned_window():
    """The record's window (pinned, first) holds the answer while the head prefers the next one: a pinned bonus
    fixes what a rank prior alone fixes only with the tail pulled in too."""
    z = [np.array([0.0, 1.0] + [-3.0] * 8) for _ in range(10)]
    qs = [{"relevance": [1] + [0] * 9, "pinned": 1} for _ in range(10)]
    got = reranker_prior.fit(z, qs)
    assert got["ndcg10"] == 1.0 and got["prior"].pinned > 0 and got["prior"].rank_log == 0.0
    assert reranker_prior.mean_ndcg(z, qs, RetrievalPrior(0.0, 0.0)) < 1.0


def test_fit_bad_input():
    with pytest.raises(ValueError, match="one final-logit vector per question"):
        reranker_prior.fit([], [])
    with pytest.raises(ValueError, match="one final-logit vector per question"):
        reranker_prior.fit([np.zeros(3)], [])
