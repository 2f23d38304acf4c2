"""Judge a note about any plant: its episode's log lines and the plant description are the only truth it needs.

    v = note_judge.note_verdict(note, lines, desc)     # desc: a host.plantdesc.PlantDesc or its dict
    v["factual"], v["covered"], v["hallucinated"], v["invented_cause"], v["vacuous"], v["why"]

tools/train/plant_judge.py judges the built-in simulator's notes by its id pattern and tag tables; this judge knows
no plant. Machines (ids, words, aliases, kind and number), signals (tags, keys, words), units, limits and cause
hints come from the description (host/logwords.Vocabulary reads its words), events, levels and values from the
episode's lines (host/plantlines.parse). A note is read in this order, each piece taken out of the text before the
next is looked for: times (hh:mm); causes (the description's cause hints of any point, failure words such as
"wear", "leak", "fouling", and what follows "likely", "due to", "because" ...); tags, keys and interlock names as
the log writes them; machines and signals by the Vocabulary; signals by the last word of their words
("temperature" for "bearing temperature"); quantity nouns no signal of the plant has; numbers (with the plant's
units); directions and event words. docs/QUALITY.md says how each verdict is decided:

- factual: names a machine (a LOST line's note: a number), and every machine, signal, number, event and time it
  names is in the lines (a limit of an alarm point of the lines counts as in them), every direction one the lines
  allow (a HI alarm raised: high, rising; cleared: high, falling ...; `recent` sample lines add their trend), and
  it invents no cause;
- covered: names the machine of the episode's main line (of the highest rank: trip, sensor BAD, alarm raised,
  LOST, state change, clear or acknowledgement, shelving) and what it is about: an alarm's signal with its value
  or a direction, an acknowledgement's or clear's signal with its word or value, a BAD signal with a word for a
  lost reading, a trip word with the interlock's signal, name or value, a state change's new state, LOST's count;
- hallucinated: a machine, signal, number, event or time that is not in the lines;
- invented_cause: a cause that is neither a cause hint (`causes`) of an alarm point of the lines (its level or the
  other level of its direction; a trip: its interlock's point) nor the lines' own words ("tripped on high
  vibration" beside an interlock=HIHI_VIB line).
Plain string code, no model, no I/O (tests/host/test_note_judge.py).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Iterable

from host import logwords, plantdesc, plantlines

RANK = {"trip": 6, "bad": 5, "alarm": 4, "lost": 3, "state": 2, "clear": 1, "ack": 1, "shelve": 0}
_UP, _DOWN = ("HI", "HIHI"), ("LO", "LOLO")

_TIME = re.compile(r"(?<![\d:.])([01]?\d|2[0-3]):([0-5]\d)(?::[0-5]\d)?(?![\d:])")
# How people name a cause on any plant; a description's own hints are matched first (longer, more exact).
_FAILURE = re.compile(
    r"(?<![a-z])(?:wear(?:s|ing)?|worn|leak\w*|foul\w*|clog\w*|block(?:ed|age)|jam(?:s|med|ming)?|cavitat\w*|"
    r"overload\w*|overheat\w*|fail(?:s|ed|ing|ure|ures)?|fault(?:s|y)?|stuck|stiction|sticking|imbalance|"
    r"unbalanc\w*|misalign\w*|loose\w*|slip(?:s|ping|page)?|scal(?:ing|ed)|soot\w*|contaminat\w*|corro\w*|erosion|"
    r"crack\w*|broken|damage\w*|dirty|starv\w*|dry.running|seiz\w*|runaway|exotherm\w*|restrict\w*|obstruct\w*|"
    r"drift\w*)"
    r"(?![a-z])")
_MARKER = re.compile(r"(?<![a-z])(?:likely|probabl[ey]|possibl[ey]|suspect(?:ed)?|due to|caused by|because(?: of)?|"
                     r"(?:as a )?result of|indicat(?:es|ing|ive of)|signs? of|points? to|suggest(?:s|ing)?)"
                     r"(?![a-z])([^.,;:!?\n]*)")
_FILLER = frozenset(logwords.stems("the a an of on in at to and or its it is be may a possible some"))
# Quantities any plant may measure: named in a note while no signal of the plant has such a word, a signal the
# plant does not have.
_QUANTITY = re.compile(r"(?<![a-z])(?:temperature|temp|pressure|dp|vibration|current|amps|flow|level|speed|rpm|"
                       r"oxygen|humidity|voltage)s?(?![a-z])")
DIRECTIONS = {"high": r"high|higher|above(?= (?:the |its )?(?:limit|hi|setpoint|normal|alarm|\d))|"
                      r"exceed(?:s|ed|ing)?|hihi|hi",
              "low": r"low|lower|below|lolo|lo",
              "rising": r"ris(?:e|es|ing)|rose|increas(?:e|es|ed|ing)|climb(?:s|ed|ing)?|going up|trending up",
              "falling": r"fall(?:s|ing)?|fell|drop(?:s|ped|ping)?|decreas(?:e|es|ed|ing)|going down|trending down",
              "steady": r"steady|stable|flat|unchanged"}
_DIR = {d: re.compile(r"(?<![a-z-])(?:%s)(?![a-z-])" % p) for d, p in DIRECTIONS.items()}
EVENTS = {"trip": r"trip(?:s|ped|ping)?|interlock\w*",
          "ack": r"acknowledg\w*|ack(?:s|ed|ked)?",
          "clear": r"clear(?:s|ed|ing)?|back to normal|return(?:s|ed)? to normal|normal again|rtn\w*",
          "shelve": r"(?:un)?shelve[sd]?|(?:un)?shelving",
          "start": r"start(?:s|ed|ing)?(?: up)?|restart\w*|up to speed",
          "stop": r"stop(?:s|ped|ping)?|shut ?down|shutdown",
          "lost": r"lost|missing|drop ?out|bad (?:value|reading|data)s?|no (?:data|reading)s?",
          "alarm": r"alarm(?:s|ed|ing)?|raised"}
_EVENT = {e: re.compile(r"(?<![a-z])(?:%s)(?![a-z])" % p) for e, p in EVENTS.items()}
# "current" the adjective, not the signal ("the current state")
_NOT_SIGNAL = re.compile(r"(?<![a-z])current(?= (?:state|status|version|time|date|situation|mode|setting|system)\b)")
_RUN = re.compile(r"(?<![a-z])run(?:s|ning)?(?![a-z])")  # a start's new state, said as "running"
_RESET = re.compile(r"(?<![a-z])reset\w*(?![a-z])")
_BAD_WORDS = ("sensor", "fault", "failure", "fail", "failed", "bad", "lost", "missing")  # what a BAD line means
_NUMBER = r"(?<![\w.])(-?\d+(?:\.\d+)?)"
# Unit spellings any plant may use (docs/TRAINING_PLANTS.md's units, and common others): a number written with one
# the plant's line does not use is not the line's number ("7.1in/s" for "7.1mm/s"). The plant's own are added.
UNITS = ("C", "F", "degC", "degF", "K", "bar", "mbar", "psi", "psig", "kPa", "MPa", "Pa", "inH2O", "inWC", "mm/s",
         "in/s", "A", "mA", "V", "kW", "Hz", "rpm", "m3/h", "gpm", "cfm", "l/s", "t/h", "klb/h", "%", "m", "mm", "ft",
         "m/s", "fpm", "ft/min")  # not "in": "7.1 in the log"


# ---------------------------------------------------------------------------------------------- the plant's words


class PlantWords:
    """What a description lets a note name: its Vocabulary, its tags, keys and interlock names, the head nouns of
    its signals' words, its units, its points (limits, cause hints). One per description (words_of)."""

    def __init__(self, desc: plantdesc.PlantDesc):
        self.desc = desc
        self.vocab = logwords.Vocabulary.of([desc])
        self.points: dict[tuple[str, str, str], plantdesc.AlarmPoint] = {}
        self.interlock_points: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        self.key_tag: dict[tuple[str, str], str] = {}
        self.unit: dict[tuple[str, str], str] = {}
        self.decimals: dict[tuple[str, str], int] = {}
        hints: set[str] = set()
        for m in desc.machines:
            for s in m.signals:
                self.key_tag[(m.id, s.key)] = s.tag
                self.unit[(m.id, s.tag)] = s.unit
                self.decimals[(m.id, s.tag)] = s.decimals
                for a in s.alarms:
                    self.points[(m.id, s.tag, a.level)] = a
                    hints.update(a.causes)
                    if a.interlock:
                        self.interlock_points.setdefault((m.id, a.interlock), []).append((m.id, s.tag, a.level))
        # cause hints as stem phrases, longest first (matched before anything else reads their words)
        by_stems = {logwords.stems(h): h for h in hints if logwords.stems(h)}
        self.hints = sorted(by_stems.items(), key=lambda x: -len(x[0]))
        hint_stems = {h for h, _ in self.hints}
        # tags, keys (two letters or more: "T" or "I" are words) and interlock names as the log writes them
        names: dict[str, set[tuple[str, str]]] = {}
        exact: dict[str, set[tuple[str, str]]] = {}
        for m in desc.machines:
            for s in m.signals:
                names.setdefault(s.tag.lower(), set()).add((m.id, s.tag))
                if len(s.key) > 1:
                    exact.setdefault(s.key, set()).add((m.id, s.tag))
        for (mid, lock), pts in self.interlock_points.items():
            names.setdefault(lock.lower(), set()).update((p[0], p[1]) for p in pts)
        self.names, self.exact = names, exact
        alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        self.names_re = re.compile(r"(?<![A-Za-z0-9_])(%s)(?![A-Za-z0-9_])" % alts, re.I) if names else None
        alts = "|".join(re.escape(n) for n in sorted(exact, key=len, reverse=True))
        self.exact_re = re.compile(r"(?<![A-Za-z0-9_])(%s)(?![A-Za-z0-9_])" % alts) if exact else None
        # a signal by the last word of its words ("temperature", "pressure"), not of a cause hint in its words
        heads: dict[str, set[tuple[str, str]]] = {}
        for m in desc.machines:
            for s in m.signals:
                for w in s.words + (s.tag.replace("_", " "),):
                    st = logwords.stems(w)
                    if len(st) > 1 and st not in hint_stems and len(st[-1]) > 1:
                        heads.setdefault(st[-1], set()).add((m.id, s.tag))
        self.heads = heads
        units = sorted({s.unit for m in desc.machines for s in m.signals} | set(UNITS), key=len, reverse=True)
        self.number_re = re.compile(_NUMBER + r"\s?(%s)?(?![\w/%%])" % "|".join(re.escape(u) for u in units))

    def point_hints(self, point: tuple[str, str, str]) -> list[str]:
        """The cause hints of a point and of the other point of its direction (HI with HIHI, LO with LOLO)."""
        mid, tag, level = point
        out: list[str] = []
        for lv in (_UP if level in _UP else _DOWN if level in _DOWN else (level,)):
            a = self.points.get((mid, tag, lv))
            out += list(a.causes) if a else []
        return out


