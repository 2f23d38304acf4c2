# link.py: reliable, in-order, flow-controlled frame delivery over any byte transport (no I/O of its own).
# One end of the node <-> gateway link (docs/PROTOCOL.md sections 4 and 5).
#
# The link owns no port and no clock: the caller gives it a transport with
#
#     write(buf, n) -> bytes accepted from buf[0:n] (None means all)   e.g. machine.UART.write
#     readinto(buf) -> bytes read into buf (0 or None if none waiting)  e.g. UART.readinto
#
# and calls poll(now) often, now being integer milliseconds modulo 2**30 (MicroPython's
# time.ticks_ms(); on CPython int(time.monotonic() * 1000) & 0x3FFFFFFF). Every interval is compared
# with a wrap-safe difference, so the clock may wrap. Received data frames reach on_frame(type, buf,
# off, n) in order and exactly once (buf is the decoder's buffer: copy what you keep); link events
# reach on_event(code, value).
#
# What poll() does: read what the transport has (bounded), decode and check frames, deliver data,
# apply acks and credit; then the timers (handshake, heartbeat, dead peer, retransmission); then send:
# a pending partial write first, then control frames, then data frames from the retransmit window.
#
# - Sequenced data (types 0x10..0x7F) go into a bounded retransmit window (`window` frames, a power of
#   two up to 64, in a ring of `window_bytes`; shared/txwindow.py), each stored as a whole frame so a
#   retransmission only rewrites header fields (ack, credit) and the CRC. send() returns False when the
#   window is full.
# - Cumulative acks ride in every header; an ACK frame goes out ack_ms after data arrives if no frame
#   carried it. Lost frames: a receiver that sees a frame after a gap sends an ACK with the GAP flag
#   and the sender goes back to the first unacked frame at once (go-back-N); otherwise after a
#   retransmission timeout from an RTT estimate (Jacobson/Karels, integer, with exponential backoff).
#   Duplicates are dropped by (epoch, seq).
# - Selective repeat (reorder=N > 0): the receiver keeps up to N frames after a gap in preallocated
#   slots and lists them in its ACKs (SACK bitmap); the sender then resends only the frames sent
#   before a held one and not held themselves (bytes on a UART cannot overtake each other), and
#   skips held frames. Without it (the default, no RAM spent) the peer falls back to go-back-N.
# - Credit: each header carries `limit`, the highest wire offset of the receiver's stream the sender
#   may reach with data frames: the end of the last valid frame read, plus the bytes read since,
#   plus rxbuf - RESERVE. A data frame is sent only if it fits. Control frames (HELLO, HEARTBEAT, ACK,
#   ERROR) are exempt but rate-limited; RESERVE bytes of the receive buffer are kept for them. When a
#   sender is out of credit for a timeout it sends a probe (HEARTBEAT with PROBE) for a fresh limit.
# - Handshake: HELLO carries the sender's parameters and tx_base (its oldest unacked seq). A side is
#   established once it has the peer's epoch and the peer has addressed a valid frame to its own
#   epoch. A HELLO from a new epoch is a peer reboot (EV_PEER_REBOOT): receive state restarts at the
#   peer's tx_base; unacked frames stay in the window and are resent to the new instance.
# - HMAC-SHA256 signing (key=..., or sign_with() at boot): every frame signed and checked, with a 48-bit
#   counter that must increase (replay protection; the app persists both counters across restarts). A
#   gateway finds each node's key by the unique id of its HELLO (auth=...) and, with unsigned=False,
#   refuses unsigned frames. poll() and send() allocate nothing on MicroPython once constructed, signed
#   or not (shared/sha256.py; tests/shared/test_link.py and test_sha256.py prove it).
from array import array

from shared import crc32, frame, frame_codec
from shared.compat import MASK30, TICKS_HALF, const, ticks_diff
from shared.frame import (
    AK_FLAGS,
    AK_SACK,
    ACK_SIZE,
    ER_CODE,
    ER_DETAIL,
    ER_REF,
    ERROR_MIN,
    HB_BAD,
    HB_DUP,
    HB_FLAGS,
    HEARTBEAT_SIZE,
    ACK,
    ACK_GAP,
    ACK_SACK,
    DATA_MIN,
    ERROR,
    H_EPOCH,

    H_PEER,
    H_VER,
    HB_PROBE,
    HDR,
    HE_FLAGS,
    HE_MAXFRAME,
    HE_RXBUF,
    HE_TXBASE,
    HEARTBEAT,
    HELLO,
    HELLO_SIZE,
    HELLO_SIZE_11,
    HELLO_WANT,
    OVERHEAD,
    SIG,
    SIGNED,
    copy4,
    put_header,
    put_u16,
    same4,
    u16,
)
from shared.txwindow import TxWindow

