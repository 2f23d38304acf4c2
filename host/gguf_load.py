"""Read a llama-family GGUF into float32 numpy weights, a LlamaConfig and the tokenizer's raw fields.

    model = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    model.config, model.weights, model.tokenizer, model.tensor_types

The `gguf` package parses the file and dequantises every tensor (`gguf.quants.dequantize`); what it
cannot dequantise, or what the target should not guess about, is refused with a GGUFError naming the
tensor or key. Supported tensor types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants
Q2_K..Q6_K (llama.cpp's usual Q4_K_M / Q5_K_M files use them).

RoPE layout (read this before touching Q or K). llama.cpp's converter (convert_hf_to_gguf.py) permutes
the rows of every head of `attn_q.weight` and `attn_k.weight`: Hugging Face rotates the pair
(i, i + head_dim/2) ("rotate_half", NeoX style), llama.cpp's llama graph rotates adjacent pairs
(2i, 2i+1), so row 2i of a GGUF head is HF row i and row 2i+1 is HF row i + head_dim/2. We keep the GGUF
rows as they are and record `rope_style = "interleaved"`: rotating adjacent pairs of the GGUF rows gives
exactly the numbers HF gets from its own rows (q.k is unchanged when q and k are permuted alike; V and
the output projection are not permuted). `unpermute_rows` turns a GGUF Q/K matrix back into HF order;
the tests use it and the transformers reference does the same inside transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from host.llama_config import LayerWeights, LlamaConfig, LlamaWeights, TargetError


class GGUFError(TargetError):
    """The file is not a GGUF the target can run; the message names the key or tensor and what to do."""


SUPPORTED_ARCHS = ("llama",)
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

# Per layer: GGUF tensor suffix -> LayerWeights field.
LAYER_TENSORS = {
    "attn_norm.weight": "attn_norm",
    "attn_q.weight": "wq",
    "attn_k.weight": "wk",
    "attn_v.weight": "wv",
    "attn_output.weight": "wo",
    "ffn_norm.weight": "ffn_norm",
    "ffn_gate.weight": "w_gate",
    "ffn_up.weight": "w_up",
    "ffn_down.weight": "w_down",
}


@dataclass
class TokenizerFields:
    """The tokenizer.ggml.* values as stored (token strings in GPT-2's byte alphabet, merges as 'a b')."""

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int | None = None
    eos_id: int | None = None
    add_bos: bool = False
    chat_template: str | None = None


@dataclass
class GGUFModel:
    config: LlamaConfig
    weights: LlamaWeights
    tokenizer: TokenizerFields | None
    path: str
    tensor_types: dict[str, str] = field(default_factory=dict)  # tensor name -> GGML type name
    metadata: dict[str, Any] = field(default_factory=dict)  # general.* values


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """GGUF (interleaved-pair) rows of a Q or K matrix -> Hugging Face (rotate_half) row order."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Hugging Face rows -> GGUF rows (what llama.cpp's converter does); the inverse of unpermute_rows."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _open(path: str | Path):
    try:
        from gguf import GGUFReader
    except ImportError:
        raise GGUFError("reading GGUF needs the `gguf` package: pip install gguf") from None
    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"{p}: no such file")
    try:
        return GGUFReader(str(p))
    except Exception as e:  # the gguf package raises assorted errors (ValueError, struct.error...) on bad files
        raise GGUFError(f"{p}: not a readable GGUF file ({type(e).__name__}: {e})") from None


def _fields(reader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, f in reader.fields.items():
        try:
            out[key] = f.contents()
        except Exception:  # a value type this gguf version cannot decode: leave it out
            continue
    return out


def _int(meta: dict, key: str, where: str, default: int | None = None) -> int:
    v = meta.get(key, default)
    if v is None:
        raise GGUFError(f"{where}: metadata key {key} is missing")
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) <= 0:
        raise GGUFError(f"{where}: metadata key {key} must be a positive integer, got {v!r}")
    return int(v)


def _float(meta: dict, key: str, where: str, default: float | None = None) -> float:
    v = meta.get(key, default)
    if v is None:
        raise GGUFError(f"{where}: metadata key {key} is missing")
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v) or v <= 0:
        raise GGUFError(f"{where}: metadata key {key} must be a positive number, got {v!r}")
    return float(v)


def read_config(meta: dict, where: str, vocab_rows: int | None, tied: bool) -> LlamaConfig:
    """LlamaConfig from GGUF metadata (`{arch}.*` keys)."""
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise GGUFError(f"{where}: general.architecture is {arch!r}; the target runs {', '.join(SUPPORTED_ARCHS)}")
    a = arch + "."
    dim = _int(meta, a + "embedding_length", where)
    n_heads = _int(meta, a + "attention.head_count", where)
    n_kv = _int(meta, a + "attention.head_count_kv", where, n_heads)
    if dim % n_heads and a + "attention.key_length" not in meta:
        raise GGUFError(f"{where}: embedding_length {dim} is not a multiple of head_count {n_heads}")
    head_dim = _int(meta, a + "attention.key_length", where, dim // n_heads)
    if meta.get(a + "attention.value_length", head_dim) != head_dim:
        raise GGUFError(f"{where}: attention.value_length differs from key_length; not supported")
    rot = meta.get(a + "rope.dimension_count", head_dim)
    if rot != head_dim:
        raise GGUFError(f"{where}: rope.dimension_count {rot} != head dim {head_dim}: partial rotary is not supported")
    scaling = meta.get(a + "rope.scaling.type", "none")
    if scaling not in ("none", None, ""):
        raise GGUFError(f"{where}: rope.scaling.type {scaling!r} is not supported (only unscaled RoPE, or llama3 rope_freqs)")
    vocab = meta.get(a + "vocab_size", vocab_rows)
    if vocab is None:
        raise GGUFError(f"{where}: vocabulary size unknown (no {a}vocab_size and no token_embd.weight)")
    try:
        return LlamaConfig(
            vocab_size=int(vocab), dim=dim, n_layers=_int(meta, a + "block_count", where),
            n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
            hidden_dim=_int(meta, a + "feed_forward_length", where),
            norm_eps=_float(meta, a + "attention.layer_norm_rms_epsilon", where, 1e-5),
            rope_theta=_float(meta, a + "rope.freq_base", where, 10000.0),
            rope_style="interleaved",
            context_length=_int(meta, a + "context_length", where, 2048),
            tied_embeddings=tied,
        )
    except TargetError as e:
        raise GGUFError(f"{where}: {e}") from None


def read_tokenizer(meta: dict) -> TokenizerFields | None:
    """The tokenizer fields, or None if the file carries no tokenizer."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        return None
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    return TokenizerFields(
        model=str(meta.get("tokenizer.ggml.model", "")), pre=str(meta.get("tokenizer.ggml.pre", "default")),
        tokens=list(tokens), token_types=[int(t) for t in types], merges=list(meta.get("tokenizer.ggml.merges") or []),
        bos_id=meta.get("tokenizer.ggml.bos_token_id"), eos_id=meta.get("tokenizer.ggml.eos_token_id"),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=meta.get("tokenizer.chat_template"),
    )


def dequantize(t, where: str) -> np.ndarray:
    """One reader tensor as a float32 array in numpy order (rows = outputs), owning its memory."""
    from gguf.quants import dequantize as gguf_dequantize

    tname = t.tensor_type.name
    if tname not in SUPPORTED_TYPES:
        raise GGUFError(f"{where}: tensor {t.name} has type {tname}; supported: {', '.join(SUPPORTED_TYPES)}")
    shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists dims innermost first
    try:
        arr = gguf_dequantize(np.asarray(t.data), t.tensor_type)
        arr = np.array(arr, dtype=np.float32).reshape(shape)
    except Exception as e:
        raise GGUFError(f"{where}: tensor {t.name} ({tname}, shape {shape}) cannot be decoded: {e}") from None
    if not np.isfinite(arr).all():
        raise GGUFError(f"{where}: tensor {t.name} holds NaN or infinite values")
    return arr


def load_gguf(path: str | Path) -> GGUFModel:
    """Config, float32 weights and tokenizer fields of a llama-family GGUF (see the module docstring)."""
    where = str(path)
    reader = _open(path)
    meta = _fields(reader)
    tensors = {t.name: t for t in reader.tensors}
    types = {t.name: t.tensor_type.name for t in reader.tensors}

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        t = tensors.get(name)
        if t is None:
            raise GGUFError(f"{where}: tensor {name} is missing")
        arr = dequantize(t, where)
        if arr.shape != shape:
            raise GGUFError(f"{where}: tensor {name} has shape {arr.shape}, expected {shape}")
        return arr

    emb = tensors.get("token_embd.weight")
    vocab_rows = int(emb.shape[1]) if emb is not None and len(emb.shape) == 2 else None
    tied = "output.weight" not in tensors
    cfg = read_config(meta, where, vocab_rows, tied)
    d, q, kv, hid, v = cfg.dim, cfg.q_dim, cfg.kv_dim, cfg.hidden_dim, cfg.vocab_size
    shapes = {"attn_norm": (d,), "wq": (q, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, q),
              "ffn_norm": (d,), "w_gate": (hid, d), "w_up": (hid, d), "w_down": (d, hid)}
    embed = get("token_embd.weight", (v, d))
    layers = []
    for i in range(cfg.n_layers):
        parts = {f: get(f"blk.{i}.{suffix}", shapes[f]) for suffix, f in LAYER_TENSORS.items()}
        layers.append(LayerWeights(**parts))
    norm = get("output_norm.weight", (d,))
    output = embed if tied else get("output.weight", (v, d))
    freqs = get("rope_freqs.weight", (cfg.head_dim // 2,)) if "rope_freqs.weight" in tensors else None
    weights = LlamaWeights(embed=embed, layers=layers, norm=norm, output=output, rope_freqs=freqs)
    general = {k: val for k, val in meta.items() if k.startswith("general.")}
    return GGUFModel(cfg, weights, read_tokenizer(meta), where, types, general)
