"""Judges of notes and answers about the plant: what a text claims (machines, signals, numbers, directions,
faults, events, times), and whether the claims agree with the log window and the simulator's ground truth.

    claims = parse(text)
    note_verdict(note, facts)        -> {"factual", "covered", "hallucinated", "vacuous", "why": [...]}
    answer_verdict(answer, truth, sources) -> {"accurate", "cited", "why": [...]}

`facts` is tools/train/plant_text.episode_facts' dict of one episode (its window: the episode's lines);
`truth` is a question's ground truth and `sources` the windows the answer was given ({"n", "text"}),
both as tools/train/plant_text.qa_examples writes them. docs/QUALITY.md says how each judge decides.
No model, no I/O: the judges are plain string code, tested with fixed strings (tests/host/test_quality_judge.py).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from tools.train.corpus import TAG_WORDS
from tools.train.qa_corpus import TAG_NOUN

MACHINE = re.compile(r"\b(CV|P|M|C)-(\d{3})\b")
TIME = re.compile(r"\b([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?\b")
ISO = re.compile(r"\b\d{4}-\d\d-\d\dT([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?Z?")
# a number and the unit that may follow it ("7.4mm/s", "7.4 mm/s", "2960rpm", "63 C")
NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s?(mm/s|m3/h|kPa|bar|rpm|m/s|A|C)?(?![\w/])")
CITE = re.compile(r"\[(\d{1,3})\]")
UNITS = ("C", "mm/s", "A", "bar", "m3/h", "kPa", "rpm", "m/s")

KIND_TAGS = {"P": ("bearing_temp", "vibration", "motor_current", "discharge_press", "flow", "strainer_dp"),
             "M": ("winding_temp", "vibration", "motor_current", "speed"),
             "C": ("discharge_temp", "vibration", "motor_current", "receiver_press", "air_flow", "intake_filter_dp"),
             "CV": ("gearbox_temp", "vibration", "motor_current", "belt_speed")}
INTERLOCK_TAG = {"HIHI_TEMP": "temp", "HIHI_VIB": "vibration", "HIHI_CURR": "motor_current", "HIHI_DP": "dp",
                 "LOLO_FLOW": "flow", "HIHI_PRESS": "receiver_press"}
TEMPS = ("bearing_temp", "winding_temp", "discharge_temp", "gearbox_temp")
DPS = ("strainer_dp", "intake_filter_dp")


def interlock_tag(interlock: str, machine: str) -> str | None:
    """The alarm tag whose HIHI/LOLO point an interlock trips on, for this machine's kind."""
    sig = INTERLOCK_TAG.get(interlock)
    tags = KIND_TAGS.get(machine.split("-")[0], ())
    if sig == "temp":
        return next((t for t in tags if t in TEMPS), None)
    if sig == "dp":
        return next((t for t in tags if t in DPS), None)
    return sig if sig in tags else None


def _signal_phrases() -> list[tuple[str, frozenset]]:
    """(phrase, the tags it can mean), longest phrases first: each tag's words, its name, and generic words."""
    out: dict[str, set] = {}
    for tag in TAG_WORDS:
        for ph in (TAG_WORDS[tag], TAG_NOUN[tag], tag, tag.replace("_", " ")):
            out.setdefault(ph.lower(), set()).add(tag)
    generic = {"temperature": TEMPS, "temp": TEMPS, "heat": TEMPS, "current": ("motor_current",),
               "amps": ("motor_current",), "load current": ("motor_current",), "vib": ("vibration",),
               "vibrations": ("vibration",), "pressure": ("discharge_press", "receiver_press"),
               "flow": ("flow", "air_flow"), "flow rate": ("flow", "air_flow"), "dp": DPS,
               "differential pressure": DPS, "pressure drop": DPS, "filter dp": DPS, "rpm": ("speed",),
               "speed": ("speed", "belt_speed")}
    for ph, tags in generic.items():
        out.setdefault(ph, set()).update(tags)
    return sorted(((p, frozenset(t)) for p, t in out.items()), key=lambda x: -len(x[0]))


SIGNALS = _signal_phrases()
_SIG_RE = [(re.compile(r"(?<![a-z_])" + re.escape(p).replace(r"\ ", r"[\s_]") + r"(?![a-z_])"), tags)
           for p, tags in SIGNALS]
