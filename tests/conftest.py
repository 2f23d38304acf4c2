"""Runs every test of tests/shared/ three times: under CPython (in-process), the MicroPython unix port and
CircuitPython's unix port.

A shared test module is plain MicroPython-compatible Python with `test_*` functions taking no
arguments. Each becomes three pytest items, `name[cpython]`, `name[micropython]` and `name[circuitpython]`,
so a failure names its interpreter. Each MicroPython or CircuitPython item runs in its own subprocess: a
fresh heap per test, as a board has after reset, so whether a test fits does not depend on what the tests
before it left fragmented. The heap is the board profile's (EDGETWIN_MP_BOARD, default rp2040_pico, for
MicroPython; rp2040_pico_cp for CircuitPython) for the code under test, plus what the test module's own
code holds once imported (measured per module, see own_code_bytes): a board never holds the tests, and
without that allowance the length of a test module, not the runtime, decided whether a test fitted.
CircuitPython's unix port (with the real ulab) is built from the vendored sources by `make
circuitpython-unix` (tools/board/firmware_cp_build.py), here on first use when missing.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_TESTS = ROOT / "tests" / "shared"
sys.path.insert(0, str(SHARED_TESTS))
sys.path.insert(0, str(ROOT))

import testkit  # noqa: E402

from shared import profile  # noqa: E402

# The node keys file (host/linkkeys.py) every gateway and deploy of this run uses unless told another: never the
# user's own ~/.config/edgetwin/keys.json (subprocesses inherit it).
os.environ["EDGETWIN_KEYS"] = str(Path(tempfile.mkdtemp(prefix="edgetwin-keys-")) / "keys.json")

MP_BOARD = os.environ.get("EDGETWIN_MP_BOARD", "rp2040_pico")
CP_BOARD = "rp2040_pico_cp"
MP_TIMEOUT_S = 900


# The test files whose tests are computation alone: no clock of their own, no port, pty or socket; a process they
# start is given minutes it never needs (a model's CLI, a MicroPython run). tools/suite.py (`make test`) runs them
# (marked `cpu`) beside the end-to-end stream at the lowest priority, where they may wait for the CPU for minutes and
# still pass; a test that runs against the wall clock (a node, a link, a broker in real time, a deadline) stays in
# the stream that runs one test at a time. A file's slow tests stay there too unless marked `cpu` themselves.
CPU_ONLY = frozenset(["tests/host/" + n for n in (
    "test_annotation_span.py", "test_answercheck.py", "test_ask.py", "test_ask_operator.py", "test_ask_readme_question.py",
    "test_ask_record_more.py", "test_bench_quality_plants.py", "test_bpe_reference.py", "test_convert.py",
    "test_draft_model.py", "test_mbf_fuzz.py", "test_plant_check.py", "test_plant_host.py", "test_plantlines.py",
    "test_prism_bert.py", "test_reranker_model.py", "test_spec_stats.py", "test_target_delta.py", "test_bench_spec_episodes.py", "test_cliargs.py",
    "test_corpus_batches.py", "test_dashboard_plants.py", "test_demo_plants.py", "test_demo_truth.py",
    "test_freeze_manifest.py", "test_train_draft.py",
    "test_gateway_fuzz.py", "test_line_notes.py", "test_llama2c.py", "test_logwords.py", "test_make_target.py", "test_no_simulator_words.py",
    "test_note_judge.py", "test_plant_causes.py", "test_plant_compile.py", "test_plant_sim_desc.py",
    "test_plant_words.py", "test_prism_bench.py", "test_prism_exits.py", "test_prism_pruning.py",
    "test_qa_corpus.py", "test_quality_judge.py", "test_reranker_bench.py", "test_reranker_prior.py",
    "test_store_lines.py", "test_store_plants.py", "test_target.py", "test_target_dense.py",
    "test_train_reranker_ask.py", "test_verifier_rule.py",)] + ["tests/shared/" + n for n in (
    "test_bpe.py", "test_codeslot.py", "test_drafter.py", "test_episode.py", "test_episodes.py", "test_fixedmath.py",
    "test_frame.py", "test_frame_prompt.py", "test_inplace.py", "test_inputs_hw.py", "test_kvsnap.py", "test_link.py",
    "test_llama.py", "test_lruk.py", "test_mbf.py", "test_memplan.py", "test_node_config.py", "test_plant.py",
    "test_plant_engine.py", "test_plantcfg_fuzz.py", "test_profile.py", "test_q4.py", "test_q4_int4_only.py",
    "test_ringkv.py", "test_sha256.py", "test_specdec.py", "test_spill.py", "test_sptok.py", "test_uart.py",
    "test_ustar.py",)])


def pytest_collection_modifyitems(session, config, items) -> None:
    root = ROOT.as_posix() + "/"
    for item in items:
        path = Path(str(item.fspath)).resolve().as_posix()
        if path.startswith(root) and path[len(root):] in CPU_ONLY and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.cpu)


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
# CircuitPython's default kernels (ulab) allocate temporaries each matvec (shared/q4_ulab.py); its unix port
# holds them as float64, twice the board's float32: 8 KB more was the least that passed, 16 KB leaves room
# for fragmentation. The code under test is still twice the board's size here (64-bit objects).
ULAB_TEMP_BYTES = 16384
# MicroPython's C kernels (q4nat.mpy, shared/q4_native.py) are linked into the heap at import, on a board too
# (about 8 KB of armv6m code, which the drafting node's heap figures include); the unix port's x64 build is
# about 11 KB. The test heap, already stricter than the board's, gets that much more.
NATIVE_CODE_BYTES = 12288


def mp_heap_bytes(board: str = MP_BOARD) -> int:
    """-X heapsize for the shared tests (less the module's own code): TEST_HEAP, else the profile's heap."""
    return TEST_HEAP.get(board) or profile.load(str(ROOT / "boards" / (board + ".json")))["heap_bytes"]


def test_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


class Interp:
    """One of the board interpreters the shared tests run under: its unix port, mpy-cross and test heap."""

    def __init__(self, name: str, label: str, board: str):
        self.name = name  # the item suffix: name[micropython]
        self.label = label
        self.board = board
        self._exe: str | None = None
        self._mpy: Path | None = None
        self._version: tuple | None = None
        self.code: dict[str, int] = {}
        self.unavailable: str | None = None  # why this interpreter cannot run here (a skip outside CI)

    def exe(self) -> str:
        if self._exe is None:
            if self.name == "micropython":
                self._exe = micropython_exe()
            else:
                self._exe = str(circuitpython_exe())
        return self._exe

    def mpy_cross(self) -> str:
        from tools.board import build, firmware_cp_build

        if self.name == "micropython":
            return build.mpy_cross_exe()
        return str(firmware_cp_build.unix_mpy_cross())

    def heap(self) -> int:
        return mp_heap_bytes(self.board) + (ULAB_TEMP_BYTES if self.name == "circuitpython" else NATIVE_CODE_BYTES)

    def mpy_dir(self) -> Path:
        """shared/ and the shared tests compiled once per session with this interpreter's mpy-cross (x64, so
        viper stays native). Boards import .mpy files; compiling a large module from source on a 192 KiB heap
        needs tens of KB of transient heap that a board never spends, which would make the tests measure
        the compiler."""
        if self._mpy is None:
            import tempfile

            out = Path(tempfile.mkdtemp(prefix="edgetwin-%s-" % self.name))
            exe = self.mpy_cross()
            jobs = []
            for src in sorted((ROOT / "shared").glob("*.py")):
                jobs.append((src, out / "shared" / (src.stem + ".mpy"), "shared/" + src.name))
            for src in sorted(SHARED_TESTS.glob("*.py")):
                jobs.append((src, out / (src.stem + ".mpy"), "tests/shared/" + src.name))
            (out / "shared").mkdir()
            if self.name == "micropython":  # the C kernels (shared/q4_native.py), built for the unix port
                from tools.board import natmod_build

                shutil.copyfile(natmod_build.ensure("x64"), out / "q4nat.mpy")
            for src, dest, name in jobs:
                res = subprocess.run([exe, "-march=x64", "-o", str(dest), "-s", name, str(src)],
                                     capture_output=True, text=True)
                if res.returncode != 0:
                    raise RuntimeError("%s's mpy-cross failed on %s:\n%s" % (self.label, name, res.stderr))
            self._mpy = out
        return self._mpy

    def env(self) -> dict:
        env = dict(os.environ)
        # Compiled modules first; the source folders stay on the path for data files and fallbacks.
        env["MICROPYPATH"] = os.pathsep.join([str(self.mpy_dir()), str(SHARED_TESTS), str(ROOT), ".frozen"])
        return env

    def version(self) -> tuple:
        if self._version is None:
            out = subprocess.run([self.exe(), "-c", "import sys; print(sys.implementation.version[:3])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
            self._version = tuple(int(x) for x in out.strip("()").split(",") if x.strip())
        return self._version


def circuitpython_exe() -> Path:
    """CircuitPython's unix port, built from the vendored sources on first use (make circuitpython-unix)."""
    from tools.board import firmware_cp_build

    vendor = firmware_cp_build.default_vendor()
    if not (vendor / firmware_cp_build.TARBALL).is_file() and not os.environ.get("CI"):
        raise CircuitPythonMissing("no %s in %s (set EDGETWIN_VENDOR): CircuitPython's unix port cannot be built"
                                   % (firmware_cp_build.TARBALL, vendor))
    try:
        return firmware_cp_build.ensure_unix(vendor)
    except firmware_cp_build.BuildError as e:
        raise RuntimeError("building CircuitPython's unix port: %s" % e) from None


