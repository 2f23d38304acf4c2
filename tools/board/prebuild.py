"""Build the emulated boards' firmware images (`make firmware`, `make firmware-cp`) beside the tests.

    python -m tools.board.prebuild --detach     (what `make test` runs before pytest)

The two images take minutes to build on a fresh clone, and the tests that boot them come last in the
end-to-end stream (tools/suite.py runs those one at a time): built at the lowest priority with one job, on the
core the end-to-end stream leaves to the quick tests, they are ready (or nearly) when the first of those tests
asks for them. Both this build and the tests'
fixtures (tests/host/conftest.py) take build_lock() around `make`, so a fixture that comes early waits for the
build under way and then finds the image current; nothing is built twice. A failed build here is only logged
(build/prebuild.log): the fixture runs `make` again and reports the failure where it matters. Where the vendored
sources are absent nothing is built (the fixtures say so, or clone them, as without this)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from tools.board import firmware_build  # noqa: E402

LOCK = ROOT / "build" / "firmware.lock"
LOG = ROOT / "build" / "prebuild.log"
TARGETS = (("firmware", "micropython-firmware-src.tar.xz"), ("firmware-cp", "circuitpython-src.tar.xz"))


def build_lock(path: Path = LOCK):
    """The firmware images' lock: held around `make firmware` / `make firmware-cp` here and in the fixtures."""
    return firmware_build.file_lock(path)


def vendor() -> Path:
    return Path(os.environ.get("EDGETWIN_VENDOR") or ROOT.parent / "shared" / "vendor")


def build(log) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["EDGETWIN_JOBS"] = "1"  # one core: the other runs the tests
    worst = 0
    for target, tarball in TARGETS:
        if not (vendor() / tarball).is_file():
            print("prebuild: no %s in %s: %s left to the tests" % (tarball, vendor(), target), file=log, flush=True)
            continue
        t0 = time.monotonic()
        with build_lock():
            rc = subprocess.run(["nice", "-n", "19", "make", "-C", str(ROOT), target, "PYTHON=" + sys.executable],
                                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        print("prebuild: make %s exit %d in %.0f s" % (target, rc, time.monotonic() - t0), file=log, flush=True)
        worst = worst or rc
    return worst


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--detach"]):
        print("usage: python -m tools.board.prebuild [--detach]", file=sys.stderr)
        return 2
    LOG.parent.mkdir(parents=True, exist_ok=True)
    if args == ["--detach"]:  # the suite does not wait for it; in the same session (and scheduler group, where
        # the kernel groups by session), so its low priority does yield the cores to the tests, and Ctrl-C stops it
        with open(LOG, "w") as log:
            subprocess.Popen([sys.executable, "-m", "tools.board.prebuild"], cwd=str(ROOT), stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT)
        print("firmware images building beside the tests (log: %s)" % LOG.relative_to(ROOT))
        return 0
    return build(sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
