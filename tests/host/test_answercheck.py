"""host/answercheck.py: an answer is held against the plant's record before the operator reads it.

Two real stores: the simulator's plant log in which P-101's cavitation raises HI vibration at 06:33:20, HIHI and
the trip at 06:34:41 (tools/train/gen_logs, seed 7, as tests/host/test_ask_readme_question.py), and the hall
plant (tests/host/hallplant.py, Berlin: site time is UTC+1) cut before its trip, so that nothing there tripped.
The checker is a pure function of (answer, windows, store): each test gives it an answer string. The last test
runs `edgetwin ask --json` with the shipped models and reads its one object."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from host import answercheck, cli, cmd_import, qa
from host.store import LogStore
from tools.train import gen_logs

ROOT = Path(__file__).resolve().parents[2]
HI_LINE = "2026-11-30T06:33:20Z ALARM HI P-101 vibration 7.5mm/s prio=3 RAISED"
TRIP_LINE = "2026-11-30T06:34:41Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB"
# a question the target answers (the record answers when an alarm first came, and why a machine tripped): what
# the target says is checked against the record
MODEL_Q = "why did P-101 raise its HI alarm?"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("check_sim")
    log = d / "plant7.log"
    gen_logs.main(["--seed", "7", "--hours", "2", "--inject", "P-101:cavitation:5@600", "--out", str(log)])
    text = log.read_text()
    assert HI_LINE in text and TRIP_LINE in text and " STATE C-301 " in text and "->TRIPPED" not in text.replace(
        TRIP_LINE, "")  # one trip: P-101's
    db = d / "plant.db"
    cmd_import.import_log(log, db, "plant7")
    return db


@pytest.fixture(scope="module")
def hall(tmp_path_factory) -> Path:
    """The hall plant's first 7 minutes: AHU-1's HI raised at 06:05 UTC (07:05 in Berlin) and acked at 06:06, the
    silo's LO at 06:06:20; no HIHI, no trip."""
    import hallplant

    d = tmp_path_factory.mktemp("check_hall")
    desc = hallplant.desc()
    log = d / "hall.log"
    lines = hallplant.lines(desc.hash, minutes=7)
    assert not any("TRIPPED" in ln for ln in lines)
    log.write_text("".join(ln + "\n" for ln in lines))
    db = d / "hall.db"
    cmd_import.import_log(log, db, "hall", desc=desc)
    return db


@pytest.fixture(scope="module")
def st(sim):
    s = LogStore(sim, readonly=True)
    yield s
    s.close()


def _check(store, answer: str, question: str = "", windows=()) -> answercheck.Check:
    return answercheck.check(answer, list(windows), store, question=question)


def _claims(c: answercheck.Check) -> dict:
    return {(x.kind, x.text): x for x in c.claims}


def test_a_right_answer_is_confirmed_by_its_cited_window(sim, st) -> None:
    found = qa.retrieve(sim, "why did P-101 trip?", limit=4, lines=6)
    window = next(w for w in found.windows if TRIP_LINE in w.text)
    c = _check(st, "P-101 tripped at 06:34 on HIHI vibration (13.6mm/s) [1].", windows=[window])
    assert c.answer == c.said and c.unconfirmed == [], [x.as_dict() for x in c.unconfirmed]
    got = _claims(c)
    assert got[("event", "P-101 trip")].line == TRIP_LINE and got[("time", "06:34")].line == TRIP_LINE
    assert got[("event", "P-101 HIHI alarm")].confirmed and got[("machine", "P-101")].confirmed
    assert got[("value", "13.6mm/s")].line in window.text.splitlines()  # the window's line, not another's
    # a value said with less precision is the line's value rounded
    assert not _check(st, "P-101 vibrated at 14 mm/s before it tripped.").unconfirmed


def test_a_wrong_time_is_not_confirmed_and_the_log_says_which(st) -> None:
    """Asked when the first HI alarm came, the target gave the trip's (the HIHI's) time."""
    c = _check(st, "The first HI alarm on P-101 came at 06:34 [1].")
    [t] = c.unconfirmed
    assert (t.kind, t.text, t.machine) == ("time", "06:34", "P-101")
    assert "06:33" in t.why and HI_LINE in t.why, t.why
    assert _check(st, "The first HI alarm on P-101 came at 06:33 [1].").unconfirmed == []
    # the HIHI of 06:34 is not a HI alarm: its minute does not confirm "the HI alarm at 06:34" either
    assert [x.text for x in _check(st, "P-101's HI alarm was raised at 06:34.").unconfirmed] == ["06:34"]


