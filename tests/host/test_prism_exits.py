"""host/prism/exits.py and tools/train/reranker_exits.py on tiny random cross-encoders: pooled states, the heads'
file, PRISM scoring through them exactly as the full model's per-layer record does, and the heads' fit."""

from __future__ import annotations

import numpy as np
import pytest

from host.prism import BertCrossEncoder, PrismInputError, PrismModelError
from host.prism.engine import Prism
from host.prism.exits import EXITS_FILE, ExitHeads, pooled_states, read_exits
from host.prism.monolithic import layer_probs, rank_full
from host.prism.pruning import simulate
from test_prism_bert import QUESTION, make_tiny
from test_prism_engine import windows
from tools.train import reranker_exits


def tiny_model(tmp_path, layers: int = 4):
    d = make_tiny(tmp_path / "m", num_hidden_layers=layers, max_position_embeddings=64)
    return d, BertCrossEncoder.from_pretrained(str(d))


def random_heads(model: BertCrossEncoder, seed: int = 0, units: int = 8) -> ExitHeads:
    cfg = model.config
    rng = np.random.default_rng(seed)
    e, d = cfg.num_layers - 1, 2 * cfg.hidden_size
    return ExitHeads(rng.normal(0, 3.0 / np.sqrt(d), (e, d, units)), rng.normal(0, 0.5, (e, units)),
                     rng.normal(0, 1.0, (e, units)), rng.normal(0, 0.5, e), cfg.hidden_size, cfg.num_layers)


def test_pooled_states_are_cls_and_the_mean_of_real_tokens():
    rng = np.random.default_rng(1)
    h = rng.normal(size=(3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    got = pooled_states(h, mask)
    assert got.shape == (3, 8) and got.dtype == np.float32
    for i, n in enumerate((5, 2, 3)):
        assert np.allclose(got[i, :4], h[i, 0]) and np.allclose(got[i, 4:], h[i, :n].mean(axis=0), atol=1e-6)
    h2 = h.copy()
    h2[1, 2:] = 1e6  # padding states do not count
    assert np.allclose(pooled_states(h2, mask), got)
    with pytest.raises(PrismInputError, match="no tokens"):
        pooled_states(h, np.array([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]]))


def test_heads_file_round_trip_and_bad_files(tmp_path):
    d, model = tiny_model(tmp_path)
    cfg = model.config
    assert read_exits(str(d), cfg.hidden_size, cfg.num_layers) is None  # none shipped: the model's head scores
    heads = random_heads(model)
    heads.save(str(d / EXITS_FILE))
    back = read_exits(str(d), cfg.hidden_size, cfg.num_layers)
    for a, b in zip((back.w1, back.b1, back.w2, back.b2), (heads.w1, heads.b1, heads.w2, heads.b2)):
        assert np.array_equal(a, b)
    with pytest.raises(PrismModelError, match="shape"):
        read_exits(str(d), cfg.hidden_size, cfg.num_layers + 1)  # heads of another model
    with pytest.raises(PrismModelError, match="b1 has shape"):
        ExitHeads(heads.w1, heads.b1[:, :1], heads.w2, heads.b2, cfg.hidden_size, cfg.num_layers)
    with pytest.raises(PrismModelError, match="w1 has shape"):
        ExitHeads(heads.w1[:, :4], heads.b1, heads.w2, heads.b2, cfg.hidden_size, cfg.num_layers)
    with pytest.raises(PrismModelError, match="non-finite"):
        ExitHeads(heads.w1, heads.b1, heads.w2 * np.nan, heads.b2, cfg.hidden_size, cfg.num_layers)
    from safetensors.numpy import save_file

    save_file({"w1": heads.w1, "b1": heads.b1, "w2": heads.w2}, str(d / EXITS_FILE))
    with pytest.raises(PrismModelError, match="no b2"):
        Prism.from_pretrained(str(d))
    (d / EXITS_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(PrismModelError, match="readable"):
        Prism.from_pretrained(str(d))
    with pytest.raises(PrismInputError, match="no exit head after layer 3"):
        heads.logits(3, np.zeros((1, 2, cfg.hidden_size), np.float32), np.ones((1, 2)))


def test_prism_scores_through_the_exit_heads_as_the_full_model_records(tmp_path):
    """With exits.safetensors beside the model, PRISM's pruning decisions are exactly the router replayed over the
    full model's per-layer record made with the same heads; the heads change the early scores, never the final."""
    d, model = tiny_model(tmp_path)
    cands = windows(12, seed=5)
    plain = rank_full(model, QUESTION, cands, 4)
    heads = random_heads(model, seed=2)
    heads.save(str(d / EXITS_FILE))
    ref = rank_full(model, QUESTION, cands, 4, exits=heads)
    assert np.allclose(ref.probs, plain.probs) and ref.top == plain.top  # the last layer keeps the model's head
    assert np.max(np.abs(ref.layer_probs[:-1] - plain.layer_probs[:-1])) > 0.05  # the early exits are the heads'
    p = Prism.from_pretrained(str(d), threshold=0.0, clusters=3)
    assert p.exits is not None
    r = p.rank(QUESTION, cands, 4)
    sim = simulate(ref.layer_probs, 4, 0.0, 3)
    assert r.top == sim.selected and (r.exit_layer == sim.exit_layer).all()
    assert r.layers_per_candidate < model.config.num_layers  # it did prune
    p.close()
    q = Prism.from_pretrained(str(d), threshold=0.0, clusters=3, use_exits=False)
    assert q.exits is None
    r2 = q.rank(QUESTION, cands, 4)
    sim2 = simulate(plain.layer_probs, 4, 0.0, 3)
    assert r2.top == sim2.selected and (r2.exit_layer == sim2.exit_layer).all()
    q.close()
    with pytest.raises(PrismModelError, match="exit heads for 3 layers"):
        small = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "s", num_hidden_layers=3,
                                                               max_position_embeddings=64)))
        Prism(p.model, p.st, exits=random_heads(small))


