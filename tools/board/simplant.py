"""Write the simulator's own plant description, shared/plant_sim.json, from its catalogue, and its hash.

    python -m tools.board.simplant           # rewrite shared/plant_sim.json and plant_catalogue.DESCRIPTION_HASH
    python -m tools.board.simplant --check   # exit 1 if either is out of date

The description (docs/PLANT.md) lists every machine a simulated plant can have (16 of each kind, with the
ids shared/plant_catalogue.machine_id gives), its words, and each signal's key, tag, unit, decimals, words
and alarm points with the catalogue's limits, hysteresis, delays, priorities and interlocks, in
engineering units. Limits the catalogue gives relative to a machine's nominal value take the nominal of a
seeded plant (shared.plant.Plant(1, kinds=[kind] * 16)), so the numbers are real ones. Sources and states
are {"sim": true}: the simulator makes its readings itself.

The node logs the description's hash in its PLANT line, but has no room for the file: the hash is written
into shared/plant_catalogue.py as DESCRIPTION_HASH, next to what it describes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host import plantcompile, plantfile  # noqa: E402
from shared import plant, plant_alarms  # noqa: E402
from shared import plant_catalogue as cat  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "shared" / "plant_sim.json"
CATALOGUE = ROOT / "shared" / "plant_catalogue.py"
COMMAND = "python -m tools.board.simplant"
SEED = 1
PRIORITIES = (None, "low", "medium", "high", "critical")
_HASH_LINE = re.compile(r'^DESCRIPTION_HASH = "[0-9a-f]*"\n', re.M)


def _eng(hundredths: int) -> int | float:
    """A catalogue value (hundredths of the unit) in the unit, as an int when it is whole."""
    return hundredths // 100 if hundredths % 100 == 0 else hundredths / 100


def _alarm(point: tuple, nom: int) -> dict:
    ch, level, lim, db, on, off, prio, trip, running, rel = point
    if rel:  # per mille of the machine's nominal value
        lim, db = nom * lim // 1000, nom * db // 1000
    out = {"level": plant_alarms.LEVELS[level].decode(), "limit": _eng(lim), "hysteresis": _eng(db),
           "on_delay_s": on, "off_delay_s": off, "priority": PRIORITIES[prio],
           "when": "running" if running else "always"}
    if trip:
        out["interlock"] = cat.TRIPS[trip].decode()
    return out


def _bad() -> dict:
    _lim, _db, on, off, prio = cat.BAD_POINT[:5]
    return {"on_delay_s": on, "off_delay_s": off, "priority": PRIORITIES[prio]}


def _signal(k: int, ch: int, nom: int) -> dict:
    i = k * cat.NCH + ch
    tag = cat.TAG[i]
    unit = cat.UNIT_X[k] if ch == cat.X else cat.UNIT[ch]
    words = list(cat.WORDS[tag])
    if k == cat.PUMP and ch == cat.V:
        words += list(cat.PUMP_VIBRATION_WORDS)
    return {"key": cat.KEY[i].decode(), "tag": tag.decode(), "unit": unit.decode(),
            "decimals": 0 if (k == cat.MOTOR and ch == cat.X) else 1, "words": words, "source": {"sim": True},
            "alarms": [_alarm(p, nom) for p in cat.ALARMS[k] if p[0] == ch], "bad": _bad()}


def description() -> dict:
    machines = []
    for k, kind in enumerate(cat.KINDS):
        p = plant.Plant(SEED, kinds=[kind] * cat.MAX_MACHINES)
        for n in range(1, cat.MAX_MACHINES + 1):
            m = n - 1  # a plant of one kind keeps the order of its ids
            signals = [_signal(k, ch, p.nom[m * cat.NCH + ch]) for ch in range(cat.NCH)
                       if cat.KEY[k * cat.NCH + ch] is not None]
            machines.append({"id": cat.machine_id(k, n), "kind": kind, "words": list(cat.KIND_WORDS[k]),
                             "aliases": ["%s %d" % (kind, n)], "state": {"sim": True}, "sample_s": 5,
                             "signals": signals})
    return {"$schema": "../host/plant_schema.json", "format": "edgetwin-plant/1", "simulator": True,
            "name": "simulator", "title": "The built-in plant simulator (shared/plant.py): every machine it can have",
            "timezone": "UTC", "machines": machines}


def render(desc: dict) -> str:
    """The description as JSON text: one line per signal, so a change reads as a small diff."""
    head = {k: v for k, v in desc.items() if k != "machines"}
    lines = ["{"] + ["  %s: %s," % (json.dumps(k), json.dumps(v)) for k, v in head.items()] + ['  "machines": [']
    for i, m in enumerate(desc["machines"]):
        top = {k: v for k, v in m.items() if k != "signals"}
        lines.append("    " + json.dumps(top)[:-1] + ', "signals": [')
        sigs = m["signals"]
        lines += ["      %s%s" % (json.dumps(s), "," if j < len(sigs) - 1 else "") for j, s in enumerate(sigs)]
        lines.append("    ]}" + ("," if i < len(desc["machines"]) - 1 else ""))
    return "\n".join(lines + ["  ]", "}"]) + "\n"


def with_hash(catalogue: str, h: str) -> str:
    line = 'DESCRIPTION_HASH = "%s"\n' % h
    if _HASH_LINE.search(catalogue):
        return _HASH_LINE.sub(line, catalogue)
    note = "# the hash of shared/plant_sim.json (tools/board/simplant.py writes it): the node's PLANT line names it\n"
    return catalogue.rstrip("\n") + "\n\n" + note + line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file or the hash is out of date")
    args = ap.parse_args(argv)
    text = render(description())
    desc = plantfile.loads(text, str(OUT))  # it must pass the checker like any description
    h = plantcompile.plant_hash(plantcompile.compile_plant(desc))
    catalogue = CATALOGUE.read_text()
    want = with_hash(catalogue, h)
    if args.check:
        stale = [p.name for p, ok in ((OUT, OUT.exists() and OUT.read_text() == text), (CATALOGUE, catalogue == want))
                 if not ok]
        if stale:
            print("%s out of date: run %s" % (" and ".join(stale), COMMAND), file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    if want != catalogue:
        CATALOGUE.write_text(want)
    print("wrote %s (%d machines, %d bytes), hash %s" % (OUT, len(desc["machines"]), len(text), h))
    return 0


if __name__ == "__main__":
    sys.exit(main())
