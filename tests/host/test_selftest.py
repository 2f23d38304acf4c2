"""The on-board self-test: its checks pass under CPython, and `edgetwin selftest --json` passes on a virtual board."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firmware import selftest
from host import cli

ROOT = Path(__file__).resolve().parents[2]


def test_selftest_under_cpython(capsys: pytest.CaptureFixture[str]) -> None:
    assert selftest.run(str(ROOT / "boards" / "esp32s3_devkitc.json")) is True
    line = capsys.readouterr().out.strip().splitlines()[-1]
    report = json.loads(line[len("SELFTEST "):])
    assert report["board"] == "esp32s3_devkitc" and report["interpreter"] == "cpython"
    assert report["ringkv"]["tokens_committed"] > 0 and report["ringkv"]["max_position"] <= report["ringkv"]["position_limit"]
    assert report["lruk"]["hits_lru2"] > report["lruk"]["hits_lru"]
    assert report["seqlock"]["cas_increments"] == 1000


def test_selftest_without_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert selftest.run(str(tmp_path / "missing.json")) is False
    assert "deploy the build first" in capsys.readouterr().out


@pytest.mark.slow
def test_selftest_json_on_a_virtual_board(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["selftest", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    st = report["selftest"]
    assert report["ok"] and st["interpreter"] == "micropython" and st["board"] == "rp2040_pico"
    # on the unix port the hot loops ran with the heap locked and the KV run grew the heap by nothing
    assert st["ringkv"]["heap_locked"] and st["ringkv"]["heap_growth_after_run"] == 0
    assert st["seqlock"]["threads"] == 2
    assert 0 < st["heap_in_use"] < 196608
    assert report["deploy"]["tool"] == "mpremote" and report["deploy"]["total_bytes"] > 0


def test_selftest_unknown_board_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["selftest", "--board", "pyboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown board 'pyboard'" in err
