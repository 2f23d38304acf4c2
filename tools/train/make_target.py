"""The `make models` step for the domain target: reference texts -> LoRA training -> models/target.

    python -m tools.train.make_target [--tokens N | --minutes M] [--threads 2] [--skip-data] [--resume]

1. tools/train/plant_text.py writes the reference texts from the plant simulator's ground truth, on training
   seeds for training and validation seeds for choosing the checkpoint (never held-out ones):
   build/target/data/{train,val}_{notes,qa}.jsonl;
2. tools/train/train_target.py trains the LoRA adapters on CPU within the token budget (resumable:
   build/target/ckpt.pt; `--resume` continues an interrupted run);
3. the adapters of the lowest validation loss become models/target/delta.safetensors (float16), with
   manifest.json (host/target_delta.write_manifest: the base GGUF's, the delta's and the merged matrices'
   SHA-256) and training.json (the run's figures: tokens, steps, wall time, threads, the validation curve).
The model card (models/target/CARD.md) quotes training.json and `edgetwin bench quality`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "build" / "target"
SHIPPED = ROOT / "models" / "target"
# The shipped recipe (the card quotes it): streams and questions per split, and the training run.
DATA = {"train_notes": ("train", "notes", 400), "train_qa": ("train", "qa", 200),
        "val_notes": ("validation", "notes", 12), "val_qa": ("validation", "qa", 16)}
RECIPE = {"rank": 8, "alpha": 16, "layers": 12, "lr": 1e-3, "batch_tokens": 1024, "qa_every": 3, "tokens": 400_000}


def write_data(data_dir: Path) -> dict:
    from tools.train import plant_text

    data_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, (split, kind, n) in DATA.items():
        t = time.monotonic()
        rows = plant_text.note_streams(split, n) if kind == "notes" else plant_text.qa_examples(split, n)
        path = data_dir / (name + ".jsonl")
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        counts[name] = len(rows)
        print("make_target: %s: %d %s from %s seeds in %.0f s" % (path, len(rows), kind, split, time.monotonic() - t),
              file=sys.stderr, flush=True)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.make_target", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=RECIPE["tokens"], help="training token budget")
    ap.add_argument("--minutes", type=float, default=0, help="stop training after this wall time too")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-data", action="store_true", help="reuse build/target/data")
    ap.add_argument("--resume", action="store_true", help="continue the interrupted training run")
    ap.add_argument("--out", type=Path, default=SHIPPED)
    args = ap.parse_args(argv)
    from host import target_delta
    from host.weights import smollm2_gguf
    from tools.train import train_target

    data = OUT / "data"
    if not args.skip_data:
        write_data(data)
    r = RECIPE
    code = train_target.main([
        "--notes", str(data / "train_notes.jsonl"), "--qa", str(data / "train_qa.jsonl"),
        "--val-notes", str(data / "val_notes.jsonl"), "--val-qa", str(data / "val_qa.jsonl"),
        "--out", str(OUT), "--rank", str(r["rank"]), "--alpha", str(r["alpha"]), "--layers", str(r["layers"]),
        "--lr", str(r["lr"]), "--batch-tokens", str(r["batch_tokens"]), "--qa-every", str(r["qa_every"]),
        "--tokens", str(args.tokens), "--minutes", str(args.minutes), "--threads", str(args.threads)]
        + (["--resume"] if args.resume else []))
    if code:
        return code
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copy(OUT / "best.safetensors", args.out / target_delta.DELTA_FILE)
    training = json.loads((OUT / "training.json").read_text())
    (args.out / "training.json").write_text(json.dumps(dict(training, recipe=dict(r, tokens=args.tokens),
                                                            data={k: v[:2] + (v[2],) for k, v in DATA.items()}),
                                                       indent=1) + "\n")
    man = target_delta.write_manifest(args.out, smollm2_gguf(), r["rank"], float(r["alpha"]),
                                      {"layers": r["layers"], "trained_tokens": training["tokens"]})
    print(json.dumps({"shipped": str(args.out), "manifest": man}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
