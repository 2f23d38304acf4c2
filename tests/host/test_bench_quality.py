"""edgetwin bench quality: bad input is one line and exit 2, before any model loads; the domain target says
how to get it. (The bench itself runs minutes: its figures are in docs/QUALITY.md; the judges it uses are
tested in test_quality_judge.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import quality

ROOT = Path(__file__).resolve().parents[2]


def _err(capsys, argv):
    rc = quality.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


@pytest.mark.parametrize("target, says", [("domain", "domain target not installed: run make models"),
                                          ("nonsense", "one of stock, domain or a PATH.gguf"),
                                          ("/no/such/model.gguf", "no such file")])
def test_bad_target_is_one_line(capsys, monkeypatch, tmp_path, target, says):
    from host import target_delta

    monkeypatch.setattr(target_delta, "SHIPPED", tmp_path)  # a checkout without models/target
    rc, err = _err(capsys, ["--target", target])
    assert rc == 2 and len(err) == 1 and says in err[0], err


def test_bad_questions_file_is_one_line(capsys, tmp_path):
    rc, err = _err(capsys, ["--target", "stock", "--questions", str(tmp_path / "missing.jsonl")])
    assert rc == 2 and len(err) == 1 and "missing.jsonl: no such file" in err[0]
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json at all\n")
    rc, err = _err(capsys, ["--questions", str(garbage)])
    assert rc == 2 and len(err) == 1 and "garbage.jsonl line 1: not a JSON object" in err[0]
    row = {"type": "answer", "seed": 2000, "question": "why did P-101 trip?", "truth": {"event": "trip"}}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"type": "note"}) + "\n" + json.dumps(row) + "\n")
    rc, err = _err(capsys, ["--questions", str(bad)])
    assert rc == 2 and len(err) == 1 and "bad.jsonl line 2: field truth" in err[0]
    row["truth"] = {"event": "trip", "machine": "P-101", "evidence": []}
    row["seed"] = 7  # a training seed: never in this bench
    bad.write_text(json.dumps(row) + "\n")
    rc, err = _err(capsys, ["--questions", str(bad)])
    assert rc == 2 and len(err) == 1 and "field seed: 7 is not a held-out seed" in err[0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    rc, err = _err(capsys, ["--questions", str(empty)])
    assert rc == 2 and "no questions in it" in err[0]


def test_registered_as_a_bench_and_usage_errors_exit_2():
    r = subprocess.run([sys.executable, "-m", "host.cli", "bench", "quality", "--notes", "0"], cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--notes" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "host.cli", "bench", "quality", "--target", "m.bin"], cwd=str(ROOT),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().endswith("one of stock, domain or a PATH.gguf"), r.stderr


@pytest.mark.parametrize("argv, says", [(["--plant-notes", "-1"], "--plant-notes"),
                                        (["--stock-notes", "-2"], "--stock-notes"),
                                        (["--plant-questions", "0", "--plant-notes", "0"], "nothing to measure")])
def test_bad_plant_sizes_are_one_line(capsys, argv, says):
    with pytest.raises(SystemExit) as e:
        quality.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and says in err[0], err
