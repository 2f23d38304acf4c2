# ringkv_viper.py: viper row moves for ringkv (MicroPython only; ringkv falls back to plain loops).
# Kept in its own module: a viper decorator error cannot be caught in the module that holds it, and
# CircuitPython (native code off) or CPython (no micropython module) must still import ringkv.
import micropython


@micropython.viper
def move8(buf, dst: int, src: int, n: int):
    """Copy n one-byte elements of buf from index src to index dst (ranges must not overlap)."""
    p = ptr8(buf)  # noqa: F821 - viper builtin
    i = 0
    while i < n:
        p[dst + i] = p[src + i]
        i += 1


@micropython.viper
def move32(buf, dst: int, src: int, n: int):
    """Copy n four-byte elements ('f' or 'i') of buf from index src to index dst (no overlap)."""
    p = ptr32(buf)  # noqa: F821 - viper builtin
    i = 0
    while i < n:
        p[dst + i] = p[src + i]
        i += 1
