"""Property tests: shared.lruk.LRUK against the slow reference on random capacities, K and traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lruk_ref import RefLRUK
from shared import lruk

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def configs(draw):
    capacity = draw(st.integers(1, 8))
    k = draw(st.integers(1, 3))
    # a small stamp_limit renumbers every few accesses; 65536 is the real one
    limit = draw(st.one_of(st.integers(capacity * k + 1, capacity * k + 12), st.just(65536)))
    return capacity, k, limit


# Small key spaces make hits, evictions and re-insertions frequent. `spread` maps key i to one of three
# layouts: plain, equal low 16 bits, or large keys near 2**30.
keys = st.integers(0, 11)
spreads = st.sampled_from([lambda i: i, lambda i: 5 + (i << 16), lambda i: (1 << 30) - 1 - (i << 13)])
ops = st.lists(st.tuples(st.sampled_from(["access", "lookup", "peek"]), keys), max_size=300)


@SETTINGS
@given(configs(), spreads, ops)
def test_every_access_matches_reference(config, spread, trace):
    capacity, k, limit = config
    cache = lruk.LRUK(capacity, k, stamp_limit=limit)
    ref = RefLRUK(capacity, k)
    for op, i in trace:
        key = spread(i)
        if op == "peek":
            want = ref.slot.get(key, -1)
            assert cache.peek(key) == want and (key in cache) == (want >= 0)
            continue
        if op == "access":
            slot = cache.access(key)
            hit, evicted = cache.hit, cache.evicted
        else:
            slot = cache.lookup(key)
            hit = slot >= 0
            evicted = -1
            if not hit:
                slot = cache.insert(key)
                evicted = cache.evicted
        assert (hit, slot, evicted) == ref.access(key)
        assert cache.key_of(slot) == key
    assert len(cache) == len(ref.history)
    for key, slot in ref.slot.items():
        assert cache.peek(key) == slot
    # the whole remaining eviction order: fresh keys, each given k accesses so they evict last
    order = ref.eviction_order()
    drained = []
    for j in range(capacity):
        for n in range(k):
            assert (cache.access(1000 + j), cache.hit, cache.evicted) == _as_cache(ref.access(1000 + j))
            if n == 0 and cache.evicted != -1:  # free slots are filled first, evicting nothing
                drained.append(cache.evicted)
    assert drained == order


def _as_cache(ref_result):
    hit, slot, evicted = ref_result
    return slot, hit, evicted


@SETTINGS
@given(st.integers(1, 40), st.lists(st.integers(0, (1 << 30) - 1), min_size=1, max_size=400))
def test_index_survives_churn_with_large_keys(capacity, trace):
    """Backward-shift deletion in the key index: after any churn every cached key is found at its slot
    and no evicted key is found."""
    cache = lruk.LRUK(capacity, 1)
    ref = RefLRUK(capacity, 1)
    gone = set()
    for key in trace:
        slot = cache.access(key)
        hit, rslot, evicted = ref.access(key)
        assert (cache.hit, slot, cache.evicted) == (hit, rslot, evicted)
        if evicted >= 0:
            gone.add(evicted)
        gone.discard(key)
    for key, slot in ref.slot.items():
        assert cache.peek(key) == slot
    for key in gone:
        assert cache.peek(key) == -1


@pytest.mark.parametrize("k", [1, 2, 3])
def test_renumbering_keeps_order_at_the_real_limit(k):
    """Across the real 16-bit limit: a cache kept full of entries of every age matches the reference."""
    capacity = 10
    cache = lruk.LRUK(capacity, k)
    ref = RefLRUK(capacity, k, keep=k)
    x = 12345
    for i in range(3 * 65536 + 100):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        key = (x >> 8) % 3 if i % 97 else 100 + (x >> 8) % 40
        assert (cache.access(key), cache.hit, cache.evicted) == _as_cache(ref.access(key))
    assert cache.renumbers >= 3
