"""Cause hints in the plant description (an alarm point's `causes`): accepted and passed on to the gateway's
PlantDesc, refused with one clear line when malformed, left out of what the node is given (the compiled form and
its hash are the same with or without them), and emitted by tools/plants for the points a fault drives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host import plantcompile, plantdesc, plantfile

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pump_skid.json"


def _with_causes(causes) -> tuple[dict, str, str]:
    """The example description with `causes` on its first alarm point; (doc, machine id, tag)."""
    d = json.loads(EXAMPLE.read_text())
    m = d["machines"][0]
    s = next(s for s in m["signals"] if s.get("alarms"))
    s["alarms"][0]["causes"] = causes
    return d, m["id"], s["tag"]


def test_causes_are_accepted_and_passed_on() -> None:
    d, mid, tag = _with_causes(["bearing wear", "lubrication loss"])
    checked = plantfile.loads(json.dumps(d), "skid.json")
    desc = plantdesc.from_dict(checked)
    point = desc.machine(mid).signal(tag).alarms[0]
    assert point.causes == ("bearing wear", "lubrication loss")
    assert all(a.causes == () for s in desc.machine(mid).signals for a in s.alarms[1:])  # absent: none


@pytest.mark.parametrize("causes, says", [
    ("bearing wear", 'must be a list, got "bearing wear"'),
    ([""], "1..64 characters"),
    ([" wear"], "not starting with a space"),
    (["x" * 65], "1..64 characters"),
    (["bad\nline"], "no control characters"),
    ([3], "must be a string, got 3"),
    (["wear", "wear"], "holds the same item twice"),
    (["c%d" % i for i in range(9)], "at most 8 items"),
])
def test_malformed_causes_get_one_clear_line(causes, says) -> None:
    d, mid, _tag = _with_causes(causes)
    lines = plantfile.errors_in(json.dumps(d), "skid.json")
    assert len(lines) == 1, lines
    assert lines[0].startswith("skid.json: machine %s: signals[" % mid) and ".alarms[0].causes" in lines[0], lines
    assert says in lines[0], lines


def test_the_compiler_ignores_causes() -> None:
    plain = json.loads(EXAMPLE.read_text())
    hinted, _mid, _tag = _with_causes(["bearing wear", "lubrication loss"])
    a = plantcompile.compile_plant(plantfile.loads(json.dumps(plain)))
    b = plantcompile.compile_plant(plantfile.loads(json.dumps(hinted)))
    assert a == b and b"lubrication" not in b
    assert plantdesc.from_dict(plantfile.loads(json.dumps(hinted))).text != plantdesc.from_dict(plain).text


def test_generated_plants_carry_causes_that_check() -> None:
    from host import board_profile
    from tools.plants import catalogue, generate, split

    points = hinted = 0
    for kind in catalogue.KINDS:
        which = "unseen" if kind.name in split.HELD_OUT_KINDS else "seen"
        d = generate.plant(3, which, kinds=[kind.name])
        plantfile.loads(json.dumps(d), "gen", board_profile.resolve(d["board"]))
        for s in d["machines"][0]["signals"]:
            for a in s.get("alarms", ()):
                points += 1
                hinted += bool(a.get("causes"))
                for c in a.get("causes", ()):  # each a cause of a fault of the kind
                    assert any(c in f.words for f in kind.faults), (kind.name, s["tag"], c)
        # a fault's causes are hints of the points of its first signal in the fault's direction
        for f in kind.faults:
            first = next(e for e in f.effects if e.role == f.first)
            ups = ("HI", "HIHI") if first.sign > 0 else ("LO", "LOLO")
            sig = d["machines"][0]["signals"][[x.role for x in kind.signals].index(f.first)]
            for a in sig.get("alarms", ()):
                if a["level"] in ups:
                    assert set(f.words) <= set(a["causes"]) or len(a["causes"]) == generate.MAX_CAUSES, (kind.name, f)
    assert 0 < hinted < points  # some points have hints, not all

