"""Progressive cluster pruning: CV trigger, exact 1-D k-means, and the router that selects/drops clusters.

After each encoder layer the engine scores the still-active candidates from their intermediate [CLS]
state through the model's head, turns the logits into probabilities (sigmoid for a 1-label head, softmax
of the last label for 2 labels: bounded, so the coefficient of variation std/mean is well defined where
raw logits could have a mean near 0), and calls Router.after_layer. When CV >= threshold and more
candidates are active than top-K places remain, the probabilities are split by 1-D k-means; the cluster
holding the candidate ranked at the last open place is the boundary: clusters above it are selected
(they stop computing and take the next places, best first), clusters below are dropped, the boundary
cluster continues to the next layer with the remaining places. After the last layer the best remaining
candidates fill the remaining places.

Two calibrated refinements (prism.json "cluster_on", "margin"; defaults keep the plain mechanism): the 1-D
k-means may split the log-odds log(p / (1 - p)) instead of p ("logit": with a retrieval prior most
candidates sit near p = 0, where probabilities bunch the 5th-best with the tail that log-odds keep apart),
and a candidate ranked within the first need + margin places by its current score is never dropped, only
selected or kept (a dropped candidate is gone for good; the margin is how far below the last open place
calibration found final top-K members still climbing from).

Rows are independent in a cross-encoder (each candidate attends only to its own tokens), so a
candidate's score after layer l does not depend on which others are still running: the same Router
replayed over a recorded [layers, candidates] score matrix (simulate) gives exactly the decisions of a
live run, which is what calibration uses.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from host.prism.bert import PrismInputError


def probabilities(logits: np.ndarray, prior: Optional[np.ndarray] = None) -> np.ndarray:
    """[n, labels] logits -> relevance probability per candidate (float64).

    prior: [n] logits added to the relevant label's (host/prism/prior.py: retrieval's order), or None."""
    z = np.array(logits, dtype=np.float64)  # a copy: the prior is added in place
    if z.ndim == 1:
        z = z[:, None]
    if prior is not None:
        z[:, -1] += prior
    if z.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-z[:, 0]))
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e[:, -1] / e.sum(axis=1)


def coefficient_of_variation(values: np.ndarray) -> float:
    """std / mean of non-negative values (population std); 0 for a single value or a zero mean."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return 0.0
    m = float(v.mean())
    if m <= 0.0:
        return 0.0
    return float(v.std()) / m


