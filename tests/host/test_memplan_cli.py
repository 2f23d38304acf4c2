"""`edgetwin plan`: the table, the JSON object, and one-line errors for user mistakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host import cli
from tools.formats.make_tiny_llama import FIXTURE, build_model


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--board", "rp2040_pico", "--model", str(FIXTURE))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["buffer", "bytes", "live", "arena"]
    assert any(line.split()[:4] == ["hb", "272", "w1..swiglu", "A0"] for line in lines), out
    assert "mode: resident; 32-bit objects; cache 4+28+8" in out
    assert "rp2040_pico heap 241664 B - reserve 81920 B - 10% margin = budget 135578 B" in out
    code, out, _ = run(capsys, "--board", "rp2040_pico", "--model", str(FIXTURE), "--json", "--mode", "matrix",
                       "--arch", "x64")
    d = json.loads(out)
    assert (d["mode"], d["word"], d["board"], d["model"]) == ("matrix", 8, "rp2040_pico", str(FIXTURE))
    assert d["load_peak"] <= d["budget"] and d["peak"] == d["load_peak"] - d["transient"]
    names = {b["name"]: b for b in d["buffers"]}
    assert names["stream.ffn_gate"]["arena"] == names["stream.attn_q"]["arena"] == "W0+0"  # one at a time
    assert d["layer_read_chunk"] == 64 * 32 // 2 and d["shared_saving"] > 0


def test_user_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    big = tmp_path / "big.mbf"
    big.write_bytes(build_model(dim=256, hidden_dim=512, n_layers=4, vocab_size=256))
    bad = tmp_path / "bad.mbf"
    bad.write_bytes(FIXTURE.read_bytes()[:1000])
    cases = (
        (["--board", "nope", "--model", str(FIXTURE)], "unknown board 'nope' (known: "),
        (["--board", "rp2040_pico", "--model", str(tmp_path / "none.mbf")], "does not exist"),
        (["--board", "rp2040_pico", "--model", str(bad)], "truncated"),
        (["--board", "rp2040_pico", "--model", str(big)], "no memory plan fits rp2040_pico"),
        (["--board", "rp2040_pico", "--model", str(FIXTURE), "--arch", "z80"], "unknown arch 'z80'"),
        (["--board", "rp2040_pico", "--model", str(FIXTURE), "--margin", "95"], "margin must be an int in 0..90"),
    )
    for argv, what in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", argv
        assert err.startswith("edgetwin plan: error: ") and what in err and err.count("\n") == 1, err
    code, out, err = run(capsys, "--board", "rp2040_pico", "--model", str(big), "--mode", "resident")
    assert code == 2 and "short by" in err
