"""Property tests (CPython, hypothesis): RingKV behaves as the list reference for any S, W, D and any
sequence of stage / write / commit / discard / append, and snapshots round-trip from any state."""

from __future__ import annotations

import io
import tracemalloc
from array import array

import testkit  # noqa: F401 - puts tests/shared on sys.path via conftest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from ringkv_ref import RefKV

from shared import kvsnap, ringkv

i8 = st.integers(-128, 127)


def assert_same(kv: ringkv.RingKV, ref: RefKV) -> None:
    assert (kv.live, kv.pending) == (ref.live, ref.pending)
    assert kv.tokens == ref.tokens & 0x3FFFFFFF
    for i in range(kv.live + kv.pending):
        slot = kv.slot_of(i) if i < kv.live else kv.staged_slot(i - kv.live)
        pos = kv.position(i) if i < kv.live else kv.staged_position(i - kv.live)
        assert pos == i < kv.capacity + kv.staged
        tok = ref.token(i)
        for layer in range(kv.layers):
            o = kv.row(layer, slot)
            assert list(kv.k[o:o + kv.kv_dim]) == tok[0][layer], (i, layer)
            assert list(kv.v[o:o + kv.kv_dim]) == tok[1][layer], (i, layer)
            o = kv.scale_at(layer, slot)
            assert list(kv.kscale[o:o + kv.heads]) == tok[2][layer]
            assert list(kv.vscale[o:o + kv.heads]) == tok[3][layer]


class RingMachine(RuleBasedStateMachine):
    @initialize(layers=st.integers(1, 3), head_dim=st.integers(1, 3), heads=st.integers(1, 2),
                sink=st.integers(0, 4), window=st.integers(1, 6), staged=st.integers(1, 8))
    def make(self, layers, head_dim, heads, sink, window, staged):
        d = head_dim * heads
        self.kv = ringkv.RingKV(layers, d, sink, window, staged, "b", heads)
        self.ref = RefKV(layers, d, sink, window, staged, heads)

    @rule(data=st.data())
    def stage(self, data):
        if self.kv.pending == self.kv.staged:
            with_err = testkit.raises(ringkv.RingKVError, self.kv.stage)
            assert "staging full" in str(with_err)
            return
        s = self.kv.stage()
        assert self.ref.stage() == s
        d, h = self.kv.kv_dim, self.kv.heads
        for layer in range(self.kv.layers):
            kr = data.draw(st.lists(i8, min_size=d, max_size=d))
            vr = data.draw(st.lists(i8, min_size=d, max_size=d))
            sc = data.draw(st.lists(st.integers(-2**31, 2**31 - 1), min_size=2 * h, max_size=2 * h))
            for c in (self.kv, self.ref):
                c.write(layer, s, kr, vr)
                c.write_scales(layer, s, sc[:h], sc[h:])

    @rule(data=st.data(), keep=st.booleans())
    def commit(self, data, keep):
        n = data.draw(st.integers(0, self.kv.pending))
        self.kv.commit(n, keep)
        self.ref.commit(n, keep)

    @rule(n=st.integers(1, 3))
    def commit_too_many(self, n):
        testkit.raises(ringkv.RingKVError, self.kv.commit, self.kv.pending + n)

    @rule()
    def discard(self):
        self.kv.discard()
        self.ref.discard()

    @precondition(lambda self: self.kv.pending == 0)
    @rule(data=st.data())
    def append(self, data):
        n = self.kv.layers * self.kv.kv_dim
        k = data.draw(st.lists(i8, min_size=n, max_size=n))
        v = data.draw(st.lists(i8, min_size=n, max_size=n))
        self.kv.append(k, v)
        self.ref.append(k, v, [0] * (self.kv.layers * self.kv.heads), [0] * (self.kv.layers * self.kv.heads))

    @rule(extra_staged=st.integers(0, 3))
    def snapshot_round_trip(self, extra_staged):
        # save, restore into a fresh cache (maybe deeper staging), carry on with the restored one
        kv = self.kv
        buf = io.BytesIO()
        kvsnap.save(kv, buf)
        fresh = ringkv.RingKV(kv.layers, kv.kv_dim, kv.sink, kv.window, kv.staged + extra_staged,
                              kv.typecode, kv.heads)
        kvsnap.load(fresh, io.BytesIO(buf.getvalue()))
        self.kv = fresh
        self.ref.staged = fresh.staged
        self.ref.discard()  # staged drafts do not travel in a snapshot

    @invariant()
    def same(self):
        if hasattr(self, "kv"):
            assert_same(self.kv, self.ref)
            assert self.kv.live <= self.kv.capacity and 0 <= self.kv.head < self.kv.window


