"""The gateway's log store: SQLite in WAL mode with an FTS5 index over the log lines.

What it holds (schema version 5, every table made with the store; a store of any earlier shape is upgraded
in place, in one transaction, when a writer opens it, and read as it is by a reader; one of a newer version
is refused):

- ``nodes``: one row per node (its name, usually the serial port or a name given on the command line;
  the board id and (protocol 1.1) the node's unique id ``uid`` (hex) from its HELLO; first/last seen; the link receive state ``peer_epoch`` + ``last_seq``
  that a restarted gateway gives back to ``Link.restore`` so nothing is delivered twice);
- ``logs``: every log line a node sent: node, boot epoch (the node link's 32-bit epoch), seq (the LOG
  frame's link sequence number, unwrapped to 64 bits per epoch), the node's ticks (ms, mod 2**30),
  the gateway's wall time in ms, level (0..7) and text. (node, epoch, seq) is unique, so a line
  delivered again (a retransmission after a gateway restart) is stored once: ``add_log`` returns False.
  Protocol 1.1 lines also carry the node's boot number and line sequence number (``boot``, ``lseq``:
  1, 2, ... per boot; NULL for 1.0 nodes and for the node's own NODE reports) and the LOG flags
  (``flags``: 1 = the line waited in the node's flash spill ring). (node, boot, lseq) is unique (schema 5;
  schema 2 to 4: among spilled lines), so a line the node sends again after a reboot is stored once. ``line_gaps(node)`` counts the
  line seqs missing in the store (per boot; a node without a spill ring restarts its seqs at each
  link epoch), ``reported_dropped(node)`` the losses the node itself reported (``dropped=`` of its
  NODE reports), ``line_loss(node)`` both;
- ``logs_fts``: an FTS5 index (external content) over ``logs.text``, kept by triggers (insert, delete);
- ``annotations``: committed annotation text per node: wall span t0..t1 (ms), text, verified flag
  (0: the node drafted it alone while the gateway was away), token count, and ``spans``: the text cut by
  who wrote it, as JSON ``[[kind, text], ...]`` with kind ``draft`` (draft tokens the target accepted),
  ``fix`` (the target's correction after a rejection) or ``unverified`` (drafted while the gateway was
  away); the pieces join to ``text`` (NULL for rows stored before the column, which came under schema 2);
- ``plants``: every plant description (docs/PLANT.md) a line was stored with, by its hash (name, the
  description as JSON, when it was added): kept for good, since the lines of an older version still need it.
  ``logs.plant`` is the hash of the description the node named (its PLANT line) for that line and
  ``nodes.plant`` the one it named last; NULL is the built-in simulator's (every line stored before schema 3);
- ``commands``: operators' ACK / SHELVE / UNSHELVE of an alarm point, queued for a node (``edgetwin ack``
  writes them, with or without a gateway running); the gateway that serves the node sends each once
  (``sent_ms``) and records what came of it (``done_ms``, ``result``).

Durability: ``journal_mode=WAL`` with ``synchronous=FULL``, so every committed transaction survives a
crash of the process or the machine. ``add_log(..., commit=False)`` batches lines in one transaction;
the gateway session commits before it writes any byte to the node (every frame it sends carries the
cumulative ack), so nothing acknowledged to a node is ever lost.

Retrieval: ``windows(query)`` runs an FTS5 match (bm25), and for each hit returns the consecutive lines
of that node around it, plus the annotations in that span, as one ``Window``.

Readers (operator Q&A) open with ``LogStore(path, readonly=True)``; WAL lets them read while the
gateway writes, and a store no gateway has open is read as immutable (no -wal/-shm left beside it).

Outbox (``Outbox``, for ``edgetwin gateway --mqtt``, host/mqtt.py): the store is also the outbox of what the
gateway publishes. Two tables (before schema 4, made by the first ``--mqtt`` run): ``outbox_marks`` holds,
per destination (broker and topic prefix) and source table, the row id up to which the broker acknowledged
every published row (``acked_through``), ``outbox_acked`` the rows above it that were acknowledged out of order. A restart
republishes the rows after the mark that are not in ``outbox_acked``: only those the broker never
acknowledged. The outbox reads through its own connection, so it sees committed rows only, never the
gateway's open transaction.

A signed link's state per node (``link_auth``): the highest counter accepted from it (``peer_counter``,
``set_peer_counter``, with the lines it covers) and the next counter the gateway may sign with
(``reserve_tx_counter``: ranges committed before use, so a restarted gateway never reuses one).

Upkeep (``edgetwin store``, host/cmd_store.py): ``backup(src, dest)`` copies a store with SQLite's online backup
while a gateway writes (the store as it was when the backup began); ``LogStore.prune(keep_days)`` deletes old
lines but never one a destination has not acknowledged nor one an annotation is about, keeping count of what
it deleted (meta ``logs_pruned``, table ``logs_pruned``) so ``count_logs`` and ``line_gaps`` stay true.

A full disk: a write SQLite refuses for lack of space rolls back what is pending and raises ``StoreFull``;
``full`` says why until a commit succeeds again. The gateway acknowledges nothing of it (host/session.py).

Files: a new store is created 0640 (SQLite gives its -wal and -shm the same mode), only in a directory
that exists; an open that fails removes what it created and leaves a file it found as it was.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from host.plantlines import ID_RE as _MACHINE  # a machine id (docs/PLANT.md, Log grammar)
from shared import plant_alarms
from shared.frame import SIG_COUNTER

_ALARM_LEVELS = tuple(x.decode() for x in plant_alarms.LEVELS)  # the line's level words (docs/PLANT.md): HI, HIHI, ...

SCHEMA_NAME = "edgetwin-store"
SCHEMA_VERSION = 5
PEER_COUNTER_BYTES = SIG_COUNTER  # a signed frame's counter (docs/PROTOCOL.md)
SPAN_KINDS = ("draft", "fix", "unverified")  # who wrote a piece of an annotation (annotations.spans)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "LEVEL5", "LEVEL6", "LEVEL7")

# The tables and indexes every store has had since schema 1 (in their schema-4 shape; older stores get the
# columns added since by _upgrade)
_BASE_SCHEMA = """
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
"""

# Columns added since schema 1, by table, in the order they came: (column, declaration). An older store
# lacks some of them (a schema-2 store of the first hour of protocol 1.1 has no nodes.uid, a store made
# before the spans column none): _upgrade adds exactly those it lacks.
_ADDED_COLUMNS = (
    ("logs", "boot", "INTEGER"),  # schema 2: the line seq columns (docs/PROTOCOL.md 3.5, protocol 1.1)
    ("logs", "lseq", "INTEGER"),
    ("logs", "flags", "INTEGER NOT NULL DEFAULT 0"),
    ("nodes", "uid", "TEXT NOT NULL DEFAULT ''"),  # schema 2 (a later commit of it): the node's unique id
    ("annotations", "spans", "TEXT"),  # schema 2 (later): who wrote each piece of an annotation
    ("nodes", "plant", "TEXT"),  # schema 3: the description each node and line named (NULL: the simulator's)
    ("logs", "plant", "TEXT"),
)

# Every table, index and trigger added since schema 1, each statement safe to run again: a new store runs
# them after _BASE_SCHEMA, an upgrade after the columns. Each came in a release that created it on first
# use (the outbox with the first --mqtt run) or at a schema version; schema 4 makes them all part of
# the store.
_ADDED = (
    # schema 2 stored a spilled line the node sends again after a reboot once (logs_line: unique among lines
    # flagged spilled); schema 5 among every line with a seq: a node that writes each line to flash before
    # it sends it sends again after a power cut the lines it had not seen acknowledged, first sent unflagged
    "DROP INDEX IF EXISTS logs_line",
    "CREATE UNIQUE INDEX IF NOT EXISTS logs_lseq ON logs (node, boot, lseq) WHERE boot IS NOT NULL AND lseq IS NOT NULL",
    # schema 3: the plant descriptions, by hash (docs/PLANT.md), and the operators' commands queued for nodes
    "CREATE TABLE IF NOT EXISTS plants (hash TEXT PRIMARY KEY, name TEXT NOT NULL, text TEXT NOT NULL, "
    "added_ms INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS commands (
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
)""",
    "DROP INDEX IF EXISTS commands_unsent",  # the first schema-3 gateway's: a sent command was never resent
    "CREATE INDEX IF NOT EXISTS commands_pending ON commands (node, id) WHERE done_ms IS NULL",
    # the MQTT / Sparkplug outbox (class Outbox), made by the first --mqtt run before schema 4
    "CREATE TABLE IF NOT EXISTS outbox_marks (dest TEXT NOT NULL, source TEXT NOT NULL, "
    "acked_through INTEGER NOT NULL, PRIMARY KEY (dest, source))",
    "CREATE TABLE IF NOT EXISTS outbox_acked (dest TEXT NOT NULL, source TEXT NOT NULL, row_id INTEGER NOT NULL, "
    "PRIMARY KEY (dest, source, row_id)) WITHOUT ROWID",
    # schema 4: a signed link's state per node (the highest counter accepted from it, the next counter the
    # gateway may sign with), lines given up by prune (so the line seq check does not count them missing),
    # and the FTS5 index follows deleted lines
    "CREATE TABLE IF NOT EXISTS link_auth (node INTEGER PRIMARY KEY REFERENCES nodes(id), peer_counter BLOB, "
    "tx_next INTEGER NOT NULL DEFAULT 1)",
    "CREATE TABLE IF NOT EXISTS logs_pruned (node INTEGER NOT NULL, grp_boot INTEGER NOT NULL, "
    "grp_epoch INTEGER NOT NULL, lseqs INTEGER NOT NULL, lseq_hi INTEGER NOT NULL, "
    "PRIMARY KEY (node, grp_boot, grp_epoch))",
    """CREATE TRIGGER IF NOT EXISTS logs_ad AFTER DELETE ON logs BEGIN
    INSERT INTO logs_fts(logs_fts, rowid, text) VALUES ('delete', old.id, old.text);
END""",
)
_ADDED_TABLES = {"plants", "commands", "outbox_marks", "outbox_acked", "link_auth", "logs_pruned"}
_SCHEMA = _BASE_SCHEMA + "".join(s + ";\n" for s in _ADDED)
# what Outbox makes sure of (it may open a store no writer has upgraded yet)
_OUTBOX_SCHEMA = "".join(s + ";\n" for s in _ADDED if "outbox_" in s)
MS_PER_DAY = 86400000
_DROPPED = re.compile(r"\bdropped=(\d+)")
_HASH = re.compile(r"[0-9A-Fa-f]{16}")  # a description's hash (docs/PLANT.md)
_BY = re.compile(r"[A-Za-z0-9_.-]{1,32}")  # who commands (the node logs it as by=NAME)
COMMAND_VERBS = ("ACK", "SHELVE", "UNSHELVE")  # what an operator may ask a node to do to an alarm point
_COMMAND_COLS = "id, node, verb, machine, tag, level, by, created_ms, sent_ms, done_ms, result"

