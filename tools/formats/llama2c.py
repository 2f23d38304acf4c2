"""Read and write Karpathy's llama2.c model files (`.bin`) and their `tokenizer.bin`.

The converter (tools/formats/convert.py) reads models with this module; the tests write tiny models with it.

Model file, version 0 (the "legacy" export that llama2.c's `run.c` reads):
    7 x int32 header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
    vocab_size < 0 means the classifier is NOT shared with the embedding (a `wcls` matrix follows).
    float32 weights, in this order (each matrix row-major [out, in]):
      token_embedding [vocab, dim]
      rms_att [layers, dim]; wq [layers, dim, dim]; wk [layers, kv_dim, dim]; wv [layers, kv_dim, dim];
      wo [layers, dim, dim]; rms_ffn [layers, dim]; w1 [layers, hidden, dim]; w2 [layers, dim, hidden];
      w3 [layers, hidden, dim]; rms_final [dim];
      freq_cis_real [seq_len, head_size / 2]; freq_cis_imag [seq_len, head_size / 2]  (unused: skipped);
      wcls [vocab, dim] only when not shared.
    head_size = dim / n_heads, kv_dim = n_kv_heads * head_size. w1 is the SwiGLU gate, w3 the up
    projection, w2 the down projection. RoPE rotates interleaved pairs (2i, 2i+1), base 10000;
    RMSNorm eps is 1e-5 (both fixed in run.c).
Model file, version 1 (export.py --version 1): a 256-byte header (uint32 magic 0x616b3432 "ak42",
    int32 version 1, the 7 int32 above with a positive vocab_size, uint8 shared_classifier, zero padding),
    then float32 weights ordered: all rms_att, all rms_ffn, rms_final, token_embedding, all wq, all wk, all
    wv, all wo, all w1, all w2, all w3, then wcls when not shared (no freq_cis). Version 2 (Q8_0) is refused.
tokenizer.bin: int32 max_token_length, then per token: float32 score, int32 length, the token's bytes.
    The vocabulary is sentencepiece-style (scores drive the merges, "<0xNN>" byte tokens), not byte-level
    BPE; the token count is the model's vocab_size (the file does not store it).

Weights are named here with the MBF segment names (token_embd, blk.<L>.attn_q, ...; docs/MBF.md).
"""

from __future__ import annotations

import binascii
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Mapping, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

MAGIC = 0x616B3432  # "ak42" as a little-endian uint32 (export.py version >= 1)
V0_HEADER = 28
V1_HEADER = 256
ROPE_THETA = 10000.0  # fixed in llama2.c's run.c
NORM_EPS = 1e-5
# Plausibility limits: a header outside them is not a llama2.c model (or a corrupt one).
LIMITS = {"dim": 65536, "hidden_dim": 1 << 20, "n_layers": 1024, "n_heads": 1024, "n_kv_heads": 1024,
          "vocab_size": 1 << 24, "seq_len": 1 << 24}
_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
FREQ = "_freq_cis"  # name of the skipped RoPE tables in a layout


class Llama2cError(ValueError):
    """A file that is not a readable llama2.c model or tokenizer; the message says what is wrong."""


@dataclass
class Llama2cConfig:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int  # always positive here; `shared` carries the classifier flag
    seq_len: int
    shared: bool = True  # True: the classifier is the token embedding (tied)

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_size

    def check(self, where: str = "llama2.c header") -> None:
        for name in _FIELDS:
            v = getattr(self, name)
            if not isinstance(v, int) or not 1 <= v <= LIMITS[name]:
                raise Llama2cError("%s: %s = %r is outside 1..%d (not a llama2.c model, or a corrupt header)"
                                   % (where, name, v, LIMITS[name]))
        if self.dim % self.n_heads:
            raise Llama2cError("%s: dim %d is not a multiple of n_heads %d" % (where, self.dim, self.n_heads))
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise Llama2cError("%s: n_heads %d is not a multiple of n_kv_heads %d"
                               % (where, self.n_heads, self.n_kv_heads))
        if self.head_size % 2:
            raise Llama2cError("%s: head size %d is odd; RoPE needs pairs" % (where, self.head_size))


