# test_frame.py: CRC-32 fallback = binascii, COBS and frames match plain reference encoders and the
# doc's vectors, and every damaged frame (truncated, bit-flipped, padded, over-long, garbage) is rejected
# and counted, with decoding back in step at the next delimiter; encode/decode/feed never allocate.
import binascii
import gc

# MicroPython compiles frame.py from source on a 196 KB heap: collect first, so this module's parse
# tree does not fragment the heap for it.
gc.collect()
from shared import cobs, crc32, frame, frame_codec, frame_host  # noqa: E402

gc.collect()
import testkit  # noqa: E402
from link_ref import ref_cobs, ref_frame, ref_wire  # noqa: E402

EPOCH = b"\x04\x03\x02\x01"
PEER = b"\x0d\x0c\x0b\x0a"


def _rand_bytes(rng, n, zero_every=0):
    b = bytearray(n)
    for i in range(n):
        b[i] = 0 if zero_every and rng.below(zero_every) == 0 else rng.below(256)
    return b


def _wire(ftype, body, seq=1, ack=2, txoff=3, limit=4, enc=None):
    enc = enc or frame_codec.Encoder()
    n = enc.encode(ftype, seq, ack, EPOCH, PEER, txoff, limit, body, 0, len(body))
    return bytes(enc.wire[:n])


def _decode_all(data, dec=None):
    """Feed data; return (decoder, list of (seq, body bytes)) for every valid frame."""
    dec = dec or frame_codec.Decoder()
    got = []
    i = 0
    while i < len(data):
        i = dec.feed(data, i, len(data))
        if dec.ready:
            got.append((dec.seq, bytes(dec.buf[frame.HDR:frame.HDR + dec.blen])))
    return dec, got


# ---- CRC-32 ----

def test_crc32_fallback_matches_binascii():
    assert crc32.crc32(b"123456789") == 0xCBF43926 == binascii.crc32(b"123456789")
    assert crc32.crc32(b"") == 0 == binascii.crc32(b"")
    rng = testkit.Rng(11)
    for n in (1, 2, 3, 4, 7, 31, 64, 255, 256, 1000):
        data = bytes(_rand_bytes(rng, n, 5))
        assert crc32.crc32(data) == binascii.crc32(data), n
        cut = rng.below(n + 1)
        prev = binascii.crc32(data[:cut])
        assert crc32.crc32(data[cut:], prev) == binascii.crc32(data), n  # chaining, as binascii
    e = testkit.raises(ValueError, crc32.crc32, b"x", -1)
    assert "crc" in str(e)
    testkit.raises(ValueError, crc32.new, "table")


def test_crc_running_kinds_agree_on_ranges():
    rng = testkit.Rng(12)
    buf = _rand_bytes(rng, 300, 7)
    kinds = [crc32.Halves()]
    if crc32.WIDE_INTS or not testkit.IS_MP:
        kinds.append(crc32.new("binascii"))
    if testkit.IS_CP:  # CircuitPython's boards run no native code: binascii (or the halves) by default
        assert crc32.new().kind in ("binascii", "halves")
    elif testkit.IS_MP:  # the boards' CRC: MicroPython with native code (the unix port and rp2 both have it)
        kinds.append(crc32.new("viper"))
        assert crc32.new().kind == "viper"
    else:
        testkit.raises(ValueError, crc32.new, "viper")
        assert crc32.new().kind == "binascii"
    out = bytearray(4)
    for start, end in ((0, 0), (0, 1), (5, 9), (0, 300), (17, 254), (299, 300)):
        want = binascii.crc32(bytes(buf[start:end]))
        for c in kinds:
            c.reset()
            mid = (start + end) // 2
            c.update(buf, start, mid)
            c.update(buf, mid, end)
            assert c.value() == want, (c.kind, start, end)
            c.put(out, 0)
            assert out == want.to_bytes(4, "little"), (c.kind, start, end)
            assert c.matches(out, 0)
            out[3] ^= 0x40
            assert not c.matches(out, 0)


def test_crc_paths_allocate_nothing():
    buf = bytearray(range(256)) + bytearray(range(256))
    out = bytearray(4)
    kinds = [crc32.Halves()]
    if crc32.WIDE_INTS:
        kinds.append(crc32.new("binascii"))
    if testkit.IS_MP:
        kinds.append(crc32.new("viper"))

    def run(c):
        c.reset()
        c.update(buf, 3, 400)
        c.put(out, 0)
        return c.matches(out, 0)

    for c in kinds:
        assert testkit.run_locked(run, c)


