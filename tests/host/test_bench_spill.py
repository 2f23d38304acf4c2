"""`edgetwin bench spill`: the spill ring's flash wear on MicroPython's own littlefs (tools/bench/spill.py). The
ring as the node keeps it (a file per block) costs about one block erase per flush wherever it writes; the
earlier layout (one file, records written in place) rewrote the rest of the file at every flush, and at the
Pico's ring size finds no room at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "host.cli", "bench", "spill", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_a_file_per_block_costs_one_erase_a_flush_and_the_one_file_ring_far_more() -> None:
    p = _bench("--lines", "300")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    runs = out["runs"]
    assert out["fs_bytes"] == 1048576 and out["ring_bytes"] == 655360  # rp2040_pico's
    each, ahead = runs["folder_flush_each_line"], runs["folder_write_ahead_4_per_flush"]
    assert each["ok"] and 0.5 <= each["erases_per_line"] <= 1.5, each
    assert ahead["ok"] and ahead["erases_per_line"] <= 0.4, ahead  # four lines a flush: about one erase for four
    assert not runs["file_flush_each_line"]["ok"] and "28" in runs["file_flush_each_line"]["error"]  # ENOSPC
    assert out["erases_ratio_file_over_folder_64k"] >= 5, out
    assert out["flash_years_write_ahead"] > 3 * out["flash_years_flush_each_line"] > 0


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    p = _bench("--lines", "5")
    assert p.returncode == 2 and "--lines" in p.stderr and "Traceback" not in p.stderr
    p = _bench("--profile", "no_such_board")
    assert p.returncode == 2 and "unknown board" in p.stderr and len(p.stderr.strip().splitlines()) == 1
