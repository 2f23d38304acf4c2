"""Overlapped layer streaming: encoder-layer weights stay on disk, at most two layers are in memory.

LayerStreamer owns two preallocated layer buffers (slots). acquire(l) returns layer l's weights (waiting
for its read if it is still in flight, reading it now if it was not prefetched) and at once starts a
background thread reading layer l+1 into the other slot, so the read overlaps the computation of layer
l. Acquiring a layer releases the one acquired before it (its slot is what the next prefetch
overwrites): the caller must be done with layer l when it asks for l+1. Reads go by file offset
straight into the slot's arrays (readinto), so no layer is ever allocated twice.

Stats: loads, load_s (time spent reading, in whichever thread), wait_s (time the computing thread
spent blocked on a read), max_resident (most slots holding or receiving a layer at once; 2 by
construction, counted to prove it) and io_hidden_fraction = 1 - wait_s / load_s.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import numpy as np

from host.prism.bert import F32, _LAYER_TENSORS, BertConfig, LayerWeights, PrismInputError, layer_shapes
from host.prism.st_file import SafetensorsFile


class _Slot:
    def __init__(self, cfg: BertConfig, f16_elems: int):
        shapes = layer_shapes(cfg)
        total = sum(int(np.prod(s)) for s in shapes.values())
        self.buffer = np.empty(total, F32)  # one allocation per slot, tensors are views into it
        self.arrays: dict[str, np.ndarray] = {}
        off, start = 0, {}
        for f, s in shapes.items():
            n = int(np.prod(s))
            self.arrays[f] = self.buffer[off:off + n].reshape(s)
            start[f] = off
            off += n
        # wq, wk, wv (and bq, bk, bv) lie back to back in the slot: the stacked QKV projection is a view
        h = cfg.hidden_size
        assert start["wk"] == start["wq"] + h * h and start["wv"] == start["wk"] + h * h
        assert start["bk"] == start["bq"] + h and start["bv"] == start["bk"] + h
        self.arrays["wqkv"] = self.buffer[start["wq"]:start["wq"] + 3 * h * h].reshape(3 * h, h)
        self.arrays["bqkv"] = self.buffer[start["bq"]:start["bq"] + 3 * h]
        self.scratch = np.empty(f16_elems, np.float16) if f16_elems else None
        self.layer = -1  # layer held (or being read)
        self.future: Optional[Future] = None
        self.fh = None


class LayerStreamer:
    """Two layer slots filled from a safetensors file by offset; see the module docstring."""

    def __init__(self, st: SafetensorsFile, prefix: str, cfg: BertConfig, prefetch: bool = True):
        self.st, self.prefix, self.cfg, self.prefetch = st, prefix, cfg, prefetch
        names = [self.tensor_name(0, s) for s in _LAYER_TENSORS.values()]
        f16 = max((st.info(n).size for n in names if st.info(n).dtype != F32), default=0)
        self.slots = [_Slot(cfg, f16), _Slot(cfg, f16)]
        for s in self.slots:
            s.fh = open(st.path, "rb")  # one handle per slot: the thread and the caller never share one
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prism-prefetch") if prefetch else None
        self._lock = threading.Lock()
        self._current = -1  # index of the slot handed out last
        self.loads = 0
        self.load_s = 0.0
        self.wait_s = 0.0
        self.max_resident = 0
        self.read_hook = None  # tests: called with the layer index inside every read (e.g. to slow it down)
        self.log: list[tuple[str, int, float]] = []  # ("read_start"/"read_end"/"acquired", layer, time)

    def tensor_name(self, l: int, suffix: str) -> str:
        return "%sencoder.layer.%d.%s" % (self.prefix, l, suffix)

    @property
    def layer_bytes(self) -> int:
        return int(self.slots[0].buffer.nbytes)

    @property
    def io_hidden_fraction(self) -> float:
        return 0.0 if self.load_s <= 0 else max(0.0, min(1.0, 1.0 - self.wait_s / self.load_s))

    def reset_stats(self) -> None:
        self.loads, self.load_s, self.wait_s = 0, 0.0, 0.0
        self.log = []

    def _resident(self) -> int:
        return sum(1 for s in self.slots if s.layer >= 0)

    def _read(self, slot: _Slot, l: int) -> None:
        t0 = time.perf_counter()
        self.log.append(("read_start", l, t0))
        if self.read_hook is not None:
            self.read_hook(l)
        for field, suffix in _LAYER_TENSORS.items():
            self.st.read(slot.fh, self.tensor_name(l, suffix), slot.arrays[field], slot.scratch)
        t1 = time.perf_counter()
        self.log.append(("read_end", l, t1))
        with self._lock:
            self.loads += 1
            self.load_s += t1 - t0

    def _start(self, slot: _Slot, l: int) -> None:
        slot.layer = l
        self.max_resident = max(self.max_resident, self._resident())
        if self._pool is None:
            slot.future = None
            self._read(slot, l)
        else:
            slot.future = self._pool.submit(self._read, slot, l)

    def acquire(self, l: int) -> LayerWeights:
        """Weights of layer l (valid until the next acquire); prefetches layer l+1."""
        if not 0 <= l < self.cfg.num_layers:
            raise PrismInputError("layer %d out of range 0..%d" % (l, self.cfg.num_layers - 1))
        t0 = time.perf_counter()
        idx = next((i for i, s in enumerate(self.slots) if s.layer == l), -1)
        if idx < 0:  # not prefetched: read it into the slot not handed out last
            idx = 1 - self._current if self._current >= 0 else 0
            slot = self.slots[idx]
            self._finish(slot)  # a stale prefetch may still be writing this slot
            slot.layer = -1
            self._start(slot, l)
        slot = self.slots[idx]
        self._finish(slot)
        self.wait_s += time.perf_counter() - t0
        self._current = idx
        self.log.append(("acquired", l, time.perf_counter()))
        nxt = l + 1
        if self.prefetch and nxt < self.cfg.num_layers:
            free = self.slots[1 - idx]
            if free.layer != nxt:
                self._finish(free)
                free.layer = -1
                self._start(free, nxt)
        return LayerWeights(**slot.arrays)

    def prefetch_next(self, l: int) -> None:
        """Start reading layer l into the slot not handed out last (e.g. layer 0 for the next query) and
        release the current one; a no-op when l is already in a slot or prefetching is off."""
        if not self.prefetch or not 0 <= l < self.cfg.num_layers or any(s.layer == l for s in self.slots):
            return
        idx = 1 - self._current if self._current >= 0 else 0
        slot = self.slots[idx]
        self._finish(slot)
        slot.layer = -1
        self._start(slot, l)

    def _finish(self, slot: _Slot) -> None:
        f = slot.future
        if f is not None:
            slot.future = None
            try:
                f.result()
            except BaseException:
                slot.layer = -1
                raise

    def close(self) -> None:
        for s in self.slots:
            try:
                self._finish(s)
            except Exception:
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for s in self.slots:
            if s.fh is not None:
                s.fh.close()
                s.fh = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
