"""llama2.c tiny models on the board runtime: a generated model with stories260K's exact shapes (dim 64,
hidden_dim 172, 5 layers, 8 heads / 4 KV heads, vocab 512, seq_len 512; seeded random weights) converts
with INT4 and INT8 layer matrices (hidden_dim zero-padded to 192), runs on shared/llama.py under CPython
and the MicroPython unix port with identical ids and integer logits, and its greedy tokens agree with a
float32 forward written like run.c's for as long as the weights allow (INT8 at least as long as INT4)."""

from __future__ import annotations

import binascii
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shared import kernels, llama, mbf, memplan, model_load, q4a_q8, ringkv  # noqa: E402
from tools.bench import llama2c_agree as la  # noqa: E402
from tools.demo.spec_models import float_target_from_mbf  # noqa: E402
from tools.formats import convert as cv  # noqa: E402
from tools.formats import llama2c  # noqa: E402

CFG = llama2c.Llama2cConfig(64, 172, 5, 8, 4, 512, 512)  # stories260K's header
PADDED = 192
STEPS = 24


def make_model(path: Path, cfg: llama2c.Llama2cConfig = CFG, seed: int = 260) -> dict[str, np.ndarray]:
    """A llama2.c v0 file of cfg's shapes with seeded weights: embeddings N(0, 0.3), matrices N(0, 1.5 /
    sqrt(fan_in)), norm gains 1 + N(0, 0.1). With these the greedy text is not one repeated token."""
    rng = np.random.default_rng(seed)
    w = {}
    for name, shape in llama2c.layout(cfg):
        if name == llama2c.FREQ:
            continue
        if len(shape) == 1:
            w[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "token_embd":
            w[name] = 0.3 * rng.standard_normal(shape)
        else:
            w[name] = 1.5 * rng.standard_normal(shape) / np.sqrt(shape[1])
    llama2c.write_model(path, cfg, w)
    return w


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama2c")
    src = d / "stories260K-shaped.bin"
    weights = make_model(src)
    out = {"src": src, "weights": weights}
    for form in ("sym", "q8"):
        dst = d / ("m-%s.mbf" % form)
        out[form] = dst
        out[form + "_summary"] = cv.convert(src, dst, fmt="llama2c", weights=form, tokenizer="none")
    out["ref"] = la.Float32Llama2c(src).greedy(STEPS)
    return out


def test_hidden_dim_is_zero_padded_exactly_and_recorded(files):
    for form, dtype in (("sym", "q4"), ("q8", "q8")):
        s = files[form + "_summary"]
        assert s["config"]["hidden_dim"] == PADDED and s["config"]["hidden_dim_src"] == 172
        assert any("zero-padded" in n for n in s["notes"])
        r = mbf.open(str(files[form]), budget=1 << 20)
        assert r.config["hidden_dim"] == PADDED and r.config["hidden_dim_src"] == 172
        for part, shape in (("ffn_gate", (PADDED, 64)), ("ffn_up", (PADDED, 64)), ("ffn_down", (64, PADDED))):
            seg = r.seg("blk.3." + part)
            assert seg.dtype == dtype and tuple(seg.shape) == shape
        # the padded lanes dequantise to exactly zero, the real ones to the source's quantisation
        twin = float_target_from_mbf(files[form])
        src = files["weights"]
        for li, lw in enumerate(twin_layers(twin)):
            gate, up, down = lw
            assert not gate[:, 172:].any() and not up[:, 172:].any() and not down[172:].any()
            for a, b in ((gate[:, :172].T, src["blk.%d.ffn_gate" % li]), (down[:172].T, src["blk.%d.ffn_down" % li])):
                rel = np.linalg.norm(a - b) / np.linalg.norm(b)
                assert rel < (0.12 if form == "sym" else 0.008), (form, li, rel)
        r.close()


def twin_layers(twin):
    """(gate, up, down) of each layer of host/llama_np's Target as (in, out) float32 matrices."""
    h = twin.cfg.hidden_dim
    return [(gu[:, :h], gu[:, h:], down) for (_an, _qkv, _wo, _fn, gu, down) in twin.layers]


def test_padding_changes_nothing_in_float(files, tmp_path):
    """Zero rows of gate / up and zero columns of down: the float forward is the unpadded one."""
    src = files["weights"]
    padded = dict(src)
    for li in range(CFG.n_layers):
        for part, axis in cv.PAD_PARTS.items():
            name = "blk.%d.%s" % (li, part)
            width = [(0, 0), (0, 0)]
            width[axis] = (0, PADDED - 172)
            padded[name] = np.pad(src[name], width)
    cfg = llama2c.Llama2cConfig(64, PADDED, 5, 8, 4, 512, 512)
    llama2c.write_model(tmp_path / "p.bin", cfg, padded)
    a, b = la.Float32Llama2c(files["src"]), la.Float32Llama2c(tmp_path / "p.bin")
    for pos, tok in enumerate((1, 40, 300, 7)):
        np.testing.assert_allclose(a.forward(tok, pos), b.forward(tok, pos), rtol=1e-5, atol=1e-5)


def test_host_float_target_runs_the_padded_q8_file(files):
    """host/llama_np.py (the gateway's Target) over the q8 MBF's weights follows the fp32 source closely."""
    twin = float_target_from_mbf(files["q8"])
    cache = twin.new_dense_cache(8)
    ids = [1] + files["ref"][:5]
    got = twin.forward(cache, ids)
    ref = la.Float32Llama2c(files["src"])
    for pos, tok in enumerate(ids):
        want = ref.forward(tok, pos)
        assert np.linalg.norm(got[pos] - want) / np.linalg.norm(want) < 0.06  # q8 weights: ~0.03 measured
        assert np.argmax(got[pos]) == np.argmax(want)


def test_q8_layers_are_stored_loaded_streamed_and_planned(files):
    rq8, rq4 = mbf.open(str(files["q8"])), mbf.open(str(files["sym"]))
    for part in model_load.LAYER_Q4:
        assert rq8.seg("blk.0." + part).dtype == "q8" and rq4.seg("blk.0." + part).dtype == "q4"
    assert files["q8_summary"]["forms"]["attn_q"] == "q8" and files["q8_summary"]["forms"]["token_embd"] == "q8"
    # the memory plan counts the file's bytes: 1 byte per weight + 2 per group of 32 for q8
    p8 = memplan.layout(rq8.config, 0, 31, 1, "resident", word=4, reader=rq8)
    p4 = memplan.layout(rq4.config, 0, 31, 1, "resident", word=4, reader=rq4)
    for part, (rows, cols) in model_load.layer_shapes(model_load.Config(rq8.config)).items():
        assert p8.data[p8.index("w." + part)] == rows * cols + rows * cols // 16
        assert p4.data[p4.index("w." + part)] == rows * cols // 2 + rows * cols // 16
    assert p8.peak - p4.peak >= CFG.n_layers * 49152 // 2
    ps = memplan.layout(rq8.config, 0, 31, 1, "matrix", word=4, reader=rq8)
    assert ps.data[ps.index("stream.ffn_up")] == PADDED * 64  # the streamed buffer holds int8 rows
    # resident and streamed (per matrix) give the same integers; the matrices are Q8Matrix
    crcs = []
    for stream in (False, "matrix"):
        kv = ringkv.RingKV(5, 32, 0, 8, 1, "b", 4)
        m = llama.Model(rq8, kv, stream=stream)
        assert isinstance(m.layers[0].w1, q4a_q8.Q8Matrix)
        crc = 0
        for tok in (1, 50, 60):
            m.step(tok)
            kv.commit(1)
            crc = binascii.crc32(bytes(m.logits), crc)
        crcs.append(crc)
    assert crcs[0] == crcs[1]
    rq8.close()
    rq4.close()


def test_plain_backend_gives_the_numpy_integers_on_both_forms(files):
    try:
        for form in ("sym", "q8"):
            kernels.use("numpy")
            want = la.runtime_greedy(files[form], 2)
            kernels.use("plain")
            assert la.runtime_greedy(files[form], 2) == want
    finally:
        kernels.use()


def test_greedy_agrees_with_fp32_reference_int8_at_least_as_long_as_int4(files):
    ref = files["ref"]
    assert len(set(ref)) > 10  # a text, not one token repeated
    agree = {}
    for form in ("sym", "q8"):
        ids, _crc = la.runtime_greedy(files[form], STEPS)
        agree[form] = la.first_difference(ids, ref)
    assert agree["q8"] >= agree["sym"]
    assert agree["q8"] >= 8, agree


def test_micropython_viper_gives_cpython_ids_and_logits(files):
    """Resident, and streamed as the rp2040_pico plan streams them (`edgetwin plan`: INT4 per layer, INT8
    per matrix), on a 1 MB heap: the same integers as CPython's numpy kernels, a decode step with the
    heap locked allocates nothing, and the memory plan's peak is the heap the model and cache hold."""
    for form, mode in (("sym", "resident"), ("q8", "resident"), ("sym", "layer"), ("q8", "matrix")):
        ids, crc = la.runtime_greedy(files[form], 12)
        mp = la.micropython_greedy(files[form], 12, heap=1 << 20, mode=mode)
        assert mp["backend"] == "viper" and mp["mode"] == mode and mp["step_alloc_free"]
        # the memory plan counts q8 bytes as the heap holds them (the tolerance of test_memplan_vboard)
        assert abs(mp["heap_measured"] - mp["heap_predicted"]) <= 0.10 * mp["heap_predicted"], (form, mode, mp)
        assert mp["ids"] == ids and mp["crc"] == crc, (form, mode)


def test_bench_command_prints_the_agreement_json(files, tmp_path, capsys):
    assert la.main(["--model", str(files["src"]), "--steps", "6", "--workdir", str(tmp_path), "--board",
                    "rp2040_pico", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["fp32_ids"] == files["ref"][:6]
    assert res["int8"]["agree_fp32"] == 6 and 0 <= res["int4"]["agree_fp32"] <= 6
    for name in ("int4", "int8"):  # the board's cache (4 + 28) holds 6 tokens: the dense run's ids and logits
        b = res[name]["board"]
        assert b["mode"] in memplan.MODES and b["load_peak"] <= b["budget"]
        assert b["ids"] == res[name]["ids"] and b["logits_crc"] == res[name]["logits_crc"]
    assert la.main(["--model", str(tmp_path / "missing.bin")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_dimensions_that_cannot_be_padded_are_refused(tmp_path):
    """dim (the residual stream: RMSNorm's mean) and n_heads x head_dim are not padded: one clear line."""
    cfg = llama2c.Llama2cConfig(48, 64, 1, 4, 4, 16, 32)
    make_model(tmp_path / "d48.bin", cfg)
    with pytest.raises(cv.ConvertError, match="dim is 48"):
        cv.convert(tmp_path / "d48.bin", tmp_path / "x.mbf", tokenizer="none")
    assert not (tmp_path / "x.mbf").exists()
