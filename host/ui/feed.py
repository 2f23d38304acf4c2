"""feed.py: the dashboard's view of the store: what it follows, parsed once, bounded in memory.

A Feed follows the log store the way the MQTT publisher does (host/mqtt.py): through its own read-only
SQLite connection, which in WAL mode sees committed rows only and never makes the gateway's loop wait.
poll() reads the rows after its cursors and keeps, per node, the lines logged and spilled and the latest
NODE report (heap, dropped); per machine of a node, its last SERIES samples (docs/PLANT.md's sample
lines: T=, V=, I=, ...) and its alarm raises and trips on the same time axis; and the last NOTES
annotations with their spans (who wrote which piece: host/store.py). Every change bumps `version` and
the changed machine's own version, so a page's event stream sends only what changed.
"""

from __future__ import annotations

import collections
import json
import re
import sqlite3
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

from host.plantlines import PLC_STATES, REPORT, is_trip, report_pairs

SERIES = 240  # samples kept per machine (the plot's width)
EVENTS = 60  # alarm raises and trips kept per machine
NOTES = 200  # annotations kept
HISTORY = 20000  # at start, the lines read back (a store of months is not read whole)
_ID = re.compile(r"(?:CV|P|M|C)-\d{3}\Z")
_VALUE = re.compile(r"(-?\d+(?:\.\d+)?)([A-Za-z0-9/]*)\Z")


def line_time(text: str) -> float | None:
    """The plant line's own UTC timestamp (its first field) in seconds, or None."""
    try:
        return datetime.strptime(text[:20], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def parse_sample(text: str) -> tuple[str, str, dict] | None:
    """(machine, PLC state, {key: (value, unit)}) of a sample line, or None for any other line."""
    f = text.split()
    if len(f) < 4 or not _ID.match(f[1]) or f[2] not in PLC_STATES:
        return None
    vals = {}
    for kv in f[3:]:
        k, _, v = kv.partition("=")
        m = _VALUE.match(v)
        if k and m:
            vals[k] = (float(m.group(1)), m.group(2))
    return f[1], f[2], vals


def parse_event(text: str) -> tuple[str, str, str] | None:
    """(machine, kind, label) for an alarm raise ("alarm") or a trip ("trip"), or None."""
    f = text.split()
    if len(f) >= 8 and f[1] == "ALARM" and f[-1] == "RAISED":
        return f[3], "alarm", "%s %s %s" % (f[2], f[4], f[5])
    if is_trip(f):
        return f[2], "trip", "TRIPPED %s" % f[4]
    return None


class Machine:
    """One machine of one node: its samples and events, newest last, bounded."""

    def __init__(self) -> None:
        self.samples: collections.deque = collections.deque(maxlen=SERIES)  # (t, state, {key: (v, unit)})
        self.events: collections.deque = collections.deque(maxlen=EVENTS)  # (t, kind, label)
        self.version = 0


class NodeView:
    def __init__(self, name: str, board: str = "", uid: str = "") -> None:
        self.name, self.board, self.uid = name, board, uid
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
        # No -wal: no gateway has the store open. Read it as immutable (as LogStore's readers do), so the
        # dashboard leaves no -wal/-shm beside a closed store; poll() reconnects once a gateway opens it.
        path = urllib.parse.quote(str(self.db.resolve()))
        self._immutable = not self._wal().exists()
        self._stamp = self._file_stamp()
        c = sqlite3.connect("file:%s?mode=ro%s" % (path, "&immutable=1" if self._immutable else ""), uri=True,
                            check_same_thread=False)
        c.execute("PRAGMA busy_timeout=5000")
        return c

    def _start(self) -> None:
        db = self._conn
        self._spans = "spans" in {r[1] for r in db.execute("PRAGMA table_info(annotations)").fetchall()}
        lines = "flags & 1" if "flags" in {r[1] for r in db.execute("PRAGMA table_info(logs)").fetchall()} else "0"
        top = db.execute("SELECT coalesce(max(id), 0) FROM logs").fetchone()[0]
        self._log_id = max(0, int(top) - HISTORY)
        self._refresh_nodes()
        for nid, n, sp in db.execute("SELECT node, count(*), sum(%s) FROM logs WHERE id<=? GROUP BY node" % lines,
                                     (self._log_id,)).fetchall():
            if nid in self.nodes:
                self.nodes[nid].lines, self.nodes[nid].spilled = int(n), int(sp or 0)
        top = db.execute("SELECT coalesce(max(id), 0) FROM annotations").fetchone()[0]
        self._note_id = max(0, int(top) - NOTES)
        self._lines_col = lines

    def _refresh_nodes(self) -> None:
        cols = {r[1] for r in self._conn.execute("PRAGMA table_info(nodes)").fetchall()}
        for nid, name, board, uid in self._conn.execute(
                "SELECT id, name, board_id, %s FROM nodes ORDER BY id" % ("uid" if "uid" in cols else "''")):
            v = self.nodes.get(nid)
            if v is None:
                self.nodes[nid] = NodeView(name, board, uid)
            else:
                v.board, v.uid = board, uid

    def poll(self) -> bool:
        """Read what was committed since the last call; True when anything changed."""
        if self._immutable and (self._wal().exists() or self._file_stamp() != self._stamp):
            # a gateway opened the store (follow its WAL from now on), or a writer came and went meanwhile
            self._conn.close()
            self._conn = self._connect()
        db = self._conn
        rows = db.execute("SELECT id, node, wall_ms, level, text, %s FROM logs WHERE id>? ORDER BY id LIMIT 5000"
                          % self._lines_col, (self._log_id,)).fetchall()
        notes = db.execute("SELECT annotations.id, annotations.node, t0_ms, t1_ms, text, verified, tokens, %s "
                           "FROM annotations WHERE id>? ORDER BY id LIMIT 500"
                           % ("spans" if self._spans else "NULL"), (self._note_id,)).fetchall()
        if not rows and not notes:
            return False
        with self._lock:
            if any(r[1] not in self.nodes for r in rows) or any(n[1] not in self.nodes for n in notes):
                self._refresh_nodes()
            for lid, nid, wall_ms, level, text, spilled in rows:
                self._log_id = lid
                self._line(self.nodes.get(nid), wall_ms, level, text, spilled)
            for nid_row in notes:
                aid, nid, t0, t1, text, verified, tokens, spans = nid_row
                self._note_id = aid
                node = self.nodes.get(nid)
                self.notes.append({"id": aid, "node": node.name if node else "?", "t0_ms": t0, "t1_ms": t1,
                                   "text": text, "verified": bool(verified), "tokens": tokens,
                                   "spans": json.loads(spans) if spans else None})
            self.version += 1
        return True

    def _line(self, node: NodeView | None, wall_ms: int, level: int, text: str, spilled: int) -> None:
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
        s = parse_sample(text)
        if s is not None:
            t = line_time(text)
            if t is not None:
                m = node.machines.setdefault(s[0], Machine())
                m.samples.append((t, s[1], s[2]))
                m.version += 1
            return
        e = parse_event(text)
        if e is not None:
            t = line_time(text)
            if t is not None:
                m = node.machines.setdefault(e[0], Machine())
                m.events.append((t, e[1], e[2]))
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
