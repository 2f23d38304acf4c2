# bpe.py: byte-level BPE tokenizer (SmolLM2's) over a compact binary blob, in memory or read lazily from flash.
"""Encode text to token ids and decode ids to text exactly as SmolLM2's reference tokenizer does.

The blob (docs/TOKENIZER.md, written by tools/formats/tokenizer_export.py) holds sorted fixed-size tables that are
binary-searched, never turned into dicts: the 49152-token vocabulary and 48900 merges would not fit a
190 KB heap as Python objects. BPE(src) takes either the whole blob as bytes (host; fast) or an open
binary file (board; the tables stay in flash and are read with seek + readinto into small buffers
allocated here once).

Pre-tokenizer (SmolLM2 = StarCoder = llama.cpp's "smollm"): every number character is its own piece
(HF Digits(individual_digits=True)); the text between is split by GPT-2's regex
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
implemented below as a hand-written scanner over UTF-8 bytes with shared/unicats.py's classes. Each
piece's bytes become single-byte tokens, merged pairwise by priority (lowest first, leftmost on ties)
until no pair merges. Bytes that have no token (SmolLM2 lacks 21, e.g. 0x04, 0xF5..0xFF) are dropped,
as the reference does; `dropped` counts them.

encode(text) -> list of ids; encode_into(text, out) -> count, into a preallocated array: with a bytes
input (valid UTF-8) it allocates nothing on MicroPython. token_bytes(id, buf) copies one token's bytes
without allocating (the decode step). Errors are TokenizerError, a ValueError.
"""

import binascii
from array import array

from shared import unicats
from shared.compat import const

MAGIC = b"ETOK"
VERSION = const(1)
_HEADER = const(48)
_GROUP = const(32)  # tokens per decode group: u32 offset + 32 length bytes
_GREC = const(36)
_MBLOCK = const(32)  # merge records per block (lazy mode reads one block per lookup)
_IBLOCK = const(64)  # idmap entries per block
_INF = const(0x3FFFFFFF)  # "no merge"; below 2**30 so it stays a small int on the boards
_FLAG_RANKS = const(1)
_FLAG_RESTRICTED = const(2)
_PRETOK_SMOLLM = const(1)
_OTHER = const(0)
_NUMBER = const(1)
_LETTER = const(2)
_SPACE = const(3)


class TokenizerError(ValueError):
    pass


def _u32(b, o):
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)


