# test_ringkv.py: RingKV against the list reference, eviction edges, staging safety, bounded positions,
# fixed memory and allocation-free hot paths, and RoPE attention equivalence (fast ring vs reference).
import math
from array import array

import testkit
from ringkv_ref import RefKV, attend_ref, rope
from shared import ringkv

RingKV = ringkv.RingKV
Err = ringkv.RingKVError
_DOUBLE = (1.0 + 1e-12) != 1.0  # boards have single-precision floats


def _rand_vals(rng, n, tc):
    if tc == "b":
        return [rng.below(256) - 128 for _ in range(n)]
    # multiples of 1/256 below 4 in magnitude: exact in float32, so 'f' storage loses nothing
    return [(rng.below(2001) - 1000) / 256.0 for _ in range(n)]


def _stage_random(kv, ref, rng):
    s = kv.stage()
    assert ref.stage() == s
    for layer in range(kv.layers):
        kr = _rand_vals(rng, kv.kv_dim, kv.typecode)
        vr = _rand_vals(rng, kv.kv_dim, kv.typecode)
        kv.write(layer, s, kr, vr)
        ref.write(layer, s, kr, vr)
        ks = [rng.below(1 << 20) for _ in range(kv.heads)]
        vs = [rng.below(1 << 20) for _ in range(kv.heads)]
        kv.write_scales(layer, s, ks, vs)
        ref.write_scales(layer, s, ks, vs)
    return s


def _assert_same(kv, ref, where):
    assert kv.live == ref.live, "%s: live %d != ref %d" % (where, kv.live, ref.live)
    assert kv.pending == ref.pending, "%s: pending %d != ref %d" % (where, kv.pending, ref.pending)
    assert kv.tokens == ref.tokens & 0x3FFFFFFF, where
    assert kv.room() == kv.staged - ref.pending, where
    d, h = kv.kv_dim, kv.heads
    slots = array("i", [0] * (kv.capacity + 1))
    assert kv.fill_slots(slots) == kv.live
    for i in range(kv.live + kv.pending):
        if i < kv.live:
            slot, pos = kv.slot_of(i), kv.position(i)
            assert slots[i] == slot, "%s: fill_slots[%d]" % (where, i)
            assert 0 <= slot < kv.capacity, where
        else:
            slot, pos = kv.staged_slot(i - kv.live), kv.staged_position(i - kv.live)
        assert pos == ref.position(i), "%s: position of %d" % (where, i)
        tok = ref.token(i)
        for layer in range(kv.layers):
            o = kv.row(layer, slot)
            for j in range(d):
                assert kv.k[o + j] == tok[0][layer][j], "%s: K token %d layer %d" % (where, i, layer)
                assert kv.v[o + j] == tok[1][layer][j], "%s: V token %d layer %d" % (where, i, layer)
            o = kv.scale_at(layer, slot)
            for j in range(h):
                assert kv.kscale[o + j] == tok[2][layer][j], "%s: K scale token %d" % (where, i)
                assert kv.vscale[o + j] == tok[3][layer][j], "%s: V scale token %d" % (where, i)


def _random_ops(cfg, seed, nops, loop_moves=False):
    layers, d, S, W, D, heads, tc = cfg
    kv = RingKV(layers, d, S, W, D, tc, heads)
    if loop_moves:  # the plain fallback CircuitPython uses
        kv._mvdata = ringkv._move_loop
        kv._mvscale = ringkv._move_loop
    ref = RefKV(layers, d, S, W, D, heads)
    rng = testkit.Rng(seed)
    discards_after_wrap = 0
    for step in range(nops):
        op = rng.below(12)
        where = "cfg %r seed %d step %d op %d" % (cfg, seed, step, op)
        if op < 6:
            if kv.pending == D:
                e = testkit.raises(Err, kv.stage)
                assert "staging full" in str(e), str(e)
            else:
                _stage_random(kv, ref, rng)
        elif op < 9:
            n = rng.below(kv.pending + 1)
            keep = rng.below(3) == 0
            kv.commit(n, keep)
            ref.commit(n, keep)
        elif op == 9:
            if ref.tokens > S + W and kv.pending:
                discards_after_wrap += 1
            kv.discard()
            ref.discard()
        else:
            k = _rand_vals(rng, layers * d, tc)
            v = _rand_vals(rng, layers * d, tc)
            ks = [rng.below(1000) for _ in range(layers * heads)] if op == 10 else None
            vs = [rng.below(1000) for _ in range(layers * heads)] if op == 10 else None
            if kv.pending:
                e = testkit.raises(Err, kv.append, k, v, ks, vs)
                assert "staged" in str(e), str(e)
            else:
                kv.append(k, v, ks, vs)
                ref.append(k, v, ks, vs)
        _assert_same(kv, ref, where)
    return ref.tokens, discards_after_wrap