@functools.lru_cache(maxsize=32)
def _words_of_text(text: str) -> PlantWords:
    return PlantWords(plantdesc.from_dict(json.loads(text)))


def words_of(desc: plantdesc.PlantDesc | dict) -> PlantWords:
    """The PlantWords of a description (made once per description text)."""
    if isinstance(desc, dict):
        return _words_of_text(json.dumps(desc, sort_keys=True))
    return _words_of_text(desc.text) if desc.text else PlantWords(desc)


# ---------------------------------------------------------------------------------------------- the lines


def window(lines: Iterable[str], pw: PlantWords, recent: Iterable[str] = ()) -> dict[str, Any]:
    """What the episode's lines show: machines, (machine, tag) signals, values (with units, limits of their points
    included), directions, events, alarm points, the words of the lines, and the main lines (their rank's best)."""
    parsed = [x for x in (plantlines.parse(ln) for ln in lines) if x is not None]
    w: dict[str, Any] = {"machines": set(), "signals": set(), "values": [], "directions": set(), "events": set(),
                         "points": [], "words": set(), "main": []}
    ranked = []
    for ln in parsed:
        body = ln.text[21:]
        w["words"].update(logwords.stems(body.replace("_", " ").replace("=", " ").replace("->", " ")))
        if ln.machine:
            w["machines"].add(ln.machine)
        if ln.kind == "sample":
            for key, (v, unit) in ln.values.items():
                tag = pw.key_tag.get((ln.machine, key))
                if tag:
                    w["signals"].add((ln.machine, tag))
                if v is not None:
                    w["values"].append((v, unit))
            continue
        if ln.kind == "lost":
            w["values"].append((float(ln.events), None))
            w["events"].add("lost")
            ranked.append(("lost", ln, None))
            continue
        if ln.kind == "alarm":
            sig = (ln.machine, ln.tag)
            w["signals"].add(sig)
            if ln.value is not None:
                w["values"].append((ln.value, ln.unit))
            w["values"].append((float(ln.prio), None))
            w["events"].add("alarm")
            kind = {"ALARM": "alarm", "ACK": "ack", "CLEAR": "clear"}.get(ln.verb, "shelve")
            if ln.level == "BAD":
                w["events"].add("lost")
                w["words"].update(logwords.stems(" ".join(_BAD_WORDS)))
                kind = "bad" if kind == "alarm" else kind
            else:
                w["points"].append((ln.machine, ln.tag, ln.level))
                _directions(w["directions"], ln.level, ln.verb == "CLEAR")
            if kind in ("ack", "clear", "shelve"):
                w["events"].add(kind)
            if ln.astate in ("NORMAL", "RTN_UNACK"):
                w["events"].add("clear")
            ranked.append((kind, ln, sig))
            continue
        if ln.kind == "state":
            to, frm = ln.to_state, ln.from_state
            if to == "TRIPPED" or frm == "TRIPPED":
                w["events"].add("trip")
            if to in ("STOPPED", "STOPPING", "TRIPPED"):
                w["events"].add("stop")
            if to in ("STARTING", "RUNNING"):
                w["events"].add("start")
            sig = None
            if to == "TRIPPED" and ln.interlock:
                w["events"].add("alarm")
                for pt in pw.interlock_points.get((ln.machine, ln.interlock), []):
                    w["signals"].add((pt[0], pt[1]))
                    w["points"].append(pt)
                    _directions(w["directions"], pt[2], False)
                    sig = (pt[0], pt[1])
            ranked.append(("trip" if to == "TRIPPED" else "state", ln, sig))
    for mid, tag, level in list(w["points"]):  # a note may set a value against its limits
        for lv in _UP + _DOWN:
            a = pw.points.get((mid, tag, lv))
            if a is not None:
                w["values"].append((a.limit, pw.unit.get((mid, tag))))
    w["directions"] |= _trends(recent, w["signals"], pw)
    if ranked:
        top = max(RANK[k] for k, _, _ in ranked)
        w["main"] = [(k, ln, sig) for k, ln, sig in ranked if RANK[k] == top]
    w["hints"] = [h for pt in w["points"] for h in pw.point_hints(pt)]
    return w


