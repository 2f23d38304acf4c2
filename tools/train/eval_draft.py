"""How well the node's INT4 draft predicts the target on held-out plant streams, and how close it is to its float form.

    python -m tools.train.eval_draft [--split heldout] [--quick] [--mbf models/draft/draft.mbf]
    from tools.train.eval_draft import draft_metrics; draft_metrics("heldout", quick=False) -> dict

The draft runs on the board runtime (shared/llama.py, integer W4A8 kernels, int8 ring KV cache with the
rp2040_pico geometry: sink 4, window 28, staged 8) over each held-out stream of tools/train/corpus.py: the
system prompt, then per episode the log-line prompt and the target's note (SmolLM2-135M-Instruct,
greedy, host/llama_np.py over the same sink + window geometry). One pass commits every token of the
stream; at each position it records the draft's integer logits.

- acceptance_rate_greedy_k4: greedy speculative decoding with blocks of K = 4, replayed exactly. Every
  accepted draft token equals the committed (target's greedy) token, so the draft's prediction of the
  j-th token of a block is its prediction on the committed prefix: the pass's argmax. A block starts at
  a note token, drafts min(K, tokens left under MAX_NOTE) tokens (stopping after a drafted newline
  token), is accepted up to the first mismatch, then the target's token is committed and the next block
  starts after it. Rate = accepted / drafted.
- acceptance_rate_t07_k4: temperature 0.7 (draft: llama.Sampler(top_k=16, T=0.7) counts, the most the node's drafter sends; target: its
  top-32 logits at T=0.7), exact per-token acceptance alpha = sum_x min(p(x), q(x)); for a block of K
  starting at each note token (at most up to the note's end), E[accepted] = sum_j prod_{l<=j} alpha_l
  along the committed path
  (alpha at later positions of a block taken on the committed prefix: the usual i.i.d.-alpha
  approximation of speculative-sampling analyses), rate = E[accepted] / K-or-fewer drafted.
- int4_top1 / int4_kl: agreement of the INT4 board runtime's argmax with the float (PyTorch) draft it
  was exported from, and mean KL(float || int4) in nats, over the note positions (needs torch and
  build/draft/draft.pt; left out without them).
Also: draft_params, draft_mbf_bytes, top1 of the draft vs the target on note positions (draft_top1).
sampled_run(): the T = 0.7 exchange actually run (draft samples, the target verifies with the exact
rule through host/verifier.py's accept_np / residual_np, both commit), on the held-out episodes' log
lines; slower (the target runs), so tools/train/make_draft.py records it beside the figures above.

quick=True (tests): the first stream, first 3 episodes; reads models/draft/heldout_sample.npz when the
corpus cache (build/corpus/) is absent, so it needs neither the target nor torch.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared import episode, llama, mbf  # noqa: E402
from tools.demo import spec_models  # noqa: E402

MODEL = ROOT / "models" / "draft" / "draft.mbf"
SAMPLE = ROOT / "models" / "draft" / "heldout_sample.npz"
# the held-out streams themselves (~200 KB), shipped so `edgetwin bench models` reproduces the card's
# acceptance on a clean clone without the target writing them (~30 min); keyed by the corpus config
SHIPPED = ROOT / "models" / "draft" / "heldout"
FLOAT = ROOT / "build" / "draft" / "draft.pt"
K = 4
SINK, WINDOW, STAGED = 4, 28, 8  # rp2040_pico's kv
QUICK_EPISODES = 3
T07 = 0.7
TOP_K = 16  # the most candidates shared/drafter.py sends per position


def open_draft(path: Path = MODEL, sink: int = SINK, window: int = WINDOW, staged: int = STAGED):
    r = mbf.open(str(path), budget=1 << 22)
    kv = spec_models.node_kv(r.config, sink, window, staged)
    return llama.Model(r, kv), kv, r


def _streams(split: str, quick: bool, generate: bool = False) -> list[dict]:
    from tools.train import corpus
    n = 1 if quick else corpus.DEFAULT_STREAMS[split]
    seeds = corpus.seeds_of(split, n)
    paths = [corpus.stream_path(s) for s in seeds]
    if quick and split == "heldout" and not all(p.is_file() for p in paths) and SAMPLE.is_file():
        return [corpus.load_stream(SAMPLE)]
    shipped = [SHIPPED / p.parent.name / p.name for p in paths]
    if not all(p.is_file() for p in shipped):  # the streams the shipped card was measured on: an older corpus
        keys = sorted(d for d in SHIPPED.iterdir() if d.is_dir()) if SHIPPED.is_dir() else []  # VERSION, until
        if len(keys) == 1:  # make_draft ships the current one's
            shipped = [keys[0] / p.name for p in paths]
    if split == "heldout" and not all(p.is_file() for p in paths) and all(p.is_file() for p in shipped):
        paths = shipped
        streams = [corpus.load_stream(p) for p in paths]
        return [cut(s, QUICK_EPISODES) for s in streams] if quick else streams
    missing = [p for p in paths if not p.is_file()]
    if missing and not generate:
        raise FileNotFoundError("%d %s streams are not in the corpus cache (%s): run `python -m tools.train.corpus` "
                                "(the target writes them: ~30 min on 2 cores) or use quick=True"
                                % (len(missing), split, missing[0].parent))
    streams = [corpus.load_stream(p) for p in corpus.generate(seeds)]
    return [cut(s, QUICK_EPISODES) for s in streams] if quick else streams


def cut(stream: dict, n_episodes: int) -> dict:
    """The stream up to the end of its n-th episode's note (the stop token included)."""
    eps = stream["meta"]["episodes"]
    if len(eps) <= n_episodes:
        return stream
    end = eps[n_episodes]["start"]  # the next prompt's first token; the n-th note's last token is just before
    out = {k: (v[:end] if isinstance(v, np.ndarray) else v) for k, v in stream.items()}
    out["meta"] = dict(stream["meta"], episodes=eps[:n_episodes])
    return out


