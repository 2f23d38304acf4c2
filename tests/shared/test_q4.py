# test_q4.py: the W4A8 format and kernels: plain reference vs every backend, extremes, heap, bad input.
from array import array

import testkit
from kernels_ref import assert_same, run_all
from shared import kernels, q4, q4a_q8
from shared.q4 import GROUP, LIM, Q4Error

FP16_ONE = 0x3C00
FP16_MAX = 0x7BFF  # 65504


def make_mat(rng, rows, cols, h_lo=0x2000, h_span=0x1400, nib=None):
    """Random (or constant `nib`) nibbles and float16 scales in [h_lo, h_lo + h_span), prepared."""
    m = q4.Q4Matrix(rows, cols)
    b = m.buf
    for i in range(m.nib_bytes):
        b[i] = rng.below(256) if nib is None else nib | (nib << 4)
    for o in range(m.nib_bytes, len(b), 2):
        h = h_lo + rng.below(h_span) if h_span else h_lo
        b[o] = h & 255
        b[o + 1] = h >> 8
    return m.prepare()


def make_asym(rng, rows, cols, h_lo=0x2000, h_span=0x1400, nib=None, m_lo=None, m_span=None):
    """Random asymmetric matrix: nibbles, float16 scales as make_mat, float16 mins of either sign
    (magnitudes in [m_lo, m_lo + m_span), default the scales' range shifted up by 3 binades), prepared."""
    m = q4.Q4Matrix(rows, cols, None, None, True)
    b = m.buf
    for i in range(m.nib_bytes):
        b[i] = rng.below(256) if nib is None else nib | (nib << 4)
    m_lo = h_lo + 0x0C00 if m_lo is None else m_lo
    m_span = h_span if m_span is None else m_span
    for o in range(0, len(m.scales), 2):
        h = h_lo + rng.below(h_span) if h_span else h_lo
        m.scales[o] = h & 255
        m.scales[o + 1] = h >> 8
        h = (m_lo + rng.below(m_span) if m_span else m_lo) | (0x8000 if rng.below(2) else 0)
        m.mins[o] = h & 255
        m.mins[o + 1] = h >> 8
    return q4a_q8.prepare(m)


def make_q8(rng, rows, cols, h_lo=0x2000, h_span=0x1400, val=None):
    """Random (or constant `val`) int8 weights and float16 scales, prepared."""
    m = q4a_q8.Q8Matrix(rows, cols)
    b = m.buf
    for i in range(m.nib_bytes):
        b[i] = rng.below(256) if val is None else val & 255
    for o in range(m.nib_bytes, len(b), 2):
        h = h_lo + rng.below(h_span) if h_span else h_lo
        b[o] = h & 255
        b[o + 1] = h >> 8
    return m.prepare()


