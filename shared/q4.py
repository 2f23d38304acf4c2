# q4.py: the W4A8 format (INT4 weights, INT8 activations, groups of 32) and its plain-Python kernels.
"""Format (docs/KERNELS.md has the full table and the proofs in short):

Q4Matrix: rows x cols INT4 weights, cols a multiple of 32, and one scale per group of 32:
  buf      nibbles, row-major, rows*cols/2 bytes; byte j of a row holds weight 2j in its LOW nibble
           and weight 2j+1 in its HIGH nibble, each offset-binary: nibble = q + 8, q in [-8, 7].
  scales   rows*(cols/32) uint16 (little-endian), index row*ng + g. In the file: float16 bits (>= 0);
           prepare() (load time) converts them in place, integers only, to fixed point ws < 2**15
           with one shift per matrix: scale = ws * 2**-wshift. By default scales is the tail of buf
           (the MBF segments <name> and <name>.scales back to back); it may be a separate buffer.
  mins     (asymmetric matrices only, else None) rows*(cols/32) 2-byte values: in the file float16
           minimums m (Q4_1 style: weight = scale * nibble + m, nibble in 0..15); q4a_q8.prepare(mat)
           turns scales and mins together into ws < 2**14 and the int16 mf = fixed(m + 8 * scale), so that
           weight = ((nibble - 8) * ws + mf) * 2**-wshift and the kernel adds mf * sum(q_a) per group.
Q8Matrix (shared/q4a_q8.py): rows x cols int8 weights (two's complement, one byte each) and one float16
  scale per group, prepared to ws < 2**11 (Q8_0 style; the embedding / tied classifier). q4a_q8 holds
  the asymmetric conversion and the INT8 kernels and imports this module; this one never imports it.
QAct: an activation vector quantised per group of 32 to int8 q in [-127, 127] with a power-of-two
  scale 2**e_g (in Q16 units), e_g in 0..24; one byte each, offset-binary like the nibbles: q + 128.

Every vector between kernels is Q16 (value = int / 65536) in array('i'), saturated to +-LIM.
Plain Python here is the reference every backend must match bit for bit.
"""
from array import array

from shared.compat import const
try:
    from uctypes import addressof as _addressof
except ImportError:  # CPython: numpy does not care about alignment
    _addressof = None

GROUP = const(32)            # weights and activations are grouped along the input dimension
LIM = const(0x3FFFFFFF)      # |every Q16 value| <= LIM = 2**30 - 1 (a small int on the boards); a saturation
                             # bound, not the mod-2**30 wrap of shared/compat.py's MASK30
ACT_FRAC = const(16)         # the residual stream and all activations are Q16

# QAct.info layout (array 'i'): a header, then the group shifts sg, then the group sums of q.
I_R0 = const(0)       # first row (matvec writes out[r - r0]); group_dots: the row
I_R1 = const(1)       # row end (exclusive)
I_N = const(2)        # length of the vector (== the matrix's cols)
I_WSHIFT = const(3)   # the matrix's scale shift, copied in by the kernels' wrapper
                      # (index 4 is free)
I_EH = const(5)       # E + H: largest activation exponent + ceil(log2(groups))
I_NG = const(6)       # groups
I_H = const(7)        # ceil(log2(groups))
I_HDR = const(8)      # sg[g] at I_HDR + g, asum[g] at I_HDR + ng + g

KIND_SYM = const(0)   # Q4Matrix: int4 q in -8..7 times a scale per group
KIND_ASYM = const(1)  # Q4Matrix with mins: ((nibble - 8) * ws + mf) per group
KIND_Q8 = const(2)    # Q8Matrix: int8 times a scale per group


class Q4Error(ValueError):
    """Bad shapes, buffers or scale values for the INT4 kernels."""


def check_len(n, what):
    """n must be a positive multiple of GROUP (the input dimension of every W4A8 kernel)."""
    if not isinstance(n, int) or n < GROUP or n % GROUP:
        raise Q4Error("%s must be a positive multiple of %d, got %r" % (what, GROUP, n))


def nbytes(rows, cols):
    """Size of a one-buffer Q4Matrix: nibbles then one uint16 scale per group."""
    return rows * cols // 2 + rows * (cols // GROUP) * 2


def ceil_log2(n):
    h = 0
    while (1 << h) < n:
        h += 1
    return h


def bitlen(v):
    """Bits needed for v >= 0 (int.bit_length is missing on MicroPython)."""
    b = 0
    while v >> b:
        b += 1
    return b


# ---- float16 scales, integers only (load time on the board) ----

