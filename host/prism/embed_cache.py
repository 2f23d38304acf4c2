"""Embedding-row cache: only the word-embedding rows of active tokens are in memory, kept by LRU-K.

The table stays in the safetensors file; a row is read by file offset the first time a query needs it
and kept in a preallocated [capacity, hidden] buffer at the slot shared/lruk.py gives it. Capacity
defaults to ~10 % of the vocabulary. Accounting is per distinct token per call (a token repeated within
one query is one lookup): hits + misses = distinct tokens looked up.
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from host.prism.bert import F32, PrismModelError
from host.prism.st_file import SafetensorsFile
from shared.lruk import LRUK, MAX_ENTRIES


class EmbeddingRowCache:
    """rows(ids) -> float32 [*ids.shape, hidden], reading missing rows from the file."""

    def __init__(self, st: SafetensorsFile, name: str, capacity: int, k: int = 2):
        shape = st.shape(name)
        if shape is None or len(shape) != 2:
            raise PrismModelError("missing 2-D tensor %s in %s" % (name, st.path))
        self.st, self.name = st, name
        self.vocab, self.hidden = int(shape[0]), int(shape[1])
        capacity = max(1, min(int(capacity), self.vocab, MAX_ENTRIES // k))
        self.capacity = capacity
        self.lru = LRUK(capacity, k)
        self.buffer = np.empty((capacity, self.hidden), F32)
        self.fh = open(st.path, "rb")
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def reset_stats(self) -> None:
        self.hits = self.misses = 0

    def rows(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        uniq, inverse = np.unique(ids, return_inverse=True)
        out = np.empty((uniq.size, self.hidden), F32)
        lru, buf = self.lru, self.buffer
        for j, tok in enumerate(uniq.tolist()):
            slot = lru.access(tok)
            if lru.hit:
                self.hits += 1
            else:
                self.misses += 1
                self.st.read_row(self.fh, self.name, tok, buf[slot])
            out[j] = buf[slot]  # copied at once: a later miss of this call may reuse the slot
        return out[inverse.reshape(-1)].reshape(ids.shape + (self.hidden,))

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


class StreamedWeights:
    """A WeightSource over a safetensors file for the PRISM engine.

    Small tensors (position/type embeddings, LayerNorms, pooler, classifier) are read once and kept;
    word-embedding rows come from an EmbeddingRowCache; encoder-layer tensors are not kept here (the
    engine reads them through a LayerStreamer) and get() of one reads a fresh copy."""

    def __init__(self, st: SafetensorsFile, cache_fraction: float = 0.1, cache_k: int = 2):
        self.st = st
        self.origin = st.path
        self._kept: dict[str, np.ndarray] = {}
        self.word_name: Optional[str] = None
        for prefix in ("bert.", ""):
            if st.shape(prefix + "embeddings.word_embeddings.weight") is not None:
                self.word_name = prefix + "embeddings.word_embeddings.weight"
                break
        self.cache: Optional[EmbeddingRowCache] = None
        if self.word_name is not None:
            shape = st.shape(self.word_name)
            if shape is not None and len(shape) == 2:
                cap = max(1, int(round(shape[0] * cache_fraction)))
                self.cache = EmbeddingRowCache(st, self.word_name, cap, cache_k)

    def names(self) -> Iterable[str]:
        return self.st.names()

    def shape(self, name: str):
        return self.st.shape(name)

    def get(self, name: str) -> np.ndarray:
        arr = self._kept.get(name)
        if arr is not None:
            return arr
        arr = self.st.load(name)
        if ".encoder.layer." not in "." + name and name != self.word_name:
            self._kept[name] = arr
        return arr

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        if name == self.word_name and self.cache is not None:
            return self.cache.rows(index)
        return self.get(name)[index]

    def kept_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self._kept.values())

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
