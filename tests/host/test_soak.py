"""`edgetwin bench soak --short --json` (tools/bench/soak.py), the real command: three virtual boards (one drafting),
the gateway with MQTT, 0.2 plant days at tick_ms 2 with every fault kind injected once; every goal it reports is
checked here from the figures, not only from its verdict. The nodes write every line ahead to their spill rings,
so a power cut (while a cable is cut, or while a model is written) loses none: every loss is one a node counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import soak

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_short_soak_with_every_fault_loses_nothing_unreported(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "host.cli", "bench", "soak", "--short", "--json", "--keep",
                        str(tmp_path / "kept")], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert "bench soak: " in p.stderr and "fault " in p.stderr  # progress on stderr while it ran
    assert (tmp_path / "kept" / "soak.db").is_file()

    # the plant time and the nodes
    assert out["plant_days"] >= 0.2 * 0.98 and out["real_s"] > 0
    nodes = out["nodes"]
    assert len(nodes) >= 3 and sum(1 for n in nodes.values() if n["drafting"]) == 1
    assert {n["board"] for n in nodes.values()} >= {"rp2040_pico", "esp32s3_devkitc"}

    # every fault kind injected (or skipped with its reason) and survived
    for kind in soak.FAULT_KINDS:
        if kind in out["faults_skipped"]:
            assert out["faults_skipped"][kind] and out["faults_injected"][kind] == 0
        else:
            assert out["faults_injected"][kind] >= 1, kind
            assert out["faults_survived"][kind] is True, (kind, out["faults"])
    assert out["gateway_starts"] >= 2 and out["broker_restarts"] >= 1

    # lines: none duplicated; the cut longer than the spill ring cost lines, each counted by its node
    assert out["lines_duplicated"] == 0
    assert out["lines_lost_reported"] > 0
    cut = next(f["node"] for f in out["faults"] if f["kind"] == "link_cut_over_budget")
    assert nodes[cut]["lines_dropped_reported"] > 0 and nodes[cut]["lines_lost_unreported"] == 0
    for name, n in nodes.items():
        assert n["lines_stored"] > 0 and n["lines_duplicated"] == 0, name
        assert n["lines_produced"] == (n["lines_stored"] + n["lines_dropped_reported"] + n["lines_lost_unreported"]
                                       - n["lines_reported_but_stored"]), (name, n)
    # no unreported loss, power cuts included (their boots' lines came back from the rings after the reboot)
    assert out["faults_injected"]["power_cut_during_spill"] >= 1
    assert out["lines_lost_unreported"] == out["lines_lost_at_power_cut"] == 0, out["nodes"]

    # heap, store, outbox, tokens
    for name, n in nodes.items():
        assert n["heap_first_hour"] and n["heap_last_hour"] and n["heap_flat"], (name, n)
    assert out["heap_flat"] and out["integrity_ok"] and out["integrity"] == ["ok"]
    assert out["outbox_consistent"] and out["outbox_acked"] > 0 and out["outbox_queued_at_end"] == 0
    assert out["drained"] and out["gateway_exit"] == 0
    assert out["committed_tokens"] > 0 and "tiny" in out["models"]["draft"] and "tiny" in out["models"]["target"]

    # the verdict agrees with the figures: exit 0 exactly when every goal was met
    assert set(out["goals_met"]) >= {"lines_lost_unreported", "lines_duplicated", "heap_flat", "integrity_ok",
                                     "outbox_consistent", "faults_survived"}
    assert all(out["goals_met"].values()) and p.returncode == 0, out["goals_met"]


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv, word in ((["--plant-days", "0"], "--plant-days"), (["--tick-ms", "x"], "--tick-ms"),
                       (["--keep", str(tmp_path)], "--keep")):
        p = subprocess.run([sys.executable, "-m", "host.cli", "bench", "soak", *argv], cwd=str(ROOT), env=env,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 2 and word in p.stderr and "Traceback" not in p.stderr, (argv, p.stderr)
        assert len(p.stderr.strip().splitlines()) <= 2, p.stderr  # usage line + the error, as argparse says it
