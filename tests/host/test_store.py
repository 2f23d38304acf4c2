"""host/store.py: the gateway's SQLite (WAL, synchronous=FULL) log store with FTS5 windows.

Idempotent inserts by (node, epoch, seq), annotations, retrieval windows around FTS5 hits, clear
errors on bad files and bad values, readers beside a writer, and a writer process killed with
SIGKILL mid-run: every line it reported as committed is in the file afterwards, exactly once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host.store import LogStore, StoreError, Window, fts_query

ROOT = Path(__file__).resolve().parents[2]


def fill(s: LogStore, node: str = "n1", n: int = 40) -> None:
    for i in range(n):
        text = ("2026-11-30T06:00:%02dZ ALARM HI P-101 bearing_temp 81.2C prio=2 UNACK" % i if i % 10 == 5
                else "2026-11-30T06:00:%02dZ M-201 RUNNING T=40.%dC V=1.1mm/s" % (i, i % 10))
        assert s.add_log(node, b"\x01\x02\x03\x04", i, i * 1000, 10_000 + i * 1000, 1, text)


def test_idempotent_insert_and_nodes(tmp_path: Path) -> None:
    s = LogStore(tmp_path / "g.db")
    fill(s)
    assert not s.add_log("n1", b"\x01\x02\x03\x04", 7, 0, 0, 1, "a retransmission")  # duplicate: ignored
    assert s.add_log("n1", b"\x09\x02\x03\x04", 7, 0, 0, 1, "same seq, new boot epoch")
    assert s.add_log("n2", b"\x01\x02\x03\x04", 7, 0, 0, 3, b"other node, bytes text \xff")
    assert s.count_logs() == 42
    # count_logs is the largest id: an ignored duplicate or a rolled-back insert must not move it
    s.add_log("n3", 1, 1, 0, 0, 1, "in a transaction that is rolled back", commit=False)
    s.rollback()
    assert s.add_log("n3", 1, 2, 0, 0, 1, "kept")
    assert s.count_logs() == 43 == s._db.execute("SELECT count(*) FROM logs").fetchone()[0]  # noqa: SLF001
    assert s.last_seq("n1", b"\x01\x02\x03\x04") == 39 and s.last_seq("n1", 5) is None
    logs = s.logs("n1")
    assert [r["seq"] for r in logs[:3]] == [0, 1, 2] and logs[7]["text"].endswith("T=40.7C V=1.1mm/s")
    assert s.logs("n2")[0]["text"] == "other node, bytes text \ufffd"
    s.set_rx_state("n1", b"\xaa\xbb\xcc\xdd", 65535)
    assert s.rx_state("n1") == (b"\xaa\xbb\xcc\xdd", 65535) and s.rx_state("n2") is None
    names = {n["name"]: n for n in s.nodes()}
    assert names["n1"]["logs"] == 41 and names["n2"]["logs"] == 1
    s.close()
    r = LogStore(tmp_path / "g.db", readonly=True)
    assert r.count_logs() == 43 and r.rx_state("n1") == (b"\xaa\xbb\xcc\xdd", 65535)
    with pytest.raises(StoreError, match="read-only"):
        r.add_log("n1", 1, 1000, 0, 0, 1, "x")
    r.close()


def test_batched_writes_are_visible_only_after_commit(tmp_path: Path) -> None:
    w = LogStore(tmp_path / "g.db")
    r = LogStore(tmp_path / "g.db", readonly=True)
    w.add_log("n", 1, 0, 0, 0, 1, "first", commit=False)
    w.add_log("n", 1, 1, 0, 0, 1, "second", commit=False)
    assert w.pending and r.count_logs() == 0  # WAL: the reader is not blocked, sees the last commit
    w.commit()
    assert not w.pending and r.count_logs() == 2
    w.add_log("n", 1, 2, 0, 0, 1, "third", commit=False)
    w.rollback()
    assert r.count_logs() == 2
    assert w._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert w._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    w.close()
    r.close()


def test_windows_around_hits_with_annotations(tmp_path: Path) -> None:
    s = LogStore(tmp_path / "g.db")
    fill(s, "n1")
    fill(s, "n2", 12)
    s.add_annotation("n1", 14_000, 16_000, "P-101 bearing temperature high, check lubrication", True, 9)
    s.add_annotation("n1", 100_000, 101_000, "far away", False, 2)
    s.add_annotation("n1", 25_000, 25_500, "drafted alone", False, 3)
    ws = s.windows("Why did P-101's bearing trip?", limit=10, lines=6)
    assert ws and all(isinstance(w, Window) for w in ws)
    # n1 has hits at lines 5, 15, 25, 35; n2 at 5: five windows of 6 lines (2 before the hit, 3 after)
    assert sorted((w.node, w.t0_ms) for w in ws) == [("n1", 13_000), ("n1", 23_000), ("n1", 33_000),
                                                     ("n1", 43_000), ("n2", 13_000)]
    for w in ws:
        lines = [x for x in w.text.split("\n") if not x.startswith("NOTE")]
        assert len(lines) == 6 and w.t1_ms - w.t0_ms == 5000
        assert sum("P-101" in x for x in lines) == 1
        assert w.score > 0
    first = next(w for w in ws if w.node == "n1" and w.t0_ms == 13_000)
    assert first.text.endswith("NOTE: P-101 bearing temperature high, check lubrication")
    assert "NOTE (unverified): drafted alone" in next(w for w in ws if w.t0_ms == 23_000).text
    assert "far away" not in "".join(w.text for w in ws)
    assert [w.score for w in ws] == sorted((w.score for w in ws), reverse=True)
    # a wide window swallows the neighbouring hit: its score adds up instead of a second window
    wide = s.windows("P-101", limit=10, lines=25)
    assert len([w for w in wide if w.node == "n1"]) < 4
    assert s.windows("P-101", limit=1)[0].score > 0 and len(s.windows("P-101", limit=1)) == 1
    assert s.windows("zebra unicorn") == [] and s.windows("?!") == []
    # the node's own level-0 reports are neither hits nor window lines
    s.add_log("n1", 1, 9000, 0, 13_500, 0, "NODE heap=41000 loops=7 P-101 trip zebra")
    assert s.windows("zebra") == []
    assert all("NODE heap" not in w.text for w in s.windows("P-101", limit=10, lines=25))
    assert fts_query('why "did" P-101 trip?') == '"p-101" OR "trip"'
    with pytest.raises(StoreError):
        s.windows(b"P-101")  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        s.windows("x", limit=0)
    s.close()


def test_named_machines_and_minutes_rank_first(tmp_path: Path) -> None:
    # three vibration alarms of the same words: on P-101 at 06:10, on M-201 at 06:20, on M-201 at 06:30,
    # each among sample lines; plain bm25 cannot tell them apart, the question's machine and minute can
    s = LogStore(tmp_path / "g.db")
    seq = 0
    for mm, m in ((10, "P-101"), (20, "M-201"), (30, "M-201")):
        for k in range(8):
            seq += 1
            text = ("2026-11-30T06:%02d:%02dZ ALARM HI %s vibration 7.4mm/s prio=3 RAISED" % (mm, k, m) if k == 4
                    else "2026-11-30T06:%02d:%02dZ C-301 RUNNING T=40.1C V=1.1mm/s" % (mm, k))
            s.add_log("n1", 1, seq, seq, 1000 * (mm * 60 + k), 1, text)
    q = "vibration alarm raised"
    assert len(s.windows(q, limit=3, lines=4)) == 3
    top = s.windows(q, limit=3, lines=4, machines=["M-201"])
    assert "M-201" in top[0].text and "M-201" in top[1].text and "P-101" in top[2].text
    assert top[0].score > 2 * top[2].score
    at = s.windows(q, limit=3, lines=4, minutes=["06:30"])
    assert "06:30:04Z ALARM HI M-201" in at[0].text and at[0].score > 2 * at[1].score
    both = s.windows(q, limit=1, lines=4, machines=["P-101"], minutes=["06:20", "06:10"])
    assert "P-101" in both[0].text
    # no line of those machines or minutes: the plain ranking, nothing lost
    assert len(s.windows(q, limit=3, lines=4, machines=["CV-409"], minutes=["23:59"])) == 3
    for bad in ({"minutes": ["6:30"]}, {"minutes": "06:30"}, {"minutes": ["24:00"]}, {"machines": ["P 101"]},
                {"machines": ["P-101'; DROP TABLE logs"]}, {"minutes": ["06:30"] * 17}):
        with pytest.raises(StoreError, match="at most 16 strings like"):
            s.windows(q, **bad)
    assert s.count_logs() == 24
    s.close()


def test_bad_values(tmp_path: Path) -> None:
    s = LogStore(tmp_path / "g.db")
    for args in [("", 1, 0, 0, 0, 1, "x"), ("n", b"abc", 0, 0, 0, 1, "x"), ("n", 1, -1, 0, 0, 1, "x"),
                 ("n", 1, 0, 1 << 30, 0, 1, "x"), ("n", 1, 0, 0, 0, 8, "x"), ("n", 1, 0, 0, 0, 1, 5),
                 ("n", 1, True, 0, 0, 1, "x")]:
        with pytest.raises(StoreError):
            s.add_log(*args)
    with pytest.raises(StoreError, match="t1_ms"):
        s.add_annotation("n", 10, 5, "x", True, 1)
    with pytest.raises(StoreError, match="last_seq"):
        s.set_rx_state("n", b"abcd", 70000)
    assert s.count_logs() == 0
    s.close()


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        LogStore(tmp_path / "none.db", readonly=True)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        LogStore(junk)
    other = tmp_path / "other.db"
    c = sqlite3.connect(other)
    c.execute("create table t (x)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not an edgetwin log store"):
        LogStore(other)
    good = tmp_path / "good.db"
    LogStore(good).close()
    c = sqlite3.connect(good)
    c.execute("update meta set value='99' where key='version'")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="version 99"):
        LogStore(good)
    with pytest.raises(StoreError, match="not a file"):
        LogStore(tmp_path)
    # a store whose pages were overwritten in the middle
    bad = tmp_path / "bad.db"
    s = LogStore(bad)
    fill(s, n=400)
    s.close()
    data = bytearray(bad.read_bytes())
    for i in range(4096, len(data) - 4096, 7):
        data[i] ^= 0x55
    bad.write_bytes(bytes(data))
    with pytest.raises(StoreError):
        LogStore(bad)
    assert issubclass(StoreError, ValueError)


WRITER = r"""
import sys
sys.path.insert(0, %(root)r)
from host.store import LogStore
s = LogStore(sys.argv[1])
batch = int(sys.argv[2])
seq = 0
while True:
    for _ in range(batch):
        s.add_log("node-a", b"\x05\x06\x07\x08", seq, seq & 0x3FFFFFFF, 1000 + seq, 1,
                  "line %%d of the writer" %% seq, commit=False)
        seq += 1
    s.commit()
    sys.stdout.write("%%d\n" %% (seq - 1))  # acknowledged: everything up to here is committed
    sys.stdout.flush()