def make_x(rng, n):
    """Groups of very different magnitudes (0 to beyond LIM), some all-zero, some at the limits."""
    x = array("i", bytes(4 * n))
    for g in range(n // GROUP):
        kind = rng.below(6)
        mag = 1 << rng.below(31)
        for i in range(g * GROUP, (g + 1) * GROUP):
            if kind == 0:
                v = 0
            elif kind == 1:
                v = (LIM if rng.below(2) else -LIM - 1) if rng.below(3) == 0 else rng.below(255) - 127
            else:
                v = rng.below(2 * mag + 1) - mag
            x[i] = max(-(1 << 31), min((1 << 31) - 1, v))
    return x


def _matvec_all(m, x):
    act = q4.QAct(m.cols)
    kernels.quantize_act(act, x)
    out = array("i", bytes(4 * m.rows))
    kernels.matvec(out, m, act)
    gd = array("i", bytes(4 * m.ng))
    kernels.group_dots(gd, m, m.rows - 1, act)
    return list(act.q), list(act.info)[q4.I_EH:], list(out), list(gd), kernels.dot(m, 0, act)


# ---- format ----

def test_fp16_bits_known_values():
    for x, h in ((1.0, 0x3C00), (0.5, 0x3800), (-2.0, 0xC000), (65504.0, 0x7BFF), (2.0 ** -24, 1),
                 (2.0 ** -14, 0x0400), (0.0, 0), (0.1, 0x2E66), (1.0 + 2.0 ** -11, 0x3C00), (3.0 * 2.0 ** -12, 0x1200)):
        assert q4.fp16_bits(x) == h, (x, hex(q4.fp16_bits(x)), hex(h))
    testkit.raises(Q4Error, q4.fp16_bits, 65520.0)
    testkit.raises(Q4Error, q4.fp16_bits, float("nan"))


def test_fp16_fixed_is_exact_rounding():
    rng = testkit.Rng(11)
    for _ in range(400):
        h = rng.below(0x7C00)
        emax = max(q4.fp16_exponent(h, False), 1 + rng.below(30))
        shift = q4.fp16_shift(emax)
        v = q4.fp16_fixed(h, shift)
        e = (h >> 10) & 31
        m = (h & 1023) | (1024 if e else 0)
        # exact: value * 2**shift = m * 2**(max(e,1) - 25 + shift); round half up with integers
        k = max(e, 1) - 25 + shift
        want = m << k if k >= 0 else (2 * m + (1 << -k)) // (2 << -k)
        assert v == want, (hex(h), shift, v, want)
        assert v < 1 << 15
    assert q4.fp16_fixed(0x8000 | 0x3C00, 14) == -(1 << 14)
    testkit.raises(Q4Error, q4.fp16_exponent, 0x7C00, False)  # Inf
    testkit.raises(Q4Error, q4.fp16_exponent, 0x7E00, True)   # NaN
    testkit.raises(Q4Error, q4.fp16_exponent, 0xBC00, False)  # negative scale
    assert q4.fp16_exponent(0x8000, False) == 0                # -0 is a zero scale


def test_prepare_converts_scales_in_place():
    rng = testkit.Rng(3)
    m = q4.Q4Matrix(5, 64)
    bits = []
    for o in range(m.nib_bytes, len(m.buf), 2):
        h = 0x0200 + rng.below(0x5000)  # subnormals to 2**6
        bits.append(h)
        m.buf[o] = h & 255
        m.buf[o + 1] = h >> 8
    m.prepare()
    emax = max(max((h >> 10) & 31, 1) for h in bits)
    assert m.wshift == 29 - emax
    got = [m.scale(r, g) for r in range(5) for g in range(2)]
    assert got == [q4.fp16_fixed(h, m.wshift) for h in bits]
    assert (1 << 14) <= max(got) < (1 << 15)
    m2 = q4.Q4Matrix(1, 32)
    m2.buf[16] = FP16_MAX & 255
    m2.buf[17] = FP16_MAX >> 8
    m2.prepare()
    assert m2.wshift == -1 and m2.scale(0, 0) == 2047 << 4
    zero = q4.Q4Matrix(2, 32).prepare()  # all-zero scales: shift 0, scales 0
    assert zero.wshift == 0 and zero.scale(1, 0) == 0


def test_nibble_order_low_then_high():
    m = q4.Q4Matrix(1, 32)
    m.buf[0] = 0x0F | (0x0 << 4)  # weight 0 = 15 - 8 = 7, weight 1 = 0 - 8 = -8
    m.buf[1] = 0x8 | (0x9 << 4)   # weight 2 = 0, weight 3 = 1
    assert [m.weight(0, c) for c in range(4)] == [7, -8, 0, 1]


def test_quantize_act_definition():
    rng = testkit.Rng(5)
    x = make_x(rng, 256)
    act = q4.QAct(256)
    kernels.use("plain")
    kernels.quantize_act(act, x)
    info = act.info
    ng = act.ng
    h = info[q4.I_H]
    emax = info[q4.I_EH] - h
    assert h == 3
    for g in range(ng):
        e = emax - (info[q4.I_HDR + g] - h)
        s = 0
        for i in range(g * GROUP, (g + 1) * GROUP):
            v = max(-LIM, min(LIM, x[i]))
            qv = act.value(i)
            s += qv
            assert -127 <= qv <= 127
            assert abs(v - (qv << e)) <= (1 << e) >> 1, (g, i, v, qv, e)  # rounded to the step 2**e
        assert s == info[q4.I_HDR + ng + g]
        if e:  # e is the smallest exponent: the group's largest value uses more than 6 bits
            assert max(abs(act.value(i)) for i in range(g * GROUP, (g + 1) * GROUP)) >= 64


# ---- kernels: every backend equals the plain reference ----

def test_matvec_backends_agree():
    rng = testkit.Rng(21)
    for rows, cols in ((7, 32), (12, 96), (5, 160)):
        m = make_mat(rng, rows, cols)
        for _ in range(3):
            assert_same(run_all(_matvec_all, m, make_x(rng, cols)), "matvec %dx%d" % (rows, cols))


def test_matvec_is_the_documented_formula():
    """matvec == sum_g round(acc_g * ws_g / 2**sg) shifted by E + H - wshift (docs/KERNELS.md)."""
    rng = testkit.Rng(8)
    m = make_mat(rng, 6, 128, 0x1800, 0x2000)
    x = make_x(rng, 128)
    act = q4.QAct(128)
    kernels.quantize_act(act, x)
    out = array("i", bytes(4 * 6))
    kernels.matvec(out, m, act)
    gd = array("i", bytes(4 * m.ng))
    info = act.info
    for r in range(6):
        kernels.group_dots(gd, m, r, act)
        t = 0
        for g in range(m.ng):
            want = 0
            for c in range(g * GROUP, (g + 1) * GROUP):
                want += m.weight(r, c) * act.value(c)
            assert gd[g] == want
            s = info[q4.I_HDR + g]
            if s <= 30:
                t += (gd[g] * m.scale(r, g) + ((1 << s) >> 1)) >> s
        assert out[r] == q4.shift_sat(t, info[q4.I_EH] - m.wshift)


def test_extremes_all_backends():
    rng = testkit.Rng(1)
    big = array("i", [127 << 23] * 64)   # quantises to +127 everywhere (e = 23)
    neg = array("i", [-(127 << 23)] * 64)
    lim = array("i", [LIM] * 32 + [-LIM - 1] * 32)
    for nib, h, x, what in ((15, FP16_MAX, big, "+7 x +127, max scales"),
                            (0, FP16_MAX, neg, "-8 x -127, max scales"),
                            (15, FP16_MAX, neg, "+7 x -127, max scales"),
                            (0, 0x0001, big, "-8 x +127, smallest subnormal scales"),
                            (15, 0x1000, lim, "+7 x +-LIM"),
                            (0, FP16_ONE, big, "-8 x +127, scale 1.0")):
        m = make_mat(rng, 3, 64, h, 0, nib)
        res = run_all(_matvec_all, m, x)
        assert_same(res, what)
        q, _, out, gd, _ = res["plain"]
        if x is big or x is neg:
            assert q == [255 if x is big else 1] * 64  # q + 128 of +-127
            assert gd == [(7 if nib else -8) * (127 if x is big else -127) * 32] * 2, (what, gd)
        if h == FP16_MAX:
            assert out == [LIM if (nib == 0) == (x is neg) else -LIM] * 3, (what, out)
    # the largest group product: -8 * -127 * 32 = 32512 times the largest fixed scale 32752 < 2**30
    assert 32512 * 32752 < 1 << 30


def test_separate_scales_and_per_layer_swap():
    """Nibbles and scales in two buffers give the same results; a streaming runtime can keep each
    layer's prepared scales and repoint .scales / .wshift (attribute stores allocate nothing)."""
    rng = testkit.Rng(14)
    a = make_mat(rng, 6, 64)
    b = make_mat(rng, 6, 64, 0x0800, 0x3000)
    two = q4.Q4Matrix(6, 64, bytearray(a.buf[:a.nib_bytes]), bytearray(a.scales))
    two.wshift = a.wshift  # a's scales are prepared already
    x = make_x(rng, 64)
    for mat_a, mat_b in ((a, b), (two, b)):
        assert run_all(_matvec_all, mat_a, x) == run_all(_matvec_all, a, x)
    layer_b = (bytearray(b.scales), b.wshift)
    two.buf[:] = b.buf[:b.nib_bytes]  # "stream" layer b's nibbles in, swap its scales
    two.scales, two.wshift = layer_b
    assert_same(run_all(_matvec_all, two, x), "swapped layer")
    assert run_all(_matvec_all, two, x) == run_all(_matvec_all, b, x)


def test_dot_equals_matvec_row_and_ranges():
    rng = testkit.Rng(4)
    m = make_mat(rng, 9, 64)
    act = q4.QAct(64)
    kernels.quantize_act(act, make_x(rng, 64))
    full = array("i", bytes(36))
    kernels.matvec(full, m, act)
    part = array("i", bytes(12))
    kernels.matvec(part, m, act, 4, 7)
    assert list(part) == list(full)[4:7]
    assert [kernels.dot(m, r, act) for r in range(9)] == list(full)


# ---- asymmetric INT4 (Q4_1 style) and INT8 (Q8_0 style) matrices ----

def _fp16_value_x(h, shift):
    """value(h) * 2**shift as an exact fraction (num, den) of ints (sign included)."""
    e = (h >> 10) & 31
    m = (h & 1023) | (1024 if e else 0)
    k = max(e, 1) - 25 + shift
    num = m << k if k >= 0 else m
    den = 1 if k >= 0 else 1 << -k
    return (-num if h & 0x8000 else num), den


def test_prepare_asym_definition():
    rng = testkit.Rng(31)
    for h_lo, h_span, m_lo, m_span in ((0x2000, 0x1400, 0x2C00, 0x1400), (0x0200, 0x3000, 0x0001, 0x0400),
                                       (0x3C00, 0x0800, 0x4000, 0x3B00), (0x7800, 0x03FF, 0x7800, 0x03FF)):
        m = q4.Q4Matrix(3, 64, None, None, True)
        raw = []
        for o in range(0, len(m.scales), 2):
            d = h_lo + rng.below(h_span)
            mn = (m_lo + rng.below(m_span)) | (0x8000 if rng.below(2) else 0)
            raw.append((d, mn))
            m.scales[o], m.scales[o + 1] = d & 255, d >> 8
            m.mins[o], m.mins[o + 1] = mn & 255, mn >> 8
        e = testkit.raises(Q4Error, m.prepare)  # q4 holds no asymmetric conversion: it names where it is
        assert "q4a_q8.prepare" in str(e)
        assert q4a_q8.prepare(m) is m and m.kind == q4.KIND_ASYM
        big = 0
        for i in range(len(raw)):
            r, g = i // m.ng, i % m.ng
            ws, mf = m.scale(r, g), m.min_fixed(r, g)
            assert 0 <= ws < 1 << 14 and -(1 << 14) < mf < 1 << 14, (ws, mf)
            big = max(big, ws, abs(mf))
            # the fixed values are the float ones to within one LSB plus the first rounding at t
            for h, got in ((raw[i][0], ws), (None, mf)):
                if h is None:
                    nd, dd = _fp16_value_x(raw[i][1], m.wshift)
                    n8, d8 = _fp16_value_x(raw[i][0], m.wshift)
                    num, den = nd * d8 + 8 * n8 * dd, dd * d8
                else:
                    num, den = _fp16_value_x(h, m.wshift)
                assert abs(got * den - num) <= den, (hex(raw[i][0]), hex(raw[i][1]), got, num / den)
        assert big >= 1 << 13  # the shift uses the range: the largest value lands in [2**13, 2**14)
    zero = q4a_q8.prepare(q4.Q4Matrix(2, 32, None, None, True))
    assert zero.wshift == 0 and zero.scale(1, 0) == 0 and zero.min_fixed(1, 0) == 0
    bad = q4.Q4Matrix(1, 32, None, None, True)
    bad.scales[1] = 0xBC  # scale -1.0
    testkit.raises(Q4Error, q4a_q8.prepare, bad)
    bad.scales[1] = 0x3C
    bad.mins[1] = 0xFC  # min -Inf
    testkit.raises(Q4Error, q4a_q8.prepare, bad)
    testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, None, None, bytearray(2))  # mins: 2 groups * 2 bytes
    q = q4a_q8.Q8Matrix(2, 64)
    for i in range(4):
        o = q.nib_bytes + 2 * i
        q.buf[o], q.buf[o + 1] = 0x00, 0x3C + 4 * i  # 1.0 * 2**i
    assert q4a_q8.prepare(q) is q
    assert max(q.scale(r, g) for r in range(2) for g in range(2)) == 1 << 10
    assert q.kind == q4.KIND_Q8 and q.weight(0, 0) == 0
    q.buf[1] = 0x80
    q.buf[2] = 0x7F
    assert q.weight(0, 1) == -128 and q.weight(0, 2) == 127
    testkit.raises(Q4Error, q4a_q8.Q8Matrix, 2, 32, bytearray(64))  # 64 weights + 4 scale bytes
    testkit.raises(Q4Error, q4a_q8.Q8Matrix, 2, 32, bytearray(68), bytearray(4))


