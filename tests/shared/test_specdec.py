# test_specdec.py: the exact speculative-sampling rule on hand-computed integer cases, the integer PRNG and
# sampler, largest-remainder quantisation, greedy mode, allocation-free node paths, bad input.
import math

import testkit
from shared import specdec as sd
from shared.specdec import Dist, SpecDecError


class ScriptRng:
    """Stands in for sd.Rng: below(n) returns the scripted values in order (each must be < n)."""

    def __init__(self, values):
        self.values = list(values)
        self.bounds = []

    def below(self, n):
        v = self.values.pop(0)
        assert 0 <= v < n, (v, n)
        self.bounds.append(n)
        return v


def dist(pairs, total, cap=16):
    ids = [t for t, _ in pairs]
    counts = [c for _, c in pairs]
    return Dist(cap, total).set_counts(ids, counts, len(pairs))


def enumerate_outcomes(fn, n):
    """{result: how many u in 0..n-1 give it} for fn(rng) drawing exactly one value below n."""
    out = {}
    for u in range(n):
        rng = ScriptRng([u])
        r = fn(rng)
        assert rng.bounds == [n], (rng.bounds, n)
        out[r] = out.get(r, 0) + 1
    return out


# ---- the integer PRNG ----

def test_rng_is_xorshift32_in_small_ints():
    for seed in (1, 2, 0x9E3779B9, 0xFFFFFFFF, 0, 1 << 31):
        a = sd.Rng(seed)
        b = testkit.Rng(seed)  # textbook 32-bit xorshift (13, 17, 5)
        for i in range(3000):
            v = a.next30()
            w = b.next()
            assert a.getstate() == w, (seed, i, a.getstate(), w)
            assert v == w >> 2 and 0 <= v < (1 << 30)
    r = sd.Rng(77)
    r.next30()
    st = r.getstate()
    first = [r.next30() for _ in range(5)]
    r.setstate(st)
    assert [r.next30() for _ in range(5)] == first
    testkit.raises(SpecDecError, sd.Rng, 1.5)
    testkit.raises(SpecDecError, sd.Rng, "1")


class _Scripted30(sd.Rng):
    def __init__(self, values):
        sd.Rng.__init__(self, 1)
        self.values = list(values)

    def next30(self):
        return self.values.pop(0)


def test_rng_below_rejects_the_biased_tail():
    n = 3 << 28  # 2**30 mod n = 2**28: values n..2**30-1 would make 0..2**28-1 twice as likely
    r = _Scripted30([n, (1 << 30) - 1, n - 1])
    assert r.below(n) == n - 1 and r.values == []  # the two tail values were redrawn
    r = _Scripted30([(1 << 30) - 1])
    assert r.below(1 << 29) == (1 << 29) - 1  # a power of two never redraws
    r = _Scripted30([(1 << 30) - 1, 5])  # n = 2**30 - 1: 2**30 - 1 is the one value redrawn
    assert r.below((1 << 30) - 1) == 5 and r.values == []


def test_rng_below_range_and_spread():
    r = sd.Rng(2024)
    for n in (1, 2, 3, 7, 1000, (1 << 24) + 1, 3 << 28, (1 << 30) - 1):
        for _ in range(200):
            v = r.below(n)
            assert 0 <= v < n, (n, v)
    counts = [0] * 6
    for _ in range(12000):
        counts[r.below(6)] += 1
    for c in counts:  # expected 2000, sd 41: 5 sd
        assert abs(c - 2000) < 205, counts
    for bad in (0, -1, 1 << 30, 2.0, None):
        e = testkit.raises(SpecDecError, r.below, bad)
        assert "below" in str(e)


# ---- Dist: validation and quantisation ----

