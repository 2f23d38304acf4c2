"""Benchmark a drafting node's inputs on the emulated RP2040 (the real rp2 firmware in rp2040js), in board time.

    edgetwin bench inputs [--seconds 60] [--model MBF] [--target smollm2|tiny:SEED] [--image UF2] [--json]

The plant: 4 simulated machines (two pumps, two compressors: tools/board/simslave.py's description of them)
read as a real plant is: their 24 signals from 3 Modbus RTU units at 19200 baud 8E1 on UART1 (one unit
serves two machines, as a multi-drive box does), their run contacts on 4 GPIOs (GP10-13), and 4 more
loops (4-20 mA through a 150 ohm shunt) on ADC0-2 and an ADS1115 on I2C0; the rig (tools/board/rig.py)
drives all of them from the running simulator. What it does, on a fresh emulated flash:

1. boots `make firmware`'s image and measures, on the board, the heap a compiled description takes
   per signal (the loader, the readings and the engine of a 4- and a 28-signal description), and what a
   byte of CRC-32 costs with the bytecode halves and with the viper CRC the link uses (crc_us_per_byte);
2. deploys the node as a user would (`edgetwin deploy --node --plant FILE`: the draft model, node.json,
   the compiled description) and runs it against `edgetwin gateway --plant FILE --model TARGET` for
   `--seconds` of board time, the node drafting all along;
3. reads the node's own reports (its NODE lines: poll=, the longest a signal went between two readings,
   stall=, the longest between two polls of the inputs, and heap=, after gc.collect) and the store's line
   accounting (every line the node numbered is stored: lines_lost).

Figures are board time (cycles / 125 MHz), never host time. Every signal is read every 500 ms; the goal:
poll_cycle_max_s (the longest any signal went between two readings) <= 1 s with the draft step as shipped;
the inputs are polled between the draft step's kernels and the classifier's blocks (shared/llama.py's
hook) and between the prompt's pieces (shared/bpe.py's poll).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from host.board_profile import venv_exe  # noqa: E402
from host.usage import Parser  # noqa: E402

CPU_HZ = 125_000_000
SPILL_BYTES = 65536  # as bench board: preallocating the profile's 640 KB ring takes minutes emulated
ANALOG = (("P-101", {"adc": 0}), ("P-102", {"adc": 1}), ("C-301", {"adc": 2}),
          ("C-302", {"i2c": "i2c", "chip": "ads1115", "address": 72, "channel": 0, "gain": 4.096}))
CONTACT_PINS = (10, 11, 12, 13)
POLL_MS = 500  # every signal read twice a second: the 1 s goal leaves a draft step's worth of headroom

# Runs on the board: the heap of a compiled description's loader, readings and engine, for two sizes.
PROBE = r"""
import gc, json
from shared import plantcfg, readings
from shared.plant_engine import Engine
from shared.wallclock import WallClock
def emit(b, n, lv):
    pass
out = []
for path in ('/small.json', '/plant.json'):
    gc.collect()
    m0 = gc.mem_alloc()
    cfg = plantcfg.load(path, {'uart': {'id': 0, 'tx': 0, 'rx': 1}})
    r = readings.Readings(cfg.n_signals, cfg.n_contacts)
    e = Engine(cfg, r, emit, WallClock(0), 0)
    gc.collect()
    out.append((cfg.n_signals, gc.mem_alloc() - m0))
    del cfg, r, e
# what a frame's checksum costs the loop: the link checks every frame in and signs every frame out
from time import ticks_us, ticks_diff
from shared import crc32
buf = bytearray(range(1, 129))
crc = {}
for kind in ('halves', 'viper'):
    try:
        c = crc32.new(kind)
    except ValueError:
        continue
    t = ticks_us()
    c.reset()
    c.update(buf, 0, len(buf))
    crc[kind] = ticks_diff(ticks_us(), t) / len(buf)
