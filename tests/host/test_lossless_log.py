"""Lossless logging end to end (issue 13, point 2): the real firmware Node (firmware/node.py, its line
queue and flash spill ring) and the real gateway Session (host/session.py, host/store.py), wired by a
simulated UART at 115200 baud (10 bits per byte, a 256-byte TX FIFO per side) on a virtual clock, so one
hour of plant time (tick_ms 12: 3600 plant seconds in 43 s of link time) runs in seconds of CPU.

Loss is measured by the line seqs in the store (LogStore.line_gaps / missing_lines), not by the node.

- a busy gateway: it stops reading for 2 s of every 10 (a slow verify, a question being answered),
  while the plant logs at more than half of the link's capacity: 0 lines lost, every line stored once,
  in order, some of them through the spill ring;
- the link cut for longer than a tiny spill budget holds: the lines missing in the store are exactly as
  many as the node reported (dropped= in its NODE report, LogStore.reported_dropped), and they are the
  oldest of those waiting each time the full ring gave up a block;
- a 1.0 peer on either end keeps working: LOG bodies in the 1.0 layout, lines stored without seqs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firmware import node
from host.session import Session
from shared import cobs, crc32, frame
from host.store import LogStore

PROF = json.loads((Path(__file__).resolve().parents[2] / "boards" / "rp2040_pico.json").read_text())
BYTES_PER_MS = 115200 / 10 / 1000  # 11.52: the link's capacity
PLANT_S = 3600


class Line:
    """One direction of the UART: a TX FIFO drained at the baud rate into the receiver's buffer."""

    def __init__(self, fifo: int = 256) -> None:
        self.fifo = fifo
        self.tx = bytearray()
        self.rx = bytearray()
        self.credit = 0.0
        self.carried = 0
        self.cut = False

    def write(self, buf, n=None) -> int:
        n = len(buf) if n is None else n
        k = min(n, self.fifo - len(self.tx))
        self.tx += bytes(buf[:k])
        return k

    def tick(self, ms: int) -> None:
        self.credit = min(self.credit + BYTES_PER_MS * ms, float(self.fifo))
        k = min(int(self.credit), len(self.tx))
        if k:
            if not self.cut:  # a cut cable: the bytes leave the FIFO and go nowhere
                self.rx += self.tx[:k]
                self.carried += k
            del self.tx[:k]
            self.credit -= k

    def readinto(self, buf) -> int:
        k = min(len(buf), len(self.rx))
        buf[:k] = self.rx[:k]
        del self.rx[:k]
        return k


class End:
    """A transport for one side: writes go into `out`, reads come from `inp`."""

    def __init__(self, out: Line, inp: Line) -> None:
        self.out = out
        self.inp = inp

    def write(self, buf, n=None) -> int:
        return self.out.write(buf, n)

    def readinto(self, buf) -> int:
        return self.inp.readinto(buf)

    def fileno(self):
        return None


