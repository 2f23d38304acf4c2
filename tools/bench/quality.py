"""Are the target's words right? Notes and answers on held-out plant seeds, judged against the simulator's truth.

    python -m host.cli bench quality --json [--target stock|PATH.gguf|domain] [--notes 104] [--questions-n 60]
                                     [--dump FILE] [--questions FILE]
                                     [--plant-questions 90] [--stock-questions 40] [--plant-notes 150]
                                     [--stock-notes 150] [--plants-only] [--quick]

Seen and unseen (the JSON's "seen" and "unseen"): generated plants (tools/plants; seen: held-out seeds of the
training kinds and naming schemes, unseen: the held-out kinds and schemes), a simulated day of each
(tools/plants/plantday.py) imported into a store as `edgetwin import` does, and held-out questions in an
operator's words and in the benchmark's older style (tools/bench/ask_phrasings.py, which nothing trains on),
each asked through host/qa.ask with the target, the first --stock-questions of each side with the stock target
too, scored by ask_phrasings.score. Then the notes of each side: the node's episodes of the plants' days, each
note written by the target over the node's stream, the first --stock-notes by the stock target too, judged
against the lines and the description (tools/bench/plant_notes.py, tools/bench/note_judge.py). The figures below
("corpus") follow: today's notes and questions of the built-in simulator's held-out streams.

Notes: the held-out plant streams of tools/train/corpus.py (seeds >= 2000, never trained on nor used to choose
checkpoints), each episode's note written greedily by the target over the node's stream with the rp2040_pico
cache geometry (sink 4 + window 28: what speculative decoding commits at the gateway). Answers: the held-out
questions of tools/train/plant_text.qa_examples, each asked through `ask`'s own retrieval (FTS5 + the PRISM
reranker + fit_sources, host/qa.py; not the gold windows), answered greedily (64 tokens at most, as ask).
The stock SmolLM2-135M-Instruct is measured in the same run on the same notes' streams and the same
retrieved windows (base_*); with --target stock it is the target too, so its figures are computed once.
Judges: tools/train/plant_judge.py (docs/QUALITY.md). Progress on stderr; one JSON object on stdout.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from host.usage import Parser  # noqa: E402

GOALS = {"note_factuality": 0.9, "note_coverage": 0.9, "note_hallucination_rate": 0.05, "answer_accuracy": 0.8,
         "answer_citation_rate": 0.9, "margin_over_stock": 0.3}
MIN_NOTES, MIN_QUESTIONS = 100, 50


class BenchTargetError(ValueError):
    """A --target that cannot be loaded (the message is the one line the user sees)."""


def say(msg: str) -> None:
    sys.stderr.write("bench quality: %s\n" % msg)
    sys.stderr.flush()


class BenchTarget:
    """A target for the bench: its name, the llama_np Target, its tokenizer (host/qa's) and its stop ids."""

    def __init__(self, name: str, path: str, target, tokenizer, stop_ids):
        self.name, self.path, self.target, self.tokenizer, self.stop_ids = name, path, target, tokenizer, stop_ids


def load_bench_target(name: str) -> BenchTarget:
    """stock: the shipped SmolLM2-135M-Instruct GGUF; PATH.gguf: that file; domain: the plant-adapted target
    (the GGUF with models/target's adapters merged, host/target_delta.py; absent until `make models`)."""
    from host import qa, target_delta, weights

    domain = False
    if name == "stock":
        try:
            path = str(weights.smollm2_gguf())
        except OSError as e:
            raise BenchTargetError("stock target: %s" % e) from None
    elif name == "domain":
        if not target_delta.installed():
            raise BenchTargetError("domain target not installed: run make models")
        try:
            path, domain = str(weights.smollm2_gguf()), True
        except OSError as e:
            raise BenchTargetError("domain target: %s" % e) from None
    else:
        if not name.endswith(".gguf"):
            raise BenchTargetError("--target %s: one of stock, domain or a PATH.gguf" % name)
        if not Path(name).is_file():
            raise BenchTargetError("--target %s: no such file" % name)
        path = name
    try:
        target, tok, stops = qa.load_text_model(path, domain)
    except qa.QAError as e:
        raise BenchTargetError("--target %s: %s" % (name, e)) from None
    return BenchTarget(name, path, target, tok, stops)


# ---------------------------------------------------------------------------------------------- notes


def target_notes(bt: BenchTarget, seeds: list[int]) -> dict[int, list[str]]:
    """Greedy notes of every episode of the seeds' streams, the target over the node's stream (system prompt,
    then each episode's prompt and note, the previous tokens as context) with corpus's sink + window cache:
    what the gateway commits. Lockstep over the seeds (one batched forward per token)."""
    import numpy as np

    from shared import episode
    from tools.train import corpus

    tok = corpus.tokenizer()
    stops = corpus.stop_ids(tok)
    model = bt.target
    streams = [corpus._Stream(s, model, tok) for s in seeds]  # noqa: SLF001 (corpus's own stream state)
    for s in streams:
        s.add(s.unfed, False)
    corpus._feed(model, streams, [s.unfed for s in streams])  # noqa: SLF001
    for s in streams:
        s.unfed = []
    out: dict[int, list[str]] = {s.seed: [] for s in streams}
    n_ep = max(len(s.eps) for s in streams)
    for e in range(n_ep):
        say("notes (%s): episode %d of %d over %d streams" % (bt.name, e + 1, n_ep, len(streams)))
        act = [s for s in streams if e < len(s.eps)]
        parts = []
        for s in act:
            pr = tok.encode(episode.prompt_text(s.eps[e]["lines"], s.after_cap))
            s.add(s.unfed, True)
            s.add(pr, False)
            parts.append(s.unfed + pr)
            s.unfed = []
        last = corpus._feed(model, act, parts)  # noqa: SLF001
        notes: list[list[int]] = [[] for _ in act]
        live = list(range(len(act)))
        while live:
            nxt = []
            for i in live:
                t = int(np.argmax(last[i]))
                notes[i].append(t)
                if stops[t] or len(notes[i]) >= episode.MAX_NOTE:
                    act[i].unfed = [t]
                    act[i].after_cap = not stops[t]
                else:
                    nxt.append(i)
            if nxt:
                for i in nxt:
                    act[i].add([notes[i][-1]], True)
                outs = corpus._feed(model, [act[i] for i in nxt], [[notes[i][-1]] for i in nxt])  # noqa: SLF001
                for i, o in zip(nxt, outs):
                    last[i] = o
            live = nxt
        for s, ids in zip(act, notes):
            out[s.seed].append(tok.decode(ids))
    return out


def note_rows(notes_n: int) -> list[dict[str, Any]]:
    """The first notes_n held-out event episodes (seed by seed) with their facts and reference notes (the
    streams' summary episodes stay in the target's context, as on the node, and are not judged)."""
    from tools.train import corpus, plant_text

    rows: list[dict[str, Any]] = []
    seed = corpus.SPLITS["heldout"][0]
    while len(rows) < notes_n:
        st = plant_text.note_stream(seed)
        for i, ep in enumerate(st["episodes"]):
            if ep["facts"]["kind"] == "summary":  # in the stream as on the node, but no event to judge
                continue
            rows.append({"seed": seed, "episode": i, "lines": ep["lines"], "facts": ep["facts"],
                         "reference": ep["note"]})
        seed += 1
    return rows[:notes_n]


# ---------------------------------------------------------------------------------------------- questions


class QuestionsError(ValueError):
    pass


def read_questions(path: str) -> list[dict[str, Any]]:
    """Questions in the dump's format (JSON lines; rows with "question", "seed", "truth"; rows of other kinds,
    such as the dump's notes, are skipped). One QuestionsError line names the file, the line and the field."""
    from tools.train import corpus

    p = Path(path)
    if not p.is_file():
        raise QuestionsError("--questions %s: no such file" % path)
    out = []
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise QuestionsError("--questions %s: cannot read it: %s" % (path, e)) from None
    for no, ln in enumerate(text.splitlines(), 1):
        if not ln.strip():
            continue
        try:
            row = json.loads(ln)
        except ValueError:
            raise QuestionsError("--questions %s line %d: not a JSON object" % (path, no)) from None
        if not isinstance(row, dict):
            raise QuestionsError("--questions %s line %d: not a JSON object" % (path, no))
        if row.get("type", "answer") != "answer":
            continue
        q, seed, truth = row.get("question"), row.get("seed"), row.get("truth")
        if not isinstance(q, str) or not q.strip():
            raise QuestionsError("--questions %s line %d: field question: a non-empty string is needed" % (path, no))
        if not isinstance(seed, int) or isinstance(seed, bool) or not seed >= 0:
            raise QuestionsError("--questions %s line %d: field seed: a plant seed (int >= 0) is needed" % (path, no))
        if corpus.split_of(seed) != "heldout":
            raise QuestionsError("--questions %s line %d: field seed: %d is not a held-out seed (>= %d)"
                                 % (path, no, seed, corpus.SPLITS["heldout"][0]))
        if not isinstance(truth, dict) or not isinstance(truth.get("event"), str) or \
                not isinstance(truth.get("machine"), str) or not isinstance(truth.get("evidence", []), list):
            raise QuestionsError("--questions %s line %d: field truth: an object with event, machine and evidence "
                                 "is needed" % (path, no))
        out.append({"seed": seed, "question": q, "kind": row.get("kind", truth["event"]), "truth": truth})
    if not out:
        raise QuestionsError("--questions %s: no questions in it" % path)
    return out


def with_windows(qs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Questions read from a file get ask's own windows for them (a store per seed, retrieve + rerank + fit)."""
    import tempfile

    from tools.train import plant_text, qa_corpus

    tok = plant_text.note_tokenizer()

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    out = []
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        dbs: dict[int, Path] = {}
        for q in qs:
            if q["seed"] not in dbs:
                dbs[q["seed"]] = Path(tmp) / ("%d.db" % q["seed"])
                plant_text.build_store(dbs[q["seed"]], qa_corpus.node_log(q["seed"]))
            got = plant_text.ask_windows(dbs[q["seed"]], q["question"], plant_text._prism(), count)  # noqa: SLF001
            out.append(dict(q, **got))
    import random

    rng = random.Random(0)
    for q in out:  # the reference answer for these windows (the judges' own check, "reference" in the JSON)
        q["answer"] = plant_text.reference_answer(q["truth"], q["sources"], rng)
    return out


def answers(bt: BenchTarget, qs: list[dict[str, Any]], max_tokens: int) -> list[str]:
    from host import qa

    ans = qa.Answerer(bt.target, bt.tokenizer, bt.stop_ids)
    out = []
    for i, q in enumerate(qs):
        src = [qa.Source(s["n"], s["node"], s["t0_ms"], s["t1_ms"], s["text"], s["prob"]) for s in q["sources"]]
        t = time.perf_counter()
        if q.get("record_answer"):  # ask answers these from the plant's record, without the target
            out.append(q["record_answer"])
            continue
        out.append(ans.answer(q["question"], src, max_tokens=max_tokens, note=q.get("note", ""), budget=None))
        say("answers (%s): %d of %d in %.1f s" % (bt.name, i + 1, len(qs), time.perf_counter() - t))
    return out


# ---------------------------------------------------------------------------------------------- figures


def _rate(xs: list[bool]) -> float | None:
    return round(sum(1 for x in xs if x) / len(xs), 4) if xs else None


def note_figures(notes: list[str], rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict]]:
    from tools.train import plant_judge

    vs = [plant_judge.note_verdict(n, r["facts"]) for n, r in zip(notes, rows)]
    by_kind: dict[str, list] = {}
    for v, r in zip(vs, rows):
        by_kind.setdefault(r["facts"]["kind"], []).append(v)
    fig = {"note_factuality": _rate([v["factual"] for v in vs]), "note_coverage": _rate([v["covered"] for v in vs]),
           "note_hallucination_rate": _rate([v["hallucinated"] for v in vs]),
           "note_vacuous_rate": _rate([v["vacuous"] for v in vs]),
           "note_ends_in_newline": _rate([n.endswith("\n") for n in notes]),
           "notes_by_kind": {k: {"n": len(x), "factuality": _rate([v["factual"] for v in x]),
                                 "coverage": _rate([v["covered"] for v in x])} for k, x in sorted(by_kind.items())}}
    return fig, vs


def answer_figures(texts: list[str], qs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict]]:
    from tools.train import plant_judge

    vs = [plant_judge.answer_verdict(a, q["truth"], q["sources"]) for a, q in zip(texts, qs)]
    cited = [v["cited"] for v in vs if v["cited"] is not None]
    by_kind: dict[str, list] = {}
    for v, q in zip(vs, qs):
        by_kind.setdefault(q["truth"]["event"], []).append(v["accurate"])
    fig = {"answer_accuracy": _rate([v["accurate"] for v in vs]), "answer_citation_rate": _rate(cited),
           "answers_citing": _rate([bool(plant_judge.parse(a)["cites"]) for a in texts]),
           "answers_by_kind": {k: {"n": len(x), "accuracy": _rate(x)} for k, x in sorted(by_kind.items())}}
    return fig, vs


