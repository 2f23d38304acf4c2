"""Compile a checked plant description into the board's `/plant.json` (docs/PLANT.md, "The compiled form"),
and hash it.

    data = plantcompile.compile_plant(desc, board)   # desc from host/plantfile.load; bytes, ASCII JSON
    plantcompile.plant_hash(data)                    # "3f2a..." (16 hex digits): the node's PLANT line names it

The output is canonical: compact JSON (`separators=(",", ":")`), the top-level object's keys sorted,
ASCII only, every list in the description's order, every number an int. So one description compiles to
the same bytes on every gateway, and its hash names it. Values are ints in each signal's internal unit,
10**-(decimals + 1) of its engineering unit; scalings are host/plantscale.py's. Choices the document
leaves to the compiler:

- a signal without a range has lo 1, hi 0 (lo > hi: no range check); so has every adc and ads1115
  signal, whose range is its scaling (NAMUR limits judge a loop, not the range);
- `units` lists only the devices a signal or contact reads, in the order of `devices`; each one's batches
  are sorted by function code, then address; a batch covers the registers (bits for coils and discrete
  inputs) its values use, gaps of up to 8 merged, at most 125 registers or 2000 bits;
- `offset` is the register's (or bit's) distance from its batch's start;
- a Modbus value's word_order / byte_order: AB and ABCD are 0, 0; BA is 0, 1; CDAB 1, 0; BADC 0, 1; DCBA 1, 1;
- `gap_us` is the bus's gap_ms, or for 0 the standard 3.5 characters of 11 bits (1750 us above 19200 baud);
- `de` is -1 for an auto-direction transceiver;
- a contact signal's `one` is 10**(decimals + 1): a closed contact reads 1 in the engineering unit;
- the simulator's own description compiles too (for its hash): its signals' source is [0] and the
  object has "sim": 1; a board never loads it.
"""

from __future__ import annotations

import hashlib
import json

from host import plantrules, plantscale
from host.plantrules import source_kind

FORMAT = 1
FC = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}
MAX_REGS, MAX_BITS, MAX_GAP = 125, 2000, 8
TYPES = {"int16": 0, "uint16": 1, "int32": 2, "uint32": 3, "float32": 4, "bool": 5}
ORDERS = {"AB": (0, 0), "BA": (0, 1), "ABCD": (0, 0), "CDAB": (1, 0), "BADC": (0, 1), "DCBA": (1, 1)}
PARITY = {"none": 0, "even": 1, "odd": 2}
LEVELS = {"HI": 0, "HIHI": 1, "LO": 2, "LOLO": 3}
PRIORITY = {"low": 1, "medium": 2, "high": 3, "critical": 4}
THERMOCOUPLES = "KJTNSEBR"
PULL = {"none": 0, "up": 1, "down": 2}
EDGE = {"rising": 1, "falling": 2, "both": 3}
NO_RANGE = (1, 0)


def plant_hash(data: bytes) -> str:
    """The description's hash: the first 16 hex digits of the SHA-256 of its compiled bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def compile_plant(desc: dict, board: dict | None = None) -> bytes:
    """The compiled form of a description host/plantfile.py checked (and filled in). board: the validated
    profile it runs on; None: the profile the description's "board" names (only ADC pins depend on it)."""
    if board is None and desc.get("board"):
        from host import board_profile

        board = board_profile.resolve(desc["board"])
    out = _Compiler(desc, board).build()
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def batches(items: list[tuple[int, int, int]]) -> list[list[int]]:
    """[[fc, start, count], ...] covering (fc, address, length) items: runs of one table with gaps of at
    most MAX_GAP merged, each at most MAX_REGS registers (MAX_BITS bits), sorted by fc then start."""
    out: list[list[int]] = []
    for fc, addr, n in sorted(set(items)):
        end = addr + n - 1
        limit = MAX_BITS if fc <= 2 else MAX_REGS
        if out and out[-1][0] == fc:
            cur = out[-1]
            cur_end = cur[1] + cur[2] - 1
            if addr - cur_end - 1 <= MAX_GAP and max(end, cur_end) - cur[1] + 1 <= limit:
                cur[2] = max(end, cur_end) - cur[1] + 1
                continue
        out.append([fc, addr, n])
    return out


