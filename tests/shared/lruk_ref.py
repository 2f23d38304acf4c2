# lruk_ref.py: slow, obvious LRU-K reference (full access histories, unbounded int clock) for the tests.


class RefLRUK:
    """What shared.lruk.LRUK must do, written the plain way.

    Each cached key keeps the list of all its access times (a Python int clock that just counts up).
    Slots: the first `capacity` misses take slots 0, 1, 2...; later a miss takes its victim's slot.
    Victim: among keys with fewer than k accesses, the one whose last access is oldest; if there are
    none, the key whose k-th most recent access is oldest. An evicted key's history is forgotten.
    `keep` limits the history length (None = keep everything); only the last k entries are ever read,
    so a limit >= k changes nothing and lets long runs fit MicroPython's heap."""

    def __init__(self, capacity, k, keep=None):
        self.capacity = capacity
        self.k = k
        self.keep = keep
        self.clock = 0
        self.history = {}  # key -> [access times, oldest first]
        self.slot = {}  # key -> slot
        self.victim_age = -1  # accesses since the deciding access of the last victim (-1: none)

    def _victim(self):
        best_key = None
        best = None
        for key, times in self.history.items():
            if len(times) < self.k:
                score = (0, times[-1])
            else:
                score = (1, times[-self.k])
            if best is None or score < best:
                best, best_key = score, key
        self.victim_age = self.clock - best[1]
        return best_key

    def access(self, key):
        """Returns (hit, slot, evicted key or -1)."""
        self.clock += 1
        self.victim_age = -1
        if key in self.history:
            times = self.history[key]
            times.append(self.clock)
            if self.keep is not None and len(times) > self.keep:
                del times[0]
            return True, self.slot[key], -1
        evicted = -1
        if len(self.history) < self.capacity:
            slot = len(self.history)
        else:
            evicted = self._victim()
            slot = self.slot.pop(evicted)
            del self.history[evicted]
        self.history[key] = [self.clock]
        self.slot[key] = slot
        return False, slot, evicted

    def eviction_order(self):
        """All cached keys, next victim first (what successive misses would evict)."""
        out = []
        saved = dict(self.history)
        while self.history:
            v = self._victim()
            out.append(v)
            del self.history[v]
        self.history = saved
        return out
