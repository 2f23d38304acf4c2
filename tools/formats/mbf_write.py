"""Write MBF model files (format: docs/MBF.md) on the host.

The writer lays out and checksums what it is given; it does not quantise. q4 weights arrive already
packed (two int4 per byte, as the kernels module packs them) with their float16 scales as a separate
'<name>.scales' segment. Every file written is re-opened with the portable reader (shared/mbf.py)
before write() returns, so the writer never produces a file the board would refuse.

    from tools.formats.mbf_write import write
    write("draft.mbf", config, tokenizer_bytes, [
        ("token_embd", "q4", (vocab, dim), packed_bytes),
        ("token_embd.scales", "f16", (vocab, dim // 32), scales_f16_array),
        ("output_norm", "f32", (dim,), norm_array),
        ...])
"""

from __future__ import annotations

import binascii
import io
import math
import os
import struct
from collections.abc import Mapping, Sequence
from typing import Union

import numpy as np

from shared import mbf

Buffer = Union[bytes, bytearray, memoryview, np.ndarray]
Segment = tuple[str, str, Sequence[int], Buffer]

# numpy dtype of each MBF dtype's elements (stored little-endian); q4 is packed bytes.
NUMPY_DTYPES: dict[str, str] = {
    "q4": "<u1", "f16": "<f2", "f32": "<f4", "i8": "<i1", "u8": "<u1",
    "i16": "<i2", "u16": "<u2", "i32": "<i4", "q4a": "<u1", "q8": "<i1",
}
PACKED = ("q4", "q4a")  # two elements per byte
WEIGHTS = ("q4", "q4a", "q8")  # grouped weights with a '.scales' segment (q4a also '.mins')
_U32 = 0xFFFFFFFF


class MBFWriteError(ValueError):
    """Input the writer cannot turn into a valid MBF file; the message names the field or segment."""


def layer_name(layer: int, part: str) -> str:
    """The name of one layer's segment, e.g. layer_name(3, 'attn_q') == 'blk.3.attn_q'."""
    return "%s%d.%s" % (mbf.LAYER_PREFIX, layer, part)


def scales_name(name: str) -> str:
    """The f16 scales segment that goes with q4 segment name."""
    return name + mbf.SCALES_SUFFIX


def mins_name(name: str) -> str:
    """The f16 minimums segment that goes with q4a segment name."""
    return name + mbf.MINS_SUFFIX


def _align(n: int) -> int:
    return (n + mbf.ALIGN - 1) // mbf.ALIGN * mbf.ALIGN


def _ascii_field(text: str, width: int, allowed: str, what: str) -> bytes:
    if not isinstance(text, str) or not text:
        raise MBFWriteError("%s must be a non-empty string, got %r" % (what, text))
    if len(text) >= width:
        raise MBFWriteError("%s %r is %d characters; at most %d fit" % (what, text, len(text), width - 1))
    bad = [c for c in text if c not in allowed]
    if bad:
        raise MBFWriteError("%s %r has characters outside [%s]: %r" % (what, text, allowed, "".join(bad)))
    return text.encode("ascii").ljust(width, b"\0")


_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
_NAME_CHARS = _KEY_CHARS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-"


def config_bytes(config: Mapping[str, int | float | bool]) -> bytes:
    """The config table: one 24-byte entry per key, sorted by key (required keys are checked by build)."""
    if not isinstance(config, Mapping):
        raise MBFWriteError("config must be a mapping of key -> int/float/bool")
    if len(config) > mbf.MAX_CONFIG:
        raise MBFWriteError("config has %d keys; at most %d" % (len(config), mbf.MAX_CONFIG))
    specs = {spec[0]: spec for spec in mbf.CONFIG}
    out = bytearray()
    for key in sorted(config):
        value = config[key]
        field = _ascii_field(key, mbf.KEY_FIELD, _KEY_CHARS, "config key")
        if isinstance(value, (bool, np.bool_)):
            value = int(value)
        if isinstance(value, (int, np.integer)):
            value = int(value)
            if not -(1 << 63) <= value < (1 << 63):
                raise MBFWriteError("config '%s' = %d does not fit 64 bits" % (key, value))
            typ, packed = mbf.T_INT, struct.pack("<q", value)
        elif isinstance(value, (float, np.floating)):
            value = float(value)
            if not math.isfinite(value):
                raise MBFWriteError("config '%s' must be finite, got %r" % (key, value))
            typ, packed = mbf.T_FLOAT, struct.pack("<d", value)
        else:
            raise MBFWriteError("config '%s' must be int, float or bool, got %s" % (key, type(value).__name__))
        spec = specs.get(key)
        if spec is not None:
            if spec[1] != typ:
                raise MBFWriteError("config '%s' must be %s" % (key, "an int" if spec[1] == mbf.T_INT else "a float"))
            if not spec[2] <= value <= spec[3]:
                raise MBFWriteError("config '%s' is %r; expected %r..%r" % (key, value, spec[2], spec[3]))
        out += field + bytes((typ,)) + packed
    return bytes(out)


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    count = math.prod(shape)
    if dtype in PACKED:
        return count // 2
    return count * mbf.DTYPES[mbf.DTYPE_CODES[dtype]][1]


