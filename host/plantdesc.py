"""The gateway's view of a plant description (docs/PLANT.md): machines, their words, signals, units and alarms.

Everything downstream of the node that needs to know a plant (the store, `import`, `ask`'s words and
record answers, the dashboard's plots, MQTT's fields) reads it from a `PlantDesc`, never from code:

    desc = plantdesc.load("examples/pump_skid.json")     # checked (host/plantfile.py) and hashed
    desc = plantdesc.builtin()                           # the simulator's own description (shipped)
    desc.machine("P-1").signal("bearing_temp").unit      # "C"
    desc.machine("P-1").signal("bearing_temp").alarm("HI").causes   # ("bearing wear", ...): cause hints, if any
    desc.hash                                            # what the node logs in its PLANT line

`load` raises host.plantfile.PlantFileError (a ValueError whose message is the one line the user sees)
for a file that does not check. A PlantDesc is read-only after it is made.
"""

from __future__ import annotations

import datetime
import functools
import json
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path

SIM_FILE = Path(__file__).resolve().parents[1] / "shared" / "plant_sim.json"
LEVELS = ("HI", "HIHI", "LO", "LOLO", "BAD")
PRIORITIES = {"low": 1, "medium": 2, "high": 3, "critical": 4}


@dataclass(frozen=True)
class AlarmPoint:
    level: str  # HI, HIHI, LO, LOLO (BAD points are Signal.bad)
    limit: float
    hysteresis: float = 0.0
    on_delay_s: int = 0
    off_delay_s: int = 0
    priority: int = 2  # 1 low .. 4 critical
    when: str = "always"  # or "running"
    interlock: str | None = None
    causes: tuple[str, ...] = ()  # what may drive it into alarm, in operators' words (the gateway's notes only)


@dataclass(frozen=True)
class Signal:
    key: str  # in sample lines: "T"
    tag: str  # in alarm lines: "bearing_temp"
    unit: str  # "C"
    decimals: int = 1
    words: tuple[str, ...] = ()
    source: dict = field(default_factory=dict, compare=False)
    range: tuple[float, float] | None = None
    period_ms: int = 1000
    deadband: float = 0.0
    alarms: tuple[AlarmPoint, ...] = ()
    bad: dict | None = None  # {"on_delay_s", "off_delay_s", "priority"} or None: no BAD alarm

    def alarm(self, level: str) -> AlarmPoint | None:
        return next((a for a in self.alarms if a.level == level), None)


@dataclass(frozen=True)
class Machine:
    id: str
    kind: str
    words: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    state: dict = field(default_factory=dict, compare=False)
    sample_s: int = 5
    signals: tuple[Signal, ...] = ()

    def signal(self, name: str) -> Signal | None:
        """The signal whose tag or key is `name`."""
        return next((s for s in self.signals if name in (s.tag, s.key)), None)

    @property
    def interlocks(self) -> tuple[str, ...]:
        return tuple(a.interlock for s in self.signals for a in s.alarms if a.interlock)


@dataclass(frozen=True)
class PlantDesc:
    name: str
    machines: tuple[Machine, ...]
    hash: str = ""  # the compiled form's hash (docs/PLANT.md): what the node names in its PLANT line
    title: str = ""
    timezone: str = "UTC"
    board: str | None = None
    simulator: bool = False  # the built-in simulator's description
    text: str = field(default="", compare=False, repr=False)  # the description as JSON (what the store keeps)

    def machine(self, mid: str) -> Machine | None:
        return self._by_id.get(mid)

    @functools.cached_property
    def _by_id(self) -> dict[str, Machine]:
        return {m.id: m for m in self.machines}

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.machines)

    @property
    def kinds(self) -> dict[str, tuple[str, ...]]:
        """kind -> the ids of its machines, in the description's order."""
        out: dict[str, list[str]] = {}
        for m in self.machines:
            out.setdefault(m.kind, []).append(m.id)
        return {k: tuple(v) for k, v in out.items()}

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.tag for m in self.machines for s in m.signals))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.key for m in self.machines for s in m.signals))

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.unit for m in self.machines for s in m.signals))

    @property
    def interlocks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i for m in self.machines for i in m.interlocks))

    @functools.cached_property
    def tz(self) -> datetime.tzinfo:
        return datetime.timezone.utc if self.timezone == "UTC" else zoneinfo.ZoneInfo(self.timezone)

    def site_time(self, wall_ms: int) -> datetime.datetime:
        """A wall time (ms since 1970, UTC) as the site's local time."""
        return datetime.datetime.fromtimestamp(wall_ms / 1000, self.tz)


