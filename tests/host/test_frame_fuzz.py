"""Fuzzing the frame decoder, the body checks and a live link endpoint (CPython).

Structure-aware: most fuzzed frames are mutations of valid frames of every type (header fields,
lengths, draft records, verdict and snapshot fields, splices) that are then given a valid CRC (and
usually a consistent length), so they get past the CRC to the parser's deeper checks; the rest are
raw mutations of the wire bytes (bit flips, inserted and deleted bytes, stray 0x00). At least 10**5
fuzzed frames go through:

- frame_codec.Decoder, checked against a plain reference (struct + binascii): it accepts exactly the frames
  whose size, CRC, version and length field are right, and reports them with the right fields;
- frame.check_body / parse_body: a code in range, or FrameError, never another exception;
- a Link endpoint with an established peer, fed the same stream: no exception, only counters move,
  and its window and sequence state stay inside their bounds.
"""

from __future__ import annotations

import binascii
import random
import struct
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from shared import cobs, frame, frame_codec, frame_host, link

A_EP = b"\x0a\x0a\x0a\x0a"
B_EP = b"\x0b\x0b\x0b\x0b"
TOTAL = 100_000
HDR_FMT = "<BBHHH4s4sHH"


def ref_accepts(raw: bytes, max_frame: int = frame.MAX_FRAME) -> bool:
    """The frame checks of docs/PROTOCOL.md section 2, written plainly."""
    n = len(raw)
    if n < 8 or n > max_frame:
        return False
    if binascii.crc32(raw[:-4]) != struct.unpack("<I", raw[-4:])[0]:
        return False
    if raw[0] >> 4 != 1:
        return False
    if n < 24:
        return False
    ftype, blen = raw[1], struct.unpack_from("<H", raw, 2)[0]
    return n == 20 + blen + (14 if ftype & 0x80 else 0) + 4


def seal(raw: bytearray) -> bytes:
    struct.pack_into("<I", raw, len(raw) - 4, binascii.crc32(bytes(raw[:-4])))
    return bytes(raw)


def corpus(rng: random.Random) -> list[bytes]:
    bodies = [
        (frame.HELLO, frame_codec.pack_hello(role=0, draft_k=4, topk=4, kv_sink=4, kv_window=28, kv_staged=8,
                                       board_id="rp2040_pico", tx_base=0)),
        (frame.HEARTBEAT, frame_host.pack_body(frame.HEARTBEAT, flags=1, rx_bad=3)),
        (frame.ACK, frame_host.pack_body(frame.ACK, flags=1)),
        (frame.ACK, frame_host.pack_body(frame.ACK, flags=3, sack=b"\x05\x00")),
        (frame.ERROR, frame_host.pack_body(frame.ERROR, code=1, detail=0x21, text="x")),
        (frame.LOG, frame_host.pack_body(frame.LOG, ts=12345, level=2, text="pump 3 bearing temperature rising")),
        (frame.DRAFT, frame_host.pack_draft(7, 1000, [([3, 9, 40, 41], [40000, 20000, 4000, 1536], 1), ([5], [], 0),
                                                 ([1, 2], [1, 65535], 0)])),
        (frame.VERDICT, frame_host.pack_verdict(7, 1000, 2, correction=77)),
        (frame.KVSNAP, frame_host.pack_body(frame.KVSNAP, snap=1, total=100, offset=40, crc=0x1234, data=bytes(range(60)))),
        (0x70, bytes(rng.randrange(256) for _ in range(50))),
    ]
    out = []
    for seq in range(4):
        for t, body in bodies:
            out.append(frame_host.frame_bytes(t, body, seq=seq, ack=seq, epoch=A_EP, peer=B_EP, txoff=seq * 100,
                                         limit=seq * 100 + 900))
    out.append(frame_host.frame_bytes(frame.LOG, bodies[4][1], epoch=A_EP, peer=B_EP, signer=frame_codec.Signer(b"k" * 16),
                                 counter=5))
    return out


INTERESTING = (0, 1, 0x7F, 0x80, 0xFE, 0xFF)


