"""A node on the real rp2 firmware in the emulated RP2040 reads every kind of input a plant description has.

The firmware `make firmware` built (the node frozen) runs in rp2040js (tools/board/emuboard.py); the rig
(tools/board/rig.py) wires the plant simulator to it as the description below says: a 4-20 mA loop on
ADC0 through a 150 ohm shunt, the run contact on GP10, an MCP9600 thermocouple amplifier and an ADS1115
ADC (a second loop) on I2C0, and a drive over Modbus RTU on UART1 (GP8/GP9, DE on GP2, 19200 8E1) whose
slave is pymodbus's, behind a relay that puts faults on the bus. A second unit (9) never answers, and one
register the drive lacks answers with an exception. The gateway's Session stores what the node logs;
each phase checks it: the values of every source, BAD with its reason for a silent unit, an exception, a
broken loop, corrupted answers (and each one recovers), noise on the bus changing nothing, a bouncing run
contact giving one state change, and the driver-enable timing the emulator measured on the wire.

Board time runs 5-10x slower than the host's here: each phase waits on the log, not on a clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host import plantcompile, plantdesc, plantfile
from host.session import Session
from host.store import LogStore
from shared import plant
from tools.board import emuboard, rig

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MPREMOTE = str(Path(sys.executable).parent / "mpremote")
BAD = {"on_delay_s": 2, "off_delay_s": 2, "priority": "low"}
DESC = {
    "format": "edgetwin-plant/1", "name": "emu-skid", "timezone": "UTC", "board": "rp2040_pico",
    "buses": {"rs485": {"type": "rs485", "uart": 1, "tx": 8, "rx": 9, "de": 2, "baud": 19200, "parity": "even",
                        "timeout_ms": 100},
              "i2c": {"type": "i2c", "id": 0, "sda": 4, "scl": 5, "freq": 100000}},
    "profiles": {"vfd": {"registers": {"current": {"register": "input", "address": 3, "scale": 0.1},
                                       "faulted": {"register": "discrete", "address": 2, "data_type": "bool"},
                                       "energy": {"register": "holding", "address": 40, "data_type": "uint32"}}}},
    "devices": {"drive": {"profile": "vfd", "bus": "rs485", "unit": 1, "poll_ms": 500},
                "ghost": {"profile": "vfd", "bus": "rs485", "unit": 9, "poll_ms": 500}},
    "machines": [
        {"id": "P-1", "kind": "pump", "words": ["raw water pump"],
         "state": {"run": {"di": 10, "active": "high", "pull": "down", "debounce_ms": 20},
                   "trip": {"device": "drive", "register": "faulted"}},
         "sample_s": 2,
         "signals": [
             {"key": "P", "tag": "discharge_press", "unit": "bar", "source": {"adc": 0, "input": "4-20mA",
                                                                             "shunt_ohm": 150, "samples": 4},
              "range": [0, 10], "period_ms": 500, "bad": BAD},
             {"key": "I", "tag": "motor_current", "unit": "A", "source": {"device": "drive", "register": "current"},
              "range": [0, 500], "bad": BAD},
             {"key": "T", "tag": "bearing_temp", "unit": "C", "period_ms": 500, "bad": BAD,
              "source": {"i2c": "i2c", "chip": "mcp9600", "address": 96, "thermocouple": "K"}, "range": [-20, 300]},
             {"key": "Q", "tag": "flow", "unit": "m3/h", "period_ms": 500, "bad": BAD, "range": [0, 200],
              "source": {"i2c": "i2c", "chip": "ads1115", "address": 72, "channel": 0, "input": "4-20mA",
                         "shunt_ohm": 150, "gain": 4.096}},
             {"key": "E", "tag": "energy", "unit": "kWh", "decimals": 0, "bad": BAD,
              "source": {"device": "drive", "register": "energy"}}]},
        {"id": "G-9", "kind": "pump", "state": {"current": {"signal": "I", "above": 1.0}},
         "signals": [{"key": "I", "tag": "motor_current", "unit": "A", "range": [0, 500], "bad": BAD,
                      "source": {"device": "ghost", "register": "current"}}]},
    ],
}




class Run:
    def __init__(self, tmp: Path, image: Path) -> None:
        d = plantfile.loads(json.dumps(DESC), "emu-skid.json")
        data = plantcompile.compile_plant(d)
        self.desc = plantdesc.from_dict(d, plantcompile.plant_hash(data))
        self.board = emuboard.EmuBoard("rp2040_pico", image, tmp / "flash.bin").start()
        self.board.set_de_pin(2)
        for name, body in (("board.json", (ROOT / "boards" / "rp2040_pico.json").read_bytes()),
                           ("node.json", json.dumps({"model": None, "report_ms": 4000}).encode()),
                           ("plant.json", data), ("main.py", b"import firmware.node as n\nn.main()\n")):
            (tmp / name).write_bytes(body)
        args = [MPREMOTE, "connect", self.board.repl_port]
        for name in ("board.json", "node.json", "plant.json", "main.py"):
            args += ["fs", "cp", str(tmp / name), ":" + name, "+"]
        proc = subprocess.run(args + ["reset"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        self.relay = rig.BusRelay(self.board.uart1_port).start()
        self.relay.silent.add(9)
        self.plant = plant.Plant(4, kinds=["pump", "pump"], fault_every_h=0)
        self.plant.command("P-101", "start")
        self.rig = rig.Rig(d, self.plant, bus_port=self.relay.slave_port, board=self.board,
                           absent=(("drive", "energy"),)).start()
        self.store = LogStore(tmp / "plant.db")
        self.s = Session(self.board.uart_port, self.store, name="emu-skid", plant=self.desc)

    def lines(self) -> list[str]:
        import sqlite3

        return [r[0][21:] for r in sqlite3.connect(self.store.path).execute(
            "SELECT text FROM logs WHERE text NOT LIKE 'NODE %' ORDER BY id")]

    def mark(self) -> int:
        return len(self.lines())

    def wait(self, pred, what: str, since: int = 0, timeout: float = 180.0) -> str:
        """Poll the gateway until a line from index `since` on satisfies pred; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.s.poll()
            for ln in self.lines()[since:]:
                if pred(ln):
                    return ln
            time.sleep(0.05)
        raise AssertionError("no %s in %.0f s; last lines: %s\nboard: %s" % (what, timeout, self.lines()[-12:],
                                                                            self.board.error))

    def close(self) -> None:
        self.rig.stop()
        self.relay.stop()
        self.board.stop()


