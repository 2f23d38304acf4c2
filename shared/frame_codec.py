# frame_codec.py: frames to and from wire bytes for the link: COBS + CRC-32 codec, HMAC signatures, the HELLO.
"""The link's half of docs/PROTOCOL.md over shared/frame.py's layouts:

    Encoder / Decoder          a frame into wire bytes / wire bytes into checked frames, in preallocated buffers
    Signer, counter_*          the optional HMAC-SHA256 trailer and its 48-bit replay counter
    pack_hello(**fields)       the HELLO body a Link announces itself with (once per link)

Encoder.encode/seal/wrap and Decoder.feed allocate nothing on MicroPython: they build, decode, check
and parse frames in preallocated buffers and int attributes. The CRC comes from crc32.new(): binascii
where 32-bit ints are small ints, else the table-free two-halves CRC that writes and compares the 4
CRC bytes one by one, so no CRC value ever becomes a heap long on RP2040 or ESP32. Signer.sign/verify
allocate nothing either (shared/sha256.py); pack_hello allocates. shared/frame.py has no codec so that
the drafter, which writes bodies but no frames, does not carry one on a board's heap.
"""
from shared import cobs, crc32
from shared.frame import (
    BOARD_ID_LEN,
    CRC,
    FrameError,
    HDR,
    HELLO,
    HELLO_SIZE,
    HELLO_SIZE_11,
    HE_BOARD,
    HE_DRAFTK,
    HE_FLAGS,
    HE_KVWIN,
    HE_MAXFRAME,
    HE_MODEL,
    HE_QBITS,
    HE_ROLE,
    HE_RXBUF,
    HE_SINK,
    HE_STAGED,
    HE_TOK,
    HE_TOPK,
    HE_TXBASE,
    HE_UID,
    HE_WDAY,
    HE_WINDOW,
    HE_WMS,
    H_ACK,
    H_LEN,
    H_LIMIT,
    H_SEQ,
    H_TXOFF,
    H_TYPE,
    H_VER,
    MAX_FRAME,
    MAX_FRAME_LIMIT,
    MINOR,
    MIN_FRAME,
    Q_BITS,
    ROLE_NODE,
    SIG,
    SIGNED,
    SIG_COUNTER,
    SIG_TAG,
    UID_LEN,
    VERSION_MAJOR,
    WALL_NONE,
    check_body,
    put_header,
)


def max_wire(raw):
    """Most wire bytes (both delimiters included) a decoded frame of raw bytes can take."""
    return cobs.max_encoded(raw) + 2


class Encoder:
    """Builds frames in preallocated buffers: raw (decoded frame) and wire (COBS + delimiters).

    encode(...) builds a whole frame from a header and a body and returns its wire length (the wire
    bytes are wire[0:n]); seal() and wrap() do the two halves for a frame already laid out in some
    other buffer (the link's retransmit window). None of them allocates."""

    def __init__(self, max_frame=MAX_FRAME, raw_bytes=None, crc=None):
        if not isinstance(max_frame, int) or max_frame < MIN_FRAME or max_frame > MAX_FRAME_LIMIT:
            raise FrameError("max_frame must be an int in %d..%d, got %r" % (MIN_FRAME, MAX_FRAME_LIMIT, max_frame))
        self.max_frame = max_frame
        self.raw = bytearray(raw_bytes or max_frame)
        self.wire = bytearray(max_wire(max_frame))
        self.crc = crc if crc is not None else crc32.new()

    def seal(self, buf, off, blen):
        """CRC the frame at buf[off:] (header says its type) and write the CRC; return its raw size."""
        m = HDR + blen + (SIG if buf[off + H_TYPE] & SIGNED else 0)
        c = self.crc
        c.reset()
        c.update(buf, off, off + m)
        c.put(buf, off + m)
        return m + CRC

    def wrap(self, src, off, n):
        """COBS-encode src[off:off+n] between two 0x00 into wire; return the wire length."""
        if n > self.max_frame:
            raise FrameError("frame of %d bytes exceeds max_frame %d" % (n, self.max_frame))
        w = self.wire
        w[0] = 0
        e = cobs.encode_into(src, off, off + n, w, 1)
        w[e] = 0
        return e + 1

    def encode(self, ftype, seq, ack, epoch, peer, txoff, limit, body, boff, blen):
        """Header + body[boff:boff+blen] + CRC into raw, then into wire; returns the wire length.

        A signed type (bit 7) needs its trailer written by Signer.sign first: use put_header, copy
        the body, sign, then seal and wrap."""
        raw = self.raw
        if ftype & SIGNED:
            raise FrameError("encode() builds unsigned frames; sign with put_header/Signer/seal/wrap")
        if HDR + blen + CRC > len(raw):
            raise FrameError("body of %d bytes does not fit a %d-byte frame buffer" % (blen, len(raw)))
        put_header(raw, 0, ftype, blen, seq, ack, epoch, peer, txoff, limit)
        if boff == 0 and blen == len(body):
            raw[HDR:HDR + blen] = body
        else:
            for i in range(blen):
                raw[HDR + i] = body[boff + i]
        n = self.seal(raw, 0, blen)
        return self.wrap(raw, 0, n)


