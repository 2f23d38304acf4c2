"""Write the mip manifests that let `mpremote mip install` put a node's code on a board:
package.json (the drafting node: the whole core) and package-logs.json (the logs-only node).

    python -m tools.board.mip_package          # rewrite both at the repository root
    python -m tools.board.mip_package --check  # exit 1 if either is out of date

`mpremote mip install github:OWNER/edgetwin` (a published copy: mip reads its package.json) or
`mpremote mip install /path/to/edgetwin/package.json` (a checkout) installs the drafting node;
`github:OWNER/edgetwin/package-logs.json` or `/path/to/edgetwin/package-logs.json` the logs-only one.
They copy shared/ and firmware/ as .py sources into the board's /lib, the same layout `edgetwin deploy`
gives (/lib/shared, /lib/firmware), and the same two packages (tools/board/build.py package_sources;
host-only backends left out). Sources, not .mpy: mip cannot know the board's architecture, so viper
modules are compiled on the board at import (that costs heap once; `edgetwin deploy` ships precompiled
.mpy and is the better path).

The drafting package lists the logs-only package's files and then its own instead of naming
package-logs.json in "deps": mip resolves a dependency by index name, by absolute URL or as a path from
the current directory, never relative to the package.json that names it, so no "deps" entry would work
from a checkout and from github:OWNER alike. The test checks that it holds the logs-only package whole.
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


OUT = "package.json"
OUT_LOGS = "package-logs.json"


def manifest(package: str = "drafting") -> dict:
    """package.json's dict for "drafting" (the logs-only package's files, then its own) or "logs-only"."""
    both = build.package_sources("micropython", ROOT)
    files = [str(p.relative_to(ROOT)) for p in both["logs-only"]]
    if package == "drafting":
        files += [str(p.relative_to(ROOT)) for p in both["drafting"]]
    return {"urls": [[f, f] for f in files], "deps": [], "version": version()}


def render(package: str = "drafting") -> str:
    return json.dumps(manifest(package), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if package.json or package-logs.json differs from what would be written")
    args = ap.parse_args(argv)
    rc = 0
    for name, package in ((OUT_LOGS, "logs-only"), (OUT, "drafting")):
        rc = generated.write_or_check(ROOT / name, render(package), args.check, "python -m tools.board.mip_package",
                                      "%s node, %d files" % (package, len(manifest(package)["urls"]))) or rc
    return rc

if __name__ == "__main__":
    sys.exit(main())
