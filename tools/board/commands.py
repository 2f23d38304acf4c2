"""`edgetwin build`, `vboard` and `deploy`: the board commands, registered with host/cli.py through the
entry-point group "edgetwin.commands" (pyproject.toml). User mistakes are host.errors.UserError (one line)."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path

from host import board_profile, linkkeys
from host.errors import UserError
from host.usage import Command


def node_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", action="store_true",
                   help="make the board a node: add the draft model and a main.py that starts firmware/node.py")
    p.add_argument("--model", type=Path, help="draft .mbf for --node (default models/draft/draft.mbf)")
    p.add_argument("--plant", type=Path, metavar="FILE",
                   help="with --node: the plant description the node logs (docs/PLANT.md), checked against the "
                        "board and compiled into /plant.json; without it the node runs the built-in simulator")


def print_node(node: dict) -> None:
    plan, cfg = node["plan"], node["config"]
    print(f"node: model {node['model']}, plan {plan['mode']} ({plan['load_peak']} of {plan['budget']} B budget, "
          f"{8 * plan['word']}-bit objects); node.json: stream {json.dumps(cfg['stream'])}, out_rows {cfg['out_rows']}, tokenizer "
          f"{str(cfg['tokenizer']).lower()}, k {cfg['k']}, stop_ids {cfg.get('stop_ids', [])}")


def print_plant(manifest: dict) -> None:
    p = manifest.get("plant")
    if p:
        print(f"plant: {p['name']} ({p['machines']} machines, {p['signals']} signals), /plant.json {p['bytes']} B, "
              f"hash {p['hash']}")
    elif "node" in manifest or "logs_node" in manifest:
        print("plant: none given (--plant FILE): the node runs the built-in simulator")


def _build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, help=board_profile.HELP)
    p.add_argument("--arch", help="override the profile's mpy-cross arch (x64 for a virtual board)")
    node_arguments(p)


def run_build(args: argparse.Namespace) -> int:
    from tools.board import build

    prof = board_profile.resolve(args.board)
    try:
        out = build.build(prof, arch=args.arch, node=args.node, model=args.model)
    except build.BuildError as e:
        raise UserError(str(e)) from e
    manifest = json.loads((out / "MANIFEST.json").read_text())
    native = [f["path"] for f in manifest["files"] if f.get("native")]
    print(f"built {len(manifest['files'])} files, {manifest['total_bytes']} bytes, arch {manifest['arch']} -> {out}")
    if native:
        print(f"native code ({manifest['arch']}): {', '.join(native)}")
    if "node" in manifest:
        print_node(manifest["node"])
    return 0


def _vboard_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, help=board_profile.HELP)
    p.add_argument("--root", help="directory that is the board's filesystem (default vboards/BOARD)")
    p.add_argument("--heap", type=int, help="heap bytes (default: what a drafting node of the profile needs "
                                            "on the 64-bit unix port, printed with its factor)")
    p.add_argument("--emulate", action="store_true", help="run the real MicroPython rp2 firmware (make firmware) on "
                   "an emulated RP2040 (rp2040js) instead of the unix port (rp2040_pico)")
    p.add_argument("--image", help="with --emulate: the firmware .uf2 (default build/firmware/rp2040_pico/firmware.uf2)")
    p.add_argument("--flash", help="with --emulate: the board's flash file (default flash.bin beside the image)")
    p.add_argument("--rig", metavar="PLANT.json",
                   help="wire the plant simulator to the board as this plant description says (tools/board/rig.py): "
                        "its Modbus devices on the RS-485 bus (a pty), and with --emulate its ADC loops, contacts "
                        "and I2C sensors")


def run_vboard(args: argparse.Namespace) -> int:
    from tools.board import vboard

    if args.emulate:  # the real rp2 firmware on an emulated RP2040 (tools/board/emuboard.py, docs/BOARDS.md)
        from tools.board import emuboard

        board_profile.resolve(args.board)  # a bad profile is refused the same way
        extra = (["--image", args.image] if args.image else []) + (["--flash", args.flash] if args.flash else [])
        extra += ["--rig", args.rig] if args.rig else []
        return emuboard.main(["--board", args.board] + extra + (["--root", args.root] if args.root else []))
    prof = board_profile.resolve(args.board)
    try:
        return vboard.run(prof, args.root, args.heap, args.rig)
    except vboard.VBoardError as e:
        raise UserError(str(e)) from None


# Runs on the board: sys.platform, and 1 when firmware.node is frozen into the firmware (its __file__ is
# then a name in the firmware, not a file on the filesystem), else 0.
_FACTS_CODE = """import sys, os
_fz = 0
try:
    import firmware.node as _n
    try:
        os.stat(_n.__file__)
    except OSError:
        _fz = 1
except Exception:
    pass
