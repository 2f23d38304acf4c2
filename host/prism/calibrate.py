"""Calibration: the most aggressive CV threshold whose top-K agreement with the full model meets a target.

For each sample query the full model is run once (monolithic.layer_probs: every candidate's probability
after every layer). The router's decisions depend only on those numbers (pruning.py), so every
threshold of the grid is replayed exactly, without running the model again. A lower threshold prunes
earlier (more aggressive); the lowest one whose mean agreement over the queries reaches the target
wins. Given several k-means cluster counts, each gets its own most aggressive threshold and the count
with the fewest layers per candidate (then the fewer clusters) wins: more clusters make the boundary
cluster that keeps computing smaller, but split close scores more often. Keep margins (pruning.py) are chosen
the same way: every (clusters, margin) pair gets its most aggressive threshold, the fewest layers win (then
fewer clusters, then the smaller margin). If nothing meets the target,
the result says so and falls back to never pruning (threshold = inf), which agrees by construction.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from host.prism.bert import PrismInputError
from host.prism.pruning import simulate

DEFAULT_GRID = tuple([0.001, 0.002, 0.005, 0.01, 0.02, 0.03] + [round(0.05 * i, 2) for i in range(1, 21)]
                     + [1.25, 1.5, 2.0, 3.0, 5.0])
DEFAULT_MARGINS = (0, 2, 4, 6, 8, 10, 12)  # keep margins calibration chooses from (pruning.py)


def replay(layer_probs: Sequence[np.ndarray], k: int, threshold: float, clusters: int = 3,
           start_layer: int = 0, margin: int = 0, split: str = "prob") -> dict:
    """Mean top-k agreement, worst agreement and mean layers per candidate of one threshold over queries."""
    agree, layers = [], []
    for lp in layer_probs:
        full_top = np.argsort(-lp[-1], kind="stable")[:k]
        r = simulate(lp, k, threshold, clusters, start_layer, margin, split)
        agree.append(len(set(r.selected) & set(int(i) for i in full_top)) / float(k))
        layers.append(float(np.mean(r.layers_run())))
    return {"threshold": threshold, "agreement": float(np.mean(agree)), "worst": float(np.min(agree)),
            "layers_per_candidate": float(np.mean(layers))}


def calibrate(layer_probs: Sequence[np.ndarray], k: int, target: float, grid: Iterable[float] = DEFAULT_GRID,
              clusters: int | Iterable[int] = 3, start_layer: int = 0, margins: Iterable[int] = (0,),
              split: str = "prob") -> dict:
    """{"threshold", "clusters", "margin", "split", "agreement", "layers_per_candidate", "met", "table"} for the
    chosen setting.

    clusters: one k-means cluster count, or several to choose from (the table then covers them all);
    margins: keep margins to choose from; split: what the k-means splits (pruning.py)."""
    lps = [np.asarray(lp, dtype=np.float64) for lp in layer_probs]
    if not lps:
        raise PrismInputError("calibration needs at least one sample query")
    if not (isinstance(target, (int, float)) and 0 < target <= 1):
        raise PrismInputError("target agreement must be in (0, 1], got %r" % (target,))
    for lp in lps:
        if lp.ndim != 2 or lp.shape[1] < k:
            raise PrismInputError("each sample needs a [layers, candidates >= k] probability matrix, got %s" % (lp.shape,))
    counts = [clusters] if isinstance(clusters, int) else list(clusters)
    if not counts or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 2 for c in counts):
        raise PrismInputError("clusters must be an int >= 2 or a non-empty list of them, got %r" % (clusters,))
    counts = sorted(set(counts))
    margins = sorted(set(margins))
    if not margins or not all(isinstance(m, int) and not isinstance(m, bool) and m >= 0 for m in margins):
        raise PrismInputError("margins must be ints >= 0, got %r" % (margins,))
    thresholds = sorted(set(float(g) for g in grid))
    table, picks = [], []
    for c in counts:
        for m in margins:
            rows = [dict(replay(lps, k, t, c, start_layer, m, split), clusters=c, margin=m, split=split)
                    for t in thresholds]
            table += rows
            ok = [row for row in rows if row["agreement"] >= target - 1e-12]
            if ok:
                picks.append(min(ok, key=lambda row: row["threshold"]))
    if picks:
        best = min(picks, key=lambda row: (round(row["layers_per_candidate"], 9), row["clusters"], row["margin"]))
        return dict(best, met=True, table=table)
    never = dict(replay(lps, k, math.inf, counts[0], start_layer), clusters=counts[0], margin=0, split=split)
    return dict(never, met=False, table=table)
