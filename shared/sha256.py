# sha256.py: SHA-256 and HMAC-SHA256 in preallocated buffers, so signing a frame allocates nothing.
"""SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the link's signatures (shared/frame_codec.py
Signer), with the same results on every interpreter:

    Hmac(key, kind=None)              the key's inner and outer pad blocks hashed once, at construction
    .mac_into(buf, off, n, out, ooff, nout=32)   the MAC of buf[off:off+n]: its first nout bytes at out[ooff:]
    .verify(buf, off, n, tag, toff, tlen)        the first tlen bytes compared, without early exit
    new(kind=None).digest_into(mid, buf, off, n, out, ooff, nout=32)   one hash, from the IV or a midstate
    digest(data, kind=None)           a bytes digest (allocates: for keys and tests)

A MAC then costs the message's blocks plus one outer block. Three engines with one interface:

- viper (shared/sha256_viper.py): the compression in native code, the state and schedule in buffers
  read through ptr32. What MicroPython boards run.
- halves (shared/sha256_halves.py, loaded only where it runs): plain bytecode, every 32-bit word held as
  two 16-bit halves, so no value reaches 2**20 and nothing allocates where small ints have 31 bits
  (RP2040, ESP32). Where no native code runs and no hashlib is there; much slower than viper.
- hashlib: CPython's, under the same interface (a midstate is a hashlib object, copied per hash). It
  allocates, which costs nothing on the gateway.

new() picks viper on MicroPython where native code runs, else halves, and hashlib on CPython.
Allocation-free (MicroPython, after construction): digest_into, mac_into and verify, for any buffer
that supports indexing (bytes, bytearray, memoryview), messages below 2**27 bytes.
"""
import sys
from array import array

_IMPL = sys.implementation.name
_viper = None
if _IMPL == "micropython":  # CircuitPython's boards run no native code: they get the halves
    try:
        from shared import sha256_viper as _viper
    except (ImportError, SyntaxError, ValueError):  # no native emitter in this firmware, or a .mpy of another arch
        _viper = None

# The initial hash value and the 64 round constants (FIPS 180-4 4.2.2, 5.3.3) as 32-bit words stored
# little-endian, the order ptr32 reads them in on the boards (the viper engine copies the constants into
# an aligned buffer of its own): bytes, so a frozen module holds them in flash and nothing turns them
# into (heap) ints.
IV_LE = (
    b"\x67\xe6\x09\x6a\x85\xae\x67\xbb\x72\xf3\x6e\x3c\x3a\xf5\x4f\xa5"
    b"\x7f\x52\x0e\x51\x8c\x68\x05\x9b\xab\xd9\x83\x1f\x19\xcd\xe0\x5b"
)
K_LE = (
    b"\x98\x2f\x8a\x42\x91\x44\x37\x71\xcf\xfb\xc0\xb5\xa5\xdb\xb5\xe9"
    b"\x5b\xc2\x56\x39\xf1\x11\xf1\x59\xa4\x82\x3f\x92\xd5\x5e\x1c\xab"
    b"\x98\xaa\x07\xd8\x01\x5b\x83\x12\xbe\x85\x31\x24\xc3\x7d\x0c\x55"
    b"\x74\x5d\xbe\x72\xfe\xb1\xde\x80\xa7\x06\xdc\x9b\x74\xf1\x9b\xc1"
    b"\xc1\x69\x9b\xe4\x86\x47\xbe\xef\xc6\x9d\xc1\x0f\xcc\xa1\x0c\x24"
    b"\x6f\x2c\xe9\x2d\xaa\x84\x74\x4a\xdc\xa9\xb0\x5c\xda\x88\xf9\x76"
    b"\x52\x51\x3e\x98\x6d\xc6\x31\xa8\xc8\x27\x03\xb0\xc7\x7f\x59\xbf"
    b"\xf3\x0b\xe0\xc6\x47\x91\xa7\xd5\x51\x63\xca\x06\x67\x29\x29\x14"
    b"\x85\x0a\xb7\x27\x38\x21\x1b\x2e\xfc\x6d\x2c\x4d\x13\x0d\x38\x53"
    b"\x54\x73\x0a\x65\xbb\x0a\x6a\x76\x2e\xc9\xc2\x81\x85\x2c\x72\x92"
    b"\xa1\xe8\xbf\xa2\x4b\x66\x1a\xa8\x70\x8b\x4b\xc2\xa3\x51\x6c\xc7"
    b"\x19\xe8\x92\xd1\x24\x06\x99\xd6\x85\x35\x0e\xf4\x70\xa0\x6a\x10"
    b"\x16\xc1\xa4\x19\x08\x6c\x37\x1e\x4c\x77\x48\x27\xb5\xbc\xb0\x34"
    b"\xb3\x0c\x1c\x39\x4a\xaa\xd8\x4e\x4f\xca\x9c\x5b\xf3\x6f\x2e\x68"
    b"\xee\x82\x8f\x74\x6f\x63\xa5\x78\x14\x78\xc8\x84\x08\x02\xc7\x8c"
    b"\xfa\xff\xbe\x90\xeb\x6c\x50\xa4\xf7\xa3\xf9\xbe\xf2\x78\x71\xc6"
)


