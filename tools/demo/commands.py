"""`edgetwin demo` and `edgetwin selftest`, registered with host/cli.py through the entry-point group
"edgetwin.commands" (pyproject.toml).

`edgetwin demo`: two virtual nodes (rp2040_pico, esp32s3_devkitc) and the gateway, live, then operator Q&A.

The nodes run the real MicroPython unix port with the shipped INT4 draft (and its tokenizer); the gateway
verifies their drafts with SmolLM2-135M-Instruct in one batched pass per round; a live view (rich) shows
each node's log lines, the annotation being committed (accepted draft tokens vs the target's corrections),
acceptance, tokens/s, link bytes and heap. Then two operator questions are answered from the store (PRISM
top K + the target), everything stops, and a summary (or with --json one JSON object) is printed.
--plant picks the nodes' plant: the built-in simulator (default), a generated seen / unseen plant or a
description file (tools/demo/plants.py). See tools/demo/demo.py.
`edgetwin selftest`: a virtual board, the core deployed with mpremote, its self-test run
(tools/demo/selftest_demo.py).
"""

from __future__ import annotations

import argparse
import math

from host import board_profile
from host.errors import UserError
from host.usage import Command

DEMO_HELP = "run two virtual nodes and the gateway with a live view, then answer operator questions (--json: headless)"


def demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=60.0, help="seconds the nodes run (default 60)")
    p.add_argument("--nodes", type=int, default=2,
                   help="virtual nodes (default 2: rp2040_pico + esp32s3_devkitc; more repeat the profiles)")
    p.add_argument("--json", action="store_true", help="no live view: print one JSON object at the end")
    p.add_argument("--k", type=int, default=4, help="draft tokens per block (default 4)")
    p.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2",
                   help="smollm2 (default: SmolLM2-135M target + the shipped draft, real text) or tiny "
                        "(the tiny test pair: token ids only)")
    p.add_argument("--max-answer", type=int, default=64, help="longest answer in tokens (default 64)")
    p.add_argument("--plant", default="builtin", metavar="builtin|seen|unseen|FILE",
                   help="the nodes' plant: builtin (default: the node's simulator, pump P-101 ...), seen or unseen "
                        "(a generated plant of that split, one per node: unseen has machine kinds and names no "
                        "training saw), or a plant description file (docs/PLANT.md) of catalogue kinds on Modbus")
    p.add_argument("--plant-seed", type=int, default=None,
                   help="seen/unseen: node 1's plant seed, the next nodes' the seeds after it (default 2000: a "
                        "benchmark seed, never a training plant's); FILE: the simulators' seeds")


def run_demo(args: argparse.Namespace) -> int:
    from tools.demo import demo

    if not math.isfinite(args.duration) or args.duration <= 0:
        raise UserError("--duration must be a positive number of seconds, got %s" % args.duration)
    if args.max_answer < 1:
        raise UserError("--max-answer must be at least 1, got %d" % args.max_answer)
    try:
        demo.check_args(args.duration, args.nodes, args.k)
        return demo.run(args.duration, args.nodes, as_json=args.json, k=args.k, model=args.model,
                        max_answer=args.max_answer, plant=args.plant, plant_seed=args.plant_seed)
    except demo.DemoError as e:
        raise UserError(str(e)) from None


def selftest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", default="rp2040_pico", help=board_profile.HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")


def run_selftest(args: argparse.Namespace) -> int:
    from tools.board import build, deploy, vboard
    from tools.demo import selftest_demo

    try:
        return selftest_demo.main(board=board_profile.resolve(args.board), as_json=args.json)
    except (build.BuildError, deploy.DeployError, vboard.VBoardError) as e:
        raise UserError(str(e)) from e


DEMO = Command(DEMO_HELP, demo_arguments, run_demo)
SELFTEST = Command("start a virtual board, deploy the core with mpremote and run its self-test", selftest_arguments,
                   run_selftest)
