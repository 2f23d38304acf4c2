"""Speculative decoding end to end: the real shared/drafter.py (driving shared/llama.py, or a float twin)
against host/verifier.py over host/llama_np.py. Greedy output equals target-only greedy token for token
across ring wraps for K = 1, 2, 4, 8, with a draft equal to the target (all accepted), the INT4 draft
of the same weights, and an unrelated draft (almost nothing accepted); both caches hold the same token
ids in the same logical slots after every round; several nodes are verified in one batched pass."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import bigram_models as bm  # noqa: E402
import pytest  # noqa: E402

from host.verifier import TargetMirror, Verifier, pack_prompt  # noqa: E402
from shared import drafter  # noqa: E402
from tools.demo import spec_models as sm  # noqa: E402

SINK, WINDOW = 2, 6
PROMPTS = [[1, 2, 3, 4, 5], [9, 8, 7], [40, 41, 42, 43, 44, 45, 46]]


@pytest.fixture(scope="module")
def pair():
    return sm.make_pair(1)


@pytest.fixture(scope="module")
def other():
    return sm.make_pair(2)


def reference(target, prompt, n):
    return target.greedy(target.new_cache(SINK, WINDOW, 32), prompt, n)


def run_greedy(pair, make_model, k, n_tok, prompts):
    nodes = []
    for i, p in enumerate(prompts):
        d = drafter.Drafter(make_model(), k, temperature=0, max_pending=2, max_len=n_tok)
        s = TargetMirror(pair.target, SINK, WINDOW, 32, temperature=0.0, name="n%d" % i)
        nodes.append((d, s))
    loop = sm.Loop(nodes, Verifier(pair.target))
    for i, p in enumerate(prompts):
        loop.prompt(i, p)
    outs = [[] for _ in prompts]
    import array

    buf = array.array("i", bytes(4 * 64))
    while loop.round():
        for i, (d, _) in enumerate(nodes):
            outs[i] += list(buf[:d.take(buf)])
    for d, _ in nodes:
        assert d.stopped and not d.pending
    return outs, nodes, loop


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_equals_target_greedy_with_every_draft(pair, other, k):
    n_tok = 24  # 3..7 prompt + 24 tokens through an 8-token cache (2 sinks + 6): the window wraps 4+ times
    refs = [reference(pair.target, p, n_tok) for p in PROMPTS]
    twin = lambda: sm.FloatModel(pair.target, SINK, WINDOW, 16)  # noqa: E731  draft == target
    outs, nodes, loop = run_greedy(pair, twin, k, n_tok, PROMPTS)
    assert outs == refs
    assert all(d.accepted == d.drafted for d, _ in nodes)  # everything accepted
    assert loop.verifier.passes == loop.rounds - 1  # one batched pass per round for all 3 nodes (the last: idle)
    int4 = lambda: sm.node_model(pair.mbf, SINK, WINDOW, 16)  # noqa: E731  the INT4 MBF of the same weights
    outs, nodes, _ = run_greedy(pair, int4, k, n_tok, PROMPTS[:1])
    assert outs == refs[:1]
    assert nodes[0][0].accepted >= 0.8 * nodes[0][0].drafted
    unrelated = lambda: sm.node_model(other.mbf, SINK, WINDOW, 16)  # noqa: E731
    n_un = 16 if k == 8 else 20
    outs, nodes, _ = run_greedy(pair, unrelated, k, n_un, PROMPTS[:1])
    assert outs == [refs[0][:n_un]]
    d, s = nodes[0]
    assert d.accepted <= 0.2 * d.drafted and d.corrections >= 0.8 * n_un * (1 - d.accepted / max(1, d.drafted)) - 1
    assert s.stats["dropped"] >= 1 or k == 1 or d.accepted


def test_prompt_between_episodes_and_long_prompt_prefill(pair):
    """Two episodes on one stream (the second prompt after the first annotation), one prompt longer than
    the gateway's staging room (prefilled in chunks); output still equals target-only greedy."""
    twin = sm.FloatModel(pair.target, SINK, WINDOW, 16)
    d = drafter.Drafter(twin, 4, temperature=0, max_pending=2, max_len=10)
    s = TargetMirror(pair.target, SINK, WINDOW, 12)
    loop = sm.Loop([(d, s)], Verifier(pair.target))
    first = list(range(1, 30))  # 29 ids > 12 staging slots
    loop.prompt(0, first)
    while loop.round():
        pass
    import array

    buf = array.array("i", bytes(4 * 64))
    got1 = list(buf[:d.take(buf)])
    second = [5, 6, 7]
    loop.prompt(0, second)
    while loop.round():
        pass
    got2 = list(buf[:d.take(buf)])
    cache = pair.target.new_cache(SINK, WINDOW, 32)
    assert got1 == pair.target.greedy(cache, first, 10)
    pair.target.feed(cache, [got1[-1]])
    assert got2 == pair.target.greedy(cache, second, 10)


