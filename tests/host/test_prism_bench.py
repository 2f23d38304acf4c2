"""tools/bench/prism.py end to end on a tiny random cross-encoder: one JSON object with every figure."""

from __future__ import annotations

import json

from test_prism_bert import make_tiny
from tools.bench import prism as bench_prism


def test_bench_prism_json(tmp_path, capsys):
    d = make_tiny(tmp_path / "m", num_hidden_layers=3, max_position_embeddings=64)
    code = bench_prism.main(["--model", str(d), "--questions", "2", "--candidates", "6", "--calib-questions", "2",
                             "--curve", "6,7", "--curve-questions", "1", "--rss-questions", "0", "--no-torch", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"].startswith("given:") and out["questions"] == 2 and out["candidates"] == 6
    assert "qa_corpus" in out["questions_source"] and out["calibration"]["source"].endswith("'validation'")
    for key in ("latency_ratio", "peak_mem_ratio", "top5_agreement", "layers_per_candidate_mean", "io_hidden_fraction",
                "embed_cache_hit_rate"):
        assert isinstance(out[key], float), key
    assert 0 < out["peak_mem_ratio"] and 0 <= out["top5_agreement"] <= 1 and 1 <= out["layers_per_candidate_mean"] <= 3
    assert out["tokens_per_candidate"] == 64 and out["truncated_candidates_mean"] == 6  # 512-token windows cut to 64
    assert [c["candidates"] for c in out["curve"]] == [6, 7] and out["curve"][1]["questions"] == 1
    assert out["goal"] == {"latency_ratio": 0.2, "peak_mem_ratio": 0.2, "top5_agreement": 0.99}
    assert set(out["goal_met"]) == set(out["goal"])


def test_bench_prism_numpy_vs_torch_ratios(tmp_path, capsys):
    """The numpy/torch ratios (layer and whole model, with their spread) come out of the same run; no timing bound."""
    d = make_tiny(tmp_path / "m", num_hidden_layers=2, max_position_embeddings=128)
    code = bench_prism.main(["--model", str(d), "--questions", "1", "--candidates", "6", "--threshold", "0.3",
                             "--clusters", "3", "--curve", "", "--rss-questions", "0", "--speed-reps", "3",
                             "--speed-short-tokens", "64", "--speed-min-s", "0.01", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for name in ("layer", "full"):
        lo, mid, hi = (out["numpy_vs_torch_%s_ratio%s" % (name, s)] for s in ("_p25", "", "_p75"))
        assert isinstance(mid, float) and 0 < lo <= mid <= hi, name
        short = out["numpy_vs_torch_short"]
        assert 0 < short[name + "_ratio_p25"] <= short[name + "_ratio"] <= short[name + "_ratio_p75"]
    assert out["numpy_vs_torch_reps"] == 3 and out["numpy_vs_torch_tokens"] == 128  # 512-token windows cut to 128
    assert out["numpy_vs_torch_short"]["tokens"] < 128  # 64-token windows and the question
    assert out["numpy_vs_torch_max_logit_diff"] < 1e-5  # same weights, same candidates
    assert "latency_ratio" in out and "torch_latency_ratio" in out  # the existing keys stay
