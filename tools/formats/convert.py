"""Convert llama2.c `.bin`, GGUF and Hugging Face safetensors models to MBF (docs/CONVERT.md).

    edgetwin convert SRC DST [--from gguf|llama2c|hf] [--dtype q4|f16|f32] [--weights sym|asym|auto]
                     [--embed sym|asym|auto|q8] [--tokenizer auto|none|PATH]
    python -m tools.formats.convert SRC DST ...

    from tools.formats.convert import convert
    summary = convert("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2.mbf")   # dict, also printed as JSON

Every matrix is quantised to INT4 or kept as f16/f32 (`--dtype`); norms and biases stay f32. INT4 comes in two
forms (`--weights`): sym = q4 + float16 group scales (`shared/q4_numpy.quantize_matrix`), asym = q4a + scales +
minimums (GGUF Q4_1's form, copied from Q4_1/Q4_0 blocks without loss); the embedding / classifier may also be
q8 (`--embed q8`: INT8 + scales, GGUF Q8_0's form, copied from Q8_0 blocks without loss). Each tensor of the result is dequantised and compared with
the float tensor it came from: the per-tensor relative RMS error is reported, and a tensor above
`max_error` (0.3 by default: INT4 gives ~0.1, a layout bug gives ~1) stops the conversion before anything
is written. RoPE: every MBF written here rotates interleaved pairs (2i, 2i+1) (config `rope_style` 0, the
runtime's RopeTable style 0); sources that rotate halves (Hugging Face, GGUF qwen2) have their Q/K rows
permuted per head, as llama.cpp's converter does. User mistakes raise ConvertError (a ValueError) with a
one-line message; the CLI prints it and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from host.usage import Parser

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python tools/formats/convert.py` as well as `-m tools.formats.convert`
    sys.path.insert(0, str(ROOT))

from shared import q4, q4_numpy, q4a_q8  # noqa: E402
from tools.formats import llama2c, mbf_write, tokenizer_export  # noqa: E402

FORMATS = ("gguf", "llama2c", "hf")
DTYPES = ("q4", "f16", "f32")
WEIGHTS = ("sym", "asym", "auto", "q8")  # --weights: the form of the layer matrices (with --dtype q4)
EMBEDS = ("sym", "asym", "auto", "q8")  # --embed: token_embd / output (default: as --weights)
FORM_DTYPE = {"sym": "q4", "asym": "q4a", "q8": "q8"}  # MBF dtype of each form
RAW_BLOCKS = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}  # GGUF block bytes (32 weights) read without floats
MAX_REL_RMS = 0.3  # a tensor dequantised this far from its source signals a layout bug, not INT4 noise
GROUP = q4.GROUP  # the kernels' q4 group (MBF group_size)
# The runtime's residual stream in Q(16 - 2): +-65536 of range, 6e-5 of precision. Q16's +-16384
# saturates on SmolLM2's first-token activations (~29000), which wrecked every later token's view of
# it (tools/bench/diag_fidelity.py shows where).
RESID_SHIFT = 2
ROPE_INTERLEAVED = 0  # MBF `rope_style`: 0 = pairs (2i, 2i+1) (RopeTable style 0); every file written here
CHUNK_ELEMS = 1 << 21  # rows quantised at a time: bounds the quantiser's float64 temporaries (~100 MB)
F16_MAX = 65504.0
MBF_MAX_BYTES = (1 << 32) - (1 << 20)  # u32 offsets; keep room for the table, tokenizer and padding

Progress = Callable[[int, int, str], None]  # (done, total, tensor name)


class ConvertError(ValueError):
    """A source the converter cannot turn into a correct MBF; the message says what and what to do."""


# ---- the model, independent of its source format ---------------------------------------------------------

@dataclass
class ModelConfig:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int
    rope_theta: float
    norm_eps: float
    tied: bool
    attn_bias: bool = False  # q, k and v projections have biases (Qwen2; Llama with attention_bias)
    attn_out_bias: bool = False  # the output projection has a bias (Llama with attention_bias)
    hidden_src: int = 0  # > 0: hidden_dim was zero-padded from this width (pad_hidden)

    def check(self, where: str) -> None:
        ints = {"dim": (self.dim, 65536), "hidden_dim": (self.hidden_dim, 1 << 20), "n_layers": (self.n_layers, 1024),
                "n_heads": (self.n_heads, 1024), "n_kv_heads": (self.n_kv_heads, 1024),
                "head_dim": (self.head_dim, 4096), "vocab_size": (self.vocab_size, 1 << 24),
                "seq_len": (self.seq_len, 1 << 24)}
        for key, (v, hi) in ints.items():
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
                raise ConvertError("%s: %s = %r is outside 1..%d" % (where, key, v, hi))
        if self.n_heads % self.n_kv_heads:
            raise ConvertError("%s: n_heads %d is not a multiple of n_kv_heads %d" % (where, self.n_heads,
                                                                                      self.n_kv_heads))
        if self.head_dim % 2:
            raise ConvertError("%s: head_dim %d is odd; RoPE rotates pairs" % (where, self.head_dim))
        if not (isinstance(self.rope_theta, (int, float)) and 1.0 <= self.rope_theta <= 1e9):
            raise ConvertError("%s: rope_theta %r is outside 1..1e9" % (where, self.rope_theta))
        if not (isinstance(self.norm_eps, (int, float)) and 1e-12 <= self.norm_eps <= 0.1):
            raise ConvertError("%s: RMSNorm epsilon %r is outside 1e-12..0.1" % (where, self.norm_eps))

    def mbf(self) -> dict[str, int | float]:
        """The MBF config table (docs/MBF.md section 3, plus rope_style / attn_bias / attn_out_bias)."""
        return {
            "dim": self.dim, "hidden_dim": self.hidden_dim, "n_layers": self.n_layers, "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim, "vocab_size": self.vocab_size, "sub_vocab": 0,
            "seq_len": self.seq_len, "rope_theta": float(self.rope_theta), "norm_eps": float(self.norm_eps),
            "group_size": GROUP, "tied_embed": int(self.tied), "rope_style": ROPE_INTERLEAVED, "resid_shift": RESID_SHIFT,
            "attn_bias": int(self.attn_bias), "attn_out_bias": int(self.attn_out_bias),
        } | ({"hidden_dim_src": self.hidden_src} if self.hidden_src else {})

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every MBF tensor this model has, with its shape ([out, in] for matrices)."""
        d, h, q, kv = self.dim, self.hidden_dim, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        out: dict[str, tuple[int, ...]] = {"token_embd": (self.vocab_size, d), "output_norm": (d,)}
        if not self.tied:
            out["output"] = (self.vocab_size, d)
        part: dict[str, tuple[int, ...]] = {
            "attn_norm": (d,), "attn_q": (q, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, q),
            "ffn_norm": (d,), "ffn_gate": (h, d), "ffn_up": (h, d), "ffn_down": (d, h)}
        if self.attn_bias:
            part.update({"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
        if self.attn_out_bias:
            part["attn_output.bias"] = (d,)
        for layer in range(self.n_layers):
            for name, shape in part.items():
                out["blk.%d.%s" % (layer, name)] = shape
        return out

    def describe(self) -> str:
        return ("dim %d, hidden_dim %d, %d layers, %d heads / %d kv heads of %d, vocab %d"
                % (self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim,
                   self.vocab_size))


@dataclass
class Tensor:
    """One source tensor: where it came from, its declared shape, and how to load it as floats."""

    source: str  # its name in the source file
    shape: tuple[int, ...]
    src_type: str  # F32, BF16, Q4_1, ...
    load: Callable[[], np.ndarray]
    rope_heads: int = 0  # > 0: rows rotate halves per head (HF/NeoX): permute them into interleaved pairs
    raw: Optional[Callable[[], np.ndarray]] = None  # GGUF Q4_0 / Q4_1 / Q8_0: the blocks, (rows, bytes per row)


@dataclass
class Source:
    fmt: str
    arch: str
    path: str
    config: ModelConfig
    tensors: dict[str, Tensor]  # MBF name -> tensor
    tokenizer: Callable[[], tuple[bytes, dict[str, Any]]]  # the model's own tokenizer (--tokenizer auto)
    bos: Optional[int] = None
    eos: Optional[int] = None
    notes: list[str] = field(default_factory=list)


def to_interleaved(a: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a Q or K projection (or bias) laid out for half-split RoPE -> interleaved-pair RoPE.

    Within each head, row i (i < head_dim/2) moves to 2i and row i + head_dim/2 to 2i + 1: rotating the
    permuted vector's pairs (2i, 2i+1) is then the permuted rotation of the halves, and q.k is unchanged
    because q and k are permuted alike. This is llama.cpp's permutation for Llama weights."""
    rows = a.shape[0]
    half = rows // heads // 2
    return np.ascontiguousarray(a.reshape(heads, 2, half, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape))


PAD_PARTS = {"ffn_gate": 0, "ffn_up": 0, "ffn_down": 1}  # the axis of each FFN matrix that is hidden_dim wide


def pad_hidden(src: Source) -> int:
    """Zero-pad hidden_dim up to a multiple of GROUP, in place (config and FFN tensors); returns the
    original width, or 0 when nothing was padded. Exact: the padded gate/up rows are zero, so their
    SwiGLU outputs are silu(0) * 0 = 0, and the padded ffn_down columns are zero too, so the extra lanes
    add nothing to the residual stream; only the INT8 activation quantisation of the last hidden group
    sees the zeros (their magnitude is 0: the group scale is the real lanes' own)."""
    conf = src.config
    h = conf.hidden_dim
    if h % GROUP == 0:
        return 0
    hp = (h + GROUP - 1) // GROUP * GROUP
    for name, t in list(src.tensors.items()):
        part = name.split(".", 2)[2] if name.startswith("blk.") else ""
        if part not in PAD_PARTS:
            continue
        axis = PAD_PARTS[part]
        shape = list(t.shape)
        shape[axis] = hp

        def load(t: Tensor = t, axis: int = axis) -> np.ndarray:
            a = np.asarray(t.load())
            width = [(0, 0), (0, 0)]
            width[axis] = (0, hp - a.shape[axis])
            return np.pad(a, width)
        src.tensors[name] = Tensor(t.source, tuple(shape), t.src_type, load, t.rope_heads, None)
    conf.hidden_dim = hp
    conf.hidden_src = h
    src.notes.append("hidden_dim %d zero-padded to %d (a multiple of the INT4 group %d): exact, see docs/CONVERT.md"
                     % (h, hp, GROUP))
    return h


# ---- llama2.c ---------------------------------------------------------------------------------------------

def open_llama2c(path: str) -> Source:
    try:
        cfg, version, arrays = llama2c.open_model(path)
    except llama2c.Llama2cError as e:
        raise ConvertError(str(e)) from None
    conf = ModelConfig(cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_size,
                       cfg.vocab_size, cfg.seq_len, llama2c.ROPE_THETA, llama2c.NORM_EPS, cfg.shared)
    tensors = {name: Tensor(name, tuple(a.shape), "F32", (lambda a=a: a)) for name, a in arrays.items()}
    tok_path = Path(path).with_name("tokenizer.bin")

    def tokenizer() -> tuple[bytes, dict[str, Any]]:
        if not tok_path.is_file():
            return b"", {"embedded": False, "reason": (
                "no tokenizer.bin beside the model: give --tokenizer PATH (llama2.c's tokenizer.bin for this "
                "model, e.g. tok512.bin for stories260K)")}
        return load_tokenizer(str(tok_path), vocab_size=cfg.vocab_size)

    return Source("llama2c", "llama2c-v%d" % version, path, conf, tensors, tokenizer)


# ---- GGUF -------------------------------------------------------------------------------------------------

GGUF_ARCHS = {"llama": False, "qwen2": True}  # arch -> rotates halves (NeoX), so Q/K rows get permuted
GGUF_TYPES = ("F32", "F16", "BF16", "F64", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
              "Q6_K")
_MISSING = object()


def _gguf_load(t: Any, shape: tuple[int, ...]) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from gguf import quants

        name = t.tensor_type.name
        try:
            if name == "F64":
                a = np.asarray(t.data).view("<f8")
            else:
                a = quants.dequantize(np.asarray(t.data), t.tensor_type)
            return np.asarray(a).reshape(shape)
        except (ValueError, TypeError, NotImplementedError) as e:
            raise ConvertError("GGUF tensor '%s' (%s, shape %r) cannot be read: %s"
                               % (t.name, name, shape, e)) from None
    return load


def _gguf_raw(t: Any, shape: tuple[int, ...]) -> Callable[[], np.ndarray]:
    def raw() -> np.ndarray:
        return np.asarray(t.data, dtype=np.uint8).reshape(shape[0], -1)
    return raw


def open_gguf(path: str) -> Source:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ConvertError("reading GGUF needs the `gguf` package: pip install gguf") from None
    try:
        reader = GGUFReader(path)
    except Exception as e:  # the gguf package raises assorted errors on bad files
        raise ConvertError("%s: not a readable GGUF file (%s: %s)" % (path, type(e).__name__, e)) from None

    def get(key: str, default: Any = _MISSING) -> Any:
        f = reader.fields.get(key)
        if f is None:
            if default is _MISSING:
                raise ConvertError("%s: GGUF metadata '%s' is missing" % (path, key))
            return default
        return f.contents()

    def get_int(key: str, default: Any = _MISSING) -> int:
        v = get(key, default)
        if not isinstance(v, int) or isinstance(v, bool):
            raise ConvertError("%s: GGUF metadata '%s' is %r; expected one integer (per-layer values are not "
                               "supported)" % (path, key, v))
        return v

    arch = get("general.architecture")
    if arch not in GGUF_ARCHS:
        raise ConvertError("%s: GGUF architecture %r is not supported (supported: %s)" % (path, arch,
                                                                                         ", ".join(GGUF_ARCHS)))
    dim = get_int(arch + ".embedding_length")
    n_heads = get_int(arch + ".attention.head_count")
    n_kv = get_int(arch + ".attention.head_count_kv", n_heads)
    head_dim = get_int(arch + ".attention.key_length", dim // max(n_heads, 1))
    if get_int(arch + ".attention.value_length", head_dim) != head_dim:
        raise ConvertError("%s: key_length and value_length differ; not a llama-family attention" % path)
    rope_dims = get_int(arch + ".rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise ConvertError("%s: RoPE rotates %d of %d head dimensions (partial rotary); the runtime rotates all"
                           % (path, rope_dims, head_dim))
    scaling = get(arch + ".rope.scaling.type", "none")
    factor = get(arch + ".rope.scaling.factor", 1.0)
    if scaling not in ("none", None) and factor != 1.0:
        raise ConvertError("%s: RoPE scaling %r (factor %r) is not supported by the runtime" % (path, scaling,
                                                                                               factor))
    names = [t.name for t in reader.tensors]
    emb = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if emb is None:
        raise ConvertError("%s: no tensor 'token_embd.weight'" % path)
    vocab = get_int(arch + ".vocab_size", int(emb.shape[-1]))
    conf = ModelConfig(
        dim=dim, hidden_dim=get_int(arch + ".feed_forward_length"), n_layers=get_int(arch + ".block_count"),
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, vocab_size=vocab,
        seq_len=get_int(arch + ".context_length"),
        rope_theta=_as_float(get(arch + ".rope.freq_base", 10000.0), path, arch + ".rope.freq_base"),
        norm_eps=_as_float(get(arch + ".attention.layer_norm_rms_epsilon"), path,
                           arch + ".attention.layer_norm_rms_epsilon"),
        tied="output.weight" not in names, attn_bias="blk.0.attn_q.bias" in names,
        attn_out_bias="blk.0.attn_output.bias" in names)
    halves = GGUF_ARCHS[arch]
    tensors: dict[str, Tensor] = {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            raise ConvertError("%s: has 'rope_freqs' (scaled RoPE frequencies, e.g. Llama 3.1+); the runtime's "
                               "RoPE has no frequency scaling" % path)
        if t.name.endswith(".weight"):
            name = t.name[:-len(".weight")]
        elif t.name.endswith(".bias"):
            name = t.name
        else:
            raise ConvertError("%s: unexpected tensor '%s'" % (path, t.name))
        ttype = t.tensor_type.name
        shape = tuple(int(x) for x in reversed([int(v) for v in t.shape]))
        if ttype not in GGUF_TYPES:
            raise ConvertError("%s: tensor '%s' has type %s; supported: %s" % (path, t.name, ttype,
                                                                              ", ".join(GGUF_TYPES)))
        heads = 0
        if halves and re.fullmatch(r"blk\.\d+\.attn_q(\.bias)?", name):
            heads = n_heads
        elif halves and re.fullmatch(r"blk\.\d+\.attn_k(\.bias)?", name):
            heads = n_kv
        raw = _gguf_raw(t, shape) if ttype in RAW_BLOCKS and len(shape) == 2 and shape[1] % GROUP == 0 else None
        tensors[name] = Tensor(t.name, shape, ttype, _gguf_load(t, shape), heads, raw)
    fields = {k: reader.fields[k].contents() for k in tokenizer_export.GGUF_KEYS if k in reader.fields}

    def tokenizer() -> tuple[bytes, dict[str, Any]]:
        try:
            data = tokenizer_export.read_gguf(path, fields)
            blob = tokenizer_export.build_blob(data)
        except tokenizer_export.ExportError as e:
            raise ConvertError("the GGUF's tokenizer cannot be exported (%s); convert with --tokenizer none, or "
                               "give --tokenizer PATH" % e) from None
        return blob, {"embedded": True, "source": "%s (GGUF metadata)" % path}

    bos = fields.get("tokenizer.ggml.bos_token_id")
    eos = fields.get("tokenizer.ggml.eos_token_id")
    return Source("gguf", arch, path, conf, tensors, tokenizer, bos, eos)


# ---- Hugging Face safetensors ------------------------------------------------------------------------------

SAFETENSORS_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
MAX_ST_HEADER = 100 << 20


def safetensors_index(path: Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (dtype, shape, absolute offset, byte length) of one .safetensors file, every field checked."""
    where = str(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConvertError("%s: truncated safetensors file (%d bytes)" % (where, size))
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, MAX_ST_HEADER):
            raise ConvertError("%s: safetensors header length %d does not fit the %d-byte file" % (where, n, size))
        raw = f.read(n)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ConvertError("%s: safetensors header is not JSON (%s)" % (where, e)) from None
    if not isinstance(doc, dict):
        raise ConvertError("%s: safetensors header is not a JSON object" % where)
    base = 8 + n
    out = {}
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
            ok = all(isinstance(v, int) and v >= 0 for v in (*shape, start, end)) and isinstance(dtype, str)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise ConvertError("%s: tensor '%s' has a malformed entry %r" % (where, name, info))
        item = SAFETENSORS_DTYPES.get(dtype, (None, 0))[1]
        count = math.prod(shape)
        if start > end or base + end > size or (item and end - start != count * item):
            raise ConvertError("%s: tensor '%s' (%s %r) has data offsets [%d, %d] that do not fit its size or "
                               "the %d-byte file" % (where, name, dtype, shape, start, end, size))
        out[name] = (dtype, shape, base + start, end - start)
    return out


def _st_load(path: Path, name: str, dtype: str, shape: tuple[int, ...], offset: int) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        np_dtype = SAFETENSORS_DTYPES[dtype][0]
        a = np.memmap(path, dtype=np_dtype, mode="r", offset=offset, shape=shape) if math.prod(shape) else \
            np.zeros(shape, np_dtype)
        if dtype == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        return a
    return load


HF_LAYER = {
    "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
    "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
    "self_attn.o_proj.weight": "attn_output", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias", "mlp.gate_proj.weight": "ffn_gate",
    "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
}
HF_TOP = {"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm", "lm_head.weight": "output"}
HF_TYPES = ("llama", "qwen2")
_HF_ARCH = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}


def _as_float(v: Any, where: str, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConvertError("%s: '%s' is %r; expected a number" % (where, key, v))
    return float(v)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConvertError("%s: cannot read JSON (%s)" % (path, e)) from None


def _hf_files(base: Path, given: Path) -> list[Path]:
    if given.suffix == ".safetensors":
        return [given]
    index = base / "model.safetensors.index.json"
    if given.name.endswith(".index.json"):
        index = given
    if index.is_file():
        doc = _read_json(index)
        wmap = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(wmap, dict) or not wmap:
            raise ConvertError("%s: no 'weight_map'" % index)
        files = sorted(set(wmap.values()))
        for f in files:
            if not isinstance(f, str) or "/" in f or "\\" in f or not (base / f).is_file():
                raise ConvertError("%s: shard %r is missing (or not a plain file name in %s)" % (index, f, base))
        return [base / f for f in files]
    single = base / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(base.glob("*.safetensors"))
    if not found:
        raise ConvertError("%s: no model.safetensors (or index) found; PyTorch .bin checkpoints are not read, "
                           "save the model with safetensors" % base)
    return found


def open_hf(path: str) -> Source:
    given = Path(path)
    base = given if given.is_dir() else given.parent
    cfg_path = base / "config.json"
    if not cfg_path.is_file():
        raise ConvertError("%s: no config.json beside the weights" % base)
    c = _read_json(cfg_path)
    if not isinstance(c, dict):
        raise ConvertError("%s: not a JSON object" % cfg_path)
    mtype = c.get("model_type") or _HF_ARCH.get((c.get("architectures") or [""])[0])
    if mtype not in HF_TYPES:
        raise ConvertError("%s: model_type %r is not supported (supported: %s)" % (cfg_path, mtype,
                                                                                   ", ".join(HF_TYPES)))
    where = str(cfg_path)

    def need(key: str, default: Any = _MISSING) -> int:
        v = c.get(key, default)
        if v is _MISSING or v is None:
            raise ConvertError("%s: '%s' is missing" % (where, key))
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConvertError("%s: '%s' is %r; expected a positive integer" % (where, key, v))
        return v

    if c.get("hidden_act", "silu") not in ("silu", "swish"):
        raise ConvertError("%s: hidden_act %r; the runtime runs SwiGLU with SiLU" % (where, c.get("hidden_act")))
    if c.get("rope_scaling") not in (None, {}):
        raise ConvertError("%s: rope_scaling %s is not supported by the runtime's RoPE"
                           % (where, json.dumps(c.get("rope_scaling"))))
    if c.get("mlp_bias"):
        raise ConvertError("%s: mlp_bias is set; the runtime's SwiGLU has no biases" % where)
    if mtype == "qwen2" and c.get("use_sliding_window"):
        raise ConvertError("%s: use_sliding_window is set; the runtime attends over its own sink + window cache, "
                           "not Qwen2's sliding window" % where)
    if _as_float(c.get("partial_rotary_factor", 1.0), where, "partial_rotary_factor") != 1.0:
        raise ConvertError("%s: partial_rotary_factor %r; the runtime rotates whole heads" % (where,
                                                                                            c["partial_rotary_factor"]))
    dim, n_heads = need("hidden_size"), need("num_attention_heads")
    n_kv = need("num_key_value_heads", n_heads)
    head_dim = need("head_dim", dim // n_heads)
    bias = mtype == "qwen2" or bool(c.get("attention_bias"))
    conf = ModelConfig(
        dim=dim, hidden_dim=need("intermediate_size"), n_layers=need("num_hidden_layers"), n_heads=n_heads,
        n_kv_heads=n_kv, head_dim=head_dim, vocab_size=need("vocab_size"),
        seq_len=need("max_position_embeddings"),
        rope_theta=_as_float(c.get("rope_theta", 10000.0), where, "rope_theta"),
        norm_eps=_as_float(c.get("rms_norm_eps", 1e-6), where, "rms_norm_eps"),
        tied=bool(c.get("tie_word_embeddings", False)),
        attn_bias=bias, attn_out_bias=mtype == "llama" and bool(c.get("attention_bias")))
    tensors: dict[str, Tensor] = {}
    notes: list[str] = []
    for file in _hf_files(base, given):
        for sname, (dtype, shape, offset, _n) in safetensors_index(file).items():
            if sname.endswith("rotary_emb.inv_freq"):
                continue  # recomputed from rope_theta
            m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", sname)
            if m and m.group(2) in HF_LAYER and str(int(m.group(1))) == m.group(1):
                name = "blk.%s.%s" % (m.group(1), HF_LAYER[m.group(2)])
            elif sname in HF_TOP:
                name = HF_TOP[sname]
            else:
                raise ConvertError("%s: tensor '%s' is not part of a %s model the runtime runs" % (file, sname, mtype))
            if name == "output" and conf.tied:
                notes.append("lm_head.weight ignored: tie_word_embeddings is set")
                continue
            if name in tensors:
                raise ConvertError("%s: tensor '%s' appears twice (also in %s)" % (file, sname,
                                                                                 tensors[name].source))
            if dtype not in SAFETENSORS_DTYPES:
                raise ConvertError("%s: tensor '%s' has dtype %s; supported: %s" % (file, sname, dtype,
                                                                                   ", ".join(SAFETENSORS_DTYPES)))
            heads = 0
            if name.endswith((".attn_q", ".attn_q.bias")):
                heads = conf.n_heads
            elif name.endswith((".attn_k", ".attn_k.bias")):
                heads = conf.n_kv_heads
            tensors[name] = Tensor("%s:%s" % (file.name, sname), shape, dtype, _st_load(file, sname, dtype, shape,
                                                                                        offset), heads)
    bos = c.get("bos_token_id")
    eos = c.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None

    def tokenizer() -> tuple[bytes, dict[str, Any]]:
        tj = base / "tokenizer.json"
        if not tj.is_file():
            raise ConvertError("%s: no tokenizer.json; give --tokenizer PATH, or --tokenizer none to convert the "
                               "weights alone" % base)
        return load_tokenizer(str(tj), bos, eos)

    return Source("hf", mtype, path, conf, tensors, tokenizer, bos, eos, notes)


# ---- tokenizer ---------------------------------------------------------------------------------------------

def load_tokenizer(path: str, bos: Optional[int] = None, eos: Optional[int] = None,
                   vocab_size: Optional[int] = None) -> tuple[bytes, dict[str, Any]]:
    """The tokenizer blob from a blob file, a tokenizer.json or a GGUF's metadata (byte-level BPE,
    docs/TOKENIZER.md), or from a llama2.c tokenizer.bin of vocab_size tokens (the L2CT blob of
    shared/sptok.py; info["kind"] is then "llama2c")."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ConvertError("tokenizer %s: %s" % (path, e.strerror or e)) from None
    try:
        if head == tokenizer_export.MAGIC:
            blob = p.read_bytes()
        elif head == b"GGUF":
            blob = tokenizer_export.build_blob(tokenizer_export.read_gguf(p))
        elif p.suffix == ".json":
            blob = tokenizer_export.build_blob(tokenizer_export.read_tokenizer_json(p, bos, eos))
        else:
            try:
                tok = llama2c.read_tokenizer(p)
            except llama2c.Llama2cError:
                raise ConvertError("tokenizer %s: not a tokenizer blob (ETOK), tokenizer.json, GGUF or llama2.c "
                                   "tokenizer.bin" % path) from None
            if vocab_size is None:
                raise ConvertError("tokenizer %s is a llama2.c tokenizer.bin: it embeds only with a llama2.c "
                                   "model (its vocab_size says how many tokens the file holds)" % path)
            try:
                tok = llama2c.read_tokenizer(p, vocab_size)
                blob = llama2c.tokenizer_blob(tok)
            except llama2c.Llama2cError as e:
                raise ConvertError("tokenizer %s: %s" % (path, e)) from None
            return blob, {"embedded": True, "source": path, "kind": "llama2c",
                          "byte_fallback": llama2c.byte_fallback(tok)}
    except tokenizer_export.ExportError as e:
        raise ConvertError("tokenizer %s: %s" % (path, e)) from None
    return blob, {"embedded": True, "source": path}


def _tokenizer_info(blob: bytes, info: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    from shared import bpe, sptok

    if info.get("kind") == "llama2c":
        try:
            t = sptok.SPTok(blob)
        except sptok.TokenizerError as e:
            raise ConvertError("tokenizer %s: invalid L2CT blob (%s)" % (info.get("source"), e)) from None
        if t.vocab_size != vocab_size:
            raise ConvertError("tokenizer %s has %d tokens, the model's vocab_size is %d"
                               % (info.get("source"), t.vocab_size, vocab_size))
        return dict(info, bytes=len(blob), hash="%08x" % t.tokenizer_hash(), vocab_size=t.vocab_size, bos=t.bos_id,
                    eos=t.eos_id)
    try:
        tok = bpe.BPE(blob)
    except bpe.TokenizerError as e:
        raise ConvertError("tokenizer %s: invalid blob (%s)" % (info.get("source"), e)) from None
    if tok.vocab_size > vocab_size:
        raise ConvertError("tokenizer %s has %d tokens, more than the model's vocab_size %d: not this model's "
                           "tokenizer" % (info.get("source"), tok.vocab_size, vocab_size))
    return dict(info, bytes=len(blob), hash="%08x" % tok.tokenizer_hash(), vocab_size=tok.vocab_size,
                bos=tok.bos_id, eos=tok.eos_id)


# ---- the conversion ----------------------------------------------------------------------------------------

def detect_format(path: str) -> str:
    p = Path(path)
    if p.is_dir() or p.suffix in (".safetensors", ".json"):
        return "hf"
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ConvertError("%s: %s" % (path, e.strerror or e)) from None
    if head[:4] == b"GGUF" or p.suffix == ".gguf":
        return "gguf"
    if head[:2] == b"PK" or head[:1] == b"\x80":
        raise ConvertError("%s is a PyTorch checkpoint (pickle/zip); export it as safetensors or GGUF first" % path)
    if p.suffix == ".bin":
        return "llama2c"
    raise ConvertError("cannot tell the format of %s from its name or contents: give --from %s" % (path,
                                                                                                 "|".join(FORMATS)))


OPENERS: dict[str, Callable[[str], Source]] = {"gguf": open_gguf, "llama2c": open_llama2c, "hf": open_hf}


def open_source(path: str, fmt: Optional[str] = None) -> Source:
    """The model at path as a Source (config checked; tensors not loaded)."""
    if not os.path.exists(path):
        raise ConvertError("%s: no such file or directory" % path)
    if fmt is None:
        fmt = detect_format(path)
    if fmt not in OPENERS:
        raise ConvertError("unknown format %r (known: %s)" % (fmt, ", ".join(FORMATS)))
    src = OPENERS[fmt](path)
    src.config.check("%s (%s)" % (path, fmt))
    return src


def _check_tensors(src: Source) -> dict[str, tuple[int, ...]]:
    want = src.config.shapes()
    missing = [n for n in want if n not in src.tensors]
    extra = [n for n in src.tensors if n not in want]
    where = "%s (%s)" % (src.path, src.config.describe())
    if extra:
        t = src.tensors[extra[0]]
        raise ConvertError("%s: tensor '%s' (%s) does not belong to this model%s" % (
            where, t.source, extra[0], " (and %d more)" % (len(extra) - 1) if len(extra) > 1 else ""))
    if missing:
        raise ConvertError("%s: tensor '%s' is missing%s" % (where, missing[0], " (and %d more)" % (len(missing) - 1)
                                                              if len(missing) > 1 else ""))
    for name, shape in want.items():
        t = src.tensors[name]
        if tuple(t.shape) != shape:
            raise ConvertError("%s: tensor '%s' (%s) has shape %r; the config needs %r"
                               % (where, name, t.source, tuple(t.shape), shape))
    return want


def _check_q4_dims(conf: ModelConfig) -> None:
    for what, n in (("dim", conf.dim), ("hidden_dim", conf.hidden_dim), ("n_heads x head_dim",
                                                                          conf.n_heads * conf.head_dim)):
        if n % GROUP:
            raise ConvertError("q4 needs every matrix input dimension to be a multiple of %d; %s is %d: convert "
                               "with --dtype f16 (or f32)" % (GROUP, what, n))


def estimate_bytes(shapes: dict[str, tuple[int, ...]], dtype: str, embed: str = "q4", layers_q8: bool = False) -> int:
    """Data bytes of the MBF (without tokenizer, table and padding): q4 is 4.5 bits per weight (q4a, with
    its mins, 5 bits: the estimate takes 5 for every INT4 matrix when any is asymmetric); an embed of q8
    (and every layer matrix with layers_q8) 8.5 bits."""
    total = 0
    for name, shape in shapes.items():
        n = math.prod(shape)
        emb = name in ("token_embd", "output")
        if len(shape) == 1:
            total += 4 * n
        elif dtype == "q4" and (embed == "q8" and emb or layers_q8 and not emb):
            total += n + 2 * (n // GROUP)
        elif dtype == "q4":
            total += n // 2 + (4 if embed == "q4a" else 2) * (n // GROUP)
        else:
            total += n * (2 if dtype == "f16" else 4)
    return total


def _rel_rms(num: float, den: float) -> float:
    if den > 0:
        return math.sqrt(num / den)
    return 0.0 if num == 0 else math.inf


def quantize_q4(a: np.ndarray, name: str) -> tuple[bytes, bytes, float]:
    """(nibbles, float16 scale bytes, relative RMS error of the dequantised weights) of a 2-D float array,
    quantised in row chunks so the quantiser's temporaries stay bounded."""
    rows, cols = a.shape
    step = max(1, CHUNK_ELEMS // cols)
    nibs, scales = [], []
    num = den = 0.0
    for r0 in range(0, rows, step):
        part = np.asarray(a[r0:r0 + step], dtype=np.float64)
        try:
            buf = q4_numpy.quantize_matrix(part)
        except q4.Q4Error as e:
            raise ConvertError("tensor '%s': %s" % (name, e)) from None
        n = part.shape[0] * cols // 2
        back = q4_numpy.dequantize(q4.Q4Matrix(part.shape[0], cols, buf))
        num += float(((back - part) ** 2).sum())
        den += float((part ** 2).sum())
        nibs.append(bytes(buf[:n]))
        scales.append(bytes(buf[n:]))
    return b"".join(nibs), b"".join(scales), _rel_rms(num, den)


def _repack_q4(q: np.ndarray) -> bytes:
    """Nibbles (rows, cols) in 0..15 -> the kernels' packing: byte j of a row = q[2j] | q[2j+1] << 4."""
    q = q.astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).tobytes()


def asym_from_blocks(raw: np.ndarray, src_type: str, cols: int) -> tuple[bytes, bytes, bytes]:
    """(nibbles, f16 scales, f16 mins) of the q4a form from GGUF Q4_1 / Q4_0 blocks, without floats.
    Q4_1 (d, m, 16 bytes: weight j in the low nibble of byte j, weight j + 16 in the high one) is the q4a
    form itself: value = d * q + m. Q4_0 (d, 16 bytes, value = d * (q - 8)) becomes d, m = -8 d (exact in
    float16), or for a negative d: scale -d, nibble 15 - q, m = 7 d (rounded to float16: the only
    inexact case)."""
    rows = raw.shape[0]
    nb = RAW_BLOCKS[src_type]
    b = raw.reshape(rows, cols // GROUP, nb)
    d = b[..., 0:2].copy().view("<f2")[..., 0]
    if src_type == "Q4_1":
        m = b[..., 2:4].copy().view("<f2")[..., 0]
        qs = b[..., 4:20]
    else:
        qs = b[..., 2:18]
        neg = d < 0
        with np.errstate(over="ignore"):
            m = np.where(neg, (d.astype(np.float32) * 7).astype(np.float16), (-8 * d.astype(np.float32)).astype(np.float16))
        if not np.all(np.isfinite(m)):
            raise ConvertError("a Q4_0 scale is too large for the asymmetric form's float16 minimum")
    q = np.concatenate([qs & 15, qs >> 4], axis=-1)  # (rows, groups, 32): weights 0..15, then 16..31
    if src_type == "Q4_0":
        q = np.where(neg[..., None], 15 - q, q)
        d = np.abs(d)
    return (_repack_q4(q.reshape(rows, cols)), np.ascontiguousarray(d).astype("<f2").tobytes(),
            np.ascontiguousarray(m).astype("<f2").tobytes())


def q8_from_blocks(raw: np.ndarray, cols: int) -> tuple[bytes, bytes]:
    """(int8 weights, f16 scales) of the q8 form from GGUF Q8_0 blocks (d, 32 x int8): the same numbers."""
    rows = raw.shape[0]
    b = raw.reshape(rows, cols // GROUP, RAW_BLOCKS["Q8_0"])
    return b[..., 2:].tobytes(), np.ascontiguousarray(b[..., 0:2]).tobytes()


def quantize_form(a: np.ndarray, name: str, form: str, t: Tensor) -> tuple[list, float]:
    """(segments, relative RMS error against a) of a 2-D float array in one weight form: 'sym' (q4),
    'asym' (q4a: exact from GGUF Q4_1 blocks, else min/max per group) or 'q8' (exact from Q8_0)."""
    rows, cols = a.shape
    if form == "sym":
        nib, sc, err = quantize_q4(a, name)
        return [(name, "q4", (rows, cols), nib), (mbf_write.scales_name(name), "f16", (rows, cols // GROUP), sc)], err
    raw = None
    if t.raw is not None and (form == "asym" and t.src_type in ("Q4_0", "Q4_1") or
                              form == "q8" and t.src_type == "Q8_0"):
        raw = t.raw()
        if t.rope_heads:
            raw = to_interleaved(raw, t.rope_heads)
    step = max(1, CHUNK_ELEMS // cols)
    parts: list[list[bytes]] = [[], [], []]
    num = den = 0.0
    for r0 in range(0, rows, step):
        part = np.asarray(a[r0:r0 + step], dtype=np.float64)
        n = part.shape[0]
        try:
            if form == "asym":
                if raw is not None:
                    nib, sc, mn = asym_from_blocks(raw[r0:r0 + step], t.src_type, cols)
                else:
                    buf, mins = q4_numpy.quantize_matrix_asym(part)
                    nib, sc, mn = bytes(buf[:n * cols // 2]), bytes(buf[n * cols // 2:]), bytes(mins)
                mat = q4.Q4Matrix(n, cols, bytearray(nib + sc), None, bytearray(mn))
                pieces = (nib, sc, mn)
            else:
                if raw is not None:
                    w8, sc = q8_from_blocks(raw[r0:r0 + step], cols)
                else:
                    buf = q4_numpy.quantize_matrix8(part)
                    w8, sc = bytes(buf[:n * cols]), bytes(buf[n * cols:])
                mat = q4a_q8.Q8Matrix(n, cols, bytearray(w8 + sc))
                pieces = (w8, sc, b"")
        except q4.Q4Error as e:
            raise ConvertError("tensor '%s': %s" % (name, e)) from None
        # float32 like GGUF's own dequantisation: a Q4_1 / Q8_0 source comes back bit for bit
        back = q4_numpy.dequantize(mat, np.float32).astype(np.float64)
        num += float(((back - part) ** 2).sum())
        den += float((part ** 2).sum())
        for k in range(3):
            parts[k].append(pieces[k])
    sc_shape = (rows, cols // GROUP)
    segs = [(name, FORM_DTYPE[form], (rows, cols), b"".join(parts[0])),
            (mbf_write.scales_name(name), "f16", sc_shape, b"".join(parts[1]))]
    if form == "asym":
        segs.append((mbf_write.mins_name(name), "f16", sc_shape, b"".join(parts[2])))
    return segs, _rel_rms(num, den)


def choose_form(a: np.ndarray, name: str, t: Tensor, choice: str) -> tuple[str, list, float]:
    """(form, segments, error) for --weights/--embed `choice`; 'auto': asym for a Q4_1 / Q4_0 source
    (it holds those exactly), else whichever of sym and asym gives the smaller error."""
    if choice != "auto":
        return (choice,) + quantize_form(a, name, choice, t)
    if t.src_type in ("Q4_0", "Q4_1"):
        return ("asym",) + quantize_form(a, name, "asym", t)
    segs_s, err_s = quantize_form(a, name, "sym", t)
    segs_a, err_a = quantize_form(a, name, "asym", t)
    return ("asym", segs_a, err_a) if err_a < err_s else ("sym", segs_s, err_s)


def _float_segment(a: np.ndarray, dtype: str, name: str) -> tuple[np.ndarray, float]:
    a64 = np.asarray(a, dtype=np.float64)
    if dtype == "f16" and a64.size and float(np.abs(a64).max()) > F16_MAX:
        raise ConvertError("tensor '%s' has values up to %g, beyond float16's %g: convert with --dtype f32"
                           % (name, float(np.abs(a64).max()), F16_MAX))
    out = a64.astype("<f2" if dtype == "f16" else "<f4")
    err = _rel_rms(float(((out.astype(np.float64) - a64) ** 2).sum()), float((a64 ** 2).sum()))
    return out, err


def _sig(x: float) -> float:
    return float("%.6g" % x) if math.isfinite(x) else x


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], fmt: Optional[str] = None, dtype: str = "q4",
            tokenizer: str | os.PathLike[str] = "auto", max_error: float = MAX_REL_RMS,
            progress: Optional[Progress] = None, weights: str = "sym", embed: Optional[str] = None) -> dict:
    """Convert the model at src to an MBF file at dst; returns the summary (also what the CLI prints).

    fmt: 'gguf', 'llama2c', 'hf' or None (from the path). dtype: 'q4' (INT4 matrices), 'f16' or 'f32'.
    tokenizer: 'auto' (the model's own: GGUF metadata, tokenizer.json; none for llama2.c), 'none', or a
    path (tokenizer blob, tokenizer.json, GGUF). With dtype 'q4': weights 'sym' (q4), 'asym' (q4a) or
    'auto' for the layer matrices (one form per matrix kind, decided on its first layer: the MBF layer
    plan needs every layer alike), embed 'sym', 'asym', 'auto' or 'q8' for token_embd / output (default:
    as weights). Raises ConvertError; dst is written only on success."""
    t0 = time.perf_counter()
    src, dst, tokenizer = os.fspath(src), os.fspath(dst), os.fspath(tokenizer)
    if dtype not in DTYPES:
        raise ConvertError("unknown dtype %r (known: %s)" % (dtype, ", ".join(DTYPES)))
    if weights not in WEIGHTS:
        raise ConvertError("unknown weights form %r (known: %s)" % (weights, ", ".join(WEIGHTS)))
    embed = weights if embed is None else embed
    if embed not in EMBEDS:
        raise ConvertError("unknown embed form %r (known: %s)" % (embed, ", ".join(EMBEDS)))
    if not isinstance(max_error, (int, float)) or not max_error > 0:
        raise ConvertError("max_error must be a positive number, got %r" % (max_error,))
    if os.path.exists(dst) and os.path.exists(src) and os.path.samefile(src, dst):
        raise ConvertError("the destination %s is the source file" % dst)
    parent = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(parent):
        raise ConvertError("cannot write %s: directory %s does not exist" % (dst, parent))
    source = open_source(src, fmt)
    conf = source.config
    shapes = _check_tensors(source)
    params = int(sum(math.prod(s) for s in shapes.values()))  # the source's (before any zero padding)
    if dtype == "q4":
        if pad_hidden(source):
            shapes = _check_tensors(source)
        _check_q4_dims(conf)
    need = estimate_bytes(shapes, dtype, "q8" if embed == "q8" else "q4" if weights == embed == "sym" else "q4a",
                          weights == "q8")
    if need > MBF_MAX_BYTES:
        raise ConvertError("the %s model would take %.2f GB; MBF files are at most 4 GiB%s" % (
            dtype, need / 1e9, ": use --dtype q4" if dtype != "q4" else ""))
    if tokenizer == "auto":
        blob, tinfo = source.tokenizer()
    elif tokenizer == "none":
        blob, tinfo = b"", {"embedded": False, "reason": "--tokenizer none"}
    else:
        blob, tinfo = load_tokenizer(tokenizer, source.bos, source.eos,
                                     conf.vocab_size if source.fmt == "llama2c" else None)
    if blob:
        tinfo = _tokenizer_info(blob, tinfo, conf.vocab_size)

    segments: list[mbf_write.Segment] = []
    forms: dict[str, str] = {}  # matrix kind ('attn_q', 'token_embd', ...) -> weight form
    report: list[dict[str, Any]] = []
    bad: list[str] = []
    names = sorted(shapes)
    for i, name in enumerate(names):
        t = source.tensors[name]
        if progress:
            progress(i, len(names), name)
        a = t.load()
        if tuple(a.shape) != shapes[name]:
            raise ConvertError("tensor '%s' (%s): loaded shape %r, declared %r" % (name, t.source, a.shape,
                                                                                  shapes[name]))
        if not np.all(np.isfinite(a)):
            raise ConvertError("tensor '%s' (%s) contains NaN or Inf: the source is corrupt" % (name, t.source))
        if t.rope_heads:
            a = to_interleaved(a, t.rope_heads)
        if a.ndim == 2 and dtype == "q4":
            part = name.split(".", 2)[2] if name.startswith(mbf_write.mbf.LAYER_PREFIX) else name
            if part in forms:  # later layers: the form chosen on the first
                form = forms[part]
                segs, err = quantize_form(a, name, form, t)
            else:
                form, segs, err = choose_form(a, name, t, embed if part in ("token_embd", "output") else weights)
                forms[part] = form
            segments.extend(segs)
            out_dtype = FORM_DTYPE[form]
        else:
            out_dtype = dtype if a.ndim == 2 else "f32"  # norms and biases stay f32
            arr, err = _float_segment(a, out_dtype, name)
            segments.append((name, out_dtype, tuple(arr.shape), arr))
        if err > max_error:
            bad.append("%s %.3g" % (name, err))
        report.append({"name": name, "source": t.source, "src_type": t.src_type, "shape": list(shapes[name]),
                       "dtype": out_dtype, "rel_rms": _sig(err)})
        del a
    if progress:
        progress(len(names), len(names), "")
    if bad:
        raise ConvertError("%d tensor(s) dequantise with a relative RMS error above %g (%s): a layout bug or a "
                           "corrupt source; nothing written" % (len(bad), max_error, ", ".join(bad[:5])))
    try:
        config = conf.mbf()
        if tinfo.get("kind") == "llama2c":
            config["tokenizer_kind"] = 1  # shared/mbf.TOK_LLAMA2C: the region is an L2CT blob (shared/sptok.py)
        size = mbf_write.write(dst, config, blob, segments)
    except mbf_write.MBFWriteError as e:
        raise ConvertError("cannot write %s: %s" % (dst, e)) from None
    mats = [r["rel_rms"] for r in report if len(r["shape"]) == 2]
    worst = max(report, key=lambda r: r["rel_rms"])
    notes = list(source.notes)
    if float(conf.rope_theta) != int(conf.rope_theta):
        notes.append("rope_theta %r is not an integer: the board's RopeTable needs one" % conf.rope_theta)
    return {
        "src": src, "dst": dst, "format": source.fmt, "arch": source.arch, "dtype": dtype,
        "weights": weights if dtype == "q4" else None, "embed": embed if dtype == "q4" else None,
        "forms": forms,
        "bytes": size, "seconds": round(time.perf_counter() - t0, 2),
        "params": params,
        "config": config, "tokenizer": tinfo, "crc_verified": True,
        "max_rel_rms": worst["rel_rms"], "worst_tensor": worst["name"],
        "mean_rel_rms_matrices": _sig(sum(mats) / len(mats)) if mats else 0.0,
        "notes": notes, "tensors": report,
    }


def summary_json(summary: dict) -> str:
    """The summary as JSON, one line per tensor."""
    head = {k: v for k, v in summary.items() if k != "tensors"}
    text = json.dumps(head, indent=2)
    rows = ",\n    ".join(json.dumps(t) for t in summary.get("tensors", []))
    return text[:-2] + ',\n  "tensors": [\n    ' + rows + "\n  ]\n}"


# ---- command line ------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="edgetwin convert",
        description="Convert a llama2.c .bin, GGUF or Hugging Face safetensors model to an MBF model file with "
                    "INT4 weights (docs/CONVERT.md). Prints a JSON summary with each tensor's relative RMS error "
                    "against the source floats.")
    p.add_argument("src", metavar="SRC", help="model: a .gguf, a llama2.c .bin, or a Hugging Face directory "
                                              "(config.json + model.safetensors [+ index] + tokenizer.json)")
    p.add_argument("dst", metavar="DST", help="the MBF file to write")
    p.add_argument("--from", dest="fmt", choices=FORMATS, help="source format (default: from SRC's name/contents)")
    p.add_argument("--dtype", choices=DTYPES, default="q4",
                   help="matrix storage: q4 = INT4 + float16 group scales (the boards), f16/f32 = float (default q4)")
    p.add_argument("--weights", choices=WEIGHTS, default="sym",
                   help="form of the layer matrices with --dtype q4: sym = q4 (INT4, scale per group of 32), asym = "
                        "q4a (scale + minimum, Q4_1's form: exact from Q4_1/Q4_0 GGUF), auto = asym for Q4_1/Q4_0 "
                        "sources, else the smaller error; q8 = INT8 + scale per 32 (Q8_0's form, 8.5 bits a weight: "
                        "for tiny models where INT4 loses too much) (default sym)")
    p.add_argument("--embed", choices=EMBEDS, default=None,
                   help="form of token_embd / output: sym, asym, auto, or q8 = INT8 + scale per 32 (exact from "
                        "Q8_0; twice the bytes of INT4) (default: as --weights)")
    p.add_argument("--tokenizer", default="auto", metavar="auto|none|PATH",
                   help="auto: the model's own (GGUF metadata, tokenizer.json; llama2.c has none that fits); none; "
                        "or a tokenizer blob / tokenizer.json / GGUF to embed")
    p.add_argument("--max-error", type=float, default=MAX_REL_RMS, metavar="E",
                   help="refuse when a tensor's relative RMS error exceeds E (default %(default)s)")
    return p


def _rich_progress() -> tuple[Optional[Progress], Callable[[], None]]:
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import Progress as Bar

    bar = Bar(console=Console(stderr=True), transient=True)
    task = bar.add_task("converting", total=None)
    bar.start()

    def update(done: int, total: int, name: str) -> None:
        bar.update(task, completed=done, total=total, description=name or "writing")

    return update, bar.stop


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    update, stop = _rich_progress()
    try:
        summary = convert(args.src, args.dst, fmt=args.fmt, dtype=args.dtype, tokenizer=args.tokenizer,
                          max_error=args.max_error, progress=update, weights=args.weights, embed=args.embed)
    except (ConvertError, OSError) as e:
        stop()
        msg = str(e) if isinstance(e, ConvertError) else "%s: %s" % (getattr(e, "filename", "") or "",
                                                                     e.strerror or e)
        print("edgetwin convert: error: %s" % " ".join(msg.split()), file=sys.stderr)
        return 2
    stop()
    print(summary_json(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
