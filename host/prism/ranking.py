"""The result of ranking one query, with its per-query report (latency, peak memory, layers, agreement)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from host.prism.bert import PrismInputError


def check_k(k: object, n: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PrismInputError("k must be a positive integer, got %r" % (k,))
    if k > n:
        raise PrismInputError("k=%d is larger than the number of candidates (%d)" % (k, n))
    return k


@dataclass
class Ranking:
    top: list[int]  # candidate indices, best first (k of them)
    probs: np.ndarray  # [n] relevance probability at the layer each candidate stopped
    exit_layer: np.ndarray  # [n] last layer index computed for each candidate
    num_layers: int
    latency_s: float
    truncated: int = 0  # candidates cut to the model's max length
    tokens: int = 0  # padded tokens per candidate
    peak_bytes: Optional[int] = None  # tracemalloc peak during the query (when tracing), else None
    layer_probs: Optional[np.ndarray] = None  # [layers, n] (full model only)
    stats: dict = field(default_factory=dict)

    @property
    def layers_per_candidate(self) -> float:
        return float(np.mean(self.exit_layer + 1))

    def agreement(self, reference: "Ranking") -> float:
        k = len(reference.top)
        return len(set(self.top[:k]) & set(reference.top)) / float(k)

    def report(self, reference: Optional["Ranking"] = None) -> dict:
        out = {
            "latency_s": round(self.latency_s, 4),
            "peak_bytes": self.peak_bytes,
            "layers_per_candidate": round(self.layers_per_candidate, 3),
            "candidates": int(self.exit_layer.size),
            "top": list(self.top),
            "truncated": self.truncated,
        }
        if reference is not None:
            out["agreement"] = self.agreement(reference)
        out.update(self.stats)
        return out
