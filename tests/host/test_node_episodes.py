"""A CPython node with the tiny draft, talking to a gateway session that never verifies (no model there):
its first blocks stay pending, so the episodes that follow (the demo's faults: a BAD alarm, a
clogged strainer; a summary at every sample tick) wait in the node's episode queue, the oldest dropped and
counted in the NODE report's ep_dropped; the log lines themselves all reach the store as before."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from firmware import node, nodecfg, uart
from host.store import LogStore

import gwkit

PROF = json.loads((Path(__file__).resolve().parents[2] / "boards" / "rp2040_pico.json").read_text())


def test_events_wait_in_a_bounded_queue_and_drops_are_reported(tmp_path: Path) -> None:
    mbf = tmp_path / "tiny.mbf"
    mbf.write_bytes(gwkit.tiny_mbf())
    cfg = {"tick_ms": 20, "sample_every": 5, "report_ms": 300, "model": str(mbf), "prompt_max": 12, "max_len": 48,
           "episodes": 3, "summary_s": 1, "faults": ["CV-401:sensor_dropout:4:V@5", "P-101:clogged_filter:5@1"]}
    d, vocab = node.make_drafter(PROF, cfg)
    store = LogStore(tmp_path / "g.db")
    link = gwkit.PtyLink(store)  # no spec: PROMPT and DRAFT frames are counted, never verified
    sess = link.sess
    nd = node.Node(link.uart, PROF, cfg, d, vocab, now=node.ticks_ms())
    t0 = time.monotonic()
    while (nd.eq.dropped < 5 or nd.logs_acked < 150) and time.monotonic() - t0 < 20:
        nd.step(node.ticks_ms())
        sess.poll()
    for _ in range(200):  # one more report
        nd.step(node.ticks_ms())
        sess.poll()
        time.sleep(0.002)
    eq = nd.eq
    # the stream's first blocks (byte tokens: drafted right after the system prompt) wait for verdicts that
    # never come: no episode starts
    assert nd.ann.episodes == 0 and d.pending
    assert eq.count == eq.slots == 3 and eq.dropped >= 5 and eq.events >= 2, (eq.count, eq.dropped, eq.events)
    assert eq.dropped == eq.events + eq.summaries - eq.count  # every episode queued is waiting or dropped
    rows = store.logs("n")
    reports = [r["text"] for r in rows if r["text"].startswith("NODE ")]
    last = dict(kv.split("=", 1) for kv in reports[-1].split()[1:] if "=" in kv)
    assert last["episodes"] == "0" and int(last["ep_dropped"]) >= 5, reports[-1]
    # the log lines are not the episode queue's: every line the sampler queued is stored, was dropped by the
    # line queue while the link came up, is still queued, or in flight
    plant = [r["text"] for r in rows if r["text"].startswith("2026-")]
    assert any(" ALARM BAD CV-401 vibration " in t for t in plant)
    in_flight = nd.q.queued - nd.q.dropped - nd.q.count - len(plant)
    assert 0 <= in_flight <= 8, in_flight
    assert plant == sorted(plant, key=lambda t: t[:20])
    store.close()
    link.close()


def test_faults_and_episode_keys_are_checked() -> None:
    import pytest

    assert nodecfg.parse_config('{"faults": ["P-101:clogged_filter:5@1", "CV-401:sensor_dropout:4:V"], '
                             '"episodes": 2, "summary_s": 0}')["episodes"] == 2
    assert nodecfg.parse_fault("CV-401:sensor_dropout:4:V@5") == (5, "CV-401", "sensor_dropout", 4, "V")
    assert nodecfg.parse_fault("P-101:overheating") == (0, "P-101", "overheating", 3, None)
    for text, key in (('{"faults": ["P-101"]}', "faults"), ('{"faults": ["P-101:overheating:9"]}', "faults"),
                      ('{"faults": ["P-101:overheating@soon"]}', "faults"),
                      ('{"faults": "P-101:overheating"}', "faults"),
                      ('{"episodes": 0}', "episodes"), ('{"summary_s": -1}', "summary_s")):
        with pytest.raises(nodecfg.ConfigError) as e:
            nodecfg.parse_config(text)
        assert "key '%s'" % key in str(e.value), e.value
    # names the plant does not know: the node refuses them at construction (main then runs logs-only, saying why)
    m, s = os.openpty()
    try:
        for bad in ("P-999:overheating", "P-101:no_such_fault", "CV-401:cavitation"):
            with pytest.raises(ValueError):
                node.Node(uart.PtyUART(os.ttyname(s)), PROF, {"faults": [bad]}, now=0)
    finally:
        os.close(m)
        os.close(s)
