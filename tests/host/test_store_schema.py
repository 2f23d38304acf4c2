"""The store's one schema version (host/store.py, schema 5) and the way there from every shape a store has had:
the fixtures of tests/host/fixtures/stores/ (made by tools/formats/store_fixtures.py from the DDL each release
wrote) upgrade in one transaction keeping every row, read and write afterwards; a reader reads them as they
are; a newer store is refused in one line. Also the per-node state of a signed link (link_auth)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from host.store import PEER_COUNTER_BYTES, SCHEMA_VERSION, LogStore, StoreError
from tools.formats import store_fixtures

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stores"
SHAPES = list(store_fixtures.SHAPES)
EP = store_fixtures.EPOCH.to_bytes(4, "little")
DAY = store_fixtures.DAY
T0 = store_fixtures.T0
# what every shape's upgrade must add, beside the columns
TABLES = {"meta", "nodes", "logs", "logs_fts", "annotations", "plants", "commands", "outbox_marks", "outbox_acked",
          "link_auth", "logs_pruned"}
NEW_COLUMNS = {("logs", "boot"): None, ("logs", "lseq"): None, ("logs", "flags"): 0, ("nodes", "uid"): "",
               ("annotations", "spans"): None, ("nodes", "plant"): None, ("logs", "plant"): None}


def _copy(shape: str, tmp: Path) -> Path:
    path = tmp / (shape + ".db")
    shutil.copyfile(FIXTURES / (shape + ".sqlite"), path)
    return path


def _raw(path: Path) -> dict:
    """Every row of every ordinary table (FTS5's own tables left out), by table: column -> value dicts."""
    db = sqlite3.connect(str(path))
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE "
                                           "'logs_fts%' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        out = {}
        for t in tables:
            n = len(db.execute("PRAGMA table_info(%s)" % t).fetchall())
            cur = db.execute("SELECT * FROM %s ORDER BY %s" % (t, ", ".join(str(i + 1) for i in range(n))))
            keys = [d[0] for d in cur.description]
            out[t] = [dict(zip(keys, r)) for r in cur.fetchall()]
        return out
    finally:
        db.close()


def _schema(path: Path) -> list:
    db = sqlite3.connect(str(path))
    try:
        return db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    finally:
        db.close()


def _meta(path: Path, key: str) -> str | None:
    db = sqlite3.connect(str(path))
    try:
        row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]
    finally:
        db.close()


@pytest.mark.parametrize("shape", SHAPES)
def test_every_past_shape_upgrades_keeping_every_row_then_reads_and_writes(shape: str, tmp_path: Path) -> None:
    path = _copy(shape, tmp_path)
    before = _raw(path)
    assert len(before["logs"]) == len(store_fixtures.LINES) and _meta(path, "version") == shape[1]
    st = LogStore(path)  # a gateway opens it: upgraded
    st.close()
    after = _raw(path)
    assert _meta(path, "version") == str(SCHEMA_VERSION) == "5"
    assert TABLES <= {n for t, n, _ in _schema(path) if t == "table"}
    indexes = {n for t, n, _ in _schema(path) if t == "index"}
    assert {"logs_lseq", "commands_pending"} <= indexes and not {"commands_unsent", "logs_line"} & indexes
    for table, rows in before.items():
        assert len(after[table]) == len(rows), table
        for old, new in zip(rows, after[table]):
            if table == "meta" and old["key"] == "version":
                continue
            assert {k: new[k] for k in old} == old, table  # every value it had
            assert all(new[k] == NEW_COLUMNS[(table, k)] for k in set(new) - set(old)), (table, new)
    db = sqlite3.connect(str(path))
    db.execute("INSERT INTO logs_fts(logs_fts) VALUES ('integrity-check')")  # the index matches the lines
    db.close()

    st = LogStore(path)
    assert [w.node for w in st.windows("bearing_temp RAISED")] == ["pump-hall"]
    assert st.add_log("pump-hall", EP, 100, 1, T0 + 31 * DAY, 2, "2026-12-31T06:00:00Z ALARM HI P-101 seal_leak "
                      "RAISED", boot=8, lseq=1, flags=1)
    assert not st.add_log("pump-hall", EP, 100, 1, T0 + 31 * DAY, 2, "again")  # still unique by (node, epoch, seq)
    # and by (node, boot, lseq) whatever the flags: a written-ahead line sent again after a power cut
    assert not st.add_log("pump-hall", EP, 101, 1, T0 + 31 * DAY, 2, "once more", boot=8, lseq=1, flags=0)
    st.add_annotation("pump-hall", T0 + 31 * DAY, T0 + 31 * DAY + 10, "P-101 seal leaking.", True, 4,
                      spans=[("draft", "P-101 seal"), ("fix", " leaking.")])
    assert st.reserve_tx_counter("pump-hall", 64) == 1 and st.peer_counter("hall-3") is None
    assert [w.node for w in st.windows("seal_leak")] == ["pump-hall"]
    assert st.annotations("pump-hall")[-1]["spans"] == [["draft", "P-101 seal"], ["fix", " leaking."]]
    assert st.count_logs() == len(store_fixtures.LINES) + 1
    st.close()


def test_a_failed_upgrade_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """The upgrade is one transaction: when its last step (the version) fails, none of the columns and
    tables added before it stays."""
    path = _copy("v2-spans-outbox", tmp_path)
    db = sqlite3.connect(str(path))
    db.execute("CREATE TRIGGER frozen BEFORE UPDATE ON meta BEGIN SELECT RAISE(ABORT, 'meta is frozen'); END")
    db.commit()
    db.close()
    schema, rows = _schema(path), _raw(path)
    with pytest.raises(StoreError, match="meta is frozen"):
        LogStore(path)
    assert _schema(path) == schema and _raw(path) == rows and _meta(path, "version") == "2"


