"""The gateway's target model: a llama-family decoder in numpy float32 over a sink + ring KV cache.

    model = Target.from_gguf(path)                 # SmolLM2-135M-Instruct or any llama GGUF
    cache = model.new_cache(sink=4, window=256, staged=16)
    logits = model.forward(cache, prompt_ids)      # stages the tokens; (T, vocab) float32
    cache.commit(len(prompt_ids))                  # or commit(n) / discard() after a verdict
    [a, b] = model.forward_many([(cache_a, block_a), (cache_b, block_b)])   # several nodes in one pass

The forward reads top to bottom as llama2.c's does (embed, then per layer rmsnorm -> q/k/v -> RoPE ->
attention -> output projection -> rmsnorm -> SwiGLU, then the final norm and the LM head); each step is
one function below. Every weight is applied with one float32 matmul over all tokens of all sequences
in the batch; only the attention itself (whose key set differs per sequence) runs per sequence.

KV cache (docs/TARGET.md). `KVCache` wraps a `shared.ringkv.RingKV` with typecode 'f' and views its
arrays with np.frombuffer (no copy), so the gateway and the node share one set of cache semantics: S
sink slots, a ring of W, D staging slots; keys stored un-rotated. A forward stages its tokens (their
K/V go to staging slots only) and the caller commits or discards them.

Positions. Every token is computed exactly as if the tokens before it had been committed one by one
(StreamingLLM): token number m of the cache's logical sequence (live tokens, then staged ones) sees
the sinks at positions 0..S-1, the last W non-sink tokens before it contiguously after them, and
itself next, at min(m, S+W). So a batch of T tokens equals T single steps even when the batch crosses
the ring's capacity (the oldest window tokens drop out of later queries' view, as eviction would do).
Implementation: keys are rotated at their logical index j (< S+W+D, bounded), window scores use the
query rotated at m (so the distance is m - j, the same as in the cache), sink scores use the query
rotated at min(m, S+W). Where nothing would be evicted this is exactly RingKV's numbering (live token
i at i, staged token s at live + s). No position ever exceeds S+W+D-1.

A dense cache (`Target.new_dense_cache(n)`) is the same thing with no sinks and a window as large as
the text; it refuses to evict.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

# The model description (config, weights, their checks) is host/llama_config.py, which host/gguf_load.py
# fills without importing this module; its names are this module's too.
from host.llama_config import (  # noqa: F401
    ROPE_STYLES, LayerWeights, LlamaConfig, LlamaWeights, TargetError, check_weights)
from shared.ringkv import RingKV


# ---- the steps ---------------------------------------------------------------------------------------

def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight, per row."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True)
    return x * (1.0 / np.sqrt(ms + np.float32(eps))) * weight


def rope_tables(head_dim: int, theta: float, n_pos: int, freqs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of pos * theta^(-2i/head_dim) [/ freqs[i]] for pos < n_pos: float32 (n_pos, head_dim/2).

    Angles are computed in float64 and rounded once; positions are bounded by the cache size."""
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if freqs is not None:
        inv = inv / np.asarray(freqs, dtype=np.float64)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, style: str) -> np.ndarray:
    """Rotate x (n, heads, head_dim) by per-row angles: cos, sin (n, head_dim/2). Returns a new array."""
    c = cos[:, None, :]
    s = sin[:, None, :]
    out = np.empty_like(x)
    if style == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
    else:
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        out[..., :h] = a * c - b * s
        out[..., h:] = a * s + b * c
    return out


def streaming_mask(first: int, n: int, sink: int, window: int) -> np.ndarray:
    """Additive mask (n - first, n) for queries first..n-1 over logical keys 0..n-1: query m sees key j
    iff j <= m and (j < sink or j >= m - window): the sinks and the last `window` tokens before it."""
    m = np.arange(first, n)[:, None]
    j = np.arange(n)[None, :]
    ok = (j <= m) & ((j < sink) | (j >= m - window))
    return np.where(ok, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place on x (float32)."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def attention(q_win: np.ndarray, q_sink: np.ndarray | None, k: np.ndarray, v: np.ndarray, mask: np.ndarray,
              n_sink: int) -> np.ndarray:
    """Grouped-query attention of T queries over N keys.

    q_win, q_sink: (T, H, hd) rotated queries (q_sink for keys j < n_sink; None = same as q_win);
    k: (N, KVH, hd) rotated keys; v: (N, KVH, hd); mask: (T, N) additive. Head h uses KV head
    h // (H / KVH). Returns (T, H, hd)."""
    kt = np.ascontiguousarray(k.transpose(1, 2, 0))  # (KVH, hd, N): plain batched matmuls below
    vv = np.ascontiguousarray(v.transpose(1, 0, 2))  # (KVH, N, hd)
    return attention_t(q_win, q_sink, kt, vv, mask, n_sink)