# ---- COBS ----

def test_cobs_matches_reference_at_block_edges():
    rng = testkit.Rng(21)
    sizes = (0, 1, 2, 253, 254, 255, 256, 507, 508, 509, 600)
    for n in sizes:
        gc.collect()
        for mode in range(4):
            if mode == 0:
                data = bytes(_rand_bytes(rng, n))
            elif mode == 1:
                data = bytes(1 + rng.below(255) for _ in range(n))  # no zero: full blocks
            elif mode == 2:
                data = bytes(n)  # all zeros
            else:
                data = bytes(1 + rng.below(255) for _ in range(n)) + b"\x00"
            enc = cobs.encode(data)
            assert enc == ref_cobs(data), (n, mode)
            assert 0 not in enc and len(enc) <= cobs.max_encoded(len(data))
            assert cobs.decode(enc) == data, (n, mode)
    assert cobs.encode(b"\x11" * 254) == b"\xff" + b"\x11" * 254  # no empty block after a final full one
    assert cobs.encode(b"\x11" * 254 + b"\x00") == b"\xff" + b"\x11" * 254 + b"\x01\x01"
    assert cobs.encode(b"\x00\x00") == b"\x01\x01\x01"


def test_cobs_bad_input():
    e = testkit.raises(cobs.CobsError, cobs.decode, b"\x05\x01\x02")
    assert "malformed" in str(e)
    testkit.raises(cobs.CobsError, cobs.decode, b"\x02\x00")
    testkit.raises(cobs.CobsError, cobs.decode, b"")
    testkit.raises(cobs.CobsError, cobs.Decoder, 0)
    testkit.raises(ValueError, frame_codec.Decoder, 10)


def test_cobs_stream_counts_cut_blocks_and_ignores_empty_frames():
    d = cobs.Decoder(64)
    data = b"\x00\x00\x00\x03\x41\x42\x00\x00\x05\x01\x00\x02\x43\x00"
    i = 0
    got = []
    while i < len(data):
        i = d.feed(data, i, len(data))
        if d.done:
            got.append(bytes(d.buf[:d.n]))
    assert got == [b"AB", b"C"], got
    assert d.err_cobs == 1 and d.frames == 2


# ---- frames ----

def test_frame_round_trip_matches_reference():
    rng = testkit.Rng(31)
    dec = frame_codec.Decoder()
    for ftype in (frame.HELLO, frame.HEARTBEAT, frame.ACK, frame.ERROR, frame.LOG, 0x55):
        for n in (0, 1, 100, 233, 234, 500, 1000):
            if n > frame.MAX_FRAME - frame.OVERHEAD:
                continue
            body = bytes(_rand_bytes(rng, n, 9))
            seq, ack, txoff, limit = rng.below(65536), rng.below(65536), rng.below(65536), rng.below(65536)
            w = _wire(ftype, body, seq, ack, txoff, limit)
            assert w == ref_wire(ftype, body, seq, ack, 0x01020304, 0x0A0B0C0D, txoff, limit), (ftype, n)
            assert w == frame_host.wire_bytes(ftype, body, seq=seq, ack=ack, epoch=0x01020304, peer=0x0A0B0C0D,
                                         txoff=txoff, limit=limit)
            i = dec.feed(w, 0, len(w))
            assert dec.ready and i == len(w), (ftype, n)
            assert (dec.ftype, dec.blen, dec.seq, dec.ack, dec.txoff, dec.limit) == (ftype, n, seq, ack, txoff, limit)
            assert dec.wire == len(w) and dec.n == n + frame.OVERHEAD
            assert bytes(dec.buf[frame.HDR:frame.HDR + n]) == body
            assert frame.same4(dec.buf, frame.H_EPOCH, EPOCH, 0) and frame.same4(dec.buf, frame.H_PEER, PEER, 0)
            if ftype == 0x55:  # random bodies are valid only for a type without a layout
                p = frame_host.parse(ref_frame(ftype, body, seq, ack, 0x01020304, 0x0A0B0C0D, txoff, limit))
                assert p["seq"] == seq and p["body"] == body and p["limit"] == limit
    assert dec.errors() == 0 and dec.ok > 0