def test_asym_and_q8_backends_agree():
    rng = testkit.Rng(22)
    for rows, cols in ((7, 32), (5, 160)):
        for m in (make_asym(rng, rows, cols), make_asym(rng, rows, cols, 0x0400, 0x3000, None, 0x0001, 0x5000),
                  make_q8(rng, rows, cols), make_q8(rng, rows, cols, 0x0400, 0x4000)):
            for _ in range(2):
                assert_same(run_all(_matvec_all, m, make_x(rng, cols)), "kind %d %dx%d" % (m.kind, rows, cols))


def test_asym_and_q8_documented_formula():
    """asym: sum_g round((acc_g * ws_g + asum_g * mf_g) / 2**sg); q8: sum_g round(acc_g * ws_g / 2**sg);
    the weight value of an asymmetric matrix is ((nibble - 8) * ws + mf) * 2**-wshift."""
    rng = testkit.Rng(18)
    for m in (make_asym(rng, 5, 96, 0x1800, 0x2000), make_q8(rng, 5, 96, 0x1800, 0x2000)):
        x = make_x(rng, 96)
        act = q4.QAct(96)
        kernels.quantize_act(act, x)
        out = array("i", bytes(4 * 5))
        kernels.matvec(out, m, act)
        gd = array("i", bytes(4 * m.ng))
        info = act.info
        for r in range(5):
            kernels.group_dots(gd, m, r, act)
            t = 0
            for g in range(m.ng):
                want = 0
                for c in range(g * GROUP, (g + 1) * GROUP):
                    want += (m.weight(r, c) if m.kind == q4.KIND_Q8 else m.weight(r, c)) * act.value(c)
                assert gd[g] == want
                s = info[q4.I_HDR + g]
                if s <= 30:
                    t += (gd[g] * m.scale(r, g) + info[q4.I_HDR + m.ng + g] * m.min_fixed(r, g)
                          + ((1 << s) >> 1)) >> s
            assert out[r] == q4.shift_sat(t, info[q4.I_EH] - m.wshift), (m.kind, r)


