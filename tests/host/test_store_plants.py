"""The store's schema 3 (host/store.py): plant descriptions kept by hash, the description each line and node
named, and the operators' commands queued for nodes; a schema-2 store upgraded in place answers as before."""

from __future__ import annotations

import copy
import sqlite3
from pathlib import Path

import pytest

from host import plantdesc
from host.store import SCHEMA_VERSION, LogStore, StoreError
from shared.plant import Plant

EP = b"\x01\x02\x03\x04"
HALL = {"format": "edgetwin-plant/1", "name": "hall-3", "timezone": "Europe/Berlin",
        "machines": [{"id": "AHU-1", "kind": "air handling unit", "state": {"run": {"di": 2}},
                      "signals": [{"key": "SAT", "tag": "supply_temp", "unit": "C", "source": {"adc": 0},
                                   "alarms": [{"level": "HI", "limit": 24.0}]},
                                  {"key": "FAN", "tag": "fan_speed", "unit": "%", "source": {"adc": 1}}]}]}
H1, H2 = "0123456789abcdef", "fedcba9876543210"


def _desc(d: dict = HALL, h: str = H1) -> plantdesc.PlantDesc:
    return plantdesc.from_dict(d, h)


def _fill(st: LogStore) -> None:
    p = Plant(7, n_machines=4, sample_every=10, fault_every_h=1)
    seq = 0
    for _ in range(3 * 3600):
        p.step()
        for ln in p.lines():
            seq += 1
            st.add_log("sim", EP, seq, seq, 1796018400000 + seq, 2 if " ALARM " in ln else 1, ln, commit=False,
                       boot=1, lseq=seq, flags=seq % 2)
    st.add_annotation("sim", 1796018400000, 1796018460000, "P-101 vibration rising.", True, 5,
                      spans=[("draft", "P-101 vibration"), ("fix", " rising.")])
    st.set_rx_state("sim", EP, 77)
    st.commit()


def _answers(st: LogStore) -> tuple:
    return (st.logs(), [{k: v for k, v in n.items() if k != "last_seen_ms"} for n in st.nodes()], st.annotations(),
            [(w.node, w.text, round(w.score, 6)) for w in st.windows("vibration alarm", limit=5, lines=6)],
            st.line_gaps("sim"), st.rx_state("sim"), st.count_logs())


def _to_version_2(path: Path) -> None:
    """Make the store what a schema-2 gateway wrote: without the plant columns, descriptions and commands."""
    db = sqlite3.connect(str(path))
    db.executescript("ALTER TABLE logs DROP COLUMN plant; ALTER TABLE nodes DROP COLUMN plant; DROP TABLE plants; "
                     "DROP TABLE commands; UPDATE meta SET value='2' WHERE key='version';")
    db.close()


def _version(path: Path) -> str:
    db = sqlite3.connect(str(path))
    try:
        return db.execute("SELECT value FROM meta WHERE key='version'").fetchone()[0]
    finally:
        db.close()