def _doc_vectors():
    """Vectors from docs/PROTOCOL.md: blocks `vector NAME` ... `end`; a line starting with a space
    continues the previous field."""
    vectors = []
    cur = None
    key = None
    with open("docs/PROTOCOL.md") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("vector "):
                cur = {"name": line.split()[1]}
                key = None
            elif cur is None:
                continue
            elif line.strip() == "end":
                vectors.append(cur)
                cur = None
            elif line.startswith(" ") and key:
                cur[key] += " " + line.strip()
            elif line.strip():
                parts = line.split(None, 1)
                key = parts[0]
                cur[key] = parts[1] if len(parts) > 1 else ""
    return vectors


def _hex(s):
    return bytes(int(h, 16) for h in s.split())


def _fields(s):
    p = s.split()
    return dict((p[i], int(p[i + 1], 0)) for i in range(0, len(p), 2))


def test_doc_vectors_match_encoder_and_reference():
    vectors = _doc_vectors()
    assert len(vectors) >= 5, "docs/PROTOCOL.md should hold at least 5 vectors, found %d" % len(vectors)
    names = set()
    versions = set()
    logs = {}
    saw_zero_run = saw_full_block = False
    for v in vectors:
        names.add(v["name"])
        h = _fields(v["header"])
        body = _hex(v["body"])
        raw = _hex(v["frame"])
        wire = _hex(v["wire"])
        ep = h["epoch"]
        peer = h["peer"]
        signer = None
        if "key" in v:
            signer = frame_codec.Signer(_hex(v["key"]))
        ver = h.get("version", 0x11)  # a vector of an older peer names its version
        versions.add(ver)
        got_raw = frame_host.frame_bytes(h["type"] & 0x7F, body, seq=h["seq"], ack=h["ack"], epoch=ep, peer=peer,
                                    txoff=h["txoff"], limit=h["limit"], signer=signer, counter=h.get("counter", 0),
                                    version=ver)
        assert got_raw == raw, "vector %s: frame differs from the encoder" % v["name"]
        assert raw[0] == ver, v["name"]
        if signer is None:
            assert raw == ref_frame(h["type"], body, h["seq"], h["ack"], ep, peer, h["txoff"], h["limit"],
                                    ver), v["name"]
        assert wire == b"\x00" + ref_cobs(raw) + b"\x00", v["name"]
        assert wire == b"\x00" + cobs.encode(raw) + b"\x00", v["name"]
        dec, got = _decode_all(wire)
        assert got == [(h["seq"], body)], v["name"]
        p = frame_host.parse(raw)
        assert p["type"] == h["type"] & 0x7F and p["signed"] == (signer is not None)
        if signer is not None:
            assert signer.verify(bytearray(raw), 0, len(body))
        fields = frame_host.parse_body(h["type"] & 0x7F, body, ver & 15)  # every vector's body is well-formed
        if h["type"] & 0x7F == frame.LOG:
            logs[v["name"]] = fields
        if h["type"] & 0x7F == frame.CMD:
            cmd = frame_host.parse_cmd(body)
        saw_zero_run = saw_zero_run or b"\x00\x00\x00" in raw
        saw_full_block = saw_full_block or 0xFF in wire[:2]
    assert saw_zero_run and saw_full_block, "vectors should cover zero runs and a full 254-byte COBS block"
    assert len(names) == len(vectors)
    # the current version (a code package's BEGIN, UNFIT), 1.3 (UPDATE, UPSTAT), 1.2 (CMD), 1.1 (the frames they
    # did not change) and a 1.0 peer's LOG
    assert versions == set((frame.VERSION, 0x13, 0x12, 0x11, 0x10)), versions
    assert {"update_begin", "upstat_receiving", "update_begin_code", "upstat_unfit"} <= names
    # the same line as a 1.1 and a 1.0 body: the 1.1 one carries its line seq, the 1.0 one reads as seq 0
    assert logs["log_signed"]["lseq"] == 42 and logs["log_signed"]["boot"] == 1
    assert logs["log_v10"]["lseq"] == 0 and logs["log_v10"]["text"] == logs["log_signed"]["text"]
    assert logs["log_full_block"]["flags"] == frame.LG_SPILLED and logs["log_full_block"]["lseq"] == 0x05060708
    assert (logs["log_signed"]["day"], logs["log_signed"]["ms"]) == (9830, 21601234)  # 2026-11-30T06:00:01.234Z
    assert logs["log_v10"]["day"] == frame.WALL_NONE  # a 1.0 line carries no wall time
    assert (cmd["id"], cmd["verb"], cmd["level"], cmd["machine"], cmd["tag"], cmd["by"]) == (
        42, 1, 0, "P-1", "discharge_press", "alice")