def kmeans_1d(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Optimal 1-D k-means (least squares, by dynamic programming over the sorted distinct values).

    Returns (labels, centroids): labels[i] in 0..c-1 numbers clusters by increasing centroid, c =
    min(k, number of distinct values). Equal values always share a cluster; the result is deterministic."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise PrismInputError("kmeans_1d needs at least one value")
    if not np.all(np.isfinite(v)):
        raise PrismInputError("kmeans_1d: values must be finite")
    if not isinstance(k, int) or k < 1:
        raise PrismInputError("kmeans_1d: k must be a positive int, got %r" % (k,))
    uniq, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    m = uniq.size
    c = min(k, m)
    w = counts.astype(np.float64)
    s0 = np.concatenate([[0.0], np.cumsum(w)])
    s1 = np.concatenate([[0.0], np.cumsum(w * uniq)])
    s2 = np.concatenate([[0.0], np.cumsum(w * uniq * uniq)])

    def cost(i: np.ndarray, j: int) -> np.ndarray:  # squared error of distinct values i..j-1 (vector over i)
        n = s0[j] - s0[i]
        s = s1[j] - s1[i]
        return np.maximum(s2[j] - s2[i] - s * s / n, 0.0)

    inf = math.inf
    dp = np.full((c + 1, m + 1), inf)
    arg = np.zeros((c + 1, m + 1), dtype=np.int64)
    dp[0, 0] = 0.0
    for q in range(1, c + 1):
        for j in range(q, m + 1):
            i = np.arange(q - 1, j)
            tot = dp[q - 1, i] + cost(i, j)
            best = int(np.argmin(tot))  # first minimum: ties resolve to the same split every time
            dp[q, j] = tot[best]
            arg[q, j] = i[best]
    bounds = [m]
    j = m
    for q in range(c, 0, -1):
        j = int(arg[q, j])
        bounds.append(j)
    bounds.reverse()  # bounds[q]..bounds[q+1] are the distinct values of cluster q
    lab_u = np.zeros(m, dtype=np.int64)
    cents = np.zeros(c)
    for q in range(c):
        a, b = bounds[q], bounds[q + 1]
        lab_u[a:b] = q
        cents[q] = (s1[b] - s1[a]) / (s0[b] - s0[a])
    return lab_u[inverse], cents


SPLITS = ("prob", "logit")


def log_odds(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), finite for p in [0, 1] (clipped 1e-12 from either end)."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    return np.log(q) - np.log1p(-q)


def check_settings(threshold: float, clusters: int, margin: int, split: str) -> None:
    """PrismInputError unless the pruning settings are usable (a threshold of inf: never prune)."""
    if isinstance(threshold, bool) or not (isinstance(threshold, (int, float)) and threshold >= 0):
        raise PrismInputError("threshold must be a number >= 0, got %r" % (threshold,))
    if not isinstance(clusters, int) or isinstance(clusters, bool) or clusters < 2:
        raise PrismInputError("clusters must be an int >= 2, got %r" % (clusters,))
    if not isinstance(margin, int) or isinstance(margin, bool) or margin < 0:
        raise PrismInputError("margin must be an int >= 0, got %r" % (margin,))
    if split not in SPLITS:
        raise PrismInputError("split must be one of %s, got %r" % (", ".join(SPLITS), split))


class Router:
    """Pruning decisions for one query of n candidates, top k.

    after_layer(layer, probs) takes the probabilities of the currently active candidates (in the order
    of .active) and returns a boolean mask over them: True = keeps computing. Decisions are recorded in
    .selected (candidate indices, best first), .exit_layer (layer index after which each candidate
    stopped; the number of layers it ran is exit_layer + 1) and .events."""

    def __init__(self, n: int, k: int, num_layers: int, threshold: float = 0.3, clusters: int = 3,
                 start_layer: int = 0, margin: int = 0, split: str = "prob"):
        if not isinstance(n, int) or n < 1:
            raise PrismInputError("no candidates to rank")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise PrismInputError("k must be a positive integer, got %r" % (k,))
        if k > n:
            raise PrismInputError("k=%d is larger than the number of candidates (%d)" % (k, n))
        check_settings(threshold, clusters, margin, split)
        self.margin, self.split = margin, split
        self.n, self.k, self.num_layers = n, k, num_layers
        self.threshold, self.clusters, self.start_layer = float(threshold), clusters, start_layer
        self.active = np.arange(n)
        self.selected: list[int] = []
        self.exit_layer = np.full(n, -1, dtype=np.int64)
        self.last_prob = np.zeros(n)
        self.events: list[dict] = []

    @property
    def need(self) -> int:
        return self.k - len(self.selected)

    @property
    def done(self) -> bool:
        return self.need == 0 or self.active.size == 0

    def _select(self, idx: np.ndarray, probs: np.ndarray) -> None:
        for j in np.argsort(-probs, kind="stable"):
            self.selected.append(int(idx[j]))

    def after_layer(self, layer: int, probs: np.ndarray) -> np.ndarray:
        p = np.asarray(probs, dtype=np.float64).reshape(-1)
        act = self.active
        if p.size != act.size:
            raise PrismInputError("router: %d scores for %d active candidates" % (p.size, act.size))
        self.last_prob[act] = p
        keep = np.ones(act.size, dtype=bool)
        need = self.need
        last = layer >= self.num_layers - 1
        if last or need >= act.size:
            # the end: the best `need` fill the places (all of them when need >= active)
            order = np.argsort(-p, kind="stable")[:need]
            self._select(act[order], p[order])
            keep[:] = False
            self.exit_layer[act] = layer
            self.active = act[:0]
            return keep
        cv = coefficient_of_variation(p)
        if layer < self.start_layer or cv < self.threshold:
            return keep
        labels, cents = kmeans_1d(log_odds(p) if self.split == "logit" else p, self.clusters)
        order = np.argsort(-p, kind="stable")
        boundary = labels[order[need - 1]]  # cluster of the candidate at the last open place
        above = labels > boundary
        below = labels < boundary
        if self.margin:
            below[order[:need + self.margin]] = False  # close behind the last open place: not dropped yet
        if not above.any() and not below.any():
            return keep
        self._select(act[above], p[above])
        n_sel = int(above.sum())
        keep = ~above & ~below  # the boundary cluster and any candidate the margin holds back
        if keep.sum() == self.need:  # the boundary cluster exactly fills what is left
            self._select(act[keep], p[keep])
            n_sel += int(keep.sum())
            keep[:] = False
        stopped = act[~keep]
        self.exit_layer[stopped] = layer
        self.events.append({"layer": layer, "cv": round(cv, 4), "selected": n_sel,
                            "dropped": int(below.sum()), "continue": int(keep.sum())})
        self.active = act[keep]
        return keep

    def layers_run(self) -> np.ndarray:
        """Layers computed per candidate (exit layer + 1)."""
        return self.exit_layer + 1


def simulate(layer_probs: np.ndarray, k: int, threshold: float, clusters: int = 3, start_layer: int = 0,
             margin: int = 0, split: str = "prob") -> Router:
    """Replay the router over a recorded [layers, candidates] probability matrix (see the module doc)."""
    lp = np.asarray(layer_probs, dtype=np.float64)
    layers, n = lp.shape
    r = Router(n, k, layers, threshold, clusters, start_layer, margin, split)
    for l in range(layers):
        if r.done:
            break
        r.after_layer(l, lp[l, r.active])
    return r


def top_k_agreement(a, b, k: Optional[int] = None) -> float:
    """|top-k set of a  intersect  top-k set of b| / k (a, b: candidate indices, best first)."""
    k = k or len(b)
    return len(set(list(a)[:k]) & set(list(b)[:k])) / float(k)
