"""The `make models` step for the domain target: reference texts -> LoRA training in two stages -> models/target.

    python -m tools.train.make_target [--tokens N | --minutes M] [--threads 2] [--skip-data] [--resume]
                                      [--stage 2 --init ADAPTERS]

1. tools/train/plant_text.py writes the reference texts from the plant simulator's ground truth, on training
   seeds for training and validation seeds for choosing the checkpoint (never held-out ones):
   build/target/data/{train,val}_{notes,qa}.jsonl (train_qa_stage1.jsonl: the first questions of train_qa);
2. tools/train/train_target.py trains the LoRA adapters on CPU within each stage's token budget (resumable:
   build/target/stage{1,2}/ckpt.pt; `--resume` continues an interrupted stage): stage 1 learns the notes
   (every fourth batch a question batch), stage 2 starts from stage 1's best adapters and learns the answers
   on more questions (every fourth batch a note batch, so the notes stay as they were);
3. stage 2's adapters of the lowest validation loss become models/target/delta.safetensors (float16), with
   manifest.json (host/target_delta.write_manifest: the base GGUF's, the delta's and the merged matrices'
   SHA-256) and training.json (both stages' figures: tokens, steps, wall time, threads, validation curves).
`--stage 2 --init ADAPTERS` runs stage 2 alone from adapters made earlier (the shipped run did so from its
stage 1). The model card (models/target/CARD.md) quotes training.json and `edgetwin bench quality`.
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
DATA = {"train_notes": ("train", "notes", 400), "train_qa": ("train", "qa", 600),
        "val_notes": ("validation", "notes", 12), "val_qa": ("validation", "qa", 48)}
STAGE1_QA = 200  # stage 1's questions: the first of train_qa
RECIPE = {"rank": 8, "alpha": 16, "layers": 12, "batch_tokens": 1024,
          "stages": [{"lr": 1e-3, "qa_every": 3, "tokens": 400_000},
                     {"lr": 5e-4, "note_every": 3, "tokens": 240_000}]}


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
        if name == "train_qa":
            (data_dir / "train_qa_stage1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:STAGE1_QA]))
        print("make_target: %s: %d %s from %s seeds in %.0f s" % (path, len(rows), kind, split, time.monotonic() - t),
              file=sys.stderr, flush=True)
    return counts


def stage_args(stage: int, data: Path, out: Path, init: Path | None, args) -> list[str]:
    r, st = RECIPE, RECIPE["stages"][stage - 1]
    qa = data / ("train_qa_stage1.jsonl" if stage == 1 else "train_qa.jsonl")
    mix = ["--qa-every", str(st["qa_every"])] if "qa_every" in st else ["--note-every", str(st["note_every"])]
    return (["--notes", str(data / "train_notes.jsonl"), "--qa", str(qa),
             "--val-notes", str(data / "val_notes.jsonl"), "--val-qa", str(data / "val_qa.jsonl"),
             "--out", str(out), "--rank", str(r["rank"]), "--alpha", str(r["alpha"]), "--layers", str(r["layers"]),
             "--lr", str(st["lr"]), "--batch-tokens", str(r["batch_tokens"]), "--tokens",
             str(args.tokens or st["tokens"]), "--minutes", str(args.minutes), "--threads", str(args.threads)]
            + mix + (["--init", str(init)] if init else []) + (["--resume"] if args.resume else []))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.make_target", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=0, help="each stage's token budget (default: the recipe's)")
    ap.add_argument("--minutes", type=float, default=0, help="stop each stage after this wall time too")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-data", action="store_true", help="reuse build/target/data")
    ap.add_argument("--resume", action="store_true", help="continue the interrupted training run")
    ap.add_argument("--stage", type=int, choices=(1, 2), default=1, help="begin at this stage")
    ap.add_argument("--init", type=Path, help="with --stage 2: stage 1's adapters (a delta.safetensors)")
    ap.add_argument("--out", type=Path, default=SHIPPED)
    args = ap.parse_args(argv)
    if args.stage == 2 and not args.init:
        ap.error("--stage 2 needs --init (stage 1's adapters)")
    from host import target_delta
    from host.weights import smollm2_gguf
    from tools.train import train_target

    data = OUT / "data"
    if not args.skip_data:
        write_data(data)
    init = args.init
    runs = {}
    if args.stage == 2:  # stage 1's record, where the adapters came with one (models/target's own do)
        made = args.init.parent / "training.json"
        runs["stage1"] = json.loads(made.read_text()) if made.is_file() else {}
        runs["stage1"] = dict(runs["stage1"].get("stage1", runs["stage1"]), adapters=str(args.init))
    for stage in range(args.stage, 3):
        out = OUT / ("stage%d" % stage)
        code = train_target.main(stage_args(stage, data, out, init, args))
        if code:
            return code
        runs["stage%d" % stage] = json.loads((out / "training.json").read_text())
        init = out / "best.safetensors"
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copy(init, args.out / target_delta.DELTA_FILE)
    r = RECIPE
    recipe = dict(r, stages=[dict(st, tokens=args.tokens or st["tokens"]) for st in r["stages"]])
    data_of = dict({k: v[:2] + (v[2],) for k, v in DATA.items()}, train_qa_stage1=("train", "qa", STAGE1_QA))
    (args.out / "training.json").write_text(json.dumps(dict(runs, recipe=recipe, data=data_of), indent=1) + "\n")
    tokens = sum(run.get("tokens", 0) for run in runs.values())
    man = target_delta.write_manifest(args.out, smollm2_gguf(), r["rank"], float(r["alpha"]),
                                      {"layers": r["layers"], "trained_tokens": tokens})
    print(json.dumps({"shipped": str(args.out), "manifest": man}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