# ---------------------------------------------------------------------------------------------- plants: seen / unseen

PLANT_GOALS = {"answer_accuracy": 0.8, "answer_accuracy_free": 0.75, "answer_citation_rate": 0.9,
               "note_factuality": 0.9, "note_coverage": 0.9, "note_hallucination_rate": 0.05,
               "invented_cause_rate": 0.05}
PLANT_CEILINGS = ("note_hallucination_rate", "invented_cause_rate")  # at most these; the other goals at least
PLANT_MIN_QUESTIONS, PLANT_MIN_NOTES, FREE_SHARE_MIN = 80, 150, 0.4
PLANT_SEED0 = 2000  # held-out plant seeds, as tools/train/corpus.SPLITS holds out its seeds >= 2000
PER_PLANT = 14  # questions a plant day gives at most (a mix of every kind, tools/bench/ask_phrasings.questions)


def plant_days(split: str, n_questions: int, per_plant: int = PER_PLANT, hours: float | None = None):
    """(day, questions) per plant of the split until n_questions: generated plants (tools/plants: "seen" held-out
    seeds of the training kinds and schemes, "unseen" held-out kinds and schemes), a simulated day each with
    faults (tools/plants/plantday.py) and held-out questions about it (tools/bench/ask_phrasings.py)."""
    out, total, seed = [], 0, PLANT_SEED0
    while total < n_questions:
        day, qs = day_questions(split, seed, min(per_plant, n_questions - total), hours)
        out.append((day, qs))
        total += len(qs)
        seed += 1
    return out


