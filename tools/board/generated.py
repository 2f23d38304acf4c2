"""Files the repository keeps that a tool writes (package.json, package-logs.json, boards/manifest.py,
boards/manifest_logs.py): write or check one."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(path: Path, text: str, check: bool, command: str, what: str) -> int:
    """check: exit status 1 (and say which command rewrites it) if path does not hold text; else write it.
    `what` is printed after the path when written."""
    if check:
        if not path.exists() or path.read_text() != text:
            print("%s is out of date: run %s" % (path.name, command), file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print("wrote %s (%s)" % (path, what))
    return 0
