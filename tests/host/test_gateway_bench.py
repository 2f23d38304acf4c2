"""tools/bench/link.py over a real pty pair (paced at the baud rate, byte errors both ways): exactly once,
nothing corrupt accepted, and a goodput that is a real fraction of the line (wall-clock, CPython)."""

from __future__ import annotations

import pytest

from tools.bench import link as bench_link


@pytest.mark.parametrize("ppm,baud", [(0, 115200), (1000, 921600)])
def test_pty_link_delivers_exactly_once_at_line_rate(ppm: int, baud: int) -> None:
    r = bench_link.pty_run(ppm, 2, baud, 1.0)
    assert r["sent"] > 50, r
    assert r["delivered_once"] == r["sent"] and r["duplicated"] == 0 and r["lost"] == 0, r
    assert r["accepted_corrupt"] == 0, r
    ceiling = baud / 10 * 80 / 107  # 80-byte bodies in 107-byte frames
    assert r["goodput_bytes_per_s"] <= ceiling * 1.05, r  # the pacing holds: never faster than the line
    assert r["goodput_bytes_per_s"] >= ceiling * (0.5 if baud == 115200 else 0.15), r
    if ppm:
        assert r["error_events"] > 10 and r["retransmit_ratio"] > 0, r
