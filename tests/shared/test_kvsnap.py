# test_kvsnap.py: KV snapshots round-trip exactly and every damaged, foreign or truncated one is refused.
import binascii
import io
import struct
from array import array

import testkit
from ringkv_ref import RefKV
from shared import kvsnap, ringkv

RingKV = ringkv.RingKV
SnapErr = kvsnap.KVSnapshotError


def _vals(rng, n, tc):
    if tc == "b":
        return [rng.below(256) - 128 for _ in range(n)]
    return [(rng.below(2001) - 1000) / 256.0 for _ in range(n)]


def _step(kv, ref, rng):
    # one random operation on both caches (ref may be another RingKV or a RefKV)
    op = rng.below(8)
    L, d, h, tc = kv.layers, kv.kv_dim, kv.heads, kv.typecode
    if op < 4 and kv.pending < kv.staged:
        s = kv.stage()
        assert ref.stage() == s
        for layer in range(L):
            kr, vr = _vals(rng, d, tc), _vals(rng, d, tc)
            ks, vs = [rng.below(1 << 16) for _ in range(h)], [rng.below(1 << 16) for _ in range(h)]
            for c in (kv, ref):
                c.write(layer, s, kr, vr)
                c.write_scales(layer, s, ks, vs)
    elif op < 6:
        n = rng.below(kv.pending + 1)
        kv.commit(n)
        ref.commit(n)
    elif op == 6:
        kv.discard()
        ref.discard()
    elif kv.pending == 0:
        k, v = _vals(rng, L * d, tc), _vals(rng, L * d, tc)
        sc = [rng.below(999) for _ in range(L * h)]
        kv.append(k, v, sc, sc)
        ref.append(k, v, sc, sc)


def _state(kv):
    """Everything observable about a cache: counters and each live and staged token's rows and scales."""
    out = [kv.live, kv.head if kv.live == kv.capacity else 0, kv.pending, kv.tokens]
    for i in range(kv.live + kv.pending):
        slot = kv.slot_of(i) if i < kv.live else kv.staged_slot(i - kv.live)
        for layer in range(kv.layers):
            o = kv.row(layer, slot)
            out.append([kv.k[o + j] for j in range(kv.kv_dim)] + [kv.v[o + j] for j in range(kv.kv_dim)])
            o = kv.scale_at(layer, slot)
            out.append([kv.kscale[o + j] for j in range(kv.heads)] + [kv.vscale[o + j] for j in range(kv.heads)])
    return out


def _raw(kv):
    return (kv.live, kv.head, kv.pending, kv.tokens, bytes(kv.k), bytes(kv.v), bytes(kv.kscale), bytes(kv.vscale))


def _busy(shape, seed, ops):
    layers, d, S, W, D, heads, tc = shape
    kv = RingKV(layers, d, S, W, D, tc, heads)
    ref = RefKV(layers, d, S, W, D, heads)
    rng = testkit.Rng(seed)
    for _ in range(ops):
        _step(kv, ref, rng)
    return kv, rng


def _snap(kv):
    buf = io.BytesIO()
    n = kvsnap.save(kv, buf)
    data = buf.getvalue()
    assert n == len(data) == kvsnap.size(kv), (n, len(data), kvsnap.size(kv))
    return data


SMALL = (1, 2, 1, 2, 2, 1, "b")  # an 80-byte snapshot: every length and every bit is tried


def test_round_trip_then_both_continue_identically():
    for shape in ((2, 4, 2, 3, 3, 2, "b"), (1, 4, 1, 4, 2, 2, "f"), (3, 6, 0, 5, 4, 3, "b")):
        kv, rng = _busy(shape, 3, 300)
        assert kv.tokens > 3 * (shape[2] + shape[3]), "no wraps before the snapshot"
        staged_before = kv.pending
        data = _snap(kv)
        assert kv.pending == staged_before, "save must not touch staged drafts"
        kv.discard()  # the snapshot holds committed state only
        layers, d, S, W, D, heads, tc = shape
        other = RingKV(layers, d, S, W, D + 2, tc, heads)  # any staging depth may load it
        for _ in range(7):
            other.append(_vals(rng, layers * d, tc), _vals(rng, layers * d, tc))
        other.stage()
        kvsnap.load(other, io.BytesIO(data))
        assert other.pending == 0
        assert _state(other) == _state(kv), shape
        assert _snap(other) == data, "a restored cache must save the same bytes"
        for step in range(200):
            _step(kv, other, rng)
            assert _state(other) == _state(kv), (shape, step)


class _Trickle:
    """A stream that hands out at most `most` bytes per readinto, like a serial port."""

    def __init__(self, data, most):
        self.data = data
        self.pos = 0
        self.most = most

    def readinto(self, mv):
        n = min(len(mv), self.most, len(self.data) - self.pos)
        for i in range(n):
            mv[i] = self.data[self.pos + i]
        self.pos += n
        return n

    def read(self, n):
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


def test_short_reads_resume():
    for shape in ((2, 4, 2, 3, 3, 2, "b"), (1, 4, 1, 4, 2, 2, "f")):
        kv, _ = _busy(shape, 9, 120)
        kv.discard()
        data = _snap(kv)
        for most in (1, 3, 7):
            other = RingKV(shape[0], shape[1], shape[2], shape[3], shape[4], shape[6], shape[5])
            kvsnap.load(other, _Trickle(data, most))
            assert _state(other) == _state(kv), (shape, most)