def _segment_data(name: str, dtype: str, shape: tuple[int, ...], data: Buffer, group: int) -> bytes:
    what = "segment '%s'" % name
    if dtype in WEIGHTS and shape[-1] % group:
        raise MBFWriteError("%s: %s last dimension %d is not a multiple of group_size %d"
                            % (what, dtype, shape[-1], group))
    nbytes = _nbytes(dtype, shape)
    if isinstance(data, np.ndarray):
        want = np.dtype(NUMPY_DTYPES[dtype])
        if data.dtype.kind != want.kind or data.dtype.itemsize != want.itemsize:
            raise MBFWriteError("%s: array dtype %s does not match MBF %s (numpy %s); convert it first"
                                % (what, data.dtype, dtype, want.name))
        if dtype in PACKED:
            if data.size != nbytes:
                raise MBFWriteError("%s: %s %r packs into %d bytes, the array has %d"
                                    % (what, dtype, shape, nbytes, data.size))
        elif tuple(data.shape) != shape:
            raise MBFWriteError("%s: array shape %r, declared %r" % (what, tuple(data.shape), shape))
        raw = np.ascontiguousarray(data, dtype=want).tobytes()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        raise MBFWriteError("%s: data must be a numpy array or bytes, got %s" % (what, type(data).__name__))
    if len(raw) != nbytes:
        raise MBFWriteError("%s: %s x %r needs %d bytes, got %d" % (what, dtype, shape, nbytes, len(raw)))
    return raw


