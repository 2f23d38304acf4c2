"""The PRISM bench's questions: held-out operator questions with `edgetwin ask`'s own candidate windows.

    qs, skipped = ask_questions("held-out", n=40, limit=20, k=5)

For each plant seed of the split (tools/train/qa_corpus: validation 1000-1999, held-out 2000-2999), a log
store is built from the seed's node log as tools/train/plant_text.build_store does, and every question of
plant_text.question_specs(seed) is retrieved as `ask` retrieves it: host.qa.retrieve(store, question,
limit, lines=ask's lines), FTS5 windows in (boosted) bm25 order, the window an alarm's record pins first.
Those windows, in that order, are the candidates: the hard negatives ask really meets, not random fill.

Relevance (graded, the question's ground truth as plant_text / plant_judge use it): the number of the
question's evidence lines (plant_text's truth["evidence"]: the answer lines, and for a trip the alarm
that tripped it) the window holds. A question is skipped, and counted by reason, when it has no evidence
by construction ("none" questions), when retrieval gives fewer than k + 1 windows (nothing to prune), or
when no window holds an evidence line (nothing to rank right).

Generated plants (split "seen" or "unseen", `edgetwin bench prism --plants`): for each held-out seed from 2000,
tools/plants' plant of that split and its simulated day, imported as `edgetwin import --plant` does (the
description's words in the store), and bench quality's held-out operator questions about it
(tools/bench/ask_phrasings, the same seeds and draws); relevance counts the question's evidence lines.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterator

SKIP_REASONS = ("none_question", "too_few_windows", "no_relevant_window")


def ask_lines() -> int:
    """Lines per window as `edgetwin ask` uses them by default (plant_text keeps ask's defaults)."""
    from tools.train import plant_text

    return plant_text.LINES


def relevance(text: str, evidence: list[str]) -> int:
    """How many of the evidence lines the window's text holds (whole lines, as stored)."""
    lines = set(text.splitlines())
    return sum(1 for e in evidence if e in lines)


PLANT_SPLITS = ("seen", "unseen")  # generated plants (tools/plants), as bench quality's two sides
PLANT_SEEDS = range(2000, 3000)  # their held-out seeds (tools/bench/quality.PLANT_SEED0 on)


def _seed_questions(seed: int, split: str = "held-out") -> Iterator[tuple[Path, str, str, dict[str, Any]]]:
    """(store path, question, kind, truth) for every question of one plant seed; the store lives while iterated."""
    if split in PLANT_SPLITS:
        yield from _plant_questions(seed, split)
        return
    from tools.train import plant_text, qa_corpus

    with tempfile.TemporaryDirectory(prefix="bench-prism-") as tmp:
        db = Path(tmp) / "node.db"
        plant_text.build_store(db, qa_corpus.node_log(seed))
        for question, kind, truth in plant_text.question_specs(seed):
            yield db, question, kind, truth


def _plant_questions(seed: int, split: str) -> Iterator[tuple[Path, str, str, dict[str, Any]]]:
    """A generated plant's day imported as `edgetwin import --plant` does, and its held-out operator questions
    (tools/bench/ask_phrasings: free and templated words; "never" ones have no evidence), as bench quality asks
    them of the same seeds."""
    from tools.bench import quality

    day, qs = quality.day_questions(split, seed)
    with tempfile.TemporaryDirectory(prefix="bench-prism-") as tmp:
        db = quality.import_day(day, Path(tmp), "%s%d" % (split, seed))
        for q in qs:
            kind = "none" if q.truth.get("none") or not q.evidence else q.kind
            yield db, q.text, kind, {"evidence": q.evidence}


def ask_candidates(db: Path, question: str, limit: int, lines: int) -> dict[str, Any]:
    """ask's retrieval of one question: the windows' texts in retrieve's order, how they were found."""
    from host import qa

    found = qa.retrieve(db, question, limit=limit, lines=lines)
    return {"texts": [w.text for w in found.windows], "pinned": found.pinned, "matched": found.matched,
            "how": found.how}


def ask_questions(split: str, n: int, limit: int, k: int, lines: int | None = None, seeds: int | None = None
                  ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Up to n usable questions of the split (seed order, so a smaller n is a prefix of a larger), from at most
    `seeds` plant seeds, and the skipped ones counted by reason. Each: {"question", "kind", "seed", "split",
    "texts", "relevance", "pinned", "matched", "how"}. split: "validation" or "held-out" (the node's simulator,
    tools/train/qa_corpus's seeds), "seen" or "unseen" (generated plants)."""
    from tools.train import qa_corpus

    lines = ask_lines() if lines is None else lines
    out: list[dict[str, Any]] = []
    skipped = {r: 0 for r in SKIP_REASONS}
    for seed in (PLANT_SEEDS if split in PLANT_SPLITS else qa_corpus.split_seeds(split))[:seeds]:
        for db, question, kind, truth in _seed_questions(seed, split):
            if kind == "none":
                skipped["none_question"] += 1
                continue
            got = ask_candidates(db, question, limit, lines)
            rel = [relevance(t, truth["evidence"]) for t in got["texts"]]
            if len(rel) < k + 1:
                skipped["too_few_windows"] += 1
            elif not any(rel):
                skipped["no_relevant_window"] += 1
            else:
                out.append(dict(got, question=question, kind=kind, seed=seed, split=split, relevance=rel))
            if len(out) >= n:
                return out, skipped
    return out, skipped


def with_limit(questions: list[dict[str, Any]], limit: int, lines: int | None = None) -> list[dict[str, Any]]:
    """The same questions retrieved with another candidate limit (the bench's curve), seed by seed."""
    lines = ask_lines() if lines is None else lines
    by_seed: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for q in questions:
        by_seed.setdefault((q.get("split", "held-out"), q["seed"]), []).append(q)
    out = []
    for (split, seed), qs in by_seed.items():
        wanted = {q["question"] for q in qs}
        for db, question, kind, truth in _seed_questions(seed, split):
            if question in wanted:
                got = ask_candidates(db, question, limit, lines)
                out.append(dict(got, question=question, kind=kind, seed=seed, split=split,
                                relevance=[relevance(t, truth["evidence"]) for t in got["texts"]]))
                wanted.discard(question)
    return out