def test_a_wrong_machine_is_not_confirmed(st) -> None:
    c = _check(st, "M-201 tripped at 06:34 on high vibration [1].")
    assert {(x.kind, x.text) for x in c.unconfirmed} == {("event", "M-201 trip"), ("time", "06:34")}
    assert _claims(c)[("machine", "M-201")].confirmed  # M-201 is in the log; it did not trip
    c = _check(st, "P-117 tripped at 06:34.")  # no line names P-117
    assert ("machine", "P-117") in {(x.kind, x.text) for x in c.unconfirmed}
    assert "no line of the log names P-117" in _claims(c)[("machine", "P-117")].why


def test_a_value_not_in_the_lines_is_not_confirmed(st) -> None:
    c = _check(st, "P-101 tripped when its vibration reached 15.2mm/s [1].")
    assert [(x.kind, x.text, x.machine) for x in c.unconfirmed] == [("value", "15.2mm/s", "P-101")]
    # the value of another machine's line is not this machine's
    c = _check(st, "P-101 tripped at 06:34 on M-201's vibration of 13.6mm/s.")
    assert [(x.kind, x.machine) for x in c.unconfirmed] == [("value", "M-201")]


def test_an_invented_trip_on_a_plant_where_nothing_tripped(hall) -> None:
    with LogStore(hall, readonly=True) as s:
        c = _check(s, "The air handler tripped at 07:07 on its HIHI supply air temperature [1].")
        bad = {(x.kind, x.text) for x in c.unconfirmed}
        assert {("event", "AHU-1 trip"), ("event", "AHU-1 HIHI alarm"), ("time", "07:07")} <= bad, bad
        assert _claims(c)[("machine", "air handler")].confirmed  # named by its words: AHU-1, shown with its id
        assert c.answer.startswith("The air handler (AHU-1) tripped at 07:07"), c.answer
        # what did happen, in site time (Berlin) and in the log's words: confirmed
        c = _check(s, "The HI supply air temperature alarm on ahu-1 came at 07:05 (27.0C) and was acknowledged at "
                      "07:06 [1].")
        assert c.unconfirmed == [] and "AHU-1" in c.answer and "ahu-1" not in c.answer, c.answer
        # a time that is the line's UTC minute (the prompt's windows are in UTC) is shown in site time
        c = _check(s, "AHU-1 raised a HI alarm at 06:05 [1].")
        assert c.unconfirmed == [] and c.answer == "AHU-1 raised a HI alarm at 07:05 [1].", c.answer
        # an absence the record proves is the record's own sentence
        c = _check(s, "Nothing of the kind: AHU-1 never tripped.")
        assert c.answer == "Nothing of the kind in the log since 06:00 UTC on 2026-11-30: no trip of AHU-1."
        assert c.unconfirmed == []


def test_nothing_of_the_kind_from_the_model_is_replaced_by_the_records_finding(st) -> None:
    """The target wrote "Nothing of the kind" itself while the alarm line is in the store."""
    said = "Nothing of the kind in the log since 06:00: no HI alarm of P-101."
    c = _check(st, said)
    assert "nothing of the kind" not in c.answer.lower() and said not in c.answer
    assert "06:33" in c.answer and HI_LINE in c.answer, c.answer
    [x] = c.unconfirmed
    assert x.kind == "absence" and x.text == said and x.line == HI_LINE
    # no machine or event of its own: the question's
    c = _check(st, "Nothing of the kind in the log since 06:00.", question="when did the first HI alarm on P-101 "
               "come?")
    assert "06:33" in c.answer and HI_LINE in c.answer, c.answer
    # the event denied, not the first one said; the rest of the answer stays
    c = _check(st, "The HI alarm came at 06:33 [1]. P-101's HI vibration alarm was never acknowledged.")
    assert c.answer.startswith("The HI alarm came at 06:33 [1]. The log has P-101's first HI acknowledgement at "
                               "06:34 UTC: 2026-11-30T06:34:23Z ACK HI P-101 vibration"), c.answer
    # what the record proves did not happen is said in the record's words; with nothing to look up, left out
    assert _check(st, "C-301 did not trip.").answer == ("Nothing of the kind in the log since 06:00 UTC on "
                                                        "2026-11-30: no trip of C-301.")
    c = _check(st, "There was nothing of the kind.")
    assert c.answer != c.said and "nothing of the kind" not in c.answer.lower()
    assert [x.kind for x in c.unconfirmed] == ["absence"]


