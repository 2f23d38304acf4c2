"""tools/board/prebuild.py: the firmware images built beside the tests. Its lock keeps a fixture's `make firmware`
from running while the build beside the tests is under way (the fixture waits, then finds the image current);
without vendored sources it builds nothing and says so; a bad argument is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.board import prebuild

ROOT = Path(__file__).resolve().parents[2]

HOLD = """
import sys, time
from pathlib import Path
from tools.board import prebuild
with prebuild.build_lock(Path(sys.argv[2])):
    print("held", flush=True)
    time.sleep(1.0)
    Path(sys.argv[1]).write_text("released")
"""


def test_the_lock_makes_a_second_builder_wait_for_the_first(tmp_path: Path) -> None:
    mark, lock = tmp_path / "mark", tmp_path / "firmware.lock"  # not the build's own lock: a build may hold it
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(mark), str(lock)], cwd=str(ROOT), stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with prebuild.build_lock(lock):
            assert mark.read_text() == "released"  # the holder had finished before this one got the lock
    finally:
        child.wait(timeout=30)
    assert child.returncode == 0


def test_without_vendored_sources_it_builds_nothing_and_says_so(tmp_path: Path) -> None:
    env = dict(os.environ, EDGETWIN_VENDOR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "tools.board.prebuild"], cwd=str(ROOT), env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 2 and all("left to the tests" in ln for ln in lines), lines
    assert "firmware-cp" in lines[1]


def test_a_bad_argument_is_one_line_and_exit_2() -> None:
    p = subprocess.run([sys.executable, "-m", "tools.board.prebuild", "--now"], cwd=str(ROOT), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
