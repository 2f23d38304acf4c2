"""Build MicroPython v1.28.0 rp2 RPI_PICO firmware with the node's code frozen, cached by its inputs.

    python -m tools.board.firmware_build                 # or: make firmware
    python -m tools.board.firmware_build --check-only    # exit 0 if the cached image is current, 1 if not
    python -m tools.board.firmware_build --toolchain-only  # install the ARM toolchain only (make firmware-toolchain)

Output: build/firmware/rp2040_pico/firmware.uf2 (and .elf, .bin), with firmware.stamp beside it holding
the cache key: a hash of the sources (the vendored tarball's sha256, or the upstream tags when cloned),
this recipe, the board folder's files, the freeze manifest and the contents of every file it freezes. The
image is reused only when the stamp matches; an edit to any frozen file or to the board folder rebuilds it.

Board: the port's RPI_PICO with edgetwin's flash layout, from boards/rp2_romfs/ (BOARD_DIR; BOARD stays
RPI_PICO, so sys.implementation._build is the stock one's): a 384 KB ROMFS partition for the draft model
below a 1024 KB filesystem. --stock builds the port's own boards/RPI_PICO (no ROMFS, a 1408 KB
filesystem), the official download's layout.

Sources: $EDGETWIN_VENDOR (default ../shared/vendor beside the checkout) holding
micropython-firmware-src.tar.xz and its .sha256 (see SOURCES.md there). Without it the same trees are
cloned from GitHub at the pinned tags (needs network access). The tree is unpacked to build/vendor
first, since the build writes into it. Steps (progress on stderr): toolchain, sources, mpy-cross,
picotool, firmware, install. Uses at most $EDGETWIN_JOBS (default 2) parallel jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]
TARBALL = "micropython-firmware-src.tar.xz"
MPY_DIR = "micropython-1.28.0"
PICOTOOL_DIR = "picotool-2.2.0"
BOOTROM = "rp2040js-bootrom/bootrom.ts"
BOARD = "RPI_PICO"
# Bump when the steps below change what they produce: it is part of the cache key.
RECIPE = "rp2-RPI_PICO-v1.28.0-recipe-4"  # 3: frozen armv6m native code word-aligned (patch_sources); 4: BOARD_DIR
APT_PACKAGES = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "libstdc++-arm-none-eabi-newlib")
# The clone path (no vendor folder): the upstream repositories at the tags SOURCES.md names.
GIT_SOURCES = (
    ("https://github.com/micropython/micropython.git", "v1.28.0", MPY_DIR),
    ("https://github.com/raspberrypi/picotool.git", "2.2.0", PICOTOOL_DIR),
    ("https://github.com/wokwi/rp2040js.git", "v1.4.1", "rp2040js"),
)


class BuildError(Exception):
    """A step failed; the message says what to do next."""


def log(msg: str) -> None:
    print("firmware: " + msg, file=sys.stderr, flush=True)


def default_vendor() -> Path:
    return Path(os.environ.get("EDGETWIN_VENDOR") or (ROOT.parent / "shared" / "vendor"))


def work_dir() -> Path:
    return ROOT / "build" / "vendor"


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on `path` (made if missing), waiting for another holder; dropped when the block
    ends or the process dies. The firmware images may build beside the tests (tools/board/prebuild.py), and a
    test may build q4nat (tools/board/natmod_build.py) meanwhile: both unpack these sources and may install the
    ARM toolchain, which must not run twice at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


SOURCES_LOCK = ROOT / "build" / "vendor.lock"


def out_dir(variant: str = "") -> Path:
    """build/firmware/rp2040_pico (the node frozen), or rp2040_pico-VARIANT (e.g. -stock)."""
    return ROOT / "build" / "firmware" / ("rp2040_pico" + ("-" + variant if variant else ""))


STOCK_MANIFEST = ROOT / "boards" / "manifest_stock.py"  # the port's default manifest: what a user downloads


def manifest_path() -> Path:
    return ROOT / "boards" / "manifest.py"


# edgetwin's board folder (mpconfigboard.h: ROMFS 384 KB + filesystem 1024 KB); None: the port's own RPI_PICO
ROMFS_BOARD_DIR = ROOT / "boards" / "rp2_romfs"


def board_dir(variant: str = "") -> Path | None:
    """The board folder an image variant builds with: the stock download's layout has no ROMFS."""
    return None if variant == "stock" else ROMFS_BOARD_DIR


