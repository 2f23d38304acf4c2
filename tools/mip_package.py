"""Write package.json, the mip manifest that lets `mpremote mip install` put the portable core on a board.

    python -m tools.mip_package          # rewrite package.json at the repository root
    python -m tools.mip_package --check  # exit 1 if package.json is out of date

`mpremote mip install /path/to/edgetwin/package.json` (a checkout) or
`mpremote mip install github:OWNER/edgetwin` (a published copy) copies shared/ and firmware/ as .py
sources into the board's /lib, the same layout `edgetwin deploy` gives (/lib/shared, /lib/firmware).
Sources, not .mpy: mip cannot know the board's architecture, so viper modules are compiled on the board
at import (that costs heap once; `edgetwin deploy` ships precompiled .mpy and is the better path).
Host-only backends (numpy, ulab stand-in) are left out as in tools/build.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("shared", "firmware")
# what tools/build.py leaves out of a MicroPython build; duplicated by name only, the test checks both agree
HOST_ONLY = ("shared/q4_numpy.py", "shared/q4_ulab.py")


def version() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    raise SystemExit("pyproject.toml has no version line")


def manifest() -> dict:
    files = sorted(str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).glob("*.py"))
    files = [f for f in files if f not in HOST_ONLY]
    return {"urls": [[f, f] for f in files], "deps": [], "version": version()}


def render() -> str:
    return json.dumps(manifest(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if package.json differs from what would be written")
    args = ap.parse_args(argv)
    path = ROOT / "package.json"
    text = render()
    if args.check:
        if not path.exists() or path.read_text() != text:
            print("package.json is out of date: run python -m tools.mip_package", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path} ({len(manifest()['urls'])} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