def test_asym_and_q8_extremes():
    rng = testkit.Rng(6)
    big = array("i", [127 << 23] * 64)
    neg = array("i", [-(127 << 23)] * 64)
    for m, x, what in ((make_asym(rng, 3, 64, FP16_MAX, 0, 15, FP16_MAX, 0), big, "asym 15 x +127, max scale/min"),
                       (make_asym(rng, 3, 64, FP16_MAX, 0, 0, FP16_MAX, 0), neg, "asym 0 x -127, max"),
                       (make_asym(rng, 3, 64, 0x0001, 0, 0, 0x0001, 0), big, "asym subnormal"),
                       (make_q8(rng, 3, 64, FP16_MAX, 0, -128), big, "q8 -128 x +127, max scale"),
                       (make_q8(rng, 3, 64, FP16_MAX, 0, -128), neg, "q8 -128 x -127, max scale"),
                       (make_q8(rng, 3, 64, FP16_MAX, 0, 127), neg, "q8 127 x -127, max scale")):
        res = run_all(_matvec_all, m, x)
        assert_same(res, what)
        out = res["plain"][2]
        if m.kind == q4.KIND_Q8:
            assert out == [LIM if (m.weight(0, 0) > 0) == (x is big) else -LIM] * 3, (what, out)
    assert 32512 * ((1 << 14) - 1) + 4064 * (1 << 14) < 1 << 30  # asym group term
    assert 32 * 128 * 127 * 2047 < 1 << 30  # q8 group term


