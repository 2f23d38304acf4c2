# q4a_q8.py: the asymmetric INT4 and the INT8 weight forms: load-time conversion, Q8Matrix, plain INT8 kernels.
"""Imported only by the code that makes these forms (the model loader for q4a / q8 segments, the
converters, tests), so a board running symmetric INT4 only does not carry this code. The dependency
points one way: this module imports q4, q4 never imports this one. An asymmetric Q4Matrix is prepared
with prepare(mat) below; a Q8Matrix brings its plain kernels as methods, which q4.matvec and
q4.group_dots call for it (the other backends have their own). docs/KERNELS.md has the formats and the bounds.
Integers only, as q4.py."""
from shared.q4 import GROUP, KIND_Q8, Q4Error, Q4Matrix, bitlen, check_len, fp16_exponent, fp16_fixed, shift_sat
from shared.q4 import I_EH, I_HDR, _check_buffer


def round_shift(x, k):
    """x * 2**-k rounded half up (k > 0), or x * 2**-k exactly (k <= 0)."""
    return (x + (1 << (k - 1))) >> k if k > 0 else x << -k


def asym_emax(sc, mn, n, emax):
    """max(emax, exponent fields of the first n bytes of float16 scales sc (>= 0) and mins mn)."""
    for o in range(0, n, 2):
        e = fp16_exponent(sc[o] | (sc[o + 1] << 8), False)
        if e > emax:
            emax = e
        e = fp16_exponent(mn[o] | (mn[o + 1] << 8), True)
        if e > emax:
            emax = e
    return emax


def asym_big(sc, mn, n, t, big):
    """max(big, every fixed(d, t) and |fixed(m, t) + 8 fixed(d, t)|) over the first n bytes."""
    for o in range(0, n, 2):
        d = fp16_fixed(sc[o] | (sc[o + 1] << 8), t)
        m = fp16_fixed(mn[o] | (mn[o + 1] << 8), t) + 8 * d
        if d > big:
            big = d
        if m > big:
            big = m
        elif -m > big:
            big = -m
    return big


def asym_shifts(emax, big):
    """(t, k) of an asymmetric matrix from asym_emax and asym_big: values are taken at the shift
    t = 32 - emax (all < 2**22), then rounded by k bits so the largest lands below 2**14; the matrix's
    wshift is t - k. (0, 0) for an all-zero matrix. A streamed reader scans the file's scales and mins
    in chunks with the same two functions and converts rows as prepare_asym does."""
    if emax == 0:
        return 0, 0
    t = 32 - emax
    if big == 0:
        return t, t
    k = bitlen(big) - 14
    if k > 0 and round_shift(big, k) >= 1 << 14:
        k += 1
    return t, k


def asym_scan(reader, sname, mname, chunk):
    """asym_shifts of a matrix whose float16 scales and mins are the MBF segments sname and mname, read
    in lockstep through two buffers of `chunk` bytes (a streamed embedding never holds them all)."""
    n = reader.seg(sname).length
    a = bytearray(chunk)
    b = bytearray(chunk)
    emax = big = 0
    for phase in (0, 1):
        pos = 0
        while pos < n:
            k = chunk if n - pos >= chunk else n - pos
            ca = a if k == chunk else memoryview(a)[0:k]
            cb = b if k == chunk else memoryview(b)[0:k]
            reader.read_range(sname, pos, ca)
            reader.read_range(mname, pos, cb)
            if phase == 0:
                emax = asym_emax(ca, cb, k, emax)
            else:
                big = asym_big(ca, cb, k, 32 - emax, big)
            pos += k
        if emax == 0:
            break
    return asym_shifts(emax, big)


def asym_fixed_min(hd, hm, t, k):
    """The prepared mf (signed) of float16 scale bits hd and min bits hm, given (t, k)."""
    return round_shift(fp16_fixed(hm, t) + 8 * fp16_fixed(hd, t), k)


def prepare_asym(sc, mn):
    """Asymmetric scales: float16 scale bits d in sc (>= 0) and min bits m in mn (signed), both
    little-endian pairs, -> in place, integers only: ws = fixed(d) in sc and mf = fixed(m + 8 d) as int16
    in mn, with one shift for all such that every |value| < 2**14 (so |acc*ws| + |asum*mf| < 2**30 in
    the kernel). Returns that wshift (see asym_shifts for the two roundings)."""
    n = len(sc)
    if len(mn) != n:
        raise Q4Error("asymmetric matrix: %d bytes of mins for %d bytes of scales" % (len(mn), n))
    emax = asym_emax(sc, mn, n, 0)
    t = 32 - emax
    t, k = asym_shifts(emax, asym_big(sc, mn, n, t, 0) if emax else 0)
    for o in range(0, n, 2):
        hd = sc[o] | (sc[o + 1] << 8)
        d = round_shift(fp16_fixed(hd, t), k) if emax else 0
        m = (asym_fixed_min(hd, mn[o] | (mn[o + 1] << 8), t, k) if emax else 0) & 0xFFFF  # int16
        sc[o] = d & 255
        sc[o + 1] = d >> 8
        mn[o] = m & 255
        mn[o + 1] = m >> 8
    return t - k


