"""Write the freeze manifests: boards/manifest_logs.py (a logs-only node) and boards/manifest.py (a
drafting node: it includes manifest_logs.py and adds the model runtime), MicroPython manifests that
build the portable core into a firmware.

    python -m tools.board.freeze_manifest          # rewrite both
    python -m tools.board.freeze_manifest --check  # exit 1 if either is out of date

Frozen modules keep their bytecode and constants in flash; modules imported from the filesystem are
loaded into the heap. A drafting node's code does not fit beside its model in an RP2040's 236 KiB heap
(docs/NODE.md), so a real Pico runs a firmware with the core frozen:

    cd micropython/ports/rp2
    make BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest.py       # drafting node
    make BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/manifest_logs.py  # logs-only node

The logs-only manifest keeps the port's own frozen modules (its boards/manifest.py) and adds the
logs-only package; the drafting one includes it (micropython-lib's way: one manifest per package, a
package including the one it needs) and adds the files only a drafting node imports. The two
packages are tools/board/build.py's (package_sources: host-only backends left out).
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
OUT_LOGS = ROOT / "boards" / "manifest_logs.py"
_HEAD = ("# Freeze manifest for MicroPython firmware with the edgetwin %s in flash (written by\n"
         "# `python -m tools.board.freeze_manifest`; do not edit). Build from a MicroPython checkout, e.g.\n"
         "#   make -C ports/rp2 BOARD=RPI_PICO FROZEN_MANIFEST=/path/to/edgetwin/boards/%s\n")


def packages(package: str = "drafting") -> dict[str, list[str]]:
    """{python package: [file names relative to it]} that `package` ("logs-only", or "drafting": what
    it adds to the logs-only one) freezes for a MicroPython board."""
    out: dict[str, list[str]] = {}
    for path in build.package_sources("micropython")[package]:
        rel = path.relative_to(ROOT)
        out.setdefault(rel.parts[0], []).append(str(Path(*rel.parts[1:])))
    return out


def _render(package: str, head: str, first: str) -> str:
    lines = [head, first, ""]
    for pkg, files in packages(package).items():
        lines.append('package("%s", files=(' % pkg)
        lines += ['    "%s",' % f for f in files]
        lines.append('), base_path="..")')
    return "\n".join(lines) + "\n"


def render_logs() -> str:
    """boards/manifest_logs.py: the port's frozen modules and the logs-only node."""
    return _render("logs-only", _HEAD % ("logs-only node", OUT_LOGS.name), 'include("$(PORT_DIR)/boards/manifest.py")')


def render() -> str:
    """boards/manifest.py: the drafting node, i.e. manifest_logs.py and the model runtime."""
    return _render("drafting", _HEAD % ("drafting node", OUT.name) + "# The logs-only node (and the port's own modules):",
                   'include("%s")' % OUT_LOGS.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a manifest in boards/ is out of date")
    args = ap.parse_args(argv)
    cmd = "python -m tools.board.freeze_manifest"
    rc = 0
    for out, text, package in ((OUT_LOGS, render_logs(), "logs-only"), (OUT, render(), "drafting")):
        n = sum(len(f) for f in packages(package).values())
        what = "%d files" % n if package == "logs-only" else "%s and %d files" % (OUT_LOGS.name, n)
        rc = generated.write_or_check(out, text, args.check, cmd, what) or rc
    return rc

if __name__ == "__main__":
    sys.exit(main())
