"""plantlines.py: the log grammar (docs/PLANT.md, "Log grammar"), the host's one reader of it.

Every plant logs the same grammar; only the words differ (ids, keys, tags, units, interlock names), and
those come from the plant's description (host/plantdesc.py). So reading a line has two steps: `parse`
takes it apart by the grammar alone, `check` holds the parts against a description.

    line = plantlines.parse("2026-11-30T06:44:58Z ALARM HI AHU-1 supply_temp 18.4C prio=2 RAISED by=alice")
    line.kind, line.machine, line.tag, line.value, line.unit, line.extras   # "alarm", "AHU-1", ..., {"by": "alice"}
    plantlines.check(line, desc)                                           # None, or what the plant lacks

`import`, the dashboard and MQTT read lines here, the store's writers (host/store.py) level them here. The
node's own NODE lines (its reports and notices) are not plant lines: `parse` gives None, `report_pairs`
reads a report.
"""

from __future__ import annotations

import datetime
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared import plant, plant_alarms

if TYPE_CHECKING:
    from host.plantdesc import Machine, PlantDesc, Signal

ALARM_VERBS = tuple(v.decode() for v in plant_alarms.VERBS)  # ALARM, ACK, CLEAR, SHELVE, UNSHELVE
ALARM_LEVELS = tuple(v.decode() for v in plant_alarms.LEVELS)  # HI, HIHI, LO, LOLO, BAD
ALARM_STATES = tuple(v.decode() for v in plant_alarms.STATES)  # NORMAL, RAISED, ACKED, RTN_UNACK, SHELVED
PLC_STATES = frozenset(s.decode() for s in plant.STATES)  # STOPPED, STARTING, RUNNING, STOPPING, TRIPPED
LINE_WORDS = ALARM_VERBS + ("STATE", "LOST", "PLANT", "NODE")  # never a machine id
LINE_MAX = 128  # bytes, no line is longer
REPORT = "NODE heap="  # how the node's periodic report starts (firmware/node.py); other NODE lines are notices
_TS = 21  # "2026-11-30T06:50:28Z "

# The grammar's pieces, as docs/PLANT.md writes them.
_ID = (r"(?![A-Za-z0-9_-]{17})(?!(?:%s)(?![A-Za-z0-9_-]))[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*"
       % "|".join(LINE_WORDS))
_KEY = r"[A-Za-z][A-Za-z0-9_]{0,7}"
_TAG = r"[a-z][a-z0-9_]{0,31}"
_UNIT = r"[A-Za-z%/][A-Za-z0-9/%.^_]{0,7}"
_NUMBER = r"-?\d+(?:\.\d{1,3})?"
_NAME = r"[A-Za-z0-9_.-]{1,32}"
_WORD = r"[A-Za-z0-9_]{1,24}"
_PLC = "|".join(sorted(PLC_STATES))

ID_RE = re.compile(_ID)  # a machine id: ID_RE.fullmatch("AHU-1")
TAG_RE = re.compile(_TAG)  # an alarm tag: TAG_RE.fullmatch("supply_temp")
TIMESTAMP_RE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z ")
SAMPLE_RE = re.compile(r"(%s) (%s)((?: %s=(?:\?|%s%s))+)\Z" % (_ID, _PLC, _KEY, _NUMBER, _UNIT))
PAIR_RE = re.compile(r" (%s)=(?:\?|(%s)(%s))" % (_KEY, _NUMBER, _UNIT))
ALARM_RE = re.compile(r"(%s) (%s) (%s) (%s) (?:\?|(%s)(%s)) prio=([1-4]) (%s)((?: (?:by=%s|why=%s))*)\Z"
                      % ("|".join(ALARM_VERBS), "|".join(ALARM_LEVELS), _ID, _TAG, _NUMBER, _UNIT,
                         "|".join(ALARM_STATES), _NAME, _WORD))
STATE_RE = re.compile(r"STATE (%s) (%s)->(%s) (%s=%s)\Z" % (_ID, _PLC, _PLC, _WORD, _WORD))
LOST_RE = re.compile(r"LOST events=(\d+)\Z")
PLANT_RE = re.compile(r"PLANT name=(%s) hash=([0-9A-Fa-f]{16}) machines=(\d+) signals=(\d+)\Z" % _NAME)


@dataclass(frozen=True, slots=True)
class Line:
    """One plant line taken apart. `time`: its timestamp, seconds since 1970 (UTC). Fields that its kind
    does not have are None (values and extras empty)."""

    time: int
    kind: str  # "sample" | "alarm" | "state" | "lost" | "plant"
    text: str
    machine: str | None = None  # sample, alarm, state
    plc: str | None = None  # sample: the machine's state
    values: dict = field(default_factory=dict)  # sample: {key: (number, unit)}, (None, "") for "?"
    verb: str | None = None  # alarm: ALARM, ACK, CLEAR, SHELVE, UNSHELVE
    level: str | None = None  # alarm: HI, HIHI, LO, LOLO, BAD
    tag: str | None = None  # alarm
    value: float | None = None  # alarm: None for "?"
    unit: str | None = None  # alarm: None for "?"
    prio: int | None = None  # alarm: 1..4
    astate: str | None = None  # alarm: the point's state after the line
    extras: dict = field(default_factory=dict)  # alarm: {"by": who, "why": word}, those given
    from_state: str | None = None  # state
    to_state: str | None = None  # state
    cause: str | None = None  # state: "interlock=HIHI_PRESS", "run=off", ...
    events: int | None = None  # lost
    name: str | None = None  # plant: the description's name
    hash: str | None = None  # plant: the description's hash
    machines: int | None = None  # plant
    signals: int | None = None  # plant

    @property
    def wall_ms(self) -> int:
        return self.time * 1000

    @property
    def is_event(self) -> bool:
        """An alarm, state or LOST line (shared/episode.is_event: what starts an annotation episode)."""
        return self.kind in ("alarm", "state", "lost")

    @property
    def is_trip(self) -> bool:
        return self.kind == "state" and self.to_state == "TRIPPED"

    @property
    def interlock(self) -> str | None:
        """The interlock a state change names ("interlock=NAME"), else None."""
        if self.cause is not None and self.cause.startswith("interlock="):
            return self.cause[10:]
        return None


