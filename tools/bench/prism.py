"""PRISM against the plain full model (and transformers), in one run: prints one JSON object.

    edgetwin bench prism --json                      # 50 held-out questions x 20 candidates x 512 tokens, K=5
    edgetwin bench prism --questions 5 --curve-questions 1 --no-torch     # a quick look

Variants (same questions, same candidates, same thread count, one after the other in this process):
  full   BertCrossEncoder (host/prism/bert.py), all weights resident, the whole batch at once, every layer;
  prism  host/prism/engine.py: pruning (threshold calibrated on separate questions to the target top-K
         agreement), layer streaming with prefetch, chunked execution, embedding-row cache;
  torch  transformers' BertForSequenceClassification, same weights, torch CPU.
Memory: peak_mem_ratio uses tracemalloc (numpy reports its buffers to it): the bytes the variant keeps
between queries (weights, caches, layer slots) plus the peak of the query's transient allocations,
averaged over queries. torch allocations are invisible to tracemalloc, so the torch ratio (and a
cross-check of the numpy one) uses the peak RSS of a fresh subprocess per variant, above its RSS after
imports (VmHWM - VmRSS after imports), over --rss-questions questions.
Speed of the numpy encoder itself: numpy_vs_torch_layer_ratio / _full_ratio (and _p25 / _p75) are medians
over --speed-reps interleaved repetitions of numpy time / torch time, one thread each, on the first held-out
question's candidates: encoder layer 0 on the same input, and the whole forward; numpy_vs_torch_short
repeats them on --speed-short-tokens windows (edgetwin ask's size).
"""

from __future__ import annotations

import os