def _value(line: str, key: str) -> float | None:
    for w in line.split()[2:]:
        k, _, v = w.partition("=")
        if k == key:
            num = v.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ/%3")
            return None if v == "?" else float(num)
    raise AssertionError("no %s in %s" % (key, line))


def test_every_source_on_the_emulated_rp2040(tmp_path: Path, image: Path) -> None:
    r = Run(tmp_path, image)
    try:
        plant_line = r.wait(lambda ln: ln.startswith("PLANT "), "PLANT line")
        assert "hash=%s" % r.desc.hash in plant_line and "machines=2 signals=6" in plant_line, plant_line
        # every source reads what the simulator gives it
        sample = r.wait(lambda ln: ln.startswith("P-1 RUNNING ") and "P=?" not in ln and "T=?" not in ln
                        and "Q=?" not in ln and "I=?" not in ln, "a full P-1 sample line")
        for key, tol in (("P", 0.1), ("I", 0.2), ("T", 0.5), ("Q", 2.5)):
            want = r.rig.value("P-1", key)
            got = _value(sample, key)
            assert want is not None and abs(got - want) <= tol + 0.05 * abs(want), (key, got, want, sample)
        # a unit that never answers, a register the drive lacks: BAD with the reason
        r.wait(lambda ln: ln.startswith("ALARM BAD G-9 motor_current ? ") and ln.endswith("why=timeout"), "timeout BAD")
        r.wait(lambda ln: ln.startswith("ALARM BAD P-1 energy ? ") and ln.endswith("why=exception"), "exception BAD")
        # a broken 4-20 mA loop: BAD (NAMUR low), then back
        m = r.mark()
        r.rig.hold("P-1", "P", volts=0.0)
        r.wait(lambda ln: ln.startswith("ALARM BAD P-1 discharge_press ? ") and ln.endswith("why=loop_low"),
               "broken loop BAD", m)
        m = r.mark()
        r.rig.release("P-1", "P")
        r.wait(lambda ln: ln.startswith("CLEAR BAD P-1 discharge_press "), "the loop's recovery", m)
        # corrupted answers on the bus: BAD (frame), then back
        m = r.mark()
        r.relay.corrupt = True
        r.wait(lambda ln: ln.startswith("ALARM BAD P-1 motor_current ? ") and ln.endswith("why=frame"), "CRC BAD", m)
        m = r.mark()
        r.relay.corrupt = False
        r.wait(lambda ln: ln.startswith("CLEAR BAD P-1 motor_current "), "the bus's recovery", m)
        # noise between frames: the master drains it, the values stay good
        m = r.mark()
        r.relay.noise = True
        n0 = r.relay.counts["noise"]
        for k in range(2):
            m = r.mark()
            ln = r.wait(lambda ln: ln.startswith("P-1 "), "a sample line with noise on the bus", m)
            assert "I=?" not in ln, ln
        assert r.relay.counts["noise"] > n0
        r.relay.noise = False
        de_quiet = len(r.board.de_events)  # noise that came while the board drove the bus was dropped, rightly
        bad = [ln for ln in r.lines() if ln.startswith("ALARM BAD P-1 motor_current")]
        assert len(bad) == 1, bad  # only the corrupted answers' one: noise raised nothing
        # a bouncing run contact: one state change, not one per bounce
        r.rig.hold("P-1", "run", manual=True)
        before = r.mark()
        r.board.bounce_pin(10, [300, 800, 200, 1500, 400, 900], final=0)
        r.wait(lambda ln: ln.startswith("STATE P-1 RUNNING->"), "the run contact's opening", before)
        r.wait(lambda ln: ln.startswith("P-1 STOPPED") or ln.startswith("P-1 TRIPPED"), "the next sample line", before)
        states = [ln for ln in r.lines()[before:] if ln.startswith("STATE P-1")]
        assert len(states) == 1, states
        # the driver enable: high before the first start bit, low after the last stop bit, no byte of a request cut
        de = r.board.de_events[de_quiet + 2:]  # the last noise burst may follow the answer in flight
        assert len(de) >= 10, "the emulator saw %d driver-enable periods after the noise" % len(de)
        for ev in de[-20:]:
            assert ev["de_high_ns"] <= ev["first_start_ns"] and ev["last_stop_end_ns"] <= ev["de_low_ns"], ev
            assert ev["de_low_ns"] - ev["last_stop_end_ns"] <= 3 * ev["char_ns"], ev
            assert ev["tx_cut"] == 0 and ev["bits"] == 11, ev
        # and the receiver on for the answers: on a loaded host a slave's answer can come after the master's
        # timeout, while it sends its next request, and is rightly dropped then (a late slave on a real bus
        # too); a driver left on too long would drop every answer
        on_time = [ev for ev in de[-20:] if ev["rx_dropped"] == 0]
        assert len(on_time) >= len(de[-20:]) // 2, de[-20:]
    finally:
        r.close()