CONFIGS = (
    (1, 2, 0, 1, 1, 1, "b"),  # no sinks, a one-token window
    (2, 4, 2, 3, 4, 2, "b"),
    (2, 6, 4, 5, 8, 3, "b"),  # staging deeper than the window: one commit can wrap the ring
    (1, 4, 1, 2, 5, 2, "f"),
    (3, 4, 3, 7, 3, 1, "b"),
)


def test_random_ops_match_reference_through_many_wraps():
    for n, cfg in enumerate(CONFIGS):
        tokens, rollbacks = _random_ops(cfg, 1000 + n, 1200)
        wraps = (tokens - cfg[2]) // cfg[3]
        assert wraps >= 25, "cfg %r: only %d wraps" % (cfg, wraps)
        assert rollbacks >= 25, "cfg %r: only %d rollbacks after a wrap" % (cfg, rollbacks)


def test_plain_loop_moves_match_reference():
    tokens, _ = _random_ops((2, 4, 2, 3, 4, 2, "b"), 77, 300, loop_moves=True)
    assert tokens > 50


def test_row_move_backends_agree():
    for tc, chosen in (("b", ringkv._move8), ("i", ringkv._move32)):
        backends = [ringkv._move_loop, chosen] + ([] if testkit.IS_MP else [ringkv._move_slice])
        for fn in backends:
            buf = array(tc, [(i * 37) % 101 - 50 for i in range(40)])
            fn(buf, 3, 20, 7)
            fn(buf, 30, 0, 10)
            want = [(i * 37) % 101 - 50 for i in range(40)]
            want[3:10] = want[20:27]
            want[30:40] = want[0:3] + want[20:27]
            assert list(buf) == want, "backend %r wrong on %s: %r" % (fn, tc, list(buf))


def _ids(kv):
    # token ids written by _append_id: element 0..2 of layer 0's K row, 7 bits each
    out = []
    for i in range(kv.live):
        o = kv.row(0, kv.slot_of(i))
        out.append(kv.k[o] | (kv.k[o + 1] << 7) | (kv.k[o + 2] << 14))
    return out


def _write_id(kv, s, tid, row):
    row[0] = tid & 127
    row[1] = (tid >> 7) & 127
    row[2] = (tid >> 14) & 127
    for layer in range(kv.layers):
        row[3] = layer
        kv.write(layer, s, row, row)


def _append_id(kv, tid, row):
    _write_id(kv, kv.stage(), tid, row)
    kv.commit(1)


def test_exact_capacity_evicts_exactly_the_oldest_window_token():
    S, W = 2, 3
    kv = RingKV(2, 4, S, W, 2)
    row = array("b", [0] * 4)
    for t in range(S + W - 1):
        _append_id(kv, t, row)
    assert _ids(kv) == [0, 1, 2, 3]
    _append_id(kv, 4, row)  # exactly at capacity: nothing evicted yet
    assert kv.live == S + W and _ids(kv) == [0, 1, 2, 3, 4]
    _append_id(kv, 5, row)  # one past: exactly the oldest window token (2) goes, sinks stay
    assert _ids(kv) == [0, 1, 3, 4, 5], _ids(kv)
    for t in range(6, 40):
        _append_id(kv, t, row)
        assert _ids(kv) == [0, 1, t - 2, t - 1, t], (t, _ids(kv))
        assert [kv.position(i) for i in range(kv.live)] == [0, 1, 2, 3, 4]


