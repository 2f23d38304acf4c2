"""Fuzz: mutated board profiles fed to every `edgetwin` command that reads one (plan, build, vboard, deploy,
selftest), in process (host.cli.main with capsys) and a subprocess sample.

Each of 1,200 mutations of the shipped profiles (keys dropped, wrong types, huge / negative / boundary
numbers, hostile strings and paths as name or model, unknown keys, truncated or non-UTF-8 JSON, other
JSON documents) goes to `plan` and to one other command. A profile the validator refuses must give exit
2 and exactly one line on stderr naming the file and the field (or the JSON problem), never a
traceback; a profile it accepts must get past the profile (plan: exit 0 or a one-line plan error;
the others are given a later argument that fails fast: an unknown arch, a heap out of range, a port
that does not exist). Nothing is created: the build folder and the test's own directory hold the same
files afterwards. The firmware's loader (shared/profile.load, what firmware/boardcfg.load runs on the
board) refuses the same files with a ProfileError naming the field.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from host import board_profile, cli
from host.errors import UserError
from shared import profile
from tools.board import build

ROOT = Path(__file__).resolve().parents[2]
N = 1200
SHIPPED = [json.loads(p.read_text()) for p in sorted((ROOT / "boards").glob("*.json"))]
HOSTILE = (None, True, False, 0, -1, 1.5, float("inf"), 10**12, -(10**12), 2**63, "", "x" * 5000, "../x",
           "../../README.md", "models", "a/b", "/etc/passwd", ".hidden", "\n", "é", "nul\x00", [], {}, [1, 2],
           {"a": 1}, "draft.mbf", "README.md", "..", "x.mbf/..", 32 * 1024 - 1, 64 * 1024 * 1024 + 1)


def _paths(doc: dict) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for k, v in doc.items():
        out.append((k,))
        if isinstance(v, dict):
            out += [(k, s) for s in v]
    return out


def _set(doc: dict, path: tuple[str, ...], value: object) -> None:
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _drop(doc: dict, path: tuple[str, ...]) -> None:
    node = doc
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]


def mutate(rng: random.Random) -> bytes:
    doc = json.loads(json.dumps(rng.choice(SHIPPED)))
    kind = rng.randrange(9)
    if kind == 0:
        _drop(doc, rng.choice(_paths(doc)))
    elif kind in (1, 2):
        _set(doc, rng.choice(_paths(doc)), rng.choice(HOSTILE))
    elif kind == 3:  # a number nudged past (or onto) a bound
        path = rng.choice([p for p in _paths(doc) if type(doc[p[0]] if len(p) == 1 else doc[p[0]][p[1]]) is int])
        old = doc[path[0]] if len(path) == 1 else doc[path[0]][path[1]]
        _set(doc, path, rng.choice((old * 1000, -old, old + 1, old - 1, 0, old * 2**20)))
    elif kind == 4:
        _set(doc, (rng.choice(("extra", "Name", "uart", "kv")), ) if rng.random() < 0.5 else
             (rng.choice(("uart", "kv")), "bogus"), rng.choice(HOSTILE))
    elif kind == 5:
        _set(doc, (rng.choice(("name", "model")),), rng.choice(("../x", "models", "../../README.md", "a/b", "..mbf",
                                                                 ".x.mbf", "x.mbf", "board-1", "b" * 41)))
    elif kind == 6:  # truncated JSON
        text = json.dumps(doc).encode()
        return text[:rng.randrange(len(text))]
    elif kind == 7:  # bytes that are not the profile's text
        return rng.choice((b"\xff\xfe\x00x", b"[" * 100000, b"null", b"[]", b"42", b'"rp2040_pico"', b"",
                           bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))))
    else:  # two mutations at once
        _drop(doc, rng.choice(_paths(doc)))
        _set(doc, rng.choice(_paths(doc)) if doc else ("name",), rng.choice(HOSTILE))
    try:
        return json.dumps(doc).encode()
    except ValueError:  # inf is fine in Python's JSON; nothing else should fail
        raise


def _tree(*dirs: Path) -> set[str]:
    out: set[str] = set()
    for d in dirs:
        if d.exists():
            out |= {str(p) for p in d.rglob("*")}
    return out


def _argv(cmd: str, path: Path, tmp: Path) -> list[str]:
    if cmd == "plan":
        return ["plan", "--board", str(path), "--model", str(build.DRAFT)]
    if cmd == "build":
        return ["build", "--board", str(path), "--arch", "z80", "--node"]
    if cmd == "vboard":
        return ["vboard", "--board", str(path), "--heap", "1", "--root", str(tmp / "vbroot")]
    if cmd == "deploy":
        return ["deploy", "--board", str(path), "--port", str(tmp / "no-such-port"), "--node"]
    return ["selftest", "--board", str(path), "--json"]


def test_mutated_profiles_give_one_line_or_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(13)
    work = tmp_path / "w"
    work.mkdir()
    path = work / "board.json"
    before = _tree(ROOT / "build" / "boards", tmp_path)
    refused = accepted = 0
    fields_named = 0
    others = ("build", "vboard", "deploy", "selftest")
    for i in range(N):
        raw = mutate(rng)
        path.write_bytes(raw)
        try:
            board_profile.resolve(str(path))
            valid = True
        except UserError:
            valid = False
        try:  # the firmware's loader agrees
            profile.load(str(path))
            fw_valid = True
        except profile.ProfileError as e:
            fw_valid = False
            assert str(path) in str(e)
        assert fw_valid == valid or raw.startswith(b"[" * 1000), raw[:200]
        cmds = ["plan", others[i % 4]] if valid is False or others[i % 4] != "selftest" else ["plan", "deploy"]
        for cmd in cmds:
            code = cli.main(_argv(cmd, path, tmp_path))
            out, err = capsys.readouterr()
            assert "Traceback" not in err, (cmd, raw[:300], err)
            if not valid:
                assert code == 2 and out == "", (cmd, raw[:300], out, err)
                assert err.count("\n") == 1 and err.startswith("edgetwin %s: error: " % cmd), (cmd, raw[:300], err)
                assert str(path) in err, (cmd, raw[:300], err)
                fields_named += ("field" in err) or ("JSON" in err)
            elif cmd == "plan":
                assert code in (0, 2), (raw[:300], err)
                assert code == 0 or err.count("\n") == 1, err
            else:
                assert code == 2 and err.count("\n") == 1, (cmd, raw[:300], err)
        refused += not valid
        accepted += valid
    assert _tree(ROOT / "build" / "boards", tmp_path) == before | {str(work), str(path)}
    assert refused >= N // 2 and accepted >= 50, (refused, accepted)
    assert fields_named >= refused  # every refusal names a field or the JSON problem
    print("profile fuzz: %d mutations, %d refused (one line each), %d accepted" % (N, refused, accepted))


@pytest.mark.slow
def test_subprocess_sample(tmp_path: Path) -> None:
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = 0
    while done < 6:
        raw = mutate(rng)
        path = tmp_path / ("p%d.json" % done)
        path.write_bytes(raw)
        try:
            board_profile.resolve(str(path))
            continue  # the sample is of refused profiles
        except UserError:
            pass
        cmd = ("plan", "build", "vboard")[done % 3]
        res = subprocess.run([sys.executable, "-m", "host.cli", *_argv(cmd, path, tmp_path)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and res.stdout == "", (cmd, raw[:300], res.stderr)
        assert res.stderr.count("\n") == 1 and str(path) in res.stderr, (cmd, raw[:300], res.stderr)
        done += 1