# ---- no allocation in the hot path ----

def _hot_q4(ctx):
    act, x, out, m, gd = ctx
    kernels.quantize_act(act, x)
    kernels.matvec(out, m, act)
    kernels.matvec(out, m, act, 1, 3)
    kernels.group_dots(gd, m, 2, act)
    return kernels.dot(m, 3, act)


def test_hot_path_allocates_nothing():
    rng = testkit.Rng(9)
    x = make_x(rng, 64)
    for m in (make_mat(rng, 8, 64), make_asym(rng, 8, 64), make_q8(rng, 8, 64)):
        ctx = (q4.QAct(64), x, array("i", bytes(32)), m, array("i", bytes(8)))
        results = {}
        try:
            for name in ("native", "viper", "plain"):
                if kernels.load(name) is None:
                    continue
                kernels.use(name)
                before = testkit.heap_in_use()
                got = testkit.run_locked(_hot_q4, ctx)
                after = testkit.heap_in_use()
                results[name] = got
                if before is not None:
                    assert after == before, (name, m.kind, before, after)
        finally:
            kernels.use()
        if testkit.IS_MP:
            assert "viper" in results, "viper backend missing on MicroPython"
        if testkit.IS_MP and not testkit.IS_CP:
            assert "native" in results, "q4nat (the C kernels) missing on MicroPython's path"
        assert len(set(results.values())) == 1, (m.kind, results)


