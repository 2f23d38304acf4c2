"""feed.py: the dashboard's view of the store: what it follows, parsed once, bounded in memory.

A Feed follows the log store the way the MQTT publisher does (host/mqtt.py): through its own read-only
SQLite connection, which in WAL mode sees committed rows only and never makes the gateway's loop wait.
poll() reads the rows after its cursors and keeps, per node, the lines logged and spilled and the latest
NODE report (heap, dropped); per machine of a node, its last SERIES samples (docs/PLANT.md's sample
lines, read by host/plantlines.py: any plant's keys and units) and its alarm raises and trips on the same
time axis, with the plant description its lines were stored with (logs.plant: what the plot's labels, units,
limits and time zone come from); and the last NOTES annotations with their spans (who wrote which piece:
host/store.py). Every change bumps `version` and the changed machine's own version, so a page's event
stream sends only what changed.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import threading
import time
from pathlib import Path

from host import plantlines
from host.plantlines import REPORT, report_pairs
from host.store import open_reader, read_plant

SERIES = 240  # samples kept per machine (the plot's width)
EVENTS = 60  # alarm raises and trips kept per machine
NOTES = 200  # annotations kept
HISTORY = 20000  # at start, the lines read back (a store of months is not read whole)


def sample_of(line: plantlines.Line) -> tuple[str, dict]:
    """(PLC state, {key: (value, unit)}) of a parsed sample line, without its "?" readings (a missing reading
    breaks the plotted line)."""
    return line.plc or "", {k: v for k, v in line.values.items() if v[0] is not None}


def event_of(line: plantlines.Line) -> tuple[str, str] | None:
    """(kind, label) of an alarm raise ("alarm") or a trip ("trip"), or None for any other line."""
    if line.kind == "alarm" and line.verb == "ALARM" and line.astate == "RAISED":
        value = "?" if line.value is None else "%g%s" % (line.value, line.unit)
        return "alarm", "%s %s %s" % (line.level, line.tag, value)
    if line.is_trip:
        return "trip", "TRIPPED %s" % line.cause
    return None


class Machine:
    """One machine of one node: its samples and events, newest last, bounded; the description (its hash) its
    latest line was stored with."""

    def __init__(self) -> None:
        self.samples: collections.deque = collections.deque(maxlen=SERIES)  # (t, state, {key: (v, unit)})
        self.events: collections.deque = collections.deque(maxlen=EVENTS)  # (t, kind, label)
        self.plant: str | None = None
        self.version = 0


class NodeView:
    def __init__(self, name: str, board: str = "", uid: str = "", plant: str | None = None) -> None:
        self.name, self.board, self.uid = name, board, uid
        self.plant = plant  # the hash of the description its latest line was stored with (None: the simulator's)
        self.lines = 0
        self.spilled = 0
        self.report: dict = {}
        self.report_ms = 0
        self.notice = ""
        self.machines: dict[str, Machine] = {}


class Feed:
    """The store's rows, followed; see the module docstring. poll() from one thread (start() runs one)."""

    def __init__(self, db: str | Path, poll_s: float = 0.5) -> None:
        self.db = Path(db)
        self.poll_s = poll_s
        self.nodes: dict[int, NodeView] = {}
        self.notes: collections.deque = collections.deque(maxlen=NOTES)
        self.version = 0
        self._log_id = 0
        self._note_id = 0
        self._spans = False
        self._descs: dict = {}  # hash -> PlantDesc or None (unknown to the store), read by poll()'s thread
        self._lock = threading.Lock()  # held while poll() changes the views; readers take it to copy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn = self._connect()
        self._start()

    def _wal(self) -> Path:
        return self.db.with_name(self.db.name + "-wal")

    def _file_stamp(self) -> tuple:
        st = self.db.stat()
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _connect(self) -> sqlite3.Connection:
        # the dashboard leaves no -wal/-shm beside a closed store; poll() reconnects once a gateway opens it
        self._stamp = self._file_stamp()
        c, self._immutable = open_reader(self.db)
        return c

    def _start(self) -> None:
        db = self._conn
        self._columns()
        lines = self._lines_col
        top = db.execute("SELECT coalesce(max(id), 0) FROM logs").fetchone()[0]
        self._log_id = max(0, int(top) - HISTORY)
        self._refresh_nodes()
        for plant in {None} | {v.plant for v in self.nodes.values()}:
            self._read_desc(plant)
        for nid, n, sp in db.execute("SELECT node, count(*), sum(%s) FROM logs WHERE id<=? GROUP BY node" % lines,
                                     (self._log_id,)).fetchall():
            if nid in self.nodes:
                self.nodes[nid].lines, self.nodes[nid].spilled = int(n), int(sp or 0)
        top = db.execute("SELECT coalesce(max(id), 0) FROM annotations").fetchone()[0]
        self._note_id = max(0, int(top) - NOTES)

    def _columns(self) -> None:
        """What an older store lacks reads as its default; a gateway that opens it upgrades it (poll() looks
        again when it reconnects)."""
        db = self._conn
        self._spans = "spans" in {r[1] for r in db.execute("PRAGMA table_info(annotations)").fetchall()}
        log_cols = {r[1] for r in db.execute("PRAGMA table_info(logs)").fetchall()}
        self._lines_col = "flags & 1" if "flags" in log_cols else "0"
        self._plant_col = "plant" if "plant" in log_cols else "NULL"  # before schema 3: the simulator's lines

    def _refresh_nodes(self) -> None:
        cols = {r[1] for r in self._conn.execute("PRAGMA table_info(nodes)").fetchall()}
        for nid, name, board, uid, plant in self._conn.execute(
                "SELECT id, name, board_id, %s, %s FROM nodes ORDER BY id"
                % ("uid" if "uid" in cols else "''", "plant" if "plant" in cols else "NULL")):
            v = self.nodes.get(nid)
            if v is None:
                self.nodes[nid] = NodeView(name, board, uid, plant)
            else:
                v.board, v.uid = board, uid

    def desc(self, h: str | None):
        """The description of hash `h` (a PlantDesc; h None: the simulator's), or None when the store has none
        by that hash: its lines are plotted as they are, without labels or limits. Only poll() reads the
        store (its connection is its thread's): this is what it read."""
        if h not in self._descs:
            return None
        return self._descs[h]

    def _read_desc(self, h: str | None) -> None:
        try:
            self._descs[h] = read_plant(self._conn, h, {})
        except (OSError, ValueError):  # the simulator's own description missing or broken: plot without it
            self._descs[h] = None

    def poll(self) -> bool:
        """Read what was committed since the last call; True when anything changed."""
        if self._immutable and (self._wal().exists() or self._file_stamp() != self._stamp):
            # a gateway opened the store (follow its WAL from now on), or a writer came and went meanwhile
            self._conn.close()
            self._conn = self._connect()
            self._columns()
        db = self._conn
        rows = db.execute("SELECT id, node, wall_ms, level, text, %s, %s FROM logs WHERE id>? ORDER BY id LIMIT 5000"
                          % (self._lines_col, self._plant_col), (self._log_id,)).fetchall()
        notes = db.execute("SELECT annotations.id, annotations.node, t0_ms, t1_ms, text, verified, tokens, %s "
                           "FROM annotations WHERE id>? ORDER BY id LIMIT 500"
                           % ("spans" if self._spans else "NULL"), (self._note_id,)).fetchall()
        if not rows and not notes:
            return False
        with self._lock:
            if any(r[1] not in self.nodes for r in rows) or any(n[1] not in self.nodes for n in notes):
                self._refresh_nodes()
            for lid, nid, wall_ms, level, text, spilled, plant in rows:
                self._log_id = lid
                self._line(self.nodes.get(nid), wall_ms, level, text, spilled, plant)
            for nid_row in notes:
                aid, nid, t0, t1, text, verified, tokens, spans = nid_row
                self._note_id = aid
                node = self.nodes.get(nid)
                self.notes.append({"id": aid, "node": node.name if node else "?", "t0_ms": t0, "t1_ms": t1,
                                   "text": text, "verified": bool(verified), "tokens": tokens,
                                   "spans": json.loads(spans) if spans else None})
            self.version += 1
        return True

    def _line(self, node: NodeView | None, wall_ms: int, level: int, text: str, spilled: int,
              plant: str | None = None) -> None:
        if node is None:
            return
        node.lines += 1
        node.spilled += 1 if spilled else 0
        if text.startswith("NODE "):
            if text.startswith(REPORT):
                node.report = {k: v for k, v in report_pairs(text) if v}
                node.report_ms = wall_ms
            else:
                node.notice = text[5:]
            return
        line = plantlines.parse(text)
        if line is None:
            return
        node.plant = plant
        if plant not in self._descs:
            self._read_desc(plant)
        if line.kind == "sample":
            m = node.machines.setdefault(line.machine, Machine())
            m.samples.append((float(line.time),) + sample_of(line))
        else:
            e = event_of(line)
            if e is None:
                return
            m = node.machines.setdefault(line.machine, Machine())
            m.events.append((float(line.time),) + e)
        m.plant = plant
        m.version += 1

    # ---- the thread ----

    def start(self) -> "Feed":
        self.poll()
        self._thread = threading.Thread(target=self._run, name="dashboard-feed", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except sqlite3.OperationalError:  # the store busy beyond its timeout: next time
                time.sleep(self.poll_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._conn.close()
