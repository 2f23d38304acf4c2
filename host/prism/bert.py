"""Numpy (float32) BERT cross-encoder read from a Hugging Face model directory, run layer by layer.

Semantics are those of transformers' BertForSequenceClassification in eval mode:

    hidden = LayerNorm(word[ids] + position[0..T) + token_type[types])          embed()
    for l in layers:                                                             layer()
        a      = LayerNorm(hidden + Wo . MultiHeadSelfAttention(hidden, mask))   (post-LN)
        hidden = LayerNorm(a + W2 . act(W1 . a))                                  act = config hidden_act
    logits = classifier(tanh(pooler(hidden[:, 0])))                              head()

The model directory holds config.json, model.safetensors and tokenizer.json or vocab.txt. Tensor names may
carry the "bert." prefix (BertForSequenceClassification) or none (a bare BertModel backbone). Weights are
fetched per layer through a WeightSource, so a streaming source (read one layer by file offset) and an
embedding-row cache can replace ResidentWeights without touching the forward pass.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Protocol, Sequence

import numpy as np

from host.prism import wordpiece

F32 = np.float32
SUPPORTED_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


class PrismModelError(ValueError):
    """The model directory is missing, corrupt, not a BERT model, or disagrees with its config."""


class PrismInputError(ValueError):
    """A query the reranker cannot score (empty question, no candidates, bad token ids)."""


# ---------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    pad_token_id: int
    initializer_range: float
    num_labels: Optional[int]  # from id2label / num_labels when config.json states it

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, d: dict, where: str = "config.json") -> "BertConfig":
        if d.get("model_type") != "bert":
            raise PrismModelError(
                "%s: model_type is %r, not 'bert' (only BERT-family cross-encoders are supported)"
                % (where, d.get("model_type"))
            )
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise PrismModelError("%s: only absolute position embeddings are supported" % where)

        def need_int(key: str, minimum: int = 1) -> int:
            v = d.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise PrismModelError("%s: %s must be an integer >= %d, got %r" % (where, key, minimum, v))
            return v

        hidden = need_int("hidden_size")
        heads = need_int("num_attention_heads")
        if hidden % heads:
            raise PrismModelError("%s: hidden_size %d is not divisible by num_attention_heads %d" % (where, hidden, heads))
        act = d.get("hidden_act", "gelu")
        if act not in SUPPORTED_ACTS:
            raise PrismModelError("%s: hidden_act %r is not supported (use one of %s)" % (where, act, ", ".join(SUPPORTED_ACTS)))
        eps = d.get("layer_norm_eps", 1e-12)
        if not isinstance(eps, (int, float)) or not eps > 0:
            raise PrismModelError("%s: layer_norm_eps must be a positive number, got %r" % (where, eps))
        num_labels: Optional[int] = None
        if isinstance(d.get("id2label"), dict):
            num_labels = len(d["id2label"])
        elif isinstance(d.get("num_labels"), int):
            num_labels = d["num_labels"]
        return cls(
            vocab_size=need_int("vocab_size"),
            hidden_size=hidden,
            num_layers=need_int("num_hidden_layers"),
            num_heads=heads,
            intermediate_size=need_int("intermediate_size"),
            max_position=need_int("max_position_embeddings"),
            type_vocab_size=need_int("type_vocab_size"),
            layer_norm_eps=float(eps),
            hidden_act=act,
            pad_token_id=need_int("pad_token_id", 0) if "pad_token_id" in d else 0,
            initializer_range=float(d.get("initializer_range", 0.02)),
            num_labels=num_labels,
        )


# ---------------------------------------------------------------------------------------------- weights


class WeightSource(Protocol):
    """Where tensors come from. shape() must not read tensor data (header only)."""

    def names(self) -> Iterable[str]: ...

    def shape(self, name: str) -> Optional[tuple[int, ...]]: ...

    def get(self, name: str) -> np.ndarray: ...

    def rows(self, name: str, index: np.ndarray) -> np.ndarray: ...


class ResidentWeights:
    """All tensors of one safetensors file read into memory as float32 at construction."""

    def __init__(self, arrays: dict[str, np.ndarray], origin: str = "<arrays>"):
        self.origin = origin
        self._arrays = arrays

    @classmethod
    def from_file(cls, path: str) -> "ResidentWeights":
        try:
            from safetensors import safe_open
        except ImportError:  # pragma: no cover - declared dependency
            raise PrismModelError("the `safetensors` package is not installed: pip install 'safetensors>=0.4,<1'") from None
        if not os.path.isfile(path):
            raise PrismModelError("missing weights file %s" % path)
        arrays: dict[str, np.ndarray] = {}
        try:
            with safe_open(path, framework="np") as fh:
                for name in fh.keys():
                    arr = fh.get_tensor(name)
                    if arr.dtype.kind == "f":
                        arr = arr.astype(F32, copy=False)
                    arrays[name] = arr
        except PrismModelError:
            raise
        except Exception as exc:  # SafetensorError, OSError, unsupported dtype (e.g. bf16 in numpy)
            raise PrismModelError("cannot read %s (corrupt or unsupported safetensors file): %s" % (path, exc)) from None
        return cls(arrays, origin=path)

    def names(self) -> Iterable[str]:
        return self._arrays.keys()

    def shape(self, name: str) -> Optional[tuple[int, ...]]:
        arr = self._arrays.get(name)
        return None if arr is None else tuple(arr.shape)

    def get(self, name: str) -> np.ndarray:
        try:
            return self._arrays[name]
        except KeyError:
            raise PrismModelError("missing tensor %s in %s" % (name, self.origin)) from None

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        return self.get(name)[index]


@dataclass(frozen=True)
class LayerWeights:
    """One encoder layer; linear weights are [out, in] as stored by PyTorch."""

    wq: np.ndarray
    bq: np.ndarray
    wk: np.ndarray
    bk: np.ndarray
    wv: np.ndarray
    bv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    wi: np.ndarray
    bi: np.ndarray
    wf: np.ndarray
    bf: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray
    wqkv: np.ndarray  # [3H, H]: wq, wk, wv stacked (they are views into it), one product per sequence
    bqkv: np.ndarray  # [3H]


def stack_qkv(t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """t (the 16 tensors by LayerWeights field) plus wqkv / bqkv, with wq..bv made views into them.

    Done once per layer when the weights are fetched, so every sequence runs one [T, H] x [H, 3H] product
    instead of three."""
    h = t["wq"].shape[1]
    out = dict(t)
    out["wqkv"] = np.concatenate([t["wq"], t["wk"], t["wv"]])
    out["bqkv"] = np.concatenate([t["bq"], t["bk"], t["bv"]])
    for j, f in enumerate("qkv"):
        out["w" + f] = out["wqkv"][j * h:(j + 1) * h]
        out["b" + f] = out["bqkv"][j * h:(j + 1) * h]
    return out


# Field of LayerWeights -> tensor name suffix under "<prefix>encoder.layer.<l>."
_LAYER_TENSORS = {
    "wq": "attention.self.query.weight",
    "bq": "attention.self.query.bias",
    "wk": "attention.self.key.weight",
    "bk": "attention.self.key.bias",
    "wv": "attention.self.value.weight",
    "bv": "attention.self.value.bias",
    "wo": "attention.output.dense.weight",
    "bo": "attention.output.dense.bias",
    "ln1_g": "attention.output.LayerNorm.weight",
    "ln1_b": "attention.output.LayerNorm.bias",
    "wi": "intermediate.dense.weight",
    "bi": "intermediate.dense.bias",
    "wf": "output.dense.weight",
    "bf": "output.dense.bias",
    "ln2_g": "output.LayerNorm.weight",
    "ln2_b": "output.LayerNorm.bias",
}


def layer_shapes(cfg: BertConfig) -> dict[str, tuple[int, ...]]:
    """Expected shape of each LayerWeights field."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {}
    for f in ("wq", "wk", "wv", "wo"):
        shapes[f] = (h, h)
    for f in ("bq", "bk", "bv", "bo", "ln1_g", "ln1_b", "bf", "ln2_g", "ln2_b"):
        shapes[f] = (h,)
    shapes["wi"], shapes["bi"], shapes["wf"] = (i, h), (i,), (h, i)
    return shapes


