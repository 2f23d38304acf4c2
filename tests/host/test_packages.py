"""The two node packages (tools/board/build.py DRAFTING, package_sources): the logs-only package is exactly
what a logs-only node imports under MicroPython, and `edgetwin deploy --node` to a board no draft plan
fits ships only it (no llama, bpe, q4 or drafter) and the node still boots there.

The fast test runs two logs-only nodes (the boot steps of firmware/node.main: profile, node.json with model
null, make_drafter, Node, its spill ring and unique id, steps) on the MicroPython unix port from a folder
holding only the logs-only package's sources, one on the built-in simulator and one on a described plant
read over Modbus (its bus a pty), and records every import: the nodes run without the rest, and between
them they import every module of the package (a module no node imports would be shipped for nothing), but
the sources of inputs the unix port has no hardware for (ADC, GPIO, I2C: firmware/analog.py ...), which
the emulated RP2040's tests run (tests/host/test_plant_emu.py).
The slow test deploys to a virtual board with a MicroPython profile whose heap no plan of the shipped
draft fits and waits for the node's start line.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from host import cli
from tools.board import build
from tools.board.vboard import VirtualBoard, micropython_exe

ROOT = Path(__file__).resolve().parents[2]
MODEL_RUNTIME = {"shared/llama.py", "shared/bpe.py", "shared/q4.py", "shared/q4a_q8.py", "shared/q4_viper.py",
                 "shared/drafter.py", "shared/mbf.py", "shared/ringkv.py", "firmware/annotator.py"}

_NODE = """import builtins, sys
seen = set()
_imp = builtins.__import__
def _hook(name, g=None, l=None, fl=None, lvl=0):
    seen.add(name)
    for f in (fl if isinstance(fl, (tuple, list)) else ()):
        seen.add(name + '.' + f)
    return _imp(name, g, l, fl, lvl)
builtins.__import__ = _hook
from firmware import boardcfg, node
prof = boardcfg.load(%(prof)r)
cfg = node.load_config(%(cfg)r)
d, vocab = node.make_drafter(prof, cfg)
class Loop:
    def __init__(self): self.n = 0
    def write(self, b, n=None): self.n += len(b) if n is None else n; return len(b) if n is None else n
    def readinto(self, buf): return 0
    def any(self): return 0
u = Loop()
n = node.Node(u, prof, cfg, d, vocab, 0, None)
for t in range(0, 3000, 5):
    n.step(t)
for name in sys.modules:
    seen.add(name)
