"""host/store.py's line seq columns (protocol 1.1): gaps per boot, duplicates of re-sent spilled lines,
the node's reported drops, and the in-place upgrade of a version-1 store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from host.store import SCHEMA_VERSION, LogStore

EP1 = b"\x01\x00\x00\x00"
EP2 = b"\x02\x00\x00\x00"


def _add(st: LogStore, ep: bytes, seq: int, lseq: int, boot: int = 7, flags: int = 0, text: str = "") -> bool:
    return st.add_log("n", ep, seq, 0, 1000 + seq, 1, text or "line %d" % lseq, boot=boot, lseq=lseq, flags=flags)


def test_gaps_are_counted_per_boot_and_listed_oldest_first(tmp_path: Path) -> None:
    st = LogStore(tmp_path / "s.db")
    for i, ls in enumerate([1, 2, 3, 6, 7, 9]):
        assert _add(st, EP1, i, ls)
    # the next boot: its seqs start at 1 again; 1 is missing; lines of boot 7 still arriving under the
    # new link epoch (spilled before the reboot) fill the 4..5 gap of boot 7
    assert _add(st, EP2, 0, 2, boot=8)
    assert _add(st, EP2, 1, 4, flags=1)
    assert _add(st, EP2, 2, 5, flags=1)
    assert st.line_gaps("n") == 1 + 1  # boot 7: 8; boot 8: 1
    assert st.missing_lines("n") == [(7, 8), (8, 1)]
    # a spilled line sent again after another reboot (new epoch, new link seq) is stored once
    assert not _add(st, b"\x03\x00\x00\x00", 0, 5, flags=1)
    # boot 8 goes on under a later link epoch: its lines count in the same run
    assert _add(st, b"\x03\x00\x00\x00", 1, 3, boot=8)
    loss = st.line_loss("n")
    assert loss == {"stored": 10, "missing": 2, "reported": 0, "spilled": 2}, loss
    st.close()


def test_nodes_without_a_ring_count_per_link_epoch(tmp_path: Path) -> None:
    st = LogStore(tmp_path / "s.db")
    for i, ls in enumerate([1, 2, 4]):
        _add(st, EP1, i, ls, boot=0)
    for i, ls in enumerate([1, 2, 3]):  # rebooted (boot 0 again): its seqs restart, nothing collides
        assert _add(st, EP2, i, ls, boot=0)
    assert st.line_gaps("n") == 1 and st.missing_lines("n") == [(0, 3)]
    st.close()


def test_reported_drops_take_the_last_report_of_each_boot(tmp_path: Path) -> None:
    st = LogStore(tmp_path / "s.db")
    rep = "NODE heap=1 loops=2 lines=%d dropped=%d logs_sent=0 logs_acked=0 boot=%d spilled=0 backlog=0"
    for i, (boot, dropped) in enumerate([(7, 0), (7, 12), (7, 40), (8, 3), (8, 5)]):
        st.add_log("n", EP1 if boot == 7 else EP2, 100 + i, 0, 5000 + i, 0, rep % (i, dropped, boot), boot=boot)
    st.add_log("n", EP2, 200, 0, 6000, 1, "2026-11-30 dropped=999 is plant text, not a report", boot=8, lseq=1)
    assert st.reported_dropped("n") == 40 + 5
    st.close()


def test_a_version_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    st = LogStore(path)
    st.add_log("n", EP1, 1, 0, 1000, 1, "an old line")
    st.close()
    db = sqlite3.connect(str(path))  # make it what a version-1 gateway wrote
    db.executescript("DROP INDEX logs_lseq; ALTER TABLE nodes DROP COLUMN uid; ALTER TABLE logs DROP COLUMN boot; ALTER TABLE logs DROP COLUMN lseq; "
                     "ALTER TABLE logs DROP COLUMN flags; ALTER TABLE logs DROP COLUMN plant; "
                     "ALTER TABLE nodes DROP COLUMN plant; DROP TABLE plants; DROP TABLE commands; "
                     "UPDATE meta SET value='1' WHERE key='version';")
    db.close()
    ro = LogStore(path, readonly=True)  # a reader reads it as it is
    assert [r["text"] for r in ro.logs()] == ["an old line"] and ro.logs()[0]["lseq"] is None
    assert ro.line_gaps("n") == 0
    ro.close()
    st = LogStore(path)  # the gateway upgrades it
    assert _add(st, EP1, 2, 1)
    assert [(r["text"], r["lseq"]) for r in st.logs()] == [("an old line", None), ("line 1", 1)]
    st.close()
    db = sqlite3.connect(str(path))
    assert db.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0] == str(SCHEMA_VERSION)  # through 2, to this one
    db.close()