def embedding_shapes(cfg: BertConfig) -> dict[str, tuple[int, ...]]:
    h = cfg.hidden_size
    return {
        "embeddings.word_embeddings.weight": (cfg.vocab_size, h),
        "embeddings.position_embeddings.weight": (cfg.max_position, h),
        "embeddings.token_type_embeddings.weight": (cfg.type_vocab_size, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }


# ---------------------------------------------------------------------------------------------- kernels
#
# One encoder layer runs one sequence at a time (encoder_layer; short sequences in groups of up to
# GROUP_ROWS rows), and inside it the elementwise passes (GELU, layer norm) run over blocks of ROW_BLOCK
# rows: numpy makes one pass over memory per operation, so on the whole batch every pass streams a 60 MB
# temporary through DRAM, while on a block the ~20 passes of the erf-GELU hit L2. Matrix products stay per
# group (~500 rows): smaller products would repack the weights too often. Scratch buffers come from a
# Workspace allocated once per layer call.

GROUP_ROWS = 512  # rows per group of short sequences run together through the products and elementwise steps
ROW_BLOCK = 64  # rows per elementwise block: [64, 1536] float32 = 384 KB; the block and its 2 scratch ~ L2
SCORE_BLOCK = 1 << 20  # bytes of attention scores per block of heads (one core's L2: 1 MB here)


def layer_norm_into(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, out: np.ndarray,
                    tmp: np.ndarray) -> np.ndarray:
    """out = LayerNorm(x) over the last axis for a 2-D block; tmp is scratch shaped like x. out may be x."""
    h = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True)
    mean *= F32(1.0 / h)
    np.subtract(x, mean, out=out)
    np.multiply(out, out, out=tmp)
    var = tmp.sum(axis=-1, keepdims=True)
    var *= F32(1.0 / h)
    var += F32(eps)
    np.sqrt(var, out=var)
    np.divide(F32(1.0), var, out=var)
    out *= var
    out *= gamma
    out += beta
    return out


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float,
               out: Optional[np.ndarray] = None) -> np.ndarray:
    """LayerNorm over the last axis of a contiguous [..., H] array, ROW_BLOCK rows at a time, into out (a new
    array by default; x itself is allowed)."""
    if out is not None and not out.flags.c_contiguous:
        raise ValueError("layer_norm: out must be C-contiguous (it is written through a reshaped view)")
    flat = x.reshape(-1, x.shape[-1])
    out = np.empty(flat.shape, F32) if out is None else out.reshape(flat.shape)
    tmp = np.empty((min(ROW_BLOCK, flat.shape[0]), flat.shape[1]), F32)
    for a in range(0, flat.shape[0], ROW_BLOCK):
        e = min(flat.shape[0], a + ROW_BLOCK)
        layer_norm_into(flat[a:e], gamma, beta, eps, out[a:e], tmp[: e - a])
    return out.reshape(x.shape)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x [..., in] @ w[out, in]^T + b."""
    y = x @ w.T
    y += b
    return y


def linear_into(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = x [n, in] @ w[out, in]^T + b, without a temporary (w.T is a view: BLAS reads it transposed)."""
    np.matmul(x, w.T, out=out)
    out += b
    return out