class Rig:
    def __init__(self, tmp: Path, cfg: dict) -> None:
        self.now = 0
        self.up = Line()  # node -> gateway
        self.down = Line()  # gateway -> node
        self.store = LogStore(tmp / "g.db")
        self.sess = Session("/dev/null", self.store, name="n", clock=lambda: self.now,
                            wall=lambda: 1_790_000_000_000 + self.now)
        self.sess.transport = End(self.down, self.up)  # type: ignore[assignment]
        base = {"tick_ms": 12, "sample_every": 5, "machines": 4, "report_ms": 1000,
                "spill_path": str(tmp / "spill.bin")}
        base.update(cfg)
        self.cfg = base
        self.tick0 = 0  # the virtual time the node booted at: its ticks start there
        self.node = node.Node(End(self.up, self.down), PROF, base, now=0)
        self.max_backlog = 0

    def reboot(self) -> None:
        """A power cycle: a new Node (RAM gone) on the same filesystem; its ticks start at 0 again."""
        self.node.spill.close()
        self.up.tx.clear()
        self.down.rx.clear()
        self.tick0 = self.now
        self.node = node.Node(End(self.up, self.down), PROF, self.cfg, now=0)

    def run(self, ms: int, gateway=lambda t: True, cut=lambda t: False, until=None) -> None:
        end = self.now + ms
        while self.now < end:
            c = cut(self.now)
            self.up.cut = self.down.cut = c
            self.up.tick(1)
            self.down.tick(1)
            self.node.step((self.now - self.tick0) & 0x3FFFFFFF)
            if gateway(self.now):
                self.sess.poll()
            self.max_backlog = max(self.max_backlog, self.node.backlog())
            self.now += 1
            if until is not None and until():
                return

    def plant_hour(self, **kw) -> None:
        self.run(PLANT_S * 12 + 50, until=lambda: self.node.sampler.ticks >= PLANT_S, **kw)
        self.node.sampler.poll = lambda now: 0  # the hour is over: no more lines, let the rest drain

    def drain(self, ms: int = 20000) -> None:
        nd = self.node
        self.run(ms, until=lambda: nd.backlog() == 0 and nd.logs_acked == nd.logs_sent and not self.store.pending)
        self.run(2500)  # one more NODE report after the drain

    def lseqs(self) -> list[int]:
        return [r["lseq"] for r in self.store.logs("n") if r["lseq"] is not None]


@pytest.mark.slow
def test_an_hour_with_a_busy_gateway_loses_no_line(tmp_path: Path) -> None:
    rig = Rig(tmp_path, {})  # the profile's spill budget (640 KB)
    busy = lambda t: t % 10000 < 8000  # noqa: E731  (the gateway reads nothing 2 s in every 10)
    rig.plant_hour(gateway=busy)
    link_ms = rig.now
    rig.drain()
    nd, st = rig.node, rig.store
    logged = nd.q.queued
    load = rig.up.carried / (link_ms * BYTES_PER_MS)
    loss = st.line_loss("n")
    print("lines logged %d, stored %d, missing %d, spilled %d (max backlog %d), link load %.2f over %d ms"
          % (logged, loss["stored"], loss["missing"], nd.spill.spilled, rig.max_backlog, load, link_ms))
    assert nd.sampler.ticks == PLANT_S and logged > 2500
    assert load >= 0.5, load  # the plant's lines took more than half of what the link carries
    assert nd.spill.spilled > 100 and loss["spilled"] == nd.spill.spilled  # the stalls did fill the queue
    assert st.line_gaps("n") == 0 and loss["missing"] == 0 and loss["reported"] == 0
    got = rig.lseqs()
    assert sorted(got) == list(range(1, logged + 1))  # every line once
    assert got == sorted(got)  # and in the order they were logged
    texts = [r["text"] for r in st.logs("n") if r["lseq"] is not None]
    assert texts == sorted(texts, key=lambda t: t[:20])  # the plant's own clock agrees
    assert nd.spill.lost == 0 and nd.q.dropped == 0
    rig.store.close()


