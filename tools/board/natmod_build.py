"""Build q4nat.mpy, the decode step's C kernels (firmware/natmod/q4nat.c), as a MicroPython dynamic native module.

    python -m tools.board.natmod_build                 # armv6m (the RP2040) and x64 (the unix port)
    python -m tools.board.natmod_build --arch armv6m   # one architecture

MicroPython's own natmod tooling does the work (py/dynruntime.mk: the compiler, then tools/mpy_ld.py, which
links libgcc's division helpers in), on the v1.28.0 sources that `make firmware` unpacks into build/vendor
from $EDGETWIN_VENDOR. armv6m needs arm-none-eabi-gcc (installed as `make firmware` installs it), x64 the
host's gcc; mpy_ld.py needs pyelftools and ar (the project's test dependencies). Output:
build/natmod/ARCH/q4nat.mpy, cached: rebuilt only when the C source, its makefile, the MicroPython sources
or the compiler change. The same file loads on the official firmware and on ours (a native module cannot
be frozen: it is linked at import), so `edgetwin build` puts it into the board's /lib.
xtensawin (the ESP32-S3) is not built: no LX7 toolchain here; those boards run the viper kernels.
"""
import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tools.board import firmware_build
from tools.board.firmware_build import BuildError

ROOT = Path(__file__).resolve().parents[2]
SRC_DIR = ROOT / "firmware" / "natmod"
MODULE = "q4nat"
ARCHES = ("armv6m", "x64")
COMPILER = {"armv6m": "arm-none-eabi-gcc", "x64": "gcc"}


def log(msg: str) -> None:
    print("natmod: " + msg, file=sys.stderr, flush=True)


def out_path(arch: str) -> Path:
    return ROOT / "build" / "natmod" / arch / (MODULE + ".mpy")


def _compiler_version(arch: str) -> str:
    exe = shutil.which(COMPILER[arch])
    if exe is None:
        if arch == "armv6m":
            firmware_build.step_toolchain()
            exe = shutil.which(COMPILER[arch])
        if exe is None:
            raise BuildError("%s is missing: it compiles q4nat for %s" % (COMPILER[arch], arch))
    return subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def cache_key(arch: str, vendor: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(SRC_DIR.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(("%s\0%s\0%s" % (arch, firmware_build.sources_key(vendor), _compiler_version(arch))).encode())
    return h.hexdigest()


def ensure(arch: str, vendor: Path | None = None) -> Path:
    """build/natmod/ARCH/q4nat.mpy, built when missing or stale; BuildError naming what failed."""
    if arch not in ARCHES:
        raise BuildError("q4nat is built for %s, not %s" % (", ".join(ARCHES), arch))
    vendor = vendor or firmware_build.default_vendor()
    out = out_path(arch)
    key = cache_key(arch, vendor)
    stamp = out.with_suffix(".stamp")
    if out.is_file() and stamp.is_file() and stamp.read_text().strip() == key:
        return out
    for mod in ("elftools", "ar"):
        try:
            __import__(mod)
        except ImportError:
            raise BuildError("tools/mpy_ld.py needs the Python package %s: pip install -e '.[test]' (make test "
                             "does)" % ("pyelftools" if mod == "elftools" else mod)) from None
    work = firmware_build.step_sources(vendor)
    mpy_dir = work / firmware_build.MPY_DIR
    build = ROOT / "build" / "natmod" / arch / "obj"
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    # dynruntime.mk writes MOD.mpy into the current folder: run it in the object folder, the sources by path
    shutil.copy(SRC_DIR / "Makefile", build / "Makefile")
    shutil.copy(SRC_DIR / (MODULE + ".c"), build / (MODULE + ".c"))
    log("compiling %s.c for %s" % (MODULE, arch))
    res = subprocess.run(["make", "-s", "MPY_DIR=" + str(mpy_dir), "ARCH=" + arch, "BUILD=build",
                          "PYTHON=" + sys.executable], cwd=build, capture_output=True, text=True)
    if res.returncode != 0 or not (build / (MODULE + ".mpy")).is_file():
        raise BuildError("building %s.mpy for %s failed:\n%s" % (MODULE, arch, (res.stdout + res.stderr).strip()[-3000:]))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    shutil.copyfile(build / (MODULE + ".mpy"), tmp)
    tmp.replace(out)
    stamp.write_text(key + "\n")
    log("%s: %d bytes" % (out.relative_to(ROOT), out.stat().st_size))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.board.natmod_build", description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=ARCHES, action="append", help="architecture (default: all)")
    args = ap.parse_args(argv)
    try:
        for arch in args.arch or ARCHES:
            print(ensure(arch))
    except BuildError as e:
        print("natmod: error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
