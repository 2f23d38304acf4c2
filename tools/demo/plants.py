"""The demo's plants (`edgetwin demo --plant`): which plant each virtual node reads, the faults it develops during
the run, the operator questions asked about it and the words the ground truth names its machines by.

    --plant builtin        the node's built-in simulator (tools/board/simslave.py, tools/demo/demo.py's demo_plant)
    --plant seen|unseen    a generated plant of that split (tools/plants/generate.py, split.py), seed --plant-seed
                           for node 1, the next seeds for the others: "unseen" has only machine kinds and naming
                           schemes no training run saw
    --plant FILE.json      a plant description (docs/PLANT.md) of catalogue kinds read over Modbus RTU, given to
                           every node (its RS-485 bus moved to the board's free UART)

A generated or given plant is simulated by tools/plants/physics.Sim and served by tools/plants/serve.SimRig, the way
tools/board/rig.Rig serves the built-in one. Its faults are chosen from its machines' kinds (tools/plants/catalogue.py)
by probing the simulator: one that trips its machine TRIP_AT seconds after the node's simulator starts, its first
alarm seconds before, and one that raises an alarm on another machine ALARM_AT seconds in and does not trip it
during the run. The simulator is started far enough back (`start_tick`) for both. The gateway and `ask` see only
the description and the lines; the questions and the ground truth's machine words come from the description too.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path

# the demo's pace, every plant's (tools/demo/demo.py reads it here): the trip TRIP_AT s after the node's simulator
# starts serving, a sample line per machine every SAMPLE_S
TRIP_AT = 30
SAMPLE_S = 10

BUILTIN = "builtin"
SPLITS = ("seen", "unseen")
DEFAULT_SEED = 2000  # a benchmark seed (tools/plants/plantday.py): no training plant is drawn from seeds >= 2000
TRIP_LEAD = (6, 18)  # seconds from that fault's first alarm to its trip: both come after the node reads its plant
ALARM_AT = 15  # seconds after the simulator starts: the other fault's first alarm
SETUP_S = 40  # seconds a node's simulator may run before the demo's clock starts (the other nodes boot)
SEVERITIES = (3, 4, 5)  # the alarm-only fault: slowest first, so that it raises its alarm and holds short of a trip


class PlantError(ValueError):
    """A --plant the demo cannot run: one line for the user."""


@dataclass
class Fault:
    """A fault the demo gives one node's simulator, from tick `at` (the simulator's seconds)."""

    machine: str
    fault: str
    severity: int
    at: int
    expect: str  # "trip" or "alarm": what it is chosen to do during the run

    def as_dict(self, epoch: int) -> dict:
        from tools.plants import physics

        return {"machine": self.machine, "fault": self.fault, "severity": self.severity, "at_tick": self.at,
                "since": physics.iso(epoch + self.at), "expect": self.expect}


@dataclass
class NodePlant:
    """One node's generated or given plant: its description (wired for the node's board), the simulator's seed,
    its faults and how many seconds the simulator runs before it is served."""

    desc: dict
    seed: int
    faults: list[Fault] = field(default_factory=list)
    start_tick: int = 0
    epoch: int = 0

    def simulator(self, now: int):
        """The node's simulator, started `start_tick` seconds before `now` (epoch seconds) with its faults, run up
        to now: its clock is the wall clock, as the node's stamps are."""
        from tools.plants import physics

        self.epoch = now - self.start_tick
        sim = physics.Sim(self.desc, seed=self.seed, epoch=self.epoch)
        for f in self.faults:
            sim.inject(f.machine, f.fault, at_s=f.at, severity=f.severity)
        for _ in range(self.start_tick):
            sim.step()
        return sim

    def summary(self, node: str) -> dict:
        return {"node": node, "name": self.desc["name"], "title": self.desc.get("title", ""),
                "board": self.desc.get("board"), "seed": self.seed,
                "kinds": sorted({m["kind"] for m in self.desc["machines"]}),
                "machines": [m["id"] for m in self.desc["machines"]],
                "faults": [f.as_dict(self.epoch) for f in self.faults],
                "simulator_started_s_before": self.start_tick}


