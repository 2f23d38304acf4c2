# test_lruk.py: LRU-K matches the slow reference access by access, keeps exact order across renumberings,
# beats LRU on scans, never gives a false hit, allocates nothing on its hot paths, rejects bad input.
from array import array

import testkit
from lruk_ref import RefLRUK
from shared import lruk

_MAX_KEY = (1 << 30) - 1


def _check_against_ref(cache, ref, key, where):
    slot = cache.access(key)
    hit, rslot, rev = ref.access(key)
    if cache.hit != hit or slot != rslot or cache.evicted != rev:
        raise AssertionError("%s key %d: got hit=%s slot=%d evicted=%d, reference hit=%s slot=%d evicted=%d"
                             % (where, key, cache.hit, slot, cache.evicted, hit, rslot, rev))
    return hit


def test_random_traces_match_reference():
    # (capacity, k, key space, stamp_limit): small limits renumber every few accesses.
    configs = ((1, 1, 3, 65536), (1, 2, 3, 3), (4, 1, 9, 65536), (4, 2, 9, 9), (8, 2, 20, 17),
               (8, 3, 20, 25), (16, 2, 40, 65536), (16, 3, 24, 49), (33, 2, 100, 67), (5, 4, 12, 21))
    for n, (cap, k, space, limit) in enumerate(configs):
        rng = testkit.Rng(100 + n)
        cache = lruk.LRUK(cap, k, stamp_limit=limit)
        ref = RefLRUK(cap, k)
        for i in range(6000):
            _check_against_ref(cache, ref, rng.below(space), "config %d access %d" % (n, i))
        assert len(cache) == min(cap, len(ref.history))
        if limit < 65536:
            assert cache.renumbers > 100, cache.renumbers


def test_lookup_insert_api_matches_reference():
    rng = testkit.Rng(5)
    cache = lruk.LRUK(6, 2, stamp_limit=15)
    ref = RefLRUK(6, 2)
    for i in range(5000):
        key = rng.below(14) * 65536 + 3  # every key has the same low 16 bits
        before = key in cache
        slot = cache.lookup(key)
        hit, rslot, rev = ref.access(key)
        assert (slot >= 0) == hit == before, (i, key)
        if slot < 0:
            assert cache.lookup(key) == -1  # a miss records nothing and adds nothing
            slot = cache.insert(key)
            assert cache.evicted == rev, (i, key, cache.evicted, rev)
            assert cache.peek(key) == slot
        assert slot == rslot and cache.key_of(slot) == key, (i, key, slot, rslot)


def _long_trace(cache, ref, n, seed):
    """A hot window of 5..7 keys drifting up by a key or two per phase (2000..14000 accesses, one in
    eight phases 60000 longer), plus rare one-off keys used twice. Keys that left the window sit in
    the cache through several renumberings and are then evicted, oldest first. Returns the evictions
    decided by an access older than 65536 accesses (which a plain 16-bit delta could not order)."""
    rng = testkit.Rng(seed)
    left = 0
    base = 0
    width = 0
    old = 0
    for i in range(n):
        if left == 0:
            left = 2000 + rng.below(12000)
            if rng.below(8) == 0:
                left += 60000 + rng.below(100000)
            base += 1 + rng.below(3) // 2
            width = 5 + rng.below(3)
        left -= 1
        if rng.below(20000) == 0:
            key = 1000000 + rng.below(1 << 29)
            _check_against_ref(cache, ref, key, "access %d" % i)
        else:
            key = base + rng.below(width)
        _check_against_ref(cache, ref, key, "access %d" % i)
        if ref.victim_age > 65536:
            old += 1
    return old


def _drain(cache, k, first_key):
    """Evict every cached key with fresh keys given k accesses each (they then evict last): the order
    the victims come out in is the cache's whole eviction order."""
    out = []
    for i in range(cache.capacity):
        cache.access(first_key + i)
        assert not cache.hit
        out.append(cache.evicted)
        for _ in range(k - 1):
            cache.access(first_key + i)
    return out


