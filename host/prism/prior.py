"""The retrieval prior: what a candidate's place in retrieval's order adds to its relevance logit.

`ask` hands PRISM its candidates in retrieval's order (FTS5 bm25 with the log-word boosts, the window an
alarm's record found pinned first), and that order is already good evidence: on ask's held-out candidates
it ranks the answer window first in most questions. The reranker's score at every exit is

    logit(candidate) = head(h[CLS]) + rank_log * log(1 + place) + pinned * [found by the record]

so the model changes that order where it is confident instead of discarding it, and its early exits share
the part of the score that needs no layer at all. rank_log (negative) and pinned ship in the model's
prism.json: fitted on validation questions for the shipped reranker (tools/train/reranker_prior.py), or
learned with the model by a training phase that has it (tools/train/train_reranker_ask.py). A model
directory without them ranks on head(h[CLS]) alone, and so do candidates in no particular order
(`edgetwin bench models`' corpus windows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from host.prism.bert import PrismInputError, PrismModelError


@dataclass(frozen=True)
class RetrievalPrior:
    rank_log: float  # logit per log(1 + place in retrieval's order), place 0 first (negative: later is worse)
    pinned: float  # logit for a window found by an alarm's record rather than by words

    @classmethod
    def from_settings(cls, data: object, where: str) -> Optional["RetrievalPrior"]:
        """The prism.json "prior" entry ({"rank_log": x, "pinned": y}), or None when the file has none."""
        if data is None:
            return None
        if not isinstance(data, dict) or set(data) != {"rank_log", "pinned"}:
            raise PrismModelError('%s: "prior" must be {"rank_log": number, "pinned": number}, got %r' % (where, data))
        for key in ("rank_log", "pinned"):
            v = data[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise PrismModelError('%s: prior "%s" must be a finite number, got %r' % (where, key, v))
        return cls(float(data["rank_log"]), float(data["pinned"]))

    def logits(self, n: int, pinned: int = 0) -> np.ndarray:
        """[n] float64: the prior of candidates 0..n-1 in retrieval's order, the first `pinned` found by the record."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise PrismInputError("the prior needs a positive number of candidates, got %r" % (n,))
        if isinstance(pinned, bool) or not isinstance(pinned, int) or not 0 <= pinned <= n:
            raise PrismInputError("pinned must be an int in 0..%d, got %r" % (n, pinned))
        out = self.rank_log * np.log1p(np.arange(n, dtype=np.float64))
        out[:pinned] += self.pinned
        return out

    def to_settings(self) -> dict:
        return {"rank_log": round(self.rank_log, 6), "pinned": round(self.pinned, 6)}


def check_prior(prior: Optional[np.ndarray], n: int) -> Optional[np.ndarray]:
    """A caller's per-candidate prior as float64 [n] (None stays None); one clear error otherwise."""
    if prior is None:
        return None
    p = np.asarray(prior, dtype=np.float64).reshape(-1)
    if p.size != n:
        raise PrismInputError("prior has %d values for %d candidates" % (p.size, n))
    if not np.all(np.isfinite(p)):
        raise PrismInputError("prior values must be finite")
    return p
