"""The memory plan against the heap measured on a virtual board (the rp2040_pico profile at 196608 bytes of heap,
its value before the Pico was measured: the streamed model below streams there).

The core is built for x64 (the unix port's native code) and deployed with mpremote; two models go on
the board's filesystem: the test fixture (resident) and a generated one too large to be resident on
that heap (dim 64, hidden 128, 2 layers, 96 tokens: ~70 KB resident next to ~125 KB of 64-bit
runtime), which memfit.fit() streams. On the board (a probe module compiled with mpy-cross, one soft
reset per model): the plan (64-bit objects, the reserve measured there), the Model built from it,
forward steps under heap_lock, and the heap (gc.mem_alloc after gc.collect) the model and its cache
hold, compared with the plan's predicted peak. A step allocates nothing, so the heap after
construction is the step's peak; the plan object itself is measured around and left out. Then
`edgetwin plan --arch x64` on the host must print the same plan.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.board import build, deploy
from tools.formats.make_tiny_llama import FIXTURE, build_model
from tools.board.vboard import VirtualBoard

TOLERANCE = 0.10  # |measured - predicted| <= max(10% of predicted, 4 KB)
SLACK = 4096
STREAM_MODEL = dict(dim=64, hidden_dim=128, n_layers=2, vocab_size=96)
PLAN_SLACK = 6144  # reserve = the measured runtime + reader, plus the plan object alive during loading
# the board's heap here: the stream model is too large to be resident on it. The profile's old 196608, plus the
# 12 KB the C kernels' x64 code takes in the unix port's heap (q4nat.mpy, linked at import: tests/conftest.py)
HEAP = 196608 + 12288

PROBE = """import gc, json, micropython
from shared import mbf
gc.collect()  # the largest modules first, a collection after each: fewer holes among the code
from shared import kernels
gc.collect()
from shared import model_load, ringkv
gc.collect()
from shared import llama, memplan
gc.collect()
from shared import memfit, profile
prof = profile.load('/board.json')
kvp = prof['kv']
def heap():
    gc.collect()
    return gc.mem_alloc()
def toks(n, v):
    return [(7 * i + 3) %% v for i in range(n)]
def probe(path):  # locals: no global stored (a new global grows the module's dict) while measuring
    r = mbf.open(path)
    r.layer_parts()  # the reader's layer index now: part of the reader, not of what is measured
    c = r.config
    t = toks(12, c['vocab_size'])
    base = heap()  # the interpreter, the runtime, this module, the reader: what the reserve covers
    plan = memfit.fit(c, prof, 8, memfit.MARGIN_PCT, base + %(slack)d, r)
    h_plan = heap()  # the plan object stays referenced: measured from here, it is left out
    free = gc.mem_free()
    kv = ringkv.RingKV(c['n_layers'], c['n_kv_heads'] * c['head_dim'], kvp['sink'], kvp['window'],
                       kvp['staged'], 'b', c['n_kv_heads'])
    m = llama.Model(r, kv, plan=plan)
    held = heap()
    micropython.heap_lock()
    try:
        for i in range(12):
            m.step(t[i])
            kv.commit(1)
        m.feed(t, 4)
        kv.commit(4)
    finally:
        micropython.heap_unlock()
    steps = heap()
    res = {'path': path, 'mode': plan.mode, 'out_rows': plan.out_rows, 'peak': plan.peak,
           'index': 0 if plan.mode == 'resident' else plan.heap[plan.index('reader layer index')],
           'load_peak': plan.load_peak, 'budget': plan.budget, 'base': base, 'free': free,
           'measured': held - h_plan, 'after_steps': steps - held, 'logit0': m.logits[0]}
    r.close()
    return res
out = [probe(p) for p in %(paths)r]
print('@@' + json.dumps(out))
"""

RESIDENT_PROBE = """import gc
from shared import mbf, ringkv, llama
r = mbf.open(%(path)r)
c = r.config
kv = ringkv.RingKV(c['n_layers'], c['n_kv_heads'] * c['head_dim'], 4, 28, 8, 'b', c['n_kv_heads'])
gc.collect()
try:
    llama.Model(r, kv, stream=False)
    print('@@loaded')
except MemoryError:
    print('@@MemoryError')
"""


@pytest.mark.slow
def test_predicted_peak_matches_the_virtual_board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = dict(build.board_profile("rp2040_pico"), heap_bytes=HEAP)
    prof_path = tmp_path / "rp2040_pico.json"
    prof_path.write_text(json.dumps(prof))
    out = build.build(prof, arch="x64", out_dir=tmp_path / "build")
    fs = tmp_path / "fs"
    (fs / "models").mkdir(parents=True)
    shutil.copyfile(FIXTURE, fs / "models" / "tiny.mbf")
    (fs / "models" / "stream.mbf").write_bytes(build_model(**STREAM_MODEL))
    with VirtualBoard(prof, root=fs) as vb:
        deploy.deploy(out, vb.repl_port)
        rows = []
        for i, path in enumerate(("/models/tiny.mbf", "/models/stream.mbf")):
            # the probe as a .mpy module, as firmware runs (source exec'd through the REPL would be compiled
            # on the board, and the compiler's garbage fragments the heap); one soft reset each
            src = tmp_path / ("memplan_probe%d.py" % i)
            src.write_text(PROBE % {"paths": [path], "slack": PLAN_SLACK})
            subprocess.run([build.mpy_cross_exe(), "-march=x64", "-o", str(fs / "lib" / (src.stem + ".mpy")), str(src)],
                           check=True, capture_output=True)
            got = deploy.run_on_board(vb.repl_port, "import %s" % src.stem, timeout=120)
            rows += json.loads(got.strip().splitlines()[-1][2:])
        resident = deploy.run_on_board(vb.repl_port, RESIDENT_PROBE % {"path": "/models/stream.mbf"}, timeout=60)
    from host import cli
    from shared import memfit

    # `edgetwin plan` on the host (CPython, --arch x64, the board's reserve) prints the same plan
    for r, name in zip(rows, ("tiny.mbf", "stream.mbf")):
        assert cli.main(["plan", "--board", str(prof_path), "--model", str(fs / "models" / name), "--arch", "x64",
                         "--reserve", str(r["base"] + PLAN_SLACK), "--json"]) == 0
        host = json.loads(capsys.readouterr().out)
        assert (host["mode"], host["out_rows"], host["peak"], host["budget"]) == (
            r["mode"], r["out_rows"], r["peak"], r["budget"]), (host, r)
    for r in rows:  # the default x64 reserve covers the runtime, the reader and the plan
        assert r["base"] + PLAN_SLACK <= memfit.RESERVE[8], (r["base"], memfit.RESERVE[8])
    tiny, stream = rows
    assert tiny["mode"] == "resident"
    assert stream["mode"] in ("layer", "phase", "matrix"), stream
    assert resident.strip().endswith("@@MemoryError"), resident  # too large to be resident on this heap
    for r in rows:
        predicted = r["peak"] - r["index"]  # the reader's index was built before the measurement
        assert abs(r["measured"] - predicted) <= max(TOLERANCE * predicted, SLACK), r
        assert r["after_steps"] <= 0, r  # the steps allocated nothing (heap_lock) and kept nothing
        assert r["load_peak"] <= r["budget"]
        with capsys.disabled():
            print("%s: %s, out_rows %d: predicted %d B, measured %d B (%+.1f%%); runtime + reader %d B, "
                  "budget %d B, free before loading %d B"
                  % (r["path"], r["mode"], r["out_rows"], predicted, r["measured"],
                     100.0 * (r["measured"] - predicted) / predicted, r["base"], r["budget"], r["free"]))
