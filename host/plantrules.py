"""The plant checker's rules beyond the schema (docs/PLANT.md, "What the checker refuses"): references,
unique names, pins used twice, the sample line's width, the order of alarm limits, values the board's ints
can hold, scalings it can compute.

    problems = plantrules.check(doc, defaulted)   # doc: structurally valid, defaults filled (plantschema)

The board's own rules (its pins, UARTs, I2C controllers, ADC channels, heap) are host/plantboard.py's.
Every rule reads a description the schema already accepted, so types and required fields are known.
"""

from __future__ import annotations

import functools
import json
import math
import zoneinfo
from fractions import Fraction
from typing import Iterator

from host import plantscale
from host.plantschema import Problem, Where, shown

LINE_MAX = 128  # bytes of a log line (docs/PLANT.md)
TIMESTAMP = 21  # "2026-11-30T06:00:00Z "
WIDEST_STATE = 7  # STOPPED, RUNNING, TRIPPED: the states the engine writes
ORDER = ("HIHI", "HI", "LO", "LOLO")  # each level's limit above the next one's
MAX_COUNT = 255  # alarm delays are counted in readings, one byte on the board
BOARD_LIMIT = 1 << 29


def source_kind(src: dict) -> str:
    """modbus, adc, ads1115, mcp9600, pulse, contact or sim."""
    if "device" in src:
        return "modbus"
    if "adc" in src:
        return "adc"
    if "i2c" in src:
        return src["chip"]
    if "pulse" in src:
        return "pulse"
    if "di" in src:
        return "contact"
    return "sim"


def where(doc: dict, path: Where) -> str:
    """A path as a message names another place: "buses.rs485.tx", "machine P-1 signals[0].source"."""
    if len(path) >= 2 and path[0] == "machines":
        mid = doc["machines"][path[1]]["id"]
        rest = fmt_path(path[2:])
        if sum(1 for m in doc["machines"] if m["id"] == mid) > 1:  # two go by that id: the index tells them apart
            return fmt_path(path)
        return "machine %s%s" % (mid, " " + rest if rest else "")
    return fmt_path(path)


def fmt_path(path: Where) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += "[%d]" % p
        elif p.replace("_", "").replace("-", "").isalnum() and p.isascii():
            out += ("." if out else "") + p
        else:
            out += "[%s]" % json.dumps(p, ensure_ascii=True)
    return out


def register_of(doc: dict, device: str, register: str) -> dict | None:
    dev = doc.get("devices", {}).get(device)
    if dev is None:
        return None
    return doc.get("profiles", {}).get(dev["profile"], {}).get("registers", {}).get(register)


def check(doc: dict, defaulted: set, board: dict | None = None) -> list[Problem]:
    """Every problem of these rules; board (a profile, or None) only maps ADC channels to their pins."""
    out: list[Problem] = []
    for rule in (_timezone, _devices, _registers, _machines, _i2c_chips):
        out += [Problem(p, m) for p, m in rule(doc, defaulted)]
    out += [Problem(p, m) for p, m in _pins(doc, board)]
    return out


def settle(doc: dict, defaulted: set) -> None:
    """What follows from other fields, filled in before the rules run: a Modbus signal is read every
    poll_ms of its device (one that gives its own period_ms is refused when it differs)."""
    devices = doc.get("devices", {})
    for i, m in enumerate(doc["machines"]):
        for j, s in enumerate(m["signals"]):
            dev = devices.get(s["source"].get("device"))
            if dev is not None and ("machines", i, "signals", j, "period_ms") in defaulted:
                s["period_ms"] = dev["poll_ms"]


# ---- top level ----