_THREADS = os.environ.get("EDGETWIN_BENCH_THREADS", "1")
_ENV = {"OMP_NUM_THREADS": _THREADS, "OPENBLAS_NUM_THREADS": _THREADS, "MKL_NUM_THREADS": _THREADS,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",  # nothing may download
        "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402
from host.usage import Parser

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GOAL = {"latency_ratio": 0.2, "peak_mem_ratio": 0.2, "top5_agreement": 0.99}
PAPER = {"latency_ratio": 0.108, "peak_mem_ratio": 0.087, "top5_agreement": 0.998}


# ---------------------------------------------------------------------------------------------- inputs


def pick_model(model_dir: str | None) -> tuple[str, str, bool]:
    """(directory, description, init_head): --model, else the fine-tuned reranker, else MiniLM + random head."""
    from host import weights

    if model_dir:
        return model_dir, "given: %s" % model_dir, False
    get = getattr(weights, "reranker_dir", None)
    if get is not None:
        try:
            d = Path(get())
            if (d / "model.safetensors").is_file():
                return str(d), "fine-tuned reranker (host.weights.reranker_dir)", False
        except Exception:
            pass
    return str(weights.minilm_dir()), "all-MiniLM-L6-v2 + random head (seed 0): fine-tuned reranker not available", True


def load_questions(split: str, n: int, n_candidates: int, window_tokens: int, seed: int) -> tuple[list[dict], str]:
    """Questions from tools.train.qa_corpus when present, else a synthetic plant-log set (said in the JSON)."""
    try:
        from tools.train import qa_corpus  # type: ignore[attr-defined]
    except ImportError:
        qa_corpus = None
    if qa_corpus is not None:
        qs = qa_corpus.load_split(split, n=n, n_candidates=n_candidates, window_tokens=window_tokens)
        return list(qs)[:n], "tools.train.qa_corpus split %r" % split
    return synthetic_questions(n, n_candidates, seed + (0 if split == "heldout" else 7919)), "synthetic plant-log windows (tools.train.qa_corpus absent)"


def synthetic_questions(n: int, n_candidates: int, seed: int, lines_per_window: int = 24) -> list[dict]:
    """Windows of plant-log lines (shared/plant.py); the question names a machine and its alarm."""
    from shared import plant

    p = plant.Plant(seed % (1 << 31), 8, fault_every_h=1)
    lines: list[str] = []
    while len(lines) < lines_per_window * max(40, n_candidates * 2):
        for _ in range(p.step()):
            pass
        lines.extend(p.lines())
    wins = [lines[i:i + lines_per_window] for i in range(0, len(lines) - lines_per_window, lines_per_window)]
    out = []
    import random

    rng = random.Random(seed)
    for q in range(n):
        target = rng.randrange(len(wins))
        ids = [m for m in p.ids]
        mach = ids[rng.randrange(len(ids))]
        others = rng.sample([i for i in range(len(wins)) if i != target], n_candidates - 1)
        cands = []
        for j, wi in enumerate([target] + others):
            text = "\n".join(wins[wi])
            rel = 1 if j == 0 else 0
            if rel:
                text = text + "\nALARM %s trip interlock overcurrent, operator reset required" % mach
            cands.append({"text": text, "node": "node-%d" % (wi % 4), "t0_ms": wi * 1000, "t1_ms": wi * 1000 + 999,
                          "relevance": rel})
        rng.shuffle(cands)
        out.append({"question": "why did %s trip?" % mach, "candidates": cands})
    return out


# ---------------------------------------------------------------------------------------------- variants


def progress(msg: str) -> None:
    if os.environ.get("EDGETWIN_BENCH_QUIET") != "1":
        print("[bench prism] " + msg, file=sys.stderr, flush=True)


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def run_full(model_dir: str, init_head: bool, questions: list[dict], k: int) -> dict:
    from host.prism.bert import BertCrossEncoder
    from host.prism.monolithic import rank_full

    b0 = _traced()
    model = BertCrossEncoder.from_pretrained(model_dir, init_head=init_head, seed=0)
    resident = _traced() - b0
    rows = []
    for q in questions:
        texts = [c["text"] for c in q["candidates"]]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        r = rank_full(model, q["question"], texts, k)
        peak = tracemalloc.get_traced_memory()[1] - base
        rows.append({"top": r.top, "latency_s": r.latency_s, "peak_bytes": resident + peak, "layer_probs": r.layer_probs,
                     "truncated": r.truncated, "tokens": r.tokens})
        progress("full %d/%d: %.1f s" % (len(rows), len(questions), r.latency_s))
    del model
    gc.collect()
    return {"resident_bytes": resident, "rows": rows}


def run_prism(model_dir: str, init_head: bool, questions: list[dict], k: int, threshold: float,
              references: list[list[int]] | None, clusters: int = 3) -> dict:
    from host.prism.engine import Prism

    b0 = _traced()
    prism = Prism.from_pretrained(model_dir, init_head=init_head, seed=0, threshold=threshold, clusters=clusters)
    resident = _traced() - b0
    rows = []
    cache = prism.weights.cache
    hits0, miss0 = cache.hits, cache.misses
    io = []
    for i, q in enumerate(questions):
        texts = [c["text"] for c in q["candidates"]]
        r = prism.rank(q["question"], texts, k)
        row = {"top": r.top, "latency_s": r.latency_s, "peak_bytes": resident + (r.peak_bytes or 0),
               "layers_per_candidate": r.layers_per_candidate, "events": r.stats["prune_events"]}
        if references is not None:
            ref = references[i]
            row["agreement"] = len(set(r.top) & set(ref)) / float(k)
        io.append(r.stats["io_hidden_fraction"])
        rows.append(row)
        progress("prism %d/%d: %.1f s, %.2f layers/candidate%s" % (
            len(rows), len(questions), r.latency_s, r.layers_per_candidate,
            ", agreement %.2f" % row["agreement"] if "agreement" in row else ""))
    out = {"resident_bytes": resident, "rows": rows, "io_hidden_fraction": sum(io) / len(io),
           "embed_cache_hit_rate": (cache.hits - hits0) / max(1, cache.hits - hits0 + cache.misses - miss0),
           "embed_cache_rows": cache.capacity, "vocab": prism.cfg.vocab_size,
           "layer_bytes": prism.streamer.layer_bytes, "chunk_budget_bytes": prism.memory_budget}
    prism.close()
    del prism
    gc.collect()
    return out


def torch_model(model_dir: str, init_head: bool):
    import numpy as np
    import torch
    import transformers

    from host.prism.bert import BertCrossEncoder

    transformers.logging.set_verbosity_error()
    hf = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=1).eval()
    if init_head:  # the same random head as our variants
        ours = BertCrossEncoder.from_pretrained(model_dir, init_head=True, seed=0).head_tensors()
        with torch.no_grad():
            hf.classifier.weight.copy_(torch.from_numpy(ours["classifier.weight"]))
            hf.classifier.bias.copy_(torch.from_numpy(ours["classifier.bias"]))
            hf.bert.pooler.dense.weight.copy_(torch.from_numpy(np.ascontiguousarray(ours["bert.pooler.dense.weight"])))
            hf.bert.pooler.dense.bias.copy_(torch.from_numpy(ours["bert.pooler.dense.bias"]))
    return hf


