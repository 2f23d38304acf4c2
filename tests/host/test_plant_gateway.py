"""The gateway and the node agree on the plant description, or say so: a virtual board (the MicroPython unix port)
runs firmware/node.py with a compiled description, the gateway (host/gateway.py) is given another, or the board's
/plant.json is corrupt.

- the node's PLANT line names its description's hash; a gateway given another description reports the node in
  one line (printed once) and in its status, stores the node's lines under the hash the node named (and that
  description with them when the gateway knows it), and names the node by its own description's name, not
  by a port;
- a corrupt /plant.json never stops the node: it logs no plant inputs, says why in a NODE line the gateway
  stores and prints, and keeps its link and reports.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from host import plantcompile, plantdesc, plantfile
from host.gateway import Gateway
from tools.board import vnode

pytestmark = pytest.mark.slow


def _desc(name: str, unit: int) -> tuple[bytes, plantdesc.PlantDesc]:
    d = {"format": "edgetwin-plant/1", "name": name, "timezone": "Europe/Berlin",
         "buses": {"rs485": {"type": "rs485", "uart": 1, "tx": 4, "rx": 5, "timeout_ms": 50}},
         "profiles": {"vfd": {"registers": {"run": {"register": "discrete", "address": 0},
                                            "current": {"register": "input", "address": 3, "scale": 0.1}}}},
         "devices": {"drive": {"profile": "vfd", "bus": "rs485", "unit": unit}},
         "machines": [{"id": "AHU-1", "kind": "air handling unit", "state": {"run": {"device": "drive", "register": "run"}},
                       "signals": [{"key": "FAN", "tag": "fan_current", "unit": "A",
                                    "source": {"device": "drive", "register": "current"}}]}]}
    checked = plantfile.loads(json.dumps(d), name + ".json")
    data = plantcompile.compile_plant(checked)
    return data, plantdesc.from_dict(checked, plantcompile.plant_hash(data))


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return vnode.build_x64("rp2040_pico", tmp_path_factory.mktemp("build"))


def _run(gw: Gateway, db: Path, until, seconds: float = 40.0) -> list[tuple]:
    deadline = time.monotonic() + seconds
    rows: list[tuple] = []
    while time.monotonic() < deadline:
        gw.round()
        rows = sqlite3.connect(db).execute("SELECT nodes.name, logs.text, logs.plant FROM logs JOIN nodes "
                                           "ON nodes.id = logs.node ORDER BY logs.id").fetchall()
        if until(rows):
            break
        gw.wait()
    return rows


def test_a_node_on_another_description_is_reported_and_its_lines_kept_under_its_hash(tmp_path: Path, build: Path,
                                                                                     capsys) -> None:
    data, mine = _desc("hall-3", 1)
    _, theirs = _desc("hall-4", 2)  # what the gateway is (wrongly) given
    assert mine.hash != theirs.hash
    node = vnode.VNode("rp2040_pico", tmp_path / "root", build, {"report_ms": 1000}, heap=600000, plant=data,
                       buses=(1,))
    gw = Gateway([node.uart_port], tmp_path / "g.db", plants=[theirs])
    try:
        gw.open()
        rows = _run(gw, tmp_path / "g.db", lambda rows: any("fan_current" in r[1] and "BAD" in r[1] for r in rows))
        st = gw.status()["sessions"][0]
    finally:
        gw.close()
        node.close()
    s = gw.sessions[0]
    assert s.name == "hall-4"  # named by the description it was given (the node's own name is in its PLANT line)
    assert st["plant"]["node_hash"] == mine.hash and st["plant"]["hash"] == theirs.hash
    assert "runs plant description hall-3 (%s), not hall-4" % mine.hash in st["plant"]["mismatch"]
    said = [ln for ln in capsys.readouterr().err.splitlines() if "runs plant description" in ln]  # no `out`: stderr
    assert len(said) == 1 and said[0].startswith("edgetwin gateway: node hall-4 runs plant description hall-3"), said
    plant_lines = [r for r in rows if not r[1].startswith("NODE ")]
    assert plant_lines and plant_lines[0][1][21:].startswith("PLANT name=hall-3 hash=%s" % mine.hash)
    assert {r[2] for r in plant_lines} == {mine.hash}, plant_lines  # stored under the hash the node named
    # the unit nobody answers: BAD with its reason, in the node's own description's words
    assert any(r[1][21:].startswith("ALARM BAD AHU-1 fan_current ? prio=1 RAISED why=timeout") for r in rows), rows


def test_a_corrupt_plant_file_leaves_a_node_that_says_why(tmp_path: Path, build: Path, capsys) -> None:
    data, desc = _desc("hall-3", 1)
    node = vnode.VNode("rp2040_pico", tmp_path / "root", build, {"report_ms": 1000}, heap=600000,
                       plant=data[:len(data) // 2], buses=(1,))
    gw = Gateway([node.uart_port], tmp_path / "g.db", plants=[desc])
    try:
        gw.open()
        rows = _run(gw, tmp_path / "g.db", lambda rows: sum(r[1].startswith("NODE heap=") for r in rows) >= 2)
    finally:
        gw.close()
        node.close()
    errors = [r[1] for r in rows if "NODE plant error" in r[1]]
    assert errors == ["NODE plant error: /plant.json is not valid JSON (truncated? recompile and deploy it again); "
                      "logging no plant inputs"], rows
    assert sum(r[1].startswith("NODE heap=") for r in rows) >= 2  # the node runs on: its link and reports
    assert "edgetwin gateway: node hall-3: NODE plant error" in capsys.readouterr().err


def test_an_ack_queued_while_no_gateway_serves_the_node_is_delivered_once(tmp_path: Path, build: Path) -> None:
    data, desc = _desc("hall-3", 1)
    node = vnode.VNode("rp2040_pico", tmp_path / "root", build, {"report_ms": 1000}, heap=600000, plant=data,
                       buses=(1,))
    db = tmp_path / "g.db"
    try:
        gw = Gateway([node.uart_port], db, plants=[desc])
        gw.open()
        try:  # until the unit nobody answers has raised its BAD alarm
            _run(gw, db, lambda rows: any(r[1][21:].startswith("ALARM BAD AHU-1 fan_current") for r in rows))
        finally:
            gw.close()
        from host.store import LogStore

        with LogStore(db) as st:  # `edgetwin ack` while no gateway runs: the command waits in the store
            cid = st.queue_command("hall-3", "ACK", "AHU-1", "fan_current", "BAD", "bob")
        gw = Gateway([node.uart_port], db, plants=[desc])  # a gateway comes back: it sends it once the node is there
        gw.open()
        try:
            rows = _run(gw, db, lambda rows: any(" by=bob" in r[1] for r in rows))
            _run(gw, db, lambda rows: False, seconds=3)  # and nothing more comes of it
            rows = sqlite3.connect(db).execute("SELECT text FROM logs").fetchall()
        finally:
            gw.close()
    finally:
        node.close()
    acks = [r[0][21:] for r in rows if " by=bob" in r[0]]
    assert acks == ["ACK BAD AHU-1 fan_current ? prio=1 ACKED by=bob"], acks
    with LogStore(db, readonly=True) as st:
        c = st.command(cid)
    assert c.sent_ms is not None and c.done_ms is not None and c.result == "delivered", c
