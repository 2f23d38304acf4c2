"""Calibration: the most aggressive CV threshold whose top-K agreement with the full model meets a target.

For each sample query the full model is run once (monolithic.layer_probs: every candidate's probability
after every layer). The router's decisions depend only on those numbers (pruning.py), so every
threshold of the grid is replayed exactly, without running the model again. A lower threshold prunes
earlier (more aggressive); the lowest one whose mean agreement over the queries reaches the target
wins. If none does, the result says so and falls back to never pruning (threshold = inf), which agrees
by construction.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from host.prism.bert import PrismInputError
from host.prism.pruning import simulate

DEFAULT_GRID = tuple([0.001, 0.002, 0.005, 0.01, 0.02, 0.03] + [round(0.05 * i, 2) for i in range(1, 21)]
                     + [1.25, 1.5, 2.0, 3.0, 5.0])


def replay(layer_probs: Sequence[np.ndarray], k: int, threshold: float, clusters: int = 3,
           start_layer: int = 0) -> dict:
    """Mean top-k agreement, worst agreement and mean layers per candidate of one threshold over queries."""
    agree, layers = [], []
    for lp in layer_probs:
        full_top = np.argsort(-lp[-1], kind="stable")[:k]
        r = simulate(lp, k, threshold, clusters, start_layer)
        agree.append(len(set(r.selected) & set(int(i) for i in full_top)) / float(k))
        layers.append(float(np.mean(r.layers_run())))
    return {"threshold": threshold, "agreement": float(np.mean(agree)), "worst": float(np.min(agree)),
            "layers_per_candidate": float(np.mean(layers))}


def calibrate(layer_probs: Sequence[np.ndarray], k: int, target: float, grid: Iterable[float] = DEFAULT_GRID,
              clusters: int = 3, start_layer: int = 0) -> dict:
    """{"threshold", "agreement", "layers_per_candidate", "met", "table"} for the chosen threshold."""
    lps = [np.asarray(lp, dtype=np.float64) for lp in layer_probs]
    if not lps:
        raise PrismInputError("calibration needs at least one sample query")
    if not (isinstance(target, (int, float)) and 0 < target <= 1):
        raise PrismInputError("target agreement must be in (0, 1], got %r" % (target,))
    for lp in lps:
        if lp.ndim != 2 or lp.shape[1] < k:
            raise PrismInputError("each sample needs a [layers, candidates >= k] probability matrix, got %s" % (lp.shape,))
    table = [replay(lps, k, float(t), clusters, start_layer) for t in sorted(set(float(g) for g in grid))]
    ok = [row for row in table if row["agreement"] >= target - 1e-12]
    if ok:
        best = min(ok, key=lambda row: row["threshold"])
        return dict(best, met=True, table=table)
    never = replay(lps, k, math.inf, clusters, start_layer)
    return dict(never, met=False, table=table)
