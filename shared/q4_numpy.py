# q4_numpy.py: numpy backend (CPython hosts), the host's INT4 weight quantiser and the float reference.
"""The backend functions compute in int64 and return exactly the plain kernels' integers. With
CHECK_BOUNDS set (the tests set it) they also raise OverflowError if any intermediate that the 32-bit
design says fits in int32 reaches 2**31: that is the check of the bounds written in q4.py,
fixedmath.py and docs/KERNELS.md on real and extreme inputs.

Host only (never on the board): quantize_matrix() for the model converters, dequantize() and the
float_* reference functions used to state the integer kernels' error bounds.
"""
import zlib

import numpy as np

from shared import q4
from shared.fixedmath import EXP_A, EXP_B, EXP_END, EXP_TAB, SIG_TAB, inv_rms
from shared.q4 import GROUP, I_EH, I_H, I_HDR, LIM, Q4Error, bitlen

CHECK_BOUNDS = False
CACHE_FLOAT32 = True  # the weight cache: float32, 4 bytes per weight (fast); False: int8, 1 byte
_I31 = 1 << 31
_EXP = np.array(EXP_TAB, dtype=np.int64)
_SIG = np.array(SIG_TAB, dtype=np.int64)


def _chk(name, *arrays):
    if CHECK_BOUNDS:
        for a in arrays:
            a = np.asarray(a)
            if a.size and int(np.abs(a).max()) >= _I31:
                raise OverflowError("%s reaches %d >= 2**31" % (name, int(np.abs(a).max())))


def _view(buf, dtype, n):
    return np.frombuffer(buf, dtype=dtype, count=n)


def _q16(buf, n):
    """The first n values of an array('i') as clamped int64."""
    return np.clip(_view(buf, np.int32, n).astype(np.int64), -LIM, LIM)


def shift_sat(v, sh):
    """q4.shift_sat over an int64 array; sh an int or an array broadcast against v."""
    v = np.asarray(v, dtype=np.int64)
    sh = np.broadcast_to(np.asarray(sh, dtype=np.int64), v.shape)
    m = np.where(sh <= 30, LIM >> np.clip(sh, 0, 31), 0)
    left = np.where(v > m, LIM, np.where(v < -m, -LIM, np.clip(v, -m, m) << np.clip(sh, 0, 30)))
    rs = np.clip(-sh, 1, 30)
    right = np.where(-sh > 30, 0, (v + (np.int64(1) << (rs - 1))) >> rs)
    return np.where(sh >= 0, left, right)


def mulshift(a, f, s):
    """q4.mulshift over int64 arrays (s a scalar): exact, since |a * f| <= 2**45."""
    a = np.clip(np.asarray(a, dtype=np.int64), -LIM, LIM)
    f = np.asarray(f, dtype=np.int64)
    if CHECK_BOUNDS:
        aa, ff = np.abs(a), np.abs(f)
        _chk("mulshift partial products", (aa >> 15) * ff, (aa & 32767) * ff)
    neg = (a < 0) != (f < 0)
    p = np.abs(a) * np.abs(f)
    if s > 45:
        q = np.zeros_like(p)
    elif s > 0:
        q = (p + (np.int64(1) << (s - 1))) >> s
    elif -s > 30:
        q = np.where(p > 0, LIM, 0)
    else:
        q = np.where(p > LIM >> -s, LIM, np.minimum(p, LIM) << -s)
    q = np.minimum(q, LIM)
    return np.where(neg, -q, q)


def _bitlen_max(a):
    return bitlen(int(np.abs(a).max())) if a.size else 0


# ---- the backend interface of shared/kernels.py ----

def quantize_act(act, x):
    ng = act.ng
    xs = _q16(x, act.n).reshape(ng, GROUP)
    amax = np.abs(xs).max(axis=1)
    e = np.zeros(ng, dtype=np.int64)
    for _ in range(25):
        more = ((amax + ((np.int64(1) << e) >> 1)) >> e) > 127
        if not more.any():
            break
        e += more
    q = (xs + ((np.int64(1) << e) >> 1)[:, None]) >> e[:, None]
    _view(act.q, np.uint8, act.n)[:] = q.ravel() + 128  # offset-binary
    info = _view(act.info, np.int32, len(act.info))
    emax = int(e.max())
    h = int(info[I_H])
    info[I_HDR:I_HDR + ng] = emax - e + h
    info[I_HDR + ng:I_HDR + 2 * ng] = q.sum(axis=1)
    info[I_EH] = emax + h


