"""`ask`'s words for a plant that is not the simulator: what a question means comes from the description of the
lines searched (host/logwords.Vocabulary), and the store's record answers (host/qa.retrieve) speak its words.

The plant: a raw water pump P-1 (aliases "pump 1", "P1") and a booster pump P-2, an air handling unit AHU-1
and a sand silo SILO-2, with tags and keys of their own (docs/PLANT.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from host import logwords, plantdesc, qa
from host.logwords import Vocabulary
from host.store import LogStore

HASH = "5eed0000000000a1"
T0 = 1796018400  # 2026-11-30T06:00:00Z


def _signal(key: str, tag: str, unit: str, words: list[str], alarms: list | None = None) -> dict:
    return {"key": key, "tag": tag, "unit": unit, "words": words, "source": {"adc": 0, "input": "4-20mA"},
            "range": [0, 100], "alarms": alarms or []}


WORKS = {
    "format": "edgetwin-plant/1", "name": "works-1",
    "machines": [
        {"id": "P-1", "kind": "pump", "words": ["raw water pump"], "aliases": ["pump 1", "P1"], "state": {},
         "signals": [_signal("PD", "discharge_press", "bar", ["discharge pressure"],
                             [{"level": "HIHI", "limit": 9, "interlock": "HIHI_PD"}]),
                     _signal("VIB", "vib_rms", "mm/s", ["vibration", "bearing"]),
                     _signal("TB", "brg_t", "C", ["bearing temperature", "temperature"])]},
        {"id": "P-2", "kind": "pump", "words": ["booster pump"], "state": {},
         "signals": [_signal("PD", "discharge_press", "bar", ["discharge pressure"])]},
        {"id": "AHU-1", "kind": "air handling unit", "words": ["air handler"], "state": {},
         "signals": [_signal("SAT", "supply_air_temp", "C", ["supply air temperature", "temperature"],
                             [{"level": "HI", "limit": 24}]),
                     _signal("RAT", "return_air_temp", "C", ["return air temperature", "temperature"]),
                     _signal("FAN", "fan_speed", "%", ["fan speed"])]},
        {"id": "SILO-2", "kind": "silo", "words": ["sand silo"], "state": {},
         "signals": [_signal("L", "level", "m", ["silo level", "level"],
                             [{"level": "LO", "limit": 1.5}, {"level": "LOLO", "limit": 0.5,
                                                                "interlock": "LOLO_LEVEL"}])]},
    ]}


@pytest.fixture(scope="module")
def works():
    return plantdesc.from_dict(WORKS, HASH)


@pytest.fixture(scope="module")
def v(works) -> Vocabulary:
    return Vocabulary.of([works])


def test_machines_by_id_words_alias_kind_and_number(v) -> None:
    ids = lambda q: logwords.named_ids(q, v)  # noqa: E731
    assert ids("why did ahu-1 trip?") == ["AHU-1"]  # an id in any case, written the description's way
    assert ids("why did the raw water pump trip?") == ["P-1"]
    assert ids("did pump 1 trip?") == ids("did P1 trip?") == ["P-1"]
    assert ids("did pump no. 2 or the air handling unit #1 stop?") == ["P-2", "AHU-1"]
    assert logwords.machine_ids("pumps 2 and air handling unit 1", v) == ["P-2", "AHU-1"]
    assert ids("when did silo 1 run low?") == ["SILO-2"]  # the first silo, whatever its id says
    assert ids("pump 3 or silo 2?") == []  # no third pump, no second silo
    assert ids("why did P-7 trip?") == ["P-7"]  # an id no description has is still the one asked about
    assert ids("what tripped?") == [] and ids("why did it stop?") == []


def test_the_kind_is_its_one_machine(v) -> None:
    q = "why did the silo trip?"
    assert logwords.unnamed_kinds(q, v) == ["silo"]
    assert logwords.with_sole_ids(q, {"silo": "SILO-2"}, v) == "why did the silo SILO-2 trip?"
    q = "did the air handling unit stop after the pump tripped?"
    assert logwords.unnamed_kinds(q, v) == ["air handling unit", "pump"]
    for q in ("did the silos run low?", "did the silo SILO-2 trip?", "did the pump 2 trip?",
              "did the raw water pump trip?", "did the sand silo run low?"):
        assert logwords.unnamed_kinds(q, v) == [], q


def test_signal_words_are_the_logs_tags_and_keys(v) -> None:
    e = logwords.expand("when was the supply air temperature of AHU-1 high?", v)
    assert e.endswith("high? supply air temp SAT"), e
    assert logwords.expand("what was the discharge pressure of the booster pump?", v).endswith("P-2 discharge press PD")
    # the longest phrase wins: the bearing temperature is brg_t, not the vibration "bearing" names
    assert logwords.expand("when did the bearing temperature of P-1 rise?", v).endswith("rise? brg t TB")
    assert logwords.expand("is the bearing of P-1 worn?", v).endswith("worn? vib rms")  # VIB: FTS5 reads vib
    # a word of several signals: those of the machine named, else the words they share
    assert logwords.expand("did AHU-1 get too warm, temperature wise?", v).endswith("air temp")
    assert logwords.expand("is P-1 running at the right temperature?", v).endswith("temperature? brg t TB")
    # the grammar's own words hold for every plant
    assert logwords.expand("when was the silo level alarm acknowledged?", v).endswith("ack level")
    assert logwords.expand("why did the air handler trip?", v).endswith("AHU-1 tripped interlock")


def test_onset_asks_for_the_signals_named(v) -> None:
    f = logwords.onset("when did the bearing temperature of the raw water pump start rising?", v)
    assert f is not None and (f["machine"], f["tags"], f["signals"]) == ("P-1", ("brg_t",), ["bearing temperature"])
    assert logwords.onset("when did the level of SILO-2 start falling?", v)["tags"] == ("level",)
    assert logwords.onset("when was the first sign of trouble on pump 1?", v)["tags"] is None
    assert logwords.onset("when did AHU-1 start running warm?", v)["tags"] is None  # not a word of its signals
    assert logwords.onset("when did AHU-1 start running hot?", v)["tags"] is None
    assert logwords.onset("why did the silo level start falling?", v) is None  # no machine, not a when


def test_alarm_follow_and_trip_questions(v) -> None:
    f = logwords.alarm_follow("when was the HI supply air temperature alarm on the air handler raised at 06:10 "
                              "acknowledged?", v)
    assert f is not None and (f["machine"], f["verb"], f["level"], f["minute"]) == ("AHU-1", "ACK", "HI", "06:10")
    assert {"supply", "air", "temp"} <= set(f["words"])
    assert logwords.trip("which interlock stopped the sand silo?", v) == "SILO-2"
    assert logwords.trip("why did pump 1 and the booster pump trip?", v) is None


def test_no_description_knows_only_the_grammar() -> None:
    none = Vocabulary.of([])
    assert logwords.expand("why did it trip after the sensor dropped out?", none).endswith("tripped interlock bad")
    assert logwords.named_ids("why did pump 1 trip?", none) == [] and logwords.unnamed_kinds("the pump", none) == []
    assert logwords.named_ids("why did AHU-3 trip?", none) == ["AHU-3"]


def test_several_plants_each_their_own_nth(works) -> None:
    other = plantdesc.from_dict({"name": "works-2", "machines": [
        {"id": "PU_9", "kind": "pump", "aliases": ["the well pump"], "state": {},
         "signals": [_signal("Q", "flow_rate", "m3/h", ["flow"])]}]}, "5eed0000000000b2")
    both = Vocabulary.of([works, other])
    assert logwords.named_ids("did pump 1 trip?", both) == ["P-1", "PU_9"]  # each plant's first pump
    assert logwords.named_ids("did pu_9 trip?", both) == ["PU_9"]
    assert both.kinds["pump"] == ("P-1", "P-2", "PU_9")


def _fill(db: Path, desc, node: str = "works", plant: str | None = HASH) -> None:
    s = LogStore(db)
    if plant is not None:
        s.add_plant(desc)
    seq = 0
    events = {10: "ALARM HI AHU-1 supply_air_temp 24.6C prio=2 RAISED",
              14: "ACK HI AHU-1 supply_air_temp 25.1C prio=2 ACKED by=alice",
              21: "CLEAR HI AHU-1 supply_air_temp 23.0C prio=2 NORMAL",
              30: "ALARM HIHI P-1 discharge_press 9.4bar prio=4 RAISED",
              31: "STATE P-1 RUNNING->TRIPPED interlock=HIHI_PD"}
    for minute in range(40):
        lines = ["AHU-1 RUNNING SAT=%.1fC RAT=21.0C FAN=60%%" % (20 + minute / 10),
                 "P-1 RUNNING PD=%.1fbar VIB=2.0mm/s TB=41.0C" % (1 + minute / 5),
                 "P-2 RUNNING PD=1.2bar", "SILO-2 RUNNING L=6.20m"]
        lines += [events[minute]] if minute in events else []
        for text in lines:
            seq += 1
            s.add_log(node, 1, seq, seq, 1000 * (T0 + minute * 60 + seq % 60), 2 if "ALARM" in text else 1,
                      "2026-11-30T06:%02d:%02dZ %s" % (minute, seq % 60, text), plant=plant)
    s.close()


def test_the_record_answers_in_the_plants_words(tmp_path: Path, works) -> None:
    db = tmp_path / "works.db"
    _fill(db, works)
    with LogStore(db, readonly=True) as s:
        assert [d.hash for d in qa.descriptions(s)] == [HASH]  # every line names it: no simulator in play
        assert qa.vocabulary(s) is Vocabulary.of([works])
    q = "when was the high supply air temperature alarm on the air handler raised at 06:10 acknowledged?"
    found = qa.retrieve(db, q, limit=4, lines=3)
    assert found.pinned == 1 and "ACK HI AHU-1 supply_air_temp 25.1C" in found.windows[0].text.splitlines()[1]
    found = qa.retrieve(db, "when did the supply air temperature of AHU-1 start rising?", limit=4, lines=3)
    assert found.pinned == 1 and "ALARM HI AHU-1 supply_air_temp" in found.windows[0].text.splitlines()[1]
    # what never happened, said in the description's words
    found = qa.retrieve(db, "when was the first sign of a bad bearing on the raw water pump?", limit=4, lines=3)
    assert found.answer == ("Nothing of the kind in the log since 06:00 site time on 2026-11-30: no vibration "
                            "alarms raised of P-1."), found.answer
    assert "first of P-1" in found.how
    assert qa.retrieve(db, "why did the silo trip?").answer.endswith(": no trip of SILO-2.")
    assert qa.retrieve(db, "why did P-7 trip?").answer == "Nothing of the kind in the log: no line names P-7."
    found = qa.retrieve(db, "why did pump 1 trip?", limit=4, lines=3)  # its interlock's point, from the record
    assert found.answer.startswith("P-1 tripped at 06:31 site time on 2026-11-30 on interlock HIHI_PD: P-1 "
                                   "discharge_press (discharge pressure) went HIHI at 9.4bar"), found.answer
    assert "STATE P-1 RUNNING->TRIPPED interlock=HIHI_PD" in found.windows[0].text
    # two pumps in the log: "the pump" is not one of them
    assert qa.retrieve(db, "why did the pump trip?", limit=4, lines=3).how.endswith("hold the question's words")


def test_machine_ids_are_whole_words_of_the_line(tmp_path: Path, works) -> None:
    """FTS5 reads the id P-1 as the phrase "p 1", which "PD=1.2bar" of P-2 also holds: the store matches the id
    as the line's word."""
    db = tmp_path / "works.db"
    _fill(db, works)
    with LogStore(db) as s:
        s.add_log("other", 1, 1, 1, 1000 * (T0 - 3600), 1, "2026-11-30T05:00:00Z P-2 RUNNING P=1.2bar", plant=HASH)
        assert s.since_ms("P-1") == 1000 * (T0 + 1)  # not the other node's P=1.2bar
        assert s.since_ms("P-2") == 1000 * (T0 - 3600)
        assert s.machines(["P-1", "P-2", "P-3"]) == ["P-1", "P-2"] and s.machines(["SILO-2", "SILO"]) == ["SILO-2"]
        top = s.windows("pressure bar 1", limit=3, lines=1, machines=["P-1"])
        assert all(" P-1 " in w.text for w in top[:2]), [w.text for w in top]


def test_lines_of_no_description_are_the_simulators(tmp_path: Path, works) -> None:
    db = tmp_path / "mixed.db"
    _fill(db, works)
    with LogStore(db) as s:
        s.add_log("sim-node", 1, 1, 1, 1000 * T0, 1, "2026-11-30T05:00:00Z P-2 RUNNING P=1.2bar")  # plant NULL
    with LogStore(db, readonly=True) as s:
        descs = qa.descriptions(s)
    assert [d.hash for d in descs] == [plantdesc.builtin().hash, HASH]
