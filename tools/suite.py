"""`make test`'s runner: the suite as two pytest processes side by side, one per core.

    python -m tools.suite [PYTEST ARGS...]

The end-to-end runs (marked slow: virtual and emulated boards, gateways, brokers, timed links) and every test
that runs against the wall clock run one at a time, in order, at normal priority, as they always have: their
checks have timing margins and want a core to themselves. The tests that are computation alone (marked cpu, by
file in tests/conftest.py CPU_ONLY or one by one: no clock, port or socket of their own, and a process they start
is given minutes it never needs; unit and property tests, much of the shared core under three interpreters, the
model references and training steps, the CLI's answers from a store) run in a second process at the lowest
priority, with one BLAS thread, on the core the first stream leaves idle, beside the firmware images' build (tools/board/prebuild.py, also at the lowest
priority): starved of the CPU for minutes they are only later, not wrong. (Wall-clock tests in that stream
failed on a busy machine: a node in-process that did not reach its event within its 20 s.) Each stream has its own base
temporary folder. The slow stream prints as it runs; the other's output is kept in a file and printed when
both are done, then one line says what each stream did. The exit status is the worse of the two.

Arguments are passed to both streams (for example `--durations=25`, `-x`); to run a part of the suite, call
pytest itself (`python -m pytest tests/host/test_ask.py`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # numpy's BLAS and torch read them
# pytest's closing line: "==== 12 passed, 3 skipped in 4.56s (0:00:04) ===="
SUMMARY = re.compile(r"^=+ (.+ in [0-9.]+s.*?) =+$")


def _summary(text: str) -> str:
    found = [m.group(1) for m in map(SUMMARY.match, text.splitlines()) if m]
    return found[-1] if found else "no summary (see above)"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    base = Path(tempfile.mkdtemp(prefix="edgetwin-suite-"))  # short: ptys and sockets live under it
    quick_log = base / "quick.log"
    pytest = [sys.executable, "-m", "pytest"]
    t0 = time.monotonic()
    with open(quick_log, "w") as log:
        # the quick stream's .pytest_cache is left alone: two processes would race on it. One BLAS / OpenMP thread
        # there: its worker threads spin-wait for a core the other stream holds (measured: a numpy model bench 20x
        # slower, 392 s for 19 s).
        env = dict(os.environ, **{k: "1" for k in ONE_THREAD})
        quick = subprocess.Popen(["nice", "-n", "19", *pytest, "-m", "cpu", "--basetemp", str(base / "q"),
                                  "-p", "no:cacheprovider", *args], cwd=str(ROOT), env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        slow = subprocess.Popen([*pytest, "-m", "not cpu", "--basetemp", str(base / "s"), *args], cwd=str(ROOT),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        slow_out = []
        try:
            for line in slow.stdout:  # type: ignore[union-attr]
                sys.stdout.write(line)
                sys.stdout.flush()
                slow_out.append(line)
            rc_slow = slow.wait()
            t_slow = time.monotonic() - t0
            if quick.poll() is None:
                print("\nmake test: the end-to-end and timed tests are done; waiting for the computation-only ones (%s)"
                      % quick_log,
                      flush=True)
            rc_quick = quick.wait()
        except KeyboardInterrupt:
            for p in (quick, slow):
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in (quick, slow):
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
            print("\nmake test: interrupted (the other tests' output: %s)" % quick_log, file=sys.stderr)
            return 130
    quick_text = quick_log.read_text(errors="replace")
    print("\n" + "=" * 30 + " the computation-only tests, run beside the others "
          + "=" * 30, flush=True)
    sys.stdout.write(quick_text)
    total = time.monotonic() - t0
    print("make test: end-to-end and timed tests: %s; computation-only tests: %s; %.0f s in all (%.0f s to the "
          "first stream's end)" % (_summary("".join(slow_out)), _summary(quick_text), total, t_slow), flush=True)
    # pytest's 5 ("no tests collected") in a stream is not a failure when the other ran tests
    rc = max([rc for rc in (rc_slow, rc_quick) if rc != 5] or [5])
    if rc == 0:
        shutil.rmtree(base, ignore_errors=True)
    else:  # a failed run's folders stay for a look
        print("make test: the tests' folders are kept in %s" % base, flush=True)
    return rc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