_RESERVE = const(128)  # receive-buffer bytes left out of the data credit, for control frames and noise
_HELLO_GAP_MS = const(10)  # least time between two HELLOs (replies included)
_SINCE_CAP = const(0x4000)  # bytes read since the last valid frame saturate here
_MAX_WINDOW = const(64)
_CTRL_RAW = const(128)  # control frames are built in a buffer this big (HELLO signed: 80 bytes)
_MAX_REORDER = const(16)  # the SACK bitmap is a u16

EV_ESTABLISHED = const(1)  # value: 1
EV_PEER_REBOOT = const(2)  # value: peer reboots seen so far
EV_PEER_LOST = const(3)  # nothing valid from the peer for dead_ms
EV_VERSION = const(4)  # value: the version byte of a frame dropped for its major version
EV_PEER_ERROR = const(5)  # value: the code of an ERROR frame from the peer
EV_BAD_BODY = const(6)  # value: the type of a delivered-in-order frame whose body failed check_body
EV_REFUSED = const(7)  # value: the code accept_hello returned for the peer's HELLO
EV_AUTH = const(8)  # value: AUTH_BAD_TAG, AUTH_REPLAY or AUTH_UNSIGNED (the frame is dropped)
AUTH_BAD_TAG = const(1)  # signed with another key (or no key of ours to check it with)
AUTH_REPLAY = const(2)  # a valid tag on a counter not above the last one accepted
AUTH_UNSIGNED = const(3)  # an unsigned frame where frames must be signed
EV_TX_DROPPED = const(9)  # value: queued frames dropped (the peer's new limits cannot take them)


class LinkError(ValueError):
    """A bad argument to Link (constructor values, send() type or size)."""


def new_epoch():
    # 4 random bytes, not all zero (0 means "no epoch" in the peer field).
    try:
        from os import urandom
    except ImportError:  # pragma: no cover - ports without os.urandom
        urandom = None
    while True:
        if urandom is not None:
            e = bytes(urandom(4))
        else:  # pragma: no cover
            from random import getrandbits
            e = getrandbits(32).to_bytes(4, "little")
        if e != b"\x00\x00\x00\x00":
            return e


def _int(v, name, lo, hi):
    if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > hi:
        raise LinkError("%s must be an int in %d..%d, got %r" % (name, lo, hi, v))
    return v


