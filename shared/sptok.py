# sptok.py: llama2.c's tokenizer (a sentencepiece-style scored vocabulary with byte fallback) over an L2CT blob.
"""Encode text to ids and decode ids to bytes as llama2.c's run.c does, for its tiny models (stories260K's
tok512.bin, the 32000-token Llama 2 vocabulary). The MBF carries the vocabulary as an L2CT blob
(config tokenizer_kind 1, docs/MBF.md; written by tools/formats/llama2c.tokenizer_blob), not as floats:

  header (32 bytes): "L2CT", version 1, flags, u16 max token length, u32 total bytes, u32 tokens n,
      u32 CRC-32 of bytes 32.., u32 bos, u32 eos, u32 id of the token " " (0xFFFFFFFF: none)
  offsets: (n + 1) x u16|u32 into the pieces   (token i is pieces[off[i]:off[i + 1]])
  ranks:   n x u16|u32, the score's dense rank (equal scores, equal ranks; higher merges first)
  sorted:  n x u16|u32, the ids in byte order of their pieces (binary search; C strcmp order)
  pieces:  the tokens' bytes
  flags: bit 0 byte fallback (token 3 + b is "<0xBB>" for every byte b), bit 1 entries are u32 (else u16).

encode_into(text, out, special=False, bos=False, eos=False), as run.c's encode(): BOS if asked; the token
" " first when the text is not empty (sentencepiece's dummy prefix); each UTF-8 character (at most 4 bytes)
its own token, or with byte fallback one token per byte (3 + byte), else <unk> (0, counted in `dropped`);
then, repeatedly, the adjacent pair (BOS included, as in run.c) whose concatenation is a token with the
best score merges into it (the leftmost on equal scores) until none does; EOS if asked. `special` is accepted for BPE's interface
and ignored: run.c never parses control-token text. Ranks instead of float scores keep the loop in small
ints, so with bytes input and ids that fit `out` and the pair buffers (word_cap) it allocates nothing.
token_bytes(id, buf, pos) writes a token's bytes ("<0xBB>" as the byte b); piece_bytes(prev, id, buf, pos)
also drops the leading space of a token after BOS, as run.c's decode() does. Errors: TokenizerError.
"""

import binascii
from array import array

from shared.compat import const

MAGIC = b"L2CT"
VERSION = const(1)
_HEADER = const(32)
_FLAG_BYTES = const(1)
_FLAG_WIDE = const(2)
_NONE = 0xFFFFFFFF


class TokenizerError(ValueError):
    pass


def _u32(b, o):
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)