def _words(reg: dict) -> int:
    return 2 if reg["data_type"] in ("int32", "uint32", "float32") else 1


def _prio(p: str | int) -> int:
    return PRIORITY[p] if isinstance(p, str) else int(p)


class _Compiler:
    def __init__(self, desc: dict, board: dict | None) -> None:
        self.d = desc
        self.board = board
        self.rs485 = [n for n, b in desc.get("buses", {}).items() if b["type"] == "rs485"]
        self.i2c = [n for n, b in desc.get("buses", {}).items() if b["type"] == "i2c"]
        self.contacts: list[list[int]] = []
        self.interlocks: list[str] = []

    def build(self) -> dict:
        d = self.d
        buses = d.get("buses", {})
        out: dict = {"f": FORMAT, "name": d["name"], "tz": d["timezone"],
                     "rs485": [self._rs485(buses[n]) for n in self.rs485],
                     "i2c": [[buses[n]["id"], buses[n]["sda"], buses[n]["scl"], buses[n]["freq"]] for n in self.i2c],
                     "units": self._units()}
        machines, signals, alarms, bad = [], [], [], []
        for mi, m in enumerate(d["machines"]):
            base = len(signals)
            for s in m["signals"]:
                si = len(signals)
                signals.append(self._signal(mi, s))
                for a in s.get("alarms", ()):
                    alarms.append(self._alarm(si, s, a))
                if s["bad"] is not False:
                    b = s["bad"]
                    bad.append([si, plantrules.delay_count(b["on_delay_s"], s["period_ms"]),
                                plantrules.delay_count(b["off_delay_s"], s["period_ms"]), _prio(b["priority"])])
            machines.append(self._machine(m, base))
        out.update(machines=machines, contacts=self.contacts, signals=signals, alarms=alarms, bad=bad,
                   interlocks=self.interlocks)
        if d.get("simulator"):
            out["sim"] = 1
        return out

    # ---- buses and Modbus units ----

    @staticmethod
    def _rs485(b: dict) -> list[int]:
        if b["gap_ms"]:
            gap_us = round(plantscale.exact(b["gap_ms"]) * 1000)
        else:  # 3.5 characters of 11 bits; a fixed 1750 us above 19200 baud (the Modbus serial line spec)
            gap_us = 1750 if b["baud"] > 19200 else -(-3_500_000 * 11 // b["baud"])
        return [b["uart"], b["tx"], b["rx"], b.get("de", -1), b["baud"], PARITY[b["parity"]], b["stop_bits"],
                b["timeout_ms"], gap_us]

    def _register(self, device: str, register: str) -> dict:
        d = self.d
        return d["profiles"][d["devices"][device]["profile"]]["registers"][register]

    def _units(self) -> list:
        """The Modbus units and their batches; self.where maps (device, register) -> (unit, batch, offset)."""
        used: dict[str, set[str]] = {}
        for m in self.d["machines"]:
            refs = [m["state"][k] for k in ("run", "trip") if k in m["state"]] + [s["source"] for s in m["signals"]]
            for r in refs:
                if "device" in r:
                    used.setdefault(r["device"], set()).add(r["register"])
        self.where: dict[tuple[str, str], tuple[int, int, int]] = {}
        units = []
        for name, dev in self.d.get("devices", {}).items():
            if name not in used:
                continue
            regs = {r: self._register(name, r) for r in sorted(used[name])}
            bl = batches([(FC[g["register"]], g["address"], _words(g)) for g in regs.values()])
            for r, g in regs.items():
                fc = FC[g["register"]]
                k = next(i for i, b in enumerate(bl) if b[0] == fc and b[1] <= g["address"] < b[1] + b[2])
                self.where[(name, r)] = (len(units), k, g["address"] - bl[k][1])
            units.append([self.rs485.index(dev["bus"]), dev["unit"], dev["poll_ms"], bl])
        return units

    # ---- machines and contacts ----

    def _contact(self, c: dict | None) -> int:
        if c is None:
            return -1
        if "di" in c:
            entry = [1, c["di"], 1 if c["active"] == "high" else 0, PULL[c["pull"]], c["debounce_ms"], int(c["invert"])]
        else:
            reg = self._register(c["device"], c["register"])
            unit, batch, offset = self.where[(c["device"], c["register"])]
            entry = [2, unit, batch, offset, reg.get("bit", -1), int(c["invert"])]
        self.contacts.append(entry)
        return len(self.contacts) - 1

    def _machine(self, m: dict, base: int) -> list:
        st = m["state"]
        run, trip = self._contact(st.get("run")), self._contact(st.get("trip"))
        cur, above = -1, 0
        if "current" in st:
            j = next(j for j, s in enumerate(m["signals"]) if s["key"] == st["current"]["signal"])
            cur = base + j
            above = plantscale.units(st["current"]["above"], m["signals"][j]["decimals"])
        return [m["id"], m["kind"], m["sample_s"], st["settle_s"], run, trip, cur, above]

    # ---- signals and alarms ----

    def _signal(self, mi: int, s: dict) -> list:
        d = s["decimals"]
        kind = source_kind(s["source"])
        lo, hi = NO_RANGE
        if "range" in s and kind not in ("adc", "ads1115"):
            lo, hi = plantscale.units(s["range"][0], d), plantscale.units(s["range"][1], d)
        head = [mi, s["key"], s["tag"], s["unit"], d, s["period_ms"], plantscale.units(s["deadband"], d), lo, hi]
        return head + self._source(s, kind)

    def _source(self, s: dict, kind: str) -> list:
        src, d = s["source"], s["decimals"]
        if kind == "modbus":
            reg = self._register(src["device"], src["register"])
            unit, batch, offset = self.where[(src["device"], src["register"])]
            word, byte = ORDERS[reg["byte_order"]]
            k = plantscale.modbus(reg, d)
            return [1, unit, batch, offset, TYPES[reg["data_type"]], word, byte, reg.get("bit", -1),
                    k.mul, k.shift, k.add]
        if kind == "adc":
            a, b = plantscale.adc(src, s["range"], d)
            pins = (self.board or {}).get("io", {}).get("adc", [])
            pin = pins[src["adc"]] if src["adc"] < len(pins) else None
            if pin is None:
                raise ValueError("an ADC source needs the board's profile (with its io section) to compile")
            return [2, pin, src["samples"], _mode(src), a.mul, a.shift, b.mul, b.shift, b.add]
        if kind == "ads1115":
            a, b = plantscale.ads1115(src, s["range"], d)
            return [3, self.i2c.index(src["i2c"]), src["address"], src["channel"],
                    plantscale.ADS_GAINS.index(src["gain"]), _mode(src), a.mul, a.shift, b.mul, b.shift, b.add]
        if kind == "mcp9600":
            k = plantscale.mcp9600(d)
            return [4, self.i2c.index(src["i2c"]), src["address"], THERMOCOUPLES.index(src["thermocouple"]),
                    k.mul, k.shift, k.add]
        if kind == "pulse":
            k = plantscale.pulses(src, d, s["period_ms"])
            return [5, src["pulse"], 1 if src["measure"] == "rate" else 0, k.mul, k.shift, k.add, EDGE[src["edge"]],
                    PULL[src["pull"]]]
        if kind == "contact":
            return [6, src["di"], 1 if src["active"] == "high" else 0, PULL[src["pull"]], src["debounce_ms"],
                    10 ** (d + 1)]
        return [0]  # the simulator's

    def _alarm(self, si: int, s: dict, a: dict) -> list:
        d, period = s["decimals"], s["period_ms"]
        lock = -1
        if "interlock" in a:
            if a["interlock"] not in self.interlocks:
                self.interlocks.append(a["interlock"])
            lock = self.interlocks.index(a["interlock"])
        return [si, LEVELS[a["level"]], plantscale.units(a["limit"], d), plantscale.units(a["hysteresis"], d),
                plantrules.delay_count(a["on_delay_s"], period), plantrules.delay_count(a["off_delay_s"], period),
                _prio(a["priority"]), 1 if a["when"] == "running" else 0, lock]


def _mode(src: dict) -> int:
    return 0 if src["input"] == "4-20mA" else 1
