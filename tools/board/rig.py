"""A test rig: the plant simulator wired to a board's inputs as a plant description says they are wired.

For every machine of a description the rig takes a simulated machine of the same kind (shared/plant.py;
the description's machine ids and names are its own), and for every signal the simulated channel that
measures the same thing (same tag, else same key, else the same unit). Then, every simulated second:

- Modbus devices: pymodbus RTU slaves on the bus's pty (a virtual board's `bus_port`, the emulated
  RP2040's `uart1_port`) answer each device's registers with the simulated value, encoded as the
  profile says (data type, byte order, scale, offset); run / trip contacts read as Modbus bools follow
  the simulated PLC (running, tripped);
- on the emulated RP2040 (tools/board/emuboard.py), a 4-20 mA loop or a voltage on an ADC pin gets the
  volts the transmitter and the shunt would give, a contact on a GPIO its level, an MCP9600 its
  thermocouple's temperature and an ADS1115 its channels' volts.

`hold(machine_id, key, **what)` pins one input to a fault (a broken loop: `volts=0`; a contact: `level=1`;
`manual=True`: the rig leaves it alone, for a test that plays it itself) until `release`. `absent` names
(device, register) pairs the slaves do not have (a read of them is an ILLEGAL ADDRESS exception).
`BusRelay` sits between the slaves and the board to put faults on the bus itself: corrupted answers,
noise between frames, a unit gone silent. Tools and tests only: the product never imports this.

    rig = Rig(desc, plant, bus_port=board.uart1_port, board=board).start()
"""

from __future__ import annotations

import asyncio
import functools
import struct
import threading
import time

from shared import plant as plantsim
from shared.plant_catalogue import KEY, KINDS, NCH, TAG, UNIT, UNIT_X
from shared.plant_faults import MISSING

_FC = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}
_ORDER = {"AB": (0, 1), "BA": (1, 0)}


def _sim_channel(kind: int, sig: dict) -> int | None:
    """The simulated channel of a machine of `kind` that a described signal measures."""
    chans = [ch for ch in range(NCH) if KEY[kind * NCH + ch] is not None]
    for ch in chans:
        if TAG[kind * NCH + ch].decode() == sig["tag"]:
            return ch
    for ch in chans:
        if KEY[kind * NCH + ch].decode() == sig["key"]:
            return ch
    for ch in chans:
        unit = UNIT_X[kind] if ch == NCH - 1 else UNIT[ch]
        if unit is not None and unit.decode() == sig["unit"]:
            return ch
    return None


def encode(value: float, reg: dict) -> list[int]:
    """A register definition's 16-bit words for an engineering value (the inverse of the board's decoding)."""
    t = reg.get("data_type", "uint16")
    raw = (value - reg.get("offset", 0)) / reg.get("scale", 1)
    order = reg.get("byte_order", "ABCD" if t in ("int32", "uint32", "float32") else "AB")
    if t == "float32":
        b = struct.pack(">f", raw)
    elif t in ("int32", "uint32"):
        v = int(round(raw))
        v = max(-(1 << 31), min((1 << 31) - 1, v)) if t == "int32" else max(0, min((1 << 32) - 1, v))
        b = struct.pack(">i" if t == "int32" else ">I", v)
    else:
        v = int(round(raw))
        v = max(-(1 << 15), min((1 << 15) - 1, v)) if t == "int16" else max(0, min(0xFFFF, v))
        b = struct.pack(">h" if t == "int16" else ">H", v)
    if len(b) == 4:  # ABCD is b; CDAB swaps the words, BADC the bytes in each, DCBA both
        idx = {"ABCD": (0, 1, 2, 3), "CDAB": (2, 3, 0, 1), "BADC": (1, 0, 3, 2), "DCBA": (3, 2, 1, 0)}[order]
        b = bytes(b[i] for i in idx)
    elif order == "BA":
        b = b[::-1]
    return [b[i] << 8 | b[i + 1] for i in range(0, len(b), 2)]


