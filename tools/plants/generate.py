"""Plant descriptions (docs/PLANT.md, "edgetwin-plant/1") drawn from a seed: kinds, names, units, Modbus wiring.

    desc = generate.plant(7, "seen")              # training kinds and schemes (split.py)
    desc = generate.plant(7, "unseen")            # held-out kinds and schemes only
    desc = generate.plant(7, "seen", board="esp32s3_devkitc", kinds=["steam boiler"], scheme="site", units="us")

    python -m tools.plants.generate --seed 7 --split unseen --out plant7.json [--board B] [--machines N]

Wired the way the benches serve plants (tools/board/simslave.py): one RS-485 bus, one device profile per kind,
one Modbus slave per machine (unit = its place + 1), its signals in holding registers (int16, int32 or float32
by the plant's seed), running and tripped as discrete inputs 0 and 1. A signal's register is named after its
role in the catalogue, which is how the simulator (physics.py) knows what it measures. An alarm point's `causes`
are the cause words of the kind's faults that drive it (catalogue.py). The same seed and arguments give the same
description, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from tools.plants import catalogue, naming, split, units
from tools.plants.catalogue import Alarm, Kind, Signal

BOARDS = ("rp2040_pico", "esp32s3_devkitc")
ENCODINGS = ("int16", "int32", "float32")
MAX_CAUSES = 8  # cause hints per alarm point at most (host/plant_schema.json)
MAX_MACHINES = 6  # a 7th of five signals would pass 15 % of the ESP32-S3's heap (host/plantboard.py)
ZONES = {"metric": ("UTC", "Europe/Berlin", "Europe/Madrid", "Asia/Kolkata", "Australia/Perth"),
         "us": ("America/Chicago", "America/New_York", "America/Denver", "America/Los_Angeles")}
PLANT_WORDS = ("north", "south", "east", "west", "river", "hill", "harbor", "valley")


def plant(seed: int, which: str = "seen", board: str = "rp2040_pico", machines: int | None = None,
          kinds: list[str] | None = None, scheme: str | None = None, system: str | None = None) -> dict:
    """A description for `seed` of the split `which` ("seen" or "unseen"). kinds, scheme, system pin what the
    seed would otherwise draw (a kind or scheme of the other split is refused: ValueError)."""
    pool = split.kinds(which)
    schemes = split.schemes(which)
    if kinds is not None:
        bad = [k for k in kinds if k not in pool]
        if bad:
            raise ValueError("%s: not a %s kind (%s kinds: %s)" % (", ".join(bad), which, which, ", ".join(pool)))
    if scheme is not None and scheme not in schemes:
        raise ValueError("%s: not a %s naming scheme (%s: %s)" % (scheme, which, which, ", ".join(schemes)))
    if system is not None and system not in units.SYSTEMS:
        raise ValueError("units must be metric or us, got %r" % (system,))
    if board not in BOARDS:
        raise ValueError("board must be one of %s, got %r" % (", ".join(BOARDS), board))
    if machines is not None and not 1 <= machines <= MAX_MACHINES:
        raise ValueError("machines must be 1..%d, got %r" % (MAX_MACHINES, machines))
    rng = random.Random("edgetwin-plants/%s/%d" % (which, seed))
    n = machines or (len(kinds) if kinds else rng.randint(3, MAX_MACHINES))
    picks = _pick_kinds(list(kinds or pool), n, rng, exact=kinds is not None)
    return description(picks, scheme or rng.choice(schemes), system or rng.choice(units.SYSTEMS), board, rng,
                       "gen-%s-%d" % (which, seed))


def description(kinds: list[str], scheme: str, system: str, board: str, rng: random.Random, name: str) -> dict:
    """The description of these machine kinds (in this order), named by `scheme`, in `system` units, wired for
    `board`; rng draws the rest (the scheme's variant, unit spellings, register encoding, services, zone).
    No split is checked here: plant() is what training and benchmarks call."""
    st = naming.style(scheme, rng)
    spelling = rng.randint(0, 1)
    encoding = rng.choice(ENCODINGS)
    from host import board_profile
    from tools.board import simslave

    bus = {"type": "rs485", **simslave.bus_for(board_profile.resolve(board)), "baud": 19200, "parity": "even",
           "stop_bits": 1, "timeout_ms": 200}
    profiles: dict = {}
    devices: dict = {}
    out_machines = []
    counts: dict[str, int] = {}
    for i, kname in enumerate(kinds):
        kind = catalogue.kind(kname)
        counts[kname] = counts.get(kname, 0) + 1
        nm = naming.names(kind, counts[kname], i, st, rng)
        prof = kname.replace(" ", "_")
        if prof not in profiles:
            profiles[prof] = _profile(kind, system, spelling, encoding)
        dev = "unit%d" % (i + 1)
        devices[dev] = {"profile": prof, "bus": "rs485", "unit": i + 1, "poll_ms": 1000}
        out_machines.append({
            "id": nm.id, "kind": kname, "words": _unique(nm.words + kind.words), "aliases": _unique(nm.aliases),
            "state": {"run": {"device": dev, "register": "running"}, "trip": {"device": dev, "register": "tripped"},
                      "settle_s": kind.settle_s},
            "sample_s": 5,
            "signals": [_signal(kind, s, key, tag, dev, system, spelling) for s, (key, tag) in zip(kind.signals,
                                                                                                   nm.keys)]})
    place = rng.choice(PLANT_WORDS)
    return {"format": "edgetwin-plant/1", "name": name,
            "title": "%s plant (%s names, %s units): generated by tools/plants" % (place, st.scheme, system),
            "timezone": rng.choice(ZONES[system]), "board": board, "buses": {"rs485": bus}, "profiles": profiles,
            "devices": devices, "machines": out_machines}


def seen_plant(seed: int, **kw) -> dict:
    """A training plant: training kinds and naming schemes, a new seed."""
    return plant(seed, "seen", **kw)


def unseen_plant(seed: int, **kw) -> dict:
    """A benchmark plant: held-out kinds and naming schemes only."""
    return plant(seed, "unseen", **kw)


def _pick_kinds(pool: list[str], n: int, rng: random.Random, exact: bool) -> list[str]:
    if exact:
        return [pool[i % len(pool)] for i in range(n)]
    rng.shuffle(pool)
    return pool[:n] + [rng.choice(pool) for _ in range(n - len(pool))]


def _unique(words) -> list[str]:
    out: list[str] = []
    for w in words:
        if w not in out:
            out.append(w)
    return out[:16]


# ---- per kind and signal ----

def _decimals(s: Signal, system: str) -> int:
    return units.decimals(s.quantity, system)


def _profile(kind: Kind, system: str, spelling: int, encoding: str) -> dict:
    """One device type per kind: its signals in holding registers, running and tripped as discrete inputs."""
    regs: dict = {}
    addr = 0
    for s in kind.signals:
        d = _decimals(s, system)
        lo, hi = (units.convert(s.quantity, system, v) for v in s.span)
        enc = encoding
        if enc == "int16" and max(abs(lo), abs(hi)) * 10 ** d > 32000:
            enc = "int32"
        if enc == "int16":
            regs[s.role] = {"register": "holding", "address": addr, "data_type": "int16", "scale": 10.0 ** -d}
            addr += 1
        elif enc == "int32":
            regs[s.role] = {"register": "holding", "address": addr, "data_type": "int32", "byte_order": "ABCD",
                            "scale": 10.0 ** -(d + 1)}
            addr += 2
        else:
            regs[s.role] = {"register": "holding", "address": addr, "data_type": "float32", "byte_order": "CDAB"}
            addr += 2
    regs["running"] = {"register": "discrete", "address": 0, "data_type": "bool"}
    regs["tripped"] = {"register": "discrete", "address": 1, "data_type": "bool"}
    return {"title": "%s (generated: tools/plants/generate.py)" % kind.name, "registers": regs}


def _signal(kind: Kind, s: Signal, key: str, tag: str, dev: str, system: str, spelling: int) -> dict:
    d = _decimals(s, system)
    lo, hi = (units.convert(s.quantity, system, v) for v in s.span)
    causes = [w for f in kind.faults if f.first == s.role for w in f.words]
    out = {"key": key, "tag": tag, "unit": units.unit(s.quantity, system, spelling), "decimals": d,
           "words": _unique(s.words + tuple(causes)), "source": {"device": dev, "register": s.role},
           "range": [_round(lo, d, -1), _round(hi, d, +1)]}
    if s.alarms:
        out["alarms"] = [_alarm(a, s, system, d, _causes(kind, s, a)) for a in s.alarms]
    return out


def _causes(kind: Kind, s: Signal, a: Alarm) -> list[str]:
    """The point's cause hints: the words of the kind's faults that drive this signal past its limit in the
    point's direction (an effect reaching 1 or more: catalogue.py's units of nominal -> nearest limit)."""
    sign = +1 if a.level in ("HI", "HIHI") else -1
    words = [w for f in kind.faults for e in f.effects if e.role == s.role and e.sign == sign and e.reach >= 1.0
             for w in f.words]
    return _unique(words)[:MAX_CAUSES]


def _alarm(a: Alarm, s: Signal, system: str, d: int, causes: list[str]) -> dict:
    step = 10.0 ** -d
    hyst = units.scale(s.quantity, system, a.hyst)
    out: dict = {"level": a.level, "limit": _round(units.convert(s.quantity, system, a.limit), d, 0),
                 "hysteresis": max(step, round(hyst, d)) if a.hyst else 0, "on_delay_s": a.on, "off_delay_s": a.off,
                 "priority": a.prio}
    if a.running:
        out["when"] = "running"
    if a.interlock:
        out["interlock"] = a.interlock
    if causes:
        out["causes"] = causes
    return out


def _round(v: float, d: int, way: int) -> float | int:
    """v at d decimals: outward for a range (way -1 down, +1 up), to nearest for a limit."""
    import math

    k = 10 ** d
    x = math.floor(v * k + 1e-9) if way < 0 else math.ceil(v * k - 1e-9) if way > 0 else round(v * k)
    return x // k if d == 0 else round(x / k, d)


# ---- the command line ----

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the usage too)
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog, message))
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m tools.plants.generate",
                 description="Write a generated plant description (docs/TRAINING_PLANTS.md).")
    ap.add_argument("--seed", type=int, required=True, help="the plant's seed (any integer)")
    ap.add_argument("--split", choices=split.SPLITS, required=True,
                    help="seen: training kinds and naming schemes; unseen: held-out ones only")
    ap.add_argument("--out", required=True, help="the JSON file to write (- for stdout)")
    ap.add_argument("--board", choices=BOARDS, default="rp2040_pico", help="the board it is wired for")
    ap.add_argument("--machines", type=int, help="how many machines, 1..%d (default: drawn, 3..%d)"
                    % (MAX_MACHINES, MAX_MACHINES))
    ap.add_argument("--units", choices=units.SYSTEMS, help="metric or us (default: drawn)")
    ap.add_argument("--scheme", choices=naming.SCHEMES, help="naming scheme (default: drawn from the split's)")
    args = ap.parse_args(argv)
    try:
        desc = plant(args.seed, args.split, board=args.board, machines=args.machines, scheme=args.scheme,
                     system=args.units)
    except ValueError as e:
        ap.error(str(e))
    from host import board_profile, plantfile

    text = json.dumps(desc, indent=1) + "\n"
    try:
        plantfile.loads(text, "generated", board_profile.resolve(args.board))
    except plantfile.PlantFileError as e:  # a catalogue bug, not the user's: say so
        sys.stderr.write("%s: the generated description does not check (a catalogue bug): %s\n" % (ap.prog, e))
        return 1
    if args.out == "-":
        sys.stdout.write(text)
    else:
        try:
            with open(args.out, "w") as f:
                f.write(text)
        except OSError as e:
            sys.stderr.write("%s: cannot write %s: %s\n" % (ap.prog, args.out, e.strerror or e))
            return 2
        sys.stderr.write("%s: %s, %d machines, %d signals\n" % (args.out, desc["name"], len(desc["machines"]),
                                                               sum(len(m["signals"]) for m in desc["machines"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
