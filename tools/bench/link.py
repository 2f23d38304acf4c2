"""Benchmark the node <-> gateway link on a simulated UART; prints one JSON object.

Everything runs on CPython with simulated time (1 ms steps, 10 bits per byte on the line), so the
figures are deterministic for a seed and independent of this machine's speed:

- per byte-error rate (1e-4, 1e-3; flips, drops and inserts in equal parts, both directions), with
  the recommended configuration (reorder=8 on both: selective acks; the node's slots 128 B), and the
  plain go-back-N figures (no reorder buffer) beside them (`*_go_back_n`):
  * link: messages of 8..96 bytes both ways through two `shared.link.Link` endpoints:
    delivered_once, duplicated, lost, accepted_corrupt, retransmit_ratio (retransmitted / first
    transmissions of data frames);
  * framing alone (no retransmission): frames_lost_per_error_event, raw_accepted_corrupt, and
    resync_bytes_max / _mean: bytes from an error to the leading delimiter of the next frame decoded;
  * goodput_bytes_per_s at 115200 and 921600 baud: message bytes delivered per simulated second,
    one direction saturated with 80-byte bodies (a K=4, top-4 DRAFT body), the other carrying the acks;
- burst_resync_bytes_max / _mean: bytes from the end of a garbage burst to the leading delimiter of
  the first frame decoded after it (bursts of 1..256 random bytes at random places);
- reboot_detect_ms / resume_ms: simulated time from a node reboot to the gateway's EV_PEER_REBOOT,
  and until both ends are established again (115200 baud, both polling every millisecond);
- goodput_bytes_per_s_pty: the same goodput over a REAL pty pair (two Link endpoints on two host
  ptys, CPython, wall-clock time), bytes relayed by a thread that paces the line at the baud rate (10
  bits per byte, sleeping per chunk) and applies the same byte errors; plus its delivered_once /
  duplicated / lost / accepted_corrupt tally and retransmit_ratio. This is what a host sees through
  the kernel's tty layer and Python's scheduling, not a simulation;
- wall_s: how long the run took here.

    python tools/bench/link.py [--seed S] [--msgs N] [--seconds T] [--pty-seconds P] [--json]
    edgetwin bench link --json

The simulated UART lives in tests/shared/link_ref.py (shared with the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(ROOT / "tests" / "shared")):
    if p not in sys.path:
        sys.path.insert(0, p)

import link_ref  # noqa: E402  (tests/shared: the simulated UART shared with the tests)

from shared import frame, frame_codec, link  # noqa: E402
from shared.compat import ticks_ms  # noqa: E402
from tools.board.vboard import write_all  # noqa: E402
from host.usage import Parser

RATES = (("1e-4", 100), ("1e-3", 1000))


def byte_errors(data: bytes, ppm: int, rng: random.Random) -> tuple[bytes, int]:
    """data with each byte hit at `ppm` per million by one error event, equally often a flipped bit, a
    dropped byte or an inserted random byte after it -> (the bytes that arrive, error events)."""
    out = bytearray()
    events = 0
    for x in data:
        if rng.random() * 1e6 < ppm:
            events += 1
            k = rng.randrange(3)
            if k == 0:
                out.append(x ^ (1 << rng.randrange(8)))
            elif k == 2:
                out += bytes((x, rng.randrange(256)))
        else:
            out.append(x)
    return bytes(out), events
BAUDS = (115200, 921600)
# the recommended configuration: each side keeps as many frames after a gap as the peer's window holds
# (8): the gateway any size (8 KB of host RAM), the node bodies up to 128 bytes (1 KB: verdicts, acks
# and small chunks); both then acknowledge selectively (SACK)
NODE_SACK = {"reorder": 8, "reorder_bytes": 128}
GATEWAY_SACK = {"reorder": 8}


def _kw(sack: bool) -> dict:
    return {"a_kw": dict(NODE_SACK), "b_kw": dict(GATEWAY_SACK)} if sack else {}


def link_run(ppm: int, seed: int, msgs: int, baud: int = 115200, sack: bool = True) -> dict:
    """Messages both ways through two endpoints; exactly-once accounting and retransmission ratio."""
    p = link_ref.Pair(msgs=msgs, ppm=ppm, seed=seed, baud=baud, **_kw(sack))
    ms = p.run(msgs * 200 + 60000)
    once, dup, lost = p.ta.tally(p.sent_a)
    once_b, dup_b, lost_b = p.tb.tally(p.sent_b)
    first = p.a.tx_data + p.b.tx_data
    return {"messages": p.sent_a + p.sent_b, "delivered_once": once + once_b, "duplicated": dup + dup_b,
            "lost": lost + lost_b + (2 * msgs - p.sent_a - p.sent_b), "accepted_corrupt": p.ta.corrupt + p.tb.corrupt,
            "retransmit_ratio": (p.a.tx_retx + p.b.tx_retx) / max(1, first),
            "error_events": p.ch.ab.events + p.ch.ba.events,
            "sim_ms": ms, "done": p.done()}


def raw_run(ppm: int, seed: int, frames: int) -> dict:
    """Frames through one noisy line with no retransmission: what the framing alone loses."""
    line = link_ref.SimLine(115200, rxbuf=1 << 16, txfifo=1 << 16, error_ppm=ppm, seed=seed)
    dec = frame_codec.Decoder()
    rng = random.Random(seed)
    enc = frame_codec.Encoder()
    ep = b"\x0a\x0a\x0a\x0a"
    sent = {}
    got: dict[int, int] = {}
    corrupt = 0
    chunk = bytearray(256)
    errors: list[int] = []  # receiver byte index of each error event
    line.on_error = errors.append
    starts: list[int] = []  # receiver byte index of each decoded frame's leading delimiter
    fed = 0
    for seq in range(frames):
        body = bytes(rng.randrange(256) for _ in range(rng.randint(8, 96)))
        sent[seq & 0xFFFF] = body
        n = enc.encode(0x70, seq & 0xFFFF, 0, ep, ep, 0, 0, body, 0, len(body))
        while line.write(enc.wire, n) < n:  # the FIFO is big enough; never taken
            raise RuntimeError("tx fifo full")
        line.advance(1000)
        while True:
            k = line.readinto(chunk)
            if not k:
                break
            i = 0
            while i < k:
                i = dec.feed(chunk, i, k)
                if dec.ready:
                    starts.append(fed + i - dec.wire)
                    s = dec.seq
                    if sent.get(s) != bytes(dec.buf[frame.HDR:frame.HDR + dec.blen]):
                        corrupt += 1
                    else:
                        got[s] = got.get(s, 0) + 1
            fed += k
    lost = frames - len(got)
    # bytes from each error to the start of the first frame decoded after it (an error followed by
    # another before that point is measured from the later one)
    resync = []
    j = 0
    for k, e in enumerate(errors):
        while j < len(starts) and starts[j] < e:
            j += 1
        if j < len(starts) and (k + 1 == len(errors) or errors[k + 1] >= starts[j]):
            resync.append(starts[j] - e)
    return {"frames": frames, "lost": lost, "accepted_corrupt": corrupt, "error_events": line.events,
            "frames_lost_per_error_event": lost / line.events if line.events else 0.0,
            "decoder_errors": dec.errors(), "resync_bytes_max": max(resync, default=0),
            "resync_bytes_mean": round(sum(resync) / len(resync), 1) if resync else 0.0}


def resync_run(seed: int, bursts: int = 300) -> dict:
    """Garbage bursts dropped into a clean frame stream: bytes until the decoder is back in step."""
    rng = random.Random(seed)
    enc = frame_codec.Encoder()
    ep = b"\x0a\x0a\x0a\x0a"
    worst = 0
    total = 0
    lost_frames = 0
    for _ in range(bursts):
        stream = bytearray()
        starts = []
        for seq in range(12):
            body = bytes(rng.randrange(256) for _ in range(rng.randint(8, 200)))
            n = enc.encode(0x70, seq, 0, ep, ep, 0, 0, body, 0, len(body))
            starts.append(len(stream))
            stream += enc.wire[:n]
        k = rng.randrange(2, 10)
        at = starts[k] + rng.randrange(starts[k + 1] - starts[k] + 1)
        burst = bytes(rng.randrange(256) for _ in range(rng.randint(1, 256)))
        stream[at:at] = burst
        end = at + len(burst)
        dec = frame_codec.Decoder()
        seen = []
        i = 0
        while i < len(stream):
            i = dec.feed(stream, i, len(stream))
            if dec.ready:
                seen.append(dec.seq)
        after = [s for s in seen if s > k]
        first = min(after)
        start = starts[first] + len(burst)
        gap = max(0, start - end)
        worst = max(worst, gap)
        total += gap
        lost_frames += 12 - len(seen)
    return {"burst_resync_bytes_max": worst, "burst_resync_bytes_mean": round(total / bursts, 1),
            "frames_lost_per_burst": round(lost_frames / bursts, 3)}


def goodput_run(ppm: int, seed: int, baud: int, seconds: int, body: int = 80, sack: bool = True) -> dict:
    """One direction saturated with fixed-size bodies; message bytes delivered per simulated second."""
    p = link_ref.Pair(msgs=1 << 20, msgs_b=0, ppm=ppm, seed=seed, baud=baud, size_min=body, size_max=body,
                      **_kw(sack))
    p.run(200, until_done=False)  # handshake
    start_bytes = sum(p.ta.got[i] for i in range(p.sent_a)) * body
    p.run(seconds * 1000, until_done=False)
    delivered = sum(1 for i in range(p.sent_a) if p.ta.got[i]) * body - start_bytes
    return {"goodput_bytes_per_s": round(delivered / seconds), "line_bytes_per_s": baud // 10,
            "retransmit_ratio": round(p.a.tx_retx / max(1, p.a.tx_data), 4), "accepted_corrupt": p.ta.corrupt}


def reboot_run(seed: int, trials: int = 20) -> dict:
    """Time from a node reboot to the gateway noticing it, and to both ends established again."""
    rng = random.Random(seed)
    detect = []
    resume = []
    for t in range(trials):
        p = link_ref.Pair(msgs=400, msgs_b=400, seed=seed + t, **_kw(True))
        p.run(300 + rng.randrange(700), until_done=False)
        p.new_a(bytes((0xC0, t + 1, 0x5E, 0xED)))
        before = p.ev_b[link.EV_PEER_REBOOT]
        ms = 0
        while p.ev_b[link.EV_PEER_REBOOT] == before and ms < 5000:
            p.step()
            ms += 1
        detect.append(ms)
        while not (p.a.established and p.b.established) and ms < 10000:
            p.step()
            ms += 1
        resume.append(ms)
    return {"reboot_detect_ms": max(detect), "reboot_detect_ms_mean": sum(detect) / len(detect),
            "resume_ms": max(resume), "resume_ms_mean": sum(resume) / len(resume)}


class _PtyEnd:
    """One side of the pty bench: a raw pty; the link reads/writes its slave, the relay its master."""

    def __init__(self) -> None:
        import tty

        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        os.set_blocking(self.master, False)
        os.set_blocking(self.slave, False)

    def readinto(self, buf: bytearray) -> int:
        try:
            data = os.read(self.slave, len(buf))
        except BlockingIOError:
            return 0
        buf[:len(data)] = data
        return len(data)

    def write(self, buf: bytearray, n: int | None = None) -> int:
        n = len(buf) if n is None else n
        try:
            return os.write(self.slave, memoryview(buf)[:n])
        except BlockingIOError:
            return 0

    def close(self) -> None:
        for fd in (self.master, self.slave):
            os.close(fd)


class PacedRelay:
    """Copies bytes between two pty masters at `baud` (10 bits per byte), with byte errors at `ppm`
    per million (flip / drop / insert in equal parts): one thread per direction, each holding a chunk
    back until the line would have clocked it out (the receiver sees it when its last bit arrived)."""

    def __init__(self, a: _PtyEnd, b: _PtyEnd, baud: int, ppm: int, seed: int) -> None:
        self.baud, self.ppm = baud, ppm
        self.rng = random.Random(seed)
        self.stop_flag = False
        self.events = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._pump, args=(a.master, b.master), daemon=True),
                        threading.Thread(target=self._pump, args=(b.master, a.master), daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float) -> None:
        for t in self.threads:
            t.join(timeout)

    def _noise(self, data: bytes) -> bytes:
        if not self.ppm:
            return data
        with self._lock:
            out, events = byte_errors(data, self.ppm, self.rng)
            self.events += events
        return out

    def _pump(self, src: int, dst: int) -> None:
        per_byte = 10.0 / self.baud
        free_at = 0.0
        chunk = max(16, self.baud // 10 // 200)  # about 5 ms of line time per chunk
        while not self.stop_flag:
            ready, _, _ = select.select([src], [], [], 0.005)
            if not ready:
                continue
            try:
                data = os.read(src, chunk)
            except (BlockingIOError, OSError):
                continue
            now = time.perf_counter()
            # a late wake-up (sleep overshoot) is caught up on the next chunks; an idle line is not credited
            free_at = (now if now - free_at > 0.02 else free_at) + len(data) * per_byte
            wait = free_at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not write_all(dst, self._noise(data), lambda: self.stop_flag):
                return


def pty_run(ppm: int, seed: int, baud: int, seconds: float, body: int = 80) -> dict:
    """Two Link endpoints over a real pty pair with a paced, noisy relay: goodput and exactly-once tally."""
    a, b = _PtyEnd(), _PtyEnd()
    relay = PacedRelay(a, b, baud, ppm, seed)
    relay.start()
    got: dict[int, int] = {}
    corrupt = [0]
    rng = random.Random(seed)
    sent: list[bytes] = []

    def on_b(t: int, buf: bytearray, off: int, n: int) -> None:
        data = bytes(buf[off:off + n])
        i = int.from_bytes(data[:4], "little")
        if i >= len(sent) or sent[i] != data:
            corrupt[0] += 1
        else:
            got[i] = got.get(i, 0) + 1

    clock = ticks_ms  # the link's own mod-2**30 ms clock
    la = link.Link(a, role=frame.ROLE_NODE, now=clock(), **NODE_SACK)
    # the gateway as host/session.py configures it: a 4 KB receive buffer (host RAM is cheap)
    lb = link.Link(b, on_frame=on_b, role=frame.ROLE_GATEWAY, now=clock(), rxbuf=4096, **GATEWAY_SACK)
    t_end = time.monotonic() + seconds
    t_start = None
    base = 0
    try:
        while time.monotonic() < t_end + 1.0:
            now = clock()
            la.poll(now)
            lb.poll(now)
            if la.established and lb.established and t_start is None:
                t_start = time.monotonic()
                t_end = t_start + seconds
            if t_start is not None and time.monotonic() < t_end:
                while la.free_slots():
                    data = len(sent).to_bytes(4, "little") + bytes(rng.randrange(256) for _ in range(body - 4))
                    if not la.send(0x70, data):
                        break
                    sent.append(data)
            elif t_start is not None and base == 0:
                base = sum(1 for i in got)  # delivered within the timed window
            if t_start is not None and time.monotonic() >= t_end and la.queued() == 0:
                break
            time.sleep(0.0005)
    finally:
        relay.stop_flag = True
        relay.join(1)
        a.close()
        b.close()
    delivered_in_window = base or len(got)
    once = sum(1 for v in got.values() if v == 1)
    return {"goodput_bytes_per_s": round(delivered_in_window * body / seconds), "sent": len(sent),
            "delivered_once": once, "duplicated": sum(1 for v in got.values() if v > 1),
            "lost": len(sent) - len(got), "accepted_corrupt": corrupt[0],
            "retransmit_ratio": round(la.tx_retx / max(1, la.tx_data), 4), "error_events": relay.events}


def run(seed: int = 1, msgs: int = 1500, seconds: int = 5, pty_seconds: float = 2.0) -> dict:
    t0 = time.perf_counter()
    out: dict = {"seed": seed, "baud_default": 115200, "bits_per_byte": 10}
    for name, ppm in RATES:
        lk = link_run(ppm, seed, msgs)
        raw = raw_run(ppm, seed, 4 * msgs)
        entry = {k: lk[k] for k in ("messages", "delivered_once", "duplicated", "lost", "accepted_corrupt")}
        entry["retransmit_ratio"] = round(lk["retransmit_ratio"], 4)
        gbn = link_run(ppm, seed, msgs, sack=False)
        entry["retransmit_ratio_go_back_n"] = round(gbn["retransmit_ratio"], 4)
        assert gbn["delivered_once"] == gbn["messages"] and gbn["accepted_corrupt"] == 0, gbn
        entry["frames_lost_per_error_event"] = round(raw["frames_lost_per_error_event"], 3)
        entry["raw_frames"] = raw["frames"]
        entry["raw_lost"] = raw["lost"]
        entry["raw_error_events"] = raw["error_events"]
        entry["raw_accepted_corrupt"] = raw["accepted_corrupt"]
        entry["resync_bytes_max"] = raw["resync_bytes_max"]
        entry["resync_bytes_mean"] = raw["resync_bytes_mean"]
        entry["goodput_bytes_per_s"] = {}
        for baud in BAUDS:
            g = goodput_run(ppm, seed, baud, seconds)
            entry["goodput_bytes_per_s"][str(baud)] = g["goodput_bytes_per_s"]
            entry["accepted_corrupt"] += g["accepted_corrupt"]
        entry["goodput_bytes_per_s_go_back_n"] = {
            str(b): goodput_run(ppm, seed, b, seconds, sack=False)["goodput_bytes_per_s"] for b in BAUDS}
        if pty_seconds > 0:
            entry["pty"] = {}
            for baud in BAUDS:
                r = pty_run(ppm, seed, baud, pty_seconds)
                entry["pty"][str(baud)] = r
                entry["accepted_corrupt"] += r["accepted_corrupt"]
            entry["goodput_bytes_per_s_pty"] = {b: r["goodput_bytes_per_s"] for b, r in entry["pty"].items()}
        out[name] = entry
    out["goodput_bytes_per_s_clean"] = {str(b): goodput_run(0, seed, b, seconds)["goodput_bytes_per_s"] for b in BAUDS}
    out.update(resync_run(seed))
    out.update(reboot_run(seed))
    for name, _ in RATES:  # the link figures asked per rate: the reboot detection does not depend on it
        out[name]["reboot_detect_ms"] = out["reboot_detect_ms"]
    out["draft_token_bytes_top4"] = frame.draft_token_bytes(4)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench link", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="simulation seed (default 1)")
    ap.add_argument("--msgs", type=int, default=1500, help="messages each way per error rate (default 1500)")
    ap.add_argument("--seconds", type=int, default=5, help="simulated seconds per goodput run (default 5)")
    ap.add_argument("--pty-seconds", type=float, default=2.0,
                    help="wall seconds per real-pty goodput run (0: skip them; default 2)")
    ap.add_argument("--json", action="store_true", help="print JSON (the only output format; accepted for clarity)")
    args = ap.parse_args(argv)
    if args.msgs < 1 or args.seconds < 1 or args.pty_seconds < 0:
        ap.error("--msgs and --seconds must be at least 1, --pty-seconds at least 0")
    print(json.dumps(run(args.seed, args.msgs, args.seconds, args.pty_seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
