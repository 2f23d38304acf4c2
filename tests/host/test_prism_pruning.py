"""host/prism/pruning.py and calibrate.py: 1-D k-means, the CV trigger, routing on hand-made scores, calibration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from host.prism import PrismInputError
from host.prism.calibrate import calibrate, replay
from host.prism.pruning import Router, coefficient_of_variation, kmeans_1d, probabilities, simulate, top_k_agreement


def brute_kmeans_cost(values: np.ndarray, k: int) -> float:
    """Least total squared error over every split of the sorted distinct values into <= k runs."""
    u = np.unique(values)
    best = math.inf
    for c in range(1, min(k, u.size) + 1):
        for cuts in itertools.combinations(range(1, u.size), c - 1):
            bounds = (0,) + cuts + (u.size,)
            cost = 0.0
            for a, b in zip(bounds[:-1], bounds[1:]):
                members = values[(values >= u[a]) & (values <= u[b - 1])]
                cost += float(((members - members.mean()) ** 2).sum())
            best = min(best, cost)
    return best


def kmeans_cost(values: np.ndarray, labels: np.ndarray) -> float:
    return float(sum(((values[labels == c] - values[labels == c].mean()) ** 2).sum() for c in np.unique(labels)))


@pytest.mark.parametrize("seed", range(12))
def test_kmeans_1d_is_optimal_and_ordered(seed):
    rng = np.random.default_rng(seed)
    v = np.round(rng.random(int(rng.integers(2, 11))), 2)  # rounding makes ties
    k = int(rng.integers(1, 5))
    labels, cents = kmeans_1d(v, k)
    assert abs(kmeans_cost(v, labels) - brute_kmeans_cost(v, k)) < 1e-9
    assert np.all(np.diff(cents) > 0)  # clusters numbered by increasing centroid
    for c in range(cents.size):  # each cluster is an interval and its centroid is its mean
        assert abs(v[labels == c].mean() - cents[c]) < 1e-12
        if c + 1 < cents.size:
            assert v[labels == c].max() < v[labels == c + 1].min()
    for a in np.unique(v):  # equal values share a cluster
        assert np.unique(labels[v == a]).size == 1


def test_kmeans_1d_small_cases_and_bad_input():
    labels, cents = kmeans_1d(np.array([0.9, 0.1, 0.1, 0.92, 0.5]), 3)
    assert labels.tolist() == [2, 0, 0, 2, 1] and np.allclose(cents, [0.1, 0.5, 0.91])
    labels, cents = kmeans_1d(np.array([0.3, 0.3, 0.3]), 3)  # fewer distinct values than k
    assert labels.tolist() == [0, 0, 0] and cents.tolist() == [0.3]
    with pytest.raises(PrismInputError, match="at least one"):
        kmeans_1d(np.array([]), 2)
    with pytest.raises(PrismInputError, match="finite"):
        kmeans_1d(np.array([0.1, np.nan]), 2)
    with pytest.raises(PrismInputError, match="k must"):
        kmeans_1d(np.array([0.1, 0.2]), 0)


def test_coefficient_of_variation_and_probabilities():
    assert coefficient_of_variation(np.array([0.5, 0.5, 0.5])) == 0.0
    assert abs(coefficient_of_variation(np.array([1.0, 3.0])) - 0.5) < 1e-12  # std 1, mean 2
    assert coefficient_of_variation(np.array([0.7])) == 0.0
    assert abs(probabilities(np.array([[0.0], [2.0]]))[1] - 1 / (1 + math.exp(-2))) < 1e-12
    p2 = probabilities(np.array([[1.0, 3.0]]))  # 2 labels: softmax of the last
    assert abs(p2[0] - math.exp(3) / (math.exp(1) + math.exp(3))) < 1e-12


SCORES = np.array([0.60, 0.02, 0.99, 0.55, 0.10, 0.97, 0.01, 0.50, 0.05, 0.98])
# clusters by value: {0.01, 0.02, 0.05, 0.10} < {0.50, 0.55, 0.60} < {0.97, 0.98, 0.99}


def test_router_routes_clusters_around_the_boundary():
    r = Router(10, 5, num_layers=4, threshold=0.3, clusters=3)
    assert coefficient_of_variation(SCORES) > 0.3
    keep = r.after_layer(0, SCORES)
    # the 5th best (0.55) is in the middle cluster: the top cluster is selected, the low one dropped
    assert r.selected == [2, 9, 5]  # best first
    assert keep.tolist() == [s in (0.60, 0.55, 0.50) for s in SCORES]
    assert r.active.tolist() == [0, 3, 7] and r.need == 2
    assert r.exit_layer.tolist() == [-1, 0, 0, -1, 0, 0, 0, -1, 0, 0]
    assert r.events == [{"layer": 0, "cv": round(coefficient_of_variation(SCORES), 4), "selected": 3, "dropped": 4,
                         "continue": 3}]
    # the survivors' scores change at the next layer; CV of three close values stays below the threshold
    keep = r.after_layer(1, np.array([0.52, 0.58, 0.56]))
    assert keep.all() and r.need == 2 and not r.done
    # CV 0.31: three singleton clusters; 0.7 is the boundary and exactly fills the last place left
    keep = r.after_layer(2, np.array([0.40, 0.70, 0.90]))
    assert not keep.any() and r.selected == [2, 9, 5, 7, 3] and r.done
    assert r.layers_run().tolist() == [3, 1, 1, 3, 1, 1, 1, 3, 1, 1]
    # without that, the last layer fills the places with the best remaining
    r = Router(10, 5, num_layers=2, threshold=0.3)
    r.after_layer(0, SCORES)
    r.after_layer(1, np.array([0.1, 0.3, 0.2]))
    assert r.selected == [2, 9, 5, 3, 7] and r.done and r.layers_run().tolist() == [2, 1, 1, 2, 1, 1, 1, 2, 1, 1]


def test_router_boundary_cluster_that_fills_the_places_is_selected():
    r = Router(10, 3, num_layers=6, threshold=0.3)
    keep = r.after_layer(0, SCORES)  # the 3rd best is in the top cluster of exactly 3
    assert not keep.any() and r.done and r.selected == [2, 9, 5]
    assert r.layers_run().tolist() == [1] * 10


def test_router_cv_trigger():
    flat = np.array([0.50, 0.52, 0.48, 0.51, 0.49, 0.50])
    r = Router(6, 2, num_layers=3, threshold=0.3)
    assert r.after_layer(0, flat).all() and not r.events  # CV ~0.03: nothing happens
    r = Router(10, 5, num_layers=3, threshold=0.9)  # CV of SCORES ~0.85 < 0.9
    assert r.after_layer(0, SCORES).all() and r.active.size == 10
    r = Router(10, 5, num_layers=3, threshold=0.3, start_layer=1)  # not before layer 1
    assert r.after_layer(0, SCORES).all()
    assert not r.after_layer(1, SCORES).all()


def test_router_bad_input():
    with pytest.raises(PrismInputError, match="larger than the number of candidates"):
        Router(3, 4, 2)
    with pytest.raises(PrismInputError, match="k must be"):
        Router(3, 0, 2)
    with pytest.raises(PrismInputError, match="no candidates"):
        Router(0, 1, 2)
    with pytest.raises(PrismInputError, match="threshold"):
        Router(3, 1, 2, threshold=-1)
    with pytest.raises(PrismInputError, match="3 scores for 4 active"):
        Router(4, 1, 2).after_layer(0, np.zeros(3))


def _layer_probs(rng, n: int, layers: int, noise: float) -> np.ndarray:
    """Scores that converge to a final ranking: early layers are the final ones plus shrinking noise."""
    final = rng.random(n) ** 3
    rows = [np.clip(final + rng.normal(0, noise * (layers - 1 - l) / layers, n), 0.001, 0.999) for l in range(layers)]
    return np.array(rows)


def test_calibration_picks_the_most_aggressive_threshold_meeting_the_target():
    rng = np.random.default_rng(3)
    lps = [_layer_probs(rng, 20, 6, 0.6) for _ in range(12)]
    target = 0.95
    cal = calibrate(lps, 5, target)
    assert cal["met"] and cal["agreement"] >= target
    table = {row["threshold"]: row for row in cal["table"]}
    lower = [t for t in table if t < cal["threshold"]]
    assert lower, "the grid must hold less aggressive and more aggressive choices for this test to mean anything"
    assert all(table[t]["agreement"] < target for t in lower)  # every more aggressive one misses the target
    assert cal["layers_per_candidate"] < 6  # and it does prune
    # with no noise pruning is exact: the most aggressive threshold of the grid already agrees fully
    exact = [np.repeat(lp[-1:], 6, axis=0) for lp in lps]
    cal = calibrate(exact, 5, 1.0)
    assert cal["threshold"] == min(table) and cal["agreement"] == 1.0
    # an unreachable target: never prune (agreement 1 by construction) and say so
    cal = calibrate(lps, 5, 1.0, grid=[0.05])
    assert not cal["met"] and cal["threshold"] == math.inf and cal["agreement"] == 1.0 and cal["layers_per_candidate"] == 6
    with pytest.raises(PrismInputError, match="at least one"):
        calibrate([], 5, 0.9)
    with pytest.raises(PrismInputError, match="target"):
        calibrate(lps, 5, 1.5)


def test_calibration_over_cluster_counts_picks_the_fewest_layers():
    rng = np.random.default_rng(11)
    lps = [_layer_probs(rng, 20, 6, 0.3) for _ in range(10)]
    target = 0.96
    per = {c: calibrate(lps, 5, target, clusters=c) for c in (3, 4, 6)}
    assert all(per[c]["met"] and per[c]["clusters"] == c for c in per)
    both = calibrate(lps, 5, target, clusters=[6, 3, 4, 3])
    best = min(per.values(), key=lambda r: (r["layers_per_candidate"], r["clusters"]))
    assert both["met"] and both["clusters"] == best["clusters"] and both["threshold"] == best["threshold"]
    assert both["layers_per_candidate"] == best["layers_per_candidate"] <= min(r["layers_per_candidate"] for r in per.values())
    assert sorted(set(row["clusters"] for row in both["table"])) == [3, 4, 6]  # every count was replayed
    # the choice replays to what it claims
    assert replay(lps, 5, both["threshold"], both["clusters"])["layers_per_candidate"] == both["layers_per_candidate"]
    for bad in ([], [1], [3, "4"], 1, True):
        with pytest.raises(PrismInputError, match="clusters"):
            calibrate(lps, 5, target, clusters=bad)
    # nothing meets an impossible target: never prune, with the first count
    never = calibrate(lps, 5, 1.0, grid=[0.05], clusters=[4, 3])
    assert not never["met"] and never["threshold"] == math.inf and never["clusters"] == 3


def test_replay_matches_manual_simulation_and_agreement():
    rng = np.random.default_rng(5)
    lp = _layer_probs(rng, 15, 4, 0.3)
    r = simulate(lp, 4, 0.2)
    row = replay([lp], 4, 0.2)
    full = [int(i) for i in np.argsort(-lp[-1])[:4]]
    assert row["agreement"] == top_k_agreement(r.selected, full)
    assert row["layers_per_candidate"] == float(np.mean(r.layers_run()))
    assert top_k_agreement([1, 2, 3], [3, 4, 1]) == 2 / 3


def test_router_splits_log_odds_where_probabilities_bunch():
    """With a prior most candidates sit near p = 0: probabilities put the 2nd best with the tail (nothing dropped),
    log-odds keep the tail apart and drop it."""
    p = np.array([0.95, 0.03, 1e-4, 1e-4, 1e-4, 1e-4])
    r = Router(6, 2, 4, threshold=0.0, clusters=2, split="prob")
    keep = r.after_layer(0, p)
    assert r.selected == [0] and keep.tolist() == [False, True, True, True, True, True]
    r = Router(6, 2, 4, threshold=0.0, clusters=2, split="logit")
    keep = r.after_layer(0, p)
    assert r.selected == [0, 1] and not keep.any()  # the boundary cluster {0, 1} exactly fills the two places
    assert (r.exit_layer[2:] == 0).all() and r.events[0]["dropped"] == 4
    with pytest.raises(PrismInputError, match="split"):
        Router(6, 2, 4, split="logits")


@pytest.mark.parametrize("seed", range(6))
def test_router_margin_never_drops_the_first_need_plus_margin(seed):
    """A candidate ranked within need + margin by the current score is selected or kept, never dropped; margin 0 is
    the plain router; a larger margin never computes fewer layers."""
    rng = np.random.default_rng(seed)
    lp = _layer_probs(rng, 20, 6, 0.6)
    for margin in (0, 3, 8):
        r = Router(20, 5, 6, threshold=0.0, clusters=4, margin=margin)
        for l in range(6):
            if r.done:
                break
            act = r.active.copy()
            p = lp[l, act]
            need = r.need
            protected = set(act[np.argsort(-p, kind="stable")[:need + margin]].tolist())
            keep = r.after_layer(l, p)
            dropped = set(act[~keep].tolist()) - set(r.selected)
            assert not (dropped & protected) or l == 5, (margin, l)
    plain = simulate(lp, 5, 0.0, 4)
    assert simulate(lp, 5, 0.0, 4, margin=0).selected == plain.selected
    layers = [simulate(lp, 5, 0.0, 4, margin=m).layers_run().sum() for m in (0, 3, 8, 19)]
    assert layers == sorted(layers)
    with pytest.raises(PrismInputError, match="margin"):
        Router(20, 5, 6, margin=-1)


def _logit_layer_probs(rng, n: int, layers: int, noise: float) -> np.ndarray:
    """Scores with a retrieval-like prior on the log-odds scale, early layers noisier on that scale."""
    final = np.sort(rng.normal(-3, 3, n))[::-1] - 2 * np.log1p(np.arange(n))
    return np.array([1 / (1 + np.exp(-(final + rng.normal(0, noise * (layers - 1 - l) / layers, n))))
                     for l in range(layers)])


def test_calibration_chooses_a_margin_that_meets_the_target():
    """Calibration over keep margins: the pick meets the target, replays to what it claims and computes fewer layers
    than the best margin-0 setting where the early scores misplace final top-K members (here: 2.56 vs 4.17)."""
    rng = np.random.default_rng(0)
    lps = [_logit_layer_probs(rng, 20, 6, 2.0) for _ in range(12)]
    target = 0.97
    plain = calibrate(lps, 5, target, clusters=(3, 4), margins=(0,), split="logit")
    cal = calibrate(lps, 5, target, clusters=(3, 4), margins=(0, 4, 8), split="logit")
    assert plain["met"] and cal["met"] and cal["agreement"] >= target and cal["split"] == "logit"
    assert cal["margin"] > 0 and cal["layers_per_candidate"] < plain["layers_per_candidate"] - 1
    again = replay(lps, 5, cal["threshold"], cal["clusters"], margin=cal["margin"], split="logit")
    assert again["layers_per_candidate"] == cal["layers_per_candidate"] and again["agreement"] == cal["agreement"]
    assert {row["margin"] for row in cal["table"]} == {0, 4, 8}
    for bad in ((), (-1,), (1.5,)):
        with pytest.raises(PrismInputError, match="margins"):
            calibrate(lps, 5, target, margins=bad)
