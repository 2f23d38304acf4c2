# test_sha256.py: shared/sha256.py's engines give hashlib's digests and RFC 2104's HMACs for every length
# around the block edges and every key size; a signed frame is signed and checked without allocating (a
# whole signed link too); any flipped bit, tag included, fails verification.
import gc

gc.collect()
from shared import frame, frame_codec, sha256  # noqa: E402
from shared.compat import sha256 as ref_sha256  # noqa: E402 - the interpreter's own hashlib

gc.collect()
import testkit  # noqa: E402

LENGTHS = (0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 300)
KEY_LENGTHS = (16, 32, 64, 100)
EPOCH = b"\x04\x03\x02\x01"
PEER = b"\x0d\x0c\x0b\x0a"


def _data(n, seed):
    b = bytearray(n)
    for i in range(n):
        b[i] = (i * 7 + seed * 31 + (i >> 3)) & 0xFF
    return b


def _ref_hmac(key, data):
    # RFC 2104 over the interpreter's hashlib: independent of the code under test
    if len(key) > 64:
        key = ref_sha256(bytes(key)).digest()
    k = bytes(key) + bytes(64 - len(key))
    inner = ref_sha256(bytes(x ^ 0x36 for x in k))
    inner.update(bytes(data))
    outer = ref_sha256(bytes(x ^ 0x5C for x in k))
    outer.update(inner.digest())
    return outer.digest()


def test_default_engine_per_interpreter():
    kinds = sha256.available()
    if testkit.IS_CP:
        # no native code on CircuitPython's boards: the firmware's C hashlib signs (halves would take 60-113 ms
        # a frame in bytecode); halves stays, allocation-free, where a firmware has no hashlib
        assert kinds == ("hashlib", "halves")
    elif testkit.IS_MP:
        assert kinds == ("viper", "halves")
    else:
        assert kinds == ("hashlib", "halves")
    assert sha256.new().kind == kinds[0] and sha256.Hmac(b"k" * 16).kind == kinds[0]
    for kind in ("md5", "viper", "hashlib"):
        if kind not in kinds:
            e = testkit.raises(ValueError, sha256.new, kind)
            assert "not available" in str(e), str(e)


def test_digests_match_hashlib_at_every_block_edge():
    big = _data(400, 9)
    out = bytearray(40)
    for kind in sha256.available():
        e = sha256.new(kind)
        for n in LENGTHS:
            want = ref_sha256(bytes(big[5:5 + n])).digest()
            assert sha256.digest(big[5:5 + n], kind) == want, (kind, n)
            # in place: the message at an offset of a larger buffer, the digest at an offset of out
            for i in range(40):
                out[i] = 0xEE
            e.digest_into(None, big, 5, n, out, 3)
            assert bytes(out[3:35]) == want, (kind, n, "in place")
            assert out[2] == 0xEE and out[35] == 0xEE, (kind, n, "wrote outside its 32 bytes")
            e.digest_into(None, big, 5, n, out, 36, 3)  # the first nout bytes only
            assert bytes(out[36:39]) == want[:3] and out[39] == 0xEE, (kind, n, "nout")
    assert sha256.digest(b"abc", "halves") == (b"\xba\x78\x16\xbf\x8f\x01\xcf\xea\x41\x41\x40\xde\x5d\xae\x22\x23"
                                              b"\xb0\x03\x61\xa3\x96\x17\x7a\x9c\xb4\x10\xff\x61\xf2\x00\x15\xad")