def layout(cfg: Llama2cConfig, version: int = 0) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every float32 tensor in file order; the RoPE tables (v0) are named FREQ."""
    d, h, n, kv = cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.kv_dim
    per_layer = {
        "attn_norm": (d,), "attn_q": (d, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, d),
        "ffn_norm": (d,), "ffn_gate": (h, d), "ffn_down": (d, h), "ffn_up": (h, d),
    }

    def stack(part: str) -> list[tuple[str, tuple[int, ...]]]:
        return [("blk.%d.%s" % (layer, part), per_layer[part]) for layer in range(n)]

    out: list[tuple[str, tuple[int, ...]]] = []
    if version == 0:
        out.append(("token_embd", (cfg.vocab_size, d)))
        for part in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_down",
                     "ffn_up"):
            out += stack(part)
        out.append(("output_norm", (d,)))
        out.append((FREQ, (2, cfg.seq_len, cfg.head_size // 2)))
    elif version == 1:
        out += stack("attn_norm") + stack("ffn_norm")
        out.append(("output_norm", (d,)))
        out.append(("token_embd", (cfg.vocab_size, d)))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_down", "ffn_up"):
            out += stack(part)
    else:
        raise Llama2cError("llama2.c file version %d is not supported (0 and 1 are: float32)" % version)
    if not cfg.shared:
        out.append(("output", (cfg.vocab_size, d)))
    return out


def expected_size(cfg: Llama2cConfig, version: int = 0) -> int:
    header = V0_HEADER if version == 0 else V1_HEADER
    return header + 4 * sum(int(np.prod(shape)) for _, shape in layout(cfg, version))


def read_header(f: BinaryIO, size: int, where: str = "llama2.c model") -> tuple[Llama2cConfig, int, int]:
    """(config, version, data offset) from an open binary file of `size` bytes."""
    f.seek(0)
    head = f.read(V1_HEADER)
    if len(head) < V0_HEADER:
        raise Llama2cError("%s: truncated: %d bytes, the header alone is %d" % (where, size, V0_HEADER))
    magic = struct.unpack_from("<I", head, 0)[0]
    if magic == MAGIC:
        if len(head) < V1_HEADER:
            raise Llama2cError("%s: truncated: %d bytes, the version-1 header is %d" % (where, size, V1_HEADER))
        version = struct.unpack_from("<i", head, 4)[0]
        if version == 2:
            raise Llama2cError("%s: version 2 (Q8_0) llama2.c files are not supported; export the model with "
                               "llama2.c's export.py --version 0 or 1 (float32)" % where)
        if version != 1:
            raise Llama2cError("%s: llama2.c file version %d is not supported (0 and 1 are)" % (where, version))
        vals = struct.unpack_from("<7i", head, 8)
        shared_flag = head[36]
        if vals[5] < 0 or shared_flag not in (0, 1):
            raise Llama2cError("%s: corrupt version-1 header (vocab_size %d, shared flag %d)"
                               % (where, vals[5], shared_flag))
        cfg = Llama2cConfig(*vals, shared=bool(shared_flag))
        offset = V1_HEADER
    else:
        version = 0
        vals = list(struct.unpack_from("<7i", head, 0))
        shared = vals[5] > 0
        vals[5] = abs(vals[5])
        cfg = Llama2cConfig(*vals, shared=shared)
        offset = V0_HEADER
    cfg.check(where)
    want = expected_size(cfg, version)
    if size < want:
        raise Llama2cError("%s: truncated: the header (dim %d, %d layers, vocab %d%s) needs %d bytes, the file has %d"
                           % (where, cfg.dim, cfg.n_layers, cfg.vocab_size, "" if cfg.shared else ", untied classifier",
                              want, size))
    if size > want:
        raise Llama2cError("%s: %d bytes after the last tensor (the header needs exactly %d): not a llama2.c v%d "
                           "model, or a wrong vocab_size sign (shared classifier flag)" % (where, size - want, want,
                                                                                          version))
    return cfg, version, offset


def open_model(path: PathLike) -> tuple[Llama2cConfig, int, dict[str, np.ndarray]]:
    """(config, version, name -> float32 array) for a llama2.c model; arrays are read-only memory maps.
    The RoPE tables (FREQ) are left out."""
    where = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        cfg, version, pos = read_header(f, size, where)
    out: dict[str, np.ndarray] = {}
    for name, shape in layout(cfg, version):
        count = int(np.prod(shape))
        if name != FREQ:
            out[name] = np.memmap(path, dtype="<f4", mode="r", offset=pos, shape=shape)
        pos += 4 * count
    return cfg, version, out


def write_model(path: PathLike, cfg: Llama2cConfig, weights: Mapping[str, np.ndarray], version: int = 0) -> int:
    """Write a llama2.c model (MBF names for the weights; 'output' only when not shared). Returns its size.
    The v0 RoPE tables are written as llama2.c's export does (cos, sin of pos * 10000**(-2i/head_size))."""
    cfg.check("llama2.c config")
    chunks: list[bytes] = []
    if version == 0:
        vocab = cfg.vocab_size if cfg.shared else -cfg.vocab_size
        chunks.append(struct.pack("<7i", cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, vocab,
                                  cfg.seq_len))
    elif version == 1:
        head = struct.pack("<Ii7iB", MAGIC, 1, cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads,
                           cfg.vocab_size, cfg.seq_len, int(cfg.shared))
        chunks.append(head + bytes(V1_HEADER - len(head)))
    for name, shape in layout(cfg, version):
        if name == FREQ:
            half = cfg.head_size // 2
            freqs = ROPE_THETA ** (-np.arange(half) * 2.0 / cfg.head_size)
            ang = np.outer(np.arange(cfg.seq_len), freqs)
            chunks.append(np.cos(ang).astype("<f4").tobytes() + np.sin(ang).astype("<f4").tobytes())
            continue
        if name not in weights:
            raise Llama2cError("write_model: weight '%s' %r missing" % (name, shape))
        a = np.asarray(weights[name], dtype="<f4")
        if a.shape != shape:
            raise Llama2cError("write_model: weight '%s' has shape %r, the config needs %r" % (name, a.shape, shape))
        chunks.append(a.tobytes())
    data = b"".join(chunks)
    Path(path).write_bytes(data)
    return len(data)