def test_multi_token_commit_evicts():
    S, W, D = 2, 4, 6
    kv = RingKV(1, 4, S, W, D)
    row = array("b", [0] * 4)
    for t in range(3):
        _append_id(kv, t, row)
    for s in range(D):
        assert kv.stage() == s
        _write_id(kv, s, 3 + s, row)
    assert [kv.staged_position(s) for s in range(D)] == [3, 4, 5, 6, 7, 8]
    kv.commit(D)  # a 6-token verification into a ring with 3 free places
    assert kv.live == S + W and kv.pending == 0
    assert _ids(kv) == [0, 1, 5, 6, 7, 8], _ids(kv)
    # a batch longer than the whole window keeps only its last W tokens
    for s in range(D):
        _write_id(kv, kv.stage(), 9 + s, row)
    kv.commit(D)
    assert _ids(kv) == [0, 1, 11, 12, 13, 14], _ids(kv)


def test_commit_keep_renumbers_the_rest():
    kv = RingKV(1, 4, 1, 3, 5)
    row = array("b", [0] * 4)
    for t in range(6):
        _append_id(kv, t, row)
    for s in range(5):
        _write_id(kv, kv.stage(), 100 + s, row)
    kv.commit(2, True)  # block 1 accepted, block 2 stays staged
    assert _ids(kv) == [0, 5, 100, 101] and kv.pending == 3
    for s in range(3):
        o = kv.row(0, kv.staged_slot(s))
        assert kv.k[o] == 102 + s and kv.staged_position(s) == kv.live + s
    kv.commit(1)
    assert _ids(kv) == [0, 100, 101, 102] and kv.pending == 0


def test_rejected_draft_never_changes_a_live_slot():
    kv = RingKV(2, 4, 2, 5, 4, "b", 2)
    ref = RefKV(2, 4, 2, 5, 4, 2)
    rng = testkit.Rng(5)
    for _ in range(23):  # past several wraps
        _stage_random(kv, ref, rng)
        kv.commit(1)
        ref.commit(1)
    ring = kv.capacity
    for trial in range(40):
        before = (array("b", kv.k), array("b", kv.v), array("i", kv.kscale), array("i", kv.vscale))
        live, head, order = kv.live, kv.head, [kv.slot_of(i) for i in range(kv.live)]
        m = 1 + rng.below(kv.staged)
        for _ in range(m):
            _stage_random(kv, ref, rng)
        accept = rng.below(m + 1) if trial % 2 else 0
        # the slots the accepted prefix is allowed to take, by the slot formula
        allowed = []
        for t in range(accept):
            pos = ref.tokens + t
            allowed.append(pos if pos < kv.sink else kv.sink + (pos - kv.sink) % kv.window)
        if accept:
            kv.commit(accept)
            ref.commit(accept)
        else:
            kv.discard()
            ref.discard()
            assert kv.live == live and kv.head == head
            assert [kv.slot_of(i) for i in range(kv.live)] == order
        for layer in range(kv.layers):
            for slot in range(ring):
                if slot in allowed:
                    continue
                o = kv.row(layer, slot)
                for j in range(kv.kv_dim):
                    assert kv.k[o + j] == before[0][o + j] and kv.v[o + j] == before[1][o + j], (trial, slot)
                o = kv.scale_at(layer, slot)
                for j in range(kv.heads):
                    assert kv.kscale[o + j] == before[2][o + j] and kv.vscale[o + j] == before[3][o + j]
        _assert_same(kv, ref, "trial %d" % trial)


def test_staging_beyond_free_room_raises_and_keeps_state():
    kv = RingKV(1, 4, 1, 3, 3)
    row = array("b", [0] * 4)
    for t in range(7):
        _append_id(kv, t, row)
    for s in range(3):
        _write_id(kv, kv.stage(), 50 + s, row)
    assert kv.room() == 0
    e = testkit.raises(Err, kv.stage)
    assert "staging full" in str(e) and "3 of 3" in str(e), str(e)
    e = testkit.raises(Err, kv.append, row, row)
    assert "staged" in str(e), str(e)
    assert kv.pending == 3
    kv.commit(3)
    assert _ids(kv) == [0, 50, 51, 52]


