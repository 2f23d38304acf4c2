"""Two link endpoints over a simulated UART with byte errors (CPython; deterministic seeds).

Per-byte error rates 1e-4 and 1e-3 in both directions, each error a bit flip, a dropped byte or an
inserted byte. Counted per message: delivered exactly once, duplicated, lost, accepted with wrong
contents. With retransmission every message arrives exactly once and nothing corrupt is ever
accepted; the framing alone (no retransmission) loses about one frame per error event and still
accepts nothing corrupt. The figures come from the same functions tools/bench/link.py prints.
"""

from __future__ import annotations

import pytest

from tools.bench import link as bench_link

RATES = [("1e-4", 100), ("1e-3", 1000)]


@pytest.mark.parametrize("sack", [True, False], ids=["sack", "go-back-n"])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name,ppm", RATES)
def test_link_delivers_every_message_exactly_once(name, ppm, seed, sack):
    r = bench_link.link_run(ppm, seed, msgs=400, sack=sack)
    assert r["done"], r
    assert r["accepted_corrupt"] == 0, r
    assert r["duplicated"] == 0 and r["lost"] == 0, r
    assert r["delivered_once"] == r["messages"] == 800, r
    if ppm >= 1000:
        assert r["error_events"] > 50 and r["retransmit_ratio"] > 0, r
        if sack:  # selective repeat resends about what was lost (go-back-N several times that)
            assert r["retransmit_ratio"] < 0.3, r


@pytest.mark.parametrize("sack", [True, False], ids=["sack", "go-back-n"])
def test_link_at_921600_baud_and_1e_3(sack):
    r = bench_link.link_run(1000, 3, msgs=400, baud=921600, sack=sack)
    assert r["done"] and r["delivered_once"] == 800 and r["accepted_corrupt"] == 0, r


@pytest.mark.parametrize("name,ppm", RATES)
def test_framing_alone_loses_about_one_frame_per_error_and_accepts_nothing_corrupt(name, ppm):
    r = bench_link.raw_run(ppm, 4, frames=3000)
    assert r["accepted_corrupt"] == 0, r
    assert r["error_events"] > 0 and r["lost"] > 0, r
    assert 0.5 <= r["frames_lost_per_error_event"] <= 1.5, r
    assert 0 < r["resync_bytes_max"] <= 96 + 24 + 3 + 2, r  # at most the rest of one frame (bodies <= 96 B)


def test_garbage_bursts_cost_at_most_the_frame_they_hit():
    r = bench_link.resync_run(5, bursts=200)
    assert r["frames_lost_per_burst"] <= 1.0, r
    assert r["burst_resync_bytes_max"] <= 200 + 24 + 3, r  # the rest of the largest frame (body <= 200 B)


def test_clean_goodput_is_near_the_line_rate():
    for baud in bench_link.BAUDS:
        g = bench_link.goodput_run(0, 1, baud, seconds=2)
        # 80-byte bodies travel in 107-byte frames; acks ride back on the other wire
        ceiling = baud / 10 * 80 / 107
        assert g["goodput_bytes_per_s"] >= 0.95 * ceiling, (baud, g, ceiling)
        assert g["accepted_corrupt"] == 0


def test_noisy_goodput_stays_useful():
    for baud in bench_link.BAUDS:
        ceiling = baud / 10 * 80 / 107
        # averaged over 3 noise seeds: one run's goodput swings +-15 % with where the errors land (a hit
        # HELLO or a burst of hit acks costs a timeout), so a single seed tested the draw, not the link
        runs = [bench_link.goodput_run(1000, seed, baud, seconds=2) for seed in (2, 3, 4)]
        assert all(g["accepted_corrupt"] == 0 for g in runs)
        mean = sum(g["goodput_bytes_per_s"] for g in runs) / len(runs)
        assert mean >= 0.7 * ceiling, (baud, runs)  # ~10 % of the frames are hit at 1e-3
        runs = [bench_link.goodput_run(1000, seed, baud, seconds=2, sack=False) for seed in (2, 3, 4)]
        mean = sum(g["goodput_bytes_per_s"] for g in runs) / len(runs)
        assert mean >= 0.4 * ceiling, (baud, runs)


def test_reboot_is_noticed_within_one_hello():
    r = bench_link.reboot_run(7, trials=6)
    assert r["reboot_detect_ms"] <= 15, r  # a 69-byte HELLO takes 6 ms at 115200 baud
    assert r["resume_ms"] <= 60, r
