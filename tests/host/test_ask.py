"""`edgetwin ask`: a log store filled with plant logs (tools/gen_logs.py), PRISM top K, the target's answer;
bad input gives one line and exit 2."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import numpy as np
import pytest

from host import cli, qa
from host.store import LogStore
from test_prism_bert import make_tiny
from tools import gen_logs

QUESTION = "why did P-101 trip?"


def fill_store(db: Path, log: Path) -> int:
    """Run the plant generator (P-101 overheats and trips at ~06:41) and store its lines as node 'node-7'."""
    gen_logs.main(["--seed", "7", "--hours", "2", "--sample-every", "60", "--inject", "P-101:overheating:4@60",
                   "--out", str(log)])
    store = LogStore(db)
    n = 0
    for seq, line in enumerate(log.read_text().splitlines()):
        wall = calendar.timegm(time.strptime(line[:20], "%Y-%m-%dT%H:%M:%SZ")) * 1000
        level = 3 if " TRIPPED" in line else 2 if line[21:26] in ("ALARM", "CLEAR") else 1
        store.add_log("node-7", 7, seq, seq % (1 << 30), wall, level, line, commit=False)
        n += 1
    store.commit()
    store.close()
    return n


@pytest.fixture(scope="module")
def plant(tmp_path_factory):
    d = tmp_path_factory.mktemp("ask")
    db = d / "plant.db"
    lines = fill_store(db, d / "plant.log")
    model = make_tiny(d / "reranker", max_position_embeddings=64)
    return {"db": db, "lines": lines, "model": model, "dir": d}


def ask(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["ask", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_store_windows_and_rerank(plant):
    from host.prism.engine import Prism

    assert plant["lines"] > 500
    windows = qa.candidates(plant["db"], QUESTION, limit=20, lines=8)
    assert 5 <= len(windows) <= 20
    assert any("TRIPPED" in w.text for w in windows)
    prism = Prism.from_pretrained(str(plant["model"]))
    chosen, ranking = qa.rerank(prism, QUESTION, windows, 3)
    assert [s.n for s in chosen] == [1, 2, 3] and len(ranking.top) == 3
    assert [s.text for s in chosen] == [windows[j].text for j in ranking.top]
    assert all(s.node == "node-7" and s.t0_ms <= s.t1_ms for s in chosen)
    p = qa.prompt_text(QUESTION, chosen)
    assert p.startswith("<|im_start|>system\n") and p.endswith("<|im_start|>assistant\n")
    assert "[2] node-7 2026-11-30 " in p and QUESTION in p
    assert [s.n for s in qa.cited_sources("see [2] and [1], also [2] and [9]", chosen)] == [2, 1]
    prism.close()


def test_ask_ranks_and_lists_windows(plant, capsys):
    code, out, err = ask(capsys, QUESTION, "--db", str(plant["db"]), "--k", "3", "--reranker", str(plant["model"]),
                         "--no-answer")
    assert code == 0, err
    assert "PRISM ranked" in out and out.count("  [") == 3 and "node-7 2026-11-30" in out
    # the tiny reranker reads 64 tokens: the truncation is stated
    assert "longer than the reranker's 64-token limit and were truncated" in out


@pytest.mark.parametrize("argv,message", [
    (["   "], "the question is empty"),
    ([QUESTION, "--k", "0"], "--k must be at least 1"),
    ([QUESTION, "--k", "30"], "--k 30 is larger than --candidates 20"),
    (["why did the flux capacitor explode?"], "no log windows in .* match"),
    (["P-101 C-301 trip", "--k", "20", "--lines", "400"], "--k 20 is larger than the \\d+ candidate windows"),
])
def test_ask_bad_questions(plant, capsys, argv, message):
    import re

    code, out, err = ask(capsys, *argv, "--db", str(plant["db"]), "--reranker", str(plant["model"]), "--no-answer")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgetwin ask: error: ") and "Traceback" not in err
    assert re.search(message, lines[0]), lines[0]


def test_ask_bad_store_and_models(plant, capsys, tmp_path):
    cases = []
    cases.append((["--db", str(tmp_path / "none.db")], "log store .* does not exist"))
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    cases.append((["--db", str(junk)], "not a usable SQLite database"))
    base = ["--db", str(plant["db"])]
    cases.append((base + ["--reranker", str(tmp_path / "nope")], "model directory .* does not exist"))
    bad = make_tiny(tmp_path / "corrupt")
    (bad / "model.safetensors").write_bytes(b"\xff" * 64)
    cases.append((base + ["--reranker", str(bad)], "corrupt"))
    mism = make_tiny(tmp_path / "mismatch")
    cfg = json.loads((mism / "config.json").read_text())
    cfg["num_hidden_layers"] = 5
    (mism / "config.json").write_text(json.dumps(cfg))
    cases.append((base + ["--reranker", str(mism)], "missing tensor bert.encoder.layer.3"))
    gpt = make_tiny(tmp_path / "gpt")
    cfg = json.loads((gpt / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (gpt / "config.json").write_text(json.dumps(cfg))
    cases.append((base + ["--reranker", str(gpt)], "not 'bert'"))
    cases.append((base + ["--reranker", str(plant["model"]), "--target", str(tmp_path / "x.gguf")],
                  "target model .* does not exist"))
    notgguf = tmp_path / "bad.gguf"
    notgguf.write_bytes(b"GGUF" + b"\x00" * 40)
    cases.append((base + ["--reranker", str(plant["model"]), "--target", str(notgguf)], "cannot load the target model"))
    import re

    for extra, message in cases:
        code, out, err = ask(capsys, QUESTION, "--k", "2", *extra)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (extra, err)
        assert re.search(message, lines[0]), (extra, lines[0])


def test_answer_streams_pieces_and_stops(plant):
    """Answerer.answer with a stand-in target: greedy, streamed in decodable pieces, stops at a stop id."""

    class Tok:
        def encode(self, text, add_special_tokens=False):
            class E:
                ids = [1, 2, 3]
            return E()

        def decode(self, ids, skip_special_tokens=True):
            return "".join("ab[1]"[i % 5] for i in ids)

    class Cfg:
        context_length = 4096

    class Cache:
        def commit(self, n):
            pass

    class Fake:
        cfg = Cfg()
        seq = [2, 3, 4, 0, 1, 99]

        def __init__(self):
            self.i = 0

        def new_dense_cache(self, n, staged=64):
            return Cache()

        def _next(self):
            z = np.zeros(128)
            z[self.seq[self.i]] = 1
            self.i += 1
            return z[None]

        def feed(self, cache, ids, last_only=False):
            return self._next()

        def forward(self, cache, toks):
            return self._next()

    a = qa.Answerer(Fake(), Tok(), stop_ids=[99])
    pieces = []
    text = a.answer(QUESTION, [], max_tokens=10, on_text=pieces.append)
    assert text == "[1]ab" and "".join(pieces) == text and len(pieces) == 5
    a = qa.Answerer(Fake(), Tok(), stop_ids=[99])
    assert a.answer(QUESTION, [], max_tokens=2) == "[1"


@pytest.mark.slow
def test_ask_answers_with_smollm2(plant):
    """The real target (SmolLM2-135M-Instruct GGUF) answers, streamed, from the CLI in a subprocess with one BLAS
    thread (on a busy 2-core machine OpenBLAS's own threads make the same run several times slower)."""
    import os
    import subprocess
    import sys

    from host import models

    try:
        models.smollm2_gguf()
    except OSError:
        pytest.skip("SmolLM2 GGUF not installed")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "host.cli", "ask", QUESTION, "--db", str(plant["db"]), "--k", "2",
                          "--lines", "4", "--reranker", str(plant["model"]), "--max-tokens", "24"],
                         cwd=str(root), env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "PRISM ranked" in out and "Answer: " in out
    answer = out.split("Answer: ", 1)[1].split("\n\n")[0]
    assert len(answer.strip()) > 0
    assert "Sources cited:" in out or "cites no window" in out
