"""Write boards/manifest.py: a MicroPython freeze manifest that builds the portable core into a firmware.

    python -m tools.board.freeze_manifest          # rewrite boards/manifest.py
    python -m tools.board.freeze_manifest --check  # exit 1 if it is out of date

Frozen modules keep their bytecode and constants in flash; modules imported from the filesystem are
loaded into the heap. A drafting node's code does not fit beside its model in an RP2040's 192 KiB heap
(docs/NODE.md), so a real Pico runs a firmware with the core frozen:

    cd micropython/ports/rp2
    make BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest.py

The manifest keeps the port's own frozen modules (its boards/manifest.py) and adds shared/ and
firmware/ with the files tools/board/build.py gives a MicroPython board (host-only backends left out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.board import build, generated  # noqa: E402

ROOT = build.ROOT
OUT = ROOT / "boards" / "manifest.py"


def packages() -> dict[str, list[str]]:
    """{package: [file names relative to it]} that a MicroPython board gets."""
    out: dict[str, list[str]] = {}
    for path in build.sources("micropython"):
        rel = path.relative_to(ROOT)
        out.setdefault(rel.parts[0], []).append(str(Path(*rel.parts[1:])))
    return out


def render() -> str:
    lines = ['# Freeze manifest for MicroPython firmware with the edgetwin core in flash (written by',
             '# `python -m tools.board.freeze_manifest`; do not edit). Build from a MicroPython checkout, e.g.',
             '#   make -C ports/rp2 BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest.py',
             'include("$(PORT_DIR)/boards/manifest.py")', '']
    for pkg, files in packages().items():
        lines.append('package("%s", files=(' % pkg)
        lines += ['    "%s",' % f for f in files]
        lines.append('), base_path="..")')
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if boards/manifest.py is out of date")
    args = ap.parse_args(argv)
    return generated.write_or_check(OUT, render(), args.check, "python -m tools.board.freeze_manifest",
                                    "%d files" % sum(len(f) for f in packages().values()))

if __name__ == "__main__":
    sys.exit(main())
