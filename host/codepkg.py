"""A node's code as one file for `edgetwin update --code`: a board build's lib/ in a POSIX ustar archive.

The build is a folder `edgetwin build BOARD --node` made (MANIFEST.json, board.json, lib/): its files under
lib/ (the .mpy of shared/ and firmware/, the native kernels) go into the archive after two entries:
CODE.json, what it is for ({"board", "flavour", "arch", "mpy", "files", "bytes"}), and CODE.sums, a line
per file in the archive's order ("<sha256 hex> <size> <path>", as sha256sum writes them, with the size).
The update's hash (UPDATE BEGIN) is the SHA-256 of those two entries' bytes: the node checks each file
against its line as the file arrives, so it never keeps the archive itself (firmware/ustar.py). The
archive is made with Python's tarfile, uncompressed, its entries in a fixed order with fixed times and
owners, so the same build always makes the same bytes and the same hash (an update sent again is
recognised by the node).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from host.errors import UserError


def _entry(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def pack(build: Path, board: str = "") -> tuple[bytes, str, dict]:
    """(the archive, the update's hash in hex, CODE.json) of the build folder; UserError
    (one line) for anything that is not a node build of `board` (when given: the node's board as its HELLO
    named it)."""
    build = Path(build)
    try:
        manifest = json.loads((build / "MANIFEST.json").read_text())
    except FileNotFoundError:
        raise UserError("--code %s is not a board build (no MANIFEST.json): make one with `edgetwin build BOARD "
                        "--node`" % build) from None
    except (OSError, ValueError) as e:
        raise UserError("--code %s: MANIFEST.json cannot be read: %s" % (build, e)) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise UserError("--code %s: MANIFEST.json is not a build's (no file list): rebuild" % build)
    if manifest.get("package") != "drafting":
        raise UserError("--code %s is the logs-only package: it has no update code, so a node running it could "
                        "take no later update; send the drafting build" % build)
    if board and manifest.get("board") != board:
        raise UserError("--code %s is built for board %s; the node is %s" % (build, manifest.get("board"), board))
    files = sorted(str(f.get("path", "")) for f in manifest["files"] if isinstance(f, dict))
    if not any(p.startswith("lib/firmware/node.") for p in files):
        raise UserError("--code %s holds no lib/firmware/node: not a node's build" % build)
    mpy = sorted({f.get("mpy_version") for f in manifest["files"] if isinstance(f, dict) and f.get("mpy_version")})
    meta = {"board": manifest.get("board"), "flavour": manifest.get("flavour"), "arch": manifest.get("arch"),
            "mpy": mpy[0] if len(mpy) == 1 else None, "files": len(files), "bytes": 0}
    buf = io.BytesIO()
    datas = []
    for p in files:
        if not p.startswith("lib/") or ".." in Path(p).parts:
            raise UserError("--code %s: MANIFEST.json names %s, outside lib/: rebuild" % (build, p))
        if not p.isprintable() or any(c.isspace() for c in p):  # a CODE.sums line is three words
            raise UserError("--code %s: MANIFEST.json names %r, a path with spaces: rename it" % (build, p))
        try:
            datas.append((p, (build / p).read_bytes()))
        except OSError as e:
            raise UserError("--code %s: %s cannot be read (%s): rebuild" % (build, p, e.strerror or e)) from None
    meta["bytes"] = sum(len(d) for _, d in datas)
    head = json.dumps(meta, sort_keys=True).encode()
    sums = "".join("%s %d %s\n" % (hashlib.sha256(d).hexdigest(), len(d), p) for p, d in datas).encode()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _entry(tar, "CODE.json", head)
        _entry(tar, "CODE.sums", sums)
        for p, data in datas:
            _entry(tar, p, data)
    return buf.getvalue(), hashlib.sha256(head + sums).hexdigest(), meta