def unpacked(mat):
    """(w, ws, mf): the weights q laid out (groups, rows, 32), as float32 (CACHE_FLOAT32) or int8 (q in
    [-8, 7]: nibble - 8, also for asymmetric matrices; the int8 weight of a Q8Matrix), the fixed
    scales as int64 (rows, groups), and the asymmetric matrices' fixed mins mf (rows, groups), else
    None. Cached on the matrix, keyed by the CRC-32 of its buffers, so streamed or swapped contents
    are seen."""
    mn = mat.mins
    key = ("numpy", CACHE_FLOAT32, zlib.crc32(mat.buf), zlib.crc32(mat.scales), mat.wshift,
           None if mn is None else zlib.crc32(mn))
    c = mat.cache
    if c is None or c[0] != key:
        if mat.kind == q4.KIND_Q8:
            w = _view(mat.buf, np.int8, mat.nib_bytes).reshape(mat.rows, mat.cols)
        else:
            nib = _view(mat.buf, np.uint8, mat.nib_bytes).reshape(mat.rows, mat.cols // 2)
            w = np.empty((mat.rows, mat.cols), dtype=np.int8)
            w[:, 0::2] = (nib & 15).astype(np.int8) - 8
            w[:, 1::2] = (nib >> 4).astype(np.int8) - 8
        w = np.ascontiguousarray(w.reshape(mat.rows, mat.ng, GROUP).transpose(1, 0, 2))
        if CACHE_FLOAT32:
            w = w.astype(np.float32)
        ws = np.frombuffer(mat.scales, dtype="<u2", count=mat.rows * mat.ng)
        mf = None
        if mn is not None:
            mf = np.frombuffer(mn, dtype="<i2", count=mat.rows * mat.ng).astype(np.int64).reshape(mat.rows, mat.ng)
        c = (key, w, ws.astype(np.int64).reshape(mat.rows, mat.ng), mf)
        mat.cache = c
    return c[1], c[2], c[3]


def _group_acc(w, act):
    """Integer dot products per (row, group) from w (groups, rows, 32). float32 matmul is exact
    here: every partial sum is an integer of magnitude <= 32 * 128 * 127 < 2**24."""
    qa = (_view(act.q, np.uint8, act.n).astype(np.float32) - 128).reshape(act.ng, GROUP, 1)
    acc = np.matmul(w if w.dtype == np.float32 else w.astype(np.float32), qa)[:, :, 0].T
    return acc.astype(np.int64)


def matvec(out, mat, act, r0, r1):
    w, ws, mf = unpacked(mat)
    ng = mat.ng
    info = _view(act.info, np.int32, len(act.info)).astype(np.int64)
    acc = _group_acc(w[:, r0:r1], act)
    t = acc * ws[r0:r1]
    if mf is not None:
        _chk("matvec asymmetric group products", t, mf[r0:r1] * info[I_HDR + ng:I_HDR + 2 * ng])
        t = t + mf[r0:r1] * info[I_HDR + ng:I_HDR + 2 * ng]
    sg = info[I_HDR:I_HDR + ng]
    s = np.minimum(sg, 30)
    terms = np.where(sg <= 30, (t + ((np.int64(1) << s) >> 1)) >> s, 0)
    total = terms.sum(axis=1)
    _chk("matvec group products", np.where(sg <= 30, t, 0), np.where(sg <= 30, t + ((np.int64(1) << s) >> 1), 0))
    _chk("matvec row sums", np.cumsum(terms, axis=1))
    _view(out, np.int32, r1 - r0)[:] = shift_sat(total, int(info[I_EH]) - mat.wshift)


def group_dots(out, mat, act, row):
    w = unpacked(mat)[0]
    _view(out, np.int32, mat.ng)[:] = _group_acc(w[:, row:row + 1], act)[0]


def rmsnorm(out, x, nw):
    info = nw.info
    n = info[0]
    xs = _q16(x, n)
    amax = int(np.abs(xs).max())
    k = max(bitlen(amax) - 15, info[4])
    ax = np.abs(xs)
    v = ax >> k if k >= 0 else ax << -k
    sq = (v * v + ((1 << info[3]) >> 1)) >> info[3]
    ss = int(sq.sum())
    _chk("rmsnorm squares", v * v + (1 << info[3]), ss)
    rj = inv_rms(ss, k, info)
    o = _view(out, np.int32, n)
    if rj == 0:
        o[:] = 0
        return
    y = mulshift(xs, rj >> 5, k + 7 - (rj & 31))
    o[:] = mulshift(y, np.array(nw.g, dtype=np.int64), 7 + info[1])


def rope(out, x, rt, d, heads):
    hd = rt.head_dim
    half = hd // 2
    tab = _view(rt.tab, np.int16, len(rt.tab)).astype(np.int64)
    c = tab[d * hd:d * hd + half]
    s = tab[d * hd + half:(d + 1) * hd]
    xs = _q16(x, heads * hd).reshape(heads, hd)
    if rt.info[1]:
        a, b = xs[:, :half], xs[:, half:]
    else:
        a, b = xs[:, 0::2], xs[:, 1::2]
    ya = (a * c - b * s + 16384) >> 15  # == the split computation of fixedmath.rope, exactly
    yb = (a * s + b * c + 16384) >> 15
    if CHECK_BOUNDS:
        ah, al, bh, bl = a >> 15, a & 32767, b >> 15, b & 32767
        _chk("rope high parts", ah * c, bh * s, ah * c - bh * s, ah * s + bh * c)
        _chk("rope low parts", al * c - bl * s + 16384, al * s + bl * c + 16384)
        _chk("rope sums", ah * c - bh * s + ((al * c - bl * s + 16384) >> 15))
    res = np.empty_like(xs)
    if rt.info[1]:
        res[:, :half], res[:, half:] = ya, yb
    else:
        res[:, 0::2], res[:, 1::2] = ya, yb
    _view(out, np.int32, heads * hd)[:] = np.clip(res, -LIM, LIM).ravel()


def _exp(d, xb):
    """fixedmath.exp_fix over an int64 array."""
    small = d < EXP_END
    dc = np.where(small, d, 0)
    a = dc >> 13
    e = _EXP[a] * _EXP[EXP_B + ((dc >> 7) & 63)]
    e = e - (((e >> 8) * (dc & 127)) >> 8)
    sh = 15 + _EXP[EXP_A + a] - xb
    ok = small & (sh <= 30)
    shc = np.clip(sh, 0, 30)
    return np.where(ok, (e + ((np.int64(1) << shc) >> 1)) >> shc, 0)


def softmax(out, x, n):
    xs = _q16(x, n)
    e = _exp(xs.max() - xs, 15)
    hi, lo = int((e >> 15).sum()), int((e & 32767).sum())
    _chk("softmax sums", xs.max() - xs, hi, lo)
    s1 = hi + (lo >> 15)
    k = 0
    while (s1 >> k) >= 1 << 16:
        k += 1
    sm = (s1 + ((1 << k) >> 1)) >> k
    r = ((1 << 30) + (sm >> 1)) // sm
    sh = 14 + k
    p = ((e + 16384) >> 15) * r + (1 << (sh - 1))
    _chk("softmax products", e + 16384, p)
    _view(out, np.int32, n)[:] = p >> sh


def _silu(xs):
    a = np.abs(xs)
    small = a < (1 << 20)
    ac = np.where(small, a, 0)
    k = ac >> 11
    c = _SIG[k] - (((_SIG[k] - _SIG[k + 1]) * (ac & 2047) + 1024) >> 11)
    m = (ac * c + 32768) >> 16
    _chk("silu", ac * c + 32768)
    y = np.where(xs >= 0, xs - m, -m)
    return np.where(small, y, np.where(xs > 0, xs, 0))


def silu(out, x, n):
    _view(out, np.int32, n)[:] = _silu(_q16(x, n))


def mul(out, a, b, n):
    xa = _q16(a, n)
    xb = _q16(b, n)
    if CHECK_BOUNDS:
        ah, al, bh, bl = np.abs(xa) >> 15, np.abs(xa) & 32767, np.abs(xb) >> 15, np.abs(xb) & 32767
        _chk("mul partial products", ah * bh, ah * bl + al * bh, al * bl + 32768)
    q = np.minimum((np.abs(xa) * np.abs(xb) + 32768) >> 16, LIM)  # < 2**61: exact in int64
    _view(out, np.int32, n)[:] = np.where((xa < 0) != (xb < 0), -q, q)


# ---- host only: weight quantiser (for the converters) and the float reference ----

_DIVISORS = (6.5, 7.0, 7.5, 8.0)


def quantize_matrix(weights):
    """float (rows, cols) -> Q4Matrix buffer (bytearray) with float16 scale bits, not yet prepared.

    Per group of 32: q = clip(round(w / s), -8, 7) with s = float16(amax / k), k in 6.5..8 chosen
    for the least squared error (k = 8 lets a negative extreme use -8)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise Q4Error("quantize_matrix needs a 2-D matrix, got shape %r" % (w.shape,))
    rows, cols = w.shape
    if rows < 1:
        raise Q4Error("quantize_matrix needs at least one row")
    q4.check_len(cols, "cols")
    if not np.all(np.isfinite(w)):
        raise Q4Error("quantize_matrix: weights contain Inf or NaN")
    g = w.reshape(rows, cols // GROUP, GROUP)
    amax = np.abs(g).max(axis=-1)
    if amax.max() / _DIVISORS[0] > 65504:
        raise Q4Error("quantize_matrix: a group scale exceeds the float16 range")
    best = None
    for k in _DIVISORS:
        s16 = (amax / k).astype(np.float16)
        s = s16.astype(np.float64)[..., None]
        q = np.where(s > 0, np.clip(np.rint(g / np.where(s > 0, s, 1)), -8, 7), 0)
        err = ((q * s - g) ** 2).sum(axis=-1)
        if best is None:
            best = [err, q, s16]
        else:
            better = err < best[0]
            best[0] = np.where(better, err, best[0])
            best[1] = np.where(better[..., None], q, best[1])
            best[2] = np.where(better, s16, best[2])
    nib = (best[1].reshape(rows, cols) + 8).astype(np.uint8)
    packed = nib[:, 0::2] | (nib[:, 1::2] << 4)
    return bytearray(packed.tobytes() + best[2].astype("<f2").view("<u2").tobytes())


def quantize_matrix_asym(weights):
    """float (rows, cols) -> (buf, mins) of an asymmetric Q4Matrix (nibbles then float16 scales; the
    float16 mins apart), not yet prepared. Per group of 32: m = float16(min), d = float16((max - m) / 15),
    nibble = clip(round((w - m) / d), 0, 15): value = d * nibble + m (Q4_1's form)."""
    w = np.asarray(weights, dtype=np.float64)
    rows, cols = _check_float_matrix(w, "quantize_matrix_asym")
    g = w.reshape(rows, cols // GROUP, GROUP)
    lo, hi = g.min(axis=-1), g.max(axis=-1)
    if max(float(np.abs(lo).max()), float((hi - lo).max()) / 15) > 65504:
        raise Q4Error("quantize_matrix_asym: a group scale or minimum exceeds the float16 range")
    m16 = lo.astype(np.float16)
    d16 = ((hi - m16.astype(np.float64)) / 15).astype(np.float16)
    d = d16.astype(np.float64)[..., None]
    q = np.where(d > 0, np.clip(np.rint((g - m16.astype(np.float64)[..., None]) / np.where(d > 0, d, 1)), 0, 15), 0)
    nib = q.reshape(rows, cols).astype(np.uint8)
    packed = nib[:, 0::2] | (nib[:, 1::2] << 4)
    return (bytearray(packed.tobytes() + d16.astype("<f2").view("<u2").tobytes()),
            bytearray(m16.astype("<f2").view("<u2").tobytes()))


def quantize_matrix8(weights):
    """float (rows, cols) -> Q8Matrix buffer (int8 weights then float16 scales), not yet prepared.
    Per group of 32: d = float16(amax / 127), q = clip(round(w / d), -127, 127) (Q8_0's form)."""
    w = np.asarray(weights, dtype=np.float64)
    rows, cols = _check_float_matrix(w, "quantize_matrix8")
    g = w.reshape(rows, cols // GROUP, GROUP)
    amax = np.abs(g).max(axis=-1)
    if amax.max() / 127 > 65504:
        raise Q4Error("quantize_matrix8: a group scale exceeds the float16 range")
    d16 = (amax / 127).astype(np.float16)
    d = d16.astype(np.float64)[..., None]
    q = np.where(d > 0, np.clip(np.rint(g / np.where(d > 0, d, 1)), -127, 127), 0)
    return bytearray(q.reshape(rows, cols).astype(np.int8).tobytes() + d16.astype("<f2").view("<u2").tobytes())


def _check_float_matrix(w, what):
    if w.ndim != 2:
        raise Q4Error("%s needs a 2-D matrix, got shape %r" % (what, w.shape))
    rows, cols = w.shape
    if rows < 1:
        raise Q4Error("%s needs at least one row" % what)
    q4.check_len(cols, "cols")
    if not np.all(np.isfinite(w)):
        raise Q4Error("%s: weights contain Inf or NaN" % what)
    return rows, cols


def weights_of(mat):
    """The integer weights (rows, cols) as stored: q in -8..7 (symmetric), the nibble 0..15 (asymmetric),
    the int8 (Q8Matrix)."""
    if mat.kind == q4.KIND_Q8:
        return _view(mat.buf, np.int8, mat.nib_bytes).reshape(mat.rows, mat.cols).astype(np.int64)
    nib = _view(mat.buf, np.uint8, mat.nib_bytes).reshape(mat.rows, mat.cols // 2)
    q = np.empty((mat.rows, mat.cols), dtype=np.int64)
    q[:, 0::2] = nib & 15
    q[:, 1::2] = nib >> 4
    return q if mat.kind == q4.KIND_ASYM else q - 8


def dequantize(mat, dtype=np.float64):
    """(rows, cols) weights of a Q4Matrix / Q8Matrix: with its float16 scales (and mins) before prepare(),
    with the fixed-point ones after. Before prepare, an asymmetric matrix gives d * nibble + m computed
    in `dtype` (np.float32 reproduces GGUF's Q4_1 dequantisation bit for bit)."""
    q = weights_of(mat).astype(dtype).reshape(mat.rows, mat.ng, GROUP)
    raw = np.frombuffer(mat.scales, dtype="<u2", count=mat.rows * mat.ng)
    if mat.wshift is None:
        s = raw.view("<f2").astype(dtype)
        m = None if mat.mins is None else np.frombuffer(mat.mins, dtype="<f2", count=mat.rows * mat.ng).astype(dtype)
    else:
        s = raw.astype(np.float64) * 2.0 ** -mat.wshift
        m = None
        if mat.mins is not None:
            m = np.frombuffer(mat.mins, dtype="<i2", count=mat.rows * mat.ng) * 2.0 ** -mat.wshift
            q = q - 8  # prepared: ((nibble - 8) * ws + mf) * 2**-wshift
    out = q * s.reshape(mat.rows, mat.ng, 1)
    if m is not None:
        out = out + m.reshape(mat.rows, mat.ng, 1)
    return out.reshape(mat.rows, mat.cols)


def to_q16(values):
    """Floats -> array('i') Q16, rounded and saturated to +-LIM."""
    from array import array
    v = np.clip(np.rint(np.asarray(values, dtype=np.float64) * 65536.0), -LIM, LIM).astype(np.int32)
    return array("i", v.tobytes())


def from_q16(buf, n=None):
    n = len(buf) if n is None else n
    return _view(buf, np.int32, n).astype(np.float64) / 65536.0


def float_matvec(w, x):
    return np.asarray(w, dtype=np.float64) @ np.asarray(x, dtype=np.float64)


def float_rmsnorm(x, gain, eps):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x) + eps) * np.asarray(gain, dtype=np.float64)


def float_rope(x, d, head_dim, theta=10000.0, style=0):
    """Rotate each head_dim slice of x by the angles of distance d (float64)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, head_dim)
    half = head_dim // 2
    ang = d * float(theta) ** (-2.0 * np.arange(half) / head_dim)
    c, s = np.cos(ang), np.sin(ang)
    a, b = (x[:, :half], x[:, half:]) if style else (x[:, 0::2], x[:, 1::2])
    out = np.empty_like(x)
    if style:
        out[:, :half], out[:, half:] = a * c - b * s, a * s + b * c
    else:
        out[:, 0::2], out[:, 1::2] = a * c - b * s, a * s + b * c
    return out.ravel()


def float_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def float_silu(x):
    x = np.asarray(x, dtype=np.float64)
    return x / (1.0 + np.exp(-x))


def float_swiglu(gate, up):
    return float_silu(gate) * np.asarray(up, dtype=np.float64)

