# test_link.py: two link endpoints over a simulated UART deliver every message exactly once through noise,
# loss, duplicates and reordering, never overrun a slow receiver's buffer, notice a reboot at once, resume
# a restored gateway without duplicates, report version and auth problems; poll/send never allocate.
import gc

# MicroPython compiles these modules from source on a 196 KB heap: collect between the big compiles so
# the parse trees of one do not fragment the heap for the next.
gc.collect()
from shared import cobs, crc32, frame, frame_codec, frame_host  # noqa: E402

gc.collect()
from shared import link  # noqa: E402

gc.collect()
import testkit  # noqa: E402
from link_ref import Pair  # noqa: E402

A_EP = b"\x0a\x0a\x0a\x0a"
B_EP = b"\x0b\x0b\x0b\x0b"


def _exactly_once(p, where):
    once, dup, lost = p.ta.tally(p.sent_a)
    once_b, dup_b, lost_b = p.tb.tally(p.sent_b)
    assert p.ta.corrupt == 0 and p.tb.corrupt == 0, where
    assert dup == lost == dup_b == lost_b == 0, (where, dup, lost, dup_b, lost_b)
    assert once == p.ta.count and once_b == p.tb.count, (where, once, once_b)
    assert p.ta.out_of_order == 0 and p.tb.out_of_order == 0, where


def _inject(p, seq, mid, version=frame.VERSION):
    """Put a data frame 'from A' carrying message mid straight into B's receive buffer."""
    enc = frame_codec.Encoder()
    n = p.ta.make(mid)
    w = enc.encode(p.ftype, seq, 0xFFFF, A_EP, B_EP, p.a._tx_off, 0, p.ta.buf, 0, n)
    if version != frame.VERSION:
        raw = bytearray(frame_host.frame_bytes(p.ftype, bytes(p.ta.buf[:n]), seq=seq, epoch=A_EP, peer=B_EP))
        raw[0] = version
        c = crc32.new()
        c.update(raw, 0, len(raw) - 4)
        c.put(raw, len(raw) - 4)
        wire = b"\x00" + cobs.encode(raw) + b"\x00"
        p.ch.ab.inject(wire, len(wire))
        return
    p.ch.ab.inject(enc.wire, w)


def test_handshake_then_clean_delivery_both_ways():
    p = Pair(msgs=150, a_kw={"board_id": "rp2040_pico", "kv": (4, 28, 8), "draft_k": 4, "topk": 4,
                             "tokenizer_hash": 0xE875D8E2})
    p.run(40, until_done=False)
    assert p.a.established and p.b.established
    assert p.ev_a[link.EV_ESTABLISHED] == 1 and p.ev_b[link.EV_ESTABLISHED] == 1
    h = frame_host.parse_body(frame.HELLO, p.b.peer_hello)
    assert h["board_id"] == b"rp2040_pico" and h["kv_window"] == 28 and h["topk"] == 4 and h["q_bits"] == 16
    assert h["tokenizer_hash"] == 0xE875D8E2 and h["role"] == 0
    used = p.run(20000)
    assert p.done(), used
    _exactly_once(p, "clean")
    assert p.a.tx_retx == 0 and p.b.tx_retx == 0 and p.a.dec.errors() == 0
    assert p.ch.ab.overflow == 0 and p.ch.ba.overflow == 0
    assert p.a.stats()["srtt_ms"] > 0


SACK = {"a_kw": {"reorder": 8, "reorder_bytes": 128}, "b_kw": {"reorder": 8, "reorder_bytes": 128}}


def test_noisy_channel_delivers_exactly_once():
    for seed in (1, 2):  # seed 1: go-back-N; seed 2: selective acks (reorder buffers at both ends)
        p = Pair(msgs=120, ppm=1000, seed=seed, **(SACK if seed == 2 else {}))
        p.run(60000)
        assert p.done(), seed
        _exactly_once(p, "1e-3 seed %d" % seed)
        hits = p.ch.ab.events + p.ch.ba.events
        assert hits > 5, hits
        assert p.a.tx_retx + p.b.tx_retx > 0 and p.a.dec.errors() + p.b.dec.errors() > 0


def test_lost_bytes_are_retransmitted():
    p = Pair(msgs=80)
    p.run(300, until_done=False)
    p.ch.ab.cut = True  # a → b bytes vanish for 120 ms
    p.run(120, until_done=False)
    p.ch.ab.cut = False
    p.run(20000)
    assert p.done()
    _exactly_once(p, "cut")
    assert p.a.tx_retx > 0 and p.a.timeouts + p.a.rewinds > 0