def test_set_counts_validates():
    d = Dist(4, 10)
    d.set_counts([1, 4, 9], [5, 0, 5], 3)
    assert d.n == 3 and d.count_of(4) == 0 and d.count_of(9) == 5 and d.count_of(2) == 0
    cases = (
        (([1, 2], [5, 4], 2), "sum"),  # sum 9
        (([2, 1], [5, 5], 2), "ascending"),
        (([1, 1], [5, 5], 2), "ascending"),
        (([1, 2], [-1, 11], 2), "count"),
        (([-3, 2], [5, 5], 2), "token id"),
        (([1, 2, 3, 4, 5], [2, 2, 2, 2, 2], 5), "n must"),
        (([1, 2], [5, 5], 0), "n must"),
        (([1], [10], 2), "token ids"),
        (([1, 2], [10], 2), "counts"),
        (([1, 2], [5.0, 5], 2), "count"),
    )
    for args, word in cases:
        e = testkit.raises(SpecDecError, d.set_counts, *args)
        assert word in str(e), (args, str(e))
        assert d.n == 0  # a failed fill leaves the Dist empty, never half-valid
        testkit.raises(SpecDecError, d.sample, sd.Rng(1))
    dd = Dist(3, 6, dense=True)
    dd.set_counts(None, [1, 2, 3], 3)
    assert dd.count_of(2) == 3 and dd.count_of(3) == 0 and dd.count_of(-1) == 0 and dd.token(1) == 1
    testkit.raises(SpecDecError, dd.set_counts, [0, 1, 2], [1, 2, 3], 3)
    testkit.raises(SpecDecError, dd.set_counts, None, [1, 5], 2)
    for bad in ((0, 10), (4, 0), (4, (1 << 29) + 1), (4, 1.5)):
        testkit.raises(SpecDecError, Dist, *bad)


def test_largest_remainder_hand_cases():
    d = Dist(8, 16)
    assert_counts(d.set_weights([9, 2, 5], [1, 1, 1], 3), [(2, 6), (5, 5), (9, 5)])  # 16/3: lowest id gets +1
    # 16/7 = 2 rem 2 each: rounding each would give 14; the 2 units left go to the two lowest ids
    assert_counts(d.set_weights([6, 5, 4, 3, 2, 1, 0], [1] * 7, 7),
                  [(0, 3), (1, 3), (2, 2), (3, 2), (4, 2), (5, 2), (6, 2)])
    d7 = Dist(8, 7)
    assert_counts(d7.set_weights([0, 1, 2], [10, 30, 60], 3), [(0, 1), (1, 2), (2, 4)])  # 0.7 2.1 4.2
    d2 = Dist(8, 2)
    assert_counts(d2.set_weights([3, 8, 1], [1, 2, 1], 3), [(1, 1), (8, 1)])  # 0.5 tie: id 1; id 3 -> 0, dropped
    assert_counts(Dist(4, sd.Q_TOTAL).set_weights([7], [3], 1), [(7, sd.Q_TOTAL)])
    dd = Dist(4, 16, dense=True).set_weights(None, [0, 1, 0, 2], 4)
    assert list(dd.counts) == [0, 5, 0, 11] and dd.n == 4  # 5.33, 10.67: the larger remainder (id 3) wins
    for args, word in ((([1, 1], [1, 1], 2), "twice"), (([1, 2], [0, 0], 2), "all weights"),
                       (([1, 2], [1, -1], 2), "weight"), (([1, 2], [1, 1.5], 2), "weight"),
                       (([1, 2], [1, 1 << 30], 2), "weight"), (([1] * 9, [1] * 9, 9), "n must"),
                       (([1, 2], [1 << 29, 1 << 29], 2), "more than 2**30")):
        e = testkit.raises(SpecDecError, d.set_weights, *args)
        assert word in str(e), (args, str(e))


def assert_counts(d, pairs):
    got = [(d.token(i), d.counts[i]) for i in range(d.n)]
    assert got == pairs, (got, pairs)
    assert sum(c for _, c in pairs) == d.total