def test_a_version_2_store_is_upgraded_in_place_and_answers_the_same(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    st = LogStore(path)
    _fill(st)
    want = _answers(st)
    st.close()
    assert len(want[0]) > 1000 and any("ALARM" in r["text"] for r in want[0])
    _to_version_2(path)
    ro = LogStore(path, readonly=True)  # a reader reads it as it is
    assert _answers(ro) == want
    assert ro.plants() == {} and ro.node_plant("sim") is None and ro.pending_commands("sim") == []
    assert set(ro.line_plants([1, 2, 3]).values()) == {None}
    ro.close()
    assert _version(path) == "2"
    st = LogStore(path)  # the gateway upgrades it
    assert _answers(st) == want
    assert set(st.line_plants(range(1, len(want[0]) + 1)).values()) == {None}  # the simulator's, every one
    assert st.node_plant("sim") is None
    assert st.add_log("sim", EP, 10 ** 6, 1, 1796030000000, 1, "2026-11-30T09:20:00Z AHU-1 RUNNING SAT=14.0C",
                      plant=H1)
    st.close()
    assert _version(path) == str(SCHEMA_VERSION)
    ro = LogStore(path, readonly=True)
    assert _answers(ro)[0][:-1] == want[0] and ro.logs()[-1]["text"].endswith("SAT=14.0C")
    ro.close()


def test_descriptions_are_kept_by_hash(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    st = LogStore(path)
    assert st.plants() == {} and st.plant(H1) is None
    assert st.add_plant(_desc()) is True
    assert st.add_plant(_desc()) is False  # idempotent
    newer = copy.deepcopy(HALL)
    newer["machines"][0]["signals"][0]["alarms"][0]["limit"] = 25.0
    assert st.add_plant(_desc(newer, H2)) is True  # a new version is kept beside the old one
    st.set_node_plant("hall", H1)
    assert st.add_log("hall", EP, 1, 0, 1000, 1, "2026-11-30T06:00:00Z AHU-1 RUNNING SAT=14.0C", plant=H1)
    st.set_node_plant("hall", H2)
    assert st.add_log("hall", EP, 2, 0, 2000, 1, "2026-11-30T06:00:01Z AHU-1 RUNNING SAT=14.1C", plant=H2)
    assert st.add_log("sim", EP, 1, 0, 1000, 1, "2026-11-30T06:00:00Z P-101 RUNNING T=1.0C")
    st.close()
    st = LogStore(path, readonly=True)
    kept = st.plants()
    assert sorted(kept) == [H1, H2]
    old, new = st.plant(H1), st.plant(H2)
    assert (old.name, old.hash, old.timezone, old.ids) == ("hall-3", H1, "Europe/Berlin", ("AHU-1",))
    assert old.machine("AHU-1").signal("supply_temp").alarm("HI").limit == 24.0
    assert new.machine("AHU-1").signal("SAT").alarm("HI").limit == 25.0
    assert new.machine("AHU-1").signal("FAN").unit == "%"
    assert st.node_plant("hall") == H2 and st.node_plant("sim") is None and st.node_plant("nobody") is None
    assert st.line_plants([1, 2, 3, 99]) == {1: H1, 2: H2, 3: None}
    assert st.plant("00000000000000ff") is None
    if plantdesc.SIM_FILE.exists():
        assert st.plant(None) == plantdesc.builtin()
    st.close()


def test_a_command_queued_while_no_gateway_runs_is_pending_until_done(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    LogStore(path).close()  # the gateway made the store and stopped
    st = LogStore(path)  # edgetwin ack, alone
    cid = st.queue_command("hall", "ACK", "AHU-1", "supply_temp", "HI", "alice")
    other = st.queue_command("hall", "SHELVE", "AHU-1", "fan_speed", None, "bob.smith")
    elsewhere = st.queue_command("silo", "UNSHELVE", "SILO_2", "level", "LO", "carol")
    st.close()
    gw = LogStore(path)  # a gateway starts: the node is there
    pend = gw.pending_commands("hall")
    assert [(c.id, c.verb, c.machine, c.tag, c.level, c.by) for c in pend] == [
        (cid, "ACK", "AHU-1", "supply_temp", "HI", "alice"), (other, "SHELVE", "AHU-1", "fan_speed", None, "bob.smith")]
    assert all(c.sent_ms is None and c.done_ms is None and c.created_ms > 0 for c in pend)
    assert gw.command_sent(cid, 5000) is True
    assert gw.command_sent(cid, 6000) is False  # its first sending is kept
    # sent but not yet delivered (the node's link has not acknowledged it): still pending, sent again later
    assert [c.id for c in gw.pending_commands("hall")] == [cid, other]
    assert [c.id for c in gw.pending_commands("silo")] == [elsewhere]
    assert gw.command_done(cid, 7000, "ACK HI AHU-1 supply_temp 24.3C prio=2 ACKED by=alice") is True
    assert gw.command_done(cid, 8000, "again") is False
    gw.close()
    ro = LogStore(path, readonly=True)
    c = ro.command(cid)
    assert (c.sent_ms, c.done_ms, c.result) == (5000, 7000, "ACK HI AHU-1 supply_temp 24.3C prio=2 ACKED by=alice")
    assert [x.id for x in ro.pending_commands("hall")] == [other] and ro.command(10 ** 6) is None
    ro.close()


@pytest.mark.parametrize("args,msg", [
    (("", "ACK", "AHU-1", "supply_temp", "HI", "alice"), "node name"),
    (("hall", "CLEAR", "AHU-1", "supply_temp", "HI", "alice"), "verb must be one of ACK, SHELVE, UNSHELVE"),
    (("hall", "ACK", "AHU 1", "supply_temp", "HI", "alice"), "machine must be a machine id"),
    (("hall", "ACK", "STATE", "supply_temp", "HI", "alice"), "machine must be a machine id"),
    (("hall", "ACK", "AHU-1", "Supply", "HI", "alice"), "tag must be an alarm tag"),
    (("hall", "ACK", "AHU-1", "supply_temp", "HIGH", "alice"), "level must be"),
    (("hall", "ACK", "AHU-1", "supply_temp", "HI", ""), "by must be"),
    (("hall", "ACK", "AHU-1", "supply_temp", "HI", "alice smith"), "by must be"),
    (("hall", "ACK", "AHU-1", "supply_temp", "HI", None), "by must be"),
])
def test_bad_commands_are_refused(tmp_path: Path, args, msg) -> None:
    st = LogStore(tmp_path / "b.db")
    with pytest.raises(StoreError, match=msg):
        st.queue_command(*args)
    assert st.pending_commands("hall") == []
    st.close()


def test_bad_plant_arguments_are_refused(tmp_path: Path) -> None:
    st = LogStore(tmp_path / "b.db")
    with pytest.raises(StoreError, match="hash"):
        st.add_log("n", EP, 1, 0, 0, 1, "x", plant="not-a-hash")
    with pytest.raises(StoreError, match="PlantDesc"):
        st.add_plant(plantdesc.from_dict(HALL))  # no hash
    with pytest.raises(StoreError, match="PlantDesc"):
        st.add_plant(None)
    with pytest.raises(StoreError, match="hash"):
        st.set_node_plant("n", "12")
    with pytest.raises(StoreError, match="hash"):
        st.plant("zz")
    with pytest.raises(StoreError, match="no command 5"):
        st.command_sent(5, 1)
    cid = st.queue_command("n", "ACK", "AHU-1", "supply_temp", None, "alice")
    with pytest.raises(StoreError, match="result"):
        st.command_done(cid, 1, "")
    with pytest.raises(StoreError, match="ms"):
        st.command_sent(cid, -1)
    st.close()
    ro = LogStore(tmp_path / "b.db", readonly=True)
    with pytest.raises(StoreError, match="read-only"):
        ro.queue_command("n", "ACK", "AHU-1", "supply_temp", None, "alice")
    with pytest.raises(StoreError, match="read-only"):
        ro.add_plant(_desc())
    ro.close()