def test_layer_states_are_the_forward_passes_states(tmp_path):
    _, model = tiny_model(tmp_path)
    cands = windows(5, seed=7)
    states, final = reranker_exits.layer_states(model, QUESTION, cands)
    batch = model.encode(QUESTION, cands)
    assert np.allclose(final, model.forward(batch)[:, 0], atol=1e-5)
    hidden = model.embed(batch.input_ids, batch.token_type_ids)
    for l in range(model.config.num_layers - 1):
        hidden = model.layer(l, hidden, batch.attention_mask)
        assert np.allclose(states[l], pooled_states(hidden, batch.attention_mask), atol=1e-5)
    # heads fitted to these states score layer_probs' early exits through the same code path
    x, z, qid = reranker_exits.collect(model, [{"question": QUESTION, "texts": cands}] * 2)
    assert x.shape == (model.config.num_layers - 1, 10, 2 * model.config.hidden_size) and list(qid) == [0] * 5 + [1] * 5
    heads = ExitHeads(*reranker_exits.fit(x, z, hidden=4, epochs=2), model.config.hidden_size, model.config.num_layers)
    _, probs = layer_probs(model, batch, exits=heads)
    assert np.allclose(probs[0], 1 / (1 + np.exp(-heads.score(0, x[0, :5])[:, 0])), atol=1e-5)


def test_fit_learns_a_nonlinear_map_and_refuses_bad_input():
    """The MLP heads learn what a linear head cannot (a rectified map of layer 1's states), the standardisation
    folded into w1 / b1 (a constant feature included), and bad shapes are one clear error."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 1200, 6)).astype(np.float32)
    x[:, :, 5] = 4.0  # constant: no spread to standardise by
    v = rng.normal(size=6)
    v[5] = 0.0
    t = np.maximum(x[1].astype(np.float64) @ v, 0.0) * 2.0 + 1.0
    heads = ExitHeads(*reranker_exits.fit(x[:, :1000], t[:1000], hidden=16, epochs=400), 3, 3)
    qid = np.repeat(np.arange(20), 10)
    held = slice(1000, 1200)
    assert reranker_exits.r2_within(heads.score(1, x[1, held])[:, 0], t[held], qid) > 0.95
    assert reranker_exits.r2_within(heads.score(0, x[0, held])[:, 0], t[held], qid) < 0.3  # layer 0 holds nothing
    w = np.linalg.lstsq(np.c_[x[1, :1000], np.ones(1000)], t[:1000], rcond=None)[0][:6]  # (the intercept: centred out)
    assert reranker_exits.r2_within(x[1, held] @ w, t[held], qid) < 0.9  # a linear head cannot
    for bad, msg in (((x, t[:10]), "do not match"), ((x[:, :1], t[:1]), "two candidates")):
        with pytest.raises(ValueError, match=msg):
            reranker_exits.fit(*bad)
    with pytest.raises(ValueError, match="hidden"):
        reranker_exits.fit(x, t[:1200], hidden=0)


def test_command_line_refuses_bad_arguments(tmp_path, capsys):
    out = str(tmp_path / "exits.safetensors")
    for argv in (["--model", "m", "--out", out, "--questions", "1"], ["--model", "m", "--out", out, "--hidden", "0"],
                 ["--out", out], ["--model", "m", "--out", str(tmp_path / "absent" / "x.safetensors")]):
        with pytest.raises(SystemExit) as e:
            reranker_exits.main(argv)
        assert e.value.code == 2
        assert "reranker_exits: error" in capsys.readouterr().err
    # a model directory that is not there: one line, exit 2, nothing written
    assert reranker_exits.main(["--model", str(tmp_path / "no-model"), "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0] and not (tmp_path / "exits.safetensors").exists()