def run_torch(model_dir: str, init_head: bool, questions: list[dict], k: int, threads: int) -> dict:
    import numpy as np
    import torch

    from host.prism import wordpiece
    from host.prism.bert import _read_config

    torch.set_num_threads(threads)
    hf = torch_model(model_dir, init_head)
    cfg = _read_config(model_dir)
    tok = wordpiece.load_tokenizer(model_dir, cfg.max_position)
    rows = []
    for q in questions:
        texts = [c["text"] for c in q["candidates"]]
        t0 = time.perf_counter()
        ids, types, mask = wordpiece.encode_pairs(tok, q["question"], texts)
        with torch.no_grad():
            logits = hf(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                        attention_mask=torch.from_numpy(mask)).logits.numpy()
        top = [int(i) for i in np.argsort(-logits[:, 0], kind="stable")[:k]]
        rows.append({"top": top, "latency_s": time.perf_counter() - t0})
        progress("torch %d/%d: %.1f s" % (len(rows), len(questions), rows[-1]["latency_s"]))
    return {"rows": rows}


# ---------------------------------------------------------------------------------------------- numpy vs torch


def _spread(ratios: list[float]) -> dict:
    """Median, p25 and p75 of a list of ratios."""
    import numpy as np

    return {"median": round(float(np.median(ratios)), 4), "p25": round(float(np.percentile(ratios, 25)), 4),
            "p75": round(float(np.percentile(ratios, 75)), 4)}


def _interleaved(ours, theirs, reps: int, min_s: float = 0.2) -> list[float]:
    """ours() / theirs() time per repetition, the two alternating which runs first (A B, B A, ...) so that
    load changing on a shared machine hits both alike. A call shorter than min_s (a layer on short windows)
    is repeated within each timing, so that scheduler noise stays small next to it."""
    t0 = time.perf_counter()
    theirs()
    inner = max(1, int(min_s / max(time.perf_counter() - t0, 1e-6)) + 1)
    ratios = []
    for r in range(reps):
        pair = (ours, theirs) if r % 2 == 0 else (theirs, ours)
        took = {}
        for f in pair:
            t0 = time.perf_counter()
            for _ in range(inner):
                f()
            took[f] = time.perf_counter() - t0
        ratios.append(took[ours] / took[theirs])
    return ratios


def numpy_vs_torch(model_dir: str, init_head: bool, question: dict, reps: int, threads: int,
                   min_s: float = 0.2) -> dict:
    """numpy (host/prism/bert.py) / torch (transformers, SDPA attention) time on the same candidates and
    weights, one thread each: encoder layer 0 on the same embedded input, and the whole forward (ids to
    logits, tokenization excluded). Each after one warm-up call."""
    import numpy as np
    import torch

    from host.prism.bert import BertCrossEncoder

    torch.set_num_threads(threads)
    ours = BertCrossEncoder.from_pretrained(model_dir, init_head=init_head, seed=0)
    hf = torch_model(model_dir, init_head)
    batch = ours.encode(question["question"], [c["text"] for c in question["candidates"]])
    ids, types, mask = (torch.from_numpy(a) for a in (batch.input_ids, batch.token_type_ids, batch.attention_mask))
    hidden = ours.embed(batch.input_ids, batch.token_type_ids)
    hidden_t = torch.from_numpy(hidden.copy())
    mask_t = mask.bool()[:, None, None, :]  # SDPA's boolean mask: True = attend
    layer_t = hf.bert.encoder.layer[0]

    def layer_np():
        return ours.layer(0, hidden, batch.attention_mask)

    def layer_torch():
        with torch.no_grad():
            return layer_t(hidden_t, mask_t)

    def full_np():
        return ours.forward(batch)

    def full_torch():
        with torch.no_grad():
            return hf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits

    diff = float(np.abs(full_np() - full_torch().numpy()).max())
    layer_np(), layer_torch()
    out = {"tokens": int(ids.shape[1]), "candidates": int(ids.shape[0]), "reps": reps, "min_s": min_s,
           "max_logit_diff": diff}
    for name, a, b in (("layer", layer_np, layer_torch), ("full", full_np, full_torch)):
        sp = _spread(_interleaved(a, b, reps, min_s))
        out[name + "_ratio"], out[name + "_ratio_p25"], out[name + "_ratio_p75"] = sp["median"], sp["p25"], sp["p75"]
    return out