def run_draft(model, kv, ids: np.ndarray, sampler=None):
    """One pass over ids, committing each token: (argmax target id, int logits (n, n_out) int64, q07 list)."""
    n_out = model.n_out
    n = len(ids)
    am = np.zeros(n, np.int64)
    lg = np.zeros((n, n_out), np.int64)
    q07 = []
    kv.reset()
    for i in range(n):
        model.step(int(ids[i]))
        kv.commit(1)
        logits = model.logits
        lg[i] = np.frombuffer(logits, dtype=np.int32, count=n_out) if hasattr(logits, "tobytes") else list(logits)[:n_out]
        am[i] = model.token_of(llama.argmax(logits, n_out))
        if sampler is not None:
            k = sampler.distribution(logits)
            q07.append({int(model.token_of(sampler.idx[j])): sampler.count[j] / 65536.0 for j in range(k)})
    return am, lg, q07


def _note_spans(stream: dict) -> list[tuple[int, int]]:
    """(first, last) index of each note's tokens in the stream."""
    note = stream["note"]
    spans = []
    i, n = 0, len(note)
    while i < n:
        if note[i]:
            j = i
            while j + 1 < n and note[j + 1]:
                j += 1
            spans.append((i, j))
            i = j + 1
        else:
            i += 1
    return spans


def greedy_blocks(ids, am, spans, stops, k=K):
    """(accepted, drafted) of greedy K-blocks over each note span (see the module docstring)."""
    acc = dr = 0
    for a, e in spans:
        j = a
        while j <= e:
            n = min(k, episode.MAX_NOTE - (j - a))
            if n <= 0:
                break
            got = 0
            drafted = n
            for t in range(n):
                pos = j + t
                d = am[pos - 1]
                if pos <= e and d == ids[pos]:
                    got += 1
                    if stops[d]:
                        drafted = t + 1
                        break
                else:
                    if stops[d]:
                        drafted = t + 1
                    break
            acc += got
            dr += drafted
            j += got + (1 if got < drafted or got < n else 0)
            if got == drafted and got < n:  # a drafted stop token accepted: the note ended
                break
    return acc, dr


