"""Host-side checks of the Llama runtime: the committed fixture is what the generator builds, every
CPython kernel backend gives the same logits (with the numpy bound checks on), the runtime's own
integers stay below 2**30 on saturating inputs, and the integer sampling distribution's properties
(hypothesis)."""

from __future__ import annotations

import math
import struct
import sys
from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "shared"))
sys.path.insert(0, str(ROOT))

import test_llama as tl  # noqa: E402  (the shared test module: pins, fixture paths, variant writer)

from shared import kernels, llama, mbf, model_load, q4_numpy, ringkv  # noqa: E402
from tools.formats import make_tiny_llama  # noqa: E402

LIM = 0x3FFFFFFF


@pytest.fixture
def backend():
    """Restore the default backend and the numpy bound checks after a test that switches them."""
    yield
    kernels.use()
    q4_numpy.CHECK_BOUNDS = False


def _decode_crc(path: str = tl.TINY, stream: bool = False, n: int = tl.N) -> int:
    m = llama.Model(mbf.open(path), tl._kv(), stream=stream, out_rows=7)
    return tl._decode(m, tl._tokens(n))


# ---- the fixture ----

def test_committed_fixture_is_a_fresh_build():
    assert (ROOT / tl.TINY).read_bytes() == make_tiny_llama.build_model(), \
        "tests/shared/data/tiny_llama.mbf differs from tools/formats/make_tiny_llama.py: rerun the tool"
    assert len(make_tiny_llama.build_model()) < 64 * 1024
    assert make_tiny_llama.main(["--check"]) == 0


def test_generator_tied_variant_is_the_derived_one(tmp_path):
    """The tool's --tied model equals the fixture with 'output' dropped and tied_embed set (the variant
    the shared tests pin), so PIN_TIED also pins the tool's tied model."""
    out = tmp_path / "tied.mbf"
    assert make_tiny_llama.main(["--tied", "-o", str(out)]) == 0
    r = mbf.open(str(out))
    assert r.config["tied_embed"] == 1 and "output" not in r
    m = llama.Model(r, tl._kv())
    assert tl._decode(m, tl._tokens(16, seed=5)) == tl.PIN_TIED


# ---- backends ----

@pytest.mark.parametrize("name", ["numpy", "plain"])
def test_every_cpython_backend_gives_the_pinned_logits(name, backend):
    kernels.use(name)
    q4_numpy.CHECK_BOUNDS = True  # every numpy kernel intermediate < 2**31 on the model's data
    assert _decode_crc() == tl.PIN
    assert _decode_crc(stream=True, n=16) == _decode_crc(stream=False, n=16)


def _extreme_model(tmp_path: Path) -> str:
    """The fixture with every INT4 weight +7 or -8 and every scale the float16 maximum: activations
    saturate to +-LIM everywhere (a stress test of the bounds, not a model)."""
    r = mbf.open(str(ROOT / tl.TINY))
    add = []
    for name in r.names():
        s = r.seg(name)
        if s.dtype == "q4":
            nib = bytes([0xF0 if (i * 7) % 3 else 0x0F for i in range(s.length)])  # q = -8 / +7 mixed
            add.append((name, "q4", s.shape, nib))
        elif name.endswith(".scales"):
            add.append((name, "f16", s.shape, np.full(s.shape, 65504.0, dtype="<f2").tobytes()))
    path = str(tmp_path / "extreme.mbf")
    tl.write_variant(r, path, add=tuple(add))
    return path


