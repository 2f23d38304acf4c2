# testkit.py: the few helpers the shared tests need on both interpreters (no pytest on MicroPython).
import gc
import sys

# MicroPython and CircuitPython (a MicroPython descendant: same VM, same limits) against CPython
IS_MP = sys.implementation.name in ("micropython", "circuitpython")
IS_CP = sys.implementation.name == "circuitpython"
INTERPRETER = "CircuitPython" if IS_CP else "MicroPython" if IS_MP else "CPython"

try:
    import micropython
except ImportError:
    micropython = None


class SkipTest(Exception):
    """Raise to skip a test on this interpreter (the runner reports it as skipped, naming the reason)."""


def skip(reason):
    raise SkipTest(reason)


def raises(exc_type, fn, *args):
    """Call fn(*args); it must raise exc_type. Returns the exception so the test can check its message."""
    try:
        fn(*args)
    except exc_type as e:
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc_type.__name__))


def run_locked(fn, arg=None):
    """Run fn(arg) with the heap locked on MicroPython: any allocation raises, which fails the test.

    On CPython this just calls fn (the allocation proof is MicroPython's to give). The call takes one
    argument so the call itself allocates nothing (a *args call builds a tuple)."""
    if not IS_MP:
        return fn(arg)
    kernels = was = None
    if IS_CP and "shared.kernels" in sys.modules:
        # CircuitPython's default kernels (ulab) allocate their result arrays by design; the plain kernels
        # are the allocation-free backend its boards have (no viper there), so the proof is theirs to give
        kernels = sys.modules["shared.kernels"]
        was = kernels.backend()
        kernels.use("plain")
    try:
        gc.collect()
        micropython.heap_lock()
        try:
            result = fn(arg)
        except MemoryError:
            micropython.heap_unlock()
            raise AssertionError("hot path allocated on the heap (%s)" % getattr(fn, "__name__", fn))
        except BaseException:
            micropython.heap_unlock()  # any other failure must not leave the module's later tests locked
            raise
        micropython.heap_unlock()
        return result
    finally:
        if kernels is not None:
            kernels.use(was)


def heap_in_use():
    """Bytes of live heap after a full collection (MicroPython); None on CPython (use tracemalloc there)."""
    gc.collect()
    if IS_MP:
        return gc.mem_alloc()
    return None


class Rng:
    """A tiny deterministic xorshift32 generator: same sequence on both interpreters."""

    def __init__(self, seed=1):
        self.s = (seed & 0xFFFFFFFF) or 1

    def next(self):
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        self.s = s
        return s

    def below(self, n):
        return self.next() % n
