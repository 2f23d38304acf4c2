"""`edgetwin plant check|compile FILE`: check a plant description (docs/PLANT.md) or compile it for a board.

    edgetwin plant check examples/pump_skid.json               # FILE: ok: NAME, N machines, S signals, hash H
    edgetwin plant check FILE --all --board rp2040_pico        # every problem, one line each, exit 2
    edgetwin plant check FILE --json                           # one JSON object, exit 0 or 2
    edgetwin plant compile FILE --board rp2040_pico -o plant.json   # the board's /plant.json; prints its hash

A problem is one line on stderr naming the file, the machine and the field
(`FILE: machine P-1: signals[2].alarms[0].limit: must be a number, got "x"`); `check` shows the first,
`--all` every one. The hash is the compiled form's (host/plantcompile.py) on the board checked against:
what the node logs in its PLANT line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from host.board_profile import HELP as BOARD_HELP

HELP = "check a plant description (docs/PLANT.md), or compile it into a board's /plant.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="plant_command", required=True, metavar="ACTION")
    c = sub.add_parser("check", help="check a description: the first problem as one line (exit 2), or ok and "
                                     "its hash", description="Check a plant description against the schema, the "
                                                             "rules of docs/PLANT.md and its board.")
    c.add_argument("file", metavar="FILE", help="the description (JSON)")
    c.add_argument("--all", action="store_true", help="list every problem, one per line")
    c.add_argument("--board", help=BOARD_HELP + " (default: the description's \"board\")")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    k = sub.add_parser("compile", help="compile a description into the board's /plant.json and print its hash",
                       description="Compile a plant description into the compact form a board loads.")
    k.add_argument("file", metavar="FILE", help="the description (JSON)")
    k.add_argument("--board", help=BOARD_HELP + " (default: the description's \"board\")")
    k.add_argument("-o", "--out", default="-", help="where to write it (default -: standard output, the hash "
                                                    "then goes to standard error)")


def _board(spec: str | None) -> dict | None:
    from host import board_profile

    return board_profile.resolve(spec) if spec else None


def run(args: argparse.Namespace) -> int:
    from host import plantcompile, plantfile

    board = _board(args.board)
    desc, lines = plantfile.check(args.file, board)
    as_json = args.plant_command == "check" and args.json
    if desc is None:
        if as_json:
            print(json.dumps({"file": args.file, "ok": False, "errors": lines}))
        else:
            for line in lines if getattr(args, "all", False) else lines[:1]:
                print(line, file=sys.stderr)
        return 2
    data = plantcompile.compile_plant(desc, board)
    h = plantcompile.plant_hash(data)
    if args.plant_command == "check":
        n_sig = sum(len(m["signals"]) for m in desc["machines"])
        if as_json:
            print(json.dumps({"file": args.file, "ok": True, "name": desc["name"], "machines": len(desc["machines"]),
                              "signals": n_sig, "hash": h, "board": (board or {}).get("name", desc.get("board"))}))
        else:
            print("%s: ok: %s, %d machines, %d signals, hash %s" % (args.file, desc["name"], len(desc["machines"]),
                                                                     n_sig, h))
        return 0
    if args.out == "-":
        sys.stdout.write(data.decode("ascii") + "\n")
        print("hash %s" % h, file=sys.stderr)
    else:
        Path(args.out).write_bytes(data)
        print("%s: %d bytes, hash %s" % (args.out, len(data), h))
    return 0

