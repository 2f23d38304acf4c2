"""host/plantlines.py: the one log grammar (docs/PLANT.md) for every plant: each line kind taken apart,
ids of any plant, the alarm extras, what the grammar refuses, what a description refuses (check), and every
line the simulator writes parsed and checked against its own description."""

from __future__ import annotations

import pytest

from host import plantdesc, plantlines
from host.plantlines import ID_RE, Line, check, line_level, parse
from shared import episode
from shared.plant import Plant

T = "2026-11-30T06:44:58Z "
AHU = {
    "format": "edgetwin-plant/1", "name": "hall-3", "timezone": "Europe/Berlin",
    "machines": [
        {"id": "AHU-1", "kind": "air handling unit", "state": {"run": {"di": 2}},
         "signals": [
             {"key": "SAT", "tag": "supply_temp", "unit": "C", "source": {"adc": 0},
              "alarms": [{"level": "HI", "limit": 24.0}, {"level": "HIHI", "limit": 30.0, "interlock": "HIHI_SAT"}]},
             {"key": "RAT", "tag": "return_temp", "unit": "C", "source": {"adc": 1}},
             {"key": "FAN", "tag": "fan_speed", "unit": "%", "decimals": 0, "source": {"adc": 2}, "bad": False}]},
        {"id": "SILO_2", "kind": "silo", "state": {"run": {"di": 3}},
         "signals": [{"key": "L", "tag": "level", "unit": "m", "decimals": 2, "source": {"adc": 3},
                      "alarms": [{"level": "LO", "limit": 0.5}, {"level": "LOLO", "limit": 0.2,
                                                                   "interlock": "LOLO_LEVEL"}]}]}]}


def _desc() -> plantdesc.PlantDesc:
    return plantdesc.from_dict(AHU, "0123456789abcdef")


@pytest.mark.parametrize("ident", ["AHU-1", "SILO_2", "SILO-2", "P-101", "CV-401", "A", "X_1-B-2", "ALARM-1",
                                   "STATX", "ABCDEFGHIJKLMNOP"])
def test_ids_of_any_plant(ident):
    assert ID_RE.fullmatch(ident)
    line = parse(T + ident + " RUNNING T=1.0C")
    assert line is not None and line.machine == ident and line.kind == "sample"


@pytest.mark.parametrize("ident", ["1AB", "-A", "A-", "A--B", "AHU 1", "ALARM", "STATE", "PLANT", "NODE", "LOST",
                                   "ABCDEFGHIJKLMNOPQ", "A.B", ""])
def test_not_ids(ident):
    assert not ID_RE.fullmatch(ident)


def test_a_sample_line():
    line = parse(T + "AHU-1 RUNNING SAT=14.25C RAT=? FAN=80% dP=-0.125kPa Q=12m3/h\n")
    assert isinstance(line, Line) and line.kind == "sample" and line.plc == "RUNNING"
    assert line.values == {"SAT": (14.25, "C"), "RAT": (None, ""), "FAN": (80.0, "%"), "dP": (-0.125, "kPa"),
                           "Q": (12.0, "m3/h")}
    assert line.time == 1796021098 and line.wall_ms == 1796021098000 and not line.is_event
    assert line.text == T + "AHU-1 RUNNING SAT=14.25C RAT=? FAN=80% dP=-0.125kPa Q=12m3/h"
    assert line_level(line) == 1


def test_alarm_lines_with_their_extras():
    line = parse(T + "ALARM HI AHU-1 supply_temp 24.3C prio=2 RAISED")
    assert (line.kind, line.verb, line.level, line.machine, line.tag, line.value, line.unit, line.prio,
            line.astate, line.extras) == ("alarm", "ALARM", "HI", "AHU-1", "supply_temp", 24.3, "C", 2, "RAISED", {})
    assert line_level(line) == 2 and line.is_event
    line = parse(T + "ACK HI AHU-1 supply_temp 24.3C prio=2 ACKED by=alice")
    assert line.extras == {"by": "alice"} and line_level(line) == 2
    line = parse(T + "ALARM BAD SILO_2 level ? prio=1 RAISED why=timeout")
    assert line.value is None and line.unit is None and line.extras == {"why": "timeout"}
    line = parse(T + "SHELVE BAD SILO_2 level ? prio=1 SHELVED by=bob.smith why=maintenance")
    assert line.extras == {"by": "bob.smith", "why": "maintenance"} and line_level(line) == 1
    for verb in ("CLEAR", "UNSHELVE"):
        assert line_level(parse(T + verb + " LO SILO_2 level 0.61m prio=2 NORMAL")) == 1


