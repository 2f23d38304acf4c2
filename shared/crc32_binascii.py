# crc32_binascii.py: the running CRC-32 of shared/crc32.py through binascii.crc32 (CPython, 64-bit ports).
# In its own module so that a board, which runs the viper or the halves CRC, never holds its code.
import sys
from binascii import crc32 as _bcrc

_IS_MP = sys.implementation.name != "cpython"  # MicroPython or CircuitPython


class Binascii:
    """Running CRC-32 through binascii.crc32; allocation-free only where 32-bit ints are small."""

    kind = "binascii"

    def __init__(self):
        self.v = 0
        self._one = bytearray(1)

    def reset(self):
        self.v = 0

    def update(self, buf, start, end):
        if not _IS_MP:
            self.v = _bcrc(memoryview(buf)[start:end], self.v)
        elif start == 0 and end == len(buf):
            self.v = _bcrc(buf, self.v)
        else:
            one = self._one
            v = self.v
            for i in range(start, end):
                one[0] = buf[i]
                v = _bcrc(one, v)
            self.v = v

    def put(self, out, off):
        v = self.v
        out[off] = v & 0xFF
        out[off + 1] = (v >> 8) & 0xFF
        out[off + 2] = (v >> 16) & 0xFF
        out[off + 3] = v >> 24

    def matches(self, buf, off):
        v = self.v
        return (buf[off] == v & 0xFF and buf[off + 1] == (v >> 8) & 0xFF
                and buf[off + 2] == (v >> 16) & 0xFF and buf[off + 3] == v >> 24)

    def value(self):
        return self.v
