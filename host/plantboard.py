"""The plant checker's board rules: the board a description is wired for, and whether that board has what
the description takes (pins, ADC channels, UARTs and I2C controllers, room in its heap).

    profile, problems = plantboard.resolve(doc, board)    # --board's profile, else the file's "board"
    problems += plantboard.check(doc, profile)

A board profile's optional `io` section (boards/*.json, checked by shared/profile.py) says which GPIOs the
chip has, which the board itself uses, which GPIO each ADC channel is on, and which UARTs and I2C
controllers a description may take with the pins each function can be on. The link to the gateway is the
profile's `uart`: its UART and pins are never a description's.
"""

from __future__ import annotations

from typing import Iterator

from host import plantrules
from host.plantschema import Problem, Where

# Heap a compiled description takes on the board (its tables, readings and engine: shared/plantcfg.py,
# readings.py, plant_engine.py), measured on the rp2 firmware in the emulated RP2040 by `edgetwin bench
# inputs` (1 machine, 4 signals, 11 alarm points with their BAD ones: 5,312 B; 4 machines, 28 signals,
# 70 points: 16,976 B), and fitted: BASE + 300 per machine + 400 per signal + 30 per point, within 4 % of both
BASE = 3000
PER_MACHINE = 300
PER_SIGNAL = 400
PER_ALARM = 30
HEAP_PERCENT = 15  # of the profile's heap_bytes: the rest is the model's and the link's


def resolve(doc: dict, board: dict | None) -> tuple[dict | None, list[Problem]]:
    """The profile to check against: `board` (a validated profile, from --board), else the profile the
    file's "board" names. A description wired for another board than --board's is a problem."""
    named = doc.get("board")
    if board is not None:
        if named is not None and named != board.get("name"):
            why = "the description is wired for %s, not for the board given (%s): change \"board\" or give " \
                  "--board %s" % (named, board.get("name"), named)
            return board, [Problem(("board",), why)]
        return board, []
    if named is None:
        return None, []
    from host import board_profile
    from host.errors import UserError

    if named not in board_profile.known_boards():
        return None, [Problem(("board",), "unknown board %s (known: %s); for a profile of your own leave \"board\" "
                                          "out and pass --board PATH" % (plantrules.fmt_path((named,)),
                                                                       ", ".join(board_profile.known_boards())))]
    try:
        return board_profile.resolve(named), []
    except UserError as e:
        return None, [Problem(("board",), str(e))]


def check(doc: dict, profile: dict | None) -> list[Problem]:
    if profile is None:
        if "board" in doc:  # its problem is already reported
            return []
        return [Problem(p, "an ADC channel's pin depends on the board: set \"board\" (e.g. \"rp2040_pico\") or "
                           "pass --board") for p in _adc_paths(doc)]
    io = profile.get("io")
    name = profile.get("name", "the board")
    out: list[Problem] = []
    if io is None:
        out += [Problem(p, "the board profile %s has no io section, so its ADC pins are unknown" % name)
                for p in _adc_paths(doc)]
    else:
        out += [Problem(p, m) for p, m in _io(doc, profile, io, name)]
    out += [Problem(p, m) for p, m in _heap(doc, profile, name)]
    return out


def _adc_paths(doc: dict) -> list[Where]:
    return [("machines", i, "signals", j, "source", "adc") for i, m in enumerate(doc["machines"])
            for j, s in enumerate(m["signals"]) if "adc" in s["source"]]


def _ranges(io: dict) -> str:
    return ", ".join("%d..%d" % (a, b) if a != b else "%d" % a for a, b in io["gpio"])


def _pins(pins: list) -> str:
    return ", ".join(str(p) for p in pins)


def _io(doc: dict, profile: dict, io: dict, name: str) -> Iterator[tuple[Where, str]]:
    link = profile.get("uart", {})
    link_pins = {link.get("tx", -1): "TX", link.get("rx", -1): "RX"}
    reserved = io.get("reserved", {})
    adc = io.get("adc", [])
    # every pin: the chip has it, the board does not use it, the link does not
    for pin, path in plantrules.pin_uses(doc, profile):
        if pin[0] == "adc":  # a channel the board does not have (a pin otherwise)
            yield path, "%s has ADC channels %s" % (name, "0..%d" % (len(adc) - 1) if adc else "none")
            continue
        n = pin[1]
        what = "ADC%d (GPIO %d)" % (_at(path, doc)["adc"], n) if path[-1] == "adc" else "GPIO %d" % n
        if not any(a <= n <= b for a, b in io["gpio"]):
            yield path, "%s: %s has no such pin (GPIO %s)" % (what, name, _ranges(io))
        elif str(n) in reserved:
            yield path, "%s is reserved on %s (%s): use another pin" % (what, name, reserved[str(n)])
        elif n in link_pins:
            yield path, "%s is the link's %s to the gateway (UART%d) on %s: use another pin" % (
                what, link_pins[n], link.get("id", 0), name)
    # controllers and the functions of their pins
    for bname, bus in doc.get("buses", {}).items():
        table, key, funcs = ("uart", "uart", ("tx", "rx")) if bus["type"] == "rs485" else ("i2c", "id", ("sda", "scl"))
        label = "UART" if table == "uart" else "I2C"
        ctl = io.get(table, {})
        n = bus[key]
        at = ("buses", bname)
        if table == "uart" and n == link.get("id"):
            others = [k for k in ctl if int(k) != n]
            yield at + (key,), "UART%d carries the link to the gateway on %s: use %s" % (
                n, name, " or ".join("UART" + k for k in others) if others else "a board with a second UART")
            continue
        if str(n) not in ctl:
            yield at + (key,), "%s has no %s%d a description may take (it has: %s)" % (
                name, label, n, ", ".join(label + k for k in ctl) or "none")
            continue
        for f in funcs:
            allowed = ctl[str(n)].get(f)
            if allowed is not None and bus[f] not in allowed:
                yield at + (f,), "GPIO %d cannot be %s%d's %s on %s (%s%d %s: GPIO %s)" % (
                    bus[f], label, n, f.upper(), name, label, n, f.upper(), _pins(allowed))


def _at(path: Where, doc: dict) -> dict:
    node = doc
    for p in path[:-1]:
        node = node[p]
    return node


def heap_estimate(machines: int, signals: int, alarms: int) -> int:
    return BASE + PER_MACHINE * machines + PER_SIGNAL * signals + PER_ALARM * alarms


def _heap(doc: dict, profile: dict, name: str) -> Iterator[tuple[Where, str]]:
    ms = doc["machines"]
    n_sig = sum(len(m["signals"]) for m in ms)
    n_alarm = sum(len(s.get("alarms", ())) + (s["bad"] is not False) for m in ms for s in m["signals"])
    need = heap_estimate(len(ms), n_sig, n_alarm)
    budget = profile["heap_bytes"] * HEAP_PERCENT // 100
    if need > budget:
        per_signal = PER_SIGNAL + PER_ALARM * n_alarm / max(n_sig, 1)
        fit = max(0, int((budget - BASE - PER_MACHINE * len(ms)) // per_signal))
        yield ("machines",), "%d signals with %d alarm points take about %d bytes of the board's heap, over the %d " \
                             "(%d %% of %s's heap) a description may take: about %d signals fit" % (
                                 n_sig, n_alarm, need, budget, HEAP_PERCENT, name, fit)