def test_exact_order_after_a_million_accesses():
    # 1.2e6 accesses on both interpreters (about 10 s on the MicroPython unix port, 5 s on CPython): the
    # default 16-bit stamps are renumbered >= 18 times while entries sit stale; every hit, slot and
    # victim must match the reference, and so must the whole eviction order at the end.
    n = 1200000
    cache = lruk.LRUK(24, 2)
    ref = RefLRUK(24, 2, keep=2)
    old = _long_trace(cache, ref, n, 7)
    assert cache.renumbers >= 18, cache.renumbers
    assert old >= 60, "only %d evictions were decided by accesses older than 65536" % old
    expected = ref.eviction_order()
    assert _drain(cache, 2, 1 << 28) == expected
    print("%d accesses, %d renumberings, %d evictions decided by stale stamps" % (n, cache.renumbers, old))


def test_stale_entries_keep_their_order():
    # K=3: A..D in slots 0..3 get 2 accesses each, the latest in order D, C, B, A (reverse of their
    # slots). Then 3*65536 accesses to E and F. A clamp of old stamps to one value would tie A..D and
    # evict in slot order; the right order is D, C, B, A, then E (older 3rd access) before F.
    cache = lruk.LRUK(6, 3)
    for key in (10, 11, 12, 13):
        cache.access(key)
    for key in (13, 12, 11, 10):
        cache.access(key)
    for i in range(3 * 65536):
        cache.access(20 + (i & 1))  # E=20 and F=21 alternate; F is accessed last
    assert cache.renumbers >= 3
    assert _drain(cache, 3, 1000) == [13, 12, 11, 10, 20, 21]
    # K=2, all entries with K accesses: the 2nd most recent decides (A, B, C, D), not the last access.
    cache = lruk.LRUK(6, 2)
    for key in (10, 11, 12, 13, 13, 12, 11, 10):
        cache.access(key)
    for i in range(3 * 65536):
        cache.access(20 + (i & 1))
    assert _drain(cache, 2, 1000) == [10, 11, 12, 13, 20, 21]


def _scan_hits(cache, seed, n):
    """Runs a scan trace through cache; returns (hits, accesses to the hot set). The hot set is 24 keys
    (uniform) for a cache of 32, in bursts of 1..60 accesses alternating with bursts of 1..60 keys never
    seen before (table walks, one-off queries)."""
    rng = testkit.Rng(seed)
    fresh = 1000
    hits = 0
    hot = 0
    done = 0
    while done < n:
        for _ in range(1 + rng.below(60)):
            cache.access(rng.below(24))
            hot += 1
            if cache.hit:
                hits += 1
        for _ in range(1 + rng.below(60)):
            cache.access(fresh)
            fresh += 1
            if cache.hit:
                hits += 1
        done = hot + fresh - 1000
    return hits, hot, done


