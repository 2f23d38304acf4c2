# q4_ulab.py: CircuitPython backend: ulab (float32) for the INT4 x INT8 group dot products, plain ints elsewhere.
"""ulab has uint8/int8/uint16/int16/float and nothing wider: no int32 and no float16. So:
- the O(rows * cols) part, the group dot products, runs in ulab float arrays. It is exact: the
  nibbles (0..15) and int8 activations are small integers, every product is <= 15 * 127 and every
  partial sum of a group (16 bytes, 32 products) is an integer <= 60960 < 2**24, which float32
  holds exactly, in any summation order. The sums are np.dot with a vector of ones, which adds in
  order; np.sum is not used: for floats ulab computes a running mean (Welford) times the count, which
  is off by a fraction (3433.9999 for 3434 on the real ulab) that int() would truncate;
- the per-group scaling (O(rows * cols / 32)) needs 31-bit products, so it runs in Python ints;
- the O(n) fixed-point kernels (quantise, RMSNorm, RoPE, softmax, SiLU, mul) work on Q16 int32
  vectors that ulab cannot even view: they are the plain kernels.
ulab allocates its result arrays, so this backend is not allocation-free (CircuitPython has no
viper either). The tests run it on CPython with numpy standing in for ulab.numpy, restricted to
ulab's dtypes and functions (tests/shared/kernels_ref.py).
"""
from shared import fixedmath, q4
from shared.q4 import GROUP, I_EH, I_HDR, KIND_Q8, shift_sat

try:
    from ulab import numpy as np
except ImportError:
    np = None

# nibble bytes per block of rows: it bounds ulab's temporaries (about five float arrays of 2 * _BLOCK
# values alive at once: 20 KB in float32 on a board, 40 KB in the unix port's float64) on a heap that also
# holds the model; larger blocks gained little, since the per-group scaling in Python ints dominates
_BLOCK = 128

quantize_act = q4.quantize_act
rmsnorm = fixedmath.rmsnorm
rope = fixedmath.rope
softmax = fixedmath.softmax
silu = fixedmath.silu
mul = fixedmath.mul


def bind(module):
    """Use module as ulab.numpy (tests bind a restricted numpy stand-in)."""
    global np
    np = module
    _ones.clear()


_ones = {}


def _group_sum(p, groups, width):
    """Each row of p (groups x width, float) summed in order, exactly (np.dot: see the docstring)."""
    one = _ones.get(width)
    if one is None:
        one = _ones[width] = np.array([1] * width, dtype=np.float)
    return np.dot(p.reshape((groups, width)), one)


def _sums(mat, act, r0, nr):
    """sum(nibble * q_a) per (row, group) for nr rows from r0, as float32 integers (exact); for a
    Q8Matrix sum(q_w * q_a) (|products| <= 128 * 127, |sums| <= 520192 < 2**24: exact too)."""
    qa = np.array(np.frombuffer(act.q, dtype=np.uint8, count=act.n), dtype=np.float) - 128  # q + 128 stored
    if mat.kind == KIND_Q8:
        c = mat.cols
        b = np.array(np.frombuffer(mat.buf, dtype=np.int8, count=nr * c, offset=r0 * c), dtype=np.float)
        p = b.reshape((nr, c)) * qa
        return _group_sum(p, nr * mat.ng, GROUP)
    half = mat.cols // 2
    b = np.array(np.frombuffer(mat.buf, dtype=np.uint8, count=nr * half, offset=r0 * half), dtype=np.float)
    hi = np.floor(b / 16)
    lo = b - hi * 16
    p = lo.reshape((nr, half)) * qa[0::2] + hi.reshape((nr, half)) * qa[1::2]
    return _group_sum(p, nr * mat.ng, 16)


def matvec(out, mat, act, r0, r1):
    info = act.info
    ng = mat.ng
    sc = mat.scales
    mn = mat.mins
    sh = info[I_EH] - mat.wshift
    q8 = mat.kind == KIND_Q8
    # Q4 groups: sum(nibble * q_a) - 8 * sum(q_a) = sum((nibble - 8) * q_a); Q8: the sum itself
    step = max(1, _BLOCK // (mat.cols if q8 else mat.cols // 2))
    r = r0
    while r < r1:
        nr = min(step, r1 - r)
        s = _sums(mat, act, r, nr)
        for i in range(nr):
            so = 2 * (r + i) * ng
            t = 0
            for g in range(ng):
                asum = info[I_HDR + ng + g]
                acc = int(s[i * ng + g]) - (0 if q8 else asum << 3)
                sg = info[I_HDR + g]
                if sg <= 30:
                    acc = acc * (sc[so] | (sc[so + 1] << 8))
                    if mn is not None:
                        mf = mn[so] | (mn[so + 1] << 8)
                        acc += asum * (mf - 0x10000 if mf & 0x8000 else mf)
                    t += (acc + ((1 << sg) >> 1)) >> sg
                so += 2
            out[r + i - r0] = shift_sat(t, sh)
        r += nr


def group_dots(out, mat, act, row):
    s = _sums(mat, act, row, 1)
    info = act.info
    ng = mat.ng
    q8 = mat.kind == KIND_Q8
    for g in range(ng):
        out[g] = int(s[g]) - (0 if q8 else info[I_HDR + ng + g] << 3)