def test_duplicate_and_reordered_frames_are_dropped():
    p = Pair(msgs=10, msgs_b=0)
    p.send_a = False  # the test plays A's data by hand
    p.run(50, until_done=False)
    assert p.b.established
    for seq, mid in ((1, 1), (0, 0), (0, 0), (1, 1), (1, 1), (3, 3), (2, 2), (3, 3), (2, 2)):
        _inject(p, seq, mid)
        p.run(3, until_done=False)
    got = [p.ta.got[i] for i in range(5)]
    assert got == [1, 1, 1, 1, 0], got
    assert p.ta.out_of_order == 0
    assert p.b.rx_dup == 3 and p.b.rx_gap == 2
    assert p.b.rx_delivered == 4


def test_frames_held_after_a_gap_follow_a_bad_body():
    p = Pair(msgs=4, msgs_b=0, **SACK)
    p.send_a = False
    p.run(50, until_done=False)
    _inject(p, 1, 1)  # after a gap: held
    p.run(3, until_done=False)
    assert p.ta.got[1] == 0 and p.b.rx_gap == 1
    enc = frame_codec.Encoder()
    w = enc.encode(frame.LOG, 0, 0xFFFF, A_EP, B_EP, p.a._tx_off, 0, b"\x01", 0, 1)  # LOG too short
    p.ch.ab.inject(enc.wire, w)
    p.run(3, until_done=False)
    assert p.b.rx_bad_body == 1 and p.ta.got[1] == 1 and p.b.rx_state()[1] == 1


def test_credit_keeps_a_slow_receiver_from_overflowing():
    p = Pair(msgs=120, msgs_b=0, rxbuf_b=512, size_min=60, size_max=96)
    p.poll_b = 250  # B reads its UART four times a second
    p.run(60000)
    assert p.done()
    _exactly_once(p, "slow reader")
    assert p.ch.ab.overflow == 0 and p.ch.ab.rx_peak <= 512
    assert p.a.credit_waits > 0
    # control: a receiver that claims a bigger buffer than it has does overflow (the credit is what helps)
    q = Pair(msgs=60, msgs_b=0, rxbuf_b=512, size_min=60, size_max=96, b_kw={"rxbuf": 4096})
    q.poll_b = 250
    q.run(3000, until_done=False)
    assert q.ch.ab.overflow > 0


def test_peer_reboot_is_seen_at_once_and_traffic_resumes():
    p = Pair(msgs=60, msgs_b=200)
    p.run(600, until_done=False)
    assert p.b.established and p.ta.tally(p.sent_a)[0] > 0
    t0 = p.ch.now
    p.new_a(b"\x0c\x0c\x0c\x0c")  # A reboots: new epoch, empty window, fresh sequence
    p.ta = type(p.ta)(60, 8, 96, seed=99)
    p.sent_a = 0
    ms = 0
    while p.ev_b[link.EV_PEER_REBOOT] == 0:
        p.step()
        ms += 1
        assert ms < 100, "reboot not noticed within 100 ms"
    assert ms <= 20, ms  # one HELLO at 115200 baud, polled every millisecond
    assert p.b.peer_reboots == 1 and p.ch.now != t0
    p.run(60000)
    assert p.done()
    assert p.ta.tally(60) == (60, 0, 0)
    once, dup, lost = p.tb.tally(p.sent_b)
    assert lost == 0 and p.tb.corrupt == 0  # B's unacked frames went to the new A: nothing lost


def test_gateway_restore_resumes_without_loss_or_duplicates():
    # The node's wire offset at the restart: ~0x0bc4, ~0x7e00 (a false grant of 0 from the restored
    # gateway would block it and look older than every real limit after it: a stall until the link
    # dies) and ~0xabc4 (0 would look 0x5400 bytes ahead: it would flood the gateway's buffer)
    for restore, txoff in ((True, 0), (True, 0x723C), (True, 0xA000), (False, 0)):
        p = Pair(msgs=40, msgs_b=0)
        p.a._tx_off = txoff
        p.run(200, until_done=False)
        p.ch.ba.cut = True  # B gets A's frames but its acks never reach A
        p.run(400, until_done=False)
        state = p.b.rx_state()
        assert state[0] == A_EP and p.a.queued() > 0
        p.new_b(b"\x0d\x0d\x0d\x0d", restore=state[:2] if restore else None)  # B restarts from its store
        p.ch.ba.cut = False
        used = p.run(30000)
        assert p.done()
        assert used < 3000 and p.ch.ab.overflow == 0, (txoff, used, p.ch.ab.overflow)
        assert ((p.a._limit - p.a._tx_off) & 0xFFFF) <= 1024, (txoff, p.a._limit, p.a._tx_off)  # a real grant
        once, dup, lost = p.ta.tally(40)
        assert lost == 0 and p.ta.corrupt == 0
        if restore:
            assert dup == 0 and once == 40, (txoff, once, dup)
            assert p.ev_a[link.EV_PEER_REBOOT] == 1
        else:
            assert dup > 0  # what restore() prevents


