"""The `edgetwin` command: build and deploy boards, run the gateway and the demo, ask questions, benchmarks.

User mistakes exit 2 with one line."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


from host.errors import UserError
from host.usage import Parser

# `edgetwin bench NAME ...` runs tools/bench/NAME.py, each printing one JSON object.
BENCHES = tuple(sorted(p.stem for p in (ROOT / "tools" / "bench").glob("*.py") if p.stem not in ("__init__", "diag_fidelity")))

# Subcommands that live in their own module host/cmd_NAME.py, each with HELP (one line),
# add_arguments(parser) and run(args) -> exit code (raising host.errors.UserError for user mistakes).
PLUGINS = ("demo", "gateway", "ask", "plan", "doctor")
BOARD_HELP = "board profile: a name (see boards/) or a path to a profile JSON"


def known_boards() -> list[str]:
    from host import board_profile

    return board_profile.known_boards()


def _board(spec: str) -> dict:
    """The validated profile --board names (a name or a path): one-line UserError otherwise."""
    from host import board_profile

    return board_profile.resolve(spec)


def cmd_build(args: argparse.Namespace) -> int:
    from tools.board import build

    prof = _board(args.board)
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
        _print_node(manifest["node"])
    return 0


def _print_node(node: dict) -> None:
    plan, cfg = node["plan"], node["config"]
    print(f"node: model {node['model']}, plan {plan['mode']} ({plan['load_peak']} of {plan['budget']} B budget, "
          f"{8 * plan['word']}-bit objects); node.json: stream {json.dumps(cfg['stream'])}, out_rows {cfg['out_rows']}, tokenizer "
          f"{str(cfg['tokenizer']).lower()}, k {cfg['k']}, stop_ids {cfg.get('stop_ids', [])}")


def cmd_vboard(args: argparse.Namespace) -> int:
    from tools.board import vboard

    if args.emulate:  # the real rp2 firmware on an emulated RP2040 (tools/board/emuboard.py, docs/BOARDS.md)
        from tools.board import emuboard

        _board(args.board)  # a bad profile is refused the same way
        extra = (["--image", args.image] if args.image else []) + (["--flash", args.flash] if args.flash else [])
        return emuboard.main(["--board", args.board] + extra + (["--root", args.root] if args.root else []))
    prof = _board(args.board)
    try:
        return vboard.run(prof, args.root, args.heap)
    except vboard.VBoardError as e:
        raise UserError(str(e)) from None


def board_platform(port: str, tool: str) -> str:
    """sys.platform of the board at port ('rp2', 'esp32', 'linux' for a virtual board)."""
    from tools.board import deploy

    return deploy.run_on_board(port, "import sys; print(sys.platform)", tool=tool, timeout=15).strip()


def cmd_deploy(args: argparse.Namespace) -> int:
    from tools.board import build, deploy

    board = _board(args.board)
    try:
        arch = args.arch
        if arch is None and board_platform(args.port, args.tool) == "linux":
            # A virtual board (the unix port) cannot run armv6m/xtensawin native code: give it x64.
            arch = "x64"
            print(f"{args.port} is a virtual board (unix port): deploying the x64 build", flush=True)
        out = build.build(board, arch=arch, node=args.node, model=args.model)
        manifest = json.loads((out / "MANIFEST.json").read_text())
        if "node" in manifest:
            _print_node(manifest["node"])
        report = deploy.deploy(out, args.port, tool=args.tool, progress=_progress)
        reset = args.node and not args.no_reset
        if reset:
            _progress("resetting the board: it boots into the node")
            deploy.reset_board(args.port, args.tool)
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


def cmd_convert(args: argparse.Namespace) -> int:  # reached only through main()'s early dispatch
    raise UserError("usage: edgetwin convert SRC DST [options]; see edgetwin convert --help")


def cmd_selftest(args: argparse.Namespace) -> int:
    from tools.board import build, deploy, vboard
    from tools.demo import selftest_demo

    try:
        return selftest_demo.main(board=_board(args.board), as_json=args.json)
    except (build.BuildError, deploy.DeployError, vboard.VBoardError) as e:
        raise UserError(str(e)) from e


def _node_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", action="store_true",
                   help="make the board a node: add the draft model and a main.py that starts firmware/node.py")
    p.add_argument("--model", type=Path, help="draft .mbf for --node (default models/draft/draft.mbf)")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="edgetwin", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="compile shared/ and firmware/ with mpy-cross for a board into build/BOARD/")
    b.add_argument("--board", required=True, help=BOARD_HELP)
    b.add_argument("--arch", help="override the profile's mpy-cross arch (x64 for a virtual board)")
    _node_args(b)
    b.set_defaults(func=cmd_build)

    v = sub.add_parser("vboard", help="run a virtual board: MicroPython unix port on a pty, plus a UART pty")
    v.add_argument("--board", required=True, help=BOARD_HELP)
    v.add_argument("--root", help="directory that is the board's filesystem (default vboards/BOARD)")
    v.add_argument("--heap", type=int, help="heap bytes (default: what a drafting node of the profile needs "
                                            "on the 64-bit unix port, printed with its factor)")
    v.add_argument("--emulate", action="store_true", help="run the real MicroPython rp2 firmware (make firmware) on "
                   "an emulated RP2040 (rp2040js) instead of the unix port (rp2040_pico)")
    v.add_argument("--image", help="with --emulate: the firmware .uf2 (default build/firmware/rp2040_pico/firmware.uf2)")
    v.add_argument("--flash", help="with --emulate: the board's flash file (default flash.bin beside the image)")
    v.set_defaults(func=cmd_vboard)

    d = sub.add_parser("deploy", help="build for a board and copy the build onto it (mpremote, or ampy)")
    d.add_argument("--board", required=True, help=BOARD_HELP)
    d.add_argument("--port", required=True, help="serial port of the board's REPL (/dev/ttyACM0, or a vboard pty)")
    d.add_argument("--tool", choices=("mpremote", "ampy"), default="mpremote")
    d.add_argument("--arch", help="override the build arch (default: the profile's; x64 when the port is a virtual board)")
    _node_args(d)
    d.add_argument("--no-reset", action="store_true", help="with --node: do not reset the board after the copy")
    d.set_defaults(func=cmd_deploy)

    c = sub.add_parser("convert", add_help=False,
                       help="convert a GGUF, llama2.c .bin or Hugging Face safetensors model to MBF (see convert --help)")
    c.set_defaults(func=cmd_convert)

    bn = sub.add_parser("bench", help="run a benchmark that prints one JSON object: " + ", ".join(BENCHES))
    bn.add_argument("name", choices=BENCHES)
    bn.set_defaults(func=lambda a: 0)

    import importlib

    for name in PLUGINS:
        if not (ROOT / "host" / f"cmd_{name}.py").exists():
            continue
        mod = importlib.import_module(f"host.cmd_{name}")
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)

    m = sub.add_parser("selftest", help="start a virtual board, deploy the core with mpremote and run its self-test")
    m.add_argument("--board", default="rp2040_pico", help=BOARD_HELP)
    m.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    m.set_defaults(func=cmd_selftest)
    return p


class _heartbeat:
    """While a long command runs, a line on stderr every `every` s saying it still runs (benches can take
    minutes before their one JSON object; their own progress lines, where they have them, come between)."""

    def __init__(self, what: str, every: float = 15.0, quiet: bool = False) -> None:
        import threading

        self.what, self.every, self.quiet = what, every, quiet
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import time

        t0 = time.monotonic()
        while not self.done.wait(self.every):
            print("edgetwin %s: still running (%.0f s)" % (self.what, time.monotonic() - t0), file=sys.stderr,
                  flush=True)

    def __enter__(self) -> "_heartbeat":
        if not self.quiet:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()


# Built once per process: argparse takes ~10 ms for all the subcommands (parse_args keeps no state).
parser = functools.lru_cache(maxsize=1)(parser)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"] and len(argv) > 1 and argv[1] in BENCHES:
        import importlib

        with _heartbeat("bench " + argv[1], quiet="-h" in argv or "--help" in argv):
            try:
                return importlib.import_module("tools.bench." + argv[1]).main(argv[2:])
            except SystemExit as e:  # a usage error (one line): its code, for in-process callers; --help exits
                if not e.code:
                    raise
                return e.code if isinstance(e.code, int) else 2
    if argv[:1] == ["convert"]:
        # The converter owns its arguments (and --help); argparse's REMAINDER would swallow them badly.
        from tools.formats import convert

        try:
            return convert.main(argv[1:])
        except SystemExit as e:  # a usage error (one line): its code, as the other subcommands'; --help exits
            if not e.code:
                raise
            return e.code if isinstance(e.code, int) else 2
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # a usage error (one line, code 2) is returned, for in-process callers; --help exits
        if not e.code:
            raise
        return e.code if isinstance(e.code, int) else 2
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UserError as e:
        print(f"edgetwin {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or port problem no check above foresaw: still one line naming the file
        where = " ".join(str(f) for f in (e.filename, e.filename2) if f)
        print(f"edgetwin {args.command}: error: {where + ': ' if where else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
