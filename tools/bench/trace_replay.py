"""Replay a gateway's --trace file through the target alone: is every verified token the target's own
greedy choice after the same prefix? (Speculative decoding at temperature 0 must commit exactly those.)
Used by `edgetwin bench board` and the emulated-board tests."""

from __future__ import annotations

import json
from pathlib import Path


def greedy_replay(trace: Path, node: str, target, sink: int, window: int) -> dict:
    """Replay one node's committed stream from a gateway --trace file through the target alone, one token
    at a time in a fresh sink + window cache (a new one at each stream restart, a PROMPT at base 0), and
    compare every verified token (VERDICT ids) with the target's greedy choice after the same prefix.
    Returns {"verified", "equal", "first_difference" (index among the verified, or None), "gaps"}."""
    import numpy as np

    cache = None
    pos = 0
    logits = None
    verified = equal = gaps = 0
    first = None
    for line in Path(trace).read_text().splitlines():
        ev = json.loads(line)
        if ev["node"] != node:
            continue
        ids = ev["ids"]
        start = ev["end"] - len(ids)
        if start == 0 or cache is None:
            cache = target.new_cache(sink, window, 8)
            pos = 0
            logits = None
        if start != pos:  # the trace misses part of the stream: restart the replay at the next base 0
            gaps += 1
            cache = None
            continue
        for t in ids:
            if ev["kind"] == "verdict":
                if logits is not None and int(np.argmax(logits)) == t:
                    equal += 1
                elif first is None:
                    first = verified
                verified += 1
            logits = target.forward(cache, [t])[0]
            cache.commit(1)
            pos += 1
    return {"verified": verified, "equal": equal, "first_difference": first, "gaps": gaps}
