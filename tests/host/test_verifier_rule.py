"""host/verifier.py's integer rule against shared/specdec.py: the numpy quantisation gives exactly
Dist.set_probs's counts, accept / residual make exactly specdec's decisions with the same random draws,
and a block judged by Verifier equals specdec.verify_block / verify_greedy on the same target rows."""

from __future__ import annotations

import numpy as np
import pytest

from host import verifier as V
from shared import frame, frame_host, specdec
from tools.demo import spec_models as sm


def _rows(rng: np.random.RandomState):
    for n in (1, 2, 3, 7, 64, 65, 300, 5000):
        for kind in range(3):
            x = rng.standard_normal(n) * (1 + 3 * kind)
            p = np.exp(x - x.max())
            if kind == 2 and n > 3:
                p[rng.rand(n) < 0.3] = 0.0  # zeros in the row
            if p.sum() == 0:
                p[0] = 1.0
            yield p / p.sum()


def test_quantise_probs_equals_specdec_set_probs():
    rng = np.random.RandomState(5)
    checked = 0
    for probs in _rows(rng):
        for total in (specdec.P_TOTAL, specdec.Q_TOTAL, 1000, 1 << 29):
            want = specdec.Dist(probs.size, total, dense=True).set_probs([float(v) for v in probs])
            got = V.quantise_probs(probs, total)
            assert got.sum() == total
            assert list(got) == list(want.counts), (probs.size, total)
            checked += 1
    assert checked == 96
    # float32 rows (the target's) are converted exactly
    p32 = (np.arange(1, 41, dtype=np.float32) / np.float32(820.0))
    want = specdec.Dist(40, specdec.P_TOTAL, dense=True).set_probs([float(v) for v in p32])
    assert list(V.quantise_probs(p32)) == list(want.counts)
    with pytest.raises(V.VerifierError):
        V.quantise_probs(np.array([0.5, -0.1]))
    with pytest.raises(V.VerifierError):
        V.quantise_probs(np.zeros(4))
    with pytest.raises(V.VerifierError):
        V.quantise_probs(np.array([]))


@pytest.mark.parametrize("temperature,top_k", [(1.0, 0), (0.7, 5), (1.3, 1), (0.9, 40)])
def test_target_probs_is_sampling_probs(temperature, top_k):
    rng = np.random.RandomState(11)
    for n in (3, 50, 200):
        x = np.round(rng.standard_normal(n) * 3, 1)  # rounding makes ties at the top-k threshold
        ids, probs = V.target_probs(x, temperature, top_k)
        want_ids, want_p = specdec.sampling_probs([float(v) for v in x], temperature, top_k)
        assert list(ids) == want_ids
        assert np.allclose(probs, want_p, rtol=1e-12, atol=0)


def test_accept_and_residual_match_specdec_draw_for_draw():
    rng = np.random.RandomState(3)
    vocab = 40
    agree = rejections = 0
    for trial in range(300):
        logits = rng.standard_normal(vocab) * 2
        p = V.PRow(logits, 1.0, 0 if trial % 2 else 12)
        pd = specdec.Dist(vocab, specdec.P_TOTAL, dense=True).set_counts(None, [int(c) for c in p.dense], vocab)
        m = 1 + trial % 8
        q_ids = sorted(rng.choice(vocab, m, replace=False).tolist())
        w = rng.randint(1, 1000, m).tolist()
        q = specdec.Dist(m, specdec.Q_TOTAL).set_weights(q_ids, w, m)
        qi, qc = list(q.ids[:q.n]), list(q.counts[:q.n])
        x = qi[trial % len(qi)]
        r1, r2 = specdec.Rng(trial + 1), specdec.Rng(trial + 1)
        a1 = specdec.accept(pd, q, x, r1)
        a2 = V.accept_np(p, qi, qc, x, r2)
        assert a1 == a2 and r1.getstate() == r2.getstate()
        if not a1:
            rejections += 1
            c1 = specdec.residual_sample(pd, q, r1)
            c2 = V.residual_np(p, qi, qc, r2)
            assert c1 == c2 and r1.getstate() == r2.getstate()
        agree += 1
        assert p.sample(specdec.Rng(trial + 7)) == pd.sample(specdec.Rng(trial + 7))
    assert agree == 300 and rejections > 50
    with pytest.raises(V.VerifierError):
        V.accept_np(p, [1], [65536], 2, specdec.Rng(1))  # q(x) = 0


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_verifier_block_equals_specdec_verify_block(temperature):
    pair = sm.make_pair(4, vocab=48)
    t = pair.target
    prompt = [3, 1, 4, 1, 5]
    seen = set()
    for trial in range(12):
        rng = np.random.RandomState(trial)
        k = 1 + trial % 6
        toks, recs = [], []
        if trial % 2 == 0:  # the target's own greedy path as one-candidate records: often all accepted
            for tok in t.greedy(t.new_cache(2, 6, 16), prompt, k):
                toks.append(tok)
                recs.append(([tok], [], 0))
        for _ in range(k - len(toks)):
            m = 1 if temperature == 0 else 1 + rng.randint(4)
            ids = sorted(rng.choice(48, m, replace=False).tolist())
            q = specdec.Dist(m, specdec.Q_TOTAL).set_weights(ids, rng.randint(1, 99, m).tolist(), m)
            qi, qc = list(q.ids[:q.n]), list(q.counts[:q.n])
            pick = rng.randint(len(qi))
            toks.append(qi[pick])
            recs.append((qi, qc if len(qi) > 1 else [], pick))
        s = V.TargetMirror(t, 2, 6, 16, temperature=temperature, seed=trial + 1)
        s.on_prompt(V.pack_prompt(0, prompt))
        greedy = temperature == 0 and all(len(r[0]) == 1 for r in recs)
        s.on_draft(frame_host.pack_draft(9, len(prompt), recs, greedy=greedy))
        (st, body, ids), = V.Verifier(t).verify([s])
        f = frame_host.parse_body(frame.VERDICT, body)
        # the same rows computed on their own, judged by shared/specdec.py
        rows = t.forward(t.new_cache(2, 6, 16), prompt + toks)[len(prompt) - 1:]
        if temperature == 0:
            acc, corr = specdec.verify_greedy([list(map(float, r)) for r in rows], toks)
        else:
            p_rows = [specdec.Dist(48, specdec.P_TOTAL, dense=True).set_probs(
                [float(v) for v in _dense(*specdec.sampling_probs([float(v) for v in r], temperature, 0), 48)])
                for r in rows[:k]]
            q_rows = [specdec.Dist(16, specdec.Q_TOTAL).set_counts(r[0], r[1] or [65536], len(r[0])) for r in recs]
            acc, corr = specdec.verify_block(p_rows, q_rows, toks, specdec.Rng(trial + 1))
        assert f["accepted"] == acc and (f["token"] if f["flags"] & frame.VD_CORRECTION else -1) == corr
        assert ids == toks[:acc] + ([corr] if corr >= 0 else [])
        full = prompt + ids
        assert s.committed == len(full) and s.ids.tolist() == (full if len(full) <= 8 else full[:2] + full[-6:])
        seen.add(acc == k)
    assert seen == {True, False}


def _dense(ids, probs, n):
    out = [0.0] * n
    for i, p in zip(ids, probs):
        out[i] = p
    return out
