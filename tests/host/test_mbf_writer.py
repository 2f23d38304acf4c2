"""The MBF writer: the committed fixture and the docs' worked example are what it writes, and bad input
is refused with a message naming the field or segment.

Regenerate the fixture after a deliberate format change:
    .venv/bin/python tests/host/test_mbf_writer.py --regen
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "shared"))
sys.path.insert(0, str(ROOT))

import mbf_ref  # noqa: E402

from shared import mbf  # noqa: E402
from tools.formats.mbf_write import MBFWriteError, build, config_bytes, layer_name, scales_name, write  # noqa: E402

FIXTURE = ROOT / mbf_ref.FIXTURE_PATH
DOC = ROOT / "docs" / "MBF.md"


def fixture_bytes() -> bytes:
    segs = [(name, dtype, shape, bytes(mbf_ref.gen_bytes(name, mbf_ref.nbytes(dtype, shape))))
            for name, dtype, shape in mbf_ref.fixture_segments()]
    tok = bytes(mbf_ref.gen_bytes("tokenizer", mbf_ref.FIXTURE_TOKENIZER_LEN))
    return build(mbf_ref.FIXTURE_CONFIG, tok, segs)


# The worked example of docs/MBF.md section 7.
EXAMPLE_CONFIG = {
    "dim": 32, "hidden_dim": 64, "n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "vocab_size": 2,
    "sub_vocab": 0, "seq_len": 16, "rope_theta": 10000.0, "norm_eps": 1e-5, "group_size": 32, "tied_embed": 1,
}
EXAMPLE_TOKENIZER = b"ab\n"
EXAMPLE_Q4 = bytes(range(0x00, 0x20))
EXAMPLE_SCALES = np.array([[1.0], [0.5]], dtype=np.float16)


def example_bytes() -> bytes:
    return build(EXAMPLE_CONFIG, EXAMPLE_TOKENIZER, [
        ("token_embd", "q4", (2, 32), EXAMPLE_Q4),
        ("token_embd.scales", "f16", (2, 1), EXAMPLE_SCALES),
    ])


def hexdump(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        row = data[at:at + 16]
        hexes = " ".join("%02x" % b for b in row)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append("%08x  %-47s  |%s|" % (at, hexes, text))
    return "\n".join(lines)


def doc_example() -> str:
    text = DOC.read_text()
    m = re.search(r"<!-- mbf-example-begin -->\n```text\n(.*?)\n```\n<!-- mbf-example-end -->", text, re.S)
    assert m, "docs/MBF.md lost its example markers"
    return m.group(1)


def test_committed_fixture_is_byte_identical_to_the_writer_output():
    data = fixture_bytes()
    assert len(data) < 8192
    assert FIXTURE.read_bytes() == data, "regenerate with: python tests/host/test_mbf_writer.py --regen"


def test_doc_worked_example_is_what_the_writer_writes():
    data = example_bytes()
    assert doc_example() == hexdump(data)
    with mbf.open(io.BytesIO(data)) as r:
        r.verify_all()
        assert r.config["group_size"] == 32 and r.config["head_dim"] == 32
        assert r.read_tokenizer() == EXAMPLE_TOKENIZER
        assert bytes(r.read("token_embd")) == EXAMPLE_Q4
        assert (r.tok_offset, r.seg("token_embd").offset, r.seg("token_embd.scales").offset) == (480, 512, 544)
        assert r.size == 548


def test_numpy_arrays_are_stored_little_endian_with_their_shape():
    rng = np.random.default_rng(3)
    cfg = dict(mbf_ref.FIXTURE_CONFIG)
    arrays = {
        "a.f32": rng.standard_normal((3, 4)).astype(">f4"),  # big-endian input: stored as little-endian
        "a.f16": rng.standard_normal((2, 2, 2)).astype(np.float16),
        "a.i8": rng.integers(-128, 128, (5,)).astype(np.int8),
        "a.u8": rng.integers(0, 256, (1, 1, 1, 9)).astype(np.uint8),
        "a.i16": rng.integers(-30000, 30000, (4,)).astype(">i2"),
        "a.u16": rng.integers(0, 65535, (6,)).astype(np.uint16),
        "a.i32": rng.integers(-2**31, 2**31, (2, 3)).astype(np.int32),
    }
    segs = [(n, n[2:], a.shape, a) for n, a in arrays.items()]
    packed = rng.integers(0, 256, (4, 8)).astype(np.uint8)
    segs += [("w", "q4", (4, 16), packed), ("w.scales", "f16", (4, 1), np.ones((4, 1), np.float16))]
    with mbf.open(io.BytesIO(build(cfg, b"", segs))) as r:
        for name, a in arrays.items():
            s = r.seg(name)
            assert s.shape == a.shape and s.dtype == name[2:]
            got = np.frombuffer(bytes(r.read(name)), dtype=a.dtype.newbyteorder("<")).reshape(a.shape)
            assert np.array_equal(got, a)
        assert bytes(r.read("w")) == packed.tobytes()
        assert r.tok_length == 0 and r.read_tokenizer() == b""


def test_segment_order_does_not_change_the_file():
    segs = [(name, dtype, shape, bytes(mbf_ref.gen_bytes(name, mbf_ref.nbytes(dtype, shape))))
            for name, dtype, shape in mbf_ref.fixture_segments()]
    tok = bytes(mbf_ref.gen_bytes("tokenizer", mbf_ref.FIXTURE_TOKENIZER_LEN))
    assert build(mbf_ref.FIXTURE_CONFIG, tok, segs[::-1]) == fixture_bytes()


def test_write_is_atomic_and_matches_build(tmp_path):
    path = tmp_path / "m.mbf"
    size = write(path, EXAMPLE_CONFIG, EXAMPLE_TOKENIZER, [
        ("token_embd", "q4", (2, 32), EXAMPLE_Q4), ("token_embd.scales", "f16", (2, 1), EXAMPLE_SCALES)])
    assert size == 548 and path.read_bytes() == example_bytes()
    bad = dict(EXAMPLE_CONFIG, n_heads=3, n_kv_heads=2)  # passes the key checks, fails the reader's
    with pytest.raises(MBFWriteError, match="reader refuses.*n_kv_heads"):
        write(tmp_path / "bad.mbf", bad, b"", [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mbf"]


def test_helpers_name_layers_and_scales():
    assert layer_name(12, "ffn_up") == "blk.12.ffn_up"
    assert scales_name(layer_name(0, "attn_q")) == "blk.0.attn_q.scales"


def _q4(name="w", shape=(2, 32), scales_shape=(2, 1)):
    n = shape[0] * shape[1] // 2
    return [(name, "q4", shape, bytes(n)), (name + ".scales", "f16", scales_shape, bytes(2 * scales_shape[0] * scales_shape[1]))]


@pytest.mark.parametrize("config, match", [
    ({k: v for k, v in EXAMPLE_CONFIG.items() if k != "dim"}, "missing key 'dim'"),
    (dict(EXAMPLE_CONFIG, dim=32.0), "'dim' must be an int"),
    (dict(EXAMPLE_CONFIG, rope_theta=10000), "'rope_theta' must be a float"),
    (dict(EXAMPLE_CONFIG, norm_eps=float("nan")), "'norm_eps' must be finite"),
    (dict(EXAMPLE_CONFIG, n_layers=0), "'n_layers' is 0"),
    (dict(EXAMPLE_CONFIG, Bad=1), "config key 'Bad'"),
    (dict(EXAMPLE_CONFIG, much_too_long_key=1), "at most 14"),
    (dict(EXAMPLE_CONFIG, x="text"), "'x' must be int, float or bool"),
    (dict(EXAMPLE_CONFIG, x=1 << 64), "does not fit 64 bits"),
])
def test_bad_config_is_named(config, match):
    with pytest.raises(MBFWriteError, match=match):
        build(config, b"", [])


@pytest.mark.parametrize("segments, match", [
    ([("a" * 32, "u8", (1,), b"\0")], "at most 31"),
    ([("a b", "u8", (1,), b"\0")], "outside"),
    ([("", "u8", (1,), b"\0")], "non-empty"),
    ([("a", "u8", (1,), b"\0"), ("a", "u8", (1,), b"\0")], "duplicate segment name 'a'"),
    ([("a", "f64", (1,), b"\0" * 8)], "dtype 'f64'"),
    ([("a", "u8", (1, 1, 1, 1, 1), b"\0")], "1..4 dimensions"),
    ([("a", "u8", (0,), b"")], "1..4 dimensions"),
    ([("a", "u8", "xy", b"")], "shape must be a sequence of ints"),
    ([("a", "u16", (3,), b"\0" * 5)], "needs 6 bytes, got 5"),
    ([("a", "f32", (2,), np.zeros(2, np.float64))], "dtype float64 does not match MBF f32"),
    ([("a", "f32", (2,), np.zeros((1, 2), np.float32))], "array shape"),
    ([("a", "i8", (2,), [1, 2])], "numpy array or bytes"),
    ([("a", "u8", (1,))], r"\(name, dtype, shape, data\)"),
    ([("w", "q4", (2, 32), bytes(32))], "needs 'w.scales'"),
    (_q4(scales_shape=(1, 2)), "needs 'w.scales' of dtype f16 and shape \\(2, 1\\)"),
    ([("w", "q4", (2, 24), bytes(24))], "multiple of group_size 32"),
    ([("w", "q4", (2, 32), np.zeros(31, np.uint8))] + _q4()[1:], "packs into 32 bytes"),
    ([("x.scales", "f16", (1,), bytes(2))], "needs its q4 segment"),
])
def test_bad_segments_are_named(segments, match):
    with pytest.raises(MBFWriteError, match=match):
        build(EXAMPLE_CONFIG, b"", segments)


def test_tokenizer_must_be_bytes():
    with pytest.raises(MBFWriteError, match="tokenizer must be bytes"):
        build(EXAMPLE_CONFIG, "ab", [])  # type: ignore[arg-type]


def test_config_entries_are_sorted_and_typed():
    raw = config_bytes({"b": 1, "a": 0.5, "c": True})
    assert len(raw) == 3 * 24
    assert raw[0:15] == b"a".ljust(15, b"\0") and raw[15] == mbf.T_FLOAT
    assert raw[24:39] == b"b".ljust(15, b"\0") and raw[39] == mbf.T_INT and raw[40:48] == (1).to_bytes(8, "little")


if __name__ == "__main__":
    if "--regen" in sys.argv:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_bytes(fixture_bytes())
        print("wrote %s (%d bytes)" % (FIXTURE, FIXTURE.stat().st_size))
    if "--example" in sys.argv:
        print(hexdump(example_bytes()))
