"""`edgetwin ui --db plant.db`: the dashboard on a log store alone (no gateway in this process).

The same app `edgetwin gateway --ui` runs beside its serial loop (host/ui/): the plant's nodes, their machines'
plots, the annotations and the question box, live as the store grows (a gateway may be writing it). Link
health comes from a gateway's --status file when one is given. docs/DASHBOARD.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from host.errors import UserError

HELP = "serve the dashboard on a log store: nodes, machines' plots, annotations, operator questions (127.0.0.1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from host.cliargs import add_ask_arguments
    from host.ui import serve

    p.add_argument("--db", default="edgetwin.db", help="the gateway's log store (default edgetwin.db)")
    p.add_argument("--status", default=None, metavar="FILE",
                   help="a running gateway's --status file: link up/down, retransmits, errors, acceptance, tokens/s")
    serve.add_arguments(p)
    add_ask_arguments(p)
    p.add_argument("--seconds", type=float, default=None, help="stop after this long (default: until Ctrl-C)")


def status_reader(path: Path | None):
    """A callable giving the status file's JSON (None when absent or half-written)."""
    last: list = [None]

    def read() -> dict | None:
        if path is None:
            return None
        try:
            last[0] = json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        return last[0]

    return read


def run(args: argparse.Namespace) -> int:
    from host.cliargs import check_store, check_target
    from host.ui import asking, serve

    bind = serve.check(args)
    db = Path(args.db)
    check_store(db)
    if args.seconds is not None and not 0 < args.seconds < float("inf"):
        raise UserError("--seconds must be a positive number, got %s" % args.seconds)
    check_target("--target", args.target)
    if args.reranker is not None and not Path(args.reranker).is_dir():
        raise UserError("--reranker %s: no such directory" % args.reranker)
    status = Path(args.status) if args.status else None
    asker = asking.Asker(db, target=args.target, reranker=args.reranker)
    server, dash = serve.start(db, bind, status_reader(status), asker=asker, title="edgetwin: %s" % db.name)
    print("edgetwin ui: serving %s on %s (Ctrl-C stops)" % (db, server.url), flush=True)
    done = threading.Event()
    old = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        done.wait(args.seconds)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        server.stop(dash.close)
    sys.stdout.flush()
    return 0
