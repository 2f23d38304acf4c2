"""The simulator's own plant description (shared/plant_sim.json, written by tools/board/simplant.py): it is
current, it passes the checker, the node's DESCRIPTION_HASH is its hash, and every line a simulated plant
writes names only machines, keys, tags, units, alarm points and interlocks the description has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from host import plantcompile, plantdesc, plantfile
from shared import plant, plant_catalogue
from tools.board import simplant

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "shared" / "plant_sim.json"
VALUE = re.compile(r"(\?)$|(-?\d+)(?:\.(\d+))?(\S+)$")
VERBS = ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE")


@pytest.fixture(scope="module")
def desc() -> dict:
    return plantfile.load(SIM)


def test_the_file_and_the_hash_are_current() -> None:
    assert simplant.main(["--check"]) == 0


def test_it_checks_and_the_node_logs_its_hash(desc: dict) -> None:
    assert desc["simulator"] is True and desc["name"] == "simulator" and desc["timezone"] == "UTC"
    h = plantcompile.plant_hash(plantcompile.compile_plant(desc))
    assert plant_catalogue.DESCRIPTION_HASH == h
    assert plantdesc.builtin().hash == h and plantdesc.builtin().simulator
    ids = [m["id"] for m in desc["machines"]]
    assert len(ids) == 64 and ids[0] == "P-101" and ids[-1] == "CV-416"
    assert all(m["state"] == {"sim": True, "settle_s": 20} for m in desc["machines"])


def test_limits_are_the_seeded_plants_nominal_values(desc: dict) -> None:
    p = plant.Plant(simplant.SEED, kinds=["pump"] * 16)
    p3 = desc["machines"][2]  # P-103
    current = next(s for s in p3["signals"] if s["key"] == "I")
    hi = next(a for a in current["alarms"] if a["level"] == "HI")
    nom = p.nom[2 * plant_catalogue.NCH + plant_catalogue.I]  # hundredths of an ampere
    assert hi["limit"] * 100 == pytest.approx(nom * 1100 // 1000) and hi["when"] == "running"
    motor = next(m for m in desc["machines"] if m["id"] == "M-201")
    speed = next(s for s in motor["signals"] if s["key"] == "N")
    assert speed["decimals"] == 0 and speed["unit"] == "rpm"
    vib = next(s for s in desc["machines"][0]["signals"] if s["key"] == "V")
    assert "cavitation" in vib["words"]


def _check_value(text: str, signal: dict, line: str) -> None:
    m = VALUE.match(text)
    assert m, line
    if m.group(1):
        return
    assert m.group(4) == signal["unit"], line
    assert len(m.group(3) or "") == signal["decimals"], line


@pytest.mark.parametrize("seed,machines", [(1, 4), (7, 16), (42, 9), (3, 1)])
def test_simulated_lines_name_only_what_the_description_has(desc: dict, seed: int, machines: int) -> None:
    by_id = {m["id"]: m for m in desc["machines"]}
    p = plant.Plant(seed, n_machines=machines, fault_every_h=1)
    p.inject(p.ids[0], "overheating", 3)  # alarms and, given time, a trip on an interlock
    p.inject(p.ids[-1], "sensor_dropout", 3)  # BAD alarms
    kinds = {"sample": 0, "alarm": 0, "state": 0, "trip": 0}
    for _ in range(2500):
        p.step()
        for line in p.lines():
            assert len(line) <= 128 and line[19:21] == "Z ", line
            words = line[21:].split(" ")
            if words[0] in VERBS:
                _verb, level, mid, tag, value = words[:5]
                sig = next(s for s in by_id[mid]["signals"] if s["tag"] == tag)
                _check_value(value, sig, line)
                if level == "BAD":
                    assert sig["bad"] is not False, line
                else:
                    assert any(a["level"] == level for a in sig["alarms"]), line
                kinds["alarm"] += 1
            elif words[0] == "STATE":
                m = by_id[words[1]]
                cause = words[3]
                if cause.startswith("interlock="):
                    locks = {a.get("interlock") for s in m["signals"] for a in s["alarms"]}
                    assert cause.split("=", 1)[1] in locks, line
                    kinds["trip"] += 1
                kinds["state"] += 1
            elif words[0] != "LOST":
                m = by_id[words[0]]
                keys = {s["key"]: s for s in m["signals"]}
                for kv in words[2:]:
                    key, value = kv.split("=", 1)
                    _check_value(value, keys[key], line)
                kinds["sample"] += 1
    assert kinds["sample"] and kinds["alarm"], kinds
    assert machines == 1 or (kinds["state"] and kinds["trip"]), kinds