def test_every_truncation_is_rejected_and_the_next_frame_survives():
    body = frame_host.pack_verdict(7, 1000, 3, correction=42)
    w = _wire(frame.VERDICT, body, seq=9)
    nxt = _wire(frame.LOG, frame_host.pack_body(frame.LOG, ts=5, level=1, text="next"), seq=10)
    for cut in range(1, len(w) - 1):
        dec, got = _decode_all(w[:cut] + b"\x00" + nxt)
        assert got == [(10, frame_host.pack_body(frame.LOG, ts=5, level=1, text="next"))], cut
        assert dec.errors() == (1 if cut > 1 else 0), (cut, dec.errors())


def test_every_single_bit_flip_is_rejected_and_counted():
    body = frame_host.pack_draft(3, 77, [([5, 9, 300], [60000, 5000, 536], 1), ([8], [], 0)])
    w = bytearray(_wire(frame.DRAFT, body, seq=4))
    nxt = _wire(frame.ACK, frame_host.pack_body(frame.ACK), seq=5)
    for i in range(1, len(w) - 1):
        for bit in range(8):
            w[i] ^= 1 << bit
            dec, got = _decode_all(bytes(w) + nxt)
            w[i] ^= 1 << bit
            assert got == [(5, frame_host.pack_body(frame.ACK))], (i, bit, got)
            assert dec.errors() >= 1, (i, bit)


def test_zero_added_or_dropped_at_the_end_is_caught():
    body = frame_host.pack_body(frame.LOG, ts=1234, level=2, text=b"pump 3 bearing temp rising")
    raw = ref_frame(frame.LOG, body, 1, 2, 3, 4, 5, 6)
    for bad in (raw + b"\x00", raw + b"\x00\x00\x00\x00", raw[:-1], b"\x00" + raw):
        dec, got = _decode_all(b"\x00" + cobs.encode(bad) + b"\x00")
        assert got == [] and dec.err_crc + dec.err_length == 1, bad
        testkit.raises(frame.FrameError, frame_host.parse, bad)
    # the length field alone catches a padded frame whose CRC was recomputed (a CRC-only design would not)
    padded = bytearray(raw[:-4] + b"\x00")
    padded += binascii.crc32(bytes(padded)).to_bytes(4, "little")
    dec, got = _decode_all(b"\x00" + cobs.encode(padded) + b"\x00")
    assert got == [] and dec.err_length == 1
    e = testkit.raises(frame.FrameError, frame_host.parse, padded)
    assert "length" in str(e)
    # extra delimiters on the wire are empty frames: ignored, not errors
    w = _wire(frame.LOG, body)
    dec, got = _decode_all(b"\x00\x00" + w + b"\x00\x00" + w[1:])
    assert len(got) == 2 and dec.errors() == 0


def test_garbage_bursts_then_resync_at_next_delimiter():
    rng = testkit.Rng(41)
    frames = []
    enc = frame_codec.Encoder()  # one for all 40 frames: 40 encoders' buffers would fragment a 196 KB heap
    for s in range(40):
        text = bytes(_rand_bytes(rng, rng.below(120), 0))
        frames.append(_wire(frame.LOG, frame_host.pack_body(frame.LOG, ts=s, level=1, text=text), seq=s, enc=enc))
    worst = 0
    starts = []
    whole = 0
    for w in frames:
        starts.append(whole)
        whole += len(w)
    base = b"".join(frames)  # built once, and each trial's stream in one buffer: rebuilding them per
    mv = memoryview(base)  # trial fragments a 196 KB heap (MicroPython)
    sbuf = bytearray(whole + 201)
    for trial in range(30):
        gc.collect()
        k = 5 + rng.below(30)
        at = starts[k] + rng.below(len(frames[k]) + 1)  # inside frame k or just after it
        burst = _rand_bytes(rng, 1 + rng.below(200), 40)
        end = at + len(burst)
        sbuf[0:at] = mv[0:at]
        sbuf[at:end] = burst
        sbuf[end:whole + len(burst)] = mv[at:whole]
        dec, got = _decode_all(memoryview(sbuf)[:whole + len(burst)])
        seqs = [s for s, _ in got]
        lost = [s for s in range(40) if s not in seqs]
        assert len(lost) <= 1 and (not lost or lost[0] == k), (trial, lost)
        assert seqs == sorted(seqs)
        first = min(s for s in seqs if s > k)
        start_after = starts[first] + len(burst)  # where that frame's leading delimiter sits now
        worst = max(worst, start_after - end)
        assert dec.errors() >= 1 or not lost
    assert worst <= max(len(w) for w in frames), worst