def load(st, src):
    """st[0:32] = src[0:32] (a midstate or the IV into the state)."""
    for i in range(32):
        st[i] = src[i]


def tail(blk, buf, off, r):
    """blk[0:r] = buf[off:off+r], then zeros to the end of the 64-byte block."""
    for i in range(r):
        blk[i] = buf[off + i]
    for i in range(r, 64):
        blk[i] = 0


def put(out, ooff, st, nout):
    """The first nout bytes of the digest (the state's 8 little-endian words, big-endian) at out[ooff:]."""
    for i in range(nout):
        out[ooff + i] = st[(i & 0x1C) + 3 - (i & 3)]


def differ(a, b, boff, n):
    """Nonzero if a[0:n] and b[boff:boff+n] differ; every byte is looked at, whatever the first says."""
    d = 0
    for i in range(n):
        d |= a[i] ^ b[boff + i]
    return d


class Sha256:
    """One SHA-256 at a time in preallocated buffers, on the viper or the halves primitives."""

    def __init__(self, kind="halves"):
        if kind == "halves":
            from shared.sha256_halves import compress_halves  # here: a viper board never loads it

            self._compress = compress_halves
            self._load = load
            self._tail = tail
            self._put = put
            self.differ = differ
            self._w = array("H", bytes(512))  # the schedule, then the round constants in halves
            for t in range(64):
                p = t << 2
                self._w[128 + 2 * t] = K_LE[p + 2] | (K_LE[p + 3] << 8)
                self._w[129 + 2 * t] = K_LE[p] | (K_LE[p + 1] << 8)
        elif kind == "viper" and _viper is not None:
            v = _viper
            self._compress = v.compress
            self._load = v.load
            self._tail = v.tail
            self._put = v.put
            self.differ = v.differ
            self._w = bytearray(512)  # the round constants, aligned for ptr32, then the schedule
            for i in range(256):
                self._w[i] = K_LE[i]
        else:
            raise ValueError("no %r SHA-256 engine here (new() picks one)" % (kind,))
        self.kind = kind
        self._st = bytearray(32)
        self._blk = bytearray(64)

    def midstate(self, block):
        """The state after the 64-byte block (an HMAC pad) from the IV, as 32 bytes to start from."""
        st = self._st
        self._load(st, IV_LE)
        self._compress(st, self._w, block, 0)
        return bytes(st)

    def digest_into(self, mid, buf, off, n, out, ooff, nout=32):
        """SHA-256 of buf[off:off+n], its first nout bytes into out[ooff:]; mid: None, or a midstate()
        whose one block comes before the message. out may be buf: it is written after buf is read."""
        st = self._st
        blk = self._blk
        c = self._compress
        w = self._w
        pre = 0
        if mid is None:
            mid = IV_LE
        else:
            pre = 64  # the length below counts the pad block
        self._load(st, mid)
        end = off + n
        while end - off >= 64:
            c(st, w, buf, off)
            off += 64
        r = end - off
        self._tail(blk, buf, off, r)
        blk[r] = 0x80
        if r >= 56:  # no room for the length: it goes in a block of its own
            c(st, w, blk, 0)
            self._tail(blk, blk, 0, 0)
        # the length in bits, big-endian, from n bytes without ever forming n * 8 (< 2**30 on the boards)
        n += pre
        blk[63] = (n << 3) & 0xFF
        blk[62] = (n >> 5) & 0xFF
        blk[61] = (n >> 13) & 0xFF
        blk[60] = (n >> 21) & 0xFF
        blk[59] = (n >> 29) & 0xFF
        c(st, w, blk, 0)
        self._put(out, ooff, st, nout)


