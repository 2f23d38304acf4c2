"""host/logwords.py: an operator's words mapped to the log's (what `ask` searches the store for), here in the
built-in simulator's words (its description, shared/plant_sim.json); tests/host/test_plant_words.py asks the
same of plants that are not the simulator."""

from __future__ import annotations

import pytest

from host import logwords, plantdesc
from host.store import fts_query


@pytest.fixture(scope="module")
def sim() -> logwords.Vocabulary:
    return logwords.Vocabulary.of([plantdesc.builtin()])


def test_machines_by_kind_and_number_and_by_id(sim) -> None:
    assert logwords.machine_ids("did conveyor 1 or pump no. 2 trip?", sim) == ["CV-401", "P-102"]
    assert logwords.machine_ids("Motors 3 and compressor #1", sim) == ["M-203", "C-301"]
    assert logwords.machine_ids("pump P-101", sim) == []  # an id is not a kind and a number
    assert logwords.named_ids("why did p-101 and pump 1 and CV-402 trip?", sim) == ["P-101", "CV-402"]
    assert logwords.named_ids("what tripped?", sim) == []
    assert logwords.Vocabulary.of([plantdesc.builtin()]) is sim  # made once per set of descriptions


def test_expand_adds_the_logs_words_and_keeps_the_question(sim) -> None:
    q = "when was the high vibration alarm on conveyor 1 acknowledged?"
    e = logwords.expand(q, sim)
    assert e.startswith(q) and e.split()[-3:] == ["CV-401", "ack", "vibration"], e
    assert fts_query(e).endswith('"cv-401" OR "ack"')  # vibration is in the question already
    # a signal's words are its tag's parts: the discharge temperature is discharge_temp
    assert logwords.expand("when did the discharge temperature of C-301 return to normal?",
                           sim).endswith("normal? clear discharge temp")
    assert logwords.expand("why did M-201 trip?", sim).endswith("tripped interlock")
    assert logwords.expand("at what time did M-202 first show a worn bearing?", sim).endswith("hi raised vibration")
    assert logwords.expand("why does conveyor 2 report bad values?", sim).endswith("CV-402 bad")
    assert logwords.expand("hello there", sim) == "hello there"
    # of several signals a word may mean, the words their tags share: every temperature is "temp"
    assert logwords.expand("which machine is running hot?", sim).endswith("hot? temp")
    # ... and of the machine the question names, its own: M-201's temperature is its winding's
    assert logwords.expand("when did M-201 start running hot?", sim).endswith("hot? winding temp")


def test_minutes_named_and_the_span_after() -> None:
    assert logwords.minutes("raised at 08:11, acked?", span=3) == ["08:11", "08:12", "08:13"]
    assert logwords.minutes("between 23:59 and 00:00?", span=2) == ["23:59", "00:00", "00:01"]
    assert logwords.minutes("at 06:34:18 (06:34)", span=1) == ["06:34"]
    assert logwords.minutes("what tripped?") == []
    assert logwords.minutes("at 25:61 or 7:05 or 123:45") == []
    assert len(logwords.minutes("at 01:00, 02:00, 03:00")) == 16 and logwords.SPAN == 10


def test_alarm_follow_reads_which_alarm_and_what_happened_to_it(sim) -> None:
    f = logwords.alarm_follow("when was the high vibration alarm on conveyor 1 raised at 08:11 acknowledged?", sim)
    assert f is not None and (f["machine"], f["verb"], f["level"], f["minute"]) == ("CV-401", "ACK", "HI", "08:11")
    assert "vibration" in f["words"]
    f = logwords.alarm_follow("when did the HIHI bearing temperature alarm on P-101 clear?", sim)
    assert f is not None and (f["machine"], f["verb"], f["level"], f["minute"]) == ("P-101", "CLEAR", "HIHI", None)
    assert {"bearing", "temp"} <= set(f["words"])  # the log's tag is bearing_temp
    f = logwords.alarm_follow("when did the discharge pressure of C-301 return to normal after the alarm?", sim)
    assert f is not None and (f["verb"], f["level"]) == ("CLEAR", None) and "press" in f["words"]
    assert logwords.alarm_follow("who acked the low-low flow alarm on P-102?", sim)["level"] == "LOLO"
    # not one alarm's handling: no machine, two machines, both verbs, no alarm, another question
    for q in ("when was the vibration alarm acknowledged?", "was the alarm on P-101 or P-102 acknowledged?",
              "was the P-101 alarm acknowledged and cleared?", "when did P-101 clear its backlog?",
              "why did P-101 trip?"):
        assert logwords.alarm_follow(q, sim) is None, q