def test_runtime_integers_stay_below_2_30(tmp_path, monkeypatch, backend):
    """The attention's own arithmetic (dot products, value weights, accumulators) and every mulshift /
    shift_sat argument stay below 2**30 in magnitude (small ints on the boards) on the fixture and on
    a model whose activations saturate. Checked by wrapping the helpers the runtime calls."""
    seen = {"max": 0}

    def check(v):
        a = abs(v)
        assert a < 1 << 30, v
        seen["max"] = max(seen["max"], a)

    real_ms, real_ss = llama.mulshift, llama.shift_sat

    def mulshift(a, f, s):
        check(a)
        assert abs(f) <= 1 << 15, f
        r = real_ms(a, f, s)
        check(r)
        return r

    def shift_sat(v, s):
        check(v)
        return real_ss(v, s)

    monkeypatch.setattr(llama, "mulshift", mulshift)
    monkeypatch.setattr(llama, "shift_sat", shift_sat)
    monkeypatch.setattr(model_load, "shift_sat", shift_sat)
    q4_numpy.CHECK_BOUNDS = True
    for path in (str(ROOT / tl.TINY), _extreme_model(tmp_path)):
        for name in ("plain", "numpy"):
            kernels.use(name)
            m = llama.Model(mbf.open(path), tl._kv())
            for t in tl._tokens(12):
                m.step(t)
                m.kv.commit(1)
                assert all(abs(v) <= LIM for v in m.logits)
            for stage in (m.x, m.att, m.q):
                assert all(abs(v) <= LIM for v in stage)
    assert seen["max"] > 1 << 28  # the extreme model does reach the top of the range


# ---- f32 -> f16 at load ----

def test_f32_to_f16_matches_numpy():
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 32, 20000, dtype=np.uint64)
    special = [0, 0x80000000, 0x33000000, 0x33000001, 0x32FFFFFF, 0x387FC000, 0x477FE000, 0x477FEFFF,
               0x3F800000, 0x3F801000, 0x3F803000, 0x38800000, 0x387FFFFF]
    for b in list(bits) + special:
        b = int(b)
        f = np.frombuffer(struct.pack("<I", b), dtype="<f4")[0]
        if not np.isfinite(f) or abs(f) >= 65520.0:
            with pytest.raises(model_load.ModelError):
                model_load.f32_to_f16(b)
            continue
        want = int(np.array([f], dtype="<f4").astype("<f2").view("<u2")[0])
        assert model_load.f32_to_f16(b) == want, hex(b)


# ---- sampling distributions ----

logit_rows = st.lists(st.integers(-LIM, LIM) | st.integers(-20 * 65536, 20 * 65536), min_size=1, max_size=120)
temperatures = st.sampled_from([0, 1, 655, 65536, 0.05, 0.3, 0.7, 1.0, 1.5, 4.0, 100.0]) | st.floats(0.01, 50.0)


def _float_probs(x: list[int], kept: list[int], t: float) -> dict[int, float]:
    hi = max(x[i] for i in kept)
    ex = {i: math.exp((x[i] - hi) / 65536.0 / t) for i in kept}
    z = sum(ex.values())
    return {i: e / z for i, e in ex.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=logit_rows, top_k=st.integers(0, 130), temp=temperatures)
def test_distribution_properties(x, top_k, temp):
    n = len(x)
    s = llama.Sampler(n, top_k=top_k, temperature=temp)
    logits = array("i", x)
    k = s.distribution(logits)
    idx, cnt = list(s.idx[:k]), list(s.count[:k])
    assert sum(cnt) == 65536 and all(c > 0 for c in cnt)
    assert idx == sorted(set(idx))  # ascending, distinct
    order = sorted(range(n), key=lambda i: (-x[i], i))  # top-k with ties to the lower index
    kept = sorted(order[:top_k] if 0 < top_k < n else order)
    assert set(idx) <= set(kept)
    assert (s.k, list(s.idx[:k]), list(s.count[:k])) == (k, idx, cnt)  # deterministic
    assert s.distribution(logits) == k and list(s.count[:k]) == cnt
    if temp == 0:
        assert idx == [order[0]] and cnt == [65536]
        return
    tq = temp if isinstance(temp, int) else int(temp * 65536.0 + 0.5)
    p = _float_probs(x, kept, tq / 65536.0)
    got = dict(zip(idx, cnt))
    for i in kept:
        # kernel exp/softmax error, the sum fix (1 count), the Q16 temperature: a few counts at most
        assert abs(got.get(i, 0) - 65536 * p[i]) <= 3 + 0.002 * 65536 * p[i], (i, got.get(i, 0), 65536 * p[i])
    for r in (0, 1, 32767, 65535):
        assert s.draw(r) in idx


