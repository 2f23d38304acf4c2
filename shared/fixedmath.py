# fixedmath.py: fixed-point RMSNorm, RoPE tables, exp/softmax and SiLU/SwiGLU (plain-Python reference).
"""All values are Q16 int32 (q4.LIM saturation) unless stated; tables are Q15/Q16 uint16 or int16.

Tables are computed at import / load time with exact integer (bignum) arithmetic, so MicroPython
(single-precision floats on the boards) and CPython build the same bits. Formats, bounds and measured
errors are in docs/KERNELS.md.
"""
from array import array

from shared.q4 import LIM, Q4Error, bitlen, ceil_log2, fp16_bits, fp16_exponent, fp16_fixed, fp16_shift, mulshift
from shared.compat import const

EXP_A = const(192)      # EXP_TAB[a] * 2**-(15 + EXP_TAB[192 + a]) = exp(-a/8), a < 192 (d < 24),
EXP_B = const(384)      # with EXP_TAB[a] in [2**14, 2**15]; EXP_TAB[384 + b] = round(2**15 * exp(-b/512)), b < 64
EXP_END = const(0x180000)  # d = 24.0 in Q16: exp(-24) * 2**30 < 0.05, so larger d give 0
SIG_N = const(512)      # SIG_TAB[k] = round(2**16 * sigmoid(-k/32)), k <= 512 (|x| <= 16)
MAX_NORM = const(16384)  # rmsnorm length limit (keeps (r << m) < 2**28)
MAX_SOFTMAX = const(65535)  # softmax length limit (sum of Q15 exps < 2**31)

# ---- exact load-time arithmetic: Q60 bignums (allocates; never in a hot path) ----
_Q = 60
_ONE = 1 << _Q


def _exp_small(y):
    """exp(y) in Q60 for 0 <= y <= 1 (Q60), Taylor series."""
    s = _ONE
    t = _ONE
    k = 1
    while t:
        t = ((t * y) >> _Q) // k
        s += t
        k += 1
    return s


def _exp_neg(y):
    """exp(-y) in Q60 for y >= 0 (Q60): exp(-y) = 1 / (e**int(y) * exp(frac(y)))."""
    e1 = _exp_small(_ONE)
    p = _exp_small(y & (_ONE - 1))
    for _ in range(y >> _Q):
        p = (p * e1) >> _Q
    return (_ONE << _Q) // p


def _atanh(z):
    """atanh(z) in Q60 for 0 <= z <= 1/3 (Q60)."""
    z2 = (z * z) >> _Q
    s = 0
    t = z
    k = 1
    while t:
        s += t // k
        t = (t * z2) >> _Q
        k += 2
    return s


