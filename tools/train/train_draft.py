"""Distil the node's draft model from the target on the stream corpus (PyTorch, CPU; never needed at run time).

    python -m tools.train.train_draft [--out build/draft] [--minutes 10] [--dim 128 --layers 2 --hidden 256]

The draft is a small Llama (RMSNorm, interleaved-pair RoPE base 10000, GQA, SwiGLU, tied embeddings) over
a **compact vocabulary**: the S most frequent target ids of the training streams (row r of the
embedding/classifier is target id vocab[r]), plus one shared row for every other id (the "rare" row:
its input embedding is learned from the rare tokens; as an output it maps to a target id the text
never uses, so its probability is trained down and sampling stays exact: q(x) = 0 for ids outside the
sub-vocabulary). Training uses the node's attention exactly: a sink + ring window (sink 4, window 28,
as shared/llama.py and host/llama_np.py compute it: window keys at their true distance, sink keys seen
from position min(m, sink + window)), over whole streams, computed in blocks of BLOCK queries that score
the sink and their window only (`banded`: linear in the stream's length; `dense=True` scores every key
under a mask, the reference the tests hold it to).

Loss, per position whose next token is a note token (the draft drafts only notes; prompt positions get
weight 0.1): KL to the target's distribution (its top-K logits from tools/train/corpus.py, renormalised, ids
outside the sub-vocabulary dropped) plus cross-entropy on the stream's next token (sequence-level
distillation: the stream's notes are the target's own text, greedy, or drawn at T = 0.7 on the corpus's
sampled streams, so the draft also sees where sampling takes the target).

Writes OUT/draft.pt (state dict + config + vocab) and OUT/draft.bin (llama2.c v1, the compact
vocabulary as its vocab_size) for tools/formats/convert.py; tools/train/make_draft.py turns that into the MBF.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.train import corpus  # noqa: E402

RARE_ID = 0  # target id the rare row maps to as an output (<|endoftext|>: never in a stream)
BLOCK = 32  # queries per block of the banded attention


def build_vocab(streams: list[dict], size: int) -> np.ndarray:
    """Target ids of the compact vocabulary: row 0 is the rare row (RARE_ID), then the most frequent ids
    of the streams (note tokens and the target's top-1 counted twice), ties by lower id; ascending
    after row 0 is not required (vocab_map is any list of ids)."""
    counts: dict[int, int] = {}
    for s in streams:
        ids = s["ids"]
        for t, w in zip(ids.tolist(), (1 + s["note"]).tolist()):
            counts[t] = counts.get(t, 0) + int(w)
        for t in s["topk_ids"][:, 0].tolist():
            counts[t] = counts.get(t, 0) + 1
    counts.pop(RARE_ID, None)
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size - 1]
    return np.array([RARE_ID] + sorted(t for t, _ in best), np.int64)


def compact_map(vocab: np.ndarray, n_full: int = 49152) -> np.ndarray:
    """Target id -> row (the rare row 0 for ids outside the vocabulary)."""
    m = np.zeros(n_full, np.int64)
    m[vocab] = np.arange(len(vocab))
    m[RARE_ID] = 0
    return m


def make_model(cfg: dict):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            d, h, kv, hd, hid = c["dim"], c["n_heads"], c["n_kv_heads"], c["dim"] // c["n_heads"], c["hidden_dim"]
            self.h, self.kv, self.hd = h, kv, hd
            self.attn_norm = RMSNorm(d)
            self.wq = nn.Linear(d, h * hd, bias=False)
            self.wk = nn.Linear(d, kv * hd, bias=False)
            self.wv = nn.Linear(d, kv * hd, bias=False)
            self.wo = nn.Linear(h * hd, d, bias=False)
            self.ffn_norm = RMSNorm(d)
            self.w1 = nn.Linear(d, hid, bias=False)
            self.w3 = nn.Linear(d, hid, bias=False)
            self.w2 = nn.Linear(hid, d, bias=False)

        def forward(self, x, rope_win, rope_sink, mask, sink, win):
            b, t, _ = x.shape
            hx = self.attn_norm(x)
            q = self.wq(hx).view(b, t, self.h, self.hd)
            k = self.wk(hx).view(b, t, self.kv, self.hd)
            v = self.wv(hx).view(b, t, self.kv, self.hd)
            k = rot(k, *rope_win).transpose(1, 2)  # (b, kv, t, hd): key j at position j
            qw = rot(q, *rope_win).transpose(1, 2)
            g = self.h // self.kv
            k = k.repeat_interleave(g, 1)
            vv = v.transpose(1, 2).repeat_interleave(g, 1)
            qs = rot(q, *rope_sink).transpose(1, 2) if sink else None
            if mask is None:
                att = banded(qw, qs, k, vv, sink, win)
            else:  # the dense form: every key scored, the mask keeps the sink and the window (the reference)
                sc = qw @ k.transpose(-1, -2)
                if sink:
                    sc = torch.cat([qs @ k[:, :, :sink].transpose(-1, -2), sc[..., sink:]], -1)
                sc = sc / math.sqrt(self.hd) + mask
                att = torch.softmax(sc, -1) @ vv
            x = x + self.wo(att.transpose(1, 2).reshape(b, t, -1))
            hx = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(hx)) * self.w3(hx))

    def banded(qw, qs, k, v, sink, win):
        """Attention over the sink and the window only, in blocks of BLOCK queries: each block scores the sink keys
        and the win + BLOCK keys before its end, so the cost grows with t, not t * t (a plant stream of 2,500
        tokens scored every key in the dense form: most of a step's time). The same result as the dense form."""
        b, h, t, hd = qw.shape
        nb = -(-t // BLOCK)
        pad = nb * BLOCK - t
        qb = F.pad(qw, (0, 0, 0, pad)).view(b, h, nb, BLOCK, hd)
        kw = F.pad(k, (0, 0, win, pad)).unfold(2, BLOCK + win, BLOCK).transpose(-1, -2)  # (b, h, nb, BLOCK+win, hd)
        vw = F.pad(v, (0, 0, win, pad)).unfold(2, BLOCK + win, BLOCK).transpose(-1, -2)
        i = (torch.arange(nb)[:, None] * BLOCK + torch.arange(BLOCK)[None, :])[:, :, None]  # query positions
        j = torch.arange(nb)[:, None, None] * BLOCK - win + torch.arange(BLOCK + win)[None, None, :]  # its keys
        ok = (j <= i) & (j >= i - win) & (j >= sink)  # a sink key is scored once, by the sink query below
        sc = (qb @ kw.transpose(-1, -2)) / math.sqrt(hd) + torch.where(ok, 0.0, float("-inf"))
        vals = vw
        if sink:
            ns = min(sink, t)  # a stream shorter than the sink has that many sink keys
            qsb = F.pad(qs, (0, 0, 0, pad)).view(b, h, nb, BLOCK, hd)
            ks = k[:, :, :ns][:, :, None]  # (b, h, 1, ns, hd)
            js = torch.arange(ns)[None, None, :]
            ssc = (qsb @ ks.transpose(-1, -2)) / math.sqrt(hd) + torch.where(js <= i, 0.0, float("-inf"))
            sc = torch.cat([ssc, sc], -1)
            vals = torch.cat([v[:, :, :ns][:, :, None].expand(b, h, nb, ns, hd), vw], -2)
        att = torch.softmax(sc, -1) @ vals  # (b, h, nb, BLOCK, hd)
        return att.reshape(b, h, nb * BLOCK, hd)[:, :, :t]

    def rot(x, cos, sin):  # interleaved pairs (2i, 2i+1), as llama2.c and the MBF style 0
        a, b = x[..., 0::2], x[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)

    class Draft(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            self.emb = nn.Embedding(c["vocab"], c["dim"])
            nn.init.normal_(self.emb.weight, std=0.02)
            self.blocks = nn.ModuleList([Block(c) for _ in range(c["n_layers"])])
            self.norm = RMSNorm(c["dim"])

        def forward(self, ids, dense=False):
            c = self.c
            t = ids.shape[1]
            hd = c["dim"] // c["n_heads"]
            sink, win = c["sink"], c["window"]
            inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
            m = torch.arange(t, dtype=torch.float64)
            ang = m[:, None] * inv[None]
            angs = torch.clamp(m, max=sink + win)[:, None] * inv[None]
            rw = (torch.cos(ang).float(), torch.sin(ang).float())
            rs = (torch.cos(angs).float(), torch.sin(angs).float())
            mask = None
            if dense:
                mi = torch.arange(t)[:, None]
                j = torch.arange(t)[None, :]
                ok = (j <= mi) & ((j < sink) | (j >= mi - win))
                mask = torch.where(ok, 0.0, float("-inf"))
            x = self.emb(ids)
            for blk in self.blocks:
                x = blk(x, rw, rs, mask, sink, win)
            return self.norm(x) @ self.emb.weight.T

    return Draft(cfg)


def stream_tensors(streams: list[dict], cmap: np.ndarray, prompt_weight: float = 0.1):
    """Per stream: input rows, next-token rows, soft targets over the compact vocabulary (top-K
    renormalised over ids it holds), and position weights."""
    out = []
    for s in streams:
        ids = s["ids"].astype(np.int64)
        n = len(ids) - 1
        x = cmap[ids[:-1]]
        y_full = ids[1:]
        y = cmap[y_full]
        in_vocab = (y != 0)
        w = np.where(s["note"][1:] == 1, 1.0, prompt_weight).astype(np.float32)
        tk = s["topk_ids"][:n].astype(np.int64)
        lg = s["topk_logits"][:n].astype(np.float32)
        lse = s["lse"][:n][:, None]
        p = np.exp(lg - lse)
        rows = cmap[tk]
        p = np.where(rows == 0, 0.0, p)  # mass outside the sub-vocabulary: the draft cannot give it
        p = p / np.maximum(p.sum(1, keepdims=True), 1e-9)
        out.append(dict(x=x, y=y, hard=in_vocab.astype(np.float32), w=w, rows=rows, p=p.astype(np.float32)))
    return out


def _batch(items):
    import torch
    t = max(len(i["x"]) for i in items)
    k = items[0]["rows"].shape[1]
    b = len(items)
    x = np.zeros((b, t), np.int64)
    y = np.zeros((b, t), np.int64)
    hard = np.zeros((b, t), np.float32)
    w = np.zeros((b, t), np.float32)
    rows = np.zeros((b, t, k), np.int64)
    p = np.zeros((b, t, k), np.float32)
    for i, it in enumerate(items):
        n = len(it["x"])
        x[i, :n], y[i, :n], hard[i, :n], w[i, :n], rows[i, :n], p[i, :n] = it["x"], it["y"], it["hard"], it["w"], it["rows"], it["p"]
    return [torch.from_numpy(a) for a in (x, y, hard, w, rows, p)]


def losses(model, batch, ce_weight=1.0):
    import torch
    x, y, hard, w, rows, p = batch
    logits = model(x)
    logq = torch.log_softmax(logits, -1)
    kl = -(p * torch.gather(logq, -1, rows)).sum(-1) + (p * torch.log(p.clamp_min(1e-9))).sum(-1)
    ce = -torch.gather(logq, -1, y[..., None])[..., 0] * hard
    tot = (w * (kl + ce_weight * ce)).sum() / w.sum()
    return tot, logits


@np.errstate(all="ignore")
def evaluate(model, items, note_only=True) -> dict:
    """Greedy top-1 agreement with the target's next token and mean KL, on note positions."""
    import torch
    agree = n = 0
    kl_sum = 0.0
    with torch.no_grad():
        for i in range(0, len(items), 8):
            x, y, hard, w, rows, p = _batch(items[i:i + 8])
            logq = torch.log_softmax(model(x), -1)
            sel = w == 1.0 if note_only else w > 0
            agree += int(((logq.argmax(-1) == y) & sel).sum())
            n += int(sel.sum())
            kl = -(p * torch.gather(logq, -1, rows)).sum(-1) + (p * torch.log(p.clamp_min(1e-9))).sum(-1)
            kl_sum += float((kl * sel).sum())
    return {"top1": agree / max(1, n), "kl": kl_sum / max(1, n), "positions": n}


def train(out: Path, dim=128, layers=2, heads=4, kv_heads=2, hidden=256, vocab_size=512, minutes=10.0,
          train_streams=None, val_streams=None, seed=1, threads=2, lr=3e-3, log=print, steps=None) -> dict:
    """Train for `minutes` of wall time, or exactly `steps` optimiser steps when given (the schedule then
    runs on the step count: the reproducible form). Returns the run's info (also in OUT/train.json)."""
    import torch
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    t0 = time.time()
    # both families (the built-in plant and generated plants) unless a count of built-in streams is given
    tr = corpus.load_training("train") if train_streams is None else corpus.load_split("train", train_streams)
    va = corpus.load_training("validation") if val_streams is None else corpus.load_split("validation", val_streams)
    vocab = build_vocab(tr, vocab_size)
    cmap = compact_map(vocab)
    cfg = dict(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads, hidden_dim=hidden, vocab=len(vocab),
               sink=corpus.SINK, window=corpus.WINDOW)
    model = make_model(cfg)
    tr_items = stream_tensors(tr, cmap)
    va_items = stream_tensors(va, cmap)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    bs = 4
    steps_per_epoch = max(1, len(tr_items) // bs)
    budget = minutes * 60
    rng = np.random.default_rng(seed)
    step = 0
    hist = []
    t_train = time.time()
    est_total = None
    while True:
        order = rng.permutation(len(tr_items))
        for a in range(0, steps_per_epoch * bs, bs):
            el = time.time() - t_train
            if (steps is None and el > budget) or (steps is not None and step >= steps):
                break
            frac = el / budget if steps is None else step / steps
            for g in opt.param_groups:  # warm-up then cosine, on wall time (the machine is shared)
                g["lr"] = lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            loss, _ = losses(model, _batch([tr_items[i] for i in order[a:a + bs]]))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 50 == 0:
                model.eval()
                ev = evaluate(model, va_items)
                model.train()
                hist.append({"step": step, "s": round(time.time() - t_train), "loss": round(float(loss.detach()), 4), **ev})
                log("train: step %d %.0fs loss %.3f val top1 %.3f kl %.3f" % (step, time.time() - t_train, float(loss.detach()),
                                                                              ev["top1"], ev["kl"]))
        else:
            continue
        break
    train_s = time.time() - t_train
    model.eval()
    ev = evaluate(model, va_items)
    out.mkdir(parents=True, exist_ok=True)
    n_params = sum(p.numel() for p in model.parameters())
    info = {"config": cfg, "vocab": vocab.tolist(), "steps": step, "train_seconds": round(train_s, 1),
            "total_seconds": round(time.time() - t0, 1), "params": int(n_params), "val": ev, "history": hist,
            "train_streams": len(tr), "val_streams": len(va), "threads": threads, "seed": seed, "lr": lr}
    torch.save({"state": model.state_dict(), "info": info}, out / "draft.pt")
    export_llama2c(model, cfg, out / "draft.bin")
    (out / "train.json").write_text(json.dumps({k: v for k, v in info.items() if k != "vocab"}, indent=1))
    return info


def load(path: Path):
    import torch
    ck = torch.load(path, map_location="cpu", weights_only=False)
    model = make_model(ck["info"]["config"])
    model.load_state_dict(ck["state"])
    model.eval()
    return model, ck["info"]


def export_llama2c(model, cfg: dict, path: Path) -> int:
    """llama2.c version 1 with the compact vocabulary (tied classifier): what tools/formats/convert.py reads."""
    from tools.formats import llama2c
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = {"token_embd": sd["emb.weight"], "output_norm": sd["norm.w"]}
    names = {"attn_norm": "attn_norm.w", "attn_q": "wq.weight", "attn_k": "wk.weight", "attn_v": "wv.weight",
             "attn_output": "wo.weight", "ffn_norm": "ffn_norm.w", "ffn_gate": "w1.weight", "ffn_up": "w3.weight",
             "ffn_down": "w2.weight"}
    for L in range(cfg["n_layers"]):
        for part, key in names.items():
            w["blk.%d.%s" % (L, part)] = sd["blocks.%d.%s" % (L, key)]
    c = llama2c.Llama2cConfig(cfg["dim"], cfg["hidden_dim"], cfg["n_layers"], cfg["n_heads"], cfg["n_kv_heads"],
                              cfg["vocab"], 256, True)
    return llama2c.write_model(path, c, w, version=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.train_draft", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "draft"))
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=512,
                    help="compact vocabulary rows with the rare row (default %(default)s: the node's output rows at most)")
    ap.add_argument("--minutes", type=float, default=10.0, help="training wall-time budget")
    ap.add_argument("--steps", type=int, help="exactly this many steps (overrides --minutes; reproducible)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    info = train(Path(args.out), args.dim, args.layers, args.heads, args.kv_heads, args.hidden, args.vocab, args.minutes,
                 threads=args.threads, seed=args.seed, log=lambda m: print(m, file=sys.stderr), steps=args.steps)
    print(json.dumps({k: v for k, v in info.items() if k not in ("vocab", "history")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
