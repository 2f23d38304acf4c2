# crc32.py: CRC-32 (zlib/PNG) as running checksums that never allocate: binascii-backed or table-free.
"""The CRC-32 of the link (and of MBF, KV snapshots, the tokenizer blob): polynomial 0xEDB88320
(reflected), initial register 0xFFFFFFFF, final XOR 0xFFFFFFFF, i.e. `binascii.crc32(data)`;
`crc32(b"123456789") == 0xCBF43926`.

Three running implementations with one interface, reset() / update(buf, start, end) / put(out, off) /
matches(buf, off), so a caller can checksum any byte range of a preallocated buffer and write or
compare the result as 4 little-endian bytes without ever holding the CRC as one Python int:

- Halves: table-free, bitwise, the 32-bit register kept as two 16-bit halves (hi, lo). Every value
  it computes is below 2**16, so it allocates nothing on any port. On RP2040/ESP32 MicroPython a
  small int holds 31 bits (objects from 2**30 up are heap longs), so a plain 32-bit register, or
  binascii.crc32's return value, would allocate on about 3 bytes in 4. Cost on the x64 unix port:
  ~1.5 us per byte (binascii: ~0.25 us per byte called byte by byte).
- Binascii (shared/crc32_binascii.py): `binascii.crc32` chained over the range. Used where a 32-bit
  int is a small int (CPython, 64-bit MicroPython such as the unix port): fast, and allocation-free on
  64-bit MicroPython because the range is fed through a preallocated 1-byte buffer (slicing a
  memoryview would allocate).
- Viper (shared/crc32_viper.py): bitwise in native code, the register in a 4-byte buffer. On an RP2040
  the link's frames cost tens of milliseconds each through Halves; this is what the boards run.

new() returns the right one for the interpreter: Viper where native code runs (MicroPython), else
Binascii when binascii.crc32 exists and ints up to 2**32 are small, else Halves. crc32(data, crc=0) is
the bitwise reference with binascii's signature.
"""
import sys

from shared.compat import const

try:
    from binascii import crc32 as _bcrc  # only whether it exists: shared/crc32_binascii.py uses it
except ImportError:  # firmware built without binascii.crc32
    _bcrc = None

_POLY_HI = const(0xEDB8)  # 0xEDB88320, high half
_POLY_LO = const(0x8320)  # low half
_IS_MP = sys.implementation.name == "micropython"
WIDE_INTS = sys.maxsize > 0xFFFFFFFF  # MicroPython: 64-bit port, small ints hold 62 bits


class Halves:
    """Running CRC-32 in two 16-bit halves; no value ever reaches 2**16, so nothing allocates."""

    kind = "halves"

    def __init__(self):
        self.hi = 0xFFFF
        self.lo = 0xFFFF

    def reset(self):
        self.hi = 0xFFFF
        self.lo = 0xFFFF

    def update(self, buf, start, end):
        hi = self.hi
        lo = self.lo
        for i in range(start, end):
            lo ^= buf[i]
            for _ in range(8):
                # shift the 32-bit register (hi:lo) right by one; XOR the polynomial if a 1 fell out
                if lo & 1:
                    lo = ((lo >> 1) | ((hi & 1) << 15)) ^ _POLY_LO
                    hi = (hi >> 1) ^ _POLY_HI
                else:
                    lo = (lo >> 1) | ((hi & 1) << 15)
                    hi >>= 1
        self.hi = hi
        self.lo = lo

    def put(self, out, off):
        """Write the final CRC (register XOR 0xFFFFFFFF) as 4 little-endian bytes at out[off]."""
        lo = self.lo ^ 0xFFFF
        hi = self.hi ^ 0xFFFF
        out[off] = lo & 0xFF
        out[off + 1] = lo >> 8
        out[off + 2] = hi & 0xFF
        out[off + 3] = hi >> 8

    def matches(self, buf, off):
        """True if buf[off:off+4] holds the final CRC, little-endian (compared byte by byte)."""
        lo = self.lo ^ 0xFFFF
        hi = self.hi ^ 0xFFFF
        return (buf[off] == lo & 0xFF and buf[off + 1] == lo >> 8
                and buf[off + 2] == hi & 0xFF and buf[off + 3] == hi >> 8)

    def value(self):
        """The CRC as an int (a heap long on 31-bit-int boards when >= 2**30: not for hot paths)."""
        return ((self.hi ^ 0xFFFF) << 16) | (self.lo ^ 0xFFFF)


def new(kind=None):
    """A running CRC: kind 'halves', 'binascii', 'viper', or None for the fastest allocation-free one here
    (viper where native code runs, else binascii where 32-bit ints are small, else halves). The other two
    live in modules of their own, so a board holds the code of the one it runs; ValueError for a kind
    this interpreter cannot run."""
    if kind is None:
        try:
            return new("viper" if _IS_MP else "binascii")
        except ValueError:  # no native code (CircuitPython), or no binascii.crc32
            kind = "binascii" if _bcrc and WIDE_INTS else "halves"
    if kind == "halves":
        return Halves()
    try:
        if kind == "binascii":
            from shared import crc32_binascii as m

            return m.Binascii()
        if kind == "viper":
            from shared import crc32_viper as m

            return m.Viper()
    except (ImportError, SyntaxError):
        raise ValueError("CRC kind %r is not available on this interpreter" % (kind,))
    raise ValueError("unknown CRC kind %r (use 'halves', 'binascii' or 'viper')" % (kind,))


def crc32(data, crc=0):
    """binascii.crc32(data, crc), computed bitwise without a table (the reference for tests)."""
    if not isinstance(crc, int) or crc < 0 or crc > 0xFFFFFFFF:
        raise ValueError("crc must be an int in 0..0xFFFFFFFF, got %r" % (crc,))
    h = Halves()
    h.hi = (crc >> 16) ^ 0xFFFF
    h.lo = (crc & 0xFFFF) ^ 0xFFFF
    h.update(data, 0, len(data))
    return h.value()