def test_stream_checks_and_stale_blocks(pair):
    s = TargetMirror(pair.target, SINK, WINDOW, 16)
    v = Verifier(pair.target)
    from host.verifier import StreamDesync, VerifierError
    from shared import frame, frame_host

    with pytest.raises(StreamDesync):
        s.on_prompt(pack_prompt(3, [1, 2]))
    with pytest.raises(VerifierError, match="out of range"):
        s.on_prompt(pack_prompt(0, [1, 64]))
    with pytest.raises(VerifierError):
        s.on_prompt(b"\x00\x00")
    with pytest.raises(VerifierError):
        s.on_draft(b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with pytest.raises(VerifierError, match="out of range"):
        s.on_draft(frame_host.pack_draft(0, 0, [([99], [], 0)], greedy=True))
    s.on_prompt(pack_prompt(0, [1, 2, 3]))
    s.on_draft(frame_host.pack_draft(7, 5, [([4], [], 0)], greedy=True))  # base 5 != 3 committed: STALE
    (st, body, ids), = v.verify([s])
    f = frame_host.parse_body(frame.VERDICT, body)
    assert f["flags"] & frame.VD_STALE and ids == [] and s.stats["stale"] == 1
    assert s.cache.live == 3 and s.prefix == []  # the prompt was still prefilled in that pass
    assert v.verify([s]) == []  # nothing queued
    # rebuild: reset(None) adopts the next PROMPT's base
    s.reset(None)
    s.on_prompt(pack_prompt(1000, [1, 2, 3], unverified=True))
    assert s.committed == 1003 and s.stats["unverified"] == 3
    with pytest.raises(VerifierError):
        TargetMirror(pair.target, SINK, WINDOW, 16, temperature=-1)
    with pytest.raises(VerifierError):
        Verifier(object())


def test_sampling_mode_with_the_int4_draft_keeps_lockstep(pair):
    """Temperature 0.8 over the real tiny models (INT4 node through shared/llama.py, float target): two
    nodes, K = 4, 40 tokens each through an 8-token cache; lockstep after every round, no error, an
    acceptance rate between the unrelated and the identical draft's."""
    nodes = []
    for i in range(2):
        d = drafter.Drafter(sm.node_model(pair.mbf, SINK, WINDOW, 16), 4, temperature=0.8, top_k=8, seed=3 + i,
                            max_pending=2, max_len=40)
        nodes.append((d, TargetMirror(pair.target, SINK, WINDOW, 32, temperature=0.8, seed=30 + i)))
    loop = sm.Loop(nodes, Verifier(pair.target))
    for i in range(2):
        loop.prompt(i, PROMPTS[i])
    while loop.round():
        pass
    for d, s in nodes:
        assert d.episode == 40 and s.committed == d.committed
        assert 0.3 < d.accepted / d.drafted < 1.0, d.accepted / d.drafted
        assert s.stats["tested"] == s.stats["accepted"] + s.stats["corrections"]


def test_bench_spec_quick_smoke():
    from tools.bench import spec as bench_spec

    import argparse

    ns = argparse.Namespace(json=True, quick=True, plants="builtin", target=None, draft=None, k=4, max_pending=2,
                            tokens=12, integer_max_mb=0, nodes=[1, 2], temps=[0.0, 0.7], sink=4, window=16, seed=1,
                            format="free", episodes=1, board="rp2040_pico", draft_top_k=8, repeats=3)
    out = bench_spec.run(ns)
    assert "llama.py" in out["draft"]["twin"]  # --quick drafts on the node's integer runtime itself
    for key in ("speedup_n1", "speedup_n2", "speedup_with_prefill_n2", "acceptance_rate", "wire_bytes_per_draft_token",
                "target_passes_per_committed_token", "streams", "draft"):
        assert key in out, key
    g = out["results"]["greedy"]
    assert g["n2"]["speculative"]["equals_baseline_greedy"] and g["n1"]["speculative"]["equals_baseline_greedy"]
    assert g["n2"]["speculative"]["committed"] == g["n2"]["baseline_batched_ar"]["committed"] == 24
    assert out["results"]["t0.7"]["n2"]["speculative"]["committed"] == 24
    # each figure is the median of the repeats, the runs beside it; the sampled figures have their own names
    for n in (1, 2):
        for temp, suffix in (("greedy", ""), ("t0.7", "_t07")):
            r = out["results"][temp]["n%d" % n]
            assert r["runs"] == 3 and len(r["speedup_runs"]) == 3
            assert r["speedup"] == sorted(r["speedup_runs"])[1] == out["speedup_n%d%s" % (n, suffix)]
            assert r["speedup_with_prefill"] == sorted(r["speedup_with_prefill_runs"])[1]
    assert out["acceptance_rate_t07"] == out["results"]["t0.7"]["n2"]["acceptance_rate"]
    assert out["repeats"] == 3 and out["goal_speedup_n4"] == 2.5 and out["goal_speedup_n4_t07"] == 1.5


def test_float_twin_of_an_mbf(pair, tmp_path):
    """float_target_from_mbf: the tiny pair's MBF gives the pair's target exactly; an asymmetric INT4
    (q4a) matrix dequantises to scale * nibble + min."""
    import numpy as np

    from shared.q4_numpy import quantize_matrix_asym
    from tools.formats.mbf_write import build, layer_name

    p = tmp_path / "pair.mbf"
    p.write_bytes(pair.mbf)
    twin = sm.float_target_from_mbf(p)
    a = pair.target.forward(pair.target.new_cache(2, 6, 8), [1, 2, 3])
    assert np.array_equal(a, twin.forward(twin.new_cache(2, 6, 8), [1, 2, 3]))
    # the same file with blk.0.attn_q as q4a
    from shared import mbf

    r = mbf.open(str(p))
    segs = []
    w = np.random.RandomState(0).standard_normal((32, 32))
    buf, mins = quantize_matrix_asym(w)
    q_name = layer_name(0, "attn_q")
    for name in r.names():
        s = r.seg(name)
        if name == q_name:
            segs.append((name, "q4a", s.shape, bytes(buf[:512])))
        elif name == q_name + ".scales":
            segs.append((name, "f16", s.shape, bytes(buf[512:])))
            segs.append((q_name + ".mins", "f16", s.shape, bytes(mins)))
        else:
            segs.append((name, s.dtype, s.shape, bytes(r.read(name))))
    conf = dict(r.config)
    r.close()
    p2 = tmp_path / "asym.mbf"
    p2.write_bytes(build(conf, b"", segs))
    got = sm.float_target_from_mbf(p2).layers[0][1][:, :32].T  # wq is the first 32 columns of the fused (in, out)
    nib = np.frombuffer(bytes(buf[:512]), np.uint8).reshape(32, 16)
    q = np.empty((32, 32))
    q[:, 0::2], q[:, 1::2] = nib & 15, nib >> 4
    d = np.frombuffer(bytes(buf[512:]), "<f2").astype(np.float64)[:, None]
    m = np.frombuffer(bytes(mins), "<f2").astype(np.float64)[:, None]
    assert np.allclose(got, q * d + m, atol=1e-6) and np.abs(got - w).max() < 0.5


@pytest.mark.parametrize("related", [True, False])
def test_block_ids_wrap_and_long_streams(related):
    """Block ids are 16-bit serial numbers: a stream whose ids wrap (and, with an imperfect draft, jump by
    ID_SKIP after every rejection) still equals target-only greedy. First-order stand-in models (fast)."""
    table = bm.bigram_logits(5, 16)
    target = bm.MarkovTarget(table)
    draft = table if related else bm.bigram_logits(6, 16)
    d = drafter.Drafter(bm.TableModel(draft, 2, 6, 8), 2, temperature=0, max_pending=2, max_len=600)
    d.next_id = 0xFFE0
    s = TargetMirror(target, 2, 6, 16)
    loop = sm.Loop([(d, s)], Verifier(target))
    loop.prompt(0, [3])
    import array

    buf = array.array("i", bytes(4 * 64))
    out = []
    while loop.round():
        out += list(buf[:d.take(buf)])
    want, last = [], 3
    for _ in range(600):
        last = int(table[last].argmax())
        want.append(last)
    assert out == want
    assert d.next_id < 0xFFE0  # wrapped
    assert (d.corrections == 0) == related and s.stats["stale"] == 0