@pytest.mark.slow
def test_a_cut_longer_than_the_spill_budget_loses_the_oldest_lines_counted(tmp_path: Path) -> None:
    rig = Rig(tmp_path, {"spill_bytes": 4 * 4096})  # a tiny ring: 4 blocks, about 150 lines
    sp = rig.node.spill
    drops: list[tuple[int, int, int]] = []  # (oldest line waiting before, after, lines given up)
    drop = sp._drop_block

    def watched() -> None:  # each time the full ring gives up a block: which lines were waiting?
        before = sp.lseq if sp.peek() else -1
        lost = sp.lost
        drop()
        drops.append((before, sp.lseq if sp.peek() else -1, sp.lost - lost))
        sp.ready = False

    sp._drop_block = watched  # type: ignore[method-assign]
    cut = lambda t: 5000 <= t < 17000  # noqa: E731  (12 s: about 800 lines)
    rig.run(25000, cut=cut)
    rig.node.sampler.poll = lambda now: 0  # no more lines: what was logged can all be accounted for
    rig.drain()
    nd, st = rig.node, rig.store
    logged = nd.q.queued
    missing = [s for _b, s in st.missing_lines("n")]
    loss = st.line_loss("n")
    print("lines logged %d, stored %d, missing %d (node: lost %d, reported %d), spilled %d, %d blocks given up"
          % (logged, loss["stored"], len(missing), sp.lost, loss["reported"], sp.spilled, len(drops)))
    assert sp.lost > 300  # the cut outlasted the budget by far
    assert len(missing) == st.line_gaps("n") == sp.lost == loss["reported"]  # counted and reported
    assert loss["stored"] + len(missing) == logged
    # only the oldest lines went: each time, the lines given up ran from the oldest one waiting up to the
    # one that was then the oldest left, and those are exactly the lines missing in the store
    gone = []
    for before, after, n in drops:
        assert before > 0 and after == before + n, (before, after, n)
        gone += range(before, after)
    assert gone == missing
    assert missing[0] > 5000 // 12 * 4 // 5 - 40  # none of them was logged before the cut began
    rig.store.close()


class Downgrade(End):
    """Reads frames as a 1.0 peer would have sent them: the version byte 0x11 -> 0x10, CRC redone."""

    def __init__(self, out: Line, inp: Line) -> None:
        super().__init__(out, inp)
        self.pend = bytearray()
        self.ready = bytearray()

    def readinto(self, buf) -> int:
        self.pend += self.inp.rx
        self.inp.rx.clear()
        cut = self.pend.rfind(0)
        if cut > 0:
            for chunk in bytes(self.pend[:cut]).split(b"\x00"):
                if chunk:
                    try:
                        raw = bytearray(cobs.decode(chunk))
                    except cobs.CobsError:
                        raw = None
                    if raw is not None and len(raw) > 8 and raw[0] == frame.VERSION:
                        raw[0] = 0x10
                        raw[-4:] = crc32.crc32(bytes(raw[:-4])).to_bytes(4, "little")
                        chunk = cobs.encode(bytes(raw))
                self.ready += b"\x00" + chunk
            del self.pend[:cut]
        k = min(len(buf), len(self.ready))
        buf[:k] = self.ready[:k]
        del self.ready[:k]
        return k


def test_a_1_0_peer_keeps_working_without_line_seqs(tmp_path: Path) -> None:
    # Both ends see the other as 1.0: the 1.1 node sends 1.0 LOG bodies (no flags, boot, lseq) and the
    # 1.1 gateway reads them as 1.0: the lines arrive whole, stored without line seqs.
    rig = Rig(tmp_path, {"spill_bytes": 0, "tick_ms": 50})
    rig.sess.transport = Downgrade(rig.down, rig.up)  # type: ignore[assignment]
    rig.node.lk.t = Downgrade(rig.up, rig.down)
    rig.run(6000)
    assert rig.node.lk.peer_minor == 0 and rig.sess.link.peer_minor == 0
    rows = rig.store.logs("n")
    plant = [r for r in rows if r["level"] > 0]
    assert len(plant) > 50 and all(r["lseq"] is None and r["boot"] is None for r in rows)
    assert all(r["text"].startswith("2026-") for r in plant)  # no seq bytes read as text
    assert any(r["text"].startswith("NODE heap=") for r in rows)
    assert rig.store.line_gaps("n") == 0
    rig.store.close()


class Drafts:
    """Stands in for the annotator: sends a 200-byte DRAFT-sized frame whenever it gets a turn."""

    gen = 0
    offline_tokens = 0
    episodes = 0  # the NODE report's fields an annotator carries

    def __init__(self, nd) -> None:
        self.nd = nd
        self.turns = 0
        self.turns_with_backlog = 0
        self.sent = 0
        self.body = bytearray(200)

    def step(self, now, eq) -> int:
        self.turns += 1
        if self.nd.lk.established and self.nd.backlog():
            self.turns_with_backlog += 1
        if self.nd.lk.established and self.nd.lk.free_slots() >= 2 and self.nd.send(0x33, self.body, 200):
            self.sent += 1
        return 1

    def live_crc(self, out, j):
        return j