def mutate(rng: random.Random, pool: list[bytes]) -> bytes:
    """One structure-aware mutation of a corpus frame; returns the decoded frame (CRC fixed or not)."""
    raw = bytearray(rng.choice(pool))
    body_len = len(raw) - 24 - (14 if raw[1] & 0x80 else 0)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(11)
        if op == 0:  # a header field
            off = rng.choice((0, 1, 2, 4, 6, 8, 12, 16, 18))
            width = 1 if off < 2 else (4 if off in (8, 12) else 2)
            for i in range(width):
                raw[off + i] = rng.choice(INTERESTING) if rng.random() < 0.5 else rng.randrange(256)
        elif op == 1 and body_len > 0:  # a body byte
            raw[20 + rng.randrange(body_len)] = rng.choice(INTERESTING) if rng.random() < 0.5 else rng.randrange(256)
        elif op == 2 and body_len > 0:  # a body bit
            i = 20 + rng.randrange(body_len)
            raw[i] ^= 1 << rng.randrange(8)
        elif op == 3 and body_len > 0:  # truncate the body
            cut = rng.randrange(body_len)
            del raw[20 + cut:20 + body_len]
            body_len = cut
        elif op == 4:  # extend the body
            size = rng.randrange(1, 40) if rng.random() < 0.97 else rng.randrange(900, 1100)  # some over the cap
            extra = bytes(rng.randrange(256) for _ in range(size))
            raw[20 + body_len:20 + body_len] = extra
            body_len += len(extra)
        elif op == 5:  # splice another frame's body under this header
            other = rng.choice(pool)
            ob = other[20:len(other) - 4 - (14 if other[1] & 0x80 else 0)]
            raw[20:20 + body_len] = ob
            body_len = len(ob)
        elif op == 6:  # retype
            raw[1] = rng.choice((1, 2, 3, 4, 5, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x7F, 0x80, 0x91, 0xFF, 0))
        elif op == 7:  # version
            raw[0] = rng.choice((0x00, 0x11, 0x1F, 0x20, 0x21, 0xF0, 0x10))
        elif op == 8 and body_len >= 8:  # draft-shaped fields: k, m, pick, counts
            i = rng.choice((6, 8, 9, 10, 11, 18, 19))
            if 20 + i < 20 + body_len:
                raw[20 + i] = rng.choice(INTERESTING + (2, 3, 4, 16, 17, 32, 33))
        elif op == 9:  # sequence / ack near the edges
            struct.pack_into("<HH", raw, 4, rng.choice((0, 1, 2, 3, 0x7FFF, 0x8000, 0xFFFF)),
                             rng.choice((0, 1, 2, 3, 0x7FFF, 0xFFFF)))
        elif op == 10:  # epochs: stranger, zero, swapped
            raw[8:16] = rng.choice((A_EP + B_EP, B_EP + A_EP, b"\x00" * 8, A_EP + b"\x00" * 4, b"\x0c" * 8))
    if rng.random() < 0.7:  # keep the length field consistent so the deeper checks run
        blen = len(raw) - 24 - (14 if raw[1] & 0x80 else 0)
        if 0 <= blen <= 0xFFFF:
            struct.pack_into("<H", raw, 2, blen)
    if len(raw) < 8:
        raw += bytes(8 - len(raw))
    return seal(raw) if rng.random() < 0.85 else bytes(raw)


def wire_mutate(rng: random.Random, wire: bytearray) -> bytearray:
    for _ in range(rng.choice((1, 2, 4))):
        op = rng.randrange(4)
        i = rng.randrange(len(wire))
        if op == 0:
            wire[i] ^= 1 << rng.randrange(8)
        elif op == 1 and len(wire) > 3:
            del wire[i]
        elif op == 2:
            wire.insert(i, rng.randrange(256))
        else:
            wire.insert(i, 0)
    return wire


class FakePort:
    """A transport whose reads come from a byte queue and whose writes are counted and dropped."""

    def __init__(self) -> None:
        self.rx = bytearray()
        self.written = 0

    def write(self, buf, n):
        self.written += n
        return n

    def readinto(self, buf):
        n = min(len(buf), len(self.rx))
        buf[:n] = self.rx[:n]
        del self.rx[:n]
        return n


def established_link() -> tuple[link.Link, FakePort, list]:
    port = FakePort()
    got: list = []
    lk = link.Link(port, on_frame=lambda t, b, o, n: got.append((t, n)), epoch=B_EP, role=1, reorder=8)
    hello = frame_codec.pack_hello(role=0, tx_base=0)
    port.rx += frame_host.wire_bytes(frame.HELLO, hello, epoch=A_EP, peer=B_EP, ack=0xFFFF, limit=4000)
    lk.poll(0)
    assert lk.established
    return lk, port, got


