"""Fixtures the host tests share."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _make_image(target: str, tarball: Path, what: str) -> None:
    """`make TARGET` as a user runs it (cached: a current image is reused, a stale one rebuilt), under the lock
    tools/board/prebuild.py holds while it builds the images beside the tests, so nothing is built twice. Skipped only
    where the vendored sources are absent outside CI; in CI (CI set) they are beside the checkout and their
    absence fails."""
    if not tarball.is_file():
        if os.environ.get("CI"):
            pytest.fail("CI: no %s in %s (EDGETWIN_VENDOR); CI has the vendored sources beside the checkout"
                        % (tarball.name, tarball.parent))
        pytest.skip("no vendored %s sources in %s (set EDGETWIN_VENDOR)" % (what, tarball.parent))
    from tools.board import prebuild

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    t0 = time.monotonic()
    with prebuild.build_lock():  # `make test` builds the images beside the tests: wait for that build, if any
        t1 = time.monotonic()
        proc = subprocess.run(["make", "-C", str(ROOT), target, "PYTHON=" + sys.executable],
                              env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print("make %s: %.1f s (%.1f s waiting for the build beside the tests)"
          % (target, time.monotonic() - t1, t1 - t0))


def pytest_collection_modifyitems(session, config, items) -> None:
    """The tests that boot a firmware image run last, in their order: the images build beside the tests
    (tools/board/prebuild.py), and a test that asks for one early waits for that build."""
    late = [i for i in items if {"image", "cp_image"} & set(getattr(i, "fixturenames", ()))]
    if late:
        ids = {id(i) for i in late}
        items[:] = [i for i in items if id(i) not in ids] + late


@pytest.fixture(scope="session")
def image() -> Path:
    """The rp2 firmware through `make firmware` (_make_image)."""
    from tools.board import firmware_build

    vendor = firmware_build.default_vendor()
    _make_image("firmware", vendor / firmware_build.TARBALL, "MicroPython")
    assert firmware_build.image_current(firmware_build.cache_key(vendor, firmware_build.manifest_path().resolve()))
    return firmware_build.out_dir() / "firmware.uf2"


@pytest.fixture(scope="session")
def cp_image() -> Path:
    """The CircuitPython Pico firmware through `make firmware-cp` (_make_image)."""
    from tools.board import firmware_cp_build

    vendor = firmware_cp_build.default_vendor()
    _make_image("firmware-cp", vendor / firmware_cp_build.TARBALL, "CircuitPython")
    assert firmware_cp_build.image_current(firmware_cp_build.cache_key(vendor))
    return firmware_cp_build.out_dir() / "firmware.uf2"