@pytest.mark.slow
def test_drafting_yields_the_link_to_waiting_lines(tmp_path: Path) -> None:
    # drafts would take most of the link; lines still all arrive, and drafts get turns only when no line waits
    rig = Rig(tmp_path, {})
    ann = rig.node.ann = Drafts(rig.node)  # type: ignore[assignment]
    from firmware.episodes import EpisodeQueue

    rig.node.eq = EpisodeQueue()  # a drafting node has one (its NODE report reads ep_dropped)
    rig.run(20000, gateway=lambda t: t % 10000 < 8000)
    rig.node.sampler.poll = lambda now: 0
    rig.drain()
    logged = rig.node.q.queued
    assert ann.sent > 100 and ann.turns_with_backlog == 0  # drafted in the gaps, never ahead of a line
    assert rig.node.spill.spilled > 0  # the stalls made lines wait
    assert rig.store.line_gaps("n") == 0 and sorted(rig.lseqs()) == list(range(1, logged + 1))
    rig.store.close()


def test_reports_keep_coming_while_lines_wait(tmp_path: Path) -> None:
    # a plant faster than the link for good (about 2x its capacity) and a tiny ring: lines always wait,
    # the full ring gives up its oldest, and the NODE reports, which take the first free slot when due,
    # still reach the gateway every report_ms, so what the node gave up is reported while it goes on
    rig = Rig(tmp_path, {"spill_bytes": 4 * 4096, "tick_ms": 5})
    rig.run(15000)
    nd, st = rig.node, rig.store
    reports = [r for r in st.logs("n") if r["text"].startswith("NODE ")]
    assert nd.backlog() > 0 and nd.spill.lost > 0  # lines waited throughout, the ring gave some up
    assert len(reports) >= 12, len(reports)  # report_ms 1000: one a second (1 in 15 s when lines went first)
    assert 0 < st.reported_dropped("n") <= nd.spill.lost
    assert st.reported_dropped("n") <= st.line_gaps("n")  # what was reported as given up is missing
    rig.store.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_a_power_cut_with_lines_in_flight_loses_none_written_ahead(tmp_path: Path, ahead: bool) -> None:
    # the gateway's end goes quiet (a cable cut), the node keeps logging into frames that are never
    # acknowledged and into its RAM queue, then the power goes. Written ahead (the default), every line the
    # node had logged is on flash and comes again after the reboot, stored once; without it the lines in
    # flight and in RAM die with the power, and nobody can tell they were there.
    rig = Rig(tmp_path, {"write_ahead": ahead})
    rig.run(3000)
    rig.run(250, cut=lambda t: True)
    first = rig.node
    boot1, logged = first.boot, first.q.queued
    waiting = first.logs_sent - first.logs_acked + first.backlog()
    rig.reboot()
    rig.run(3000)
    rig.node.sampler.poll = lambda now: 0
    rig.drain()
    st = rig.store
    rows = [r for r in st.logs("n") if r["lseq"] is not None and r["boot"] == boot1]
    got = sorted(r["lseq"] for r in rows)
    print("write_ahead %s: boot %d logged %d lines (%d unacknowledged or queued at the cut), stored %d"
          % (ahead, boot1, logged, waiting, len(got)))
    assert waiting >= 8  # a window's worth of frames in flight at least
    assert len(got) == len(set(got))  # each line once, however often it was sent
    if ahead:
        assert got == list(range(1, logged + 1))
        assert any(r["flags"] & frame.LG_SPILLED for r in rows)  # those sent again say they waited
        assert st.line_gaps("n") == 0
    else:
        assert logged - len(got) >= 8 and got == list(range(1, len(got) + 1))  # the newest are gone, unseen
    st.close()