class _Prism:
    """Ranks the windows in retrieval's order: what is under test is what ask does with the answer."""

    def retrieval_prior(self, n, pinned=0):
        return None

    def rank(self, question, texts, k, prior=None):
        from types import SimpleNamespace

        return SimpleNamespace(top=list(range(k)), probs=np.linspace(0.9, 0.1, len(texts)), latency_s=0.0,
                               layers_per_candidate=0.0, num_layers=0, truncated=0)


class _Answerer:
    """Writes what the target wrote in the known failure, streamed in pieces."""

    last = {"prompt_tokens": 1, "answer_tokens": 1, "prefill_s": 0.0, "decode_s": 0.0, "ended": "end of turn",
            "prompt_lines": 1}

    def answer(self, question, sources, max_tokens=64, on_text=None, note="", budget=None, vocab=None):
        text = "Nothing of the kind in the log since 06:00: no HI alarm of P-101."
        for piece in (text[:20], text[20:]):
            if on_text:
                on_text(piece)
        return text


def test_ask_shows_only_the_checked_answer(sim) -> None:
    seen: dict = {"text": [], "draft": []}
    res = qa.ask(MODEL_Q, sim, _Prism(), _Answerer(),
                 report=lambda k, d: seen[k].append(d) if k in seen else None)
    assert res["said"] == "".join(seen["draft"]) and seen["text"] == [res["answer"]]
    assert HI_LINE in res["answer"] and "nothing of the kind" not in res["answer"].lower()
    assert [c.kind for c in res["unconfirmed"]] == ["absence"] and res["times"]["check_s"] >= 0


def test_ask_text_marks_what_is_not_confirmed(sim, capsys, monkeypatch) -> None:
    """`edgetwin ask` prints the checked answer, then what no line confirms, each with why."""
    from host.prism import engine

    class Closing(_Prism):
        max_length = 512

        def close(self):
            pass

    monkeypatch.setattr(engine.Prism, "from_pretrained", classmethod(lambda cls, *a, **k: Closing()))
    monkeypatch.setattr(qa.Answerer, "from_gguf", classmethod(lambda cls, *a, **k: _Answerer()))
    stand_in = sim.parent / "stand-in.gguf"  # never read: from_gguf is the stand-in's
    stand_in.write_bytes(b"GGUF")
    code = cli.main(["ask", MODEL_Q, "--db", str(sim), "--quiet",
                     "--reranker", str(sim.parent), "--target", str(stand_in)])
    out = capsys.readouterr().out
    assert code == 0
    answer = out.split("\nAnswer: ", 1)[1]
    assert answer.startswith("The log has P-101's first HI alarm at 06:33 UTC: " + HI_LINE), out
    assert "\n\nNot confirmed by the log:\n  - absence: Nothing of the kind in the log since 06:00: no HI alarm of " \
           "P-101. (the log says otherwise; replaced by the record's finding)\n" in out, out


def test_the_dashboard_and_the_demo_show_what_is_not_confirmed(sim, capsys) -> None:
    """The dashboard's question box gets the checked answer and its unconfirmed claims in its done event; the
    demo prints them under the answer."""
    from host.ui.asking import Asker
    from tools.demo.demo import Demo

    asker = Asker(sim)
    asker._models = (_Prism(), _Answerer())  # noqa: SLF001 (no model load: the check is under test)
    events: list = []
    asker.ask(MODEL_Q, lambda k, d: events.append((k, d))).join(30)
    kinds = [k for k, _ in events]
    assert kinds[-1] == "done" and kinds.count("text") == 1, events
    done = events[-1][1]
    assert HI_LINE in done["answer"] and dict(events)["text"] == done["answer"]
    assert [u["kind"] for u in done["unconfirmed"]] == ["absence"] and done["unconfirmed"][0]["why"]
    Demo._print_cited(None, {"cited": [], "unconfirmed": [{"kind": "time", "text": "06:34", "why": "the log has "
                                                           "[b]06:33[/b]"}]})
    out = capsys.readouterr().out
    assert "not confirmed by the log: time: 06:34 (the log has [b]06:33[/b])" in out, out