class CircuitPythonMissing(Exception):
    pass


MICROPYTHON = Interp("micropython", "MicroPython", MP_BOARD)
CIRCUITPYTHON = Interp("circuitpython", "CircuitPython", CP_BOARD)
INTERPS = (MICROPYTHON, CIRCUITPYTHON)


def mpy_dir() -> Path:
    """The MicroPython half's compiled modules (tests that run the unix port themselves use them)."""
    return MICROPYTHON.mpy_dir()


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
    return MICROPYTHON.env()


def own_code_bytes(module: str, interp: Interp = MICROPYTHON) -> int:
    """Heap the test module's own code holds on the unix port, beyond the shared/firmware modules it
    imports (measured once per module and interpreter; rounded up to 1 KB)."""
    if module not in interp.code:
        def run(*args: str) -> str:
            res = subprocess.run([interp.exe(), "-X", "heapsize=8M", "-c", _MEASURE, module, *args],
                                 capture_output=True, text=True, timeout=120, env=interp.env(), cwd=str(ROOT))
            for line in res.stdout.splitlines():
                if line.startswith("@@"):
                    return line.split(None, 1)[1] if " " in line else ""
            raise RuntimeError("measuring %s under %s failed:\n%s%s" % (module, interp.label, res.stdout, res.stderr))

        deps = run("deps").split()
        own = int(run("own", *deps))
        interp.code[module] = (own + 1023) // 1024 * 1024
    return interp.code[module]


