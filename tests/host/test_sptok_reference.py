"""llama2.c's tokenizer on the board (shared/sptok.py over the MBF's L2CT blob) against an independent
reference written here from the algorithm (a dict of pieces, float scores, every pair rescored each round),
on a generated tokenizer.bin with byte fallback: the same ids for ASCII, accented, CJK and emoji text,
the same decoded bytes (leading space dropped after BOS, <0xNN> as the byte), the same on the MicroPython
unix port, and no allocation in encode_into there."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shared import sptok  # noqa: E402
from tools.board.vboard import micropython_exe  # noqa: E402
from tools.formats import llama2c  # noqa: E402

CORPUS = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
          "One day, she saw a big, red ball. Tom and Sue went to the shop; the dog ran after them! "
          "Mama said: \"Be careful.\" They were happy and smiled. The sun was warm, the sky was blue.")
EXTRA_CHARS = "éöü"  # single-character tokens beyond ASCII (two UTF-8 bytes each)


def make_tokenizer(path: Path, seed: int = 15) -> llama2c.Llama2cTokenizer:
    """A llama2.c tokenizer.bin like tok512's: <unk>, <s>, </s>, the 256 byte tokens, the corpus's characters,
    then frequent substrings (with sentencepiece's leading space) scored by frequency, with some ties."""
    rng = random.Random(seed)
    tokens = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % b for b in range(256)]
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    chars = sorted(set(CORPUS + EXTRA_CHARS))
    for i, c in enumerate(chars):
        tokens.append(c.encode())
        scores.append(-1000.0 - i)
    text = " " + CORPUS
    counts: dict[str, int] = {}
    for n in range(2, 7):
        for i in range(len(text) - n + 1):
            s = text[i:i + n]
            counts[s] = counts.get(s, 0) + 1
    pieces = sorted((s for s, k in counts.items() if k >= 2), key=lambda s: (-counts[s], s))[:220]
    for s in pieces:
        tokens.append(s.encode())
        scores.append(float(counts[s] - len(s) * 0.5 + rng.choice((0.0, 0.0, 0.25))))  # ties on purpose
    llama2c.write_tokenizer(path, tokens, scores)
    return llama2c.read_tokenizer(path, len(tokens))


def ref_encode(tok: llama2c.Llama2cTokenizer, text: bytes, bos: bool = True) -> list[int]:
    """The algorithm as llama2.c documents it, written plainly: BOS, the " " prefix, one token per UTF-8
    character (1-4 bytes) or its bytes as <0xNN> tokens (id 3 + byte), then merge the best-scoring
    adjacent pair (leftmost on ties) while any pair's concatenation is a token."""
    ids_of = {t: i for i, t in enumerate(tok.tokens)}
    out = [1] if bos else []
    if text:
        out.append(ids_of[b" "] if b" " in ids_of else 3 + 32)
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and (text[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        ch = text[i:j]
        out += [ids_of[ch]] if ch in ids_of else [3 + b for b in ch]
        i = j
    while True:  # over every id, BOS included
        best, at = None, -1
        for p in range(len(out) - 1):
            t = ids_of.get(tok.tokens[out[p]] + tok.tokens[out[p + 1]])
            if t is not None and (best is None or tok.scores[t] > tok.scores[best]):
                best, at = t, p
        if best is None:
            return out
        out[at:at + 2] = [best]


def ref_decode(tok: llama2c.Llama2cTokenizer, ids: list[int]) -> bytes:
    out, prev = b"", -1
    for t in ids:
        piece = tok.tokens[t]
        if prev == 1 and piece.startswith(b" "):
            piece = piece[1:]
        if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
            piece = bytes([int(piece[3:5], 16)])
        out += piece
        prev = t
    return out


def texts() -> list[bytes]:
    rng = random.Random(7)
    out = [b"", b" ", b"a", b"Once upon a time", CORPUS.encode(), b"  two  spaces ", "héllo wörld".encode(),
           "日本語 🙂 ok".encode(), "Lily 🐶 and the dog".encode(), b"tab\tand\nnewline", b"\xff\x80 raw bytes",
           "é".encode() * 3]
    alphabet = CORPUS + EXTRA_CHARS + "日ß🙂\t"
    for _ in range(40):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))).encode())
    return out


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = tmp_path_factory.mktemp("sptok") / "tokenizer.bin"
    t = make_tokenizer(path)
    assert llama2c.byte_fallback(t)
    return t


def test_encode_equals_the_reference(tok):
    sp = sptok.SPTok(llama2c.tokenizer_blob(tok))
    merged = 0
    for text in texts():
        want = ref_encode(tok, text)
        assert sp.encode(text, bos=True) == want, text
        assert sp.encode(text) == want[1:]
        out = array("i", [0] * (len(text) + 3))
        n = sp.encode_into(text, out, False, True, True)
        assert list(out[:n]) == want + [2]
        merged += len(text) + 2 - len(want)
    assert merged > 200  # the merges ran, not only the character lookups


def test_decode_equals_the_reference_and_round_trips(tok):
    sp = sptok.SPTok(llama2c.tokenizer_blob(tok))
    for text in texts():
        ids = ref_encode(tok, text)
        assert sp.decode_bytes(ids) == ref_decode(tok, ids)
        # after BOS the dummy prefix's space is dropped, so decoding gives the text back
        assert sp.decode_bytes(ids[1:], prev=1) == text
    buf = bytearray(8)
    assert sp.token_bytes(3 + 0xE9, buf) == 1 and buf[0] == 0xE9  # <0xE9> is the byte itself
    assert sp.special_id("</s>") is None and sp.special_id("<unk>") == 0
    assert (sp.bos_id, sp.eos_id, sp.vocab_size) == (1, 2, len(tok.tokens))


