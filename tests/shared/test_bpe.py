# test_bpe.py: the BPE tokenizer on the committed restricted SmolLM2 blob, in memory and read lazily from a file.
import binascii
import gc
import io
from array import array

import testkit
from shared import bpe, unicats

FIXTURE = "tests/shared/data/tok_small.bin"
# Regenerate (and tests/host/test_bpe_reference.py checks it is byte-identical to a fresh export):
#   .venv/bin/python tests/host/corpus_lines.py > /tmp/corpus.jsonl
#   .venv/bin/python -m tools.formats.tokenizer_export export --keep 1024 --corpus /tmp/corpus.jsonl -o tests/shared/data/tok_small.bin
FIXTURE_CRC = 0xE875D8E2
FIXTURE_TOKENS = 1024

# (text, special, ids, kind), ids computed on CPython with this blob. "ref": equal to the full SmolLM2 reference
# tokenizer's ids (the host test checks it); "sub": the restricted vocabulary segments differently (the
# host test checks these are what the restricted encoder gives, that they round-trip and that they differ).
VECTORS = (
    ("2024-06-11T08:15:02.120Z [WARN] pump3.temperature=78.4°C (±0.5 °C)", False,
     [34, 32, 34, 36, 29, 32, 38, 29, 33, 33, 68, 32, 40, 42, 33, 37, 42, 32, 34, 30, 33, 34, 32, 74, 933, 29719, 62,
      77, 6680, 35, 30, 19864, 45, 39, 40, 30, 36, 4742, 51, 365, 35214, 32, 30, 37, 13518, 51, 25], "ref"),
    ("The bearing is running hot, check lubrication.", False,
     [68, 255, 12422, 314, 4108, 3380, 28, 2545, 41254, 30], "sub"),
    ("  multiple   spaces\tand\ttabs\n\n  new lines \n", False,
     [216, 283, 336, 100, 89, 96, 290, 256, 574, 387, 266, 197, 81, 268, 197, 100, 81, 1419, 198, 198, 216, 420, 103,
      303, 254, 266, 216, 198], "sub"),
    ("Температура подшипника 78,4 °C", False,
     [155, 112, 44758, 21339, 6643, 23728, 8355, 14714, 23728, 21985, 37625, 37123, 7872, 21339, 44795, 34536, 216,
      39, 40, 28, 36, 13518, 51], "ref"),
    ("3号泵轴承温度升高", False,
     [35, 48980, 35016, 130, 42019, 129, 27898, 140, 177, 133, 119, 43488, 27991, 225, 180, 121, 242], "ref"),
    ("don't, it's, they'll; IT'S o'clock", False,
     [84, 258, 982, 28, 357, 506, 28, 502, 3060, 43, 9627, 23, 67, 263, 23, 17466], "sub"),
    ("µm ± ½ ² Ⅻ １２ ٣", False,
     [39269, 93, 17004, 216, 16738, 216, 19133, 216, 173, 223, 121, 216, 8083, 235, 8083, 236, 216, 164, 113], "ref"),
    ("⚠️ alarm 🔥 ✅", False, [173, 244, 250, 31752, 12991, 15107, 238, 115, 4636, 246, 223], "ref"),
    ("", False, [], "ref"),
    ("<|im_start|>user\nhi<|im_end|>", True, [1, 101, 99, 259, 198, 88, 89, 2], "sub"),
    ("<|im_start|>user\nhi<|im_end|>", False,
     [44, 108, 89, 93, 79, 302, 434, 108, 46, 101, 99, 259, 198, 88, 89, 44, 108, 89, 93, 79, 264, 84, 108, 46], "sub"),
    ("a\x04b!\x04!", False, [81, 82, 17, 17], "sub"),
    ("e\u0301 na\u00efve", False, [85, 151, 219, 15486, 46494], "ref"),
    ("Overdue maintenance: vibration 4.2 mm/s", False,
     [63, 331, 16395, 6170, 42, 386, 12056, 216, 36, 30, 34, 7610, 31, 99], "sub"),
    ("xylophone quixotic zygomorphic", False,
     [104, 105, 92, 95, 647, 258, 85, 216, 385, 1088, 320, 286, 216, 106, 105, 87, 300, 270, 647, 286], "sub"),
)

