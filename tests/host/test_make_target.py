"""tools/train/make_target.py's stage files: each stage trains on the note streams and questions its tables name
(notes copied from the lines from stage 4 on: the generated plants' two of every three streams there, the built-in
plant's the rest), and its arguments point at them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tools.train import make_target as mt


def _rows(path: Path, tag: str, n: int) -> None:
    path.write_text("".join(json.dumps({"tag": tag, "i": i}) + "\n" for i in range(n)))


def test_stage_files_hold_what_the_tables_name(tmp_path: Path) -> None:
    sizes = {"train_notes": 400, "train_qa": 600, "train_qa_handling": 360, "val_notes": 12, "val_qa": 48,
             "train_plant_notes": 240, "val_plant_notes": 3, "train_builtin_notes": 120, "val_builtin_notes": 12}
    assert set(sizes) == set(mt.DATA)
    for name, n in sizes.items():
        _rows(tmp_path / (name + ".jsonl"), name, n)
    mt.write_stage_files(tmp_path)

    def tags(name: str) -> list[str]:
        return [json.loads(x)["tag"] for x in (tmp_path / name).read_text().splitlines()]

    assert tags("train_qa_stage1.jsonl") == ["train_qa"] * mt.STAGE1_QA
    assert tags("train_qa_stage4.jsonl") == ["train_qa"] * 600 + ["train_qa_handling"] * 360
    for stage in (1, 2, 3):
        assert tags("train_notes_stage%d.jsonl" % stage) == ["train_notes"] * 400
        assert tags("val_notes_stage%d.jsonl" % stage) == ["val_notes"] * 12
    assert tags("train_notes_stage4.jsonl") == ["train_plant_notes"] * 240 + ["train_builtin_notes"] * 120
    assert tags("val_notes_stage4.jsonl") == ["val_plant_notes"] * 3 + ["val_builtin_notes"] * 12

    args = argparse.Namespace(tokens=0, minutes=0, threads=1, resume=False)
    argv = mt.stage_args(4, tmp_path, tmp_path / "out", tmp_path / "init.safetensors", args)
    opt = dict(zip(argv[::2], argv[1::2]))
    assert opt["--notes"] == str(tmp_path / "train_notes_stage4.jsonl")
    assert opt["--val-notes"] == str(tmp_path / "val_notes_stage4.jsonl")
    assert opt["--qa"] == str(tmp_path / "train_qa_stage4.jsonl") and opt["--qa-every"] == "3"
    assert opt["--init"] == str(tmp_path / "init.safetensors") and opt["--tokens"] == "200000"
