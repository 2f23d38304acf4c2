"""`edgetwin update --node NAME --model FILE --db DB`: a new draft model for a node, sent over its link;
`--code BUILD` the node's code instead (a board build's lib/, host/codepkg.py).

The update is queued in the log store (meta 'update:NODE', host/store.py); the gateway serving the node
sends it in UPDATE frames while the node keeps logging (docs/PROTOCOL.md 3.12). The node writes it to a
second slot beside the model it runs, checks its SHA-256, and switches to it at its next boot
(`--reboot`: at once), falling back to the previous model if the new one fails to load or to draft
(firmware/update.py). A transfer cut by a link cut, a node reboot or a gateway restart goes on from
what the node holds. The command waits and shows progress until the node runs the new model (or has it
verified, without `--reboot`), unless `--no-wait`; `--status` shows where the node's update stands and
`--cancel` drops a queued one. The code goes the same way (protocol 1.4: a node of 1.4 or later, whose code is
on its filesystem): into /lib.new, switched to at the next boot by the boot stub main.py runs first, kept
once the new code reaches the gateway, rolled back if it raises, hangs or does not reach it
(firmware/codeslot.py). docs/GATEWAY.md "Updates over the link" says how much flash each board needs.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

from host.cliargs import check_store
from host.errors import UserError

HELP = "send a new draft model or new code to a node over its link (second slot, hash checked, rollback)"
FINAL_OK = ("running",)
FINAL_BAD = ("failed", "no_room", "rolled_back")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", required=True, metavar="NAME", help="the node, by its name in the store")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--model", type=Path, metavar="FILE", help="the new draft model (.mbf, edgetwin convert)")
    what.add_argument("--code", type=Path, metavar="BUILD", help="the node's new code: a folder `edgetwin build "
                                                                 "BOARD --node` made (its lib/ is sent)")
    p.add_argument("--db", default="edgetwin.db", help="the gateway's log store (default edgetwin.db)")
    p.add_argument("--reboot", action="store_true", help="the node resets into the new model or code once it has "
                                                         "it (default: it switches at its next boot)")
    p.add_argument("--no-wait", action="store_true", help="queue it and return")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="longest wait (default 3600 s: a model takes minutes at 115200 baud)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--status", action="store_true", help="say where the node's update stands, then return")
    g.add_argument("--cancel", action="store_true", help="drop the node's queued or unfinished update")


def _check_model(path: Path) -> bytes:
    from shared import mbf

    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise UserError("--model %s is a directory, not a model file" % path) from None
    except OSError as e:
        raise UserError("cannot read --model %s: %s" % (path, e.strerror or e)) from None
    try:
        r = mbf.open(str(path))
        r.close()
    except (ValueError, OSError) as e:
        raise UserError("--model %s is not a model the node can load: %s" % (path, e)) from None
    return data


def _line(job: dict) -> str:
    st = job.get("state", "?")
    size = max(1, int(job.get("size", 1)))
    off = int(job.get("offset", 0))
    if st == "queued":
        return "queued: the gateway sends it when the node is connected (is `edgetwin gateway` serving this store?)"
    if st == "sending":
        return "sending: %s of %s bytes (%d%%)" % (format(off, ","), format(size, ","), 100 * off // size)
    if st == "verified":
        return "verified on the node: it switches at its next boot"
    return "%s: %s" % (st.replace("_", " "), job.get("why", ""))


def run(args: argparse.Namespace) -> int:
    from host.store import LogStore, StoreError

    db = Path(args.db)
    check_store(db)
    if not 0 < args.timeout <= 86400:
        raise UserError("--timeout must be 0..86400 seconds, got %g" % args.timeout)
    try:
        store = LogStore(db)
    except StoreError as e:
        raise UserError(str(e)) from None
    try:
        if args.node not in {n["name"] for n in store.nodes()}:
            raise UserError("no node %s in %s (its nodes: %s)" % (
                args.node, db, ", ".join(sorted(n["name"] for n in store.nodes())) or "none yet"))
        job = store.update_job(args.node)
        if args.status:
            print(_line(job) if job else "no update for node %s" % args.node)
            return 0
        if args.cancel:
            store.set_update_job(args.node, None)
            print("update of node %s dropped%s" % (args.node, "" if job else " (there was none)"))
            return 0
        if args.model is None and args.code is None:
            raise UserError("give --model FILE or --code BUILD (or --status, --cancel)")
        if job is not None and job.get("state") in ("queued", "sending"):
            raise UserError("an update of node %s is under way (%s): wait for it, or --cancel it"
                            % (args.node, _line(job)))
        if args.code is not None:
            from host import codepkg

            board = next((n["board_id"] for n in store.nodes() if n["name"] == args.node), "")
            data, sha, _ = codepkg.pack(args.code, board)  # its hash: CODE.json's and CODE.sums's bytes
            what, suffix, src = "code", ".tar", args.code
        else:
            data, what, suffix, src = _check_model(args.model), "model", ".mbf", args.model
            sha = hashlib.sha256(data).hexdigest()
        # a copy beside the store: the gateway reads it while it sends, whatever happens to the original
        spool = db.parent / (db.name + ".updates")
        spool.mkdir(mode=0o750, exist_ok=True)
        kept = spool / (sha[:16] + suffix)
        if not kept.is_file() or kept.stat().st_size != len(data):
            tmp = kept.with_name(kept.name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(kept)
        job = {"id": random.randint(1, 0xFFFF), "file": str(kept.resolve()), "sha": sha, "size": len(data),
               "reboot": bool(args.reboot), "state": "queued", "offset": 0, "tries": 0,
               "queued_ms": int(time.time() * 1000), "kind": what, what: str(src)}
        try:
            store.set_update_job(args.node, job)
        except StoreError as e:
            raise UserError(str(e)) from None
        print("update %d of node %s queued: %s %s (%s bytes, sha256 %s...)" % (
            job["id"], args.node, what, src, format(len(data), ","), sha[:16]), file=sys.stderr, flush=True)
        if args.no_wait:
            return 0
        return _wait(store, args.node, job["id"], args.timeout, args.reboot, what)
    finally:
        store.close()


def _wait(store, node: str, uid: int, timeout: float, reboot: bool, what: str = "model") -> int:
    end = time.monotonic() + timeout
    said = ""
    step = -1
    while time.monotonic() < end:
        job = store.update_job(node) or {}
        if job.get("id") != uid:
            raise UserError("the update of node %s was replaced or dropped by someone else" % node)
        st = job.get("state")
        line = _line(job)
        pct = 100 * int(job.get("offset", 0)) // max(1, int(job.get("size", 1)))
        if st != "sending" and line != said or st == "sending" and pct // 10 != step:
            print(line, file=sys.stderr, flush=True)
            said, step = line, pct // 10 if st == "sending" else step
        if st in FINAL_OK or st == "verified" and not reboot:
            print("node %s: %s" % (node, "runs the new %s" % what if st == "running" else
                                   "has the new %s, verified; it switches at its next boot" % what))
            return 0
        if st in FINAL_BAD:
            print("edgetwin update: error: node %s: %s" % (node, line), file=sys.stderr)
            return 1
        time.sleep(0.5)
    print("edgetwin update: error: node %s: still %s after %g s (it goes on in the gateway: "
          "`edgetwin update --node %s --status`)" % (node, said or "queued", timeout, node), file=sys.stderr)
    return 1