def test_default_backend_per_interpreter():
    names = kernels.available()
    assert names[-1] == "plain"
    if testkit.IS_CP:  # the Pico's CircuitPython has no native code emitter: ulab is its fast backend
        assert kernels.default_name() == "ulab" and "ulab" in names
    elif testkit.IS_MP:  # the tests put q4nat.mpy on the path, as a MicroPython build does
        assert kernels.default_name() == "native" and names[:2] == ["native", "viper"]
        from shared import q4_viper
        from shared import fixedmath
        assert q4_viper.HDR == q4.I_HDR and q4_viper.LIM == LIM
        assert q4_viper.EXP_A == fixedmath.EXP_A and q4_viper.EXP_B == fixedmath.EXP_B
        assert q4_viper.EXP_END == fixedmath.EXP_END
    else:
        assert kernels.default_name() in ("numpy", "plain")
    assert kernels.use("plain") == "plain" and kernels.backend() == "plain"
    kernels.use()
    testkit.raises(Q4Error, kernels.use, "cuda")
    testkit.raises(Q4Error, kernels.use, "numpy" if testkit.IS_MP else "viper")
    if not testkit.IS_MP:
        testkit.raises(Q4Error, kernels.use, "native")  # q4nat is a MicroPython native module


# ---- bad input ----

