"""Statistical tests: speculative decoding with shared.specdec reproduces the target's distribution.

A toy target and a toy draft are first-order Markov models over 6 tokens (fixed logit tables; the target
at temperature 0.8, top-5; the draft at temperature 1, top-4, so both have zero-probability tokens). The
node side drafts blocks of K tokens and keeps drafting the next block on the assumption that the first
is accepted (deferred, as on the link); the gateway side verifies with verify_block or
verify_block_bonus. From a fixed start token, each episode commits 3 tokens; the joint distributions of
the first 1, 2 and 3 committed tokens are compared by Pearson chi-square with

- the exact target distribution (products of the target's integer counts), and
- the same number of target-only samples (two-sample chi-square test of homogeneity).

Significance level: a correct implementation must give p >= ALPHA = 0.001 in every test (3 variants x
3 orders x 2 comparisons = 18 tests, family-wise level <= 1.8 %); the seeds are fixed, so the outcome
is deterministic. The two seed bugs, implemented here as broken variants, must give p < 1e-9.
The chi-square survival function is computed in closed form for integer degrees of freedom (no scipy)
and checked against table values and the Wilson-Hilferty approximation.
"""

from __future__ import annotations

import math

import testkit
from shared import specdec as sd

V = 6
START = 0
L = 3
ALPHA = 1e-3
BROKEN_P = 1e-9
N_EPISODES = 20000


# ---- chi-square distribution ----

def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square(df), integer df >= 1: the regularised upper incomplete gamma
    Q(df/2, x/2) in closed form (a Poisson sum, plus erfc for odd df), terms summed in log space."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if x <= 0.0:
        return 1.0
    h = x / 2.0
    if df % 2 == 0:
        total, a, m = 0.0, 0.0, df // 2
    else:
        total, a, m = math.erfc(math.sqrt(h)), 0.5, (df - 1) // 2
    lh = math.log(h)
    for j in range(m):
        total += math.exp(-h + (j + a) * lh - math.lgamma(j + a + 1.0))
    return min(1.0, total)


def chi2_crit_wilson_hilferty(alpha: float, df: int) -> float:
    """Approximate upper-alpha critical value: df * (1 - 2/(9 df) + z sqrt(2/(9 df)))**3."""
    z = _normal_upper_quantile(alpha)
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def _normal_upper_quantile(alpha: float) -> float:
    lo, hi = 0.0, 40.0
    for _ in range(200):  # bisection on 0.5 * erfc(z / sqrt 2) = alpha
        mid = (lo + hi) / 2.0
        if 0.5 * math.erfc(mid / math.sqrt(2.0)) > alpha:
            lo = mid
        else:
            hi = mid
    return lo


def gof(observed: dict, probs: dict, n: int) -> tuple[float, int, float]:
    """Goodness of fit against exact cell probabilities; cells expected below 5 are pooled into one.
    A count in a cell of probability 0 gives p = 0. -> (statistic, df, p-value)."""
    stat, cells, pool_o, pool_e = 0.0, 0, 0, 0.0
    for cell, o in observed.items():
        if probs.get(cell, 0.0) == 0.0 and o:
            return math.inf, 0, 0.0
    for cell, pr in probs.items():
        if pr == 0.0:
            continue
        e, o = n * pr, observed.get(cell, 0)
        if e < 5.0:
            pool_o += o
            pool_e += e
            continue
        stat += (o - e) ** 2 / e
        cells += 1
    if pool_e > 0.0:
        stat += (pool_o - pool_e) ** 2 / pool_e
        cells += 1
    return stat, cells - 1, chi2_sf(stat, cells - 1)


