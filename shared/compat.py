# compat.py: what the portable core takes from MicroPython that CPython lacks: const and the 30-bit tick clock.
"""One place for the interpreter differences every module needs:

    const(x)               MicroPython's compile-time constant; the identity elsewhere. The compiler
                           folds `NAME = const(...)` by the name `const`, so importing it from here folds
                           the same as importing it from micropython.
    ticks_ms()             milliseconds mod 2**30 (MicroPython and CPython; CircuitPython's
                           supervisor.ticks_ms wraps at 2**29 and is taken as it is)
    ticks_diff(a, b)       a - b, wrap-safe: correct while the two are less than 2**29 ms (6.2 days) apart
    ticks_add(t, d)        t + d on the same clock
    MASK30                 2**30 - 1: everything that travels mod 2**30 (the tick clock, stream
                           positions, counts and timestamps on the wire) is masked with it
    TICKS_HALF             2**29: the wrap-safe diff's sign bit

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
        from supervisor import ticks_ms  # CircuitPython
    except ImportError:  # CPython
        def ticks_ms():
            return int(time.monotonic() * 1000) & MASK30


def ticks_diff(a, b):
    return ((a - b + TICKS_HALF) & MASK30) - TICKS_HALF


def ticks_add(t, d):
    return (t + d) & MASK30