@dataclass
class Choice:
    """What --plant and --plant-seed chose: `which` is builtin, seen, unseen or file."""

    which: str
    seed: int
    path: str | None = None
    desc: dict | None = None  # a file's description, checked

    def is_builtin(self) -> bool:
        return self.which == BUILTIN

    def description(self, i: int, board: str, prof: dict) -> dict:
        """Node i's description, wired for `board` (an unchecked dict: the demo checks and compiles it)."""
        from tools.board import simslave

        if self.which in SPLITS:
            from tools.plants import generate

            d = generate.plant(self.seed + i, self.which, board=board)
            for m in d["machines"]:
                m["sample_s"] = SAMPLE_S
            return d
        d = copy.deepcopy(self.desc)
        d["board"] = board
        bus = next(b for b in d["buses"].values() if b.get("type") == "rs485")
        bus.update(simslave.bus_for(prof))  # the board's free UART and pins; baud, parity and timeouts as given
        return d

    def summary(self) -> dict:
        return {"plant": self.which, "split": self.which if self.which in SPLITS else None,
                "seed": None if self.is_builtin() else self.seed, "file": self.path}


def choose(plant: str, seed: int) -> Choice:
    """--plant and --plant-seed, checked (PlantError: one line). A file is read and checked here, before anything
    starts."""
    if not isinstance(seed, int) or seed < 0:
        raise PlantError("--plant-seed must be a whole number >= 0, got %r" % (seed,))
    if plant in (BUILTIN,) + SPLITS:
        return Choice(plant, seed)
    p = Path(plant)
    if not p.is_file():
        why = "no such file" if not p.exists() else "not a file"
        raise PlantError("--plant must be builtin, seen, unseen or a plant description file (docs/PLANT.md), got "
                         "%r: %s" % (plant, why))
    return Choice("file", seed, str(p), _load_file(p))


def _load_file(p: Path) -> dict:
    from host import plantfile

    try:
        d = plantfile.load(p)
    except plantfile.PlantFileError as e:
        raise PlantError(str(e)) from None
    why = unservable(d)
    if why:
        raise PlantError("%s: %s" % (p, why))
    return d


def unservable(d: dict) -> str | None:
    """Why the plant simulator cannot serve a checked description over Modbus (None: it can): every machine of a
    catalogue kind, every signal and contact a register of a device on its one RS-485 bus, each signal's register
    named after the catalogue role it measures."""
    from tools.plants import catalogue

    rs485 = [n for n, b in d.get("buses", {}).items() if b.get("type") == "rs485"]
    if len(rs485) != 1:
        return "the demo serves a plant on one RS-485 bus (Modbus RTU); this one has %d" % len(rs485)
    devices = d.get("devices", {})
    for m in d["machines"]:
        kind = catalogue.BY_NAME.get(m["kind"])
        if kind is None:
            return "machine %s: kind %r is not one the plant simulator has (tools/plants/catalogue.py: %s)" % (
                m["id"], m["kind"], ", ".join(catalogue.BY_NAME))
        roles = {s.role for s in kind.signals}
        for s in m["signals"]:
            src = s["source"]
            if "device" not in src or devices.get(src["device"], {}).get("bus") != rs485[0]:
                return "machine %s: signal %s is not read from a Modbus device on the RS-485 bus" % (m["id"], s["key"])
            if src["register"] not in roles:
                return "machine %s: signal %s: register %r names no %s signal the simulator has (%s)" % (
                    m["id"], s["key"], src["register"], kind.name, ", ".join(sorted(roles)))
        for which in ("run", "trip"):
            c = m["state"].get(which)
            if isinstance(c, dict) and "device" not in c:
                return "machine %s: its %s contact is not a Modbus register" % (m["id"], which)
    return None


# ---------------------------------------------------------------------------------------------- faults


def _probe(desc: dict, seed: int, machine: str, fault: str, severity: int, steps: int) -> tuple:
    """(seconds to the fault's first alarm, seconds to its trip) when it starts at once; None where it does not
    come within `steps` simulated seconds."""
    from tools.plants import physics

    sim = physics.Sim(desc, seed=seed)
    sim.inject(machine, fault, at_s=1, severity=severity)
    for _ in range(steps):
        sim.step()
        if sim.truth()[0]["trip"]:
            break
    t = sim.truth()[0]
    return (t["first_alarm"]["tick"] - 1 if t["first_alarm"] else None, t["trip"]["tick"] - 1 if t["trip"] else None)


def _candidates(desc: dict, rng: random.Random, skip: str | None = None) -> list[tuple[str, str]]:
    from tools.plants import catalogue

    out = [(m["id"], f.name) for m in desc["machines"] if m["id"] != skip for f in catalogue.kind(m["kind"]).faults]
    rng.shuffle(out)
    return out