def attention_t(q_win: np.ndarray, q_sink: np.ndarray | None, kt: np.ndarray, vv: np.ndarray, mask: np.ndarray,
                n_sink: int) -> np.ndarray:
    """attention() with the keys already as (KVH, hd, N) and the values as (KVH, N, hd)."""
    t, h, hd = q_win.shape
    kvh, _, n = kt.shape
    g = h // kvh

    def grouped(q: np.ndarray) -> np.ndarray:  # (T, H, hd) -> (KVH, G*T, hd), head h = kvh * G + g
        return np.ascontiguousarray(q.reshape(t, kvh, g, hd).transpose(1, 2, 0, 3)).reshape(kvh, g * t, hd)

    scores = grouped(q_win) @ kt  # (KVH, G*T, N)
    if q_sink is not None and n_sink:
        scores[:, :, :n_sink] = grouped(q_sink) @ np.ascontiguousarray(kt[:, :, :n_sink])
    scores *= np.float32(1.0 / np.sqrt(hd))
    scores = scores.reshape(kvh, g, t, n)
    scores += mask
    probs = softmax(scores).reshape(kvh, g * t, n)
    out = probs @ vv  # (KVH, G*T, hd)
    return out.reshape(kvh, g, t, hd).transpose(2, 0, 1, 3).reshape(t, h, hd)


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) * up."""
    return gate / (1.0 + np.exp(-gate)) * up


# ---- the KV cache --------------------------------------------------------------------------------------

class KVCache:
    """Float32 K/V rows of one sequence in a shared.ringkv.RingKV, with numpy views (no copies).

    `k[layer, slot]` and `v[layer, slot]` are (KV heads, head_dim) rows; keys are un-rotated."""

    def __init__(self, cfg: LlamaConfig, sink: int, window: int, staged: int, dense: bool = False):
        self.cfg = cfg
        self.dense = dense
        try:
            self.ring = RingKV(cfg.n_layers, cfg.kv_dim, sink, window, staged, "f", heads=cfg.n_kv_heads)
        except ValueError as e:
            raise TargetError(f"cache: {e}") from None
        shape = (cfg.n_layers, self.ring.slots, cfg.n_kv_heads, cfg.head_dim)
        self.k = np.frombuffer(self.ring.k, dtype=np.float32).reshape(shape)
        self.v = np.frombuffer(self.ring.v, dtype=np.float32).reshape(shape)
        self._slots = array("i", bytes(4 * self.ring.capacity))
        if dense:
            # Dense: token j stays at logical index j and position j, so its rotated key never changes. Kept
            # here by logical index, in attention's own layout: a step attends without re-rotating and
            # gathering the whole cache (Target._attend). RingKV's k/v stay the cache's state as for any cache.
            n = self.ring.capacity + self.ring.staged
            self.kt = np.zeros((cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, n), np.float32)
            self.vt = np.zeros((cfg.n_layers, cfg.n_kv_heads, n, cfg.head_dim), np.float32)

    def __repr__(self) -> str:
        kind = "dense" if self.dense else f"sink={self.sink}, window={self.window}"
        return f"KVCache({kind}, staged={self.staged}, live={self.live}, pending={self.pending})"

    sink = property(lambda self: self.ring.sink)
    window = property(lambda self: self.ring.window)
    staged = property(lambda self: self.ring.staged)
    capacity = property(lambda self: self.ring.capacity)
    live = property(lambda self: self.ring.live)
    pending = property(lambda self: self.ring.pending)

    def commit(self, n: int, keep: bool = False) -> None:
        """Move the first n staged tokens into the ring (RingKV.commit); the rest are dropped or kept."""
        if self.dense and self.live + n > self.capacity:
            raise TargetError(f"dense cache full: {self.live} live + {n} > {self.capacity}; make a larger one")
        self.ring.commit(n, keep)

    def discard(self) -> None:
        self.ring.discard()

    def reset(self) -> None:
        self.ring.reset()

    def logical_slots(self, extra: int = 0) -> np.ndarray:
        """Physical slot of every logical token: live ones (RingKV order), staged ones, then `extra` more
        staging slots (the tokens about to be staged)."""
        n = self.ring.fill_slots(self._slots)
        live = np.frombuffer(self._slots, dtype=np.int32, count=n)
        staged = np.arange(self.capacity, self.capacity + self.pending + extra, dtype=np.int32)
        return np.concatenate([live, staged])


# ---- the model -----------------------------------------------------------------------------------------

@dataclass
class _Plan:
    """Attention inputs for one sequence of one forward (shared by all layers)."""

    first: int  # logical index of the first new token
    n_sink: int  # keys 0..n_sink-1 are sinks
    slots: np.ndarray  # physical slot of every logical key 0..n-1
    cos: np.ndarray  # (n, head_dim/2): key j at position j
    sin: np.ndarray
    mask: np.ndarray  # (t, n) additive
    qsink: tuple[np.ndarray, np.ndarray] | None  # query angles for sink scores, when they differ
    dst: int  # first staging slot of the new tokens


class Target:
    """Llama-family decoder; see the module docstring."""

    def __init__(self, cfg: LlamaConfig, weights: LlamaWeights):
        check_weights(cfg, weights)
        self.cfg = cfg
        self.rope_freqs = weights.rope_freqs  # the other weights are copied below into their fused forms
        # Matrices are kept as (in, out), contiguous: x @ w. That is as fast as x @ w.T for batches and
        # several times faster for the single-token (matrix-vector) case with OpenBLAS.
        self.head = np.ascontiguousarray(weights.output.T, dtype=np.float32)  # (dim, vocab)
        self.tied = weights.output is weights.embed
        # Tied: token rows are gathered from the head's columns; untied: from the embedding itself.
        self.embed = None if self.tied else np.ascontiguousarray(weights.embed, dtype=np.float32)
        self.norm = weights.norm.astype(np.float32)
        # Fused projections: one matmul for q|k|v and one for gate|up per layer.
        self.layers = [
            (lw.attn_norm.astype(np.float32),
             np.ascontiguousarray(np.concatenate([lw.wq, lw.wk, lw.wv]).T, dtype=np.float32),
             np.ascontiguousarray(lw.wo.T, dtype=np.float32),
             lw.ffn_norm.astype(np.float32),
             np.ascontiguousarray(np.concatenate([lw.w_gate, lw.w_up]).T, dtype=np.float32),
             np.ascontiguousarray(lw.w_down.T, dtype=np.float32))
            for lw in weights.layers]
        self._cos = self._sin = np.zeros((0, cfg.head_dim // 2), np.float32)

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Target":
        from host.gguf_load import load_gguf

        m = load_gguf(path)
        return cls(m.config, m.weights)

    # ---- caches ----

    def new_cache(self, sink: int = 4, window: int = 256, staged: int = 16) -> KVCache:
        """A sink + ring cache; positions reach sink + window + staged - 1, which must fit the context."""
        return self._cache(sink, window, staged, False)

    def new_dense_cache(self, max_tokens: int, staged: int = 64) -> KVCache:
        """Dense attention for reference: every token stays; at most max_tokens may be committed."""
        return self._cache(0, max_tokens, staged, True)

    def _cache(self, sink: int, window: int, staged: int, dense: bool) -> KVCache:
        n = sink + window + staged if all(isinstance(v, int) for v in (sink, window, staged)) else 0
        if n > self.cfg.context_length:
            raise TargetError(f"cache of {n} positions exceeds the model's context length {self.cfg.context_length}")
        return KVCache(self.cfg, sink, window, staged, dense)

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        """Embedding rows of token ids, (T, dim) float32 (a copy)."""
        if self.embed is None:
            return np.ascontiguousarray(self.head[:, ids].T)
        return self.embed[ids]

    def _tables(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self._cos.shape[0] < n:  # grows to the largest cache's S+W+D at most, then never again
            self._cos, self._sin = rope_tables(self.cfg.head_dim, self.cfg.rope_theta, n, self.rope_freqs)
        return self._cos, self._sin

    # ---- input checks ----

    def _tokens(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        arr = np.asarray(tokens)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TargetError(f"tokens must be a 1-D sequence of ints, got {arr.dtype} with shape {arr.shape}")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.cfg.vocab_size):
            bad = int(arr[(arr < 0) | (arr >= self.cfg.vocab_size)][0])
            raise TargetError(f"token id {bad} out of range 0..{self.cfg.vocab_size - 1}")
        return arr

    def _check_cache(self, cache: KVCache, t: int) -> None:
        if not isinstance(cache, KVCache):
            raise TargetError(f"expected a KVCache, got {type(cache).__name__}")
        c = self.cfg
        if (cache.cfg.n_layers, cache.cfg.n_kv_heads, cache.cfg.head_dim) != (c.n_layers, c.n_kv_heads, c.head_dim):
            raise TargetError("cache was made for a model of another shape")
        if t > cache.ring.room():
            raise TargetError(f"{t} tokens do not fit the cache's free staging room ({cache.ring.room()} of "
                              f"{cache.staged}); commit or discard first, or make a cache with more staging")
        if cache.dense and cache.live + cache.pending + t > cache.capacity:
            raise TargetError(f"dense cache full: {cache.live + cache.pending} tokens + {t} > {cache.capacity}")

    # ---- forward ----

    def forward(self, cache: KVCache, tokens: Sequence[int] | np.ndarray, last_only: bool = False) -> np.ndarray:
        """Stage `tokens` in cache and return their logits (T, vocab), or (1, vocab) with last_only."""
        return self.forward_many([(cache, tokens)], last_only)[0]

    def forward_many(self, batch: Sequence[tuple[KVCache, Sequence[int] | np.ndarray]],
                     last_only: bool = False) -> list[np.ndarray]:
        """One pass over several independent sequences: each weight is applied once to all their tokens.

        Each (cache, tokens) gets its tokens staged after the cache's pending ones; the logits list
        follows the batch order. On an error nothing is staged."""
        cfg = self.cfg
        seqs = [(cache, self._tokens(toks)) for cache, toks in batch]
        if len({id(c) for c, _ in seqs}) != len(seqs):
            raise TargetError("the same cache appears twice in one batch")
        for cache, toks in seqs:
            self._check_cache(cache, len(toks))
        sizes = [len(t) for _, t in seqs]
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        total = int(offs[-1])
        if total == 0:
            return [np.zeros((0, cfg.vocab_size), np.float32) for _ in seqs]
        plans = [self._plan(cache, n) for (cache, _), n in zip(seqs, sizes)]

        x = self.embed_rows(np.concatenate([t for _, t in seqs]))
        nq, nkv = cfg.q_dim, cfg.kv_dim
        for li, (attn_norm, wqkv, wo, ffn_norm, wgu, wdown) in enumerate(self.layers):
            h = rmsnorm(x, attn_norm, cfg.norm_eps)
            qkv = h @ wqkv
            q = qkv[:, :nq].reshape(total, cfg.n_heads, cfg.head_dim)
            k = qkv[:, nq:nq + nkv].reshape(total, cfg.n_kv_heads, cfg.head_dim)
            v = qkv[:, nq + nkv:].reshape(total, cfg.n_kv_heads, cfg.head_dim)
            att = np.empty((total, cfg.n_heads, cfg.head_dim), np.float32)
            for (cache, _), plan, a, b in zip(seqs, plans, offs[:-1], offs[1:]):
                if a < b:
                    att[a:b] = self._attend(cache, plan, li, q[a:b], k[a:b], v[a:b])
            x = x + att.reshape(total, nq) @ wo
            h = rmsnorm(x, ffn_norm, cfg.norm_eps)
            gu = h @ wgu
            x = x + swiglu(gu[:, :cfg.hidden_dim], gu[:, cfg.hidden_dim:]) @ wdown
        if last_only:
            rows = np.array([b - 1 for a, b in zip(offs[:-1], offs[1:]) if b > a], dtype=int)
            x = x[rows]
        logits = rmsnorm(x, self.norm, cfg.norm_eps) @ self.head
        for (cache, toks) in seqs:
            for _ in range(len(toks)):
                cache.ring.stage()
        if last_only:
            out, r = [], 0
            for n in sizes:
                out.append(logits[r:r + 1] if n else np.zeros((0, cfg.vocab_size), np.float32))
                r += 1 if n else 0
            return out
        return [logits[a:b] for a, b in zip(offs[:-1], offs[1:])]

    def _plan(self, cache: KVCache, t: int) -> _Plan:
        """What attention needs for t new tokens on cache (see the module docstring, Positions)."""
        first = cache.live + cache.pending  # logical index of the first new token
        n = first + t
        s, w = cache.sink, cache.window
        cos, sin = self._tables(n)
        m = np.arange(first, n)
        qsink = np.minimum(m, s + w)  # the query's cache position, as seen from the sinks
        return _Plan(
            first=first, n_sink=min(s, n), slots=cache.logical_slots(t), cos=cos[:n], sin=sin[:n],
            mask=streaming_mask(first, n, s, w),
            qsink=(cos[qsink], sin[qsink]) if s > 0 and bool((qsink != m).any()) else None,
            dst=cache.capacity + cache.pending)

    def _attend(self, cache: KVCache, plan: _Plan, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Write the new tokens' un-rotated K and V to their staging slots, then attend over the cache."""
        style = self.cfg.rope_style
        t = q.shape[0]
        cache.k[layer, plan.dst:plan.dst + t] = k
        cache.v[layer, plan.dst:plan.dst + t] = v
        if cache.dense:  # keys 0..first-1 were rotated when they were staged (KVCache.kt)
            a, n = plan.first, plan.first + t
            cache.kt[layer, :, :, a:n] = rope(k, plan.cos[a:n], plan.sin[a:n], style).transpose(1, 2, 0)
            cache.vt[layer, :, a:n] = v.transpose(1, 0, 2)
            q_win = rope(q, plan.cos[a:], plan.sin[a:], style)
            return attention_t(q_win, None, cache.kt[layer, :, :, :n], cache.vt[layer, :, :n], plan.mask, 0)
        keys = rope(cache.k[layer, plan.slots], plan.cos, plan.sin, style)  # key j at position j
        vals = cache.v[layer, plan.slots]
        q_win = rope(q, plan.cos[plan.first:], plan.sin[plan.first:], style)  # query m at position m
        q_sink = rope(q, *plan.qsink, style) if plan.qsink is not None else None
        return attention(q_win, q_sink, keys, vals, plan.mask, plan.n_sink)

    # ---- conveniences ----

    def feed(self, cache: KVCache, tokens: Sequence[int] | np.ndarray, chunk: int | None = None,
             last_only: bool = False) -> np.ndarray:
        """Run and commit `tokens` (prefill), in chunks of at most the cache's staging room; returns the
        logits of all tokens (T, vocab), or of the last one (1, vocab)."""
        toks = self._tokens(tokens)
        if cache.pending:
            raise TargetError(f"feed with {cache.pending} staged tokens; commit or discard first")
        step = min(chunk or cache.staged, cache.staged)
        outs = []
        for a in range(0, len(toks), step):
            part = toks[a:a + step]
            lg = self.forward(cache, part, last_only and a + step >= len(toks))
            cache.commit(len(part))
            if not last_only or a + step >= len(toks):
                outs.append(lg)
        return np.concatenate(outs) if outs else np.zeros((0, self.cfg.vocab_size), np.float32)

    def greedy(self, cache: KVCache, prompt: Sequence[int], n_new: int, stop: int | None = None) -> list[int]:
        """Greedy continuation: feed the prompt, then take the argmax one token at a time (committed)."""
        if not len(prompt):
            raise TargetError("greedy needs a non-empty prompt")
        logits = self.feed(cache, prompt, last_only=True)[-1]
        out: list[int] = []
        for _ in range(n_new):
            tok = int(np.argmax(logits))
            out.append(tok)
            if tok == stop or len(out) == n_new:
                break
            logits = self.forward(cache, [tok])[0]
            cache.commit(1)
        return out
