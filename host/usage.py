"""An argparse parser whose usage mistakes are one line (argparse prints the whole usage first), exit 2:
the `edgetwin` command, its converter and every `edgetwin bench NAME` use it; and Command, what a
subcommand gives host/cli.py (the product's own and the development commands tools/ registers)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Optional


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))


@dataclass(frozen=True)
class Command:
    """One `edgetwin` subcommand. help: one line; add_arguments(parser); run(args) -> exit code (raising
    host.errors.UserError for user mistakes). A command that owns its arguments (convert, bench NAME)
    has dispatch(argv after its name) -> exit code, or None to let argparse go on (add_help False: its
    own --help). heartbeat: while dispatch runs, a line on stderr every 15 s says it still runs."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    dispatch: Optional[Callable[[list], Optional[int]]] = None
    add_help: bool = True
    heartbeat: bool = False
