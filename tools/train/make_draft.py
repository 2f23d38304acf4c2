"""The `make models` step for the node's draft: corpus -> train -> export -> card figures.

    python -m tools.train.make_draft [--steps N | --minutes M] [--threads 1] [--jobs 2] [--skip-train] [--skip-eval]
                                     [--out models/draft]

1. tools/train/corpus.py: the train / validation / held-out streams (cached under build/corpus/), its lockstep
   batches in JOBS processes of one BLAS thread each (the same batches whatever JOBS);
2. tools/train/train_draft.py: distillation on corpus.DEFAULT_STREAMS["train"] streams, STEPS optimiser steps
   on THREADS torch threads (the shipped run; --minutes trains on a wall-time budget instead)
   (build/draft/draft.pt and draft.bin, llama2.c with the compact vocabulary);
3. export: `python -m tools.formats.convert build/draft/draft.bin ... --tokenizer none` (the project's converter:
   INT4 quantisation and its check against the floats), then the compact vocabulary becomes the
   target's: vocab_size 49152, sub_vocab = the compact rows, `vocab_map` (row -> target id) and
   `embd_map` (target id -> row; ids outside the sub-vocabulary share the rare row 0), and a restricted
   tokenizer blob (the target's ids; tools/formats/tokenizer_export.py) for the node to encode its log lines;
4. tools/train/eval_draft.py: held-out acceptance and INT4-vs-float fidelity -> models/draft/metrics.json
   (models/draft/CARD.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared import mbf  # noqa: E402
from tools.train import corpus  # noqa: E402

OUT = ROOT / "models" / "draft"
BUILD = ROOT / "build" / "draft"
MBF_NAME = "draft.mbf"
TOKENIZER_KEEP = 2048
STEPS = 2000  # the shipped draft's training run (the schedule runs on the step count: reproducible)
THREADS = 1
FULL_VOCAB = 49152


def restricted_tokenizer(keep: int = TOKENIZER_KEEP) -> bytes:
    """The target's tokenizer restricted to the `keep` most frequent tokens of the training streams' text
    (with every byte and control token, closed under merges): same ids, same segmentation for every word
    it can spell as the target would."""
    from host.weights import smollm2_gguf
    from tools.formats import tokenizer_export as te
    data = te.read_gguf(smollm2_gguf())
    texts = [corpus.corpus_text(s) for s in corpus.load_training("train")]
    counts = te.token_counts(data, texts)
    return te.build_blob(data, te.select_vocab(data, counts, keep))


def export(bin_path: Path, vocab: list[int], dst: Path, tokenizer: bytes | None = None) -> dict:
    """draft.bin (compact vocabulary) -> the node's MBF (target vocabulary with maps). Returns a summary."""
    from tools.formats import mbf_write
    compact = bin_path.with_suffix(".compact.mbf")
    r = subprocess.run([sys.executable, "-m", "tools.formats.convert", str(bin_path), str(compact), "--from", "llama2c",
                        "--tokenizer", "none"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("tools.formats.convert failed: %s" % r.stderr.strip())
    conv = json.loads(r.stdout)
    n = len(vocab)
    with mbf.open(str(compact), budget=1 << 26) as rd:
        conf = dict(rd.config)
        if conf["vocab_size"] != n:
            raise RuntimeError("compact vocabulary %d != %d rows" % (conf["vocab_size"], n))
        segs = []
        for name in rd.names():
            s = rd.seg(name)
            segs.append((name, s.dtype, tuple(s.shape), bytes(rd.read(name))))
    vmap = np.array(vocab, "<u2")
    emap = np.zeros(FULL_VOCAB, "<u2")
    emap[np.array(vocab[1:], np.int64)] = np.arange(1, n, dtype="<u2")
    segs += [("vocab_map", "u16", (n,), vmap), ("embd_map", "u16", (FULL_VOCAB,), emap)]
    segs.sort(key=lambda s: s[0].encode())
    conf["vocab_size"] = FULL_VOCAB
    conf["sub_vocab"] = n
    dst.parent.mkdir(parents=True, exist_ok=True)
    size = mbf_write.write(dst, conf, tokenizer if tokenizer is not None else b"", segs)
    compact.unlink()
    return {"mbf_bytes": size, "convert": {k: conv[k] for k in conv if k in ("max_rel_rms", "mean_rel_rms", "params",
                                                                             "bytes", "dtype", "rel_rms")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.make_draft", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--steps", type=int, default=STEPS, help="train exactly this many steps (default: %(default)s)")
    ap.add_argument("--minutes", type=float, help="train on this wall-time budget instead of --steps")
    ap.add_argument("--threads", type=int, default=THREADS, help="torch threads (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="processes making the corpus (default: %(default)s)")
    ap.add_argument("--skip-train", action="store_true", help="reuse build/draft/draft.pt")
    ap.add_argument("--skip-eval", action="store_true")
    args = ap.parse_args(argv)
    from tools.train import eval_draft, train_draft
    out = Path(args.out)
    t0 = time.time()
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    corpus.generate_default(log=lambda m: print(m, file=sys.stderr), jobs=args.jobs)  # step 1 (cached)
    corpus_s = time.time() - t0
    if not args.skip_train:
        timed = args.minutes is not None
        train_draft.train(BUILD, minutes=args.minutes if timed else 10.0, log=lambda m: print(m, file=sys.stderr),
                          steps=None if timed else args.steps, threads=args.threads)
    _, info = train_draft.load(BUILD / "draft.pt")
    summ = export(BUILD / "draft.bin", info["vocab"], out / MBF_NAME, restricted_tokenizer())
    report = {"corpus_seconds": round(corpus_s), "train": {k: info[k] for k in ("params", "steps", "train_seconds", "val",
                                                                                 "config", "threads", "train_streams")},
              "export": summ, "corpus": {sp: corpus.summary(corpus.load_split(sp)) for sp in corpus.SPLITS}}
    report["corpus"].update({"plant_" + sp: corpus.summary(corpus.load_split(sp, family="plant"))
                             for sp in corpus.PLANT_STREAMS})
    eval_draft.save_sample()
    eval_draft.ship_heldout()
    if not args.skip_eval:
        report["metrics"] = eval_draft.draft_metrics("heldout")
        report["quick"] = eval_draft.draft_metrics("heldout", quick=True)
        report["sampled"] = eval_draft.sampled_run("heldout")
    (out / "metrics.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
