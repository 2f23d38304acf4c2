"""host/logwords.py: an operator's words mapped to the log's (what `ask` searches the store for)."""

from __future__ import annotations

from host import logwords
from host.store import fts_query


def test_machines_by_kind_and_number_and_by_id() -> None:
    assert logwords.machine_ids("did conveyor 1 or pump no. 2 trip?") == ["CV-401", "P-102"]
    assert logwords.machine_ids("Motors 3 and compressor #1") == ["M-203", "C-301"]
    assert logwords.machine_ids("pump P-101") == []  # an id is not a kind and a number
    assert logwords.named_ids("why did p-101 and pump 1 and CV-402 trip?") == ["P-101", "CV-402"]
    assert logwords.named_ids("what tripped?") == []


def test_expand_adds_the_logs_words_and_keeps_the_question() -> None:
    q = "when was the high vibration alarm on conveyor 1 acknowledged?"
    e = logwords.expand(q)
    assert e.startswith(q) and e.split()[-3:] == ["CV-401", "ack", "vibration"], e
    assert fts_query(e).endswith('"cv-401" OR "ack"')  # vibration is in the question already
    assert logwords.expand("when did the discharge temperature of C-301 return to normal?").endswith("normal? clear temp")
    assert logwords.expand("why did M-201 trip?").endswith("tripped interlock")
    assert logwords.expand("at what time did M-202 first show a worn bearing?").endswith("vibration hi raised")
    assert logwords.expand("why does conveyor 2 report bad values?").endswith("CV-402 bad")
    assert logwords.expand("hello there") == "hello there"


def test_minutes_named_and_the_span_after() -> None:
    assert logwords.minutes("raised at 08:11, acked?", span=3) == ["08:11", "08:12", "08:13"]
    assert logwords.minutes("between 23:59 and 00:00?", span=2) == ["23:59", "00:00", "00:01"]
    assert logwords.minutes("at 06:34:18 (06:34)", span=1) == ["06:34"]
    assert logwords.minutes("what tripped?") == []
    assert logwords.minutes("at 25:61 or 7:05 or 123:45") == []
    assert len(logwords.minutes("at 01:00, 02:00, 03:00")) == 16 and logwords.SPAN == 10


def test_alarm_follow_reads_which_alarm_and_what_happened_to_it() -> None:
    f = logwords.alarm_follow("when was the high vibration alarm on conveyor 1 raised at 08:11 acknowledged?")
    assert f is not None and (f["machine"], f["verb"], f["level"], f["minute"]) == ("CV-401", "ACK", "HI", "08:11")
    assert "vibration" in f["words"]
    f = logwords.alarm_follow("when did the HIHI bearing temperature alarm on P-101 clear?")
    assert f is not None and (f["machine"], f["verb"], f["level"], f["minute"]) == ("P-101", "CLEAR", "HIHI", None)
    assert {"bearing", "temp"} <= set(f["words"])  # the log's tag is bearing_temp
    f = logwords.alarm_follow("when did the discharge pressure of C-301 return to normal after the alarm?")
    assert f is not None and (f["verb"], f["level"]) == ("CLEAR", None) and "press" in f["words"]
    assert logwords.alarm_follow("who acked the low-low flow alarm on P-102?")["level"] == "LOLO"
    # not one alarm's handling: no machine, two machines, both verbs, no alarm, another question
    for q in ("when was the vibration alarm acknowledged?", "was the alarm on P-101 or P-102 acknowledged?",
              "was the P-101 alarm acknowledged and cleared?", "when did P-101 clear its backlog?",
              "why did P-101 trip?"):
        assert logwords.alarm_follow(q) is None, q


def test_onset_questions_and_the_one_machine_of_a_kind() -> None:
    f = logwords.onset("when did the motor M-201 start running hot?")
    assert f is not None and f["machine"] == "M-201" and "temp" in f["words"]
    assert logwords.onset("at what time did pump 1 first show cavitation?")["machine"] == "P-101"
    for q in ("when did P-101 start up?", "why did M-201 start running hot?", "when did the motor start running hot?",
              "when was the first sign of the HI alarm on P-101 acknowledged?"):
        assert logwords.onset(q) is None, q
    q = "when was the first sign of bearing damage on the compressor?"
    assert logwords.unnamed_kinds(q) == ["C"]
    assert logwords.with_sole_ids(q, {"C": "C-301"}).endswith("on the compressor C-301?")
    assert logwords.with_sole_ids(q, {"M": "M-201"}) == q
    for q in ("did the pumps trip?", "did the pump 2 trip?", "did the motor M-201 trip?", "did pump P-101 trip?"):
        assert logwords.unnamed_kinds(q) == [], q


def test_the_fault_a_question_names_and_the_alarms_it_raises_first() -> None:
    for q, fault in (("when did M-201 start running hot?", "overheating"),
                     ("when did the bearing temperature of P-101 start rising?", "overheating"),  # heat, not wear
                     ("at what time did pump P-101 first show bearing damage?", "bearing_wear"),
                     ("when did P-101 start cavitating?", "cavitation"),
                     ("when did a blocked filter begin on compressor C-302?", "clogged_filter"),
                     ("when did P-101 first show a problem?", None)):
        assert logwords.fault(q) == fault, q
    f = logwords.onset("when was the first sign of a worn bearing on motor M-201?")
    assert f is not None and (f["machine"], f["fault"], f["tags"]) == ("M-201", "bearing_wear", ("vibration",))
    assert logwords.onset("when did P-101 first show a problem?")["tags"] is None


def test_trip_questions_name_one_machine() -> None:
    for q in ("why did P-101 trip?", "Which interlock stopped the conveyor CV-401 at about 08:10?",
              "reason for the pump 2 trip (06:21)?"):
        assert logwords.trip(q) in ("P-101", "CV-401", "P-102"), q
    for q in ("did the pumps trip?", "why did P-101 and P-102 trip?", "when was the HIHI alarm on P-101 that "
              "tripped it acknowledged?", "when did M-201 start running hot?"):
        assert logwords.trip(q) is None, q


def test_fault_tags_hold_every_first_alarm_the_simulator_raises() -> None:
    """FAULT_TAGS against the plant's ground truth: on training seeds, the first alarm after each process
    fault's onset (qa_corpus's onset answer) is one of its fault's tags, unless a sensor fault's BAD came first.
    A fault whose physics changed (cavitation first showing as low flow) fails here."""
    from tools.train import qa_corpus

    seen: dict[str, set] = {}
    for seed in range(8):
        node = qa_corpus.node_log(seed)
        for q in qa_corpus._questions_of(node):  # noqa: SLF001 - the generator's own answers
            if q["type"] != "onset":
                continue
            fields = node["lines"][q["answer"][0]].split()
            fault = q["key"].split(":")[1].split("@")[0]
            if fields[2] != "BAD":
                assert fields[4] in logwords.FAULT_TAGS[fault], (seed, q["question"], fields)
                seen.setdefault(fault, set()).add(fields[4])
    assert set(seen) == set(logwords.FAULT_TAGS), seen  # every fault was seen at least once
