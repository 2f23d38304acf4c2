"""plantlines.py: the plant's log-line grammar as the gateway's readers need it (docs/PLANT.md, Log grammar).

One home for what the MQTT publisher (host/mqtt_topics.py) and the dashboard (host/ui/feed.py) both read
from a stored line: the alarm verbs and PLC states (taken from shared/, which writes the lines), whether a
line is a trip, and the key=value fields of the node's "NODE heap=..." report.

    2026-11-30T06:44:58Z ALARM HI P-101 vibration 7.4mm/s prio=3 RAISED
    2026-11-30T06:50:28Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB
    NODE heap=41000 dropped=0 spilled=12 ...
"""

from __future__ import annotations

from shared import plant, plant_alarms

ALARM_VERBS = tuple(v.decode() for v in plant_alarms.VERBS)  # ALARM, ACK, CLEAR, SHELVE, UNSHELVE
PLC_STATES = frozenset(s.decode() for s in plant.STATES)  # STOPPED, STARTING, RUNNING, STOPPING, TRIPPED
REPORT = "NODE heap="  # how the node's periodic report starts (firmware/node.py); other NODE lines are notices


def is_trip(fields: list[str]) -> bool:
    """A line's split fields are a trip: "<time> STATE <machine> <from>->TRIPPED <cause>"."""
    return len(fields) >= 5 and fields[1] == "STATE" and fields[3].endswith("->TRIPPED")


def report_pairs(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a "NODE heap=..." report, in order (value "" for "key="); [] for any
    other line."""
    if not text.startswith(REPORT):
        return []
    return [(k, v) for k, _, v in (kv.partition("=") for kv in text.split()[1:] if "=" in kv)]
