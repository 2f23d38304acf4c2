"""Notes on generated plant days, seen and unseen: the node's episodes of a day's lines, each note written greedily
by a target over the node's stream, judged against the lines and the description (tools/bench/note_judge.py).

    eps = plantday.episodes(day)                           # the node's cut of a tools/plants/plantday.Day (its first 25)
    texts = plant_notes.write(bt, [eps_a, eps_b])          # every episode's note, the streams in lockstep
    side = plant_notes.side("unseen", roles, 150, stock_n=150)   # a side's figures, each role's

The episodes are the node's (firmware/episodes.py, docs/NODE.md): a tick holding event lines is an event episode of
them (the last episode.MAX_LINES), a tick of sample lines only a summary episode once episode.SUMMARY_S plant
seconds have passed since the last. The stream is shared/episode.py's text: the system prompt, then per episode its
prompt and the target's note (greedy, until a newline token or episode.MAX_NOTE tokens), over a sink + window cache
with the rp2040_pico geometry (tools/train/corpus.SINK, WINDOW): what greedy speculative decoding commits at the
gateway. `main_in_window`: the share of judged episodes whose main line's machine id is still in the cache's
window once the prompt is committed (main_in_window()): a note can name the machine of the others only by its
first token or by a guess, so this share bounds what any target reaches on this geometry. Summary episodes stay in
the stream, as on the node, and are not judged; the first PER_PLANT event episodes
of each plant day are, plant after plant (seeds from quality.PLANT_SEED0) until the side has its notes. The stock
target writes the notes of the first stock_n of them (whole streams of the first plants, `stock_subset` says so).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from shared import episode

PER_PLANT = 25  # event episodes judged per plant day at most: notes from several plants, not one busy day
HOURS = 8.0  # a note day (05:30 to 13:30 site time): its faults, alarms and trips come in the first hours


def write(bt, streams: list[list[dict[str, Any]]], log: Callable[[str], None] | None = None) -> list[list[str]]:
    """Every episode's note, greedy, per stream: the target over each stream (system prompt, then per episode its
    prompt and note, the previous tokens as context in the sink + window cache), the streams in lockstep (one
    batched forward per token)."""
    import numpy as np

    from tools.train import corpus

    tok = corpus.tokenizer()  # the node's tokenizer (shared/bpe.py), as corpus.py and the gateway's stream
    stops = corpus.stop_ids(tok)
    model = bt.target
    caches = [model.new_cache(corpus.SINK, corpus.WINDOW, corpus.STAGED) for _ in streams]
    unfed = [tok.encode(episode.system_prompt(), special=True) for _ in streams]
    after_cap = [False] * len(streams)
    out: list[list[str]] = [[] for _ in streams]
    n_ep = max((len(s) for s in streams), default=0)
    for e in range(n_ep):
        if log:
            log("notes (%s): episode %d of %d over %d streams" % (bt.name, e + 1, n_ep, len(streams)))
        act = [k for k, s in enumerate(streams) if e < len(s)]
        parts = []
        for k in act:  # the previous note's stop token goes in with this prompt, as on the node
            parts.append(unfed[k] + tok.encode(episode.prompt_text(streams[k][e]["lines"], after_cap[k])))
        last = _feed(model, [caches[k] for k in act], parts)
        notes: list[list[int]] = [[] for _ in act]
        live = list(range(len(act)))
        while live:
            nxt = []
            for i in live:
                t = int(np.argmax(last[i]))
                notes[i].append(t)
                if stops[t] or len(notes[i]) >= episode.MAX_NOTE:
                    unfed[act[i]] = [t]
                    after_cap[act[i]] = not stops[t]
                else:
                    nxt.append(i)
            if nxt:
                outs = _feed(model, [caches[act[i]] for i in nxt], [[notes[i][-1]] for i in nxt])
                for i, o in zip(nxt, outs):
                    last[i] = o
            live = nxt
        for k, ids in zip(act, notes):
            out[k].append(tok.decode(ids))
    return out


def _feed(model, caches: list, parts: list[list[int]]) -> list:
    """Feed parts[i] to caches[i], all in lockstep chunks of the cache's staging room; commit; each one's last
    logits row."""
    from tools.train import corpus

    last: list = [None] * len(caches)
    pos = [0] * len(caches)
    while True:
        batch, who = [], []
        for i, (c, toks) in enumerate(zip(caches, parts)):
            if pos[i] < len(toks):
                chunk = toks[pos[i]:pos[i] + corpus.STAGED]
                batch.append((c, chunk))
                who.append((i, len(chunk)))
        if not batch:
            return last
        for (i, n), lg in zip(who, model.forward_many(batch, last_only=True)):
            caches[i].commit(n)
            last[i] = lg[-1]
            pos[i] += n


# ---------------------------------------------------------------------------------------------- a side's figures


def note_days(split: str, n_notes: int, per_plant: int = PER_PLANT, hours: float = HOURS, seed0: int = 2000):
    """(day, its episodes) per generated plant of the split (held-out seeds from seed0) until n_notes event
    episodes; the last plant's stream ends at the side's n_notes-th."""
    from tools.plants import plantday
    from tools.plants import generate

    out, total, seed = [], 0, seed0
    while total < n_notes:
        day = plantday.day(generate.plant(seed, split), seed, hours=hours)
        eps = plantday.episodes(day, min(per_plant, n_notes - total))
        got = sum(e["kind"] == "event" for e in eps)
        if got:
            out.append((day, eps))
            total += got
        seed += 1
    return out


def main_in_window(lines: list[str], main, tok) -> bool:
    """Whether the machine id of the episode's main line (note_judge.window's first) starts within the last WINDOW
    tokens of the episode's prompt: what the cache still holds once the prompt is committed, so what the note's
    tokens after its first can read. An id further back is gone before the note can copy it."""
    from tools.train import corpus

    text = episode.prompt_text(lines)
    mine = episode.prompt_line(main.text)
    at = text.rfind(mine)
    if at < 0 or not main.machine or main.machine not in mine:
        return False
    before = len(tok.encode(text[:at + mine.index(main.machine)]))
    return before >= len(tok.encode(text)) - corpus.WINDOW


def rate(xs: list[bool]) -> float | None:
    return round(sum(1 for x in xs if x) / len(xs), 4) if xs else None


def figures(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """The note figures of a role on a side, and by the kind of the episode's main line."""
    by: dict[str, list] = {}
    for v in verdicts:
        by.setdefault(v["main"] or "none", []).append(v)
    return {"notes": len(verdicts), "main_in_window": rate([v["in_window"] for v in verdicts if "in_window" in v]),
            "note_factuality": rate([v["factual"] for v in verdicts]),
            "note_coverage": rate([v["covered"] for v in verdicts]),
            "note_hallucination_rate": rate([v["hallucinated"] for v in verdicts]),
            "invented_cause_rate": rate([v["invented_cause"] for v in verdicts]),
            "note_vacuous_rate": rate([v["vacuous"] for v in verdicts]),
            "notes_by_kind": {k: {"n": len(x), "factuality": rate([v["factual"] for v in x]),
                                  "coverage": rate([v["covered"] for v in x])} for k, x in sorted(by.items())}}