def test_state_lost_and_plant_lines():
    line = parse(T + "STATE AHU-1 RUNNING->TRIPPED interlock=HIHI_SAT")
    assert (line.kind, line.machine, line.from_state, line.to_state, line.cause, line.interlock) == \
        ("state", "AHU-1", "RUNNING", "TRIPPED", "interlock=HIHI_SAT", "HIHI_SAT")
    assert line.is_trip and line_level(line) == 3
    line = parse(T + "STATE SILO_2 RUNNING->TRIPPED trip=contact")
    assert line.is_trip and line.interlock is None and line_level(line) == 3
    line = parse(T + "STATE SILO_2 STOPPED->RUNNING run=on")
    assert not line.is_trip and line_level(line) == 1
    line = parse(T + "LOST events=12")
    assert (line.kind, line.events, line_level(line), line.machine) == ("lost", 12, 2, None)
    line = parse(T + "PLANT name=hall-3 hash=0123456789abcdef machines=2 signals=4")
    assert (line.kind, line.name, line.hash, line.machines, line.signals) == ("plant", "hall-3", "0123456789abcdef",
                                                                              2, 4)
    assert line_level(line) == 1 and not line.is_event


@pytest.mark.parametrize("body", [
    "AHU-1 RUNNING",  # no value
    "AHU-1 IDLE SAT=1.0C",  # not a PLC state
    "AHU-1 RUNNING SAT=1.2345C",  # four decimals
    "AHU-1 RUNNING SAT=1.0",  # no unit
    "AHU-1 RUNNING SAT=1.0.C",  # a unit starts with a letter, % or /
    "AHU-1 RUNNING SAT=1.0Cxxxxxxxx",  # a unit of 9
    "AHU-1 RUNNING SATURATED=1.0C",  # a key of 9
    "AHU-1  RUNNING SAT=1.0C",
    "ALARM HI AHU-1 Supply_temp 1.0C prio=2 RAISED",  # a tag is lower case
    "ALARM HI AHU-1 supply_temp 1.0C prio=5 RAISED",
    "ALARM HI AHU-1 supply_temp 1.0C prio=2 RAISED who=alice",  # only by= and why=
    "ALARM HI AHU-1 supply_temp 1.0C prio=2 SLEEPING",
    "ALARM HIGH AHU-1 supply_temp 1.0C prio=2 RAISED",
    "ALARM HI STATE supply_temp 1.0C prio=2 RAISED",  # a line word is no id
    "STATE AHU-1 RUNNING->TRIPPED",
    "STATE AHU-1 RUNNING->TRIPPED interlock",
    "STATE AHU-1 RUNNING->LIMBO run=off",
    "LOST events=",
    "LOST events=1 more",
    "PLANT name=hall-3 hash=0123 machines=2 signals=4",
    "PLANT name=hall 3 hash=0123456789abcdef machines=2 signals=4",
    "NODE heap=41000 dropped=0",
    "",
])
def test_the_grammar_refuses(body):
    assert parse(T + body) is None


def test_refused_timestamps_and_lengths():
    assert parse("2026-02-30T06:00:00Z LOST events=3") is None  # no such date
    assert plantlines.line_time("2026-02-30T06:00:00Z LOST events=3") is None
    assert parse("2026-11-30 06:00:00Z LOST events=3") is None
    assert parse("NODE heap=41000 dropped=0 spilled=1") is None
    long = T + "AHU-1 RUNNING" + " SAT=1.0C" * 14
    assert len(long) > plantlines.LINE_MAX and parse(long) is None
    assert parse(long[:plantlines.LINE_MAX - 1].rsplit(" ", 1)[0]) is not None