def _directions(out: set, level: str, cleared: bool) -> None:
    if level in _UP:
        out.update(("high", "falling" if cleared else "rising"))
    elif level in _DOWN:
        out.update(("low", "rising" if cleared else "falling"))


def _trends(recent: Iterable[str], signals: set, pw: PlantWords) -> set[str]:
    """rising / falling / steady of the episode's signals over the recent sample lines given (oldest first): a move
    of 2 % of the value, or 3 steps of the signal's decimals, counts."""
    series: dict[tuple[str, str], list[float]] = {}
    for text in recent:
        ln = plantlines.parse(text)
        if ln is None or ln.kind != "sample":
            continue
        for key, (v, _unit) in ln.values.items():
            sig = (ln.machine, pw.key_tag.get((ln.machine, key)))
            if v is not None and sig in signals:
                series.setdefault(sig, []).append(v)
    out = set()
    for sig, xs in series.items():
        if len(xs) < 2:
            continue
        d = xs[-1] - xs[0]
        if abs(d) >= max(0.02 * abs(xs[-1]), 3 * 10 ** -pw.decimals.get(sig, 1)):
            out.add("rising" if d > 0 else "falling")
        else:
            out.add("steady")
    return out


# ---------------------------------------------------------------------------------------------- the note


def _blank(text: str, a: int, b: int) -> str:
    return text[:a] + " " * (b - a) + text[b:]


