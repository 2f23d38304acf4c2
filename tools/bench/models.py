"""Bench the default models on held-out data: the PRISM reranker against SQLite FTS5 bm25, plus the draft's figures.

Reranker: the fine-tuned cross-encoder (host.weights.reranker_dir()) run with the project's numpy BERT
(host/prism/bert.py, all candidates of a question as one batch), on held-out questions of tools/train/qa_corpus
(plant seeds >= 2000). BM25: an in-memory FTS5 table per question holding the same candidates, queried with
the question's words OR-ed, ranked by bm25(). Metrics: nDCG@10 with gain 2**relevance - 1 (relevance 2 =
the window answers the question, 1 = related, 0 = other) and the recall of answer windows in the top 5.
The draft model's figures come from tools/eval_draft.draft_metrics() when that module exists.

    edgetwin bench models --json            # 30 held-out questions x 20 windows of ~512 tokens
    edgetwin bench models --quick           # 6 questions x 10 windows of ~256 tokens (the tests)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
from host.usage import Parser

FULL = {"n": 30, "candidates": 20, "window_tokens": 512}
QUICK = {"n": 6, "candidates": 10, "window_tokens": 256}
_WORD = re.compile(r"[A-Za-z0-9]+")


def ndcg_at(rels_in_rank_order: Sequence[int], all_rels: Sequence[int], k: int = 10) -> float:
    """nDCG@k with gain 2**rel - 1 and log2 discount; 0.0 when nothing is relevant."""
    def dcg(rs: Sequence[int]) -> float:
        return sum((2.0 ** r - 1.0) / math.log2(i + 2) for i, r in enumerate(list(rs)[:k]))
    ideal = dcg(sorted(all_rels, reverse=True))
    return dcg(rels_in_rank_order) / ideal if ideal > 0 else 0.0


def rank(scores: Sequence[float]) -> list[int]:
    """Candidate indices by score, highest first; ties keep the candidates' order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def recall_at(order: Sequence[int], rels: Sequence[int], k: int = 5) -> float:
    answers = [i for i, r in enumerate(rels) if r == 2]
    if not answers:
        return 0.0
    top = set(order[:k])
    return sum(1 for i in answers if i in top) / len(answers)


