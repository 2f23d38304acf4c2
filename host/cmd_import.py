"""`edgetwin import LOGFILE --db DB --node NAME [--plant FILE]`: load a plain plant log into a log store as the
gateway does.

The file holds the lines a node logs (docs/PLANT.md, Log grammar; `python -m tools.train.gen_logs` writes
them), one per line, each ending in a newline. The lines are of the plant that --plant describes (the built-in
simulator's without it): each is read by the one grammar (host/plantlines.py) and checked against that
description, so a line naming a machine, key, tag, unit or interlock the plant lacks is refused. Each line
becomes one row of the store's ``logs`` table (host/store.py: the same table, FTS5 index and node row the
gateway writes for a LOG frame), so `edgetwin ask --db DB` answers questions about any plant log:

- node: NAME (created on first use, as the gateway creates a node row on its first frame);
- plant: the description's hash (NULL for the simulator's), and the description itself in ``plants``;
- level: the one the node gives the line (docs/PLANT.md, levels: host/plantlines.line_level): 2 for an alarm
  raised or acknowledged and LOST, 3 for a trip, 1 for the rest;
- wall_ms: the line's own timestamp (the plant's UTC clock, whole seconds), as the gateway stores the
  wall time a 1.1 node's LOG frame carries; ticks: ms since the file's first line (mod 2**30);
- epoch: a per-file epoch, the CRC-32 of the file's first line; seq: the line's number in the file (1, 2,
  ...). (node, epoch, seq) is the store's duplicate rule, so importing the same file again, or again after
  more lines were appended to it, stores only the lines not stored yet;
- boot, lseq: NULL, flags 0 (the lines of a 1.0 node: no line seq to check for gaps).

Every line is checked before anything is kept: a missing file, a directory, bytes that are not text, a last
line without its newline (truncated), a line not in the grammar or not of the described plant, a bad --node
name, a --plant file that does not check or a store that cannot be written is one line naming the file (and
the line number) and exit 2. The import is one
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
from typing import TYPE_CHECKING

from host.errors import UserError

if TYPE_CHECKING:
    from host.plantdesc import PlantDesc

HELP = "load a plain plant log file (the node's line format) into a log store, as the gateway stores LOG lines"
DEFAULT_DB = "edgetwin.db"
PROGRESS_LINES = 100000
PROGRESS_S = 2.0
NAME = re.compile(r"[A-Za-z0-9_.:/@+-]{1,64}")


class LogFileError(ValueError):
    """A log file that cannot be imported (the message names the file and the line)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logfile", help="the plain log file, one node line per line (e.g. gen_logs --out FILE)")
    p.add_argument("--db", default=DEFAULT_DB, help="the log store (created if missing; default %s)" % DEFAULT_DB)
    p.add_argument("--node", required=True, help="the node name the lines are stored under (what `ask` shows)")
    p.add_argument("--plant", default=None, metavar="FILE",
                   help="the plant's description (docs/PLANT.md) the lines were logged by (default: the built-in "
                        "simulator's)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def load_plant(arg: str | None) -> "PlantDesc":
    """The description --plant names, checked (host/plantfile.py); the built-in simulator's without one."""
    from host import plantdesc

    if arg is None:
        return plantdesc.builtin()
    p = Path(arg)
    if not p.is_file():
        raise UserError("--plant %s: %s" % (arg, "is a directory, not a description" if p.is_dir() else "no such file"))
    try:
        return plantdesc.load(p)
    except (ValueError, OSError) as e:  # PlantFileError is a ValueError whose message is the one line to show
        raise UserError("--plant %s" % e if str(p) not in str(e) else str(e)) from None


def is_simulator(desc: "PlantDesc") -> bool:
    """The built-in simulator's description (given by --plant or not): its lines are stored with plant NULL,
    as every line of a store made before descriptions."""
    from host import plantdesc

    return desc.simulator or desc.hash == plantdesc.builtin().hash


def _bad_line(path: Path, lineno: int, text: str) -> "LogFileError":
    from host import plantlines

    if plantlines.TIMESTAMP_RE.match(text) and plantlines.line_time(text) is None:
        return LogFileError("%s:%d: the timestamp is not a valid date (%r)" % (path, lineno, text[:20]))
    return LogFileError("%s:%d: not a node log line (docs/PLANT.md, Log grammar): %r" % (path, lineno, text[:60]))


def read_lines(path: Path, desc: "PlantDesc"):
    """(line number, text, wall ms, level) of each line of the log file, checked by the grammar and against
    the plant's description; LogFileError at the first bad one."""
    from host import plantlines  # here, not at the top: `edgetwin --help` imports every command

    sim = is_simulator(desc)
    if not path.exists():
        raise LogFileError("%s: no such file" % path)
    if path.is_dir():
        raise LogFileError("%s is a directory, not a log file" % path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise LogFileError("%s: cannot read (%s)" % (path, e.strerror or e)) from None
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
            if len(text) > plantlines.LINE_MAX:
                raise LogFileError("%s:%d: %d characters; a node line has at most %d" % (path, lineno, len(text),
                                                                                        plantlines.LINE_MAX))
            line = plantlines.parse(text)
            if line is None:
                raise _bad_line(path, lineno, text)
            wrong = plantlines.check(line, desc)
            if wrong is not None:
                raise LogFileError("%s:%d: %s%s" % (path, lineno, wrong, " (the built-in simulator's description: "
                                                    "give the plant's with --plant FILE)" if sim else ""))
            yield lineno, text, line.wall_ms, plantlines.line_level(line)
    if lineno == 0:
        raise LogFileError("%s is empty: no log lines" % path)


def check_node(name: str) -> str:
    if not NAME.fullmatch(name or ""):
        raise UserError("--node %r: a node name is 1..64 letters, digits or _ . : / @ + -" % (name,))
    return name


def import_log(path: Path, db: Path, node: str, progress=None, desc: "PlantDesc | None" = None) -> dict:
    """Import the log file into the store (one transaction), its lines read as `desc` describes them (the
    built-in simulator's when None); returns the summary. LogFileError or host.store.StoreError when it
    cannot, with the store left as it was."""
    desc = desc if desc is not None else load_plant(None)
    plant = None if is_simulator(desc) else desc.hash
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
        store.begin()  # the node row, the description and every line in one transaction
        if plant is not None:
            store.add_plant(desc, commit=False)
        store.set_node_plant(node, plant, commit=False)
        for lineno, text, ms, level in read_lines(path, desc):
            if epoch is None:  # the per-file epoch: CRC-32 of the first line
                epoch = zlib.crc32(text.encode())
                base = t0_ms = t1_ms = ms
            t0_ms = min(t0_ms, ms)
            t1_ms = max(t1_ms, ms)
            ticks = max(0, ms - base) & 0x3FFFFFFF
            if store.add_log(node, epoch, lineno, ticks, ms, level, text, commit=False, plant=plant):
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
    return {"file": str(path), "db": str(db), "node": node, "plant": desc.name, "lines": n, "stored": added,
            "already_stored": dups, "epoch": epoch, "first": _iso(t0_ms), "last": _iso(t1_ms),
            "seconds": round(time.monotonic() - t_start, 2)}


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(args: argparse.Namespace) -> int:
    from host.store import StoreError

    node = check_node(args.node)
    desc = load_plant(args.plant)
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
        s = import_log(path, db, node, progress, desc)
    except LogFileError as e:
        raise UserError("%s (nothing imported)" % e) from None
    except StoreError as e:
        raise UserError(str(e)) from None
    except sqlite3.Error as e:  # e.g. a read-only directory for the WAL, a full disk
        raise UserError("log store %s: cannot write (%s); nothing imported" % (db, e)) from None
    print("imported %s into %s as node %s%s: %d lines, %d stored, %d already there; %s .. %s (%.1f s)"
          % (path, db, node, "" if is_simulator(desc) else " (plant %s)" % desc.name, s["lines"], s["stored"],
             s["already_stored"], s["first"], s["last"], s["seconds"]))
    return 0
