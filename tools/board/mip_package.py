"""Write package.json, the mip manifest that lets `mpremote mip install` put the portable core on a board.

    python -m tools.board.mip_package          # rewrite package.json at the repository root
    python -m tools.board.mip_package --check  # exit 1 if package.json is out of date

`mpremote mip install /path/to/edgetwin/package.json` (a checkout) or
`mpremote mip install github:OWNER/edgetwin` (a published copy) copies shared/ and firmware/ as .py
sources into the board's /lib, the same layout `edgetwin deploy` gives (/lib/shared, /lib/firmware).
Sources, not .mpy: mip cannot know the board's architecture, so viper modules are compiled on the board
at import (that costs heap once; `edgetwin deploy` ships precompiled .mpy and is the better path).
Host-only backends (numpy, ulab stand-in) are left out as in tools/board/build.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.board import build, generated  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def version() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    raise SystemExit("pyproject.toml has no version line")


def manifest() -> dict:
    files = sorted(str(p.relative_to(ROOT)) for p in build.sources("micropython", ROOT))  # what a board gets
    return {"urls": [[f, f] for f in files], "deps": [], "version": version()}


def render() -> str:
    return json.dumps(manifest(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if package.json differs from what would be written")
    args = ap.parse_args(argv)
    return generated.write_or_check(ROOT / "package.json", render(), args.check, "python -m tools.board.mip_package",
                                    "%d files" % len(manifest()["urls"]))

if __name__ == "__main__":
    sys.exit(main())