def test_version_mismatch_is_dropped_counted_and_reported():
    p = Pair(msgs=0)
    p.log = True
    p.run(50, until_done=False)
    _inject(p, 0, 0, version=0x20)
    p.run(50, until_done=False)
    assert p.b.dec.err_version == 1 and p.b.dec.last_version == 0x20 and p.b.rx_delivered == 0
    assert ("b", link.EV_VERSION, 0x20) in [(s, c, v) for s, _, c, v in p.events]
    assert ("a", link.EV_PEER_ERROR, frame.E_VERSION) in [(s, c, v) for s, _, c, v in p.events]


def test_refused_handshake_is_reported_to_the_peer():
    def refuse(buf, off, n):
        return frame.R_TOKENIZER

    p = Pair(msgs=0, b_kw={"accept_hello": refuse})
    p.log = True
    p.run(1200, until_done=False)
    assert not p.a.established and not p.b.established and p.b.refused >= 2
    assert ("a", link.EV_PEER_ERROR, frame.E_HELLO) in [(s, c, v) for s, _, c, v in p.events]


def test_signed_link_rejects_forgeries_and_replays():
    key = b"plant-floor-key-0123"
    p = Pair(msgs=30, ppm=300, a_kw={"key": key, "counter": 1 << 24}, b_kw={"key": key})
    p.run(30000)
    assert p.done()
    _exactly_once(p, "signed")
    assert p.b.peer_hello[frame.HE_FLAGS] & frame.HELLO_AUTH
    # replay a frame A signed earlier, and forge one with a valid CRC but a wrong key
    old = frame_host.wire_bytes(frame.LOG, frame_host.pack_body(frame.LOG, text=b"x"), epoch=A_EP, peer=B_EP,
                           signer=frame_codec.Signer(key), counter=(1 << 24) + 1)
    p.ch.ab.inject(old, len(old))
    forged = frame_host.wire_bytes(frame.LOG, frame_host.pack_body(frame.LOG, text=b"x"), epoch=A_EP, peer=B_EP,
                              signer=frame_codec.Signer(b"not-the-plant-key!!!"), counter=1 << 40)
    p.ch.ab.inject(forged, len(forged))
    plain = frame_host.wire_bytes(frame.LOG, frame_host.pack_body(frame.LOG, text=b"x"), epoch=A_EP, peer=B_EP)
    p.ch.ab.inject(plain, len(plain))
    before = p.b.rx_delivered
    p.run(50, until_done=False)
    assert p.b.rx_replay >= 1 and p.b.rx_auth_fail >= 1 and p.b.rx_unsigned >= 1 and p.b.rx_delivered == before
    # a restarted gateway given its persisted state still refuses the replay
    p.new_b(b"\x0e\x0e\x0e\x0e", restore=p.b.rx_state())
    p.ch.ab.inject(old, len(old))
    p.run(20, until_done=False)
    assert p.b.rx_replay == 1 and p.b.rx_delivered == 0
    # a peer without the key never gets in
    q = Pair(msgs=0, b_kw={"key": key})
    q.run(1500, until_done=False)
    assert not q.a.established and not q.b.established and q.b.rx_unsigned > 0


def test_gateway_finds_each_nodes_key_by_the_unique_id_in_its_hello():
    # The gateway's link holds no key until a node's signed HELLO names its unique id; auth finds that
    # node's key (a keyring), the link adopts it only if it verifies the HELLO, then every frame is signed.
    key = b"node-a-key-0123456789abcdef"
    uid = b"\x01\x02\x03\x04\x05\x06\x07\x08"
    asked = []

    def keyring(k):
        def find(buf, blen):
            u = bytes(buf[frame.HDR + frame.HE_UID:frame.HDR + frame.HE_UID + frame.UID_LEN])
            asked.append(u)
            return (k, 7000, bytes(6)) if u == uid else None
        return find

    p = Pair(msgs=40, ppm=300, a_kw={"key": key, "counter": 1 << 20, "uid": uid},
             b_kw={"auth": keyring(key), "unsigned": False})
    p.run(30000)
    assert p.done()
    _exactly_once(p, "keyring")
    assert asked and asked[0] == uid and p.b.counter() > 7000  # the gateway signs from the counter it was given
    p = None
    gc.collect()  # each pair holds two links' buffers: one at a time on a board-sized heap
    # an unkeyed node is refused by a gateway that requires keys, every frame counted
    q = Pair(msgs=0, b_kw={"auth": keyring(key), "unsigned": False})
    q.run(1500, until_done=False)
    assert not q.a.established and not q.b.established and q.b.rx_unsigned > 0 and q.b.rx_delivered == 0
    q = None
    gc.collect()
    # a node whose key the keyring does not hold (or holds another one) never gets in
    r = Pair(msgs=0, a_kw={"key": b"some-other-key-0123456789", "uid": uid}, b_kw={"auth": keyring(key), "unsigned": False})
    r.run(1500, until_done=False)
    assert not r.a.established and not r.b.established and r.b.rx_auth_fail > 0
    r = None
    gc.collect()
    # insecure (unsigned taken): an unkeyed node gets in, a keyed one is still checked against the keyring
    s = Pair(msgs=10, b_kw={"auth": keyring(key)})
    s.run(30000)
    assert s.done()
    s = None
    gc.collect()
    t = Pair(msgs=10, a_kw={"key": key, "uid": uid}, b_kw={"auth": keyring(key)})
    t.run(30000)
    assert t.done() and t.b.counter() > 7000