def day_questions(split: str, seed: int, n: int = PER_PLANT, hours: float | None = None):
    """(day, questions) of one generated plant of the split: its simulated day with faults and up to n held-out
    questions about it, drawn from the seed (the same for every bench that asks them: quality, prism)."""
    import random

    from tools.bench import ask_phrasings
    from tools.plants import generate, plantday

    day = plantday.day(generate.plant(seed, split), seed, **({"hours": hours} if hours else {}))
    return day, ask_phrasings.questions(day, random.Random("edgetwin-bench/ask/%s/%d" % (split, seed)), n)


def import_day(day, tmp: Path, name: str) -> Path:
    """The day's log in a store of its own, as `edgetwin import --plant` makes it (host/cmd_import.import_log)."""
    from host import cmd_import, plantdesc

    (tmp / (name + ".json")).write_text(json.dumps(day.desc))
    (tmp / (name + ".log")).write_text("\n".join(day.lines) + "\n")
    db = tmp / (name + ".db")
    cmd_import.import_log(tmp / (name + ".log"), db, "node-" + name, desc=plantdesc.load(tmp / (name + ".json")))
    return db


def ask_one(question: str, db: Path, prism, answerer, max_tokens: int) -> dict[str, Any]:
    """`edgetwin ask`'s whole path (host/qa.ask: retrieval, PRISM, the record, the target, the answer check)."""
    from host import qa
    from tools.bench import ask_phrasings

    t = time.perf_counter()
    try:
        r = qa.ask(question, db, prism, answerer, max_tokens=max_tokens)
    except qa.QAError as e:  # ask's own one-line refusal is the operator's answer
        return {"answer": "%s%s)" % (ask_phrasings.REFUSED, e), "cited": [], "by_record": False,
                "s": round(time.perf_counter() - t, 2)}
    return {"answer": r["answer"] or "", "cited": [s.text for s in r["cited"]], "by_record": bool(r["by_record"]),
            "s": round(time.perf_counter() - t, 2)}