def test_hmac_matches_rfc2104_for_every_key_size():
    try:
        import hashlib
        import hmac
    except ImportError:  # MicroPython and CircuitPython have no hmac: the hand-built reference stands in
        hmac = None
    out = bytearray(32)
    for kind in sha256.available():
        for kl in KEY_LENGTHS:
            key = _data(kl, kl)
            h = sha256.Hmac(key, kind)
            for n in LENGTHS:
                msg = _data(n, n + 1)
                want = _ref_hmac(key, msg)
                if hmac is not None:
                    assert want == hmac.new(bytes(key), bytes(msg), hashlib.sha256).digest()
                h.mac_into(msg, 0, n, out, 0)
                assert bytes(out) == want, (kind, kl, n)
                assert h.verify(msg, 0, n, want, 0, 32) and h.verify(msg, 0, n, want, 0, 8), (kind, kl, n)
    # RFC 4231 test case 2 (a key shorter than 16 bytes is fine here; the link's Signer refuses it)
    h = sha256.Hmac(b"Jefe", "halves")
    msg = b"what do ya want for nothing?"
    h.mac_into(msg, 0, len(msg), out, 0)
    assert bytes(out) == (b"\x5b\xdc\xc1\x46\xbf\x60\x75\x4e\x6a\x04\x24\x26\x08\x95\x75\xc7"
                          b"\x5a\x00\x3f\x08\x9d\x27\x39\x83\x9d\xec\x58\xb9\x64\xec\x38\x43")


def _signed_frame(blen):
    raw = bytearray(frame.HDR + blen + frame.SIG_COUNTER + frame.SIG_TAG + frame.CRC)
    frame.put_header(raw, 0, 0x70 | frame.SIGNED, blen, 7, 6, EPOCH, PEER, 100, 200)
    for i in range(blen):
        raw[frame.HDR + i] = (i * 5 + 1) & 0xFF
    return raw


def test_sign_and_verify_allocate_nothing():
    key = b"plant-floor-key-0123"
    ctr = bytearray(b"\x05\x00\x00\x01\x00\x00")
    for kind in sha256.available():
        if kind == "hashlib":
            continue  # CPython's: allocation is no concern on the gateway
        s = frame_codec.Signer(key)
        s._hmac = sha256.Hmac(key, kind)  # the engine under test (the default one is viper on MicroPython)
        for blen in (4, 64, 256):
            raw = _signed_frame(blen)
            ok = bytearray(1)

            def sign_verify(_, s=s, raw=raw, blen=blen, ok=ok):
                frame_codec.counter_inc(ctr)
                s.sign(raw, 0, blen, ctr)
                ok[0] = s.verify(raw, 0, blen)

            testkit.run_locked(sign_verify)
            assert ok[0] == 1, (kind, blen)
            n = frame.HDR + blen + frame.SIG_COUNTER
            assert bytes(raw[n - frame.SIG_COUNTER:n]) == bytes(ctr)
            assert bytes(raw[n:n + frame.SIG_TAG]) == _ref_hmac(key, raw[:n])[:frame.SIG_TAG], (kind, blen)


def test_any_flipped_bit_fails_verify():
    key = b"0123456789abcdef"
    for kind in sha256.available():
        s = frame_codec.Signer(key)
        s._hmac = sha256.Hmac(key, kind)
        blen = 6
        raw = _signed_frame(blen)
        s.sign(raw, 0, blen, b"\x01\x02\x03\x04\x05\x06")
        n = frame.HDR + blen + frame.SIG_COUNTER + frame.SIG_TAG  # header, body, counter and tag
        assert s.verify(raw, 0, blen)
        for i in range(n):
            for bit in range(8):
                raw[i] ^= 1 << bit
                assert not s.verify(raw, 0, blen), (kind, i, bit)
                raw[i] ^= 1 << bit
        assert s.verify(raw, 0, blen)
        assert not frame_codec.Signer(b"fedcba9876543210").verify(raw, 0, blen)


def test_signed_link_allocates_nothing():
    from link_ref import Pair

    key = b"plant-floor-key-0123"
    p = Pair(msgs=400, ppm=1000, seed=5, a_kw={"key": key, "counter": 1 << 24}, b_kw={"key": key})
    if testkit.IS_CP:  # its default engine is the firmware's hashlib, which allocates: the halves one does not
        for lk in (p.a, p.b):
            lk._signer._hmac = sha256.Hmac(key, "halves")
    p.run(300, until_done=False)

    def burst(pair):
        for _ in range(60):
            pair.step()
        return pair.sent_a

    for _ in range(10):
        testkit.run_locked(burst, p)
    assert p.sent_a > 20 and p.ta.corrupt == 0 and p.b.rx_auth_fail == 0, (p.sent_a, p.b.rx_auth_fail)