# Characters for random texts: every class and byte length, the spaces that change splits, contractions.
POOL = ("a", "b", "Z", "q", "0", "7", " ", " ", "  ", "\t", "\n", "\r\n", ".", ",", "!", "'", "'s", "'ll", "-", "/",
        "°C", "µ", "±", "é", "ñ", "Ж", "я", "Ω", "中", "文", "の", "한", "٣", "²", "½", "\u00a0", "\u3000", "\u2009",
        "\u0301", "😀", "🔥", "👍🏽", "the", " pump", "ing", "<|im_end|>", "\x0b", "\x1c")

_BLOB = []


def _blob():
    if not _BLOB:
        with open(FIXTURE, "rb") as f:
            _BLOB.append(f.read())
    return _BLOB[0]


def _mem():
    return bpe.BPE(_blob())


def _lazy():
    return bpe.BPE(open(FIXTURE, "rb"))


def _random_texts(n, seed):
    rng = testkit.Rng(seed)
    out = []
    for _ in range(n):
        out.append("".join(POOL[rng.below(len(POOL))] for _ in range(1 + rng.below(24))))
    return out


def test_header_hash_and_counts():
    for tok in (_mem(), _lazy()):
        assert tok.tokenizer_hash() == FIXTURE_CRC, "%08x" % tok.tokenizer_hash()
        assert tok.tokenizer_hash() == binascii.crc32(_blob()[0:8] + _blob()[12:]) & 0xFFFFFFFF
        assert tok.vocab_size == 49152 and tok.n_tokens == FIXTURE_TOKENS and tok.restricted
        assert tok.bos_id == 1 and tok.eos_id == 2 and tok.n_specials == 17
        assert tok.special_id("<|im_end|>") == 2 and tok.special_id("<|endoftext|>") == 0
        assert tok.special_id("hello") is None


def test_encode_vectors_memory_and_lazy():
    for tok in (_mem(), _lazy()):
        for text, special, ids, _kind in VECTORS:
            got = tok.encode(text, special)
            assert got == ids, "%r: %r != %r" % (text, got, ids)


def test_decode_vectors():
    for tok in (_mem(), _lazy()):
        for text, special, ids, _kind in VECTORS:
            want = text.replace("\x04", "")  # 0x04 has no token in SmolLM2: dropped, as by the reference
            assert tok.decode(ids) == want, "%r" % text
        assert tok.decode([]) == ""


def test_round_trip_and_lazy_equals_memory_on_random_text():
    mem = _mem()
    lazy = _lazy()
    for text in _random_texts(150, 7):
        for special in (False, True):
            ids = mem.encode(text, special)
            assert lazy.encode(text, special) == ids, "%r" % text
            assert mem.decode(ids) == text, "%r -> %r -> %r" % (text, ids, mem.decode(ids))
            for t in ids:
                assert 0 <= t < mem.vocab_size and mem.has_token(t), t
            if not special:
                assert 0 not in ids and 1 not in ids and 2 not in ids  # control text stays text


def test_special_tokens_only_on_request():
    tok = _mem()
    ids = tok.encode("x<|im_end|><|im_end|>y", True)
    assert ids.count(2) == 2 and tok.decode(ids) == "x<|im_end|><|im_end|>y"
    assert 2 not in tok.encode("x<|im_end|>y")
    assert tok.encode("<|endoftext|>", True) == [0]


def test_dropped_bytes_are_counted():
    tok = _mem()
    assert tok.encode("a\x04b\x06") == [81, 82]
    assert tok.dropped == 2
    tok.encode("ab")
    assert tok.dropped == 0


def test_encode_into_array_and_no_alloc_with_bytes_input():
    for tok in (_mem(), _lazy()):
        text = "2024-06-11 [WARN] pump3 bearing 78.4°C ±0.5, don't\tstop  ".encode("utf-8")
        out = array("H", [0] * 64)
        n = tok.encode_into(text, out)
        assert list(out[:n]) == tok.encode(text.decode("utf-8"))
        state = [tok, text, out]

        def run(st):
            return st[0].encode_into(st[1], st[2])

        assert testkit.run_locked(run, state) == n
        e = testkit.raises(bpe.TokenizerError, tok.encode_into, text, array("H", [0] * 3))
        assert "output holds 3" in str(e)