def _ln_int(n):
    """ln(n) in Q60 for an integer n >= 1."""
    k = bitlen(n) - 1
    m = (n << _Q) >> k  # n / 2**k in [1, 2)
    ln2 = 2 * _atanh(_ONE // 3)
    return k * ln2 + 2 * _atanh(((m - _ONE) << _Q) // (m + _ONE))


def _cos_sin(w):
    """(cos w, sin w) in Q60 for 0 <= w <= 1 (Q60)."""
    w2 = (w * w) >> _Q
    c = 0
    s = 0
    tc = _ONE
    ts = w
    k = 0
    while tc or ts:
        if k & 1:
            c -= tc
            s -= ts
        else:
            c += tc
            s += ts
        tc = ((tc * w2) >> _Q) // ((2 * k + 1) * (2 * k + 2))
        ts = ((ts * w2) >> _Q) // ((2 * k + 2) * (2 * k + 3))
        k += 1
    return c, s


def _round_q(v, bits):
    """Q60 -> Q(bits), rounded half up."""
    return (v + (1 << (_Q - bits - 1))) >> (_Q - bits)


def _build_exp():
    t = array("H", bytes(2 * (EXP_B + 64)))
    step = _exp_neg(_ONE >> 3)
    v = _ONE
    for a in range(EXP_A):
        e = 0
        while (v << (e + 1)) < _ONE:  # v * 2**e in [1/2, 1)
            e += 1
        t[a] = _round_q(v << e, 15)
        t[EXP_A + a] = e
        v = (v * step) >> _Q
    step = _exp_neg(_ONE >> 9)
    v = _ONE
    for b in range(64):
        t[EXP_B + b] = _round_q(v, 15)
        v = (v * step) >> _Q
    return t


def _build_sig():
    t = array("H", bytes(2 * (SIG_N + 1)))
    step = _exp_small(_ONE >> 5)
    v = _ONE  # exp(k/32)
    for k in range(SIG_N + 1):
        t[k] = ((_ONE << 17) // (_ONE + v) + 1) >> 1  # round(2**16 / (1 + exp(k/32)))
        v = (v * step) >> _Q
    return t


EXP_TAB = _build_exp()
SIG_TAB = _build_sig()


# ---- weights of the fixed-point kernels ----

class NormWeight:
    """RMSNorm gain (int16 fixed point, one shift) and epsilon (Q32) for vectors of n values."""

    def __init__(self, n, eps=1e-5):
        if not isinstance(n, int) or n < 1 or n > MAX_NORM:
            raise Q4Error("RMSNorm length must be 1..%d, got %r" % (MAX_NORM, n))
        if not (0 <= eps < 0.25):
            raise Q4Error("RMSNorm eps must be in [0, 0.25), got %r" % (eps,))
        self.n = n
        self.g = array("h", bytes(2 * n))
        eps_q32 = int(eps * 4294967296.0 + 0.5)
        # info: n, gain shift, eps * 2**32, ceil(log2(n)), lowest input shift k (eps << -2k < 2**30)
        self.info = array("i", [n, 0, eps_q32, ceil_log2(n), -((30 - bitlen(eps_q32)) >> 1)])

    def load_fp16(self, bits):
        """Load time: gains as float16 bits (n of them) -> int16 fixed point with one shift."""
        if len(bits) != self.n:
            raise Q4Error("RMSNorm gain needs %d values, got %d" % (self.n, len(bits)))
        emax = 0
        for h in bits:
            e = fp16_exponent(h, True)
            if e > emax:
                emax = e
        shift = fp16_shift(emax)
        for i in range(self.n):
            self.g[i] = fp16_fixed(bits[i], shift)
        self.info[1] = shift
        return self

    def load_floats(self, values):
        """Host / load time: gains as floats, rounded to float16 first (same bits as a file)."""
        return self.load_fp16([fp16_bits(v) for v in values])


class RopeTable:
    """Q15 cos/sin of d * theta**(-2i/head_dim) for 0 <= d <= max_dist, built with integers only.

    Row d holds head_dim int16: cos for the head_dim/2 frequencies, then sin. style 0 rotates
    interleaved pairs (2i, 2i+1) (llama2.c, GGUF); style 1 rotates (i, i + head_dim/2) (HF/NeoX)."""

    def __init__(self, head_dim, max_dist, theta=10000, style=0):
        if not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2 or head_dim > 1024:
            raise Q4Error("head_dim must be even, 2..1024, got %r" % (head_dim,))
        if not isinstance(max_dist, int) or max_dist < 0 or max_dist > 65535:
            raise Q4Error("max_dist must be 0..65535, got %r" % (max_dist,))
        if style not in (0, 1):
            raise Q4Error("RoPE style must be 0 (interleaved) or 1 (half), got %r" % (style,))
        if isinstance(theta, float) and theta == int(theta):
            theta = int(theta)
        if not isinstance(theta, int) or theta < 2:
            raise Q4Error("rope theta must be an integer >= 2, got %r" % (theta,))
        self.head_dim = head_dim
        self.max_dist = max_dist
        half = head_dim // 2
        tab = array("h", bytes(2 * (max_dist + 1) * head_dim))
        ln_theta = _ln_int(theta)
        for i in range(half):
            c1, s1 = _cos_sin(_exp_neg((2 * i * ln_theta) // head_dim))
            c = _ONE
            s = 0
            o = i
            for _ in range(max_dist + 1):
                tab[o] = _q15(c)
                tab[o + half] = _q15(s)
                c, s = (c * c1 - s * s1) >> _Q, (s * c1 + c * s1) >> _Q
                o += head_dim
        self.tab = tab
        # info: head_dim, style, d, heads (the kernels' wrapper writes d and heads per call)
        self.info = array("i", [head_dim, style, 0, 1])


def _q15(v):
    v = _round_q(v, 15)
    return 32767 if v > 32767 else (-32768 if v < -32768 else v)


# ---- plain-Python kernels (the reference) ----

def _clamp(v):
    return LIM if v > LIM else (-LIM if v < -LIM else v)


def _amax(x, n):
    m = 0
    for i in range(n):
        v = x[i]
        if v < 0:
            v = -v
        if v > m:
            m = v
    return LIM if m > LIM else m


def isqrt(v):
    """floor(sqrt(v)) for 0 <= v < 2**30, bit by bit (no division)."""
    r = 0
    b = 1 << 28
    while b:
        if v >= r + b:
            v -= r + b
            r = (r >> 1) + b
        else:
            r >>= 1
        b >>= 2
    return r


def inv_rms(ss, k, info):
    """The scalar step of rmsnorm: from ss = sum of round(t**2 / 2**m), t = x * 2**-k, to
    r * 2**-j = 2**29 / sqrt(mean(t**2) + eps). Returns (r << 5) | (j + 1): one small int, nothing
    allocated; 0 when mean + eps == 0."""
    n = info[0]
    m = info[3]
    q1 = ss // n
    mean = (q1 << m) + (((ss - q1 * n) << m) // n)  # floor(ss * 2**m / n) < 2**30 ((ss % n) << m < 2**28)
    if k >= 0:
        if 2 * k < 31:
            mean += info[2] >> (2 * k)  # eps in units of t**2, < 2**30
    else:
        mean += info[2] << (-2 * k)  # < 2**30 because k >= info[4]
    if mean == 0:
        return 0
    j = 0
    if mean > LIM:
        mean >>= 2
        j = -1
    else:
        while mean < (1 << 28):
            mean <<= 2
            j += 1
    s = isqrt(mean)  # in [2**14, 2**15)
    return ((((1 << 29) + (s >> 1)) // s) << 5) | (j + 1)  # r = 2**29 / s in [2**14, 2**15]


def rmsnorm(out, x, nw):
    """out = x / sqrt(mean(x**2) + eps) * gain, Q16 in and out."""
    info = nw.info
    n = info[0]
    m = info[3]
    g = nw.g
    amax = _amax(x, n)
    k = bitlen(amax) - 15  # t = x * 2**-k has 15 bits at the maximum ...
    if k < info[4]:
        k = info[4]  # ... unless eps * 2**-2k would pass 2**30 (then eps dominates anyway)
    hm = (1 << m) >> 1
    ss = 0
    for i in range(n):
        v = _clamp(x[i])
        if v < 0:
            v = -v
        v = v >> k if k >= 0 else v << -k  # < 2**15
        ss += (v * v + hm) >> m  # each < 2**(30-m), n <= 2**m terms: ss < 2**30
    rj = inv_rms(ss, k, info)
    if rj == 0:
        for i in range(n):
            out[i] = 0
        return
    # y = x * r * 2**(j - 13 - k) in Q16; keep it in Q23 (|y| <= sqrt(n) <= 2**7) before the gain
    s1 = k + 7 - (rj & 31)  # k + 6 - j
    s2 = 7 + info[1]
    for i in range(n):
        out[i] = mulshift(mulshift(x[i], rj >> 5, s1), g[i], s2)


def rope(out, x, rt, d, heads):
    """Rotate `heads` consecutive head vectors of x by table row d (relative distance), into out."""
    tab = rt.tab
    hd = rt.head_dim
    half = hd >> 1
    style = rt.info[1]
    row = d * hd
    for h in range(heads):
        o = h * hd
        for i in range(half):
            c = tab[row + i]
            s = tab[row + half + i]
            if style:
                ia = o + i
                ib = ia + half
            else:
                ia = o + 2 * i
                ib = ia + 1
            a = _clamp(x[ia])
            b = _clamp(x[ib])
            # x = hi * 2**15 + lo with |hi| <= 2**15, 0 <= lo < 2**15: no product reaches 2**31,
            # and floor((a*c - b*s + 2**14) / 2**15) comes out exact (docs/KERNELS.md).
            ah = a >> 15
            al = a & 32767
            bh = b >> 15
            bl = b & 32767
            ya = ah * c - bh * s + ((al * c - bl * s + 16384) >> 15)
            yb = ah * s + bh * c + ((al * s + bl * c + 16384) >> 15)
            out[ia] = _clamp(ya)
            out[ib] = _clamp(yb)


def exp_fix(d, x):
    """exp(-d / 2**16) * 2**(15 + x) for 0 <= d < 2**31 and 0 <= x <= 15, rounded; relative error
    about 2**-15 (the table is mantissa + exponent), or 1 LSB for the smallest values."""
    if d >= EXP_END:
        return 0
    t = EXP_TAB
    a = d >> 13
    e = t[a] * t[EXP_B + ((d >> 7) & 63)]  # exp(-(d >> 7) / 512) * 2**(30 + s), <= 2**30
    e -= ((e >> 8) * (d & 127)) >> 8  # times exp(-c / 2**16) ~ 1 - c / 2**16, c < 128
    sh = 15 + t[EXP_A + a] - x
    if sh > 30:
        return 0
    return (e + ((1 << sh) >> 1)) >> sh


def softmax(out, x, n):
    """out[:n] = softmax(x[:n]); x Q16 logits, out Q16 probabilities (sum ~ 65536)."""
    mx = -LIM
    for i in range(n):
        v = _clamp(x[i])
        if v > mx:
            mx = v
    hi = 0
    lo = 0
    for i in range(n):
        e = exp_fix(mx - _clamp(x[i]), 15)  # exp(-d) * 2**30: 15 bits even for the tiny ones
        out[i] = e
        hi += e >> 15  # the sum S = hi * 2**15 + lo, kept in two words:
        lo += e & 32767  # hi, lo <= n * 2**15 < 2**31 for n <= 65535
    s1 = hi + (lo >> 15)  # floor(S / 2**15) <= n * 2**15 < 2**31; >= 2**15 (S >= exp(0) = 2**30)
    k = 0
    while (s1 >> k) >= 1 << 16:
        k += 1
    sm = (s1 + ((1 << k) >> 1)) >> k  # S / 2**(15 + k), in [2**15, 2**16]
    r = ((LIM + 1) + (sm >> 1)) // sm  # 2**30 / sm, in [2**14, 2**15]
    sh = 14 + k  # p = e * 2**16 / S = (e / 2**15) * r / 2**(14 + k)
    rnd = 1 << (sh - 1)
    for i in range(n):
        out[i] = (((out[i] + 16384) >> 15) * r + rnd) >> sh  # (e + 2**14) >> 15 <= 2**15: <= 2**30


def silu(out, x, n):
    """out[:n] = x * sigmoid(x), Q16, sigmoid from SIG_TAB with linear interpolation."""
    t = SIG_TAB
    for i in range(n):
        v = _clamp(x[i])
        a = -v if v < 0 else v
        if a >= 1 << 20:  # |x| >= 16: sigmoid is 0 or 1 within 2**-23
            y = v if v > 0 else 0
        else:
            k = a >> 11
            c = t[k] - (((t[k] - t[k + 1]) * (a & 2047) + 1024) >> 11)  # sigmoid(-|x|), Q16
            m = (a * c + 32768) >> 16  # a * c <= 2**32 * max(t * sigmoid(-t)) < 2**30.2
            y = v - m if v >= 0 else -m
        out[i] = y


def mul(out, a, b, n):
    """out[:n] = a * b in Q16: round(a * b / 2**16) half away from zero, saturated, exactly.

    With |a|, |b| <= LIM split as h * 2**15 + l: a * b = hh * 2**30 + c * 2**15 + ll, where
    hh = ah * bh < 2**30, c = ah * bl + al * bh < 2**31 - 2**17 and ll = al * bl < 2**30."""
    for i in range(n):
        x = _clamp(a[i])
        y = _clamp(b[i])
        neg = (x < 0) != (y < 0)
        if x < 0:
            x = -x
        if y < 0:
            y = -y
        xh = x >> 15
        xl = x & 32767
        yh = y >> 15
        yl = y & 32767
        q = xh * yh
        if q >= 1 << 16:  # a * b >= 2**46: saturated
            q = LIM
        else:
            c = xh * yl + xl * yh
            q <<= 14
            if q > LIM - (c >> 1):
                q = LIM
            else:
                q += (c >> 1) + ((((c & 1) << 15) + xl * yl + 32768) >> 16)  # <= LIM + 2**15
                if q > LIM:
                    q = LIM
        out[i] = -q if neg else q


def swiglu(out, gate, up, n):
    """out[:n] = silu(gate) * up, Q16 (out may be gate or up)."""
    silu(out, gate, n)
    mul(out, out, up, n)


# ---- attention's int8 loops (the reference; shared/q4_viper.py has the native ones) ----
# info (array('i') of 4): [offset in a / out, offset in b, n, u]. One call per key and head: the offsets
# travel in info so the native versions keep to viper's four arguments.

def dot_i8(a, b, info):
    """sum(a[ao + i] * b[bo + i] for i < n): a query row (int) times an int8 K row."""
    ao = info[0]
    bo = info[1]
    d = 0
    for i in range(info[2]):
        d += a[ao + i] * b[bo + i]
    return d


def axpy_i8(out, b, info):
    """out[oo + i] += u * b[bo + i] for i < n: an int8 V row weighted by u into the head's output."""
    oo = info[0]
    bo = info[1]
    u = info[3]
    for i in range(info[2]):
        out[oo + i] += u * b[bo + i]
