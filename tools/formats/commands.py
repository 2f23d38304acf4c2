"""`edgetwin convert`, registered with host/cli.py through the entry-point group "edgetwin.commands"
(pyproject.toml). The converter owns its arguments and --help (tools/formats/convert.py main)."""

from __future__ import annotations

import argparse

from host.errors import UserError
from host.usage import Command


def convert_main(argv: list) -> int:
    from tools.formats import convert

    return convert.main(argv)


def _unreachable(args: argparse.Namespace) -> int:  # main() hands every `convert ...` to convert_main
    raise UserError("usage: edgetwin convert SRC DST [options]; see edgetwin convert --help")


CONVERT = Command("convert a GGUF, llama2.c .bin or Hugging Face safetensors model to MBF (see convert --help)",
                  lambda p: None, _unreachable, dispatch=convert_main, add_help=False)
