"""The previous release as a test fixture: what its node and its gateway run, from git, in one .tar.xz.

tests/host/test_version_compat.py runs a gateway of this tree against that release's node and the reverse;
a clean clone has no git history, so the release travels as a file (tests/host/fixtures/release-1.3.tar.xz).
It holds, as `git archive` gives them (the commit id is in the archive's pax header):

- the node: the logs-only package the release shipped (its package-logs.json, the mip manifest of
  shared/ and firmware/ sources) and its board profile boards/rp2040_pico.json (a board's /board.json).
  Sources, not its .mpy build: MicroPython compiles them on the board, so the fixture outlives a change of
  the .mpy format;
- the gateway: host/cli.py and what `edgetwin gateway --port ... --db ... --status ... --keys ... --insecure`
  imports (logs only: no --model, no --ui, no MQTT), its shared/ modules, and the tools/*/commands.py its
  pyproject.toml registers, so its CLI loads nothing from the tree it runs beside.

    python -m tools.board.release_fixture [--commit 9cfe7d3] [--out tests/host/fixtures/release-1.3.tar.xz]

Run it again only to make the fixture of another release (the file lists below are that release's).
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "9cfe7d3"  # protocol 1.3: link keys provisioned by deploy, model updates over the link, no code updates
OUT = ROOT / "tests" / "host" / "fixtures" / "release-1.3.tar.xz"
NODE_MANIFEST = "package-logs.json"  # the release's logs-only package: [target, source] pairs under "urls"
BOARD = "boards/rp2040_pico.json"
# What the release's `gateway` imports for a logs-only run (traced with sys.modules on that commit),
# besides the shared/ modules its node package has anyway.
GATEWAY = (
    "pyproject.toml",  # its CLI's development commands (entry points), so they load from here
    "host/__init__.py", "host/board_profile.py", "host/cli.py", "host/cliargs.py", "host/errors.py",
    "host/usage.py", "host/gateway.py", "host/gateway_config.py", "host/linkkeys.py", "host/sdnotify.py",
    "host/session.py", "host/store.py", "host/plantdesc.py", "host/plantlines.py", "host/mqtt_topics.py",
    "host/opcua_args.py", "host/ui/__init__.py", "host/ui/serve.py",
    # host/cli.py imports every product command to build its parser
    "host/cmd_ack.py", "host/cmd_ask.py", "host/cmd_doctor.py", "host/cmd_fleet.py", "host/cmd_gateway.py",
    "host/cmd_import.py", "host/cmd_plan.py", "host/cmd_plant.py", "host/cmd_store.py", "host/cmd_ui.py",
    "host/cmd_update.py",
    "shared/crc32_binascii.py", "shared/episode.py", "shared/frame_host.py", "shared/sha256.py",
    "shared/plant_sim.json",  # the built-in simulator's plant description (no --plant: what the node logs)
    "tools/__init__.py", "tools/bench/__init__.py", "tools/bench/commands.py", "tools/board/__init__.py",
    "tools/board/commands.py", "tools/demo/__init__.py", "tools/demo/commands.py", "tools/formats/__init__.py",
    "tools/formats/commands.py",
)
MAX_BYTES = 1_500_000


class FixtureError(Exception):
    """One line for the user: why the fixture could not be made."""


def _git(*args: str, binary: bool = False):
    try:
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FixtureError("git %s: %s" % (args[0], e)) from None
    if r.returncode:
        said = r.stderr.decode(errors="replace").strip().splitlines()
        raise FixtureError("git %s: %s" % (" ".join(args[:2]), said[-1] if said else "exit %d" % r.returncode))
    return r.stdout if binary else r.stdout.decode()


def node_files(commit: str) -> list[str]:
    """The release's logs-only node package (its own manifest says which sources; the test reads it too),
    and its board profile."""
    try:
        urls = json.loads(_git("show", "%s:%s" % (commit, NODE_MANIFEST)))["urls"]
        files = [src for _, src in urls]
    except (ValueError, KeyError, TypeError) as e:
        raise FixtureError("%s of %s is not a mip manifest: %s" % (NODE_MANIFEST, commit, e)) from None
    return files + [NODE_MANIFEST, BOARD]


def make(commit: str = COMMIT, out: Path = OUT) -> dict:
    """Write the fixture; returns {"commit", "files", "bytes"}."""
    full = _git("rev-parse", "--verify", commit + "^{commit}").strip()
    paths = sorted(set(node_files(full)) | set(GATEWAY))
    tar = _git("archive", "--format=tar", full, "--", *paths, binary=True)
    data = lzma.compress(tar, preset=9 | lzma.PRESET_EXTREME)
    if len(data) > MAX_BYTES:
        raise FixtureError("the fixture would be %d bytes (over %d): trim the file lists" % (len(data), MAX_BYTES))
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:  # what git put in: every path asked for
        names = set(t.getnames())
    missing = [p for p in paths if p not in names]
    if missing:
        raise FixtureError("%s has no %s" % (commit, ", ".join(missing)))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".new")
    tmp.write_bytes(data)
    tmp.replace(out)
    return {"commit": full, "files": len(paths), "bytes": len(data)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.board.release_fixture", description=__doc__.split("\n")[0])
    p.add_argument("--commit", default=COMMIT, help="the release's commit (default %s)" % COMMIT)
    p.add_argument("--out", type=Path, default=OUT, help="the .tar.xz to write (default %s)" % OUT.relative_to(ROOT))
    args = p.parse_args(argv)
    try:
        r = make(args.commit, args.out)
    except (FixtureError, OSError) as e:
        print("release_fixture: %s" % e, file=sys.stderr)
        return 2
    print("release_fixture: %s: %d files of %s, %d bytes" % (args.out, r["files"], r["commit"][:12], r["bytes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