def test_clock_wrap_changes_nothing():
    p = Pair(msgs=100, ppm=300, now=(1 << 30) - 700)
    p.run(60000)
    assert p.done() and p.ch.now < 1 << 29  # the clock wrapped during the run
    _exactly_once(p, "wrap")
    assert p.a.timeouts < 20


def test_peer_lost_then_back_without_loss():
    p = Pair(msgs=80)
    p.run(300, until_done=False)
    p.ch.ab.cut = p.ch.ba.cut = True
    p.run(4000, until_done=False)
    assert p.ev_a[link.EV_PEER_LOST] == 1 and p.ev_b[link.EV_PEER_LOST] == 1
    assert not p.a.established
    p.ch.ab.cut = p.ch.ba.cut = False
    p.run(30000)
    assert p.done() and p.a.established
    _exactly_once(p, "outage")


def test_selective_acks_resend_only_what_was_lost():
    p = Pair(msgs=150, msgs_b=0, ppm=1000, seed=4, size_min=80, size_max=80, **SACK)
    p.run(60000)
    assert p.done()
    _exactly_once(p, "sack")
    q = Pair(msgs=150, msgs_b=0, ppm=1000, seed=4, size_min=80, size_max=80)
    q.run(60000)
    assert q.done()
    _exactly_once(q, "go-back-N")
    assert p.b.rx_gap > 0 and p.a.tx_retx * 2 < q.a.tx_retx, (p.a.tx_retx, q.a.tx_retx)


def test_poll_and_send_allocate_nothing():
    p = Pair(msgs=5000, ppm=1000, seed=3, **SACK)
    p.run(300, until_done=False)

    def burst(pair):
        for _ in range(60):
            pair.step()
        return pair.sent_a

    for _ in range(20):
        testkit.run_locked(burst, p)
    assert p.sent_a > 50 and p.ta.corrupt == 0 and p.a.tx_retx + p.b.tx_retx > 0
    used = testkit.heap_in_use()
    if used is not None:
        # what one endpoint costs with the defaults: decoder 1024 B, wire 1031 B, window 2048 B, control
        # frame 128 B, read chunk 128 B, arrays and objects (measured 8704 B on the 64-bit unix port)
        before = testkit.heap_in_use()
        extra = link.Link(p.ch.a, epoch=A_EP)
        after = testkit.heap_in_use()
        assert after - before < 9000, after - before
        del extra


def test_bad_arguments_are_refused():
    p = Pair(msgs=0)
    for kw in ({"window": 3}, {"window": 128}, {"rxbuf": 100}, {"max_frame": 10}, {"epoch": b"\x00" * 4},
               {"epoch": b"abc"}, {"rto_min": 0}, {"kv": (1, 2)}, {"board_id": "x" * 20}):
        kw = dict(kw)
        kw.setdefault("epoch", A_EP)
        testkit.raises(ValueError, lambda kw=kw: link.Link(p.ch.a, **kw))
    testkit.raises(link.LinkError, link.Link, object())
    assert not p.a.send(0x70, b"before the handshake")
    p.run(50, until_done=False)
    e = testkit.raises(link.LinkError, p.a.send, frame.HELLO, b"x")
    assert "data types" in str(e)
    e = testkit.raises(link.LinkError, p.a.send, 0x70, bytes(2000))
    assert "at most" in str(e)
    assert p.a.send(0x70, bytes(p.a.max_body()))
    assert link.ticks_diff(5, (1 << 30) - 5) == 10 and link.ticks_diff((1 << 30) - 5, 5) == -10
