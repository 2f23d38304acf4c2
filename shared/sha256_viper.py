# sha256_viper.py: the SHA-256 compression function of shared/sha256.py in viper (MicroPython with native code).
# Kept in its own module: a viper decorator error cannot be caught in the module that holds it, and
# CircuitPython (native code off) or CPython (no micropython module) must still import sha256.
#
# The eight state words live in a 32-byte buffer; the round constants and the message schedule in one
# 512-byte buffer (shared/sha256.py copies the constants in: a heap buffer is 4-byte aligned, as ptr32
# needs on Cortex-M0+ and Xtensa, where a bytes constant frozen in flash may not be). Words are read and
# written through ptr32 (the boards and the unix port are little-endian), so no 32-bit value ever
# becomes a Python int: on a 31-bit-int board nothing allocates. A viper uint is the machine word, 64
# bits on the unix port: values are masked to 32 bits before anything shifts them right (a carry or a
# left shift above bit 31 is harmless until then, and ptr32 stores drop it).
import micropython


@micropython.viper
def compress(st, w, buf, off: int):
    """Run the 64-byte block at buf[off] through the state in st (8 words, native order); w: the 64 round
    constants, then room for the 64-word schedule."""
    h = ptr32(st)  # noqa: F821 - viper builtins
    k = ptr32(w)  # noqa: F821
    ws = ptr32(uint(k) + 256)  # noqa: F821 - the schedule, after the 64 constants
    b = ptr8(buf)  # noqa: F821
    m = (uint(0xFFFF) << 16) | uint(0xFFFF)  # noqa: F821 - a 32-bit literal would be a heap int
    # the message schedule: 16 big-endian words of the block, then 48 derived ones
    i = 0
    while i < 16:
        p = off + (i << 2)
        ws[i] = (uint(b[p]) << 24) | (uint(b[p + 1]) << 16) | (uint(b[p + 2]) << 8) | uint(b[p + 3])  # noqa: F821
        i += 1
    while i < 64:
        x = uint(ws[i - 15])  # noqa: F821
        y = uint(ws[i - 2])  # noqa: F821
        s0 = ((x >> 7) | (x << 25)) ^ ((x >> 18) | (x << 14)) ^ (x >> 3)
        s1 = ((y >> 17) | (y << 15)) ^ ((y >> 19) | (y << 13)) ^ (y >> 10)
        ws[i] = uint(ws[i - 16]) + s0 + uint(ws[i - 7]) + s1  # noqa: F821
        i += 1
    # 64 rounds over the working words a..h (a and e masked: the sigmas shift them right)
    a = uint(h[0])  # noqa: F821
    bb = uint(h[1])  # noqa: F821
    c = uint(h[2])  # noqa: F821
    d = uint(h[3])  # noqa: F821
    e = uint(h[4])  # noqa: F821
    f = uint(h[5])  # noqa: F821
    g = uint(h[6])  # noqa: F821
    hh = uint(h[7])  # noqa: F821
    i = 0
    while i < 64:
        t1 = (hh + (((e >> 6) | (e << 26)) ^ ((e >> 11) | (e << 21)) ^ ((e >> 25) | (e << 7)))
              + (g ^ (e & (f ^ g))) + uint(k[i]) + uint(ws[i]))  # noqa: F821
        t2 = (((a >> 2) | (a << 30)) ^ ((a >> 13) | (a << 19)) ^ ((a >> 22) | (a << 10))) + ((a & bb) | (c & (a | bb)))
        hh = g
        g = f
        f = e
        e = (d + t1) & m
        d = c
        c = bb
        bb = a
        a = (t1 + t2) & m
        i += 1
    h[0] = uint(h[0]) + a  # noqa: F821
    h[1] = uint(h[1]) + bb  # noqa: F821
    h[2] = uint(h[2]) + c  # noqa: F821
    h[3] = uint(h[3]) + d  # noqa: F821
    h[4] = uint(h[4]) + e  # noqa: F821
    h[5] = uint(h[5]) + f  # noqa: F821
    h[6] = uint(h[6]) + g  # noqa: F821
    h[7] = uint(h[7]) + hh  # noqa: F821


@micropython.viper
def load(st, src):
    """st[0:32] = src[0:32] (byte by byte: src may be a constant at any address)."""
    d = ptr8(st)  # noqa: F821
    s = ptr8(src)  # noqa: F821
    i = 0
    while i < 32:
        d[i] = s[i]
        i += 1


@micropython.viper
def tail(blk, buf, off: int, r: int):
    """blk[0:r] = buf[off:off+r], then zeros to the end of the 64-byte block."""
    d = ptr8(blk)  # noqa: F821
    s = ptr8(buf)  # noqa: F821
    i = 0
    while i < r:
        d[i] = s[off + i]
        i += 1
    while i < 64:
        d[i] = 0
        i += 1


@micropython.viper
def put(out, ooff: int, st, nout: int):
    """The first nout bytes of the digest (the state's 8 native little-endian words, big-endian) at out[ooff:]."""
    d = ptr8(out)  # noqa: F821
    s = ptr8(st)  # noqa: F821
    i = 0
    while i < nout:
        d[ooff + i] = s[(i & 0x1C) + 3 - (i & 3)]
        i += 1


@micropython.viper
def differ(a, b, boff: int, n: int) -> int:
    """Nonzero if a[0:n] and b[boff:boff+n] differ; every byte is looked at, whatever the first says."""
    x = ptr8(a)  # noqa: F821
    y = ptr8(b)  # noqa: F821
    d = 0
    i = 0
    while i < n:
        d |= x[i] ^ y[boff + i]
        i += 1
    return d