def plant_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """answer_accuracy (all), answer_accuracy_free (operator words), answer_citation_rate (where there is a line
    to cite), per kind; rows: {"q": Question dict, "verdict": score()}."""
    def acc(rs):
        return _rate([r["verdict"]["right"] for r in rs])

    cited = [r["verdict"]["cited"] for r in rows if r["verdict"]["cited"] is not None]
    kinds: dict[str, list] = {}
    for r in rows:
        kinds.setdefault(r["q"]["kind"], []).append(r)
    return {"questions": len(rows), "answer_accuracy": acc(rows),
            "answer_accuracy_free": acc([r for r in rows if r["q"]["free"]]),
            "answer_accuracy_templated": acc([r for r in rows if not r["q"]["free"]]),
            "answer_citation_rate": _rate(cited), "by_record": _rate([r["by_record"] for r in rows]),
            "by_kind": {k: {"n": len(x), "accuracy": acc(x)} for k, x in sorted(kinds.items())}}


def plants_section(roles: list[tuple[str, Any]], n_questions: int, stock_n: int, max_tokens: int,
                   dump: list | None = None, hours: float | None = None) -> dict[str, Any]:
    """The seen and unseen figures: every question through ask with the domain target (roles[0]), the first
    stock_n of each side with the stock target (roles[1]) as well."""
    import tempfile

    from host import qa
    from tools.bench import ask_phrasings
    from tools.train import plant_text

    prism = plant_text._prism() if n_questions else None  # noqa: SLF001 (the shipped reranker, loaded once)
    answerers = {role: qa.Answerer(bt.target, bt.tokenizer, bt.stop_ids) for role, bt in roles}
    out: dict[str, Any] = {}
    for split in ("seen", "unseen"):
        t0 = time.perf_counter()
        days = plant_days(split, n_questions, hours=hours)
        rows: dict[str, list] = {role: [] for role, _ in roles}
        with tempfile.TemporaryDirectory(prefix="bench-quality-%s-" % split) as tmp:
            i = 0
            for day, qs in days:
                db = import_day(day, Path(tmp), "%s%d" % (split, day.seed))
                start = [day.site(0).strftime("%H:%M"), day.utc(0).strftime("%H:%M")]
                for q in qs:
                    qd = q.as_dict()
                    for role, bt in roles:
                        if role != "target" and i >= stock_n:
                            continue
                        got = ask_one(q.text, db, prism, answerers[role], max_tokens)
                        v = ask_phrasings.score(got["answer"], got["cited"], qd, day.desc, got["by_record"], start)
                        rows[role].append({"q": qd, "verdict": v, "by_record": got["by_record"]})
                        if dump is not None:
                            dump.append({"type": "plant_answer", "split": split, "seed": day.seed, "role": role,
                                         "target": bt.name, **qd, "answer": got["answer"], "cited": got["cited"],
                                         "by_record": got["by_record"], "verdict": v, "s": got["s"]})
                        say("%s (%s): %d of %d, %s %s in %.1f s" % (split, bt.name, i + 1, sum(len(x) for _, x in days),
                                                                  q.kind, "right" if v["right"] else "wrong", got["s"]))
                    i += 1
        side: dict[str, Any] = {"plants": [d.desc["name"] for d, _ in days],
                                "kinds": sorted({m["kind"] for d, _ in days for m in d.desc["machines"]}),
                                "schemes": sorted({d.desc["title"].split("(")[1].split(" names")[0] for d, _ in days}),
                                "free_share": _rate([q.free for _, qs in days for q in qs]),
                                "none_share": _rate([bool(q.truth.get("none")) for _, qs in days for q in qs])}
        for role, bt in roles:
            f = plant_figures(rows[role])
            side[role] = dict(f, target=bt.name)
        side["questions"] = side[roles[0][0]]["questions"]
        side["goals_met"] = plant_goals_met(side["target"])
        side["sizes_ok"] = side["questions"] >= PLANT_MIN_QUESTIONS and (side["free_share"] or 0) >= FREE_SHARE_MIN
        side["seconds"] = round(time.perf_counter() - t0, 1)
        say("%s: accuracy %s (free %s), citation %s over %d questions" % (
            split, side["target"]["answer_accuracy"], side["target"]["answer_accuracy_free"],
            side["target"]["answer_citation_rate"], side["questions"]))
        out[split] = side
    return out


