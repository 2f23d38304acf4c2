"""Fit the reranker's retrieval prior (host/prism/prior.py) on validation questions: a grid over its two numbers.

The prior adds rank_log * log(1 + place) + pinned * [found by the record] to every exit's logit of a
candidate in retrieval's order. With the model fixed, its two numbers are chosen like the pruning settings:
on validation questions with ask's own candidates (tools/bench/prism_questions.py), never on held-out ones,
as the pair on the grid whose final order has the highest mean nDCG@10 (linear gain: evidence lines held,
as `edgetwin bench prism` scores it); ties go to the weaker prior. Deterministic, no training.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from host.prism.prior import RetrievalPrior
from tools.bench.prism import ndcg  # the bench's own nDCG@10: linear gains, log2 discount

RANK_LOG_GRID = tuple(-0.25 * i for i in range(0, 17))  # 0 .. -4
PINNED_GRID = tuple(0.5 * i for i in range(0, 11))  # 0 .. 5


def mean_ndcg(final_logits: Sequence[np.ndarray], questions: Sequence[dict], prior: RetrievalPrior) -> float:
    """Mean nDCG@10 of final logit + prior over questions ({"relevance", "pinned"}, candidates in retrieval's order)."""
    out = []
    for z, q in zip(final_logits, questions):
        s = np.asarray(z, dtype=np.float64) + prior.logits(len(z), int(q["pinned"]))
        out.append(ndcg(list(np.argsort(-s, kind="stable")), q["relevance"]))
    return float(np.mean(out))


def fit(final_logits: Sequence[np.ndarray], questions: Sequence[dict]) -> dict:
    """{"prior": RetrievalPrior, "ndcg10", "head_only_ndcg10", "retrieval_ndcg10", "questions"} for the best pair."""
    if not questions or len(final_logits) != len(questions):
        raise ValueError("fit needs one final-logit vector per question, and at least one question")
    best = None
    for rank_log in RANK_LOG_GRID:  # weaker priors first: a tie keeps the weaker one
        for pinned in PINNED_GRID:
            p = RetrievalPrior(rank_log, pinned)
            score = mean_ndcg(final_logits, questions, p)
            if best is None or score > best[0] + 1e-12:
                best = (score, p)
    retrieval = float(np.mean([ndcg(list(range(len(q["relevance"]))), q["relevance"]) for q in questions]))
    return {"prior": best[1], "ndcg10": round(best[0], 4),
            "head_only_ndcg10": round(mean_ndcg(final_logits, questions, RetrievalPrior(0.0, 0.0)), 4),
            "retrieval_ndcg10": round(retrieval, 4), "questions": len(questions)}