DIRECTIONS = {"high": r"high|higher|above|exceed(?:s|ed|ing)?|over the limit|hihi|hi",
              "low": r"low|lower|below|under the limit|lolo|lo",
              "rising": r"ris(?:e|es|ing)|rose|increas(?:e|es|ed|ing)|climb(?:s|ed|ing)|going up|trending up",
              "falling": r"fall(?:s|ing)?|fell|drop(?:s|ped|ping)|decreas(?:e|es|ed|ing)|going down|trending down",
              "steady": r"steady|stable|flat|unchanged"}
_DIR_RE = {d: re.compile(r"(?<![a-z-])(?:%s)(?![a-z-])" % p) for d, p in DIRECTIONS.items()}
FAULTS = {"bearing_wear": r"bearing (?:wear|damage|fault|failure|problem)|worn bearing|wearing (?:its|the) bearing",
          "cavitation": r"cavitat\w*",
          "overheating": r"overheat\w*|running hot|excess heat",
          "clogged_filter": r"clog\w*|blocked filter|filter (?:is )?blocked|dirty filter",
          "sensor_dropout": r"drop(?:ping|s|ped)? ?out|dropout|sensor (?:is )?lost|readings? missing|missing readings?",
          "stuck_value": r"stuck",
          "drift": r"drift\w*"}
_FAULT_RE = {f: re.compile(r"(?<![a-z])(?:%s)" % p) for f, p in FAULTS.items()}
EVENTS = {"trip": r"trip(?:s|ped|ping)?|interlock",
          "ack": r"acknowledg\w*|ack(?:ed|ked)?",
          "clear": r"clear(?:s|ed)?|back to normal|returned to normal|return(?:s|ed)? to normal|normal again",
          "alarm": r"alarm(?:s|ed)?|raised",
          "start": r"start(?:s|ed|ing)?|up to speed|running",
          "stop": r"stop(?:s|ped|ping)?|shut down|stands? still",
          "reset": r"reset",
          "shelve": r"shelve[sd]?|unshelve[sd]?",
          "lost": r"lost|dropped|missing"}
_EVENT_RE = {e: re.compile(r"(?<![a-z])(?:%s)(?![a-z])" % p) for e, p in EVENTS.items()}
NONE_RE = re.compile(r"nothing of the kind|no such|no record|not in the log|no (?:trip|alarm|sign|event)s?\b|"
                     r"did not|didn't|has not|hasn't|never|no evidence")


def parse(text: str) -> dict[str, Any]:
    """What a note or answer claims: machine ids, signal tag sets, numbers (value, unit or None), directions,
    faults, event words, times (hh:mm), citations. Machine ids and times are taken out before numbers."""
    machines = ["%s-%s" % m.groups() for m in MACHINE.finditer(text)]
    rest = MACHINE.sub(" ", text)
    times = ["%s:%s" % (m.group(1), m.group(2)) for m in ISO.finditer(rest)]
    rest = ISO.sub(" ", rest)
    times += ["%s:%s" % (m.group(1), m.group(2)) for m in TIME.finditer(rest)]
    rest = TIME.sub(" ", rest)
    cites = [int(m.group(1)) for m in CITE.finditer(rest)]
    rest = CITE.sub(" ", rest)
    numbers = [(float(m.group(1)), m.group(2)) for m in NUMBER.finditer(rest)]
    low = rest.lower().replace("up to speed", " ")  # an idiom, not the speed signal
    signals: list[frozenset] = []
    for rx, tags in _SIG_RE:
        if rx.search(low):
            signals.append(tags)
            low = rx.sub(" # ", low)
    low = rest.lower()
    faults = {f for f, rx in _FAULT_RE.items() if rx.search(low)}
    plain = low
    for rx in _FAULT_RE.values():  # "dropping out" is a fault, not a falling value
        plain = rx.sub(" ", plain)
    return {"machines": machines, "signals": signals, "numbers": numbers, "times": times, "cites": cites,
            "directions": {d for d, rx in _DIR_RE.items() if rx.search(plain)},
            "faults": faults,
            "events": {e for e, rx in _EVENT_RE.items() if rx.search(low)},
            "none": bool(NONE_RE.search(low)), "text": " " + low}


def _value(s: str | None) -> tuple[float, str] | None:
    """'7.4mm/s' -> (7.4, 'mm/s'); '2960rpm' -> (2960.0, 'rpm'); '?' or None -> None."""
    if not s:
        return None
    m = NUMBER.fullmatch(s)
    return None if m is None else (float(m.group(1)), m.group(2))