def test_over_long_frame_is_dropped_while_decoding():
    dec = frame_codec.Decoder(max_frame=128)
    big = _wire(0x55, bytes(range(1, 201)))
    cut = 150  # decoded bytes already past the cap, long before the closing delimiter
    dec.feed(big, 0, cut)
    assert dec.cobs.oversize == 1 and not dec.ready
    dec.feed(big, cut, len(big))
    assert not dec.ready and dec.errors() == 1
    small = _wire(0x55, b"ok")
    dec, got = _decode_all(small, dec)
    assert got == [(1, b"ok")]
    # an endless stream without delimiters costs nothing but the preallocated buffer
    junk = b"\x07" * 5000
    dec.feed(junk, 0, len(junk))
    assert dec.cobs.oversize == 2 and len(dec.buf) == 128


def test_unknown_version_is_dropped_counted_and_reported():
    raw = bytearray(ref_frame(frame.LOG, frame_host.pack_body(frame.LOG, ts=1, level=1, text=b"x"), 1, 0, 5, 0, 0, 0))
    raw[0] = 0x21
    crc = binascii.crc32(bytes(raw[:-4]))
    for i in range(4):
        raw[len(raw) - 4 + i] = (crc >> (8 * i)) & 0xFF
    dec, got = _decode_all(b"\x00" + cobs.encode(raw) + b"\x00")
    assert got == [] and dec.err_version == 1 and dec.last_version == 0x21
    e = testkit.raises(frame.FrameError, frame_host.parse, bytes(raw))
    assert "version 0x21" in str(e)
    raw[0] = 0x15  # a newer minor of major 1 is accepted
    crc = binascii.crc32(bytes(raw[:-4]))
    for i in range(4):
        raw[len(raw) - 4 + i] = (crc >> (8 * i)) & 0xFF
    dec, got = _decode_all(b"\x00" + cobs.encode(raw) + b"\x00")
    assert len(got) == 1


def test_encode_decode_feed_allocate_nothing():
    enc = frame_codec.Encoder()
    dec = frame_codec.Decoder()
    body = bytearray(frame_host.pack_draft(1, 2, [([5, 7, 9, 300], [30000, 20000, 10000, 5536], 2)] * 4))
    verdict = bytearray(frame_host.pack_verdict(1, 2, 3, correction=9))
    ep = bytearray(EPOCH)
    peer = bytearray(PEER)
    state = [0]

    def encode(_):
        return enc.encode(frame.DRAFT, 1, 2, ep, peer, 3, 4, body, 0, len(body))

    n = testkit.run_locked(encode, 0)
    wire = bytearray(enc.wire[:n])

    def decode_chunks(_):
        i = 0
        while i < n:
            j = i + 7 if i + 7 < n else n
            while i < j:
                i = dec.feed(wire, i, j)
                if dec.ready:
                    state[0] += 1
        return frame.check_body(dec.ftype, dec.buf, frame.HDR, dec.blen)

    assert testkit.run_locked(decode_chunks, 0) == frame.BODY_OK and state[0] == 1

    def byte_by_byte(_):
        k = 0
        for i in range(n):
            if dec.feed_byte(wire[i]):
                k += 1
        return k

    assert testkit.run_locked(byte_by_byte, 0) == 1

    def checks(_):
        return frame.check_body(frame.VERDICT, verdict, 0, len(verdict)) + frame.u32s(verdict, frame.VD_BASE)

    assert testkit.run_locked(checks, 0) == 2
    for kind in (("halves",) + (("binascii",) if crc32.WIDE_INTS or not testkit.IS_MP else ())
                 + (("viper",) if testkit.IS_MP else ())):
        e2 = frame_codec.Encoder(crc=crc32.new(kind))
        d2 = frame_codec.Decoder(crc=crc32.new(kind))

        def both(ctx):  # state passed in: a closure over more than 4 variables allocates per call on MP
            e, d, b = ctx
            m = e.encode(frame.DRAFT, 1, 2, ep, peer, 3, 4, b, 0, len(b))
            d.feed(e.wire, 0, m)
            return d.ready

        assert testkit.run_locked(both, (e2, d2, body)), kind


