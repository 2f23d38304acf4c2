"""PRISM against the full numpy model and transformers on `ask`'s own candidates, interleaved: one JSON object.

    edgetwin bench prism --json                      # 40 held-out questions x ask's top 20 windows, K=5
    edgetwin bench prism --questions 5 --curve-questions 1 --no-torch     # a quick look

Candidates: for each held-out question (tools/bench/prism_questions.py: plant seeds >= 2000, a store per
seed as tools/train/plant_text builds it), host.qa.retrieve's windows, FTS5/bm25 order with the record's
pinned window first, as `edgetwin ask` gets them; relevance = how many of the question's evidence lines a
window holds. Questions with fewer than K+1 windows or no relevant one are skipped and counted. `--plants seen`
/ `unseen`: bench quality's operator questions on generated plants of held-out seeds instead (the training
kinds and naming schemes, or held-out ones), each plant's day imported with its description.
Variants, one BLAS/torch thread each (PRISM adds its prefetch thread, which reads and does no arithmetic):
  full   BertCrossEncoder (host/prism/bert.py), all weights resident, the whole batch, every layer;
  prism  host/prism/engine.py: pruning on the model's exit heads (host/prism/exits.py; threshold calibrated on
         validation questions, seeds 1000-1999, to the target top-K agreement), layer streaming with prefetch,
         chunked execution, embedding-row cache;
  torch  transformers' BertForSequenceClassification, same weights, torch CPU.
Time: the three run back to back on each question, their order rotating question by question, because the
other jobs on this machine move absolute times by 2x or more; medians with p25/p75, ratios as medians of
per-question ratios (and as ratios of medians). Memory: peak RSS (VmHWM) of a fresh subprocess per variant
above its RSS after imports. Quality: nDCG@10 of the full model's, bm25's and PRISM's order, top-K agreement.
Curve: the same at 10, 20, 50, 100 candidates on a few questions. numpy_vs_torch_*: the numpy encoder
itself against torch (one layer, the whole forward) on the first question's candidates.
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
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional, Sequence  # noqa: E402

from host.usage import Parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.bench import prism_questions  # noqa: E402

VARIANTS = ("full", "prism", "torch")
# issue 17's thresholds: [comparison, a number or the key to compare with]
GOALS = {"torch_latency_ratio": ["<=", 0.7], "torch_peak_mem_ratio": ["<=", 0.15], "top5_agreement": [">=", 0.99],
         "layers_per_candidate_mean": ["<=", 4.0], "final_ndcg10": [">=", "bm25_ndcg10"]}
PAPER = {"latency_ratio": 0.108, "peak_mem_ratio": 0.087, "top5_agreement": 0.998}  # PRISM's paper, vs its full model
THREADS_NOTE = ("one BLAS thread for full and prism, torch.set_num_threads(%s) for torch; prism also runs its "
                "layer-prefetch thread (file reads, no arithmetic), so it uses up to two threads")


def progress(msg: str) -> None:
    if os.environ.get("EDGETWIN_BENCH_QUIET") != "1":
        print("[bench prism] " + msg, file=sys.stderr, flush=True)


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


# ---------------------------------------------------------------------------------------------- statistics


def spread(xs: Sequence[float], digits: int = 4) -> dict:
    """Median, p25 and p75."""
    import numpy as np

    return {"median": round(float(np.median(xs)), digits), "p25": round(float(np.percentile(xs, 25)), digits),
            "p75": round(float(np.percentile(xs, 75)), digits)}


def ndcg(order: Sequence[int], gains: Sequence[int], at: int = 10) -> float:
    """nDCG@at of candidates shown in `order`, linear gains (evidence lines held), log2 discount."""
    dcg = sum(gains[j] / math.log2(i + 2) for i, j in enumerate(order[:at]))
    ideal = sorted(gains, reverse=True)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:at]))
    return dcg / idcg if idcg > 0 else 0.0


def _mean(xs) -> Optional[float]:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


# ---------------------------------------------------------------------------------------------- variants


@dataclass
class Outcome:
    """One variant on one question: its top K, its whole order (for nDCG), the wall time of the call."""

    top: list[int]
    order: list[int]
    latency_s: float = 0.0
    layers_per_candidate: Optional[float] = None
    layer_probs: Any = None  # [layers, n] (full only: what calibration replays)
    stats: dict = field(default_factory=dict)


class FullVariant:
    """The full numpy model: every candidate through every layer, all weights resident."""

    name = "full"

    def __init__(self, model_dir: str, init_head: bool):
        from host.prism.bert import BertCrossEncoder
        from host.prism.exits import read_exits

        self.model = BertCrossEncoder.from_pretrained(model_dir, init_head=init_head, seed=0)
        self.prior = model_prior(model_dir, init_head)
        cfg = self.model.config  # its per-layer record scores what PRISM's exits score (none for a random head)
        self.exits = None if init_head else read_exits(model_dir, cfg.hidden_size, cfg.num_layers)

    def rank(self, question: str, texts: list[str], k: int, pinned: int = 0) -> Outcome:
        import numpy as np

        from host.prism.monolithic import rank_full
        from host.prism.pruning import log_odds

        prior = self.prior.logits(len(texts), pinned) if self.prior is not None else None
        r = rank_full(self.model, question, texts, k, prior, self.exits)
        order = [int(i) for i in np.argsort(-r.probs, kind="stable")]
        stats = {"tokens": r.tokens, "truncated": r.truncated}
        if prior is not None:  # the head's own order: its logit without the prior
            head = log_odds(r.probs) - prior
            stats["head_order"] = [int(i) for i in np.argsort(-head, kind="stable")]
        return Outcome(r.top, order, layers_per_candidate=r.layers_per_candidate, layer_probs=r.layer_probs,
                       stats=stats)

    def close(self) -> None:
        pass


class PrismVariant:
    """The PRISM engine; its order is its top K, then the rest in retrieval (bm25) order: beyond K it ranks nothing."""

    name = "prism"

    def __init__(self, model_dir: str, init_head: bool, threshold: float, clusters: int,
                 margin: Optional[int] = None, split: Optional[str] = None):
        from host.prism.engine import Prism

        self.prism = Prism.from_pretrained(model_dir, init_head=init_head, seed=0, threshold=threshold,
                                           clusters=clusters, margin=margin, split=split)
        cache = self.prism.weights.cache
        self._h0, self._m0 = cache.hits, cache.misses

    def rank(self, question: str, texts: list[str], k: int, pinned: int = 0) -> Outcome:
        r = self.prism.rank(question, texts, k, prior=self.prism.retrieval_prior(len(texts), pinned))
        rest = [j for j in range(len(texts)) if j not in set(r.top)]
        return Outcome(list(r.top), list(r.top) + rest, layers_per_candidate=r.layers_per_candidate,
                       stats={"io_hidden_fraction": r.stats["io_hidden_fraction"], "events": r.stats["prune_events"]})

    def reset_cache_counts(self) -> None:
        cache = self.prism.weights.cache
        self._h0, self._m0 = cache.hits, cache.misses

    def cache_hit_rate(self) -> float:
        """Embedding-row cache hits since reset_cache_counts (distinct tokens per query)."""
        cache = self.prism.weights.cache
        hits, misses = cache.hits - self._h0, cache.misses - self._m0
        return hits / max(1, hits + misses)

    def close(self) -> None:
        self.prism.close()


def torch_model(model_dir: str, init_head: bool):
    """transformers' BertForSequenceClassification on the same weights (and the same random head with init_head)."""
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