def test_lru_k_beats_lru_on_scans():
    k2, hot, n = _scan_hits(lruk.LRUK(32, 2), 3, 40000)
    k1, _, _ = _scan_hits(lruk.LRUK(32, 1), 3, 40000)
    print("hits on a scan trace of %d accesses (%d to the hot set): LRU-2 %d (%d.%d%%), LRU %d (%d.%d%%)" % (
        n, hot, k2, k2 * 100 // n, k2 * 1000 // n % 10, k1, k1 * 100 // n, k1 * 1000 // n % 10))
    assert k2 * 100 >= hot * 98, (k2, hot)  # LRU-2 keeps the hot set through the scans
    assert k2 * 100 > k1 * 150 and k2 - k1 > n // 10, (k2, k1)  # LRU lets every scan flush it


def test_no_false_hits_on_colliding_keys():
    # Keys equal in their low 16 bits (and in their low 15, which the index hashes first).
    cache = lruk.LRUK(16, 2)
    present = [7 + (i << 16) for i in range(16)]
    for key in present:
        cache.access(key)
    for key in present:
        slot = cache.lookup(key)
        assert slot >= 0 and cache.key_of(slot) == key
    for i in range(16, 2000):
        assert cache.peek(7 + (i << 16)) == -1, i
        assert cache.peek(7 + ((2 * i + 1) << 15)) == -1, i
    assert cache.peek(7) == cache.lookup(7) == 0
    edge = lruk.LRUK(2, 1)
    assert edge.access(_MAX_KEY) == 0 and edge.access(0) == 1
    assert edge.peek(_MAX_KEY & ~0xFFFF) == -1 and edge.peek(_MAX_KEY) == 0 and edge.peek(0) == 1
    # churn: colliding keys evicted and re-inserted many times, index deletions included
    rng = testkit.Rng(11)
    cache = lruk.LRUK(16, 2, stamp_limit=40)
    ref = RefLRUK(16, 2)
    for i in range(8000):
        key = 0xBEEF + (rng.below(40) << 16)
        _check_against_ref(cache, ref, key, "churn %d" % i)


def _access_all(arg):
    cache, trace = arg
    for key in trace:
        cache.access(key)


def _lookup_insert_all(arg):
    cache, trace = arg
    for key in trace:
        if cache.lookup(key) < 0:
            cache.insert(key)


def test_hot_paths_allocate_nothing():
    rng = testkit.Rng(9)
    trace = array("i", [rng.below(40) + (rng.below(4) << 16) for _ in range(3000)])
    small = lruk.LRUK(32, 2, stamp_limit=70)  # renumbers every few dozen accesses
    testkit.run_locked(_access_all, (small, trace))
    testkit.run_locked(_lookup_insert_all, (small, trace))
    assert small.renumbers > 50
    # the real 16-bit limit: 70000 accesses cross a renumbering under the lock
    big = lruk.LRUK(64, 3)
    long_trace = array("i", [rng.below(96) for _ in range(7000)])
    for _ in range(10):
        testkit.run_locked(_access_all, (big, long_trace))
    assert big.renumbers == 1, big.renumbers
    # memory is fixed: the same heap after another 70000 accesses
    before = testkit.heap_in_use()
    for _ in range(10):
        _access_all((big, long_trace))
    after = testkit.heap_in_use()
    assert before == after, (before, after)
    if testkit.IS_MP:
        base = testkit.heap_in_use()
        c = lruk.LRUK(64, 2)
        print("LRUK(64, 2) holds %d heap bytes" % (testkit.heap_in_use() - base))
        assert c.capacity == 64


def test_clear_and_len():
    cache = lruk.LRUK(3, 2)
    for key in (1, 2, 3, 4):
        cache.access(key)
    assert len(cache) == 3 and cache.evicted == 1 and 1 not in cache and 4 in cache
    cache.clear()
    assert len(cache) == 0 and 4 not in cache and cache.evicted == -1
    assert cache.insert(4) == 0 and cache.evicted == -1 and cache.key_of(0) == 4


def test_peek_records_nothing():
    cache = lruk.LRUK(2, 1)
    cache.access(1)
    cache.access(2)
    assert cache.peek(1) == 0  # would make 2 the victim if it counted
    cache.access(3)
    assert cache.evicted == 1
    cache.lookup(2)  # lookup counts: 3 is now least recent
    cache.access(4)
    assert cache.evicted == 3


def test_bad_input_is_rejected():
    E = lruk.LRUKError
    assert issubclass(E, ValueError)
    for cap in (0, -1, 16385, 1.5, "3", True, None):
        e = testkit.raises(E, lruk.LRUK, cap)
        assert "capacity" in str(e), str(e)
    for k in (0, 17, 2.0, False):
        e = testkit.raises(E, lruk.LRUK, 4, k)
        assert "k must" in str(e), str(e)
    for cap, k in ((32769, 1), (10923, 3), (2049, 16)):  # capacity * k > 32768
        e = testkit.raises(E, lruk.LRUK, cap, k)
        assert "capacity" in str(e), str(e)
    for limit in (8, 65537, "x"):
        e = testkit.raises(E, lruk.LRUK, 4, 2, limit)
        assert "stamp_limit" in str(e), str(e)
    cache = lruk.LRUK(4, 2)
    for key in (-1, 1 << 30, 1 << 40, "a", 1.0, True, None, b"1"):
        for fn in (cache.lookup, cache.insert, cache.access, cache.peek):
            e = testkit.raises(E, fn, key)
            assert "key must be an int in 0..1073741823" in str(e), str(e)
    assert len(cache) == 0
    cache.insert(5)
    e = testkit.raises(E, cache.insert, 5)
    assert "already cached" in str(e), str(e)
    assert len(cache) == 1
    for slot in (-1, 1, "0"):
        testkit.raises(E, cache.key_of, slot)
