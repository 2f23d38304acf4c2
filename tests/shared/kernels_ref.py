# kernels_ref.py: test helpers for the kernels (both interpreters) and a ulab.numpy stand-in (CPython).
"""run_all() runs a function under every kernel backend the interpreter has and assert_same()
compares them with the plain reference.

ulab cannot be installed on CPython, so the ulab backend (shared/q4_ulab.py) is tested with
ulab_standin(): numpy restricted to ulab's dtypes (uint8, int8, uint16, int16, float = float32) and
to the few ulab functions that backend uses. Every array it hands out is a subclass that refuses, at
creation, any other dtype; so an int32/int64/float64 intermediate anywhere in the backend fails the
test instead of passing silently. It checks dtypes and the function set, not ulab's own C code.
"""
import testkit
from shared import kernels


def backends():
    """Every backend this interpreter can run. On CPython the ulab backend runs on the stand-in and
    the numpy backend checks that no intermediate of the 32-bit design reaches 2**31."""
    if not testkit.IS_MP:
        try:
            from shared import q4_numpy, q4_ulab
            q4_ulab.bind(ulab_standin())
            q4_numpy.CHECK_BOUNDS = True
        except ImportError:
            pass
    return kernels.available()


def run_all(fn, *args):
    """fn(*args) under every backend; returns {backend: result}; restores the default backend."""
    out = {}
    try:
        for name in backends():
            kernels.use(name)
            out[name] = fn(*args)
    finally:
        kernels.use()
    return out


def assert_same(results, what):
    ref = results["plain"]
    for name in results:
        assert results[name] == ref, "%s: backend %s differs from plain:\n%r\n%r" % (what, name, results[name], ref)


_STANDIN = None


def ulab_standin():
    """The restricted numpy that stands in for ulab.numpy (built on first use; needs numpy)."""
    global _STANDIN
    if _STANDIN is None:
        _STANDIN = _build_standin()
    return _STANDIN


def _build_standin():
    import numpy as _np
    _ALLOWED = (_np.dtype(_np.uint8), _np.dtype(_np.int8), _np.dtype(_np.uint16), _np.dtype(_np.int16),
                _np.dtype(_np.float32))

    class _UArray(_np.ndarray):
        def __array_finalize__(self, obj):
            if self.dtype not in _ALLOWED:
                raise TypeError("ulab has no dtype %s" % self.dtype)

    def _u(a):
        a = _np.asarray(a)
        if a.dtype not in _ALLOWED:
            raise TypeError("ulab has no dtype %s" % a.dtype)
        return a.view(_UArray)

    class UlabNumpy:
        """The subset of ulab.numpy that shared/q4_ulab.py may use."""
        uint8 = _np.uint8
        int8 = _np.int8
        uint16 = _np.uint16
        int16 = _np.int16
        float = _np.float32
        calls = {}

        @classmethod
        def _count(cls, name):
            cls.calls[name] = cls.calls.get(name, 0) + 1

        @classmethod
        def frombuffer(cls, buf, dtype=_np.float32, count=-1, offset=0):
            cls._count("frombuffer")
            return _u(_np.frombuffer(buf, dtype=dtype, count=count, offset=offset))

        @classmethod
        def array(cls, obj, dtype=_np.float32):
            cls._count("array")
            return _u(_np.array(obj, dtype=dtype))

        @classmethod
        def zeros(cls, shape, dtype=_np.float32):
            cls._count("zeros")
            return _u(_np.zeros(shape, dtype=dtype))

        @classmethod
        def floor(cls, a):
            cls._count("floor")
            return _u(_np.floor(a))

        @classmethod
        def sum(cls, a, axis=None):
            cls._count("sum")
            if a.dtype.kind == "f":  # the real ulab: a running mean times the count, not exact
                raise TypeError("ulab sums floats as a running mean times the count (inexact): use dot")
            return _u(_np.sum(a, axis=axis))

        @classmethod
        def dot(cls, a, b):
            cls._count("dot")  # ulab: 2-D by 1-D, float results, products added in order
            if a.ndim != 2 or b.ndim != 1:
                raise TypeError("ulab's dot here: a matrix times a vector")
            return _u((_np.asarray(a, _np.float64) @ _np.asarray(b, _np.float64)).astype(_np.float32))

    return UlabNumpy