class TorchVariant:
    """transformers on torch CPU; the same WordPiece tokenizer, its time included as for the others."""

    name = "torch"

    def __init__(self, model_dir: str, init_head: bool, threads: int):
        import torch

        from host.prism import wordpiece
        from host.prism.bert import _read_config

        torch.set_num_threads(threads)
        self.hf = torch_model(model_dir, init_head)
        self.tok = wordpiece.load_tokenizer(model_dir, _read_config(model_dir).max_position)
        self.prior = model_prior(model_dir, init_head)

    def rank(self, question: str, texts: list[str], k: int, pinned: int = 0) -> Outcome:
        import numpy as np
        import torch

        from host.prism import wordpiece

        ids, types, mask = wordpiece.encode_pairs(self.tok, question, texts)
        with torch.no_grad():
            logits = self.hf(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                             attention_mask=torch.from_numpy(mask)).logits.numpy()
        z = logits[:, 0].astype(np.float64)
        if self.prior is not None:
            z += self.prior.logits(len(texts), pinned)
        order = [int(i) for i in np.argsort(-z, kind="stable")]
        return Outcome(order[:k], order)

    def close(self) -> None:
        pass


def model_prior(model_dir: str, init_head: bool):
    """The model's retrieval prior (host/prism/prior.py) from its prism.json; None for a random head or none."""
    from host.prism.engine import read_settings

    return None if init_head else read_settings(model_dir).get("prior")


