"""Fixtures the host tests share."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def image() -> Path:
    """The rp2 firmware through `make firmware`, as a user builds it (cached: a current image is reused, a stale
    one rebuilt). Skipped only where the vendored sources are absent outside CI; in CI (CI set) they are beside
    the checkout and their absence fails."""
    from tools.board import firmware_build

    vendor = firmware_build.default_vendor()
    if not (vendor / firmware_build.TARBALL).is_file():
        if os.environ.get("CI"):
            pytest.fail("CI: no %s in %s (EDGETWIN_VENDOR); CI has the vendored sources beside the checkout"
                        % (firmware_build.TARBALL, vendor))
        pytest.skip("no vendored MicroPython sources in %s (set EDGETWIN_VENDOR); `make firmware` would clone "
                    "them from GitHub" % vendor)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    t0 = time.monotonic()
    proc = subprocess.run(["make", "-C", str(ROOT), "firmware", "PYTHON=" + sys.executable],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print("make firmware: %.1f s" % (time.monotonic() - t0))
    assert firmware_build.image_current(firmware_build.cache_key(vendor, firmware_build.manifest_path().resolve()))
    return firmware_build.out_dir() / "firmware.uf2"


@pytest.fixture(scope="session")
def cp_image() -> Path:
    """The CircuitPython Pico firmware through `make firmware-cp`, as a user builds it (cached like image())."""
    from tools.board import firmware_cp_build

    vendor = firmware_cp_build.default_vendor()
    if not (vendor / firmware_cp_build.TARBALL).is_file():
        if os.environ.get("CI"):
            pytest.fail("CI: no %s in %s (EDGETWIN_VENDOR); CI has the vendored sources beside the checkout"
                        % (firmware_cp_build.TARBALL, vendor))
        pytest.skip("no vendored CircuitPython sources in %s (set EDGETWIN_VENDOR)" % vendor)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    t0 = time.monotonic()
    proc = subprocess.run(["make", "-C", str(ROOT), "firmware-cp", "PYTHON=" + sys.executable],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print("make firmware-cp: %.1f s" % (time.monotonic() - t0))
    assert firmware_cp_build.image_current(firmware_cp_build.cache_key(vendor))
    return firmware_cp_build.out_dir() / "firmware.uf2"