FLASH_BYTES = 2 * 1024 * 1024  # the Pico's


def code_region(header: Path) -> int:
    """Flash bytes left for the firmware image below the ROMFS partition and the filesystem that a board's
    mpconfigboard.h defines (`(N * 1024)` forms). The port's linker script allows the whole flash, so an
    image that outgrew this region would silently overlap the model or the filesystem: install() checks."""
    import re

    text = header.read_text()
    taken = 0
    for name in ("MICROPY_HW_FLASH_STORAGE_BYTES", "MICROPY_HW_ROMFS_BYTES"):
        m = re.search(r"#define\s+%s\s+\((\d+)\s*\*\s*1024\)" % name, text)
        if m:
            taken += int(m.group(1)) * 1024
    return FLASH_BYTES - taken


def jobs() -> int:
    try:
        return max(1, int(os.environ.get("EDGETWIN_JOBS", "2")))
    except ValueError:
        return 2


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, logfile: Path | None = None) -> None:
    """Run one command; its output goes to logfile (the tail is shown when it fails)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    # The rp2 port's Makefile owns CMAKE_ARGS: an inherited one would replace it (and drop the manifest).
    full_env.pop("CMAKE_ARGS", None)
    full_env.pop("MAKEFLAGS", None)
    full_env.pop("MFLAGS", None)
    if logfile is None:
        proc = subprocess.run(cmd, cwd=cwd, env=full_env)
        if proc.returncode:
            raise BuildError("%s failed (exit %d)" % (" ".join(cmd), proc.returncode))
        return
    with open(logfile, "ab") as fh:
        fh.write(("\n$ %s\n" % " ".join(cmd)).encode())
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, env=full_env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode:
        tail = logfile.read_text(errors="replace").splitlines()[-25:]
        raise BuildError("%s failed (exit %d); last lines of %s:\n%s"
                         % (" ".join(cmd[:3]), proc.returncode, logfile, "\n".join(tail)))


# --- cache key -------------------------------------------------------------------------------------

def frozen_files(manifest: Path) -> list[Path]:
    """The files a freeze manifest names (package/module/include with plain paths), manifest included.

    Paths with $(...) variables belong to the MicroPython tree, which the sources key already covers."""
    found: list[Path] = [manifest]

    def resolve(base_path: str | None) -> Path:
        return (manifest.parent / base_path).resolve() if base_path else manifest.parent

    def package(name, files=None, base_path=None, opt=None):
        base = resolve(base_path)
        if files is None:
            found.extend(sorted(p for p in (base / name).rglob("*.py")))
        else:
            found.extend(base / name / f for f in files)

    def module(name, base_path=None, opt=None):
        found.append(resolve(base_path) / name)

    def include(path, **kw):
        if "$(" not in path:
            p = resolve(path)
            found.extend(frozen_files(p / "manifest.py" if p.is_dir() else p))

    def ignore(*a, **kw):
        return None

    env = {"package": package, "module": module, "include": include, "require": ignore,
           "metadata": ignore, "freeze": ignore, "options": type("O", (), {})()}
    exec(compile(manifest.read_text(), str(manifest), "exec"), env)
    return found


def manifest_digest(manifest: Path) -> str:
    h = hashlib.sha256()
    for path in frozen_files(manifest):
        if not path.is_file():
            raise BuildError("%s: frozen file %s is missing (run python -m tools.board.freeze_manifest)"
                             % (manifest, path))
        h.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def sources_key(vendor: Path) -> str:
    sha = vendor / (TARBALL + ".sha256")
    if (vendor / TARBALL).is_file() and sha.is_file():
        return "tar:" + sha.read_text().split()[0]
    return "git:" + ",".join("%s@%s" % (url.rsplit("/", 1)[1], tag) for url, tag, _ in GIT_SOURCES)


def board_digest(folder: Path | None) -> str:
    """The board folder's files (their names and contents), or "stock" for the port's own board."""
    if folder is None:
        return "stock"
    h = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def cache_key(vendor: Path, manifest: Path, board: Path | None = ROMFS_BOARD_DIR) -> str:
    h = hashlib.sha256()
    for part in (RECIPE, sources_key(vendor), manifest_digest(manifest), board_digest(board)):
        h.update(part.encode() + b"\n")
    return h.hexdigest()


def image_current(key: str, variant: str = "") -> bool:
    out = out_dir(variant)
    stamp = out / "firmware.stamp"
    return (stamp.is_file() and stamp.read_text().split()[:1] == [key]
            and all((out / ("firmware." + ext)).is_file() for ext in ("uf2", "elf", "bin")))


# --- steps -----------------------------------------------------------------------------------------

def step_toolchain() -> None:
    """arm-none-eabi-gcc with newlib; installed with apt-get where this runs as root."""
    def present() -> bool:
        if not shutil.which("arm-none-eabi-gcc"):
            return False
        libc = subprocess.run(["arm-none-eabi-gcc", "-print-file-name=libc.a"],
                              capture_output=True, text=True).stdout.strip()
        return os.path.isabs(libc)

    if present():
        return
    with file_lock(SOURCES_LOCK):
        if not present():  # another build may have installed it while this one waited
            _install_toolchain(present)


def _install_toolchain(present) -> None:
    cmd = ["apt-get", "install", "-y", *APT_PACKAGES]
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise BuildError("the ARM toolchain is missing; install it with:\n  sudo DEBIAN_FRONTEND=noninteractive "
                         + " ".join(cmd))
    log("installing the ARM toolchain: " + " ".join(cmd))
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    try:
        run(cmd, env=env)
    except BuildError:
        log("apt-get install failed; running apt-get update and trying again")
        run(["apt-get", "update"], env=env)
        run(cmd, env=env)
    if not present():
        raise BuildError("arm-none-eabi-gcc or its newlib is still missing after apt-get install")


def step_sources(vendor: Path) -> Path:
    """Unpack (or clone) the sources into build/vendor once per sources key; returns that folder."""
    with file_lock(SOURCES_LOCK):
        return _sources(vendor)


def _sources(vendor: Path) -> Path:
    work = work_dir()
    stamp = work / ".sources"
    key = sources_key(vendor)
    if stamp.is_file() and stamp.read_text().strip() == key and (work / MPY_DIR).is_dir():
        return work
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if key.startswith("tar:"):
        unpack(vendor / TARBALL, key, work, log)
    else:
        log("no %s in %s (set EDGETWIN_VENDOR to the folder holding it); cloning from GitHub instead"
            % (TARBALL, vendor))
        for url, tag, folder in GIT_SOURCES:
            run(["git", "clone", "--depth", "1", "--branch", tag, url, str(work / folder)])
        run(["make", "-C", str(work / MPY_DIR / "ports" / "rp2"), "BOARD=" + BOARD, "submodules"])
        (work / "rp2040js-bootrom").mkdir()
        shutil.copy(work / "rp2040js" / "demo" / "bootrom.ts", work / BOOTROM)
    if not (work / MPY_DIR).is_dir() or not (work / BOOTROM).is_file():
        raise BuildError("%s lacks %s or %s after unpacking" % (work, MPY_DIR, BOOTROM))
    stamp.write_text(key + "\n")
    return work


def unpack(tarball: Path, key: str, dest: Path, say=log) -> None:
    """Check tarball against its sources key ("tar:" + the sha256 its .sha256 file names), then unpack it into
    dest (tar's own filter: no member outside dest)."""
    say("checking %s" % tarball)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if "tar:" + digest != key:
        raise BuildError("%s: sha256 %s does not match %s.sha256" % (tarball, digest, tarball.name))
    say("unpacking %s into %s" % (tarball.name, dest))
    with tarfile.open(tarball) as tf:
        if hasattr(tarfile, "tar_filter"):
            tf.extractall(dest, filter="tar")
        else:  # Python < 3.10.12 has no extraction filters
            tf.extractall(dest)


def install(build: Path, out: Path, key: str, recipe: str) -> None:
    """firmware.uf2/.elf/.bin from the build folder into out (each replaced whole), then the stamp."""
    out.mkdir(parents=True, exist_ok=True)
    for ext in ("uf2", "elf", "bin"):
        tmp = out / ("firmware.%s.tmp" % ext)
        shutil.copyfile(build / ("firmware." + ext), tmp)
        tmp.replace(out / ("firmware." + ext))
    (out / "firmware.stamp").write_text("%s\n%s\n" % (key, recipe))


def timed(name: str, fn, *args, say=log):
    say("step %s ..." % name)
    t0 = time.monotonic()
    result = fn(*args)
    say("step %s done in %.1f s" % (name, time.monotonic() - t0))
    return result


# v1.28.0's tools/mpy-tool.py aligns frozen armv6m native code to 2 bytes only, but the Thumb code that
# mpy-cross emits loads its 32-bit constants PC-relative from a literal pool placed as if the code started on
# a word (as code loaded from a .mpy does: it lives in a heap block): frozen at an address 2 mod 4, every
# viper kernel read wrong constants and computed garbage on the RP2040 (found by the emulated board's
# ids check, tests/host/test_firmware_emu.py). Freezing it word-aligned, as ARMv6 and Xtensa code is, fixes it.
_MPY_TOOL_ALIGN = ("        if config.native_arch in (\n            MP_NATIVE_ARCH_ARMV6,\n",
                   "        if config.native_arch in (\n            MP_NATIVE_ARCH_ARMV6,\n"
                   "            MP_NATIVE_ARCH_ARMV6M,  # edgetwin: word-aligned (firmware_build.py)\n")


def patch_sources(work: Path) -> None:
    """Apply the recipe's fixes to the unpacked or cloned MicroPython tree (idempotent)."""
    tool = work / MPY_DIR / "tools" / "mpy-tool.py"
    text = tool.read_text()
    old, new = _MPY_TOOL_ALIGN
    if new in text:
        return
    if text.count(old) != 1:
        raise BuildError("%s: the native code alignment this recipe fixes is not where v1.28.0 has it" % tool)
    tool.write_text(text.replace(old, new))
    log("patched %s: frozen armv6m native code word-aligned" % tool)


def step_mpy_cross(work: Path) -> None:
    run(["make", "-C", str(work / MPY_DIR / "mpy-cross"), "-j%d" % jobs()], logfile=work / "mpy-cross.log")


def picotool_install(work: Path) -> Path:
    return work / "picotool-install"


def step_picotool(work: Path) -> None:
    """pico-sdk 2.x needs picotool for UF2 output (and would clone it otherwise); built without libusb."""
    inst = picotool_install(work)
    if list(inst.rglob("picotoolConfig.cmake")):
        return
    logfile = work / "picotool.log"
    run(["cmake", "-S", str(work / PICOTOOL_DIR), "-B", str(work / "picotool-build"),
         "-DPICO_SDK_PATH=%s" % (work / MPY_DIR / "lib" / "pico-sdk"), "-DPICOTOOL_NO_LIBUSB=1",
         "-DPICOTOOL_FLAT_INSTALL=1", "-DCMAKE_INSTALL_PREFIX=%s" % inst], logfile=logfile)
    run(["make", "-C", str(work / "picotool-build"), "-j%d" % jobs(), "install"], logfile=logfile)


def step_firmware(work: Path, manifest: Path, vendor: Path, board: Path | None = None) -> Path:
    """The rp2 port's make with the freeze manifest; FROZEN_MANIFEST (and BOARD_DIR: board, when given) on
    the command line, picotool's location in the environment (CMAKE_ARGS on the command line would drop the
    manifest)."""
    port = work / MPY_DIR / "ports" / "rp2"
    env = {"PICOTOOL_FETCH_FROM_GIT_PATH": str(picotool_install(work))}
    if sources_key(vendor).startswith("tar:"):
        # the unpacked tree has no .git of its own: `git describe` would name the enclosing checkout
        env["MICROPY_GIT_TAG"] = "v1.28.0"
        env["MICROPY_GIT_HASH"] = "vendored"
    # one build folder per manifest: the port's make runs cmake only where the folder has no Makefile yet, so
    # a FROZEN_MANIFEST other than the one it was configured with would be ignored (silently the old image)
    # (and one per board folder: the ROMFS layout is a cmake-time choice as well)
    name = ("build-" + BOARD + ("-romfs" if board is not None else "")
            + ("" if manifest == manifest_path().resolve() else "-" + manifest.stem))
    build = port / name
    for ext in ("uf2", "elf", "bin"):
        (build / ("firmware." + ext)).unlink(missing_ok=True)
    # regenerated each build: make would keep one frozen by an earlier recipe (patch_sources changes no input)
    (build / "frozen_content.c").unlink(missing_ok=True)
    cmd = ["make", "-C", str(port), "-j%d" % jobs(), "BOARD=" + BOARD, "BUILD=" + name, "FROZEN_MANIFEST=%s" % manifest]
    if board is not None:
        cmd.append("BOARD_DIR=%s" % board)
    run(cmd, env=env, logfile=work / "firmware.log")
    if not (build / "firmware.uf2").is_file():
        raise BuildError("the rp2 build finished without %s (see %s)" % (build / "firmware.uf2",
                                                                        work / "firmware.log"))
    return build


def step_install(build: Path, key: str, variant: str = "") -> None:
    install(build, out_dir(variant), key, RECIPE)


def ensure(vendor: Path | None = None, manifest: Path | None = None, variant: str = "") -> Path:
    """Build the image unless the cached one is current; returns the .uf2 path (in out_dir(variant))."""
    vendor = vendor or default_vendor()
    manifest = (manifest or manifest_path()).resolve()
    board = board_dir(variant)
    key = cache_key(vendor, manifest, board)
    out = out_dir(variant)
    if image_current(key, variant):
        log("up to date: %s (key %s)" % (out / "firmware.uf2", key[:12]))
        return out / "firmware.uf2"
    (out / "firmware.stamp").unlink(missing_ok=True)  # never leave a stale image looking current
    t_all = time.monotonic()
    timed("toolchain", step_toolchain)
    work = timed("sources", step_sources, vendor)
    patch_sources(work)
    timed("mpy-cross", step_mpy_cross, work)
    timed("picotool", step_picotool, work)
    build = timed("firmware", step_firmware, work, manifest, vendor, board)
    header = (board or work / MPY_DIR / "ports" / "rp2" / "boards" / BOARD) / "mpconfigboard.h"
    size, room = (build / "firmware.bin").stat().st_size, code_region(header)
    if size > room:
        raise BuildError("firmware.bin is %d bytes, over the %d-byte code region %s leaves below ROMFS and the "
                         "filesystem: shrink the frozen code or the partitions" % (size, room, header))
    timed("install", step_install, build, key, variant)
    size = (out / "firmware.uf2").stat().st_size
    log("built %s (%d bytes) in %.0f s" % (out / "firmware.uf2", size, time.monotonic() - t_all))
    return out / "firmware.uf2"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vendor", type=Path, help="folder with %s (default $EDGETWIN_VENDOR or "
                    "../shared/vendor)" % TARBALL)
    ap.add_argument("--manifest", type=Path, help="freeze manifest (default boards/manifest.py)")
    ap.add_argument("--stock", action="store_true", help="the port's default manifest only (boards/manifest_stock.py: "
                    "no edgetwin code frozen, as the official download) into %s" % out_dir("stock"))
    ap.add_argument("--check-only", action="store_true", help="exit 0 if the cached image is current, 1 if not")
    ap.add_argument("--toolchain-only", action="store_true", help="only install (or check) the ARM toolchain")
    args = ap.parse_args(argv)
    manifest = args.manifest or (STOCK_MANIFEST if args.stock else manifest_path())
    variant = "stock" if args.stock else ""
    if not manifest.is_file():
        print("firmware: %s: no such freeze manifest" % manifest, file=sys.stderr)
        return 2
    try:
        if args.toolchain_only:
            timed("toolchain", step_toolchain)
            return 0
        if args.check_only:
            key = cache_key(args.vendor or default_vendor(), manifest.resolve(), board_dir(variant))
            return 0 if image_current(key, variant) else 1
        ensure(args.vendor, manifest, variant)
    except BuildError as exc:
        print("firmware: " + str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