def test_node_body_writers_allocate_nothing():
    from array import array

    buf = bytearray(8 + 4 * 18)
    ids = array("H", [5, 7, 9, 300])
    counts = array("i", [30000, 20000, 10000, 5536])

    def build(_):
        frame.put_draft_head(buf, 65535, (1 << 30) - 1, 4, 0)
        p = frame.DR_TOKENS
        for _ in range(4):
            p = frame.put_draft_token(buf, p, ids, counts, 4, 3)
        return p

    assert testkit.run_locked(build, 0) == len(buf)
    d = frame_host.parse_body(frame.DRAFT, buf)
    assert d["block"] == 65535 and d["base"] == (1 << 30) - 1 and d["tokens"][0]["token"] == 300
    assert d["tokens"][1]["counts"] == [30000, 20000, 10000, 5536]
    assert frame.draft_token_bytes(4) == 18 and frame.draft_token_bytes(1) == 4


def test_body_checks_accept_good_and_name_bad():
    good = [
        (frame.DRAFT, frame_host.pack_draft(1, 2, [([5], [], 0), ([6, 7], [65535, 1], 1)])),
        (frame.DRAFT, frame_host.pack_draft(1, 2, [([5], [], 0)] * 3, greedy=True)),
        (frame.VERDICT, frame_host.pack_verdict(1, (1 << 30) - 2, 4)),
        (frame.VERDICT, frame_host.pack_verdict(1, 5, 0, correction=3)),
        (frame.VERDICT, frame_host.pack_verdict(1, 5, 0, stale=True, committed=99)),
        (frame.KVSNAP, frame_host.pack_body(frame.KVSNAP, snap=1, total=10, offset=6, crc=0xDEADBEEF, data=b"abcd")),
        (frame.LOG, frame_host.pack_body(frame.LOG, ts=0, level=0, text=b"")),
        (frame.HELLO, frame_codec.pack_hello(draft_k=4, topk=4, kv_sink=4, kv_window=28, kv_staged=8,
                                       board_id="rp2040_pico")),
        (frame.ERROR, frame_host.pack_body(frame.ERROR, code=frame.E_HELLO, detail=frame.R_MODEL, text="model hash")),
    ]
    for t, b in good:
        assert frame.check_body(t, b, 0, len(b)) == frame.BODY_OK, (t, b)
        frame_host.parse_body(t, b)
    d = bytearray(frame_host.pack_draft(1, 2, [([6, 7], [65535, 1], 1)]))
    bad = []
    x = bytearray(d)
    x[-2] = 1  # counts sum to 65537
    bad.append((frame.DRAFT, x, frame.BODY_Q))
    x = bytearray(d)
    x[frame.DR_TOKENS + 4:frame.DR_TOKENS + 6] = x[frame.DR_TOKENS + 2:frame.DR_TOKENS + 4]
    bad.append((frame.DRAFT, x, frame.BODY_DUP_ID))
    x = bytearray(d)
    x[frame.DR_TOKENS + 2] = 9  # ids 9, 7: descending
    bad.append((frame.DRAFT, x, frame.BODY_DUP_ID))
    bad.append((frame.DRAFT, d[:-1], frame.BODY_OVERRUN))
    bad.append((frame.DRAFT, d + b"\x00", frame.BODY_TRAILING))
    x = bytearray(d)
    x[frame.DR_TOKENS + 1] = 2  # pick beyond the candidates
    bad.append((frame.DRAFT, x, frame.BODY_FIELD))
    x = bytearray(d)
    x[6] = 0  # k (DRAFT offset 6)
    bad.append((frame.DRAFT, x, frame.BODY_FIELD))
    v = bytearray(frame_host.pack_verdict(1, 5, 2))
    v[frame.VD_COMMITTED] += 1
    bad.append((frame.VERDICT, v, frame.BODY_VERDICT))
    bad.append((frame.VERDICT, v[:-1], frame.BODY_SHORT))
    k = bytearray(frame_host.pack_body(frame.KVSNAP, snap=1, total=10, offset=6, data=b"abcd"))
    k[6] = 7  # offset (KVSNAP offset 6)
    bad.append((frame.KVSNAP, k, frame.BODY_RANGE))
    h = bytearray(frame_codec.pack_hello())
    h[frame.HE_RXBUF + 1] = 0  # rxbuf 0 < 256
    bad.append((frame.HELLO, h, frame.BODY_FIELD))
    for t, b, code in bad:
        assert frame.check_body(t, b, 0, len(b)) == code, (t, bytes(b), code)
        e = testkit.raises(frame.FrameError, frame_host.parse_body, t, b)
        assert frame_host.BODY_ERRORS[code] in str(e)


