"""`edgetwin import LOGFILE --db DB --node NAME`: load a plain plant log into a log store as the gateway does.

The file holds the lines a node logs (docs/PLANT.md, Log grammar; `python -m tools.train.gen_logs` writes
them), one per line, each ending in a newline. Each line becomes one row of the store's ``logs`` table
(host/store.py: the same table, FTS5 index and node row the gateway writes for a LOG frame), so `edgetwin
ask --db DB` answers questions about any plant log:

- node: NAME (created on first use, as the gateway creates a node row on its first frame);
- level: the one the node's sampler gives the line (shared/plant.py line_into): 2 for ALARM, ACK and LOST,
  3 for a STATE change an interlock tripped, 1 for the rest;
- wall_ms: the line's own timestamp (the plant's UTC clock, whole seconds), as the gateway stores the
  wall time a 1.1 node's LOG frame carries; ticks: ms since the file's first line (mod 2**30);
- epoch: a per-file epoch, the CRC-32 of the file's first line; seq: the line's number in the file (1, 2,
  ...). (node, epoch, seq) is the store's duplicate rule, so importing the same file again, or again after
  more lines were appended to it, stores only the lines not stored yet;
- boot, lseq: NULL, flags 0 (the lines of a 1.0 node: no line seq to check for gaps).

Every line is checked before anything is kept: a missing file, a directory, bytes that are not text, a last
line without its newline (truncated), a line not in the node's format, a bad --node name or a store that
cannot be written is one line naming the file (and the line number) and exit 2. The import is one
transaction: a failed import leaves the store as it was (a store it created is removed again).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sqlite3
import sys
import time
import zlib
from pathlib import Path

from host.errors import UserError

HELP = "load a plain plant log file (the node's line format) into a log store, as the gateway stores LOG lines"
DEFAULT_DB = "edgetwin.db"
LINE_MAX = 128  # shared/plant.LINE_MAX: no node line is longer
PROGRESS_LINES = 100000
PROGRESS_S = 2.0
NAME = re.compile(r"[A-Za-z0-9_.:/@+-]{1,64}")

_TS = r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z"
_ID = r"(?:P|M|C|CV)-\d{3}"
_PLC = r"(?:STOPPED|STARTING|RUNNING|STOPPING|TRIPPED)"
_VALUE = r"(?:\?|-?\d+\.\d(?:C|mm/s|A|bar|m3/h|kPa|m/s)|\d+rpm)"
_SAMPLE = r"%s %s(?: (?:T|V|I|P|Q|dP|N|S)=%s)+" % (_ID, _PLC, _VALUE)
_ALARM = (r"(?:ALARM|ACK|CLEAR|SHELVE|UNSHELVE) (?:HI|HIHI|LO|LOLO|BAD) %s [a-z_]+ %s prio=[1-4] "
          r"(?:RAISED|ACKED|RTN_UNACK|NORMAL|SHELVED)" % (_ID, _VALUE))
_STATE = (r"STATE %s %s->%s (?:cmd=schedule|cmd=operator|ramp=done|reset=operator|"
          r"interlock=(?:HIHI_TEMP|HIHI_VIB|HIHI_CURR|HIHI_DP|LOLO_FLOW|HIHI_PRESS))" % (_ID, _PLC, _PLC))
LINE = re.compile(r"%s (%s|%s|%s|LOST events=\d+)\Z" % (_TS, _SAMPLE, _ALARM, _STATE))


class LogFileError(ValueError):
    """A log file that cannot be imported (the message names the file and the line)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logfile", help="the plain log file, one node line per line (e.g. gen_logs --out FILE)")
    p.add_argument("--db", default=DEFAULT_DB, help="the log store (created if missing; default %s)" % DEFAULT_DB)
    p.add_argument("--node", required=True, help="the node name the lines are stored under (what `ask` shows)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def line_level(text: str) -> int:
    """The level the node's sampler gives a plant line (shared/plant.py line_into)."""
    head = text[21:].split(" ", 1)[0]
    if head in ("ALARM", "ACK", "LOST"):
        return 2
    if head == "STATE" and " interlock=" in text:
        return 3
    return 1


def _unix_ms(m: re.Match, path: Path, lineno: int, cache: dict) -> int:
    key = m.group(1, 2, 3, 4, 5, 6)
    ms = cache.get(key)
    if ms is None:
        try:
            d = datetime.datetime(*(int(x) for x in key), tzinfo=datetime.timezone.utc)
        except ValueError as e:
            raise LogFileError("%s:%d: the timestamp is not a valid date (%s)" % (path, lineno, e)) from None
        ms = int(d.timestamp()) * 1000
        cache.clear()
        cache[key] = ms
    return ms


def read_lines(path: Path):
    """(line number, text, wall ms) of each line of the log file, checked; LogFileError at the first bad one."""
    if not path.exists():
        raise LogFileError("%s: no such file" % path)
    if path.is_dir():
        raise LogFileError("%s is a directory, not a log file" % path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise LogFileError("%s: cannot read (%s)" % (path, e.strerror or e)) from None
    cache: dict = {}
    with f:
        lineno = 0
        for line_bytes in f:
            lineno += 1
            if not line_bytes.endswith(b"\n"):
                raise LogFileError("%s:%d: the last line has no newline (truncated? a log still being written): "
                                   "%r" % (path, lineno, line_bytes[:60]))
            content = line_bytes[:-1]
            if content.endswith(b"\r"):
                content = content[:-1]
            if b"\0" in content:
                raise LogFileError("%s:%d: binary data, not a text log" % (path, lineno))
            try:
                text = content.decode("ascii")
            except UnicodeDecodeError:
                raise LogFileError("%s:%d: not ASCII text (a binary file?); node log lines are ASCII"
                                   % (path, lineno)) from None
            if len(text) > LINE_MAX:
                raise LogFileError("%s:%d: %d characters; a node line has at most %d" % (path, lineno, len(text),
                                                                                        LINE_MAX))
            m = LINE.match(text)
            if m is None:
                raise LogFileError("%s:%d: not a node log line (docs/PLANT.md, Log grammar): %r"
                                   % (path, lineno, text[:60]))
            yield lineno, text, _unix_ms(m, path, lineno, cache)
    if lineno == 0:
        raise LogFileError("%s is empty: no log lines" % path)


def check_node(name: str) -> str:
    if not NAME.fullmatch(name or ""):
        raise UserError("--node %r: a node name is 1..64 letters, digits or _ . : / @ + -" % (name,))
    return name


def import_log(path: Path, db: Path, node: str, progress=None) -> dict:
    """Import the log file into the store (one transaction); returns the summary. LogFileError or
    host.store.StoreError when it cannot, with the store left as it was."""
    from host.store import LogStore, side_files

    created = [p for p in side_files(db) if not p.exists()]
    store_was_there = db.exists()
    store = LogStore(db)
    ok = False
    added = dups = n = 0
    epoch = base = t0_ms = t1_ms = None
    t_start = time.monotonic()
    t_next = t_start + PROGRESS_S
    try:
        store.begin()  # the node row and every line in one transaction
        for lineno, text, ms in read_lines(path):
            if epoch is None:  # the per-file epoch: CRC-32 of the first line
                epoch = zlib.crc32(text.encode())
                base = t0_ms = t1_ms = ms
            t0_ms = min(t0_ms, ms)
            t1_ms = max(t1_ms, ms)
            ticks = max(0, ms - base) & 0x3FFFFFFF
            if store.add_log(node, epoch, lineno, ticks, ms, line_level(text), text, commit=False):
                added += 1
            else:
                dups += 1
            n = lineno
            if progress is not None and (n % PROGRESS_LINES == 0 or time.monotonic() >= t_next):
                t_next = time.monotonic() + PROGRESS_S
                progress("%d lines read, %d stored" % (n, added))
        store.commit()
        ok = True
    finally:
        if not ok:
            try:
                store.rollback()
            except sqlite3.Error:
                pass
        store.close()
        if not ok and not store_was_there:
            for p in created:  # the store this import created: gone again
                try:
                    p.unlink()
                except OSError:
                    pass
    return {"file": str(path), "db": str(db), "node": node, "lines": n, "stored": added, "already_stored": dups,
            "epoch": epoch, "first": _iso(t0_ms), "last": _iso(t1_ms), "seconds": round(time.monotonic() - t_start, 2)}


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(args: argparse.Namespace) -> int:
    from host.store import StoreError

    node = check_node(args.node)
    path = Path(args.logfile)
    db = Path(args.db)
    if db.is_dir():
        raise UserError("--db %s is a directory, not a log store file" % db)
    if db.exists() and not os.access(db, os.W_OK):
        raise UserError("--db %s: not writable (permission denied)" % db)

    def progress(line: str) -> None:
        if not args.quiet:
            print("edgetwin import: %s: %s" % (path, line), file=sys.stderr, flush=True)

    try:
        s = import_log(path, db, node, progress)
    except LogFileError as e:
        raise UserError("%s (nothing imported)" % e) from None
    except StoreError as e:
        raise UserError(str(e)) from None
    except sqlite3.Error as e:  # e.g. a read-only directory for the WAL, a full disk
        raise UserError("log store %s: cannot write (%s); nothing imported" % (db, e)) from None
    print("imported %s into %s as node %s: %d lines, %d stored, %d already there; %s .. %s (%.1f s)"
          % (path, db, node, s["lines"], s["stored"], s["already_stored"], s["first"], s["last"], s["seconds"]))
    return 0