def timed(variant, q: dict, k: int) -> Outcome:
    """One call on question q, timed from the outside the same way for every variant (tokenization included)."""
    t0 = time.perf_counter()
    out = variant.rank(q["question"], q["texts"], k, q.get("pinned", 0))
    out.latency_s = time.perf_counter() - t0
    return out


def rotation(names: Sequence[str], i: int) -> list[str]:
    """The variants' order for question i: rotated by one each question, so each runs first, second, last alike."""
    s = i % len(names)
    return list(names[s:]) + list(names[:s])


def run_interleaved(variants: dict, questions: list[dict], k: int, label: str = "") -> list[dict]:
    """Every question through every variant back to back, the order rotating; one row per question:
    {"order": [names], name: Outcome}. The first question runs once unrecorded first (warm-up)."""
    names = list(variants)
    if questions:
        for name in names:
            timed(variants[name], questions[0], k)
    rows = []
    for i, q in enumerate(questions):
        row: dict = {"order": rotation(names, i)}
        for name in row["order"]:
            row[name] = timed(variants[name], q, k)
        rows.append(row)
        progress("%s%d/%d (%d candidates): %s" % (label, i + 1, len(questions), len(q["texts"]), ", ".join(
            "%s %.2f s" % (n, row[n].latency_s) for n in names)))
    return rows


# ---------------------------------------------------------------------------------------------- summaries


def latency_summary(rows: list[dict], names: Sequence[str]) -> dict:
    """Per-variant medians (p25/p75), and PRISM's ratios to each baseline: median of per-question ratios
    (with p25/p75) and ratio of medians."""
    import numpy as np

    out: dict = {"latency_s": {n: spread([r[n].latency_s for r in rows]) for n in names}}
    pairs = [("latency_ratio", "prism", "full")]
    if "torch" in names:
        pairs += [("torch_latency_ratio", "prism", "torch"), ("full_vs_torch_latency_ratio", "full", "torch")]
    for key, a, b in pairs:
        sp = spread([r[a].latency_s / r[b].latency_s for r in rows])
        out[key], out[key + "_p25"], out[key + "_p75"] = sp["median"], sp["p25"], sp["p75"]
        out[key + "_of_medians"] = round(float(np.median([r[a].latency_s for r in rows])
                                               / np.median([r[b].latency_s for r in rows])), 4)
    return out


def pinned_first(order: Sequence[int], pinned: int) -> list[int]:
    """The order `ask` shows: the first `pinned` windows (found by the record) first, then the rest in `order`."""
    return list(range(pinned)) + [j for j in order if j >= pinned]


def quality_summary(rows: list[dict], questions: list[dict], k: int) -> dict:
    """nDCG@10 of the full model's, bm25's (retrieval's) and PRISM's orders, and of the last two as `ask` shows
    them (ask_*: the record's pinned windows first); PRISM's and torch's top-K agreement with the full model; layers
    per candidate."""
    agree = [len(set(r["prism"].top) & set(r["full"].top)) / float(k) for r in rows]
    out = {
        "final_ndcg10": round(_mean(ndcg(r["full"].order, q["relevance"]) for r, q in zip(rows, questions)), 4),
        "bm25_ndcg10": round(_mean(ndcg(list(range(len(q["texts"]))), q["relevance"]) for q in questions), 4),
        "prism_ndcg10": round(_mean(ndcg(r["prism"].order, q["relevance"]) for r, q in zip(rows, questions)), 4),
        # what `ask` shows: the windows the record pinned first whatever the model makes of them (host/qa.rerank)
        "ask_final_ndcg10": round(_mean(ndcg(pinned_first(r["full"].order, q.get("pinned", 0)), q["relevance"])
                                        for r, q in zip(rows, questions)), 4),
        "ask_prism_ndcg10": round(_mean(ndcg(pinned_first(r["prism"].order, q.get("pinned", 0)), q["relevance"])
                                        for r, q in zip(rows, questions)), 4),
        **({"head_only_ndcg10": round(_mean(ndcg(r["full"].stats["head_order"], q["relevance"])
                                            for r, q in zip(rows, questions)), 4)}
           if "head_order" in rows[0]["full"].stats else {}),
        "top5_agreement": round(_mean(agree), 4), "top5_agreement_min": min(agree),
        "layers_per_candidate_mean": round(_mean(r["prism"].layers_per_candidate for r in rows), 3),
        "ndcg_gain": "number of the question's evidence lines the window holds (linear gain, log2 discount)",
    }
    if "torch" in rows[0]:
        out["torch_top5_agreement_with_full"] = round(
            _mean(len(set(r["torch"].top) & set(r["full"].top)) / float(k) for r in rows), 4)
    return out