def _p07(stream: dict, pos: int) -> dict:
    ids = stream["topk_ids"][pos]
    lg = stream["topk_logits"][pos].astype(np.float64) / T07
    p = np.exp(lg - lg.max())
    p /= p.sum()
    return dict(zip(ids.tolist(), p.tolist()))


def t07_blocks(stream, q07, spans, k=K):
    """(expected accepted, drafted) at T=0.7 for blocks starting at every note token."""
    alpha = {}
    for a, e in spans:
        for pos in range(a, e + 1):
            p = _p07(stream, pos - 1)
            q = q07[pos - 1]
            alpha[pos] = sum(min(pv, q.get(t, 0.0)) for t, pv in p.items())
    acc = dr = 0.0
    for a, e in spans:
        for j in range(a, e + 1):
            n = min(k, episode.MAX_NOTE - (j - a), e - j + 1)  # the draft stops after a stop token
            prod = 1.0
            for t in range(n):
                prod *= alpha.get(j + t, 0.0)
                acc += prod
            dr += n
    return acc, dr


def fidelity(stream_items, int_logits, note_pos) -> dict | None:
    """INT4 board runtime vs the float (torch) draft: top-1 agreement and mean KL(float || int4)."""
    try:
        import torch
        from tools.train import train_draft
    except ImportError:
        return None
    if not FLOAT.is_file():
        return None
    model, info = train_draft.load(FLOAT)
    cmap = train_draft.compact_map(np.array(info["vocab"]))
    agree = n = 0
    kl = 0.0
    with torch.no_grad():
        for ids, il, pos in zip(stream_items, int_logits, note_pos):
            f = model(torch.from_numpy(cmap[ids.astype(np.int64)])[None])[0].double()
            lf = torch.log_softmax(f, -1)
            li = torch.log_softmax(torch.from_numpy(il).double() / 65536.0, -1)
            sel = torch.from_numpy(np.array(pos, np.int64))
            lf, li = lf[sel], li[sel]
            agree += int((lf.argmax(-1) == li.argmax(-1)).sum())
            kl += float((lf.exp() * (lf - li)).sum())
            n += len(pos)
    return {"int4_top1": round(agree / max(1, n), 4), "int4_kl": round(kl / max(1, n), 4), "fidelity_positions": n}


def draft_metrics(split: str = "heldout", quick: bool = False, path: Path | str = MODEL, generate: bool = False) -> dict:
    """The draft's figures on a split's streams (see the module docstring). generate: run the target to
    write missing corpus streams (slow) instead of raising FileNotFoundError."""
    from tools.train import corpus
    t0 = time.time()
    path = Path(path)
    model, kv, reader = open_draft(path)
    stops = _stop_table(reader, path)
    sampler = llama.Sampler(model.n_out, top_k=TOP_K, temperature=T07)
    streams = _streams(split, quick, generate)
    ga = gd = ta = td = 0
    top1 = npos = 0
    items, ilg, poss = [], [], []
    for s in streams:
        ids = s["ids"]
        am, lg, q07 = run_draft(model, kv, ids, sampler)
        spans = _note_spans(s)
        a, d = greedy_blocks(ids, am, spans, stops)
        ga += a
        gd += d
        a, d = t07_blocks(s, q07, spans)
        ta += a
        td += d
        pos = [p - 1 for a_, e in spans for p in range(a_, e + 1)]
        top1 += int(sum(am[p] == ids[p + 1] for p in pos))
        npos += len(pos)
        items.append(ids)
        ilg.append(lg)
        poss.append(pos)
    c = reader.config
    params = _params(reader)
    out = {"split": split, "quick": quick, "streams": len(streams), "note_tokens": npos,
           "draft_params": params, "draft_mbf_bytes": path.stat().st_size,
           "acceptance_rate_greedy_k4": round(ga / max(1, gd), 4), "greedy_accepted": ga, "greedy_drafted": gd,
           "acceptance_rate_t07_k4": round(ta / max(1, td), 4),
           "draft_top1": round(top1 / max(1, npos), 4),
           "geometry": {"sink": SINK, "window": WINDOW, "k": K},
           "config": {k: c[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "sub_vocab")}}
    if not quick:
        fid = fidelity(items, ilg, poss)
        if fid:
            out.update(fid)
    out["seconds"] = round(time.time() - t0, 1)
    del corpus
    return out


