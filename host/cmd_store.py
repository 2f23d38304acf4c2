"""`edgetwin store backup DB FILE` and `edgetwin store prune DB --keep-days N`: the log store's upkeep.

backup copies the store with SQLite's online backup API while a gateway keeps writing to it (host/store.py
backup: the store as it was when the backup began, checked, then renamed into place); FILE is a single
SQLite file that `edgetwin gateway --db FILE` or `ask --db FILE` opens as it is (restoring is copying it in
place of the store while no gateway runs). prune deletes the lines more than N days older than the newest
one, never a line an MQTT / Sparkplug destination has not acknowledged nor one an annotation is about
(LogStore.prune), and says what it deleted and what it kept; --dry-run only says it. docs/GATEWAY.md,
"Store: backup, retention, schema".
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path

from host.cliargs import check_store
from host.errors import UserError

HELP = "the log store's upkeep: an online backup while the gateway writes, retention (prune)"
_PROGRESS_S = 1.0  # a progress line on stderr at most this often (a small store is done before the first)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = sub.add_parser("backup", help="copy the store to FILE, safely while a gateway writes to it",
                       description="Copy the log store DB to FILE with SQLite's online backup: the store as it "
                       "was when the backup began, while a gateway goes on writing. FILE is one checked "
                       "SQLite file (no -wal); it is written beside its name and renamed when complete.")
    b.add_argument("db", type=Path, metavar="DB", help="the gateway's log store (its --db)")
    b.add_argument("file", type=Path, metavar="FILE", help="the backup file to write (its directory must exist)")
    b.add_argument("--force", action="store_true", help="replace FILE if it exists (default: refuse)")
    b.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    r = sub.add_parser("prune", help="delete old lines, keeping those still unpublished or cited",
                       description="Delete the lines more than --keep-days days older than the store's newest "
                       "line, except lines an MQTT/Sparkplug destination has not acknowledged yet and lines an "
                       "annotation is about (annotations are kept). Safe while a gateway writes (it deletes in "
                       "small transactions).")
    r.add_argument("db", type=Path, metavar="DB", help="the gateway's log store (its --db)")
    r.add_argument("--keep-days", type=int, required=True, metavar="N", help="keep the last N days of lines")
    r.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    r.add_argument("--vacuum", action="store_true",
                   help="then give the freed space back to the file system (VACUUM rewrites the whole file: it "
                   "needs that much free space and waits for the gateway's open transaction)")


def run(args: argparse.Namespace) -> int:
    from host.store import StoreError

    try:
        return _backup(args) if args.action == "backup" else _prune(args)
    except StoreError as e:
        raise UserError(str(e)) from None
    except sqlite3.Error as e:  # e.g. a gateway holding the write lock past the busy timeout
        raise UserError("log store %s: %s" % (args.db, e)) from None


def _backup(args: argparse.Namespace) -> int:
    from host.store import backup

    check_store(args.db)
    last = [time.monotonic()]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if not args.quiet and now - last[0] >= _PROGRESS_S and done < total:
            last[0] = now
            print("edgetwin store backup: %d%% (%d of %d pages)" % (100 * done // total, done, total),
                  file=sys.stderr, flush=True)

    got = backup(args.db, args.file, force=args.force, progress=progress)
    print("backed up %s to %s: %d lines, %.1f MB in %.1f s" % (args.db, args.file, got["logs"],
                                                                got["bytes"] / 1e6, got["seconds"]))
    return 0


def _prune(args: argparse.Namespace) -> int:
    from host.store import LogStore

    if args.keep_days < 0:
        raise UserError("--keep-days must be 0 or more, got %d" % args.keep_days)
    check_store(args.db)
    store = LogStore(args.db)
    try:
        got = store.prune(args.keep_days, dry_run=args.dry_run)
        if args.vacuum and not args.dry_run:
            store.vacuum()
    finally:
        store.close()
    if got["cutoff_ms"] is None:
        print("%s has no lines: nothing to prune" % args.db)
        return 0
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(got["cutoff_ms"] / 1000))
    print("%s %s: %d of the %d lines before %s %s; kept %d an annotation is about, %d not yet published; "
          "%d lines %s" % ("would prune" if args.dry_run else "pruned", args.db, got["deleted"], got["old"], when,
                           "would go" if args.dry_run else "deleted", got["cited"], got["unpublished"], got["kept"],
                           "would be left" if args.dry_run else "left"))
    return 0
