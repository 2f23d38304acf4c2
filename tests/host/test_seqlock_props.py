# test_seqlock_props.py: hypothesis property tests of single-threaded CAS sequences vs the reference store.
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_seqlock import RefStore  # tests/shared is on sys.path (tests/conftest.py)

from shared import seqlock

WRAPS = (4, 6, 8, 10, seqlock.VERSION_WRAP)
values = st.integers(seqlock.VALUE_MIN, seqlock.VALUE_MAX)


@st.composite
def scenarios(draw):
    slots = draw(st.integers(1, 4))
    width = draw(st.integers(1, 3))
    wrap = draw(st.sampled_from(WRAPS))
    record = st.lists(values, min_size=width, max_size=width)
    slot = st.integers(0, slots - 1)
    op = st.one_of(
        st.tuples(st.just("cas_read"), slot, record),  # CAS with the version a read returned
        st.tuples(st.just("cas_any"), slot, st.integers(0, min(wrap // 2 - 1, 8)), record),
        st.tuples(st.just("write"), slot, record),
        st.tuples(st.just("read"), slot),
        st.tuples(st.just("version"), slot),
    )
    return slots, width, wrap, draw(st.lists(op, max_size=120))


def _cas(s, k, expected, rec):
    return s.cas(k, expected, rec[0]) if s.width == 1 else s.cas_from(k, expected, rec)


def _write(s, k, rec):
    return s.write(k, rec[0]) if s.width == 1 else s.write_from(k, rec)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_cas_sequences_match_the_reference(sc):
    slots, width, wrap, ops = sc
    s = seqlock.Versioned(slots, width=width, wrap=wrap)
    ref = RefStore(slots, width, wrap)
    buf = [0] * width
    for op in ops:
        kind, k = op[0], op[1]
        before = ref.ver[k]
        if kind == "cas_read":
            v = s.read_into(k, buf)
            assert (v, buf) == ref.read(k)
            assert _cas(s, k, v, op[2]) is True and ref.cas(k, v, op[2])
        elif kind == "cas_any":
            e = 2 * op[2]
            got = _cas(s, k, e, op[3])
            assert got == (e == before) == ref.cas(k, e, op[3])
        elif kind == "write":
            assert _write(s, k, op[2]) == ref.write(k, op[2])
        elif kind == "read":
            assert (s.read_into(k, buf), buf) == ref.read(k)
            if width == 1:
                assert s.read(k) == buf[0]
        else:
            assert s.version(k) == ref.ver[k]
        after = s.version(k)
        assert after % 2 == 0 and 0 <= after < wrap
        assert after in (before, (before + 2) % wrap), "a version moves one step per write"
    for k in range(slots):
        assert (s.read_into(k, buf), buf) == ref.read(k)


junk = st.one_of(
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.integers().filter(lambda x: x < seqlock.VALUE_MIN or x > seqlock.VALUE_MAX),
)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.lists(values, min_size=1, max_size=6), junk, st.integers(0, 5))
def test_bad_values_are_rejected_and_leave_no_trace(width, fill, bad, pos):
    s = seqlock.Versioned(2, width=width, wrap=8)
    good = (fill * width)[:width]
    _write(s, 0, good)
    rec = list(good)
    rec[pos % width] = bad
    for fn in (lambda: _cas(s, 0, 2, rec), lambda: _write(s, 0, rec), lambda: _cas(s, 0, 2, [bad] * width)):
        try:
            fn()
        except seqlock.VersionedError as e:
            assert "must be" in str(e)
        else:
            raise AssertionError("accepted %r" % (bad,))
    buf = [0] * width
    assert s.read_into(0, buf) == 2 and buf == good
    assert s.version(1) == 0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(WRAPS), st.integers(0, 60))
def test_versions_cycle_through_the_even_range(wrap, writes):
    s = seqlock.Versioned(1, wrap=wrap)
    start = (wrap - 8) if wrap > 8 else 0
    s._ver[0] = start
    for n in range(1, writes + 1):
        assert s.write(0, n) == (start + 2 * n) % wrap
        assert s.version(0) < wrap <= seqlock.VERSION_WRAP
