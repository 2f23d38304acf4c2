"""The spill ring's flash wear on a board's filesystem, printed as one JSON object.

    edgetwin bench spill [--lines N] [--profile NAME]

Each run is the MicroPython unix port writing the node's ring (firmware/spill.py) on MicroPython's own littlefs
over a RAM flash that counts block erases and programmed bytes (tools/bench/spill_lfs.py), with the profile's
filesystem and ring sizes. Runs: the ring as the node keeps it (a file per 4 KB block) with each line flushed
on its own (a spill during a link cut) and with the default plant's four lines of a tick flushed together (write
-ahead, node.json write_ahead); the baseline is the earlier layout (one file for the whole ring, records written
in place), at the profile's ring size and, where that finds no room, at 64 KB beside the folder ring of the same
size. flash_years: what 100,000 erase cycles per block last at the default line rate (0.8036 lines/s, docs/NODE.md)
if littlefs spreads the erases over every block of the filesystem (it levels wear dynamically; a nearly full
filesystem spreads them over fewer)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from host.usage import Parser  # noqa: E402

LINES_PER_S = 0.8036  # the default plant's rate (docs/NODE.md "The budget")
ENDURANCE = 100_000  # erase cycles a NOR flash block is specified for (RP2040 boards' W25Q16: 100k)
SMALL = 65536


def run(exe: str, fs: int, ring: int, lines: int, per_sync: int, layout: str) -> dict:
    p = subprocess.run([exe, "-X", "heapsize=%d" % (fs + (4 << 20)), str(ROOT / "tools" / "bench" / "spill_lfs.py"),
                        str(fs), str(ring), str(lines), str(per_sync), layout],
                       capture_output=True, text=True, timeout=900, env={"MICROPYPATH": str(ROOT)})
    if p.returncode != 0 or not p.stdout.strip():
        raise SystemExit("bench spill: the MicroPython run failed: %s" % (p.stderr.strip() or p.stdout.strip())[-400:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def years(r: dict, fs: int) -> float | None:
    if not r.get("ok") or not r["erases_per_line"]:
        return None
    per_day = r["erases_per_line"] * LINES_PER_S * 86400
    return round(ENDURANCE * (fs // 4096) / per_day / 365, 1)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench spill", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=2000, help="lines written per run (default 2000)")
    ap.add_argument("--profile", default="rp2040_pico", help="board profile whose fs_bytes and spill_bytes are used")
    ap.add_argument("--json", action="store_true", help="(the output is always one JSON object)")
    args = ap.parse_args(argv)
    if args.lines < 100:
        ap.error("--lines must be >= 100")
    from host import board_profile
    from host.errors import UserError

    try:
        prof = board_profile.resolve(args.profile)
        exe = board_profile.micropython_exe()
    except (board_profile.MicroPythonMissing, UserError) as e:
        print("bench spill: %s" % e, file=sys.stderr)
        return 2
    fs, ring = int(prof["fs_bytes"]), int(prof.get("spill_bytes") or SMALL)
    runs = {"folder_flush_each_line": run(exe, fs, ring, args.lines, 1, "folder"),
            "folder_write_ahead_4_per_flush": run(exe, fs, ring, args.lines, 4, "folder"),
            "file_flush_each_line": run(exe, fs, ring, args.lines, 1, "file"),
            "folder_64k_flush_each_line": run(exe, fs, SMALL, args.lines, 1, "folder"),
            "file_64k_flush_each_line": run(exe, fs, SMALL, args.lines, 1, "file")}
    small_new, small_old = runs["folder_64k_flush_each_line"], runs["file_64k_flush_each_line"]
    out = {"profile": args.profile, "fs_bytes": fs, "ring_bytes": ring, "lines": args.lines, "runs": runs,
           "erases_ratio_file_over_folder_64k": round(small_old["erases_per_line"] / small_new["erases_per_line"], 1)
           if small_old.get("ok") and small_new.get("ok") else None,
           "flash_years_write_ahead": years(runs["folder_write_ahead_4_per_flush"], fs),
           "flash_years_flush_each_line": years(runs["folder_flush_each_line"], fs),
           "flash_years_file_64k_flush_each_line": years(small_old, fs),
           "assumes": {"lines_per_s": LINES_PER_S, "erase_cycles": ENDURANCE, "wear_spread_over_blocks": fs // 4096}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