def fp16_exponent(h, signed):
    """Exponent field (subnormals as 1) of float16 bits h; 0 for +-0. Rejects Inf/NaN and, unless
    signed, negative values."""
    if h < 0 or h > 0xFFFF:
        raise Q4Error("float16 bits out of range: %r" % (h,))
    e = (h >> 10) & 31
    if e == 31:
        raise Q4Error("float16 value is Inf or NaN (bits 0x%04x)" % h)
    if h & 0x7FFF == 0:
        return 0
    if h & 0x8000 and not signed:
        raise Q4Error("scale must be >= 0 (float16 bits 0x%04x)" % h)
    return e if e else 1


def fp16_shift(emax):
    """Shift that maps the largest float16 (exponent field emax) to [2**14, 2**15)."""
    return 29 - emax if emax else 0


def fp16_fixed(h, shift):
    """round(value(h) * 2**shift) for float16 bits h, exactly, with integers only.

    value = m * 2**(e - 25) with m < 2**11; with shift = fp16_shift(emax) the result is < 2**15."""
    e = (h >> 10) & 31
    m = h & 1023
    if e:
        m |= 1024
    else:
        e = 1
    k = e - 25 + shift
    if k >= 0:
        v = m << k
    elif k <= -12:
        v = 0  # m + 2**(-k-1) < 2**-k, so the rounded value is 0
    else:
        v = (m + (1 << (-k - 1))) >> -k
    return -v if h & 0x8000 else v


def fp16_bits(x):
    """float -> float16 bits, round to nearest even (host and load time only: uses floats)."""
    import math
    if x != x:
        raise Q4Error("NaN cannot be stored as float16")
    sign = 0x8000 if x < 0 else 0
    a = -x if x < 0 else x
    if a == 0:
        return 0
    m, e = math.frexp(a)  # a = m * 2**e, 0.5 <= m < 1
    if e >= -13:  # normal: 11-bit mantissa
        n = round(m * 2048)
        if n == 2048:
            n = 1024
            e += 1
        if e + 14 >= 31:
            raise Q4Error("%r is too large for float16" % (x,))
        return sign | ((e + 14) << 10) | (n - 1024)
    n = round(a * 16777216.0)  # subnormal: units of 2**-24; n == 1024 is the smallest normal
    return sign | n if n else 0


def prepare_scales(b):
    """float16 scale bits in b (little-endian pairs) -> fixed point, in place, with one shift for all
    (the largest lands in [2**14, 2**15)); returns that wshift. Integers only: board and host agree.
    Q4Matrix.prepare() uses it, and so does a streamed matrix whose nibbles are never all resident."""
    n = len(b)
    emax = 0
    for o in range(0, n, 2):
        e = fp16_exponent(b[o] | (b[o + 1] << 8), False)
        if e > emax:
            emax = e
    shift = fp16_shift(emax)
    for o in range(0, n, 2):
        v = fp16_fixed(b[o] | (b[o + 1] << 8), shift)
        b[o] = v & 255
        b[o + 1] = v >> 8
    return shift


