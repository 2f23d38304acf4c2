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

A generated or given plant (tools/demo/plants.py) has ids of other shapes (A3-KLN01, MIXER2, Tank-1): its
descriptions say which machines a question names (their ids and aliases, else words only one machine has) and
which signal each interlock trips on; its faults are dicts stamped with the simulator's clock time:

    evs = events(rows, tags=interlock_tags(descs))
    t = truth_for(q, evs, faults=[{"node", "machine", "fault", "severity", "since"}, ...], machines=named_by(descs))
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from tools.train.plant_judge import MACHINE
from tools.train.plant_text import _event

EVENT_WORDS = ("ALARM", "ACK", "CLEAR", "SHELVE", "STATE", "LOST")
_TRIP_Q = re.compile(r"\b(trip|tripped|trips|stop|stopped|stops|shut ?down)\b", re.I)
_ALARM_Q = re.compile(r"\b(alarm|alarms|alarmed|alarming|normal|normally|wrong|fault|faults|problem)\b", re.I)


def events(logs: Iterable[dict[str, Any]], tags: dict[tuple[str, str], str] | None = None) -> list[dict[str, Any]]:
    """The event lines of rows ({"node", "text"}: the simulators' logs, or host/store.LogStore.logs()), parsed,
    each with its node and time; tags: (machine, interlock) -> the signal it trips on (interlock_tags), where the
    built-in simulator's table does not know the machine."""
    out = []
    for row in logs:
        line = row["text"].rstrip("\n")
        if len(line) < 22 or line[21:].split(" ", 1)[0] not in EVENT_WORDS:
            continue
        try:
            e = _event(line)
        except (IndexError, ValueError):  # a line cut short: not an event this reader can state
            continue
        if tags and e["kind"] == "trip":
            e["signal"] = tags.get((e["machine"], e["interlock"]), e.get("signal"))
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


def interlock_tags(descs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(machine id, interlock) -> the tag of the signal whose alarm point trips on it, from plant descriptions."""
    return {(m["id"], a["interlock"]): s["tag"] for d in descs for m in d["machines"] for s in m["signals"]
            for a in s.get("alarms", ()) if a.get("interlock")}


def named_by(descs: Iterable[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """machine id -> {"aliases", "words"}: the names a question may call it by beside its id, from plant
    descriptions (the same id in two plants: one machine, the names of both)."""
    out: dict[str, dict[str, list[str]]] = {}
    for d in descs:
        for m in d["machines"]:
            names = out.setdefault(m["id"], {"aliases": [], "words": []})
            for k in ("aliases", "words"):
                names[k] += [w for w in m.get(k, ()) if w not in names[k]]
    return out


def _says(text: str, name: str, case: bool = True) -> bool:
    """`name` stands in `text` as a whole (not inside a longer id or word)."""
    return re.search(r"(?<![A-Za-z0-9_-])%s(?![A-Za-z0-9_-])" % re.escape(name), text, 0 if case else re.I) is not None


def named(question: str, machines: dict[str, dict[str, list[str]]] | None = None) -> list[str]:
    """The machine ids a question names: the built-in simulator's id shape, or with `machines` (named_by) the ids
    and aliases it says, else the words that only one machine has ("the lime kiln", not "the kiln" of two)."""
    if machines is None:
        return sorted({m.group(0) for m in MACHINE.finditer(question)})
    hit = {i for i, n in machines.items() if _says(question, i) or any(_says(question, a, False) for a in n["aliases"])}
    if hit:
        return sorted(hit)
    owners: dict[str, set] = {}
    for i, n in machines.items():
        for w in n["words"]:
            owners.setdefault(w.lower(), set()).add(i)
    return sorted({i for w, ids in owners.items() if len(ids) == 1 and _says(question, w, False) for i in ids})


def _fault_line(f: str | dict[str, Any]) -> tuple[str, str]:
    """(machine, what the demo injected): a "MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND]" string (the built-in
    simulator's, from that plant second) or a dict {"machine", "fault", "severity", "since"[, "node"]} (a generated
    plant's, since the simulator's clock time)."""
    from firmware.nodecfg import parse_fault

    if isinstance(f, dict):
        head = "%s: " % f["node"] if f.get("node") else ""
        return f["machine"], "%s%s %s (severity %d) since %s" % (head, f["machine"], f["fault"].replace("_", " "),
                                                                 f["severity"], _hms(f["since"]))
    at, machine, fault, sev, signal = parse_fault(f)
    return machine, "%s %s (severity %d%s) from plant second %d" % (
        machine, fault.replace("_", " "), sev, ", signal " + signal if signal else "", at)


def truth_for(question: str, evs: list[dict[str, Any]], faults: Iterable[str | dict[str, Any]] = (),
              machines: dict[str, dict[str, list[str]]] | None = None) -> dict[str, Any]:
    """The ground truth for one question: {"text": one line, "events": the lines it rests on, "faults": the
    injected faults of the machines asked about, "machines": the ids the question names}. machines: the plants'
    names for their machines (named_by), where they are not the built-in simulator's."""
    names = named(question, machines)
    trips, alarms = bool(_TRIP_Q.search(question)), bool(_ALARM_Q.search(question))
    mine = [e for e in evs if e.get("machine") and (not names or e["machine"] in names)]
    hit = [e for e in mine if _asked(e, trips, alarms)]
    parts = [_say(e) for e in hit]
    if alarms and hit:
        still = _open_alarms(mine)
        parts.append("still raised at the end: " + ", ".join("%s %s %s" % (e["machine"], e["level"], e["signal"])
                                                             for e in still) if still else "every alarm cleared")
    if not parts:
        parts = ["nothing of the kind in the log since %s" % _hms(evs[0]["time"]) if evs
                 else "no event lines in the log"]
    injected = [line for machine, line in map(_fault_line, faults) if not names or machine in names]
    return {"text": "; ".join(parts), "machines": names, "faults": injected, "events": [e["line"] for e in hit]}
