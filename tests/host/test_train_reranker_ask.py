"""tools/train/train_reranker_ask.py (the phase-5 recipe make_reranker keeps as an option) still runs: two steps
on one plant seed write the trained tensors, the learned prior and a training record make_reranker can read."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_two_steps_write_delta_prior_and_record(tmp_path, capsys):
    from safetensors import safe_open

    from host.prism.prior import RetrievalPrior
    from tools.train import train_reranker_ask
    from tools.train.make_reranker import PHASE5

    assert "--max-steps" in PHASE5 and "--save-every 0" in PHASE5  # the recorded run, no checkpoints in models/
    code = train_reranker_ask.main(["--init-delta", "models/reranker/delta.safetensors", "--out", str(tmp_path),
                                    "--seeds", "1", "--corpus-questions", "4", "--steps", "2", "--group", "4",
                                    "--threads", "1", "--save-every", "0", "--log-every", "1"])
    assert code == 0
    with safe_open(str(tmp_path / "delta.safetensors"), "np") as fh:
        names = list(fh.keys())
    assert any(n.startswith("bert.encoder.layer.0.") for n in names) and "classifier.weight" in names
    info = json.loads((tmp_path / "training.json").read_text())
    assert info["steps"] == 2 and info["trained_layers"] == list(range(6)) and info["questions"] > 0
    prior = RetrievalPrior.from_settings(info["prior"], "training.json")
    assert prior.rank_log < 0 < prior.pinned  # started at -2, +2; two small steps keep the signs
    assert json.loads((tmp_path / "prior.json").read_text()).keys() == {"rank_log", "pinned"}
    assert "step 2/2" in capsys.readouterr().out