def check_goals(out: dict) -> dict:
    """goals_met per GOALS key: True / False, None where the figure is missing (e.g. --no-torch)."""
    met = {}
    for key, (op, ref) in GOALS.items():
        ref_v = out.get(ref) if isinstance(ref, str) else ref
        v = out.get(key)
        if v is None or ref_v is None:
            met[key] = None
        else:
            met[key] = v <= ref_v if op == "<=" else v >= ref_v
    return met


# ---------------------------------------------------------------------------------------------- numpy vs torch


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
    batch = ours.encode(question["question"], question["texts"])
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
        sp = spread(_interleaved(a, b, reps, min_s))
        out[name + "_ratio"], out[name + "_ratio_p25"], out[name + "_ratio_p75"] = sp["median"], sp["p25"], sp["p75"]
    return out


# ---------------------------------------------------------------------------------------------- memory


def _status(key: str) -> int:
    """A /proc/self/status value in bytes (VmRSS: now; VmHWM: peak of this process image, reset by exec,
    unlike ru_maxrss, which a child inherits from the parent it was forked from)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def make_variant(name: str, model_dir: str, init_head: bool, threshold: float, clusters: int, threads: int,
                 margin: Optional[int] = None, split: Optional[str] = None):
    if name == "full":
        return FullVariant(model_dir, init_head)
    if name == "prism":
        return PrismVariant(model_dir, init_head, threshold, clusters, margin, split)
    return TorchVariant(model_dir, init_head, threads)


def worker(variant: str, model_dir: str, init_head: bool, qfile: str, k: int, threshold: float, threads: int,
           clusters: int = 3, margin: Optional[int] = None, split: Optional[str] = None) -> dict:
    """Runs in a fresh subprocess: peak RSS of one variant (model load and queries) above the RSS after imports."""
    import numpy  # noqa: F401

    if variant == "torch":
        import torch  # noqa: F401
        import transformers  # noqa: F401
    from host.prism import engine, monolithic, wordpiece  # noqa: F401

    questions = json.loads(Path(qfile).read_text())
    after_imports = _status("VmRSS")
    t0 = time.perf_counter()
    v = make_variant(variant, model_dir, init_head, threshold, clusters, threads, margin, split)
    for q in questions:
        v.rank(q["question"], q["texts"], k, q.get("pinned", 0))
    v.close()
    peak = _status("VmHWM")
    return {"variant": variant, "rss_after_imports": after_imports, "peak_rss": peak,
            "peak_above_imports": peak - after_imports, "seconds": round(time.perf_counter() - t0, 2),
            "questions": len(questions)}


def rss_variant(variant: str, model_dir: str, init_head: bool, questions: list[dict], k: int, threshold: float,
                threads: int, clusters: int = 3, margin: int = 0, split: str = "prob") -> dict:
    """worker() in a fresh `python -m tools.bench.prism --worker` process (same thread environment)."""
    with tempfile.TemporaryDirectory() as td:
        qf = os.path.join(td, "q.json")
        Path(qf).write_text(json.dumps([{"question": q["question"], "texts": q["texts"], "pinned": q.get("pinned", 0)}
                                  for q in questions]))
        cmd = [sys.executable, "-m", "tools.bench.prism", "--worker", variant, "--model", model_dir, "--qfile", qf,
               "--k", str(k), "--threshold", repr(threshold), "--clusters", str(clusters), "--margin", str(margin),
               "--split", split] + (
                   ["--init-head"] if init_head else [])
        env = dict(os.environ, EDGETWIN_BENCH_THREADS=str(threads))
        res = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=3600)
        if res.returncode != 0:
            return {"variant": variant, "error": (res.stderr.strip().splitlines() or ["?"])[-1]}
        return json.loads(res.stdout.strip().splitlines()[-1])


def rss_ratios(names: Sequence[str], model_dir: str, init_head: bool, questions: list[dict], k: int,
               threshold: float, threads: int, clusters: int, margin: int = 0, split: str = "prob") -> dict:
    """{"rss": per variant, "peak_mem_ratio": prism/full, "torch_peak_mem_ratio": prism/torch} by peak RSS."""
    rss = {}
    for n in names:
        rss[n] = rss_variant(n, model_dir, init_head, questions, k, threshold, threads, clusters, margin, split)
        progress("RSS %s: %s" % (n, rss[n].get("error") or "%.1f MB above imports" % (
            rss[n]["peak_above_imports"] / 2 ** 20)))
    out: dict = {"rss": rss}
    peak = {n: r.get("peak_above_imports") for n, r in rss.items()}
    for key, base in (("peak_mem_ratio", "full"), ("torch_peak_mem_ratio", "torch")):
        if peak.get("prism") and peak.get(base):
            out[key] = round(peak["prism"] / peak[base], 4)
    return out


def traced_bytes(make, questions: list[dict], k: int) -> float:
    """tracemalloc (numpy reports its buffers): bytes a freshly made variant keeps + the mean query peak."""
    gc.collect()
    tracemalloc.start()
    try:
        b0 = tracemalloc.get_traced_memory()[0]
        v = make()
        resident = tracemalloc.get_traced_memory()[0] - b0
        peaks = []
        for q in questions:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            v.rank(q["question"], q["texts"], k, q.get("pinned", 0))
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        v.close()
    finally:
        tracemalloc.stop()
    return resident + _mean(peaks)


# ---------------------------------------------------------------------------------------------- calibration, curve


def calibrate_threshold(full: FullVariant, questions: list[dict], k: int, target: float, counts: list[int]
                        ) -> tuple[float, int, int, str, dict]:
    """(threshold, clusters, margin, split, report): the full model's layer probabilities on validation questions
    replayed over the threshold grid, the cluster counts and keep margins (host/prism/calibrate.py)."""
    from host.prism.calibrate import DEFAULT_MARGINS, calibrate

    probs = []
    for i, q in enumerate(questions):
        probs.append(full.rank(q["question"], q["texts"], k, q.get("pinned", 0)).layer_probs)
        progress("calibration %d/%d" % (i + 1, len(questions)))
    cal = calibrate(probs, k, target, clusters=counts, margins=DEFAULT_MARGINS, split="logit")
    return cal["threshold"], cal["clusters"], cal["margin"], cal["split"], {
        "questions": len(questions), "source": "ask's candidates, validation seeds (1000-1999)", "target": target,
        "met": cal["met"], "clusters_tried": counts, "agreement": round(cal["agreement"], 4),
        "layers_per_candidate": round(cal["layers_per_candidate"], 3)}


def curve_point(n: int, variants: dict, questions: list[dict], k: int, rss_args: Optional[dict]) -> dict:
    """Latency and memory ratios against both baselines with retrieve's top n (fewer where fewer exist)."""
    qs = [q for q in prism_questions.with_limit(questions, n) if len(q["texts"]) > k]
    point: dict = {"candidates": n, "questions": len(qs)}
    if not qs:
        return point
    used = [len(q["texts"]) for q in qs]
    point.update(candidates_used_mean=round(_mean(used), 1), candidates_used_min=min(used))
    rows = run_interleaved(variants, qs, k, label="curve %d: " % n)
    lat = latency_summary(rows, list(variants))
    point.update({key: v for key, v in lat.items() if key != "latency_s"})
    if rss_args is not None:
        mem = rss_ratios(list(variants), questions=qs, k=k, **rss_args)
        point.update({key: v for key, v in mem.items() if key != "rss"})
        point["mem_method"] = "peak RSS of a fresh process per variant, above its RSS after imports"
    return point


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Set the thread/offline environment (before numpy loads: this module imports it lazily), run, restore it."""
    from tools.environ import environ

    with environ(_ENV):
        return _main(argv)


def parser() -> Parser:
    ap = Parser(prog="edgetwin bench prism", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON object")
    ap.add_argument("--model", help="reranker directory (default: the fine-tuned reranker, else MiniLM + random head)")
    ap.add_argument("--questions", type=int, default=40, help="held-out questions used (default 40; skipped ones "
                    "do not count)")
    ap.add_argument("--plants", choices=("builtin", "seen", "unseen"), default="builtin",
                    help="whose questions: builtin (the node's simulator, held-out seeds; default), seen / unseen "
                         "(generated plants of held-out seeds, of the training kinds and naming schemes or of "
                         "held-out ones, bench quality's operator questions)")
    ap.add_argument("--candidates", type=int, default=20, help="retrieve's top N windows per question (default 20)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.99, help="top-K agreement the calibration must reach")
    ap.add_argument("--calib-questions", type=int, default=0, help="calibrate on this many validation questions "
                    "(default 0: the model's own calibration, its prism.json, as ask uses it; 10 without one)")
    ap.add_argument("--threshold", type=float, help="skip calibration and use this CV threshold")
    ap.add_argument("--clusters", default="3,4,5,6", help="k-means cluster counts the calibration chooses from "
                    "(one number with --threshold; default 3,4,5,6)")
    ap.add_argument("--curve", default="10,20,50,100", help="candidate counts for the curve ('' for none)")
    ap.add_argument("--curve-questions", type=int, default=3, help="questions per curve point other than --candidates")
    ap.add_argument("--rss-questions", type=int, default=3, help="questions per RSS subprocess (0: no memory figures)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--speed-reps", type=int, default=7, help="interleaved repetitions of the numpy/torch layer and "
                    "full-model timings (default 7; 0: skip)")
    ap.add_argument("--speed-min-s", type=float, default=0.2, help="a timed call shorter than this is repeated "
                    "within each repetition (default 0.2 s)")
    ap.add_argument("--margin", type=int, default=0, help=argparse.SUPPRESS)  # a worker's pruning settings
    ap.add_argument("--split", default="prob", help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--qfile", help=argparse.SUPPRESS)
    ap.add_argument("--init-head", action="store_true", help=argparse.SUPPRESS)
    return ap


def check_args(ap: Parser, args: argparse.Namespace) -> tuple[list[int], list[int]]:
    """(cluster counts, curve points), or one line and exit 2 for a bad option."""
    for name in ("questions", "candidates", "k", "curve_questions"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1, got %d" % (name.replace("_", "-"), getattr(args, name)))
    for name in ("rss_questions", "speed_reps", "calib_questions"):
        if getattr(args, name) < 0:
            ap.error("--%s must be 0 or more, got %d" % (name.replace("_", "-"), getattr(args, name)))
    if args.candidates <= args.k:
        ap.error("--candidates (%d) must be larger than --k (%d): nothing would be pruned" % (args.candidates, args.k))
    if not 0 < args.target <= 1:
        ap.error("--target must be in (0, 1], got %r" % args.target)
    try:
        counts = [int(c) for c in args.clusters.split(",") if c.strip()]
        if not counts or min(counts) < 2:
            raise ValueError
    except ValueError:
        ap.error("--clusters: comma-separated integers >= 2, got %r" % args.clusters)
    if args.threshold is not None and len(counts) != 1:
        ap.error("--threshold skips calibration: give one --clusters count with it")
    try:
        points = [int(c) for c in args.curve.split(",") if c.strip()]
        if any(p <= args.k for p in points):
            raise ValueError
    except ValueError:
        ap.error("--curve: comma-separated candidate counts larger than --k, got %r" % args.curve)
    return counts, points


def _main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    counts, points = check_args(ap, args)
    threads = int(_THREADS)
    if args.worker:
        print(json.dumps(worker(args.worker, args.model, args.init_head, args.qfile, args.k,
                                args.threshold if args.threshold is not None else 0.3, threads, counts[0],
                                args.margin, args.split)))
        return 0
    return run(args, counts, points, threads)


def make_variants(args: argparse.Namespace, model_dir: str, init_head: bool, counts: list[int], threads: int
                  ) -> tuple[dict, dict, dict]:
    """(variants by name, pruning settings, calibration report): the full model first, as calibration needs it."""
    from host.prism.engine import read_settings

    full = FullVariant(model_dir, init_head)
    threshold, clusters, margin, split = args.threshold, counts[0], 0, "prob"
    calib: dict = {"given": True}
    shipped = {} if init_head else read_settings(model_dir)
    if threshold is None and not args.calib_questions and "threshold" in shipped:
        threshold, clusters, margin, split = (shipped["threshold"], shipped["clusters"], shipped["margin"],
                                              shipped["split"])
        calib = {"source": "the model's prism.json (calibrated on validation questions by make_reranker), as ask uses it"}
    elif threshold is None:
        cq, _ = prism_questions.ask_questions("validation", args.calib_questions or 10, args.candidates, args.k)
        threshold, clusters, margin, split, calib = calibrate_threshold(full, cq, args.k, args.target, counts)
    variants: dict = {"full": full, "prism": PrismVariant(model_dir, init_head, threshold, clusters, margin, split)}
    if not args.no_torch:
        variants["torch"] = TorchVariant(model_dir, init_head, threads)
    return variants, {"threshold": threshold, "clusters": clusters, "margin": margin, "split": split}, calib


def main_figures(variants: dict, questions: list[dict], k: int) -> dict:
    """The interleaved run over the main questions: latency, quality, PRISM's own counters."""
    prism = variants["prism"]
    prism.reset_cache_counts()  # the hit rate over the main run, its warm-up call (the cold cache) included
    rows = run_interleaved(variants, questions, k)
    out: dict = {
        "tokens_per_candidate_mean": round(_mean(r["full"].stats["tokens"] for r in rows), 1),
        "truncated_candidates_mean": _mean(r["full"].stats["truncated"] for r in rows),
        "variant_order": [r["order"] for r in rows],
        "interleaving": "per question the variants run back to back, their order rotating by one each question; "
                        "one unrecorded warm-up call each first",
    }
    out.update(latency_summary(rows, list(variants)))
    out.update(quality_summary(rows, questions, k))
    out["io_hidden_fraction"] = round(_mean(r["prism"].stats["io_hidden_fraction"] for r in rows), 4)
    out["embed_cache_hit_rate"] = round(prism.cache_hit_rate(), 4)
    out["embed_cache_rows"] = prism.prism.weights.cache.capacity
    out["vocab"] = prism.prism.cfg.vocab_size
    progress("main run: " + json.dumps({key: out.get(key) for key in (
        "latency_ratio", "torch_latency_ratio", "top5_agreement", "final_ndcg10", "bm25_ndcg10")}))
    return out