def side(split: str, roles: list[tuple[str, Any]], n_notes: int, stock_n: int, per_plant: int = PER_PLANT,
         hours: float = HOURS, seed0: int = 2000, dump: list | None = None,
         log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A side's notes: the event episodes of its plant days, each role's note judged; roles other than "target"
    write only the first stock_n (the streams of the first plants, cut at the stock_n-th event episode)."""
    from tools.bench import note_judge
    from tools.train import corpus

    tok = corpus.tokenizer()
    t0 = time.perf_counter()
    days = note_days(split, n_notes, per_plant, hours, seed0)
    reach = []  # per day, per episode: main_in_window (the episode's, whichever role writes its note)
    for day, eps in days:
        pw = note_judge.words_of(day.desc)
        mains = [note_judge.window(ep["lines"], pw)["main"] if ep["kind"] == "event" else [] for ep in eps]
        reach.append([bool(m) and main_in_window(ep["lines"], m[0][1], tok) for ep, m in zip(eps, mains)])
    out: dict[str, Any] = {"notes": sum(e["kind"] == "event" for _, eps in days for e in eps),
                           "note_plants": [d.desc["name"] for d, _ in days],
                           "note_kinds": sorted({m["kind"] for d, _ in days for m in d.desc["machines"]})}
    for role, bt in roles:
        streams = [eps for _, eps in days] if role == "target" else _first(days, stock_n)
        t = time.perf_counter()
        texts = write(bt, streams, log)
        verdicts = []
        for (day, eps), notes, held in zip(days, texts, reach):
            for ep, note, in_window in zip(eps, notes, held):
                if ep["kind"] != "event":
                    continue
                v = note_judge.note_verdict(note, ep["lines"], day.desc, ep["recent"])
                v["in_window"] = in_window
                verdicts.append(v)
                if dump is not None:
                    dump.append({"type": "plant_note", "split": split, "seed": day.seed, "role": role,
                                 "target": bt.name, "tick": ep["tick"], "lines": ep["lines"], "recent": ep["recent"],
                                 "note": note, "verdict": v})
        fig = figures(verdicts)
        fig["notes_s"] = round(time.perf_counter() - t, 1)
        out[role] = fig
        if log:
            log("%s notes (%s): factuality %s, coverage %s, hallucination %s, invented cause %s over %d in %.0f s"
                % (split, bt.name, fig["note_factuality"], fig["note_coverage"], fig["note_hallucination_rate"],
                   fig["invented_cause_rate"], fig["notes"], fig["notes_s"]))
    out["note_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _first(days: list, n: int) -> list[list[dict[str, Any]]]:
    """The streams of the first plants, cut so that they hold the first n event episodes."""
    out, left = [], n
    for _, eps in days:
        if left <= 0:
            break
        cut = []
        for e in eps:
            if left <= 0:
                break
            cut.append(e)
            left -= e["kind"] == "event"
        out.append(cut)
    return out
