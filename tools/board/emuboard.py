"""Emulated board: the real MicroPython rp2 firmware on an emulated RP2040 (rp2040js), REPL and UART on ptys.

An `EmuBoard` gives what a Pico on a USB cable gives, running the firmware `make firmware` built
(build/firmware/rp2040_pico/firmware.uf2, the node's code frozen) instruction by instruction, or for board
rp2040_pico_cp CircuitPython's from `make firmware-cp` (build/firmware/rp2040_pico_cp/):

- `repl_port`: a pty bridged to the board's USB CDC, where MicroPython's REPL is: the real mpremote
  connects to it as to /dev/ttyACM0;
- `uart_port`: a pty bridged to UART0 (GP0/GP1), the link; the gateway opens it with pyserial. Bytes
  cross it at the baud the firmware set, in the board's time;
- `uart1_port`: a pty bridged to UART1, the other end of the node's RS-485 bus (a Modbus RTU slave opens
  it with pyserial), paced by the UART's own frame format (8E1: 11 bits a byte). With a driver-enable
  pin named (`set_de_pin`), only bytes sent while DE was high reach it, bytes written to it while DE is
  high are dropped, and each DE high..low period arrives as a "de" event (`de_events`);
- the plant around the board, in the board's time: ADC inputs (`set_adc`), GPIO inputs, pulse trains and
  bouncing contacts (`set_pin`, `pulse_pin`, `bounce_pin`), and emulated MCP9600 and ADS1115 I2C devices on
  either controller (`i2c_device`, `i2c_remove`). What the host set is sent again after a restart or a
  `machine.reset()`, as wiring stays connected (register values the firmware wrote to a device do not);
- `flash_path`: the board's 2 MB flash as a file beside the image (or where given). Each start programs
  the UF2 over it, as a drag-and-drop does, and the filesystem region keeps its contents, so a node
  deployed with mpremote survives a restart of the emulator and a `machine.reset()`;
- the watchdog: rp2040js counts the WATCHDOG block down in the board's time, so firmware that stops feeding
  `machine.WDT` (or CircuitPython's `microcontroller.watchdog`) resets the chip; the runner restarts with the
  block's REASON and SCRATCH registers carried across as the chip keeps them, so `machine.reset_cause()` is
  WDT_RESET after it (`watchdog_resets` counts them; `machine.reset()` carries the FORCE bit instead).
  `restart()` is a power cycle: those registers read 0 after it.

The board's clock advances with executed cycles at 125 MHz, and the emulator executes about 12-25
million of them per host second, so the board's time runs 5-10x slower than the host's (MicroPython's
idle loop polls, so this holds at the REPL too; only a sleeping core keeps the host's time). Figures taken from it are emulated cycles,
never host time; it does not model the flash cache or wait states. The runner is
tools/board/emulator/run.mjs (rp2040js pinned in tools/board/emulator/package.json, installed by
`make emulator-setup`); this module makes the ptys, finds the flash functions in the ELF, and relays.

Command line (also ``edgetwin vboard --board rp2040_pico --emulate``)::

    python -m tools.board.emuboard --board rp2040_pico [--image UF2] [--flash FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.board import build, firmware_build  # noqa: E402
from tools.board.ptys import Outbox, PtyEnd  # noqa: E402

ROOT = build.ROOT
EMULATOR_DIR = ROOT / "tools" / "board" / "emulator"
RUNNER = EMULATOR_DIR / "run.mjs"
# board profile -> its firmware build (MicroPython's make firmware, CircuitPython's make firmware-cp)
BOARDS = {"rp2040_pico": "firmware", "rp2040_pico_cp": "firmware-cp"}
HARD_RESET_EXIT = 3  # the runner's exit status when the chip reset through its watchdog (machine.reset() or a hang)
_TO_NODE_MAX = 64 * 1024  # bytes queued for the runner before the ptys stop being read
_FLASH_SYMBOLS = ("flash_range_erase", "flash_range_program")
I2C_DEVICES = {"mcp9600": (0x60, 0x67), "ads1115": (0x48, 0x4B)}  # the emulated chips and their address ranges


class EmuBoardError(RuntimeError):
    """The emulated board could not start or stopped; the message says what to do."""


def default_image(board: str = "rp2040_pico") -> Path:
    if BOARDS.get(board) == "firmware-cp":
        from tools.board import firmware_cp_build

        return firmware_cp_build.out_dir() / "firmware.uf2"
    return firmware_build.out_dir() / "firmware.uf2"


def emulator_version() -> str:
    """"rp2040js X.Y.Z" as installed in tools/board/emulator/node_modules."""
    pkg = EMULATOR_DIR / "node_modules" / "rp2040js" / "package.json"
    if not pkg.is_file():
        raise EmuBoardError("rp2040js is not installed: run `make emulator-setup` (npm ci in %s)" % EMULATOR_DIR)
    return "rp2040js " + json.loads(pkg.read_text())["version"]


def bootrom_path() -> Path:
    """The RP2040 B1 bootrom, from whichever vendored bundle was unpacked (both carry the same file)."""
    from tools.board import firmware_cp_build

    path = firmware_build.work_dir() / firmware_build.BOOTROM
    if not path.is_file() and (firmware_cp_build.work_dir() / firmware_build.BOOTROM).is_file():
        path = firmware_cp_build.work_dir() / firmware_build.BOOTROM
    if not path.is_file():
        raise EmuBoardError("%s is missing: `make firmware` unpacks it from the vendored sources" % path)
    return path


def elf_symbols(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    """Values of the named symbols in a 32-bit little-endian ELF's symbol table (Thumb bit as stored)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise EmuBoardError("%s: not a 32-bit little-endian ELF" % path)
    shoff, = struct.unpack_from("<I", data, 0x20)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
    sections = [struct.unpack_from("<10I", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    wanted = {n.encode(): n for n in names}
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        str_off = sections[sh[6]][4]
        for off in range(sh[4], sh[4] + sh[5], 16):
            st_name, st_value = struct.unpack_from("<II", data, off)
            end = data.index(b"\0", str_off + st_name)
            name = wanted.get(data[str_off + st_name:end])
            if name is not None:
                found[name] = st_value
    missing = [n for n in names if n not in found]
    if missing:
        raise EmuBoardError("%s: no symbol %s (is it an rp2 firmware ELF?)" % (path, ", ".join(missing)))
    return found


class _Pty(PtyEnd, Outbox):
    """A pty pair (tools/board/ptys.py: the slave stays open so the device lives between clients) whose master's
    pending bytes wait in an outbox."""

    def __init__(self) -> None:
        PtyEnd.__init__(self)
        Outbox.__init__(self, self.master)


class EmuBoard:
    """The firmware running in rp2040js, its USB CDC and UART0 on ptys, its flash in a file."""

    def __init__(self, board: str = "rp2040_pico", image: Path | None = None, flash: Path | None = None) -> None:
        if board not in BOARDS:
            raise EmuBoardError("no emulator for board %r: --emulate runs %s only" % (board, ", ".join(BOARDS)))
        self.board = board
        self.profile = build.board_profile(board)
        self.image = Path(image) if image else default_image(board)
        if not self.image.is_file():
            raise EmuBoardError("%s: no firmware image; build it with `make %s`" % (self.image, BOARDS[board]))
        self.elf = self.image.with_suffix(".elf")
        if not self.elf.is_file():
            raise EmuBoardError("%s: the image's ELF is missing (the flash functions' addresses come from it);"
                                " rebuild with `make firmware`" % self.elf)
        self.flash_path = Path(flash) if flash else self.image.with_name("flash.bin")
        self.flash_bytes = int(self.profile["flash_bytes"])
        self.emulator = emulator_version()
        self.bootrom = bootrom_path()
        self.symbols = elf_symbols(self.elf, _FLASH_SYMBOLS)
        if not shutil.which("node"):
            raise EmuBoardError("node is not on PATH (the emulator runs in node.js 18+)")
        self.repl = _Pty()
        self.uart = _Pty()
        self.uart1 = _Pty()
        self.repl_port = self.repl.path
        self.uart_port = self.uart.path
        self.uart1_port = self.uart1.path
        self.events: list[dict] = []
        self.de_events: list[dict] = []  # the runner's "de" events: one per DE high..low period on UART1
        self.stats: dict = {}
        self.boots = 0
        self.watchdog_resets = 0  # resets because the watchdog's timer ran out (not machine.reset())
        # the WATCHDOG block's REASON and SCRATCH0-7 at the last reset, which a restarted runner starts with
        # (they survive a watchdog reset on the chip); None: a power cycle
        self._carry: dict | None = None
        self.uart_bytes = {"to_board": 0, "from_board": 0}  # link bytes relayed (a bench's bytes per token)
        self.uart1_bytes = {"to_board": 0, "from_board": 0}
        # what the host set on the plant, sent again to a restarted runner: channel -> key -> message
        self._plant: dict[bytes, dict] = {b"C": {}, b"A": {}, b"G": {}, b"I": {}}
        self.error: str | None = None
        self._proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._usb = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # --- life cycle ---------------------------------------------------------------------------------

    def _spawn(self) -> None:
        cmd = ["node", str(RUNNER), "--bootrom", str(self.bootrom), "--uf2", str(self.image),
               "--flash", str(self.flash_path), "--flash-bytes", str(self.flash_bytes),
               "--erase", str(self.symbols["flash_range_erase"]),
               "--program", str(self.symbols["flash_range_program"])]
        if self._carry is not None:
            cmd += ["--watchdog-reason", str(int(self._carry["watchdog_reason"]) & 3),
                    "--watchdog-scratch", ",".join(str(int(v) & 0xFFFFFFFF) for v in self._carry["scratch"][:8])]
        self._carry = None
        self.flash_path.parent.mkdir(parents=True, exist_ok=True)
        self._usb.clear()
        self._proc = subprocess.Popen(cmd, cwd=EMULATOR_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
        os.set_blocking(self._proc.stdout.fileno(), False)
        os.set_blocking(self._proc.stderr.fileno(), False)
        os.set_blocking(self._proc.stdin.fileno(), False)
        self._to_node = bytearray()  # frames waiting for the runner's stdin (never a blocking write)
        self._inbuf = bytearray()
        self._stderr = bytearray()
        self.boots += 1
        for ch, msgs in self._plant.items():
            for msg in msgs.values():
                self._send(ch, json.dumps(msg).encode())

    def start(self, timeout: float = 30.0) -> "EmuBoard":
        """Boot the firmware; returns once its USB CDC is up (the REPL reachable)."""
        self._t_start = time.monotonic()
        self._spawn()
        self._thread = threading.Thread(target=self._relay, name="emuboard", daemon=True)
        self._thread.start()
        if not self._usb.wait(timeout):
            err = self.error or "no USB CDC after %.0f s" % timeout
            self.stop()
            raise EmuBoardError("the emulated board did not boot: %s" % err)
        return self

    def restart(self, timeout: float = 30.0) -> None:
        """Stop the emulator and boot it again from the flash file (a power cycle); the ptys stay."""
        with self._lock:
            self._quit_proc()
            self._carry = None
            self._spawn()
        if not self._usb.wait(timeout):
            raise EmuBoardError("the emulated board did not come back: %s" % (self.error or "no USB CDC"))

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._quit_proc()
        if self._thread is not None:
            self._thread.join(5)
        self.repl.close()
        self.uart.close()
        self.uart1.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._stop.is_set()

    def _quit_proc(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._to_node += b"Q\0\0"
        deadline = time.monotonic() + 2
        while self._to_node and time.monotonic() < deadline and proc.poll() is None:
            self._flush_to_node()
            self._drain_stdout()
            time.sleep(0.005)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._drain_stdout()

    def describe(self) -> dict:
        return {"board": self.board, "repl_port": self.repl_port, "uart_port": self.uart_port,
                "uart1_port": self.uart1_port, "image": str(self.image), "image_bytes": self.image.stat().st_size,
                "flash": str(self.flash_path), "emulator": self.emulator,
                "baud": int(self.profile["uart"]["baud"])}

    # --- the plant ----------------------------------------------------------------------------------

    def _plant_send(self, ch: bytes, key, msg: dict | None, keep: dict | None = None) -> None:
        """Send a plant message now (if msg) and remember `keep` under key for a restarted runner (None: forget
        the key)."""
        with self._lock:
            store = self._plant[ch]
            if keep is not None:
                store[key] = keep
            else:
                store.pop(key, None)
            if msg is not None:
                self._send(ch, json.dumps(msg).encode())

    def set_de_pin(self, pin: int | None) -> None:
        """Name the GPIO that drives the RS-485 transceiver's driver enable (None: no transceiver, every UART1
        byte reaches `uart1_port`). From then on a UART1 byte reaches the bus only if DE was high for its whole
        frame, bytes from `uart1_port` are dropped while DE is high, and each DE high..low period appends a
        "de" event to `de_events` (emulated ns: de_high_ns, first_start_ns, last_stop_end_ns, de_low_ns; bytes,
        tx_cut, rx_dropped, char_ns, bits)."""
        if pin is not None and not (isinstance(pin, int) and 0 <= pin < 30):
            raise ValueError("de pin: a GPIO number 0..29 or None")
        msg = {"de_pin": pin}
        self._plant_send(b"C", "de_pin", msg, msg)

    def set_adc(self, channel: int, volts: float | None = None, raw: int | None = None) -> None:
        """Set ADC input `channel` (0-3: GP26-GP29, 4: the temperature sensor) to `volts` (a 12-bit code at the
        3.3 V reference, rounded and clipped to 0..4095) or to the 12-bit code `raw`."""
        if not (isinstance(channel, int) and 0 <= channel <= 4) or (volts is None) == (raw is None):
            raise ValueError("set_adc(channel 0..4, volts=V or raw=CODE)")
        if volts is not None:
            volts = float(volts)
        msg = {"channel": channel, "volts": volts} if raw is None else {"channel": channel, "raw": int(raw)}
        self._plant_send(b"A", channel, msg, msg)

    def set_pin(self, pin: int, level: int) -> None:
        """Drive GPIO input `pin` to `level` (0 or 1) now; a sequence the pin was playing stops. An edge (a
        change of level) reaches Pin.irq; repeating the level makes none."""
        self._check_pin(pin)
        msg = {"pin": pin, "level": 1 if level else 0}
        self._plant_send(b"G", pin, msg, msg)

    def pulse_pin(self, pin: int, count: int, period_us: float, width_us: float | None = None) -> None:
        """Play `count` pulses on input `pin`, one every `period_us` of board time, each `width_us` long (default
        half the period) away from the pin's present level and back. A "pin_done" event follows the last."""
        self._check_pin(pin)
        msg = {"pin": pin, "pulses": int(count), "period_us": period_us}
        if width_us is not None:
            msg["width_us"] = width_us
        self._plant_send(b"G", pin, msg, self._plant[b"G"].get(pin))  # the pin rests where it was

    def bounce_pin(self, pin: int, intervals_us: list[float], final: int) -> None:
        """Play a bouncing contact on input `pin`: it toggles at once and again after each interval (board µs)
        but the last; after the last interval it settles at `final` (an edge only if that differs). A
        "pin_done" event (with the edges made) follows."""
        self._check_pin(pin)
        msg = {"pin": pin, "bounce": list(intervals_us), "final": 1 if final else 0}
        self._plant_send(b"G", pin, msg, {"pin": pin, "level": msg["final"]})

    def i2c_device(self, dev: str, bus: int, addr: int, **values) -> None:
        """Add the emulated I2C device `dev` at 7-bit `addr` on controller `bus` (0 or 1, whatever pins the
        firmware gives it), or update the one there. "mcp9600" (0x60-0x67): hot_c, cold_c, delta_c (default
        hot - cold), status, rev, adc_raw. "ads1115" (0x48-0x4b): volts=[AIN0..AIN3]. Either: nack_after=n
        NACKs the data byte after the first n of each write (None clears it). Errors come back as "error"
        events."""
        if dev not in I2C_DEVICES or bus not in (0, 1):
            raise ValueError("i2c_device: dev one of %s, bus 0 or 1" % ", ".join(I2C_DEVICES))
        lo, hi = I2C_DEVICES[dev]
        if not (isinstance(addr, int) and lo <= addr <= hi):
            raise ValueError("i2c_device: %s answers at 0x%02x-0x%02x only" % (dev, lo, hi))
        msg = {"dev": dev, "bus": bus, "addr": addr, **values}
        with self._lock:
            kept = dict(self._plant[b"I"].get((bus, addr), {}))
        if kept.get("dev") != dev:
            kept = {}
        kept.update(msg)
        self._plant_send(b"I", (bus, addr), msg, kept)

    def i2c_remove(self, bus: int, addr: int) -> None:
        """Take the device at `addr` off controller `bus`: its address is NACKed from now on (OSError on the
        board)."""
        self._plant_send(b"I", (bus, addr), {"bus": bus, "addr": addr, "remove": True}, None)

    def wait_event(self, kind: str, timeout: float = 30.0, since: int = 0) -> dict:
        """The first runner event named `kind` ("de", "pin_done", "error", ...) at index `since` or later in
        `events`, waiting up to `timeout` seconds of host time for it."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events[since:]:
                if ev.get("event") == kind:
                    return ev
            if time.monotonic() > deadline:
                raise EmuBoardError("no %r event within %.0f s (events: %s)" % (kind, timeout, self.events[-5:]))
            time.sleep(0.01)

    @staticmethod
    def _check_pin(pin: int) -> None:
        if not (isinstance(pin, int) and 0 <= pin < 30):
            raise ValueError("pin: a GPIO number 0..29")

    # --- relay --------------------------------------------------------------------------------------

    def _send(self, channel: bytes, data: bytes) -> None:
        for i in range(0, len(data), 4096):
            part = data[i:i + 4096]
            self._to_node += channel + struct.pack("<H", len(part)) + part
        self._flush_to_node()

    def _flush_to_node(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._to_node.clear()
            return
        while self._to_node:
            try:
                n = os.write(proc.stdin.fileno(), self._to_node)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the runner is gone; the relay notices its exit
                self._to_node.clear()
                return
            del self._to_node[:n]

    def _drain_stdout(self) -> None:
        proc = self._proc
        try:
            while True:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                self._inbuf += chunk
        except (BlockingIOError, OSError, ValueError):
            pass
        buf = self._inbuf
        while len(buf) >= 3:
            n = buf[1] | (buf[2] << 8)
            if len(buf) < 3 + n:
                break
            ch, payload = bytes(buf[:1]), bytes(buf[3:3 + n])
            del buf[:3 + n]
            if ch == b"R":
                self.repl.put(payload)
            elif ch == b"U":
                self.uart.put(payload)
                self.uart_bytes["from_board"] += len(payload)
            elif ch == b"u":
                self.uart1.put(payload)
                self.uart1_bytes["from_board"] += len(payload)
            elif ch == b"E":
                self._on_event(json.loads(payload))

    def _on_event(self, ev: dict) -> None:
        self.events.append(ev)
        if ev.get("event") == "de":
            self.de_events.append(ev)
        elif ev.get("event") == "stats":
            self.stats = ev
        elif ev.get("event") == "reset" and "watchdog_reason" in ev:
            self._carry = ev
            if ev.get("reason") == "watchdog":
                self.watchdog_resets += 1
        elif ev.get("event") == "usb":
            self.boot_host_s = ev["host_ms"] / 1000.0
            self.boot_emu_s = ev["emu_ns"] / 1e9
            self._usb.set()

    def _relay(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                proc = self._proc
            outs = proc.stdout.fileno() if proc and proc.poll() is None else None
            # while the runner has a backlog, the ptys are not read: their clients wait (flow control)
            ptys = (self.repl, self.uart, self.uart1)
            rlist = [p.master for p in ptys] if len(self._to_node) < _TO_NODE_MAX else []
            rlist += [outs, proc.stderr.fileno()] if outs else []
            wlist = [p.master for p in ptys if p.buf]
            if outs and self._to_node:
                wlist.append(proc.stdin.fileno())
            try:
                r, w, _ = select.select(rlist, wlist, [], 0.05)
            except (OSError, ValueError):
                if self._stop.is_set():
                    return
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                for pty, ch in ((self.repl, b"R"), (self.uart, b"U"), (self.uart1, b"u")):
                    if pty.master in r:
                        try:
                            data = os.read(pty.master, 4096)
                        except (BlockingIOError, OSError):
                            data = b""
                        if data:
                            self._send(ch, data)
                            if ch == b"U":
                                self.uart_bytes["to_board"] += len(data)
                            elif ch == b"u":
                                self.uart1_bytes["to_board"] += len(data)
                if self._proc is proc and proc is not None:
                    self._flush_to_node()
                    self._drain_stdout()
                    try:
                        self._stderr += os.read(proc.stderr.fileno(), 65536)
                    except (BlockingIOError, OSError, ValueError):
                        pass
                for pty in ptys:
                    pty.flush()
                if proc is not None and proc is self._proc and proc.poll() is not None:
                    self._drain_stdout()
                    if proc.returncode == HARD_RESET_EXIT:  # machine.reset() or the watchdog: boot again
                        self._spawn()
                    else:
                        self.error = ("the emulator exited (status %d): %s"
                                      % (proc.returncode, self._stderr.decode(errors="replace").strip()[-400:]))
                        return


def main(argv: list[str] | None = None) -> int:
    """`edgetwin vboard --board rp2040_pico --emulate`: run the emulated board until Ctrl-C or SIGTERM."""
    ap = argparse.ArgumentParser(prog="edgetwin vboard --emulate", description=(
        "Run the real MicroPython rp2 firmware (make firmware), or CircuitPython's (make firmware-cp, board "
        "rp2040_pico_cp), on an emulated RP2040: its REPL (USB CDC) and UART0 on pseudo-terminals, its flash "
        "in a file. Deploy with `edgetwin deploy --port <REPL pty>`."))
    ap.add_argument("--board", required=True, help="board profile (rp2040_pico, or rp2040_pico_cp for CircuitPython)")
    ap.add_argument("--image", type=Path, help="firmware .uf2 (default build/firmware/<board>/firmware.uf2;"
                    " its .elf beside it)")
    ap.add_argument("--flash", type=Path, help="flash file (default flash.bin beside the image)")
    ap.add_argument("--root", help=argparse.SUPPRESS)  # the unix board's option; the emulated board has flash
    ap.add_argument("--rig", help="a plant description: the plant simulator drives the board's inputs as it says "
                    "(ADC loops, contacts, I2C sensors, Modbus devices on UART1: tools/board/rig.py)")
    args = ap.parse_args(argv)
    if args.root:
        print("error: --root: the emulated board's filesystem is on its flash (--flash FILE)", file=sys.stderr)
        return 2
    plant_rig = None
    try:
        eb = EmuBoard(args.board, args.image, args.flash)
        eb.start()
    except EmuBoardError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    if args.rig:
        from tools.board import rig

        try:
            plant_rig = rig.rig_for(args.rig, eb.profile, board=eb, bus_port=eb.uart1_port)
        except rig.RigError as e:
            eb.stop()
            print("error: %s" % e, file=sys.stderr)
            return 2
    done = threading.Event()
    old = {s: signal.signal(s, lambda signum, frame: done.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        info = eb.describe()
        cp = BOARDS[eb.board] == "firmware-cp"
        print("emulated board %s (%s firmware on %s, booted in %.2f s host time)"
              % (eb.board, "CircuitPython raspberry_pi_pico" if cp else "MicroPython rp2", eb.emulator, eb.boot_host_s))
        print("  REPL  %s    (%s %s)" % (info["repl_port"], "ampy --port" if cp else "mpremote connect", info["repl_port"]))
        print("  UART  %s    (gateway side of UART0; bytes paced at the firmware's baud in board time)"
              % info["uart_port"])
        print("  UART1 %s    (the RS-485 bus's other end: UART1, paced by its frame format)" % info["uart1_port"])
        print("  image %s (%d bytes)" % (info["image"], info["image_bytes"]))
        print("  flash %s" % info["flash"])
        if plant_rig is not None:
            print("  rig   %s: the plant simulator's %s wired to the board's pins, its Modbus devices on UART1 (%s)"
                  % (args.rig, ", ".join(plant_rig.map), eb.uart1_port))
        print("Ctrl-C or SIGTERM stops it.", flush=True)
        while not done.wait(0.5):
            if eb.error:
                print("error: %s" % eb.error, file=sys.stderr)
                return 1
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if plant_rig is not None:
            plant_rig.stop()
        eb.stop()


if __name__ == "__main__":
    sys.exit(main())