def test_check_against_a_description():
    d = _desc()
    ok = ["AHU-1 RUNNING SAT=14.2C RAT=21.0C FAN=80%", "AHU-1 STOPPED SAT=?", "SILO_2 RUNNING L=3.25m",
          "ALARM HIHI AHU-1 supply_temp 31.0C prio=4 RAISED", "ALARM BAD AHU-1 supply_temp ? prio=1 RAISED why=timeout",
          "ACK LO SILO_2 level 0.41m prio=2 ACKED by=alice", "STATE AHU-1 RUNNING->TRIPPED interlock=HIHI_SAT",
          "STATE SILO_2 RUNNING->TRIPPED trip=contact", "STATE SILO_2 TRIPPED->STOPPED reset=contact",
          "LOST events=3", "PLANT name=hall-3 hash=0123456789abcdef machines=2 signals=4"]
    for body in ok:
        line = parse(T + body)
        assert line is not None and check(line, d) is None, body
    bad = {"P-101 RUNNING T=1.0C": "no machine P-101 in plant hall-3",
           "AHU-1 RUNNING SAT=14.2C T=1.0C": "machine AHU-1 has no key T",
           "AHU-1 RUNNING SAT=14.2K": "machine AHU-1: key SAT is in C, not K",
           "ALARM HI AHU-1 bearing_temp 1.0C prio=2 RAISED": "machine AHU-1 has no tag bearing_temp",
           "ALARM HI AHU-1 supply_temp 1.0F prio=2 RAISED": "machine AHU-1: tag supply_temp is in C, not F",
           "ALARM LO AHU-1 supply_temp 1.0C prio=2 RAISED": "machine AHU-1: supply_temp has no LO alarm",
           "ALARM BAD AHU-1 fan_speed ? prio=1 RAISED": "machine AHU-1: fan_speed has no BAD alarm",
           "STATE AHU-1 RUNNING->TRIPPED interlock=LOLO_LEVEL": "machine AHU-1 has no interlock LOLO_LEVEL",
           "STATE CV-401 RUNNING->STOPPED cmd=schedule": "no machine CV-401",
           "PLANT name=hall-3 hash=fedcba9876543210 machines=2 signals=4": "is not the description's"}
    for body, want in bad.items():
        line = parse(T + body)
        assert line is not None, body
        got = check(line, d)
        assert got is not None and want in got, (body, got)


def test_helpers_kept():
    assert plantlines.ALARM_VERBS == ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE")
    assert "TRIPPED" in plantlines.PLC_STATES and "STARTING" in plantlines.PLC_STATES
    assert plantlines.is_trip((T + "STATE AHU-1 RUNNING->TRIPPED interlock=HIHI_SAT").split())
    assert not plantlines.is_trip((T + "STATE AHU-1 STOPPED->RUNNING run=on").split())
    assert plantlines.report_pairs("NODE heap=41000 dropped=0 spilled=") == [("heap", "41000"), ("dropped", "0"),
                                                                             ("spilled", "")]
    assert plantlines.report_pairs("NODE model error") == []


def _sim_lines(seed: int, n: int, ticks: int) -> list[str]:
    p = Plant(seed, n_machines=n, sample_every=5, fault_every_h=1)
    out = []
    for _ in range(ticks):
        p.step()
        out += p.lines()
    return out


@pytest.mark.parametrize("seed,n", [(1, 4), (7, 6), (2003, 4), (42, 6)])
def test_every_simulated_line_parses(seed, n):
    kinds = set()
    for text in _sim_lines(seed, n, 4 * 3600):
        line = parse(text)
        assert line is not None, text
        assert line.text == text and line.is_event == episode.is_event(text)
        kinds.add(line.kind)
    assert {"sample", "alarm", "state"} <= kinds, kinds


@pytest.mark.skipif(not plantdesc.SIM_FILE.exists(), reason="the simulator's description is not generated yet")
@pytest.mark.parametrize("seed,n", [(1, 4), (7, 6), (2003, 4)])
def test_every_simulated_line_checks_against_the_simulators_description(seed, n):
    d = plantdesc.builtin()
    for text in _sim_lines(seed, n, 4 * 3600):
        line = parse(text)
        assert line is not None and check(line, d) is None, (text, check(line, d))
