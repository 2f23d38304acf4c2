"""The domain target's pieces: the torch twin of the gateway's target (tools/train/target_torch.py), the LoRA
merge and its hash checks (host/target_delta.py), and the trainer's data, checkpoints and errors
(tools/train/train_target.py). On the real SmolLM2-135M-Instruct GGUF; torch only in the tools' tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from host import target_delta
from host.gguf_load import load_gguf
from host.llama_np import Target
from host.weights import smollm2_gguf

torch = pytest.importorskip("torch")  # the test extra installs it; the product never imports it


@pytest.fixture(scope="module")
def base():
    return load_gguf(smollm2_gguf())


def _ids(n: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 49152, n)


def test_torch_twin_computes_the_gateways_logits_streaming_and_dense(base) -> None:
    from tools.train.target_torch import TargetLoRA

    model = TargetLoRA(base.config, base.weights, rank=2, layers=2)  # B = 0: the adapters add nothing yet
    tgt = Target(base.config, base.weights)
    ids = _ids(48)
    with torch.no_grad():
        stream = model(torch.from_numpy(ids)[None], sink=4, window=28)[0].numpy()
        dense = model(torch.from_numpy(ids)[None])[0].numpy()
    ref_s = tgt.forward(tgt.new_cache(4, 28, 64), ids)  # 48 tokens > 4 + 28: the window slides
    ref_d = tgt.forward(tgt.new_dense_cache(64, 64), ids)
    assert np.abs(stream - ref_s).max() < 2e-3 * np.abs(ref_s).max()
    assert np.abs(dense - ref_d).max() < 2e-3 * np.abs(ref_d).max()
    assert (stream.argmax(1) == ref_s.argmax(1)).all() and (dense.argmax(1) == ref_d.argmax(1)).all()
    assert np.abs(stream[40:] - dense[40:]).max() > 1e-2  # the two attentions really differ there


def _ship(tmp: Path, model, rank: int, alpha: float) -> Path:
    from tools.train.train_target import save_delta

    shipped = tmp / "target"
    shipped.mkdir()
    save_delta(model, shipped / target_delta.DELTA_FILE, {"rank": rank})
    target_delta.write_manifest(shipped, smollm2_gguf(), rank, alpha)
    return shipped


@pytest.mark.slow
@pytest.mark.cpu
def test_merged_delta_gives_the_trained_models_logits_and_is_hash_checked(base, tmp_path: Path) -> None:
    from tools.train.target_torch import TargetLoRA

    model = TargetLoRA(base.config, base.weights, rank=4, alpha=8.0, layers=3, seed=1)
    with torch.no_grad():  # adapters as a training run leaves them: B nonzero
        for ly in model.layers[-3:]:
            for lin in ly.values():
                lin.b.normal_(0, 0.02, generator=torch.Generator().manual_seed(2))
                lin.b.copy_(lin.b.half().float())  # what float16 storage keeps
                lin.a.copy_(lin.a.half().float())
    shipped = _ship(tmp_path, model, 4, 8.0)
    man = json.loads((shipped / target_delta.MANIFEST).read_text())
    assert man["base_sha256"] == target_delta.sha256(smollm2_gguf()) and man["rank"] == 4
    assert sorted({k.split(".")[1] for k in model.delta()}) == ["27", "28", "29"]  # the top 3 layers only
    m = target_delta.load_domain(shipped)
    tgt = Target(m.config, m.weights)
    ids = _ids(40, 3)
    ref = tgt.forward(tgt.new_cache(4, 28, 64), ids)
    with torch.no_grad():
        got = model(torch.from_numpy(ids)[None], sink=4, window=28)[0].numpy()
    stock = Target(base.config, base.weights).forward(Target(base.config, base.weights).new_cache(4, 28, 64), ids)
    assert np.abs(got - ref).max() < 2e-3 * np.abs(ref).max()
    assert np.abs(ref - stock).max() > 0.05  # the delta changed the model

    # tampering with any piece is one clear error naming it
    bad = tmp_path / "bad"
    shutil.copytree(shipped, bad)
    raw = bytearray((bad / target_delta.DELTA_FILE).read_bytes())
    raw[-3] ^= 0x40
    (bad / target_delta.DELTA_FILE).write_bytes(bytes(raw))
    with pytest.raises(target_delta.DeltaError, match="delta.safetensors is missing or does not match"):
        target_delta.check(bad)
    man2 = dict(man, base_sha256="0" * 64)
    shutil.copy(shipped / target_delta.DELTA_FILE, bad / target_delta.DELTA_FILE)
    (bad / target_delta.MANIFEST).write_text(json.dumps(man2))
    with pytest.raises(target_delta.DeltaError, match="is not the GGUF the domain adapters were trained on"):
        target_delta.check(bad)
    (bad / target_delta.MANIFEST).write_text(json.dumps(dict(man, merged_sha256="1" * 64)))
    with pytest.raises(target_delta.DeltaError, match="merged_sha256"):
        target_delta.check(bad)
    (bad / target_delta.MANIFEST).write_text("{")
    with pytest.raises(target_delta.DeltaError, match="cannot read"):
        target_delta.check(bad)
    with pytest.raises(target_delta.DeltaError, match="missing .*manifest.json"):
        target_delta.check(tmp_path / "none")


def test_the_shipped_adapters_verify_and_are_the_default_choice(monkeypatch, tmp_path: Path) -> None:
    # models/target is part of the checkout (make models wrote it): it matches the installed GGUF, and ask /
    # the gateway pick it unless told otherwise
    assert target_delta.installed(), "models/target lacks the shipped adapters"
    man = target_delta.check()
    assert man["rank"] >= 1 and man["trained_tokens"] > 0
    path, domain, label = target_delta.choose()
    assert path == smollm2_gguf() and domain and "domain target" in label
    assert target_delta.choose("stock")[1:] == (False, "stock SmolLM2-135M-Instruct")
    # a checkout without them runs the stock model and says so
    monkeypatch.setattr(target_delta, "SHIPPED", tmp_path)
    path, domain, label = target_delta.choose("domain")
    assert not domain and "no domain adapters in %s" % tmp_path in label


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


NOTES = [{"seed": 1, "episodes": [{"lines": ["2026-11-30T06:01:00Z ALARM HI P-101 bearing_temp 81.5C prio=2 RAISED"],
                                   "note": " P-101 bearing temperature 81.5 C, high: check lubrication.\n"},
                                  {"lines": ["2026-11-30T06:03:00Z STATE C-301 RUNNING->TRIPPED HIHI_TEMP"],
                                   "note": " C-301 tripped on high temperature.\n"}]}]
QA = [{"prompt": "<|im_start|>user\nWhich pump tripped?<|im_end|>\n<|im_start|>assistant\n",
       "answer": "P-101 tripped at 06:03 [1]."}]


@pytest.mark.slow
@pytest.mark.cpu
def test_training_lowers_the_loss_checkpoints_and_resumes(tmp_path: Path, capsys) -> None:
    from tools.train import train_target

    notes, qa = _write(tmp_path / "n.jsonl", NOTES), _write(tmp_path / "q.jsonl", QA)
    out = tmp_path / "run"
    common = ["--notes", str(notes), "--qa", str(qa), "--val-notes", str(notes), "--val-qa", str(qa),
              "--out", str(out), "--rank", "2", "--layers", "2", "--lr", "3e-3", "--batch-tokens", "256",
              "--threads", "1", "--ckpt-every", "3"]
    assert train_target.main(common + ["--tokens", "1200"]) == 0
    first = json.loads((out / "training.json").read_text())
    hist = first["history"]
    assert hist[0]["step"] == 0 and hist[-1]["val_loss"] < hist[0]["val_loss"], hist  # it learns the notes
    assert (out / "best.safetensors").is_file() and (out / "delta.safetensors").is_file()
    # --resume continues from the checkpoint: the step count goes on, the budget is the total
    assert train_target.main(common + ["--tokens", "2400", "--resume"]) == 0
    second = json.loads((out / "training.json").read_text())
    assert second["steps"] > first["steps"] and second["tokens"] >= 2400
    assert second["history"][:len(hist)] == hist
    assert "resumed at step %d" % first["steps"] in capsys.readouterr().err
    # a second stage starts from the first one's adapters (--init) and mostly teaches answers (--note-every);
    # each kind's validation loss is on record, and the checkpoint choice weighs them alike
    out2 = tmp_path / "stage2"
    stage2 = [str(out2) if a == str(out) else a for a in common]
    assert train_target.main(stage2 + ["--tokens", "600", "--note-every", "2",
                                       "--init", str(out / "best.safetensors")]) == 0
    h2 = json.loads((out2 / "training.json").read_text())["history"]
    assert abs(h2[0]["val_loss"] - second["best_val_loss"]) < 0.05, (h2[0], second["best_val_loss"])
    assert h2[0]["val_loss"] == pytest.approx((h2[0]["val_notes"] + h2[0]["val_qa"]) / 2, abs=1e-3)
    # adapters that are not there, or not adapters, are one line and exit 2
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    for bad in (tmp_path / "absent.safetensors", tmp_path / "junk.safetensors", notes):
        capsys.readouterr()
        assert train_target.main(stage2 + ["--tokens", "600", "--init", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "cannot start from these adapters" in err and str(bad) in err, err


def test_bad_training_files_are_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    from tools.train import train_target

    good = _write(tmp_path / "q.jsonl", QA)
    cases = [(tmp_path / "none.jsonl", "cannot read"),
             (_write(tmp_path / "empty.jsonl", []), "no examples"),
             (tmp_path / "junk.jsonl", "not JSON"),
             (_write(tmp_path / "nofield.jsonl", [{"seed": 1}]), "needs the fields episodes")]
    (tmp_path / "junk.jsonl").write_text('{"episodes": []}\n{oops\n')
    for path, msg in cases:
        code = train_target.main(["--notes", str(path), "--qa", str(good), "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and msg in err and str(path) in err, err