def test_bad_commit_and_indices_raise_without_change():
    kv = RingKV(2, 4, 1, 3, 3)
    row = array("b", [1, 2, 3, 4])
    for t in range(5):
        _append_id(kv, t, row)
    kv.stage()
    ids = _ids(kv)
    for n in (2, 5, -1):
        e = testkit.raises(Err, kv.commit, n)
        assert "commit" in str(e), str(e)
    assert kv.pending == 1 and _ids(kv) == ids
    for fn, args in ((kv.slot_of, (4,)), (kv.slot_of, (-1,)), (kv.position, (4,)),
                     (kv.staged_slot, (1,)), (kv.staged_position, (-1,)),
                     (kv.write, (2, 0, row, row)), (kv.write, (0, 1, row, row)),
                     (kv.write_scales, (-1, 0, row, row)), (kv.fill_slots, (array("i", [0] * 3),))):
        e = testkit.raises(Err, fn, *args)
        assert "range" in str(e) or "room" in str(e), str(e)
    kv.discard()
    testkit.raises(Err, kv.commit, 1)
    kv.commit(0)  # committing nothing is allowed
    assert _ids(kv) == ids


def test_constructor_rejects_bad_shapes():
    cases = (
        ((0, 4, 1, 3, 1), "layers"), ((1, 0, 1, 3, 1), "kv_dim"), ((1, 4, -1, 3, 1), "sink"),
        ((1, 4, 1, 0, 1), "window"), ((1, 4, 1, 3, 0), "staged"), ((True, 4, 1, 3, 1), "layers"),
        ((1, 4, 1, 2.0, 1), "window"), ((1, 4, 1, 3, 1, "d"), "typecode"), ((1, 4, 1, 3, 1, "b", 3), "multiple"),
        ((1000, 4096, 64, 65536, 256), "too large"), ((1, 4, 1, 3, 1, "b", 0), "heads"),
    )
    for args, word in cases:
        e = testkit.raises(Err, RingKV, *args)
        assert word in str(e), (args, str(e))
        assert isinstance(e, ValueError)


# ---- long runs: bounded positions, fixed memory, no allocation ----

def _stream(st):
    # st = [kv, row, rounds, committed, max_position]; drafts 1..D tokens per round, accepts a prefix
    kv = st[0]
    row = st[1]
    D = kv.staged
    committed = st[3]
    maxp = st[4]
    for r in range(st[2]):
        k = 1 + r % D
        for s in range(k):
            kv.stage()
            tid = committed + s
            row[0] = tid & 127
            row[1] = (tid >> 7) & 127
            row[2] = (tid >> 14) & 127
            for layer in range(kv.layers):
                row[3] = layer
                kv.write(layer, s, row, row)
            p = kv.staged_position(s)
            if p > maxp:
                maxp = p
        a = (r * 7) % (k + 1)
        kv.commit(a)
        committed += a
        if kv.live and kv.position(kv.live - 1) > maxp:
            maxp = kv.position(kv.live - 1)
    st[3] = committed
    st[4] = maxp


def test_positions_bounded_and_memory_fixed_over_1e5_tokens():
    S, W, D = 4, 28, 8  # the rp2040_pico profile
    kv = RingKV(2, 8, S, W, D, "b", 2)
    st = [kv, array("b", [0] * 8), 1000, 0, 0]
    testkit.run_locked(_stream, st)  # warm up (first calls may intern names)
    before = testkit.heap_in_use()
    st[2] = 62000
    testkit.run_locked(_stream, st)
    after = testkit.heap_in_use()
    if testkit.IS_MP:
        assert after == before, "heap grew from %d to %d bytes over %d tokens" % (before, after, st[3])
    assert st[3] >= 100000, st[3]
    assert st[4] == S + W + D - 1, "max cache position %d, bound %d" % (st[4], S + W + D - 1)
    assert kv.tokens == st[3] and kv.live == S + W
    assert _ids(kv) == list(range(S)) + list(range(st[3] - W, st[3]))