"""


@pytest.mark.parametrize("batch", [1, 16])
def test_kill_9_mid_run_loses_nothing_acknowledged(tmp_path: Path, batch: int) -> None:
    db = tmp_path / "g.db"
    LogStore(db).close()
    proc = subprocess.Popen([sys.executable, "-c", WRITER % {"root": str(ROOT)}, str(db), str(batch)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acked = -1
    deadline = time.monotonic() + 20
    try:
        assert proc.stdout is not None
        while acked < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate()
    for line in rest.split():  # acks printed before the kill landed
        acked = max(acked, int(line))
    assert acked >= 300, err.decode()
    s = LogStore(db)  # opens (WAL recovery) and is not corrupt
    seqs = [r["seq"] for r in s.logs("node-a")]
    assert seqs == list(range(len(seqs))), "stored lines are not a gap-free prefix"
    assert len(seqs) >= acked + 1  # every acknowledged line is there (maybe one more batch)
    # the restarted writer re-sends from its last ack: duplicates are ignored, nothing doubles
    again = [s.add_log("node-a", b"\x05\x06\x07\x08", q, q, 1000 + q, 1, "line %d of the writer" % q, commit=False)
             for q in range(acked - 5, acked + 5)]
    s.commit()
    assert again[:5] == [False] * 5
    assert len({r["seq"] for r in s.logs("node-a")}) == s.count_logs()
    s.close()


def test_alarm_follow_finds_the_ack_and_clear_of_the_named_alarm_by_its_record(tmp_path: Path) -> None:
    # two HI vibration raises on P-101 (06:10, 06:40) and a HI bearing_temp one (06:12); each acked and cleared
    # well after its raise minute, among sample lines that hold the same words
    s = LogStore(tmp_path / "g.db")
    lines = [(600, "ALARM HI P-101 vibration 7.4mm/s prio=3 RAISED"),
             (720, "ALARM HI P-101 bearing_temp 81.0C prio=3 RAISED"),
             (900, "ACK HI P-101 bearing_temp 82.0C prio=3 ACKED"),
             (1500, "ACK HI P-101 vibration 7.9mm/s prio=3 ACKED"),
             (1800, "CLEAR HI P-101 vibration 2.0mm/s prio=3 NORMAL"),
             (2400, "ALARM HI P-101 vibration 7.6mm/s prio=3 RAISED"),
             (2460, "CLEAR HI P-101 vibration 2.1mm/s prio=3 RTN_UNACK"),
             (3000, "ACK HI P-101 vibration 1.9mm/s prio=3 NORMAL")]
    t = 0
    seq = 0
    for at, text in lines:
        while t < at:  # a sample line a minute between the events
            seq += 1
            s.add_log("n1", 1, seq, seq, 1000 * t, 1, "2026-11-30T06:%02d:%02dZ P-101 RUNNING V=2.0mm/s vibration ok"
                      % (t // 60, t % 60))
            t += 60
        seq += 1
        s.add_log("n1", 1, seq, seq, 1000 * at, 2, "2026-11-30T06:%02d:%02dZ %s" % (at // 60, at % 60, text))

    def hit(*args, **kw) -> str:
        w = s.alarm_follow(*args, lines=3, **kw)
        assert w is not None and w.node == "n1" and w.score == 0.0
        return w.text.splitlines()[1]  # the window is centred on the line found

    words = ["vibration", "alarm"]
    assert hit("P-101", "ACK", "HI", words, "06:10").endswith("ACK HI P-101 vibration 7.9mm/s prio=3 ACKED")
    assert hit("P-101", "CLEAR", None, words, "06:10").endswith("CLEAR HI P-101 vibration 2.0mm/s prio=3 NORMAL")
    # no minute: the latest raise of that alarm
    assert hit("P-101", "ACK", "HI", words).startswith("2026-11-30T06:50:00Z ACK HI P-101 vibration")
    assert hit("P-101", "ACK", None, ["bearing", "temp"]).endswith("ACK HI P-101 bearing_temp 82.0C prio=3 ACKED")
    # no such raise, or no such line after it
    assert s.alarm_follow("P-101", "ACK", "HIHI", words) is None
    assert s.alarm_follow("P-101", "ACK", "HI", words, "06:11") is None
    assert s.alarm_follow("M-201", "CLEAR", None, words) is None
    assert s.alarm_follow("P-101", "CLEAR", None, ["bearing", "temp"]) is None
    for bad in ({"machine": "101"}, {"verb": "SHELVE"}, {"minute": "6:10"}, {"machine": "P-101' OR 1=1 --"},
                {"level": "HIGH"}, {"machine": 'P-101" OR "x'}):
        kw = dict({"machine": "P-101", "verb": "ACK"}, **bad)
        with pytest.raises(StoreError, match="must be"):
            s.alarm_follow(**kw)
    s.close()


def test_first_raise_and_the_machines_of_a_kind(tmp_path: Path) -> None:
    s = LogStore(tmp_path / "g.db")
    for seq, text in enumerate(("06:00:00Z M-201 RUNNING T=80.0C CV-401 idle",
                                "06:01:00Z ALARM HI M-201 current 31A prio=2 RAISED",
                                "06:02:00Z ALARM HI M-201 winding_temp 121.2C prio=2 RAISED",
                                "06:03:00Z ALARM HIHI M-201 winding_temp 131.0C prio=4 RAISED",
                                "06:04:00Z M-202 RUNNING"), 1):
        s.add_log("n1", 1, seq, seq, seq * 60000, 2, "2026-11-30T" + text)
    w = s.first_raise("M-201", ["temp", "hot"], lines=1)
    assert w is not None and w.text.endswith("ALARM HI M-201 winding_temp 121.2C prio=2 RAISED")
    assert s.first_raise("M-201", ["flux"], lines=1).text.endswith("ALARM HI M-201 current 31A prio=2 RAISED")
    assert s.first_raise("M-202", ["temp"]) is None
    # by the fault's tags: only those count (no fallback to another tag), and a BAD raise is a sensor's fault
    s.add_log("n1", 1, 6, 6, 6 * 60000, 2, "2026-11-30T06:06:00Z ALARM BAD M-201 vibration ? prio=1 RAISED")
    assert s.first_raise("M-201", tags=("vibration",)) is None
    assert s.first_raise("M-201", tags=("winding_temp",), lines=1).text.endswith("winding_temp 121.2C prio=2 RAISED")
    assert s.first_raise("M-201", ["current"], tags=("winding_temp",), lines=1).text.endswith("121.2C prio=2 RAISED")
    with pytest.raises(StoreError):
        s.first_raise("M-201", tags="winding_temp")
    # which of a kind's machines (a description's) the log names: only whole ids, never a part of another
    motors = ["M-201", "M-202", "M-203", "M-2"]
    assert s.machines(motors) == ["M-201", "M-202"] and s.machines(("CV-401", "CV-402")) == ["CV-401"]
    assert s.machines(["C-301"]) == [] and s.machines([]) == []
    for bad in (lambda: s.machines("M"), lambda: s.machines(["M 201"]), lambda: s.first_raise("M 201"),
                lambda: s.machines(motors, lines=0)):
        with pytest.raises(StoreError):
            bad()
    s.close()


def test_tripped_and_since_when_a_machine_is_logged(tmp_path: Path) -> None:
    s = LogStore(tmp_path / "g.db")
    assert s.since_ms() is None and s.since_ms("P-101") is None and not s.tripped("P-101")
    s.add_log("n1", 1, 1, 1, 5000, 1, "2026-11-30T06:00:05Z P-101 RUNNING T=50.0C")
    s.add_log("n1", 1, 2, 2, 9000, 2, "2026-11-30T06:00:09Z ALARM HIHI P-101 vibration 11.2mm/s prio=4 RAISED")
    s.add_log("n2", 1, 1, 1, 2000, 1, "2026-11-30T06:00:02Z M-201 RUNNING T=60.0C")
    s.add_log("n2", 1, 2, 2, 3000, 2, "2026-11-30T06:00:03Z STATE M-201 RUNNING->TRIPPED interlock=HIHI_TEMP")
    s.add_log("n2", 1, 3, 3, 4000, 2, "2026-11-30T06:00:04Z NOTE P-101 RUNNING->TRIPPED is what we feared")
    assert s.tripped("M-201") and not s.tripped("P-101")  # only a STATE line of P-101 itself is a trip
    assert s.since_ms("P-101") == 2000  # n2's NOTE names it too: both nodes' first lines count
    assert s.since_ms("M-201") == 2000 and s.since_ms() == 2000 and s.since_ms("C-301") is None
    for bad in (lambda: s.tripped("P 101"), lambda: s.since_ms("-x")):
        with pytest.raises(StoreError):
            bad()
    s.close()