@dataclass
class Llama2cTokenizer:
    tokens: list[bytes]
    scores: list[float]
    max_token_length: int


def read_tokenizer(path: PathLike, vocab_size: int | None = None) -> Llama2cTokenizer:
    """Read a llama2.c tokenizer.bin; with vocab_size, the file must hold exactly that many tokens."""
    where = os.fspath(path)
    data = Path(path).read_bytes()
    if len(data) < 4:
        raise Llama2cError("%s: truncated llama2.c tokenizer (%d bytes)" % (where, len(data)))
    max_len = struct.unpack_from("<i", data, 0)[0]
    if not 1 <= max_len <= 1 << 16:
        raise Llama2cError("%s: max_token_length %d is not plausible: not a llama2.c tokenizer" % (where, max_len))
    tokens: list[bytes] = []
    scores: list[float] = []
    pos = 4
    while pos < len(data) and (vocab_size is None or len(tokens) < vocab_size):
        if pos + 8 > len(data):
            raise Llama2cError("%s: truncated in token %d's score/length" % (where, len(tokens)))
        score, n = struct.unpack_from("<fi", data, pos)
        if not 0 <= n <= max_len:
            raise Llama2cError("%s: token %d has length %d, outside 0..max_token_length %d"
                               % (where, len(tokens), n, max_len))
        if pos + 8 + n > len(data):
            raise Llama2cError("%s: truncated in token %d's bytes" % (where, len(tokens)))
        tokens.append(data[pos + 8:pos + 8 + n])
        scores.append(score)
        pos += 8 + n
    if vocab_size is not None and len(tokens) != vocab_size:
        raise Llama2cError("%s: holds %d tokens, the model's vocab_size is %d" % (where, len(tokens), vocab_size))
    if pos != len(data):
        raise Llama2cError("%s: %d bytes after token %d (the model's vocab_size is %d)"
                           % (where, len(data) - pos, len(tokens), len(tokens)))
    if not tokens:
        raise Llama2cError("%s: no tokens" % where)
    return Llama2cTokenizer(tokens, scores, max_len)


