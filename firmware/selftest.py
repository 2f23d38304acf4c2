# selftest.py: on-board self-test of the portable core; prints one JSON line "SELFTEST {...}".
"""Run on the board (real or virtual) after a deploy:

    import firmware.selftest as t; t.run()

It reads /board.json for the KV shape, exercises the ring KV cache (drafts, rejections, wraps) with
the heap locked where the port allows it, the LRU-K cache on a scan trace, the versioned store (CAS,
and real threads where the port has them) and a KV snapshot round trip, and reports what each check
found and the heap each structure took."""
import gc
import json
import sys

try:
    import micropython
except ImportError:  # CPython
    micropython = None

from shared import kvsnap, lruk, ringkv, seqlock


def _locked(fn, arg):
    # Prove a hot loop allocates nothing where the port can say so (heap_lock raises on allocation).
    lock = getattr(micropython, "heap_lock", None)
    if lock is None:
        return fn(arg), False
    gc.collect()
    lock()
    try:
        r = fn(arg)
    finally:
        micropython.heap_unlock()
    return r, True


def _alloc():
    gc.collect()
    return gc.mem_alloc() if hasattr(gc, "mem_alloc") else 0


class _KVDriver:
    """Drafts blocks of k tokens and accepts a varying prefix, as the deferred verifier would."""

    def __init__(self, kv, k):
        self.kv = kv
        self.k = k
        self.max_pos = 0
        self.rejected = 0

    def run(self, blocks):
        kv = self.kv
        k = self.k
        d = kv.kv_dim
        for b in range(blocks):
            for j in range(k):
                s = kv.stage()
                o = kv.row(0, kv.staged_slot(s))
                kv.k[o] = (b + j) & 127
                kv.v[o + d - 1] = j
                p = kv.staged_position(s)
                if p > self.max_pos:
                    self.max_pos = p
            n = (b * 7) % (k + 1)  # accepted prefix 0..k
            self.rejected += k - n
            kv.commit(n)
        return kv.tokens


def _check_kv(prof):
    kv_p = prof["kv"]
    a0 = _alloc()
    kv = ringkv.RingKV(2, 64, kv_p["sink"], kv_p["window"], kv_p["staged"])
    drv = _KVDriver(kv, prof["draft_k"])
    a1 = _alloc()
    tokens, locked = _locked(drv.run, 2000)
    a2 = _alloc()
    limit = kv.sink + kv.window + kv.staged - 1
    ok = kv.live == kv.sink + kv.window and drv.max_pos <= limit and a2 == a1
    # a snapshot of the committed state restores into a fresh cache of the same shape
    import io

    buf = io.BytesIO()
    kvsnap.save(kv, buf)
    twin = ringkv.RingKV(2, 64, kv_p["sink"], kv_p["window"], kv_p["staged"])
    buf.seek(0)
    kvsnap.load(twin, buf)
    snap_ok = twin.live == kv.live and twin.head == kv.head
    for i in range(kv.live):
        for layer in range(kv.layers):
            a = kv.row(layer, kv.slot_of(i))
            snap_ok = snap_ok and kv.k[a:a + kv.kv_dim] == twin.k[a:a + kv.kv_dim]
            snap_ok = snap_ok and kv.v[a:a + kv.kv_dim] == twin.v[a:a + kv.kv_dim]
    return {"ok": ok and snap_ok, "tokens_committed": tokens, "drafts_rejected": drv.rejected,
            "max_position": drv.max_pos, "position_limit": limit, "heap_locked": locked,
            "heap_bytes": a1 - a0, "heap_growth_after_run": a2 - a1, "snapshot_bytes": kvsnap.size(kv),
            "snapshot_ok": snap_ok}


def _hit_rate(cache, trace_len):
    # A hot set of 12 keys, with a burst of 20 one-off keys (a scan) after every 40 hot accesses:
    # each burst flushes plain LRU; LRU-2 evicts the once-seen scan keys first.
    hits = 0
    scan = 1000
    for i in range(trace_len):
        if i % 60 < 40:
            key = i % 12
        else:
            key = scan
            scan += 1
        cache.access(key)
        if cache.hit:
            hits += 1
    return hits


def _check_lruk():
    a0 = _alloc()
    c2 = lruk.LRUK(16, 2)
    a1 = _alloc()
    h2, locked = _locked(lambda n: _hit_rate(c2, n), 4000)
    h1 = _hit_rate(lruk.LRUK(16, 1), 4000)
    return {"ok": h2 > h1, "hits_lru2": h2, "hits_lru": h1, "accesses": 4000, "heap_locked": locked,
            "heap_bytes": a1 - a0}


def _check_seqlock(prof):
    store = seqlock.Versioned(4)
    v = store.version(0)
    ok = store.cas(0, v, 42) and not store.cas(0, v, 43) and store.read(0) == 42
    threads = 0
    if prof["threads"]:
        try:
            import _thread
        except ImportError:
            _thread = None
        if _thread is not None:
            done = [0]
            lock = _thread.allocate_lock()

            def worker(n):
                for _ in range(n):
                    while True:
                        ver = store.version(1)
                        if store.cas(1, ver, store.read(1) + 1):
                            break
                with lock:
                    done[0] += 1

            for _ in range(2):
                _thread.start_new_thread(worker, (500,))
            import time

            for _ in range(2000):
                if done[0] == 2:
                    break
                time.sleep_ms(5) if hasattr(time, "sleep_ms") else time.sleep(0.005)
            threads = 2
            ok = ok and done[0] == 2 and store.read(1) == 1000
    return {"ok": ok, "threads": threads, "cas_increments": store.read(1)}


def run(profile_path="/board.json"):
    gc.collect()
    start = _alloc()
    try:
        with open(profile_path) as f:
            prof = json.loads(f.read())
    except OSError:
        print("SELFTEST " + json.dumps({"ok": False, "error": "no %s: deploy the build first" % profile_path}))
        return False
    report = {"board": prof["name"], "interpreter": sys.implementation.name,
              "version": ".".join(str(x) for x in sys.implementation.version[:3])}
    report["ringkv"] = _check_kv(prof)
    report["lruk"] = _check_lruk()
    report["seqlock"] = _check_seqlock(prof)
    gc.collect()
    report["heap_in_use"] = _alloc()
    report["heap_used_by_selftest"] = report["heap_in_use"] - start
    if hasattr(gc, "mem_free"):
        report["heap_free"] = gc.mem_free()
    report["ok"] = report["ringkv"]["ok"] and report["lruk"]["ok"] and report["seqlock"]["ok"]
    print("SELFTEST " + json.dumps(report))
    return report["ok"]