TestRingMachine = RingMachine.TestCase
TestRingMachine.settings = settings(max_examples=100, stateful_step_count=50, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])


def _filled(sink, window, staged, tokens, seed):
    kv = ringkv.RingKV(2, 4, sink, window, staged, "b", 2)
    rng = testkit.Rng(seed)
    for _ in range(tokens):
        kv.append([rng.below(256) - 128 for _ in range(8)], [rng.below(256) - 128 for _ in range(8)],
                  [rng.below(1000) for _ in range(4)], [rng.below(1000) for _ in range(4)])
    return kv


@settings(max_examples=200, deadline=None)
@given(sink=st.integers(0, 4), window=st.integers(1, 6), tokens=st.integers(0, 40), seed=st.integers(1, 2**31),
       cut=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 2**20))
def test_snapshot_damage_is_always_refused(sink, window, tokens, seed, cut, bit):
    kv = _filled(sink, window, 2, tokens, seed)
    buf = io.BytesIO()
    kvsnap.save(kv, buf)
    data = buf.getvalue()
    dest = ringkv.RingKV(2, 4, sink, window, 3, "b", 2)
    kvsnap.load(dest, io.BytesIO(data))
    assert kvsnap.size(dest) == len(data)
    again = io.BytesIO()
    kvsnap.save(dest, again)
    assert again.getvalue() == data
    short = data[:int(cut * len(data))]
    with_err = testkit.raises(kvsnap.KVSnapshotError, kvsnap.load, dest, io.BytesIO(short))
    assert "truncated" in str(with_err)
    flipped = bytearray(data)
    flipped[(bit >> 3) % len(data)] ^= 1 << (bit & 7)
    testkit.raises(kvsnap.KVSnapshotError, kvsnap.load, dest, io.BytesIO(bytes(flipped)))


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_random_bytes_are_refused(blob):
    assume(not blob.startswith(b"EKVS") or len(blob) < 40)
    dest = _filled(1, 3, 2, 6, 1)
    before = bytes(dest.k)
    with_err = testkit.raises(kvsnap.KVSnapshotError, kvsnap.load, dest, io.BytesIO(blob))
    assert not with_err.cache_reset and bytes(dest.k) == before and dest.live == 4


def test_load_allocates_nothing_in_proportion_to_the_cache():
    kv = ringkv.RingKV(4, 256, 4, 508, 8, "f", 4)  # 4 MB of float keys and values
    n = len(kv.k)
    kv.k[:] = array("f", [float(i % 1000) for i in range(n)])
    kv.v[:] = array("f", [float(i % 777) for i in range(n)])
    kv.live, kv.head, kv.tokens = kv.capacity, 88, 100_000  # a full ring, as after 10^5 tokens
    buf = io.BytesIO()
    kvsnap.save(kv, buf)
    data = buf.getvalue()
    dest = ringkv.RingKV(4, 256, 4, 508, 8, "f", 4)
    stream = io.BytesIO(data)
    tracemalloc.start()
    kvsnap.load(dest, stream)
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(data) > 4_000_000
    assert peak < 16_384, "load peaked at %d bytes for a %d-byte snapshot" % (peak, len(data))
    assert (dest.live, dest.head, dest.tokens) == (kv.live, kv.head, kv.tokens)
    for layer in range(kv.layers):
        a, b = kv.row(layer, 0), kv.row(layer, kv.capacity)
        assert dest.k[a:b] == kv.k[a:b] and dest.v[a:b] == kv.v[a:b]