def test_bad_shapes_and_buffers():
    e = testkit.raises(Q4Error, q4.Q4Matrix, 4, 48)
    assert "multiple of 32" in str(e)
    testkit.raises(Q4Error, q4.Q4Matrix, 0, 32)
    testkit.raises(Q4Error, q4.Q4Matrix, 2, 0)
    testkit.raises(Q4Error, q4.QAct, 31)
    testkit.raises(Q4Error, q4.QAct, 32.0)
    e = testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, bytearray(10))
    assert "must have 36 bytes" in str(e)
    testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, bytearray(32), bytearray(3))  # scales: 2 groups * 2 bytes
    testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, bytearray(36), bytearray(4))  # nibbles alone are 32 bytes
    testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, None, bytearray(4))
    testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, b"\x00" * 36)  # read-only: prepare() could not convert
    assert isinstance(Q4Error("x"), ValueError)
    raw = bytearray(q4.nbytes(2, 32) + 1)
    if testkit.IS_MP and not testkit.IS_CP:
        # the viper kernels load 16/32-bit words: an odd start would fault a Cortex-M0+ (CircuitPython
        # runs no viper there, and has no uctypes to check with)
        e = testkit.raises(Q4Error, q4.Q4Matrix, 2, 32, memoryview(raw)[1:])
        assert "4-byte boundary" in str(e)
    else:
        q4.Q4Matrix(2, 32, memoryview(raw)[1:])
    bad = q4.Q4Matrix(1, 32)
    bad.buf[17] = 0x7C  # +Inf scale
    testkit.raises(Q4Error, bad.prepare)
    bad.buf[17] = 0xBC  # -1.0
    testkit.raises(Q4Error, bad.prepare)


def test_bad_kernel_arguments():
    rng = testkit.Rng(2)
    m = make_mat(rng, 4, 64)
    act = q4.QAct(64)
    x = make_x(rng, 64)
    kernels.quantize_act(act, x)
    out = array("i", bytes(16))
    testkit.raises(Q4Error, kernels.quantize_act, act, array("i", bytes(4 * 63)))
    testkit.raises(Q4Error, kernels.quantize_act, act, bytearray(256))
    testkit.raises(Q4Error, kernels.quantize_act, x, x)
    e = testkit.raises(Q4Error, kernels.matvec, out, m, q4.QAct(96))
    assert "96 values" in str(e)
    testkit.raises(Q4Error, kernels.matvec, array("i", bytes(12)), m, act)
    testkit.raises(Q4Error, kernels.matvec, bytearray(16), m, act)
    testkit.raises(Q4Error, kernels.matvec, [0] * 4, m, act)
    testkit.raises(Q4Error, kernels.matvec, out, m, act, 3, 2)
    testkit.raises(Q4Error, kernels.matvec, out, m, act, 0, 5)
    testkit.raises(Q4Error, kernels.matvec, out, act, m)
    testkit.raises(Q4Error, kernels.matvec, out, q4.Q4Matrix(4, 64), act)  # not prepared
    testkit.raises(Q4Error, kernels.group_dots, out, m, 4, act)
    testkit.raises(Q4Error, kernels.group_dots, array("i", [0]), m, 0, act)
    testkit.raises(Q4Error, kernels.dot, m, 4, act)
    if not testkit.IS_MP:  # the element type is visible without allocating only on CPython
        testkit.raises(Q4Error, kernels.matvec, array("h", bytes(32)), m, act)
        testkit.raises(Q4Error, kernels.quantize_act, act, array("f", [0.0] * 64))
