"""`edgetwin store backup` and `edgetwin store prune` (host/cmd_store.py, host/store.py backup and LogStore.prune):
an online backup while a writer commits, every bad path one line and exit 2, and retention that never deletes a
line a destination has not acknowledged nor one an annotation is about."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from host import cli
from host.store import MS_PER_DAY, LogStore, StoreError, backup

EP = b"\x01\x02\x03\x04"
T0 = 1796018400000


def _lines(st: LogStore, node: str, n: int, start: int = 1, day_ms: int = MS_PER_DAY) -> None:
    for i in range(start, start + n):
        st.add_log(node, EP, i, i, T0 + i * day_ms // 24, 1, "2026-11-30T06:00:00Z P-%d RUNNING word%d" % (i % 5, i),
                   commit=False, boot=3, lseq=i)
    st.commit()


def _rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(str(path))
    try:
        return db.execute("SELECT id, node, epoch, seq, wall_ms, text FROM logs ORDER BY id").fetchall()
    finally:
        db.close()


# ---- backup ----

def test_a_backup_taken_while_a_writer_commits_holds_every_line_committed_before_it(tmp_path: Path) -> None:
    db, copy = tmp_path / "g.db", tmp_path / "backup.sqlite"
    st = LogStore(db)
    _lines(st, "n", 3000)  # a few hundred pages: the backup takes many steps
    st.close()
    stop = threading.Event()
    written = [0]

    def writer() -> None:  # the gateway: its own connection, a commit per line
        w = LogStore(db)
        i = 10 ** 6
        while not stop.is_set():
            w.add_log("n", EP, i, 0, T0, 1, "written during the backup %d" % i)
            written[0] += 1
            i += 1
        w.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        while written[0] < 5:
            time.sleep(0.01)
        before = _rows(db)  # every line committed before the backup begins
        steps = []

        def progress(done: int, total: int) -> None:
            if not steps:  # the writer commits between the first steps of the copy
                seen = written[0]
                deadline = time.monotonic() + 5
                while written[0] < seen + 10 and time.monotonic() < deadline:
                    time.sleep(0.005)
            steps.append((done, total))

        got = backup(db, copy, progress=progress, step=16)
    finally:
        stop.set()
        t.join(10)
    assert len(steps) > 5 and steps[-1][0] == steps[-1][1] and written[0] >= len(before) - 3000 + 10
    kept = _rows(copy)
    assert kept[:len(before)] == before  # every line committed before it began, as it was
    assert len(_rows(db)) > len(kept)  # the writer went on meanwhile (those lines are not in this copy)
    assert got["logs"] == len(kept) and got["pages"] > 100
    c = sqlite3.connect(str(copy))
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file, no -wal beside it
    c.close()
    assert oct(copy.stat().st_mode & 0o777) == "0o640"
    assert sorted(p.name for p in tmp_path.iterdir() if "backup" in p.name) == ["backup.sqlite"]
    ro = LogStore(copy, readonly=True)  # the backup is a store: ask / the gateway open it as it is
    assert ro.count_logs() == len(kept) and [w.node for w in ro.windows("word2999")] == ["n"]
    ro.close()


def test_backup_and_prune_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    db = tmp_path / "g.db"
    st = LogStore(db)
    _lines(st, "n", 10)
    st.close()
    old = tmp_path / "old.sqlite"
    old.write_bytes(b"an older backup")
    notstore = tmp_path / "notes.txt"
    notstore.write_text("not SQLite")
    (tmp_path / "adir").mkdir()
    cases = [
        (["backup", str(db), str(old)], "exists: give --force"),
        (["backup", str(tmp_path / "none.db"), str(tmp_path / "x.sqlite")], "does not exist"),
        (["backup", str(notstore), str(tmp_path / "x.sqlite")], "not a usable SQLite database"),
        (["backup", str(db), str(tmp_path / "no" / "x.sqlite")], "does not exist (create it first)"),
        (["backup", str(db), str(tmp_path / "adir")], "is a directory"),
        (["backup", str(db), str(db), "--force"], "is the store itself"),
        (["backup", str(tmp_path / "adir"), str(tmp_path / "x.sqlite")], "is a directory"),
        (["backup", str(db)], "required: FILE"),
        (["prune", str(db), "--keep-days", "-3"], "must be 0 or more"),
        (["prune", str(db), "--keep-days", "ten"], "invalid int value"),
        (["prune", str(db)], "required: --keep-days"),
        (["prune", str(tmp_path / "none.db"), "--keep-days", "3"], "does not exist"),
        (["prune", str(notstore), "--keep-days", "3"], "not a usable SQLite database"),
        (["vacuum", str(db)], "invalid choice"),
    ]
    for args, want in cases:
        assert cli.main(["store"] + args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and want in err and "Traceback" not in err, (args, err)
    assert old.read_bytes() == b"an older backup" and not (tmp_path / "none.db").exists()
    assert not list(tmp_path.glob(".*partial*")) and not (tmp_path / "x.sqlite").exists()
    assert cli.main(["store", "backup", str(db), str(old), "--force"]) == 0
    assert "backed up" in capsys.readouterr().out and len(_rows(old)) == 10
    with pytest.raises(StoreError, match="exists"):
        backup(db, old)


# ---- prune ----

def _expected(path: Path, keep_days: int, mark: int) -> set[int]:
    """The ids prune must delete, from the rule itself: older than the cutoff, no annotation of the node over
    it, acknowledged by every destination (id <= mark), and not the newest id."""
    db = sqlite3.connect(str(path))
    try:
        newest, top = db.execute("SELECT max(wall_ms), max(id) FROM logs").fetchone()
        anns = db.execute("SELECT node, t0_ms, t1_ms FROM annotations").fetchall()
        out = set()
        for lid, node, wall in db.execute("SELECT id, node, wall_ms FROM logs").fetchall():
            cited = any(n == node and a <= wall <= b for n, a, b in anns)
            if wall < newest - keep_days * MS_PER_DAY and not cited and lid <= mark and lid != top:
                out.add(lid)
        return out
    finally:
        db.close()


def test_prune_keeps_unpublished_and_cited_lines_and_the_counts_stay_true(tmp_path: Path, capsys) -> None:
    db = tmp_path / "g.db"
    st = LogStore(db)
    _lines(st, "a", 600)  # 25 days of lines, one an hour
    _lines(st, "b", 600)
    ob = st.outbox("127.0.0.1:1883/edgetwin")  # a destination: everything up to its mark is published
    ob.ack("logs", [], 0)
    mark = 900
    ob.ack("logs", [], mark)
    ob.close()
    # annotations about a few hours of each node, one of them after the mark
    a_ids = {n: nid for n, nid in ((r["name"], i + 1) for i, r in enumerate(st.nodes()))}
    st.add_annotation("a", T0 + 50 * MS_PER_DAY // 24, T0 + 55 * MS_PER_DAY // 24, "P-1 ran hot.", True, 4)
    st.add_annotation("b", T0 + 100 * MS_PER_DAY // 24, T0 + 103 * MS_PER_DAY // 24, "P-3 idle.", True, 3)
    st.add_annotation("b", T0 + 500 * MS_PER_DAY // 24, T0 + 510 * MS_PER_DAY // 24, "late note", True, 2)
    gaps = (st.line_gaps("a"), st.line_gaps("b"))
    st.close()
    want = _expected(db, 10, mark)
    rows = _rows(db)
    assert len(rows) == 1200 and 100 < len(want) < 700 and a_ids == {"a": 1, "b": 2}
    size = db.stat().st_size

    assert cli.main(["store", "prune", str(db), "--keep-days", "10", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would prune" in out and " %d of the " % len(want) in out and _rows(db) == rows  # nothing changed
    assert cli.main(["store", "prune", str(db), "--keep-days", "10", "--vacuum"]) == 0
    out = capsys.readouterr().out
    left = _rows(db)
    assert {r[0] for r in rows} - {r[0] for r in left} == want  # exactly those, no other
    assert "pruned" in out and "%d lines left" % len(left) in out, out
    assert db.stat().st_size < size  # VACUUM gave the space back

    st = LogStore(db)
    assert st.count_logs() == len(left) == len(st.logs())
    assert (st.line_gaps("a"), st.line_gaps("b")) == gaps == (0, 0)  # pruned lines are not missing ones
    assert st.missing_lines("a") == [] and st.line_loss("b")["missing"] == 0
    st._db.execute("INSERT INTO logs_fts(logs_fts) VALUES ('integrity-check')")  # noqa: SLF001  (the index follows)
    gone = min(want)
    assert st.windows("word%d" % gone) == []  # a deleted line is no hit
    assert [w.node for w in st.windows("word52")] == ["a"]  # cited by the note on a's hours 50..55: kept
    assert set(range(mark + 1, 1201)) <= {r[0] for r in left}  # every line after the mark (unpublished): kept
    assert len(st.annotations()) == 3
    top = left[-1][0]
    assert st.add_log("a", EP, 10 ** 5, 0, T0 + 26 * MS_PER_DAY, 1, "after the prune")
    assert _rows(db)[-1][0] == top + 1  # ids are never reused
    more = _expected(db, 10, mark)  # the newest line is a day later: the cutoff moved a day
    assert len(more) == 24 and st.prune(10)["deleted"] == 24
    again = st.prune(10)
    assert again["deleted"] == 0 and again["old"] == again["cited"] + again["unpublished"] > 0
    st.close()
    assert cli.main(["store", "prune", str(db), "--keep-days", "0"]) == 0  # everything but what must stay
    assert "pruned" in capsys.readouterr().out and _rows(db)[-1][0] == top + 1


def test_prune_of_an_empty_store_and_a_readers_refusal(tmp_path: Path, capsys) -> None:
    db = tmp_path / "e.db"
    LogStore(db).close()
    assert cli.main(["store", "prune", str(db), "--keep-days", "1"]) == 0
    assert "no lines" in capsys.readouterr().out
    ro = LogStore(db, readonly=True)
    with pytest.raises(StoreError, match="read-only"):
        ro.prune(1)
    ro.close()
    assert os.path.exists(db)
