# crc32_viper.py: the running CRC-32 of shared/crc32.py in viper (MicroPython with native code only).
# Kept in its own module: a viper decorator error cannot be caught in the module that holds it, and
# CircuitPython (native code off) or CPython (no micropython module) must still import crc32.
#
# The 32-bit register lives in a 4-byte buffer, read and written through ptr32 in update (the boards are
# little-endian) and byte by byte elsewhere, so no value ever becomes a Python int: on a 31-bit-int board
# nothing allocates. Bitwise, table-free: on the emulated RP2040 it takes 4.2 us a byte where the 16-bit
# halves in bytecode take 290 (`edgetwin bench inputs` prints both), and every frame the link checks or
# sends, and every spilled line, pays it.
import micropython


@micropython.viper
def update(reg, buf, start: int, end: int):
    """Run buf[start:end] through the register (polynomial 0xEDB88320, reflected)."""
    p = ptr32(reg)  # noqa: F821
    b = ptr8(buf)  # noqa: F821
    c = uint(p[0])  # noqa: F821
    poly = (uint(0xEDB8) << 16) | uint(0x8320)  # noqa: F821 - a 32-bit literal would be a heap int
    i = start
    while i < end:
        c = c ^ uint(b[i])  # noqa: F821
        k = 0
        while k < 8:
            if c & 1:
                c = (c >> 1) ^ poly
            else:
                c = c >> 1
            k += 1
        i += 1
    p[0] = int(c)


class Viper:
    """Running CRC-32 (shared/crc32.py's interface) on the viper update above."""

    kind = "viper"

    def __init__(self):
        self.reg = bytearray(4)
        self.reset()

    def reset(self):
        r = self.reg
        for i in range(4):
            r[i] = 0xFF

    def update(self, buf, start, end):
        update(self.reg, buf, start, end)

    def put(self, out, off):
        """Write the final CRC (register XOR 0xFFFFFFFF) as 4 little-endian bytes at out[off]."""
        r = self.reg
        for i in range(4):
            out[off + i] = r[i] ^ 0xFF

    def matches(self, buf, off):
        """True if buf[off:off+4] holds the final CRC, little-endian."""
        r = self.reg
        for i in range(4):
            if buf[off + i] != r[i] ^ 0xFF:
                return False
        return True

    def value(self):
        """The CRC as an int (a heap long on 31-bit-int boards when >= 2**30: not for hot paths)."""
        r = self.reg
        return (r[0] | (r[1] << 8) | (r[2] << 16) | (r[3] << 24)) ^ 0xFFFFFFFF
