"""`edgetwin ask "question"`: answer an operator question from the gateway's log store.

Candidates: the store's FTS5 windows (host/store.py); the top K of them by the PRISM reranker
(host/prism/engine.py); then the target model (SmolLM2 by default) streams an answer that cites the
windows as [n], and the windows it cited are listed with their node and time span.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from host.errors import UserError

HELP = "answer an operator question from the log store: PRISM picks the top K log windows, the target model answers"
DEFAULT_DB = "edgetwin.db"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("question", help='the question, e.g. "why did P-101 trip?"')
    p.add_argument("--db", default=DEFAULT_DB, help="the gateway's log store (default %s)" % DEFAULT_DB)
    p.add_argument("--k", type=int, default=5, help="log windows given to the target model (default 5)")
    p.add_argument("--candidates", type=int, default=20, help="windows retrieved from the store for PRISM to rank (default 20)")
    p.add_argument("--lines", type=int, default=8, help="log lines per window (default 8)")
    p.add_argument("--reranker", help="reranker directory (Hugging Face BERT cross-encoder; default: the shipped one)")
    p.add_argument("--target", help="target model GGUF (default: SmolLM2-135M-Instruct)")
    p.add_argument("--threshold", type=float, default=None, help="PRISM pruning CV threshold (default: the reranker's "
                   "calibrated one from its prism.json, else 0.3; inf: never prune)")
    p.add_argument("--max-tokens", type=int, default=160, help="longest answer in tokens (default 160)")
    p.add_argument("--no-answer", action="store_true", help="only rank and list the windows (no target model)")


def _reranker_dir(arg: str | None) -> str:
    if arg:
        return arg
    from host import models

    try:
        return str(models.reranker_dir())
    except (OSError, ValueError) as e:  # ModelNotInstalled is a FileNotFoundError
        raise UserError("no reranker: %s; or pass --reranker DIR" % e) from None


def _target_path(arg: str | None) -> str:
    if arg:
        if not Path(arg).is_file():
            raise UserError("target model %s does not exist" % arg)
        return arg
    from host import models

    try:
        return str(models.smollm2_gguf())
    except OSError as e:
        raise UserError("no target model: %s; or pass --target FILE.gguf" % e) from None


def run(args: argparse.Namespace) -> int:
    from host import qa
    from host.prism import PrismInputError, PrismModelError
    from host.prism.engine import Prism

    question = args.question
    if not isinstance(question, str) or not question.strip():
        raise UserError("the question is empty")
    for name in ("k", "candidates", "lines", "max_tokens"):
        v = getattr(args, name)
        if v < 1:
            raise UserError("--%s must be at least 1, got %d" % (name.replace("_", "-"), v))
    if args.threshold is not None and not args.threshold >= 0:
        raise UserError("--threshold must be >= 0, got %s" % args.threshold)
    if args.k > args.candidates:
        raise UserError("--k %d is larger than --candidates %d" % (args.k, args.candidates))
    db = Path(args.db)
    if db.is_dir():
        raise UserError("--db %s is a directory, not a log store (give the gateway's --db file)" % db)
    if not db.is_file():
        raise UserError("log store %s does not exist (give the gateway's --db file)" % db)
    if not os.access(db, os.R_OK):
        raise UserError("--db %s: not readable (permission denied)" % db)
    try:
        windows = qa.candidates(args.db, question, limit=args.candidates, lines=args.lines)
        if not windows:
            raise UserError("no log windows in %s match the question's words: nothing to rank" % args.db)
        if args.k > len(windows):
            raise UserError("--k %d is larger than the %d candidate windows found for this question; use --k %d or less"
                            % (args.k, len(windows), len(windows)))
        target = None if args.no_answer else _target_path(args.target)
        prism = Prism.from_pretrained(_reranker_dir(args.reranker), threshold=args.threshold)
        try:
            chosen, ranking = qa.rerank(prism, question, windows, args.k)
        finally:
            prism.close()
    except (qa.QAError, PrismModelError, PrismInputError) as e:
        raise UserError(str(e)) from None
    out = sys.stdout
    out.write("PRISM ranked %d windows in %.2f s (%.2f of %d layers per window); the top %d:\n"
              % (len(windows), ranking.latency_s, ranking.layers_per_candidate, ranking.num_layers, args.k))
    if ranking.truncated:
        out.write("note: %d of the %d windows are longer than the reranker's %d-token limit and were truncated for "
                  "ranking\n" % (ranking.truncated, len(windows), prism.max_length))
    for s in chosen:
        out.write("  [%d] %s  (relevance %.3f)\n" % (s.n, s.span(), s.prob))
    if target is None:
        return 0
    out.flush()
    try:
        answerer = qa.Answerer.from_gguf(target)
    except qa.QAError as e:
        raise UserError(str(e)) from None
    out.write("\nAnswer: ")
    out.flush()

    def show(piece: str) -> None:
        out.write(piece)
        out.flush()

    try:
        text = answerer.answer(question, chosen, max_tokens=args.max_tokens, on_text=show)
    except qa.QAError as e:
        raise UserError(str(e)) from None
    out.write("\n\n")
    cited = qa.cited_sources(text, chosen)
    if cited:
        out.write("Sources cited:\n")
        for s in cited:
            out.write("  [%d] %s\n" % (s.n, s.span()))
    else:
        out.write("The answer cites no window; it was given [1]..[%d] above.\n" % len(chosen))
    return 0
