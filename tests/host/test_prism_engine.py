"""host/prism engine mechanisms on tiny random cross-encoders: streaming, prefetch, chunking, embedding cache,
PRISM vs the full model, and bad model directories / queries."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from host.prism import BertCrossEncoder, PrismInputError, PrismModelError
from host.prism import chunked, engine
from host.prism.bert import attention_bias, encoder_layer
from host.prism.calibrate import calibrate
from host.prism.embed_cache import EmbeddingRowCache
from host.prism.engine import Prism
from host.prism.monolithic import layer_probs, rank_full
from host.prism.pruning import simulate
from host.prism.st_file import SafetensorsFile
from test_prism_bert import PASSAGES, QUESTION, make_tiny

LINES = ["pump %d trip overcurrent alarm", "valve %d pressure high warning", "motor %d temperature ok",
         "tank %d level low alarm", "sensor %d fault reset", "node %d battery voltage low", "flow %d status ok"]


def windows(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(LINES[int(j)] % int(rng.integers(1, 9)) for j in rng.integers(0, len(LINES), int(rng.integers(2, 8))))
            for _ in range(n)]


def make_settled(d: Path, layers: int = 4) -> Path:
    """A tiny model whose layers after the first barely change the state (tiny residual branches, identity
    LayerNorm affines) and whose head is large: the intermediate [CLS] score already is the final one,
    so pruning after layer 0 is both triggered (high CV) and right."""
    make_tiny(d, num_hidden_layers=layers, max_position_embeddings=64)
    t = load_file(str(d / "model.safetensors"))
    for l in range(layers):
        b = "bert.encoder.layer.%d." % l
        t[b + "output.LayerNorm.weight"][:] = 1.0
        t[b + "output.LayerNorm.bias"][:] = 0.0
        if l > 0:
            for n in ("attention.output.dense.weight", "attention.output.dense.bias", "output.dense.weight", "output.dense.bias"):
                t[b + n] *= 1e-4
            t[b + "attention.output.LayerNorm.weight"][:] = 1.0
            t[b + "attention.output.LayerNorm.bias"][:] = 0.0
    t["classifier.weight"] = t["classifier.weight"] * 15.0
    save_file(t, str(d / "model.safetensors"))
    return d


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny") / "m", num_hidden_layers=4, max_position_embeddings=64)


# ---------------------------------------------------------------------------------------------- streaming


def test_streaming_holds_at_most_two_layers(tiny):
    p = Prism.from_pretrained(str(tiny), threshold=float("inf"))
    s = p.streamer
    held: list[set] = []
    orig = s._start

    def start(slot, l):  # record which layers are in memory (loaded or being read) every time one starts
        orig(slot, l)
        held.append({x.layer for x in s.slots if x.layer >= 0})

    s._start = start
    bufs = [x.buffer for x in s.slots]
    seen = []
    orig_acquire = s.acquire

    def acquire(l):
        lw = orig_acquire(l)
        seen.append(l)
        assert any(np.shares_memory(lw.wq, b) for b in bufs) and any(np.shares_memory(lw.ln2_b, b) for b in bufs)
        return lw

    s.acquire = acquire
    r = p.rank(QUESTION, windows(6), k=2)
    assert r.stats["layer_loads"] == 4  # each layer read once
    r = p.rank(QUESTION, windows(6), k=2)
    # layer 0 of this query was read at the end of the last one (counted where the read ended)
    assert r.stats["layer_loads"] in (3, 4)
    assert seen == [0, 1, 2, 3] * 2
    assert held[:5] == [{0}, {0, 1}, {1, 2}, {2, 3}, {3, 0}]  # layer l+1 joins l; l-1 has been overwritten
    assert max(len(h) for h in held) == 2 and s.max_resident == 2
    assert len(held) == 9  # 4 + 1 (layer 0 for the next query) + 3 + 1
    p.close()


def test_prefetch_overlaps_compute(tiny, monkeypatch):
    delay = 0.1
    for prefetch in (True, False):
        p = Prism.from_pretrained(str(tiny), threshold=float("inf"), prefetch=prefetch)
        p.streamer.read_hook = lambda l: time.sleep(delay)
        real = chunked.run_layer
        spans = []

        def slow_layer(*a, **kw):
            t0 = time.perf_counter()
            time.sleep(delay)
            out = real(*a, **kw)
            spans.append((t0, time.perf_counter()))
            return out

        monkeypatch.setattr(engine, "run_layer", slow_layer)
        t0 = time.perf_counter()
        r = p.rank(QUESTION, windows(4), k=2)
        wall = time.perf_counter() - t0
        log = p.streamer.log
        if prefetch:
            # layer l+1's read starts before layer l's computation ends, in another thread
            for l in range(3):
                start = next(t for kind, ll, t in log if kind == "read_start" and ll == l + 1)
                assert start < spans[l][1]
            assert r.stats["io_hidden_fraction"] > 0.5
            assert wall < 7 * delay  # overlapped: 1 read + 4 computations (5 delays); serial would be 8
        else:
            assert r.stats["io_hidden_fraction"] == 0.0
            assert wall >= 8 * delay  # 4 reads then 4 computations, one after the other
        p.close()


def test_streaming_reads_float16_files(tmp_path):
    d = make_tiny(tmp_path / "m")
    t = load_file(str(d / "model.safetensors"))
    save_file({k: v.astype(np.float16) for k, v in t.items()}, str(d / "model.safetensors"))
    full = BertCrossEncoder.from_pretrained(str(d))
    p = Prism.from_pretrained(str(d), threshold=float("inf"))
    want = rank_full(full, QUESTION, PASSAGES, 2)
    got = p.rank(QUESTION, PASSAGES, 2)
    assert np.max(np.abs(got.probs - want.probs)) < 1e-5
    p.close()


# ---------------------------------------------------------------------------------------------- chunking


def test_chunked_equals_monolithic(tiny):
    m = BertCrossEncoder.from_pretrained(str(tiny))
    b = m.encode(QUESTION, windows(7) + PASSAGES)
    h0 = m.embed(b.input_ids, b.token_type_ids)
    lw = m.layer_weights(1)
    whole = encoder_layer(h0, lw, attention_bias(b.attention_mask), m.config)
    for rows in (1, 2, 3, 11):
        h = h0.copy()
        out = chunked.run_layer(h, b.attention_mask, lw, m.config, rows)
        assert out is h
        assert np.max(np.abs(out - whole)) < 1e-6
    # the budget decides the chunk: bigger budgets, bigger chunks, never below one candidate
    t = b.input_ids.shape[1]
    one = chunked.transient_bytes(m.config, t, 1)
    assert chunked.chunk_rows(m.config, t, 1) == 1
    assert chunked.chunk_rows(m.config, t, one) == 1
    rows = chunked.chunk_rows(m.config, t, 10 * one)
    assert rows > 1 and chunked.transient_bytes(m.config, t, rows) <= 10 * one < chunked.transient_bytes(m.config, t, rows + 1)
    with pytest.raises(PrismInputError, match="memory budget"):
        chunked.chunk_rows(m.config, t, 0)
    # the whole PRISM pass without pruning, in chunks of one candidate, gives the full model's scores
    p = Prism.from_pretrained(str(tiny), threshold=float("inf"), memory_budget=1)
    r = p.rank(QUESTION, windows(7) + PASSAGES, k=3)
    ref = rank_full(m, QUESTION, windows(7) + PASSAGES, 3)
    assert r.stats["chunk_rows"] == 1 and r.layers_per_candidate == 4
    assert np.max(np.abs(r.probs - ref.probs)) < 1e-6 and r.top == ref.top
    p.close()


# ---------------------------------------------------------------------------------------------- embedding cache


def test_embedding_cache_hits_misses_and_rows(tiny):
    st = SafetensorsFile(str(tiny / "model.safetensors"))
    table = load_file(str(tiny / "model.safetensors"))["bert.embeddings.word_embeddings.weight"]
    c = EmbeddingRowCache(st, "bert.embeddings.word_embeddings.weight", capacity=8)
    ids = np.array([[5, 6, 7, 5], [7, 7, 8, 9]])  # 5 distinct tokens
    assert np.array_equal(c.rows(ids), table[ids])
    assert (c.hits, c.misses) == (0, 5)
    assert np.array_equal(c.rows(ids), table[ids])
    assert (c.hits, c.misses) == (5, 5) and c.hit_rate == 0.5
    big = np.arange(10, 30)  # 20 distinct > capacity 8: evictions inside one call still give the right rows
    assert np.array_equal(c.rows(big), table[big])
    assert c.misses == 25 and len(c.lru) == 8
    assert np.array_equal(c.rows(ids), table[ids])  # the first ids were evicted: read again, still right
    c.close()
    # the engine: only the query's distinct tokens are looked up, ~10 % of the vocabulary is kept
    p = Prism.from_pretrained(str(tiny), threshold=float("inf"))
    cache = p.weights.cache
    assert cache.capacity == round(p.cfg.vocab_size * 0.1)
    r1 = p.rank(QUESTION, ["pump valve", "pump"], k=1)
    b = p.model.encode(QUESTION, ["pump valve", "pump"])
    distinct = np.unique(b.input_ids).size
    assert r1.stats["embed_cache_misses"] == distinct and r1.stats["embed_cache_hits"] == 0
    r2 = p.rank(QUESTION, ["pump valve", "pump"], k=1)
    assert r2.stats["embed_cache_hits"] == distinct and r2.stats["embed_cache_misses"] == 0
    assert np.array_equal(r1.probs, r2.probs)
    p.close()


# ---------------------------------------------------------------------------------------------- PRISM vs full


def test_prism_top_k_equals_full_model_when_calibrated(tiny):
    full = BertCrossEncoder.from_pretrained(str(tiny))
    calib = [(QUESTION, windows(12, seed)) for seed in range(6)]
    cal = calibrate([layer_probs(full, full.encode(q, c))[1] for q, c in calib], 3, 1.0)
    assert cal["met"]
    assert any(row["agreement"] < 1.0 for row in cal["table"])  # more aggressive thresholds do lose candidates
    p = Prism.from_pretrained(str(tiny), threshold=cal["threshold"])
    for seed in range(6):  # the calibration queries: replay and live run agree, and so do PRISM and full
        q, c = calib[seed]
        ref = rank_full(full, q, c, 3)
        r = p.rank(q, c, 3)
        assert set(r.top) == set(ref.top)
        sim = simulate(ref.layer_probs, 3, cal["threshold"])
        assert r.top == sim.selected and np.array_equal(r.exit_layer, sim.exit_layer)
    p.close()


def test_prism_prunes_early_and_agrees_on_a_settled_model(tmp_path):
    d = make_settled(tmp_path / "s")
    full = BertCrossEncoder.from_pretrained(str(d))
    p = Prism.from_pretrained(str(d), threshold=0.3)
    layers, agree = [], []
    for seed in range(8):
        c = windows(16, 100 + seed)
        ref = rank_full(full, QUESTION, c, 4)
        r = p.rank(QUESTION, c, 4)
        layers.append(r.layers_per_candidate)
        agree.append(r.agreement(ref))
        assert r.report(ref)["agreement"] == agree[-1]
    assert np.mean(agree) == 1.0
    assert np.mean(layers) < 2.5  # of 4: most candidates stop after the first layer or two
    p.close()


def test_prism_reports_peak_memory_when_tracing(tiny):
    import tracemalloc

    p = Prism.from_pretrained(str(tiny))
    assert p.rank(QUESTION, PASSAGES, 2).peak_bytes is None
    tracemalloc.start()
    try:
        r = p.rank(QUESTION, PASSAGES, 2)
    finally:
        tracemalloc.stop()
    assert r.peak_bytes is not None and r.peak_bytes > 0
    assert r.truncated == 1  # the long passage
    assert p.resident_bytes() < 3 * p.streamer.layer_bytes + p.weights.cache.nbytes + p.weights.kept_bytes() + 10000
    p.close()


# ---------------------------------------------------------------------------------------------- bad input


def test_bad_queries(tiny):
    p = Prism.from_pretrained(str(tiny))
    with pytest.raises(PrismInputError, match="question is empty"):
        p.rank("  ", PASSAGES, 2)
    with pytest.raises(PrismInputError, match="no candidates"):
        p.rank(QUESTION, [], 1)
    with pytest.raises(PrismInputError, match="k=5 is larger than the number of candidates \\(4\\)"):
        p.rank(QUESTION, PASSAGES, 5)
    with pytest.raises(PrismInputError, match="k must be a positive"):
        p.rank(QUESTION, PASSAGES, 0)
    p.close()


def test_bad_model_directories(tmp_path):
    with pytest.raises(PrismModelError, match="does not exist"):
        Prism.from_pretrained(str(tmp_path / "nope"))
    d = make_tiny(tmp_path / "a")
    raw = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(PrismModelError, match="corrupt or truncated"):
        Prism.from_pretrained(str(d))
    (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(PrismModelError, match="corrupt"):
        Prism.from_pretrained(str(d))
    (d / "model.safetensors").unlink()
    with pytest.raises(PrismModelError, match="missing weights file"):
        Prism.from_pretrained(str(d))
    d = make_tiny(tmp_path / "b")
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_size"] = 48
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PrismModelError, match="config.json implies"):
        Prism.from_pretrained(str(d))
    d = make_tiny(tmp_path / "c")  # a tokenizer that does not belong to the weights
    (d / "vocab.txt").write_text((d / "vocab.txt").read_text() + "\n".join("extra%d" % i for i in range(200)) + "\n")
    with pytest.raises(PrismModelError, match="do not belong together"):
        Prism.from_pretrained(str(d))
    d = make_tiny(tmp_path / "e", head=False)
    with pytest.raises(PrismModelError, match="init_head=True"):
        Prism.from_pretrained(str(d))
    assert Prism.from_pretrained(str(d), init_head=True).model.head_initialised


def test_calibrated_settings_file(tmp_path):
    d = make_tiny(tmp_path / "s", num_hidden_layers=2, max_position_embeddings=64)
    p = Prism.from_pretrained(str(d))  # no prism.json: the defaults
    assert (p.threshold, p.clusters) == (engine.DEFAULT_THRESHOLD, 3)
    p.close()
    (d / engine.SETTINGS_FILE).write_text(json.dumps({"threshold": 0.02, "clusters": 5, "k": 5, "note": "x"}))
    p = Prism.from_pretrained(str(d))
    assert (p.threshold, p.clusters) == (0.02, 5)
    p.close()
    p = Prism.from_pretrained(str(d), threshold=0.7, clusters=None)  # the caller's choice wins; None = the file's
    assert (p.threshold, p.clusters) == (0.7, 5)
    assert p.rank(QUESTION, PASSAGES, 2).stats["threshold"] == 0.7
    p.close()
    (d / engine.SETTINGS_FILE).write_text(json.dumps({"threshold": None, "clusters": 4}))
    p = Prism.from_pretrained(str(d))  # null: calibration found nothing that prunes safely
    assert p.threshold == float("inf") and p.clusters == 4
    r = p.rank(QUESTION, PASSAGES, 2)
    assert (r.exit_layer == 1).all()  # every candidate ran every layer
    p.close()
    for bad, msg in (("{not json", "not readable JSON"), ("[1, 2]", "JSON object"),
                     ('{"threshold": -1}', "threshold must be"), ('{"threshold": "0.1"}', "threshold must be"),
                     ('{"threshold": true}', "threshold must be"), ('{"clusters": 1}', "clusters must be"),
                     ('{"clusters": 2.5}', "clusters must be"), ('{"margin": -1}', "margin must be"),
                     ('{"margin": 1.5}', "margin must be"), ('{"cluster_on": "logits"}', "cluster_on must be")):
        (d / engine.SETTINGS_FILE).write_text(bad)
        with pytest.raises(PrismModelError, match=msg):
            Prism.from_pretrained(str(d))


# ---------------------------------------------------------------------------------------------- retrieval prior


def test_retrieval_prior_values_and_bad_settings():
    from host.prism.prior import RetrievalPrior

    p = RetrievalPrior(rank_log=-2.0, pinned=3.0)
    got = p.logits(4, pinned=1)
    assert np.allclose(got, [3.0, -2.0 * np.log(2), -2.0 * np.log(3), -2.0 * np.log(4)])
    assert np.allclose(p.logits(3), -2.0 * np.log1p(np.arange(3)))
    for n, pinned in ((0, 0), (3, 4), (3, -1), (True, 0), (3, 1.0)):
        with pytest.raises(PrismInputError):
            p.logits(n, pinned)
    assert RetrievalPrior.from_settings(None, "x") is None
    assert RetrievalPrior.from_settings(p.to_settings(), "x") == p
    for bad in ({"rank_log": -1}, {"rank_log": "1", "pinned": 0}, {"rank_log": float("nan"), "pinned": 0},
                {"rank_log": True, "pinned": 0}, [1, 2], {"rank_log": 1, "pinned": 2, "x": 3}):
        with pytest.raises(PrismModelError, match="prior"):
            RetrievalPrior.from_settings(bad, "prism.json")


def test_prior_moves_the_ranking_the_same_way_in_prism_and_the_full_model(tmp_path):
    """The prior is added to every exit's logit: PRISM without pruning and the full model agree with it, a strong
    prior puts retrieval's order first, and a prior of the wrong length is one clear error."""
    d = make_tiny(tmp_path / "p", num_hidden_layers=3, max_position_embeddings=64)
    cands = windows(9, seed=3)
    full = BertCrossEncoder.from_pretrained(str(d))
    (d / engine.SETTINGS_FILE).write_text(json.dumps({"threshold": None, "clusters": 3,
                                                      "prior": {"rank_log": -40.0, "pinned": 0.0}}))
    p = Prism.from_pretrained(str(d))
    prior = p.retrieval_prior(len(cands))
    assert prior is not None and prior[0] == 0.0 and prior[1] < -20
    plain = rank_full(full, QUESTION, cands, 4)
    assert plain.top != [0, 1, 2, 3]  # the random head's own order is not retrieval's
    with_prior = rank_full(full, QUESTION, cands, 4, prior)
    assert with_prior.top == [0, 1, 2, 3]
    got = p.rank(QUESTION, cands, 4, prior=prior)
    assert got.top == with_prior.top and np.max(np.abs(got.probs - with_prior.probs)) < 1e-6
    assert p.rank(QUESTION, cands, 4).top == plain.top  # no prior given: the head alone
    # a mild prior and pruning: still exactly what the router makes of the full model's per-layer scores
    mild = np.linspace(0.0, -1.0, len(cands))
    ref = rank_full(full, QUESTION, cands, 3, mild)
    r = p.rank(QUESTION, cands, 3, threshold=0.0, prior=mild)
    sim = simulate(ref.layer_probs, 3, 0.0, 3)
    assert r.top == sim.selected and (r.exit_layer == sim.exit_layer).all()
    for bad, msg in ((np.zeros(3), "prior has 3 values for 9"), ([0.0] * 8 + [np.inf], "finite")):
        with pytest.raises(PrismInputError, match=msg):
            p.rank(QUESTION, cands, 3, prior=bad)
    p.close()
    (d / engine.SETTINGS_FILE).write_text(json.dumps({"threshold": 0.1, "prior": {"rank_log": "x", "pinned": 0}}))
    with pytest.raises(PrismModelError, match="prior"):
        Prism.from_pretrained(str(d))
