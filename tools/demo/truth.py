"""The demo's ground truth: what the plant simulators of one run did, per operator question.

The demo prints each answer beside this. Two sources, both the simulator's own: the faults the demo told each
node's plant simulator to develop ("MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND]", firmware/nodecfg.parse_fault)
and the event lines the simulators' own logs hold (alarms, acknowledgements, clears, trips, state changes,
sensors lost: docs/PLANT.md's grammar, parsed by tools/train/plant_text's event reader), whatever the nodes
logged of them.

    evs = events(store.logs())                         # every event line of the run, in order
    t = truth_for("Which machine tripped, and why?", evs, faults=DEMO_FAULTS)
    t["text"]   # 'node1: P-101 TRIPPED at 06:02:33 (interlock HIHI_DP, strainer_dp)', or 'nothing of the kind ...'

A question is matched by what it names: machine ids (P-101 ...) narrow it to those machines (none: all of
them); "trip" / "stop" asks for trips (interlock stops; the schedule's stops are routine), "alarm" /
"normal" for the alarms raised and cleared and whether any is still raised; anything else gets every event
of the machines named.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from tools.train.plant_judge import MACHINE
from tools.train.plant_text import _event

EVENT_WORDS = ("ALARM", "ACK", "CLEAR", "SHELVE", "STATE", "LOST")
_TRIP_Q = re.compile(r"\b(trip|tripped|trips|stop|stopped|stops|shut ?down)\b", re.I)
_ALARM_Q = re.compile(r"\b(alarm|alarms|alarmed|alarming|normal|normally|wrong|fault|faults|problem)\b", re.I)


def events(logs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The event lines of rows ({"node", "text"}: the simulators' logs, or host/store.LogStore.logs()), parsed,
    each with its node and time."""
    out = []
    for row in logs:
        line = row["text"].rstrip("\n")
        if len(line) < 22 or line[21:].split(" ", 1)[0] not in EVENT_WORDS:
            continue
        try:
            e = _event(line)
        except (IndexError, ValueError):  # a line cut short: not an event this reader can state
            continue
        e["node"] = row["node"]
        e["time"] = line[:19]
        e["line"] = line
        out.append(e)
    return out


def _hms(t: str) -> str:
    return t[11:19]


def _say(e: dict[str, Any]) -> str:
    return "%s: %s" % (e["node"], _what(e)) if e.get("node") else _what(e)


def _what(e: dict[str, Any]) -> str:
    k = e["kind"]
    if k == "trip":
        return "%s TRIPPED at %s (interlock %s%s)" % (e["machine"], _hms(e["time"]), e.get("interlock") or "?",
                                                   ", " + e["signal"] if e.get("signal") else "")
    if k == "state":
        return "%s %s->%s at %s (%s)" % (e["machine"], e["state_from"], e["state_to"], _hms(e["time"]), e["cause"])
    if k == "lost":
        return "%s lines lost at %s" % (e["value"], _hms(e["time"]))
    if k == "sensor_lost":
        head = "%s %s sensor BAD (alarm raised)" % (e["machine"], e["signal"])
    else:
        verb = {"alarm": "raised", "ack": "acked", "clear": "cleared", "shelve": "shelved"}[k]
        head = "%s %s %s alarm %s" % (e["machine"], e["level"], e["signal"], verb)
    return "%s at %s (%s)" % (head, _hms(e["time"]), e["value"])


def _open_alarms(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alarms raised and not cleared by the end of the run (the last raise of each point)."""
    live: dict[tuple, dict[str, Any]] = {}
    for e in evs:
        key = (e.get("node"), e.get("machine"), e.get("signal"), e.get("level"))
        if e["kind"] in ("alarm", "sensor_lost"):
            live[key] = e
        elif e["kind"] == "clear":
            live.pop(key, None)
    return list(live.values())


def _asked(e: dict[str, Any], trips: bool, alarms: bool) -> bool:
    if not trips and not alarms:
        return True
    k = e["kind"]
    if trips and k == "trip":  # a scheduled stop (cmd=schedule, then ramp=done) is routine, not asked about
        return True
    return alarms and k in ("alarm", "sensor_lost", "clear")


def truth_for(question: str, evs: list[dict[str, Any]], faults: Iterable[str] = ()) -> dict[str, Any]:
    """The ground truth for one question: {"text": one line, "events": the lines it rests on, "faults": the
    injected faults of the machines asked about, "machines": the ids the question names}."""
    from firmware.nodecfg import parse_fault

    named = sorted({m.group(0) for m in MACHINE.finditer(question)})
    trips, alarms = bool(_TRIP_Q.search(question)), bool(_ALARM_Q.search(question))
    mine = [e for e in evs if e.get("machine") and (not named or e["machine"] in named)]
    hit = [e for e in mine if _asked(e, trips, alarms)]
    parts = [_say(e) for e in hit]
    if alarms and hit:
        still = _open_alarms(mine)
        parts.append("still raised at the end: " + ", ".join("%s %s %s" % (e["machine"], e["level"], e["signal"])
                                                             for e in still) if still else "every alarm cleared")
    if not parts:
        parts = ["nothing of the kind in the log since %s" % _hms(evs[0]["time"]) if evs
                 else "no event lines in the log"]
    injected = []
    for f in faults:
        at, machine, fault, sev, signal = parse_fault(f)
        if not named or machine in named:
            injected.append("%s %s (severity %d%s) from plant second %d" % (
                machine, fault.replace("_", " "), sev, ", signal " + signal if signal else "", at))
    return {"text": "; ".join(parts), "machines": named, "faults": injected, "events": [e["line"] for e in hit]}
