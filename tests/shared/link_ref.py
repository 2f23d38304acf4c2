# link_ref.py: test helpers for the link: a simulated noisy UART pair, message tracking, reference encoders.
"""Runs on CPython and MicroPython; SimLine/Port/Channel and Tracker allocate nothing once built, so a
test can lock the heap around channel steps and link polls.

- ref_cobs / ref_frame / ref_wire: a deliberately plain second implementation of COBS and of the
  version-1 frame layout (struct + binascii), to check shared/cobs.py and shared/frame.py against.
- SimLine: one direction of a UART: the sender's TX FIFO (write() takes what fits), the line moving
  baud/10 bytes per second (10 bits per byte), per-byte noise (bit flip, drop, insert; rate in parts
  per million, deterministic xorshift), and the receiver's RX ring of rxbuf bytes that drops bytes
  when full (overflow counts them, as a board's UART driver does).
- Port: what a Link gets as its transport: write(buf, n) into one line, readinto(buf) from the other.
- Channel: two lines, two ports, one simulated millisecond clock.
- Tracker: message bodies derived from an id, so the receiver can tell delivered-once, duplicated,
  lost and accepted-with-wrong-contents.
"""
import binascii
import struct

import testkit


def ref_cobs(data):
    """COBS by the textbook: each zero-free piece as full 254-byte blocks, then one short block."""
    data = bytes(data)
    n = len(data)
    out = bytearray(n + n // 254 + 1)
    k = 0
    start = 0
    while True:
        z = data.find(b"\x00", start)
        end = n if z < 0 else z
        while end - start >= 254:
            out[k] = 255
            out[k + 1:k + 255] = data[start:start + 254]
            k += 255
            start += 254
            if z < 0 and start == n:  # canonical: no empty block after a final full block
                return bytes(out[:k])
        out[k] = end - start + 1
        out[k + 1:k + 1 + end - start] = data[start:end]
        k += 1 + end - start
        if z < 0:
            return bytes(out[:k])
        start = z + 1


def ref_frame(ftype, body, seq, ack, epoch, peer, txoff, limit, version=0x14):
    """Version-1 frame (header + body + CRC) with struct, epoch and peer as ints."""
    hdr = struct.pack("<BBHHHIIHH", version, ftype, len(body), seq, ack, epoch, peer, txoff, limit)
    raw = hdr + bytes(body)
    return raw + struct.pack("<I", binascii.crc32(raw))


def ref_wire(ftype, body, seq, ack, epoch, peer, txoff, limit):
    return b"\x00" + ref_cobs(ref_frame(ftype, body, seq, ack, epoch, peer, txoff, limit)) + b"\x00"


class SimLine:
    """One UART direction with a TX FIFO, baud-rate timing, noise and an RX ring that can overflow."""

    def __init__(self, baud, rxbuf, txfifo=256, error_ppm=0, seed=1):
        self.bps = baud // 10
        self.rx = bytearray(rxbuf)
        self.rxcap = rxbuf
        self.rx_head = 0
        self.rx_n = 0
        self.tx = bytearray(txfifo)
        self.txcap = txfifo
        self.tx_head = 0
        self.tx_n = 0
        self.acc = 0
        self.ppm = error_ppm
        self.rng = testkit.Rng(seed)
        self.events = 0
        self.flips = 0
        self.drops = 0
        self.inserts = 0
        self.overflow = 0
        self.carried = 0
        self.delivered = 0  # bytes put into the receiver's ring so far
        self.on_error = None  # host tools: called with `delivered` at each error event
        self.rx_peak = 0
        self.cut = False  # True: every byte on the line is lost (cable pulled)

    def write(self, buf, n):
        free = self.txcap - self.tx_n
        if n > free:
            n = free
        tx = self.tx
        cap = self.txcap
        j = (self.tx_head + self.tx_n) % cap
        for i in range(n):
            tx[j] = buf[i]
            j += 1
            if j == cap:
                j = 0
        self.tx_n += n
        return n

    def _deliver(self, b):
        if self.rx_n == self.rxcap:
            self.overflow += 1
            return
        self.rx[(self.rx_head + self.rx_n) % self.rxcap] = b
        self.rx_n += 1
        self.delivered += 1
        if self.rx_n > self.rx_peak:
            self.rx_peak = self.rx_n

    def inject(self, data, n):
        """Put bytes straight into the receiver's ring (tests: replayed or hand-made frames)."""
        for i in range(n):
            self._deliver(data[i])

    def advance(self, ms):
        """Move ms milliseconds' worth of bytes from the TX FIFO over the line."""
        self.acc += self.bps * ms
        k = self.acc // 1000
        if k > self.tx_n:
            k = self.tx_n
            self.acc = 0
        else:
            self.acc -= k * 1000
        rng = self.rng
        ppm = self.ppm
        for _ in range(k):
            b = self.tx[self.tx_head]
            self.tx_head += 1
            if self.tx_head == self.txcap:
                self.tx_head = 0
            self.tx_n -= 1
            self.carried += 1
            if self.cut:
                continue
            if ppm and rng.below(1000000) < ppm:
                self.events += 1
                if self.on_error is not None:
                    self.on_error(self.delivered)
                kind = rng.below(3)
                if kind == 0:
                    self.flips += 1
                    b ^= 1 << rng.below(8)
                elif kind == 1:
                    self.drops += 1
                    continue
                else:
                    self.inserts += 1
                    self._deliver(b)
                    b = rng.below(256)
            self._deliver(b)

    def readinto(self, buf):
        n = len(buf)
        if n > self.rx_n:
            n = self.rx_n
        rx = self.rx
        cap = self.rxcap
        h = self.rx_head
        for i in range(n):
            buf[i] = rx[h]
            h += 1
            if h == cap:
                h = 0
        self.rx_head = h
        self.rx_n -= n
        return n


class Port:
    """The transport one endpoint sees: writes go out on `out`, reads come from `inp`."""

    def __init__(self, out, inp):
        self.out = out
        self.inp = inp

    def write(self, buf, n):
        return self.out.write(buf, n)

    def readinto(self, buf):
        return self.inp.readinto(buf)


class Channel:
    """A full-duplex simulated UART between endpoint A and endpoint B (a: node side, b: gateway side)."""

    def __init__(self, baud=115200, rxbuf_a=1024, rxbuf_b=1024, error_ppm=0, seed=1, txfifo=256):
        self.ab = SimLine(baud, rxbuf_b, txfifo, error_ppm, seed * 2 + 1)
        self.ba = SimLine(baud, rxbuf_a, txfifo, error_ppm, seed * 2 + 2)
        self.a = Port(self.ab, self.ba)
        self.b = Port(self.ba, self.ab)
        self.now = 0

    def step(self, ms):
        self.ab.advance(ms)
        self.ba.advance(ms)
        self.now = (self.now + ms) & 0x3FFFFFFF


class Tracker:
    """Numbered messages with contents derived from the number; counts what the receiver got."""

    def __init__(self, count, size_min=8, size_max=64, seed=7):
        self.count = count
        self.smin = size_min
        self.smax = size_max
        self.seed = seed
        self.got = bytearray(count)  # deliveries per id (saturating at 255)
        self.corrupt = 0
        self.out_of_order = 0
        self.last = -1
        self.buf = bytearray(size_max)

    def size(self, mid):
        return self.smin + (mid * 2654435761 + self.seed) % (self.smax - self.smin + 1)

    def _byte(self, mid, i):
        return ((mid * 131 + i * 29 + self.seed) * 2654435761 >> 13) & 0xFF

    def make(self, mid):
        """Body of message mid into self.buf; returns its length."""
        n = self.size(mid)
        b = self.buf
        b[0] = mid & 0xFF
        b[1] = (mid >> 8) & 0xFF
        b[2] = (mid >> 16) & 0xFF
        for i in range(3, n):
            b[i] = self._byte(mid, i)
        return n

    def receive(self, buf, off, n):
        """Record one delivery; returns the id, or -1 if the contents match no message."""
        if n < 3:
            self.corrupt += 1
            return -1
        mid = buf[off] | (buf[off + 1] << 8) | (buf[off + 2] << 16)
        if mid >= self.count or n != self.size(mid):
            self.corrupt += 1
            return -1
        for i in range(3, n):
            if buf[off + i] != self._byte(mid, i):
                self.corrupt += 1
                return -1
        if self.got[mid] < 255:
            self.got[mid] += 1
        if mid != self.last + 1:
            self.out_of_order += 1
        self.last = mid
        return mid

    def tally(self, sent):
        """(delivered once, duplicated, lost) among the first `sent` ids."""
        once = dup = lost = 0
        for i in range(sent):
            g = self.got[i]
            if g == 1:
                once += 1
            elif g == 0:
                lost += 1
            else:
                dup += 1
        return once, dup, lost


class Pair:
    """Two Links over a Channel: A (node, epoch 0a0a0a0a) and B (gateway, epoch 0b0b0b0b), each
    sending numbered messages (ta: A -> B, tb: B -> A) of type ftype as fast as its window allows.

    step() advances the simulated clock by 1 ms and polls each side every poll_a / poll_b ms. Event
    codes are counted per side in ev_a / ev_b (and listed in log if log is True: that allocates)."""

    def __init__(self, msgs=0, ppm=0, seed=1, baud=115200, rxbuf_a=1024, rxbuf_b=1024, txfifo=256, size_min=8,
                 size_max=96, a_kw=None, b_kw=None, ftype=0x70, now=0, msgs_b=None):
        from array import array

        from shared import link

        self.link = link
        self.ch = Channel(baud, rxbuf_a, rxbuf_b, ppm, seed, txfifo)
        self.ch.now = now
        self.ta = Tracker(msgs, size_min, size_max, seed=seed * 7 + 1)
        self.tb = Tracker(msgs if msgs_b is None else msgs_b, size_min, size_max, seed=seed * 7 + 2)
        self.ftype = ftype
        self.ev_a = array("H", bytes(40))
        self.ev_b = array("H", bytes(40))
        self.log = False
        self.events = []
        self.a_kw = dict(a_kw or {})
        self.b_kw = dict(b_kw or {})
        self.a_kw.setdefault("rxbuf", rxbuf_a)
        self.b_kw.setdefault("rxbuf", rxbuf_b)
        self.a = self.new_a(b"\x0a\x0a\x0a\x0a")
        self.b = self.new_b(b"\x0b\x0b\x0b\x0b")
        self.sent_a = 0
        self.sent_b = 0
        self.send_a = True
        self.send_b = True
        self.poll_a = 1
        self.poll_b = 1
        self.t = 0

    def new_a(self, epoch):
        """A fresh node endpoint on A's port (a reboot when one existed: its UART TX FIFO is reset too)."""
        self.ch.ab.tx_n = 0
        self.a = self.link.Link(self.ch.a, on_frame=self._rx_a, on_event=self._ev_a, epoch=epoch, now=self.ch.now,
                                **self.a_kw)
        return self.a

    def new_b(self, epoch, restore=None):
        self.ch.ba.tx_n = 0
        self.b = self.link.Link(self.ch.b, on_frame=self._rx_b, on_event=self._ev_b, epoch=epoch, now=self.ch.now,
                                role=1, **self.b_kw)
        if restore is not None:
            self.b.restore(restore[0], restore[1], restore[2] if len(restore) > 2 else None)
        return self.b

    def _rx_a(self, t, buf, off, n):
        self.tb.receive(buf, off, n)

    def _rx_b(self, t, buf, off, n):
        self.ta.receive(buf, off, n)

    def _ev_a(self, code, value):
        self.ev_a[code] += 1
        if self.log:
            self.events.append(("a", self.ch.now, code, value))

    def _ev_b(self, code, value):
        self.ev_b[code] += 1
        if self.log:
            self.events.append(("b", self.ch.now, code, value))

    def step(self):
        ch = self.ch
        ch.step(1)
        self.t += 1
        now = ch.now
        a = self.a
        b = self.b
        if self.t % self.poll_a == 0:
            a.poll(now)
        if self.t % self.poll_b == 0:
            b.poll(now)
        ta = self.ta
        while self.send_a and self.sent_a < ta.count and a.established and a.free_slots():
            if not a.send(self.ftype, ta.buf, ta.make(self.sent_a)):
                break
            self.sent_a += 1
        tb = self.tb
        while self.send_b and self.sent_b < tb.count and b.established and b.free_slots():
            if not b.send(self.ftype, tb.buf, tb.make(self.sent_b)):
                break
            self.sent_b += 1

    def done(self):
        return (self.sent_a == self.ta.count and self.sent_b == self.tb.count and self.a.queued() == 0
                and self.b.queued() == 0)

    def run(self, ms, until_done=True):
        """Step up to ms milliseconds (stopping early once everything is sent and acked); returns ms used."""
        for i in range(ms):
            self.step()
            if until_done and self.done():
                return i + 1
        return ms
