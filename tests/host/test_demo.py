"""`edgetwin demo --json`: two virtual nodes (the real MicroPython unix port, the shipped draft with its
tokenizer), the in-process gateway with SmolLM2-135M-Instruct, then two operator questions; and bad arguments."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared import episode

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, timeout: float = 280) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "host.cli", "demo", *args], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=timeout)


def _kinds(prompt: str) -> set:
    """{"event"} / {"sample"} for the lines of an episode's prompt text (the cue "Note:" last); a first
    line whose start the node cut to prompt_max tokens is left out."""
    assert prompt.rstrip().endswith("Note:"), prompt
    out = set()
    for ln in prompt.strip().splitlines()[:-1]:
        w = ln.split(" ", 1)[0]
        if w in episode.EVENT_HEADS:
            out.add("event")
        elif re.fullmatch(r"(P|M|C|CV)-\d{3}", w):
            out.add("sample")
    return out


def _running_micropython(pid: int) -> bool:
    """pid is a live (not zombie) MicroPython interpreter."""
    d = Path("/proc/%d" % pid)
    try:
        cmd = (d / "cmdline").read_bytes()
        state = (d / "stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return b"micropython" in cmd and state != "Z"


@pytest.mark.parametrize("args, msg", [(["--nodes", "0"], "--nodes"), (["--duration", "-1"], "--duration"),
                                       (["--duration", "nan"], "--duration"), (["--k", "9"], "--k"),
                                       (["--plant", "no-such-plant.json"], "no such file"),
                                       (["--plant", "unseeen"], "--plant must be builtin, seen, unseen or"),
                                       (["--plant", "unseen", "--plant-seed", "-1"], "--plant-seed"),
                                       (["--plant", "examples/pump_skid.json"], "kind 'pump' is not one")])
def test_bad_arguments_one_line_exit_2(args: list[str], msg: str) -> None:
    r = _cli(*args, timeout=60)
    assert r.returncode == 2, r
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""


def test_a_malformed_plant_file_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "plant.json"
    bad.write_text('{"format": "edgetwin-plant/1", "machines": [')
    r = _cli("--plant", str(bad), "--json", timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0] and "JSON" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.slow
def test_demo_json_two_nodes_commit_text_and_answer() -> None:
    t0 = time.monotonic()
    r = _cli("--duration", "20", "--json", "--max-answer", "32")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(r.stdout.strip().splitlines()) == 1  # stdout: the JSON alone; progress went to stderr
    prog = [ln for ln in r.stderr.splitlines() if ln.startswith("demo [")]
    assert any("running 2 node(s) for 20 s" in ln for ln in prog) and any("asking: " in ln for ln in prog), r.stderr
    nodes = res["nodes"]
    assert [n["board"] for n in nodes] == ["rp2040_pico", "esp32s3_devkitc"]
    for n in nodes:
        assert n["established"] and n["link_signed"] and n["auth_refused"] == 0, n  # keys provisioned, every frame signed
        assert n["committed_tokens"] > 0 and n["verified_tokens"] > 0, n
        assert n["logs"] > 10 and n["heap_reports"] >= 5, n
        assert n["lockstep_bad"] == 0 and n["lockstep_ok"] >= 3, n
        assert n["heap_bytes_given"] > n["profile_heap_bytes"]  # the x64 port's heap, said in the JSON
        assert 0 < n["peak_heap_bytes"] <= n["heap_bytes_given"], n
    assert res["committed_tokens"]["total"] == sum(res["committed_tokens"]["per_node"].values()) > 0
    assert 0 < res["acceptance_rate"] <= 1
    assert set(res["node_peak_heap_bytes"]) == {n["name"] for n in nodes}
    assert res["models"]["fallback"] is None and res["models"]["draft_tokenizer"]
    assert res["models"]["target_label"].startswith("domain target"), res["models"]  # what gateway and ask use
    assert len(res["answers"]) == 2
    names = {n["name"] for n in nodes}
    for a in res["answers"]:
        assert a["question"] and a["answer"].strip() and "error" not in a, a
        assert a["ground_truth"]["text"], a  # each answer beside what the simulators know happened
        # every answer cites windows, but the record's finding that nothing of the kind happened (no line)
        assert a["cited"] or (a.get("by_record") and a["answer"].startswith("Nothing of the kind")), a
        for c in a["cited"]:
            assert c["node"] in names and c["t0_ms"] <= c["t1_ms"], c
    # the pump question's truth: the clogged strainer the demo gave P-101, and what its simulators logged on P-101
    pump = res["answers"][1]["ground_truth"]
    assert pump["machines"] == ["P-101"] and pump["faults"] == ["P-101 clogged filter (severity 5) from plant second 0"]
    assert all(" P-101 " in ln for ln in pump["events"]), pump
    assert ("P-101" in pump["text"]) == bool(pump["events"]) and (pump["events"] or "nothing of the kind" in pump["text"])
    # the notes are text (decoded with the target's tokenizer), not token ids ("123 456 ..." in the tiny
    # path), and the domain target's words about this plant: they name its machines (the stock SmolLM2-135M
    # wrote "1.1.1.1.1.1.1.1" on these event episodes)
    notes = [t for n in nodes for t in n["notes"]]
    assert any(t.strip() and not re.fullmatch(r"[0-9 ]+", t.strip()) for t in notes), notes
    assert any(re.search(r"\b(?:P|M|C|CV)-\d{3}\b", t) for t in notes), notes
    # the nodes annotate events: every episode's prompt holds the event lines of one engine step (the demo's
    # simulators have a sensor dropping out and a clogged strainer alarming when the nodes start), or is a
    # periodic summary of sample lines; a 20 s demo has notes on events
    eps = [e for n in nodes for e in n["episodes"]]
    kinds = [_kinds(e["prompt"]) for e in eps]
    for e, k in zip(eps, kinds):  # a tick's event lines, or a summary's sample lines: never a mix
        assert len(k) == 1, e
    on_events = [e for e, k in zip(eps, kinds) if k == {"event"}]
    assert on_events and any(e["note"].strip() for e in on_events), eps
    assert res["cleanup"]["left_running"] == []
    pids = res["cleanup"]["pids"]
    assert len(pids) == 2 and not any(_running_micropython(p) for p in pids), pids
    print("DEMO took %.1f s: %s" % (took, json.dumps({k: res[k] for k in ("acceptance_rate", "durations")})))


@pytest.mark.slow
def test_demo_json_on_an_unseen_plant() -> None:
    """`--plant unseen`: each node reads a generated plant of held-out kinds and names (seeds 2000, 2001) over
    Modbus; the tiny pair drafts and verifies (the Q&A is still SmolLM2's), 20 s. The plants' own ids are what the
    nodes log, the questions name and the ground truth lists; the built-in simulator's are nowhere."""
    from tools.plants import split

    builtin = re.compile(r"\b(?:P|M|C|CV)-\d{3}\b")
    t0 = time.monotonic()
    r = _cli("--plant", "unseen", "--json", "--model", "tiny", "--duration", "20", "--max-answer", "16")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    pl = res["plant"]
    assert (pl["plant"], pl["split"], pl["seed"]) == ("unseen", "unseen", 2000)
    assert [p["name"] for p in pl["nodes"]] == ["gen-unseen-2000", "gen-unseen-2001"]
    for p, n in zip(pl["nodes"], res["nodes"]):
        assert p["node"] == n["name"] and set(p["kinds"]) <= set(split.HELD_OUT_KINDS), p
        assert set(n["machines_logged"]) == set(p["machines"]), (n["machines_logged"], p)  # all its own, no other
        assert sorted(f["expect"] for f in p["faults"]) == ["alarm", "trip"], p
    alarm = next(f for f in pl["nodes"][0]["faults"] if f["expect"] == "alarm")
    questions = [a["question"] for a in res["answers"]]
    assert questions[0] == "Which machine stopped or tripped, and why?"
    assert (" %s " % alarm["machine"]) in questions[1] and not builtin.search(" ".join(questions)), questions
    # the ground truth: the simulators' own lines on the machine asked about, and the fault the demo gave it
    t = res["answers"][1]["ground_truth"]
    assert t["machines"] == [alarm["machine"]] and t["events"], t
    assert all(" %s " % alarm["machine"] in ln for ln in t["events"]) and alarm["machine"] in t["text"], t
    assert len(t["faults"]) == 1 and t["faults"][0].startswith("node1-rp2040_pico: %s " % alarm["machine"]), t
    assert len(res["answers"][0]["ground_truth"]["faults"]) == 4  # the trip question: every node's faults
    assert not builtin.search(json.dumps([a["ground_truth"] for a in res["answers"]]))
    assert res["cleanup"]["left_running"] == []
    print("DEMO --plant unseen took %.1f s: %s" % (took, json.dumps(res["durations"])))
