# test_sptok.py: llama2.c's tokenizer (shared/sptok.py) on both interpreters: a small scored vocabulary
# with byte fallback, built here byte by byte as an L2CT blob, against a plain reference encoder (a dict
# of pieces, float scores, every pair rescored each round); allocation-free encode_into; decode rules.
import binascii
import struct
from array import array

import testkit

from shared import sptok

CHARS = "abdehilnorstuwy .,!"
MERGES = (("he", 5.0), ("th", 4.0), (" t", 4.0), (" the", 6.0), ("in", 3.0), ("ing", 3.5), ("er", 2.0),
          ("re", 2.0), ("en", 1.0), (" a", 1.5), ("an", 1.5), (" an", 2.5), ("ll", 0.5), ("o ", 0.1))
TEXTS = ("the", "there", " then the ring", "a hen in the reed", "anna and the llama sing", "",
         "tree", "rere", "caf\u00e9 na\u00efve", "yes \U0001f642 no", "winter, then spring!")


def _tokens():
    toks = [b"<unk>", b"\n<s>\n", b"\n</s>\n"]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        toks.append(("<0x%02X>" % b).encode())
        scores.append(0.0)
    for i, c in enumerate(CHARS):
        toks.append(c.encode())
        scores.append(-100.0 - i)
    for s, v in MERGES:
        toks.append(s.encode())
        scores.append(v)
    return toks, scores


def _blob(toks, scores):
    """The L2CT layout of shared/sptok.py's docstring, u16 entries, written independently of the tools."""
    n = len(toks)
    uniq = sorted(set(scores))
    ranks = [uniq.index(s) for s in scores]
    order = sorted(range(n), key=lambda i: toks[i])
    offs = [0]
    for t in toks:
        offs.append(offs[-1] + len(t))
    tables = bytearray()
    for v in offs + ranks + order:
        tables += struct.pack("<H", v)
    for t in toks:
        tables += t
    longest = max(len(t) for t in toks)
    head = b"L2CT" + struct.pack("<BBHIIIIII", 1, 1, longest, 32 + len(tables), n, binascii.crc32(tables), 1, 2,
                                 toks.index(b" "))
    return bytes(head) + bytes(tables)


def _ref(toks, scores, text):
    ids = {}
    for i in range(len(toks)):
        ids[toks[i]] = i
    out = [1]
    if text:
        out.append(ids[b" "])
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and (text[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        ch = bytes(text[i:j])
        if ch in ids:
            out.append(ids[ch])
        else:
            for b in ch:
                out.append(3 + b)
        i = j
    while True:
        best = -1
        at = -1
        for p in range(len(out) - 1):  # BOS included
            t = ids.get(toks[out[p]] + toks[out[p + 1]], -1)
            if t >= 0 and (best < 0 or scores[t] > scores[best]):
                best = t
                at = p
        if best < 0:
            return out
        out = out[:at] + [best] + out[at + 2:]


_TOK = []


def _tok():
    if not _TOK:
        toks, scores = _tokens()
        _TOK.append((sptok.SPTok(_blob(toks, scores)), toks, scores))
    return _TOK[0]


def test_encode_matches_the_reference():
    sp, toks, scores = _tok()
    merged = 0
    for text in TEXTS:
        t = text.encode("utf-8")
        want = _ref(toks, scores, t)
        got = sp.encode(text, False, True)
        assert got == want, (text, got, want)
        merged += len(t) + 2 - len(want)
    assert merged > 20


def _encode_all(state):
    sp, out, texts, counts = state
    for i in range(len(texts)):
        counts[i] = sp.encode_into(texts[i], out, False, True)


def test_encode_into_allocates_nothing():
    sp, toks, scores = _tok()
    texts = [t.encode("utf-8") for t in TEXTS]
    out = array("i", bytearray(4 * 64))
    counts = array("i", bytearray(4 * len(texts)))
    sp.encode_into(texts[4], out, False, True)  # warm: the pair buffers exist from construction
    testkit.run_locked(_encode_all, (sp, out, texts, counts))
    for i in range(len(texts)):
        n = sp.encode_into(texts[i], out, False, True)
        assert n == counts[i] and list(out[:n]) == _ref(toks, scores, texts[i])


def test_decode_drops_the_space_after_bos_and_turns_byte_tokens_into_bytes():
    sp, toks, scores = _tok()
    for text in TEXTS:
        t = text.encode("utf-8")
        ids = _ref(toks, scores, t)
        assert sp.decode_bytes(ids[1:], 1) == t  # after BOS: the dummy prefix's space is not printed
    buf = bytearray(8)
    assert sp.token_bytes(3 + 0xC3, buf, 0) == 1 and buf[0] == 0xC3
    the = toks.index(b" the")
    assert sp.piece_bytes(1, the, buf, 0) == 3 and bytes(buf[0:3]) == b"the"
    assert sp.piece_bytes(5, the, buf, 0) == 4 and bytes(buf[0:4]) == b" the"
    sp20 = 3 + 0x20  # "<0x20>": its stored piece has no leading space, so it is kept after BOS
    assert sp.piece_bytes(1, sp20, buf, 0) == 1 and buf[0] == 32


def test_bad_blobs_and_ids_are_refused():
    toks, scores = _tokens()
    blob = bytearray(_blob(toks, scores))
    e = testkit.raises(sptok.TokenizerError, sptok.SPTok, b"XXXX" + bytes(blob[4:]))
    assert "not an L2CT" in str(e)
    blob[40] ^= 1
    e = testkit.raises(sptok.TokenizerError, sptok.SPTok, bytes(blob))
    assert "CRC mismatch" in str(e)
    sp, _t, _s = _tok()
    e = testkit.raises(sptok.TokenizerError, sp.token_bytes, len(toks), bytearray(8))
    assert "out of range" in str(e)
    e = testkit.raises(sptok.TokenizerError, sp.encode_into, b"the theme", array("i", [0, 0]))
    assert "more than 2 ids" in str(e)