def test_counters_stay_small_past_2_30_tokens():
    kv = RingKV(1, 4, 1, 3, 2)
    kv.tokens = 0x3FFFFFFF - 1  # as after ~10^9 tokens
    row = array("b", [0] * 4)
    for t in range(5):
        _write_id(kv, kv.stage(), t, row)
        kv.commit(1)
    assert kv.tokens == 3 and kv.head < kv.window and kv.live == 4


# ---- hot paths under heap_lock ----

def _hot(st):
    kv, row, sc, out = st
    s = kv.stage()
    kv.write(0, s, row, row)
    kv.write(1, s, row, row)
    kv.write_scales(1, s, sc, sc)
    t = kv.stage()
    kv.write(0, t, row, row)
    kv.commit(1, True)
    kv.commit(1)
    kv.stage()
    kv.discard()
    kv.append(row, row, sc, sc)
    kv.append(row, row)
    acc = kv.room() + kv.fill_slots(out)
    for i in range(kv.live):
        acc += kv.row(1, kv.slot_of(i)) + kv.scale_at(1, kv.slot_of(i)) + kv.position(i)
    kv.stage()
    acc += kv.staged_slot(0) + kv.staged_position(0)
    kv.discard()
    return acc


def test_hot_paths_allocate_nothing():
    for moves in ("default", "loop"):
        kv = RingKV(2, 8, 2, 5, 3, "b", 2)
        if moves == "loop":
            kv._mvdata = kv._mvscale = ringkv._move_loop
        st = (kv, array("b", range(16)), array("i", [7, 9, 11, 13]), array("i", [0] * 8))
        for _ in range(20):  # many wraps, all locked
            assert testkit.run_locked(_hot, st) > 0
        assert kv.live == 7


# ---- attention: fast ring (query rotated by relative distance) == reference (all keys re-rotated) ----

def _attend_fast(kv, layer, query, s, head, qpos=None):
    hd = kv.head_dim
    if qpos is None:
        qpos = kv.staged_position(s)
    lo = head * hd
    scores = []
    rows = []
    for i in range(kv.live + s + 1):
        if i < kv.live:
            slot, kpos = kv.slot_of(i), kv.position(i)
        else:
            slot, kpos = kv.staged_slot(i - kv.live), kv.staged_position(i - kv.live)
        o = kv.row(layer, slot)
        q = rope(query, qpos - kpos, hd)
        scores.append(sum(q[lo + j] * kv.k[o + lo + j] for j in range(hd)) / math.sqrt(hd))
        rows.append(o)
    m = max(scores)
    w = [math.exp(x - m) for x in scores]
    z = sum(w)
    out = [0.0] * hd
    for n, o in enumerate(rows):
        for j in range(hd):
            out[j] += w[n] / z * kv.v[o + lo + j]
    return out


def test_attention_fast_ring_equals_rerotating_reference_across_wraps():
    tol = 1e-9 if _DOUBLE else 1e-4
    layers, d, heads, S, W, D = 2, 8, 2, 2, 5, 3
    kv = RingKV(layers, d, S, W, D, "f", heads)
    ref = RefKV(layers, d, S, W, D, heads)
    rng = testkit.Rng(11)
    absolute_wrong = 0
    for r in range(150):
        k = 1 + rng.below(D)
        for _ in range(k):
            s = _stage_random(kv, ref, rng)
            for layer in range(layers):
                q = _rand_vals(rng, d, "f")
                for h in range(heads):
                    want = attend_ref(ref, layer, q, ref.live + s + 1, h, kv.head_dim)
                    got = _attend_fast(kv, layer, q, s, h)
                    for j in range(kv.head_dim):
                        assert abs(got[j] - want[j]) <= tol * max(1.0, abs(want[j])), (r, s, layer, h, got, want)
                    # the bug class: query at its absolute position while keys sit at cache positions
                    bad = _attend_fast(kv, layer, q, s, h, ref.tokens + s)
                    if max(abs(bad[j] - want[j]) for j in range(kv.head_dim)) > 1e-3:
                        absolute_wrong += 1
        a = rng.below(k + 1)
        kv.commit(a)
        ref.commit(a)
    assert ref.tokens > 5 * (S + W), ref.tokens
    assert absolute_wrong > 10, "the absolute-position control never differed: the test has no teeth"
