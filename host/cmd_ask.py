"""`edgetwin ask "question"`: answer an operator question from the gateway's log store.

Candidates: the store's FTS5 windows (host/store.py); the top K of them by the PRISM reranker
(host/prism/engine.py); then the target model (SmolLM2 by default) streams an answer that cites the
windows as [n]; the answer is checked against the plant's record before it is shown (host/answercheck.py:
what no line confirms is listed under "Not confirmed by the log", a "nothing of the kind" of the model's is
replaced by the record's finding), and the windows it cited are listed with their node and time span.
`--json` prints all of it as one object instead (docs/GATEWAY.md, "Asking").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from host.cliargs import check_store
from host.errors import UserError

PROMPT_BUDGET = 360  # host.qa.PROMPT_BUDGET (not imported here: `edgetwin --help` stays light)
CANDIDATES = 4  # host.qa.CANDIDATES (why 4: there)
HELP = "answer an operator question from the log store: PRISM picks the top K log windows, the target model answers"
DEFAULT_DB = "edgetwin.db"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("question", help='the question, e.g. "why did pump 1 trip?"; - reads it from stdin')
    p.add_argument("--db", default=DEFAULT_DB, help="the gateway's log store (default %s)" % DEFAULT_DB)
    p.add_argument("--k", type=int, default=3, help="log windows given to the target model (default 3)")
    p.add_argument("--candidates", type=int, default=CANDIDATES,
                   help="windows retrieved from the store for PRISM to rank (default %d)" % CANDIDATES)
    p.add_argument("--lines", type=int, default=6, help="log lines per window (default 6)")
    p.add_argument("--reranker", help="reranker directory (Hugging Face BERT cross-encoder; default: the shipped one)")
    p.add_argument("--target", default="domain", help="the model that answers: domain (default: SmolLM2-135M-Instruct "
                   "adapted to the plant, models/target), stock (SmolLM2-135M-Instruct as published) or a GGUF file")
    p.add_argument("--threshold", type=float, default=None, help="PRISM pruning CV threshold (default: the reranker's "
                   "calibrated one from its prism.json, else 0.3; inf: never prune)")
    p.add_argument("--max-tokens", type=int, default=64, help="longest answer in tokens (default 64; it ends sooner at "
                   "its first blank line)")
    p.add_argument("--prompt-budget", type=int, default=None, help="tokens of window text in the target's prompt "
                   "(default %d: each window keeps its lines that name the question's words, events, and those "
                   "nearest its hit)" % PROMPT_BUDGET)
    p.add_argument("--no-answer", action="store_true", help="only rank and list the windows (no target model)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else: the "
                   "question, the answer, the cited windows with their lines, the claims no log line confirms")


def _reranker_dir(arg: str | None) -> str:
    if arg:
        return arg
    from host import weights

    try:
        return str(weights.reranker_dir())
    except (OSError, ValueError) as e:  # ModelNotInstalled is a FileNotFoundError
        raise UserError("no reranker: %s; or pass --reranker DIR" % e) from None


def _target(arg: str) -> tuple[str, bool]:
    from host import target_delta

    try:
        path, domain, _label = target_delta.choose(arg)
    except OSError as e:  # ModelNotInstalled is a FileNotFoundError
        raise UserError("no target model: %s; or pass --target FILE.gguf" % e) from None
    return str(path), domain


def _question(arg: str) -> str:
    if arg == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError as e:
            raise UserError("the question on stdin is not text in the terminal's encoding: %s" % e) from None
    return arg


def _window_text(text: str, indent: str = "      ") -> str:
    return "".join(indent + ln + "\n" for ln in text.strip().splitlines())


def _site_zones(db: Path) -> dict:
    """node -> its plant description, for the nodes whose description keeps a site time zone other than UTC:
    operators read the times of their site (the store and the lines keep UTC)."""
    from host.store import LogStore, StoreError

    try:
        with LogStore(db, readonly=True) as st:
            out = {}
            for n in st.nodes():
                d = st.plant(st.node_plant(n["name"]))
                if d is not None and d.timezone != "UTC":
                    out[n["name"]] = d
            return out
    except StoreError:
        return {}


def _span(s, zones: dict) -> str:
    d = zones.get(s.node)
    if d is None:
        return s.span()
    t0, t1 = d.site_time(s.t0_ms), d.site_time(s.t1_ms)
    return "%s %s to %s %s (%s)" % (s.node, t0.strftime("%Y-%m-%d %H:%M:%S"), t1.strftime("%H:%M:%S"), d.timezone,
                                    s.span().split(" ", 1)[1])


def _print_end(out, res: dict, span) -> None:
    """After the answer: what no line of the log confirms, then where the answer comes from."""
    out.write("\n\n")
    if res["unconfirmed"]:
        out.write("Not confirmed by the log:\n")
        for c in res["unconfirmed"]:
            out.write("  - %s: %s\n" % (c.kind, c.describe()))
    chosen, cited = res["chosen"], res["cited"]
    if res["by_record"] and res["answer"].startswith("Nothing of the kind"):
        out.write("Answered from the plant's record: the store holds no line of that kind (%s).\n" % res["how"])
    elif res["by_record"]:  # a count, the alarms still active, a summary (host/askrecord.py): its lines first
        rested = chosen[:res.get("pinned", 0)]
        out.write("Answered from the plant's record (%s)%s\n" % (res["how"].split(": ", 1)[-1],
                                                                 "; the lines it rests on:" if rested else "."))
        for s in rested:
            out.write("  [%d] %s\n" % (s.n, span(s)))
    elif cited:
        out.write("Sources cited:\n")
        for s in cited:
            out.write("  [%d] %s\n" % (s.n, span(s)))
    else:
        out.write("The answer cites no window; it was given [1]..[%d] above.\n" % len(chosen))


def _as_json(res: dict, span) -> dict:
    """`ask --json`'s one object: the question, the answer (checked; null with --no-answer) and the model's own
    text, the cited windows with their lines (the windows it was given, "cited": false, where it cites none),
    the claims no line confirms, every claim, how the windows were found, the timings."""
    cited = res["cited"]

    def source(s, was_cited: bool) -> dict:
        return {"n": s.n, "node": s.node, "span": span(s), "cited": was_cited, "relevance": round(s.prob, 3),
                "lines": [ln for ln in s.text.strip().splitlines() if ln.strip()]}

    return {"question": res["question"], "answer": res["answer"], "said": res["said"],
            "sources": [source(s, True) for s in cited] or [source(s, False) for s in res["chosen"]],
            "unconfirmed": [c.as_dict() for c in res["unconfirmed"]],
            "claims": [c.as_dict() for c in res["claims"]],
            "by_record": res["by_record"], "matched": res["matched"], "how": res["how"], "times": res["times"]}


def run(args: argparse.Namespace) -> int:
    import time

    t_start = time.perf_counter()
    question = _question(args.question)
    if not isinstance(question, str) or not question.strip():
        raise UserError("the question is empty" + (" (nothing on stdin)" if args.question == "-" else ""))
    question = " ".join(question.split())
    for name in ("k", "candidates", "lines", "max_tokens"):
        v = getattr(args, name)
        if v < 1:
            raise UserError("--%s must be at least 1, got %d" % (name.replace("_", "-"), v))
    if args.prompt_budget is not None and args.prompt_budget < 1:
        raise UserError("--prompt-budget must be at least 1, got %d" % args.prompt_budget)
    if args.threshold is not None and not args.threshold >= 0:
        raise UserError("--threshold must be >= 0, got %s" % args.threshold)
    if args.k > args.candidates:
        raise UserError("--k %d is larger than --candidates %d" % (args.k, args.candidates))
    db = Path(args.db)
    check_store(db)  # before any progress line or model load
    out, err = sys.stdout, sys.stderr

    def progress(line: str) -> None:
        if not args.quiet:
            err.write("[%5.1f s] %s\n" % (time.perf_counter() - t_start, line))
            err.flush()

    progress("loading the models")
    from host import qa
    from host.prism import PrismInputError, PrismModelError
    from host.prism.engine import Prism

    zones = _site_zones(db)
    span = lambda s: _span(s, zones)  # noqa: E731  (a window's time in its site's zone, and in UTC)
    target = None if args.no_answer else _target(args.target)
    # the target loads in a thread while the store is searched and PRISM ranks (numpy leaves the GIL)
    loader = None if target is None else qa.Background(lambda: qa.Answerer.from_gguf(*target))
    state: dict = {"answer_started": False}

    def report(kind: str, data) -> None:
        if kind == "progress":
            progress(data)
        elif kind == "chosen" and not args.json:
            found, chosen, ranking = data
            if not found.matched:
                out.write("note: %s\n" % found.how)
            out.write("PRISM ranked %d windows in %.2f s (%.2f of %d layers per window); the top %d:\n"
                      % (len(found.windows), ranking.latency_s, ranking.layers_per_candidate, ranking.num_layers,
                         len(chosen)))
            if ranking.truncated:
                out.write("note: %d of the %d windows are longer than the reranker's %d-token limit and were "
                          "truncated for ranking\n" % (ranking.truncated, len(found.windows), prism.max_length))
            for s in chosen:
                out.write("  [%d] %s  (relevance %.3f)\n" % (s.n, span(s), s.prob))
                out.write(_window_text(s.text))
            out.flush()
        elif kind == "text" and not args.json:  # the answer, checked against the record ("draft": the model's)
            out.write("\nAnswer: %s" % data)
            state["answer_started"] = True
            out.flush()

    try:
        prism = Prism.from_pretrained(_reranker_dir(args.reranker), threshold=args.threshold)
        try:
            res = qa.ask(question, args.db, prism, None if loader is None else loader.get, k=args.k,
                         limit=args.candidates, lines=args.lines, max_tokens=args.max_tokens,
                         budget=qa.PROMPT_BUDGET if args.prompt_budget is None else args.prompt_budget, report=report)
        finally:
            prism.close()
    except (qa.QAError, PrismModelError, PrismInputError) as e:
        raise UserError(str(e)) from None
    if args.json:
        out.write(json.dumps(_as_json(res, span), ensure_ascii=False) + "\n")
        out.flush()
    elif target is not None:
        if not state["answer_started"]:
            out.write("\nAnswer: ")
        _print_end(out, res, span)
    if target is None:
        return 0
    t = res["times"]
    progress("answered in %.1f s: retrieval %.2f s, rerank %.2f s, waiting for the target %.2f s, prompt %d tokens "
             "(%d lines) in %.2f s, %d answer tokens in %.2f s (ended: %s), checked in %.2f s"
             % (time.perf_counter() - t_start, t["retrieve_s"], t["rerank_s"], t["wait_target_s"], t["prompt_tokens"],
                t["prompt_lines"], t["prefill_s"], t["answer_tokens"], t["decode_s"], t["ended"], t["check_s"]))
    return 0
