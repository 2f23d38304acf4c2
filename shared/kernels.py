# kernels.py: the one place that picks the math backend, and the checked entry points of every kernel.
"""Backends, chosen at import (use() switches, e.g. in tests):
  native MicroPython with q4nat.mpy on its path (shared/q4_native.py: the C kernels, and the attention and
         glue that shared/llama.py then runs in C)
  viper  MicroPython with native code (shared/q4_viper.py)
  ulab   CircuitPython (shared/q4_ulab.py: ulab for the INT4 matvec, plain code for the rest)
  numpy  CPython (shared/q4_numpy.py, vectorised, int64 inside)
  plain  anywhere (shared/q4.py + shared/fixedmath.py): the reference
All give the same integers. The entry points below check shapes and buffers (a clear Q4Error, a
ValueError, instead of a crash in native code) and allocate nothing on MicroPython. Buffers are
array('i') for Q16 vectors. The element type of an array is checked where the interpreter can see it
without allocating (CPython); MicroPython checks type and length only.
"""
import sys
from array import array

from shared import fixedmath, q4
from shared.fixedmath import MAX_SOFTMAX, NormWeight, RopeTable
from shared.q4 import I_R0, I_R1, I_WSHIFT, Q4Error, QAct, Q4Matrix

NAMES = ("native", "viper", "ulab", "numpy", "plain")
_IMPL = sys.implementation.name
_HAS_TYPECODE = hasattr(array("i"), "typecode")


class _Plain:
    """The plain-Python backend: the reference kernels of q4 and fixedmath."""
    quantize_act = q4.quantize_act
    matvec = q4.matvec
    group_dots = q4.group_dots
    rmsnorm = fixedmath.rmsnorm
    rope = fixedmath.rope
    softmax = fixedmath.softmax
    silu = fixedmath.silu
    mul = fixedmath.mul


def load(name):
    """The backend module called name, or None where this interpreter cannot run it."""
    if name == "plain":
        return _Plain
    try:
        if name == "native":
            from shared import q4_native
            return q4_native
        if name == "viper":
            from shared import q4_viper
            return q4_viper
        if name == "numpy":
            from shared import q4_numpy
            return q4_numpy
        if name == "ulab":
            from shared import q4_ulab
            return q4_ulab if q4_ulab.np is not None else None
    except (SyntaxError, ImportError):
        return None
    raise Q4Error("unknown kernel backend %r (one of %s)" % (name, ", ".join(NAMES)))


def available():
    return [n for n in NAMES if load(n) is not None]


def default_name():
    if _IMPL == "micropython":
        prefer = ("native", "viper")
    elif _IMPL == "circuitpython":
        prefer = ("ulab",)
    else:
        prefer = ("numpy",)
    for name in prefer:
        if load(name) is not None:
            return name
    return "plain"


_B = _Plain
_name = "plain"
_F = None  # the backend's fused module (q4nat), looked up once here: a missing attribute allocates on CircuitPython


def use(name=None):
    """Switch every kernel to backend name (default: this interpreter's best). Returns the name."""
    global _B, _name, _F
    if name is None:
        name = default_name()
    b = load(name)
    if b is None:
        raise Q4Error("kernel backend %r is not available on %s" % (name, _IMPL))
    _B = b
    _name = name
    _F = getattr(b, "fused", None)
    return name


def backend():
    return _name


def fused():
    """q4nat (the C module) while the native backend is in use, else None: shared/llama.py then runs its
    attention and glue in C."""
    return _F


# ---- checks (allocate only when they raise) ----

def _buf(x, n, tc, what):
    if type(x) is not array:
        raise Q4Error("%s must be array('%s'), got %s" % (what, tc, type(x).__name__))
    if _HAS_TYPECODE and x.typecode != tc:
        raise Q4Error("%s must be array('%s'), got array('%s')" % (what, tc, x.typecode))
    if len(x) < n:
        raise Q4Error("%s needs %d values, has %d" % (what, n, len(x)))


def _count(n, lo, hi, what):
    if type(n) is not int or n < lo or n > hi:
        raise Q4Error("%s must be an int in %d..%d, got %r" % (what, lo, hi, n))


