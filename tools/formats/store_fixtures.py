"""Make the log-store fixtures of tests/host/fixtures/stores/: one small SQLite file for every shape an edgetwin
store has had, each filled with the same few rows as that shape can hold.

    python -m tools.formats.store_fixtures tests/host/fixtures/stores

The DDL below is what the gateways of each release wrote, pinned here (git log -p host/store.py): a store
keeps its old shape until a newer gateway opens it, so host/store.py must upgrade every one of them.

    v1               schema 1 (the first gateway)
    v2-nouid         schema 2 as first released: the line seq columns, no nodes.uid
    v2               schema 2 with nodes.uid (protocol 1.1's node id, added under the same version)
    v2-outbox        schema 2 after a first --mqtt run: outbox_marks, outbox_acked, meta store_id
    v2-spans         schema 2 with annotations.spans (added under the same version)
    v2-spans-outbox  both
    v3-unsent        schema 3 as first released: the index commands_unsent
    v3               schema 3 as made fresh by the last schema-3 gateway (commands_pending)
    v3-outbox        schema 3 after a first --mqtt run
    v4               schema 4 (every table made with the store: the outbox, link_auth, logs_pruned)

Small pages (1024 bytes) keep each file a few tens of KB; they are named .sqlite, not .db (which git
ignores here: a store a run leaves behind). The rows are fixed (no clock, no randomness), so
the test can compare a fixture with a fresh run of this script table by table."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

# schema 1 (a01e6e8)
V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE nodes (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    board_id TEXT NOT NULL DEFAULT '',
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    peer_epoch INTEGER,
    last_seq INTEGER
);
CREATE TABLE logs (
    id INTEGER PRIMARY KEY,
    node INTEGER NOT NULL REFERENCES nodes(id),
    epoch INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    ticks INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL,
    level INTEGER NOT NULL,
    text TEXT NOT NULL,
    UNIQUE (node, epoch, seq)
);
CREATE INDEX logs_node_time ON logs (node, wall_ms, id);
CREATE VIRTUAL TABLE logs_fts USING fts5(text, content='logs', content_rowid='id');
CREATE TRIGGER logs_ai AFTER INSERT ON logs BEGIN
    INSERT INTO logs_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TABLE annotations (
    id INTEGER PRIMARY KEY,
    node INTEGER NOT NULL REFERENCES nodes(id),
    t0_ms INTEGER NOT NULL,
    t1_ms INTEGER NOT NULL,
    text TEXT NOT NULL,
    verified INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX annotations_node_time ON annotations (node, t0_ms);
INSERT INTO meta VALUES ('schema', 'edgetwin-store'), ('version', '1');
"""
# schema 1 -> 2 as first released (2f45c23)
UP_1_2 = """
ALTER TABLE logs ADD COLUMN boot INTEGER;
ALTER TABLE logs ADD COLUMN lseq INTEGER;
ALTER TABLE logs ADD COLUMN flags INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX logs_line ON logs (node, boot, lseq) WHERE flags & 1;
UPDATE meta SET value='2' WHERE key='version';
"""
UID = "ALTER TABLE nodes ADD COLUMN uid TEXT NOT NULL DEFAULT '';"  # f012f9f
SPANS = "ALTER TABLE annotations ADD COLUMN spans TEXT;"  # 048a682: added at open, version unchanged
OUTBOX = """
CREATE TABLE IF NOT EXISTS outbox_marks (dest TEXT NOT NULL, source TEXT NOT NULL,
    acked_through INTEGER NOT NULL, PRIMARY KEY (dest, source));
CREATE TABLE IF NOT EXISTS outbox_acked (dest TEXT NOT NULL, source TEXT NOT NULL, row_id INTEGER NOT NULL,
    PRIMARY KEY (dest, source, row_id)) WITHOUT ROWID;
"""  # 02c8ef5: made by the first --mqtt run, version unchanged
COMMANDS = """
CREATE TABLE plants (hash TEXT PRIMARY KEY, name TEXT NOT NULL, text TEXT NOT NULL, added_ms INTEGER NOT NULL);
CREATE TABLE commands (
    id INTEGER PRIMARY KEY,
    node TEXT NOT NULL,
    verb TEXT NOT NULL,
    machine TEXT NOT NULL,
    tag TEXT NOT NULL,
    level TEXT,
    by TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    sent_ms INTEGER,
    done_ms INTEGER,
    result TEXT
);
"""
# schema 2 -> 3 as first released (b4a8a83)
UP_2_3 = """
ALTER TABLE nodes ADD COLUMN plant TEXT;
ALTER TABLE logs ADD COLUMN plant TEXT;
""" + COMMANDS + """
CREATE INDEX commands_unsent ON commands (node, id) WHERE sent_ms IS NULL AND done_ms IS NULL;
UPDATE meta SET value='3' WHERE key='version';
"""
# schema 3 made fresh by the last schema-3 gateway (c4f69d7 .. 6e860df)
V3 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE nodes (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    board_id TEXT NOT NULL DEFAULT '',
    uid TEXT NOT NULL DEFAULT '',
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    peer_epoch INTEGER,
    last_seq INTEGER,
    plant TEXT
);
CREATE TABLE logs (
    id INTEGER PRIMARY KEY,
    node INTEGER NOT NULL REFERENCES nodes(id),
    epoch INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    ticks INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL,
    level INTEGER NOT NULL,
    text TEXT NOT NULL,
    boot INTEGER,
    lseq INTEGER,
    flags INTEGER NOT NULL DEFAULT 0,
    plant TEXT,
    UNIQUE (node, epoch, seq)
);
CREATE INDEX logs_node_time ON logs (node, wall_ms, id);
CREATE UNIQUE INDEX logs_line ON logs (node, boot, lseq) WHERE flags & 1;
CREATE VIRTUAL TABLE logs_fts USING fts5(text, content='logs', content_rowid='id');
CREATE TRIGGER logs_ai AFTER INSERT ON logs BEGIN
    INSERT INTO logs_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TABLE annotations (
    id INTEGER PRIMARY KEY,
    node INTEGER NOT NULL REFERENCES nodes(id),
    t0_ms INTEGER NOT NULL,
    t1_ms INTEGER NOT NULL,
    text TEXT NOT NULL,
    verified INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    spans TEXT
);
CREATE INDEX annotations_node_time ON annotations (node, t0_ms);
""" + COMMANDS + """
CREATE INDEX commands_pending ON commands (node, id) WHERE done_ms IS NULL;
INSERT INTO meta VALUES ('schema', 'edgetwin-store'), ('version', '3');
"""
# schema 4 made fresh (cc71a1e .. cdedf00): schema 3's tables, the outbox, a signed link's state, pruned lines
V4 = V3.replace("('version', '3')", "('version', '4')") + OUTBOX + """
CREATE TABLE link_auth (node INTEGER PRIMARY KEY REFERENCES nodes(id), peer_counter BLOB,
    tx_next INTEGER NOT NULL DEFAULT 1);
