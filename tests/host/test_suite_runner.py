"""tools/suite.py, `make test`'s runner: the slow and timed tests and the computation-only ones (marked cpu) in two
pytest processes, both reported, the worse exit status returned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CASES = '''
import os
import pytest


@pytest.mark.slow
def test_slow_one():
    open(os.path.join(os.environ["MARKS"], "slow-%d-%s" % (os.getpid(), os.environ.get("OMP_NUM_THREADS"))), "w").close()
    assert SLOW_OK


@pytest.mark.cpu
def test_quick_one():
    open(os.path.join(os.environ["MARKS"], "quick-%d-%s" % (os.getpid(), os.environ.get("OMP_NUM_THREADS"))), "w").close()
    assert QUICK_OK
'''


def run_suite(tmp_path: Path, slow_ok: bool, quick_ok: bool) -> tuple[subprocess.CompletedProcess, list[str]]:
    case = tmp_path / ("case_%d%d" % (slow_ok, quick_ok))
    case.mkdir()
    marks = case / "marks"
    marks.mkdir()
    (case / "test_cases.py").write_text(CASES.replace("SLOW_OK", str(slow_ok)).replace("QUICK_OK", str(quick_ok)))
    # the markers as the project declares them, for a test file outside the project
    (case / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: end-to-end\n    cpu: computation alone\n")
    # TMPDIR: the runner's folders (kept when a run fails) go into this test's own
    env = {"PATH": "/usr/bin:/bin", "MARKS": str(marks), "PYTHONPATH": str(ROOT), "TMPDIR": str(case)}
    p = subprocess.run([sys.executable, "-m", "tools.suite", str(case / "test_cases.py"), "-p", "no:cacheprovider"],
                       cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    kept = list(case.glob("edgetwin-suite-*"))
    assert (kept == []) is (slow_ok and quick_ok), kept  # a failed run's folders stay for a look
    return p, sorted(f.name.split("-")[0] for f in marks.iterdir())


def summary(out: str) -> str:
    return next(x for x in out.splitlines() if x.startswith("make test: end-to-end and timed tests: "))


def test_both_streams_run_in_their_own_processes_and_both_are_reported(tmp_path: Path) -> None:
    p, ran = run_suite(tmp_path, True, True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ran == ["quick", "slow"]
    pids = {f.name.split("-")[1] for f in (tmp_path / "case_11" / "marks").iterdir()}
    assert len(pids) == 2  # two processes, not one
    # one BLAS thread beside the other stream (its spinning workers would wait for a busy core); the other as set
    assert {f.name.split("-")[0]: f.name.split("-")[2] for f in (tmp_path / "case_11" / "marks").iterdir()} == {
        "quick": "1", "slow": "None"}
    last = summary(p.stdout)
    assert last.startswith("make test: end-to-end and timed tests: 1 passed, 1 deselected in "), last
    assert "computation-only tests: 1 passed, 1 deselected in " in last, last


def test_a_failure_in_either_stream_fails_the_run(tmp_path: Path) -> None:
    for slow_ok, quick_ok in ((False, True), (True, False)):
        p, ran = run_suite(tmp_path, slow_ok, quick_ok)
        assert p.returncode == 1, p.stdout + p.stderr
        assert ran == ["quick", "slow"]  # the other stream still ran to its end
        last = summary(p.stdout)
        assert "folders are kept in" in p.stdout.strip().splitlines()[-1]
        assert ("1 failed" in last.split(";")[0]) is (not slow_ok), last
        assert ("1 failed" in last.split(";")[1]) is (not quick_ok), last
        assert "test_cases.py::test_%s_one" % ("slow" if not slow_ok else "quick") in p.stdout
