"""An operator's words -> the log's words: what `ask` searches the log store for (host/qa.retrieve).

Log lines name things the plant's way (docs/PLANT.md): machines by id, signals by tag, events by verb:

    2026-11-30T08:12:39Z ACK HI CV-401 vibration 9.9mm/s prio=3 ACKED
    2026-11-30T06:34:18Z STATE M-201 RUNNING->TRIPPED interlock=HIHI_TEMP

Operators ask "when was the vibration alarm on conveyor 1 acknowledged?". FTS5 matches words, and none of
"conveyor", "1" or "acknowledged" is in that line, so `expand` adds the log's words for the question's:
"ack", "CV-401" (the n-th machine of a kind is id 100 * kind + n: pump 1 is P-101, conveyor 2 CV-402),
"temp" for temperature and overheating, "tripped interlock" for a trip, and so on (WORDS). The question's
own words stay; these are added, so a store of other logs loses nothing.

The times a question names ("at 08:11", "(06:34)") are `minutes`: FTS5 splits a line's timestamp into
tokens no question holds ("30t08", "11"), so LogStore.windows ranks the lines of those minutes that hold the
question's words first (docs/GATEWAY.md, section 6).

"When was the HI vibration alarm on CV-401 raised at 08:11 acknowledged?" is answered by one line that
may be minutes after the named time and shares few words with the question: `alarm_follow` reads what the
alarm's own record needs (the machine, ACK or CLEAR, the level, the raise minute) so that LogStore.alarm_follow
can find that line by the alarm's lifecycle (docs/PLANT.md) instead of by words.
"""

from __future__ import annotations

import re

# the id prefix and number base of each machine kind (shared/plant.py: P-1xx, M-2xx, C-3xx, CV-4xx)
KINDS = {"pump": ("P", 100), "motor": ("M", 200), "compressor": ("C", 300), "conveyor": ("CV", 400)}
_KIND_N = re.compile(r"\b(pump|motor|compressor|conveyor)s?\s*(?:no\.?\s*|number\s*|#\s*)?([1-9])\b")

_ACK = r"acknowledg\w*|\back(?:s|ed|ked)?\b"
_CLEAR = r"\bclear\w*|(?:back|return\w*) to normal|normal again"
# (what the operator says, the words of the log lines that mean it), on the lowered question
WORDS = [(re.compile(p), w) for p, w in (
    (_ACK, "ack"),
    (_CLEAR, "clear"),
    (r"\btrip\w*|interlock\w*|what stopped", "tripped interlock"),
    (r"\bstopp?\w*|shut ?down", "stopped"),
    (r"\bstart(?:s|ed|ing)? up\b|\bstarted\b", "starting"),
    (r"temperature|overheat\w*|\bhot\b|\bheat\b", "temp"),
    (r"pressure", "press"),
    (r"vibrat\w*|bearing|cavitat\w*", "vibration"),
    (r"clog\w*|blocked|filter|strainer", "dp"),
    (r"\bsensor\b|\bbad (?:values?|readings?|data)\b|drop ?out|\blost\b", "bad"),
    (r"first sign|first show\w*|start(?:s|ed)? (?:showing|to show)|\bonset\b|begin\w*", "hi raised"),
    (r"\bamps?\b|\bcurrent\b|\bload\b", "current"),
    (r"\brpm\b|\bspeed\b", "speed"),
)]

_LEVEL = re.compile(r"\b(high-high|hihi|low-low|lolo|bad-value|bad|high|hi|low|lo)\b")
LEVELS = {"high-high": "HIHI", "hihi": "HIHI", "low-low": "LOLO", "lolo": "LOLO", "bad-value": "BAD", "bad": "BAD",
          "high": "HI", "hi": "HI", "low": "LO", "lo": "LO"}