class Q4Matrix:
    """A rows x cols INT4 matrix and its group scales (see the module docstring).

    Q4Matrix(rows, cols) allocates one buffer; Q4Matrix(rows, cols, buf) uses buf (nibbles then
    scales); Q4Matrix(rows, cols, nibbles, scales) uses two buffers. A runtime that streams layers
    through one matrix may keep each layer's prepared scales and set .scales and .wshift per layer
    (attribute stores allocate nothing). With `mins` (a buffer of rows*(cols/32)*2 bytes, or True to
    allocate one) the matrix is asymmetric (KIND_ASYM): q4a_q8.prepare(mat) converts scales and mins
    together."""

    kind = KIND_SYM

    def __init__(self, rows, cols, buf=None, scales=None, mins=None):
        if not isinstance(rows, int) or rows < 1:
            raise Q4Error("rows must be a positive int, got %r" % (rows,))
        check_len(cols, "cols")
        self.rows = rows
        self.cols = cols
        self.ng = cols // GROUP
        nib = rows * cols // 2
        self.nib_bytes = nib
        if buf is None:
            if scales is not None:
                raise Q4Error("Q4Matrix: scales given without the nibble buffer")
            buf = bytearray(nbytes(rows, cols))
        _check_buffer(buf, nib if scales is not None else nbytes(rows, cols), 4, "Q4Matrix buffer")
        if scales is None:
            scales = memoryview(buf)[nib:]
        else:
            _check_buffer(scales, rows * self.ng * 2, 2, "Q4Matrix scales")
        self.buf = buf
        self.scales = scales
        self.mins = None
        self.wshift = None  # set by prepare()
        if mins is not None:
            self.set_mins(bytearray(rows * self.ng * 2) if mins is True else mins)
        self.cache = None   # backend-private derived data (numpy), checked against the contents

    def prepare(self):
        """Load time: turn the float16 scale bits into fixed point, in place.

        Call it once after every load of float16 bits into .scales. Integers only, so the board and the
        host get the same scales. An asymmetric matrix (with mins) is prepared by q4a_q8.prepare(mat):
        that form's conversion lives there, so a symmetric-INT4 board never loads it."""
        if self.mins is not None:
            raise Q4Error("asymmetric Q4Matrix (with mins): prepare it with q4a_q8.prepare(mat)")
        self.wshift = prepare_scales(self.scales)
        return self

    def set_mins(self, mins):
        """Make this matrix asymmetric with the float16 mins in `mins` (rows*(cols/32)*2 bytes)."""
        _check_buffer(mins, self.rows * self.ng * 2, 2, "Q4Matrix mins")
        self.mins = mins
        self.kind = KIND_ASYM
        self.wshift = None
        return self

    def min_fixed(self, r, g):
        """Prepared mf (int16) of group g of row r of an asymmetric matrix, 0 for a symmetric one."""
        if self.mins is None:
            return 0
        o = 2 * (r * self.ng + g)
        v = self.mins[o] | (self.mins[o + 1] << 8)
        return v - 65536 if v & 0x8000 else v

    def scale(self, r, g):
        """Fixed-point scale of group g of row r (after prepare)."""
        o = 2 * (r * self.ng + g)
        return self.scales[o] | (self.scales[o + 1] << 8)

    def weight(self, r, c):
        """The int4 weight q in [-8, 7] at (r, c)."""
        b = self.buf[(r * self.cols + c) >> 1]
        return ((b >> 4) if c & 1 else (b & 15)) - 8


def _check_buffer(buf, size, align, what):
    if not isinstance(buf, (bytearray, memoryview)):
        raise Q4Error("%s must be a bytearray or memoryview, got %s" % (what, type(buf).__name__))
    if len(buf) != size:
        raise Q4Error("%s must have %d bytes, has %d" % (what, size, len(buf)))
    if _addressof is not None and _addressof(buf) & (align - 1):
        # the viper kernels load 16- and 32-bit words: unaligned loads fault on Cortex-M0+
        raise Q4Error("%s must start on a %d-byte boundary" % (what, align))


class QAct:
    """An activation vector of n values as int8 groups of 32 with power-of-two scales (info).

    q holds q + 128 per value (offset-binary: the viper loop then needs no sign extension)."""

    def __init__(self, n):
        check_len(n, "vector length")
        ng = n // GROUP
        self.n = n
        self.ng = ng
        self.q = bytearray(n)
        self.info = array("i", bytes(4 * (I_HDR + 2 * ng)))
        self.info[I_N] = n
        self.info[I_NG] = ng
        self.info[I_H] = ceil_log2(ng)
        self.out1 = array("i", [0])  # scratch for dot()

    def value(self, i):
        """The int8 value q of element i."""
        return self.q[i] - 128


# ---- plain-Python kernels (the reference) ----
# Bounds (32-bit signed everywhere; see docs/KERNELS.md): |q_w| <= 8, |q_a| <= 127, so a group's
# accumulator |acc| <= 32*8*127 = 32512 < 2**15; ws < 2**15, so |acc*ws| < 2**30; every group
# term is shifted right by at least H = ceil(log2(ng)) so the row sum |T| <= ng * 2**(30-H) <= 2**30.
# With n = q_w + 8 and u = q_a + 128 stored: sum(q_w * q_a) = sum(n*u) - 128*sum(n) - 8*sum(q_a),
# where sum(n*u) <= 32*15*255 = 122400 and the group's sum(q_a) is kept in act.info.

def quantize_act(act, x):
    """x (Q16, act.n values) -> act.q (int8) and act.info (group shifts and sums)."""
    q = act.q
    info = act.info
    ng = act.ng
    h = info[I_H]
    emax = 0
    base = 0
    for g in range(ng):
        amax = 0
        for i in range(base, base + GROUP):
            v = x[i]
            if v < 0:
                v = -v
            if v > amax:
                amax = v
        if amax > LIM:
            amax = LIM
        e = 0
        while (amax + ((1 << e) >> 1)) >> e > 127:  # e <= 24 because amax <= 2**30 - 1
            e += 1
        half = (1 << e) >> 1
        s = 0
        for i in range(base, base + GROUP):
            v = x[i]
            if v > LIM:
                v = LIM
            elif v < -LIM:
                v = -LIM
            v = (v + half) >> e  # in [-127, 127]: (amax + half) >> e <= 127 (docs/KERNELS.md)
            q[i] = v + 128
            s += v
        info[I_HDR + g] = e
        info[I_HDR + ng + g] = s
        if e > emax:
            emax = e
        base += GROUP
    for g in range(ng):
        info[I_HDR + g] = emax - info[I_HDR + g] + h
    info[I_EH] = emax + h


