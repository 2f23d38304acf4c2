"""`edgetwin ask`: a log store filled with plant logs (tools/train/gen_logs.py), PRISM top K, the target's answer;
bad input gives one line and exit 2."""

from __future__ import annotations

import calendar
import io
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from host import cli, logwords, plantdesc, qa
from host.store import LogStore
from test_prism_bert import make_tiny
from tools.train import gen_logs

QUESTION = "why did P-101 overheat?"  # the target's to answer (the record says why a machine tripped)


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


PROGRESS = re.compile(r"^\[ *\d+\.\d s\] ")


def error_lines(err: str) -> list[str]:
    """stderr without ask's progress lines ("[  0.3 s] reranking ..."): what must be one error line."""
    return [ln for ln in err.strip().splitlines() if not PROGRESS.match(ln)]


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
    assert "Log windows of 2026-11-30 (UTC):" in p and re.search(r"\[2\] node-7 \d\d:\d\d:\d\d to ", p)
    assert QUESTION in p
    assert [s.n for s in qa.cited_sources("see [2] and [1], also [2] and [9]", chosen)] == [2, 1]
    prism.close()


def test_ask_ranks_and_lists_windows(plant, capsys):
    code, out, err = ask(capsys, QUESTION, "--db", str(plant["db"]), "--k", "3", "--reranker", str(plant["model"]),
                         "--no-answer")
    assert code == 0, err
    assert "PRISM ranked" in out and out.count("  [") == 3 and "node-7 2026-11-30" in out
    # the tiny reranker reads 64 tokens: the truncation is stated
    assert "longer than the reranker's 64-token limit and were truncated" in out
    # each chosen window is shown with its log text (--lines 6 by default), indented under its header
    shown = [ln.strip() for ln in out.splitlines() if ln.startswith("      2026-11-30T")]
    assert len(shown) == 3 * 6 and all(" P-101 " in t or " M-201 " in t or "STATE" in t or "ALARM" in t
                                       or " C-301 " in t or " CV-401 " in t for t in shown)
    # progress on stderr: retrieval, reranking, each with its time
    assert re.search(r"retrieval: \d+ windows hold the question's words", err)
    assert "reranking" in err and "reranked in" in err


def test_ask_with_fewer_windows_than_k_uses_them_all(plant, capsys):
    """A young store (or long windows) yields fewer windows than --k: they are all used, and ask says so."""
    found = qa.retrieve(plant["db"], "P-101 C-301 trip", limit=20, lines=400)
    n = len(found.windows)
    assert 0 < n < 20
    code, out, err = ask(capsys, "P-101 C-301 trip", "--db", str(plant["db"]), "--k", "20", "--candidates", "20",
                         "--lines", "400", "--reranker", str(plant["model"]), "--no-answer")
    assert code == 0, err
    assert "only %d windows found: all of them are used (--k 20)" % n in err
    assert out.count("  [") == n


def test_ask_no_matching_word_falls_back_to_recent_events(plant, capsys):
    """A question whose words no log line holds: not an error; the most recent alarm/state windows, said so."""
    code, out, err = ask(capsys, "why did the flux capacitor explode?", "--db", str(plant["db"]), "--k", "2",
                         "--reranker", str(plant["model"]), "--no-answer")
    assert code == 0, err
    assert out.startswith("note: no log line holds the question's words: the ") and "most recent alarm/state" in out
    found = qa.retrieve(plant["db"], "why did the flux capacitor explode?", limit=5, lines=4)
    assert not found.matched and 1 <= len(found.windows) <= 5
    ends = [w.t1_ms for w in found.windows]
    assert ends == sorted(ends, reverse=True)  # the most recent first
    assert all(any(e in w.text for e in ("ALARM", "STATE", "TRIPPED", "CLEAR", "ACK")) for w in found.windows)
    # the target is told (the prompt carries the note)
    p = qa.prompt_text("why did the flux capacitor explode?", [], qa.NO_MATCH_NOTE)
    assert qa.NO_MATCH_NOTE in p and p.index(qa.NO_MATCH_NOTE) < p.index("Question: ")


def test_ask_reads_the_question_from_stdin(plant, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("why did\nP-101 trip?\n"))
    code, out, err = ask(capsys, "-", "--db", str(plant["db"]), "--k", "2", "--reranker", str(plant["model"]),
                         "--no-answer")
    assert code == 0, err and "PRISM ranked" in out
    monkeypatch.setattr(sys, "stdin", io.StringIO("  \n"))
    code, out, err = ask(capsys, "-", "--db", str(plant["db"]), "--reranker", str(plant["model"]), "--no-answer")
    assert code == 2 and error_lines(err) == ["edgetwin ask: error: the question is empty (nothing on stdin)"]