def prepare(mat):
    """Load time, for a matrix of any form: an asymmetric Q4Matrix gets prepare_asym over its scales
    and mins, a Q4Matrix or Q8Matrix its own prepare(). Returns mat."""
    if mat.mins is not None:
        mat.wshift = prepare_asym(mat.scales, mat.mins)
        return mat
    return mat.prepare()


def prepare_scales8(b):
    """Q8Matrix scales: float16 bits -> fixed point ws < 2**11 in place (the largest in [2**10, 2**11)),
    so |acc * ws| <= 32*128*127 * 2047 < 2**30. Returns the wshift."""
    n = len(b)
    emax = 0
    for o in range(0, n, 2):
        e = fp16_exponent(b[o] | (b[o + 1] << 8), False)
        if e > emax:
            emax = e
    shift = 25 - emax if emax else 0
    for o in range(0, n, 2):
        v = fp16_fixed(b[o] | (b[o + 1] << 8), shift)
        b[o] = v & 255
        b[o + 1] = v >> 8
    return shift


class Q8Matrix(Q4Matrix):
    """A rows x cols INT8 matrix (two's complement bytes, row-major) and one float16 scale per group of
    32, prepared to ws < 2**11: value = q * ws * 2**-wshift. Q8Matrix(rows, cols[, buf[, scales]]) as
    Q4Matrix; nib_bytes is the weight byte count (rows * cols). The kernels' matvec takes it as a
    Q4Matrix (same arguments, same output format)."""

    kind = KIND_Q8

    def __init__(self, rows, cols, buf=None, scales=None):
        if not isinstance(rows, int) or rows < 1:
            raise Q4Error("rows must be a positive int, got %r" % (rows,))
        check_len(cols, "cols")
        self.rows = rows
        self.cols = cols
        self.ng = cols // GROUP
        nib = rows * cols
        self.nib_bytes = nib
        full = nib + rows * self.ng * 2
        if buf is None:
            if scales is not None:
                raise Q4Error("Q8Matrix: scales given without the weight buffer")
            buf = bytearray(full)
        _check_buffer(buf, nib if scales is not None else full, 4, "Q8Matrix buffer")
        if scales is None:
            scales = memoryview(buf)[nib:]
        else:
            _check_buffer(scales, rows * self.ng * 2, 2, "Q8Matrix scales")
        self.buf = buf
        self.scales = scales
        self.mins = None
        self.wshift = None
        self.cache = None

    def prepare(self):
        self.wshift = prepare_scales8(self.scales)
        return self

    def weight(self, r, c):
        """The int8 weight at (r, c)."""
        b = self.buf[r * self.cols + c]
        return b - 256 if b & 128 else b

    # the plain kernels of this form: q4.matvec / q4.group_dots hand a KIND_Q8 matrix to these

    def plain_matvec(self, out, act, r0, r1):
        matvec8(out, self, act, r0, r1)

    def plain_group_dots(self, out, act, row):
        group_dots8(out, self, act, row)


def matvec8(out, mat, act, r0, r1):
    """matvec for a Q8Matrix: per group acc = sum(q_w * q_a), |acc| <= 32*128*127 = 520192, ws < 2**11,
    so |acc * ws| < 2**30; the rest as matvec. sum(q_w * u) (u = q_a + 128) <= 32*128*255 < 2**21."""
    w = mat.buf
    q = act.q
    info = act.info
    ng = mat.ng
    cols = mat.cols
    sc = mat.scales
    sh = info[I_EH] - mat.wshift
    for r in range(r0, r1):
        wi = r * cols
        so = 2 * r * ng
        t = 0
        qi = 0
        for g in range(ng):
            acc = 0
            ns = 0
            for j in range(wi, wi + GROUP):
                b = w[j]
                if b & 128:
                    b -= 256
                acc += b * q[qi]
                ns += b
                qi += 1
            wi += GROUP
            acc -= ns << 7
            s = info[I_HDR + g]
            if s <= 30:
                t += (acc * (sc[so] | (sc[so + 1] << 8)) + ((1 << s) >> 1)) >> s
            so += 2
        out[r - r0] = shift_sat(t, sh)


def group_dots8(out, mat, act, row):
    """Raw int8 x int8 group dot products of one Q8Matrix row."""
    w = mat.buf
    q = act.q
    base = row * mat.cols
    for g in range(mat.ng):
        acc = 0
        for j in range(g * GROUP, g * GROUP + GROUP):
            b = w[base + j]
            acc += (b - 256 if b & 128 else b) * (q[j] - 128)
        out[g] = acc

