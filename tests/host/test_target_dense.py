"""The dense cache's own path (host/llama_np.py: rotated keys kept by logical index, KVCache.kt/vt) gives the
logits of the general path (a sink-less ring cache as large as the text, which rotates every key each
forward), through prefill chunks, single steps, commits of part of a staged block and discards."""

from __future__ import annotations

import numpy as np

from test_target import CFG, RNG_TOKENS, W0, close
from host.llama_np import Target


def test_dense_path_equals_the_general_path_through_commit_and_discard():
    model = Target(CFG, W0)
    dense = model.new_dense_cache(120, staged=8)
    ring = model.new_cache(0, 120, 8)  # same semantics, the general path
    assert dense.dense and not ring.dense
    toks = [int(t) for t in RNG_TOKENS[:100]]
    close(model.feed(dense, toks[:37], chunk=5), model.feed(ring, toks[:37], chunk=5))
    rng = np.random.default_rng(3)
    i = 37
    while i < 100:
        block = toks[i:i + int(rng.integers(1, 7))]
        a, b = model.forward(dense, block), model.forward(ring, block)
        close(a, b)
        if rng.random() < 0.25:  # a rejected block: nothing of it stays, and the slots are written again
            dense.discard()
            ring.discard()
            continue
        keep = int(rng.integers(1, len(block) + 1))
        dense.commit(keep)
        ring.commit(keep)
        i += keep
    assert dense.live == ring.live == 100
    close(model.forward(dense, [7]), model.forward(ring, [7]))
    # the ring's own K/V (the cache's state) is the same in both
    n = dense.live
    close(dense.k[:, dense.logical_slots()[:n]], ring.k[:, ring.logical_slots()[:n]])
