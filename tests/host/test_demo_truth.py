"""tools/demo/truth.py: the ground truth the demo prints beside each answer, from a run's event lines."""

from __future__ import annotations

import pytest

from tools.demo import truth

LINES = [  # a demo plant's own lines (shared/plant.Plant(1), P-101 clogged_filter 5 and CV-401 sensor_dropout 4 V)
    "2026-11-30T06:00:00Z P-101 RUNNING T=44.0C V=1.8mm/s I=35.8A P=4.4bar Q=66.2m3/h dP=13.6kPa",
    "2026-11-30T06:00:04Z ALARM BAD CV-401 vibration ? prio=1 RAISED",
    "2026-11-30T06:01:45Z ALARM HI P-101 strainer_dp 67.1kPa prio=2 RAISED",
    "2026-11-30T06:02:33Z ALARM HIHI P-101 strainer_dp 92.3kPa prio=4 RAISED",
    "2026-11-30T06:02:33Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_DP",
    "2026-11-30T06:02:37Z CLEAR HIHI P-101 strainer_dp 34.9kPa prio=4 RTN_UNACK",
    "2026-11-30T06:02:45Z CLEAR HI P-101 strainer_dp 1.1kPa prio=2 RTN_UNACK",
    "2026-11-30T06:03:13Z ACK HIHI P-101 strainer_dp 0.1kPa prio=4 NORMAL",
    "2026-11-30T06:04:34Z STATE C-301 RUNNING->STOPPING cmd=schedule",
    "2026-11-30T06:04:50Z STATE C-301 STOPPING->STOPPED ramp=done",
    "2026-11-30T06:07:0",  # a line cut short: not an event anyone can state
]


def _evs(node: str = "node1") -> list[dict]:
    return truth.events([{"node": node, "text": ln} for ln in LINES])


def test_events_are_the_event_lines_with_node_and_time() -> None:
    evs = _evs()
    assert [e["kind"] for e in evs] == ["sensor_lost", "alarm", "alarm", "trip", "clear", "clear", "ack", "state",
                                        "state"]
    assert all(e["node"] == "node1" and e["line"] in LINES for e in evs)
    assert evs[3]["interlock"] == "HIHI_DP" and evs[3]["time"] == "2026-11-30T06:02:33"


def test_a_trip_question_gets_the_trip_not_the_schedules_stops() -> None:
    t = truth.truth_for("Which machine stopped or tripped, and why?", _evs())
    assert t["events"] == [LINES[4]]
    assert t["text"] == "node1: P-101 TRIPPED at 06:02:33 (interlock HIHI_DP, strainer_dp)"
    assert t["machines"] == [] and t["faults"] == []


def test_an_alarm_question_on_one_machine_gets_its_alarms_and_whether_they_cleared() -> None:
    t = truth.truth_for("Is pump P-101 running normally, or is an alarm raised on it?", _evs(),
                        ["CV-401:sensor_dropout:4:V@5", "P-101:clogged_filter:5@1"])
    assert t["machines"] == ["P-101"]
    assert t["events"] == LINES[2:4] + LINES[5:7]  # raises and clears, not CV-401's alarm nor the ack
    assert t["text"].startswith("node1: P-101 HI strainer_dp alarm raised at 06:01:45 (67.1kPa); ")
    assert t["text"].endswith("; every alarm cleared"), t["text"]
    assert t["faults"] == ["P-101 clogged filter (severity 5) from plant second 1"]
    cv = truth.truth_for("Is CV-401 alarming?", _evs())
    assert cv["text"] == ("node1: CV-401 vibration sensor BAD (alarm raised) at 06:00:04 (?); still raised at the "
                          "end: CV-401 BAD vibration")


def test_nothing_of_the_kind_names_the_logs_start() -> None:
    t = truth.truth_for("Why did M-201 trip?", _evs())
    assert t["events"] == [] and t["text"] == "nothing of the kind in the log since 06:00:04"
    assert truth.truth_for("Why did M-201 trip?", [])["text"] == "no event lines in the log"


def test_other_questions_get_every_event_of_the_machines_named() -> None:
    t = truth.truth_for("What happened to C-301?", _evs("gw-a"))
    assert t["events"] == LINES[8:10] and t["text"].startswith("gw-a: C-301 RUNNING->STOPPING at 06:04:34")


def test_a_bad_fault_spec_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="MACHINE:FAULT"):
        truth.truth_for("Which machine tripped?", _evs(), ["P-101"])