@functools.lru_cache(maxsize=64)
def _zone_ok(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
        return True
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return not zoneinfo.available_timezones()  # no time zone database here: the name's form must do


def _timezone(doc: dict, defaulted: set) -> Iterator[tuple[Where, str]]:
    tz = doc["timezone"]
    if tz != "UTC" and not _zone_ok(tz):
        yield ("timezone",), "%s is not an IANA time zone (Europe/Berlin, America/Chicago, UTC)" % _q(tz)


def _q(s: object) -> str:
    return shown(s)


def _names(d: dict) -> str:
    return ", ".join(d) if d else "none are described"


def _devices(doc: dict, defaulted: set) -> Iterator[tuple[Where, str]]:
    buses, profiles = doc.get("buses", {}), doc.get("profiles", {})
    for name, dev in doc.get("devices", {}).items():
        if dev["profile"] not in profiles:
            yield ("devices", name, "profile"), "no profile %s (profiles: %s)" % (_q(dev["profile"]), _names(profiles))
        bus = buses.get(dev["bus"])
        if bus is None:
            yield ("devices", name, "bus"), "no bus %s (buses: %s)" % (_q(dev["bus"]), _names(buses))
        elif bus["type"] != "rs485":
            yield ("devices", name, "bus"), "bus %s is an %s bus: a Modbus device needs an rs485 bus" % (
                _q(dev["bus"]), bus["type"])
    seen: dict[tuple[str, int], Where] = {}
    for kind, key in (("rs485", "uart"), ("i2c", "id")):
        for name, bus in buses.items():
            if bus["type"] != kind:
                continue
            if (kind, bus[key]) in seen:
                yield ("buses", name, key), "%s%d is %s too" % ("UART" if kind == "rs485" else "I2C", bus[key],
                                                                 fmt_path(seen[(kind, bus[key])]))
            else:
                seen[(kind, bus[key])] = ("buses", name)


def _registers(doc: dict, defaulted: set) -> Iterator[tuple[Where, str]]:
    for pname, prof in doc.get("profiles", {}).items():
        for rname, reg in prof["registers"].items():
            at = ("profiles", pname, "registers", rname)
            word = reg["register"] in ("holding", "input")
            if reg["data_type"] == "bool" and word and "bit" not in reg:
                yield at + ("bit",), "missing: a bool read from a holding or input register needs the bit (0..15)"
            if "bit" in reg and not (word and reg["data_type"] == "bool"):
                yield at + ("bit",), "bit is for a bool read from a holding or input register"
            if reg["data_type"] in ("int32", "uint32", "float32") and reg["address"] > 65534:
                yield at + ("address",), "a 32-bit value takes two registers: the address must be at most 65534"
            if reg["scale"] == 0:
                yield at + ("scale",), "must not be 0: every reading would be the offset"


# ---- machines ----

def _machines(doc: dict, defaulted: set) -> Iterator[tuple[Where, str]]:
    ids: dict[str, int] = {}
    for i, m in enumerate(doc["machines"]):
        at: Where = ("machines", i)
        if m["id"] in ids:
            yield at + ("id",), "%s is the id of machines[%d] too: ids are unique" % (_q(m["id"]), ids[m["id"]])
        ids.setdefault(m["id"], i)
        yield from _state(doc, m, at)
        keys: dict[str, int] = {}
        tags: dict[str, int] = {}
        for j, s in enumerate(m["signals"]):
            sat = at + ("signals", j)
            for name, seen in (("key", keys), ("tag", tags)):
                if s[name] in seen:
                    yield sat + (name,), "%s is the %s of signals[%d] too: unique in the machine" % (
                        _q(s[name]), name, seen[s[name]])
                seen.setdefault(s[name], j)
            yield from _signal(doc, s, sat, defaulted)
        if not m["state"].get("sim"):  # a simulated machine writes its own lines, at most 128 bytes
            yield from _line_width(doc, m, at)


def _contact(doc: dict, c: dict, at: Where) -> Iterator[tuple[Where, str]]:
    if "device" not in c:
        return
    yield from _modbus_ref(doc, c, at)
    reg = register_of(doc, c["device"], c["register"])
    if reg is not None and reg["data_type"] != "bool":
        yield at + ("register",), "register %s is %s: a contact needs a bool (a coil, a discrete input or a bit of " \
                                  "a register)" % (_q(c["register"]), reg["data_type"])


def _modbus_ref(doc: dict, src: dict, at: Where) -> Iterator[tuple[Where, str]]:
    devices = doc.get("devices", {})
    dev = devices.get(src["device"])
    if dev is None:
        yield at + ("device",), "no device %s (devices: %s)" % (_q(src["device"]), _names(devices))
        return
    regs = doc.get("profiles", {}).get(dev["profile"], {}).get("registers")
    if regs is not None and src["register"] not in regs:
        yield at + ("register",), "profile %s has no register %s (it has: %s)" % (
            _q(dev["profile"]), _q(src["register"]), _names(regs))


def _state(doc: dict, m: dict, at: Where) -> Iterator[tuple[Where, str]]:
    st = m["state"]
    sat = at + ("state",)
    if st.get("sim"):
        return
    if "run" not in st and "current" not in st:
        yield sat, "needs run (a contact closed while the machine runs) or current (a signal above a threshold)"
    for name in ("run", "trip"):
        if name in st:
            yield from _contact(doc, st[name], sat + (name,))
    cur = st.get("current")
    if cur is not None:
        sig = next((s for s in m["signals"] if s["key"] == cur["signal"]), None)
        if sig is None:
            yield sat + ("current", "signal"), "the machine has no signal with the key %s (keys: %s)" % (
                _q(cur["signal"]), ", ".join(s["key"] for s in m["signals"]))
        elif not _fits(cur["above"], sig["decimals"]):
            yield sat + ("current", "above"), _too_big(cur["above"], sig["decimals"])


def _fits(x: float, decimals: int) -> bool:
    return abs(plantscale.units(x, decimals)) < BOARD_LIMIT


def _too_big(x: float, decimals: int) -> str:
    return "%s does not fit the board's integers at %d decimals (2**29 internal units): use fewer decimals" % (
        _q(x), decimals)


def _signal(doc: dict, s: dict, at: Where, defaulted: set) -> Iterator[tuple[Where, str]]:
    src, d = s["source"], s["decimals"]
    kind = source_kind(src)
    sat = at + ("source",)
    if kind == "modbus":
        yield from _modbus_ref(doc, src, sat)
        dev = doc.get("devices", {}).get(src["device"])
        if dev is not None and at + ("period_ms",) not in defaulted and s["period_ms"] != dev["poll_ms"]:
            yield at + ("period_ms",), "a Modbus signal is read every poll_ms of its device (%d): leave period_ms " \
                                       "out or set devices.%s.poll_ms" % (dev["poll_ms"], src["device"])
    elif kind in ("ads1115", "mcp9600"):
        bus = doc.get("buses", {}).get(src["i2c"])
        if bus is None:
            yield sat + ("i2c",), "no bus %s (buses: %s)" % (_q(src["i2c"]), _names(doc.get("buses", {})))
        elif bus["type"] != "i2c":
            yield sat + ("i2c",), "bus %s is an rs485 bus: an I2C chip needs an i2c bus" % _q(src["i2c"])
    if kind == "mcp9600" and s["unit"] != "C":
        yield at + ("unit",), "an MCP9600 reads degrees Celsius: the unit must be \"C\""
    yield from _range(s, at, kind)
    if not _fits(s["deadband"], d):
        yield at + ("deadband",), _too_big(s["deadband"], d)
    yield from _alarms(s, at, defaulted)
    bad = s["bad"]
    if bad is not False:
        for name in ("on_delay_s", "off_delay_s"):
            if at + ("bad", name) not in defaulted and at + ("bad",) not in defaulted:
                yield from _count(bad[name], s["period_ms"], at + ("bad", name))
    yield from _scaling(doc, s, at, kind)


def _range(s: dict, at: Where, kind: str) -> Iterator[tuple[Where, str]]:
    rng = s.get("range")
    if rng is None:
        if kind in ("adc", "ads1115"):
            yield at + ("range",), "missing: an analog input needs range, the values at 4 and 20 mA (or at its volts)"
        return
    if kind in ("adc", "ads1115"):
        if rng[0] == rng[1]:
            yield at + ("range",), "the two values must differ (they are the values at 4 and 20 mA, or at volts)"
    elif rng[0] >= rng[1]:
        yield at + ("range",), "must be [lo, hi] with lo below hi, got [%s, %s]" % (_q(rng[0]), _q(rng[1]))
    for i in (0, 1):
        if not _fits(rng[i], s["decimals"]):
            yield at + ("range", i), _too_big(rng[i], s["decimals"])


def _alarms(s: dict, at: Where, defaulted: set) -> Iterator[tuple[Where, str]]:
    d = s["decimals"]
    seen: dict[str, int] = {}
    for k, a in enumerate(s.get("alarms", ())):
        aat = at + ("alarms", k)
        lvl = a["level"]
        if lvl in seen:
            yield aat + ("level",), "alarms[%d] is a %s point too: at most one point per level" % (seen[lvl], lvl)
            continue
        seen[lvl] = k
        if "interlock" in a and lvl not in ("HIHI", "LOLO"):
            yield aat + ("interlock",), "only a HIHI or LOLO point names an interlock (this one is %s)" % lvl
        for name in ("limit", "hysteresis"):
            if not _fits(a[name], d):
                yield aat + (name,), _too_big(a[name], d)
        for name in ("on_delay_s", "off_delay_s"):
            if aat + (name,) not in defaulted:
                yield from _count(a[name], s["period_ms"], aat + (name,))
    alarms = s.get("alarms", ())
    for hi_i, hi_lvl in enumerate(ORDER):
        for lo_lvl in ORDER[hi_i + 1:]:
            if hi_lvl in seen and lo_lvl in seen:
                a, b = alarms[seen[hi_lvl]], alarms[seen[lo_lvl]]
                if not a["limit"] > b["limit"]:
                    later = max(seen[hi_lvl], seen[lo_lvl])
                    yield at + ("alarms", later, "limit"), "the %s limit (%s) must be above the %s limit (%s)" % (
                        hi_lvl, _q(a["limit"]), lo_lvl, _q(b["limit"]))


def delay_count(seconds: int, period_ms: int) -> int:
    """A delay in readings: ceil(delay / period), at most 255 (the board counts in a byte)."""
    return min(MAX_COUNT, -(-seconds * 1000 // period_ms))


def _count(seconds: int, period_ms: int, at: Where) -> Iterator[tuple[Where, str]]:
    n = -(-seconds * 1000 // period_ms)
    if n > MAX_COUNT:
        yield at, "%d s is %d readings at period_ms %d; the board counts at most %d: use a shorter delay or a " \
                  "longer period_ms" % (seconds, n, period_ms, MAX_COUNT)


def _scaling(doc: dict, s: dict, at: Where, kind: str) -> Iterator[tuple[Where, str]]:
    src, d = s["source"], s["decimals"]
    try:
        if kind == "modbus":
            reg = register_of(doc, src["device"], src["register"])
            if reg is not None and reg["scale"] != 0:
                plantscale.modbus(reg, d)
        elif kind == "adc" and "range" in s and s["range"][0] != s["range"][1]:
            plantscale.adc(src, s["range"], d)
        elif kind == "ads1115" and "range" in s and s["range"][0] != s["range"][1]:
            plantscale.ads1115(src, s["range"], d)
        elif kind == "mcp9600":
            plantscale.mcp9600(d)
        elif kind == "pulse":
            plantscale.pulses(src, d, s["period_ms"])
    except plantscale.ScaleError as e:
        yield at + ("source",), str(e)


# ---- the sample line ----

def _value_width(v: Fraction, decimals: int) -> int:
    t = abs(v) * 10 ** decimals
    digits = len(str(math.floor(t + Fraction(1, 2))))
    digits = max(digits, decimals + 1)  # 0.05 prints as 0.1, 0 as 0.0
    return digits + (1 if decimals else 0) + (1 if v < 0 else 0)


def signal_width(doc: dict, s: dict) -> int:
    """Bytes of " key=value" at the signal's widest value (a value the board cannot hold reads "?")."""
    src = s["source"]
    kind = source_kind(src)
    reg = register_of(doc, src["device"], src["register"]) if kind == "modbus" else None
    top = Fraction(BOARD_LIMIT - 1, 10 ** (s["decimals"] + 1))
    ext = plantscale.extremes(kind, src, reg, s.get("range")) if kind != "sim" else None
    lo, hi = ext if ext is not None else (-top, top)
    if kind == "pulse" and ext is None:
        lo = Fraction(0)
    lo, hi = max(lo, -top), min(hi, top)
    w = max(_value_width(lo, s["decimals"]), _value_width(hi, s["decimals"]))
    return 2 + len(s["key"]) + w + len(s["unit"])


def line_width(doc: dict, m: dict) -> int:
    return TIMESTAMP + len(m["id"]) + 1 + WIDEST_STATE + sum(signal_width(doc, s) for s in m["signals"])


def _line_width(doc: dict, m: dict, at: Where) -> Iterator[tuple[Where, str]]:
    n = line_width(doc, m)
    if n > LINE_MAX:
        yield at + ("signals",), "the sample line can be %d bytes at the signals' widest values, over the %d a line " \
                                 "may have: give ranges, fewer decimals, shorter keys or units, or fewer signals" % (
                                     n, LINE_MAX)


# ---- pins ----

def pin_uses(doc: dict, board: dict | None = None) -> list[tuple[tuple[str, int], Where]]:
    """Every pin the description takes: (("gpio", n) or ("adc", channel) when no board maps it, path)."""
    out: list[tuple[tuple[str, int], Where]] = []
    for name, bus in doc.get("buses", {}).items():
        for key in ("tx", "rx", "de") if bus["type"] == "rs485" else ("sda", "scl"):
            if key in bus:
                out.append((("gpio", bus[key]), ("buses", name, key)))
    adc_pins = (board or {}).get("io", {}).get("adc")
    for i, m in enumerate(doc["machines"]):
        for name in ("run", "trip"):
            c = m["state"].get(name)
            if c is not None and "di" in c:
                out.append((("gpio", c["di"]), ("machines", i, "state", name, "di")))
        for j, s in enumerate(m["signals"]):
            src = s["source"]
            for key in ("di", "pulse"):
                if key in src:
                    out.append((("gpio", src[key]), ("machines", i, "signals", j, "source", key)))
            if "adc" in src:
                ch = src["adc"]
                pin = ("gpio", adc_pins[ch]) if adc_pins is not None and ch < len(adc_pins) else ("adc", ch)
                out.append((pin, ("machines", i, "signals", j, "source", "adc")))
    return out


def _pins(doc: dict, board: dict | None) -> Iterator[tuple[Where, str]]:
    first: dict[tuple[str, int], Where] = {}
    for pin, path in pin_uses(doc, board):
        if pin in first:
            what = "GPIO %d" % pin[1] if pin[0] == "gpio" else "ADC channel %d" % pin[1]
            yield path, "%s is used by %s too" % (what, where(doc, first[pin]))
        else:
            first[pin] = path


def _i2c_chips(doc: dict, defaulted: set) -> Iterator[tuple[Where, str]]:
    first: dict[tuple, Where] = {}
    for i, m in enumerate(doc["machines"]):
        for j, s in enumerate(m["signals"]):
            src = s["source"]
            if "i2c" not in src:
                continue
            key = (src["i2c"], src["address"], src.get("channel"))
            path = ("machines", i, "signals", j, "source")
            if key in first:
                what = "channel %d of the ADS1115 at address %d" % (key[2], key[1]) if key[2] is not None else \
                    "the MCP9600 at address %d" % key[1]
                yield path, "%s on bus %s is read by %s too" % (what, _q(key[0]), where(doc, first[key]))
            else:
                first[key] = path
