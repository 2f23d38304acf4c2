"""A node on the MicroPython unix port reads the plant simulator through real Modbus RTU slaves and logs it.

The virtual board (tools/board/vnode.py) runs firmware/node.py with a compiled plant description
(/plant.json) and an RS-485 bus on UART1 (a pty); pymodbus's RTU server serves the simulated plant on the
other end (tools/board/simslave.py's description: one slave per machine, its readings as int32 registers,
run and trip as discrete inputs; tools/board/rig.py serves it); the gateway's Session stores what the node logs. The plant's own log is the ground
truth: every alarm the simulator raised and every trip while the node watched is in the node's log (within
a few seconds), and the node raised none the simulator did not. Faults are injected and developed before
the node starts (the simulator runs in real time: one step per second, as the node polls), so trips come
within the minute the test watches. The same run checks an operator's ACK: queued in the store while the
node is up, sent as a CMD frame, logged by the node naming who.
"""

from __future__ import annotations

import datetime
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from host import plantcompile, plantdesc, plantfile
from host.session import Session
from host.store import LogStore
from shared import plant
from tools.board import rig, simslave, vnode

pytestmark = pytest.mark.slow

TRIP_S = 32  # seconds into the watch the first trip comes: past the node's 25 s settle time and the ACK at 30 s
SLACK_S = 4  # timing differences between the two logs: one poll, one on-delay sample
WATCH_S = 45  # seconds of plant time the node logs: the first trip well inside the window checked (to SLACK_S
# before the end); every second more is a second of the test, with nothing new to check after the trip
_ALARM = re.compile(r"^(\S+) (ALARM|ACK|CLEAR|SHELVE|UNSHELVE) (HI|HIHI|LO|LOLO|BAD) (\S+) (\S+) \S+ prio=\d (\S+)")
_STATE = re.compile(r"^(\S+) STATE (\S+) (\S+)->(\S+) (\S+)")


