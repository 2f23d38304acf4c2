# txwindow.py: the link's transmit window: sequenced frames kept whole in a byte ring until acked.
# shared/link.py's Link inherits it (docs/PROTOCOL.md section 4). No I/O, clock or counters of its own: the
# link times, counts and sends; the window holds what is in flight and says what to send next.
#
# - `frames` slots (a power of two up to 64) indexed by seq & _mask; each frame is stored whole (header
#   room, body, signature and CRC room) at _w_off[slot] in a ring (_w_buf), so a retransmission only
#   rewrites header fields and the CRC. Seqs are u16: _base (oldest unacked) <= _next_tx (next to send,
#   rewinds to _base on loss) <= _next_seq (next to assign); _sent_hi is one past the highest ever sent.
# - Selective acks: _w_sack[slot] is HELD when the peer holds the frame (skipped on resend) or LOST when
#   a later-sent frame was held and this one was not (resent first); _w_txn[slot] numbers each sending,
#   so "sent before" is known after go-back-N reordered the sendings.
# A mixin, not a member object, for the board's sake: its fields then share the link's one attribute
# table (a second instance costs its own, ~300 B of heap per link on the 64-bit port). Every buffer is
# allocated in _w_init; no method allocates.
from array import array

from shared.compat import const
from shared.frame import H_LEN, HDR, put_u16

_HELD = const(1)  # the peer holds it (SACK): do not resend
_LOST = const(2)  # sent before a frame the peer holds, and not held itself: resend it first


class TxWindow:
    # Mixed into Link: these fields and methods are the link's own (the _w_ names keep them apart);
    # _w_init is called from Link.__init__.

    def _w_init(self, frames, nbytes):
        self._wn = frames
        self._mask = frames - 1
        self._w_buf = bytearray(nbytes)  # its length is the ring's capacity
        self._w_off = array("H", bytes(2 * frames))
        self._w_n = array("H", bytes(2 * frames))
        self._w_t = array("i", bytes(4 * frames))  # the link's ticks at each frame's latest sending
        self._w_tries = bytearray(frames)  # sendings so far, saturating at 255
        self._w_sack = bytearray(frames)  # _HELD, _LOST or 0
        self._w_txn = array("H", bytes(2 * frames))  # transmission number of each frame's latest sending
        self._txn = 0
        self._lost = 0  # frames marked _LOST (a hint: rescanned when nothing is found)
        self._r_head = 0  # ring offset of the oldest unacked frame
        self._r_tail = 0  # ring offset one past the newest queued frame
        self._next_seq = 0
        self._base = 0
        self._next_tx = 0
        self._sent_hi = 0

    def _w_add(self, tbyte, body, n, size):
        # Queue body[0:n] as a frame of `size` wire-ready bytes with type byte tbyte; False if full.
        if ((self._next_seq - self._base) & 0xFFFF) >= self._wn:
            return False
        # the ring: frames from _r_head (oldest unacked) to _r_tail; a frame never wraps around
        cap = len(self._w_buf)
        head = self._r_head
        tail = self._r_tail
        if self._base == self._next_seq:
            self._r_head = off = 0
            if size > cap:
                return False
        elif tail > head:
            off = tail if tail + size <= cap else (0 if size <= head else -1)
        else:
            off = tail if tail + size <= head else -1
        if off < 0:
            return False
        w = self._w_buf
        w[off + 1] = tbyte
        put_u16(w, off + H_LEN, n)
        if n == len(body):
            w[off + HDR:off + HDR + n] = body
        else:
            for i in range(n):
                w[off + HDR + i] = body[i]
        slot = self._next_seq & self._mask
        self._w_off[slot] = off
        self._w_n[slot] = n
        self._w_tries[slot] = 0
        self._w_sack[slot] = 0
        self._next_seq = (self._next_seq + 1) & 0xFFFF
        self._r_tail = off + size
        return True

    def _w_ack(self, ack):
        # The peer has every frame up to ack: k frames newly acked, 0 if none, -1 if ack names a frame
        # never sent (a broken or hostile peer).
        base = self._base
        k = (ack + 1 - base) & 0xFFFF
        if k == 0:
            return 0
        if k > ((self._sent_hi - base) & 0xFFFF):
            return -1 if k < 0x8000 else 0
        base = (ack + 1) & 0xFFFF
        self._base = base
        if base == self._next_seq:
            self._r_head = self._r_tail = 0
        else:
            self._r_head = self._w_off[base & self._mask]
        if ((self._next_tx - base) & 0xFFFF) >= 0x8000:
            self._next_tx = base
        return k

    def _w_sack_in(self, ack, bits):
        # Mark the frames the peer holds (bit i: seq ack + 2 + i); then every frame sent before the
        # latest-sent held one and not held itself is lost (bytes on a UART cannot overtake each
        # other): resend those first. False if no bit named a frame in flight.
        base = self._base
        span = (self._sent_hi - base) & 0xFFFF
        mask = self._mask
        last = -1
        i = 0
        while bits:
            if bits & 1:
                s = (ack + 2 + i) & 0xFFFF
                if ((s - base) & 0xFFFF) < span:
                    self._w_sack[s & mask] = _HELD
                    txn = self._w_txn[s & mask]
                    if last < 0 or 0 < ((txn - last) & 0xFFFF) < 0x8000:
                        last = txn
            bits >>= 1
            i += 1
        if last < 0:
            return False
        s = base
        while s != self._sent_hi:
            slot = s & mask
            if not self._w_sack[slot] and 0 < ((last - self._w_txn[slot]) & 0xFFFF) < 0x8000:
                self._w_sack[slot] = _LOST
                self._lost += 1
            s = (s + 1) & 0xFFFF
        return True

    def _w_pick(self):
        # The seq to send next: a frame known lost first, else the next not held by the peer; -1 if none.
        mask = self._mask
        if self._lost:
            s = self._base
            while s != self._sent_hi:
                if self._w_sack[s & mask] == _LOST:
                    return s
                s = (s + 1) & 0xFFFF
            self._lost = 0
        s = self._next_tx
        while s != self._next_seq and self._w_sack[s & mask] == _HELD:  # the peer has it: skip
            s = (s + 1) & 0xFFFF
        self._next_tx = s
        return -1 if s == self._next_seq else s

    def _w_sent(self, seq, now):
        # Frame seq went out at now: returns how often it had been sent before.
        slot = seq & self._mask
        tries = self._w_tries[slot]
        self._w_tries[slot] = tries + 1 if tries < 255 else 255
        self._w_t[slot] = now
        self._w_txn[slot] = self._txn
        self._txn = (self._txn + 1) & 0xFFFF
        seq = (seq + 1) & 0xFFFF
        if self._w_sack[slot] == _LOST:
            self._w_sack[slot] = 0
            self._lost -= 1
        else:
            self._next_tx = seq
        if 0 < ((seq - self._sent_hi) & 0xFFFF) < 0x8000:
            self._sent_hi = seq
        return tries