# words that carry no retrieval signal in an operator's question
_STOP = frozenset("a an and are at be by did do does for from had has have how i in is it its me of on or so "
                  "that the then this to was were what when where which who why will with".split())
_WORD = re.compile(r"[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*")  # AHU-1, 81.2, supply_temp stay whole
_MINUTE = re.compile(r"([01]\d|2[0-3]):[0-5]\d")
MINUTE_BOOST = 3.0  # a hit at a minute the question names outranks the same words at any other time
MACHINE_BOOST = 3.0  # and one on a machine it names, the same words on another machine


# What the outbox reads per source: committed rows after an id, oldest first. logs: every line but the
# plant's level-1 samples (alarms and ACK/CLEAR are level 2, a trip's STATE line 3, the node's NODE reports 0).
_OUTBOX_ROWS = {
    "logs": ("SELECT logs.id, nodes.name, logs.wall_ms, logs.level, logs.text, logs.epoch, logs.seq, logs.plant "
             "FROM logs JOIN nodes ON nodes.id=logs.node WHERE logs.id>? AND logs.level!=1 ORDER BY logs.id LIMIT ?",
             ("id", "node", "wall_ms", "level", "text", "epoch", "seq", "plant")),
    "annotations": ("SELECT annotations.id, nodes.name, t0_ms, t1_ms, text, verified, tokens, created_ms FROM "
                    "annotations JOIN nodes ON nodes.id=annotations.node WHERE annotations.id>? "
                    "ORDER BY annotations.id LIMIT ?",
                    ("id", "node", "t0_ms", "t1_ms", "text", "verified", "tokens", "created_ms")),
}
# Sparkplug B (host/sparkplug.py) carries the signals too: every log line, samples included.
SPARKPLUG_ROWS = {
    "logs": ("SELECT logs.id, nodes.name, logs.wall_ms, logs.level, logs.text, logs.epoch, logs.seq, logs.plant, "
             "logs.flags FROM logs JOIN nodes ON nodes.id=logs.node WHERE logs.id>? ORDER BY logs.id LIMIT ?",
             _OUTBOX_ROWS["logs"][1] + ("flags",)),
    "annotations": _OUTBOX_ROWS["annotations"],
}


class StoreError(ValueError):
    """The store file is missing, corrupt, not an edgetwin store, or was given bad values."""


class StoreFull(StoreError):
    """A write the store could not keep for lack of space: SQLite's "database or disk is full" (the disk, or
    the page limit of LogStore.limit_pages) or a disk I/O error. The open transaction was rolled back, so
    nothing written since the last commit() is in the store: the gateway acknowledges none of it (host/
    session.py) and the nodes send it again once there is room."""


_SQLITE_IOERR, _SQLITE_FULL = 10, 13  # SQLite's primary result codes (an extended code's low byte)


def _no_space(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_FULL, _SQLITE_IOERR)


def _writes(method):
    """A LogStore method that writes: a write refused for lack of space rolls back the open transaction
    and raises StoreFull (other errors pass as they are)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            if not _no_space(e):
                raise
            self._no_room(e)
            raise StoreFull("log store %s: %s: nothing since the last commit is kept (free some space)"
                            % (self.path, e)) from None

    return wrapper


@dataclass
class Window:
    """Consecutive log lines of one node around an FTS5 hit (plus annotations in that span)."""

    node: str
    t0_ms: int
    t1_ms: int
    text: str
    score: float
    first_id: int = 0
    last_id: int = 0


@dataclass(frozen=True)
class Command:
    """An operator's ACK / SHELVE / UNSHELVE of one alarm point, queued for a node (``commands``)."""

    id: int
    node: str
    verb: str
    machine: str
    tag: str
    level: str | None
    by: str
    created_ms: int
    sent_ms: int | None = None
    done_ms: int | None = None
    result: str | None = None


def now_ms() -> int:
    return int(time.time() * 1000)


def fts_query(query: str) -> str:
    """An FTS5 MATCH expression from free text: its words (ids like AHU-1 as phrases), quoted and
    OR-ed; stop words and single letters are dropped unless nothing else is left."""
    words = [w.lower() for w in _WORD.findall(query)]
    keep = [w for w in words if w not in _STOP and len(w) > 1] or words
    seen: list[str] = []
    for w in keep:
        if w not in seen:
            seen.append(w)
    return " OR ".join('"%s"' % w for w in seen)


def side_files(path: Path) -> list[Path]:
    """A store file and the files SQLite keeps beside it (WAL, shared memory, rollback journal)."""
    return [path] + [path.with_name(path.name + x) for x in ("-wal", "-shm", "-journal")]