def plant_goals_met(fig: dict[str, Any]) -> dict[str, bool | None]:
    """Each plant goal met by a role's figures on a side (None: not measured in this run)."""
    return {k: None if fig.get(k) is None else bool(fig[k] <= g if k in PLANT_CEILINGS else fig[k] >= g)
            for k, g in PLANT_GOALS.items()}


def plant_notes_section(sides: dict[str, Any], roles: list[tuple[str, Any]], n_notes: int, stock_n: int,
                        dump: list | None = None, quick: bool = False) -> None:
    """The notes half of the seen and unseen figures, added to plants_section's sides: every note of a side's
    plant days with the domain target (roles[0]), the first stock_n with the stock target (tools/bench/plant_notes.py;
    judged by tools/bench/note_judge.py)."""
    from tools.bench import plant_notes

    kw = {"per_plant": 1, "hours": 1.0} if quick else {}  # a smoke run: each plant's first event episode
    for split in ("seen", "unseen"):
        got = plant_notes.side(split, roles, n_notes, stock_n, seed0=PLANT_SEED0, dump=dump, log=say, **kw)
        side = sides[split]
        side["notes"] = got["notes"]
        for k in ("note_plants", "note_kinds", "note_seconds"):
            side[k] = got[k]
        for role, _bt in roles:
            side[role].update(got[role])
        side["stock_notes_subset"] = None if len(roles) < 2 else \
            "the first %d notes of the side (the first plants' streams)" % got["stock"]["notes"]
        side["goals_met"] = plant_goals_met(side["target"])
        side["sizes_ok"] = bool(side["sizes_ok"]) and side["notes"] >= PLANT_MIN_NOTES