def _phrase_spans(low: str, phrase: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where a stem phrase occurs in the (lowered) text, by its tokens."""
    toks = [(t.start(), t.end(), logwords.stems(t.group(0))[0]) for t in re.finditer(r"[a-z0-9]+", low)]
    out = []
    n = len(phrase)
    for i in range(len(toks) - n + 1):
        if tuple(t[2] for t in toks[i:i + n]) == phrase:
            out.append((toks[i][0], toks[i + n - 1][1]))
    return out


def read(note: str, pw: PlantWords) -> dict[str, Any]:
    """What a note states, in the plant's words: times, causes (with how each was found), signals (each a set of
    (machine, tag) it may mean), machines (ids, unknown id-like words, by words), numbers, directions, events."""
    text = note.replace("\n", " ")
    c: dict[str, Any] = {"times": [], "causes": [], "signals": [], "unknown_signals": [], "machines": [],
                         "numbers": [], "directions": set(), "events": set(), "run": False, "reset": False}
    for m in _TIME.finditer(text):
        c["times"].append("%02d:%s" % (int(m.group(1)), m.group(2)))
        text = _blank(text, *m.span())
    low = text.lower()
    for phrase, hint in pw.hints:  # the description's cause hints, longest first
        for a, b in _phrase_spans(low, phrase):
            c["causes"].append({"said": note[a:b], "hint": hint, "how": "hint"})
            low, text = _blank(low, a, b), _blank(text, a, b)
    for m in _FAILURE.finditer(low):
        c["causes"].append({"said": m.group(0), "how": "word"})
        low, text = _blank(low, *m.span()), _blank(text, *m.span())
    for m in _MARKER.finditer(low):
        rest = [s for s in logwords.stems(m.group(1))[:6] if s not in _FILLER]
        if rest:
            c["causes"].append({"said": m.group(0).strip(), "how": "marker", "stems": rest})
        # only the cue word goes: what follows it is read on (its signal, direction, event)
        low, text = _blank(low, m.start(), m.start(1)), _blank(text, m.start(), m.start(1))
    for rx, table in ((pw.exact_re, pw.exact), (pw.names_re, pw.names)):
        if rx is None:
            continue
        for m in rx.finditer(text):
            got = table.get(m.group(1)) or table.get(m.group(1).lower())
            if got:
                c["signals"].append(set(got))
                low, text = _blank(low, *m.span()), _blank(text, *m.span())
    r = pw.vocab.read(text)
    c["machines"] = list(dict.fromkeys(r.written + r.by_name))
    c["signals"] += [{(mid, s.tag) for mid, s in sigs} for sigs in r.signals]
    for a, b in r.spans:
        low, text = _blank(low, a, b), _blank(text, a, b)
    for m in _NOT_SIGNAL.finditer(low):
        low, text = _blank(low, *m.span()), _blank(text, *m.span())
    for tok in re.finditer(r"[a-z0-9]+", low):
        st = logwords.stems(tok.group(0))[0]
        if st in pw.heads:
            c["signals"].append(set(pw.heads[st]))
            low, text = _blank(low, *tok.span()), _blank(text, *tok.span())
    for m in _QUANTITY.finditer(low):
        c["unknown_signals"].append(m.group(0))
        low, text = _blank(low, *m.span()), _blank(text, *m.span())
    for m in pw.number_re.finditer(text):
        c["numbers"].append((float(m.group(1)), m.group(2) or None, m.group(1)))
        low, text = _blank(low, *m.span()), _blank(text, *m.span())
    c["directions"] = {d for d, rx in _DIR.items() if rx.search(low)}
    c["events"] = {e for e, rx in _EVENT.items() if rx.search(low)}
    c["run"] = bool(_RUN.search(low))
    c["reset"] = bool(_RESET.search(low))
    return c


def _number_in(num: tuple[float, str | None, str], values: list[tuple[float, str | None]]) -> bool:
    """The note's number is one the lines show: equal at the decimals the note wrote it with, the same unit
    where the note gives one."""
    v, unit, said = num
    dec = len(said.split(".", 1)[1]) if "." in said else 0
    tol = 0.5 * 10 ** -dec + 1e-9
    return any(abs(v - a) <= tol and (unit is None or _unit(u) == _unit(unit)) for a, u in values)


def _unit(u: str | None) -> str:
    """A unit compared as spelt, but for case and a "deg" before C or F ("degC" is "C")."""
    u = (u or "").lower()
    return u[3:] if u in ("degc", "degf") else u


def _cause_ok(cause: dict[str, Any], w: dict[str, Any], pw: PlantWords) -> bool:
    hints = w["hints"]
    hint_stems = {s for h in hints for s in logwords.stems(h)}
    if cause["how"] == "hint":
        st = logwords.stems(cause["hint"])
        return any(logwords.stems(h) == st for h in hints) or set(st) <= w["words"]
    if cause["how"] == "word":
        st = set(logwords.stems(cause["said"]))
        return st <= hint_stems or st <= w["words"]
    # a cause after "likely", "due to" ...: every word of it a hint's, the lines', or a word of their signals
    sig_words = {s for mid, tag in w["signals"] for s in _signal_stems(pw, mid, tag)}
    ok = hint_stems | w["words"] | sig_words | set(logwords.stems(" ".join(DIRECTIONS) + " alarm interlock trip"))
    return set(cause["stems"]) <= ok


def _signal_stems(pw: PlantWords, mid: str, tag: str) -> set[str]:
    m = pw.desc.machine(mid)
    s = m.signal(tag) if m else None
    if s is None:
        return set()
    return {x for p in s.words + (s.tag.replace("_", " "), s.key) for x in logwords.stems(p)}


def note_verdict(note: str, lines: list[str], desc: plantdesc.PlantDesc | dict, recent: Iterable[str] = ()
                 ) -> dict[str, Any]:
    """Judge one note of an episode (its lines, with timestamps) of the plant `desc`; `recent`: sample lines of the
    minutes before it (their trends are directions the note may state). See the module docstring."""
    pw = words_of(desc)
    w = window(lines, pw, recent)
    c = read(note, pw)
    why: list[str] = []
    bad_m = [m for m in c["machines"] if m not in w["machines"]]
    if bad_m:
        why.append("machine not in the lines: %s" % ", ".join(bad_m))
    bad_s = [sorted(s)[0][1] for s in c["signals"] if not s & w["signals"]]
    if bad_s:
        why.append("signal not in the lines: %s" % ", ".join(bad_s))
    if c["unknown_signals"]:
        why.append("signal the plant does not have: %s" % ", ".join(c["unknown_signals"]))
    bad_n = [n for n in c["numbers"] if not _number_in(n, w["values"])]
    if bad_n:
        why.append("number not in the lines: %s" % ", ".join(n[2] + (n[1] or "") for n in bad_n))
    bad_e = sorted(c["events"] - w["events"])
    if bad_e:
        why.append("event not in the lines: %s" % ", ".join(bad_e))
    line_minutes = {ln[11:16] for ln in lines}
    bad_t = [t for t in c["times"] if t not in line_minutes]
    if bad_t:
        why.append("time not in the lines: %s" % ", ".join(bad_t))
    hallucinated = bool(why)
    bad_d = sorted(c["directions"] - w["directions"])
    if bad_d:
        why.append("direction the lines do not show: %s" % ", ".join(bad_d))
    invented = [x["said"] for x in c["causes"] if not _cause_ok(x, w, pw)]
    if invented:
        why.append("cause neither a hint of the point nor in the lines: %s" % ", ".join(invented))
    lost_only = bool(w["main"]) and w["main"][0][0] == "lost"
    vacuous = not (c["numbers"] if lost_only else c["machines"])
    if vacuous:
        why.append("names nothing checkable")
    covered = any(_covers(k, ln, sig, c, w) for k, ln, sig in w["main"])
    return {"factual": not why, "covered": covered, "hallucinated": hallucinated, "invented_cause": bool(invented),
            "vacuous": vacuous, "why": why, "main": w["main"][0][0] if w["main"] else None,
            "causes": [x["said"] for x in c["causes"]]}


def _covers(kind: str, ln: plantlines.Line, sig: tuple[str, str] | None, c: dict[str, Any], w: dict[str, Any]
            ) -> bool:
    if kind == "lost":
        return any(abs(n[0] - ln.events) < 1e-9 for n in c["numbers"])
    if ln.machine not in c["machines"]:
        return False
    named_sig = sig is not None and any(sig in s for s in c["signals"])
    said_value = ln.value is not None and any(_number_in(n, [(ln.value, ln.unit)]) for n in c["numbers"])
    if kind == "trip":  # the interlock's name reads as its signal
        return "trip" in c["events"] and named_sig
    if kind == "state":
        to, frm = ln.to_state, ln.from_state
        if frm == "TRIPPED":
            return c["reset"] or bool({"stop", "start"} & c["events"])
        if to in ("STARTING", "RUNNING"):
            return "start" in c["events"] or c["run"]
        return "stop" in c["events"]
    if not named_sig:
        return False
    if kind == "bad":
        return "lost" in c["events"] or any(x in " ".join(y["said"] for y in c["causes"]) for x in ("fail", "fault"))
    if kind == "ack":
        return "ack" in c["events"]
    if kind == "clear":
        return "clear" in c["events"] or said_value
    if kind == "shelve":
        return "shelve" in c["events"]
    return said_value or bool(c["directions"] & w["directions"])
