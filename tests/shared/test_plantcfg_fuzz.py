# test_plantcfg_fuzz.py: the node's loader of /plant.json (shared/plantcfg.py) on 1,200 mutated files: every one
# either loads (and then runs an engine step) or is refused with PlantConfigError naming /plant.json; nothing
# else is ever raised (no TypeError, IndexError, KeyError, MemoryError) on either interpreter.
import json

import testkit
from shared import plantcfg, readings as rd
from shared.plant_engine import Engine
from shared.wallclock import WallClock
from test_plant_engine import DESC, PROF

_VALUES = (0, -1, 1, 2, 255, 256, 65535, 65536, 1 << 29, -(1 << 29), 1 << 40, "x", "", None, True, [], {}, 1.5,
           "ALARM", "P-1", [0], [[1]], "a" * 80)


def _paths(node, prefix, out):
    # every (container, key) in the structure
    if isinstance(node, dict):
        for k in node:
            out.append((node, k))
            _paths(node[k], prefix, out)
    elif isinstance(node, list):
        for i in range(len(node)):
            out.append((node, i))
            _paths(node[i], prefix, out)
    return out


def _mutant(rng, k):
    d = json.loads(json.dumps(DESC))
    paths = _paths(d, "", [])
    for _ in range(1 + rng.below(3)):
        c, key = paths[rng.below(len(paths))]
        op = rng.below(4)
        if op == 0:
            c[key] = _VALUES[rng.below(len(_VALUES))]
        elif op == 1 and isinstance(c, dict):
            del c[key]
            paths = _paths(d, "", [])
        elif op == 2 and isinstance(c, list) and isinstance(c[key], int):
            c[key] = c[key] + (rng.below(5) - 2)
        elif isinstance(c, list) and len(c) > 1:
            c.pop()
            paths = _paths(d, "", [])
    data = json.dumps(d).encode()
    if k % 10 == 9:  # a truncated or bit-flipped file
        data = bytearray(data[:rng.below(len(data))] if k % 20 == 9 else data)
        if data and k % 20 == 19:
            data[rng.below(len(data))] ^= 1 << rng.below(8)
        data = bytes(data)
    return data


def _emit(buf, n, level):
    pass


def test_mutated_files_load_or_are_refused_in_one_line():
    rng = testkit.Rng(2026)
    loaded = refused = 0
    for k in range(1200):
        data = _mutant(rng, k)
        try:
            cfg = plantcfg.parse(data, "/plant.json", PROF)
        except plantcfg.PlantConfigError as e:
            msg = str(e)
            assert msg.startswith("/plant.json") and "\n" not in msg, msg
            refused += 1
            continue
        r = rd.Readings(cfg.n_signals, cfg.n_contacts)
        e = Engine(cfg, r, _emit, WallClock(0), 0)
        for s in range(cfg.n_signals):
            r.put(s, 100 * s, 1000)
        for c in range(cfg.n_contacts):
            r.put_contact(c, 1, 1000)
        e.step(1000)
        loaded += 1
    assert loaded > 50 and refused > 500, (loaded, refused)