def open_reader(path: Path) -> tuple[sqlite3.Connection, bool]:
    """A read-only connection to a store file, and whether it reads it as immutable. No -wal: no gateway has
    the store open and every line is in the file, so it is read as immutable and this reader leaves no
    -wal/-shm behind (a gateway that opens it meanwhile writes to its new WAL, not to the file, until a
    checkpoint: a reader that follows the store reconnects once a -wal appears)."""
    immutable = not side_files(path)[1].exists()
    uri = "file:%s?mode=ro%s" % (urllib.parse.quote(str(path.resolve())), "&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn, immutable


def backup(src: str | Path, dest: str | Path, force: bool = False, progress=None, step: int = 1024) -> dict:
    """Copy the store `src` to the new file `dest` with SQLite's online backup API, safe while a gateway
    writes to it: the copy is the store as it was when the backup began (one read transaction holds that
    snapshot through every step, so the gateway's commits meanwhile neither stop it nor restart it; WAL
    lets the gateway write on). The copy is a single file (rollback journal, no -wal), checked with
    PRAGMA quick_check, made 0640, fsynced and only then renamed to `dest`: a crash leaves no half copy
    under that name. `dest` must not exist unless `force`. progress(copied_pages, total_pages) is called
    after each `step` pages. Returns {"pages", "bytes", "logs", "seconds"}. StoreError for a bad path, a
    file that is not a store, or a copy that fails."""
    src, dest = Path(src), Path(dest)
    if not src.is_file():
        raise StoreError("log store %s %s" % (src, "is not a file" if src.exists() else "does not exist"))
    if dest.is_dir():
        raise StoreError("backup file %s is a directory: give a file name" % dest)
    if not dest.parent.is_dir():
        raise StoreError("backup file %s: directory %s does not exist (create it first)" % (dest, dest.parent))
    if dest.exists() and dest.resolve() == src.resolve():
        raise StoreError("backup file %s is the store itself: give another file" % dest)
    if dest.exists() and not force:
        raise StoreError("backup file %s exists: give --force to replace it" % dest)
    t0 = time.monotonic()
    uri = "file:%s?mode=ro" % urllib.parse.quote(str(src.resolve()))
    tmp = dest.with_name(".%s.%d.partial" % (dest.name, os.getpid()))
    made = False
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as e:
        raise StoreError("cannot read log store %s: %s" % (src, e)) from None
    try:
        db.execute("PRAGMA busy_timeout=5000")
        db.execute("BEGIN")  # the snapshot every step copies
        if dict(db.execute("SELECT key, value FROM meta").fetchall()).get("schema") != SCHEMA_NAME:
            raise StoreError("%s is not an edgetwin log store" % src)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
        made = True
        out = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.backup(out, pages=step, progress=None if progress is None else
                      lambda _st, left, total: progress(total - left, total))
            db.execute("COMMIT")
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            ok = out.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise StoreError("the copy of %s does not check (%s): nothing was written to %s" % (src, ok, dest))
            pages = int(out.execute("PRAGMA page_count").fetchone()[0])
            top = int(out.execute("SELECT coalesce(max(id), 0) FROM logs").fetchone()[0])
            gone = out.execute("SELECT value FROM meta WHERE key='logs_pruned'").fetchone()
        finally:
            out.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if force:
            os.replace(tmp, dest)
        else:
            os.link(tmp, dest)  # never replaces a file that appeared meanwhile
            os.unlink(tmp)
        made = False
        fd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the new name survives a power cut too
        finally:
            os.close(fd)
    except sqlite3.Error as e:
        raise StoreError("cannot back up %s to %s: %s" % (src, dest, e)) from None
    except FileExistsError:
        raise StoreError("backup file %s exists: give --force to replace it" % dest) from None
    except OSError as e:
        raise StoreError("cannot write backup file %s: %s" % (e.filename or dest, e.strerror or e)) from None
    finally:
        db.close()
        if made:
            remove_files(side_files(tmp))
    return {"pages": pages, "bytes": dest.stat().st_size, "logs": top - (int(gone[0]) if gone else 0),
            "seconds": round(time.monotonic() - t0, 3)}


def _check_int(name: str, v: object, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise StoreError("%s must be an int in %d..%d, got %r" % (name, lo, hi, v))
    return v


def _check_hash(h: object) -> str | None:
    if h is not None and not (isinstance(h, str) and _HASH.fullmatch(h)):
        raise StoreError("a plant description's hash is 16 hex digits or None, got %r" % (h,))
    return h


def read_plant(db: sqlite3.Connection, h: str | None, cache: dict):
    """The description of hash `h` (a host.plantdesc.PlantDesc) from a store's ``plants``, through any of its
    connections (the store's, the outbox's, the dashboard's): the built-in simulator's for None, and for its
    own hash when it was never kept; None for a hash the store does not know. cache: hash -> PlantDesc (a
    description never changes under its hash)."""
    from host import plantdesc

    _check_hash(h)
    if h is None:
        return plantdesc.builtin()
    desc = cache.get(h)
    if desc is None:
        try:
            row = db.execute("SELECT text FROM plants WHERE hash=?", (h,)).fetchone()
        except sqlite3.OperationalError:  # a store before schema 3 (read as it is): no descriptions
            row = None
        if row is not None:
            desc = cache[h] = plantdesc.from_dict(json.loads(row[0]), h)
        elif plantdesc.SIM_FILE.exists() and plantdesc.builtin().hash == h:
            desc = plantdesc.builtin()
    return desc


def _check_machine(machine: object) -> str:
    if not isinstance(machine, str) or not _MACHINE.fullmatch(machine):
        raise StoreError("machine must be a machine id (docs/PLANT.md: AHU-1, P-1), got %r" % (machine,))
    return machine


def _epoch_int(epoch: object) -> int:
    if isinstance(epoch, (bytes, bytearray)):
        if len(epoch) != 4:
            raise StoreError("epoch must be 4 bytes, got %d" % len(epoch))
        return int.from_bytes(bytes(epoch), "little")
    return _check_int("epoch", epoch, 0, 0xFFFFFFFF)


def remove_files(paths: list[Path]) -> None:
    """Remove the files a failed start created (never one it found), ignoring those already gone."""
    for p in paths:
        try:
            p.unlink()
        except OSError:
            pass


class LogStore:
    """One SQLite store file. Thread-safe for one process (a lock around the connection)."""

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        self._node_ids: dict[str, int] = {}
        if readonly and not self.path.is_file():
            raise StoreError("log store %s does not exist: start the gateway with --db %s first"
                             % (self.path, self.path))
        # what this open creates (a new store file, its WAL and shared-memory files): removed again if it
        # fails. Those of a store that was there are SQLite's to remove (it does at the last close).
        created = [] if readonly or self.path.exists() else [p for p in side_files(self.path) if not p.exists()]
        if not readonly:
            if self.path.exists() and not self.path.is_file():
                raise StoreError("log store path %s is not a file" % self.path)
            if not self.path.parent.is_dir():  # never creates directories
                raise StoreError("log store %s: directory %s does not exist (create it first)"
                                 % (self.path, self.path.parent))
            if not self.path.exists():
                # 0640: the operators' group reads it, nobody else; SQLite gives -wal and -shm the same mode
                try:
                    os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
                except FileExistsError:
                    created.remove(self.path)  # another process made it meanwhile: it is not ours to remove
                except OSError as e:
                    raise StoreError("cannot create log store %s: %s" % (self.path, e.strerror or e)) from None
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        try:
            if readonly:  # this reader sees the store as it was when opened
                self._db, _ = open_reader(self.path)
            else:
                self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA busy_timeout=5000")
                mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError("log store %s: cannot switch to WAL (journal mode %s)" % (self.path, mode))
                self._db.execute("PRAGMA synchronous=FULL")
            if fresh and not readonly:
                self._create()
            self._check()
        except sqlite3.DatabaseError as e:
            self._close_quietly()
            remove_files(created)
            raise StoreError("log store %s is not a usable SQLite database (%s): move it away or give another "
                             "--db path" % (self.path, e)) from None
        except BaseException:
            self._close_quietly()
            remove_files(created)
            raise
        self._in_tx = False
        self.full = ""  # why the last write failed for lack of space ("" once a commit succeeds again)
        self.full_errors = 0  # writes refused for lack of space since the store was opened

    # ---- set-up ----

    def _create(self) -> None:
        # one transaction: a crash while creating leaves an empty file, which the next start recreates
        with self._lock:
            self._db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "INSERT INTO meta VALUES ('schema', '%s'), "
                                   "('version', '%d'); COMMIT;" % (SCHEMA_NAME, SCHEMA_VERSION))

    def _check(self) -> None:
        try:
            rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError:
            raise StoreError("%s is an SQLite database but not an edgetwin log store (no meta table): "
                             "give another --db path" % self.path) from None
        if rows.get("schema") != SCHEMA_NAME:
            raise StoreError("%s is not an edgetwin log store (schema %r)" % (self.path, rows.get("schema")))
        version = rows.get("version")
        if version not in [str(v) for v in range(1, SCHEMA_VERSION + 1)]:
            newer = str(version).isdigit() and int(str(version)) > SCHEMA_VERSION
            raise StoreError("%s is an edgetwin log store of version %s; this edgetwin reads versions 1 to %d%s"
                             % (self.path, version, SCHEMA_VERSION,
                                ": a newer edgetwin wrote it, use that one" if newer else ""))
        cols = self._columns()
        lacks = any(c not in cols.get(t, ()) for t, c, _ in _ADDED_COLUMNS) or not _ADDED_TABLES <= cols.keys()
        if (version != str(SCHEMA_VERSION) or lacks) and not self.readonly:
            self._upgrade()
            cols = self._columns()
        # an older store read as it is (a reader never changes it): what it lacks reads as NULL
        self._lines = "lseq" in cols["logs"]  # the line seq columns
        self._uid = "uid" in cols["nodes"]
        self._plants = "plant" in cols["logs"] and "plants" in cols and "commands" in cols
        self._spans = "spans" in cols["annotations"]
        self._auth = "link_auth" in cols
        self._pruned = "logs_pruned" in cols
        self._descs: dict[str, object] = {}  # hash -> PlantDesc, read once (a description never changes)
        ok = self._db.execute("PRAGMA quick_check").fetchone()[0]
        if ok != "ok":
            raise StoreError("log store %s is corrupt (%s): move it away and restore a backup (made with "
                             "`edgetwin store backup`)" % (self.path, ok))

    def _columns(self) -> dict[str, set[str]]:
        """table -> its column names, for every table of the store."""
        tables = [r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: {r[1] for r in self._db.execute("PRAGMA table_info(%s)" % t)} for t in tables}

    def _upgrade(self) -> None:
        """Bring a store of any earlier shape (schema 1, 2 with or without uid, spans or the outbox, 3 with
        or without the outbox, 4) to schema 5 in ONE transaction: a crash or an error leaves it as it was. What
        to add is read inside the transaction, so two gateways opening the same old store cannot both add
        it; every step is safe to run again (a schema-5 store that lacks a table or column gets it)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cols = self._columns()
            for table, col, decl in _ADDED_COLUMNS:
                if col not in cols[table]:
                    db.execute("ALTER TABLE %s ADD COLUMN %s %s" % (table, col, decl))
            for stmt in _ADDED:
                db.execute(stmt)
            db.execute("UPDATE meta SET value=? WHERE key='version'", (str(SCHEMA_VERSION),))
            db.execute("COMMIT")
        except BaseException as e:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError) and _no_space(e):
                raise StoreError("log store %s: cannot upgrade it to schema %d: %s (free some space)"
                                 % (self.path, SCHEMA_VERSION, e)) from None
            raise

    def _close_quietly(self) -> None:
        try:
            self._db.close()
        except Exception:  # noqa: BLE001
            pass

    def _no_room(self, e: sqlite3.Error) -> None:
        """A write failed for lack of space: roll back what is pending (SQLite may have kept the transaction
        open), so the store is at its last commit, and remember why until a commit succeeds again."""
        with self._lock:
            try:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._in_tx = False
            self._node_ids.clear()  # a node row made in the rolled-back transaction is gone with it
            self.full = str(e)
            self.full_errors += 1

    def limit_pages(self, pages: int | None) -> int:
        """Test hook (the gateway never calls it): cap the store at `pages` database pages (SQLite's
        max_page_count; never below its current size), so that writes fail as on a full disk; None lifts
        the cap. Returns the cap now in force. tests/host/test_store_full.py fills a store this way."""
        self._writable()
        with self._lock:
            n = 2 ** 32 - 2 if pages is None else _check_int("pages", pages, 1, 2 ** 32 - 2)
            return int(self._db.execute("PRAGMA max_page_count=%d" % n).fetchone()[0])

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError("log store %s is open read-only" % self.path)

    # ---- nodes ----

    @_writes
    def node_id(self, name: str, board_id: str = "", uid: str = "") -> int:
        """The id of node `name`, created on first use; `board_id` and `uid` (the node's unique id from
        its HELLO, hex) update the stored ones if given."""
        if not isinstance(name, str) or not name:
            raise StoreError("node name must be a non-empty str, got %r" % (name,))
        with self._lock:
            nid = self._node_ids.get(name)
            if nid is None:
                row = self._db.execute("SELECT id FROM nodes WHERE name=?", (name,)).fetchone()
                if row is None:
                    self._writable()
                    t = now_ms()
                    cur = self._db.execute("INSERT INTO nodes (name, board_id, first_seen_ms, last_seen_ms) "
                                           "VALUES (?, ?, ?, ?)", (name, board_id, t, t))
                    nid = int(cur.lastrowid)
                else:
                    nid = int(row[0])
                self._node_ids[name] = nid
            if board_id:
                self._writable()
                self._db.execute("UPDATE nodes SET board_id=? WHERE id=? AND board_id!=?", (board_id, nid, board_id))
            if uid and self._uid:
                self._writable()
                self._db.execute("UPDATE nodes SET uid=? WHERE id=? AND uid!=?", (uid, nid, uid))
            return nid

    def nodes(self) -> list[dict]:
        with self._lock:
            cur = self._db.execute("SELECT name, board_id, %s, first_seen_ms, last_seen_ms, peer_epoch, last_seq, "
                                   "(SELECT count(*) FROM logs WHERE logs.node=nodes.id), "
                                   "(SELECT count(*) FROM annotations WHERE annotations.node=nodes.id) "
                                   "FROM nodes ORDER BY id" % ("uid" if self._uid else "''"))
            keys = ("name", "board_id", "uid", "first_seen_ms", "last_seen_ms", "peer_epoch", "last_seq", "logs",
                    "annotations")
            return [dict(zip(keys, r)) for r in cur.fetchall()]

    @_writes
    def set_rx_state(self, node: str, peer_epoch: bytes | int, last_seq: int, commit: bool = True) -> None:
        """Persist the link receive state (peer epoch, last seq delivered in order) for Link.restore."""
        self._writable()
        ep = _epoch_int(peer_epoch)
        _check_int("last_seq", last_seq, 0, 0xFFFF)
        with self._lock:
            nid = self.node_id(node)
            self._begin()
            self._db.execute("UPDATE nodes SET peer_epoch=?, last_seq=?, last_seen_ms=? WHERE id=?",
                             (ep, last_seq, now_ms(), nid))
            if commit:
                self.commit()

    def rx_state(self, node: str) -> tuple[bytes, int] | None:
        """(peer epoch as 4 bytes, last seq) persisted for `node`, or None."""
        with self._lock:
            row = self._db.execute("SELECT peer_epoch, last_seq FROM nodes WHERE name=?", (node,)).fetchone()
        if row is None or row[0] is None or not row[0]:
            return None
        return int(row[0]).to_bytes(4, "little"), int(row[1])

    # ---- a signed link's state per node (link_auth) ----

    def peer_counter(self, node: str) -> bytes | None:
        """The highest signed-frame counter accepted from `node` (6 bytes, as the link keeps it), or None."""
        if not self._auth:
            return None
        with self._lock:
            row = self._db.execute("SELECT la.peer_counter FROM link_auth la JOIN nodes ON nodes.id=la.node "
                                   "WHERE nodes.name=?", (node,)).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    @_writes
    def set_peer_counter(self, node: str, counter: bytes, commit: bool = True) -> None:
        """Persist the highest signed-frame counter accepted from `node` (6 bytes); with commit=False it goes
        into the open transaction, with the lines it covers."""
        self._writable()
        # the counter (6 bytes), optionally followed by the 8-byte fingerprint of the key it was signed with
        if not isinstance(counter, (bytes, bytearray)) or len(counter) not in (PEER_COUNTER_BYTES, PEER_COUNTER_BYTES + 8):
            raise StoreError("counter must be %d bytes (+ an 8-byte key id), got %r" % (PEER_COUNTER_BYTES, counter))
        with self._lock:
            nid = self.node_id(node)
            self._begin()
            self._db.execute("INSERT INTO link_auth (node, peer_counter) VALUES (?, ?) ON CONFLICT (node) DO "
                             "UPDATE SET peer_counter=excluded.peer_counter", (nid, bytes(counter)))
            if commit:
                self.commit()

    @_writes
    def reserve_tx_counter(self, node: str, block: int, floor: int = 0) -> int:
        """The start of a fresh range of `block` counter values for frames the gateway signs to `node` (the
        first call for a node returns 1; never below `floor`). start + block is committed before it returns
        (with whatever else is pending), so a restarted gateway never signs with a value it may have used."""
        self._writable()
        _check_int("block", block, 1, 1 << 32)
        with self._lock:
            nid = self.node_id(node)
            self._begin()
            self._db.execute("INSERT OR IGNORE INTO link_auth (node) VALUES (?)", (nid,))
            start = max(int(floor), int(self._db.execute("SELECT tx_next FROM link_auth WHERE node=?", (nid,)).fetchone()[0]))
            if start + block > 1 << (8 * PEER_COUNTER_BYTES):
                self.rollback()
                raise StoreError("node %s: the link's %d-bit counter is spent: give the node a new key"
                                 % (node, 8 * PEER_COUNTER_BYTES))
            self._db.execute("UPDATE link_auth SET tx_next=? WHERE node=?", (start + block, nid))
            self.commit()
            return start

    # ---- model updates over the link (edgetwin update; host/session.py sends them) ----

    def update_job(self, node: str) -> dict | None:
        """The model update queued or under way for `node` (a dict, JSON in meta 'update:NODE'), or None."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", ("update:" + node,)).fetchone()
        if row is None:
            return None
        try:
            job = json.loads(row[0])
        except ValueError:
            return None
        return job if isinstance(job, dict) else None

    @_writes
    def set_update_job(self, node: str, job: dict | None) -> None:
        """Queue, progress or end (None: forget) `node`'s update; committed at once (another process waits)."""
        self._writable()
        with self._lock:
            self._begin()
            if job is None:
                self._db.execute("DELETE FROM meta WHERE key=?", ("update:" + node,))
            else:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("update:" + node, json.dumps(job)))
            self.commit()

    # ---- writes ----

    def _begin(self) -> None:
        if not self._in_tx:
            self._db.execute("BEGIN IMMEDIATE")
            self._in_tx = True

    @_writes
    def begin(self) -> None:
        """Open the write transaction now, so that what follows (a new node row too) is kept or rolled
        back as one (edgetwin import)."""
        self._writable()
        with self._lock:
            self._begin()

    @_writes
    def commit(self) -> None:
        """Make every write so far durable (fsync of the WAL)."""
        with self._lock:
            if self._in_tx:
                self._db.execute("COMMIT")
                self._in_tx = False
                self.full = ""

    def rollback(self) -> None:
        with self._lock:
            if self._in_tx:
                self._db.execute("ROLLBACK")
                self._in_tx = False

    @property
    def pending(self) -> bool:
        """True while writes wait for commit()."""
        return self._in_tx

    @_writes
    def add_log(self, node: str, epoch: bytes | int, seq: int, ticks: int, wall_ms: int, level: int, text: str,
                commit: bool = True, boot: int = 0, lseq: int = 0, flags: int = 0, plant: str | None = None) -> bool:
        """Store one log line; False if (node, epoch, seq) or (node, boot, lseq) is already stored (a
        duplicate: nothing changes). boot/lseq 0: the line has no line seq (stored as NULL). plant: the hash
        of the description the node named for it (its PLANT line), None for the built-in simulator's.

        commit=False leaves it in the open transaction until commit()."""
        self._writable()
        _check_hash(plant)
        ep = _epoch_int(epoch)
        _check_int("boot", boot, 0, 0xFFFF)
        _check_int("lseq", lseq, 0, (1 << 30) - 1)
        _check_int("flags", flags, 0, 0xFF)
        _check_int("seq", seq, 0, (1 << 63) - 1)
        _check_int("ticks", ticks, 0, (1 << 30) - 1)
        _check_int("wall_ms", wall_ms, 0, (1 << 63) - 1)
        _check_int("level", level, 0, 7)
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        if not isinstance(text, str):
            raise StoreError("text must be str or bytes, got %s" % type(text).__name__)
        with self._lock:
            nid = self.node_id(node)
            self._begin()
            cur = self._db.execute("INSERT OR IGNORE INTO logs (node, epoch, seq, ticks, wall_ms, level, text, boot, "
                                   "lseq, flags, plant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                   (nid, ep, seq, ticks, wall_ms, level, text, boot or None, lseq or None, flags,
                                    plant))
            added = cur.rowcount == 1
            if commit:
                self.commit()
            return added

    def last_seq(self, node: str, epoch: bytes | int) -> int | None:
        """The highest stored seq of (node, epoch), or None."""
        ep = _epoch_int(epoch)
        with self._lock:
            row = self._db.execute("SELECT max(seq) FROM logs JOIN nodes ON nodes.id=logs.node "
                                   "WHERE nodes.name=? AND epoch=?", (node, ep)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    @_writes
    def add_annotation(self, node: str, t0_ms: int, t1_ms: int, text: str, verified: bool, tokens: int,
                       commit: bool = True, spans: list | None = None) -> int:
        """Store one committed annotation; returns its id. spans: [(kind, text), ...] (see the module
        docstring) whose texts join to `text`, or None when unknown."""
        self._writable()
        _check_int("t0_ms", t0_ms, 0, (1 << 63) - 1)
        _check_int("t1_ms", t1_ms, t0_ms, (1 << 63) - 1)
        _check_int("tokens", tokens, 0, 1 << 31)
        if not isinstance(text, str):
            raise StoreError("text must be a str, got %s" % type(text).__name__)
        js = None
        if spans is not None:
            if not all(isinstance(p, (tuple, list)) and len(p) == 2 and p[0] in SPAN_KINDS and isinstance(p[1], str)
                       for p in spans) or "".join(p[1] for p in spans) != text:
                raise StoreError("spans must be (kind, text) pairs, kind one of %s, whose texts join to the text"
                                 % ", ".join(SPAN_KINDS))
            js = json.dumps([[k, t] for k, t in spans])
        with self._lock:
            nid = self.node_id(node)
            self._begin()
            cur = self._db.execute("INSERT INTO annotations (node, t0_ms, t1_ms, text, verified, tokens, created_ms, "
                                   "spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                   (nid, t0_ms, t1_ms, text, 1 if verified else 0, tokens, now_ms(), js))
            if commit:
                self.commit()
            return int(cur.lastrowid)

    # ---- plant descriptions ----

    @_writes
    def add_plant(self, desc, commit: bool = True) -> bool:
        """Keep a description (host/plantdesc.PlantDesc) by its hash; False when that hash is already kept
        (every version a node ever named stays: the lines it described still need it)."""
        self._writable()
        h = getattr(desc, "hash", None)
        if not h or not isinstance(getattr(desc, "text", None), str) or not desc.text:
            raise StoreError("add_plant needs a PlantDesc with its hash and text, got %r" % (desc,))
        _check_hash(h)
        with self._lock:
            self._begin()
            cur = self._db.execute("INSERT OR IGNORE INTO plants (hash, name, text, added_ms) VALUES (?, ?, ?, ?)",
                                   (h, desc.name, desc.text, now_ms()))
            if commit:
                self.commit()
            return cur.rowcount == 1

    def plant(self, h: str | None):
        """The description of hash `h` (a PlantDesc) as kept; the built-in simulator's for None (and for its
        own hash when it was never kept); None for a hash the store does not know."""
        with self._lock:
            return read_plant(self._db, h, self._descs)

    def plants(self) -> dict:
        """Every kept description: hash -> PlantDesc, oldest first."""
        if not self._plants:
            return {}
        with self._lock:
            hashes = [h for (h,) in self._db.execute("SELECT hash FROM plants ORDER BY added_ms, hash")]
        return {h: self.plant(h) for h in hashes}

    def node_plant(self, node: str) -> str | None:
        """The hash of the description node `node` named last (None: the simulator's, or an unknown node)."""
        if not self._plants:
            return None
        with self._lock:
            row = self._db.execute("SELECT plant FROM nodes WHERE name=?", (node,)).fetchone()
        return None if row is None else row[0]

    @_writes
    def set_node_plant(self, node: str, h: str | None, commit: bool = True) -> None:
        """Record that `node` named description `h` (its PLANT line); the node row is made on first use."""
        self._writable()
        _check_hash(h)
        with self._lock:
            nid = self.node_id(node)
            self._begin()
            self._db.execute("UPDATE nodes SET plant=? WHERE id=?", (h, nid))
            if commit:
                self.commit()

    def line_plants(self, ids) -> dict[int, str | None]:
        """line id -> the hash of the description it was stored with (None: the simulator's), for the ids
        that are stored."""
        ids = [_check_int("id", i, 0, (1 << 63) - 1) for i in ids]
        out: dict[int, str | None] = {}
        with self._lock:
            for k in range(0, len(ids), 500):  # SQLite's limit on bound parameters
                part = ids[k:k + 500]
                sql = "SELECT id, %s FROM logs WHERE id IN (%s)" % ("plant" if self._plants else "NULL",
                                                                     ",".join("?" * len(part)))
                out.update((int(i), p) for i, p in self._db.execute(sql, part).fetchall())
        return out

    # ---- operators' commands (edgetwin ack: queued here, sent by the gateway once the node is there) ----

    @_writes
    def queue_command(self, node: str, verb: str, machine: str, tag: str, level: str | None, by: str) -> int:
        """Queue `verb` (ACK, SHELVE, UNSHELVE) of `machine`'s alarm point `tag` (of `level`, None: every
        level of the tag) for `node`, by operator `by`; returns its id. Committed at once: no gateway needs to
        run, the next one to serve the node sends it."""
        from host.plantlines import ALARM_LEVELS, ID_RE, TAG_RE

        self._writable()
        if not isinstance(node, str) or not node:
            raise StoreError("node name must be a non-empty str, got %r" % (node,))
        if verb not in COMMAND_VERBS:
            raise StoreError("verb must be one of %s, got %r" % (", ".join(COMMAND_VERBS), verb))
        if not isinstance(machine, str) or not ID_RE.fullmatch(machine):
            raise StoreError("machine must be a machine id (docs/PLANT.md: AHU-1, P-1), got %r" % (machine,))
        if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
            raise StoreError("tag must be an alarm tag (lower case, digits, _), got %r" % (tag,))
        if level is not None and level not in ALARM_LEVELS:
            raise StoreError("level must be %s or None, got %r" % (", ".join(ALARM_LEVELS), level))
        if not isinstance(by, str) or not _BY.fullmatch(by):
            raise StoreError("by must be 1..32 letters, digits, _ . or -, got %r" % (by,))
        with self._lock:
            self._begin()
            cur = self._db.execute("INSERT INTO commands (node, verb, machine, tag, level, by, created_ms) "
                                   "VALUES (?, ?, ?, ?, ?, ?, ?)", (node, verb, machine, tag, level, by, now_ms()))
            self.commit()
            return int(cur.lastrowid)

    def pending_commands(self, node: str) -> list[Command]:
        """`node`'s commands not delivered yet, oldest first: those never sent, and those sent that the node's
        link never acknowledged (the node went away, rebooted, or the gateway restarted): the gateway sends
        them again, and the node applies a command id once (docs/PROTOCOL.md 3.11)."""
        if not self._plants:
            return []
        with self._lock:
            rows = self._db.execute("SELECT %s FROM commands WHERE node=? AND done_ms IS NULL "
                                    "ORDER BY id" % _COMMAND_COLS, (node,)).fetchall()
        return [Command(*r) for r in rows]

    def command(self, cid: int) -> Command | None:
        if not self._plants:
            return None
        _check_int("id", cid, 0, (1 << 63) - 1)
        with self._lock:
            row = self._db.execute("SELECT %s FROM commands WHERE id=?" % _COMMAND_COLS, (cid,)).fetchone()
        return None if row is None else Command(*row)

    @_writes
    def _command_update(self, cid: int, sql: str, args: tuple) -> bool:
        self._writable()
        _check_int("id", cid, 1, (1 << 63) - 1)
        with self._lock:
            if self._db.execute("SELECT 1 FROM commands WHERE id=?", (cid,)).fetchone() is None:
                raise StoreError("no command %d" % cid)
            self._begin()
            n = self._db.execute(sql, args + (cid,)).rowcount
            self.commit()
            return n == 1

    def command_sent(self, cid: int, ms: int) -> bool:
        """Mark command `cid` sent at wall time `ms` (its first sending); False when it was sent already."""
        _check_int("ms", ms, 0, (1 << 63) - 1)
        return self._command_update(cid, "UPDATE commands SET sent_ms=? WHERE sent_ms IS NULL AND id=?", (ms,))

    def command_done(self, cid: int, ms: int, result: str) -> bool:
        """Record command `cid`'s outcome (the node's line that applied it, or why it was not); False when
        it was done already."""
        _check_int("ms", ms, 0, (1 << 63) - 1)
        if not isinstance(result, str) or not result:
            raise StoreError("result must be a non-empty str, got %r" % (result,))
        return self._command_update(cid, "UPDATE commands SET done_ms=?, result=? WHERE done_ms IS NULL AND id=?",
                                    (ms, result))

    # ---- reads ----

    def logs(self, node: str | None = None, limit: int = 1000000) -> list[dict]:
        """Stored lines in arrival order (all nodes, or one)."""
        cols = "boot, lseq, flags" if self._lines else "NULL, NULL, 0"
        sql = ("SELECT nodes.name, epoch, seq, ticks, wall_ms, level, text, %s FROM logs JOIN nodes "
               "ON nodes.id=logs.node" % cols)
        args: tuple = ()
        if node is not None:
            sql += " WHERE nodes.name=?"
            args = (node,)
        sql += " ORDER BY logs.id LIMIT ?"
        keys = ("node", "epoch", "seq", "ticks", "wall_ms", "level", "text", "boot", "lseq", "flags")
        with self._lock:
            return [dict(zip(keys, r)) for r in self._db.execute(sql, args + (limit,)).fetchall()]

    # ---- loss accounting by line seq (protocol 1.1) ----

    def _line_groups(self, node: str) -> list[tuple]:
        # (boot, epoch-or-0, max lseq, distinct lseqs, lines) per run of line seqs: a boot of a node with a
        # spill ring (boot > 0, spilled lines may arrive under a later link epoch), else one link epoch
        # spill ring (boot > 0, spilled lines may arrive under a later link epoch), else one link epoch. The
        # line seqs of lines prune() gave up count as there (they were stored: no loss).
        if not self._lines:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT boot, CASE WHEN boot IS NULL THEN epoch ELSE 0 END AS ep, max(lseq), count(DISTINCT lseq), "
                "count(*) FROM logs JOIN nodes ON nodes.id=logs.node WHERE nodes.name=? AND lseq IS NOT NULL "
                "GROUP BY boot, ep ORDER BY min(logs.id)", (node,)).fetchall()
            gone = self._pruned_runs(node)
        return [(b, e, mx, n + gone.get((b or 0, e), (0, 0))[0], c) for b, e, mx, n, c in rows]

    def _pruned_runs(self, node: str) -> dict[tuple[int, int], tuple[int, int]]:
        """(boot or 0, epoch-or-0) -> (line seqs pruned, the highest of them) for `node`. Lock held."""
        if not self._pruned:
            return {}
        return {(b, e): (n, hi) for b, e, n, hi in self._db.execute(
            "SELECT grp_boot, grp_epoch, lseqs, lseq_hi FROM logs_pruned JOIN nodes ON nodes.id=logs_pruned.node "
            "WHERE nodes.name=?", (node,)).fetchall()}

    def line_gaps(self, node: str) -> int:
        """Line seqs missing in the store for `node`: per run, the seqs 1..max not stored. Lines still
        on their way (after the newest one stored) are not counted."""
        return sum(int(mx) - int(n) for _b, _e, mx, n, _c in self._line_groups(node))

    def missing_lines(self, node: str, limit: int = 100000) -> list[tuple[int, int]]:
        """(boot, lseq) of the missing lines of `node` (boot 0: a node without a spill ring), oldest first.
        Up to the highest line seq prune() gave up in a run, a seq not stored was pruned or missing before:
        line_gaps counts the missing ones, this list has only those after it."""
        out: list[tuple[int, int]] = []
        with self._lock:
            gone = self._pruned_runs(node)
        for boot, ep, mx, _n, _c in self._line_groups(node):
            low = gone.get((boot or 0, ep), (0, 0))[1]
            with self._lock:
                if boot is None:
                    have = self._db.execute("SELECT lseq FROM logs JOIN nodes ON nodes.id=logs.node WHERE nodes.name=? "
                                            "AND boot IS NULL AND epoch=? AND lseq IS NOT NULL", (node, ep)).fetchall()
                else:
                    have = self._db.execute("SELECT lseq FROM logs JOIN nodes ON nodes.id=logs.node WHERE nodes.name=? "
                                            "AND boot=? AND lseq IS NOT NULL", (node, boot)).fetchall()
            got = set(r[0] for r in have)
            out += [(boot or 0, i) for i in range(low + 1, int(mx) + 1) if i not in got][:limit - len(out)]
        return out

    def reported_dropped(self, node: str) -> int:
        """Lines the node reported it gave up (the highest ``dropped=`` of its NODE reports, per boot or,
        for a node without a spill ring, per link epoch, summed)."""
        cols = "boot" if self._lines else "NULL"
        with self._lock:
            rows = self._db.execute("SELECT %s, epoch, text FROM logs JOIN nodes ON nodes.id=logs.node WHERE "
                                    "nodes.name=? AND level=0 AND text LIKE 'NODE %%'" % cols, (node,)).fetchall()
        best: dict[tuple, int] = {}
        for boot, ep, text in rows:
            m = _DROPPED.search(text)
            if m:
                key = (boot, 0) if boot else (None, ep)
                best[key] = max(best.get(key, 0), int(m.group(1)))
        return sum(best.values())

    def line_loss(self, node: str) -> dict:
        """{'stored': numbered lines stored, 'missing': line_gaps, 'reported': reported_dropped,
        'spilled': lines stored that waited in the node's flash ring} for `node`."""
        groups = self._line_groups(node)
        spilled = 0
        if self._lines:
            with self._lock:
                spilled = int(self._db.execute("SELECT count(*) FROM logs JOIN nodes ON nodes.id=logs.node WHERE "
                                               "nodes.name=? AND flags & 1", (node,)).fetchone()[0])
        return {"stored": sum(int(c) for *_x, c in groups), "missing": sum(int(mx) - int(n) for _b, _e, mx, n, _c in groups),
                "reported": self.reported_dropped(node), "spilled": spilled}

    def annotations(self, node: str | None = None) -> list[dict]:
        """Stored annotations in commit order; "spans" is the decoded list of [kind, text] or None."""
        sql = ("SELECT nodes.name, t0_ms, t1_ms, text, verified, tokens, %s FROM annotations "
               "JOIN nodes ON nodes.id=annotations.node" % ("spans" if self._spans else "NULL"))
        args: tuple = ()
        if node is not None:
            sql += " WHERE nodes.name=?"
            args = (node,)
        keys = ("node", "t0_ms", "t1_ms", "text", "verified", "tokens", "spans")
        with self._lock:
            rows = [dict(zip(keys, r)) for r in self._db.execute(sql + " ORDER BY annotations.id", args).fetchall()]
        for r in rows:
            r["spans"] = json.loads(r["spans"]) if r["spans"] else None
        return rows

    def count_logs(self) -> int:
        """The number of lines stored. A line takes rowid max + 1 (no AUTOINCREMENT; an ignored duplicate or a
        rolled-back insert takes none) and only prune() deletes lines, never the newest id, counting them in
        meta ``logs_pruned``: so it is the largest id less that count, two index seeks, where count(*) reads
        every line (the gateway's status asks twice a second; a month of lines is millions)."""
        with self._lock:
            top = int(self._db.execute("SELECT coalesce(max(id), 0) FROM logs").fetchone()[0])
            row = self._db.execute("SELECT value FROM meta WHERE key='logs_pruned'").fetchone()
        return top - (int(row[0]) if row else 0)

    def windows(self, query: str, limit: int = 20, lines: int = 8, minutes: tuple | list = (),
                machines: tuple | list = ()) -> list[Window]:
        """Log windows for a free-text query, best first.

        Each FTS5 hit (bm25 rank) becomes the `lines` consecutive lines of its node around it (half
        before, half after, in arrival order), with the annotations of that node whose span overlaps
        the window's wall time appended as "NOTE: ..." lines. Hits inside a window already returned
        add to its score instead of making another. score = -bm25 (higher is better). Level-0 lines
        (the node's own "NODE heap=..." reports) are diagnostics of the node, not of the plant: they
        are never a hit nor part of a window.

        What a question pins down counts more (host/logwords.py finds it): a hit whose line names one of
        `machines` (ids such as "AHU-1") scores MACHINE_BOOST times, one whose own timestamp is of one of
        `minutes` ("HH:MM") MINUTE_BOOST times, and those hits are searched first, so the line limit
        never crowds them out."""
        if not isinstance(query, str):
            raise StoreError("query must be a str, got %s" % type(query).__name__)
        _check_int("limit", limit, 1, 10000)
        _check_int("lines", lines, 1, 1000)
        for name, vals, pat in (("minutes", minutes, _MINUTE), ("machines", machines, _MACHINE)):
            if not isinstance(vals, (tuple, list)) or len(vals) > 16 or not all(
                    isinstance(v, str) and pat.fullmatch(v) for v in vals):
                raise StoreError("%s must be at most 16 strings like %s, got %r"
                                 % (name, "'HH:MM'" if name == "minutes" else "'AHU-1' (machine ids)", vals))
        match = fts_query(query)
        if not match:
            return []
        out: list[Window] = []
        sql = ("SELECT logs.id, logs.node, bm25(logs_fts) FROM logs_fts JOIN logs ON logs.id=logs_fts.rowid "
               "WHERE logs_fts MATCH ? AND logs.level>0%s ORDER BY bm25(logs_fts) LIMIT ?")
        # substr: the line's "HH:MM" (docs/PLANT.md: every plant line starts with its UTC time)
        at = (" AND substr(logs.text, 12, 5) IN (%s)" % ",".join("?" * len(minutes)), tuple(minutes))
        anytime = ("", ())
        tiers = []  # (MATCH, condition, boost), most pinned down first
        if machines:
            of = "(%s) AND (%s)" % (" OR ".join('"%s"' % m.lower() for m in machines), match)
            # the id as a word of the line: FTS5 reads "P-1" as the phrase "p 1", which "P=1.2bar" holds too
            on = (" AND (%s)" % " OR ".join(["instr(logs.text, ?) > 0"] * len(machines)),
                  tuple(" %s " % m for m in machines))
            tiers += [(of, (on[0] + at[0], on[1] + at[1]), MACHINE_BOOST * MINUTE_BOOST)] if minutes else []
            tiers += [(of, on, MACHINE_BOOST)]
        tiers += [(match, at, MINUTE_BOOST)] if minutes else []
        tiers += [(match, anytime, 1.0)]
        with self._lock:
            try:
                hits: list[tuple[int, int, float]] = []
                seen: set = set()
                for m, (cond, args), boost in tiers:
                    n = limit * lines * (4 if boost == 1.0 else 1)
                    for lid, nid, rank in self._db.execute(sql % cond, (m, *args, n)).fetchall():
                        if lid not in seen:
                            seen.add(lid)
                            hits.append((lid, nid, rank * boost))
            except sqlite3.OperationalError as e:
                raise StoreError("query %r could not be searched: %s" % (query, e)) from None
            names = dict(self._db.execute("SELECT id, name FROM nodes").fetchall())
            spans: list[tuple[int, int, int, Window]] = []  # node, first id, last id, window
            for lid, nid, rank in hits:
                score = -float(rank)
                covered = next((w for n, a, b, w in spans if n == nid and a <= lid <= b), None)
                if covered is not None:
                    covered.score += score
                    continue
                if len(out) >= limit:
                    continue
                w = self._window_at(nid, names.get(nid, "?"), lid, lines, score)
                spans.append((nid, w.first_id, w.last_id, w))
                out.append(w)
        out.sort(key=lambda w: -w.score)
        return out

    def _window_at(self, nid: int, name: str, lid: int, lines: int, score: float) -> Window:
        """The `lines` plant lines of node `nid` around line `lid` (half before, half after), with the node's
        annotations over that span as NOTE lines. The caller holds the lock."""
        before = (lines - 1) // 2
        after = lines - 1 - before
        prev = self._db.execute("SELECT id, wall_ms, level, text FROM logs WHERE node=? AND id<? "
                                "AND level>0 ORDER BY id DESC LIMIT ?", (nid, lid, before)).fetchall()[::-1]
        rest = self._db.execute("SELECT id, wall_ms, level, text FROM logs WHERE node=? AND id>=? "
                                "AND level>0 ORDER BY id LIMIT ?", (nid, lid, after + 1 + (before - len(prev))))
        rows = prev + rest.fetchall()
        t0 = rows[0][1]
        t1 = rows[-1][1]
        text = [r[3] for r in rows]
        notes = self._db.execute("SELECT text, verified FROM annotations WHERE node=? AND t1_ms>=? "
                                 "AND t0_ms<=? ORDER BY t0_ms, id", (nid, t0, t1)).fetchall()
        text += ["NOTE%s: %s" % ("" if v else " (unverified)", t) for t, v in notes]
        return Window(name, t0, t1, "\n".join(text), score, rows[0][0], rows[-1][0])

    def _record_window(self, nid: int, lid: int, lines: int) -> Window:
        """_window_at for a line found by the plant's record (score 0.0: not a bm25 hit). Lock held."""
        name = self._db.execute("SELECT name FROM nodes WHERE id=?", (nid,)).fetchone()
        return self._window_at(nid, name[0] if name else "?", lid, lines, 0.0)

    def _lines_holding(self, *words: str, after: int = 0):
        """(id, node, text) of the plant lines after line id `after` that hold every word (a machine id as
        its phrase), in order, from the FTS5 index (a month of a node's lines is millions: no scan). The
        words are checked ids and verbs, never user text. The caller holds the lock."""
        match = " AND ".join('"%s"' % w.lower() for w in words)
        return self._db.execute("SELECT logs.id, logs.node, logs.text FROM logs_fts JOIN logs ON "
                                "logs.id=logs_fts.rowid WHERE logs_fts MATCH ? AND logs.id>? AND logs.level>0 "
                                "ORDER BY logs.id", (match, after))

    def _raises(self, machine: str, level: str | None, words, minute: str | None) -> list[tuple]:
        """machine's "ALARM <level> <machine> <tag> ... RAISED" lines as (tag words held, id, node, level, tag), in
        order, of `level` and `minute` when given, only those whose tag holds the most of `words` (all of
        them when no tag holds any). The caller holds the lock."""
        want = {str(w).lower() for w in words}
        raises = []
        for lid, nid, text in self._lines_holding("alarm", "raised", machine):
            f = text.split()
            if len(f) < 6 or f[1] != "ALARM" or f[3] != machine or f[-1] != "RAISED" or (level and f[2] != level):
                continue
            if minute is not None and text[11:16] != minute:
                continue
            raises.append((len(set(f[4].lower().split("_")) & want), lid, nid, f[2], f[4]))
        best = max((r[0] for r in raises), default=0)
        return [r for r in raises if r[0] == best]

    def first_raise(self, machine: str, words: tuple | list | set = (), lines: int = 8,
                    tags: tuple | list | set | None = None) -> Window | None:
        """The window around `machine`'s first "ALARM ... RAISED" line: when a machine "first showed" a fault.
        With `tags` (the caller's: those of the signals a question names, host/logwords.onset), only a HI, HIHI,
        LO or LOLO raise of one of them counts (a BAD raise is a sensor's fault, not the machine's); else the
        tags that hold most of `words` (any tag when none holds one). None when it never raised one."""
        _check_machine(machine)
        _check_int("lines", lines, 1, 1000)
        if tags is not None:
            if not isinstance(tags, (tuple, list, set)) or not all(isinstance(t, str) for t in tags):
                raise StoreError("tags must be a list of alarm tags or None, got %r" % (tags,))
            want = set(tags)
        with self._lock:
            if tags is None:
                picked = self._raises(machine, None, words, None)
            else:
                picked = [r for r in self._raises(machine, None, (), None) if r[4] in want and r[3] != "BAD"]
            if not picked:
                return None
            _, lid, nid, _, _ = picked[0]
            return self._record_window(nid, lid, lines)

    def tripped(self, machine: str) -> bool:
        """Whether any node logged `machine` tripping ("STATE <machine> <state>->TRIPPED ...")."""
        _check_machine(machine)
        with self._lock:
            for _, _, text in self._lines_holding("state", "tripped", machine):
                f = text.split()
                if len(f) > 3 and f[1] == "STATE" and f[2] == machine and f[3].endswith("->TRIPPED"):
                    return True
        return False

    def since_ms(self, machine: str | None = None) -> int | None:
        """The wall time (ms) of the earliest line of the nodes that log `machine` (of every node when None):
        how far back "nothing of the kind in the log" reaches. None when no line names it (or none is stored)."""
        if machine is not None:
            _check_machine(machine)
        with self._lock:
            nids = [n for (n,) in self._db.execute("SELECT id FROM nodes")]
            if machine is not None:
                # the id as a word of the line, not only its FTS5 phrase ("P-1" is "p 1", as "P=1.2bar" is)
                nids = [n for n in nids if self._db.execute(
                    "SELECT 1 FROM logs_fts JOIN logs ON logs.id=logs_fts.rowid WHERE logs_fts MATCH ? AND "
                    "logs.node=? AND instr(' ' || logs.text || ' ', ?) > 0 LIMIT 1",
                    ('"%s"' % machine.lower(), n, " %s " % machine)).fetchone()]
            # one index seek per node (logs_node_time), not a scan of the lines
            firsts = [self._db.execute("SELECT min(wall_ms) FROM logs WHERE node=?", (n,)).fetchone()[0] for n in nids]
        firsts = [t for t in firsts if t is not None]
        return min(firsts) if firsts else None

    def machines(self, ids: tuple | list, lines: int = 20000) -> list[str]:
        """Which of the machines `ids` (the machines of one kind in the plants' descriptions, PlantDesc.kinds)
        the latest `lines` plant lines name, sorted: a kind's machines that this store's nodes really log."""
        if not isinstance(ids, (tuple, list)) or len(ids) > 256 or not all(
                isinstance(i, str) and _MACHINE.fullmatch(i) for i in ids):
            raise StoreError("ids must be at most 256 machine ids (docs/PLANT.md: AHU-1, P-1), got %r" % (ids,))
        _check_int("lines", lines, 1, 10 ** 7)
        if not ids:
            return []
        # every line names its machine between spaces ("...Z P-1 RUNNING", "ALARM HI P-1 tag", "STATE P-1 ...")
        held = " OR ".join(["instr(text, ?) > 0"] * len(ids))
        with self._lock:
            rows = self._db.execute("SELECT text FROM (SELECT text FROM logs WHERE level>0 ORDER BY id DESC "
                                    "LIMIT ?) WHERE %s" % held, (lines, *(" %s " % i for i in ids))).fetchall()
        return sorted({i for (t,) in rows for i in ids if " %s " % i in t})

    def alarm_follow(self, machine: str, verb: str, level: str | None = None, words: tuple | list | set = (),
                     minute: str | None = None, lines: int = 8) -> Window | None:
        """The window around the line that acknowledged (verb "ACK") or cleared ("CLEAR") an alarm, found by the
        alarm's own record rather than by words: of `machine`'s "ALARM <level> <machine> <tag> ... RAISED" lines
        (of `level` when given; of the tags that hold most of `words`, "bearing_temp" holding "bearing" and
        "temp"; raised at `minute` "HH:MM" when given, else the latest), the first later line of the same node
        that is "<verb> <level> <machine> <tag>". None when there is no such raise or it has no such line yet.
        The window's score is 0.0 (it is not a bm25 hit)."""
        if verb not in ("ACK", "CLEAR"):
            raise StoreError("verb must be 'ACK' or 'CLEAR', got %r" % (verb,))
        if level is not None and level not in _ALARM_LEVELS:
            raise StoreError("level must be %s or None, got %r" % (", ".join(_ALARM_LEVELS), level))
        _check_machine(machine)
        if minute is not None and not (isinstance(minute, str) and _MINUTE.fullmatch(minute)):
            raise StoreError("minute must be 'HH:MM', got %r" % (minute,))
        _check_int("lines", lines, 1, 1000)
        with self._lock:
            picked = self._raises(machine, level, words, minute)
            if not picked:
                return None
            _, lid, nid, lvl, tag = picked[0] if minute is not None else picked[-1]
            head = [verb, lvl, machine, tag]
            hit = next((fid for fid, node, text in self._lines_holding(verb, machine, after=lid)
                        if node == nid and text.split()[1:5] == head), None)
            if hit is None:
                return None
            return self._record_window(nid, hit, lines)

    # ---- retention ----

    def prune(self, keep_days: int, dry_run: bool = False, batch: int = 5000) -> dict:
        """Delete the lines more than `keep_days` days older than the newest line (its wall time: a store
        read back from an archive is not emptied by today's date), except the lines that must stay:

        - ``unpublished``: lines an MQTT / Sparkplug destination has not acknowledged yet (above the lowest
          ``outbox_marks`` mark of the logs: a destination that never comes back holds them until its
          marks are deleted), and the newest line by id (row ids are never reused: the outbox's marks and
          count_logs rely on it);
        - ``cited``: lines an annotation is about (of its node, wall time within its t0_ms..t1_ms: the
          window ``windows`` shows with it). Annotations themselves are kept.

        Deletes in transactions of `batch` lines, so a gateway writing meanwhile waits for one batch at
        most; the FTS5 index follows (trigger logs_ad) and the line seqs given up are kept per run
        (logs_pruned) so line_gaps does not count them missing. dry_run: count only, change nothing.
        Returns {"cutoff_ms", "old" (lines older than the cutoff), "deleted" (or would be), "cited",
        "unpublished", "kept" (lines left)}."""
        self._writable()
        _check_int("keep_days", keep_days, 0, 1000000)
        _check_int("batch", batch, 1, 10 ** 7)
        if not self._pruned:  # an old store read by a writer is upgraded at open: this is a reader's
            raise StoreError("log store %s: prune needs schema %d" % (self.path, SCHEMA_VERSION))
        with self._lock:
            self.commit()
            newest, top = self._db.execute("SELECT max(wall_ms), coalesce(max(id), 0) FROM logs").fetchone()
            if newest is None:
                return {"cutoff_ms": None, "old": 0, "deleted": 0, "cited": 0, "unpublished": 0, "kept": 0}
            cut = int(newest) - keep_days * MS_PER_DAY
            mark = self._db.execute("SELECT min(acked_through) FROM outbox_marks WHERE source='logs'").fetchone()[0]
            bound = min(top - 1, top if mark is None else int(mark))  # ids above stay
            old = self._count("wall_ms < ?", (cut,))
            unpublished = self._count("wall_ms < ? AND id > ?", (cut, bound))
            nodes = [n for (n,) in self._db.execute("SELECT DISTINCT node FROM logs WHERE wall_ms < ?", (cut,))]
        deleted = 0
        for nid in nodes:
            for lo, hi in self._uncited(nid, cut):
                deleted += self._prune_range(nid, lo, hi, bound, batch, dry_run)
        return {"cutoff_ms": cut, "old": old, "deleted": deleted, "cited": old - unpublished - deleted,
                "unpublished": unpublished, "kept": self.count_logs() - (deleted if dry_run else 0)}

    def _count(self, where: str, args: tuple) -> int:
        return int(self._db.execute("SELECT count(*) FROM logs WHERE " + where, args).fetchone()[0])

    def _uncited(self, nid: int, cut: int) -> list[tuple[int, int]]:
        """The wall-time ranges [lo, hi) before `cut` that none of node `nid`'s annotations covers."""
        with self._lock:
            spans = self._db.execute("SELECT t0_ms, t1_ms FROM annotations WHERE node=? AND t0_ms < ? "
                                     "ORDER BY t0_ms", (nid, cut)).fetchall()
        out, lo = [], -(1 << 63)
        for t0, t1 in spans:
            if t0 > lo:
                out.append((lo, min(t0, cut)))
            lo = max(lo, t1 + 1)
        if lo < cut:
            out.append((lo, cut))
        return [(a, b) for a, b in out if a < b]

    def _prune_range(self, nid: int, lo: int, hi: int, bound: int, batch: int, dry_run: bool) -> int:
        """Delete node `nid`'s lines with lo <= wall_ms < hi and id <= bound, `batch` lines a transaction
        (the run's line seqs counted in logs_pruned, the total in meta logs_pruned); how many."""
        where = "node=? AND wall_ms >= ? AND wall_ms < ? AND id <= ?"
        args = (nid, lo, hi, bound)
        if dry_run:
            with self._lock:
                return self._count(where, args)
        done = 0
        while True:
            with self._lock:
                self._begin()
                try:
                    ids = "SELECT id FROM logs WHERE %s ORDER BY id LIMIT %d" % (where, batch)
                    runs = self._db.execute(
                        "SELECT coalesce(boot, 0), CASE WHEN boot IS NULL THEN epoch ELSE 0 END, count(DISTINCT lseq), "
                        "max(lseq) FROM logs WHERE id IN (%s) AND lseq IS NOT NULL GROUP BY 1, 2" % ids,
                        args).fetchall()
                    for b, e, n, hi_lseq in runs:
                        self._db.execute("INSERT INTO logs_pruned VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
                                         "lseqs=lseqs+excluded.lseqs, lseq_hi=max(lseq_hi, excluded.lseq_hi)",
                                         (nid, b, e, n, hi_lseq))
                    n = self._db.execute("DELETE FROM logs WHERE id IN (%s)" % ids, args).rowcount
                    self._db.execute("INSERT INTO meta VALUES ('logs_pruned', ?) ON CONFLICT (key) DO UPDATE SET "
                                     "value=CAST(value AS INTEGER)+excluded.value", (str(n),))
                    self.commit()
                except BaseException:
                    self.rollback()
                    raise
            done += n
            if n < batch:
                return done

    def vacuum(self) -> None:
        """Give the space of deleted lines back to the file system (VACUUM: rewrites the whole file; it
        needs as much free space again, and waits for a gateway's open transaction)."""
        self._writable()
        with self._lock:
            self.commit()
            self._db.execute("VACUUM")

    def outbox(self, dest: str) -> "Outbox":
        """The store as the outbox of destination `dest` (see Outbox): a second connection, for one thread."""
        self._writable()
        return Outbox(self.path, dest)

    def close(self) -> None:
        with self._lock:
            if getattr(self, "_db", None) is None:
                return
            try:
                if not self.readonly:
                    self.commit()
            except StoreFull:  # rolled back: what was pending was never acknowledged to a node
                pass
            finally:
                self._db.close()
                self._db = None  # type: ignore[assignment]

    def __enter__(self) -> "LogStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Outbox:
    """The store as an outbox for one destination `dest` (a broker and topic prefix): the committed rows
    after a mark, and which of them the destination acknowledged.

    It has its own SQLite connection to the store file, used by one thread (the publisher's): in WAL mode
    that connection reads only committed transactions, never the rows the gateway's connection has not
    committed yet, and the gateway's loop never waits on its reads. Its writes (acknowledgements) are small
    transactions with synchronous=NORMAL: one lost on a power cut makes a row go out again, which a
    consumer drops by its id; it never loses one."""

    SOURCES = tuple(_OUTBOX_ROWS)  # the tables: logs, annotations

    def __init__(self, path: str | Path, dest: str, rows: dict | None = None) -> None:
        self.path = Path(path)
        self.dest = dest
        self._rows = rows or _OUTBOX_ROWS  # what a destination reads of each table (SPARKPLUG_ROWS: samples too)
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript("BEGIN IMMEDIATE;" + _OUTBOX_SCHEMA + "COMMIT;")
            self.store_id = self._store_id()
            self.marks = {src: self._mark(src) for src in self.SOURCES}
            self._descs: dict = {}
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError("log store %s: cannot use it as the outbox: %s" % (self.path, e)) from None

    def _store_id(self) -> str:
        # a random id made once per store: row ids restart in a new store, so a consumer's duplicate key
        # is (store, table, id)
        sid = self.meta("store_id")
        if sid is not None:
            return sid
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (os.urandom(6).hex(),))
        return str(self.meta("store_id"))

    def _mark(self, source: str) -> int:
        row = self._db.execute("SELECT acked_through FROM outbox_marks WHERE dest=? AND source=?",
                               (self.dest, source)).fetchone()
        if row is not None:
            return int(row[0])
        # a destination seen for the first time starts at the store's end: what was stored before MQTT was
        # turned on for it is history, not news
        top = self.top(source)
        self._db.execute("INSERT INTO outbox_marks VALUES (?, ?, ?)", (self.dest, source, top))
        return top

    def acked_above(self, source: str) -> set[int]:
        """Ids above the mark that the destination acknowledged (out of order, before a restart)."""
        rows = self._db.execute("SELECT row_id FROM outbox_acked WHERE dest=? AND source=?", (self.dest, source))
        return {int(r[0]) for r in rows.fetchall()}

    def rows(self, source: str, after: int, limit: int = 200) -> list[dict]:
        """Committed rows of `source` with id > `after`, oldest first (logs: all but level-1 samples, unless
        this outbox reads SPARKPLUG_ROWS)."""
        sql, keys = self._rows[source]
        return [dict(zip(keys, r)) for r in self._db.execute(sql, (after, limit)).fetchall()]

    def top(self, source: str) -> int:
        """The newest committed row id of a table (0 when empty)."""
        return int(self._db.execute("SELECT coalesce(max(id), 0) FROM %s" % source).fetchone()[0])

    def recent_logs(self, node: str, limit: int) -> list[dict]:
        """A node's newest `limit` log lines, newest first (what a birth's current values come from)."""
        sql = ("SELECT logs.id, logs.wall_ms, logs.level, logs.text, logs.plant FROM logs WHERE logs.node="
               "(SELECT id FROM nodes WHERE name=?) ORDER BY logs.id DESC LIMIT ?")
        return [dict(zip(("id", "wall_ms", "level", "text", "plant"), r))
                for r in self._db.execute(sql, (node, limit)).fetchall()]

    def latest_annotation(self, node: str) -> dict | None:
        row = self._db.execute("SELECT a.id, a.t0_ms, a.text, a.verified FROM annotations a JOIN nodes n ON "
                               "n.id=a.node WHERE n.name=? ORDER BY a.id DESC LIMIT 1", (node,)).fetchone()
        return None if row is None else dict(zip(("id", "t0_ms", "text", "verified"), row))

    def node_plants(self) -> dict[str, str | None]:
        """node name -> the hash of the description it runs (None: the built-in simulator's)."""
        return {str(r[0]): r[1] for r in self._db.execute("SELECT name, plant FROM nodes").fetchall()}

    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def plant(self, h: str | None):
        """The description a row's ``plant`` names (store.read_plant)."""
        return read_plant(self._db, h, self._descs)

    def latest_node_reports(self) -> list[dict]:
        """Each node's newest NODE report line (its health) and its board and uid, for the retained status."""
        sql = ("SELECT nodes.name, nodes.board_id, nodes.uid, l.id, l.wall_ms, l.text FROM nodes LEFT JOIN logs l "
               "ON l.id=(SELECT max(id) FROM logs WHERE logs.node=nodes.id AND level=0 AND text LIKE 'NODE %') "
               "ORDER BY nodes.id")
        keys = ("node", "board", "uid", "id", "wall_ms", "text")
        return [dict(zip(keys, r)) for r in self._db.execute(sql).fetchall()]

    def ack(self, source: str, ids: list[int], through: int) -> None:
        """Record acknowledged `ids` and move the mark to `through` (every row up to it is done), in one
        transaction."""
        with_ids = [(self.dest, source, int(i)) for i in ids if i > through]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR IGNORE INTO outbox_acked VALUES (?, ?, ?)", with_ids)
            if through != self.marks[source]:
                self._db.execute("UPDATE outbox_marks SET acked_through=? WHERE dest=? AND source=?",
                                 (through, self.dest, source))
                self._db.execute("DELETE FROM outbox_acked WHERE dest=? AND source=? AND row_id<=?",
                                 (self.dest, source, through))
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a write refused for lack of space has rolled it back already
                self._db.execute("ROLLBACK")
            raise
        self.marks[source] = through

    def close(self) -> None:
        try:
            self._db.close()
        except sqlite3.Error:
            pass