def test_ask_command_defaults_are_the_libraries():
    # cmd_ask keeps its own copies (edgetwin --help does not import numpy): they must not drift
    from host import cmd_ask

    assert (cmd_ask.CANDIDATES, cmd_ask.PROMPT_BUDGET) == (qa.CANDIDATES, qa.PROMPT_BUDGET)


def test_node_labels_never_a_port_path(tmp_path):
    """Windows name their node by the operator's name, else the unique id / board id of the handshake."""
    db = tmp_path / "n.db"
    s = LogStore(db)
    s.node_id("/dev/pts/7", "rp2040_pico")
    s.node_id("/dev/pts/9", "rp2040_pico")
    s.node_id("boiler-room", "esp32s3_devkitc")
    s.node_id("/dev/ttyACM0")  # nothing known of it but its port
    for i, n in enumerate(("/dev/pts/7", "/dev/pts/9", "boiler-room")):
        s.add_log(n, 1, 0, 0, 1000 * i, 2, "2026-11-30T06:00:0%dZ ALARM P-101 HI bearing_temp" % i, commit=False)
    s.commit()
    assert qa.node_labels(s) == {"/dev/pts/7": "rp2040_pico", "/dev/pts/9": "rp2040_pico-2",
                                 "boiler-room": "boiler-room", "/dev/ttyACM0": "/dev/ttyACM0"}
    s.close()
    found = qa.retrieve(db, "P-101 alarm", limit=5, lines=2)
    assert found.matched and {found.labels[w.node] for w in found.windows} == {"rp2040_pico", "rp2040_pico-2",
                                                                               "boiler-room"}


