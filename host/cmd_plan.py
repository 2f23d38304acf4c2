"""`edgetwin plan --board B --model M`: the memory plan of a forward step on a board, and its peak heap.

The plan (shared/memplan.py, chosen by shared/memfit.py) lists every buffer with its size, its live
range over the steps of the forward and the arena it shares; it is the fastest layout (resident, then
layer / phase / matrix streaming) whose peak fits the profile's heap less the reserve and a margin.
`--arch x64` plans for the virtual board (64-bit objects).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from host.errors import UserError

HELP = "print a model's memory plan on a board: buffers, live ranges, shared arenas, predicted peak heap"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, help="board profile: a name (see boards/) or a path to a profile JSON")
    p.add_argument("--model", required=True, help="MBF model file")
    p.add_argument("--arch", help="object size of this arch instead of the profile's (x64: the virtual board)")
    p.add_argument("--mode", choices=("resident", "layer", "phase", "matrix"),
                   help="this layout instead of the fastest that fits (still checked against the heap)")
    p.add_argument("--margin", type=int, help="percent of the heap kept free (default %d)" % 10)
    p.add_argument("--reserve", type=int, help="bytes for the interpreter, the runtime code and the reader "
                                               "(default: 80 KB on 32-bit boards, 128 KB on x64)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def describe(p) -> dict:
    """The plan as plain data: buffers with their live ranges and arenas, arenas, figures."""
    from shared import memplan

    steps = memplan.STEPS.split()
    bufs = []
    for i in range(len(p.names)):
        if p.first[i] == 0 and p.last[i] == memplan.T_END:
            live = "persistent"
        elif p.first[i] == p.last[i]:
            live = steps[p.first[i]]
        else:
            live = "%s..%s" % (steps[p.first[i]], steps[p.last[i]])
        a = p.arena[i]
        if a < 0:
            arena = "own"
        elif p.kind[i] == memplan.BYTES:
            arena = "W%d+%d" % (a, p.offset[i])
        else:
            arena = "A%d" % a
        bufs.append({"name": p.names[i], "count": p.count[i], "data_bytes": p.data[i],
                     "heap_bytes": p.heap[i] * p.count[i], "live": live, "arena": arena})
    arenas = [{"arena": ("W%d" if k == memplan.BYTES else "A%d") % i, "kind": "bytes" if k == memplan.BYTES else "int32",
               "data_bytes": d, "heap_bytes": h} for i, (k, d, h) in enumerate(p.arenas)]
    own = sum(p.heap[i] * p.count[i] for i in range(len(p.names)) if p.kind[i])
    chunk = max([a[1] for a in p.arenas if a[0] == memplan.BYTES] or [0])
    return {"board": p.board, "mode": p.mode, "out_rows": p.out_rows, "word": p.word,
            "kv": {"sink": p.sink, "window": p.window, "staged": p.staged}, "layer_read_chunk": chunk,
            "peak": p.peak, "transient": p.transient, "load_peak": p.load_peak,
            "shared_saving": own - sum(a[2] for a in p.arenas), "heap": p.heap_bytes, "reserve": p.reserve,
            "margin_pct": p.margin, "budget": p.budget, "largest_block": p.largest, "max_block": p.max_block,
            "arenas": arenas, "buffers": bufs}


def _table(d: dict) -> str:
    lines = ["%-22s %10s  %-22s %s" % ("buffer", "bytes", "live", "arena")]
    for b in d["buffers"]:
        name = b["name"] if b["count"] == 1 else "%s x%d" % (b["name"], b["count"])
        lines.append("%-22s %10d  %-22s %s" % (name, b["heap_bytes"], b["live"], b["arena"]))
    lines.append("arenas: " + ", ".join("%s %d B (%s)" % (a["arena"], a["heap_bytes"], a["kind"]) for a in d["arenas"]))
    mode = d["mode"] + ("" if d["mode"] == "resident" else ", classifier %d rows per block, layer read chunk %d B"
                        % (d["out_rows"], d["layer_read_chunk"]))
    lines.append("mode: %s; %d-bit objects; cache %d+%d+%d" % (mode, 8 * d["word"], d["kv"]["sink"],
                                                             d["kv"]["window"], d["kv"]["staged"]))
    lines.append("predicted peak heap: %d B during a step (arenas save %d B), %d B while loading (+ the largest "
                 "temporary)" % (d["peak"], d["shared_saving"], d["load_peak"]))
    lines.append("%s heap %d B - reserve %d B - %d%% margin = budget %d B: fits with %d B to spare"
                 % (d["board"], d["heap"], d["reserve"], d["margin_pct"], d["budget"], d["budget"] - d["load_peak"]))
    lines.append("largest single allocation %d B (a plan may take at most %d B in one piece)"
                 % (d["largest_block"], d["max_block"]))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from host import board_profile
    from shared import mbf, memfit, memplan

    prof = board_profile.resolve(args.board)
    if args.arch is not None and args.arch not in board_profile.ARCH_CODES.values():
        raise UserError("unknown arch '%s' (x64 for the virtual board, or armv6m, xtensawin...)" % args.arch)
    word = memfit.word_of(args.arch or prof["mpy_arch"])
    path = Path(args.model)
    if path.is_dir():
        raise UserError("--model %s is a directory, not an MBF model file" % path)
    if not path.is_file():
        raise UserError("model file %s does not exist" % path)
    try:
        with mbf.open(str(path)) as r:
            modes = (args.mode,) if args.mode else memplan.MODES
            margin = memfit.MARGIN_PCT if args.margin is None else args.margin
            p = memfit.fit(r.config, prof, word, margin, args.reserve, r, modes)
    except ValueError as e:  # MBFError, ModelError, ProfileError: one line
        raise UserError("%s: %s" % (path, e)) from None
    except OSError as e:  # unreadable
        raise UserError("--model %s: %s" % (path, e.strerror or e)) from None
    d = describe(p)
    d["model"] = str(path)
    print(json.dumps(d) if args.json else _table(d))
    return 0
