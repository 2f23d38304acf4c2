"""Fit PRISM's per-layer exit heads (host/prism/exits.py) to the reranker's own final scores: exits.safetensors.

    python -m tools.train.reranker_exits --model build/models/reranker --out models/reranker/exits.safetensors

The encoder is not touched: for train-split questions with `ask`'s own candidates (tools/bench/prism_questions.py),
the numpy model runs every layer once, keeps each intermediate layer's pooled states ([CLS] ; mean of the tokens)
and the final exit's logit, and a ridge regression per layer maps the states to that logit (distillation: the
exits learn to predict what the full model will say, so pruning can act on it early). The bias is not penalised.
The final layer keeps the model's head, so the final ranking and every quality figure of the model are unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host.prism.bert import BertCrossEncoder  # noqa: E402
from host.prism.exits import ExitHeads, pooled_states  # noqa: E402

RIDGE = 1.0  # the L2 penalty: 0.3 / 1 / 3 calibrated to 2.8 / 2.9 / 3.2 layers on validation (2026-12-05)
QUESTIONS = 450  # train questions (ask's candidates) the shipped heads are fitted on
SEEDS = 30  # plant seeds they come from (train seeds 0..29: ~15 usable questions each)


def layer_states(model: BertCrossEncoder, question: str, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(pooled states [layers - 1, n, 2H] after every layer but the last, final logits [n]) for one question."""
    batch = model.encode(question, list(texts))
    hidden = model.embed(batch.input_ids, batch.token_type_ids)
    L = model.config.num_layers
    states = np.empty((L - 1, hidden.shape[0], 2 * model.config.hidden_size), np.float32)
    for l in range(L):
        hidden = model.layer(l, hidden, batch.attention_mask)
        if l < L - 1:
            states[l] = pooled_states(hidden, batch.attention_mask)
    return states, model.head(hidden[:, 0])[:, -1].astype(np.float64)


def collect(model: BertCrossEncoder, questions: Sequence[dict],
            progress: Optional[Callable[[int, int], None]] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(states [layers - 1, N, 2H], final logits [N], question index [N]) over every candidate of every question."""
    xs, zs, qid = [], [], []
    for i, q in enumerate(questions):
        x, z = layer_states(model, q["question"], q["texts"])
        xs.append(x)
        zs.append(z)
        qid += [i] * len(z)
        if progress is not None:
            progress(i + 1, len(questions))
    return np.concatenate(xs, axis=1), np.concatenate(zs), np.array(qid)


def fit(states: np.ndarray, target: np.ndarray, ridge: float = RIDGE) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression per layer: (weight [layers - 1, D], bias [layers - 1]) minimising
    |X w + b - target|^2 + ridge |w|^2 (b unpenalised: features and target are centred first)."""
    if states.ndim != 3 or states.shape[1] != target.shape[0]:
        raise ValueError("states [layers, N, D] and target [N] do not match: %s, %s" % (states.shape, target.shape))
    if states.shape[1] < 2:
        raise ValueError("need at least two candidates to fit exit heads")
    if not ridge > 0:
        raise ValueError("ridge must be > 0, got %r" % (ridge,))
    t = np.asarray(target, np.float64)
    tm = t.mean()
    weight = np.empty((states.shape[0], states.shape[2]))
    bias = np.empty(states.shape[0])
    for l in range(states.shape[0]):
        x = states[l].astype(np.float64)
        xm = x.mean(axis=0)
        xc = x - xm
        a = xc.T @ xc
        a[np.diag_indices_from(a)] += ridge
        weight[l] = np.linalg.solve(a, xc.T @ (t - tm))
        bias[l] = tm - xm @ weight[l]
    return weight, bias


def r2_within(pred: np.ndarray, target: np.ndarray, qid: np.ndarray) -> float:
    """Share of the final logits' spread inside each question that pred explains (what ranking depends on)."""
    p, t = pred.astype(np.float64).copy(), target.astype(np.float64).copy()
    for i in np.unique(qid):
        m = qid == i
        p[m] -= p[m].mean()
        t[m] -= t[m].mean()
    var = float((t * t).mean())
    return 1.0 - float(((p - t) ** 2).mean()) / var if var > 0 else 0.0


def report(heads: ExitHeads, states: np.ndarray, target: np.ndarray, qid: np.ndarray) -> list[float]:
    """Within-question R^2 of each exit head on the given states."""
    return [round(r2_within(states[l] @ heads.weight[l] + heads.bias[l], target, qid), 4)
            for l in range(states.shape[0])]


def train(model_dir: str, questions: int = QUESTIONS, seeds: int = SEEDS, ridge: float = RIDGE,
          split: str = "train") -> tuple[ExitHeads, dict]:
    """Fit the heads on `questions` questions of `split` (ask's top 20 each); (heads, a JSON-able record)."""
    from tools.bench import prism_questions

    t0 = time.time()
    model = BertCrossEncoder.from_pretrained(model_dir, max_length=512)
    qs, skipped = prism_questions.ask_questions(split, questions, 20, 5, seeds=seeds)
    if len(qs) < 2:
        raise SystemExit("reranker_exits: %d usable %s questions: too few to fit exit heads" % (len(qs), split))

    def progress(i: int, n: int) -> None:
        if i == n or i % 25 == 0:
            print("reranker_exits: %d/%d questions (%.0f s)" % (i, n, time.time() - t0), file=sys.stderr, flush=True)

    states, target, qid = collect(model, qs, progress)
    weight, bias = fit(states, target, ridge)
    cfg = model.config
    heads = ExitHeads(weight, bias, cfg.hidden_size, cfg.num_layers)
    record = {"questions": len(qs), "split": split, "seeds": seeds, "candidates": int(target.size), "ridge": ridge,
              "skipped": skipped, "r2_within_train": report(heads, states, target, qid),
              "features": "[CLS] state ; mean token state of each layer", "target": "the final exit's logit",
              "seconds": round(time.time() - t0, 1)}
    return heads, record


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="reranker_exits", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the assembled reranker directory")
    ap.add_argument("--out", required=True, type=Path, help="where exits.safetensors goes")
    ap.add_argument("--questions", type=int, default=QUESTIONS)
    ap.add_argument("--seeds", type=int, default=SEEDS)
    ap.add_argument("--ridge", type=float, default=RIDGE)
    args = ap.parse_args(argv)
    if args.questions < 2 or args.seeds < 1 or not args.ridge > 0:
        ap.error("--questions >= 2, --seeds >= 1 and --ridge > 0 are needed")
    heads, record = train(args.model, args.questions, args.seeds, args.ridge)
    heads.save(str(args.out))
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
