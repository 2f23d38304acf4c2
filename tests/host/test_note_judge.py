"""tools/bench/note_judge.py on hand-written notes about two generated plants, one of training kinds (seen) and one
of held-out kinds (unseen): good notes pass, wrong machines, signals, numbers, events and invented causes are
caught, and everything the judge knows of a plant comes from its description."""

from __future__ import annotations

import pytest

from tools.bench import note_judge as nj
from tools.plants import generate

TS = "2026-11-30T06:10:18Z "


@pytest.fixture(scope="module", params=[("seen", ("centrifugal pump", "air compressor"), "site"),
                                        ("unseen", ("rotary kiln", "cooling tower"), "area")], ids=["seen", "unseen"])
def plant(request) -> dict:
    split, kinds, scheme = request.param
    return generate.plant(7, split, kinds=list(kinds), scheme=scheme, system="metric")


def _trip(desc: dict) -> tuple[dict, dict, dict, list[str]]:
    """The first machine's first interlock point with cause hints, and the lines of its trip."""
    m = desc["machines"][0]
    s, a = next((s, a) for s in m["signals"] for a in s.get("alarms", ()) if a.get("interlock") and a.get("causes"))
    value = "%.*f" % (s["decimals"], a["limit"] + (1 if a["level"] == "HIHI" else -1) * 10 ** -s["decimals"])
    lines = [TS + "ALARM %s %s %s %s%s prio=4 RAISED" % (a["level"], m["id"], s["tag"], value, s["unit"]),
             TS + "STATE %s RUNNING->TRIPPED interlock=%s" % (m["id"], a["interlock"])]
    return m, s, a, lines


def _other_cause(desc: dict, m: dict, a: dict) -> str:
    """A cause hint of the plant that is not one of this point's."""
    return next(c for mm in desc["machines"] for s in mm["signals"] for p in s.get("alarms", ())
                for c in p.get("causes", ()) if not set(c.split()) & {w for h in a["causes"] for w in h.split()})


def _word(s: dict) -> str:
    return next(w for w in s["words"] if w not in sum((a.get("causes", []) for a in s["alarms"]), []))


def test_a_good_note_passes(plant) -> None:
    m, s, a, lines = _trip(plant)
    value = lines[0].split()[5]
    direction = "high" if a["level"] == "HIHI" else "low"
    for note in (" %s tripped on %s %s %s\n" % (m["id"], direction, _word(s), value),
                 " %s tripped: %s %s, likely %s\n" % (m["id"], _word(s), value, a["causes"][0]),
                 " %s tripped on %s (limit %s%s)\n" % (m["id"], a["interlock"], a["limit"], s["unit"]),
                 " the %s tripped due to %s %s\n" % (m["words"][0], direction, _word(s))):
        v = nj.note_verdict(note, lines, plant)
        assert v["factual"] and v["covered"] and not v["hallucinated"] and not v["invented_cause"], (note, v)


def test_an_invented_cause_is_flagged(plant) -> None:
    m, s, a, lines = _trip(plant)
    for cause in (_other_cause(plant, m, a), "overheating" if "overheating" not in a["causes"] else "seal leak",
                  "a loose coupling"):
        note = " %s tripped on %s, likely %s\n" % (m["id"], _word(s), cause)
        v = nj.note_verdict(note, lines, plant)
        assert v["invented_cause"] and not v["factual"] and not v["hallucinated"], (note, v)
        assert v["covered"], v  # the machine, the trip and its signal are still said


def test_wrong_machines_signals_numbers_and_events_are_hallucinations(plant) -> None:
    m, s, a, lines = _trip(plant)
    other = plant["machines"][1]
    other_sig = next(x for x in m["signals"] if x["tag"] != s["tag"])
    for note, why in ((" %s tripped on %s\n" % (other["id"], _word(s)), "machine not in the lines"),
                      (" P-101 tripped on %s\n" % _word(s), "machine not in the lines"),
                      (" %s tripped on %s\n" % (m["id"], _word(other_sig)), "signal not in the lines"),
                      (" %s tripped on %s 12345.6%s\n" % (m["id"], _word(s), s["unit"]), "number not in the lines"),
                      (" %s tripped, alarm acknowledged\n" % m["id"], "event not in the lines"),
                      (" %s tripped at 09:41\n" % m["id"], "time not in the lines"),
                      (" %s tripped on humidity\n" % m["id"], "signal the plant does not have")):
        v = nj.note_verdict(note, lines, plant)
        assert v["hallucinated"] and not v["factual"], (note, v)
        assert any(w.startswith(why) for w in v["why"]), (note, v["why"])


def test_vacuous_and_uncovered_notes(plant) -> None:
    m, s, a, lines = _trip(plant)
    v = nj.note_verdict(" The above code is a simple calculator.\n", lines, plant)
    assert v["vacuous"] and not v["factual"] and not v["covered"] and not v["hallucinated"], v
    v = nj.note_verdict(" %s %s alarm\n" % (m["id"], _word(s)), lines, plant)  # true, but not the trip
    assert v["factual"] and not v["covered"], v


def test_state_changes_and_clears(plant) -> None:
    m = plant["machines"][0]
    start = [TS + "STATE %s STOPPED->RUNNING cmd=schedule" % m["id"]]
    assert nj.note_verdict(" %s started on its schedule\n" % m["id"], start, plant)["covered"]
    v = nj.note_verdict(" %s stopped\n" % m["id"], start, plant)
    assert v["hallucinated"] and not v["covered"], v
    _m, s, a, lines = _trip(plant)
    clear = [TS + "CLEAR %s %s %s %s%s prio=4 RTN_UNACK" % (a["level"], m["id"], s["tag"], a["limit"], s["unit"])]
    v = nj.note_verdict(" %s %s alarm cleared\n" % (m["id"], _word(s)), clear, plant)
    assert v["factual"] and v["covered"], v
    assert not nj.note_verdict(" %s %s alarm cleared, %s\n" % (m["id"], _word(s), a["causes"][0]), clear,
                               plant)["invented_cause"]


def test_a_point_without_hints_supports_no_cause() -> None:
    desc = generate.plant(7, "seen", kinds=["centrifugal pump"], scheme="site", system="metric")
    m = desc["machines"][0]
    s, a = next((s, a) for s in m["signals"] for a in s.get("alarms", ()) if not a.get("causes"))
    lines = [TS + "ALARM %s %s %s %s%s prio=3 RAISED" % (a["level"], m["id"], s["tag"], a["limit"], s["unit"])]
    v = nj.note_verdict(" %s %s %s%s, likely bearing wear\n" % (m["id"], _word(s), a["limit"], s["unit"]), lines,
                        desc)
    assert v["invented_cause"] and v["covered"], v