class Rig:
    def __init__(self, desc: dict, plant: plantsim.Plant, bus_port: str | None = None, board=None,
                 tick_s: float = 1.0, machines: dict[str, int] | None = None, absent: tuple = ()) -> None:
        """desc: a checked description (host/plantfile.load); plant: the simulator; bus_port: the pty of
        the board's RS-485 bus (where the slaves go); board: an EmuBoard for ADC, GPIO and I2C inputs;
        machines: description id -> simulated machine index (default: by kind, in order)."""
        self.desc = desc
        self.plant = plant
        self.bus_port = bus_port
        self.board = board
        self.tick_s = tick_s
        self.absent = set(absent)
        self.lines: list[tuple[int, str]] = []  # the simulator's own log: the ground truth
        self.requests = 0
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], dict] = {}
        self._stop = threading.Event()
        self.map = machines or self._map_machines()
        self._values: dict[tuple[str, str], float | None] = {}
        self._state: dict[str, int] = {}
        self._snapshot()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._server = None
        self._loop = None
        self._dev_regs = self._device_registers()

    # ---- which simulated machine and channel each described one is ----

    def _map_machines(self) -> dict[str, int]:
        used: set[int] = set()
        out = {}
        for m in self.desc["machines"]:
            k = KINDS.index(m["kind"]) if m["kind"] in KINDS else 0
            idx = next((i for i in range(self.plant.n) if self.plant.kind[i] == k and i not in used), None)
            if idx is None:
                idx = next(i for i in range(self.plant.n) if i not in used)
            used.add(idx)
            out[m["id"]] = idx
        return out

    def _snapshot(self) -> None:
        p = self.plant
        for m in self.desc["machines"]:
            i = self.map[m["id"]]
            self._state[m["id"]] = p.plc[i]
            for sig in m["signals"]:
                ch = _sim_channel(p.kind[i], sig)
                v = p.meas[i * NCH + ch] if ch is not None else MISSING
                self._values[(m["id"], sig["key"])] = None if v == MISSING else v / 100

    def value(self, machine: str, key: str) -> float | None:
        """The simulated value a described signal reads now (None: the sensor gives nothing)."""
        return self._values.get((machine, key))

    def contact(self, machine: str, which: str) -> bool:
        st = self._state[machine]
        return st == plantsim.RUNNING if which == "run" else st == plantsim.TRIPPED

    # ---- faults ----

    def hold(self, machine: str, key: str, **what) -> None:
        """Pin an input to a fault: volts=... (an ADC loop), level=... (a contact: key "run" or "trip")."""
        with self._lock:
            self._held[(machine, key)] = what
        self._drive_board()

    def release(self, machine: str, key: str) -> None:
        with self._lock:
            self._held.pop((machine, key), None)
        self._drive_board()

    # ---- the simulated second ----

    def step(self) -> None:
        with self._lock:
            self.lines += self._advance()
            self._snapshot()
        self._drive_board()

    def _advance(self) -> list[tuple[int, str]]:
        """One simulated second; the plant's log lines of it as (tick, line). A rig over another simulator
        (tools/plants/serve.py) overrides this, `_map_machines` and `_snapshot` (which fills `_values` and
        `_state`, a shared/plant.py PLC state per machine id)."""
        self.plant.step()
        return [(self.plant.tick, ln) for ln in self.plant.lines()]

    def _drive_board(self) -> None:
        b = self.board
        if b is None:
            return
        buses = self.desc.get("buses", {})
        for m in self.desc["machines"]:
            mid = m["id"]
            for which in ("run", "trip"):
                c = m["state"].get(which)
                if isinstance(c, dict) and "di" in c:
                    level = self.contact(mid, which) != c.get("invert", False)
                    if c.get("active", "high") == "low":
                        level = not level
                    held = self._held.get((mid, which))
                    if not (held and held.get("manual")):
                        b.set_pin(c["di"], int(held["level"]) if held else int(level))
            for sig in m["signals"]:
                src = sig["source"]
                v = self._values.get((mid, sig["key"]))
                held = self._held.get((mid, sig["key"]), {})
                if held.get("manual"):
                    continue
                if "adc" in src:
                    volts = held.get("volts", _loop_volts(sig, src, v))
                    b.set_adc(src["adc"], volts=volts)
                elif "di" in src:
                    b.set_pin(src["di"], int(held.get("level", bool(v))))
                elif src.get("chip") == "mcp9600":
                    bus = buses[src["i2c"]]["id"]
                    b.i2c_device("mcp9600", bus, src.get("address", 0x60), hot_c=held.get("hot_c", v if v is not None else 0),
                                 cold_c=25.0)
                elif src.get("chip") == "ads1115":
                    bus = buses[src["i2c"]]["id"]
                    volts = held.get("volts", _loop_volts(sig, src, v))
                    chans = [0.0] * 4
                    chans[src.get("channel", 0)] = volts
                    b.i2c_device("ads1115", bus, src.get("address", 0x48), volts=chans)

    # ---- Modbus ----

    def _device_registers(self) -> dict[str, list[tuple]]:
        """device -> [(fc, address, register def, machine id, key or "run"/"trip")] of what the board reads."""
        out: dict[str, list[tuple]] = {}
        profiles = self.desc.get("profiles", {})
        devices = self.desc.get("devices", {})
        for m in self.desc["machines"]:
            refs = [(m["state"].get(w), w) for w in ("run", "trip")]
            refs += [(s["source"], s["key"]) for s in m["signals"]]
            for src, key in refs:
                if isinstance(src, dict) and "device" in src and (src["device"], src["register"]) not in self.absent:
                    dev = src["device"]
                    reg = profiles[devices[dev]["profile"]]["registers"][src["register"]]
                    out.setdefault(dev, []).append((_FC[reg["register"]], reg["address"], reg, m["id"], key, src))
        return out

    async def _action(self, devs: tuple, fc: int, start: int, address: int, count: int, registers: list[int],
                      values) -> None:
        with self._lock:
            self.requests += 1
            for rfc, addr, reg, mid, key, src in (r for d in devs for r in self._dev_regs.get(d, ())):
                if (rfc in (1, 2)) != (fc in (1, 2)) or (rfc in (3, 4) and rfc != fc):
                    continue
                if key in ("run", "trip"):
                    v: float | None = 1.0 if self.contact(mid, key) != src.get("invert", False) else 0.0
                else:
                    v = self._values.get((mid, key))
                if fc in (1, 2):  # bits: 16 to a register, LSB first
                    word, bit = divmod(addr - start, 16)
                    if v:
                        registers[word] |= 1 << bit
                    else:
                        registers[word] &= ~(1 << bit)
                elif reg.get("data_type") == "bool":
                    b = reg.get("bit", 0)
                    i = addr - start
                    registers[i] = (registers[i] | (1 << b)) if v else (registers[i] & ~(1 << b))
                else:
                    words = encode(v, reg) if v is not None else [0x8000] + [0] * (1 if "32" in reg.get(
                        "data_type", "") else 0)
                    registers[addr - start:addr - start + len(words)] = words
        return None

    def _devices(self) -> list:
        from pymodbus.simulator import DataType, SimData, SimDevice

        out = []
        units: dict[int, list[str]] = {}  # one slave per unit id: several devices may share one (a multi-drive box)
        for dev in sorted(self._dev_regs):
            units.setdefault(self.desc["devices"][dev]["unit"], []).append(dev)
        for unit, devs in sorted(units.items()):
            regs = [r for d in devs for r in self._dev_regs[d]]
            top = {fc: max([a + 2 for f, a, *_ in regs if f == fc] + [1]) for fc in (1, 2, 3, 4)}
            bits = lambda n: [SimData(0, values=[False] * (16 * ((n + 15) // 16)), datatype=DataType.BITS)]  # noqa: E731
            words = lambda n: [SimData(0, values=[0] * n, datatype=DataType.REGISTERS)]  # noqa: E731
            out.append(SimDevice(id=unit, simdata=(bits(top[1]), bits(top[2]), words(top[3]), words(top[4])),
                                 use_bit_addressing=True, action=functools.partial(self._action, tuple(devs))))
        return out

    async def _serve(self) -> None:
        from pymodbus.server import ModbusSerialServer

        self._loop = asyncio.get_running_loop()
        bus = next((b for b in self.desc.get("buses", {}).values() if b.get("type") == "rs485"), {})
        # the slaves sit on a pty: no parity bit to set there (the board side frames as the description says)
        self._server = ModbusSerialServer(self._devices(), port=self.bus_port, baudrate=bus.get("baud", 19200),
                                          bytesize=8, parity="N", stopbits=1)
        await self._server.serve_forever(background=True)
        self.ready.set()
        await self._server.serving

    def _run_server(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # noqa: BLE001  (reported by start())
            self.error = e
            self.ready.set()

    def _run_plant(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            nxt += self.tick_s
            self.step()
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def start(self, timeout: float = 10.0) -> "Rig":
        if self.bus_port and self._dev_regs:
            threading.Thread(target=self._run_server, name="rig-slaves", daemon=True).start()
            if not self.ready.wait(timeout) or self.error is not None:
                raise RuntimeError("the rig's Modbus slaves did not start on %s: %s" % (self.bus_port, self.error))
        self._drive_board()
        threading.Thread(target=self._run_plant, name="rig-plant", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None and self._loop is not None and self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._server.shutdown(), self._loop).result(5)
            except Exception:  # noqa: BLE001  (already gone)
                pass
        self._server = None


class BusRelay:
    """The RS-485 bus between the slaves (they open `slave_port`) and the board's end (`board_port`, opened
    here), with faults on demand: `corrupt` flips a bit of every answer (a bad CRC), `noise` puts 5 noise
    bytes on the bus 1 ms after every answer (between frames), `silent` holds unit ids whose requests go
    nowhere (a unit gone from the bus)."""

    NOISE = b"\x00\xff\x55\xaa\x13"

    def __init__(self, board_port: str) -> None:
        import os

        from tools.board.ptys import PtyEnd, set_raw

        self.end = PtyEnd()
        self.slave_port = self.end.path
        self.fd = os.open(board_port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        set_raw(self.fd)
        self.corrupt = False
        self.noise = False
        self.silent: set[int] = set()
        self.counts = {"requests": 0, "answers": 0, "corrupted": 0, "noise": 0, "dropped": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bus-relay", daemon=True)

    def start(self) -> "BusRelay":
        self._thread.start()
        return self

    def _run(self) -> None:
        import os
        import select

        from tools.board.ptys import write_all

        pending = b""
        while not self._stop.is_set():
            r, _, _ = select.select([self.fd, self.end.master], [], [], 0.01)
            if self.fd in r:
                try:
                    pending += os.read(self.fd, 4096)
                except OSError:
                    pending = b""
                while len(pending) >= 8:  # requests are whole 8-byte frames (functions 1..4)
                    req, pending = pending[:8], pending[8:]
                    self.counts["requests"] += 1
                    if req[0] in self.silent:
                        self.counts["dropped"] += 1
                    else:
                        write_all(self.end.master, req)
            if self.end.master in r:
                try:
                    data = bytearray(os.read(self.end.master, 4096))
                except OSError:
                    continue
                self.counts["answers"] += 1
                if self.corrupt and data:
                    data[min(3, len(data) - 1)] ^= 0x10
                    self.counts["corrupted"] += 1
                write_all(self.fd, bytes(data))
                if self.noise:
                    time.sleep(0.001)
                    write_all(self.fd, self.NOISE)
                    self.counts["noise"] += 1

    def stop(self) -> None:
        import os

        self._stop.set()
        self._thread.join(2)
        self.end.close()
        try:
            os.close(self.fd)
        except OSError:
            pass


def _loop_volts(sig: dict, src: dict, v: float | None) -> float:
    """The volts at an ADC input for a value: a 4-20 mA transmitter through the shunt, or a voltage input."""
    if v is None:
        return 0.0  # a transmitter without power: the loop reads 0 mA (BAD: loop_low)
    lo, hi = sig["range"]
    frac = (v - lo) / (hi - lo) if hi != lo else 0.0
    if src.get("input", "4-20mA") == "4-20mA":
        ma = max(3.8, min(20.5, 4 + 16 * frac))  # a transmitter saturates inside NAMUR's 3.8-20.5 mA
        return ma / 1000 * src.get("shunt_ohm", 150)
    v0, v1 = src.get("volts", [0, 3.3])
    return v0 + (v1 - v0) * max(0.0, min(1.0, frac))


class RigError(ValueError):
    """A description the rig cannot wire (the checker's one line, or a pin the board cannot drive)."""


def rig_for(path, prof: dict, board=None, bus_port: str | None = None, seed: int = 1) -> Rig:
    """A started rig for the description at `path` on a board of profile `prof`: a simulator with a machine of
    each described kind (in hand mode: running), its inputs driven on `board` (an EmuBoard) and its Modbus
    devices served on `bus_port`. The description is checked against the board first (RigError)."""
    from host import plantfile
    from shared.plant_catalogue import KINDS as SIM_KINDS

    try:
        desc = plantfile.load(path, prof)
    except plantfile.PlantFileError as e:
        raise RigError(str(e)) from None
    kinds = [m["kind"] if m["kind"] in SIM_KINDS else "pump" for m in desc["machines"]]
    sim = plantsim.Plant(seed, kinds=kinds, fault_every_h=8)
    for mid in sim.ids:
        sim.command(mid, "start")
    if board is not None:
        bus = next((b for b in desc.get("buses", {}).values() if b.get("type") == "rs485"), None)
        if bus is not None and bus.get("de", -1) >= 0:
            board.set_de_pin(bus["de"])
    return Rig(desc, sim, bus_port=bus_port, board=board).start()


def rs485_uarts(path, prof: dict) -> tuple:
    """The UART ids of the RS-485 buses the description at `path` has (a virtual board makes a pty of each)."""
    from host import plantfile

    try:
        desc = plantfile.load(path, prof)
    except plantfile.PlantFileError as e:
        raise RigError(str(e)) from None
    return tuple(b["uart"] for b in desc.get("buses", {}).values() if b.get("type") == "rs485")
