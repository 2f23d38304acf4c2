"""Benchmark the W4A8 kernels, printed as one JSON object.

MicroPython (the unix port, run as a subprocess): the viper backend against the plain-Python
(bytecode) backend on the same interpreter, for an INT4 x INT8 matvec of 64x64 and 576x576, plus the
per-call time of the O(n) fixed-point kernels. CPython: the numpy backend against the plain one.
Ratios are measured in the same run; the absolute times are this machine's, not a board's.

    python -m tools.bench.kernels [--micropython PATH] [--reps N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: make `shared` importable
    sys.path.insert(0, str(ROOT))

from host.board_profile import venv_exe  # noqa: E402
from host.usage import Parser  # noqa: E402
from shared import kernels, q4  # noqa: E402

SHAPES = ((64, 64), (576, 576))

# Runs under MicroPython: same data generator (xorshift) as below, timings with ticks_us.
MP_SCRIPT = r"""
import gc, json, sys, time
from array import array
from shared import fixedmath, kernels, q4

REPS = %(reps)d


def rng_bytes(buf, seed):
    s = seed
    for i in range(len(buf)):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        buf[i] = s & 255
    return s


def make(rows, cols):
    m = q4.Q4Matrix(rows, cols)
    rng_bytes(m.buf, 7)
    for o in range(m.nib_bytes, len(m.buf), 2):  # float16 scales 2**-8 .. 2**-5
        m.buf[o + 1] = 0x1C + (m.buf[o] & 7)
    return m.prepare()


def timed(fn, reps):
    # best of 5 batches of reps calls, per call (the machine may be busy with other work)
    best = None
    for _ in range(5):
        gc.collect()
        t0 = time.ticks_us()
        for _ in range(reps):
            fn()
        t = time.ticks_diff(time.ticks_us(), t0) / reps
        if best is None or t < best:
            best = t
    return best


res = {"version": ".".join(str(v) for v in sys.implementation.version[:3]), "backends": kernels.available()}
for rows, cols in %(shapes)r:
    m = make(rows, cols)
    x = array("i", [((i * 2654435761) %% 400001) - 200000 for i in range(cols)])
    act = q4.QAct(cols)
    out = array("i", [0] * rows)
    row = {}
    for name in ("viper", "plain"):
        kernels.use(name)
        kernels.quantize_act(act, x)
        reps = REPS if name == "viper" else max(2, REPS * 64 // (50 * cols))
        row[name + "_us"] = timed(lambda: kernels.matvec(out, m, act), reps)
        row[name + "_checksum"] = sum(out) & 0xFFFFFFFF
    row["ratio"] = row["plain_us"] / row["viper_us"]
    res["matvec_%%dx%%d" %% (rows, cols)] = row
    m = None
    gc.collect()
n = 576
x = array("i", [((i * 40503) %% 300001) - 150000 for i in range(n)])
out = array("i", [0] * n)
nw = fixedmath.NormWeight(n).load_fp16([0x3C00] * n)
rt = fixedmath.RopeTable(64, 64, 10000, 0)
act = q4.QAct(n)
small = {}
for name in ("viper", "plain"):
    kernels.use(name)
    reps = REPS if name == "viper" else max(2, REPS // 20)
    small[name] = {
        "quantize_act_576_us": timed(lambda: kernels.quantize_act(act, x), reps),
        "rmsnorm_576_us": timed(lambda: kernels.rmsnorm(out, x, nw), reps),
        "rope_9x64_us": timed(lambda: kernels.rope(out, x, rt, 17, 9), reps),
        "softmax_576_us": timed(lambda: kernels.softmax(out, x, n), reps),
        "swiglu_576_us": timed(lambda: kernels.swiglu(out, x, x, n), reps),
    }
res["vector_kernels"] = small
print(json.dumps(res))
"""


def micropython_exe(given: str | None) -> str | None:
    if given:
        return given
    return venv_exe("micropython")


def run_micropython(exe: str, reps: int) -> dict:
    env = dict(os.environ)
    env["MICROPYPATH"] = str(ROOT)
    script = MP_SCRIPT % {"reps": reps, "shapes": SHAPES}
    proc = subprocess.run([exe, "-X", "heapsize=8M", "-c", script], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=1800)
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr)[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cpython(reps: int) -> dict:
    import numpy as np

    from shared import q4_numpy

    rng = np.random.default_rng(0)
    res: dict = {"version": sys.version.split()[0], "numpy": np.__version__}
    for rows, cols in SHAPES:
        w = rng.standard_normal((rows, cols)) * 0.05
        m = q4.Q4Matrix(rows, cols, q4_numpy.quantize_matrix(w)).prepare()
        x = q4_numpy.to_q16(rng.standard_normal(cols))
        act = q4.QAct(cols)
        out = array("i", bytes(4 * rows))
        row = {}
        for name in ("numpy", "plain"):
            kernels.use(name)
            kernels.quantize_act(act, x)
            kernels.matvec(out, m, act)  # warm the numpy unpack cache
            n = reps if name == "numpy" else max(2, reps * 64 // (100 * cols))
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    kernels.matvec(out, m, act)
                best = min(best, (time.perf_counter() - t0) / n * 1e6)
            row[name + "_us"] = best
        row["ratio"] = row["plain_us"] / row["numpy_us"]
        res["matvec_%dx%d" % (rows, cols)] = row
    kernels.use()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--micropython", help="micropython unix binary (default: next to python, or on PATH)")
    ap.add_argument("--reps", type=int, default=200, help="repetitions of the fast backend (default 200)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    result: dict = {"benchmark": "W4A8 kernels (shared/kernels.py)", "unit": "microseconds per call"}
    exe = micropython_exe(args.micropython)
    result["micropython"] = run_micropython(exe, args.reps) if exe else {"error": "micropython not found"}
    try:
        result["cpython"] = run_cpython(args.reps)
    except ImportError as e:
        result["cpython"] = {"error": "numpy missing: %s" % e}
    print(json.dumps(result, indent=1))
    return 0 if "error" not in result["micropython"] else 1


if __name__ == "__main__":
    sys.exit(main())
