"""A safetensors file read by offset: the header is parsed once, tensor data is read on demand.

Layout (the format's own spec): u64 little-endian header length N, N bytes of JSON mapping each tensor
name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end of the header),
then the data. Only F32 and F16 tensors are readable here; reads go into caller-owned buffers with
readinto (no intermediate bytes objects), so a streaming source can reuse the same two layer buffers.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Iterable, Optional

import numpy as np

from host.prism.bert import F32, PrismModelError

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2")}  # readable as weights
OTHER = {"BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}  # sized, never read
MAX_HEADER = 100 << 20  # the spec's own limit on the JSON header


class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "offset", "nbytes")

    def __init__(self, name: str, dtype: np.dtype, shape: tuple[int, ...], offset: int, nbytes: int):
        self.name, self.dtype, self.shape, self.offset, self.nbytes = name, dtype, shape, offset, nbytes

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class SafetensorsFile:
    """Header of one .safetensors file; read(name, out) / read_rows(name, ids, out) by file offset."""

    def __init__(self, path: str):
        self.path = path
        if not os.path.isfile(path):
            raise PrismModelError("missing weights file %s" % path)
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as fh:
                head = fh.read(8)
                if len(head) != 8:
                    raise ValueError("file shorter than 8 bytes")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER or 8 + n > size:
                    raise ValueError("header length %d does not fit the file (%d bytes)" % (n, size))
                meta = json.loads(fh.read(n).decode("utf-8"))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise PrismModelError("cannot read %s (corrupt or unsupported safetensors file): %s" % (path, exc)) from None
        if not isinstance(meta, dict):
            raise PrismModelError("cannot read %s (corrupt safetensors file): header is not a JSON object" % path)
        base = 8 + n
        self.tensors: dict[str, TensorInfo] = {}
        for name, d in meta.items():
            if name == "__metadata__":
                continue
            try:
                dt, shape, (b, e) = d["dtype"], tuple(int(s) for s in d["shape"]), d["data_offsets"]
                b, e = int(b), int(e)
            except (KeyError, TypeError, ValueError):
                raise PrismModelError("cannot read %s (corrupt safetensors file): bad entry for %s" % (path, name)) from None
            if dt in DTYPES:
                item, dtype = DTYPES[dt].itemsize, DTYPES[dt]
            elif dt in OTHER:
                item, dtype = OTHER[dt], dt
            else:
                raise PrismModelError("cannot read %s (corrupt safetensors file): tensor %s has unknown dtype %r" % (path, name, dt))
            info = TensorInfo(name, dtype, shape, base + b, e - b)
            if e < b or base + e > size or info.nbytes != info.size * item:
                raise PrismModelError("cannot read %s (corrupt or truncated safetensors file): tensor %s lies outside "
                                      "the file or has the wrong size" % (path, name))
            self.tensors[name] = info

    def names(self) -> Iterable[str]:
        return self.tensors.keys()

    def shape(self, name: str) -> Optional[tuple[int, ...]]:
        t = self.tensors.get(name)
        return None if t is None else t.shape

    def info(self, name: str) -> TensorInfo:
        try:
            t = self.tensors[name]
        except KeyError:
            raise PrismModelError("missing tensor %s in %s" % (name, self.path)) from None
        if isinstance(t.dtype, str):
            raise PrismModelError("%s: tensor %s has dtype %s; only F32 and F16 weights are supported" % (self.path, name, t.dtype))
        return t

    def read(self, fh, name: str, out: np.ndarray, scratch: Optional[np.ndarray] = None) -> np.ndarray:
        """Read tensor `name` into the float32 array `out` (same number of elements) through file object fh.

        F16 tensors need `scratch` (a float16 array of at least that many elements) or allocate one."""
        t = self.info(name)
        flat = out.reshape(-1)
        if flat.size != t.size or out.dtype != F32:
            raise PrismModelError("tensor %s: buffer of %d %s for %d elements" % (name, flat.size, out.dtype, t.size))
        if t.dtype == F32:
            self._readinto(fh, t.offset, memoryview(flat.view(np.uint8)), name)
        else:
            tmp = np.empty(t.size, np.float16) if scratch is None else scratch.reshape(-1)[: t.size]
            self._readinto(fh, t.offset, memoryview(tmp.view(np.uint8)), name)
            np.copyto(flat, tmp)
        return out

    def read_row(self, fh, name: str, row: int, out: np.ndarray) -> None:
        """Row `row` of a 2-D tensor into out (float32 [cols])."""
        t = self.info(name)
        cols = t.shape[1]
        off = t.offset + row * cols * t.dtype.itemsize
        if t.dtype == F32:
            self._readinto(fh, off, memoryview(out.view(np.uint8)), name)
        else:
            tmp = np.empty(cols, np.float16)
            self._readinto(fh, off, memoryview(tmp.view(np.uint8)), name)
            np.copyto(out, tmp)

    def load(self, name: str) -> np.ndarray:
        """A fresh float32 copy of one tensor."""
        t = self.info(name)
        out = np.empty(t.shape, F32)
        with open(self.path, "rb") as fh:
            return self.read(fh, name, out)

    def _readinto(self, fh, offset: int, mv: memoryview, name: str) -> None:
        fh.seek(offset)
        got = fh.readinto(mv)
        if got != len(mv):
            raise PrismModelError("%s: tensor %s is truncated (read %d of %d bytes)" % (self.path, name, got or 0, len(mv)))
