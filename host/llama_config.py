"""The target model's description: LlamaConfig (shapes, RoPE, context), LayerWeights and LlamaWeights
(float32 matrices, (out, in) as in GGUF and Hugging Face) and check_weights. host/llama_np.py computes
with them; host/gguf_load.py fills them from a GGUF file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROPE_STYLES = ("interleaved", "half")  # (2i, 2i+1) pairs as GGUF/llama.cpp; (i, i+d/2) as HF rotate_half


class TargetError(ValueError):
    """Bad model, cache or input for the target; the message says what is wrong."""


# ---- model description -------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_style: str = "interleaved"
    context_length: int = 2048
    tied_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_dim",
                     "context_length"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise TargetError(f"config: {name} must be a positive int, got {v!r}")
        if self.n_heads % self.n_kv_heads:
            raise TargetError(f"config: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise TargetError(f"config: head_dim {self.head_dim} must be even for RoPE")
        if self.rope_style not in ROPE_STYLES:
            raise TargetError(f"config: rope_style must be one of {ROPE_STYLES}, got {self.rope_style!r}")
        if not (self.norm_eps > 0 and self.rope_theta > 1):
            raise TargetError(f"config: norm_eps must be > 0 and rope_theta > 1, got {self.norm_eps}, {self.rope_theta}")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim


@dataclass
class LayerWeights:
    """One decoder layer; matrices are (out, in) float32 as in GGUF and Hugging Face."""

    attn_norm: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    ffn_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray


@dataclass
class LlamaWeights:
    embed: np.ndarray  # (vocab, dim)
    layers: list[LayerWeights]
    norm: np.ndarray  # (dim,)
    output: np.ndarray  # (vocab, dim); the same array as embed when tied
    rope_freqs: np.ndarray | None = None  # llama3-style per-frequency divisors (head_dim/2,), or None


def check_weights(cfg: LlamaConfig, w: LlamaWeights) -> None:
    """Shapes and finiteness of every weight; TargetError naming the first bad one."""
    d, q, kv, hid, v = cfg.dim, cfg.q_dim, cfg.kv_dim, cfg.hidden_dim, cfg.vocab_size
    want = {"attn_norm": (d,), "wq": (q, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, q),
            "ffn_norm": (d,), "w_gate": (hid, d), "w_up": (hid, d), "w_down": (d, hid)}
    if len(w.layers) != cfg.n_layers:
        raise TargetError(f"weights: {len(w.layers)} layers, config says {cfg.n_layers}")
    named = [("embed", w.embed, (v, d)), ("norm", w.norm, (d,)), ("output", w.output, (v, d))]
    if w.rope_freqs is not None:
        named.append(("rope_freqs", w.rope_freqs, (cfg.head_dim // 2,)))
    for i, layer in enumerate(w.layers):
        named += [(f"layers[{i}].{k}", getattr(layer, k), s) for k, s in want.items()]
    for name, arr, shape in named:
        if not isinstance(arr, np.ndarray) or arr.shape != shape:
            got = arr.shape if isinstance(arr, np.ndarray) else type(arr).__name__
            raise TargetError(f"weights: {name} has shape {got}, expected {shape}")
        if not np.isfinite(arr).all():
            raise TargetError(f"weights: {name} holds NaN or infinite values")
    if w.rope_freqs is not None and not (w.rope_freqs > 0).all():
        raise TargetError("weights: rope_freqs must be positive")