# erf by Abramowitz & Stegun 7.1.26: 1 - erf(z) = poly(s) exp(-z^2), s = 1 / (1 + p z), z >= 0.
_ERF_P = F32(0.3275911)
_ERF_A = tuple(F32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
# The same for GELU's z = |x| / sqrt 2, with GELU's 1/2 folded into the coefficients (exact: a power of 2).
_GELU_P = F32(0.3275911 / math.sqrt(2.0))
_GELU_A = tuple(F32(0.5 * c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))


def erf(x: np.ndarray) -> np.ndarray:
    """Error function in float32 (Abramowitz & Stegun 7.1.26), |error| < 5e-7 including float32 rounding."""
    a = np.abs(x)
    t = a * _ERF_P
    t += F32(1.0)
    np.reciprocal(t, out=t)
    poly = t * _ERF_A[0]
    for c in _ERF_A[1:]:
        poly += c
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # poly = 1 - erf(|x|)
    np.subtract(F32(1.0), poly, out=poly)
    return np.copysign(poly, x, out=poly)


def gelu_erf_inplace(x: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """x = x * Phi(x) (HF "gelu", the exact erf GELU) in place on a block; s and q are scratch like x.

    With q = (1 - erf(|x| / sqrt 2)) / 2 = poly(s) exp(-x^2 / 2) (A&S with the 1/2 in the coefficients),
    GELU is max(x, 0) - |x| q for either sign, which needs no sign fix-up and no third buffer.
    """
    np.abs(x, out=s)
    s *= _GELU_P
    s += F32(1.0)
    np.reciprocal(s, out=s)
    np.multiply(s, _GELU_A[0], out=q)
    for c in _GELU_A[1:]:
        q += c
        q *= s
    np.multiply(x, x, out=s)
    s *= F32(-0.5)
    np.exp(s, out=s)
    q *= s
    np.abs(x, out=s)
    q *= s  # |x| q
    np.maximum(x, F32(0.0), out=x)
    x -= q
    return x


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """HF "gelu": x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)), the exact (erf) normal CDF, into a new array."""
    return _blockwise(gelu_erf_inplace, x.copy(), scratch=2)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """HF "gelu_new" / "gelu_pytorch_tanh": the tanh approximation."""
    c = F32(math.sqrt(2.0 / math.pi))
    return F32(0.5) * x * (F32(1.0) + np.tanh(c * (x + F32(0.044715) * x * x * x)))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, F32(0.0))


def _blockwise(fn: Callable[..., np.ndarray], x: np.ndarray, scratch: int) -> np.ndarray:
    """fn(block, *scratch blocks) in place over ROW_BLOCK rows of x at a time; returns x."""
    flat = x.reshape(-1, x.shape[-1])
    bufs = [np.empty((min(ROW_BLOCK, flat.shape[0]), flat.shape[1]), F32) for _ in range(scratch)]
    for a in range(0, flat.shape[0], ROW_BLOCK):
        e = min(flat.shape[0], a + ROW_BLOCK)
        fn(flat[a:e], *(s[: e - a] for s in bufs))
    return x


def _act_inplace(name: str) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """In-place block activation fn(x, s, q) for config hidden_act `name`."""
    if name == "gelu":
        return gelu_erf_inplace

    def other(x: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
        x[...] = ACTIVATIONS[name](x)
        return x

    return other


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "gelu": gelu_erf,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": relu,
}


def attention_bias(mask: np.ndarray) -> np.ndarray:
    """[B, T] 1/0 attention mask -> additive bias [B, 1, 1, T] (0 for real tokens, float32 min for padding)."""
    return ((1.0 - mask.astype(F32)) * np.finfo(F32).min)[:, None, None, :]


def key_lengths(bias: np.ndarray) -> Optional[np.ndarray]:
    """Real tokens per sequence when every mask is ones then zeros (right padding), else None.

    Padded keys get weight exp(float32 min) = 0 exactly, so attending over the first n keys only is the
    same softmax with less work; any other mask keeps the additive bias."""
    real = bias[:, 0, 0, :] == 0
    n = real.sum(axis=1)
    if not n.all() or not (real == (np.arange(real.shape[1])[None, :] < n[:, None])).all():
        return None
    return n


def heads_per_block(heads: int, t: int, n: int) -> int:
    """Heads whose [T, n] score blocks together fit SCORE_BLOCK bytes (at least one)."""
    return max(1, min(heads, SCORE_BLOCK // (4 * t * n)))


def sequences_per_group(t: int, b: int) -> int:
    """Sequences of t tokens run together (at most b): as many as fill GROUP_ROWS rows, at least one."""
    return max(1, min(b, GROUP_ROWS // t))


class Workspace:
    """Scratch buffers for one encoder layer over groups of g sequences of T tokens, allocated once per call."""

    def __init__(self, cfg: BertConfig, t: int, g: int = 1):
        h, i = cfg.hidden_size, cfg.intermediate_size
        rows = g * t
        r = min(ROW_BLOCK, rows)
        self.qkv = np.empty((rows, 3 * h), F32)  # the group's Q | K | V
        hb = heads_per_block(cfg.num_heads, t, t)
        self.scores = np.empty(hb * t * t, F32)  # a block of heads' [T, n] scores (n <= T keys)
        self.head = np.empty((hb, t, cfg.head_dim), F32)  # their unnormalised context
        self.ctx = np.empty((rows, h), F32)  # all heads' context
        self.a = np.empty((rows, h), F32)  # attention block output (after LayerNorm 1)
        self.y = np.empty((rows, h), F32)  # a projection + residual, before its LayerNorm
        self.inter = np.empty((rows, i), F32)  # feed-forward activation
        self.s = np.empty((r, i), F32)  # elementwise scratch for one row block
        self.q = np.empty((r, i), F32)
        self.norm = np.empty((r, h), F32)


def workspace_bytes(cfg: BertConfig, t: int) -> int:
    """Most bytes of one layer's Workspace for sequences of t tokens (for any number of sequences)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    rows = sequences_per_group(t, GROUP_ROWS) * t
    r = min(ROW_BLOCK, rows)
    hb = heads_per_block(cfg.num_heads, t, t)
    return 4 * (rows * (6 * h + i) + hb * t * (t + cfg.head_dim) + r * (2 * i + h))


def attend(qkv: np.ndarray, ctx: np.ndarray, ws: Workspace, heads: int, n: int,
           bias_row: Optional[np.ndarray]) -> np.ndarray:
    """ctx [T, H] = multi-head attention of one sequence from qkv [T, 3H] (Q already scaled), over its first
    n keys; ws holds the scores.

    A block of heads at a time, as many as keep their [heads, T, n] scores within SCORE_BLOCK (one head at
    486 tokens, all twelve at 150), so the softmax's passes stay in L2. Q, K and V are strided views of
    ws.qkv (no transposed copies). The softmax's division is applied to the [T, d] product instead of the
    [T, n] probabilities."""
    t, h3 = qkv.shape
    h = h3 // 3
    d = h // heads
    q = qkv[:, :h].reshape(t, heads, d).transpose(1, 0, 2)  # [heads, T, d]
    k = qkv[:n, h:2 * h].reshape(n, heads, d).transpose(1, 2, 0)  # [heads, d, n]
    v = qkv[:n, 2 * h:].reshape(n, heads, d).transpose(1, 0, 2)  # [heads, n, d]
    by_head = ctx.reshape(t, heads, d).transpose(1, 0, 2)
    g = ws.head.shape[0]  # heads per block, sized for n = T keys
    for j in range(0, heads, g):
        e = min(heads, j + g)
        scores = ws.scores[:(e - j) * t * n].reshape(e - j, t, n)
        np.matmul(q[j:e], k[j:e], out=scores)
        if bias_row is not None:
            scores += bias_row
        top = scores.max(axis=2, keepdims=True)
        np.subtract(scores, top, out=scores)
        np.exp(scores, out=scores)
        total = scores.sum(axis=2, keepdims=True)
        part = ws.head[:e - j]
        np.matmul(scores, v[j:e], out=part)
        np.divide(part, total, out=by_head[j:e])
    return ctx


def feed_forward(ws: Workspace, lw: LayerWeights, cfg: BertConfig, out: np.ndarray) -> np.ndarray:
    """out [rows, H] = LayerNorm(a + W2 . act(W1 . a)), a = ws.a[:rows]; elementwise work in row blocks."""
    rows = out.shape[0]
    a, inter, y = ws.a[:rows], ws.inter[:rows], ws.y[:rows]
    act = _act_inplace(cfg.hidden_act)
    linear_into(a, lw.wi, lw.bi, inter)
    for r in range(0, rows, ROW_BLOCK):
        e = min(rows, r + ROW_BLOCK)
        act(inter[r:e], ws.s[: e - r], ws.q[: e - r])
    linear_into(inter, lw.wf, lw.bf, y)
    y += a
    return _norm_rows(y, lw.ln2_g, lw.ln2_b, cfg.layer_norm_eps, out, ws.norm)


def _norm_rows(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, out: np.ndarray,
               tmp: np.ndarray) -> np.ndarray:
    """out = LayerNorm(x) for a [T, H] array, ROW_BLOCK rows at a time."""
    for r in range(0, x.shape[0], ROW_BLOCK):
        e = min(x.shape[0], r + ROW_BLOCK)
        layer_norm_into(x[r:e], gamma, beta, eps, out[r:e], tmp[: e - r])
    return out


def group_layer(x: np.ndarray, lw: LayerWeights, cfg: BertConfig, ws: Workspace, lengths: Sequence[int],
                bias: Optional[np.ndarray], out: np.ndarray) -> np.ndarray:
    """One post-LN BERT layer on a group of sequences x [g, T, H] into out [g, T, H] (out may be x).

    Attention goes sequence by sequence (lengths[j] real keys each, or the additive bias [g, 1, 1, T] when
    given); the projections, layer norms and feed-forward treat the group's g * T rows as one matrix."""
    g, t, h = x.shape
    rows = g * t
    x2, out2 = x.reshape(rows, h), out.reshape(rows, h)
    qkv, ctx, y, a = ws.qkv[:rows], ws.ctx[:rows], ws.y[:rows], ws.a[:rows]
    linear_into(x2, lw.wqkv, lw.bqkv, qkv)
    qkv[:, :h] *= F32(1.0 / math.sqrt(cfg.head_dim))
    for j in range(g):
        rs = slice(j * t, (j + 1) * t)
        attend(qkv[rs], ctx[rs], ws, cfg.num_heads, lengths[j], None if bias is None else bias[j, 0])
    linear_into(ctx, lw.wo, lw.bo, y)
    y += x2
    _norm_rows(y, lw.ln1_g, lw.ln1_b, cfg.layer_norm_eps, a, ws.norm)
    return feed_forward(ws, lw, cfg, out2)


def encoder_layer(x: np.ndarray, lw: LayerWeights, bias: np.ndarray, cfg: BertConfig,
                  out: Optional[np.ndarray] = None) -> np.ndarray:
    """One post-LN BERT layer on x [B, T, H] with additive bias [B, 1, 1, T], a group of sequences at a time.

    Sequences are independent, so each group is written to out (a new array, or x itself) as soon as it is
    done: the temporaries are one group's (up to GROUP_ROWS rows: one 486-token sequence, four of 122),
    whatever the batch. Grouping short sequences keeps the matrix products large and the numpy calls few."""
    b, t, _ = x.shape
    x = np.ascontiguousarray(x)
    out = np.empty_like(x) if out is None else out
    if not out.flags.c_contiguous:
        raise ValueError("encoder_layer: out must be C-contiguous")
    g = sequences_per_group(t, b)
    ws = Workspace(cfg, t, g)
    lengths = key_lengths(bias)
    for i in range(0, b, g):
        e = min(b, i + g)
        ns = [t] * (e - i) if lengths is None else [int(n) for n in lengths[i:e]]
        group_layer(x[i:e], lw, cfg, ws, ns, bias[i:e] if lengths is None else None, out[i:e])
    return out


# ---------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Batch:
    """Encoded (question, passage) pairs: int64 [B, T] each, right-padded."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    truncated: Optional[np.ndarray] = None  # bool [B]: pair cut to max_length (set by encode())


def _read_config(model_dir: str) -> BertConfig:
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise PrismModelError("missing %s (expected a Hugging Face model directory)" % path) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PrismModelError("cannot read %s: %s" % (path, exc)) from None
    if not isinstance(raw, dict):
        raise PrismModelError("%s is not a JSON object" % path)
    return BertConfig.from_dict(raw, where=path)


def _detect_prefix(source: WeightSource) -> str:
    names = set(source.names())
    for prefix in ("bert.", ""):
        if prefix + "embeddings.word_embeddings.weight" in names:
            return prefix
    raise PrismModelError(
        "missing tensor embeddings.word_embeddings.weight (with or without 'bert.' prefix) in %s"
        % getattr(source, "origin", "weights")
    )


def _check_shape(source: WeightSource, name: str, want: tuple[int, ...]) -> bool:
    """True if present with the right shape, False if absent; raises on a shape mismatch."""
    got = source.shape(name)
    if got is None:
        return False
    if tuple(got) != tuple(want):
        raise PrismModelError(
            "tensor %s has shape %s but config.json implies %s (config and weights disagree)"
            % (name, tuple(got), tuple(want))
        )
    return True


class BertCrossEncoder:
    """A BERT cross-encoder: embed() -> layer(0..L-1) -> head(), or forward()/score() in one call."""

    def __init__(
        self,
        config: BertConfig,
        weights: WeightSource,
        tokenizer: object = None,
        *,
        init_head: bool = False,
        num_labels: int = 1,
        seed: int = 0,
        max_length: Optional[int] = None,
    ):
        self.config = config
        self.weights = weights
        self.tokenizer = tokenizer
        self.max_length = min(max_length or config.max_position, config.max_position)
        self.prefix = _detect_prefix(weights)
        self._validate()
        self.head_initialised = False
        self._pooler_w, self._pooler_b, self._cls_w, self._cls_b = self._load_head(init_head, num_labels, seed)
        self.num_labels = int(self._cls_w.shape[0])

    # -- loading

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str,
        *,
        init_head: bool = False,
        num_labels: int = 1,
        seed: int = 0,
        max_length: Optional[int] = None,
    ) -> "BertCrossEncoder":
        """Load config.json + model.safetensors + tokenizer from a Hugging Face model directory.

        A backbone without a classifier (e.g. all-MiniLM-L6-v2) raises PrismModelError unless init_head=True,
        which initialises the missing pooler/classifier deterministically from `seed` (normal(0,
        initializer_range) weights, zero biases, num_labels outputs): a starting point for fine-tuning, whose
        scores mean nothing until then.
        """
        if not os.path.isdir(model_dir):
            raise PrismModelError("model directory %s does not exist" % model_dir)
        config = _read_config(model_dir)
        weights = ResidentWeights.from_file(os.path.join(model_dir, "model.safetensors"))
        limit = min(max_length or config.max_position, config.max_position)
        try:
            tok = wordpiece.load_tokenizer(model_dir, limit)
        except wordpiece.TokenizerError as exc:
            raise PrismModelError(str(exc)) from None
        return cls(config, weights, tok, init_head=init_head, num_labels=num_labels, seed=seed, max_length=limit)

    def _validate(self) -> None:
        cfg, p = self.config, self.prefix
        for name, shape in embedding_shapes(cfg).items():
            if not _check_shape(self.weights, p + name, shape):
                raise PrismModelError("missing tensor %s in %s" % (p + name, getattr(self.weights, "origin", "weights")))
        shapes = layer_shapes(cfg)
        for l in range(cfg.num_layers):
            for field, suffix in _LAYER_TENSORS.items():
                name = "%sencoder.layer.%d.%s" % (p, l, suffix)
                if not _check_shape(self.weights, name, shapes[field]):
                    raise PrismModelError("missing tensor %s in %s" % (name, getattr(self.weights, "origin", "weights")))

    def _load_head(self, init_head: bool, num_labels: int, seed: int) -> tuple[np.ndarray, ...]:
        cfg, p, src = self.config, self.prefix, self.weights
        h = cfg.hidden_size
        has_pooler = _check_shape(src, p + "pooler.dense.weight", (h, h)) and _check_shape(src, p + "pooler.dense.bias", (h,))
        cls_shape = src.shape("classifier.weight")
        has_cls = cls_shape is not None and src.shape("classifier.bias") is not None
        if has_cls:
            assert cls_shape is not None
            if len(cls_shape) != 2 or cls_shape[1] != h:
                raise PrismModelError("tensor classifier.weight has shape %s, expected (num_labels, %d)" % (tuple(cls_shape), h))
            if cfg.num_labels is not None and cfg.num_labels != cls_shape[0]:
                raise PrismModelError(
                    "config.json states %d labels but classifier.weight has %d rows" % (cfg.num_labels, cls_shape[0])
                )
            _check_shape(src, "classifier.bias", (cls_shape[0],))
        if has_pooler and has_cls:
            return src.get(p + "pooler.dense.weight"), src.get(p + "pooler.dense.bias"), src.get("classifier.weight"), src.get("classifier.bias")
        missing = [n for n, ok in (("pooler", has_pooler), ("classifier", has_cls)) if not ok]
        if not init_head:
            raise PrismModelError(
                "%s has no %s: it is a backbone, not a cross-encoder; pass init_head=True to initialise a head "
                "for fine-tuning (its scores are meaningless until trained)"
                % (getattr(src, "origin", "model"), " or ".join(missing))
            )
        if not isinstance(num_labels, int) or num_labels < 1:
            raise PrismModelError("num_labels must be a positive integer, got %r" % (num_labels,))
        rng = np.random.default_rng(seed)
        std = cfg.initializer_range
        if has_pooler:
            pw, pb = src.get(p + "pooler.dense.weight"), src.get(p + "pooler.dense.bias")
        else:
            pw, pb = rng.normal(0.0, std, (h, h)).astype(F32), np.zeros(h, F32)
        if has_cls:
            cw, cb = src.get("classifier.weight"), src.get("classifier.bias")
        else:
            cw, cb = rng.normal(0.0, std, (num_labels, h)).astype(F32), np.zeros(num_labels, F32)
        self.head_initialised = True
        return pw, pb, cw, cb

    def head_tensors(self) -> dict[str, np.ndarray]:
        """Pooler and classifier under BertForSequenceClassification names (to save an initialised head)."""
        return {
            "bert.pooler.dense.weight": self._pooler_w,
            "bert.pooler.dense.bias": self._pooler_b,
            "classifier.weight": self._cls_w,
            "classifier.bias": self._cls_b,
        }

    def layer_weights(self, l: int) -> LayerWeights:
        """Fetch layer l from the weight source (the unit a streaming source will load by offset)."""
        if not 0 <= l < self.config.num_layers:
            raise PrismInputError("layer %d out of range 0..%d" % (l, self.config.num_layers - 1))
        base = "%sencoder.layer.%d." % (self.prefix, l)
        return LayerWeights(**stack_qkv({f: self.weights.get(base + s) for f, s in _LAYER_TENSORS.items()}))

    # -- steps

    def encode(self, question: str, passages: Sequence[str]) -> Batch:
        """Tokenize [CLS] question [SEP] passage [SEP] pairs (longest_first truncation to max_length)."""
        if not isinstance(question, str) or not question.strip():
            raise PrismInputError("the question is empty")
        if isinstance(passages, str) or not isinstance(passages, Sequence):
            raise PrismInputError("candidates must be a sequence of strings, got %s" % type(passages).__name__)
        if len(passages) == 0:
            raise PrismInputError("no candidates to rank")
        for i, p in enumerate(passages):
            if not isinstance(p, str):
                raise PrismInputError("candidate %d is %s, not a string" % (i, type(p).__name__))
        if self.tokenizer is None:
            raise PrismInputError("this model was built without a tokenizer; pass token ids to forward()")
        ids, types, mask, cut = wordpiece.encode_pairs_info(self.tokenizer, question, passages)  # type: ignore[arg-type]
        return Batch(ids, types, mask, cut)

    def embed(self, input_ids: np.ndarray, token_type_ids: Optional[np.ndarray] = None) -> np.ndarray:
        """Token ids [B, T] -> hidden [B, T, H]: LayerNorm(word + position + token_type)."""
        cfg, p = self.config, self.prefix
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
            raise PrismInputError("input_ids must be a non-empty [batch, tokens] array, got shape %s" % (ids.shape,))
        if ids.dtype.kind not in "iu":
            raise PrismInputError("input_ids must be integers, got %s" % ids.dtype)
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            raise PrismInputError("input_ids outside the vocabulary 0..%d" % (cfg.vocab_size - 1))
        t = ids.shape[1]
        if t > cfg.max_position:
            raise PrismInputError("%d tokens exceed max_position_embeddings %d" % (t, cfg.max_position))
        types = np.zeros_like(ids) if token_type_ids is None else np.asarray(token_type_ids)
        if types.shape != ids.shape or types.dtype.kind not in "iu":
            raise PrismInputError("token_type_ids must be an integer array shaped like input_ids %s" % (ids.shape,))
        if types.min() < 0 or types.max() >= cfg.type_vocab_size:
            raise PrismInputError("token_type_ids outside 0..%d" % (cfg.type_vocab_size - 1))
        x = self.weights.rows(p + "embeddings.word_embeddings.weight", ids)  # a new array: updated in place
        x += self.weights.get(p + "embeddings.position_embeddings.weight")[:t]
        x += self.weights.rows(p + "embeddings.token_type_embeddings.weight", types)
        ln_g, ln_b = self.weights.get(p + "embeddings.LayerNorm.weight"), self.weights.get(p + "embeddings.LayerNorm.bias")
        return layer_norm(x, ln_g, ln_b, cfg.layer_norm_eps, out=x)

    def layer(self, l: int, hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Run encoder layer l on hidden [B, T, H] with attention_mask [B, T] (1 = token, 0 = padding)."""
        mask = np.asarray(attention_mask)
        if hidden.ndim != 3 or hidden.shape[2] != self.config.hidden_size:
            raise PrismInputError("hidden must be [batch, tokens, %d], got %s" % (self.config.hidden_size, hidden.shape))
        if mask.shape != hidden.shape[:2]:
            raise PrismInputError("attention_mask shape %s does not match hidden %s" % (mask.shape, hidden.shape[:2]))
        return encoder_layer(hidden, self.layer_weights(l), attention_bias(mask), self.config)

    def head(self, hidden_cls: np.ndarray) -> np.ndarray:
        """[CLS] states [B, H] -> logits [B, num_labels] (pooler dense+tanh, then classifier)."""
        if hidden_cls.ndim != 2 or hidden_cls.shape[1] != self.config.hidden_size:
            raise PrismInputError("hidden_cls must be [batch, %d], got %s" % (self.config.hidden_size, hidden_cls.shape))
        pooled = np.tanh(linear(hidden_cls, self._pooler_w, self._pooler_b))
        return linear(pooled, self._cls_w, self._cls_b)

    # -- whole passes

    def forward(self, batch: Batch) -> np.ndarray:
        """All layers on the whole batch; returns logits [B, num_labels] float32."""
        hidden = self.embed(batch.input_ids, batch.token_type_ids)
        for l in range(self.config.num_layers):
            hidden = self.layer(l, hidden, batch.attention_mask)
        return self.head(hidden[:, 0])

    def relevance(self, logits: np.ndarray) -> np.ndarray:
        """Logits -> one relevance score per candidate (1 label: the logit; 2 labels: logit1 - logit0)."""
        if self.num_labels == 1:
            return logits[:, 0]
        if self.num_labels == 2:
            return logits[:, 1] - logits[:, 0]
        raise PrismModelError("a %d-label classifier has no single relevance score" % self.num_labels)

    def score(self, question: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance of each passage to the question, float32 [len(passages)], higher is more relevant."""
        return self.relevance(self.forward(self.encode(question, passages)))