def test_helpers_reject_bad_arguments():
    testkit.raises(frame.FrameError, frame_host.pack_draft, 1, 2, [([1, 2], [100, 100], 0)])  # sum 200
    testkit.raises(frame.FrameError, frame_host.pack_draft, 1, 2, [([1, 2], [65536, 0], 0)])
    testkit.raises(frame.FrameError, frame_host.pack_draft, 1, 2, [([2, 1], [60000, 5536], 0)])
    testkit.raises(frame.FrameError, frame_host.pack_draft, 1, 2, [])
    testkit.raises(frame.FrameError, frame_host.pack_draft, 1, 1 << 30, [([1], [], 0)])
    testkit.raises(frame.FrameError, frame_host.pack_verdict, 1, 2, 33)
    testkit.raises(frame.FrameError, lambda: frame_codec.pack_hello(board_id="x" * 17))
    testkit.raises(frame.FrameError, lambda: frame_codec.pack_hello(rxbuf=100))
    testkit.raises(frame.FrameError, lambda: frame_host.pack_body(frame.KVSNAP, total=4, offset=2, data=b"abc"))
    testkit.raises(frame.FrameError, lambda: frame_host.pack_body(frame.LOG, level=256))
    testkit.raises(frame.FrameError, lambda: frame_host.pack_body(frame.LOG, colour=1))
    testkit.raises(frame.FrameError, frame_host.frame_bytes, 0x80)
    testkit.raises(frame.FrameError, lambda: frame_host.frame_bytes(0x10, b"", epoch=b"abc"))
    testkit.raises(frame.FrameError, frame_codec.Encoder, 10)
    enc = frame_codec.Encoder(max_frame=64)
    e = testkit.raises(frame.FrameError, enc.encode, 0x55, 0, 0, EPOCH, PEER, 0, 0, bytes(60), 0, 60)
    assert "does not fit" in str(e)
    testkit.raises(frame.FrameError, frame_codec.Signer, b"short")
    testkit.raises(frame.FrameError, frame_host.parse, b"\x10\x01")


def test_hmac_sha256_and_counters():
    s = frame_codec.Signer(b"\x0b" * 20)  # RFC 4231 test case 1
    want = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    assert binascii.hexlify(s.mac(b"Hi There")).decode() == want
    s2 = frame_codec.Signer(b"\xaa" * 131)  # RFC 4231 test case 6: key longer than a block
    want6 = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    assert binascii.hexlify(s2.mac(b"Test Using Larger Than Block-Size Key - Hash Key First")).decode() == want6
    key = b"0123456789abcdef"
    signer = frame_codec.Signer(key)
    body = frame_host.pack_body(frame.LOG, ts=1, level=1, text=b"hi")
    raw = bytearray(frame_host.frame_bytes(frame.LOG, body, signer=signer, counter=5))
    blen = frame.u16(raw, frame.H_LEN)
    assert signer.verify(raw, 0, blen) and raw[1] & frame.SIGNED
    assert not frame_codec.Signer(b"fedcba9876543210").verify(raw, 0, blen)
    raw[frame.HDR] ^= 1
    assert not signer.verify(raw, 0, blen)
    a = bytearray(frame_codec.counter_bytes(0xFFFF))
    b = bytearray(frame_codec.counter_bytes(0x10000))
    assert frame_codec.counter_newer(b, 0, a, 0) and not frame_codec.counter_newer(a, 0, b, 0)
    assert not frame_codec.counter_newer(a, 0, a, 0)
    assert frame_codec.counter_inc(a) and a == b
    top = bytearray(b"\xff" * 6)
    assert not frame_codec.counter_inc(top) and top == bytearray(6)