class BPE:
    """SmolLM2 byte-level BPE over a tokenizer blob: BPE(bytes) in memory, BPE(open(path, 'rb')) lazily."""

    def __init__(self, src, verify=True, word_cap=64, offset=0, length=None):
        """src: the blob as bytes/bytearray/memoryview, or a binary file opened for reading (seek +
        readinto) whose bytes [offset, offset + length) are the blob (e.g. inside an MBF model file);
        length defaults to the rest of the file. verify: check the CRC-32 (reads the whole blob once)."""
        self._base = 0
        if isinstance(src, (bytes, bytearray, memoryview)):
            self._mem = True
            self._b = src
            self._f = None
            size = len(src)
        elif hasattr(src, "readinto") and hasattr(src, "seek"):
            self._mem = False
            self._b = None
            self._f = src
            src.seek(0, 2)
            end = src.tell()
            if offset < 0 or offset > end:
                raise TokenizerError("tokenizer blob offset %d outside the %d-byte file" % (offset, end))
            size = end - offset if length is None else length
            if size < 0 or offset + size > end:
                raise TokenizerError("tokenizer blob truncated: %d bytes at %d, the file ends at %d" % (size, offset, end))
            self._base = offset
        else:
            raise TokenizerError("tokenizer blob must be bytes or a binary file, not %s" % type(src).__name__)
        self._size = size
        h = self._header(size)
        if verify:
            self._check_crc(h)
        self._hash = _u32(h, 8)
        self._tables()
        # Per-word work arrays; grown (rarely) if a piece is longer than word_cap bytes.
        self._grow_word(word_cap)
        self._res = 0
        self._clen = 0
        self._grow = False
        self.dropped = 0
        self.poll = None  # called after each pre-tokenized piece: a board's node polls its inputs there

    def _header(self, size):
        """Check the 48-byte header against the blob's size; set counts and section offsets."""
        if size < _HEADER:
            raise TokenizerError("tokenizer blob truncated: %d bytes, the header alone is %d" % (size, _HEADER))
        h = bytearray(_HEADER)
        self._read(self._base, h)
        if bytes(h[0:4]) != MAGIC:
            raise TokenizerError("not a tokenizer blob (magic %r, expected %r)" % (bytes(h[0:4]), MAGIC))
        if h[4] != VERSION:
            raise TokenizerError("tokenizer blob version %d not supported (this code reads %d)" % (h[4], VERSION))
        w = h[5]
        if w != 2 and w != 3:
            raise TokenizerError("tokenizer blob: id width %d (must be 2 or 3)" % w)
        if h[6] != _PRETOK_SMOLLM:
            raise TokenizerError("tokenizer blob: pre-tokenizer %d not supported" % h[6])
        flags = h[7]
        if flags & ~(_FLAG_RANKS | _FLAG_RESTRICTED):
            raise TokenizerError("tokenizer blob: unknown flags 0x%02x" % flags)
        total = _u32(h, 12)
        if total != size:
            raise TokenizerError("tokenizer blob truncated or padded: header says %d bytes, got %d" % (total, size))
        self.id_bytes = w
        self.vocab_size = V = _u32(h, 16)
        self.n_tokens = N = _u32(h, 20)
        self.n_merges = M = _u32(h, 24)
        self._slen = _u32(h, 28)
        bos = _u32(h, 32)
        eos = _u32(h, 36)
        self.n_specials = S = h[40] | (h[41] << 8)
        self.max_token_len = h[42] | (h[43] << 8)
        self.restricted = bool(flags & _FLAG_RESTRICTED)
        self._ranks = bool(flags & _FLAG_RANKS)
        if V == 0 or V >= (1 << (8 * w)) - 1 or N == 0 or N > V or (N != V and not self.restricted):
            raise TokenizerError("tokenizer blob: bad counts (vocab %d, tokens %d)" % (V, N))
        if self.max_token_len == 0 or self.max_token_len > 255 or _u32(h, 44) != 0:
            raise TokenizerError("tokenizer blob: bad header fields")
        self.bos_id = None if bos == 0xFFFFFFFF else bos
        self.eos_id = None if eos == 0xFFFFFFFF else eos
        if (bos != 0xFFFFFFFF and bos >= V) or (eos != 0xFFFFFFFF and eos >= V):
            raise TokenizerError("tokenizer blob: bos/eos id out of range")
        self._rec = rec = (4 if self._ranks else 3) * w
        # Section offsets follow from the counts; their sum must be the blob's size exactly. Stored as
        # offsets in the file (or in src), so reads need no further arithmetic.
        o = self._o_bytes = self._base + _HEADER
        o += 256 * w
        self._o_spec = o
        o += S * w
        self._o_idmap = o
        if self.restricted:
            o += N * w
        self._o_merges = o
        o += M * rec
        self._o_groups = o
        o += (N + _GROUP - 1) // _GROUP * _GREC
        self._o_str = o
        o += self._slen
        if o - self._base != size:
            raise TokenizerError("tokenizer blob: sections add up to %d bytes, blob has %d" % (o - self._base, size))
        return h

    def _tables(self):
        """The RAM side: byte -> id map, block indexes (first key of each block) of the merges and the
        idmap, lazy-mode read buffers, control tokens. Everything else stays in the blob."""
        w = self.id_bytes
        V = self.vocab_size
        self._missing = missing = (1 << (8 * w)) - 1
        self._tc = tc = "H" if w == 2 else "I"
        buf = bytearray(256 * w)
        self._read(self._o_bytes, buf)
        self._byte_id = array(tc, [0] * 256)
        for i in range(256):
            v = self._get(buf, i * w)
            if v != missing and v >= V:
                raise TokenizerError("tokenizer blob: byte 0x%02x maps to id %d >= vocabulary %d" % (i, v, V))
            self._byte_id[i] = v
        self._mb_n = nb = (self.n_merges + _MBLOCK - 1) // _MBLOCK
        self._mb_l = array(tc, [0] * nb)
        self._mb_r = array(tc, [0] * nb)
        key = bytearray(2 * w)
        for k in range(nb):
            self._read(self._o_merges + k * _MBLOCK * self._rec, key)
            self._mb_l[k] = self._get(key, 0)
            self._mb_r[k] = self._get(key, w)
        self._ib_n = ni = (self.n_tokens + _IBLOCK - 1) // _IBLOCK if self.restricted else 0
        self._ib = array(tc, [0] * ni)
        for k in range(ni):
            self._read(self._o_idmap + k * _IBLOCK * w, key)
            self._ib[k] = self._get(key, 0)
        # Last block read, per table (lazy mode); in memory mode the blob itself is every buffer.
        self._mk = self._ik = self._gk = -1
        self._to = 0
        if self._mem:
            self._mbuf = self._ibuf = self._gbuf = self._tbuf = self._b
        else:
            self._mbuf = bytearray(_MBLOCK * self._rec)
            self._ibuf = bytearray(_IBLOCK * w)
            self._gbuf = bytearray(_GREC)
            self._tbuf = bytearray(self.max_token_len)
        # Control tokens: their text is matched by encode(text, special=True).
        self._spec_ids = array(tc, [0] * self.n_specials)
        self._spec_txt = []
        for i in range(self.n_specials):
            self._read(self._o_spec + i * w, key)
            sid = self._get(key, 0)
            if sid >= V:
                raise TokenizerError("tokenizer blob: control token id %d >= vocabulary %d" % (sid, V))
            self._spec_ids[i] = sid
            self._spec_txt.append(self.decode_bytes([sid]))

    # ---- blob access ------------------------------------------------------------------------------

    def _read(self, off, buf):
        """Fill buf from src at offset off (open path only: may allocate)."""
        if self._mem:
            n = len(buf)
            buf[0:n] = self._b[off:off + n]
        else:
            self._f.seek(off)
            if self._f.readinto(buf) != len(buf):
                raise TokenizerError("tokenizer blob: short read at offset %d" % off)

    def _get(self, b, o):
        if self.id_bytes == 2:
            return b[o] | (b[o + 1] << 8)
        return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16)

    def _check_crc(self, h):
        want = _u32(h, 8)
        crc = binascii.crc32(h[0:8])
        if self._mem:
            crc = binascii.crc32(memoryview(self._b)[12:], crc)
        else:
            chunk = bytearray(512)
            mv = memoryview(chunk)
            self._f.seek(self._base + 12)
            left = self._size - 12
            while left > 0:
                n = self._f.readinto(mv[:512] if left >= 512 else mv[:left])
                if not n:
                    raise TokenizerError("tokenizer blob: short read while checking the CRC")
                crc = binascii.crc32(mv[:n], crc)
                left -= n
        if crc & 0xFFFFFFFF != want:
            raise TokenizerError("tokenizer blob corrupted: CRC-32 %08x, header says %08x" % (crc & 0xFFFFFFFF, want))

    def close(self):
        """Close the blob file of a lazy tokenizer (the caller's file object); no-op in memory mode."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def tokenizer_hash(self):
        """CRC-32 of the blob (verified at open unless verify=False): identifies the tokenizer in the handshake."""
        return self._hash

    # ---- merges: (left id, right id) -> priority, result id ---------------------------------------

    def _pair(self, a, b):
        """Priority of merging tokens a, b (lower merges first) or _INF; the result id goes to self._res."""
        ml = self._mb_l
        mr = self._mb_r
        lo = 0
        hi = self._mb_n - 1
        if hi < 0:
            return _INF
        x = ml[0]
        if x > a or (x == a and mr[0] > b):
            return _INF
        while lo < hi:  # last block whose first key <= (a, b)
            mid = (lo + hi + 1) >> 1
            x = ml[mid]
            if x < a or (x == a and mr[mid] <= b):
                lo = mid
            else:
                hi = mid - 1
        rec = self._rec
        if self._mem:
            base = self._o_merges + lo * _MBLOCK * rec
        else:
            if lo != self._mk:
                self._f.seek(self._o_merges + lo * _MBLOCK * rec)
                self._f.readinto(self._mbuf)
                self._mk = lo
            base = 0
        n = self.n_merges - lo * _MBLOCK
        if n > _MBLOCK:
            n = _MBLOCK
        buf = self._mbuf
        w3 = self.id_bytes == 3
        lo = 0
        hi = n - 1
        while lo <= hi:
            mid = (lo + hi) >> 1
            o = base + mid * rec
            x = buf[o] | (buf[o + 1] << 8)
            if w3:
                x |= buf[o + 2] << 16
                y = buf[o + 3] | (buf[o + 4] << 8) | (buf[o + 5] << 16)
            else:
                y = buf[o + 2] | (buf[o + 3] << 8)
            if x < a or (x == a and y < b):
                lo = mid + 1
            elif x == a and y == b:
                if w3:
                    r = buf[o + 6] | (buf[o + 7] << 8) | (buf[o + 8] << 16)
                    p = buf[o + 9] | (buf[o + 10] << 8) | (buf[o + 11] << 16) if self._ranks else r
                else:
                    r = buf[o + 4] | (buf[o + 5] << 8)
                    p = buf[o + 6] | (buf[o + 7] << 8) if self._ranks else r
                if r >= self.vocab_size:
                    raise TokenizerError("tokenizer blob: merge result %d >= vocabulary" % r)
                self._res = r
                return p
            else:
                hi = mid - 1
        return _INF

    # ---- encoding ---------------------------------------------------------------------------------

    def _grow_word(self, n):
        tc = self._tc
        self._sym = self._rs = self._pr = None  # let the old arrays go first
        self._sym = array(tc, [0] * n)
        self._rs = array(tc, [0] * n)
        self._pr = array("I", [0] * n)
        self._cap = n

    def _cat(self, t, i):
        """(class << 3) | byte length of the UTF-8 character at t[i] (t is valid UTF-8)."""
        c = t[i]
        if c < 0x80:
            return (unicats.ASCII[c] << 3) | 1
        if c < 0xE0:
            return (unicats.cls(((c & 0x1F) << 6) | (t[i + 1] & 0x3F)) << 3) | 2
        if c < 0xF0:
            return (unicats.cls(((c & 0x0F) << 12) | ((t[i + 1] & 0x3F) << 6) | (t[i + 2] & 0x3F)) << 3) | 3
        return (unicats.cls(((c & 0x07) << 18) | ((t[i + 1] & 0x3F) << 12) | ((t[i + 2] & 0x3F) << 6)
                            | (t[i + 3] & 0x3F)) << 3) | 4

    def _run(self, t, j, e, cl):
        """End of the run of class cl that continues at j (stops at e)."""
        asc = unicats.ASCII
        while j < e:
            c = t[j]
            if c < 0x80:
                if asc[c] != cl:
                    return j
                j += 1
            else:
                c = self._cat(t, j)
                if c >> 3 != cl:
                    return j
                j += c & 7
        return j

    def _segment(self, t, i, e, out, k):
        """Pre-tokenize t[i:e] (no control tokens inside) and BPE-encode each piece into out from k."""
        while i < e:
            c = self._cat(t, i)
            cl = c >> 3
            j = i + (c & 7)
            b0 = t[i]
            if cl == _NUMBER:
                pass  # one piece per number character
            elif b0 == 0x27 and j < e and self._contraction(t, j, e):
                j += self._clen
            elif cl == _LETTER or cl == _OTHER:
                j = self._run(t, j, e, cl)
            else:  # white space
                c2 = self._cat(t, j) if j < e else 0
                n2 = c2 >> 3
                if b0 == 0x20 and j < e and (n2 == _LETTER or n2 == _OTHER):
                    j = self._run(t, j + (c2 & 7), e, n2)  # " ?\p{L}+" and " ?[^\s\p{L}\p{N}]+"
                else:
                    last = i
                    while j < e:
                        c2 = self._cat(t, j)
                        if c2 >> 3 != _SPACE:
                            break
                        last = j
                        j += c2 & 7
                    # \s+(?!\S): a run followed by a letter or other character leaves its last white
                    # space to that piece; a number ends the Digits stretch, so it does not count.
                    if j < e and (self._cat(t, j) >> 3) != _NUMBER and last > i:
                        j = last
            k = self._word(t, i, j, out, k)
            i = j
            if self.poll is not None:  # a piece's merges read the vocabulary from flash: seconds a prompt
                self.poll()
        return k

    def _contraction(self, t, j, e):
        """After an apostrophe at j-1: 's 't 'm 'd (1 more byte) or 're 've 'll (2); length in self._clen."""
        x = t[j]
        if x == 0x73 or x == 0x74 or x == 0x6D or x == 0x64:  # s t m d
            self._clen = 1
            return True
        if j + 1 < e:
            y = t[j + 1]
            if (x == 0x72 and y == 0x65) or (x == 0x76 and y == 0x65) or (x == 0x6C and y == 0x6C):  # re ve ll
                self._clen = 2
                return True
        return False

    def _emit(self, out, k, v):
        if k < len(out):
            out[k] = v
        elif self._grow:
            out.append(v)
        else:
            raise TokenizerError("encode_into: output holds %d ids, the text needs more" % len(out))
        return k + 1

    def _word(self, t, i, e, out, k):
        """BPE-merge the bytes t[i:e] (one piece) and append the ids to out at k."""
        if e - i > self._cap:
            self._grow_word(max(e - i, 2 * self._cap))
        sym = self._sym
        pr = self._pr
        rs = self._rs
        bid = self._byte_id
        miss = self._missing
        n = 0
        for p in range(i, e):
            v = bid[t[p]]
            if v == miss:
                self.dropped += 1
            else:
                sym[n] = v
                n += 1
        for q in range(n - 1):
            pr[q] = self._pair(sym[q], sym[q + 1])
            rs[q] = self._res
        while n > 1:
            best = _INF
            bi = -1
            for q in range(n - 1):
                if pr[q] < best:
                    best = pr[q]
                    bi = q
            if bi < 0:
                break
            sym[bi] = rs[bi]
            for q in range(bi + 1, n - 1):
                sym[q] = sym[q + 1]
            for q in range(bi + 1, n - 2):
                pr[q] = pr[q + 1]
                rs[q] = rs[q + 1]
            n -= 1
            if bi > 0:
                pr[bi - 1] = self._pair(sym[bi - 1], sym[bi])
                rs[bi - 1] = self._res
            if bi < n - 1:
                pr[bi] = self._pair(sym[bi], sym[bi + 1])
                rs[bi] = self._res
        for q in range(n):
            k = self._emit(out, k, sym[q])
        return k

    def _check_utf8(self, t, n):
        i = 0
        while i < n:
            c = t[i]
            if c < 0x80:
                i += 1
                continue
            if 0xC2 <= c < 0xE0:
                m = 1
            elif 0xE0 <= c < 0xF0:
                m = 2
            elif 0xF0 <= c < 0xF5:
                m = 3
            else:
                raise TokenizerError("encode: invalid UTF-8 byte 0x%02x at %d" % (c, i))
            for q in range(1, m + 1):
                if i + q >= n or t[i + q] & 0xC0 != 0x80:
                    raise TokenizerError("encode: invalid UTF-8 sequence at %d" % i)
            if m == 2 and ((c == 0xE0 and t[i + 1] < 0xA0) or (c == 0xED and t[i + 1] >= 0xA0)):
                raise TokenizerError("encode: overlong or surrogate UTF-8 sequence at %d" % i)
            if m == 3 and ((c == 0xF0 and t[i + 1] < 0x90) or (c == 0xF4 and t[i + 1] >= 0x90)):
                raise TokenizerError("encode: out-of-range UTF-8 sequence at %d" % i)
            i += m + 1

    def encode_into(self, text, out, special=False):
        """Encode text (str, or bytes/bytearray of UTF-8) into out (array or list); returns the id count.

        With bytes input and an array big enough, nothing is allocated on MicroPython."""
        if self._f is None and not self._mem:
            raise TokenizerError("tokenizer is closed")
        if isinstance(text, str):
            try:
                t = text.encode("utf-8")
            except UnicodeError:
                raise TokenizerError("encode: text is not encodable as UTF-8 (lone surrogate?)")
        elif isinstance(text, bytes) or isinstance(text, bytearray):  # (a tuple here would allocate)
            t = text
            self._check_utf8(t, len(t))
        else:
            raise TokenizerError("encode: text must be str (or UTF-8 bytes), not %s" % type(text).__name__)
        self.dropped = 0
        n = len(t)
        if not special or not self._spec_txt:
            return self._segment(t, 0, n, out, 0)
        k = 0
        i = 0
        while i < n:
            # Leftmost control token; the longest one where several start at the same byte.
            best = n
            bs = -1
            for s in range(len(self._spec_txt)):
                p = t.find(self._spec_txt[s], i)
                if p >= 0 and (p < best or (p == best and bs >= 0 and
                                            len(self._spec_txt[s]) > len(self._spec_txt[bs]))):
                    best = p
                    bs = s
            k = self._segment(t, i, best, out, k)
            if bs < 0:
                break
            k = self._emit(out, k, self._spec_ids[bs])
            i = best + len(self._spec_txt[bs])
        return k

    def encode(self, text, special=False):
        """Token ids of text (a str). special=True: the text of control tokens (e.g. <|im_end|>) becomes
        that token, as HF does by default; special=False (default) treats it as plain text, so untrusted
        log text cannot inject control tokens."""
        if not isinstance(text, str):
            raise TokenizerError("encode: text must be str, not %s" % type(text).__name__)
        out = []
        self._grow = True
        try:
            self.encode_into(text, out, special)
        finally:
            self._grow = False
        return out

    # ---- decoding ---------------------------------------------------------------------------------

    def _local(self, tid):
        """Index of target id tid in this blob's token tables."""
        if not isinstance(tid, int) or isinstance(tid, bool):
            raise TokenizerError("token id must be an int, not %s" % type(tid).__name__)
        if tid < 0 or tid >= self.vocab_size:
            raise TokenizerError("token id %d out of range (vocabulary %d)" % (tid, self.vocab_size))
        if not self.restricted:
            return tid
        ib = self._ib
        lo = 0
        hi = self._ib_n - 1
        if ib[0] > tid:
            raise TokenizerError("token id %d is not in this restricted vocabulary" % tid)
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if ib[mid] <= tid:
                lo = mid
            else:
                hi = mid - 1
        w = self.id_bytes
        if self._mem:
            base = self._o_idmap + lo * _IBLOCK * w
        else:
            if lo != self._ik:
                self._f.seek(self._o_idmap + lo * _IBLOCK * w)
                self._f.readinto(self._ibuf)
                self._ik = lo
            base = 0
        n = self.n_tokens - lo * _IBLOCK
        if n > _IBLOCK:
            n = _IBLOCK
        buf = self._ibuf
        a = 0
        b = n - 1
        while a <= b:
            mid = (a + b) >> 1
            o = base + mid * w
            x = buf[o] | (buf[o + 1] << 8)
            if w == 3:
                x |= buf[o + 2] << 16
            if x < tid:
                a = mid + 1
            elif x > tid:
                b = mid - 1
            else:
                return lo * _IBLOCK + mid
        raise TokenizerError("token id %d is not in this restricted vocabulary" % tid)

    def has_token(self, tid):
        """True if tid is a token of this blob (always a valid target id when True)."""
        try:
            self._local(tid)
        except TokenizerError:
            return False
        return True

    def _locate(self, tid):
        """Make self._tbuf[self._to : self._to + returned length] hold the bytes of token tid."""
        if self._f is None and not self._mem:
            raise TokenizerError("tokenizer is closed")
        j = self._local(tid)
        g = j >> 5
        r = j & 31
        if self._mem:
            gb = self._b
            go = self._o_groups + g * _GREC
        else:
            gb = self._gbuf
            go = 0
            if g != self._gk:
                self._f.seek(self._o_groups + g * _GREC)
                self._f.readinto(gb)
                self._gk = g
        off = _u32(gb, go)
        for q in range(r):
            off += gb[go + 4 + q]
        n = gb[go + 4 + r]
        if n == 0 or n > self.max_token_len or off + n > self._slen:
            raise TokenizerError("tokenizer blob: token %d lies outside the string table" % tid)
        if self._mem:
            self._to = self._o_str + off
        else:
            self._f.seek(self._o_str + off)
            self._f.readinto(self._tbuf)
            self._to = 0
        return n

    def token_bytes(self, tid, buf, pos=0):
        """Copy the bytes of token tid into buf at pos; returns the new end. Allocates nothing."""
        n = self._locate(tid)
        if pos < 0 or pos + n > len(buf):
            raise TokenizerError("token_bytes: token %d needs %d bytes at %d, buffer holds %d" % (tid, n, pos, len(buf)))
        src = self._tbuf
        o = self._to
        for q in range(n):
            buf[pos + q] = src[o + q]
        return pos + n

    def decode_bytes(self, ids):
        """The bytes of a sequence of token ids."""
        out = bytearray()
        tmp = bytearray(self.max_token_len)
        try:
            seq = iter(ids)
        except TypeError:
            raise TokenizerError("decode: ids must be a sequence of ints, not %s" % type(ids).__name__)
        for tid in seq:
            n = self.token_bytes(tid, tmp, 0)
            out.extend(memoryview(tmp)[:n])
        return bytes(out)

    def decode(self, ids):
        """The text of a sequence of token ids; invalid UTF-8 (a character cut between tokens) becomes U+FFFD."""
        return utf8_lossy(self.decode_bytes(ids))

    def special_id(self, text):
        """Id of the control token whose text is `text` (e.g. "<|im_end|>"), or None."""
        b = text.encode("utf-8") if isinstance(text, str) else text
        for s in range(len(self._spec_txt)):
            if self._spec_txt[s] == b:
                return self._spec_ids[s]
        return None


