"""An argparse parser whose usage mistakes are one line (argparse prints the whole usage first), exit 2:
the `edgetwin` command, its converter and every `edgetwin bench NAME` use it."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))