def write_tokenizer(path: PathLike, tokens: list[bytes], scores: list[float],
                    max_token_length: int | None = None) -> int:
    """Write a llama2.c tokenizer.bin; returns its size."""
    if len(tokens) != len(scores):
        raise Llama2cError("write_tokenizer: %d tokens but %d scores" % (len(tokens), len(scores)))
    longest = max((len(t) for t in tokens), default=1)
    if max_token_length is None:
        max_token_length = longest
    if longest > max_token_length:
        raise Llama2cError("write_tokenizer: a token of %d bytes exceeds max_token_length %d" % (longest,
                                                                                                max_token_length))
    out = bytearray(struct.pack("<i", max_token_length))
    for t, s in zip(tokens, scores):
        out += struct.pack("<fi", s, len(t)) + t
    Path(path).write_bytes(bytes(out))
    return len(out)


# ---- the MBF's form of a tokenizer.bin: the L2CT blob that shared/sptok.py reads (docs/MBF.md) ----

L2CT_MAGIC = b"L2CT"
L2CT_HEADER = 32
_NONE = 0xFFFFFFFF


def byte_fallback(tok: Llama2cTokenizer) -> bool:
    """Whether token 3 + b is "<0xBB>" for every byte b: run.c's byte fallback assumes that layout."""
    if len(tok.tokens) < 259:
        return False
    return all(tok.tokens[3 + b].upper() == ("<0x%02X>" % b).encode().upper() for b in range(256))


def tokenizer_blob(tok: Llama2cTokenizer, bos: int = 1, eos: int = 2) -> bytes:
    """The L2CT blob of a llama2.c tokenizer: piece offsets, score ranks (dense, so equal scores keep
    equal priority), the ids in byte order, the pieces; u16 entries when everything fits, else u32."""
    n = len(tok.tokens)
    if not tok.tokens:
        raise Llama2cError("tokenizer: no tokens")
    if any(s != s for s in tok.scores):
        raise Llama2cError("tokenizer: a score is NaN")
    pieces = b"".join(tok.tokens)
    uniq = sorted(set(np.float32(s).item() for s in tok.scores))
    rank_of = {s: i for i, s in enumerate(uniq)}
    ranks = [rank_of[np.float32(s).item()] for s in tok.scores]
    order = sorted(range(n), key=lambda i: (tok.tokens[i], i))
    wide = max(n, len(pieces), len(uniq)) >= 0xFFFF
    item = "I" if wide else "H"
    offs = [0]
    for t in tok.tokens:
        offs.append(offs[-1] + len(t))
    tables = (struct.pack("<%d%s" % (n + 1, item), *offs) + struct.pack("<%d%s" % (n, item), *ranks)
              + struct.pack("<%d%s" % (n, item), *order) + pieces)
    space = tok.tokens.index(b" ") if b" " in tok.tokens else _NONE
    for what, v in (("bos", bos), ("eos", eos)):
        if not 0 <= v < n:
            raise Llama2cError("tokenizer: %s id %d is outside its %d tokens" % (what, v, n))
    longest = max(1, max(len(t) for t in tok.tokens))
    if longest > 0xFFFF:
        raise Llama2cError("tokenizer: a token of %d bytes is too long" % longest)
    flags = (1 if byte_fallback(tok) else 0) | (2 if wide else 0)
    total = L2CT_HEADER + len(tables)
    head = L2CT_MAGIC + struct.pack("<BBHIIIIII", 1, flags, longest, total, n, binascii.crc32(tables), bos, eos,
                                    space)
    return head + tables