class Decoder:
    """Wire bytes in, checked frames out, in one preallocated buffer.

    feed(data, start, end) consumes bytes until a valid frame is ready (ready = True) or the input
    ends, and returns the index after the last byte consumed; call it again with the rest. While
    ready, the frame is buf[0:n]: attributes ftype (whole type byte), blen, seq, ack, txoff, limit,
    wire (its wire size: encoded bytes + 2 delimiters); epochs are compared in place at H_EPOCH and
    H_PEER. Rejected frames only bump counters: err_short, err_crc, err_version (last_version keeps
    the byte), err_length, and in the COBS layer cobs.err_cobs and cobs.oversize."""

    def __init__(self, max_frame=MAX_FRAME, crc=None):
        if not isinstance(max_frame, int) or max_frame < MIN_FRAME or max_frame > MAX_FRAME_LIMIT:
            raise FrameError("max_frame must be an int in %d..%d, got %r" % (MIN_FRAME, MAX_FRAME_LIMIT, max_frame))
        self.cobs = cobs.Decoder(max_frame)
        self.buf = self.cobs.buf
        self.crc = crc if crc is not None else crc32.new()
        self._one = bytearray(1)
        self.ready = False
        self.n = 0
        self.wire = 0
        self.ftype = 0
        self.blen = 0
        self.seq = 0
        self.ack = 0
        self.txoff = 0
        self.limit = 0
        self.ok = 0
        self.err_short = 0
        self.err_crc = 0
        self.err_version = 0
        self.err_length = 0
        self.last_version = -1

    def errors(self):
        """Frames rejected so far, for every reason."""
        c = self.cobs
        return self.err_short + self.err_crc + self.err_version + self.err_length + c.err_cobs + c.oversize

    def feed(self, data, start, end):
        self.ready = False
        c = self.cobs
        while start < end:
            start = c.feed(data, start, end)
            if c.done and self._check():
                self.ready = True
                return start
        return start

    def feed_byte(self, b):
        """Feed one byte; True when it completed a valid frame."""
        self._one[0] = b
        self.feed(self._one, 0, 1)
        return self.ready

    def _check(self):
        buf = self.buf
        n = self.cobs.n
        if n < 4 + CRC:  # too short for the frozen bytes 0..3 and a CRC
            self.err_short += 1
            return False
        crc = self.crc
        crc.reset()
        crc.update(buf, 0, n - CRC)
        if not crc.matches(buf, n - CRC):
            self.err_crc += 1
            return False
        v = buf[H_VER]
        if (v >> 4) != VERSION_MAJOR:
            self.err_version += 1
            self.last_version = v
            return False
        ftype = buf[H_TYPE]
        blen = buf[H_LEN] | (buf[H_LEN + 1] << 8)
        if n < HDR + CRC or n != HDR + blen + (SIG if ftype & SIGNED else 0) + CRC:
            self.err_length += 1
            return False
        self.n = n
        self.wire = self.cobs.enc + 2
        self.ftype = ftype
        self.blen = blen
        self.seq = buf[H_SEQ] | (buf[H_SEQ + 1] << 8)
        self.ack = buf[H_ACK] | (buf[H_ACK + 1] << 8)
        self.txoff = buf[H_TXOFF] | (buf[H_TXOFF + 1] << 8)
        self.limit = buf[H_LIMIT] | (buf[H_LIMIT + 1] << 8)
        self.ok += 1
        return True



# ---- the link's HELLO (allocates: once per link) ----

_HELLO_FIELDS = (("role", HE_ROLE, 1), ("flags", HE_FLAGS, 1), ("rxbuf", HE_RXBUF, 2), ("max_frame", HE_MAXFRAME, 2),
                 ("tx_base", HE_TXBASE, 2), ("window", HE_WINDOW, 1), ("draft_k", HE_DRAFTK, 1),
                 ("topk", HE_TOPK, 1), ("q_bits", HE_QBITS, 1), ("kv_sink", HE_SINK, 2),
                 ("kv_window", HE_KVWIN, 2), ("kv_staged", HE_STAGED, 2), ("model_hash", HE_MODEL, 4),
                 ("tokenizer_hash", HE_TOK, 4), ("wall_day", HE_WDAY, 2), ("wall_ms", HE_WMS, 4))