class SPTok:
    """llama2.c's tokenizer over an L2CT blob: SPTok(bytes), or SPTok(open file, offset=, length=) which
    reads the blob into one buffer (the tiny models' vocabularies are a few KB)."""

    def __init__(self, src, verify=True, word_cap=64, offset=0, length=None):
        if isinstance(src, (bytes, bytearray, memoryview)):
            b = src
        elif hasattr(src, "readinto") and hasattr(src, "seek"):
            end = src.seek(0, 2)
            size = end - offset if length is None else length
            if offset < 0 or size < 0 or offset + size > end:
                raise TokenizerError("tokenizer blob of %d bytes at %d lies outside the %d-byte file" % (size, offset, end))
            b = bytearray(size)
            src.seek(offset)
            if src.readinto(b) != size:
                raise TokenizerError("tokenizer blob: short read")
        else:
            raise TokenizerError("tokenizer blob must be bytes or a binary file, not %s" % type(src).__name__)
        self._b = b
        n = len(b)
        if n < _HEADER or bytes(b[0:4]) != MAGIC:
            raise TokenizerError("not an L2CT tokenizer blob (%d bytes, magic %r)" % (n, bytes(b[0:4])))
        if b[4] != VERSION:
            raise TokenizerError("L2CT blob version %d not supported (this code reads %d)" % (b[4], VERSION))
        flags = b[5]
        if flags & ~(_FLAG_BYTES | _FLAG_WIDE):
            raise TokenizerError("L2CT blob: unknown flags 0x%02x" % flags)
        if _u32(b, 8) != n:
            raise TokenizerError("L2CT blob truncated or padded: header says %d bytes, got %d" % (_u32(b, 8), n))
        self.max_token_len = b[6] | (b[7] << 8)
        self.vocab_size = self.n_tokens = V = _u32(b, 12)
        self._crc = _u32(b, 16)
        w = self._w = 4 if flags & _FLAG_WIDE else 2
        self.byte_fallback = bool(flags & _FLAG_BYTES)
        self._o_off = _HEADER
        self._o_rank = _HEADER + (V + 1) * w
        self._o_sort = self._o_rank + V * w
        self._o_str = self._o_sort + V * w
        if V == 0 or self._o_str > n or self.max_token_len == 0:
            raise TokenizerError("L2CT blob: bad counts (%d tokens in %d bytes)" % (V, n))
        if self._get(self._o_off) != 0 or self._o_str + self._get(self._o_off + V * w) != n:
            raise TokenizerError("L2CT blob: the piece offsets do not cover the pieces")
        if verify and binascii.crc32(memoryview(b)[_HEADER:]) != self._crc:
            raise TokenizerError("L2CT blob: CRC mismatch (data corrupted)")
        bos, eos, sp = _u32(b, 20), _u32(b, 24), _u32(b, 28)
        for what, v in (("bos", bos), ("eos", eos), ("space", sp)):
            if v != _NONE and v >= V:
                raise TokenizerError("L2CT blob: %s id %d out of range" % (what, v))
        if self.byte_fallback and V < 259:
            raise TokenizerError("L2CT blob: byte fallback needs 259 tokens, has %d" % V)
        self.bos_id = None if bos == _NONE else bos
        self.eos_id = None if eos == _NONE else eos
        self._space = -1 if sp == _NONE else sp
        self._end = 0  # end of the piece _span() found last (set here: no attribute is added later)
        self._cat = bytearray(2 * self.max_token_len)
        self._grow(word_cap)
        self.dropped = 0

    def _grow(self, n):
        self._cap = n
        self._pid = array("i", bytearray(4 * n))  # pair (i, i + 1) merges into this id, or -1
        self._prk = array("i", bytearray(4 * n))  # ... with this rank

    def _get(self, o):
        b = self._b
        if self._w == 2:
            return b[o] | (b[o + 1] << 8)
        return _u32(b, o)

    def close(self):
        self._b = None

    def tokenizer_hash(self):
        """CRC-32 of the blob's tables: equal hashes, equal tokenizers."""
        return self._crc

    def has_token(self, tid):
        return 0 <= tid < self.n_tokens

    def special_id(self, text):
        """The id of a control token written as text ("<s>", "</s>", "<unk>"), or None."""
        for tid in (0, self.bos_id, self.eos_id):
            if tid is not None and tid < self.n_tokens and self._piece_is(tid, text):
                return tid
        return None

    def _piece_is(self, tid, text):
        t = text.encode("utf-8") if isinstance(text, str) else text
        o = self._span(tid)
        n = self._end - o
        if n != len(t):
            return False
        for i in range(n):
            if self._b[o + i] != t[i]:
                return False
        return True

    def _span(self, tid):
        """Start of token tid's piece in the blob; its end in self._end."""
        w = self._w
        o = self._o_off + tid * w
        self._end = self._o_str + self._get(o + w)
        return self._o_str + self._get(o)

    def _cmp(self, t, a, n, tid):
        """Sign of t[a:a+n] against token tid's piece, in byte order (C strcmp for NUL-free strings)."""
        b = self._b
        o = self._span(tid)
        m = self._end - o
        k = n if n < m else m
        for i in range(k):
            x = t[a + i]
            y = b[o + i]
            if x != y:
                return -1 if x < y else 1
        return 0 if n == m else (-1 if n < m else 1)

    def lookup(self, t, a, n):
        """The id whose piece is t[a:a+n], or -1 (binary search of the sorted table)."""
        lo = 0
        hi = self.n_tokens - 1
        w = self._w
        so = self._o_sort
        while lo <= hi:
            mid = (lo + hi) >> 1
            tid = self._get(so + mid * w)
            c = self._cmp(t, a, n, tid)
            if c == 0:
                return tid
            if c < 0:
                hi = mid - 1
            else:
                lo = mid + 1
        return -1

    def _rank(self, tid):
        return self._get(self._o_rank + tid * self._w)

    def _emit(self, out, k, v):
        if k < len(out):
            out[k] = v
        elif type(out) is list:
            out.append(v)
        else:
            raise TokenizerError("encode: more than %d ids (the output buffer's size)" % len(out))
        return k + 1

    def encode_into(self, text, out, special=False, bos=False, eos=False):
        """Encode text (str, or bytes of UTF-8) into out (array or list) as run.c's encode(); returns the
        id count. special is ignored (see the module docstring)."""
        if self._b is None:
            raise TokenizerError("tokenizer is closed")
        if isinstance(text, str):
            t = text.encode("utf-8")
        elif isinstance(text, bytes) or isinstance(text, bytearray):
            t = text
        else:
            raise TokenizerError("encode: text must be str (or UTF-8 bytes), not %s" % type(text).__name__)
        self.dropped = 0
        n = len(t)
        k = 0
        if bos and self.bos_id is not None:
            k = self._emit(out, k, self.bos_id)
        if n:
            if self._space >= 0:
                k = self._emit(out, k, self._space)
            elif self.byte_fallback:
                k = self._emit(out, k, 3 + 32)
        i = 0
        while i < n:
            j = i + 1
            while j < n and (t[j] & 0xC0) == 0x80 and j - i < 4:
                j += 1
            tid = self.lookup(t, i, j - i)
            if tid >= 0:
                k = self._emit(out, k, tid)
            elif self.byte_fallback:
                for q in range(i, j):
                    k = self._emit(out, k, 3 + t[q])
            else:
                k = self._emit(out, k, 0)
                self.dropped += j - i
            i = j
        m = k  # the merges run over every id so far, BOS included, as run.c's do
        if m > self._cap:
            self._grow(m + 16)
        pid = self._pid
        prk = self._prk
        for p in range(m - 1):
            self._pair_at(out, p)
        while m > 1:
            best = -1
            bi = -1
            for p in range(m - 1):
                if pid[p] >= 0 and prk[p] > best:
                    best = prk[p]
                    bi = p
            if bi < 0:
                break
            out[bi] = pid[bi]
            for p in range(bi + 1, m - 1):
                out[p] = out[p + 1]
                pid[p] = pid[p + 1]
                prk[p] = prk[p + 1]
            m -= 1
            k -= 1
            if bi > 0:  # the merged token's two new pairs (two calls: a tuple would allocate)
                self._pair_at(out, bi - 1)
            if bi < m - 1:
                self._pair_at(out, bi)
        if type(out) is list:
            del out[k:]
        if eos and self.eos_id is not None:
            k = self._emit(out, k, self.eos_id)
        return k

    def _pair_at(self, out, p):
        """Merge candidate of the pair (out[p], out[p + 1]) into _pid[p], _prk[p]."""
        cat = self._cat
        a = self._span(out[p])
        na = self._end - a
        c = self._span(out[p + 1])
        nc = self._end - c
        self._pid[p] = -1
        if na + nc > self.max_token_len:
            return
        b = self._b
        for j in range(na):
            cat[j] = b[a + j]
        for j in range(nc):
            cat[na + j] = b[c + j]
        tid = self.lookup(cat, 0, na + nc)
        if tid >= 0:
            self._pid[p] = tid
            self._prk[p] = self._rank(tid)

    def encode(self, text, special=False, bos=False, eos=False):
        """Token ids of text (a list)."""
        out = []
        self.encode_into(text, out, special, bos, eos)
        return out

    # ---- decoding ----

    def token_bytes(self, tid, buf, pos=0):
        """Write token tid's bytes to buf[pos:] ("<0xBB>" tokens as the byte BB); return the count."""
        if type(tid) is not int or not 0 <= tid < self.n_tokens:
            raise TokenizerError("token id %r out of range 0..%d" % (tid, self.n_tokens - 1))
        b = self._b
        o = self._span(tid)
        n = self._end - o
        if n == 6 and b[o] == 60 and b[o + 1] == 48 and b[o + 2] == 120 and b[o + 5] == 62:  # <0xBB>
            v = _hex(b[o + 3]) * 16 + _hex(b[o + 4]) if _hex(b[o + 3]) >= 0 and _hex(b[o + 4]) >= 0 else -1
            if v >= 0:
                buf[pos] = v
                return 1
        for i in range(n):
            buf[pos + i] = b[o + i]
        return n

    def piece_bytes(self, prev, tid, buf, pos=0):
        """token_bytes, less the piece's leading space when prev is BOS (run.c's decode(): the space of
        the piece as stored, so a "<0x20>" token is kept)."""
        n = self.token_bytes(tid, buf, pos)
        o = self._span(tid)
        if prev == self.bos_id and self._end > o and self._b[o] == 32:
            for i in range(n - 1):
                buf[pos + i] = buf[pos + i + 1]
            n -= 1
        return n

    def decode_bytes(self, ids, prev=-1):
        """The bytes of ids as run.c prints them (prev: the token before ids[0], e.g. BOS)."""
        out = bytearray()
        buf = bytearray(self.max_token_len if self.max_token_len > 1 else 1)
        for t in ids:
            n = self.piece_bytes(prev, t, buf, 0)
            out += buf[0:n]
            prev = t
        return bytes(out)

    def decode(self, ids, prev=-1):
        b = self.decode_bytes(ids, prev)
        try:
            return str(b, "utf-8")
        except UnicodeError:
            from shared.bpe import utf8_lossy

            return utf8_lossy(b)


def _hex(c):
    if 48 <= c <= 57:
        return c - 48
    if 65 <= c <= 70:
        return c - 55
    if 97 <= c <= 102:
        return c - 87
    return -1


def load(src, verify=True, offset=0, length=None):
    return SPTok(src, verify, 64, offset, length)