def _dest():
    layers, d, S, W, D, heads, tc = SMALL
    kv = RingKV(layers, d, S, W, D, tc, heads)
    for t in range(5):
        kv.append([t, -t], [2 * t, 1], [t], [t + 1])
    kv.stage()
    kv.write(0, 0, [9, 9], [9, 9])
    return kv


def test_truncated_at_every_length_is_refused():
    src, _ = _busy(SMALL, 21, 40)
    data = _snap(src)
    src.discard()  # staged drafts are not part of a snapshot
    assert len(data) == 80
    dest = _dest()
    for n in range(len(data)):
        before = _raw(dest)
        e = testkit.raises(SnapErr, kvsnap.load, dest, io.BytesIO(data[:n]))
        assert "truncated" in str(e), (n, str(e))
        if n < kvsnap.HEADER_SIZE:
            assert not e.cache_reset and _raw(dest) == before, "header failure changed the cache (n=%d)" % n
        else:
            assert e.cache_reset and dest.live == 0 and dest.pending == 0, n
            dest = _dest()
    kvsnap.load(dest, io.BytesIO(data))
    assert _state(dest) == _state(src)


def test_every_bit_flip_is_refused():
    src, _ = _busy(SMALL, 22, 40)
    data = _snap(src)
    flipped = bytearray(data)
    dest = _dest()
    for bit in range(len(data) * 8):
        flipped[bit >> 3] ^= 1 << (bit & 7)
        before = _raw(dest)
        e = testkit.raises(SnapErr, kvsnap.load, dest, io.BytesIO(flipped))
        flipped[bit >> 3] ^= 1 << (bit & 7)
        if bit < 32:
            assert "magic" in str(e), str(e)
        in_header = bit < kvsnap.HEADER_SIZE * 8
        assert e.cache_reset != in_header, (bit, str(e))
        if in_header:
            assert _raw(dest) == before, bit
        else:
            assert "CRC" in str(e) and dest.live == 0, (bit, str(e))
            dest = _dest()
    assert bytes(flipped) == data


def test_mismatched_shape_or_dtype_names_both():
    src, _ = _busy((2, 4, 2, 3, 3, 2, "b"), 4, 60)
    data = _snap(src)
    cases = (
        ((3, 4, 2, 3, 3, "b", 2), "layers=3"), ((2, 8, 2, 3, 3, "b", 2), "kv_dim=8"),
        ((2, 4, 1, 3, 3, "b", 2), "sink=1"), ((2, 4, 2, 4, 3, "b", 2), "window=4"),
        ((2, 4, 2, 3, 3, "b", 1), "heads=1"), ((2, 4, 2, 3, 3, "f", 2), "'f'"),
    )
    for args, word in cases:
        dest = RingKV(*args)
        dest.append([1] * (args[0] * args[1]), [2] * (args[0] * args[1]))
        before = _raw(dest)
        e = testkit.raises(SnapErr, kvsnap.load, dest, io.BytesIO(data))
        msg = str(e)
        assert word in msg and not e.cache_reset and _raw(dest) == before, (args, msg)
        if word.startswith("'"):
            assert "dtype 'b'" in msg, msg
        else:
            assert "(layers=2, sink=2, window=3, kv_dim=4, heads=2)" in msg, msg
    kvsnap.load(RingKV(2, 4, 2, 3, 9, "b", 2), io.BytesIO(data))  # staging depth may differ


def test_trailing_bytes_are_refused():
    src, _ = _busy(SMALL, 5, 30)
    data = _snap(src)
    for extra in (b"\x00", b"EKVS", data):
        dest = _dest()
        e = testkit.raises(SnapErr, kvsnap.load, dest, io.BytesIO(data + extra))
        assert "trailing" in str(e) and e.cache_reset and dest.live == 0, str(e)


def _reheader(data, offset, fmt, value):
    # patch a header field and re-seal both CRCs, as a buggy or hostile writer could
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    struct.pack_into("<I", b, 36, binascii.crc32(bytes(b[0:36])))
    struct.pack_into("<I", b, len(b) - 4, binascii.crc32(bytes(b[0:len(b) - 4])))
    return bytes(b)


def test_wrong_magic_version_or_fields_are_refused_unchanged():
    src, _ = _busy(SMALL, 6, 30)
    data = _snap(src)
    cases = (
        (b"GGUF" + data[4:], "magic"),
        (_reheader(data, 4, "<H", 2), "version 2 is unknown"),
        (_reheader(data, 20, "<I", 1 << 31), "shape"),  # a hostile window size: refused, nothing allocated
        (_reheader(data, 24, "<I", 4), "inconsistent"),  # live > S+W
        (_reheader(data, 28, "<I", 2), "inconsistent"),  # head >= W
        (_reheader(data, 6, "<B", ord("h")), "dtype"),
        (b"", "truncated"),
    )
    for blob, word in cases:
        dest = _dest()
        before = _raw(dest)
        e = testkit.raises(SnapErr, kvsnap.load, dest, io.BytesIO(blob))
        assert word in str(e) and not e.cache_reset and _raw(dest) == before, (word, str(e))
        assert isinstance(e, ValueError)


def test_failed_load_leaves_a_usable_cache():
    src, _ = _busy(SMALL, 7, 30)
    data = bytearray(_snap(src))
    data[50] ^= 0x10
    dest = _dest()
    testkit.raises(SnapErr, kvsnap.load, dest, io.BytesIO(data))
    assert dest.live == 0 and dest.pending == 0 and dest.tokens == 0
    row = array("b", [3, 4])
    dest.append(row, row)
    assert dest.live == 1 and dest.k[dest.row(0, dest.slot_of(0))] == 3
