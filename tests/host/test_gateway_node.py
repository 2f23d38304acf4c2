"""firmware/node.py and its parts under CPython: the line queue, number formatting, log levels, the
sampler's versioned records, /node.json checking, and a node talking to a gateway session over a pty."""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path

import pytest

from firmware import logq, node
from firmware.sampler import Sampler
from host.store import LogStore

import gwkit

PROF = json.loads((Path(__file__).resolve().parents[2] / "boards" / "rp2040_pico.json").read_text())


def test_line_queue_drops_the_oldest_when_full() -> None:
    q = logq.LineQueue(3)
    for i in range(5):
        off = q.slot()
        q.buf[off] = 48 + i
        q.put(1, 1, i)
    assert q.count == 3 and q.dropped == 2 and q.queued == 5
    got = []
    while q.count:
        got.append(q.buf[q.first()] - 48)
        q.pop()
    assert got == [2, 3, 4]


def test_formatting_without_allocation_helpers() -> None:
    b = bytearray(32)
    assert b[:logq.put_uint(b, 0, 0)] == b"0"
    assert b[:logq.put_uint(b, 0, 1073741823)] == b"1073741823"
    j = logq.put_bytes(b, 0, b"x=")
    assert b[:logq.put_hex4(b, j, b"\x78\x56\x34\x12", 0)] == b"x=12345678"


def test_sampler_levels_and_versioned_records() -> None:
    q = logq.LineQueue(64)
    s = Sampler(q, seed=7, n_machines=4, sample_every=5, tick_ms=10, now=0)
    s.plant.inject("P-101", "overheating", severity=5)
    seen = {}
    for t in range(0, 4000 * 10, 10):
        s.poll(t)
        while q.count:
            off = q.first()
            n = q.lens[q.head]
            text = bytes(q.buf[off:off + n]).decode()
            seen.setdefault(q.levels[q.head], text)
            q.pop()
        if 3 in seen:
            break
    assert seen[1].split()[1] in ("P-101", "M-201", "C-301", "CV-401")
    assert seen[2].split()[1] in ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE", "LOST"), seen[2]
    assert "interlock=" in seen[3], seen
    rec = array("i", [0] * 8)
    s.reading(0, rec)
    assert rec[7] == s.plant.tick and rec[0] == s.plant.meas[0]
    assert s.poll(10 ** 6) == 4  # far behind: catches up gradually, 4 ticks per call


def test_node_json_is_checked(tmp_path: Path) -> None:
    p = tmp_path / "node.json"
    p.write_text('{"tick_ms": 50, "sampel_every": 3}')
    with pytest.raises(ValueError, match="unknown key 'sampel_every'"):
        node.load_config(str(p))
    p.write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        node.load_config(str(p))
    assert node.load_config(str(tmp_path / "none.json")) == {}
    with pytest.raises(ValueError, match="not found"):
        node.make_drafter(PROF, {"model": str(tmp_path / "none.mbf")})
    assert node.make_drafter(PROF, {}) == (None, 0)  # the profile's default model is not here: logs only
    assert node.make_drafter(PROF, {"model": None}) == (None, 0)


def test_node_logs_reach_the_store_over_a_pty(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "g.db")
    link = gwkit.PtyLink(store)
    sess = link.sess
    nd = node.Node(link.uart, PROF, {"tick_ms": 20, "sample_every": 1, "report_ms": 200},
                   now=node.ticks_ms())
    t0 = time.monotonic()
    while (nd.logs_acked < 150 or time.monotonic() - t0 < 1.0) and time.monotonic() - t0 < 10:
        nd.step(node.ticks_ms())
        sess.poll()
    assert nd.logs_acked >= 150 and store.count_logs() >= nd.logs_acked
    texts = [r["text"] for r in store.logs("n")]
    assert any(t.startswith("NODE heap=") and "logs_acked=" in t for t in texts)
    plant = [t for t in texts if t.startswith("2026-")]
    assert plant[0].startswith("2026-11-30T06:00:0")  # the first ticks (some dropped while the link came up)
    assert plant == sorted(plant, key=lambda t: t[:20])  # in the plant's order
    # every line the sampler queued is stored, was dropped (queue full), still queued, or in flight
    in_flight = nd.q.queued - nd.q.dropped - nd.q.count - len(plant)
    assert 0 <= in_flight <= 8, in_flight
    store.close()
    link.close()
