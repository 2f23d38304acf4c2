"""firmware/boardcfg.load on the real MicroPython: a bad /board.json is refused with a ProfileError that
names the file and the field, exactly as the host's loader refuses it (one MicroPython process reads
300 mutated profiles of tests/host/test_profile_fuzz.py; the verdicts and field names must agree)."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

from test_profile_fuzz import mutate

from firmware import boardcfg
from shared import profile
from tools.board.vboard import micropython_exe

ROOT = Path(__file__).resolve().parents[2]
N = 300

SCRIPT = """import sys
sys.path.insert(0, %(root)r)
from firmware import boardcfg
from shared import profile
for i in range(%(n)d):
    p = %(dir)r + '/p%%d.json' %% i
    try:
        boardcfg.load(p)
        print('@@ OK')
    except profile.ProfileError as e:
        print('@@ ERR', str(e).replace('\\n', ' '))
"""


def _field(msg: str) -> str:
    m = re.search(r"field '([^']*)'|unknown field '([^']*)'|(not valid JSON|JSON object|cannot read)", msg)
    return next(g for g in m.groups() if g) if m else msg


def test_firmware_refuses_what_the_host_refuses(tmp_path: Path) -> None:
    rng = random.Random(5)
    expect = []
    for i in range(N):
        raw = mutate(rng)
        while raw.startswith(b"[" * 1000):  # recursion limits differ between the interpreters: not compared
            raw = mutate(rng)
        p = tmp_path / ("p%d.json" % i)
        p.write_bytes(raw)
        try:
            boardcfg.load(str(p))
            expect.append("OK")
        except profile.ProfileError as e:
            assert str(p) in str(e)
            expect.append(_field(str(e)))
    code = SCRIPT % {"root": str(ROOT), "n": N, "dir": str(tmp_path)}
    res = subprocess.run([micropython_exe(), "-X", "heapsize=4M", "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    lines = [ln[3:] for ln in res.stdout.splitlines() if ln.startswith("@@ ")]
    assert res.returncode == 0 and len(lines) == N, res.stdout[-2000:] + res.stderr[-2000:]
    for i, (want, got) in enumerate(zip(expect, lines)):
        if want == "OK":
            assert got == "OK", (i, (tmp_path / ("p%d.json" % i)).read_bytes()[:200], got)
        else:
            assert got.startswith("ERR ") and str(tmp_path / ("p%d.json" % i)) in got, (i, got)
            raw = (tmp_path / ("p%d.json" % i)).read_bytes()
            if b"Infinity" in raw:  # CPython's json reads it (a float: wrong type), MicroPython's does not
                assert _field(got[4:]) in (want, "not valid JSON"), (i, got, want)
            else:
                assert _field(got[4:]) == want, (i, raw[:200], got, want)
    assert expect.count("OK") < N // 2 < N - expect.count("OK")
