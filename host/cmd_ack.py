"""`edgetwin ack MACHINE TAG --by NAME --db DB`: an operator acknowledges (or shelves) an alarm on a node.

The command is queued in the log store (`commands`, host/store.py); the gateway serving the node sends
it as a CMD frame when the node is connected (at once if it is, later if it is away: once either way), and
the node applies it to its alarm bank and logs the ACK line naming who, as its own line
(docs/PROTOCOL.md 3.11, docs/PLANT.md). The node is the one whose plant description has MACHINE
(`--node` when several do); TAG is the signal's tag or key; without `--level` every raised point of the
signal is acknowledged. `--wait SECONDS` waits until the node's link has taken it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from host.cliargs import check_store
from host.errors import UserError

HELP = "acknowledge or shelve an alarm: queued in the store, sent to the node, logged by it naming who"
LEVELS = ("HI", "HIHI", "LO", "LOLO", "BAD")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("machine", help="the machine's id, as its lines name it (P-1, AHU-1)")
    p.add_argument("tag", help="the alarm's signal: its tag (discharge_press) or key (P)")
    p.add_argument("--by", required=True, metavar="NAME", help="who acknowledges (1..32 letters, digits, _ . -)")
    p.add_argument("--level", choices=LEVELS, help="only the point of this level (default: every point of the signal)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--shelve", action="store_true", help="shelve the alarm instead (tracked, not annunciated)")
    g.add_argument("--unshelve", action="store_true", help="return a shelved alarm to service")
    p.add_argument("--node", help="the node whose machine it is, when several nodes' plants have that id")
    p.add_argument("--db", default="edgetwin.db", help="the gateway's log store (default edgetwin.db)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait this long for the gateway to deliver it to the node (default: do not wait)")


def _nodes_with(store, machine: str) -> list[tuple[str, object]]:
    """(node, its description) of the nodes whose latest described plant has `machine`."""
    out = []
    for node in (n["name"] for n in store.nodes()):
        desc = store.plant(store.node_plant(node))
        if desc is not None and desc.machine(machine) is not None:
            out.append((node, desc))
    return out


def run(args: argparse.Namespace) -> int:
    from host.store import LogStore, StoreError

    db = Path(args.db)
    check_store(db)
    if not 0 <= args.wait <= 3600:
        raise UserError("--wait must be 0..3600 seconds, got %g" % args.wait)
    verb = "SHELVE" if args.shelve else "UNSHELVE" if args.unshelve else "ACK"
    try:
        store = LogStore(db)
    except StoreError as e:
        raise UserError(str(e)) from None
    try:
        found = _nodes_with(store, args.machine)
        if args.node is not None:
            found = [(n, d) for n, d in found if n == args.node]
        if not found:
            where = " on node %s" % args.node if args.node else ""
            raise UserError("no node in %s logs a machine %s%s (its plant description names it)" % (
                db, args.machine, where))
        if len(found) > 1:
            raise UserError("machine %s is on several nodes (%s): say which with --node" % (
                args.machine, ", ".join(n for n, _ in found)))
        node, desc = found[0]
        sig = desc.machine(args.machine).signal(args.tag)
        if sig is None:
            tags = ", ".join(s.tag for s in desc.machine(args.machine).signals)
            raise UserError("%s has no signal %s (its tags: %s)" % (args.machine, args.tag, tags))
        if args.level is not None and args.level != "BAD" and sig.alarm(args.level) is None:
            raise UserError("%s %s has no %s alarm in plant %s" % (args.machine, sig.tag, args.level, desc.name))
        try:
            cid = store.queue_command(node, verb, args.machine, sig.tag, args.level, args.by)
        except StoreError as e:
            raise UserError(str(e)) from None
        print("queued %s of %s %s%s by %s for node %s (command %d): the gateway sends it when the node is "
              "connected, and the node logs it" % (verb, args.machine, sig.tag, " " + args.level if args.level else "",
                                                 args.by, node, cid), flush=True)
        if args.wait:
            deadline = time.monotonic() + args.wait
            while time.monotonic() < deadline:
                c = store.command(cid)
                if c is not None and c.done_ms is not None:
                    print("delivered to node %s: %s" % (node, c.result))
                    return 0
                time.sleep(0.2)
            print("not delivered within %g s: it stays queued (is the gateway running and the node connected?)"
                  % args.wait)
            return 1
        return 0
    finally:
        store.close()