class MicroPythonRun:
    """Runs the tests of one shared module under one board interpreter, each in a fresh subprocess ('@@' lines)."""

    def __init__(self, path: Path, names: list[str], interp: Interp = MICROPYTHON):
        self.path = path
        self.names = names
        self.interp = interp
        self.results: dict[str, tuple[str, str]] = {}
        self.crash: dict[str, str] = {}
        self.heap = 0

    def run(self, name: str) -> None:
        ip = self.interp
        own = own_code_bytes(self.path.stem, ip)
        heap = ip.heap() + own + TEST_DATA_BYTES
        self.heap = heap
        cmd = [ip.exe(), "-X", "heapsize=%d" % heap, str(SHARED_TESTS / "mprun.py"), self.path.stem, name]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MP_TIMEOUT_S, env=ip.env(),
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
            self.crash[name] = "%s (heap %d B: board %s + %d B of test code) exited with %s before " \
                "finishing:\n%s\n%s" % (ip.label, heap, ip.board, own, code, out[-3000:], err[-3000:])


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
        ip = self.mp_run.interp
        if ip.unavailable is None and ip is CIRCUITPYTHON:
            try:
                ip.exe()
            except CircuitPythonMissing as e:
                ip.unavailable = str(e)
        if ip.unavailable is not None:
            pytest.skip("%s: %s" % (ip.label, ip.unavailable))
        self.mp_run.run(self.testname)
        got = self.mp_run.results.get(self.testname)
        if got is None:
            raise MicroPythonFailure(self.mp_run.crash.get(self.testname) or "no result reported for %s" % self.testname)
        status, text = got
        if status == "SKIP":
            pytest.skip("%s: %s" % (self.mp_run.interp.label, text.strip()))
        if status == "FAIL":
            raise MicroPythonFailure(text)

    def repr_failure(self, excinfo, style=None):  # type: ignore[override]
        if isinstance(excinfo.value, MicroPythonFailure):
            ip = self.mp_run.interp
            return "[%s %s, heap of %s + the test code] %s failed:\n%s" % (
                ip.label, ".".join(str(v) for v in ip.version()), ip.board, self.testname, excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, "%s[%s]" % (self.testname, self.mp_run.interp.name)


class MicroPythonFailure(Exception):
    pass


def mp_version() -> tuple:
    return MICROPYTHON.version()


class SharedModule(pytest.Module):
    def collect(self):
        names = test_names(self.path)
        mod = self.obj
        runs = [MicroPythonRun(self.path, names, ip) for ip in INTERPS]
        for name in names:
            yield SharedFunction.from_parent(self, name=name + "[cpython]", callobj=getattr(mod, name))
            for run in runs:
                yield MicroPythonItem.from_parent(self, name="%s[%s]" % (name, run.interp.name), run=run, testname=name)


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.parent == SHARED_TESTS and module_path.name.startswith("test_"):
        return SharedModule.from_parent(parent, path=module_path)
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = {"cpython": {}, "micropython": {}, "circuitpython": {}}
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
    parts = ["CPython %s: %s" % (sys.version.split()[0], fmt(counts["cpython"]))]
    for ip in INTERPS:
        if ip.unavailable:
            parts.append("%s: not run (%s)" % (ip.label, ip.unavailable))
        else:
            parts.append("%s (unix port, heap for %s: %d B): %s" % (ip.label, ip.board, ip.heap(), fmt(counts[ip.name])))
    config._edgetwin_shared_line = "shared tests: %s; each heap also holds the test module's code + %d B of test data" % (
        " | ".join(parts), TEST_DATA_BYTES)


def pytest_unconfigure(config):
    line = getattr(config, "_edgetwin_shared_line", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)
