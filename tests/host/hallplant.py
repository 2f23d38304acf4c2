"""A plant that is not the simulator, for the gateway's tests: an air handling unit AHU-1 (supply and return air
temperature, fan speed) and a silo SILO-2 (level), in Berlin; its description and a log of it (docs/PLANT.md)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

HASH = "0123456789abcdef"  # the hash tests give from_dict; a file loaded by host/plantdesc.load has its own
START = datetime.datetime(2026, 11, 30, 6, 0, 0, tzinfo=datetime.timezone.utc)
HALL = {
    "format": "edgetwin-plant/1",
    "name": "hall-3",
    "title": "Hall 3: air handling and the sand silo",
    "timezone": "Europe/Berlin",
    "board": "rp2040_pico",
    "buses": {"i2c": {"type": "i2c", "id": 0, "sda": 8, "scl": 9, "freq": 100000}},
    "machines": [
        {"id": "AHU-1", "kind": "air handling unit", "words": ["air handler", "supply fan"],
         "state": {"run": {"di": 10, "active": "high", "pull": "down", "debounce_ms": 20}},
         "sample_s": 5,
         "signals": [
             {"key": "SAT", "tag": "supply_temp", "unit": "C", "words": ["supply air temperature"],
              "source": {"adc": 0, "input": "4-20mA", "shunt_ohm": 150, "samples": 8}, "range": [-20, 80],
              "alarms": [{"level": "HI", "limit": 24, "hysteresis": 0.5, "on_delay_s": 5, "priority": "medium"},
                         {"level": "HIHI", "limit": 30, "priority": "critical", "interlock": "HIHI_SAT"}]},
             {"key": "RAT", "tag": "return_temp", "unit": "C", "words": ["return air temperature"],
              "source": {"adc": 1, "input": "4-20mA", "shunt_ohm": 150, "samples": 8}, "range": [-20, 80]},
             {"key": "FAN", "tag": "fan_speed", "unit": "%", "decimals": 0, "words": ["fan speed"],
              "source": {"adc": 2, "input": "voltage", "volts": [0, 3.3], "samples": 8}, "range": [0, 100]}]},
        {"id": "SILO-2", "kind": "silo", "words": ["sand silo"],
         "state": {"run": {"di": 11, "active": "high", "pull": "down"}},
         "sample_s": 10,
         "signals": [
             {"key": "L", "tag": "level", "unit": "m", "decimals": 2, "words": ["silo level"],
              "source": {"i2c": "i2c", "chip": "ads1115", "address": 72, "channel": 0, "input": "4-20mA",
                         "shunt_ohm": 150},
              "range": [0, 12],
              "alarms": [{"level": "LO", "limit": 1.5, "hysteresis": 0.1, "priority": "medium"},
                         {"level": "LOLO", "limit": 0.5, "priority": "high", "interlock": "LOLO_LEVEL"}]}]},
    ],
}


def desc(h: str = HASH):
    from host import plantdesc

    return plantdesc.from_dict(HALL, h)


def write(path: Path) -> Path:
    path.write_text(json.dumps(HALL, indent=1))
    return path


def _ts(s: int) -> str:
    return (START + datetime.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def lines(h: str = HASH, minutes: int = 10) -> list[str]:
    """A boot, then the AHU's supply air warming until its HIHI interlock trips it (HI raised at 300 s, acked by
    alice, HIHI and the trip at 420 s), the silo emptying below its LO limit, a sensor going BAD."""
    out = [_ts(0) + " PLANT name=hall-3 hash=%s machines=2 signals=4" % h]
    tripped = False
    for s in range(0, minutes * 60, 5):
        sat = 18.0 + s * 0.03
        if s == 300:
            out.append(_ts(s) + " ALARM HI AHU-1 supply_temp %.1fC prio=2 RAISED" % sat)
        if s == 360:
            out.append(_ts(s) + " ACK HI AHU-1 supply_temp %.1fC prio=2 ACKED by=alice" % sat)
        if s == 420:
            out.append(_ts(s) + " ALARM HIHI AHU-1 supply_temp %.1fC prio=4 RAISED" % sat)
            out.append(_ts(s) + " STATE AHU-1 RUNNING->TRIPPED interlock=HIHI_SAT")
            tripped = True
        state, fan = ("TRIPPED", 0) if tripped else ("RUNNING", 80)
        out.append(_ts(s) + " AHU-1 %s SAT=%.1fC RAT=%s FAN=%d%%" % (state, sat, "?" if 200 <= s < 230 else
                                                                     "%.1fC" % (21.0 + s * 0.001), fan))
        if s % 10 == 0:
            out.append(_ts(s) + " SILO-2 RUNNING L=%.2fm" % (3.0 - s * 0.004))
        if s == 380:
            out.append(_ts(s) + " ALARM LO SILO-2 level 1.48m prio=2 RAISED")
    return out