def _num(v) -> float:
    return float(v)


def _alarm(d: dict) -> AlarmPoint:
    prio = d.get("priority", 2)
    return AlarmPoint(level=d["level"], limit=_num(d["limit"]), hysteresis=_num(d.get("hysteresis", 0)),
                      on_delay_s=int(d.get("on_delay_s", 0)), off_delay_s=int(d.get("off_delay_s", 0)),
                      priority=PRIORITIES.get(prio, prio) if isinstance(prio, str) else int(prio),
                      when=d.get("when", "always"), interlock=d.get("interlock"),
                      causes=tuple(d.get("causes", ())))


_BAD_DEFAULT = {"on_delay_s": 3, "off_delay_s": 60, "priority": 1}


def _signal(d: dict) -> Signal:
    bad = d.get("bad", _BAD_DEFAULT)
    if bad is not False and bad is not None:
        bad = dict(_BAD_DEFAULT, **bad)
        if isinstance(bad["priority"], str):
            bad["priority"] = PRIORITIES[bad["priority"]]
    rng = d.get("range")
    return Signal(key=d["key"], tag=d["tag"], unit=d["unit"], decimals=int(d.get("decimals", 1)),
                  words=tuple(d.get("words", ())), source=dict(d.get("source", {})),
                  range=(float(rng[0]), float(rng[1])) if rng else None, period_ms=int(d.get("period_ms", 1000)),
                  deadband=_num(d.get("deadband", 0)), alarms=tuple(_alarm(a) for a in d.get("alarms", ())),
                  bad=bad or None)


def _machine(d: dict) -> Machine:
    return Machine(id=d["id"], kind=d["kind"], words=tuple(d.get("words", ())), aliases=tuple(d.get("aliases", ())),
                   state=dict(d.get("state", {})), sample_s=int(d.get("sample_s", 5)),
                   signals=tuple(_signal(s) for s in d["signals"]))


def from_dict(d: dict, hash: str = "") -> PlantDesc:
    """A PlantDesc from a description that host/plantfile.py checked (nothing is checked here)."""
    return PlantDesc(name=d["name"], machines=tuple(_machine(m) for m in d["machines"]), hash=hash,
                     title=d.get("title", ""), timezone=d.get("timezone", "UTC"), board=d.get("board"),
                     simulator=bool(d.get("simulator", False)), text=json.dumps(d, sort_keys=True))


def load(path: str | Path, board: dict | None = None) -> PlantDesc:
    """Check, compile and hash the description file at path (PlantFileError: the one line to show)."""
    from host import plantcompile, plantfile

    d = plantfile.load(path, board)
    return from_dict(d, plantcompile.plant_hash(plantcompile.compile_plant(d, board)))


@functools.lru_cache(maxsize=1)
def builtin() -> PlantDesc:
    """The simulator's description (shared/plant_sim.json): what a node without a description runs. The
    shipped file is read as it is, with its hash from shared/plant_catalogue.py (what the simulating node
    names); tests/host/test_plant_sim_desc.py checks that both are current and that the file checks, so a
    gateway or `ask` does not check and compile its 64 machines at every start."""
    from shared.plant_catalogue import DESCRIPTION_HASH

    return from_dict(json.loads(SIM_FILE.read_text()), DESCRIPTION_HASH)