def corpus_section(a, target: BenchTarget, stock: BenchTarget, qs_file) -> dict[str, Any]:
    """Today's figures on the built-in simulator's corpus: notes of held-out streams, held-out corpus questions
    (tools/train/plant_text), for the target and the stock baseline (the object this bench printed before the
    plant sections; now under "corpus")."""
    from tools.train import plant_text

    t_corpus = time.perf_counter()
    same = target is stock
    rows = note_rows(a.notes)
    seeds = sorted({r["seed"] for r in rows})
    say("notes: %d held-out episodes from seeds %d..%d" % (len(rows), seeds[0], seeds[-1]))
    figures: dict[str, Any] = {"target": {}, "stock": {}}
    verdicts: dict[str, list] = {"target": [None, None], "stock": [None, None]}
    texts: dict[str, list] = {"target": [None, None], "stock": [None, None]}
    times: dict[str, dict] = {"target": {}, "stock": {}}
    roles = (("target", target),) if same else (("target", target), ("stock", stock))
    for role, bt in roles:  # notes first: they need no retrieval
        t = time.perf_counter()
        by_seed = target_notes(bt, seeds)
        notes = [by_seed[r["seed"]][r["episode"]] for r in rows]
        nf, nv = note_figures(notes, rows)
        figures[role].update(nf)
        texts[role][0], verdicts[role][0] = notes, nv
        times[role]["notes_s"] = round(time.perf_counter() - t, 1)
        say("notes (%s): factuality %s, coverage %s" % (bt.name, nf["note_factuality"], nf["note_coverage"]))
    t = time.perf_counter()
    if qs_file is not None:
        qs = with_windows(qs_file)
    else:
        qs = plant_text.qa_examples("heldout", a.questions_n)
    times["retrieval_s"] = round(time.perf_counter() - t, 1)
    say("questions: %d (%d none), windows in %.0f s" % (len(qs), sum(1 for q in qs if q["truth"]["event"] == "none"),
                                                       times["retrieval_s"]))
    for role, bt in roles:  # one retrieval for both targets
        t = time.perf_counter()
        ans = answers(bt, qs, a.max_tokens)
        af, av = answer_figures(ans, qs)
        figures[role].update(af)
        texts[role][1], verdicts[role][1] = ans, av
        times[role]["answers_s"] = round(time.perf_counter() - t, 1)
    if same:
        figures["stock"], texts["stock"], verdicts["stock"] = figures["target"], texts["target"], verdicts["target"]
        del times["stock"]
    out: dict[str, Any] = {"bench": "quality", "target": a.target, "baseline": "stock",
                           "baseline_same_run": True, "baseline_is_target": same,
                           "notes": len(rows), "questions": len(qs),
                           "questions_none": sum(1 for q in qs if q["truth"]["event"] == "none"),
                           "note_seeds": [seeds[0], seeds[-1]], "question_seeds": sorted({q["seed"] for q in qs}),
                           "evidence_retrieved": _rate([bool(v.get("evidence_in")) for v in verdicts["target"][1]
                                                        if v["cited"] is not None])}
    keys = ("note_factuality", "note_coverage", "note_hallucination_rate", "answer_accuracy", "answer_citation_rate")
    for k, v in figures["target"].items():
        out[k] = v
    for k, v in figures["stock"].items():
        out["base_" + k] = v
    met = {}
    for k in keys:
        v, b = out[k], out["base_" + k]
        if v is None:
            met[k] = None
            continue
        ok = v <= GOALS[k] if k == "note_hallucination_rate" else v >= GOALS[k]
        margin = (b - v) if k == "note_hallucination_rate" else (v - b)
        met[k] = bool(ok and b is not None and margin >= GOALS["margin_over_stock"] - 1e-9)
    ref_n, _ = note_figures([r["reference"] for r in rows], rows)  # the judges on the reference texts:
    ref_a, _ = answer_figures([q["answer"] for q in qs], qs) if all("answer" in q for q in qs) else ({}, None)
    out["reference"] = {k: v for k, v in dict(ref_n, **ref_a).items() if k in keys}  # what a perfect target scores
    out["goals"] = GOALS
    out["goals_met"] = met
    out["sizes_ok"] = len(rows) >= MIN_NOTES and len(qs) >= MIN_QUESTIONS and \
        out["questions_none"] <= 0.2 * len(qs)
    out["times_s"] = dict(times, total_s=round(time.perf_counter() - t_corpus, 1))
    if a.dump:
        with open(a.dump, "w") as fh:
            for i, r in enumerate(rows):
                fh.write(json.dumps({"type": "note", "seed": r["seed"], "episode": r["episode"], "window": r["lines"],
                                     "facts": r["facts"], "reference": r["reference"],
                                     "target": texts["target"][0][i], "target_verdict": verdicts["target"][0][i],
                                     "stock": texts["stock"][0][i], "stock_verdict": verdicts["stock"][0][i]}) + "\n")
            for i, q in enumerate(qs):
                fh.write(json.dumps({"type": "answer", "seed": q["seed"], "question": q["question"], "kind": q["kind"],
                                     "truth": q["truth"], "sources": q["sources"], "note": q.get("note", ""),
                                     "reference": q.get("answer"),
                                     "target": texts["target"][1][i], "target_verdict": verdicts["target"][1][i],
                                     "stock": texts["stock"][1][i], "stock_verdict": verdicts["stock"][1][i]}) + "\n")
        say("dump: %s" % a.dump)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="(the output is always one JSON object)")
    ap.add_argument("--target", default="domain", help="stock, domain (default) or PATH.gguf; the baseline is "
                    "always stock")
    ap.add_argument("--notes", type=int, default=104, help="held-out episodes to annotate (default 104)")
    ap.add_argument("--questions-n", type=int, default=60, help="held-out questions (default 60)")
    ap.add_argument("--questions", help="read the questions from this file (the dump's format) instead")
    ap.add_argument("--dump", help="write every note and answer with its window and ground truth (JSON lines)")
    ap.add_argument("--max-tokens", type=int, default=64, help="longest answer (default 64, as ask)")
    ap.add_argument("--plant-questions", type=int, default=90, metavar="N",
                    help="held-out questions per side (seen, unseen) on generated plants (default 90; 0: none)")
    ap.add_argument("--stock-questions", type=int, default=40, metavar="N",
                    help="of those, how many per side the stock target answers too (default 40: the first N)")
    ap.add_argument("--plant-notes", type=int, default=150, metavar="N",
                    help="notes per side (seen, unseen) on generated plant days (default 150; 0: none)")
    ap.add_argument("--stock-notes", type=int, default=150, metavar="N",
                    help="of those, how many per side the stock target writes too (default 150: the first N)")
    ap.add_argument("--plants-only", action="store_true",
                    help="only the seen/unseen plant questions and notes (no corpus notes and questions)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 3 plant questions and 3 notes (3 plants' first event) per side on short days, "
                    "1 of each for stock, plants only (tests)")
    a = ap.parse_args(argv)
    if a.notes < 1 or a.questions_n < 1 or a.max_tokens < 1 or min(a.plant_questions, a.stock_questions,
                                                                    a.plant_notes, a.stock_notes) < 0:
        ap.error("--notes, --questions-n and --max-tokens must be at least 1, --plant-questions, --stock-questions, "
                 "--plant-notes and --stock-notes at least 0")
    if a.plant_questions == 0 and a.plant_notes == 0:
        ap.error("--plant-questions 0 and --plant-notes 0 leave the plants nothing to measure")
    if a.quick:
        a.plant_questions, a.stock_questions, a.plants_only = 3, 1, True
        a.plant_notes, a.stock_notes = 3, 1
    t_start = time.perf_counter()
    try:
        qs_file = read_questions(a.questions) if a.questions else None
        if a.dump:
            Path(a.dump).open("w").close()  # a bad path fails now, not after minutes
        target = load_bench_target(a.target)
        stock = target if a.target == "stock" else load_bench_target("stock")
    except (QuestionsError, BenchTargetError, OSError) as e:
        print("edgetwin bench quality: error: %s" % e, file=sys.stderr)
        return 2
    same = target is stock
    roles = [("target", target)] + ([] if same else [("stock", stock)])
    dump: list | None = [] if a.dump else None
    out: dict[str, Any] = {"bench": "quality", "target": a.target, "baseline": "stock", "baseline_same_run": True,
                           "baseline_is_target": same}
    # 1. the generated plants: held-out seeds of the training kinds (seen), held-out kinds and schemes (unseen)
    out.update(plants_section(roles, a.plant_questions, a.stock_questions, a.max_tokens, dump,
                              hours=6.0 if a.quick else None))
    for side in ("seen", "unseen"):
        out[side]["notes"] = 0
        out[side]["stock_subset"] = "the first %d questions of the side" % min(a.stock_questions,
                                                                              out[side]["questions"])
    if a.plant_notes:  # the notes of the same plants (days of their own: tools/bench/plant_notes.py)
        plant_notes_section(out, roles, a.plant_notes, a.stock_notes, dump, a.quick)
    out["plant_goals"] = PLANT_GOALS
    out["plant_ceilings"] = list(PLANT_CEILINGS)
    out["plant_sizes"] = {"questions_per_side": PLANT_MIN_QUESTIONS, "free_share": FREE_SHARE_MIN,
                          "notes_per_side": PLANT_MIN_NOTES}
    # 2. today's corpus figures (notes and questions of the built-in simulator's held-out streams)
    out["corpus"] = None if a.plants_only else corpus_section(a, target, stock, qs_file)
    if a.dump:
        with open(a.dump, "a") as fh:
            for row in dump or ():
                fh.write(json.dumps(row) + "\n")
    out["times_s"] = {"total_s": round(time.perf_counter() - t_start, 1)}
    print(json.dumps(out))
    return 0 if math.isfinite(out["times_s"]["total_s"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