def test_ask_json_bad_input_is_one_line(sim, capsys, tmp_path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    for argv, message in ((["  ", "--db", str(sim)], "the question is empty"),
                          (["why?", "--db", str(tmp_path / "none.db")], "does not exist"),
                          (["why?", "--db", str(junk)], "not a usable SQLite database")):
        code = cli.main(["ask", *argv, "--json"])
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert code == 2 and out.out == "" and len(lines) == 1 and message in lines[0], (argv, out)


@pytest.mark.slow
@pytest.mark.cpu
def test_ask_json_prints_one_object(sim) -> None:
    """`edgetwin ask --json` with the shipped reranker and target: one JSON object on stdout, nothing else."""
    from host import weights

    try:
        weights.smollm2_gguf()
    except OSError:
        pytest.skip("SmolLM2 GGUF not installed (make venv installs it)")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "host.cli", "ask", MODEL_Q, "--db", str(sim), "--json"],
                         cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-2000:]
    obj = json.loads(res.stdout)  # the whole of stdout is the one object
    assert res.stdout.count("\n") == 1 and isinstance(obj, dict)
    assert obj["question"] == MODEL_Q and obj["answer"].strip() and isinstance(obj["said"], str)
    assert obj["sources"] and all(set(s) >= {"node", "span", "lines"} and s["lines"] for s in obj["sources"])
    assert all(s["node"] == "plant7" and re.match(r"plant7 2026-11-30 \d\d:\d\d:\d\d to ", s["span"])
               for s in obj["sources"])
    assert isinstance(obj["unconfirmed"], list) and all(not c["confirmed"] and c["why"] for c in obj["unconfirmed"])
    assert all(c["line"] for c in obj["claims"] if c["confirmed"])
    # every time the answer gives is a claim, confirmed or listed as not confirmed (a record's finding, which
    # replaces a sentence of the model's, quotes its line)
    times = {c["text"][:5] for c in obj["claims"] if c["kind"] == "time"}
    if not any(c["kind"] == "absence" for c in obj["claims"]):
        assert set(re.findall(r"\b\d\d:\d\d\b", obj["answer"])) <= times, obj
    assert "[" not in res.stderr or "retrieval" in res.stderr  # progress stays on stderr


def test_a_bare_time_on_a_store_of_plants_in_two_zones_is_each_lines_own_site_time(tmp_path) -> None:
    """Two generated plants in one store (Madrid, UTC+1, and Kolkata, UTC+5:30), an answer naming no machine: its
    time is confirmed in the site time of the line's own plant, or in the windows' UTC (shown in site time), and a
    wrong one is refused naming the zone of the line the record holds, not UTC."""
    import datetime
    import zoneinfo

    from host import plantdesc
    from tools.plants import generate, plantday

    db = tmp_path / "two.db"
    trips = []
    for seed in (2000, 2001):
        day = plantday.day(generate.plant(seed, "seen"), seed, hours=3)
        (tmp_path / ("p%d.json" % seed)).write_text(json.dumps(day.desc))
        (tmp_path / ("p%d.log" % seed)).write_text("\n".join(day.lines) + "\n")
        cmd_import.import_log(tmp_path / ("p%d.log" % seed), db, "node%d" % seed,
                              desc=plantdesc.load(tmp_path / ("p%d.json" % seed)))
        trips += [(ln, day.desc["timezone"]) for ln in day.lines if "->TRIPPED" in ln]
    assert {z for _, z in trips} == {"Europe/Madrid", "Asia/Kolkata"}
    first, zone = min(trips)  # the store's first trip, whichever plant's
    at = datetime.datetime.strptime(first[:20], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    site, utc = at.astimezone(zoneinfo.ZoneInfo(zone)).strftime("%H:%M"), at.strftime("%H:%M")
    taken = {ln[11:16] for ln, _ in trips} | {datetime.datetime.strptime(ln[:20], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).astimezone(zoneinfo.ZoneInfo(z)).strftime("%H:%M") for ln, z in trips}
    assert site != utc and utc not in taken - {utc} and site not in taken - {site}
    wrong = next("%02d:%02d" % (h, m) for h in range(24) for m in (7, 37) if "%02d:%02d" % (h, m) not in taken)
    store = LogStore(db, readonly=True)
    try:
        said = [x for x in _check(store, "A machine tripped at %s." % site).claims if x.kind == "time"]
        assert [(x.text, x.confirmed, x.line) for x in said] == [(site, True, first)]
        said = [x for x in _check(store, "A machine tripped at %s." % utc).claims if x.kind == "time"]
        assert [(x.text, x.confirmed, x.line) for x in said] == [(site, True, first)]  # shown in site time
        no = _claims(_check(store, "A machine tripped at %s." % wrong))[("time", wrong)]
        assert not no.confirmed and "%s %s" % (site, zone) in no.why, no.why
    finally:
        store.close()