def test_blob_is_checked(tok):
    blob = bytearray(llama2c.tokenizer_blob(tok))
    sptok.SPTok(bytes(blob))
    blob[-1] ^= 1
    with pytest.raises(sptok.TokenizerError, match="CRC mismatch"):
        sptok.SPTok(bytes(blob))
    with pytest.raises(sptok.TokenizerError, match="truncated or padded"):
        sptok.SPTok(bytes(blob[:-3]))
    with pytest.raises(sptok.TokenizerError, match="not an L2CT"):
        sptok.SPTok(b"ETOK" + bytes(40))
    sp = sptok.SPTok(llama2c.tokenizer_blob(tok))
    with pytest.raises(sptok.TokenizerError, match="more than 3 ids"):
        sp.encode_into(b"Once upon a time", array("i", [0, 0, 0]))


def test_wide_tables_give_the_same_ids(tok):
    """A vocabulary past 65535 entries uses u32 tables: the same code path, the same ids."""
    big = llama2c.Llama2cTokenizer(tok.tokens + [b"zz%05d" % i for i in range(66000)],
                                   tok.scores + [-5000.0] * 66000, 7)
    sp = sptok.SPTok(llama2c.tokenizer_blob(big))
    assert sp._w == 4
    for text in texts()[:12]:
        assert sp.encode(text, bos=True) == ref_encode(tok, text)


MP_SCRIPT = r"""
import json, sys, gc, micropython
from array import array
from shared import sptok
f = open(sys.argv[1], "rb")
sp = sptok.SPTok(f, True, 64, 16, int(sys.argv[2]))
f.close()
texts = [bytes(t) for t in json.loads(open(sys.argv[3]).read())]
out = array("i", [0] * 200)
res = []
for t in texts:
    n = sp.encode_into(t, out, False, True)
    res.append(list(out[:n]))
locked = "allocated"  # bound before the lock (a new global under it would allocate)
gc.collect()
micropython.heap_lock()
try:
    for t in texts:
        sp.encode_into(t, out, False, True)
    locked = "ok"
except MemoryError:
    pass
micropython.heap_unlock()
buf = bytearray(16)
dec = []
for ids in res:
    b = bytearray()
    prev = -1
    for i in ids:
        n = sp.piece_bytes(prev, i, buf, 0)
        b += buf[0:n]
        prev = i
    dec.append(list(b))
print(json.dumps({"ids": res, "locked": locked, "dec": dec}))
"""


def test_micropython_gives_the_same_ids_without_allocating(tok, tmp_path):
    blob = llama2c.tokenizer_blob(tok)
    (tmp_path / "tok.bin").write_bytes(bytes(16) + blob + bytes(5))  # inside a larger file, as in an MBF
    ts = [t for t in texts() if len(t) < 150]
    (tmp_path / "texts.json").write_text(json.dumps([list(t) for t in ts]))
    (tmp_path / "run.py").write_text(MP_SCRIPT)
    proc = subprocess.run([micropython_exe(), "-X", "heapsize=262144", str(tmp_path / "run.py"), str(tmp_path / "tok.bin"),
                           str(len(blob)), str(tmp_path / "texts.json")], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MICROPYPATH=str(ROOT)), cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["locked"] == "ok"
    assert res["ids"] == [ref_encode(tok, t) for t in ts]
    assert [bytes(d) for d in res["dec"]] == [ref_decode(tok, ids) for ids in res["ids"]]


def test_node_make_tokenizer_picks_the_kind_from_the_model_file(tok, tmp_path):
    """firmware/node.make_tokenizer: an MBF with tokenizer_kind 1 gives the llama2.c tokenizer."""
    import numpy as np

    from firmware import node
    from tools.formats.convert import convert

    cfg = llama2c.Llama2cConfig(32, 40, 1, 2, 2, len(tok.tokens), 64)
    rng = np.random.default_rng(1)
    w = {name: rng.standard_normal(shape) * 0.1 for name, shape in llama2c.layout(cfg) if name != llama2c.FREQ}
    llama2c.write_model(tmp_path / "m.bin", cfg, w)
    llama2c.write_tokenizer(tmp_path / "tokenizer.bin", tok.tokens, tok.scores)
    convert(tmp_path / "m.bin", tmp_path / "m.mbf")
    t = node.make_tokenizer({"model": "unused.mbf"}, {"tokenizer": True, "model": str(tmp_path / "m.mbf")})
    assert isinstance(t, sptok.SPTok)
    out = array("i", [0] * 64)
    n = t.encode_into("Once upon a time", out, True)  # the annotator's call: (text, ids, special)
    assert list(out[:n]) == ref_encode(tok, b"Once upon a time", bos=False)
    assert node.make_tokenizer({"model": "x"}, {"tokenizer": False, "model": str(tmp_path / "m.mbf")}) is None
    # deploy's node.json: the stop ids come from the same tokenizer (tokens whose bytes hold a newline)
    from host import node_config
    from shared import profile

    cfg, _facts = node_config.derive(profile.load(str(ROOT / "boards" / "rp2040_pico.json")), tmp_path / "m.mbf")
    assert cfg["tokenizer"] is True
    assert cfg["stop_ids"] == [1, 2, 3 + 10]  # "\n<s>\n", "\n</s>\n", <0x0A>
