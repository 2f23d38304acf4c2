"""A full disk (host/store.py StoreFull, host/session.py, host/gateway.py): the store's writes fail for lack of space
(simulated with SQLite's max_page_count through LogStore.limit_pages, the store's test hook), the gateway stops
acknowledging lines instead of losing them, says so once, and takes them all when space returns; the node keeps
them meanwhile (its link window, then its flash spill ring: firmware/spill.py)."""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import time
from pathlib import Path

import pytest

import gwkit
from firmware import node, uart
from host.gateway import Gateway
from host.store import LogStore, StoreFull
from tools.board.vboard import set_raw

EP = b"\x01\x02\x03\x04"
SPILL_BYTES = 65536  # the node's flash ring: 16 blocks, about 700 lines
PROF = json.loads((gwkit.ROOT / "boards" / "rp2040_pico.json").read_text())


def _fill_to_the_limit(st: LogStore) -> int:
    """Cap the store at its current size, then add lines until one does not fit; how many did."""
    st.limit_pages(int(st._db.execute("PRAGMA page_count").fetchone()[0]))  # noqa: SLF001
    n = 0
    with pytest.raises(StoreFull):
        while n < 100000:
            st.add_log("n", EP, 1000 + n, 0, 1000 + n, 1, "line %06d %s" % (n, "x" * 200))
            n += 1
    return n


def test_a_full_store_rolls_back_what_is_pending_and_says_why(tmp_path: Path) -> None:
    st = LogStore(tmp_path / "s.db")
    for i in range(1, 11):
        st.add_log("n", EP, i, 0, i, 1, "before %d" % i, commit=False)
    st.commit()
    fitted = _fill_to_the_limit(st)
    assert st.full and "full" in st.full and st.full_errors == 1 and not st.pending
    assert st.count_logs() == 10 + fitted
    # a batch that does not fit goes whole: nothing of it stays, not even what fitted before the failure
    with pytest.raises(StoreFull, match="nothing since the last commit is kept"):
        for i in range(500):
            st.add_log("n", EP, 10 ** 6 + i, 0, 1, 1, "batch %d %s" % (i, "y" * 200), commit=False)
    assert not st.pending and st.count_logs() == 10 + fitted and st.full_errors == 2
    assert not any(r["text"].startswith("batch") for r in st.logs())
    assert st.limit_pages(None) > 10 ** 6  # space returns
    assert st.full  # said until a write goes in
    assert st.add_log("n", EP, 10 ** 7, 0, 1, 1, "after")
    assert st.full == "" and st.count_logs() == 11 + fitted
    st.limit_pages(int(st._db.execute("PRAGMA page_count").fetchone()[0]))  # noqa: SLF001
    for i in range(200):  # left pending when the store closes: rolled back, no error
        try:
            st.add_log("n", EP, 2 * 10 ** 7 + i, 0, 1, 1, "z" * 300, commit=False)
        except StoreFull:
            break
    st.close()
    ro = LogStore(tmp_path / "s.db", readonly=True)
    assert ro.count_logs() == 11 + fitted == len(ro.logs())
    ro.close()


class _FileSizeLimit:
    """The disk fills for real writes: RLIMIT_FSIZE caps how far this process may write into any file (the
    store's WAL, so a COMMIT fails: SQLite's disk I/O error), SIGXFSZ ignored; lift() puts both back."""

    def __init__(self, limit: int) -> None:
        self.sig = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        self.old = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, self.old[1]))

    def lift(self) -> None:
        if self.sig is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, self.old)
            signal.signal(signal.SIGXFSZ, self.sig)
            self.sig = None


