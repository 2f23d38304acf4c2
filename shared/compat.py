# compat.py: what the portable core needs that the interpreters spell differently: const, the tick clock, SHA-256.
"""One place for the interpreter differences every module needs:

    const(x)               MicroPython's compile-time constant; the identity elsewhere. The compiler
                           folds `NAME = const(...)` by the name `const`, so importing it from here folds
                           the same as importing it from micropython.
    ticks_ms()             milliseconds mod 2**30 (MicroPython and CPython; CircuitPython's
                           supervisor.ticks_ms wraps at 2**29: its wraps are carried into bit 29)
    ticks_diff(a, b)       a - b, wrap-safe: correct while the two are less than 2**29 ms (6.2 days) apart
    ticks_add(t, d)        t + d on the same clock
    MASK30                 2**30 - 1: everything that travels mod 2**30 (the tick clock, stream
                           positions, counts and timestamps on the wire) is masked with it
    TICKS_HALF             2**29: the wrap-safe diff's sign bit
    sha256(data=b"")       a SHA-256 hash object with update(b) and digest(), whichever hashlib this is

Every value stays a small int on the 32-bit boards (< 2**30), so tick arithmetic never allocates.
"""
import time

try:
    from micropython import const
except ImportError:  # CPython, CircuitPython
    def const(x):
        return x

MASK30 = const(0x3FFFFFFF)
TICKS_HALF = const(0x20000000)

try:
    ticks_ms = time.ticks_ms  # MicroPython
except AttributeError:
    try:
        from supervisor import ticks_ms as _ticks29  # CircuitPython
    except ImportError:  # CPython
        def ticks_ms():
            return int(time.monotonic() * 1000) & MASK30
    else:
        _seen = [0, 0]  # the last supervisor tick, and the bit 29 its wraps have carried into

        def ticks_ms():
            # supervisor.ticks_ms wraps at 2**29 (the first time 65 s after power-on), ticks_diff at 2**30:
            # taken as it is, every diff across its wrap would be off by 2**29 and nothing would come due
            # for days. Each wrap flips bit 29 instead; the node asks far more often than once a wrap.
            t = _ticks29()
            if t < _seen[0]:
                _seen[1] ^= TICKS_HALF
            _seen[0] = t
            return t | _seen[1]


def ticks_diff(a, b):
    return ((a - b + TICKS_HALF) & MASK30) - TICKS_HALF


def ticks_add(t, d):
    return (t + d) & MASK30


def sha256(data=b""):
    """A SHA-256 hash object (update, digest) on every interpreter. MicroPython and CircuitPython's unix
    port have hashlib.sha256 and no hashlib.new; CircuitPython on the boards has only
    hashlib.new("sha256", data); CPython has both. ImportError where the firmware has no hashlib,
    AttributeError where its hashlib has neither."""
    import hashlib

    f = getattr(hashlib, "sha256", None)
    if f is not None:
        return f(data)
    return hashlib.new("sha256", data)