def test_token_bytes_allocates_nothing():
    for tok in (_mem(), _lazy()):
        ids = array("H", tok.encode("Pump 3 bearing temperature rising 2 °C/min, check lubrication."))
        buf = bytearray(128)
        state = [tok, ids, buf]

        def run(st):
            t, seq, b = st
            pos = 0
            for i in range(len(seq)):
                pos = t.token_bytes(seq[i], b, pos)
            return pos

        n = testkit.run_locked(run, state)
        assert bytes(buf[:n]).decode("utf-8") == "Pump 3 bearing temperature rising 2 °C/min, check lubrication."


def test_bad_blobs_give_clear_errors():
    good = _blob()
    view = memoryview(good)  # slices of a memoryview copy nothing: the board heap stays unfragmented
    for cut in (0, 3, 47, 48, 600, len(good) - 1):
        e = testkit.raises(bpe.TokenizerError, bpe.BPE, view[:cut])
        assert "truncated" in str(e) or "not a tokenizer blob" in str(e), str(e)
    e = testkit.raises(bpe.TokenizerError, bpe.BPE, io.BytesIO(view[:len(good) - 1]))
    assert "truncated" in str(e), str(e)
    bad = bytearray(len(good) + 1)
    bad[0:len(good)] = good
    assert "padded" in str(testkit.raises(bpe.TokenizerError, bpe.BPE, bad))
    bad = bytearray(good)
    # One flipped bit anywhere (here: in the merge table, the string table, the header's counts) is caught.
    for where in (len(good) // 2, len(good) - 1, 20, 9):
        bad[where] ^= 0x40
        for src in (bad, io.BytesIO(bad)):
            e = testkit.raises(bpe.TokenizerError, bpe.BPE, src)
            assert "corrupted" in str(e) or "bad counts" in str(e) or "sections add up" in str(e), str(e)
        bad[where] ^= 0x40
    # The second half overwritten in place (not built by concatenation: on a 192 KiB heap that
    # fragments, several 11 KB temporaries can fail to allocate), then restored.
    for i in range(len(good) // 2, len(good)):
        bad[i] = 0x78
    gc.collect()
    e = testkit.raises(bpe.TokenizerError, bpe.BPE, io.BytesIO(bad))
    assert "corrupted" in str(e) and "CRC-32" in str(e), str(e)
    for i in range(len(good) // 2, len(good)):
        bad[i] = good[i]
    for where, value, words in ((0, ord("X"), "not a tokenizer blob"), (4, 9, "version 9"), (5, 4, "id width"),
                                (6, 2, "pre-tokenizer"), (7, 0x80, "flags")):
        keep = bad[where]
        bad[where] = value
        assert words in str(testkit.raises(bpe.TokenizerError, bpe.BPE, bad))
        bad[where] = keep
    assert bpe.BPE(bad).tokenizer_hash() == FIXTURE_CRC
    for src in (None, 42, "tok_small.bin"):
        assert "bytes or a binary file" in str(testkit.raises(bpe.TokenizerError, bpe.BPE, src))
    assert isinstance(testkit.raises(bpe.TokenizerError, bpe.BPE, b""), ValueError)


def test_blob_inside_a_bigger_file():
    # As in an MBF model file: the blob at some offset, other data before and after it.
    good = _blob()
    f = io.BytesIO(b"\xaa" * 100 + good + b"\x55" * 37)
    tok = bpe.BPE(f, True, 64, 100, len(good))
    assert tok.tokenizer_hash() == FIXTURE_CRC
    for text, special, ids, _kind in VECTORS[:6]:
        assert tok.encode(text, special) == ids and tok.decode(ids) == text
    for offset, length in ((100, len(good) + 38), (99, len(good)), (101, len(good)), (-1, 10), (200000, None)):
        e = testkit.raises(bpe.TokenizerError, bpe.BPE, f, True, 64, offset, length)
        assert "truncated" in str(e) or "magic" in str(e) or "outside" in str(e) or "padded" in str(e), str(e)


def test_closed_tokenizer_says_so():
    tok = _lazy()
    assert tok.encode("ok") == [2231]
    tok.close()
    assert "closed" in str(testkit.raises(bpe.TokenizerError, tok.encode, "ok"))
    assert "closed" in str(testkit.raises(bpe.TokenizerError, tok.decode, [2231]))
    tok.close()  # twice is harmless


def test_bad_ids_give_clear_errors():
    for tok in (_mem(), _lazy()):
        assert "out of range" in str(testkit.raises(bpe.TokenizerError, tok.decode, [49152]))
        assert "out of range" in str(testkit.raises(bpe.TokenizerError, tok.decode, [-1]))
        for bad in (1.5, None, "7", True):
            assert "must be an int" in str(testkit.raises(bpe.TokenizerError, tok.decode, [bad]))
        missing = 40000  # a valid SmolLM2 id, but not among this blob's 1024 tokens
        assert not tok.has_token(missing) and tok.has_token(81)
        e = testkit.raises(bpe.TokenizerError, tok.decode, [81, missing])
        assert "not in this restricted vocabulary" in str(e)
        assert "sequence of ints" in str(testkit.raises(bpe.TokenizerError, tok.decode, 5))
        e = testkit.raises(bpe.TokenizerError, tok.token_bytes, 0, bytearray(4))  # <|endoftext|> is 13 bytes
        assert "buffer holds 4" in str(e)


def test_bad_text_gives_clear_errors():
    tok = _mem()
    for bad in (123, None, b"abc", ["a"]):
        e = testkit.raises(bpe.TokenizerError, tok.encode, bad)
        assert "must be str" in str(e)
    out = array("H", [0] * 16)
    for bad in (b"\xff", b"a\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc3\x28"):
        e = testkit.raises(bpe.TokenizerError, tok.encode_into, bad, out)
        assert "UTF-8" in str(e), str(e)
    assert "must be str" in str(testkit.raises(bpe.TokenizerError, tok.encode_into, 3.0, out))
    if not testkit.IS_MP:  # MicroPython strings cannot hold a lone surrogate
        assert "UTF-8" in str(testkit.raises(bpe.TokenizerError, tok.encode, "a\ud800"))


def test_lossy_decode_of_cut_characters():
    tok = _mem()
    ids = tok.encode("😀")  # not a token of this blob: its four bytes are three tokens
    assert ids == [10813, 242, 218] and tok.decode(ids) == "😀"
    assert tok.decode(ids[:2]) == "\ufffd" and tok.decode_bytes(ids[:2]) == b"\xf0\x9f\x98"
    assert tok.decode(ids[1:]) == "\ufffd\ufffd"
    assert bpe.utf8_lossy(b"a\xffb") == "a\ufffdb"
    assert bpe.utf8_lossy(b"\xe2\x82") == "\ufffd"
    assert bpe.utf8_lossy(b"\xe2\x82\xac\xe2") == "\u20ac\ufffd"
    assert bpe.utf8_lossy(b"\xed\xa0\x80") == "\ufffd\ufffd\ufffd"  # surrogates are invalid, byte by byte


def test_unicode_classes():
    L, N, S, O = unicats.LETTER, unicats.NUMBER, unicats.SPACE, unicats.OTHER
    cases = (("a", L), ("Z", L), ("é", L), ("ß", L), ("Ж", L), ("中", L), ("の", L), ("한", L), ("ا", L),
             ("\U00020000", L), ("0", N), ("٣", N), ("²", N), ("½", N), ("Ⅻ", N), ("１", N), (" ", S), ("\t", S),
             ("\n", S), ("\x0b", S), ("\x85", S), ("\u00a0", S), ("\u2009", S), ("\u3000", S), ("\u2028", S),
             ("\x1c", O), ("!", O), ("'", O), ("°", O), ("µ", L), ("±", O), ("\u0301", O), ("😀", O),
             ("\u200d", O), ("\U0010ffff", O), ("\U000e0001", O))
    for ch, want in cases:
        assert unicats.cls(ord(ch)) == want, "U+%04X: %d != %d" % (ord(ch), unicats.cls(ord(ch)), want)


class _ViewFile:
    """A read-only binary file over a buffer, without copying it (io.BytesIO would): seek, tell, readinto."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def seek(self, off, whence=0):
        self.pos = off if whence == 0 else len(self.buf) + off if whence == 2 else self.pos + off
        return self.pos

    def tell(self):
        return self.pos

    def readinto(self, b):
        n = min(len(b), len(self.buf) - self.pos)
        for i in range(n):
            b[i] = self.buf[self.pos + i]
        self.pos += n
        return n

    def close(self):
        pass


def _widen(blob, ranks):
    """The same tokenizer re-written with 3-byte ids (and explicit merge ranks): the other layouts."""
    N = int.from_bytes(blob[20:24], "little")
    M = int.from_bytes(blob[24:28], "little")
    S = blob[40] | (blob[41] << 8)
    n_ids = 256 + S + (N if blob[7] & 2 else 0)
    rest = len(blob) - 48 - 2 * n_ids - 6 * M
    out = bytearray(48 + 3 * n_ids + (12 if ranks else 9) * M + rest)  # one allocation, no growing
    out[0:48] = blob[0:48]
    src = 48
    dst = 48
    for i in range(n_ids + 3 * M):
        v = blob[src] | (blob[src + 1] << 8)
        if v == 0xFFFF:
            v = 0xFFFFFF
        out[dst] = v & 0xFF
        out[dst + 1] = (v >> 8) & 0xFF
        out[dst + 2] = v >> 16
        src += 2
        dst += 3
        if ranks and i >= n_ids and (i - n_ids) % 3 == 2:  # after a merge's result: its rank
            r = v - 252  # SmolLM2's merge of rank r makes token r + 252
            out[dst] = r & 0xFF
            out[dst + 1] = (r >> 8) & 0xFF
            out[dst + 2] = r >> 16
            dst += 3
    out[dst:] = memoryview(blob)[src:]
    out[5] = 3
    out[7] |= 1 if ranks else 0
    out[12:16] = len(out).to_bytes(4, "little")
    crc = binascii.crc32(memoryview(out)[12:], binascii.crc32(memoryview(out)[0:8])) & 0xFFFFFFFF
    out[8:12] = crc.to_bytes(4, "little")
    return out


def test_three_byte_ids_and_explicit_ranks_give_same_ids():
    gc.collect()
    base = _mem()
    texts = [v[0] for v in VECTORS] + _random_texts(30, 11)
    want = [base.encode(t) for t in texts]
    for ranks in (False, True):
        wide = _widen(_blob(), ranks)
        for lazy in (False, True):
            tok = bpe.BPE(_ViewFile(wide) if lazy else wide)
            assert tok.id_bytes == 3 and tok.tokenizer_hash() != base.tokenizer_hash()
            # merge " " + "t" (ids 216, 100) is SmolLM2's first: rank 0, result 252
            assert tok._pair(216, 100) == (0 if ranks else 252) and tok._res == 252
            for t, ids in zip(texts, want):
                assert tok.encode(t) == ids, "%r (ranks=%s)" % (t, ranks)
                assert tok.decode(ids) == t.replace("\x04", "")
            tok = None
        wide = None
        gc.collect()


def test_open_cost_in_ram():
    before = testkit.heap_in_use()
    tok = _lazy()
    after = testkit.heap_in_use()
    if before is None:
        testkit.skip("heap accounting is MicroPython's")
    # RAM of the 1024-token blob opened lazily: byte map, block indexes, buffers, control-token texts.
    print("lazy open of the fixture: %d bytes of heap" % (after - before))
    assert after - before < 6144, after - before
    ids = tok.encode("Pump 3 bearing temperature rising")
    gc.collect()
    assert testkit.heap_in_use() - after < 512  # the encoder keeps nothing per call
    assert tok.decode(ids) == "Pump 3 bearing temperature rising"
    tok.close()
