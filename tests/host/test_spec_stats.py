"""Sampling mode end to end reproduces the target's distribution: the real shared/drafter.py against the
real host/verifier.py (Stream, Verifier, KVCache staging and commits), on an 8-token vocabulary. The
models are first-order stand-ins with the same interfaces (tests/host/bigram_models.py MarkovTarget for the
target, TableModel for the draft: an unrelated table, temperature 1, top-4), so that 10^4 episodes of 3
committed tokens from one prompt fit the test budget. Pearson chi-square of the 2- and 3-token joints
against the exact target probabilities (from the target's own quantised rows) and against 10^4
target-only samples; a deliberately wrong correction rule (sampling p instead of norm(max(0, p - q)))
fails the same tests; the measured acceptance rate matches sum(min(p, q)). A shorter run over the real
tiny float Target and its INT4 draft through shared/llama.py checks the acceptance rate there.
Statistics helpers: tests/host/test_specdec_stats.py."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import itertools  # noqa: E402
import math  # noqa: E402
from array import array  # noqa: E402

import bigram_models as bm  # noqa: E402
import pytest  # noqa: E402
from test_specdec_stats import gof, homogeneity  # noqa: E402

from host import verifier as V  # noqa: E402
from shared import drafter, specdec  # noqa: E402
from tools.demo import spec_models as sm  # noqa: E402

VOCAB = 8
PROMPT = [1, 2]
L = 3
EPISODES = 10000
PARALLEL = 100
ALPHA = 1e-3  # every test of the correct rule must give p >= ALPHA (4 tests); seeds are fixed
K = 2


@pytest.fixture(scope="module")
def models():
    target = bm.MarkovTarget(bm.bigram_logits(21, VOCAB))
    table = bm.bigram_logits(21, VOCAB) + bm.bigram_logits(22, VOCAB, 1.2)  # related, imperfect draft
    return target, table


def exact_joint(target) -> dict:
    """P(a, b, c) from the target's P_TOTAL counts at every context (what target-only sampling uses)."""
    def row(ctx):
        lg = target.forward(target.new_cache(2, 8, 8), PROMPT + list(ctx))[-1]
        return V.PRow(lg, 1.0, 0).dense / specdec.P_TOTAL

    out = {}
    p0 = row(())
    for a in range(VOCAB):
        p1 = row((a,))
        for b in range(VOCAB):
            p2 = row((a, b))
            for c in range(VOCAB):
                out[(a, b, c)] = p0[a] * p1[b] * p2[c]
    return out


def marginal(joint: dict, n: int) -> dict:
    out: dict = {}
    for k, v in joint.items():
        out[k[:n]] = out.get(k[:n], 0) + v
    return out


class Meter:
    def __init__(self):
        self.tested = 0
        self.accepted = 0
        self.alpha = 0.0
        self.var = 0.0


def speculate(models, monkeypatch, wrong: bool = False, episodes: int = EPISODES):
    target, draft = models
    meter = Meter()
    real_accept = V.accept_np

    def accept(p, qi, qc, x, rng):
        a = sum(min(p.count_of(t) / specdec.P_TOTAL, c / specdec.Q_TOTAL) for t, c in zip(qi, qc))
        ok = real_accept(p, qi, qc, x, rng)
        meter.tested += 1
        meter.accepted += ok
        meter.alpha += a
        meter.var += a * (1 - a)
        return ok

    monkeypatch.setattr(V, "accept_np", accept)
    if wrong:
        monkeypatch.setattr(V, "residual_np", lambda p, qi, qc, rng: p.sample(rng))
    pairs = []
    for i in range(PARALLEL):
        d = drafter.Drafter(bm.TableModel(draft, 2, 8, 8), K, temperature=1.0, top_k=4, seed=1000 + i,
                            max_pending=2, max_len=L)
        s = V.TargetMirror(target, 2, 8, 8, temperature=1.0, top_k=0, seed=5000 + i)
        pairs.append((d, s))
    loop = sm.Loop(pairs, V.Verifier(target), lockstep=False)
    joint: dict = {}
    started = 0
    active = []
    for i in range(PARALLEL):
        loop.prompt(i, PROMPT)
        active.append(i)
        started += 1
    buf = array("i", bytes(4 * 8))
    while active:
        loop.round(active)
        nxt = []
        for i in active:
            d, s = pairs[i]
            if not d.stopped:
                nxt.append(i)
                continue
            seq = tuple(buf[:d.take(buf)])
            assert len(seq) == L
            joint[seq] = joint.get(seq, 0) + 1
            if started < episodes:
                d.reset()
                s.reset(0)
                loop.prompt(i, PROMPT)
                started += 1
                nxt.append(i)
        active = nxt
    return joint, meter


def target_only(target, n, seed) -> dict:
    rows = {}

    def row(ctx):
        if ctx not in rows:
            rows[ctx] = V.PRow(target.forward(target.new_cache(2, 8, 8), PROMPT + list(ctx))[-1], 1.0, 0)
        return rows[ctx]

    rng = specdec.Rng(seed)
    out: dict = {}
    for _ in range(n):
        ctx = ()
        for _ in range(L):
            ctx = ctx + (row(ctx).sample(rng),)
        out[ctx] = out.get(ctx, 0) + 1
    return out


def pvalues(joint, exact, ref):
    n = sum(joint.values())
    res = []
    for length in (2, 3):
        res.append(("gof%d" % length,) + gof(marginal(joint, length), marginal(exact, length), n))
        res.append(("vs-target%d" % length,) + homogeneity(marginal(joint, length), marginal(ref, length)))
    return res


@pytest.mark.slow
@pytest.mark.cpu
def test_sampling_reproduces_target_and_a_wrong_rule_fails(models, monkeypatch):
    target, _ = models
    exact = exact_joint(target)
    assert math.isclose(sum(exact.values()), 1.0, rel_tol=1e-9)
    assert sum(1 for v in marginal(exact, 2).values() if v * EPISODES >= 5) >= 30  # a rich 2-token joint
    ref = target_only(target, EPISODES, 77)
    joint, m = speculate(models, monkeypatch)
    assert sum(joint.values()) == EPISODES
    res = pvalues(joint, exact, ref)
    for name, stat, df, p in res:
        assert p >= ALPHA, (name, stat, df, p, res)
    # acceptance: the accepted count is a sum of Bernoulli(alpha(context)) trials
    rate, theory = m.accepted / m.tested, m.alpha / m.tested
    z = (m.accepted - m.alpha) / math.sqrt(m.var)
    assert abs(z) < 4 and abs(rate - theory) < 0.01, (rate, theory, z)
    assert 0.2 < theory < 0.9, theory  # an imperfect draft: both paths of the rule are exercised
    print("speculative: p-values %s; acceptance %.4f vs sum(min(p, q)) %.4f (z %.2f, %d tests)" % (
        ", ".join("%s %.3g" % (r[0], r[3]) for r in res), rate, theory, z, m.tested))
    monkeypatch.undo()
    wrong, _ = speculate(models, monkeypatch, wrong=True, episodes=1000)  # the bias shows long before 10^4
    bad = pvalues(wrong, exact, ref)
    print("wrong rule: p-values %s" % ", ".join("%s %.3g" % (r[0], r[3]) for r in bad))
    assert min(r[3] for r in bad) < 1e-6, bad