def test_fit_sources_bounds_the_prompt(plant):
    """The prompt's windows are cut to the budget, keeping the lines that name the question's words."""
    windows = qa.candidates(plant["db"], QUESTION, limit=5, lines=8)
    srcs = [qa.Source(i + 1, w.node, w.t0_ms, w.t1_ms, w.text, 0.5) for i, w in enumerate(windows)]
    count = lambda line: len(line.split())  # noqa: E731 - a stand-in token count
    full = sum(count(ln) + 1 for s in srcs for ln in s.text.splitlines())
    fit = qa.fit_sources(QUESTION, srcs, count, budget=full // 3)
    used = sum(count(ln) + 1 for s in fit for ln in s.text.splitlines())
    assert used <= full // 3 and all(s.text for s in fit) and [s.n for s in fit] == [s.n for s in srcs]
    for s, f in zip(srcs, fit):
        kept = f.text.splitlines()
        assert all(not ln[:4].isdigit() or ln[2] == ":" for ln in kept)  # the ISO day is dropped
        short = [qa.short_line(ln) for ln in s.text.splitlines()]
        assert kept == [ln for ln in short if ln in kept]  # in the window's own order
        if any("P-101" in ln for ln in short):
            assert any("P-101" in ln for ln in kept)  # a line naming the question's tag is kept first


def test_fit_sources_keeps_the_line_that_answers():
    """Where every line of a window names the question's machine and signal, the line holding its rare word
    (the one ACK of "who acked ...") is kept over lines nearer the window's middle."""
    text = "\n".join([
        "2026-11-30T07:20:00Z M-202 RUNNING T=57.8C V=9.9mm/s I=22.5A N=969rpm",
        "2026-11-30T07:20:49Z ALARM HIHI M-202 vibration 11.4mm/s prio=4 RAISED",
        "2026-11-30T07:20:49Z STATE M-202 RUNNING->TRIPPED interlock=HIHI_VIB",
        "2026-11-30T07:20:52Z CLEAR HIHI M-202 vibration 6.0mm/s prio=4 RTN_UNACK",
        "2026-11-30T07:20:55Z ALARM HI M-202 vibration 7.0mm/s prio=3 RAISED",
        "2026-11-30T07:20:58Z ACK HIHI M-202 vibration 0.1mm/s prio=4 NORMAL"])
    src = [qa.Source(1, "node", 0, 1000, text, 0.9)]
    count = lambda line: len(line.split())  # noqa: E731 - a stand-in token count
    sim = logwords.Vocabulary.of([plantdesc.builtin()])  # the words ask reads a simulator's store in
    fit = qa.fit_sources("who acked the HIHI vibration alarm on M-202 raised at 07:20?", src, count, budget=19,
                         vocab=sim)
    kept = fit[0].text.splitlines()
    assert len(kept) == 2 and any(" ACK HIHI M-202" in ln for ln in kept), kept
    assert any(" ALARM HIHI M-202" in ln for ln in kept), kept  # the alarm it asks about, the next best
    trip = qa.fit_sources("when did M-202 trip?", src, count, budget=19, vocab=sim)[0].text.splitlines()
    assert any("TRIPPED interlock" in ln for ln in trip), trip  # another question keeps its own line


def test_retrieval_follows_the_alarms_record_and_pins_it(plant, tmp_path):
    """The line that answers "when was ... acknowledged?" can lie far from the named minute among lines of the
    same words: retrieval finds it by the alarm's record (its ACK after its raise), gives it first, and the
    reranking keeps it whatever PRISM makes of it. "The compressor" is the store's only compressor."""
    from host.prism.engine import Prism

    db = tmp_path / "g.db"
    s = LogStore(db)
    seq = 0
    for minute in range(60):
        for text in ("C-301 RUNNING T=71.0C P=7.1bar V=%.1fmm/s vibration" % (2 + minute / 30),
                     "P-101 RUNNING T=40.1C V=2.0mm/s vibration"):
            seq += 1
            s.add_log("n1", 1, seq, seq, 1000 * (6 * 3600 + minute * 60), 1,
                      "2026-11-30T06:%02d:00Z %s" % (minute, text))
        events = {5: "ALARM HI C-301 vibration 7.2mm/s prio=3 RAISED", 7: "ALARM HI P-101 vibration 7.1mm/s prio=3 "
                  "RAISED", 8: "ACK HI P-101 vibration 7.0mm/s prio=3 ACKED", 41: "ACK HI C-301 vibration 7.9mm/s "
                  "prio=3 ACKED"}
        if minute in events:
            seq += 1
            s.add_log("n1", 1, seq, seq, 1000 * (6 * 3600 + minute * 60 + 30), 2,
                      "2026-11-30T06:%02d:30Z %s" % (minute, events[minute]))
    s.close()
    q = "when was the high vibration alarm on the compressor raised at 06:05 acknowledged?"
    found = qa.retrieve(db, q, limit=4, lines=6)
    assert found.pinned == 1 and "the alarm's ACK line (by the plant's record)" in found.how, found.how
    assert "06:41:30Z ACK HI C-301 vibration" in found.windows[0].text
    assert sum("06:41:30Z ACK HI C-301" in w.text for w in found.windows) == 1  # no window repeats its lines
    prism = Prism.from_pretrained(str(plant["model"]))
    try:
        free, ranking = qa.rerank(prism, q, found.windows, 3)
        kept, _ = qa.rerank(prism, q, found.windows, 3, pinned=found.pinned)
    finally:
        prism.close()
    assert kept[0].text == found.windows[0].text and [s.n for s in kept] == [1, 2, 3]
    assert [s.text for s in kept[1:]] == [found.windows[j].text for j in ranking.top if j != 0][:2]
    assert [s.text for s in free] == [found.windows[j].text for j in ranking.top]
    # "when did it start ...": the first alarm C-301 raised; questions the record does not answer: words alone
    first = qa.retrieve(db, "when did C-301 start vibrating?", limit=4, lines=6)
    assert first.pinned == 1 and "06:05:30Z ALARM HI C-301" in first.windows[0].text.splitlines()[2]
    for other in ("why does the compressor vibrate?", "when was the alarm on C-301 raised at 06:30 acknowledged?"):
        r = qa.retrieve(db, other, limit=4, lines=6)
        assert r.pinned == 0 and r.windows and not r.answer, other


def test_the_record_answers_what_never_happened_without_the_target(plant):
    """P-101 overheats and trips in the plant log: no vibration alarm, and M-201 never trips. Those answers
    come from the plant's record, streamed as the target's would be, and the target is never asked."""
    def no_target():
        raise AssertionError("the target was asked")

    for q, words in (("when was the first sign of a worn bearing on P-101?", "no vibration alarms raised of P-101"),
                     ("why did M-201 trip?", "no trip of M-201")):
        found = qa.retrieve(plant["db"], q, limit=4, lines=6)
        assert found.answer.startswith("Nothing of the kind in the log since 06:00 site time on ") and \
            words in found.answer, found.answer
        assert found.pinned == 0 and found.windows, q  # the windows still shown to the operator
        pieces = []
        res = qa.ask(q, plant["db"], FakePrism(), no_target, report=lambda k, d: pieces.append(d) if k == "text"
                     else None)
        assert res["answer"] == found.answer == "".join(pieces) and res["by_record"] and res["cited"] == []
    nowhere = qa.retrieve(plant["db"], "why did P-102 trip?").answer
    assert nowhere == "Nothing of the kind in the log: no line names P-102."
    # what did happen, when it first showed and why it tripped: the record's lines, pinned first
    log = (plant["dir"] / "plant.log").read_text().splitlines()
    first = next(ln for ln in log if " ALARM " in ln and " P-101 " in ln)
    trip = next(ln for ln in log if " P-101 RUNNING->TRIPPED " in ln)
    found = qa.retrieve(plant["db"], "when did P-101 start overheating?", limit=4, lines=6)
    assert found.answer.startswith("The first ") and "alarm of P-101 was at %s" % first[11:16] in found.answer, \
        found.answer  # "overheating": its temperature signal's
    assert found.pinned >= 1 and first in found.windows[0].text
    found = qa.retrieve(plant["db"], "why did P-101 trip?", limit=4, lines=6)
    lock = trip.split("interlock=")[1]
    assert found.answer.startswith("P-101 tripped at %s site time" % trip[11:16]) and "interlock %s" % lock in \
        found.answer, found.answer
    assert found.pinned >= 1 and trip in found.windows[0].text
    # why it ran hot is the target's to say
    assert not qa.retrieve(plant["db"], QUESTION, limit=4, lines=6).answer


class FakePrism:
    """Ranks windows in the order given: the record test is about what ask does after retrieval, not PRISM."""

    def retrieval_prior(self, n, pinned=0):
        return None

    def rank(self, question, texts, k, prior=None):
        from types import SimpleNamespace

        return SimpleNamespace(top=list(range(k)), probs=np.linspace(0.9, 0.1, len(texts)))


@pytest.mark.parametrize("argv,message", [
    (["   "], "the question is empty"),
    ([QUESTION, "--k", "0"], "--k must be at least 1"),
    ([QUESTION, "--k", "30"], "--k 30 is larger than --candidates 4"),
])
def test_ask_bad_questions(plant, capsys, argv, message):
    import re

    code, out, err = ask(capsys, *argv, "--db", str(plant["db"]), "--reranker", str(plant["model"]), "--no-answer")
    assert code == 2
    lines = error_lines(err)
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
        lines = error_lines(err)
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
@pytest.mark.cpu
def test_ask_answers_with_smollm2(plant):
    """The real target (SmolLM2-135M-Instruct GGUF) answers, streamed, from the CLI in a subprocess with one BLAS
    thread (on a busy 2-core machine OpenBLAS's own threads make the same run several times slower)."""
    import os
    import subprocess
    import sys

    from host import weights

    try:
        weights.smollm2_gguf()
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


def test_ask_command_says_when_the_record_answered(plant, capsys):
    code, out, err = ask(capsys, "why did M-201 trip?", "--db", str(plant["db"]), "--reranker", str(plant["model"]),
                         "--target", "stock")
    assert code == 0, err
    assert "Answer: Nothing of the kind in the log since 06:00 site time on 2026-11-30: no trip of M-201." in out, out
    assert "Answered from the plant's record" in out and "ended: the plant's record" in err


def test_rerank_hands_prism_the_retrieval_prior():
    """ask's windows come in retrieval's order: rerank asks the model for its prior of that order (the pinned
    window counted) and passes it to the ranking, and keeps the pinned window first whatever PRISM says."""
    from host.prism.prior import RetrievalPrior
    from host.store import Window

    seen = {}

    class Recording(FakePrism):
        def retrieval_prior(self, n, pinned=0):
            seen["asked"] = (n, pinned)
            return RetrievalPrior(-1.0, 2.0).logits(n, pinned)

        def rank(self, question, texts, k, prior=None):
            from types import SimpleNamespace

            seen["prior"] = prior
            return SimpleNamespace(top=[3, 2, 1][:k], probs=np.linspace(0.1, 0.9, len(texts)))

    wins = [Window("n%d" % i, 1000 * i, 1000 * i + 500, "line %d" % i, 0.0, i, i) for i in range(4)]
    chosen, _ = qa.rerank(Recording(), "why did P-101 trip?", wins, 3, pinned=1)
    assert seen["asked"] == (4, 1)
    assert np.allclose(seen["prior"], RetrievalPrior(-1.0, 2.0).logits(4, 1))
    assert [s.text for s in chosen] == ["line 0", "line 3", "line 2"]