def _check_segments(segments: Sequence[Segment], group: int) -> list[tuple[str, int, tuple[int, ...], bytes]]:
    if len(segments) > mbf.MAX_SEGMENTS:
        raise MBFWriteError("%d segments; at most %d" % (len(segments), mbf.MAX_SEGMENTS))
    out = []
    seen: dict[str, tuple[str, tuple[int, ...]]] = {}
    for item in segments:
        if not isinstance(item, (tuple, list)) or len(item) != 4:
            raise MBFWriteError("each segment is (name, dtype, shape, data), got %r" % (item,))
        name, dtype, shape, data = item
        _ascii_field(name, mbf.NAME_FIELD, _NAME_CHARS, "segment name")
        if name in seen:
            raise MBFWriteError("duplicate segment name '%s'" % name)
        if dtype not in mbf.DTYPE_CODES:
            raise MBFWriteError("segment '%s': dtype %r; expected one of %s" % (name, dtype, ", ".join(NUMPY_DTYPES)))
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape):
            raise MBFWriteError("segment '%s': shape must be a sequence of ints, got %r" % (name, shape))
        shape = tuple(int(d) for d in shape)
        if not 1 <= len(shape) <= mbf.MAX_DIMS or not all(1 <= d <= _U32 for d in shape):
            raise MBFWriteError("segment '%s': shape %r must have 1..%d dimensions of 1..2**32-1"
                                % (name, shape, mbf.MAX_DIMS))
        raw = _segment_data(name, dtype, shape, data, group)
        seen[name] = (dtype, shape)
        out.append((name, mbf.DTYPE_CODES[dtype], shape, raw))
    for name, (dtype, shape) in seen.items():
        if dtype in WEIGHTS:
            want = shape[:-1] + (shape[-1] // group,)
            for part in (scales_name(name),) + ((mins_name(name),) if dtype == "q4a" else ()):
                got = seen.get(part)
                if got != ("f16", want):
                    raise MBFWriteError("%s segment '%s' needs '%s' of dtype f16 and shape %r, got %r"
                                        % (dtype, name, part, want, got))
        elif name.endswith(mbf.SCALES_SUFFIX) and seen.get(name[: -len(mbf.SCALES_SUFFIX)], ("",))[0] not in WEIGHTS:
            raise MBFWriteError("segment '%s': a '.scales' segment needs its q4 segment (or q4a, q8)" % name)
        elif name.endswith(mbf.MINS_SUFFIX) and seen.get(name[: -len(mbf.MINS_SUFFIX)], ("",))[0] != "q4a":
            raise MBFWriteError("segment '%s': a '.mins' segment needs its q4a segment" % name)
    out.sort(key=lambda s: s[0].encode("ascii"))
    return out


def _pieces(config: Mapping[str, int | float | bool], tokenizer: bytes | bytearray | memoryview,
            segments: Sequence[Segment]) -> list[bytes]:
    """The file as a list of byte strings, in order (header, config, table, CRC, padding, data)."""
    cfg = config_bytes(config)
    for key, _typ, _lo, _hi, required in mbf.CONFIG:
        if required and key not in config:
            raise MBFWriteError("config: missing key '%s'" % key)
    group = int(config["group_size"])
    if not isinstance(tokenizer, (bytes, bytearray, memoryview)):
        raise MBFWriteError("tokenizer must be bytes (its format belongs to the tokenizer module)")
    tok = bytes(tokenizer)
    segs = _check_segments(segments, group)
    meta_len = mbf.HEADER + len(cfg) + mbf.SEG_ENTRY * len(segs)
    tok_off = _align(meta_len + 4)
    pos = tok_off + len(tok)
    table = bytearray()
    layout = []
    for name, code, shape, raw in segs:
        off = _align(pos)
        dims = shape + (0,) * (mbf.MAX_DIMS - len(shape))
        table += struct.pack("<32sBBH4IIII", name.encode("ascii"), code, len(shape), 0, *dims, off, len(raw),
                             binascii.crc32(raw))
        layout.append((off, raw))
        pos = off + len(raw)
    if pos > _U32:
        raise MBFWriteError("the file would be %d bytes; MBF 1.x files are at most 4 GiB" % pos)
    header = struct.pack("<4sHHIHHIIII", mbf.MAGIC, mbf.MAJOR, mbf.MINOR, meta_len, len(cfg) // mbf.CFG_ENTRY,
                         len(segs), tok_off, len(tok), binascii.crc32(tok), pos)
    meta = header + cfg + bytes(table)
    pieces = [meta, struct.pack("<I", binascii.crc32(meta))]
    at = meta_len + 4
    pieces.append(bytes(tok_off - at))
    pieces.append(tok)
    at = tok_off + len(tok)
    for off, raw in layout:
        pieces.append(bytes(off - at))
        pieces.append(raw)
        at = off + len(raw)
    return pieces


def _self_check(stream: io.BufferedIOBase | io.BytesIO, size: int) -> None:
    budget = mbf.DEFAULT_BUDGET + 2 * size  # the host can afford any table the file holds
    try:
        with mbf.open(stream, budget=budget) as r:
            r.verify_all()
    except mbf.MBFError as e:
        raise MBFWriteError("the reader refuses the result: %s" % e) from e


def build(config: Mapping[str, int | float | bool], tokenizer: bytes, segments: Sequence[Segment]) -> bytes:
    """The MBF file as bytes (checked with the reader)."""
    data = b"".join(_pieces(config, tokenizer, segments))
    _self_check(io.BytesIO(data), len(data))
    return data


def write(path: str | os.PathLike[str], config: Mapping[str, int | float | bool], tokenizer: bytes,
          segments: Sequence[Segment]) -> int:
    """Write an MBF file to path; returns its size in bytes. The file is checked with the reader and
    replaced atomically (a failed write leaves no half file behind)."""
    pieces = _pieces(config, tokenizer, segments)
    tmp = "%s.tmp%d" % (os.fspath(path), os.getpid())
    try:
        with open(tmp, "wb") as f:
            for p in pieces:
                f.write(p)
            size = f.tell()
        with open(tmp, "rb") as f:
            _self_check(f, size)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return size