class Link(TxWindow):
    # One end of the link. See the module docstring; parameters are in docs/PROTOCOL.md section 5.
    # Receiving: _rx feeds the decoder, and each frame it completes goes through _frame_in's four steps
    # (_auth_in, _peer_in, _credit_in, _dispatch). Sending: _tx takes control frames first, then data
    # frames from the transmit window (TxWindow, shared/txwindow.py: _w_add, _w_ack, _w_sack_in,
    # _w_pick, _w_sent); timing, counting and credit stay here.

    def __init__(self, transport, on_frame=None, on_event=None, epoch=None, role=frame.ROLE_NODE, rxbuf=1024,
                 max_frame=frame.MAX_FRAME, window=8, window_bytes=2048, board_id=b"", model_hash=0,
                 tokenizer_hash=0, kv=(0, 0, 0), draft_k=0, topk=0, key=None, counter=0, accept_hello=None,
                 auth=None, unsigned=True,
                 rto_init=500, rto_min=50, rto_max=3000, ack_ms=5, hb_ms=1000, dead_ms=3500, hello_ms=500,
                 chunk=128, rx_budget=None, crc=None, now=0, reorder=0, reorder_bytes=0, uid=b""):
        if not hasattr(transport, "write") or not hasattr(transport, "readinto"):
            raise LinkError("transport needs write(buf, n) and readinto(buf)")
        _int(window, "window", 1, _MAX_WINDOW)
        if window & (window - 1):
            raise LinkError("window must be a power of two, got %d" % window)
        _int(rxbuf, "rxbuf", frame.MIN_RXBUF, frame.MAX_FRAME_LIMIT)
        _int(max_frame, "max_frame", frame.MIN_FRAME, frame.MAX_FRAME_LIMIT)
        _int(window_bytes, "window_bytes", frame.MIN_FRAME, 0xFFFF)
        _int(rto_min, "rto_min", 1, 60000)
        _int(rto_max, "rto_max", rto_min, 600000)
        _int(rto_init, "rto_init", rto_min, rto_max)
        for name, v in (("ack_ms", ack_ms), ("hb_ms", hb_ms), ("dead_ms", dead_ms), ("hello_ms", hello_ms)):
            _int(v, name, 0, TICKS_HALF - 1)
        _int(chunk, "chunk", 1, 4096)
        _int(reorder, "reorder", 0, _MAX_REORDER)
        if reorder & (reorder - 1):
            raise LinkError("reorder must be 0 or a power of two, got %d" % reorder)
        if epoch is None:
            epoch = new_epoch()
        if len(epoch) != 4 or bytes(epoch) == b"\x00\x00\x00\x00":
            raise LinkError("epoch must be 4 bytes, not all zero")
        self.t = transport
        self.on_frame = on_frame
        self.on_event = on_event
        self._accept = accept_hello
        self.max_frame = max_frame
        self.rxbuf = rxbuf
        self.rto_min = rto_min
        self.rto_max = rto_max
        self.ack_ms = ack_ms
        self.hb_ms = hb_ms
        self.dead_ms = dead_ms
        self.hello_ms = hello_ms
        self.rx_budget = rx_budget if rx_budget is not None else rxbuf
        self._epoch = bytearray(epoch)
        self._peer = bytearray(4)
        self._nopeer = bytes(4)  # the header's peer while no frame of this run came from the peer
        self._peer_known = False
        self._peer_hello_ok = False
        self.peer_hello = bytearray(HELLO_SIZE_11)  # a 1.0 peer's 42 bytes + no uid, wall time not known
        self.peer_hello_at = 0  # our ticks when the peer's last HELLO arrived (its wall time was then)
        self.hellos_in = 0  # HELLOs adopted so far
        self.established = False
        crc = crc if crc is not None else crc32.new()
        self.enc = frame_codec.Encoder(max_frame, raw_bytes=_CTRL_RAW, crc=crc)
        self.dec = frame_codec.Decoder(max_frame, crc=crc)
        self._chunk = bytearray(chunk)
        self._cbody = bytearray(16)
        self._signer = frame_codec.Signer(key) if key is not None else None
        self._sig = SIG if key is not None else 0
        self._ctr = bytearray(frame_codec.counter_bytes(counter))
        self._peer_ctr = bytearray(frame.SIG_COUNTER)
        self._auth = auth  # host: finds the key of a signed HELLO's sender (by its unique id); None on a node
        self._unsigned = unsigned and key is None  # unsigned frames taken (no key, and not refused by the app)
        if len(kv) != 3:
            raise LinkError("kv must be (sink, window, staged)")
        self._hello = bytearray(frame_codec.pack_hello(role=role, flags=1 if key is not None else 0, rxbuf=rxbuf,
                                                 max_frame=max_frame, window=window, draft_k=draft_k, topk=topk,
                                                 kv_sink=kv[0], kv_window=kv[1], kv_staged=kv[2],
                                                 model_hash=model_hash, tokenizer_hash=tokenizer_hash,
                                                 board_id=board_id, uid=uid))
        self._w_init(window, window_bytes)  # the retransmit window (TxWindow)
        self._rx_next = 0  # next seq expected from the peer
        self._init_reorder(reorder, reorder_bytes or max_frame - OVERHEAD)
        self._init_state(now, rto_init)

    # __init__ is split in parts: MicroPython compiles each function into one contiguous block, and a
    # smaller largest block keeps compiling this module from source feasible on a fragmented heap.

    def _init_reorder(self, n, size):
        # receive side of selective repeat: up to n frames after a gap, each body up to size bytes
        self._ro_n = n
        self._ro_mask = n - 1 if n else 0
        self._ro_size = size
        self._ro = bytearray(n * size)
        self._ro_seq = array("i", [-1] * n)
        self._ro_t = bytearray(n)
        self._ro_len = array("H", bytes(2 * n))

    def _init_state(self, now, rto_init):
        # credit
        self._tx_off = 0
        self._limit = 0
        self._limit_ok = False
        self._anchor = 0
        self._anchor_ok = False
        self._since = 0
        self._rest = 0
        # timers and flags
        now &= MASK30
        self.now = now
        self._last_rx = now
        self._last_tx = now
        self._last_hello = (now - 100000) & MASK30
        self._last_err = (now - 100000) & MASK30
        self._rto = rto_init
        self._srtt8 = 0
        self._rttvar4 = 0
        self._rto_on = False
        self._rto_at = 0
        self._ack_due = False
        self._ack_at = 0
        self._need_hello = True
        self._need_probe = False
        self._need_gap = False
        self._sack_due = False
        self._sack_at = 0
        self._err_code = 0
        self._err_detail = 0
        self._gap_for = -1
        self._gap_at = 0
        self._rewind_base = -1
        self._rewind_at = 0
        self._blocked = False
        self._blocked_at = 0
        self._pend = 0
        self._ver_seen = 0
        self.peer_minor = frame.MINOR  # until a HELLO says otherwise (a restored gateway has none yet)
        # counters
        self.tx_frames = 0
        self.tx_data = 0
        self.tx_retx = 0
        self.tx_bytes = 0
        self.tx_acked = 0
        self.tx_dropped = 0
        self.timeouts = 0
        self.rewinds = 0
        self.probes = 0
        self.credit_waits = 0
        self.rx_bytes = 0
        self.rx_frames = 0
        self.rx_delivered = 0
        self.rx_dup = 0
        self.rx_gap = 0
        self.rx_stale = 0
        self.rx_misaddressed = 0
        self.rx_bad_body = 0
        self.rx_bad_ack = 0
        self.rx_unknown = 0
        self.rx_auth_fail = 0
        self.rx_replay = 0
        self.rx_unsigned = 0
        self.peer_reboots = 0
        self.refused = 0

    # ---- application side ----

    def send(self, ftype, body, n=-1):
        # Queue a data frame (type 0x10..0x7F) with body[0:n] (n = -1: all of body).
        #
        # True if queued; False if the window is full or the peer's parameters are not known yet (no
        # HELLO from it so far). Raises LinkError for a control type or a body over max_body().
        if n < 0:
            n = len(body)
        if ftype < DATA_MIN or ftype > 0x7F:
            raise LinkError("send() takes data types 0x10..0x7f, got %r" % (ftype,))
        if n > len(body) or n > self.max_body():
            raise LinkError("body of %d bytes: at most %d here" % (n, self.max_body()))
        if not self._peer_hello_ok:
            return False
        return self._w_add(ftype | (SIGNED if self._sig else 0), body, n, HDR + n + self._sig + frame.CRC)

    def max_body(self):
        # Largest body send() takes now: own max_frame, the peer's (once known), its credit span.
        raw = self.max_frame
        if self._peer_hello_ok:
            pm = u16(self.peer_hello, HE_MAXFRAME)
            if pm < raw:
                raw = pm
            span = ((u16(self.peer_hello, HE_RXBUF) - _RESERVE - 3) * 254) // 255
            if span < raw:
                raw = span
        if len(self._w_buf) < raw:
            raw = len(self._w_buf)
        return raw - OVERHEAD - self._sig

    def queued(self):
        # Data frames queued or in flight (not yet acked).
        return (self._next_seq - self._base) & 0xFFFF

    def free_slots(self):
        return self._wn - self.queued()

    def restore(self, peer_epoch, last_seq, peer_counter=None):
        # Before the first poll: resume receiving from peer_epoch after last_seq (persisted by the app
        # from rx_state()). Once the peer's first frame arrived (its HELLO), the answer acks last_seq
        # to it, so it resends only what came after; peer_counter (signed links) keeps replays of older
        # frames out.
        if len(peer_epoch) != 4 or bytes(peer_epoch) == b"\x00\x00\x00\x00":
            raise LinkError("peer_epoch must be 4 bytes, not all zero")
        _int(last_seq, "last_seq", 0, 0xFFFF)
        copy4(self._peer, 0, peer_epoch, 0)
        self._peer_known = True
        self._rx_next = (last_seq + 1) & 0xFFFF
        if peer_counter is not None:  # signed links: the highest counter accepted, so no replay gets in
            if len(peer_counter) != frame.SIG_COUNTER:
                raise LinkError("peer_counter must be %d bytes" % frame.SIG_COUNTER)
            for i in range(frame.SIG_COUNTER):
                self._peer_ctr[i] = peer_counter[i]

    def rx_state(self):
        # (peer epoch bytes, last seq delivered in order, highest signed-frame counter accepted) for the
        # application to persist with what it stored, and give back to restore() after a restart.
        return bytes(self._peer), (self._rx_next - 1) & 0xFFFF, bytes(self._peer_ctr)

    def reset_tx(self):
        # Drop every queued or unacked frame; the peer learns the new tx_base from a HELLO.
        dropped = self.queued()
        self.tx_dropped += dropped
        self._base = self._next_tx = self._sent_hi = self._next_seq
        self._r_head = self._r_tail = 0
        self._rto_on = False
        self._need_hello = True
        return dropped

    def stats(self):
        # Counters and state as a dict (allocates): every public int attribute, the decoder's
        # rejections, the RTO and smoothed RTT.
        out = {"established": self.established}
        for k, v in self.__dict__.items():
            if (k[:3] in ("tx_", "rx_") and k != "rx_budget") or k in (
                    "timeouts", "rewinds", "probes", "credit_waits", "peer_reboots", "refused"):
                out[k] = v
        d = self.dec
        for k in ("err_short", "err_crc", "err_version", "err_length"):
            out[k] = getattr(d, k)
        out["err_cobs"] = d.cobs.err_cobs
        out["err_oversize"] = d.cobs.oversize
        out["rto_ms"] = self._rto
        out["srtt_ms"] = self._srtt8 >> 3
        return out

    # ---- the engine ----

    def poll(self, now):
        self.now = now & MASK30
        self._rx()
        self._timers()
        self._tx()

    def _event(self, code, value):
        if self.on_event is not None:
            self.on_event(code, value)

    def _rx(self):
        dec = self.dec
        chunk = self._chunk
        budget = self.rx_budget
        while budget > 0:
            n = self.t.readinto(chunk)
            if not n:
                break
            budget -= n
            self.rx_bytes += n
            since = self._since + n
            self._since = since if since < _SINCE_CAP else _SINCE_CAP
            i = 0
            while i < n:
                i = dec.feed(chunk, i, n)
                if dec.ready:
                    self._rest = n - i
                    self._frame_in()
        if dec.err_version != self._ver_seen:
            self._ver_seen = dec.err_version
            self._event(EV_VERSION, dec.last_version)
            self._err_code = frame.E_VERSION  # an ERROR frame goes out soon
            self._err_detail = dec.last_version & 0xFFFF

    def _frame_in(self):
        # One frame the decoder checked: is it authentic, whose is it (peer and handshake), what does its
        # header grant (credit, acks), what does its type ask (dispatch). Each step may end it.
        d = self.dec
        t = d.ftype & 0x7F
        self.rx_frames += 1
        if not self._auth_in(d.buf, d.ftype, d.blen):
            return
        if not self._peer_in(d.buf, t, d.blen):
            return
        to_me = self._credit_in(d)
        self._dispatch(d, t, to_me)

    def _auth_in(self, buf, ftype, blen):
        # Signed links take signed frames only, with a valid tag and a newer counter; unsigned links
        # take no signed frame (no key to check it with) unless the app's auth finds the sender's key.
        if not ftype & SIGNED:
            if self._signer is None and self._unsigned:
                return True
            self.rx_unsigned += 1
            self._event(EV_AUTH, AUTH_UNSIGNED)
            return False
        p = HDR + blen
        if self._auth is not None and ftype & 0x7F == HELLO and (
                self._signer is None or not self._signer.verify(buf, 0, blen)):
            if not self._adopt_key(buf, blen):
                self.rx_auth_fail += 1
                self._event(EV_AUTH, AUTH_BAD_TAG)
                return False
        if self._signer is None:
            self.rx_auth_fail += 1
            self._event(EV_AUTH, AUTH_BAD_TAG)
            return False
        if not frame_codec.counter_newer(buf, p, self._peer_ctr, 0):
            self.rx_replay += 1
            self._event(EV_AUTH, AUTH_REPLAY)
            return False
        if not self._signer.verify(buf, 0, blen):
            self.rx_auth_fail += 1
            self._event(EV_AUTH, AUTH_BAD_TAG)
            return False
        for i in range(frame.SIG_COUNTER):
            self._peer_ctr[i] = buf[p + i]
        return True

    def _adopt_key(self, buf, blen):
        # Host only: the app's auth(buf, blen) gives (key, own counter, peer counter) for the HELLO's
        # sender, or None; the key is adopted if it verifies the HELLO.
        found = self._auth(buf, blen)
        if found is None:
            return False
        signer = frame_codec.Signer(found[0])
        if not signer.verify(buf, 0, blen):
            return False
        self.sign_with(signer, found[1], found[2])
        return True

    def sign_with(self, key, counter, peer_counter):
        # Sign every frame from now on with key (bytes, or a frame_codec.Signer), this side's counter
        # going on from `counter` and the peer's accepted only above `peer_counter` (6 bytes): a node
        # calls it at boot with what it keeps on flash, a gateway when a node's HELLO shows its key.
        if not self._sig and self.queued():
            self.reset_tx()  # frames queued unsigned have no room for the trailer: the HELLO resends state
        self._signer = key if isinstance(key, frame_codec.Signer) else frame_codec.Signer(key)
        self._sig = SIG
        self._unsigned = False
        c = frame_codec.counter_bytes(counter)
        for i in range(frame.SIG_COUNTER):
            self._ctr[i] = c[i]
            self._peer_ctr[i] = peer_counter[i]

    def counter(self):
        # Host: the 48-bit counter of this side's last signed frame, as an int (allocates).
        v = 0
        for i in range(frame.SIG_COUNTER - 1, -1, -1):
            v = (v << 8) | self._ctr[i]
        return v

    def _peer_in(self, buf, t, blen):
        # The handshake: a frame from an epoch we do not know is taken only as a HELLO (a new peer, or
        # the known one rebooted) or an ERROR (reported); a HELLO from the known peer updates what we
        # know of it. False: the frame ends here.
        if not (self._peer_known and same4(buf, H_EPOCH, self._peer, 0)):
            if t == ERROR and blen >= ERROR_MIN:
                self._event(EV_PEER_ERROR, buf[HDR + ER_CODE])
                return False
            if t != HELLO:
                self.rx_stale += 1
                self._need_hello = True
                return False
            if not self._hello_in(buf, blen):
                return False
            reboot = self._peer_known
            copy4(self._peer, 0, buf, H_EPOCH)
            self._peer_known = True
            self._rx_next = u16(buf, HDR + HE_TXBASE)
            self._gap_for = -1
            self._limit_ok = False
            self.established = False
            for i in range(self._wn):  # a new peer instance holds nothing of ours, and we hold nothing of its
                self._w_sack[i] = 0
            self._forget_rx()
            self._adopt_hello(buf, blen)
            if reboot:
                self.peer_reboots += 1
                self._event(EV_PEER_REBOOT, self.peer_reboots)
        elif t == HELLO:
            if not self._hello_in(buf, blen):
                return False
            base = u16(buf, HDR + HE_TXBASE)
            if 0 < ((base - self._rx_next) & 0xFFFF) < 0x8000:  # the peer no longer holds those frames
                self._rx_next = base
                self._forget_rx()
            self._adopt_hello(buf, blen)
        return True

    def _credit_in(self, d):
        # What every frame of the peer's grants: a fresh credit anchor and, when addressed to us, its
        # cumulative ack and its limit (the first frame to us establishes the link). Returns to_me.
        self._anchor = (d.txoff + d.wire) & 0xFFFF
        self._anchor_ok = True
        self._since = self._rest
        self._last_rx = self.now
        to_me = same4(d.buf, H_PEER, self._epoch, 0)
        if to_me:
            self._ack_in(d.ack)
            lim = d.limit
            if not self._limit_ok:
                self._limit = lim
                self._limit_ok = True
            elif 0 < ((lim - self._limit) & 0xFFFF) < 0x8000:
                self._limit = lim
            if not self.established:
                self.established = True
                self._next_tx = self._base  # resend everything unacked to this (possibly new) peer
                self._event(EV_ESTABLISHED, 1)
        return to_me

    def _dispatch(self, d, t, to_me):
        # What the frame's type asks: answer a HELLO or a probe, apply an ACK's selective acks and gap,
        # report an ERROR, take data in order.
        buf = d.buf
        blen = d.blen
        if t == HELLO:
            if not to_me or buf[HDR + HE_FLAGS] & HELLO_WANT:
                self._need_hello = True
            else:
                self._ack_due = True
                self._ack_at = self.now
        elif t == HEARTBEAT:
            if blen and buf[HDR] & HB_PROBE:
                self._ack_due = True
                self._ack_at = self.now
        elif t == ACK:
            held = False
            if to_me and blen >= 3 and buf[HDR] & ACK_SACK:
                held = self._w_sack_in(d.ack, buf[HDR + AK_SACK] | (buf[HDR + AK_SACK + 1] << 8))
            if to_me and blen and buf[HDR] & ACK_GAP and not held:
                self._gap_in()  # the peer keeps nothing after a gap: go back
        elif t == ERROR:
            if blen >= ERROR_MIN:
                self._event(EV_PEER_ERROR, buf[HDR + ER_CODE])
        elif t >= DATA_MIN:
            self._data_in(d, buf, t, blen, to_me)
        else:
            self.rx_unknown += 1

    def _hello_in(self, buf, blen):
        code = frame.check_body(HELLO, buf, HDR, blen)
        if code:
            self.rx_bad_body += 1
            self._event(EV_BAD_BODY, HELLO)
            return False
        if self._accept is not None:
            code = self._accept(buf, HDR, blen)
            if code:
                self.refused += 1
                self._event(EV_REFUSED, code)
                self._err_code = frame.E_HELLO  # an ERROR frame goes out soon
                self._err_detail = code & 0xFFFF
                return False
        return True

    def _adopt_hello(self, buf, blen):
        self.peer_minor = buf[H_VER] & 15  # the peer's minor version: which LOG layout it speaks
        ph = self.peer_hello
        k = blen if blen < HELLO_SIZE_11 else HELLO_SIZE_11
        for i in range(k):
            ph[i] = buf[HDR + i]
        if k < HELLO_SIZE_11:  # a 1.0 HELLO: no uid, no wall time
            for i in range(HELLO_SIZE, HELLO_SIZE_11):
                ph[i] = 0
            put_u16(ph, frame.HE_WDAY, frame.WALL_NONE)
        self.peer_hello_at = self.now
        self.hellos_in += 1
        self._peer_hello_ok = True
        # frames queued for an earlier peer that this one cannot take are dropped (rare: its limits shrank)
        mb = self.max_body()
        s = self._base
        while s != self._next_seq:
            if self._w_n[s & self._mask] > mb:
                self._event(EV_TX_DROPPED, self.reset_tx())
                return
            s = (s + 1) & 0xFFFF

    def _data_in(self, d, buf, t, blen, to_me):
        if not to_me or not self.established:
            self.rx_misaddressed += 1
            return
        diff = (d.seq - self._rx_next) & 0xFFFF
        if diff == 0:
            self._rx_next = (self._rx_next + 1) & 0xFFFF
            self._ack_later()
            if frame.check_body(t, buf, HDR, blen, self.peer_minor):
                self.rx_bad_body += 1
                self._event(EV_BAD_BODY, t)
            else:
                self.rx_delivered += 1
                if self.on_frame is not None:
                    self.on_frame(t, buf, HDR, blen)
            if self._ro_n:
                self._drain()
        elif diff < 0x8000:  # a frame after a missing one: keep it if we can, ack, ask for the hole now
            self.rx_gap += 1
            self._ack_later()
            if diff < self._ro_n and blen <= self._ro_size:
                slot = d.seq & self._ro_mask
                if self._ro_seq[slot] == d.seq:
                    self.rx_dup += 1
                else:
                    base = slot * self._ro_size
                    ro = self._ro
                    for i in range(blen):
                        ro[base + i] = buf[HDR + i]
                    self._ro_seq[slot] = d.seq
                    self._ro_t[slot] = t
                    self._ro_len[slot] = blen
                    if not self._sack_due:  # the sender learns it from an ACK frame only: send one soon
                        self._sack_due = True
                        self._sack_at = (self.now + self.ack_ms) & MASK30
            if self._gap_for != self._rx_next or ticks_diff(self.now, self._gap_at) >= self.rto_min:
                self._gap_for = self._rx_next
                self._gap_at = self.now
                self._need_gap = True
        else:
            self.rx_dup += 1
            self._ack_later()

    def _drain(self):
        # Deliver frames held after a gap once the gap is filled, in order.
        while True:
            nxt = self._rx_next
            slot = nxt & self._ro_mask
            if self._ro_seq[slot] != nxt:
                return
            self._ro_seq[slot] = -1
            self._rx_next = (nxt + 1) & 0xFFFF
            t = self._ro_t[slot]
            n = self._ro_len[slot]
            off = slot * self._ro_size
            if frame.check_body(t, self._ro, off, n, self.peer_minor):
                self.rx_bad_body += 1
                self._event(EV_BAD_BODY, t)
                continue
            self.rx_delivered += 1
            if self.on_frame is not None:
                self.on_frame(t, self._ro, off, n)

    def _sack_bits(self):
        bits = 0
        nxt = self._rx_next
        for i in range(self._ro_n - 1):
            s = (nxt + 1 + i) & 0xFFFF
            if self._ro_seq[s & self._ro_mask] == s:
                bits |= 1 << i
        return bits

    def _forget_rx(self):
        for i in range(self._ro_n):
            self._ro_seq[i] = -1

    def _ack_in(self, ack):
        k = self._w_ack(ack)
        if k <= 0:
            if k < 0:  # acks a frame never sent: a broken or hostile peer
                self.rx_bad_ack += 1
            return
        slot = ack & self._mask
        if self._w_tries[slot] == 1:  # Karn: time only frames sent once
            self._rtt(ticks_diff(self.now, self._w_t[slot]))
        self.tx_acked += k
        if self._base == self._sent_hi:
            self._rto_on = False
        else:
            self._rto_on = True
            self._rto_at = (self.now + self._rto) & MASK30

    def _rtt(self, r):
        if r < 0:
            r = 0
        if self._srtt8 == 0:
            self._srtt8 = 8 * r + 1
            self._rttvar4 = 2 * r
        else:
            err = r - (self._srtt8 >> 3)
            self._srtt8 += err
            if self._srtt8 < 1:
                self._srtt8 = 1
            if err < 0:
                err = -err
            self._rttvar4 += err - (self._rttvar4 >> 2)
        rto = (self._srtt8 >> 3) + self._rttvar4
        self._rto = self.rto_min if rto < self.rto_min else (self.rto_max if rto > self.rto_max else rto)

    def _gap_in(self):
        base = self._base
        if base == self._sent_hi:
            return
        guard = self._srtt8 >> 3
        if guard < self.rto_min:
            guard = self.rto_min
        if self._rewind_base == base and ticks_diff(self.now, self._rewind_at) < guard:
            return  # already going back for this hole
        self._rewind(base)
        self.rewinds += 1

    def _rewind(self, base):
        self._next_tx = base
        self._rewind_base = base
        self._rewind_at = self.now

    def _ack_later(self):
        if not self._ack_due:
            self._ack_due = True
            self._ack_at = (self.now + self.ack_ms) & MASK30

    def _timers(self):
        now = self.now
        if self.established and ticks_diff(now, self._last_rx) >= self.dead_ms:
            self.established = False
            self._need_hello = True
            self._event(EV_PEER_LOST, 0)
        if not self.established and ticks_diff(now, self._last_hello) >= self.hello_ms:
            self._need_hello = True
        if self._rto_on and ticks_diff(now, self._rto_at) >= 0:
            if self._blocked:  # nothing could be sent: ask for fresh credit instead of backing off
                self._need_probe = True
            elif self.established:
                self.timeouts += 1
                r = self._rto * 2
                self._rto = r if r < self.rto_max else self.rto_max
                for i in range(self._wn):  # what the peer said it held may be gone (its app could not keep
                    self._w_sack[i] = 0  # it: a full store): after a timeout every unacked frame goes again
                self._lost = 0
                self._rewind(self._base)
            self._rto_at = (now + self._rto) & MASK30

    # ---- sending ----

    def _to(self):
        # A restored link knows its peer but has no credit anchor until the peer's first frame: it must
        # not address that peer yet, or the peer would take the header's limit 0 as a grant (4.4).
        return self._peer if self._anchor_ok else self._nopeer

    def _limit_adv(self):
        if not self._anchor_ok:
            return 0
        return (self._anchor + self._since + self.rxbuf - _RESERVE) & 0xFFFF

    def _tx(self):
        if self._pend and not self._flush(self._pend):
            return
        for _ in range(16):
            n = self._next_frame()
            if not n or not self._write(n):
                return

    def _next_frame(self):
        now = self.now
        if self._need_hello and ticks_diff(now, self._last_hello) >= _HELLO_GAP_MS:
            self._need_hello = False
            self._last_hello = now
            h = self._hello
            put_u16(h, HE_TXBASE, self._base)
            h[HE_FLAGS] = (1 if self._sig else 0) | (0 if self._peer_hello_ok else HELLO_WANT)
            return self._ctrl(HELLO, h, HELLO_SIZE_11)
        if self._err_code and ticks_diff(now, self._last_err) >= self.hello_ms:
            self._last_err = now
            b = self._cbody
            b[ER_CODE] = self._err_code
            b[ER_REF] = 0
            put_u16(b, ER_DETAIL, self._err_detail)
            self._err_code = 0
            return self._ctrl(ERROR, b, ERROR_MIN)
        if self._need_probe:
            self._need_probe = False
            self.probes += 1
            return self._heartbeat(HB_PROBE)
        if self.established and (self._lost or self._next_tx != self._next_seq):
            n = self._data()
            if n:
                return n
        if (self._need_gap or (self._ack_due and ticks_diff(now, self._ack_at) >= 0)
                or (self._sack_due and ticks_diff(now, self._sack_at) >= 0)):
            b = self._cbody
            b[AK_FLAGS] = ACK_GAP if self._need_gap else 0
            self._need_gap = False
            self._sack_due = False
            if self._ro_n:
                b[AK_FLAGS] |= ACK_SACK
                put_u16(b, AK_SACK, self._sack_bits())
                return self._ctrl(ACK, b, ACK_SIZE + 2)
            return self._ctrl(ACK, b, ACK_SIZE)
        if self.established and ticks_diff(now, self._last_tx) >= self.hb_ms:
            return self._heartbeat(0)
        return 0

    def _heartbeat(self, flags):
        b = self._cbody
        b[HB_FLAGS] = flags
        b[1] = 0
        put_u16(b, HB_BAD, self.dec.errors() & 0xFFFF)
        put_u16(b, HB_DUP, self.rx_dup & 0xFFFF)
        return self._ctrl(HEARTBEAT, b, HEARTBEAT_SIZE)

    def _ctrl(self, ftype, body, blen):
        enc = self.enc
        raw = enc.raw
        if self._sig:
            ftype |= SIGNED
        put_header(raw, 0, ftype, blen, self._next_seq, (self._rx_next - 1) & 0xFFFF, self._epoch, self._to(),
                   self._tx_off, self._limit_adv())
        for i in range(blen):
            raw[HDR + i] = body[i]
        if self._sig:
            frame_codec.counter_inc(self._ctr)
            self._signer.sign(raw, 0, blen, self._ctr)
        return enc.wrap(raw, 0, enc.seal(raw, 0, blen))

    def _data(self):
        # The next data frame the window offers, if the peer's credit takes it: header, signature, CRC.
        seq = self._w_pick()
        if seq < 0:
            return 0
        slot = seq & self._mask
        off = self._w_off[slot]
        blen = self._w_n[slot]
        w = self._w_buf
        raw = HDR + blen + self._sig + frame.CRC
        if not self._limit_ok or ((self._limit - self._tx_off - (raw + raw // 254 + 3)) & 0xFFFF) >= 0x8000:
            if not self._blocked:
                self._blocked = True
                self._blocked_at = self.now
                self.credit_waits += 1
            return 0
        self._blocked = False
        put_header(w, off, w[off + 1], blen, seq, (self._rx_next - 1) & 0xFFFF, self._epoch, self._to(),
                   self._tx_off, self._limit_adv())
        if self._sig:
            frame_codec.counter_inc(self._ctr)
            self._signer.sign(w, off, blen, self._ctr)
        enc = self.enc
        n = enc.wrap(w, off, enc.seal(w, off, blen))
        if self._w_sent(seq, self.now):
            self.tx_retx += 1
            if seq == self._base:  # waiting for this resend now: time it from here
                self._rto_on = True
                self._rto_at = (self.now + self._rto) & MASK30
        else:
            self.tx_data += 1
        if not self._rto_on:
            self._rto_on = True
            self._rto_at = (self.now + self._rto) & MASK30
        return n

    def _write(self, n):
        # A new frame in wire[0:n]: count it and send it.
        self.tx_frames += 1
        self._ack_due = False  # every header carries the current ack
        return self._flush(n)

    def _flush(self, n):
        # Send wire[0:n]; what the transport does not take moves to the front and waits in _pend.
        wire = self.enc.wire
        w = self.t.write(wire, n)
        if w is None:
            w = n
        self._tx_off = (self._tx_off + w) & 0xFFFF
        self.tx_bytes += w
        self._last_tx = self.now
        if w < n:
            for i in range(n - w):
                wire[i] = wire[w + i]
            self._pend = n - w
            return False
        self._pend = 0
        return True