def test_structure_aware_fuzz_crashes_nothing():
    rng = random.Random(20240601)
    pool = corpus(rng)
    dec = frame_codec.Decoder()
    lk, port, got = established_link()
    t0 = time.perf_counter()
    accepted = structured = raw_mutations = deep = 0
    now = 1
    stream = bytearray()
    expect = []  # (accepted?, seq) per fuzzed frame, in order
    for i in range(TOTAL):
        raw = mutate(rng, pool)
        ok = ref_accepts(raw)
        wire = bytearray(b"\x00" + cobs.encode(raw) + b"\x00")
        if rng.random() < 0.12:
            wire = wire_mutate(rng, wire)
            raw_mutations += 1
            ok = None  # the reference cannot tell what the damaged wire decodes to
        else:
            structured += 1
        expect.append((ok, raw))
        stream += wire
        if ok:
            t = raw[1] & 0x7F
            blen = struct.unpack_from("<H", raw, 2)[0]
            code = frame.check_body(t, raw, 20, blen)
            assert 0 <= code < len(frame_host.BODY_ERRORS)
            try:
                frame_host.parse_body(t, raw[20:20 + blen])
            except frame.FrameError:
                assert code != 0
            else:
                assert code == 0
            deep += code == 0
        if len(expect) == 64 or i == TOTAL - 1:
            # the decoder, checked frame by frame against the reference
            j = 0
            seen = []
            while j < len(stream):
                j = dec.feed(stream, j, len(stream))
                if dec.ready:
                    seen.append(bytes(dec.buf[:dec.n]))
            clean = [r for ok_, r in expect if ok_]
            if all(ok_ is not None for ok_, _ in expect):
                assert seen == clean, "decoder and reference disagree"
            else:
                for r in seen:  # whatever the damage, an accepted frame passes every check
                    assert ref_accepts(r)
            accepted += len(seen)
            # the same bytes into a live endpoint
            port.rx += stream
            while port.rx:  # at most rx_budget bytes per poll
                now = (now + rng.randrange(0, 40)) & link.MASK30
                lk.poll(now)
            assert 0 <= lk.queued() <= 8 and 0 <= lk._rx_next <= 0xFFFF
            stream = bytearray()
            expect = []
    elapsed = time.perf_counter() - t0
    s = lk.stats()
    assert structured + raw_mutations == TOTAL and raw_mutations > 5000
    assert accepted > 20000 and deep > 5000, (accepted, deep)
    assert s["err_oversize"] > 100 and s["peer_reboots"] > 100 and s["rx_auth_fail"] > 100
    assert s["rx_frames"] > 10000 and s["err_crc"] > 1000 and s["err_version"] > 100 and s["err_length"] > 1000
    assert s["rx_delivered"] + s["rx_dup"] + s["rx_gap"] + s["rx_bad_body"] > 100
    assert elapsed < 90, elapsed


def test_decoder_survives_every_prefix_of_garbage():
    rng = random.Random(5)
    dec = frame_codec.Decoder(max_frame=64)
    good = frame_host.wire_bytes(frame.ACK, frame_host.pack_body(frame.ACK), epoch=A_EP)
    for _ in range(2000):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        data = junk + good
        i = 0
        ready = 0
        while i < len(data):
            i = dec.feed(data, i, len(data))
            ready += dec.ready
        assert ready == 1  # the frame after any garbage is decoded (its leading 0x00 resynchronises)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=700), st.lists(st.integers(1, 64), min_size=1, max_size=30))
def test_cobs_stream_round_trip_any_chunking(data, cuts):
    wire = b"\x00" + cobs.encode(data) + b"\x00"
    d = cobs.Decoder(800)
    i = 0
    k = 0
    out = []
    while i < len(wire):
        end = min(len(wire), i + cuts[k % len(cuts)])
        k += 1
        while i < end:
            i = d.feed(wire, i, end)
            if d.done:
                out.append(bytes(d.buf[:d.n]))
    assert out == [data]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_parse_raises_only_frame_error(raw):
    try:
        frame_host.parse(raw)
    except frame.FrameError:
        pass
    for t in (1, 2, 3, 4, 0x10, 0x11, 0x12, 0x13, 0x70):
        try:
            frame_host.parse_body(t, raw)
        except frame.FrameError:
            pass