class Hashlib:
    """The interpreter's hashlib under Sha256's interface (allocates a few objects per hash): the gateway's, and
    CircuitPython's, whose boards run no native code (the halves engine in bytecode takes 60-113 ms a frame
    there, the firmware's C SHA-256 a fraction of a millisecond; the garbage is collected, the heap stays flat)."""

    kind = "hashlib"

    def __init__(self):
        from shared.compat import sha256 as new  # hashlib.sha256, or hashlib.new("sha256") where that is all

        self._new = new
        self._copy = hasattr(new(), "copy")  # CircuitPython's hash objects cannot be copied

    def midstate(self, block):
        return self._new(bytes(block)) if self._copy else bytes(block)

    def digest_into(self, mid, buf, off, n, out, ooff, nout=32):
        if mid is None:
            h = self._new()
        elif self._copy:
            h = mid.copy()
        else:
            h = self._new(mid)  # the pad block hashed again: one more block a MAC
        h.update(bytes(buf[off:off + n]))  # a copy: out may be buf
        out[ooff:ooff + nout] = h.digest()[:nout]

    differ = staticmethod(differ)


def available():
    """The kinds this interpreter runs, best first."""
    if _IMPL == "cpython":
        return ("hashlib", "halves")
    if _IMPL == "circuitpython" and _has_hashlib():
        return ("hashlib", "halves")
    return ("viper", "halves") if _viper is not None else ("halves",)


def _has_hashlib():
    try:
        from shared.compat import sha256 as new

        new()
        return True
    except (ImportError, AttributeError, OSError, ValueError):
        return False


def new(kind=None):
    """A SHA-256 engine: kind 'viper', 'halves', 'hashlib', or None for the first of available(): viper on
    MicroPython where native code runs, else halves (allocation-free); hashlib on CPython and on CircuitPython
    where the firmware has it. ValueError for a kind this interpreter cannot run."""
    kinds = available()
    if kind is None:
        kind = kinds[0]
    if kind not in kinds:
        raise ValueError("SHA-256 kind %r is not available here (use %s)" % (kind, ", ".join(kinds)))
    return Hashlib() if kind == "hashlib" else Sha256(kind)


def digest(data, kind=None):
    """SHA-256 of data as 32 bytes (allocates)."""
    out = bytearray(32)
    new(kind).digest_into(None, data, 0, len(data), out, 0)
    return bytes(out)


class Hmac:
    """HMAC-SHA256 with the key's pad blocks hashed once: a MAC costs the message's blocks + 1 outer block."""

    def __init__(self, key, kind=None):
        e = new(kind)
        if len(key) > 64:  # RFC 2104: a key longer than a block is hashed first
            d = bytearray(32)
            e.digest_into(None, key, 0, len(key), d, 0)
            key = d
        pad = bytearray(64)
        for i in range(len(key)):
            pad[i] = key[i]
        for i in range(64):
            pad[i] ^= 0x36
        self._imid = e.midstate(pad)
        for i in range(64):
            pad[i] ^= 0x36 ^ 0x5C
        self._omid = e.midstate(pad)
        self._e = e
        self.kind = e.kind
        self._inner = bytearray(32)
        self._check = bytearray(32)

    def mac_into(self, buf, off, n, out, ooff, nout=32):
        """HMAC-SHA256 of buf[off:off+n], its first nout bytes into out[ooff:] (out may be buf: a link frame's
        tag goes right after the bytes it signs)."""
        e = self._e
        inner = self._inner
        e.digest_into(self._imid, buf, off, n, inner, 0, 32)
        e.digest_into(self._omid, inner, 0, 32, out, ooff, nout)

    def verify(self, buf, off, n, tag, toff, tlen):
        """True if tag[toff:toff+tlen] is the first tlen (<= 32) bytes of the MAC of buf[off:off+n]; every
        byte is compared, so the time taken says nothing about where a forgery went wrong."""
        c = self._check
        self.mac_into(buf, off, n, c, 0, tlen)
        return self._e.differ(c, tag, toff, tlen) == 0