# ---------------------------------------------------------------------------------------------- RSS workers


def _status(key: str) -> int:
    """A /proc/self/status value in bytes (VmRSS: now; VmHWM: peak of this process image, reset by exec,
    unlike ru_maxrss, which a child inherits from the parent it was forked from)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(variant: str, model_dir: str, init_head: bool, qfile: str, k: int, threshold: float, threads: int,
           clusters: int = 3) -> dict:
    """Runs in a fresh subprocess: peak RSS of one variant above the RSS after its imports."""
    import numpy  # noqa: F401

    if variant == "torch":
        import torch  # noqa: F401
        import transformers  # noqa: F401
    from host.prism import engine, monolithic  # noqa: F401

    questions = json.loads(Path(qfile).read_text())
    after_imports = _status("VmRSS")
    t0 = time.perf_counter()
    if variant == "full":
        from host.prism.bert import BertCrossEncoder

        m = BertCrossEncoder.from_pretrained(model_dir, init_head=init_head, seed=0)
        for q in questions:
            monolithic.rank_full(m, q["question"], [c["text"] for c in q["candidates"]], k)
    elif variant == "prism":
        p = engine.Prism.from_pretrained(model_dir, init_head=init_head, seed=0, threshold=threshold, clusters=clusters)
        for q in questions:
            p.rank(q["question"], [c["text"] for c in q["candidates"]], k)
        p.close()
    else:
        run_torch(model_dir, init_head, questions, k, threads)
    peak = _status("VmHWM")
    return {"variant": variant, "rss_after_imports": after_imports, "peak_rss": peak,
            "peak_above_imports": peak - after_imports, "seconds": time.perf_counter() - t0}


def rss_variant(variant: str, model_dir: str, init_head: bool, questions: list[dict], k: int, threshold: float,
                threads: int, clusters: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as td:
        qf = os.path.join(td, "q.json")
        Path(qf).write_text(json.dumps(questions))
        cmd = [sys.executable, "-m", "tools.bench.prism", "--worker", variant, "--model", model_dir, "--qfile", qf,
               "--k", str(k), "--threshold", repr(threshold), "--clusters", str(clusters)] + (
                   ["--init-head"] if init_head else [])
        env = dict(os.environ, EDGETWIN_BENCH_THREADS=str(threads))
        res = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=3600)
        if res.returncode != 0:
            return {"variant": variant, "error": (res.stderr.strip().splitlines() or ["?"])[-1]}
        return json.loads(res.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- main


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def compare(full: dict, prism: dict) -> dict:
    fl = _mean(r["latency_s"] for r in full["rows"])
    pl = _mean(r["latency_s"] for r in prism["rows"])
    fm = _mean(r["peak_bytes"] for r in full["rows"])
    pm = _mean(r["peak_bytes"] for r in prism["rows"])
    ag = [r["agreement"] for r in prism["rows"]]
    return {
        "latency_ratio": round(pl / fl, 4), "peak_mem_ratio": round(pm / fm, 4),
        "top5_agreement": round(_mean(ag), 4), "top5_agreement_min": min(ag),
        "layers_per_candidate_mean": round(_mean(r["layers_per_candidate"] for r in prism["rows"]), 3),
        "full_latency_s_mean": round(fl, 3), "prism_latency_s_mean": round(pl, 3),
        "full_peak_bytes_mean": int(fm), "prism_peak_bytes_mean": int(pm),
        "questions": len(prism["rows"]),
    }


def main(argv: list[str] | None = None) -> int:
    """Set the thread/offline environment (before numpy loads: this module imports it lazily), run, restore it."""
    from tools.environ import environ

    with environ(_ENV):
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench prism", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON object")
    ap.add_argument("--model", help="reranker directory (default: the fine-tuned reranker, else MiniLM + random head)")
    ap.add_argument("--questions", type=int, default=50, help="held-out questions (default 50)")
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--window-tokens", type=int, default=512)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.99, help="top-K agreement the calibration must reach")
    ap.add_argument("--calib-questions", type=int, default=10, help="questions (not held out) to calibrate on")
    ap.add_argument("--threshold", type=float, help="skip calibration and use this CV threshold")
    ap.add_argument("--clusters", default="3,4,5,6", help="k-means cluster counts the calibration chooses from "
                    "(one number with --threshold; default 3,4,5,6)")
    ap.add_argument("--curve", default="10,20,50,100", help="candidate counts for the curve ('' for none)")
    ap.add_argument("--curve-questions", type=int, default=3, help="questions per curve point other than --candidates")
    ap.add_argument("--rss-questions", type=int, default=2, help="questions per RSS subprocess (0: skip)")
    ap.add_argument("--torch-questions", type=int, default=0, help="questions for the torch timing (default 0: all)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--speed-reps", type=int, default=7, help="interleaved repetitions of the numpy/torch layer and "
                    "full-model timings (default 7; 0: skip)")
    ap.add_argument("--speed-short-tokens", type=int, default=150, help="window tokens of the second numpy/torch "
                    "timing, as edgetwin ask uses (default 150; 0: skip)")
    ap.add_argument("--speed-min-s", type=float, default=0.2, help="a timed call shorter than this is repeated "
                    "within each repetition (default 0.2 s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", choices=("full", "prism", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--qfile", help=argparse.SUPPRESS)
    ap.add_argument("--init-head", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    threads = int(_THREADS)
    try:
        counts = [int(c) for c in args.clusters.split(",") if c.strip()]
        if not counts or min(counts) < 2:
            raise ValueError
    except ValueError:
        ap.error("--clusters: comma-separated integers >= 2, got %r" % args.clusters)
    if args.threshold is not None and len(counts) != 1:
        ap.error("--threshold skips calibration: give one --clusters count with it")
    clusters = counts[0]

    if args.worker:
        res = worker(args.worker, args.model, args.init_head, args.qfile, args.k, args.threshold or 0.3, threads,
                     clusters)
        print(json.dumps(res))
        return 0

    from host.prism.calibrate import calibrate

    t_start = time.perf_counter()
    model_dir, model_desc, init_head = pick_model(args.model)
    questions, qsource = load_questions("heldout", args.questions, args.candidates, args.window_tokens, args.seed)
    if len(questions) < args.questions:
        print("warning: only %d questions available" % len(questions), file=sys.stderr)
    tracemalloc.start()

    # calibration (separate questions): full-model layer probabilities replayed over a threshold grid
    calib_info: dict = {}
    threshold = args.threshold
    if threshold is None:
        cq, csource = load_questions("validation", args.calib_questions, args.candidates, args.window_tokens, args.seed)
        cf = run_full(model_dir, init_head, cq, args.k)
        cal = calibrate([r["layer_probs"] for r in cf["rows"]], args.k, args.target, clusters=counts)
        threshold, clusters = cal["threshold"], cal["clusters"]
        calib_info = {"questions": len(cq), "source": csource, "target": args.target, "met": cal["met"],
                      "clusters_tried": counts,
                      "agreement": round(cal["agreement"], 4), "layers_per_candidate": round(cal["layers_per_candidate"], 3)}

    full = run_full(model_dir, init_head, questions, args.k)
    refs = [r["top"] for r in full["rows"]]
    prism = run_prism(model_dir, init_head, questions, args.k, threshold, refs, clusters)
    main_cmp = compare(full, prism)
    tracemalloc.stop()

    out: dict = {
        "bench": "prism",
        "model": model_desc, "model_dir": model_dir,
        "questions_source": qsource, "questions": len(questions), "candidates": args.candidates,
        "window_tokens": args.window_tokens, "tokens_per_candidate": full["rows"][0]["tokens"] if full["rows"] else None,
        "truncated_candidates_mean": _mean(r["truncated"] for r in full["rows"]),
        "k": args.k, "threads": threads,
        "threshold": threshold, "clusters": clusters, "calibration": calib_info or {"given": True},
        "peak_mem_method": "tracemalloc: bytes kept between queries (weights, caches, layer slots) + the query's transient peak",
    }
    out.update(main_cmp)
    out["io_hidden_fraction"] = round(prism["io_hidden_fraction"], 4)
    out["embed_cache_hit_rate"] = round(prism["embed_cache_hit_rate"], 4)
    out["embed_cache_rows"] = prism["embed_cache_rows"]
    out["vocab"] = prism["vocab"]
    out["full_resident_bytes"] = full["resident_bytes"]
    out["prism_resident_bytes"] = prism["resident_bytes"]
    progress("main comparison: " + json.dumps(out))

    if not args.no_torch:
        try:
            nt = args.torch_questions or len(questions)
            tr = run_torch(model_dir, init_head, questions[:nt], args.k, threads)
            tl = _mean(r["latency_s"] for r in tr["rows"])
            pl = _mean(r["latency_s"] for r in prism["rows"][:nt])
            out["torch_questions"] = len(tr["rows"])
            out["torch_latency_s_mean"] = round(tl, 3)
            out["torch_latency_ratio"] = round(pl / tl, 4)  # PRISM over torch on the same questions
            out["torch_top5_agreement_with_full"] = round(
                _mean(len(set(a["top"]) & set(b)) / float(args.k) for a, b in zip(tr["rows"], refs)), 4)
        except ImportError as e:
            out["torch_error"] = "torch/transformers not installed: %s" % e

    if not args.no_torch and args.speed_reps > 0 and questions:
        try:
            sp = numpy_vs_torch(model_dir, init_head, questions[0], args.speed_reps, threads, args.speed_min_s)
            for key in ("layer_ratio", "layer_ratio_p25", "layer_ratio_p75", "full_ratio", "full_ratio_p25",
                        "full_ratio_p75", "reps", "min_s", "tokens", "max_logit_diff"):
                out["numpy_vs_torch_" + key] = sp[key]
            if args.speed_short_tokens > 0:
                short, _ = load_questions("heldout", 1, args.candidates, args.speed_short_tokens, args.seed)
                out["numpy_vs_torch_short"] = numpy_vs_torch(model_dir, init_head, short[0], args.speed_reps, threads,
                                                             args.speed_min_s)
            out["numpy_vs_torch_method"] = (
                "median over interleaved repetitions (order alternating) of numpy time / torch time, %d thread(s) "
                "each, same weights and candidates (the first held-out question): encoder layer 0 on the same "
                "embedded input, and the whole forward from token ids to logits" % threads)
            progress("numpy vs torch: layer %.3f, full %.3f" % (out["numpy_vs_torch_layer_ratio"],
                                                               out["numpy_vs_torch_full_ratio"]))
        except ImportError as e:
            out["torch_error"] = "torch/transformers not installed: %s" % e

    if args.rss_questions > 0:
        sub = questions[: args.rss_questions]
        variants = ("full", "prism") + (() if args.no_torch else ("torch",))
        rss = {v: rss_variant(v, model_dir, init_head, sub, args.k, threshold, threads, clusters) for v in variants}
        out["rss"] = rss
        out["rss_method"] = "peak RSS (VmHWM) of a fresh subprocess per variant above its RSS after imports, %d questions" % len(sub)
        try:
            out["peak_mem_ratio_rss"] = round(rss["prism"]["peak_above_imports"] / rss["full"]["peak_above_imports"], 4)
            if "torch" in rss:
                out["torch_peak_mem_ratio"] = round(rss["prism"]["peak_above_imports"] / rss["torch"]["peak_above_imports"], 4)
        except (KeyError, ZeroDivisionError):
            pass

    curve = []
    points = [int(c) for c in args.curve.split(",") if c.strip()] if args.curve else []
    for n in points:
        if n == args.candidates:
            curve.append(dict(main_cmp, candidates=n))
            continue
        qs, _ = load_questions("heldout", args.curve_questions, n, args.window_tokens, args.seed)
        tracemalloc.start()
        f = run_full(model_dir, init_head, qs, args.k)
        p = run_prism(model_dir, init_head, qs, args.k, threshold, [r["top"] for r in f["rows"]], clusters)
        tracemalloc.stop()
        curve.append(dict(compare(f, p), candidates=n))
    out["curve"] = curve
    out["goal"] = GOAL
    out["paper"] = PAPER
    out["goal_met"] = {key: (out[key] <= v if key != "top5_agreement" else out[key] >= v) for key, v in GOAL.items()}
    out["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
