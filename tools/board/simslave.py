"""The plant simulator's machines as a plant description read over Modbus RTU: the demo's and the tests' plant.

`description(plant)` (docs/PLANT.md) has one device profile per machine kind and one slave per machine
(unit = its index + 1 unless `units` says otherwise):

    holding registers 2i, 2i+1   channel i of the machine's kind (the sample line's keys, in order) as int32,
                                 big endian (ABCD), in hundredths of its unit
    discrete input 0             running (the PLC state RUNNING)
    discrete input 1             tripped (the PLC state TRIPPED)

and each signal with the alarm points of the simulator's own alarm bank (its limits, hysteresis, delays,
priorities, running-only arming and interlocks), so what the node's engine logs can be compared line by
line with the simulator's own log. tools/board/rig.py serves it: pymodbus's RTU slaves answer those
registers from the running simulator (a missing reading, a sensor fault, as a value outside every range:
the node logs it BAD, why=range). Tools and tests only: the product never imports this.
"""

from __future__ import annotations


from shared import plant as plantsim
from shared import plant_alarms
from shared.plant_catalogue import (KEY, KIND_WORDS, KINDS, NCH, PUMP_VIBRATION_WORDS, SETTLE_S, TAG, TRIPS, UNIT,
                                    UNIT_X, WORDS)
_LEVEL_NAMES = tuple(x.decode() for x in plant_alarms.LEVELS)


def channels(kind: int) -> list[int]:
    """The channels a machine of this kind has, in its sample line's order."""
    return [ch for ch in range(NCH) if KEY[kind * NCH + ch] is not None]


def bus_for(prof: dict) -> dict:
    """An RS-485 bus for a board profile: the first UART that is not the link's, on pins its `io` allows (a
    matrix UART, an ESP32-S3's, on GPIO4/5), driver enable on the next free GPIO."""
    io = prof.get("io") or {}
    link = prof["uart"]["id"]
    uid, pins = next(((int(u), p) for u, p in sorted((io.get("uart") or {"1": {}}).items()) if int(u) != link),
                     (1, {}))
    tx = (pins.get("tx") or [4])[0]
    rx = (pins.get("rx") or [5])[0]
    return {"uart": uid, "tx": tx, "rx": rx, "de": max(tx, rx) + 1 if max(tx, rx) + 1 not in (23, 24, 25) else 2}


def description(plant: plantsim.Plant, name: str = "sim-plant", units: dict[int, int] | None = None,
                bus: dict | None = None, poll_ms: int = 1000) -> dict:
    """The plant description (docs/PLANT.md) of `plant` read over Modbus from PlantSlaves with the same units:
    the simulator's own alarm points, in engineering units."""
    units = units or {m: m + 1 for m in range(plant.n)}
    bank = plant.bank
    profiles: dict = {}
    devices: dict = {}
    machines = []
    for m in range(plant.n):
        k = plant.kind[m]
        kind = KINDS[k]
        chs = channels(k)
        if kind not in profiles:
            regs = {KEY[k * NCH + ch].decode(): {"register": "holding", "address": 2 * i, "data_type": "int32",
                                                 "byte_order": "ABCD", "scale": 0.01}
                    for i, ch in enumerate(chs)}
            regs["running"] = {"register": "discrete", "address": 0, "data_type": "bool"}
            regs["tripped"] = {"register": "discrete", "address": 1, "data_type": "bool"}
            profiles[kind] = {"title": "simulated %s (tools/board/simslave.py)" % kind, "registers": regs}
        dev = "unit%d" % units[m]
        devices[dev] = {"profile": kind, "bus": "rs485", "unit": units[m], "poll_ms": poll_ms}
        signals = []
        for ch in chs:
            key = KEY[k * NCH + ch].decode()
            tag = TAG[k * NCH + ch]
            unit = (UNIT_X[k] if ch == NCH - 1 else UNIT[ch]).decode()
            words = list(WORDS[tag]) + (list(PUMP_VIBRATION_WORDS) if tag == b"vibration" and kind == "pump" else [])
            i = m * NCH + ch
            sig = {"key": key, "tag": tag.decode(), "unit": unit, "decimals": 0 if unit == "rpm" else 1,
                   "words": words, "source": {"device": dev, "register": key},
                   "range": [plant.lo[i] / 100, plant.hi[i] / 100], "alarms": []}
            for j in range(plant.npts[m]):
                p = m * plantsim.MAXP + j
                if plant.pch[p] != ch:
                    continue
                lv = _LEVEL_NAMES[bank.level[p]]
                if lv == "BAD":
                    sig["bad"] = {"on_delay_s": bank.on_delay[p], "off_delay_s": bank.off_delay[p],
                                  "priority": bank.prio[p]}
                    continue
                a = {"level": lv, "limit": bank.limit[p] / 100, "hysteresis": bank.deadband[p] / 100,
                     "on_delay_s": bank.on_delay[p], "off_delay_s": bank.off_delay[p], "priority": bank.prio[p]}
                if plant.prun[p]:
                    a["when"] = "running"
                if plant.ptrip[p]:
                    a["interlock"] = TRIPS[plant.ptrip[p]].decode()
                sig["alarms"].append(a)
            signals.append(sig)
        n = sum(1 for q in range(m + 1) if plant.kind[q] == k)
        machines.append({"id": plant.ids[m], "kind": kind, "words": list(KIND_WORDS[k]), "aliases": ["%s %d" % (kind, n)],
                         "state": {"run": {"device": dev, "register": "running"},
                                   "trip": {"device": dev, "register": "tripped"}, "settle_s": SETTLE_S},
                         "sample_s": plant.sample_every, "signals": signals})
    rs485 = {"type": "rs485", "uart": 1, "tx": 4, "rx": 5, "de": 3, "baud": 19200, "parity": "even", "stop_bits": 1,
             "timeout_ms": 200}
    rs485.update(bus or {})
    return {"format": "edgetwin-plant/1", "name": name, "title": "the plant simulator behind Modbus slaves",
            "timezone": "UTC", "buses": {"rs485": rs485}, "profiles": profiles, "devices": devices,
            "machines": machines}
