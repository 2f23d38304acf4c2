# lruk.py: LRU-K cache index (key -> slot) in fixed memory, with 16-bit logical timestamps that never wrap.
"""LRU-K replacement for caches whose payload lives in the caller's own preallocated buffer.

The cache maps a key (a small integer: a token id, a table row) to a slot 0..capacity-1; the caller keeps
the payload, e.g. a dequantised embedding row, at that slot of its own buffer:

    slot = cache.access(token)
    if not cache.hit:
        load_row(token, rows, slot)       # fill the slot; cache.evicted names the key it replaced, or -1

Victim on a miss with the cache full: entries with fewer than K accesses go first, the least recently
used of them; otherwise the entry whose K-th most recent access is oldest. An evicted key's history is
dropped: if it comes back it starts again with one access.

Keys are stored in full (a hash alone would give false hits, i.e. wrong data). Time is a logical access
counter kept as 16-bit stamps. When the next stamp would not fit 16 bits, every live stamp is replaced
by its rank among the live stamps (a two-pass radix sort into a preallocated scratch array, O(capacity*K)).
Live stamps are all distinct (one per access), so ranking keeps the exact order and no stamp is ever
clamped: an entry untouched for millions of accesses still evicts in the right order. As
capacity*K <= 2**15, at least 2**15 accesses pass between two renumberings. There is no absolute
counter, so no integer grows without bound (ints >= 2**30 would allocate on the boards).

Costs: hit O(K) (open-addressing index of 2*capacity or more buckets, linear probing, backward-shift
deletion); miss O(capacity) (min() over an array of per-slot eviction scores). lookup, insert and
access allocate nothing on MicroPython.
"""
from array import array

from shared.compat import const

MAX_KEY = const(0x3FFFFFFF)  # 2**30 - 1: every key is a small int on every port
MAX_ENTRIES = const(32768)  # capacity * k: a renumbering always leaves >= 2**15 free stamps
MAX_K = const(16)
_STAMPS = const(65536)  # stamps are array('H'): 0..65535
_FRESH = const(65536)  # added to the score of entries with K accesses: they evict after all others
_NONE = const(-1)
_HAS_INDEX = hasattr(array("i"), "index")  # CPython: find the victim at C speed; MicroPython: a loop


class LRUKError(ValueError):
    """Bad capacity, k or key, or a key inserted twice."""


def _filled(code, n, size, value):
    a = array(code, bytearray(n * size))  # no temporary list: on a board n may be large
    if value:
        for i in range(n):
            a[i] = value
    return a


def _int_in(name, v, lo, hi):
    if type(v) is not int or v < lo or v > hi:
        raise LRUKError("%s must be an int in %d..%d, got %r" % (name, lo, hi, v))


