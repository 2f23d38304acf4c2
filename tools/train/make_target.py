"""The `make models` step for the domain target: reference texts -> LoRA training in four stages -> models/target.

    python -m tools.train.make_target [--tokens N | --minutes M] [--threads 2] [--skip-data] [--resume]
                                      [--stage N --init ADAPTERS]

1. tools/train/plant_text.py writes the reference texts from the plant simulator's ground truth, on training
   seeds for training and validation seeds for choosing the checkpoint (never held-out ones):
   build/target/data/{train,val}_{notes,qa}.jsonl, train_qa_handling.jsonl (acknowledgement, clear, onset and
   sensor questions from further seeds) and each stage's questions, train_qa_stage{1..4}.jsonl (STAGE_QA);
   tools/train/line_notes.py writes notes on generated plants of the seen kinds and naming schemes from their
   lines alone, build/target/data/{train,val}_plant_notes.jsonl, and the built-in plant's first streams noted
   the same way, {train,val}_builtin_notes.jsonl; each stage's note streams go to train_notes_stage{1..4}.jsonl
   and val_notes_stage{1..4}.jsonl (STAGE_NOTES, STAGE_VAL_NOTES);
2. tools/train/train_target.py trains the LoRA adapters on CPU within each stage's token budget (resumable:
   build/target/stage{1..4}/ckpt.pt; `--resume` continues an interrupted stage): stage 1 learns the notes
   (every fourth batch a question batch), stage 2 starts from stage 1's best adapters and learns the answers
   on more questions (every fourth batch a note batch, so the notes stay as they were), stage 3 goes on
   from stage 2 with the handling questions added (the kinds stage 2's answers got wrong most), stage 4 goes on
   from stage 3 on notes copied from the lines (the generated plants' two of every three note streams, the
   built-in plant's the rest; every fourth batch a question batch of stage 3's questions, so the answers stay
   as they were): notes that say what the lines show, on machines, names and signals other than the built-in
   plant's, and no cause the lines do not show;
3. the last stage's adapters of the lowest validation loss become models/target/delta.safetensors (float16),
   with manifest.json (host/target_delta.write_manifest: the base GGUF's, the delta's and the merged
   matrices' SHA-256) and training.json (every stage's figures: tokens, steps, wall time, threads, validation
   curves).
`--stage N --init ADAPTERS` runs the stages from N on, from adapters of stage N - 1 made earlier (the shipped
run did so: stage 2 from its stage 1, stage 3 from its stage 2). The model card (models/target/CARD.md)
quotes training.json and `edgetwin bench quality`.
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
        "train_qa_handling": ("train", "handling", 360),
        "val_notes": ("validation", "notes", 12), "val_qa": ("validation", "qa", 48),
        "train_plant_notes": ("train", "plant_notes", 240), "val_plant_notes": ("validation", "plant_notes", 3),
        # the built-in plant's first streams noted again from their lines alone (line_notes.builtin_streams)
        "train_builtin_notes": ("train", "builtin_notes", 120),
        "val_builtin_notes": ("validation", "builtin_notes", 12)}
BUILTIN_FROM = {"train": "train_notes", "validation": "val_notes"}  # the plant_text streams they are made from
STAGE1_QA = 200  # stage 1's questions: the first of train_qa
# each stage's questions (train_qa_stage{1,2,3}.jsonl): the first 200, all 600, the 600 and the handling ones
STAGE_QA = {1: ("train_qa",), 2: ("train_qa",), 3: ("train_qa", "train_qa_handling"), 4: ("train_qa", "train_qa_handling")}
# each stage's note streams and validation streams (train_notes_stage{N}.jsonl, val_notes_stage{N}.jsonl): the
# built-in plant's, and in stage 4 generated plants' and the built-in plant's first 120 (12 to validate), all
# noted from their lines alone (tools/train/line_notes.py), so the generated plants' are two of every three
# ("NAME:N" in a table: the first N streams of NAME)
STAGE_NOTES = {1: ("train_notes",), 2: ("train_notes",), 3: ("train_notes",),
               4: ("train_plant_notes", "train_builtin_notes")}
STAGE_VAL_NOTES = {1: ("val_notes",), 2: ("val_notes",), 3: ("val_notes",), 4: ("val_plant_notes", "val_builtin_notes")}
RECIPE = {"rank": 8, "alpha": 16, "layers": 12, "batch_tokens": 1024,
          "stages": [{"lr": 1e-3, "qa_every": 3, "tokens": 400_000},
                     {"lr": 5e-4, "note_every": 3, "tokens": 240_000},
                     {"lr": 3e-4, "note_every": 3, "tokens": 200_000},
                     {"lr": 3e-4, "qa_every": 3, "tokens": 200_000}]}
STAGES = len(RECIPE["stages"])


def write_data(data_dir: Path) -> dict:
    from tools.train import line_notes, plant_text

    data_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, (split, kind, n) in DATA.items():
        t = time.monotonic()
        if kind == "plant_notes":
            rows = line_notes.note_streams(split, n)
        elif kind == "builtin_notes":
            src = (data_dir / (BUILTIN_FROM[split] + ".jsonl")).read_text().splitlines()[:n]
            rows = line_notes.builtin_streams([json.loads(x) for x in src])
        else:
            rows = plant_text.MAKERS[kind](split, n)
        path = data_dir / (name + ".jsonl")
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        counts[name] = len(rows)
        print("make_target: %s: %d %s from %s seeds in %.0f s" % (path, len(rows), kind, split, time.monotonic() - t),
              file=sys.stderr, flush=True)
    write_stage_files(data_dir)
    return counts


def write_stage_files(data_dir: Path) -> None:
    """Each stage's files from the data files: train_qa_stage{N}.jsonl (STAGE_QA; stage 1 takes the first
    STAGE1_QA), train_notes_stage{N}.jsonl (STAGE_NOTES), val_notes_stage{N}.jsonl (STAGE_VAL_NOTES)."""
    for prefix, table in (("train_qa", STAGE_QA), ("train_notes", STAGE_NOTES), ("val_notes", STAGE_VAL_NOTES)):
        for stage, names in table.items():
            text = ""
            for entry in names:
                name, _, first = entry.partition(":")
                rows = (data_dir / (name + ".jsonl")).read_text().splitlines(keepends=True)
                text += "".join(rows[:int(first)] if first else rows)
            if stage == 1 and prefix == "train_qa":
                text = "".join(text.splitlines(keepends=True)[:STAGE1_QA])
            (data_dir / ("%s_stage%d.jsonl" % (prefix, stage))).write_text(text)


def stage_args(stage: int, data: Path, out: Path, init: Path | None, args) -> list[str]:
    r, st = RECIPE, RECIPE["stages"][stage - 1]
    qa = data / ("train_qa_stage%d.jsonl" % stage)
    mix = ["--qa-every", str(st["qa_every"])] if "qa_every" in st else ["--note-every", str(st["note_every"])]
    return (["--notes", str(data / ("train_notes_stage%d.jsonl" % stage)), "--qa", str(qa),
             "--val-notes", str(data / ("val_notes_stage%d.jsonl" % stage)), "--val-qa", str(data / "val_qa.jsonl"),
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
    ap.add_argument("--stage", type=int, choices=range(1, STAGES + 1), default=1, help="begin at this stage")
    ap.add_argument("--init", type=Path, help="with --stage N > 1: the previous stage's adapters (a "
                    "delta.safetensors, with the training.json of its earlier stages beside it)")
    ap.add_argument("--out", type=Path, default=SHIPPED)
    args = ap.parse_args(argv)
    if args.stage > 1 and not args.init:
        ap.error("--stage %d needs --init (stage %d's adapters)" % (args.stage, args.stage - 1))
    from host import target_delta
    from host.weights import smollm2_gguf
    from tools.train import train_target

    data = OUT / "data"
    if not args.skip_data:
        write_data(data)
    else:
        write_stage_files(data)
    init = args.init
    runs = {}
    if args.stage > 1:  # the earlier stages' records, where the adapters came with them (models/target's do)
        made = args.init.parent / "training.json"
        earlier = json.loads(made.read_text()) if made.is_file() else {}
        for k in range(1, args.stage):
            # a nested record (models/target's) has every stage; a flat one (train_target's) is stage N - 1's
            runs["stage%d" % k] = earlier.get("stage%d" % k, earlier if k == args.stage - 1 else {})
        runs["stage%d" % (args.stage - 1)] = dict(runs["stage%d" % (args.stage - 1)], adapters=str(args.init))
    for stage in range(args.stage, STAGES + 1):
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
    data_of = dict({k: v[:2] + (v[2],) for k, v in DATA.items()}, train_qa_stage1=("train", "qa", STAGE1_QA),
                   stage_qa={k: list(v) for k, v in STAGE_QA.items()},
                   stage_notes={k: list(v) for k, v in STAGE_NOTES.items()},
                   stage_val_notes={k: list(v) for k, v in STAGE_VAL_NOTES.items()})
    (args.out / "training.json").write_text(json.dumps(dict(runs, recipe=recipe, data=data_of), indent=1) + "\n")
    tokens = sum(run.get("tokens", 0) for run in runs.values())
    man = target_delta.write_manifest(args.out, smollm2_gguf(), r["rank"], float(r["alpha"]),
                                      {"layers": r["layers"], "trained_tokens": tokens})
    print(json.dumps({"shipped": str(args.out), "manifest": man}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