def window_values(lines: Iterable[str]) -> list[tuple[float, str | None]]:
    """Every number a window's lines show, with its unit (prio= and LOST counts without one); timestamps and
    machine ids are not numbers."""
    out = []
    for ln in lines:
        body = ln[21:] if len(ln) > 21 and ln[10:11] == "T" else ln
        body = MACHINE.sub(" ", TIME.sub(" ", ISO.sub(" ", body)))
        for tok in body.replace("=", " ").split():
            m = NUMBER.fullmatch(tok)
            if m:
                out.append((float(m.group(1)), m.group(2)))
    return out


def _number_ok(num: tuple[float, str | None], allowed: list[tuple[float, str | None]]) -> bool:
    v, unit = num
    return any(abs(v - a) < 1e-6 and (unit is None or unit == u) for a, u in allowed)


# ---------------------------------------------------------------------------------------------- notes


def note_verdict(note: str, facts: dict[str, Any]) -> dict[str, Any]:
    """Judge one note against its episode's facts.

    factual: names something checkable, and every machine id is one of the window's, every signal one the
      window shows (its alarm tags, the tag an interlock trips on), every number one the window shows (with
      the same unit where the note gives one), every direction word one the window and the truth allow,
      every fault word the fault the simulator knows is developing on a machine of the window, a trip word
      only where the window holds a trip, every time the episode's minute;
    covered: names the event's machine, its signal (when the event has one) and its value or its trend
      (state changes: the new state; a LOST line: the count);
    hallucinated: a machine id or a number that is not in the window;
    vacuous: names no machine id (a LOST line's note: no number), so none of its claims has a subject to check
      (counted as not factual: see docs/QUALITY.md)."""
    c = parse(note)
    w = facts["window"]
    why: list[str] = []
    # checkable: a note is about a machine (the system prompt asks "which machine"); a LOST line has none
    vac = not (c["numbers"] if facts["kind"] == "lost" else c["machines"])
    bad_m = [m for m in c["machines"] if m not in w["machines"]]
    bad_n = [n for n in c["numbers"] if not _number_ok(n, [tuple(x) for x in w["values"]])]
    if bad_m:
        why.append("machine not in the window: %s" % ", ".join(bad_m))
    if bad_n:
        why.append("number not in the window: %s" % ", ".join("%g%s" % (v, u or "") for v, u in bad_n))
    wsig = set(w["signals"])
    bad_s = [sorted(s)[0] for s in c["signals"] if not s & wsig]
    if bad_s:
        why.append("signal not in the window: %s" % ", ".join(bad_s))
    bad_d = sorted(c["directions"] - set(w["directions"]))
    if bad_d:
        why.append("direction the window and truth do not allow: %s" % ", ".join(bad_d))
    bad_f = sorted(c["faults"] - set(w["faults"]))
    if bad_f:
        why.append("fault the truth does not know here: %s" % ", ".join(bad_f))
    if "trip" in c["events"] and not w["tripped"]:
        why.append("a trip the window does not hold")
    bad_t = [t for t in c["times"] if t != facts["time"][11:16]]
    if bad_t:
        why.append("time not the episode's: %s" % ", ".join(bad_t))
    if vac:
        why.append("names nothing checkable")
    hall = bool(bad_m or bad_n)
    factual = not why
    covered = _covered(c, facts)
    return {"factual": factual, "covered": covered, "hallucinated": hall, "vacuous": vac, "why": why}


def _covered(c: dict[str, Any], facts: dict[str, Any]) -> bool:
    kind = facts["kind"]
    if kind == "lost":
        return _number_ok((float(facts["value"]), None), c["numbers"]) if facts.get("value") else False
    if facts["machine"] not in c["machines"]:
        return False
    if facts.get("signal") and not any(facts["signal"] in s for s in c["signals"]):
        return False
    if kind == "sensor_lost":
        return bool({"lost"} & c["events"]) or "sensor_dropout" in c["faults"] or " bad" in c["text"]
    if kind == "shelve":
        return "shelve" in c["events"]
    if kind == "state":
        want = {"STARTING": "start", "RUNNING": "start", "STOPPING": "stop", "STOPPED": "stop"}.get(facts["state_to"])
        if facts["state_from"] == "TRIPPED":
            return bool({"reset", "stop"} & c["events"]) or "start" in c["events"]
        return want in c["events"]
    v = _value(facts.get("value"))
    if v is not None and any(_number_ok(n, [v]) for n in c["numbers"]):
        return True
    return facts.get("trend") is not None and facts["trend"] in c["directions"]