def shift_sat(v, sh):
    """v * 2**sh rounded (half up) for sh < 0, saturated to +-LIM for sh >= 0. Needs |v| <= 2**30."""
    if sh >= 0:
        m = LIM >> sh if sh <= 30 else 0
        if v > m:
            return LIM
        if v < -m:
            return -LIM
        return v << sh
    sh = -sh
    if sh > 30:
        return 0
    return (v + (1 << (sh - 1))) >> sh


def mulshift(a, f, s):
    """a * f * 2**-s rounded half away from zero and saturated to +-LIM, exactly, for |f| <= 2**15
    and any a (clamped to +-LIM first) and s. No intermediate reaches 2**31: a = hi * 2**15 + lo
    with hi, lo < 2**15 gives the partial products u = hi * f and v = lo * f, both < 2**30."""
    neg = (a < 0) != (f < 0)
    if a < 0:
        a = -a
    if a > LIM:
        a = LIM
    if f < 0:
        f = -f
    u = (a >> 15) * f
    v = (a & 32767) * f
    if s >= 15:
        if s > 45:  # a * f < 2**45
            q = 0
        elif s == 15:
            q = u + ((v + 16384) >> 15)
        else:  # the rounding constant 2**(s-1) is a multiple of 2**15: add it to floor(a*f / 2**15)
            q = (u + (v >> 15) + (1 << (s - 16))) >> (s - 15)
    elif s > 0:
        if u > LIM >> (15 - s):
            q = LIM
        else:
            q = (u << (15 - s)) + ((v + (1 << (s - 1))) >> s)
    elif u >= 32768 or -s > 30:
        q = LIM if u or v else 0
    else:
        q = (u << 15) + v  # < 2**31
        q = LIM if q > LIM >> -s else q << -s
    if q > LIM:
        q = LIM
    return -q if neg else q


def matvec(out, mat, act, r0, r1):
    """out[r - r0] = row r of mat times act, Q16, for r0 <= r < r1."""
    if mat.kind == KIND_Q8:  # a Q8Matrix brings its own plain kernel (shared/q4a_q8.py): no import here
        mat.plain_matvec(out, act, r0, r1)
        return
    w = mat.buf
    q = act.q
    info = act.info
    ng = mat.ng
    half = mat.cols >> 1
    sc = mat.scales
    mn = mat.mins  # asymmetric: + mf * sum(q_a) per group, |asum * mf| < 4064 * 2**14 < 2**26
    sh = info[I_EH] - mat.wshift
    for r in range(r0, r1):
        wi = r * half
        so = 2 * r * ng
        t = 0
        for g in range(ng):
            acc = 0
            ns = 0
            qi = g * GROUP
            for j in range(wi, wi + 16):
                b = w[j]
                lo = b & 15
                hi = b >> 4
                acc += lo * q[qi] + hi * q[qi + 1]
                ns += lo + hi
                qi += 2
            wi += 16
            asum = info[I_HDR + ng + g]
            acc -= (ns << 7) + (asum << 3)  # = sum(q_w * q_a), |acc| <= 32512
            s = info[I_HDR + g]
            if s <= 30:
                acc = acc * (sc[so] | (sc[so + 1] << 8))
                if mn is not None:  # ws < 2**14 here: |acc * ws + asum * mf| < 2**29 + 2**26
                    mf = mn[so] | (mn[so + 1] << 8)
                    if mf & 0x8000:
                        mf -= 0x10000
                    acc += asum * mf
                t += (acc + ((1 << s) >> 1)) >> s
            so += 2
        out[r - r0] = shift_sat(t, sh)


def group_dots(out, mat, act, row):
    """out[g] = sum over group g of q_w * q_a for one row: the raw integer dot products (q_w = nibble - 8
    for Q4 matrices, also asymmetric ones; the int8 weight for a Q8Matrix)."""
    if mat.kind == KIND_Q8:
        mat.plain_group_dots(out, act, row)
        return
    w = mat.buf
    q = act.q
    wi = row * (mat.cols >> 1)
    qi = 0
    for g in range(mat.ng):
        acc = 0
        for j in range(wi, wi + 16):
            b = w[j]
            acc += ((b & 15) - 8) * (q[qi] - 128) + ((b >> 4) - 8) * (q[qi + 1] - 128)
            qi += 2
        wi += 16
        out[g] = acc
