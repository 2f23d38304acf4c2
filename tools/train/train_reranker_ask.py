"""Reranker phase 5: every layer trained on `edgetwin ask`'s own candidates, with early exits and the retrieval prior.

PRISM prunes after every layer by the head's score on the intermediate [CLS] state, so that score has to
rank like the final one early. Phases 1-4 (train_reranker.py) trained only the top layers on 512-token
corpus windows; here, starting from them:

- the candidates are ask's own: host.qa.retrieve's FTS5 top 20 (the record's window pinned first) of the
  train seeds' questions (tools/bench/prism_questions, the bench's construction on other seeds);
- every exit's logit is head(h_l[CLS]) + prior, prior = -beta * log(1 + retrieval rank) + gamma * pinned
  (beta, gamma learned here, shipped in prism.json): the model learns what to change in retrieval's order,
  not to re-find what bm25 already found;
- loss per exit l: listwise cross-entropy against the labels (target ~ 2**relevance - 1) plus, for l < last,
  KL from the final exit's distribution (detached) to exit l's (self-distillation: the early exits learn to
  rank as the full model does, which is what the pruning's top-K agreement measures);
- every other step is a phase-1..4 corpus group (512-token windows, no prior, the final exit only): the
  head alone must keep ranking `bench models`' windows as well as before.

Needs torch + transformers (the test extra); never used at run time.

    python -m tools.train.train_reranker_ask --init-delta models/reranker/delta.safetensors --out build/phase5
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

from host.prism import wordpiece  # noqa: E402
from host.weights import minilm_dir  # noqa: E402
from tools.train.train_reranker import DELTA_FILE, _load_delta, _trained, groups_of, listwise_target  # noqa: E402

PRIOR_INIT = (2.0, 2.0)  # beta, gamma: what a fit of the phase-4 model's final logit + prior found on validation


def ask_groups(questions: list[dict], size: int, rng: random.Random) -> list[tuple[str, list[str], list[int], list[int], list[int]]]:
    """(question, texts, relevance, retrieval ranks, pinned flags) per question: every relevant window, then
    retrieval's best-ranked others (the hard negatives the exits must place), then random ones, to `size`."""
    out = []
    for q in questions:
        n = len(q["texts"])
        rel = [j for j in range(n) if q["relevance"][j] > 0]
        top = [j for j in range(n) if j not in rel][:max(0, size // 2)]
        rest = [j for j in range(n) if j not in rel and j not in top]
        rng.shuffle(rest)
        pick = (rel + top + rest)[:size]
        out.append((q["question"], [q["texts"][j] for j in pick], [q["relevance"][j] for j in pick], pick,
                    [int(j < q["pinned"]) for j in pick]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="train_reranker_ask", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where the trained tensors go")
    ap.add_argument("--init-delta", required=True, help="phase 4's delta.safetensors")
    ap.add_argument("--seeds", type=int, default=120, help="train plant seeds whose questions are used")
    ap.add_argument("--group", type=int, default=10, help="ask candidates per step")
    ap.add_argument("--corpus-questions", type=int, default=480, help="corpus questions for the interleaved steps")
    ap.add_argument("--corpus-group", type=int, default=4)
    ap.add_argument("--corpus-every", type=int, default=2, help="a corpus step after every N-th ask step")
    ap.add_argument("--steps", type=int, default=1600, help="ask steps (each followed by a corpus step)")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (the schedule keeps its "
                    "length: a reproducible cut of a longer run, e.g. at the checkpoint validation chose)")
    ap.add_argument("--minutes", type=float, default=60.0, help="stop after this much wall time")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--prior-lr", type=float, default=1e-2)
    ap.add_argument("--distill", type=float, default=1.0, help="weight of the KL from the final exit to each earlier one")
    ap.add_argument("--exit-weights", default="0.5,0.7,0.9,1.0,1.0,1.0", help="per-layer weights of the exits' losses")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--save-every", type=int, default=400)
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args(argv)

    import torch
    from safetensors.numpy import save_file
    from transformers import BertForSequenceClassification

    from tools.bench import prism_questions
    from tools.train import qa_corpus

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    t_start = time.time()
    ask_qs, skipped = prism_questions.ask_questions("train", n=10 ** 9, limit=20, k=5, seeds=args.seeds)
    corpus = qa_corpus.load_split("train", args.corpus_questions, n_candidates=20, window_tokens=512)
    print("ask questions: %d (skipped %s), corpus questions: %d (%.0f s)" % (
        len(ask_qs), skipped, len(corpus), time.time() - t_start), flush=True)
    ask = ask_groups(ask_qs, args.group, rng)
    cgroups = groups_of(corpus, args.corpus_group, rng)

    backbone = str(minilm_dir())
    model = BertForSequenceClassification.from_pretrained(backbone, num_labels=1)
    print("initialised %d tensors from %s" % (_load_delta(model, args.init_delta), args.init_delta), flush=True)
    n_layers = model.config.num_hidden_layers
    prefixes = ("bert.encoder.layer.", "bert.pooler.", "classifier.")
    params = []
    for name, p in model.named_parameters():
        p.requires_grad = name.startswith(prefixes)
        if p.requires_grad:
            params.append(p)
    prior = torch.nn.Parameter(torch.tensor(PRIOR_INIT))
    opt = torch.optim.AdamW([{"params": params, "lr": args.lr, "weight_decay": 0.01},
                             {"params": [prior], "lr": args.prior_lr, "weight_decay": 0.0}])
    warm = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1.0 - s / args.steps))
    exit_w = [float(w) for w in args.exit_weights.split(",")]
    if len(exit_w) != n_layers:
        ap.error("--exit-weights needs %d weights" % n_layers)
    tok512 = wordpiece.load_tokenizer(backbone, 512)
    model.train()
    model.bert.embeddings.eval()

    def exits(ids, types, mask):
        out = model.bert(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                         attention_mask=torch.from_numpy(mask), output_hidden_states=True)
        return [model.classifier(model.dropout(model.bert.pooler(out.hidden_states[l + 1])))[:, 0]
                for l in range(n_layers)]

    corder: list[int] = []
    chist: list[float] = []

    def corpus_loss():
        if not corder:
            corder.extend(range(len(cgroups)))
            rng.shuffle(corder)
        cq, ctexts, crels = cgroups[corder.pop()]
        cids, ctypes, cmask = wordpiece.encode_pairs(tok512, cq, ctexts)
        ctarget = listwise_target(crels)
        cz = model(input_ids=torch.from_numpy(cids), token_type_ids=torch.from_numpy(ctypes),
                   attention_mask=torch.from_numpy(cmask)).logits[:, 0]
        closs = -(ctarget * torch.log_softmax(cz, dim=0)).sum()
        chist.append(float(closs.detach()))
        return closs

    aorder: list[int] = []
    hist: list[list[float]] = []
    t0 = time.time()
    step = 0
    out_dir = Path(args.out)
    for step in range(args.steps):
        if not aorder:
            aorder = list(range(len(ask)))
            rng.shuffle(aorder)
        question, texts, rels, ranks, pins = ask[aorder.pop()]
        ids, types, mask = wordpiece.encode_pairs(tok512, question, texts)
        target = listwise_target(rels)
        feats = torch.tensor([[-math.log1p(r), float(p)] for r, p in zip(ranks, pins)])
        bias = feats @ prior
        zs = exits(ids, types, mask)
        logps = [torch.log_softmax(z + bias, dim=0) for z in zs]
        final_p = logps[-1].detach().exp()
        loss = torch.zeros(())
        per = []
        for l, lp in enumerate(logps):
            ll = -(target * lp).sum()
            if l < n_layers - 1 and args.distill:
                ll = ll + args.distill * (final_p * (logps[-1].detach() - lp)).sum()
            per.append(float(ll.detach()))
            loss = loss + exit_w[l] * ll
        # the corpus step: the final exit alone, no prior (bench models' windows have no retrieval order)
        if step % args.corpus_every == 0:
            loss = loss + corpus_loss()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        hist.append(per)
        if (step + 1) % args.log_every == 0:
            el = time.time() - t0
            print("step %d/%d %.2f s/step %.0f s  exits %s  corpus %.3f  prior %.3f %.3f" % (
                step + 1, args.steps, el / (step + 1), el,
                " ".join("%.3f" % v for v in np.mean(hist[-args.log_every:], axis=0)),
                float(np.mean(chist[-args.log_every // args.corpus_every:])), *prior.detach().tolist()), flush=True)
        if args.save_every and (step + 1) % args.save_every == 0:
            save(out_dir / ("step_%d" % (step + 1)), model, prefixes, prior, save_file)
        if args.max_steps is not None and step + 1 >= args.max_steps:
            break
        if time.time() - t_start > args.minutes * 60:
            print("time budget reached at step %d" % (step + 1), flush=True)
            break
    save(out_dir, model, prefixes, prior, save_file)
    info = {
        "phase": "ask", "init_delta": args.init_delta, "trained_layers": list(range(n_layers)),
        "window_tokens": "ask's (%d lines)" % prism_questions.ask_lines(),
        "questions": len(ask_qs), "seeds": args.seeds, "skipped": skipped, "group": args.group,
        "corpus_questions": len(corpus),
        "corpus_group": args.corpus_group, "steps": step + 1, "lr": args.lr, "prior_lr": args.prior_lr,
        "distill": args.distill, "exit_weights": exit_w, "seed": args.seed, "threads": args.threads,
        "prior": {"rank_log": round(-float(prior[0].detach()), 6), "pinned": round(float(prior[1].detach()), 6)},
        "corpus_every": args.corpus_every,
        "exit_losses_last100": [round(float(v), 4) for v in np.mean(hist[-100:], axis=0)],
        "corpus_loss_last50": round(float(np.mean(chist[-50:])), 4),
        "train_seconds": round(time.time() - t0, 1), "cpu_seconds_total": round(time.process_time(), 1),
        "torch": torch.__version__,
    }
    (out_dir / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))
    return 0


def save(where: Path, model, prefixes, prior, save_file) -> None:
    """The trained tensors (float16) and the learned prior beside them (a checkpoint's; the last one's also goes
    into training.json, which make_reranker's calibration reads)."""
    where.mkdir(parents=True, exist_ok=True)
    save_file(_trained(model, prefixes), str(where / DELTA_FILE), metadata={"format": "pt"})
    beta, gamma = prior.detach().tolist()
    (where / "prior.json").write_text(json.dumps({"rank_log": -beta, "pinned": gamma}) + "\n")
    print("saved %s" % where, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