class LRUK:
    """Maps up to `capacity` keys (ints 0..2**30-1) to slots; evicts by LRU-K.

    lookup(key) -> slot or -1 (a hit records an access); insert(key) -> slot to fill (records the
    access, sets .evicted); access(key) -> slot, setting .hit and .evicted. peek(key) and `key in
    cache` never record. stamp_limit (default 65536) exists for tests: a small value renumbers often."""

    def __init__(self, capacity, k=2, stamp_limit=_STAMPS):
        _int_in("k", k, 1, MAX_K)
        _int_in("capacity", capacity, 1, MAX_ENTRIES // k)
        _int_in("stamp_limit", stamp_limit, capacity * k + 1, _STAMPS)
        self.capacity = capacity
        self.k = k
        self._limit = stamp_limit
        nb = 4
        while nb < 2 * capacity:  # load factor <= 1/2: probes stay short, an empty bucket always exists
            nb <<= 1
        self._mask = nb - 1
        self._index = _filled("h", nb, 2, _NONE)  # bucket -> slot, -1 empty
        self._keys = _filled("i", capacity, 4, _NONE)  # slot -> key
        self._count = bytearray(capacity)  # slot -> accesses remembered (<= k)
        self._stamps = _filled("H", capacity * k, 2, 0)  # slot*k + j: j-th most recent access
        self._score = _filled("i", capacity, 4, 0)  # slot -> eviction score, lowest goes first
        self._order = _filled("H", capacity * k, 2, 0)  # renumbering scratch
        self._radix = _filled("H", 512, 2, 0)  # renumbering counters: low byte, high byte
        self._size = 0
        self._now = 0  # stamp of the next access
        self.hit = False
        self.evicted = _NONE
        self.renumbers = 0

    def __len__(self):
        return self._size

    def __contains__(self, key):
        return self.peek(key) >= 0

    def key_of(self, slot):
        _int_in("slot", slot, 0, self._size - 1)
        return self._keys[slot]

    def clear(self):
        for i in range(self._mask + 1):
            self._index[i] = _NONE
        for s in range(self.capacity):
            self._keys[s] = _NONE
            self._count[s] = 0
        self._size = 0
        self._now = 0
        self.evicted = _NONE

    def peek(self, key):
        """Slot of key or -1, recording nothing."""
        if type(key) is not int or key < 0 or key > MAX_KEY:
            _int_in("key", key, 0, MAX_KEY)
        idx = self._index
        keys = self._keys
        mask = self._mask
        i = ((key & 0x7FFF) * 0x5BD1) ^ ((key >> 15) * 0x6F4B)  # each product < 2**30
        i = (i ^ (i >> 14)) & mask
        while True:
            s = idx[i]
            if s < 0 or keys[s] == key:
                return s
            i = (i + 1) & mask

    def lookup(self, key):
        """Slot of key, recording the access, or -1 on a miss (then fill the slot insert(key) gives)."""
        slot = self.peek(key)
        if slot >= 0:
            self._touch(slot)
        return slot

    def insert(self, key):
        """Slot for a key not cached; evicts when full (.evicted = victim's key, else -1)."""
        slot = self.peek(key)
        if slot >= 0:
            raise LRUKError("key %d is already cached (slot %d): use lookup() or access()" % (key, slot))
        return self._add(key)

    def access(self, key):
        """lookup, then insert on a miss. Sets .hit; .evicted is the key replaced, or -1."""
        slot = self.peek(key)
        if slot >= 0:
            self.hit = True
            self.evicted = _NONE
            self._touch(slot)
            return slot
        self.hit = False
        return self._add(key)

    def _add(self, key):
        size = self._size
        if size < self.capacity:
            slot = size
            self._size = size + 1
            self.evicted = _NONE
        else:
            slot = self._victim()
            old = self._keys[slot]
            self._unindex(old)
            self.evicted = old
        self._keys[slot] = key
        self._count[slot] = 0
        idx = self._index
        mask = self._mask
        i = ((key & 0x7FFF) * 0x5BD1) ^ ((key >> 15) * 0x6F4B)
        i = (i ^ (i >> 14)) & mask
        while idx[i] >= 0:
            i = (i + 1) & mask
        idx[i] = slot
        self._touch(slot)
        return slot

    def _touch(self, slot):
        now = self._now
        if now >= self._limit:
            self._renumber()
            now = self._now
        self._now = now + 1
        k = self.k
        st = self._stamps
        b = slot * k
        c = self._count[slot]
        if c < k:
            c += 1
            self._count[slot] = c
        j = c - 1  # when full, the oldest remembered access falls off
        while j > 0:
            st[b + j] = st[b + j - 1]
            j -= 1
        st[b] = now
        # Score: the last access for entries with < K accesses, the K-th most recent + 65536 for the
        # rest, so the former always go first. Scores < 2**17 and distinct (so are stamps): no ties.
        if c < k:
            self._score[slot] = now
        else:
            self._score[slot] = st[b + k - 1] + _FRESH

    def _victim(self):
        # Called only when full, so every slot's score is live. min() allocates nothing on MicroPython.
        sc = self._score
        best = min(sc)
        if _HAS_INDEX:
            return sc.index(best)
        for s in range(self.capacity):
            if sc[s] == best:
                return s
        return 0

    def _unindex(self, key):
        # Backward-shift deletion: no tombstones, so probe chains never grow with churn.
        idx = self._index
        keys = self._keys
        mask = self._mask
        i = ((key & 0x7FFF) * 0x5BD1) ^ ((key >> 15) * 0x6F4B)
        i = (i ^ (i >> 14)) & mask
        while keys[idx[i]] != key:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            s = idx[j]
            if s < 0:
                break
            h = keys[s]
            h = ((h & 0x7FFF) * 0x5BD1) ^ ((h >> 15) * 0x6F4B)
            h = (h ^ (h >> 14)) & mask
            if (j - h) & mask >= (j - i) & mask:  # the hole at i lies on s's probe path: move s there
                idx[i] = s
                i = j
        idx[i] = _NONE

    def _renumber(self):
        # Replace every live stamp by its rank (LSD radix sort on the two bytes). Exact: stamps are
        # distinct, so the order of all entries, however old, is kept. Afterwards _now = live stamps.
        k = self.k
        size = self._size
        cnt = self._count
        st = self._stamps
        order = self._order
        rad = self._radix
        for i in range(512):
            rad[i] = 0
        b = 0
        for s in range(size):
            for j in range(cnt[s]):
                v = st[b + j]
                rad[v & 255] += 1
                rad[256 + (v >> 8)] += 1
            b += k
        lo = 0
        hi = 0
        for i in range(256):  # exclusive prefix sums: first position of each byte value
            c = rad[i]
            rad[i] = lo
            lo += c
            c = rad[256 + i]
            rad[256 + i] = hi
            hi += c
        b = 0
        for s in range(size):  # pass 1: stamp positions ordered by low byte
            for j in range(cnt[s]):
                d = st[b + j] & 255
                order[rad[d]] = b + j
                rad[d] += 1
            b += k
        for i in range(lo):  # pass 2, stable by high byte: the place each lands on is its rank
            p = order[i]
            d = 256 + (st[p] >> 8)
            st[p] = rad[d]
            rad[d] += 1
        b = 0
        sc = self._score
        for s in range(size):
            if cnt[s] < k:
                sc[s] = st[b]
            else:
                sc[s] = st[b + k - 1] + _FRESH
            b += k
        self._now = lo
        self.renumbers = (self.renumbers + 1) & MAX_KEY
