"""Generate a node's plant log (shared/plant.py) for a seed: N hours of lines, plus a JSON summary.

The lines are exactly those a node running the same seed writes (grammar: docs/PLANT.md). The summary
(lines, alarms raised by priority, trips by interlock, the faults with their ground truth) goes to
stdout, or to stderr when the log itself goes to stdout.

    python -m tools.train.gen_logs --seed 7 --hours 24 --out plant7.log
    python -m tools.train.gen_logs --seed 7 --hours 1 --machines 6 --inject P-101:bearing_wear:3@600 --out - | less
    python -m tools.train.gen_logs --seed 7 --hours 24 --out plant7.log --truth plant7.truth.json
"""

from __future__ import annotations

import argparse
import calendar
import json
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

if __package__ in (None, ""):  # run as a script: make `shared` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared import plant  # noqa: E402

MAX_HOURS = 24 * 366
# the first three bytes after the timestamp -> line kind (anything else starts with a machine id)
_KIND = {b"ALA": "alarm", b"ACK": "alarm", b"CLE": "alarm", b"SHE": "alarm", b"UNS": "alarm", b"STA": "state",
         b"LOS": "lost"}


def parse_start(text: str) -> int:
    """'2026-11-30T06:00:00Z' (or an integer Unix time) -> Unix seconds."""
    if text.isdigit():
        return int(text)
    try:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        raise argparse.ArgumentTypeError("start must look like 2026-11-30T06:00:00Z or be Unix seconds, got %r" % text)


def parse_inject(text: str) -> tuple[str, str, int, str | None, int]:
    """MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND] -> (machine, fault, severity, signal, second)."""
    at = 0
    spec = text
    if "@" in text:
        spec, _, when = text.rpartition("@")
        if not when.isdigit():
            raise argparse.ArgumentTypeError("inject %r: the time after @ must be whole seconds" % text)
        at = int(when)
    parts = spec.split(":")
    if not 2 <= len(parts) <= 4 or not all(parts):
        raise argparse.ArgumentTypeError("inject %r: expected MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND], "
                                         "e.g. P-101:bearing_wear:3@600" % text)
    sev = 3
    if len(parts) >= 3:
        if not parts[2].isdigit():
            raise argparse.ArgumentTypeError("inject %r: severity must be 1..5" % text)
        sev = int(parts[2])
    return parts[0], parts[1], sev, parts[3] if len(parts) == 4 else None, at


def hours(text: str) -> float:
    try:
        h = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("hours must be a number, got %r" % text)
    if not 0 < h <= MAX_HOURS:
        raise argparse.ArgumentTypeError("hours must be in (0, %d], got %r" % (MAX_HOURS, text))
    return h


def generate(p: plant.Plant, ticks: int, out: BinaryIO, injects: list[tuple[str, str, int, str | None, int]]
             ) -> dict[str, Any]:
    """Run p for `ticks` seconds writing every line to out; returns counts and the merged fault truth."""
    buf = bytearray(plant.LINE_MAX + 1)
    mv = memoryview(buf)
    kinds = {"sample": 0, "alarm": 0, "state": 0, "lost": 0}
    faults: dict[tuple[str, str, int], dict[str, Any]] = {}
    version = -1
    pending = sorted(injects, key=lambda i: i[4])
    lines = 0
    skipped = []
    for t in range(ticks):
        while pending and pending[0][4] <= t:
            machine, fault, sev, signal, _ = pending.pop(0)
            try:
                p.inject(machine, fault, sev, signal)
            except plant.PlantError as e:  # e.g. the machine still has a fault of that kind
                skipped.append("at %d s: %s" % (t, e))
        for i in range(p.step()):
            n = p.line_into(i, buf)
            buf[n] = 10
            out.write(mv[:n + 1])
            kinds[_KIND.get(bytes(mv[21:24]), "sample")] += 1
        lines += p.nq
        if p.faults.version != version:
            version = p.faults.version
            for f in p.truth():
                faults[(f["machine"], f["fault"], f["since_tick"])] = f
    return {"lines": lines, "lines_by_kind": kinds, "injects_skipped": skipped,
            "faults": sorted(faults.values(), key=lambda f: f["since_tick"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gen_logs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True, help="plant seed, 0..2**32-1")
    ap.add_argument("--hours", type=hours, default=1.0, help="simulated hours (default 1)")
    ap.add_argument("--machines", type=int, default=4,
                    help="number of machines, 1..%d (default 4)" % plant.MAX_MACHINES)
    ap.add_argument("--sample-every", type=int, default=1, help="seconds between sample lines (default 1)")
    ap.add_argument("--fault-every-h", type=int, default=8,
                    help="mean hours between spontaneous faults per machine, 0 = none (default 8)")
    ap.add_argument("--start", type=parse_start, default=plant.START_EPOCH,
                    help="first timestamp, e.g. 2026-11-30T06:00:00Z (default)")
    ap.add_argument("--events", type=int, default=32, help="event lines a tick can hold (default 32)")
    ap.add_argument("--inject", type=parse_inject, action="append", default=[],
                    help="MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND], repeatable")
    ap.add_argument("--out", default="-", help="log file, or - for stdout (default)")
    ap.add_argument("--truth", help="also write the fault ground truth (JSON list) to this file")
    args = ap.parse_args(argv)
    try:
        p = plant.Plant(args.seed, args.machines, start_epoch_s=args.start, sample_every=args.sample_every,
                        fault_every_h=args.fault_every_h, events=args.events)
        ticks = max(1, int(round(args.hours * 3600)))
        for machine, fault, sev, signal, at in args.inject:  # check them now, not hours into the run
            plant.Plant(args.seed, args.machines).inject(machine, fault, sev, signal)
            if at >= ticks:
                raise plant.PlantError("inject %s:%s at %d s is past the end of the run (%d s)"
                                       % (machine, fault, at, ticks))
    except plant.PlantError as e:
        ap.error(str(e))
    to_stdout = args.out == "-"
    t0 = time.perf_counter()
    if to_stdout:
        result = generate(p, ticks, sys.stdout.buffer, args.inject)
        sys.stdout.flush()
    else:
        try:
            with open(args.out, "wb") as f:
                result = generate(p, ticks, f, args.inject)
        except OSError as e:
            ap.error("cannot write %s: %s" % (args.out, e))
    elapsed = time.perf_counter() - t0
    s = p.summary()
    summary = {
        "seed": args.seed, "machines": [{"id": i, "kind": plant.KINDS[k]} for i, k in zip(p.ids, p.kind)],
        "start": plant.iso(args.start), "end": p.timestamp(), "hours": ticks / 3600, "ticks": ticks,
        "lines": result["lines"], "lines_by_kind": result["lines_by_kind"],
        "alarms_by_prio": {str(k): v for k, v in s["alarms_by_prio"].items()},
        "trips": s["trips"], "trips_by_interlock": {k: v for k, v in s["trips_by_interlock"].items() if v},
        "faults_started": s["faults_started"], "events_dropped": s["events_dropped"],
        "injects_skipped": result["injects_skipped"],
        "faults": result["faults"], "out": args.out,
        "elapsed_s": round(elapsed, 3), "lines_per_s": round(result["lines"] / elapsed) if elapsed else None,
    }
    if args.truth:
        try:
            Path(args.truth).write_text(json.dumps(result["faults"], indent=1) + "\n")
        except OSError as e:
            ap.error("cannot write %s: %s" % (args.truth, e))
    print(json.dumps(summary, indent=1), file=sys.stderr if to_stdout else sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