def pack_hello(role=ROLE_NODE, flags=0, rxbuf=1024, max_frame=MAX_FRAME, tx_base=0, window=8, draft_k=0, topk=0,
               q_bits=None, kv_sink=0, kv_window=0, kv_staged=0, model_hash=0, tokenizer_hash=0, board_id=b"",
               uid=b"", wall_day=WALL_NONE, wall_ms=0, minor=MINOR):
    """A HELLO body (docs/PROTOCOL.md 3.1) as a bytearray, checked; q_bits defaults to 16 if drafting, the
    wall time to not known. minor=0: the 42-byte 1.0 HELLO (no uid, no wall time). Allocates (once per
    link); FrameError names the first bad field."""
    n = HELLO_SIZE_11 if minor else HELLO_SIZE
    b = bytearray(n)
    vals = (role, flags, rxbuf, max_frame, tx_base, window, draft_k, topk,
            (Q_BITS if draft_k else 0) if q_bits is None else q_bits, kv_sink, kv_window, kv_staged, model_hash,
            tokenizer_hash, wall_day, wall_ms)
    for i in range(len(vals)):
        name, off, size = _HELLO_FIELDS[i]
        v = vals[i]
        if off >= n:
            if v != (WALL_NONE if name == "wall_day" else 0):
                raise FrameError("a 1.0 HELLO has no %s" % name)
            continue
        if type(v) is not int or v < 0 or v >> (8 * size):
            raise FrameError("HELLO %s must be an int in 0..%d, got %r" % (name, (1 << (8 * size)) - 1, v))
        for j in range(size):
            b[off + j] = (v >> (8 * j)) & 0xFF
    for name, off, most, v in (("board_id", HE_BOARD, BOARD_ID_LEN, board_id), ("uid", HE_UID, UID_LEN, uid)):
        v = v.encode() if isinstance(v, str) else bytes(v)
        if len(v) > most or (v and off >= n):
            raise FrameError("HELLO %s is %d bytes; at most %d" % (name, len(v), most if off < n else 0))
        b[off:off + len(v)] = v
    if check_body(HELLO, b, 0, n, minor):
        raise FrameError("HELLO body: field out of range")
    return b


# ---- optional authentication: HMAC-SHA256, truncated to 8 bytes, with a 48-bit counter ----

def counter_bytes(v):
    """A 48-bit counter as 6 little-endian bytes."""
    if not isinstance(v, int) or not 0 <= v < (1 << 48):
        raise FrameError("counter must be an int in 0..2**48-1, got %r" % (v,))
    return bytes((v >> (8 * i)) & 0xFF for i in range(SIG_COUNTER))


def counter_newer(a, aoff, b, boff):
    """True if the 48-bit LE counter at a[aoff] is greater than the one at b[boff] (no big ints)."""
    for i in range(SIG_COUNTER - 1, -1, -1):
        x = a[aoff + i]
        y = b[boff + i]
        if x != y:
            return x > y
    return False


def counter_inc(c):
    """Add one to a 6-byte LE counter in place; False if it wrapped (the key must be changed)."""
    for i in range(SIG_COUNTER):
        v = (c[i] + 1) & 0xFF
        c[i] = v
        if v:
            return True
    return False


class Signer:
    """HMAC-SHA256 (RFC 2104) over header + body + counter, on shared/sha256.py's Hmac.

    The trailer after the body is the 6-byte counter, then the first 8 bytes of the HMAC. The key's pad
    blocks are hashed once here; sign and verify then allocate nothing on MicroPython (the frame is read in
    place, the tag written straight into it), so every frame of a node can be signed."""

    def __init__(self, key):
        if not isinstance(key, (bytes, bytearray)) or len(key) < 16:
            raise FrameError("an HMAC key must be at least 16 bytes")
        from shared.sha256 import Hmac  # here: an unsigned node never carries SHA-256's code on its heap

        self._hmac = Hmac(key)

    def mac(self, data):
        """The full 32-byte HMAC-SHA256 of data (allocates the result)."""
        out = bytearray(32)
        self._hmac.mac_into(data, 0, len(data), out, 0)
        return bytes(out)

    def sign(self, buf, off, blen, counter):
        """Write counter (6 bytes) and the tag after the body of the frame at buf[off]."""
        p = off + HDR + blen
        for i in range(SIG_COUNTER):
            buf[p + i] = counter[i]
        self._hmac.mac_into(buf, off, HDR + blen + SIG_COUNTER, buf, p + SIG_COUNTER, SIG_TAG)

    def verify(self, buf, off, blen):
        """True if the frame's tag matches (compared without early exit)."""
        n = HDR + blen + SIG_COUNTER
        return self._hmac.verify(buf, off, n, buf, off + n, SIG_TAG)