def test_a_newer_store_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    LogStore(path).close()
    db = sqlite3.connect(str(path))
    db.execute("UPDATE meta SET value='%d' WHERE key='version'" % (SCHEMA_VERSION + 1))
    db.commit()
    db.close()
    for readonly in (False, True):
        with pytest.raises(StoreError) as e:
            LogStore(path, readonly=readonly)
        msg = str(e.value)
        assert "\n" not in msg and "version %d" % (SCHEMA_VERSION + 1) in msg and "newer edgetwin" in msg, msg
    assert _meta(path, "version") == str(SCHEMA_VERSION + 1)  # left as it was


@pytest.mark.parametrize("shape", ["v1", "v2-nouid", "v2-spans-outbox", "v3-unsent"])
def test_a_reader_reads_an_old_store_as_it_is(shape: str, tmp_path: Path) -> None:
    path = _copy(shape, tmp_path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    ro = LogStore(path, readonly=True)
    try:
        assert [r["text"] for r in ro.logs()] == [t for *_, t in store_fixtures.LINES]
        assert [(n["name"], n["logs"], n["annotations"]) for n in ro.nodes()] == [("pump-hall", 6, 1),
                                                                                  ("hall-3", 3, 1)]
        assert ro.nodes()[0]["uid"] == ("" if shape in ("v1", "v2-nouid") else "e66138935f4a2b21")
        spans = ro.annotations("pump-hall")[0]["spans"]
        assert spans == (None if shape in ("v1", "v2-nouid") else [["draft", "P-101 bearing temperature rose"],
                                                                  ["fix", " past its HI limit."]])
        assert [w.node for w in ro.windows("vibration")] == ["pump-hall"]
        assert ro.count_logs() == len(store_fixtures.LINES) and ro.peer_counter("pump-hall") is None
        assert ro.rx_state("pump-hall") == (EP, 42)
        assert ro.line_gaps("pump-hall") == (0 if shape == "v1" else 2)  # lseq 3, 6 are hall-3's: two gaps
        with pytest.raises(StoreError, match="read-only"):
            ro.set_peer_counter("pump-hall", bytes(PEER_COUNTER_BYTES))
    finally:
        ro.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no -wal, no -shm left


def test_the_fixtures_are_what_the_script_makes(tmp_path: Path) -> None:
    for shape in SHAPES:
        fresh = tmp_path / (shape + ".sqlite")
        store_fixtures.make(fresh, shape)
        kept = FIXTURES / (shape + ".sqlite")
        assert _schema(fresh) == _schema(kept) and _raw(fresh) == _raw(kept), shape
        assert kept.stat().st_size <= 32768


# ---- a signed link's state (link_auth) ----

def test_peer_counters_and_tx_counter_ranges_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "auth.db"
    st = LogStore(path)
    assert st.peer_counter("a") is None
    assert st.reserve_tx_counter("a", 100) == 1
    assert st.reserve_tx_counter("a", 100) == 101
    assert st.reserve_tx_counter("b", 5) == 1  # per node
    st.set_peer_counter("a", b"\x07\x00\x00\x00\x00\x00")
    st.set_peer_counter("b", b"\x01\x02\x03\x04\x05\x06", commit=False)  # with the lines it covers...
    st.rollback()  # ...or not at all
    assert st.peer_counter("b") is None
    st.set_peer_counter("b", bytearray(b"\x01\x02\x03\x04\x05\x06"))
    st.set_peer_counter("c", b"\x09" * 6 + b"key-id-8")  # the counter, then the key's 8-byte fingerprint
    for bad in (b"\x01" * 5, b"\x01" * 7, b"\x01" * 15, "abcdef", 7):
        with pytest.raises(StoreError, match="6 bytes"):
            st.set_peer_counter("a", bad)  # type: ignore[arg-type]
    assert st.reserve_tx_counter("c", 10, floor=5000) == 5000 and st.reserve_tx_counter("c", 10, floor=7) == 5010
    for bad in (0, -1, True, 1 << 33):
        with pytest.raises(StoreError, match="block"):
            st.reserve_tx_counter("a", bad)
    st.close()
    st = LogStore(path)  # a restarted gateway: never a value it may have used
    assert st.peer_counter("a") == b"\x07\x00\x00\x00\x00\x00"
    assert st.peer_counter("b") == b"\x01\x02\x03\x04\x05\x06"
    assert st.reserve_tx_counter("a", 10) == 201 and st.reserve_tx_counter("b", 1) == 6
    assert st.peer_counter("c") == b"\x09" * 6 + b"key-id-8" and st.reserve_tx_counter("c", 1) == 5020
    st._db.execute("UPDATE link_auth SET tx_next=? WHERE node=1", ((1 << 48) - 5,))  # noqa: SLF001
    with pytest.raises(StoreError, match="counter is spent"):
        st.reserve_tx_counter("a", 10)
    assert st.reserve_tx_counter("a", 5) == (1 << 48) - 5  # the last values are still there
    st.close()
    ro = LogStore(path, readonly=True)
    assert ro.peer_counter("a") == b"\x07\x00\x00\x00\x00\x00" and ro.peer_counter("nobody") is None
    with pytest.raises(StoreError, match="read-only"):
        ro.reserve_tx_counter("a", 1)
    ro.close()