def _params(reader) -> int:
    n = 0
    for name in reader.names():
        s = reader.seg(name)
        if name.endswith(".scales") or name in ("vocab_map", "embd_map"):
            continue
        n += math.prod(s.shape)
    return n


def _stop_table(reader, path: Path) -> np.ndarray:
    """Which target ids end a note, from the stop table of the corpus (or the MBF's tokenizer)."""
    from tools.train import corpus
    p = corpus.CACHE / "stop_ids.npy"
    if p.is_file():
        return np.load(p)
    from shared import bpe
    buf = bytearray(256)
    f = open(path, "rb")
    tok = bpe.BPE(f, offset=reader.tok_offset, length=reader.tok_length)
    out = np.zeros(reader.config["vocab_size"], bool)
    for t in range(len(out)):
        if tok.has_token(t):
            out[t] = episode.is_stop(buf[:tok.token_bytes(t, buf, 0)])
    out[2] = True
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.eval_draft", description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="heldout", choices=["train", "validation", "heldout"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mbf", default=str(MODEL))
    ap.add_argument("--sampled", action="store_true", help="also run the T = 0.7 exchange with the target (minutes)")
    args = ap.parse_args(argv)
    out = draft_metrics(args.split, args.quick, args.mbf)
    if args.sampled:
        out["sampled"] = sampled_run(args.split, 1 if args.quick else None, path=args.mbf)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def save_sample(dst: Path = SAMPLE) -> Path:
    """The quick evaluation's data (first held-out stream, first QUICK_EPISODES episodes) as a small npz
    beside the model, so tests run without the corpus cache or the target."""
    from tools.train import corpus
    s = cut(corpus.load_stream(corpus.stream_path(corpus.seeds_of("heldout", 1)[0])), QUICK_EPISODES)
    dst.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(dst, ids=s["ids"], note=s["note"], topk_ids=s["topk_ids"], topk_logits=s["topk_logits"],
                        lse=s["lse"], meta=np.frombuffer(json.dumps(s["meta"]).encode(), np.uint8))
    return dst


def ship_heldout() -> list[Path]:
    """Copy the held-out streams of the corpus cache to models/draft/heldout/<config key>/ (make_draft), and
    remove an older configuration's: the card is measured on one corpus (_streams reads the only key there)."""
    import shutil

    from tools.train import corpus
    out = []
    for seed in corpus.seeds_of("heldout", corpus.DEFAULT_STREAMS["heldout"]):
        src = corpus.stream_path(seed)
        dst = SHIPPED / src.parent.name / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        out.append(dst)
    for old in SHIPPED.iterdir():
        if old.is_dir() and old != out[0].parent:
            shutil.rmtree(old)
    return out