def _trip_fault(desc: dict, seed: int, rng: random.Random) -> tuple | None:
    """(machine, fault, alarm delay, trip delay) at severity 5: one whose alarm leads its trip by TRIP_LEAD, else
    the tripping one with the shortest lead (its alarm then comes before the node reads it), else None."""
    best = None
    for mid, name in _candidates(desc, rng):
        alarm, trip = _probe(desc, seed, mid, name, 5, 600)
        if alarm is None or trip is None:
            continue
        if TRIP_LEAD[0] <= trip - alarm <= TRIP_LEAD[1]:
            return mid, name, alarm, trip
        if best is None or trip - alarm < best[3] - best[2]:
            best = (mid, name, alarm, trip)
    return best


def _alarm_fault(desc: dict, seed: int, rng: random.Random, skip: str | None, hold: int) -> tuple | None:
    """(machine, fault, severity, alarm delay) of a fault on another machine than `skip` whose first alarm holds
    `hold` seconds without a trip; else the one that holds longest; else None."""
    from tools.plants import physics

    best = None
    for mid, name in _candidates(desc, rng, skip):
        for sev in SEVERITIES:
            alarm, trip = _probe(desc, seed, mid, name, sev, int(physics.DEVELOP_S[sev] * 1.3) + hold)
            if alarm is None:
                continue
            held = (trip - alarm) if trip is not None else hold
            if held >= hold:
                return mid, name, sev, alarm
            if best is None or held > best[4]:
                best = (mid, name, sev, alarm, held)
    return best[:4] if best else None


def plan(desc: dict, seed: int, duration: float) -> NodePlant:
    """The node's plant with its faults and the simulator's head start: a trip TRIP_AT s after the simulator is
    served (its alarm before), an alarm on another machine ALARM_AT s in that holds through the run."""
    rng = random.Random("edgetwin-demo/faults/%d/%s" % (seed, desc["name"]))
    node_plant = NodePlant(desc, seed)
    trip = _trip_fault(desc, seed, rng)
    hold = int(duration) + SETUP_S
    other = _alarm_fault(desc, seed, rng, trip[0] if trip else None, hold)
    # start ticks so that each fault's delay ends where the run wants it; then the whole plan is run once and the
    # head start taken from where the trip really came (the noise differs a little once both faults run)
    start = max([1] + ([trip[3] - TRIP_AT + 1] if trip else []) + ([other[3] - ALARM_AT + 1] if other else []))
    if trip:
        node_plant.faults.append(Fault(trip[0], trip[1], 5, start + TRIP_AT - trip[3], "trip"))
    if other:
        node_plant.faults.append(Fault(other[0], other[1], other[2], start + ALARM_AT - other[3], "alarm"))
    node_plant.start_tick = _measured_start(node_plant, start)
    return node_plant


def _measured_start(node_plant: NodePlant, start: int) -> int:
    """The head start that puts the tripping fault's trip TRIP_AT s after the simulator is served, measured on
    the node's own simulator with every fault (as demo.demo_plant measures the built-in one)."""
    trip = next((f for f in node_plant.faults if f.expect == "trip"), None)
    if trip is None:
        return start
    probe = NodePlant(node_plant.desc, node_plant.seed, node_plant.faults, 0).simulator(0)
    for _ in range(start + TRIP_AT + 120):
        probe.step()
        if any(x["trip"] for x in probe.truth() if (x["machine"], x["fault"]) == (trip.machine, trip.fault)):
            return max(0, probe.tick - TRIP_AT)
    return start


# ---------------------------------------------------------------------------------------------- questions, truth


def machine_words(m: dict) -> str:
    """What an operator calls the machine: its first word and its id ("lime kiln A3-KLN01")."""
    words = m.get("words") or [m["kind"]]
    return "%s %s" % (words[0], m["id"])


def questions(first: NodePlant) -> tuple[str, str]:
    """The demo's two questions on a described plant: the trip, and whether the machine node 1's alarm-only fault
    is on (else its tripping one, else its first machine) runs normally, named as the description names it."""
    by_id = {m["id"]: m for m in first.desc["machines"]}
    pick = next((f.machine for f in first.faults if f.expect == "alarm"), None) or \
        next((f.machine for f in first.faults), first.desc["machines"][0]["id"])
    return ("Which machine stopped or tripped, and why?",
            "Is the %s running normally, or is an alarm raised on it?" % machine_words(by_id[pick]))


def truth_faults(nodes: list[tuple[str, NodePlant]]) -> list[dict]:
    """The injected faults as tools/demo/truth.py states them: per node, since the simulator's clock time."""
    return [dict(f.as_dict(node_plant.epoch), node=name) for name, node_plant in nodes for f in node_plant.faults]


def describe(choice: Choice, nodes: list[tuple[str, dict]]) -> dict:
    """The JSON's "plant": what --plant chose and each node's plant (name, kinds, machines, faults)."""
    out = choice.summary()
    out["nodes"] = [x for _, x in nodes]
    return out