def bm25_scores(question: str, texts: Sequence[str]) -> list[float]:
    """-bm25 of each text for the question's words OR-ed, in a fresh in-memory FTS5 table; unmatched: -inf."""
    words = sorted(set(w.lower() for w in _WORD.findall(question)))
    scores = [float("-inf")] * len(texts)
    if not words:
        return scores
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE w USING fts5(body)")
        db.executemany("INSERT INTO w(rowid, body) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(texts)])
        query = " OR ".join('"%s"' % w for w in words)
        for rowid, score in db.execute("SELECT rowid, bm25(w) FROM w WHERE w MATCH ?", (query,)):
            scores[rowid - 1] = -float(score)  # bm25() is lower-is-better
    finally:
        db.close()
    return scores


def draft_figures(quick: bool) -> dict[str, Any]:
    """tools.train.eval_draft.draft_metrics() when the module exists, else null fields with the reason."""
    try:
        mod = importlib.import_module("tools.train.eval_draft")
    except ImportError as e:
        return {"draft": None, "draft_reason": "tools/train/eval_draft.py is not available (%s)" % e}
    fn = getattr(mod, "draft_metrics", None)
    if fn is None:
        return {"draft": None, "draft_reason": "tools.train.eval_draft has no draft_metrics()"}
    try:
        params = inspect.signature(fn).parameters
        got = fn(quick=quick) if "quick" in params else fn()
    except Exception as e:  # a failing draft evaluation must not hide the reranker figures
        return {"draft": None, "draft_reason": "draft_metrics() failed: %s: %s" % (type(e).__name__, e)}
    if not isinstance(got, dict):
        return {"draft": None, "draft_reason": "draft_metrics() returned %s, not a dict" % type(got).__name__}
    return got


def evaluate(model_dir: str, n: int, n_candidates: int, window_tokens: int) -> dict[str, Any]:
    """Reranker and BM25 figures on the first n held-out questions."""
    from host.prism import BertCrossEncoder
    from tools.train import qa_corpus

    model = BertCrossEncoder.from_pretrained(model_dir, max_length=window_tokens)
    t0 = time.perf_counter()
    questions = qa_corpus.load_split("held-out", n, n_candidates=n_candidates, window_tokens=window_tokens)
    t_corpus = time.perf_counter() - t0
    r_ndcg, b_ndcg, r_rec, b_rec, r_mrr, secs = [], [], [], [], [], []
    by_type: dict[str, list[float]] = {}
    for q in questions:
        texts = [c["text"] for c in q["candidates"]]
        rels = [c["relevance"] for c in q["candidates"]]
        t = time.perf_counter()
        rs = model.score(q["question"], texts).tolist()
        secs.append(time.perf_counter() - t)
        ro, bo = rank(rs), rank(bm25_scores(q["question"], texts))
        r_ndcg.append(ndcg_at([rels[i] for i in ro], rels))
        b_ndcg.append(ndcg_at([rels[i] for i in bo], rels))
        r_rec.append(recall_at(ro, rels))
        b_rec.append(recall_at(bo, rels))
        r_mrr.append(next(1.0 / (k + 1) for k, i in enumerate(ro) if rels[i] == 2) if 2 in rels else 0.0)
        by_type.setdefault(q.get("type", "?"), []).append(r_ndcg[-1] - b_ndcg[-1])

    def mean(xs: list[float]) -> float:
        return round(float(np.mean(xs)), 4) if xs else float("nan")

    return {
        "reranker_ndcg10": mean(r_ndcg), "bm25_ndcg10": mean(b_ndcg),
        "reranker_top5_recall": mean(r_rec), "bm25_top5_recall": mean(b_rec),
        "reranker_mrr_answer": mean(r_mrr),
        "ndcg10_gain_by_type": {k: mean(v) for k, v in sorted(by_type.items())},
        "questions": len(questions), "question_types": {k: len(v) for k, v in sorted(by_type.items())},
        "split": "held-out (plant seeds >= 2000)", "candidates_per_question": n_candidates,
        "window_tokens": window_tokens, "reranker_s_per_query": mean(secs), "corpus_s": round(t_corpus, 2),
        "reranker_runtime": "host/prism/bert.py (numpy), monolithic batch",
    }


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench models", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    ap.add_argument("--quick", action="store_true", help="%(n)d questions x %(candidates)d windows of ~%(window_tokens)d "
                    "tokens" % QUICK)
    ap.add_argument("--n", type=int, help="held-out questions (default %d)" % FULL["n"])
    ap.add_argument("--candidates", type=int, help="windows per question (default %d)" % FULL["candidates"])
    ap.add_argument("--window-tokens", type=int, help="tokens per window (default %d)" % FULL["window_tokens"])
    ap.add_argument("--model", help="reranker directory (default: host.weights.reranker_dir())")
    ap.add_argument("--no-draft", action="store_true", help="skip tools.train.eval_draft")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key, val in (("n", args.n), ("candidates", args.candidates), ("window_tokens", args.window_tokens)):
        if val is not None:
            if val < 1:
                ap.error("--%s must be positive" % key.replace("_", "-"))
            cfg[key] = val
    from host.prism import PrismModelError
    from tools.train.qa_corpus import CorpusError

    try:
        if args.model:
            model_dir = args.model
        else:
            from host.weights import reranker_dir
            model_dir = str(reranker_dir())
        out: dict[str, Any] = {"bench": "models", "quick": args.quick, "model": model_dir}
        out.update(evaluate(model_dir, cfg["n"], cfg["candidates"], cfg["window_tokens"]))
    except (PrismModelError, CorpusError, FileNotFoundError, ValueError) as e:
        print(json.dumps({"bench": "models", "error": "%s: %s" % (type(e).__name__, e)}))
        return 2
    out["reranker_beats_bm25"] = out["reranker_ndcg10"] > out["bm25_ndcg10"]
    if args.no_draft:
        out.update({"draft": None, "draft_reason": "skipped (--no-draft)"})
    else:
        out.update(draft_figures(args.quick))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