def sampled_run(split: str = "heldout", n_streams: int | None = None, temperature: float = T07, target_top_k: int = 0,
                seed: int = 1, path: Path | str = MODEL, log=None) -> dict:
    """Speculative sampling actually run: the INT4 draft (board runtime, top-16 counts at temperature)
    drafts blocks of K, the target (host/llama_np.py, same sink + window) verifies each with the exact rule
    (host.verifier's accept_np / residual_np: specdec.accept and residual_sample on numpy rows), and both
    commit the accepted tokens and the correction. The target samples from its whole distribution
    (target_top_k 0, the gateway's --top-k default). The episodes' log lines are the held-out streams';
    the notes are sampled, so the text differs from the greedy corpus. -> accepted / drafted."""
    from host import verifier
    from shared import specdec
    from tools.train import corpus
    tok = corpus.tokenizer()
    stops = corpus.stop_ids(tok)
    target = corpus.target()
    model, kv, reader = open_draft(Path(path))
    sampler = llama.Sampler(model.n_out, top_k=TOP_K, temperature=temperature)
    rng = specdec.Rng(seed)
    streams = _streams(split, False)[:n_streams]
    acc = drafted = blocks = notes = note_tokens = 0
    t0 = time.time()
    for s in streams:
        cache = target.new_cache(corpus.SINK, corpus.WINDOW, 16)
        kv.reset()
        sysids = tok.encode(episode.system_prompt(), special=True)
        tlog = target.feed(cache, sysids, last_only=True)[-1]
        for i in range(0, len(sysids), kv.staged):
            part = sysids[i:i + kv.staged]
            model.feed(part)
            kv.commit(len(part))
        after_cap = False
        pending: list[int] = []
        for ep in s["meta"]["episodes"]:
            pr = pending + tok.encode(episode.prompt_text(ep["lines"], after_cap))
            tlog = target.feed(cache, pr, last_only=True)[-1]
            for i in range(0, len(pr), kv.staged):
                part = pr[i:i + kv.staged]
                model.feed(part)
                kv.commit(len(part))
            note = 0
            done = False
            while not done:
                n = min(K, episode.MAX_NOTE - note)
                xs, qrec = [], []
                for j in range(n):  # draft: sample, stage
                    k = sampler.distribution(model.logits)
                    i = sampler.draw(rng.below(65536))
                    x = int(model.token_of(i))
                    xs.append(x)
                    qrec.append(([int(model.token_of(sampler.idx[m])) for m in range(k)],
                                 [int(sampler.count[m]) for m in range(k)]))
                    if stops[x] or j == n - 1:
                        break
                    model.step(x)
                kv.discard()
                rows = [tlog]
                if len(xs) > 1:
                    rows += list(target.forward(cache, xs[:-1]))
                got, corr = len(xs), -1
                for j, x in enumerate(xs):
                    p = verifier.PRow(rows[j], temperature, target_top_k)
                    if not verifier.accept_np(p, qrec[j][0], qrec[j][1], x, rng):
                        got, corr = j, verifier.residual_np(p, qrec[j][0], qrec[j][1], rng)
                        break
                acc += got
                drafted += len(xs)
                blocks += 1
                commit = xs[:got] + ([corr] if corr >= 0 else [])
                cache.discard()
                note += len(commit)
                note_tokens += len(commit)
                # the last committed token is fed with the next block (or the next prompt when the note ended)
                done = stops[commit[-1]] or note >= episode.MAX_NOTE
                if done:
                    notes += 1
                    pending = [commit[-1]]
                    after_cap = not stops[commit[-1]]
                    commit = commit[:-1]
                if commit:
                    tlog = target.feed(cache, commit, last_only=True)[-1]
                    model.feed(commit)
                    kv.commit(len(commit))
        if log:
            log("sampled: stream %d: %d / %d accepted (%.0f s)" % (s["meta"]["seed"], acc, drafted, time.time() - t0))
    return {"acceptance_rate_t07_k4_sampled": round(acc / max(1, drafted), 4), "sampled_accepted": acc,
            "sampled_drafted": drafted, "sampled_blocks": blocks, "sampled_streams": len(streams),
            "sampled_mean_note_tokens": round(note_tokens / max(1, notes), 2),
            "sampled_target_top_k": target_top_k, "sampled_seconds": round(time.time() - t0, 1)}