def memory_figures(names: list[str], questions: list[dict], k: int, rss_args: dict) -> dict:
    """Peak-RSS ratios from fresh processes, and the in-process tracemalloc ratio (numpy variants only)."""
    out = rss_ratios(names, questions=questions, k=k, **rss_args)
    out["rss_method"] = ("peak RSS (VmHWM) of a fresh subprocess per variant (model load and %d questions) above "
                         "its RSS after imports" % len(questions))
    model_dir, init_head = rss_args["model_dir"], rss_args["init_head"]
    prism = traced_bytes(lambda: PrismVariant(model_dir, init_head, rss_args["threshold"], rss_args["clusters"],
                                              rss_args["margin"], rss_args["split"]),
                         questions, k)
    out["peak_mem_ratio_tracemalloc"] = round(prism / traced_bytes(lambda: FullVariant(model_dir, init_head),
                                                                   questions, k), 4)
    return out


def speed_figures(model_dir: str, init_head: bool, question: dict, reps: int, threads: int, min_s: float) -> dict:
    """numpy_vs_torch_*: the numpy encoder itself against torch on one question's candidates."""
    sp = numpy_vs_torch(model_dir, init_head, question, reps, threads, min_s)
    out = {"numpy_vs_torch_" + key: sp[key] for key in (
        "layer_ratio", "layer_ratio_p25", "layer_ratio_p75", "full_ratio", "full_ratio_p25", "full_ratio_p75", "reps",
        "min_s", "tokens", "max_logit_diff")}
    out["numpy_vs_torch_method"] = (
        "median over interleaved repetitions (order alternating) of numpy time / torch time, %d thread(s) "
        "each, same weights and candidates (the first question's): encoder layer 0 on the same embedded "
        "input, and the whole forward from token ids to logits" % threads)
    progress("numpy vs torch: layer %.3f, full %.3f" % (sp["layer_ratio"], sp["full_ratio"]))
    return out