CREATE TABLE logs_pruned (node INTEGER NOT NULL, grp_boot INTEGER NOT NULL, grp_epoch INTEGER NOT NULL,
    lseqs INTEGER NOT NULL, lseq_hi INTEGER NOT NULL, PRIMARY KEY (node, grp_boot, grp_epoch));
CREATE TRIGGER logs_ad AFTER DELETE ON logs BEGIN
    INSERT INTO logs_fts(logs_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
"""
PENDING = "DROP INDEX commands_unsent; CREATE INDEX commands_pending ON commands (node, id) WHERE done_ms IS NULL;"

SHAPES = {
    "v1": [V1],
    "v2-nouid": [V1, UP_1_2],
    "v2": [V1, UP_1_2, UID],
    "v2-outbox": [V1, UP_1_2, UID, OUTBOX],
    "v2-spans": [V1, UP_1_2, UID, SPANS],
    "v2-spans-outbox": [V1, UP_1_2, UID, SPANS, OUTBOX],
    "v3-unsent": [V1, UP_1_2, UID, SPANS, UP_2_3],
    "v3": [V3],
    "v3-outbox": [V3, OUTBOX],
    "v4": [V4],
}

DAY = 86400000
T0 = 1796018400000  # 2026-11-30T06:00:00Z, the simulator's first plant second
EPOCH = 0x04030201
HASH = "0123456789abcdef"
HALL = {"format": "edgetwin-plant/1", "name": "hall-3", "timezone": "Europe/Berlin",
        "machines": [{"id": "AHU-1", "kind": "air handling unit", "state": {"run": {"di": 2}},
                      "signals": [{"key": "SAT", "tag": "supply_temp", "unit": "C", "source": {"adc": 0},
                                   "alarms": [{"level": "HI", "limit": 24.0}]}]}]}
# (node, day, level, text): a month of a pump hall's lines, two nodes, an alarm raised and acknowledged
LINES = [(1, 0, 1, "2026-11-30T06:00:00Z P-101 RUNNING T=61.2C V=2.1mm/s"),
         (1, 0, 0, "NODE heap=41234 loops=100 lines=2 dropped=0 logs_sent=1 logs_acked=1"),
         (2, 0, 1, "2026-11-30T06:00:00Z AHU-1 RUNNING SAT=14.0C"),
         (1, 3, 2, "2026-12-03T06:00:00Z ALARM HI P-101 bearing_temp 81.2 RAISED"),
         (1, 3, 2, "2026-12-03T06:01:00Z ACK HI P-101 bearing_temp by=alice"),
         (2, 10, 1, "2026-12-10T06:00:00Z AHU-1 RUNNING SAT=15.5C"),
         (1, 20, 1, "2026-12-20T06:00:00Z P-101 RUNNING T=60.0C V=2.0mm/s"),
         (1, 30, 2, "2026-12-30T06:00:00Z ALARM HI P-101 vibration 7.4 RAISED"),
         (2, 30, 1, "2026-12-30T06:00:00Z AHU-1 RUNNING SAT=14.2C")]


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute("PRAGMA table_info(%s)" % table)}


def _insert(db: sqlite3.Connection, table: str, row: dict) -> None:
    cols = ", ".join(row)
    db.execute("INSERT INTO %s (%s) VALUES (%s)" % (table, cols, ", ".join("?" * len(row))), tuple(row.values()))


def fill(db: sqlite3.Connection) -> None:
    """The rows every fixture gets, as far as its shape holds them."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    ncols, lcols, acols = _columns(db, "nodes"), _columns(db, "logs"), _columns(db, "annotations")
    for nid, name, board, uid in ((1, "pump-hall", "rp2040_pico", "e66138935f4a2b21"), (2, "hall-3", "esp32s3", "")):
        row = {"id": nid, "name": name, "board_id": board, "first_seen_ms": T0, "last_seen_ms": T0 + 30 * DAY,
               "peer_epoch": EPOCH, "last_seq": 41 + nid}
        if "uid" in ncols:
            row["uid"] = uid
        if "plant" in ncols:
            row["plant"] = HASH if nid == 2 else None
        _insert(db, "nodes", row)
    for i, (nid, day, level, text) in enumerate(LINES, 1):
        row = {"node": nid, "epoch": EPOCH, "seq": i, "ticks": 1000 * i, "wall_ms": T0 + day * DAY + i, "level": level,
               "text": text}
        if "lseq" in lcols:
            row.update(boot=7, lseq=i, flags=i % 2)
        if "plant" in lcols:
            row["plant"] = HASH if nid == 2 else None
        _insert(db, "logs", row)
    for nid, day, text, spans in ((1, 3, "P-101 bearing temperature rose past its HI limit.",
                                   [["draft", "P-101 bearing temperature rose"], ["fix", " past its HI limit."]]),
                                  (2, 10, "AHU-1 supply air warmer.", None)):
        row = {"node": nid, "t0_ms": T0 + day * DAY, "t1_ms": T0 + day * DAY + 3600000, "text": text, "verified": 1,
               "tokens": 9, "created_ms": T0 + day * DAY + 3600000}
        if "spans" in acols:
            row["spans"] = None if spans is None else json.dumps(spans)
        _insert(db, "annotations", row)
    if "outbox_marks" in tables:
        db.execute("INSERT INTO meta VALUES ('store_id', 'a1b2c3d4e5f6')")
        db.executemany("INSERT INTO outbox_marks VALUES (?, ?, ?)",
                       [("127.0.0.1:1883/edgetwin", "logs", 5), ("127.0.0.1:1883/edgetwin", "annotations", 1)])
        db.execute("INSERT INTO outbox_acked VALUES ('127.0.0.1:1883/edgetwin', 'logs', 7)")
    if "plants" in tables:
        db.execute("INSERT INTO plants VALUES (?, ?, ?, ?)", (HASH, "hall-3", json.dumps(HALL), T0))
        for vals in (("hall-3", "ACK", "AHU-1", "supply_temp", "HI", "alice", T0 + DAY, T0 + DAY + 5, T0 + DAY + 9,
                      "delivered"),
                     ("hall-3", "SHELVE", "AHU-1", "supply_temp", None, "bob", T0 + 2 * DAY, None, None, None)):
            _insert(db, "commands", dict(zip(("node", "verb", "machine", "tag", "level", "by", "created_ms", "sent_ms",
                                              "done_ms", "result"), vals)))


def make(path: Path, shape: str) -> None:
    """Write the fixture of `shape` to `path` (replaced if there)."""
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)
    db = sqlite3.connect(str(path), isolation_level=None)
    try:
        db.execute("PRAGMA page_size=1024")
        db.execute("PRAGMA journal_mode=WAL")  # as every gateway made its store
        db.execute("BEGIN")
        for script in SHAPES[shape]:
            for stmt in _statements(script):
                db.execute(stmt)
        fill(db)
        db.execute("COMMIT")
    finally:
        db.close()  # the last close checkpoints and removes -wal and -shm


def _statements(script: str) -> list[str]:
    out, cur = [], ""
    for line in script.strip().splitlines(keepends=True):
        cur += line
        if sqlite3.complete_statement(cur):
            out.append(cur.strip())
            cur = ""
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the folder to write SHAPE.sqlite files to (it must exist)")
    args = ap.parse_args(argv)
    if not args.out.is_dir():
        print("store_fixtures: %s is not a folder" % args.out, file=sys.stderr)
        return 2
    for shape in SHAPES:
        make(args.out / (shape + ".sqlite"), shape)
        print("%s.sqlite %d bytes" % (shape, (args.out / (shape + ".sqlite")).stat().st_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
