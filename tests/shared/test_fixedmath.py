# test_fixedmath.py: RMSNorm, RoPE, softmax, SiLU/SwiGLU in fixed point: tables, backends, extremes, heap.
import binascii
from array import array

import testkit
from kernels_ref import assert_same, run_all
from shared import fixedmath, kernels
from shared.fixedmath import EXP_TAB, SIG_TAB, NormWeight, RopeTable
from shared.q4 import LIM, Q4Error

ONE = 1 << 16  # 1.0 in Q16


def rvec(rng, n, mag):
    return array("i", [rng.below(2 * mag + 1) - mag for _ in range(n)])


def vectors(rng, n):
    """Random vectors of many magnitudes plus the extremes."""
    out = [rvec(rng, n, 1 << b) for b in (0, 4, 12, 17, 20, 26, 30)]
    out.append(array("i", [LIM] * n))
    out.append(array("i", [-LIM - 1] * n))  # -2**31: clamped to -LIM
    out.append(array("i", [(1 << 31) - 1 if i % 2 else -(1 << 31) for i in range(n)]))
    out.append(array("i", [0] * n))
    one_hot = array("i", [0] * n)
    one_hot[n // 3] = LIM
    out.append(one_hot)
    return out


def gains(rng, n):
    """float16 gain bits: around 1.0, the float16 maximum, tiny, negative, mixed."""
    return [[0x3C00] * n,
            [0x3800 + rng.below(0x0C00) for _ in range(n)],
            [0x7BFF] * n,
            [0x0001 + rng.below(4) for _ in range(n)],
            [(0x8000 if rng.below(2) else 0) | (0x2000 + rng.below(0x5000)) for _ in range(n)]]


# ---- tables ----

def test_tables_are_the_same_bits_everywhere():
    # crc32 of the tables as CPython builds them: MicroPython must build the identical bits
    assert binascii.crc32(bytes(EXP_TAB)) == 3879055772
    assert binascii.crc32(bytes(SIG_TAB)) == 2241515913
    assert binascii.crc32(bytes(RopeTable(64, 40, 10000, 0).tab)) == 2590885076
    assert binascii.crc32(bytes(RopeTable(32, 20, 100000, 1).tab)) == 33315747
    assert EXP_TAB[0] == 32768 and EXP_TAB[fixedmath.EXP_A] == 0 and EXP_TAB[fixedmath.EXP_B] == 32768
    assert SIG_TAB[0] == 32768 and SIG_TAB[fixedmath.SIG_N] == 0
    rt = RopeTable(8, 3, 10000, 0)
    assert list(rt.tab)[:8] == [32767] * 4 + [0] * 4  # d = 0: cos 1 (saturated Q15), sin 0


def test_tables_equal_float64_rounding():
    if testkit.IS_MP:
        testkit.skip("float64 math is CPython's; the crc test pins MicroPython's tables to the same bits")
    import math
    for a in range(fixedmath.EXP_A):
        e = EXP_TAB[fixedmath.EXP_A + a]
        assert EXP_TAB[a] == math.floor(32768 * math.exp(-a / 8) * 2 ** e + 0.5)
        assert 16384 <= EXP_TAB[a] <= 32768
    for b in range(64):
        assert EXP_TAB[fixedmath.EXP_B + b] == math.floor(32768 * math.exp(-b / 512) + 0.5)
    for k in range(fixedmath.SIG_N + 1):
        assert SIG_TAB[k] == math.floor(65536 / (1 + math.exp(k / 32)) + 0.5)
    for hd, md, theta, style in ((64, 64, 10000, 0), (64, 40, 100000, 1), (128, 30, 500000, 0)):
        rt = RopeTable(hd, md, theta, style)
        for d in range(md + 1):
            for i in range(hd // 2):
                ang = d * theta ** (-2.0 * i / hd)
                c = min(32767, math.floor(math.cos(ang) * 32768 + 0.5))
                s = min(32767, math.floor(math.sin(ang) * 32768 + 0.5))
                assert rt.tab[d * hd + i] == c and rt.tab[d * hd + hd // 2 + i] == s, (hd, d, i)


def test_isqrt_and_exp():
    rng = testkit.Rng(12)
    for _ in range(2000):
        v = rng.next() >> 2
        r = fixedmath.isqrt(v)
        assert r * r <= v < (r + 1) * (r + 1)
    assert fixedmath.isqrt(0) == 0 and fixedmath.isqrt((1 << 30) - 1) == 32767
    assert fixedmath.exp_fix(0, 0) == 32768 and fixedmath.exp_fix(0, 15) == 1 << 30
    assert fixedmath.exp_fix(24 << 16, 15) == 0 and fixedmath.exp_fix((1 << 31) - 1, 0) == 0
    assert abs(fixedmath.exp_fix(16 << 16, 15) - 120) <= 1  # exp(-16) * 2**30 = 120.4
    assert fixedmath.exp_fix(16 << 16, 0) == 0
    # exp(-1) * 2**15 = 12054.6; exp(-2.5) * 2**25 = 2754245.6; exp(-15) * 2**30 = 329.0:
    # about 15 significant bits at every magnitude (the table is mantissa + exponent)
    assert abs(fixedmath.exp_fix(ONE, 0) - 12055) <= 1
    assert abs(fixedmath.exp_fix(5 * ONE // 2, 10) - 2754246) <= 2754246 >> 14
    assert abs(fixedmath.exp_fix(15 * ONE, 15) - 329) <= 1


# ---- RMSNorm ----

def _rms(x, nw):
    out = array("i", bytes(4 * nw.n))
    kernels.rmsnorm(out, x, nw)
    return list(out)


def test_rmsnorm_backends_and_extremes():
    rng = testkit.Rng(31)
    for n, eps in ((96, 1e-5), (33, 0.0), (1, 1e-6), (200, 0.2)):
        for bits in gains(rng, n):
            nw = NormWeight(n, eps).load_fp16(bits)
            for x in vectors(rng, n):
                assert_same(run_all(_rms, x, nw), "rmsnorm n=%d eps=%r" % (n, eps))


def test_rmsnorm_values():
    nw = NormWeight(64, 0.0).load_fp16([0x3C00] * 64)
    for c in (1, 300, 1 << 20, LIM):  # x = (c, -c, c, ...) has rms c: the output is +-1.0
        x = array("i", [c if i % 2 else -c for i in range(64)])
        y = _rms(x, nw)
        assert all(abs(abs(v) - ONE) <= 8 for v in y), (c, y[:4])
        assert y[0] < 0 < y[1]
    assert _rms(array("i", [0] * 64), nw) == [0] * 64  # eps = 0 and x = 0: zeros, no division by 0
    one_hot = array("i", [0] * 64)
    one_hot[5] = 12345
    y = _rms(one_hot, nw)
    assert abs(y[5] - 8 * ONE) <= (8 * ONE) >> 14 and y.count(0) == 63  # sqrt(64) = 8
    nw2 = NormWeight(64, 1e-2).load_fp16([0x4000] * 64)  # gain 2, eps 0.01 dominates a tiny x
    x = array("i", [655] * 64)  # 0.01: y = 2 * 0.01 / sqrt(0.0001 + 0.01) = 0.199
    assert abs(_rms(x, nw2)[0] - 13042) <= 16


# ---- RoPE ----

def _rope(x, rt, d, heads):
    out = array("i", bytes(4 * heads * rt.head_dim))
    kernels.rope(out, x, rt, d, heads)
    inplace = array("i", x)
    kernels.rope(inplace, inplace, rt, d, heads)
    assert list(inplace) == list(out)
    return list(out)


def test_rope_backends_and_extremes():
    rng = testkit.Rng(41)
    for style in (0, 1):
        rt = RopeTable(16, 50, 10000, style)
        for x in vectors(rng, 48):
            for d in (0, 1, 7, 50):
                assert_same(run_all(_rope, x, rt, d, 3), "rope style %d d=%d" % (style, d))


def test_rope_values():
    rt = RopeTable(4, 8, 10000, 0)
    x = array("i", [ONE, 0, 0, ONE])
    assert _rope(x, rt, 0, 1) == [ONE - 2, 0, 0, ONE - 2]  # cos 0 is 32767 / 32768
    y = _rope(x, rt, 1, 1)  # pair 0 turns by 1 rad, pair 1 by 0.01 rad
    assert abs(y[0] - 35410) <= 2 and abs(y[1] - 55147) <= 2  # (cos 1, sin 1)
    assert abs(y[2] + 655) <= 2 and abs(y[3] - 65533) <= 2    # (-sin .01, cos .01)
    big = array("i", [LIM, LIM, -LIM, LIM])
    y = _rope(big, RopeTable(4, 8, 10000, 0), 8, 1)  # the norm grows past LIM only by rounding
    assert all(-LIM <= v <= LIM for v in y)


# ---- softmax ----

def _softmax(x, n):
    out = array("i", bytes(4 * n))
    kernels.softmax(out, x, n)
    inplace = array("i", x)
    kernels.softmax(inplace, inplace, n)
    assert list(inplace) == list(out)
    return list(out)


def test_softmax_backends_and_extremes():
    rng = testkit.Rng(51)
    for n in (1, 2, 7, 64, 300):
        for x in vectors(rng, n):
            assert_same(run_all(_softmax, x, n), "softmax n=%d" % n)
        assert_same(run_all(_softmax, rvec(rng, n, 40 * ONE), n), "softmax wide n=%d" % n)


def test_softmax_values():
    assert _softmax(array("i", [123]), 1) == [ONE]
    assert _softmax(array("i", [5 * ONE] * 4), 4) == [ONE // 4] * 4
    assert _softmax(array("i", [LIM, -LIM - 1]), 2) == [ONE, 0]
    y = _softmax(array("i", [0, ONE]), 2)  # e / (1 + e) = 0.731059
    assert abs(y[1] - 47911) <= 2 and abs(y[0] - 17625) <= 2
    rng = testkit.Rng(5)
    for n in (3, 50, 1000):
        y = _softmax(rvec(rng, n, 8 * ONE), n)
        assert abs(sum(y) - ONE) <= n + 2, (n, sum(y))
    x = array("i", [0] * 10)
    testkit.raises(Q4Error, kernels.softmax, x, x, 0)
    testkit.raises(Q4Error, kernels.softmax, x, x, 11)


# ---- SiLU, mul, SwiGLU ----

def _silu(x, n):
    out = array("i", bytes(4 * n))
    kernels.silu(out, x, n)
    return list(out)


def _swiglu(g, u, n):
    out = array("i", bytes(4 * n))
    kernels.swiglu(out, g, u, n)
    inplace = array("i", g)
    kernels.swiglu(inplace, inplace, u, n)
    assert list(inplace) == list(out)
    return list(out)


def test_silu_swiglu_backends_and_extremes():
    rng = testkit.Rng(61)
    vs = vectors(rng, 40)
    for x in vs:
        assert_same(run_all(_silu, x, 40), "silu")
    for i in range(len(vs)):
        assert_same(run_all(_swiglu, vs[i], vs[-1 - i], 40), "swiglu %d" % i)
        assert_same(run_all(_swiglu, vs[i], vs[(i + 3) % len(vs)], 40), "swiglu %d+3" % i)


def test_silu_swiglu_values():
    x = array("i", [0, ONE, -ONE, 20 * ONE, -20 * ONE, LIM, -LIM])
    y = _silu(x, 7)
    assert y[0] == 0 and y[3] == 20 * ONE and y[4] == 0 and y[5] == LIM and y[6] == 0
    assert abs(y[1] - 47911) <= 2 and abs(y[2] + 17625) <= 2  # 0.731059, -0.268941
    g = array("i", [ONE, 2 * ONE, LIM, LIM])
    u = array("i", [3 * ONE, -ONE, LIM, -LIM])
    s = _swiglu(g, u, 4)
    assert abs(s[0] - 143732) <= 8 and abs(s[1] + 115450) <= 8  # 3 silu(1), -silu(2)
    assert s[2] == LIM and s[3] == -LIM  # saturated
    x = array("i", [0] * 8)
    testkit.raises(Q4Error, kernels.swiglu, x, array("i", [0] * 8), x, 8)  # out must not be 'up'


# ---- heap and bad input ----

def _hot_fixed(ctx):
    x, out, nw, rt, tmp = ctx
    kernels.rmsnorm(out, x, nw)
    kernels.rope(tmp, out, rt, 5, 2)
    kernels.softmax(tmp, tmp, 32)
    kernels.swiglu(out, out, tmp, 32)
    kernels.silu(tmp, x, 32)
    kernels.mul(tmp, tmp, x, 32)
    return out[3] + tmp[7]


def test_hot_path_allocates_nothing():
    rng = testkit.Rng(71)
    ctx = (rvec(rng, 32, 3 * ONE), array("i", bytes(128)), NormWeight(32).load_fp16([0x3C00] * 32),
           RopeTable(16, 8), array("i", bytes(128)))
    got = []
    try:
        for name in ("native", "viper", "plain"):
            if kernels.load(name) is None:
                continue
            kernels.use(name)
            before = testkit.heap_in_use()
            v = testkit.run_locked(_hot_fixed, ctx)
            after = testkit.heap_in_use()
            got.append(v)
            if before is not None:
                assert before == after, (name, before, after)
    finally:
        kernels.use()
    assert len(got) == (3 if testkit.IS_MP and not testkit.IS_CP else 2 if testkit.IS_CP else 1) and len(set(got)) == 1, got


def test_bad_arguments():
    testkit.raises(Q4Error, NormWeight, 0)
    testkit.raises(Q4Error, NormWeight, 16385)
    testkit.raises(Q4Error, NormWeight, 8, -1e-5)
    testkit.raises(Q4Error, NormWeight(4).load_fp16, [0x3C00] * 3)
    testkit.raises(Q4Error, NormWeight(2).load_fp16, [0x3C00, 0x7C00])  # Inf gain
    testkit.raises(Q4Error, RopeTable, 7, 4)
    testkit.raises(Q4Error, RopeTable, 8, -1)
    testkit.raises(Q4Error, RopeTable, 8, 4, 10000.5)
    testkit.raises(Q4Error, RopeTable, 8, 4, 10000, 2)
    assert RopeTable(8, 2, 10000.0).max_dist == 2  # an integral float theta is fine
    nw = NormWeight(16)
    rt = RopeTable(8, 4)
    x = array("i", [0] * 16)
    testkit.raises(Q4Error, kernels.rmsnorm, x, array("i", [0] * 15), nw)
    testkit.raises(Q4Error, kernels.rmsnorm, x, x, rt)
    testkit.raises(Q4Error, kernels.rope, x, x, rt, 5)       # beyond max_dist
    testkit.raises(Q4Error, kernels.rope, x, x, rt, -1)
    testkit.raises(Q4Error, kernels.rope, x, x, rt, 0, 3)    # 3 heads of 8 > 16 values
    testkit.raises(Q4Error, kernels.rope, x, x, nw, 0)
    testkit.raises(Q4Error, kernels.silu, x, x, 17)
    testkit.raises(Q4Error, kernels.silu, bytearray(64), x, 16)
    testkit.raises(Q4Error, kernels.mul, x, x, array("i", [0] * 4), 16)
    testkit.raises(Q4Error, kernels.softmax, x, x, 1.5)


def test_attention_int8_dot_and_axpy_backends_agree():
    # fixedmath.dot_i8 / axpy_i8 against a direct sum, and the viper versions (MicroPython) against both:
    # negative int8 and int32 values, offsets inside both buffers, lengths 0..33, heap locked
    rng = testkit.Rng(93)
    a = rvec(rng, 80, 1 << 22)
    b = array("b", [rng.below(255) - 127 for _ in range(96)])
    b[5] = -128
    info = array("i", bytearray(16))
    impls = [("plain", fixedmath.dot_i8, fixedmath.axpy_i8)]
    for name in ("viper", "native"):
        v = kernels.load(name)
        if v is not None:
            impls.append((name, v.dot_i8, v.axpy_i8))
    assert len(impls) == (3 if testkit.IS_MP and not testkit.IS_CP else 2 if testkit.IS_CP else 1)
    for ao, bo, n in ((0, 0, 32), (7, 5, 33), (40, 60, 8), (3, 90, 6), (0, 0, 0), (47, 1, 1)):
        want = 0
        for i in range(n):
            want += a[ao + i] * b[bo + i]
        u = rng.below(1 << 16) - (1 << 15)
        out0 = rvec(rng, 80, 1 << 20)
        expect = array("i", out0)
        for i in range(n):
            expect[ao + i] += u * b[bo + i]
        for name, dot, axpy in impls:
            info[0], info[1], info[2], info[3] = ao, bo, n, u
            assert dot(a, b, info) == want, (name, ao, bo, n)
            out = array("i", out0)
            testkit.run_locked(lambda _: axpy(out, b, info), None)
            assert list(out) == list(expect), (name, ao, bo, n)
