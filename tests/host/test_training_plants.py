"""Generated training and benchmark plants (tools/plants, docs/TRAINING_PLANTS.md).

- every machine kind, named by every naming scheme, in metric and US units, passes the project's own checker
  (host/plantfile.py) for the rp2040_pico and esp32s3_devkitc boards, and so do drawn plants of both splits;
- held-out kinds and schemes never appear in a seen plant, and an unseen plant has nothing else;
- the same seed gives the same bytes; the CLI writes a file that checks and refuses bad arguments in one line;
- alarm limits sit clear of every kind's normal and idle values (noise cannot raise them);
- in the simulator every fault's first alarm is on the signal its kind says shows it first (and a fault whose
  first signal has an interlock that way trips the machine on it); stopped machines raise nothing;
- end to end: a node on the virtual board logs a generated unseen plant served over Modbus RTU on a pty, and
  the store holds its machines' ids and the alarm of a fault injected in the simulator.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host import board_profile, plantcompile, plantdesc, plantfile
from host.session import Session
from host.store import LogStore
from tools.plants import catalogue, generate, naming, physics, serve, split, units

ROOT = Path(__file__).resolve().parents[2]
BOARDS = {b: board_profile.resolve(b) for b in generate.BOARDS}
US_ONLY = {"F", "degF", "psi", "psig", "inH2O", "inWC", "gpm", "cfm", "in/s", "ft", "fpm", "ft/min", "klb/h"}
AREA_KEY = re.compile(r"^AI\d\d$")
LEGACY_KEY = re.compile(r"^R4\d{4}$")


def _check(desc: dict, board: str) -> dict:
    return plantfile.loads(json.dumps(desc), desc["name"] + ".json", BOARDS[board])


@pytest.mark.parametrize("scheme", naming.SCHEMES)
def test_every_kind_scheme_and_unit_system_passes_the_checker(scheme: str) -> None:
    kinds = [k.name for k in catalogue.KINDS]
    for system in units.SYSTEMS:
        for b, board in enumerate(generate.BOARDS):
            for i in range(0, len(kinds), 3):  # two machines of each kind: second ones are named too
                group = [k for k in kinds[i:i + 3] for _ in range(2)]
                rng = random.Random("test/%s/%s/%d/%d" % (scheme, system, b, i))
                desc = _check(generate.description(group, scheme, system, board, rng, "t-%d" % i), board)
                got = [m["kind"] for m in desc["machines"]]
                assert got == group
                assert len({m["id"] for m in desc["machines"]}) == len(group)
                shown = {s["unit"] for m in desc["machines"] for s in m["signals"]}
                assert bool(shown & US_ONLY) == (system == "us"), shown
                for m in desc["machines"]:
                    assert m["words"] and m["aliases"], m["id"]
                    for s in m["signals"]:
                        assert s["source"]["register"] in {x.role for x in catalogue.kind(m["kind"]).signals}


def test_alarm_limits_sit_clear_of_normal_running_and_of_idle_values() -> None:
    for k in catalogue.KINDS:
        for s in k.signals:
            lo, hi = s.nominal
            idle = [s.idle_abs] if s.idle_abs is not None else list(catalogue.AMBIENT_C) if s.ambient else [
                lo * s.idle, hi * s.idle]
            for a in s.alarms:
                margin = 4 * s.noise + a.hyst
                up = a.level in ("HI", "HIHI")
                assert (a.limit > hi + margin) if up else (a.limit < lo - margin), (k.name, s.role, a)
                if not a.running:  # an always-armed point must not fire on a stopped machine
                    assert all((v < a.limit) if up else (v > a.limit) for v in idle), (k.name, s.role, a, idle)
            levels = [a.level for a in s.alarms]
            assert len(levels) == len(set(levels))
        for f in k.faults:
            firsts = [e for e in f.effects if e.role == f.first]
            assert firsts and firsts[0].start == 0 and firsts[0].reach > 1, (k.name, f.name)
            assert all(e.start > 0 or e.reach < 1 for e in f.effects if e.role != f.first), (k.name, f.name)


def test_drawn_plants_of_both_splits_pass_the_checker_on_both_boards() -> None:
    for seed in range(12):
        for which in split.SPLITS:
            board = generate.BOARDS[seed % 2]
            desc = _check(generate.plant(seed, which, board=board), board)
            assert 3 <= len(desc["machines"]) <= generate.MAX_MACHINES


def _scheme_marks(desc: dict) -> set[str]:
    keys = [s["key"] for m in desc["machines"] for s in m["signals"]]
    marks = set()
    if any(AREA_KEY.match(k) for k in keys):
        marks.add("area")
    if any(LEGACY_KEY.match(k) for k in keys):
        marks.add("legacy")
    return marks


def test_held_out_kinds_and_schemes_never_appear_in_seen_plants() -> None:
    assert set(split.HELD_OUT_KINDS).isdisjoint(split.TRAIN_KINDS)
    assert set(split.HELD_OUT_SCHEMES).isdisjoint(split.TRAIN_SCHEMES)
    assert set(split.TRAIN_KINDS) | set(split.HELD_OUT_KINDS) == set(catalogue.BY_NAME)
    assert len(catalogue.KINDS) >= 12
    seen_kinds, seen_schemes = set(), set()
    for seed in range(200):
        seen = generate.seen_plant(seed)
        kinds = {m["kind"] for m in seen["machines"]}
        assert kinds.isdisjoint(split.HELD_OUT_KINDS), (seed, kinds)
        assert not _scheme_marks(seen), (seed, seen["title"])
        seen_kinds |= kinds
        seen_schemes.add(seen["title"].split("(")[1].split(" ")[0])
        unseen = generate.unseen_plant(seed)
        assert {m["kind"] for m in unseen["machines"]} <= set(split.HELD_OUT_KINDS)
        assert len(_scheme_marks(unseen)) == 1, (seed, unseen["title"])
    assert seen_kinds == set(split.TRAIN_KINDS) and seen_schemes == set(split.TRAIN_SCHEMES)
    with pytest.raises(ValueError, match="not a seen kind"):
        generate.plant(1, "seen", kinds=["rotary kiln"])
    with pytest.raises(ValueError, match="not a unseen naming scheme"):
        generate.plant(1, "unseen", scheme="isa")


def test_the_same_seed_gives_the_same_plant() -> None:
    a = json.dumps(generate.plant(42, "unseen"))
    assert a == json.dumps(generate.plant(42, "unseen"))
    assert a != json.dumps(generate.plant(43, "unseen"))
    assert json.dumps(generate.plant(42, "seen")) != a


def test_cli_writes_a_plant_that_checks_and_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    run = lambda *a: subprocess.run([sys.executable, "-m", "tools.plants.generate", *a], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    r = run("--seed", "9", "--split", "unseen", "--board", "esp32s3_devkitc", "--out", str(out))
    assert r.returncode == 0, r.stderr
    desc = plantfile.load(out, BOARDS["esp32s3_devkitc"])
    assert desc == _check(generate.plant(9, "unseen", board="esp32s3_devkitc"), "esp32s3_devkitc")
    for bad, why in ((("--seed", "1", "--split", "maybe", "--out", "x"), "--split"),
                     (("--seed", "1", "--split", "seen", "--machines", "40", "--out", "x"), "machines must be 1..6"),
                     (("--seed", "1", "--split", "seen", "--scheme", "legacy", "--out", "x"), "legacy"),
                     (("--split", "seen", "--out", "x"), "--seed")):
        r = run(*bad)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and why in r.stderr, (bad, r.stderr)


def _faults() -> list[tuple[str, str]]:
    return catalogue.faults()


@pytest.mark.parametrize("kind,fault", _faults(), ids=["%s:%s" % kf for kf in _faults()])
def test_each_fault_raises_its_first_alarm_on_its_stated_signal(kind: str, fault: str) -> None:
    which = "unseen" if kind in split.HELD_OUT_KINDS else "seen"
    spec = catalogue.kind(kind).fault(fault)
    first = catalogue.kind(kind).signal(spec.first)
    sign = next(e.sign for e in spec.effects if e.role == spec.first)
    trips = any(a.interlock and (a.level in ("HI", "HIHI")) == (sign > 0) for a in first.alarms)
    for n, system in enumerate(units.SYSTEMS):
        desc = generate.plant(n, which, kinds=[kind], system=system)
        sim = physics.Sim(desc, seed=n + 3)
        mid = desc["machines"][0]["id"]
        sim.inject(mid, fault, at_s=120, severity=5)
        while sim.tick < 4000 and not sim.truth()[0]["trip"]:
            sim.step()
        before = [e for e in sim.events if e["event"] == "alarm" and e["tick"] < 120]
        assert not before, "alarms before the fault: %s" % before
        t = sim.truth()[0]
        assert t["first_alarm"] is not None, "%s %s raised no alarm" % (kind, fault)
        assert t["first_alarm"]["tag"] == t["expected_first"]["tag"], (system, t)
        if trips:
            assert t["trip"] is not None and t["trip"]["tick"] >= t["first_alarm"]["tick"], t
            assert sim.state(mid) == physics.plantsim.TRIPPED
            assert any(e["event"] == "trip" and e["cause"] == "interlock=" + t["trip"]["interlock"]
                       for e in sim.events)


def test_stopped_machines_raise_no_alarms_and_a_trip_is_repaired() -> None:
    desc = generate.plant(3, "seen", machines=6)
    sim = physics.Sim(desc, seed=5, running=False, repair_s=100, restart_s=10)
    for _ in range(900):
        sim.step()
    assert not [e for e in sim.events if e["event"] == "alarm"]
    assert all(sim.state(m["id"]) == physics.plantsim.STOPPED for m in desc["machines"])
    m = desc["machines"][0]
    sim.command(m["id"], "start")
    sim.command(m["id"], "auto")
    kind = catalogue.kind(m["kind"])
    sim.inject(m["id"], kind.faults[0].name, severity=5)
    while not sim.truth()[0]["until_tick"] and sim.tick < 6000:
        sim.step()
    t = sim.truth()[0]
    assert t["ended_by"] == "repair" and t["until_tick"] - t["trip"]["tick"] == 100, t
    for _ in range(15):
        sim.step()
    assert sim.state(m["id"]) == physics.plantsim.RUNNING


# ---- end to end: a node logs a generated unseen plant over Modbus ----

@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    from tools.board import vnode

    return vnode.build_x64("rp2040_pico", tmp_path_factory.mktemp("build"))


def _quick_fault(desc: dict) -> tuple[str, str, str]:
    """(machine, fault, tag) of a fault whose first alarm arms at once (not running-only: no settle time to wait)
    and holds once raised."""
    for m in desc["machines"]:
        kind = catalogue.kind(m["kind"])
        for f in kind.faults:
            sig = next(s for s in m["signals"] if s["source"]["register"] == f.first)
            sign = next(e.sign for e in f.effects if e.role == f.first)
            pts = [a for a in sig.get("alarms", ()) if (a["level"] in ("HI", "HIHI")) == (sign > 0)]
            steady = not any(e.osc for e in f.effects if e.role == f.first)  # no swing back under the limit
            if steady and pts and all(a.get("when", "always") == "always" for a in pts):
                return m["id"], f.name, sig["tag"]
    raise AssertionError("no fault with an always-armed first alarm in %s" % desc["name"])


@pytest.mark.slow
def test_a_node_logs_a_generated_unseen_plant_and_its_fault(tmp_path: Path, build: Path) -> None:
    from tools.board import vnode

    desc_d = _check(generate.unseen_plant(4, machines=3), "rp2040_pico")
    mid, fault, tag = _quick_fault(desc_d)
    sim = physics.Sim(desc_d, seed=4)
    sim.inject(mid, fault, at_s=1, severity=2)  # slow: alarmed long before it could trip
    while sim.truth()[0]["first_alarm"] is None:  # the fault has raised its alarm when the node starts ...
        sim.step()
    for _ in range(300):  # ... and is past its limit far enough for noise not to clear it
        sim.step()
    assert sim.truth()[0]["first_alarm"]["tag"] == tag and sim.truth()[0]["trip"] is None
    data = plantcompile.compile_plant(desc_d)
    desc = plantdesc.from_dict(desc_d, plantcompile.plant_hash(data))
    uart = desc_d["buses"]["rs485"]["uart"]
    node = vnode.VNode("rp2040_pico", tmp_path / "root", build, {"report_ms": 5000}, heap=600000, plant=data,
                       buses=(uart,))
    rig = serve.SimRig(desc_d, sim, bus_port=node.bus_port(uart)).start()
    store = LogStore(tmp_path / "plant.db")
    s = Session(node.uart_port, store, name=desc_d["name"], plant=desc)
    ids = [m["id"] for m in desc_d["machines"]]
    db = sqlite3.connect(tmp_path / "plant.db")
    rows: list[str] = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 40:
            s.poll()
            rows = [r[0] for r in db.execute("SELECT text FROM logs ORDER BY id")]
            alarmed = any(" ALARM " in r and (" %s %s " % (mid, tag)) in r for r in rows)
            if alarmed and all(any(r.split(" ")[1:2] == [i] for r in rows) for i in ids):
                break
            time.sleep(0.05)
        print("node logged the plant and the alarm in %.1f s" % (time.monotonic() - t0))
    finally:
        rig.stop()
        console = node.console()
        node.close()
    assert s.node_plant == desc.hash and not s.plant_mismatch, (s.status(), console[-2000:])
    samples = {r.split(" ")[1] for r in rows if len(r.split(" ")) > 2 and r.split(" ")[2] in ("RUNNING", "STOPPED",
                                                                                              "TRIPPED")}
    assert set(ids) <= samples, (ids, rows[-10:])
    alarms = [r for r in rows if " ALARM " in r and " %s %s " % (mid, tag) in r]
    assert alarms and alarms[0].endswith("RAISED"), (mid, tag, [r for r in rows if "ALARM" in r], console[-1500:])
    # and the node raised nothing the simulator did not (BAD aside: a poll may time out while the node boots)
    raised = {(e["machine"], e["level"], e["tag"]) for e in sim.events if e["event"] == "alarm"}
    node_raised = {tuple(r.split(" ")[2:5]) for r in rows if r.split(" ")[1:2] == ["ALARM"]}
    assert {(m, lv, t) for lv, m, t in node_raised if lv != "BAD"} <= raised, (node_raised, raised)
