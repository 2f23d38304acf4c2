"""Benchmark shared.lruk on CPython: LRU-K (K=2) against LRU, printed as one JSON object.

Hit rates on a scan trace (a hot set interrupted by one-off keys) and on a Zipf trace (token-like
frequencies), and the speed of LRU-K relative to LRU measured in the same process: LRU is the same
class with K=1 (same fixed-memory machinery), and an OrderedDict LRU for scale. On the Zipf trace the
ratio includes misses (O(capacity) each, and LRU-K misses less); a trace of resident keys times hits.

    python -m tools.bench.lruk [--accesses N] [--seed S]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections import OrderedDict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `shared` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared.lruk import LRUK  # noqa: E402
from host.usage import Parser


def scan_trace(rng: random.Random, n: int, hot: int, burst: int) -> list[int]:
    """`hot` keys (uniform) in bursts of 1..burst accesses, between bursts of 1..burst new keys."""
    out: list[int] = []
    fresh = itertools.count(1 << 20)
    while len(out) < n:
        out.extend(rng.randrange(hot) for _ in range(rng.randint(1, burst)))
        out.extend(next(fresh) for _ in range(rng.randint(1, burst)))
    return out[:n]


def zipf_trace(rng: random.Random, n: int, keys: int, s: float) -> list[int]:
    """Keys 0..keys-1 drawn with probability proportional to 1/rank**s, ranks shuffled over the ids."""
    ids = list(range(keys))
    rng.shuffle(ids)
    cum = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(keys)))
    return rng.choices(ids, cum_weights=cum, k=n)


def hit_rate(cache: LRUK, trace: list[int]) -> float:
    hits = 0
    for key in trace:
        cache.access(key)
        hits += cache.hit
    return hits / len(trace)


class OrderedDictLRU:
    """The idiomatic CPython LRU, for scale only (it allocates freely)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.d: OrderedDict[int, int] = OrderedDict()
        self.hit = False

    def access(self, key: int) -> int:
        d = self.d
        slot = d.get(key)
        if slot is not None:
            d.move_to_end(key)
            self.hit = True
            return slot
        self.hit = False
        if len(d) < self.capacity:
            slot = len(d)
        else:
            _, slot = d.popitem(last=False)
        d[key] = slot
        return slot


def ops_per_s(make, trace: list[int], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        cache = make()
        access = cache.access
        t0 = time.perf_counter()
        for key in trace:
            access(key)
        best = min(best, time.perf_counter() - t0)
    return len(trace) / best


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench lruk", description=__doc__.split("\n\n")[0])
    ap.add_argument("--accesses", type=int, default=100_000, help="accesses per trace (default 100000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the traces (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="timing runs per cache, best kept (default 3)")
    args = ap.parse_args(argv)
    if args.accesses < 1000 or args.repeats < 1:
        ap.error("--accesses must be >= 1000 and --repeats >= 1")

    rng = random.Random(args.seed)
    scan_cap, zipf_cap, zipf_keys, zipf_s = 64, 512, 8192, 0.9
    scan = scan_trace(rng, args.accesses, hot=48, burst=80)
    zipf = zipf_trace(rng, args.accesses, zipf_keys, zipf_s)
    result: dict[str, object] = {
        "python": sys.version.split()[0],
        "accesses": args.accesses,
        "scan": {"capacity": scan_cap, "hot_keys": 48,
                 "hit_rate_lruk2": round(hit_rate(LRUK(scan_cap, 2), scan), 4),
                 "hit_rate_lru": round(hit_rate(LRUK(scan_cap, 1), scan), 4)},
        "zipf": {"capacity": zipf_cap, "keys": zipf_keys, "s": zipf_s,
                 "hit_rate_lruk2": round(hit_rate(LRUK(zipf_cap, 2), zipf), 4),
                 "hit_rate_lru": round(hit_rate(LRUK(zipf_cap, 1), zipf), 4)},
    }
    k2 = ops_per_s(lambda: LRUK(zipf_cap, 2), zipf, args.repeats)
    k1 = ops_per_s(lambda: LRUK(zipf_cap, 1), zipf, args.repeats)
    od = ops_per_s(lambda: OrderedDictLRU(zipf_cap), zipf, args.repeats)
    hits_only = [rng.randrange(zipf_cap) for _ in range(args.accesses)]  # all resident after warm-up
    h2 = ops_per_s(lambda: LRUK(zipf_cap, 2), hits_only, args.repeats)
    h1 = ops_per_s(lambda: LRUK(zipf_cap, 1), hits_only, args.repeats)
    result["speed_on_hits"] = {"ops_per_s_lruk2": round(h2), "ops_per_s_lru": round(h1),
                               "ratio_lruk_over_lru": round(h2 / h1, 3)}
    result["speed_on_zipf"] = {
        "ops_per_s_lruk2": round(k2), "ops_per_s_lru": round(k1), "ops_per_s_ordereddict_lru": round(od),
        "ratio_lruk_over_lru": round(k2 / k1, 3), "ratio_lruk_over_ordereddict_lru": round(k2 / od, 3)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
