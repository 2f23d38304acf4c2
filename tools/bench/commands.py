"""`edgetwin bench NAME ...`: runs tools/bench/NAME.py, each printing one JSON object; registered with
host/cli.py through the entry-point group "edgetwin.commands" (pyproject.toml). Each bench owns its
arguments and --help; a heartbeat line on stderr every 15 s says a long one still runs."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from host.errors import UserError
from host.usage import Command

HERE = Path(__file__).resolve().parent
NOT_BENCHES = ("__init__", "ask_phrasings", "commands", "diag_fidelity", "note_judge", "plant_notes",
               "prism_questions", "soak_broker", "soak_relay", "spill_lfs", "trace_replay")  # diag_fidelity: a
# diagnosis run by hand, no JSON object; ask_phrasings: bench quality's held-out questions; note_judge, plant_notes:
# its notes on generated plants and their judge; prism_questions: bench prism's questions; soak_broker, soak_relay: bench soak's broker and cable; spill_lfs: bench spill's MicroPython side;
# trace_replay: a helper of bench board and the emulator tests
BENCHES = tuple(sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHES))


def bench_main(argv: list) -> int | None:
    """Run bench argv[0] with the rest of argv; None when argv names no bench (argparse then says so)."""
    if not argv or argv[0] not in BENCHES:
        return None
    return importlib.import_module("tools.bench." + argv[0]).main(argv[1:])


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=BENCHES)


def _unreachable(args: argparse.Namespace) -> int:  # a known NAME never reaches argparse
    raise UserError("unknown bench %r: one of %s" % (args.name, ", ".join(BENCHES)))


BENCH = Command("run a benchmark that prints one JSON object: " + ", ".join(BENCHES), _arguments, _unreachable,
                dispatch=bench_main, heartbeat=True)