def _secs(ts: str) -> int:
    """A line's UTC timestamp in seconds (its first word)."""
    return int(datetime.datetime.strptime(ts[:20], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp())


def _events(lines: list[str]) -> tuple[list, list]:
    """(alarm raises (t, machine, level, tag), trips (t, machine, cause)) of a log."""
    raises, trips = [], []
    for ln in lines:
        m = _ALARM.match(ln)
        if m and m.group(2) == "ALARM" and m.group(6) == "RAISED":
            raises.append((_secs(m.group(1)), m.group(4), m.group(3), m.group(5)))
        m = _STATE.match(ln)
        if m and m.group(4) == "TRIPPED":
            trips.append((_secs(m.group(1)), m.group(2), m.group(5)))
    return raises, trips


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return vnode.build_x64("rp2040_pico", tmp_path_factory.mktemp("build"))


def _plant() -> plant.Plant:
    p = plant.Plant(2, n_machines=4, sample_every=5, fault_every_h=0)
    for m in p.ids:  # hand mode: every machine runs, so the faults develop
        p.command(m, "start")
    p.inject("P-101", "clogged_filter", 5)  # trips on its strainer's dP (HIHI_DP) ...
    p.inject("M-201", "overheating", 5)
    p.inject("C-301", "sensor_dropout", 5, "T")  # ... and a temperature sensor drops out: BAD
    return p


def _pre_roll() -> int:
    """Ticks to run the plant before the node watches, so that its first trip comes TRIP_S into the watch."""
    p = _plant()
    for t in range(2000):
        p.step()
        if any("->TRIPPED" in ln for ln in p.lines()):
            return max(0, t - TRIP_S)
    raise AssertionError("the injected faults never tripped a machine")


def test_node_logs_what_the_plant_did_through_modbus(tmp_path: Path, build: Path) -> None:
    p = _plant()
    before = []  # the plant's log before the node watches: the alarms it had active when the node started
    for _ in range(_pre_roll()):
        p.step()
        before += [(p.tick, ln) for ln in p.lines()]
    desc_d = plantfile.loads(json.dumps(simslave.description(p, name="sim-modbus")), "sim-modbus.json")
    data = plantcompile.compile_plant(desc_d)
    desc = plantdesc.from_dict(desc_d, plantcompile.plant_hash(data))
    node = vnode.VNode("rp2040_pico", tmp_path / "root", build, {"report_ms": 5000}, heap=600000, plant=data,
                       buses=(1,))
    slaves = rig.Rig(desc_d, p, bus_port=node.bus_port(1)).start()
    store = LogStore(tmp_path / "plant.db")
    s = Session(node.uart_port, store, name="sim-modbus", plant=desc)
    try:
        t0 = time.monotonic()
        start_tick = p.tick
        acked = False
        while time.monotonic() - t0 < WATCH_S:
            s.poll()
            if not acked and time.monotonic() - t0 > 30:  # an operator acknowledges an alarm while the node runs
                store.queue_command("sim-modbus", "ACK", "C-301", "discharge_temp", None, "alice")
                acked = True
            time.sleep(0.005)
        end_tick = p.tick
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the last lines in flight
            s.poll()
            time.sleep(0.005)
    finally:
        slaves.stop()
        console = node.console()
        node.close()
    assert s.node_plant == desc.hash and not s.plant_mismatch, (s.status(), console[-2000:])
    rows = [r[0] for r in sqlite3.connect(tmp_path / "plant.db").execute(
        "SELECT text FROM logs WHERE text NOT LIKE 'NODE %' ORDER BY id")]
    assert rows and rows[0].split(" ", 2)[1] == "PLANT", rows[:3]
    node_lines = rows[1:]
    # the two clocks: the node stamps wall time, the simulator its own; line them up on the plant's first sample
    truth = [(t, ln) for t, ln in slaves.lines if start_tick < t <= end_tick]
    n_raises, n_trips = _events(node_lines)
    t_raises, t_trips = _events([ln for _, ln in truth])
    assert t_trips, "the faults should have tripped a machine while the node watched: %s" % truth[-5:]
    off = _offset(node_lines, [ln for _, ln in truth])
    win0 = _secs(truth[0][1]) + 25  # the node's own settle time at boot (running-only alarms arm late)
    win1 = _secs(truth[-1][1]) - SLACK_S
    missed = [e for e in t_raises if win0 <= e[0] <= win1 and not _near(e, n_raises, off)]
    assert not missed, "the plant raised these, the node did not log them: %s\nnode: %s" % (missed, n_raises)
    active0 = {(m, lv, tag) for _, m, lv, tag in _active_before(before + slaves.lines, start_tick + 25)}
    invented = [e for e in n_raises if not _near(e, t_raises, -off) and (e[1], e[2], e[3]) not in active0]
    assert not invented, "the node raised these, the plant did not: %s\nplant: %s" % (invented, t_raises)
    for t, m, cause in t_trips:
        if win0 <= t <= win1:
            assert any(m2 == m and c2 == cause and abs(t2 - off - t) <= SLACK_S for t2, m2, c2 in n_trips), \
                "trip %s %s at %d not logged by the node: %s" % (m, cause, t, n_trips)
    # BAD from a sensor that dropped out: the register reads out of range
    assert any(ln.startswith("ALARM BAD C-301 discharge_temp ? ") and "why=range" in ln
               for ln in (x.split(" ", 1)[1] for x in node_lines)), [x for x in node_lines if "BAD" in x]
    # the operator's acknowledgement: delivered as a CMD frame, logged by the node naming who
    acks = [x for x in node_lines if " by=alice" in x]
    assert s.counts["commands"] == 1
    assert not store.pending_commands("sim-modbus"), "the command was not marked delivered"
    assert len(acks) == 1 and acks[0].split(" ", 1)[1].startswith("ACK BAD C-301 discharge_temp ? prio=1 ACKED"), acks


def _offset(node_lines: list[str], truth: list[str]) -> int:
    """Seconds to subtract from a node stamp to get the plant's: from the first trip both logged."""
    _, n_trips = _events(node_lines)
    _, t_trips = _events(truth)
    for t, m, cause in n_trips:
        for t2, m2, c2 in t_trips:
            if m == m2 and cause == c2:
                return t - t2
    return _secs(node_lines[0]) - _secs(truth[0])


def _near(e: tuple, others: list, off: int) -> bool:
    t, m, lv, tag = e
    return any(m2 == m and lv2 == lv and tag2 == tag and abs(t2 - off - t) <= SLACK_S for t2, m2, lv2, tag2 in others)


def _active_before(lines: list[tuple[int, str]], tick: int) -> list:
    """Alarm points the plant had active (raised, not cleared) by `tick`: a node starting then raises them anew."""
    active: dict = {}
    for t, ln in lines:
        if t > tick:
            break
        m = _ALARM.match(ln)
        if not m:
            continue
        key = (m.group(4), m.group(3), m.group(5))
        if m.group(2) == "ALARM":
            active[key] = True
        elif m.group(2) == "CLEAR":
            active.pop(key, None)
    return [(0,) + k for k in active]