@settings(max_examples=100, deadline=None)
@given(x=logit_rows, top_k=st.integers(0, 10), r=st.integers(0, 65535))
def test_draw_follows_the_cumulative_counts(x, top_k, r):
    s = llama.Sampler(len(x), top_k=top_k, temperature=0.8)
    k = s.distribution(array("i", x))
    c = 0
    for j in range(k):
        c += s.count[j]
        if r < c:
            assert s.draw(r) == s.idx[j]
            break


def test_distribution_is_what_specdec_takes():
    """The Sampler's (idx, count) arrays load into specdec.Dist as they are (ids ascending, sum 2**16)."""
    specdec = pytest.importorskip("shared.specdec")
    m = llama.Model(mbf.open(str(ROOT / tl.TINY)), tl._kv())
    m.step(5)
    s = llama.Sampler(m.n_out, top_k=8, temperature=0.9)
    k = s.distribution(m.logits)
    d = specdec.Dist(m.n_out).set_counts(s.idx, s.count, k)
    assert d.count_of(s.idx[0]) == s.count[0] and d.total == 65536


def test_sampler_over_a_full_target_vocabulary_is_fast_enough():
    """49152 logits (SmolLM2's vocabulary), top-k 50: the host drafts with the same integers."""
    import time

    rng = np.random.default_rng(1)
    x = array("i", (rng.standard_normal(49152) * 3 * 65536).astype(np.int32).tobytes())
    s = llama.Sampler(49152, top_k=50, temperature=0.7)
    t0 = time.perf_counter()
    k = s.distribution(x)
    took = time.perf_counter() - t0
    assert k <= 50 and sum(s.count[:k]) == 65536
    print("top-50 distribution over 49152 logits: %.1f ms" % (took * 1000))


def test_ringkv_and_model_shapes_agree_for_the_board_profile():
    """The rp2040_pico profile's cache (4 + 28 + 8) fits the fixture and decodes across wraps."""
    kv = ringkv.RingKV(2, 16, 4, 28, 8, "b", 2)
    m = llama.Model(mbf.open(str(ROOT / tl.TINY)), kv)
    for t in tl._tokens(80):
        m.step(t)
        kv.commit(1)
    assert kv.live == 32 and m.nkeys == 33


@pytest.mark.parametrize("stream", [False, True])
def test_residual_shift_keeps_the_logits_and_widens_the_range(tmp_path: Path, stream: bool) -> None:
    """resid_shift 2 holds the residual in Q14: same predictions as Q16 on the fixture (whose activations
    fit either), within a few Q16 steps of logit error, and four times the range before saturation."""
    kernels.use("numpy")
    shifted = tmp_path / "shift2.mbf"
    tl.write_variant(tl.TINY, str(shifted), config={"resid_shift": 2})
    toks = tl._tokens(40)
    runs = []
    for path in (tl.TINY, str(shifted)):
        m = tl._model(path, stream=stream)
        rows = []
        for t in toks:
            m.step(t)
            m.kv.commit(1)
            rows.append(np.frombuffer(m.logits, dtype=np.int32).astype(np.float64) / 65536.0)
        runs.append(np.array(rows))
    base, shift = runs
    span = base.max() - base.min()
    assert np.mean(base.argmax(1) == shift.argmax(1)) >= 0.95
    assert np.abs(base - shift).max() < 0.02 * span
    # The embedding rows that enter the residual are a quarter of their Q16 values.
    m = tl._model(str(shifted), stream=stream)
    q14, q16 = array("i", bytearray(4 * m.cfg.dim)), array("i", bytearray(4 * m.cfg.dim))
    m.rows.fill(3, q14)
    tl._model(tl.TINY, stream=stream).rows.fill(3, q16)
    assert all(abs(a - (b + 2) // 4) <= 1 for a, b in zip(q14, q16))


def test_residual_shift_out_of_range_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "shift9.mbf"
    tl.write_variant(tl.TINY, str(bad), config={"resid_shift": 9})
    with pytest.raises(model_load.ModelError, match="resid_shift"):
        tl._model(str(bad))
