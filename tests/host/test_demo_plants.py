"""tools/demo/plants.py and tools/demo/truth.py on a generated plant: what `edgetwin demo --plant` checks, the faults
it plans from the description (an alarm on one machine, an alarm then a trip TRIP_AT s after the simulator is served
on another), the questions it derives, and the ground truth read from that simulator's own lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from host import board_profile, plantfile
from tools.board import simslave
from tools.demo import plants, truth
from tools.plants import catalogue, generate, physics, split

ROOT = Path(__file__).resolve().parents[2]
EPOCH = physics.EPOCH
BUILTIN_ID = re.compile(r"\b(?:P|M|C|CV)-\d{3}\b")


@pytest.mark.parametrize("plant, seed, msg", [
    ("no-such-plant.json", 2000, "no such file"), ("unseeen", 2000, "builtin, seen, unseen or a plant description"),
    ("unseen", -1, "--plant-seed"), (str(ROOT / "examples" / "pump_skid.json"), 2000, "kind 'pump' is not one")])
def test_choose_refuses_what_the_demo_cannot_run_in_one_line(plant: str, seed: int, msg: str) -> None:
    with pytest.raises(plants.PlantError) as e:
        plants.choose(plant, seed)
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_choose_refuses_a_malformed_file_with_the_checkers_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "edgetwin-plant/1", "name": ')
    with pytest.raises(plants.PlantError) as e:
        plants.choose(str(bad), 2000)
    assert str(e.value).startswith(str(bad)) and "JSON" in str(e.value), str(e.value)


def test_a_given_file_is_wired_for_each_nodes_board(tmp_path: Path) -> None:
    f = tmp_path / "seen7.json"
    f.write_text(json.dumps(generate.plant(7, "seen", board="rp2040_pico")))
    c = plants.choose(str(f), 5)
    assert c.which == "file" and c.summary() == {"plant": "file", "split": None, "seed": 5, "file": str(f)}
    prof = board_profile.resolve("esp32s3_devkitc")
    d = c.description(1, "esp32s3_devkitc", prof)
    bus = d["buses"]["rs485"]
    assert d["board"] == "esp32s3_devkitc" and bus["uart"] == simslave.bus_for(prof)["uart"] != 1, bus
    plantfile.loads(json.dumps(d), "seen7.json", prof)  # checks against the board it now runs on
    assert c.desc["board"] == "rp2040_pico"  # the file's own description is left as it was


@pytest.fixture(scope="module")
def run() -> tuple:
    """Node 1 of `--plant unseen`: its planned plant and its simulator's lines over the run's first 45 s."""
    c = plants.choose("unseen", plants.DEFAULT_SEED)
    d = c.description(0, "rp2040_pico", board_profile.resolve("rp2040_pico"))
    node_plant = plants.plan(d, c.seed, 60)
    sim = node_plant.simulator(EPOCH)
    lines: list[str] = []
    for _ in range(45):
        sim.step()
        lines += sim.lines
    return node_plant, lines


def test_the_plan_alarms_one_machine_and_trips_another_trip_at_s_in(run: tuple) -> None:
    node_plant, lines = run
    kinds = {m["id"]: catalogue.kind(m["kind"]) for m in node_plant.desc["machines"]}
    assert {k.name for k in kinds.values()} <= set(split.HELD_OUT_KINDS)
    trip, alarm = (next(f for f in node_plant.faults if f.expect == e) for e in ("trip", "alarm"))
    assert trip.machine != alarm.machine
    for f in (trip, alarm):  # the description's own kinds' faults
        kinds[f.machine].fault(f.fault)
    assert node_plant.epoch == EPOCH - node_plant.start_tick  # served at EPOCH, its head start before
    stamp = physics.iso(EPOCH + plants.TRIP_AT)
    assert any(ln.startswith("%s STATE %s RUNNING->TRIPPED interlock=" % (stamp, trip.machine)) for ln in lines), lines
    before = [ln for ln in lines if ln < stamp and " ALARM " in ln]
    assert any(" %s " % trip.machine in ln for ln in before), lines  # its alarm comes first, within the run
    assert any(" %s " % alarm.machine in ln for ln in before), lines
    assert not any("STATE %s " % alarm.machine in ln for ln in lines), lines  # the other machine keeps running
    assert not any(BUILTIN_ID.search(ln) for ln in lines)


def test_questions_name_the_described_machine(run: tuple) -> None:
    node_plant, _ = run
    q = plants.questions(node_plant)
    alarm = next(f for f in node_plant.faults if f.expect == "alarm")
    m = next(m for m in node_plant.desc["machines"] if m["id"] == alarm.machine)
    assert q[0] == "Which machine stopped or tripped, and why?"
    assert "the %s %s running" % (m["words"][0], m["id"]) in q[1] and not BUILTIN_ID.search(q[1]), q


def test_truth_reads_the_generated_plants_lines(run: tuple) -> None:
    node_plant, lines = run
    q = plants.questions(node_plant)
    trip, alarm = (next(f for f in node_plant.faults if f.expect == e) for e in ("trip", "alarm"))
    evs = truth.events([{"node": "node1", "text": ln} for ln in lines], tags=truth.interlock_tags([node_plant.desc]))
    names, faults = truth.named_by([node_plant.desc]), plants.truth_faults([("node1", node_plant)])
    t = truth.truth_for(q[0], evs, faults, names)
    tripped = [e for e in evs if e["kind"] == "trip"]
    assert [e["machine"] for e in tripped] == [trip.machine] and t["events"] == [tripped[0]["line"]], t
    sig = next(s["tag"] for m in node_plant.desc["machines"] if m["id"] == trip.machine for s in m["signals"]
               for a in s.get("alarms", ()) if a.get("interlock") == tripped[0]["interlock"])
    assert t["text"].startswith("node1: %s TRIPPED at " % trip.machine) and t["text"].endswith(", %s)" % sig), t
    assert t["machines"] == [] and len(t["faults"]) == 2
    a = truth.truth_for(q[1], evs, faults, names)
    assert a["machines"] == [alarm.machine] and a["events"], a
    assert all(" %s " % alarm.machine in ln for ln in a["events"]), a
    assert "still raised at the end: %s " % alarm.machine in a["text"], a
    since = physics.iso(node_plant.epoch + alarm.at)[11:19]
    assert a["faults"] == ["node1: %s %s (severity %d) since %s" % (alarm.machine, alarm.fault.replace("_", " "),
                                                                    alarm.severity, since)], a


def test_named_by_ids_aliases_and_the_words_only_one_machine_has() -> None:
    names = truth.named_by([generate.plant(2000, "unseen"), generate.plant(2001, "unseen")])
    assert truth.named("Did A3-KLN01 or MIXER2 trip?", names) == ["A3-KLN01", "MIXER2"]
    assert truth.named("Is KLN01 alarming?", names) == ["A3-KLN01"]  # an alias
    assert truth.named("Is mixer two running?", names) == ["MIXER2"]
    assert truth.named("Is the slurry mixer ok?", names) == ["A3-MXR01"]  # a word of one machine only
    assert truth.named("Is the kiln running?", names) == []  # every kiln's word: the question names none
    assert truth.named("Did A3-KLN01X trip?", names) == []
    assert truth.named("Is pump P-101 running?") == ["P-101"]  # the built-in simulator's ids, as before