# ---------------------------------------------------------------------------------------------- answers


def evidence_windows(truth: dict[str, Any], sources: list[dict[str, Any]]) -> list[int]:
    """The numbers of the sources whose text holds an evidence line (as the prompt shows it: time, no date)."""
    from host.qa import short_line

    ev = [short_line(x) for x in truth.get("evidence", [])]
    return [s["n"] for s in sources if any(e in s["text"].splitlines() for e in ev)]


def answer_verdict(answer: str, truth: dict[str, Any], sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Judge one answer against its question's truth and the windows it was given.

    accurate: for an event, the first machine id named is the truth's and none of the "nothing of the kind"
      phrases is used; the event is named (a trip word for a trip, with its interlock's signal or the fault;
      an acknowledgement or clear word; for onset / which / sensor questions an alarm word, the signal or
      the fault; for a sensor question its signal and a faulty-sensor word); no reading (a number with a unit)
      that the windows do not show; where the question asks when (and always for onset, acknowledgement and
      clear questions: their answer is a time), the first time named is the truth's minute. For a "none"
      truth: a none phrase and no time but the log's start;
    cited: the evidence is in some window and every [n] is one of those windows, at least one [n]
      (not counted for "none" questions: there is no evidence line for an absence)."""
    c = parse(answer)
    why: list[str] = []
    ev = truth["event"]
    if ev == "none":
        if not c["none"]:
            why.append("does not say nothing of the kind happened")
        extra = [t for t in c["times"] if t != truth["since"][11:16]]
        if extra:
            why.append("names a time for an event that did not happen: %s" % ", ".join(extra))
        return {"accurate": not why, "cited": None, "why": why}
    if re.search(r"nothing of the kind|no such", answer.lower()):
        why.append("says nothing of the kind happened")
    if not c["machines"]:
        why.append("names no machine")
    elif c["machines"][0] != truth["machine"]:
        why.append("first machine %s, truth %s" % (c["machines"][0], truth["machine"]))
    sig_ok = truth.get("signal") is not None and any(truth["signal"] in s for s in c["signals"])
    fault_ok = truth.get("fault") is not None and truth["fault"] in c["faults"]
    wrong_fault = sorted(c["faults"] - {truth.get("fault")})
    if wrong_fault:
        why.append("fault the truth does not know: %s" % ", ".join(wrong_fault))
    if ev == "trip":
        if "trip" not in c["events"]:
            why.append("no trip named")
        if not (sig_ok or fault_ok):
            why.append("neither the interlock's signal nor the fault")
    elif ev in ("ack", "clear"):
        if ev not in c["events"]:
            why.append("no %s named" % ev)
    else:  # onset, which, sensor: an alarm, its signal or the fault
        if not ({"alarm"} & c["events"] or sig_ok or fault_ok or c["directions"] & {"high", "low"}):
            why.append("no alarm, signal or fault named")
        if ev == "sensor" and not sig_ok:
            why.append("not the sensor's signal")
        if ev == "sensor" and not (fault_ok or re.search(r"\b(bad|missing|lost|dropping|drifting|stuck|faulty)\b",
                                                          answer.lower())):
            why.append("does not say the sensor is faulty")
    allowed = window_values(ln for src in sources for ln in src["text"].splitlines())
    bad_n = [n for n in c["numbers"] if n[1] is not None and not _number_ok(n, allowed)]
    if bad_n:
        why.append("a reading not in the windows: %s" % ", ".join("%g%s" % n for n in bad_n))
    if truth.get("asks_when") or ev in ("onset", "ack", "clear"):  # these questions are about a time
        if not c["times"]:
            why.append("names no time")
        elif c["times"][0] != truth["time"][11:16]:
            why.append("time %s, truth %s" % (c["times"][0], truth["time"][11:16]))
    holding = evidence_windows(truth, sources)
    cites = c["cites"]
    cited = bool(cites) and all(n in holding for n in cites)
    return {"accurate": not why, "cited": cited, "why": why, "evidence_in": holding}