def _ref_lr(ids, weights, total):
    """Largest remainder, written the obvious way with big integers."""
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    ids = [ids[i] for i in order]
    w = [weights[i] for i in order]
    wsum = sum(w)
    c = [x * total // wsum for x in w]
    rem = [x * total % wsum for x in w]
    for i in sorted(range(len(w)), key=lambda i: (-rem[i], i))[:total - sum(c)]:
        c[i] += 1
    return [(ids[i], c[i]) for i in range(len(w)) if c[i]]


def test_counts_sum_exactly_and_match_reference():
    rng = testkit.Rng(99)
    big = Dist(100, sd.Q_TOTAL)
    m = (1 << 30) - 1
    for total in (sd.Q_TOTAL, sd.P_TOTAL, sd.MAX_TOTAL, 3, 1000003):  # weight sums at the 2**30 limit
        for weights in ([1 << 29, (1 << 29) - 1], [m], [1, m - 1], [m // 3, m // 3, m // 3], [0, 5, 0]):
            big.total = total
            ids = list(range(len(weights)))
            assert_counts(big.set_weights(ids, weights, len(ids)), _ref_lr(ids, weights, total))
    for case in range(300):
        n = 1 + rng.below(40 if case % 3 else 100)
        total = (sd.Q_TOTAL, sd.P_TOTAL, 1000, 7, 1, sd.MAX_TOTAL)[case % 6]
        ids = []
        while len(ids) < n:
            t = rng.below(50000)
            if t not in ids:
                ids.append(t)
        mag = 1 << rng.below(24)  # weights sum below 2**30
        weights = [rng.below(mag + 1) if rng.below(4) else 0 for _ in range(n)]
        if sum(weights) == 0:
            weights[0] = 1
        big.total = total
        big.set_weights(ids, weights, n)
        want = _ref_lr(ids, weights, total)
        assert_counts(big, want)
        if n > 2:  # the sorting path (host-sized rows) gives the same counts as the scanning path
            saved = sd.LR_SCAN_MAX
            sd.LR_SCAN_MAX = 200 if n > saved else 1
            try:
                assert_counts(big.set_weights(ids, weights, n), want)
            finally:
                sd.LR_SCAN_MAX = saved


def test_set_probs_and_sampling_probs():
    d = Dist(8, sd.P_TOTAL).set_probs([0.5, 0.25, 0.25], [4, 1, 2])
    assert_counts(d, [(1, 1 << 22), (2, 1 << 22), (4, 1 << 23)])
    rng = testkit.Rng(3)
    for _ in range(50):
        n = 1 + rng.below(8)
        raw = [rng.below(1000) + 1 for _ in range(n)]
        z = sum(raw)
        d = Dist(8, sd.P_TOTAL).set_probs([x / z for x in raw], list(range(n)))
        assert sum(d.counts[i] for i in range(d.n)) == sd.P_TOTAL
        for i in range(d.n):  # within one count of p * total (floats hold ~1e-16 relative here)
            assert abs(d.counts[i] - raw[d.token(i)] * sd.P_TOTAL / z) < 1.01
    for bad in (-0.1, 1.5, float("nan")):
        testkit.raises(SpecDecError, Dist(4).set_probs, [0.5, bad])
    ids, probs = sd.sampling_probs([1.0, 3.0, 2.0, 3.0, -1.0], 1.0, 3)
    assert ids == [1, 2, 3]  # top-3 by logit, ascending ids
    assert abs(sum(probs) - 1.0) < 1e-9 and abs(probs[0] - probs[2]) < 1e-12
    assert abs(probs[1] / probs[0] - math.exp(-1.0)) < 1e-9
    ids, probs = sd.sampling_probs([0.0, 1.0, 1.0, 1.0], 0.5, 2)
    assert ids == [1, 2]  # a tie at the cut keeps the lowest ids
    ids, probs = sd.sampling_probs([0.0, 1.0], 0.5)
    assert ids == [0, 1] and abs(probs[1] / probs[0] - math.exp(2.0)) < 1e-9  # temperature 0.5 doubles gaps
    testkit.raises(SpecDecError, sd.sampling_probs, [1.0, 2.0], 0.0)
    testkit.raises(SpecDecError, sd.sampling_probs, [1.0, 2.0], 1.0, -1)
    testkit.raises(SpecDecError, sd.sampling_probs, [], 1.0)


# ---- sampling and the acceptance rule, enumerated exactly ----

def test_sample_is_exact_cumulative_search():
    d = dist([(3, 2), (8, 5), (20, 3)], 10)
    assert enumerate_outcomes(d.sample, 10) == {3: 2, 8: 5, 20: 3}
    dd = Dist(4, 8, dense=True).set_counts(None, [0, 3, 0, 5], 4)
    assert enumerate_outcomes(dd.sample, 8) == {1: 3, 3: 5}
    assert dd.argmax() == 3 and d.argmax() == 8


def test_accept_probability_is_min_1_p_over_q():
    # p over total 40, q over total 10: s = 4, B = 4 * q-count
    p = dist([(0, 10), (1, 4), (2, 0), (3, 26)], 40)
    q = dist([(0, 2), (1, 3), (2, 4), (3, 1)], 10)
    # 0 < p(x) < q(x): accepted for exactly a of the B values of u
    out = enumerate_outcomes(lambda rng: sd.accept(p, q, 1, rng), 12)
    assert out == {True: 4, False: 8}, out
    for x in (0, 3):  # p(x) >= q(x): accepted, no random number drawn
        rng = ScriptRng([])
        assert sd.accept(p, q, x, rng) and rng.bounds == []
    rng = ScriptRng([])  # p(x) == 0: rejected, no random number drawn
    assert not sd.accept(p, q, 2, rng) and rng.bounds == []
    e = testkit.raises(SpecDecError, sd.accept, p, q, 5, sd.Rng(1))
    assert "q = 0" in str(e)
    testkit.raises(SpecDecError, sd.accept, dist([(0, 5), (1, 5)], 10), dist([(0, 2), (1, 2)], 4), 0, sd.Rng(1))


def test_p_equal_q_always_accepts():
    rng = testkit.Rng(11)
    verify_rng = sd.Rng(5)
    for _ in range(40):
        n = 2 + rng.below(6)
        ids = list(range(0, 3 * n, 3))
        w = [1 + rng.below(500) for _ in range(n)]
        q = Dist(8, sd.Q_TOTAL).set_weights(ids, w, n)
        p = Dist(8, sd.P_TOTAL).set_counts(ids, [q.counts[i] * 256 for i in range(q.n)], q.n)
        k = 1 + rng.below(4)
        drafts = [q.sample(verify_rng) for _ in range(k)]
        state = verify_rng.getstate()
        assert sd.verify_block([p] * k, [q] * k, drafts, verify_rng) == (k, -1)
        assert verify_rng.getstate() == state  # p(x) == q(x): decided without a random number


def test_disjoint_supports_always_reject_and_correct_from_p():
    p = dist([(0, 30), (1, 50), (2, 20)], 100)
    q = dist([(3, 6), (4, 4)], 10)
    for x in (3, 4):
        out = enumerate_outcomes(lambda rng: sd.verify_block([p, p], [q, q], [x, 3], rng), 100)
        assert out == {(0, 0): 30, (0, 1): 50, (0, 2): 20}, out  # p(x) = 0: no draw; correction ~ p exactly


def _seed_logit_residual(lp, lq):
    """The seed's ResampleFromResidual distribution: max(0, logit_p - logit_q), normalised."""
    r = [max(0.0, a - b) for a, b in zip(lp, lq)]
    z = sum(r)
    return [x / z for x in r]


def test_residual_is_over_probabilities_not_logits():
    p = dist([(0, 5), (1, 3), (2, 2)], 10)
    q = dist([(0, 2), (1, 2), (2, 6)], 10)
    # max(0, p - q) = (0.3, 0.1, 0): the correction is 0 with 3/4, 1 with 1/4, never 2
    assert enumerate_outcomes(lambda rng: sd.residual_sample(p, q, rng), 4) == {0: 3, 1: 1}
    # x = 2 is rejected for the 4 values u = 2..5 of 0..5 (p/q = 1/3); the rejected draws then correct as above
    out = enumerate_outcomes(lambda rng: sd.accept(p, q, 2, rng), 6)
    assert out == {True: 2, False: 4}
    exact = [0.75, 0.25, 0.0]
    # The seed subtracts logits. With log-probabilities as logits it gives about (0.69, 0.31, 0):
    lp = [math.log(0.5), math.log(0.3), math.log(0.2)]
    lq = [math.log(0.2), math.log(0.2), math.log(0.6)]
    seed = _seed_logit_residual(lp, lq)
    assert max(abs(a - b) for a, b in zip(seed, exact)) > 0.05, seed
    # and logits are only defined up to a constant per row: shifting the draft's changes the seed's answer
    seed2 = _seed_logit_residual(lp, [v - 1.0 for v in lq])
    assert max(abs(a - b) for a, b in zip(seed2, seed)) > 0.1, (seed, seed2)
    assert max(abs(a - b) for a, b in zip(seed2, exact)) > 0.15, seed2


def test_verify_block_counts_the_correction_apart():
    p0 = dist([(0, 40), (1, 40)], 80)  # p over 80, q over 10: s = 8
    q0 = dist([(0, 5), (1, 5)], 10)  # equal: accept without drawing
    p1 = dist([(0, 20), (1, 40), (2, 20)], 80)
    q1 = dist([(0, 9), (2, 1)], 10)  # token 0: a = 20 < B = 72 -> draw below 72
    p2 = dist([(5, 80)], 80)
    q2 = dist([(5, 10)], 10)
    drafts = [1, 0, 5]
    # u = 19 < 20: accepted; full block -> (3, -1)
    rng = ScriptRng([19])
    assert sd.verify_block([p0, p1, p2], [q0, q1, q2], drafts, rng) == (3, -1) and rng.values == []
    # u = 20: rejected at index 1. Residual: 0 -> max(0, 20-72) = 0, 1 -> 40, 2 -> max(0, 20-8) = 12
    for u, corr in ((0, 1), (39, 1), (40, 2), (51, 2)):
        rng = ScriptRng([20, u])
        got = sd.verify_block([p0, p1, p2], [q0, q1, q2], drafts, rng)
        assert got == (1, corr), (u, got)  # 1 accepted draft token; the correction is not counted
        assert rng.bounds == [72, 52]
        rng = ScriptRng([20, u])
        assert sd.verify_block_bonus([p0, p1, p2, p0], [q0, q1, q2], drafts, rng) == (1, corr)
    # the standard variant samples a bonus token from the row after the block
    p3 = dist([(7, 30), (9, 50)], 80)
    for u, bonus in ((19, 7), (29, 7), (30, 9), (79, 9)):
        rng = ScriptRng([19, u])
        assert sd.verify_block_bonus([p0, p1, p2, p3], [q0, q1, q2], drafts, rng) == (3, bonus)
        assert rng.bounds == [72, 80]


def test_verify_rejects_bad_blocks():
    p = dist([(0, 40), (1, 40)], 80)
    q = dist([(0, 5), (1, 5)], 10)
    rng = sd.Rng(1)
    for fn, args, word in (
            (sd.verify_block, ([p], [q], [], rng), "empty"),
            (sd.verify_block, ([p], [q, q], [0, 1], rng), "needs 2 target rows"),
            (sd.verify_block, ([p, p], [q], [0, 1], rng), "draft rows"),
            (sd.verify_block_bonus, ([p, p], [q, q], [0, 1], rng), "needs 3 target rows"),
            (sd.verify_block, ([p, [1, 2]], [q, q], [0, 1], rng), "not a Dist"),
            (sd.verify_block, ([p], [q], [2], rng), "q = 0"),
            (sd.verify_block, ([dist([(0, 6), (1, 6)], 12)], [dist([(0, 5), (1, 3)], 8)], [0], rng), "multiple"),
            (sd.residual_sample, (p, q, rng), "no residual"),
            (sd.verify_greedy, ([], []), "empty"),
            (sd.verify_greedy, ([[1, 2]], [0], True), "needs 2 target rows"),
            (sd.argmax, ([],), "empty")):
        e = testkit.raises(SpecDecError, fn, *args)
        assert word in str(e), (word, str(e))
    testkit.raises(SpecDecError, Dist(4).argmax)


# ---- greedy mode ----

def test_greedy_rule_and_ties():
    rows = [[0.5, 2.0, 2.0, -1.0], [3.0, 1.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.1]]
    assert sd.argmax(rows[0]) == 1 and sd.argmax(rows[1]) == 0  # ties: lowest id
    assert sd.verify_greedy(rows, [1, 0, 3]) == (3, -1)
    assert sd.verify_greedy(rows, [2, 0, 3]) == (0, 1)  # a tied but higher id is a mismatch
    assert sd.verify_greedy(rows, [1, 2, 3]) == (1, 0)
    assert sd.verify_greedy(rows, [1, 0], bonus=True) == (2, 3)
    assert sd.verify_greedy(rows[:2], [1, 0]) == (2, -1)
    tied = dist([(2, 4), (5, 4), (9, 2)], 10)
    assert tied.argmax() == 2
    assert sd.verify_greedy([tied, tied], [2, 5]) == (1, 2)
    assert sd.verify_greedy([[1, 5, 5]], [2]) == (0, 1)  # integer scores work the same


def _markov_rows(seed, v, skew):
    rng = testkit.Rng(seed)
    return [[rng.below(1000) + (skew if j == (i * 3 + 1) % v else 0) for j in range(v)] for i in range(v)]


def test_greedy_speculation_reproduces_target_greedy():
    v = 9
    target = _markov_rows(1, v, 700)
    for j in range(v):
        target[4][j] = 500  # an all-tied row: lowest id wins
    draft = [row[:] for row in target]
    for i in (0, 2, 5, 7):  # the draft disagrees with the target in some states
        draft[i] = _markov_rows(10 + i, v, 0)[i]
    length = 300
    want = [3]
    while len(want) < length + 1:
        want.append(sd.argmax(target[want[-1]]))
    for k in (1, 2, 4):
        out = [3]
        pending = None
        rejected = 0
        while len(out) < length + 1:
            block = pending if pending is not None else _greedy_draft(draft, out[-1], k)
            pending = _greedy_draft(draft, block[-1], k)  # the node drafts on, assuming acceptance
            rows = [target[out[-1]]] + [target[t] for t in block[:-1]]
            acc, corr = sd.verify_greedy(rows, block)
            out.extend(block[:acc])
            if corr >= 0:
                out.append(corr)
                pending = None
                rejected += 1
        assert out[:length + 1] == want, k
        assert rejected > 10  # the draft really was wrong sometimes


def _greedy_draft(rows, last, k):
    block = []
    for _ in range(k):
        last = sd.argmax(rows[last])
        block.append(last)
    return block


# ---- the node's paths allocate nothing ----

def _hot_sample(st):
    d, rng, n = st[0], st[1], st[2]
    acc = 0
    for _ in range(n):
        acc += d.sample(rng)
        acc += rng.below(1000003)
        acc += d.count_of(acc & 63)
    return acc + d.argmax()


def _hot_quantise(st):
    d, ids, w = st[0], st[3], st[4]
    for _ in range(20):
        d.set_weights(ids, w, 32)
    return d.n


def _hot_verify(st):
    p, q, rng = st[5], st[0], st[1]
    acc = 0
    for _ in range(100):
        x = q.sample(rng)
        if not sd.accept(p, q, x, rng):
            acc += sd.residual_sample(p, q, rng)
    return acc + sd.argmax(st[4], 32)


def test_node_paths_allocate_nothing():
    rng = testkit.Rng(8)
    ids = [rng.below(49152) for _ in range(32)]
    for i in range(32):
        while ids[i] in ids[:i]:
            ids[i] += 1
    w = [rng.below(1 << 15) + 1 for _ in range(32)]  # e.g. Q15 softmax outputs of the top-32 logits
    q = Dist(32, sd.Q_TOTAL).set_weights(ids, w, 32)
    p = Dist(32, sd.P_TOTAL).set_weights(ids, [w[(i + 5) % 32] for i in range(32)], 32)
    from array import array
    st = [q, sd.Rng(4), 300, array("i", ids), array("i", w), p]
    testkit.run_locked(_hot_sample, st)
    before = testkit.heap_in_use()
    assert testkit.run_locked(_hot_sample, st) > 0
    assert testkit.run_locked(_hot_quantise, st) == 32
    assert sum(q.counts[i] for i in range(q.n)) == sd.Q_TOTAL
    testkit.run_locked(_hot_verify, st)
    after = testkit.heap_in_use()
    if testkit.IS_MP:
        assert after == before, (before, after)


def test_dist_memory_is_fixed():
    if not testkit.IS_MP:
        testkit.skip("heap bytes are measured on MicroPython")
    from array import array
    ids = array("i", range(31, -1, -1))
    w = array("i", range(1, 33))
    before = testkit.heap_in_use()
    d = Dist(32)
    mid = testkit.heap_in_use()
    for _ in range(50):
        d.set_weights(ids, w, 32)
    after = testkit.heap_in_use()
    assert mid - before < 3 * 32 * 4 + 400, mid - before  # three int32 arrays of 32 + object overhead
    assert after <= mid, (mid, after)  # refilling never grows the heap