_ID = re.compile(r"\b(?:CV|P|M|C)-\d{3}\b", re.I)
SPAN = 10  # minutes from a named time: measured on validation questions (docs/GATEWAY.md, section 6)
_TIME = re.compile(r"(?<![\d:])([01]\d|2[0-3]):([0-5]\d)(?![\d])")


def machine_ids(question: str) -> list[str]:
    """The machine ids the question means by kind and number ("pump 1" -> P-101, "conveyor 2" -> CV-402)."""
    out = []
    for kind, n in _KIND_N.findall(question.lower()):
        prefix, base = KINDS[kind]
        mid = "%s-%d" % (prefix, base + int(n))
        if mid not in out:
            out.append(mid)
    return out


def expand(question: str) -> str:
    """The question with the log's words for what it asks added (the search text for LogStore.windows)."""
    low = question.lower()
    extra = machine_ids(question)
    for pat, words in WORDS:
        if pat.search(low):
            extra += [w for w in words.split() if w not in extra]
    return question if not extra else "%s %s" % (question, " ".join(extra))


def named_ids(question: str) -> list[str]:
    """Every machine id the question means: those it writes (P-101) and those it names by kind and number."""
    out = [m.group(0).upper() for m in _ID.finditer(question)]
    return list(dict.fromkeys(out + machine_ids(question)))[:16]


