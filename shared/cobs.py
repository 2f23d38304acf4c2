# cobs.py: COBS byte stuffing: encode into a preallocated buffer, and a capped streaming decoder.
"""Consistent Overhead Byte Stuffing (Cheshire and Baker), canonical form: the encoded bytes hold no
0x00, so 0x00 delimits frames on the wire. Each block is a code byte c (1..255) followed by c-1 data
bytes; a block with c < 255 stands for its data plus one 0x00, except the last block of a frame,
whose zero is dropped. A block of 254 nonzero bytes (c = 255) implies no zero, and when such a
block ends the input no empty block follows (so b"\\x01" * 254 encodes to FF 01..01, 255 bytes).
Encoded size is at most n + n // 254 + 1 (max_encoded).

Decoder is the streaming half: feed it any chunk of wire bytes; it stops after each complete frame
(done = True, the frame in buf[0:n]) and returns where it stopped, so the caller handles the frame
and feeds the rest of the chunk. It never allocates: the decoded bytes go into one preallocated
buffer of `cap` bytes. A frame that would decode to more than cap bytes is abandoned as soon as it
passes cap (counted in oversize) and the rest of it is skipped up to the next 0x00. Any 0x00 ends
the current frame: garbage between frames is one bad frame and decoding is in step again at the
next delimiter. Two 0x00 in a row delimit an empty frame, which is ignored (not an error).
"""

from shared.compat import const

_FULL = const(0xFF)  # code of a full 254-byte block (no implied zero)


class CobsError(ValueError):
    """Bad COBS input to the one-shot helpers (decode) or a bad argument."""


def max_encoded(n):
    """Largest COBS encoding of n bytes (delimiters not included)."""
    return n + n // 254 + 1


def encode_into(src, start, end, dst, d):
    """COBS-encode src[start:end] into dst from index d (no delimiters); return the index after it.

    dst needs max_encoded(end - start) bytes from d. Allocates nothing."""
    code_at = d
    d += 1
    code = 1
    for i in range(start, end):
        if code == _FULL:  # previous block is full and more input follows: close it, no zero
            dst[code_at] = _FULL
            code_at = d
            d += 1
            code = 1
        b = src[i]
        if b == 0:
            dst[code_at] = code
            code_at = d
            d += 1
            code = 1
        else:
            dst[d] = b
            d += 1
            code += 1
    dst[code_at] = code
    return d


def encode(data):
    """COBS encoding of data as bytes (allocates; for tools and tests)."""
    out = bytearray(max_encoded(len(data)))
    n = encode_into(data, 0, len(data), out, 0)
    return bytes(out[:n])


def decode(data):
    """Decode one COBS-encoded frame without delimiters (allocates; for tools and tests)."""
    dec = Decoder(max(len(data), 1))
    if 0 in bytes(data):
        raise CobsError("COBS data contains 0x00")
    if not data:
        raise CobsError("empty COBS frame")
    dec.feed(data, 0, len(data))
    dec.feed(b"\x00", 0, 1)
    if not dec.done:
        raise CobsError("malformed COBS frame (a block runs past the end)")
    return bytes(dec.buf[:dec.n])


class Decoder:
    """Streaming COBS decoder into one preallocated buffer of cap bytes.

    feed(data, start, end) consumes data[start:end] until a frame completes (done = True, frame in
    buf[0:n], enc = its encoded length without delimiters) or the input ends; returns the index
    after the last byte consumed. Counters: frames, err_cobs (a block cut short by a 0x00),
    oversize (frames abandoned at cap)."""

    def __init__(self, cap):
        if not isinstance(cap, int) or cap < 1 or cap > 0x10000:
            raise CobsError("cap must be an int in 1..65536, got %r" % (cap,))
        self.cap = cap
        self.buf = bytearray(cap)
        self.n = 0
        self.enc = 0
        self.done = False
        self.frames = 0
        self.err_cobs = 0
        self.oversize = 0
        self._pos = 0  # decoded bytes of the current frame
        self._left = 0  # data bytes still due in the current block (0: next byte is a code byte)
        self._zero = False  # a 0x00 is owed before the next block's data
        self._enc = 0  # encoded bytes of the current frame (kept at 1 while skipping)
        self._skip = False  # dropping an over-long frame up to the next delimiter

    def reset(self):
        """Forget any partial frame (the next byte starts afresh)."""
        self._pos = 0
        self._left = 0
        self._zero = False
        self._enc = 0
        self._skip = False

    def feed(self, data, i, end):
        self.done = False
        buf = self.buf
        cap = self.cap
        pos = self._pos
        left = self._left
        zero = self._zero
        enc = self._enc
        skip = self._skip
        while i < end:
            b = data[i]
            i += 1
            if b == 0:
                if enc and not skip:
                    if left:
                        self.err_cobs += 1
                    else:
                        self.n = pos
                        self.enc = enc
                        self.done = True
                        self.frames += 1
                        self._pos = 0
                        self._left = 0
                        self._zero = False
                        self._enc = 0
                        self._skip = False
                        return i
                pos = 0
                left = 0
                zero = False
                enc = 0
                skip = False
                continue
            if skip:
                continue
            enc += 1
            if left:
                if pos == cap:
                    skip = True
                    self.oversize += 1
                    continue
                buf[pos] = b
                pos += 1
                left -= 1
            else:
                if zero:
                    if pos == cap:
                        skip = True
                        self.oversize += 1
                        continue
                    buf[pos] = 0
                    pos += 1
                left = b - 1
                zero = b != _FULL
        self._pos = pos
        self._left = left
        self._zero = zero
        self._enc = enc
        self._skip = skip
        return i