CURVE_KEYS = ("latency_ratio", "torch_latency_ratio", "full_vs_torch_latency_ratio", "peak_mem_ratio",
              "torch_peak_mem_ratio")


def curve_figures(points: list[int], main: dict, questions: list[dict], variants: dict, k: int,
                  curve_questions: int, rss_args: Optional[dict]) -> list[dict]:
    """The curve; the point at the main candidate count is the main run's figures."""
    curve = []
    for p in points:
        if p != main["candidates"]:
            curve.append(curve_point(p, variants, questions[:curve_questions], k, rss_args))
            continue
        used = [len(q["texts"]) for q in questions]
        point = {key: v for key, v in main.items()
                 if key.startswith(CURVE_KEYS) and key != "peak_mem_ratio_tracemalloc"}
        curve.append(dict(point, candidates=p, questions=len(questions), candidates_used_mean=round(_mean(used), 1),
                          candidates_used_min=min(used), note="the main run"))
    return curve


def run(args: argparse.Namespace, counts: list[int], points: list[int], threads: int) -> int:
    """The whole bench: questions, calibration, the interleaved run, memory, numpy vs torch, the curve."""
    t_start = time.perf_counter()
    k, n = args.k, args.candidates
    model_dir, model_desc, init_head = pick_model(args.model)
    split = "held-out" if args.plants == "builtin" else args.plants
    questions, skipped = prism_questions.ask_questions(split, args.questions, n, k)
    progress("%d held-out questions of %s plants (skipped: %s)" % (len(questions), args.plants, skipped))
    if not questions:
        print("edgetwin bench prism: no usable held-out question (skipped: %s)" % skipped, file=sys.stderr)
        return 1
    if len(questions) < args.questions:
        progress("warning: only %d usable questions" % len(questions))
    variants, pruning, calib = make_variants(args, model_dir, init_head, counts, threads)
    threshold = pruning["threshold"]
    out: dict = {
        "bench": "prism", "model": model_desc, "model_dir": model_dir,
        "plants": args.plants,
        "questions_source": ("held-out plant questions (seeds 2000-2999), ask's candidates: host.qa.retrieve"
                             if args.plants == "builtin" else
                             "bench quality's held-out operator questions on generated %s plants (seeds from 2000, "
                             "tools/bench/ask_phrasings), ask's candidates: host.qa.retrieve" % args.plants),
        "questions": len(questions), "skipped": skipped, "candidates": n,
        "candidates_used_mean": round(_mean(len(q["texts"]) for q in questions), 2),
        "lines_per_window": prism_questions.ask_lines(), "pinned_questions": sum(1 for q in questions if q["pinned"]),
        "k": k, "threads": threads, "threads_note": THREADS_NOTE % threads,
        "threshold": threshold if math.isfinite(threshold) else None, "clusters": pruning["clusters"],
        "margin": pruning["margin"], "split": pruning["split"], "calibration": calib,
        "exit_heads": variants["full"].exits is not None,  # host/prism/exits.py: the model's per-layer heads score
    }
    out.update(main_figures(variants, questions, k))
    rss_args = None
    if args.rss_questions > 0:
        rss_args = {"model_dir": model_dir, "init_head": init_head, "threads": threads, **pruning}
        out.update(memory_figures(list(variants), questions[:args.rss_questions], k, rss_args))
    if not args.no_torch and args.speed_reps > 0:
        out.update(speed_figures(model_dir, init_head, questions[0], args.speed_reps, threads, args.speed_min_s))
    out["curve"] = curve_figures(points, out, questions, variants, k, args.curve_questions, rss_args)
    for v in variants.values():
        v.close()
    out.update(goals=GOALS, goals_met=check_goals(out), paper=PAPER, elapsed_s=round(time.perf_counter() - t_start, 1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