print('BENCH-INPUTS ' + json.dumps([out, crc, type(crc32.new()).__name__]))
"""


class BenchError(RuntimeError):
    pass


def _say(msg: str) -> None:
    print("bench inputs: " + msg, file=sys.stderr, flush=True)


def _mpremote(port: str, *args: str, timeout: float = 900) -> str:
    proc = subprocess.run([venv_exe("mpremote"), "connect", port, *args], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise BenchError("mpremote %s failed: %s" % (args[0], (proc.stdout + proc.stderr).strip()[-600:]))
    return proc.stdout


def bench_plant():
    """(the simulator, its description as the bench wires it)."""
    from shared import plant
    from tools.board import simslave

    # a sample line per machine every 5 s (alarms and state changes when they happen), as a plant engineer
    # would set it: lines a second per machine would keep the link busier than the annotations
    p = plant.Plant(5, kinds=["pump", "pump", "compressor", "compressor"], sample_every=5, fault_every_h=0)
    for m in p.ids:
        p.command(m, "start")
    units = {0: 1, 1: 2, 2: 2, 3: 3}  # P-102 and C-301 behind one unit: the compressor's registers from 100 on
    d = simslave.description(p, name="bench-inputs", units=units, bus={"tx": 8, "rx": 9, "de": 2})
    d["board"] = "rp2040_pico"
    shifted = json.loads(json.dumps(d["profiles"]["compressor"]))
    for reg in shifted["registers"].values():
        reg["address"] += 100
    d["profiles"]["compressor_at_100"] = shifted
    d["devices"] = {}
    for m, mach in enumerate(d["machines"]):
        dev = mach["id"].lower()
        d["devices"][dev] = {"profile": "compressor_at_100" if mach["id"] == "C-301" else mach["kind"], "bus": "rs485",
                             "unit": units[m], "poll_ms": POLL_MS}
        for sig in mach["signals"]:
            sig["source"]["device"] = dev
        mach["state"]["trip"]["device"] = dev
        mach["state"]["run"] = {"di": CONTACT_PINS[m], "active": "high", "pull": "down", "debounce_ms": 20}
    d["buses"]["i2c"] = {"type": "i2c", "id": 0, "sda": 4, "scl": 5, "freq": 100000}
    for mach in d["machines"]:  # delays count readings (at most 255): at two readings a second, 127 s at most
        for sig in mach["signals"]:
            for a in sig["alarms"]:
                a["off_delay_s"] = min(a["off_delay_s"], 255 * POLL_MS // 1000)
    for mid, src in ANALOG:  # a second pressure transmitter on each machine, a 4-20 mA loop
        mach = next(m for m in d["machines"] if m["id"] == mid)
        mach["signals"].append({"key": "P2", "tag": "loop_press", "unit": "bar", "words": ["loop pressure"],
                                "source": dict(src, input="4-20mA", shunt_ohm=150), "range": [0, 10],
                                "period_ms": POLL_MS})
    return p, d


def run(seconds: float, model: Path, target: str, image: Path | None) -> dict:
    from host import plantcompile, plantfile
    from host.store import LogStore
    from tools.board import emuboard, rig

    sim, desc = bench_plant()
    with tempfile.TemporaryDirectory(prefix="edgetwin-bench-inputs-") as tmp:
        tmpd = Path(tmp)
        plant_file = tmpd / "bench_plant.json"
        plant_file.write_text(json.dumps(desc, indent=1))
        checked = plantfile.load(plant_file)
        small = dict(checked, machines=checked["machines"][:1])
        small["machines"] = [dict(small["machines"][0], signals=small["machines"][0]["signals"][:4])]
        (tmpd / "small.json").write_bytes(plantcompile.compile_plant(plantfile.loads(json.dumps(small), "small")))
        board = emuboard.EmuBoard("rp2040_pico", image, tmpd / "flash.bin").start()
        board.set_de_pin(2)
        gw = None
        try:
            (tmpd / "plant.json").write_bytes(plantcompile.compile_plant(checked))
            _mpremote(board.repl_port, "fs", "cp", str(tmpd / "small.json"), ":small.json", "+", "fs", "cp",
                      str(tmpd / "plant.json"), ":plant.json")
            (tmpd / "probe.py").write_text(PROBE)
            out = _mpremote(board.repl_port, "run", str(tmpd / "probe.py"))
            line = [x for x in out.splitlines() if x.startswith("BENCH-INPUTS ")]
            if not line:
                raise BenchError("the board's heap probe printed nothing: " + out[-600:])
            ((n0, b0), (n1, b1)), crc_us, crc_kind = json.loads(line[0][len("BENCH-INPUTS "):])
            _say("heap of the description: %d B for %d signals, %d B for %d" % (b0, n0, b1, n1))
            t = time.monotonic()
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            dep = subprocess.run([sys.executable, "-m", "host.cli", "deploy", "--board", "rp2040_pico", "--port",
                                  board.repl_port, "--node", "--model", str(model), "--plant", str(plant_file),
                                  "--no-reset", "--timeout", "1800"], cwd=str(ROOT), env=env, capture_output=True,
                                 text=True, timeout=1800, stdin=subprocess.DEVNULL)
            if dep.returncode != 0:
                raise BenchError("deploy failed: " + (dep.stdout + dep.stderr).strip()[-800:])
            _say("deployed in %.0f s (host)" % (time.monotonic() - t))
            cfg = json.loads(_mpremote(board.repl_port, "exec", "print(open('node.json').read())"))
            cfg.update(spill_bytes=SPILL_BYTES, report_ms=2000)
            (tmpd / "node.json").write_text(json.dumps(cfg))
            boots = board.boots
            _mpremote(board.repl_port, "fs", "rm", ":small.json", "+", "fs", "cp", str(tmpd / "node.json"),
                      ":node.json", "+", "reset")
            t = time.monotonic()
            while board.boots == boots and time.monotonic() - t < 60:
                time.sleep(0.05)
            n_ev = len(board.events)  # the rebooted runner counts cycles from 0: wait for its first figures
            while not any(e.get("event") == "stats" for e in board.events[n_ev:]) and time.monotonic() - t < 60:
                time.sleep(0.05)
            plant_rig = rig.Rig(checked, sim, bus_port=board.uart1_port, board=board).start()
            db, status = tmpd / "g.db", tmpd / "st.json"
            gw = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--insecure", "--port", board.uart_port, "--db",
                                   str(db), "--status", str(status), "--model", target, "--plant", str(plant_file),
                                   "--peer-timeout", "30", "--quiet"], cwd=str(ROOT),
                                  env=dict(env, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            t0 = float(board.stats.get("cycles", 0)) / CPU_HZ
            last = time.monotonic()
            while float(board.stats.get("cycles", 0)) / CPU_HZ - t0 < seconds:
                if gw.poll() is not None:
                    raise BenchError("the gateway exited: " + gw.stderr.read().decode()[-800:])
                if board.error:
                    raise BenchError("the emulated board stopped: " + board.error)
                if time.monotonic() - last > 30:
                    _say("%.0f of %g board seconds" % (float(board.stats.get("cycles", 0)) / CPU_HZ - t0, seconds))
                    last = time.monotonic()
                time.sleep(0.5)
            board_s = float(board.stats.get("cycles", 0)) / CPU_HZ - t0
            st = json.loads(status.read_text())
            plant_rig.stop()
        finally:
            if gw is not None:
                gw.terminate()
                gw.wait(30)
            board.stop()
        sess = st["sessions"][0]
        store = LogStore(db, readonly=True)
        try:
            rows = store.logs(sess["name"])
            loss = store.line_loss(sess["name"])
        finally:
            store.close()
    errors = [r["text"] for r in rows if r["text"].startswith("NODE ") and " error: " in r["text"]]
    if errors:
        raise BenchError("the node said: %s" % " | ".join(errors))
    reports = [dict(kv.split("=", 1) for kv in r["text"].split()[1:] if "=" in kv) for r in rows
               if r["text"].startswith("NODE heap=")]
    if not reports or "poll" not in reports[-1]:
        raise BenchError("the node sent no report of its inputs (NODE ... poll=...): %s"
                         % [r["text"] for r in rows[:5]])
    heaps = [int(r["heap"]) for r in reports]
    warm = heaps[len(heaps) // 3:]
    plant_lines = [r for r in rows if not r["text"].startswith("NODE ")]
    spec = sess.get("spec", {})
    machines = len(desc["machines"])
    signals = sum(len(m["signals"]) for m in desc["machines"])
    return {
        "board": "rp2040_pico", "emulator": emuboard.emulator_version(), "cpu_hz": CPU_HZ,
        "machines": machines, "signals": signals,
        "modbus_units": len({d["unit"] for d in desc["devices"].values()}),
        "modbus_signals": sum(1 for m in desc["machines"] for s in m["signals"] if "device" in s["source"]),
        "baud": desc["buses"]["rs485"]["baud"], "adc_channels": len(ANALOG), "contacts": len(CONTACT_PINS),
        "board_s": round(board_s, 1),
        "draft_tokens": spec.get("drafted", 0),
        "verified_tokens": spec.get("tokens_verified", 0),
        "poll_cycle_max_s": int(reports[-1]["poll"]) / 1000, "loop_stall_max_s": int(reports[-1]["stall"]) / 1000,
        "poll_cycle_goal_s": 1.0, "goal_met": int(reports[-1]["poll"]) <= 1000,
        "heap_in_use_bytes": heaps[-1], "heap_in_use_min_max_warm": [min(warm), max(warm)],
        "heap_flat": max(warm) - min(warm) <= 256,
        "description_heap_bytes": b1, "bytes_per_signal": round((b1 - b0) / max(n1 - n0, 1)),
        "lines_logged": int(reports[-1]["lines"]), "lines_stored": len(plant_lines),
        "lines_lost": loss["missing"] + loss["reported"], "line_accounting": loss,
        # logged but still in the node's queue or spill ring at its last report (stored ones are checked
        # for gaps by sequence number: lines_lost)
        "lines_waiting_at_end": int(reports[-1]["backlog"]),
        "alarm_lines": sum(1 for r in plant_lines if r["text"][21:].startswith(("ALARM", "CLEAR", "ACK"))),
        "node_reports": len(reports),
        "last_report": next(r["text"] for r in reversed(rows) if r["text"].startswith("NODE heap=")),
        "gateway": {k: spec.get(k) for k in ("committed", "drafted", "accepted", "tokens_verified")},
        "crc_us_per_byte": {k: round(v, 2) for k, v in crc_us.items()}, "crc_node": crc_kind,
        "crc_speedup": round(crc_us["halves"] / crc_us["viper"], 1) if "viper" in crc_us else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench inputs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="board seconds the node runs (default 60)")
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "draft" / "draft.mbf",
                    help="the draft model (default the shipped one)")
    ap.add_argument("--target", default="smollm2", help="the gateway's target (default smollm2)")
    ap.add_argument("--image", type=Path, default=None, help="firmware .uf2 (default: `make firmware`'s)")
    ap.add_argument("--json", action="store_true", help="print the JSON object only")
    args = ap.parse_args(argv)
    if not 5 <= args.seconds <= 3600:
        ap.error("--seconds must be 5..3600")
    if not args.model.is_file():
        ap.error("--model %s: no such file" % args.model)
    try:
        out = run(args.seconds, args.model, args.target, args.image)
    except BenchError as e:
        print("edgetwin bench inputs: %s" % e, file=sys.stderr)
        return 2
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