@functools.lru_cache(maxsize=4096)
def _seconds(stamp: str) -> int | None:
    m = TIMESTAMP_RE.match(stamp)
    if m is None:
        return None
    try:
        d = datetime.datetime(*(int(x) for x in m.groups()), tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    return int(d.timestamp())


def line_time(text: str) -> int | None:
    """The line's timestamp in seconds since 1970 (UTC); None when it has none or it is no date (Feb 30)."""
    return _seconds(text[:_TS])


def _number(s: str | None) -> float | None:
    return float(s) if s else None  # None (re.match) or "" (re.findall): "?"


def parse(text: str) -> Line | None:
    """The line taken apart by the grammar (any plant's words), or None for anything else: a NODE line,
    another grammar, a bad timestamp or date, a line longer than LINE_MAX. A trailing newline is allowed."""
    text = text.rstrip("\r\n")
    if len(text) > LINE_MAX or len(text) <= _TS:
        return None
    t = _seconds(text[:_TS])
    if t is None:
        return None
    body = text[_TS:]
    head = body[:body.find(" ")]
    if head in ALARM_VERBS:
        m = ALARM_RE.match(body)
        if m is None:
            return None
        extras = {}
        for kv in m.group(9).split():
            k, _, v = kv.partition("=")
            extras[k] = v
        return Line(t, "alarm", text, machine=m.group(3), verb=m.group(1), level=m.group(2), tag=m.group(4),
                    value=_number(m.group(5)), unit=m.group(6), prio=int(m.group(7)), astate=m.group(8), extras=extras)
    if head == "STATE":
        m = STATE_RE.match(body)
        if m is None:
            return None
        return Line(t, "state", text, machine=m.group(1), from_state=m.group(2), to_state=m.group(3), cause=m.group(4))
    if head == "LOST":
        m = LOST_RE.match(body)
        return None if m is None else Line(t, "lost", text, events=int(m.group(1)))
    if head == "PLANT":
        m = PLANT_RE.match(body)
        if m is None:
            return None
        return Line(t, "plant", text, name=m.group(1), hash=m.group(2), machines=int(m.group(3)),
                    signals=int(m.group(4)))
    m = SAMPLE_RE.match(body)
    if m is None:
        return None
    values = {k: (_number(v), u or "") for k, v, u in PAIR_RE.findall(m.group(3))}
    return Line(t, "sample", text, machine=m.group(1), plc=m.group(2), values=values)


def line_level(line: Line) -> int:
    """The line's level as the node gives it (docs/PLANT.md, levels): 2 an alarm raised or acknowledged and
    LOST, 3 a trip, 1 the rest (samples, clears, shelving, other state changes, PLANT)."""
    if line.kind == "alarm":
        return 2 if line.verb in ("ALARM", "ACK") else 1
    if line.kind == "lost":
        return 2
    return 3 if line.is_trip else 1


def _signal_unit(m: "Machine", s: "Signal | None", what: str, unit: str | None) -> str | None:
    if s is None:
        return "machine %s has no %s" % (m.id, what)
    if unit and unit != s.unit:
        return "machine %s: %s is in %s, not %s" % (m.id, what, s.unit, unit)
    return None


def check(line: Line, desc: "PlantDesc") -> str | None:
    """What is wrong with a parsed line for the plant `desc` describes: a machine, key, tag, unit, alarm
    point or interlock it lacks, a PLANT line of another description. None when it fits."""
    if line.kind == "lost":
        return None
    if line.kind == "plant":
        if desc.hash and line.hash != desc.hash:
            return "PLANT hash=%s is not the description's (%s, hash %s)" % (line.hash, desc.name, desc.hash)
        return None
    m = desc.machine(line.machine or "")
    if m is None:
        return "no machine %s in plant %s" % (line.machine, desc.name)
    if line.kind == "sample":
        for key, (_v, unit) in line.values.items():
            s = next((s for s in m.signals if s.key == key), None)
            err = _signal_unit(m, s, "key %s" % key, unit)
            if err:
                return err
        return None
    if line.kind == "alarm":
        s = next((s for s in m.signals if s.tag == line.tag), None)
        err = _signal_unit(m, s, "tag %s" % line.tag, line.unit)
        if err:
            return err
        assert s is not None
        if line.level == "BAD" and s.bad is None or line.level != "BAD" and s.alarm(line.level or "") is None:
            return "machine %s: %s has no %s alarm" % (m.id, s.tag, line.level)
        return None
    name = line.interlock  # state
    if name is not None and name not in m.interlocks:
        return "machine %s has no interlock %s" % (m.id, name)
    return None


def is_trip(fields: list[str]) -> bool:
    """A line's split fields are a trip: "<time> STATE <machine> <from>->TRIPPED <cause>"."""
    return len(fields) >= 5 and fields[1] == "STATE" and fields[3].endswith("->TRIPPED")


def report_pairs(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a "NODE heap=..." report, in order (value "" for "key="); [] for any
    other line."""
    if not text.startswith(REPORT):
        return []
    return [(k, v) for k, _, v in (kv.partition("=") for kv in text.split()[1:] if "=" in kv)]