def test_onset_questions_and_the_one_machine_of_a_kind(sim) -> None:
    f = logwords.onset("when did the motor M-201 start running hot?", sim)
    assert f is not None and f["machine"] == "M-201" and "temp" in f["words"]
    assert logwords.onset("at what time did pump 1 first show cavitation?", sim)["machine"] == "P-101"
    for q in ("when did P-101 start up?", "why did M-201 start running hot?", "when did the motor start running hot?",
              "when was the first sign of the HI alarm on P-101 acknowledged?"):
        assert logwords.onset(q, sim) is None, q
    q = "when was the first sign of bearing damage on the compressor?"
    assert logwords.unnamed_kinds(q, sim) == ["compressor"]
    assert logwords.with_sole_ids(q, {"compressor": "C-301"}, sim).endswith("on the compressor C-301?")
    assert logwords.with_sole_ids(q, {"motor": "M-201"}, sim) == q
    for q in ("did the pumps trip?", "did the pump 2 trip?", "did the motor M-201 trip?", "did pump P-101 trip?"):
        assert logwords.unnamed_kinds(q, sim) == [], q


def test_an_onset_is_of_the_signals_the_question_names(sim) -> None:
    for q, tags in (("when did M-201 start running hot?", ("winding_temp",)),
                    ("when did the bearing temperature of P-101 start rising?", ("bearing_temp",)),  # not wear
                    ("at what time did pump P-101 first show bearing damage?", ("vibration",)),
                    ("when did P-101 start cavitating?", ("vibration",)),
                    ("when did a blocked filter begin on compressor C-302?", ("intake_filter_dp",)),
                    # a word of another kind's signal: the machine's alarms of that tag
                    ("when did M-201 first show cavitation?", ("vibration",)),
                    ("when did P-101 first show a problem?", None)):
        assert logwords.onset(q, sim)["tags"] == tags, q
    f = logwords.onset("when was the first sign of a worn bearing on motor M-201?", sim)
    assert f is not None and (f["machine"], f["tags"], f["signals"]) == ("M-201", ("vibration",), ["vibration"])
    assert logwords.onset("when did C-302 start overheating?", sim)["signals"] == ["discharge temperature"]


def test_trip_questions_name_one_machine(sim) -> None:
    for q in ("why did P-101 trip?", "Which interlock stopped the conveyor CV-401 at about 08:10?",
              "reason for the pump 2 trip (06:21)?"):
        assert logwords.trip(q, sim) in ("P-101", "CV-401", "P-102"), q
    for q in ("did the pumps trip?", "why did P-101 and P-102 trip?", "when was the HIHI alarm on P-101 that "
              "tripped it acknowledged?", "when did M-201 start running hot?"):
        assert logwords.trip(q, sim) is None, q


def test_onset_tags_hold_every_first_alarm_the_simulator_raises(sim) -> None:
    """The simulator description's signal words against the plant's ground truth: on training seeds, the first
    alarm after each process fault's onset (qa_corpus's onset answer) is of a signal the question names by its
    words, unless a sensor fault's BAD came first. A fault whose physics changed (cavitation first showing as low
    flow) or a description that lost a word fails here."""
    from tools.train import qa_corpus

    seen: dict[str, set] = {}
    for seed in range(8):
        node = qa_corpus.node_log(seed)
        for q in qa_corpus._questions_of(node):  # noqa: SLF001 - the generator's own answers
            if q["type"] != "onset":
                continue
            fields = node["lines"][q["answer"][0]].split()
            fault = q["key"].split(":")[1].split("@")[0]
            # "the pump": the node's one pump, as ask reads it from the store (host/qa._with_sole_ids)
            question = logwords.with_sole_ids(q["question"], {k: fields[3] for k in sim.kind_of(fields[3])}, sim)
            if fields[2] != "BAD":
                assert fields[4] in logwords.onset(question, sim)["tags"], (seed, question, fields)
                seen.setdefault(fault, set()).add(fields[4])
    assert set(seen) == {"overheating", "bearing_wear", "cavitation", "clogged_filter"}, seen