def homogeneity(a: dict, b: dict) -> tuple[float, int, float]:
    """Two-sample chi-square test that a and b come from one distribution; sparse cells pooled."""
    na, nb = sum(a.values()), sum(b.values())
    stat, cells, pa, pb = 0.0, 0, 0, 0
    for cell in sorted(set(a) | set(b)):
        oa, ob = a.get(cell, 0), b.get(cell, 0)
        if (oa + ob) * min(na, nb) / (na + nb) < 5.0:
            pa += oa
            pb += ob
            continue
        stat += _two_cell(oa, ob, na, nb)
        cells += 1
    if pa + pb:
        stat += _two_cell(pa, pb, na, nb)
        cells += 1
    return stat, cells - 1, chi2_sf(stat, cells - 1)


def _two_cell(oa: int, ob: int, na: int, nb: int) -> float:
    ea = na * (oa + ob) / (na + nb)
    eb = nb * (oa + ob) / (na + nb)
    return (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb


def test_chi2_sf_against_tables_and_wilson_hilferty():
    for x, df, want in ((3.841459, 1, 0.05), (6.634897, 1, 0.01), (5.991465, 2, 0.05), (13.81551, 2, 0.001),
                        (7.814728, 3, 0.05), (18.30704, 10, 0.05), (16.26624, 3, 0.001),
                        (124.3421, 100, 0.05), (149.4493, 100, 0.001)):
        assert abs(chi2_sf(x, df) - want) < want * 1e-4, (x, df, chi2_sf(x, df), want)
    for df in (10, 30, 60, 120, 215):
        for alpha in (0.05, 1e-3):
            got = chi2_sf(chi2_crit_wilson_hilferty(alpha, df), df)
            assert abs(got - alpha) < 0.1 * alpha, (df, alpha, got)
    assert chi2_sf(0.0, 5) == 1.0 and chi2_sf(5000.0, 40) < 1e-300


# ---- the toy models ----

def _logit_table(seed: int, spread: float) -> list[list[float]]:
    rng = testkit.Rng(seed)
    return [[(rng.below(2001) - 1000) / 1000.0 * spread for _ in range(V)] for _ in range(V)]


T_LOGITS = _logit_table(2024, 1.6)
D_LOGITS = [[t + n for t, n in zip(tr, nr)] for tr, nr in zip(T_LOGITS, _logit_table(7, 1.2))]


def _rows(logits, temperature, top_k, total):
    rows = []
    for lg in logits:
        ids, probs = sd.sampling_probs(lg, temperature, top_k)
        rows.append(sd.Dist(V, total).set_probs(probs, ids))
    return rows


P = _rows(T_LOGITS, 0.8, 5, sd.P_TOTAL)  # the target's final distributions, by previous token
Q = _rows(D_LOGITS, 1.0, 4, sd.Q_TOTAL)  # the draft's


def alpha_of(prev: int) -> float:
    """Theoretical acceptance probability of a draft token after `prev`: sum over x of min(p(x), q(x))."""
    p, q = P[prev], Q[prev]
    s = p.total // q.total
    return sum(min(p.count_of(x), s * q.count_of(x)) for x in range(V)) / p.total


def exact_joint(length: int) -> dict:
    out: dict = {(): 1.0}
    for _ in range(length):
        nxt = {}
        for seq, pr in out.items():
            prev = seq[-1] if seq else START
            for x in range(V):
                nxt[seq + (x,)] = pr * P[prev].count_of(x) / sd.P_TOTAL
        out = nxt
    return out


# ---- verifiers: (contexts, block, rng) -> (accepted, correction); contexts[j] is the token before position j

def v_deferred(ctx, block, rng):
    k = len(block)
    return sd.verify_block([P[c] for c in ctx[:k]], [Q[c] for c in ctx[:k]], block, rng)


def v_bonus(ctx, block, rng):
    k = len(block)
    return sd.verify_block_bonus([P[c] for c in ctx[:k + 1]], [Q[c] for c in ctx[:k]], block, rng)


def v_seed_counts_correction(ctx, block, rng):
    """Seed bug 1 (VerifyDeferredBatch): the resampled token is counted as accepted."""
    for i, x in enumerate(block):
        if not sd.accept(P[ctx[i]], Q[ctx[i]], x, rng):
            return i + 1, sd.residual_sample(P[ctx[i]], Q[ctx[i]], rng)
    return len(block), -1


def v_seed_logit_residual(ctx, block, rng):
    """Seed bug 2 (ResampleFromResidual): the residual max(0, l_p - l_q) is taken over logits."""
    for i, x in enumerate(block):
        if not sd.accept(P[ctx[i]], Q[ctx[i]], x, rng):
            r = [max(0.0, a - b) for a, b in zip(T_LOGITS[ctx[i]], D_LOGITS[ctx[i]])]
            z = sum(r)
            if z <= 0.0:
                return i, 0  # the seed's fallback
            u = rng.below(1 << 24) / float(1 << 24) * z
            acc = 0.0
            for t, w in enumerate(r):
                acc += w
                if acc > u:
                    return i, t
            return i, V - 1
    return len(block), -1


class Run:
    def __init__(self):
        self.joint: dict = {}
        self.accepted = 0  # draft tokens reported accepted
        self.tested = 0  # draft tokens the gateway reports as tested (accepted, plus one on a rejection)
        self.alpha_sum = 0.0
        self.alpha_var = 0.0
        self.verifies = 0


def speculate(verify, k: int, episodes: int, seed: int, deferred: bool = True) -> Run:
    """Node and gateway over `episodes` independent episodes from START, each committing L tokens."""
    node_rng, gw_rng = sd.Rng(seed), sd.Rng(seed * 7919 + 13)
    run = Run()

    def draft(last):
        block = []
        for _ in range(k):
            last = Q[last].sample(node_rng)
            block.append(last)
        return block

    for _ in range(episodes):
        out: list[int] = []
        last = START
        pending = None
        while len(out) < L:
            block = pending if pending is not None else draft(last)
            pending = draft(block[-1]) if deferred else None  # drafted on the assumption block is accepted
            ctx = [last] + block
            acc, corr = verify(ctx, block, gw_rng)
            run.verifies += 1
            tested = k if acc >= k else acc + 1  # what the gateway's counters see
            run.accepted += acc
            run.tested += tested
            for j in range(tested):
                a = alpha_of(ctx[j])
                run.alpha_sum += a
                run.alpha_var += a * (1.0 - a)
            out.extend(block[:acc])
            if corr >= 0:
                out.append(corr)
                pending = None  # the block drafted on top of a rejected one is discarded
            last = out[-1]
        seq = tuple(out[:L])
        run.joint[seq] = run.joint.get(seq, 0) + 1
    return run


def target_only(episodes: int, seed: int) -> dict:
    rng = sd.Rng(seed)
    joint: dict = {}
    for _ in range(episodes):
        last, seq = START, []
        for _ in range(L):
            last = P[last].sample(rng)
            seq.append(last)
        joint[tuple(seq)] = joint.get(tuple(seq), 0) + 1
    return joint


def marginal(joint: dict, length: int) -> dict:
    out: dict = {}
    for seq, c in joint.items():
        out[seq[:length]] = out.get(seq[:length], 0) + c
    return out


_CACHE: dict = {}


def cached(name, fn):
    if name not in _CACHE:
        _CACHE[name] = fn()
    return _CACHE[name]


def pvalues(run: Run) -> list[tuple[str, float, int, float]]:
    ref = cached("target", lambda: target_only(N_EPISODES, 99))
    n = sum(run.joint.values())
    out = []
    for length in (1, 2, 3):
        stat, df, p = gof(marginal(run.joint, length), exact_joint(length), n)
        out.append(("gof%d" % length, stat, df, p))
        stat, df, p = homogeneity(marginal(run.joint, length), marginal(ref, length))
        out.append(("vs-target%d" % length, stat, df, p))
    return out


def acceptance_z(run: Run) -> float:
    return (run.accepted - run.alpha_sum) / math.sqrt(run.alpha_var)


# ---- the tests ----

def test_toy_models_have_zero_cells_and_imperfect_draft():
    for prev in range(V):
        assert sum(1 for x in range(V) if P[prev].count_of(x) == 0) == 1
        assert sum(1 for x in range(V) if Q[prev].count_of(x) == 0) == 2
    alphas = [alpha_of(prev) for prev in range(V)]
    assert 0.35 < min(alphas) and max(alphas) < 0.95, alphas  # many rejections, many acceptances


def test_target_only_sampler_fits_exact_distribution():
    ref = cached("target", lambda: target_only(N_EPISODES, 99))
    for length in (1, 2, 3):
        stat, df, p = gof(marginal(ref, length), exact_joint(length), N_EPISODES)
        assert p >= ALPHA, (length, stat, df, p)


def test_deferred_speculation_reproduces_target():
    run = cached("deferred", lambda: speculate(v_deferred, 2, N_EPISODES, 1))
    for name, stat, df, p in pvalues(run):
        assert p >= ALPHA, (name, stat, df, p)
    assert df > 80  # the 3-token joint really has that many cells
    assert run.verifies > 1.5 * N_EPISODES  # blocks crossed: x3 mostly came from a second block


def test_deferred_speculation_board_block_size_reproduces_target():
    run = cached("deferred4", lambda: speculate(v_deferred, 4, N_EPISODES, 5))  # rp2040_pico drafts K = 4
    for name, stat, df, p in pvalues(run):
        assert p >= ALPHA, (name, stat, df, p)


def test_standard_bonus_speculation_reproduces_target():
    run = cached("bonus", lambda: speculate(v_bonus, 2, N_EPISODES, 2, deferred=False))
    for name, stat, df, p in pvalues(run):
        assert p >= ALPHA, (name, stat, df, p)


def test_acceptance_rate_matches_theory():
    # accepted draft tokens = sum over tested tokens of Bernoulli(alpha(context)): a martingale; the
    # bound is 4 standard deviations (two-sided normal level 6e-5).
    for name, fn in (("deferred", lambda: speculate(v_deferred, 2, N_EPISODES, 1)),
                     ("deferred4", lambda: speculate(v_deferred, 4, N_EPISODES, 5)),
                     ("bonus", lambda: speculate(v_bonus, 2, N_EPISODES, 2, deferred=False))):
        run = cached(name, fn)
        z = acceptance_z(run)
        rate, theory = run.accepted / run.tested, run.alpha_sum / run.tested
        assert abs(z) < 4.0, (name, z, rate, theory)
        assert abs(rate - theory) < 0.01, (name, rate, theory)


def test_seed_bug_counting_the_correction_fails():
    run = speculate(v_seed_counts_correction, 2, N_EPISODES // 2, 3)
    worst = min(pvalues(run), key=lambda r: r[3])
    assert worst[3] < BROKEN_P, worst
    assert acceptance_z(run) > 10.0, acceptance_z(run)  # the acceptance rate is overstated as well


def test_seed_bug_logit_residual_fails():
    run = speculate(v_seed_logit_residual, 2, N_EPISODES // 2, 4)
    worst = min(pvalues(run), key=lambda r: r[3])
    assert worst[3] < BROKEN_P, worst
    assert abs(acceptance_z(run)) < 4.0  # the acceptance test itself is right: only the residual is wrong
    # It fails even leaving aside the tokens the target can never produce (which it also emits):
    # among 2-token sequences of nonzero target probability, the frequencies are still wrong.
    probs = exact_joint(2)
    possible = {seq: c for seq, c in marginal(run.joint, 2).items() if probs[seq] > 0.0}
    stat, df, p = gof(possible, probs, sum(possible.values()))
    assert sum(possible.values()) < sum(run.joint.values())
    assert p < BROKEN_P, (stat, df, p)
