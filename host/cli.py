"""The `edgetwin` command: build and deploy boards, run the gateway and the demo, ask questions, benchmarks.

User mistakes exit 2 with one line."""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from pathlib import Path
from typing import Callable

from host.errors import UserError
from host.usage import Command, Parser

ROOT = Path(__file__).resolve().parent.parent

# The product's subcommands: host/cmd_NAME.py, each with HELP (one line), add_arguments(parser) and
# run(args) -> exit code (raising host.errors.UserError for user mistakes).
PRODUCT = ("gateway", "ask", "ack", "plan", "doctor", "import", "ui", "fleet", "plant", "store", "update")
# The development commands (build, vboard, deploy, convert, bench, demo, selftest) live beside what they
# run, in tools/: each is a host.usage.Command that tools/ registers under this entry-point group
# (pyproject.toml [project.entry-points."edgetwin.commands"]); host never imports tools.
GROUP = "edgetwin.commands"


def _checkout_entry_points() -> dict[str, str]:
    """GROUP's entry points in the pyproject.toml of the source tree this module runs from (`python -m
    host.cli` in a checkout): {} outside one, or on Python 3.10 (no tomllib: the installed metadata only)."""
    path = ROOT / "pyproject.toml"
    try:
        import tomllib
    except ImportError:
        return {}
    try:
        project = tomllib.loads(path.read_text()).get("project", {})
    except (OSError, ValueError):  # no pyproject (an installed wheel), or not TOML
        return {}
    if project.get("name") != "edgetwin":
        return {}
    return {str(k): str(v) for k, v in project.get("entry-points", {}).get(GROUP, {}).items()}


def plugin_specs() -> dict[str, str]:
    """name -> "module:attribute" of every registered development command: the installed distribution's
    entry points, then the checkout's own (which win: an editable install's metadata may be another
    checkout's, and the code that runs is this one's)."""
    from importlib.metadata import entry_points

    specs = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    specs.update(_checkout_entry_points())
    return specs


def _unavailable(name: str, spec: str, error: Exception) -> Command:
    why = "%s (%s): %s: %s" % (name, spec, type(error).__name__, error)

    def run(args: argparse.Namespace) -> int:
        raise UserError("this command cannot load: " + why)

    return Command("unavailable: " + why, lambda p: None, run)


def load_plugin(name: str, spec: str) -> Command:
    """The Command an entry point "module:attribute" names; one that cannot load stays listed and says why."""
    module, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module.strip())
        for part in attr.strip().split(".") if attr.strip() else ():
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        return _unavailable(name, spec, e)
    if not isinstance(obj, Command):
        return _unavailable(name, spec, TypeError("%r is not a host.usage.Command" % (obj,)))
    return obj


@functools.lru_cache(maxsize=1)
def commands() -> dict[str, Command]:
    """Every subcommand by name: the registered development commands, then the product's own (a plug-in
    cannot replace one of those)."""
    out = {name: load_plugin(name, spec) for name, spec in plugin_specs().items() if name not in PRODUCT}
    for name in PRODUCT:
        mod = importlib.import_module("host.cmd_" + name)
        out[name] = Command(mod.HELP, mod.add_arguments, mod.run)
    return out


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="edgetwin", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in commands().items():
        sp = sub.add_parser(name, help=cmd.help, description=cmd.help, add_help=cmd.add_help)
        cmd.add_arguments(sp)
        sp.set_defaults(func=cmd.run)
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
    cmd = commands().get(argv[0]) if argv else None
    if cmd is not None and cmd.dispatch is not None:
        # A command that owns its arguments (and --help): argparse's REMAINDER would swallow them badly.
        quiet = not cmd.heartbeat or "-h" in argv or "--help" in argv
        with _heartbeat(" ".join(argv[:2]), quiet=quiet):
            try:
                code = cmd.dispatch(argv[1:])
            except SystemExit as e:  # a usage error (one line): its code, for in-process callers; --help exits
                if not e.code:
                    raise
                return e.code if isinstance(e.code, int) else 2
            except UserError as e:
                print(f"edgetwin {argv[0]}: error: {e}", file=sys.stderr)
                return 2
        if code is not None:
            return code
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