def _pair(mat, act):
    if not isinstance(mat, Q4Matrix):
        raise Q4Error("expected a Q4Matrix, got %s" % type(mat).__name__)
    if not isinstance(act, QAct):
        raise Q4Error("expected a QAct, got %s" % type(act).__name__)
    if mat.wshift is None:
        raise Q4Error("Q4Matrix scales are still float16 bits: call prepare() after loading")
    if act.n != mat.cols:
        raise Q4Error("activation has %d values, matrix has %d columns" % (act.n, mat.cols))


# ---- the kernels ----

def quantize_act(act, x):
    """Quantise the Q16 vector x (act.n values) into act: int8 groups of 32, power-of-two scales."""
    if not isinstance(act, QAct):
        raise Q4Error("expected a QAct, got %s" % type(act).__name__)
    _buf(x, act.n, "i", "quantize_act input")
    _B.quantize_act(act, x)


def matvec(out, mat, act, r0=0, r1=-1):
    """out[r - r0] = (row r of mat) . act in Q16 for r0 <= r < r1 (default: all rows)."""
    _pair(mat, act)
    if r1 == -1:
        r1 = mat.rows
    if type(r0) is not int or type(r1) is not int or r0 < 0 or r1 > mat.rows or r0 >= r1:
        raise Q4Error("row range %r..%r is outside 0..%d" % (r0, r1, mat.rows))
    _buf(out, r1 - r0, "i", "matvec output")
    info = act.info
    info[I_R0] = r0
    info[I_R1] = r1
    info[I_WSHIFT] = mat.wshift
    _B.matvec(out, mat, act, r0, r1)


def dot(mat, row, act):
    """Row `row` of mat times act, Q16 (the value matvec writes for that row)."""
    matvec(act.out1, mat, act, row, row + 1)
    return act.out1[0]


def group_dots(out, mat, row, act):
    """out[g] = the raw int4 x int8 dot product of group g of row `row` (no scales)."""
    _pair(mat, act)
    _count(row, 0, mat.rows - 1, "row")
    _buf(out, mat.ng, "i", "group_dots output")
    act.info[I_R0] = row
    _B.group_dots(out, mat, act, row)


def rmsnorm(out, x, nw):
    """out = x / sqrt(mean(x**2) + eps) * gain (nw: a NormWeight), Q16."""
    if not isinstance(nw, NormWeight):
        raise Q4Error("expected a NormWeight, got %s" % type(nw).__name__)
    _buf(x, nw.n, "i", "rmsnorm input")
    _buf(out, nw.n, "i", "rmsnorm output")
    _B.rmsnorm(out, x, nw)


def rope(out, x, rt, d, heads=1):
    """Rotate `heads` consecutive head vectors of x by the angle of relative distance d (rt: RopeTable)."""
    if not isinstance(rt, RopeTable):
        raise Q4Error("expected a RopeTable, got %s" % type(rt).__name__)
    _count(d, 0, rt.max_dist, "RoPE distance")
    _count(heads, 1, 4096, "heads")
    n = heads * rt.head_dim
    _buf(x, n, "i", "rope input")
    _buf(out, n, "i", "rope output")
    rt.info[2] = d
    rt.info[3] = heads
    _B.rope(out, x, rt, d, heads)


def softmax(out, x, n):
    """out[:n] = softmax(x[:n]): Q16 logits in, Q16 probabilities out (in place allowed)."""
    _count(n, 1, MAX_SOFTMAX, "softmax length")
    _buf(x, n, "i", "softmax input")
    _buf(out, n, "i", "softmax output")
    _B.softmax(out, x, n)


def silu(out, x, n):
    """out[:n] = x * sigmoid(x), Q16."""
    _count(n, 1, 1 << 24, "silu length")
    _buf(x, n, "i", "silu input")
    _buf(out, n, "i", "silu output")
    _B.silu(out, x, n)


def mul(out, a, b, n):
    """out[:n] = a * b in Q16, exactly rounded (half away from zero) and saturated."""
    _count(n, 1, 1 << 24, "mul length")
    _buf(a, n, "i", "mul input a")
    _buf(b, n, "i", "mul input b")
    _buf(out, n, "i", "mul output")
    _B.mul(out, a, b, n)


def swiglu(out, gate, up, n):
    """out[:n] = silu(gate) * up, Q16 (out may be gate, not up: silu writes out first)."""
    if out is up and up is not gate:
        raise Q4Error("swiglu output must not be the 'up' buffer (it may be the gate buffer)")
    silu(out, gate, n)
    mul(out, out, up, n)


use()