def test_cmd_bodies_are_checked():
    good = frame_host.pack_cmd(5, 3, "AHU-1", "supply_temp", "bob", 255)
    assert frame.check_body(frame.CMD, good, 0, len(good)) == frame.BODY_OK
    assert frame_host.parse_cmd(good)["level"] == 255
    bad = []
    for i, v in ((4, 2), (5, 5), (6, 0), (6, 17), (7, 33), (8, 0), (3, 0x40)):  # verb, level, lengths, u30 id
        b = bytearray(good)
        b[i] = v
        bad.append(b)
    b = bytearray(good)
    b[frame.CM_TEXT + 2] = 32  # a space would split the log line's word
    bad.append(b)
    bad.append(bytearray(good[:-1]))  # truncated
    bad.append(bytearray(good) + b"x")  # trailing
    for b in bad:
        assert frame.check_body(frame.CMD, b, 0, len(b)) != frame.BODY_OK, bytes(b)
    testkit.raises(frame.FrameError, frame_host.pack_cmd, 1, 2, "P-1", "t", "x")  # verb 2 is CLEAR: not a command


def test_update_bodies_are_checked():
    def ub(op=frame.UP_BEGIN, flags=0, off=100, data=bytes(32), uid=5):
        b = bytearray(frame.UP_DATA + len(data))
        frame.put_u16(b, frame.UP_ID, uid)
        b[frame.UP_OP] = op
        b[frame.UP_FLAGS] = flags
        frame.put_u32(b, frame.UP_OFF, off)
        b[frame.UP_DATA:] = data
        return b

    def chk(b, t=frame.UPDATE, minor=frame.MINOR):
        return frame.check_body(t, b, 0, len(b), minor)

    assert chk(ub()) == frame.BODY_OK and chk(ub(flags=frame.UP_REBOOT)) == frame.BODY_OK
    assert chk(ub(op=frame.UP_CHUNK, data=b"x")) == frame.BODY_OK and chk(ub(op=frame.UP_ABORT, data=b"")) == frame.BODY_OK
    assert chk(ub(off=0)) == frame.BODY_FIELD  # a BEGIN of nothing
    assert chk(ub(data=bytes(31))) == frame.BODY_SHORT and chk(ub(data=bytes(33))) == frame.BODY_TRAILING
    assert chk(ub(op=frame.UP_CHUNK, data=b"")) == frame.BODY_SHORT
    assert chk(ub(op=frame.UP_ABORT, data=b"x")) == frame.BODY_TRAILING
    assert chk(ub(op=0)) == frame.BODY_FIELD and chk(ub(op=4)) == frame.BODY_FIELD and chk(ub(flags=4)) == frame.BODY_FIELD
    # CODE (1.4): a code package; a 1.3 gateway cannot have sent it, and a 1.3 node's check refuses it
    assert chk(ub(flags=frame.UP_CODE | frame.UP_REBOOT)) == frame.BODY_OK
    assert chk(ub(flags=frame.UP_CODE), minor=3) == frame.BODY_FIELD and chk(ub(flags=1), minor=3) == frame.BODY_OK
    assert chk(ub(off=1 << 30)) == frame.BODY_FIELD and chk(ub()[:7]) == frame.BODY_SHORT
    s = bytearray(frame.UPSTAT_SIZE)
    for st in range(1, frame.US_LAST + 1):
        s[frame.US_STATE] = st
        assert chk(s, frame.UPSTAT) == frame.BODY_OK
    for bad in (0, frame.US_LAST + 1):
        s[frame.US_STATE] = bad
        assert chk(s, frame.UPSTAT) == frame.BODY_FIELD
    s[frame.US_STATE] = frame.US_UNFIT  # 1.4's: from a 1.3 node it is no state at all
    assert chk(s, frame.UPSTAT) == frame.BODY_OK and chk(s, frame.UPSTAT, 3) == frame.BODY_FIELD
    s[frame.US_STATE] = 1
    s[3] = 1
    assert chk(s, frame.UPSTAT) == frame.BODY_FIELD
    s[3] = 0
    assert chk(s[:7], frame.UPSTAT) == frame.BODY_SHORT and chk(s + b"x", frame.UPSTAT) == frame.BODY_TRAILING
