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
                                       (["--duration", "nan"], "--duration"), (["--k", "9"], "--k")])
def test_bad_arguments_one_line_exit_2(args: list[str], msg: str) -> None:
    r = _cli(*args, timeout=60)
    assert r.returncode == 2, r
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""


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
        assert a["question"] and a["answer"].strip(), a
        assert a["ground_truth"]["text"], a  # each answer beside what the simulators know happened
        assert a["cited"], a
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