@pytest.mark.parametrize("how", ["pages", "file_size"])
def test_a_node_logging_through_a_full_store_loses_nothing_and_nothing_twice(tmp_path: Path, how: str) -> None:
    """A node (firmware/node.py under CPython, with its spill ring) logs through a real gateway (its pty via an
    interposer that loses some frames) whose store fills: the gateway says so in one line, acknowledges nothing it
    cannot keep, the node's lines wait in its window and spill ring; space returns: every line the node logged is
    stored once. The store fills by its page limit (an insert fails) or by the file size this process may write
    (a commit fails). `pytest -s` prints the figures (STORE-FULL ...)."""
    out = io.StringIO()
    m, s = os.openpty()
    set_raw(m)
    set_raw(s)
    # 3 % of the frames to the gateway lost on the way: frames it holds after a gap (SACKed to the node) are
    # among those the store cannot keep, so the link must resend what its peer said it held (shared/link.py)
    ip = gwkit.Interposer(m, tmp_path / "gw-port", to_gw=gwkit.Faults(drop_frames=0.03, seed=5))
    gw = Gateway([str(tmp_path / "gw-port")], tmp_path / "g.db", out=out, tick_s=0.0, status_every=3600,
                 peer_timeout_s=30)
    sess = gw.sessions[0]
    sess.full_retry_s = 0.2
    nd = node.Node(uart.PtyUART(os.ttyname(s)), PROF,
                   {"tick_ms": 40, "sample_every": 1, "report_ms": 300, "spill_path": str(tmp_path / "spill.bin"),
                    "spill_bytes": SPILL_BYTES, "uid_path": str(tmp_path / "node.uid")}, now=node.ticks_ms())
    limit = None

    def run(seconds: float, until=lambda: False) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            nd.step(node.ticks_ms())
            gw.round()
            if until():
                return True
        return False

    try:
        gw.open()
        assert run(10, lambda: gw.store.count_logs() >= 100), "the node never got going"
        # the disk fills: the store keeps no more pages than it has, or no file grows past where the WAL is
        if how == "pages":
            gw.store.limit_pages(int(gw.store._db.execute("PRAGMA page_count").fetchone()[0]))  # noqa: SLF001
        else:
            wal = Path(str(tmp_path / "g.db") + "-wal").stat().st_size
            limit = _FileSizeLimit(max(wal, SPILL_BYTES) + 8192)
        assert run(10, lambda: nd.spill.count > 100 and gw.store.full != ""), "no spill while full"
        stored_full = gw.store.count_logs()
        run(0.5)
        assert gw.store.count_logs() == stored_full  # nothing more fits, nothing is taken
        assert sess.counts["held"] > 0 and nd.lk.queued() > 0
        said = out.getvalue()
        assert said.count("not acknowledged") == 1 and said.count("\n") == 1, said  # one line, not one per frame
        assert gw.status()["store_full"] and gw.status()["store_full_errors"] >= 1
        # space returns
        gw.store.limit_pages(None)
        if limit is not None:
            limit.lift()
        last = nd.q.queued  # every line logged up to here must come in

        def all_in() -> bool:
            return gw.store.line_loss(sess.name)["stored"] >= last and not gw.store.line_gaps(sess.name)

        t_back = time.monotonic()
        assert run(30, all_in), (gw.store.line_loss(sess.name), last, sess.counts)
        back_s = time.monotonic() - t_back
        print("STORE-FULL %s: %r; lines %d ring records %d held %d refused writes %d node timeouts %d, all in %.1f s "
              "after space returned" % (how, said.split(" is full (")[1].split("):")[0], last, nd.spill.written,
                                        sess.counts["held"], gw.store.full_errors, nd.lk.timeouts, back_s))
        assert out.getvalue().count("has room again") == 1 and out.getvalue().count("not acknowledged") == 1
    finally:
        if limit is not None:
            limit.lift()
        gw.close()
        ip.close()
    st = LogStore(tmp_path / "g.db", readonly=True)
    try:
        rows = [r for r in st.logs(sess.name) if r["lseq"]]
        lseqs = [r["lseq"] for r in rows if r["boot"] == nd.boot]
        assert len(lseqs) == len(set(lseqs)) and set(range(1, last + 1)) <= set(lseqs)  # once each, none missing
        assert any(r["flags"] & 1 for r in rows)  # some came through the flash spill ring
        assert st.line_loss(sess.name)["missing"] == 0 and nd.q.dropped == 0 and nd.spill.lost == 0
        assert sess.counts["logs"] == len(st.logs(sess.name))  # lines sent back are not counted twice
    finally:
        st.close()
