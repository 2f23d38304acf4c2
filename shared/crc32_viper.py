# crc32_viper.py: the running CRC-32 of shared/crc32.py in viper (MicroPython with native code only).
# Kept in its own module: a viper decorator error cannot be caught in the module that holds it, and
# CircuitPython (native code off) or CPython (no micropython module) must still import crc32.
#
# The 32-bit register lives in a 4-byte buffer read and written through ptr32, so no value ever becomes a
# Python int: on a 31-bit-int board nothing allocates. Bitwise, table-free: on the emulated RP2040 it
# takes 3.5 us a byte where the 16-bit halves in bytecode take 290 (`edgetwin bench inputs` prints both),
# and every frame the link checks or sends, and every spilled line, pays it.
import micropython


@micropython.viper
def reset(reg):
    """Register := 0xFFFFFFFF."""
    p = ptr32(reg)  # noqa: F821 - viper builtin
    p[0] = -1


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


@micropython.viper
def put(reg, out, off: int):
    """out[off:off+4] := the final CRC (register XOR 0xFFFFFFFF), little-endian."""
    c = uint(ptr32(reg)[0])  # noqa: F821
    o = ptr8(out)  # noqa: F821
    o[off] = (c & 0xFF) ^ 0xFF
    o[off + 1] = ((c >> 8) & 0xFF) ^ 0xFF
    o[off + 2] = ((c >> 16) & 0xFF) ^ 0xFF
    o[off + 3] = (c >> 24) ^ 0xFF


@micropython.viper
def matches(reg, buf, off: int) -> int:
    """1 if buf[off:off+4] holds the final CRC, little-endian, else 0."""
    c = uint(ptr32(reg)[0])  # noqa: F821
    b = ptr8(buf)  # noqa: F821
    if uint(b[off]) != (c & 0xFF) ^ 0xFF or uint(b[off + 1]) != ((c >> 8) & 0xFF) ^ 0xFF:  # noqa: F821
        return 0
    if uint(b[off + 2]) != ((c >> 16) & 0xFF) ^ 0xFF or uint(b[off + 3]) != (c >> 24) ^ 0xFF:  # noqa: F821
        return 0
    return 1