print('@@', d is None, n.q.queued, u.n, n.spill is not None)
print('@@', ' '.join(sorted(seen)))
"""


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _imported_anywhere() -> set[str]:
    """Modules of shared/ and firmware/ that the node's main.py or some module of the board's core imports
    (any import statement)."""
    out: set[str] = set()
    for text in [build.NODE_MAIN] + [src.read_text() for src in build.sources("micropython")]:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
                out |= {node.module + "." + a.name for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args
                  and isinstance(node.args[0], ast.Constant)):
                out.add(node.args[0].value)
    return out


HARDWARE_SOURCES = {"firmware.analog", "firmware.contacts", "firmware.pulses", "firmware.i2c_sensors",
                    "firmware.mcp9600", "firmware.ads1115"}  # machine.ADC / Pin / I2C: boards and the emulator only


def _run_node(tmp_path: Path, lib: Path, name: str, plant: bytes | None, env: dict) -> set[str]:
    d = tmp_path / name
    d.mkdir()
    cfg = {"model": None, "tick_ms": 1, "spill_path": str(d / "spill.bin"), "uid_path": str(d / "node.uid"),
           "spill_bytes": 65536, "plant": str(d / "plant.json"), "key_path": str(d / "link.key"),
           "counter_path": str(d / "link.ctr")}
    if plant is not None:  # the described plant's node has a link key (deploy --node's): it signs every frame
        (d / "plant.json").write_bytes(plant)
        (d / "link.key").write_bytes(bytes(range(32)))
    (d / "node.json").write_text(json.dumps(cfg))
    script = _NODE % {"prof": str(ROOT / "boards" / "rp2040_pico.json"), "cfg": str(d / "node.json")}
    res = subprocess.run([micropython_exe(), "-X", "heapsize=2M", "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=str(d), env=dict(env, MICROPYPATH=str(lib)))
    assert res.returncode == 0, res.stdout + res.stderr
    facts, names = [line[3:].split() for line in res.stdout.splitlines() if line.startswith("@@")]
    no_drafter, queued, wire, spills = facts
    assert no_drafter == "True" and spills == "True"
    assert int(queued) > (20 if plant is None else 1) and int(wire) > 100  # it logged lines, the link sent bytes
    assert "NODE plant error" not in res.stdout, res.stdout
    return {n for n in names if n.split(".")[0] in ("shared", "firmware")} & {_module(p) for p in build.sources()}


def test_a_logs_only_node_imports_exactly_the_logs_only_package(tmp_path: Path) -> None:
    import os

    from host import plantcompile, plantfile

    lib = tmp_path / "lib"
    logs = build.sources("micropython", drafting=False)
    for src in logs:
        dest = lib / src.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    from tools.board.ptys import set_raw

    master, slave = os.openpty()  # the described plant's RS-485 bus: nothing answers on it, that is fine here
    set_raw(slave)  # as a virtual board's buses are
    try:
        desc = {"format": "edgetwin-plant/1", "name": "pkg", "buses": {"rs485": {"type": "rs485", "uart": 1, "tx": 4,
                                                                               "rx": 5}},
                "profiles": {"vfd": {"registers": {"run": {"register": "discrete", "address": 0},
                                                   "current": {"register": "input", "address": 3, "scale": 0.1}}}},
                "devices": {"drive": {"profile": "vfd", "bus": "rs485", "unit": 1}},
                "machines": [{"id": "P-1", "kind": "pump", "state": {"run": {"device": "drive", "register": "run"}},
                              "signals": [{"key": "I", "tag": "motor_current", "unit": "A",
                                           "source": {"device": "drive", "register": "current"}}]}]}
        plant = plantcompile.compile_plant(plantfile.loads(json.dumps(desc), "pkg.json"))
        env = {"EDGETWIN_UART": "unused: the test's node has its own link", "EDGETWIN_BUS1": os.ttyname(slave)}
        imported = _run_node(tmp_path, lib, "sim", None, {}) | _run_node(tmp_path, lib, "described", plant, env)
    finally:
        os.close(master)
        os.close(slave)
    package = {_module(p) for p in logs}
    assert imported <= package  # nothing else was there to import, and they ran
    assert not imported & HARDWARE_SOURCES
    package -= HARDWARE_SOURCES
    # every module of the package is imported by the node, but a module no board module imports yet
    # (none, or one just added for later use) is not a reason to drop it
    unused = {m for m in package if m not in _imported_anywhere() and m not in ("shared", "firmware")}
    # SHA-256 in bytecode halves: shipped for a firmware without the native emitter, loaded only there (this
    # unix port runs the viper engine)
    package -= {"shared.sha256_halves"}
    assert package - unused == imported, sorted(package - unused ^ imported)
    assert len(unused) <= 1, sorted(unused)


def test_deploy_node_to_a_board_no_plan_fits_gives_a_logs_only_node(tmp_path: Path) -> None:
    prof = dict(build.board_profile("rp2040_pico"), name="pico_logs", heap_bytes=48 * 1024)
    assert not build.can_draft(prof)
    out = build.build(prof, arch="x64", out_dir=tmp_path / "b", node=True)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    paths = {f["path"].replace(".mpy", ".py")[len("lib/"):] for f in manifest["files"]}
    assert manifest["package"] == "logs-only" and "node" not in manifest
    assert paths == {str(p.relative_to(ROOT)) for p in build.sources("micropython", drafting=False)}
    assert not paths & MODEL_RUNTIME
    assert json.loads((out / "node.json").read_text()) == {"model": None}
    assert (out / "main.py").read_text() == build.NODE_MAIN and not list(out.glob("*.mbf"))
    full = build.build(build.board_profile("rp2040_pico"), arch="x64", out_dir=tmp_path / "d", node=True)
    drafting = json.loads((full / "MANIFEST.json").read_text())
    assert drafting["package"] == "drafting" and drafting["total_bytes"] > 2 * manifest["total_bytes"]
    print("rp2040_pico x64 deploy: logs-only %d files, %d B; drafting %d files, %d B (model %d B)"
          % (len(manifest["files"]), manifest["total_bytes"], len(drafting["files"]), drafting["total_bytes"],
             drafting["node"]["model_bytes"]))


@pytest.mark.slow
def test_a_logs_only_node_boots_on_a_virtual_board(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from host import board_profile

    monkeypatch.setattr(board_profile, "BUILD", tmp_path / "build" / "boards")
    prof = dict(build.board_profile("rp2040_pico"), name="pico_logs", heap_bytes=48 * 1024)
    path = tmp_path / "pico_logs.json"
    path.write_text(json.dumps(prof))
    log = tmp_path / "console.log"
    # the unix port's objects are larger than the board's: the heap is the drafting profile's (vboard's own)
    with VirtualBoard(prof, root=tmp_path / "fs", heap_bytes=3 * 196608, console_log=log) as vb:
        assert cli.main(["deploy", "--board", str(path), "--port", vb.repl_port, "--node", "--arch", "x64"]) == 0
        out = capsys.readouterr().out
        report = json.loads(out[out.index("{"):out.rindex("}") + 1])
        shipped = {f["path"] for f in report["files"]}
        assert "/lib/firmware/node.mpy" in shipped and "/node.json" in shipped
        assert not {"/lib/" + p.replace(".py", ".mpy") for p in MODEL_RUNTIME} & shipped
        assert not (tmp_path / "fs" / "lib" / "shared" / "llama.mpy").exists()
        deadline = time.monotonic() + 60
        text = ""
        while "NODE start" not in text and time.monotonic() < deadline:
            time.sleep(0.3)
            text = log.read_text(errors="replace") if log.exists() else ""
        assert "NODE start board=pico_logs model=no" in text, text[-2000:]
        time.sleep(1)
        assert "Traceback" not in log.read_text(errors="replace").split("NODE start")[-1]
        heap = text.split("NODE start board=pico_logs model=no heap=")[1].split()[0]
        print("logs-only deploy: %d files, %d B; the node's heap in use after boot %s B" % (
            len(report["files"]), report["total_bytes"], heap))