def minutes(question: str, span: int = SPAN) -> list[str]:
    """The minutes the question is about: each "HH:MM" it names and the span - 1 after it (an alarm "raised
    at 08:11" is acknowledged or cleared minutes later), in order, each once, at most 16."""
    out: list[str] = []
    for h, m in _TIME.findall(question):
        t0 = int(h) * 60 + int(m)
        for d in range(span):
            t = (t0 + d) % 1440
            hm = "%02d:%02d" % (t // 60, t % 60)
            if hm not in out:
                out.append(hm)
    return out[:16]


def _log_words(question: str) -> list[str]:
    """The question's words and the log's words for them (expand), lowered, split at every non-alphanumeric
    character, sorted: what a record lookup matches an alarm's tag against ("bearing_temp": bearing, temp)."""
    return sorted(set(re.findall(r"[a-z0-9]+", expand(question).lower())))


def alarm_follow(question: str) -> dict | None:
    """For a question about when one alarm was acknowledged or cleared: {"machine", "verb" ("ACK" or "CLEAR"),
    "level" (HI, HIHI, LO, LOLO, BAD or None), "words" (the question's words in the log's words, lowered: the
    alarm's tag is matched against them), "minute" (the raise time it names, "HH:MM", or None)}. None for any
    other question: one that does not say "alarm", names no machine or more than one, or asks both."""
    low = question.lower()
    ack, clear = re.search(_ACK, low), re.search(_CLEAR, low)
    ids = named_ids(question)
    if bool(ack) == bool(clear) or len(ids) != 1 or not re.search(r"\balarm", low):
        return None
    lv = _LEVEL.search(low)
    t = _TIME.search(question)
    return {"machine": ids[0], "verb": "ACK" if ack else "CLEAR", "level": LEVELS[lv.group(1)] if lv else None,
            "words": _log_words(question),
            "minute": "%s:%s" % t.groups() if t else None}


# The alarm tags a process fault raises first, by the plant's record (docs/PLANT.md): its onset is the machine's
# first HI/LO raise of one of these (a BAD raise is a sensor fault's). Over the 254 onsets of training seeds 0-59
# (tools/train/qa_corpus) every non-BAD first alarm's tag is in its fault's row; tests/host/test_logwords.py
# checks that against the simulator. Bearing wear and cavitation both show first as vibration.
FAULT_TAGS = {"overheating": ("bearing_temp", "winding_temp", "discharge_temp", "gearbox_temp"),
              "bearing_wear": ("vibration",),
              "cavitation": ("vibration",),
              "clogged_filter": ("strainer_dp", "intake_filter_dp", "flow", "air_flow")}
FAULT_WORDS = {"overheating": "overheating", "bearing_wear": "bearing wear", "cavitation": "cavitation",
               "clogged_filter": "a clogged filter"}
FAULT_SIGNS = {"overheating": "temperature", "bearing_wear": "vibration", "cavitation": "vibration",
               "clogged_filter": "filter differential pressure or flow"}
# the operator's words for each, temperature first: "the bearing temperature" is heat, not bearing wear
_FAULT = [(re.compile(p), f) for p, f in (
    (r"overheat\w*|running hot|\bhot\b|\bheat\b|temperature", "overheating"),
    (r"cavitat\w*", "cavitation"),
    (r"\bbearing", "bearing_wear"),
    (r"clog\w*|\bblock\w*|\bfilter|strainer", "clogged_filter"),
)]


def fault(question: str) -> str | None:
    """The process fault the question names (a FAULT_TAGS key), or None."""
    low = question.lower()
    return next((f for pat, f in _FAULT if pat.search(low)), None)


_ONSET = re.compile(r"first sign|first show\w*|\bstart(?:s|ed)? \w+ing\b|\bbegin\w*|\bbegan\b|\bonset\b|"
                    r"\bstart(?:s|ed)? (?:developing|showing|to)\b")
_ASKS_WHEN = re.compile(r"^\s*(?:when|at what time|what time)\b")


def onset(question: str) -> dict | None:
    """For "when did M-201 start running hot?" / "when was the first sign of ... on P-101?": {"machine", "words"
    (as alarm_follow's), "fault" (fault()), "tags" (FAULT_TAGS of it, None when no fault is named)}: the answer
    is the machine's first alarm raised of those tags (LogStore.first_raise), and none at all when it raised
    none. None for any other question: not a when, not one machine, a start-up ("start up", "started"), an
    alarm's handling."""
    low = question.lower()
    ids = named_ids(question)
    if len(ids) != 1 or not _ASKS_WHEN.search(low) or not _ONSET.search(low) or re.search(r"\bstart\w* up\b", low):
        return None
    if alarm_follow(question) is not None:
        return None
    f = fault(question)
    return {"machine": ids[0], "words": _log_words(question), "fault": f, "tags": FAULT_TAGS[f] if f else None}


_TRIP = re.compile(r"\btrip(?:s|ped|ping)?\b|\binterlock\w*|what stopped")


def trip(question: str) -> str | None:
    """The one machine a question about its trip names ("why did P-101 trip?", "which interlock stopped the
    conveyor CV-401?"), or None: no trip words, no machine or more than one, or an alarm's handling."""
    ids = named_ids(question)
    if len(ids) != 1 or not _TRIP.search(question.lower()) or alarm_follow(question) is not None:
        return None
    return ids[0]


# "the motor", not "the motors", "the motor 2" or "the motor M-201"
_THE_KIND = re.compile(r"\bthe (pump|motor|compressor|conveyor)\b"
                       r"(?!s|\s*(?:no\.?\s*|number\s*|#\s*)?[1-9]|\s+(?:CV|P|M|C)-)", re.I)


def unnamed_kinds(question: str) -> list[str]:
    """The kinds the question says as "the motor" without a number or an id, and of which it names no machine:
    the id prefixes ("M") whose one machine, if the log knows only one, is meant (with_sole_ids)."""
    named = {i.split("-")[0] for i in named_ids(question)}
    out = []
    for kind in _THE_KIND.findall(question):
        prefix = KINDS[kind.lower()][0]
        if prefix not in named and prefix not in out:
            out.append(prefix)
    return out


def with_sole_ids(question: str, sole: dict) -> str:
    """The question with the one machine of each kind written after "the <kind>" (sole: prefix -> id)."""
    def put(m: re.Match) -> str:
        mid = sole.get(KINDS[m.group(1).lower()][0])
        return m.group(0) + (" " + mid if mid else "")

    return _THE_KIND.sub(put, question)