def utf8_lossy(b):
    """Decode UTF-8, replacing each maximal invalid subsequence by U+FFFD (as CPython's errors='replace').

    Validated here: MicroPython's str() accepts encoded surrogates, CPython's does not."""
    out = None
    i = 0
    n = len(b)
    start = 0
    while i < n:
        c = b[i]
        if c < 0x80:
            i += 1
            continue
        m = 0
        lo = hi = 0x80
        if 0xC2 <= c < 0xE0:
            m = 1
            hi = 0xBF
        elif 0xE0 <= c < 0xF0:
            m = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif 0xF0 <= c < 0xF5:
            m = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        q = 1
        while q <= m and i + q < n:
            x = b[i + q]
            if not ((lo <= x <= hi) if q == 1 else (0x80 <= x <= 0xBF)):
                break
            q += 1
        if m and q == m + 1:
            i += q
            continue
        if out is None:
            out = []
        out.append(str(b[start:i], "utf-8"))
        out.append("\ufffd")
        i += q
        start = i
    if out is None:
        return str(b, "utf-8")
    out.append(str(b[start:n], "utf-8"))
    return "".join(out)


def load(path, lazy=True, verify=True):
    """Open a blob file: lazily (tables stay in flash; the file stays open) or read whole into memory."""
    if lazy:
        return BPE(open(path, "rb"), verify)
    with open(path, "rb") as f:
        return BPE(f.read(), verify)