print(sys.implementation.name, sys.platform, _fz)
"""


def board_identity(port: str, tool: str) -> tuple[str, str, bool]:
    """(sys.implementation.name; sys.platform: 'rp2', 'esp32', 'linux' for a virtual board, 'RP2040' on
    CircuitPython; whether its firmware carries the node's code frozen, as `make firmware` and `make
    firmware-cp` build it) of the board at port."""
    from tools.board import deploy

    out = deploy.run_on_board(port, _FACTS_CODE, tool=tool, timeout=30).split()
    if len(out) < 3 or out[-1] not in ("0", "1"):
        raise deploy.DeployError("the board at %s did not answer the platform probe (it printed %r)" % (port, out))
    return out[-3], out[-2], out[-1] == "1"


def _deploy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, help=board_profile.HELP)
    p.add_argument("--port", required=True, help="serial port of the board's REPL (/dev/ttyACM0, or a vboard pty)")
    p.add_argument("--tool", choices=("mpremote", "ampy"), default=None,
                   help="copy tool (default: mpremote; ampy on CircuitPython, where mpremote's fs commands need "
                        "os.ilistdir, which CircuitPython lacks)")
    p.add_argument("--arch", help="override the build arch (default: the profile's; x64 when the port is a virtual board)")
    node_arguments(p)
    p.add_argument("--no-reset", action="store_true", help="with --node: do not reset the board after the copy")
    p.add_argument("--keys", default=None, metavar="FILE",
                   help="with --node: " + linkkeys.HELP + "; a node deployed again gets a new key (rotation)")
    p.add_argument("--insecure", action="store_true",
                   help="with --node: provision no key (an earlier one is removed): the node's frames go unsigned, "
                        "which only a gateway started with --insecure takes")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="longest wait for one copy command (default 60 s + 1 s per 2 KB; an emulated board, "
                        "6-10x slower than a real one, needs more)")


def run_deploy(args: argparse.Namespace) -> int:
    from tools.board import build, deploy

    board = board_profile.resolve(args.board)
    if args.timeout is not None and not args.timeout > 0:
        raise UserError("--timeout must be a positive number of seconds, got %g" % args.timeout)
    cp = board["flavour"] == "circuitpython"
    if args.tool is None:
        args.tool = "ampy" if cp else "mpremote"
    elif cp and args.tool == "mpremote":
        raise UserError("--tool mpremote cannot copy to CircuitPython (its fs commands need os.ilistdir, which "
                        "CircuitPython lacks): leave --tool out, or use --tool ampy")
    try:
        arch = args.arch
        impl, platform, frozen = board_identity(args.port, args.tool)
        if impl != board["flavour"]:
            raise UserError("the board at %s runs %s, profile %s is for %s: pick the profile of its firmware"
                            % (args.port, impl, board["name"], board["flavour"]))
        if arch is None and platform == "linux":
            # A virtual board (the unix port) cannot run armv6m/xtensawin native code: give it x64.
            arch = "x64"
            print(f"{args.port} is a virtual board (unix port): deploying the x64 build", flush=True)
        if frozen:
            print(f"{args.port}: the firmware carries the node's code (frozen, `make firmware{'-cp' if cp else ''}`): "
                  f"copying the profile, node.json, {'boot.py, code.py' if cp else 'main.py'} and the model only",
                  flush=True)
        if args.plant is not None and not args.node:
            raise UserError("--plant goes with --node: the description is what the node logs")
        if (args.keys is not None or args.insecure) and not args.node:
            raise UserError("--keys and --insecure go with --node: a key belongs to a node")
        keys = key = None
        if args.node and not args.insecure:  # the key file is checked before anything is copied
            keys = linkkeys.KeyFile(args.keys if args.keys is not None else linkkeys.default_path())
            key = secrets.token_bytes(linkkeys.KEY_BYTES)
        out = build.build(board, arch=arch, node=args.node, model=args.model, plant=args.plant, frozen=frozen)
        manifest = json.loads((out / "MANIFEST.json").read_text())
        if "node" in manifest:
            print_node(manifest["node"])
        print_plant(manifest)
        report = deploy.deploy(out, args.port, tool=args.tool, progress=_progress, frozen=frozen, timeout=args.timeout,
                               key=key, unkeyed=args.node and args.insecure)
        if keys is not None and key is not None:
            uid = deploy.board_uid(args.port, args.tool)
            name = manifest.get("plant", {}).get("name") or "node-" + uid
            rotated = bool(keys.keys_for(uid))
            keys.provision(uid, name, key=key)
            _progress("link key for node uid %s: on the board (/link.key) and in %s%s" % (
                uid, keys.path, "; its previous key is taken until the node shows the new one" if rotated else ""))
        elif args.node:
            _progress("no link key (--insecure): the node's frames go unsigned")
        reset = args.node and not args.no_reset
        if reset:
            _progress("resetting the board: it boots into the node")
            deploy.reset_board(args.port, args.tool, circuitpython=cp)
    except (build.BuildError, deploy.DeployError) as e:
        raise UserError(str(e)) from e
    print(json.dumps(report, indent=2))
    print(f"deployed {len(report['files'])} files, {report['total_bytes']} bytes to {args.port} with {args.tool} "
          f"in {report['seconds']:.1f} s; board heap free {report['board_mem_free']} B before reset"
          + ("; the board was reset: the node runs" if reset else
             "; reset the board to start the node" if args.node else ""), file=sys.stderr)
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


BUILD = Command("compile shared/ and firmware/ with mpy-cross for a board into build/BOARD/", _build_arguments,
                run_build)
VBOARD = Command("run a virtual board: MicroPython unix port on a pty, plus a UART pty", _vboard_arguments,
                 run_vboard)
DEPLOY = Command("build for a board and copy the build onto it (mpremote, or ampy)", _deploy_arguments, run_deploy)
