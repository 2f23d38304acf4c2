"""Reference texts from the plant simulator's ground truth: the facts of every event episode, reference notes
in the node's episode format, and operator questions with the exact prompt `ask` builds and a reference answer.

    episode_facts(ep, limits)  -> the facts a right note states (machine, signal, value, limit, trend, event
                                  kind, what it likely means), from corpus.plant_episodes' episode
    note_streams(split, n)     -> [{"seed", "episodes": [{"lines", "note", "facts"}]}]    (n plant seeds)
    qa_examples(split, n)      -> [{"seed", "question", "kind", "truth", "prompt", "sources", "answer"}]  (n questions)
    handling_examples(split, n) -> the same, acknowledgement / clear / onset / sensor questions only (n, from
                                  seeds qa_examples does not reach)
    python -m tools.train.plant_text --split train --kind notes|qa|handling --n N --out FILE.jsonl

Episodes are tools/train/corpus.py's (plant_episodes: the event ticks of a seeded stream, the node's episode
format of shared/episode.py). Notes are short enough for shared/episode.MAX_NOTE tokens of SmolLM2's own
tokenizer (the GGUF's, as host/qa.bpe_tokenizer builds it) and worded by a seeded choice among phrasings.
Questions are tools/train/qa_corpus.py's (plus "none" questions, at most a fifth), asked of a store built
from that seed's node log (host/store.LogStore), retrieved and reranked exactly as host/qa.ask does
(retrieve, the shipped PRISM reranker, fit_sources, prompt_text), so training and inference see the same
windows. Splits by plant seed (corpus.SPLITS). Results are cached under build/plant_text/ (git-ignored),
keyed by VERSION and the parameters; the same seed always gives the same texts. tools/train/plant_judge.py
judges texts against these facts (docs/QUALITY.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from pathlib import Path
from typing import Any, Callable

if __name__ == "__main__":  # one BLAS thread (as tools/bench/qa.py): on shared cores its threads stall PRISM
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared import episode, plant  # noqa: E402
from tools.train import corpus, qa_corpus  # noqa: E402
from tools.train.corpus import INTERLOCKS, TAG_WORDS  # noqa: E402
from tools.train.line_notes import note_tokenizer, note_tokens  # noqa: E402
from tools.train.plant_judge import interlock_tag  # noqa: E402

VERSION = 2  # bump when a text, a fact or the selection changes (it names the cache directory)
CACHE = ROOT / "build" / "plant_text" / ("v%d" % VERSION)
K, LINES, MAX_TOKENS = 3, 6, 64  # host/cmd_ask.py's defaults (and qa.CANDIDATES)
NONE_SHARE = 0.2  # at most this share of the questions have "nothing of the kind" as the right answer
LEVEL = {"HI": "high", "HIHI": "very high", "LO": "low", "LOLO": "very low", "BAD": "bad"}
FAULT = {"bearing_wear": ("bearing wear", "worn bearing"), "cavitation": ("cavitation",),
         "overheating": ("overheating",), "clogged_filter": ("clogged filter", "filter clogging"),
         "sensor_dropout": ("sensor dropout", "sensor dropping out"), "stuck_value": ("stuck sensor",),
         "drift": ("sensor drift", "drifting sensor")}
SENSOR_FAULTS = ("sensor_dropout", "stuck_value", "drift")
RANK = {"trip": 6, "sensor_lost": 5, "alarm": 4, "lost": 3, "state": 2, "clear": 1, "ack": 1, "shelve": 0}


def say(msg: str) -> None:
    sys.stderr.write("plant_text: %s\n" % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------- facts


def alarm_limits(seed: int) -> dict[tuple[str, str, str], str]:
    """(machine, tag, level) -> the alarm point's limit as the line would print it ('7.1mm/s'), for the
    plant corpus.plant_episodes runs for seed (limits are fixed at construction)."""
    p = plant.Plant(seed, sample_every=corpus.SAMPLE_EVERY, fault_every_h=1)
    out = {}
    buf = bytearray(plant.LINE_MAX)
    for m in range(p.n):
        k = p.kind[m]
        for j in range(p.npts[m]):
            pt = m * plant.MAXP + j
            ch = p.pch[pt]
            lv = p.bank.level[pt]
            if lv == plant.BAD:
                continue
            n = p._put_value(buf, 0, k, ch, p.bank.limit[pt])  # noqa: SLF001 (the line's own number format)
            out[(p.ids[m], p.signal_name(m, ch), plant.LEVELS[lv].decode())] = buf[:n].decode()
    return out


def _event(line: str) -> dict[str, Any]:
    """One event line's fields and its kind (alarm, sensor_lost, ack, clear, shelve, trip, state, lost)."""
    w = line[21:].split()
    if w[0] == "LOST":
        return {"kind": "lost", "machine": None, "value": w[1].partition("=")[2]}
    if w[0] == "STATE":
        a, _, b = w[2].partition("->")
        cause = w[3] if len(w) > 3 else ""
        e = {"kind": "trip" if b == "TRIPPED" else "state", "machine": w[1], "state_from": a, "state_to": b,
             "cause": cause}
        if b == "TRIPPED":
            e["interlock"] = cause.partition("=")[2]
            e["signal"] = interlock_tag(e["interlock"], w[1])
        return e
    verb, level, m, tag, value, state = w[0], w[1], w[2], w[3], w[4], w[6]
    kind = {"ALARM": "alarm", "ACK": "ack", "CLEAR": "clear"}.get(verb, "shelve")
    if kind == "alarm" and level == "BAD":
        kind = "sensor_lost"
    return {"kind": kind, "machine": m, "signal": tag, "level": level, "value": value, "astate": state,
            "prio": int(w[5][5:])}


def _trend(rate: float | None, value: str | None) -> str | None:
    """rising / falling / steady from corpus's per-minute rate over the last samples (None: too few samples):
    a change of at least 0.3 units or 5 % of the value over five minutes counts."""
    if rate is None:
        return None
    v = abs(float(value.rstrip("Cmm/sAbar3hkPrpm"))) if value and value != "?" else 0.0
    if abs(rate) * 5 >= max(0.3, 0.05 * v):
        return "rising" if rate > 0 else "falling"
    return "steady"


def episode_facts(ep: dict[str, Any], limits: dict[tuple[str, str, str], str], onset: bool = False
                  ) -> dict[str, Any]:
    """The facts a right note of corpus.plant_episodes' episode `ep` states, and its window (what the note may
    name): see the module docstring and docs/QUALITY.md."""
    evs = [_event(ln) for ln in ep["lines"]]
    best = 0
    for i, e in enumerate(evs):
        if RANK[e["kind"]] > RANK[evs[best]["kind"]]:
            best = i
    e = dict(evs[best])
    if e["kind"] == "trip":  # the value of the trip point's alarm, when the episode holds it
        hit = next((x for x in evs if x["kind"] == "alarm" and x["machine"] == e["machine"]
                    and x["signal"] == e.get("signal") and x["level"] in ("HIHI", "LOLO")), None)
        e["value"] = hit["value"] if hit else None
        e["level"] = hit["level"] if hit else ("LOLO" if e["interlock"].startswith("LOLO") else "HIHI")
    m = e["machine"]
    faults = [f for f in ep["faults"] if f["machine"] == m]
    fault = faults[-1]["fault"] if faults else None
    sig = e.get("signal")
    rate = ep["trend"].get("%s %s" % (m, sig)) if m and sig else None
    e["trend"] = _trend(rate, e.get("value")) if e["kind"] in ("alarm", "ack", "clear", "trip") else None
    e["limit"] = limits.get((m, sig, e.get("level"))) if sig else None
    e["fault"] = fault
    e["onset"] = bool(onset and fault)
    if fault:
        meaning = FAULT[fault][0]
    elif e["kind"] == "trip":
        meaning = INTERLOCKS.get(e["interlock"], "an interlock")
    else:
        meaning = None
    e["meaning"] = meaning
    e["time"] = plant.iso(plant.START_EPOCH + ep["tick"])[:16]
    e["tick"] = ep["tick"]
    e["signal_words"] = TAG_WORDS.get(sig) if sig else None
    # the window: what a note of this episode may name
    from tools.train.plant_judge import window_values

    machines = sorted({x["machine"] for x in evs if x["machine"]})
    signals = sorted({x["signal"] for x in evs if x.get("signal")})
    dirs = set()
    for x in evs:
        lv = x.get("level")
        if lv in ("HI", "HIHI") or x["kind"] == "trip" and x["interlock"].startswith("HIHI"):
            dirs.add("high")
            dirs.add("rising" if x["kind"] in ("alarm", "trip") else "falling" if x["kind"] == "clear" else "high")
        if lv in ("LO", "LOLO") or x["kind"] == "trip" and x["interlock"].startswith("LOLO"):
            dirs.add("low")
            dirs.add("falling" if x["kind"] in ("alarm", "trip") else "rising" if x["kind"] == "clear" else "low")
        if x.get("signal") and x["machine"]:
            r = ep["trend"].get("%s %s" % (x["machine"], x["signal"]))
            t = _trend(r, x.get("value"))
            if t:
                dirs.add(t)
    e["window"] = {"machines": machines, "signals": signals, "values": window_values(ep["lines"]),
                   "directions": sorted(dirs), "tripped": any(x["kind"] == "trip" for x in evs),
                   "faults": sorted({f["fault"] for f in ep["faults"] if f["machine"] in machines})}
    return e


# ---------------------------------------------------------------------------------------------- notes

def _note_forms(f: dict[str, Any]) -> list[tuple[str, bool]]:
    """(phrasing, says what it means) for the facts' event; fields missing make a phrasing unusable."""
    k = f["kind"]
    m, sig, val, tr, mean = f["machine"], f.get("signal_words"), f.get("value"), f.get("trend"), f.get("meaning")
    lvl = LEVEL.get(f.get("level") or "", "")
    out: list[tuple[str, bool]] = []

    def add(text: str, meaning: bool, *need: Any) -> None:
        if all(x not in (None, "", "?") for x in need):
            out.append((" " + text + "\n", meaning))

    if k == "lost":
        add("node lost %s log events this second" % val, False, val)
        add("%s event lines lost; check the node queue" % val, False, val)
        return out
    if k == "trip":
        add("%s tripped on %s %s: %s" % (m, sig, val, mean), True, sig, val, mean)
        add("%s tripped, %s %s" % (m, sig, val), False, sig, val)
        add("%s trip: %s %s, %s" % (m, sig, lvl, tr), False, sig, tr)
        add("%s tripped, %s %s: %s" % (m, sig, tr, mean), True, sig, tr, mean)
        add("%s %s %s, tripped: %s" % (m, sig, tr, mean), True, sig, tr, mean)
        return out
    if k == "state":
        a, b = f["state_from"], f["state_to"]
        cause = "operator" if "operator" in f["cause"] else "schedule"
        if a == "TRIPPED":
            add("%s reset after its trip, now stopped" % m, False)
            add("%s reset by the operator after the trip" % m, False)
        elif b == "STARTING":
            add("%s starting on %s" % (m, "its schedule" if cause == "schedule" else "operator command"), False)
            add("%s starting (%s)" % (m, cause), False)
        elif b == "RUNNING":
            add("%s now running with %s developing" % (m, mean), True, mean)
            add("%s running, watch for %s" % (m, mean), True, mean)
            if not mean:
                add("%s is up and running" % m, False)
                add("%s started, running normally" % m, False)
        elif b == "STOPPING":
            add("%s stopping on %s" % (m, "its schedule" if cause == "schedule" else "operator command"), False)
            add("%s stopping (%s)" % (m, cause), False)
        else:
            add("%s has stopped" % m, False)
            add("%s stopped" % m, False)
        return out
    if k == "sensor_lost":
        add("%s %s reading lost: %s" % (m, sig, mean), True, sig, mean)
        add("%s %s sensor bad, %s" % (m, sig, mean), True, sig, mean)
        add("%s %s reading missing, check the sensor" % (m, sig), False, sig)
        return out
    if k == "alarm":
        add("%s %s %s, %s: %s" % (m, sig, lvl, tr, mean), True, sig, tr, mean)
        add("%s %s %s, likely %s" % (m, sig, tr, mean), True, sig, tr, mean)
        add("%s: %s %s, %s" % (m, sig, tr, mean), True, sig, tr, mean)
        add("%s %s %s, %s" % (m, sig, val, mean), True, sig, val, mean)
        add("%s %s %s at %s" % (m, sig, lvl, val), False, sig, val)
        add("%s %s %s and %s" % (m, sig, lvl, tr), False, sig, tr)
        add("%s %s at %s, %s" % (m, sig, val, tr), False, sig, val, tr)
        return out
    if k == "ack":
        add("%s %s alarm acked, %s" % (m, sig, val), False, sig, val)
        add("%s %s alarm acknowledged, %s" % (m, sig, tr), False, sig, tr)
        add("%s %s alarm acked, %s: %s" % (m, sig, tr, mean), True, sig, tr, mean)
        return out
    if k == "clear":
        add("%s %s back to normal at %s" % (m, sig, val), False, sig, val)
        add("%s %s alarm cleared, %s" % (m, sig, val), False, sig, val)
        add("%s %s alarm cleared, %s" % (m, sig, tr), False, sig, tr)
        return out
    verb = "unshelved" if "UNSHELVE" in f.get("astate", "") else "shelved"
    add("%s %s alarm %s, %s" % (m, sig, verb, val), False, sig, val)
    add("%s %s alarm %s, %s" % (m, sig, verb, tr), False, sig, tr)
    add("%s %s alarm %s for an hour" % (m, sig, verb), False, sig)
    add("%s %s alarm %s" % (m, sig, verb), False, sig)
    return out


def reference_note(f: dict[str, Any], rng: random.Random, count: Callable[[str], int] = note_tokens) -> str:
    """A note for the facts: a seeded pick among the phrasings that fit MAX_NOTE tokens (those saying what the
    event means first). Starts with a space, ends with a newline."""
    forms = [(t, mean) for t, mean in _note_forms(f) if count(t) <= episode.MAX_NOTE]
    if not forms:  # never for the plant's ids and tags (tested); a bare machine + event keeps the format
        return " %s %s\n" % (f.get("machine") or "node", f["kind"].replace("_", " "))
    best = [t for t, mean in forms if mean] or [t for t, _ in forms]
    return rng.choice(best)


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([VERSION, corpus.config_key(), *parts]).encode()).hexdigest()[:10]


def _cached(path: Path, make: Callable[[], Any]) -> Any:
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass  # a torn file: make it again
    data = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp%d" % os.getpid())
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
    return data


def note_stream(seed: int) -> dict[str, Any]:
    """One plant seed's episodes (corpus.plant_episodes), each with its lines, facts and reference note."""
    def make() -> dict[str, Any]:
        rng = random.Random(seed * 65537 + 101)
        limits = alarm_limits(seed)
        eps = []
        seen: set = set()
        for ep in corpus.plant_episodes(seed):
            if ep.get("kind") == "summary":  # the node's periodic summary of samples: no event to judge
                facts = summary_facts(ep)
                eps.append({"lines": ep["lines"], "note": summary_reference(facts, rng), "facts": facts})
                continue
            machines = {ln[21:].split()[1 if ln[21:].startswith("STATE") else 2] for ln in ep["lines"]
                        if not ln[21:].startswith("LOST")}
            onset = any(f["machine"] in machines and (f["machine"], f["fault"], f["since"]) not in seen
                        for f in ep["faults"])
            for f in ep["faults"]:
                if f["machine"] in machines:
                    seen.add((f["machine"], f["fault"], f["since"]))
            facts = episode_facts(ep, limits, onset)
            eps.append({"lines": ep["lines"], "note": reference_note(facts, rng), "facts": facts})
        return {"seed": seed, "episodes": eps}

    return _cached(CACHE / ("notes-%s" % _key("notes", episode.MAX_NOTE, corpus.config_key())) / ("%d.json" % seed), make)


def summary_facts(ep: dict[str, Any]) -> dict[str, Any]:
    """A summary episode's facts: its sampled machines and their states, and a fault the truth says is
    developing on one of them (kind "summary": the note judges leave these episodes out)."""
    states = [tuple(ln[21:].split()[:2]) for ln in ep["lines"]]
    dev = next(((m, st, f["fault"]) for m, st in states for f in ep["faults"] if f["machine"] == m), None)
    return {"kind": "summary", "machines": [m for m, _ in states], "states": [st for _, st in states],
            "developing": list(dev) if dev else None,
            "time": plant.iso(plant.START_EPOCH + ep["tick"])[:16], "tick": ep["tick"]}


def summary_reference(f: dict[str, Any], rng: random.Random, count: Callable[[str], int] = note_tokens) -> str:
    """A summary episode's reference note: the machine with a fault developing, else the first machines'
    states; the longest phrasing that fits episode.MAX_NOTE tokens."""
    if f["developing"]:
        m, st, fault = f["developing"]
        forms = [" %s %s; %s developing.\n" % (m, st.lower(), FAULT[fault][0]), " %s: %s developing.\n" % (m, FAULT[fault][0])]
    else:
        pairs = ["%s %s" % (m, st.lower()) for m, st in zip(f["machines"], f["states"])]
        forms = [" Routine: %s; no alarm.\n" % ", ".join(pairs[:2]), " Routine: %s.\n" % pairs[0], " Routine readings.\n"]
        if rng.random() < 0.5:
            forms[0] = " All normal: %s.\n" % ", ".join(pairs[:2])
    for form in forms:
        if count(form) <= episode.MAX_NOTE:
            return form
    return forms[-1]


def note_streams(split: str, n: int) -> list[dict[str, Any]]:
    """The first n plant seeds of the split (corpus.SPLITS: train, validation, heldout), each
    {"seed", "episodes": [{"lines", "note", "facts"}]}."""
    out = []
    for i, seed in enumerate(corpus.seeds_of(split, n)):
        out.append(note_stream(seed))
        if (i + 1) % 20 == 0 or i + 1 == n:
            say("notes: %d of %d seeds" % (i + 1, n))
    return out


# ---------------------------------------------------------------------------------------------- questions


def level_of(line: str) -> int:
    """The level the node gives a plant line (shared/plant.Plant.line_into): 3 a trip, 2 an alarm raised or
    acknowledged or LOST, 1 every other line."""
    w = line[21:].split(" ", 1)[0]
    if w == "STATE" and "interlock=" in line:
        return 3
    return 2 if w in ("ALARM", "ACK", "LOST") else 1


def build_store(db: Path, node: dict[str, Any]) -> None:
    """A log store holding the node's lines as the gateway stores them (one node, seq = line number)."""
    import calendar
    import time

    from host.store import LogStore

    store = LogStore(db)
    try:
        name = "node-%d" % node["seed"]
        for seq, ln in enumerate(node["lines"]):
            wall = calendar.timegm(time.strptime(ln[:20], "%Y-%m-%dT%H:%M:%SZ")) * 1000
            store.add_log(name, 1, seq, seq % (1 << 30), wall, level_of(ln), ln, commit=False)
        store.commit()
    finally:
        store.close()


def _none_questions(node: dict[str, Any], rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Questions whose right answer is that nothing of the kind happened: a trip of a machine that never
    tripped, a fault that no machine of the kind had (per the truth and the log)."""
    ids, kinds = node["ids"], node["kinds"]
    tripped = {ln[21:].split()[1] for ln in node["lines"] if " STATE " in ln and "->TRIPPED" in ln}
    had = {(f["machine"], f["fault"]) for f in node["truth"]}
    out = []
    # asked in the words and names of the real questions (qa_corpus), without a time: when only these said
    # "why did P-101 trip?" with the bare id, the model learned that wording means "nothing of the kind"
    for m, kind in zip(ids, kinds):
        if m not in tripped:
            out.append({"question": qa_corpus.trip_question(rng, qa_corpus.machine_name(rng, m, kind, ids), ""),
                        "machine": m, "event": "trip"})
        for fault in qa_corpus.PROCESS[kind]:
            if (m, fault) not in had:
                out.append({"question": qa_corpus.onset_question(rng, qa_corpus.machine_name(rng, m, kind, ids),
                                                                 fault),
                            "machine": m, "event": "onset", "fault": fault})
    rng.shuffle(out)
    return out[:n]


def _truth(node: dict[str, Any], q: dict[str, Any]) -> dict[str, Any]:
    """A qa_corpus question's ground truth: the machine, the event, its time, the evidence lines."""
    lines = node["lines"]
    ev = [lines[i] for i in q["answer"]]
    first = ev[0]
    e = _event(first)
    kind = q["type"]
    truth = {"machine": q["machine"], "event": kind, "time": first[:16], "evidence": ev,
             "since": lines[0][:16], "signal": e.get("signal"), "value": e.get("value"), "level": e.get("level"),
             "asks_when": q["question"].lower().startswith(("when", "at what time")), "fault": None}
    tick = node["ticks"][q["answer"][0]]
    fs = [f for f in node["truth"] if f["machine"] == q["machine"] and f["since_tick"] <= tick
          and (f["until_tick"] is None or f["until_tick"] >= tick)]
    if kind == "sensor":
        fs = [f for f in fs if f["fault"] in SENSOR_FAULTS]
    elif kind in ("onset", "which", "trip"):
        fs = [f for f in fs if f["fault"] not in SENSOR_FAULTS] or fs
    truth["fault"] = fs[-1]["fault"] if fs else None
    if kind == "trip":
        truth["interlock"] = e.get("interlock")
        hit = next((lines[j] for j in range(q["answer"][0] - 1, max(-1, q["answer"][0] - 9), -1)  # the trip point
                    if " ALARM %s %s %s " % ("LOLO" if (e.get("interlock") or "").startswith("LOLO") else "HIHI",
                                             q["machine"], e.get("signal")) in lines[j]
                    and lines[j][:20] == first[:20]), None)
        truth["value"] = _event(hit)["value"] if hit else None
        if hit:
            truth["evidence"] = ev + [hit]
    return truth


def _hm(t: str) -> str:
    return t[11:16]


def reference_answer(truth: dict[str, Any], sources: list[dict[str, Any]], rng: random.Random) -> str:
    """The answer the ground truth gives, citing the windows that hold the evidence (see the module docstring)."""
    from tools.train.plant_judge import evidence_windows

    m, ev = truth["machine"], truth["event"]
    if ev == "none":
        what = "trip of %s" % m if truth.get("asked") == "trip" else \
            "%s on %s" % (FAULT.get(truth.get("fault") or "", ("that fault",))[0], m)
        return rng.choice(("Nothing of the kind in the log since %s: no %s.", "Nothing of the kind in the log "
                           "since %s; the windows show no %s.")) % (_hm(truth["since"]), what)
    holding = evidence_windows(truth, sources)
    if not holding:  # retrieval missed the evidence: say what the windows do show
        shown = []
        for s in sources:
            for ln in s["text"].splitlines():
                w = ln.split()
                if len(w) > 3 and w[1] in ("ALARM", "STATE"):
                    shown.append("%s %s at %s [%d]" % (w[3] if w[1] == "ALARM" else w[2],
                                                       "tripped" if "TRIPPED" in ln and w[1] == "STATE" else
                                                       "alarm" if w[1] == "ALARM" else "changed state",
                                                       w[0][:5], s["n"]))
                    break
        return "The retrieved windows do not show it; they show %s." % (", ".join(shown[:2]) or "only samples")
    cite = "".join("[%d]" % n for n in holding[:2])
    t = _hm(truth["time"])
    sig = TAG_WORDS.get(truth.get("signal") or "", "")
    fault = FAULT[truth["fault"]][0] if truth.get("fault") else None
    lvl = LEVEL.get(truth.get("level") or "", "")
    if ev == "trip":
        why = INTERLOCKS.get(truth.get("interlock") or "", "an interlock")
        shown = truth.get("value") and any(truth["value"] in s["text"] for s in sources if s["n"] in holding)
        val = " at %s" % truth["value"] if shown else ""
        tail = ", likely %s" % fault if fault else ""
        if rng.random() < 0.5:
            return "%s tripped at %s on %s (%s%s)%s %s." % (m, t, why, sig, val, tail, cite)
        return "At %s %s tripped on %s (%s%s)%s %s." % (t, m, why, sig, val, tail, cite)
    if ev == "ack":
        return rng.choice(("The %s %s alarm on %s was acknowledged at %s %s.",
                           "The operator acknowledged the %s %s alarm on %s at %s %s.")) % (lvl, sig, m, t, cite)
    if ev == "clear":
        return "The %s %s alarm on %s cleared at %s %s." % (lvl, sig, m, t, cite)
    if ev == "sensor":
        what = {"sensor_dropout": "dropping out", "drift": "drifting", "stuck_value": "stuck"}.get(
            truth.get("fault") or "", "faulty")
        return "The %s sensor of %s is %s: %s alarm at %s %s." % (sig, m, what, lvl or "an", t, cite)
    lead = "%s first showed %s at %s" % (m, fault, t) if fault else "%s alarmed at %s" % (m, t)
    if ev == "which":
        lead = "%s: %s" % (m, "%s, %s alarm raised at %s" % (fault, sig, t) if fault else "%s alarm at %s" % (sig, t))
        return "%s %s." % (lead, cite)
    return "%s: %s alarm %s %s." % (lead, sig, lvl, cite)


_PRISM = None


def _prism():
    global _PRISM
    if _PRISM is None:
        from host import weights
        from host.prism.engine import Prism

        _PRISM = Prism.from_pretrained(str(weights.reranker_dir()))
    return _PRISM


def ask_windows(db: Path, question: str, prism, count: Callable[[str], int]) -> dict[str, Any]:
    """What host/qa.ask gives the target for this question: retrieve, rerank to K, fit_sources, prompt_text."""
    from host import qa

    found = qa.retrieve(db, question, limit=qa.CANDIDATES, lines=LINES)
    k = min(K, len(found.windows))
    chosen, _ = qa.rerank(prism, question, found.windows, k, labels=found.labels, pinned=found.pinned)
    fitted = qa.fit_sources(question, chosen, count, qa.PROMPT_BUDGET, found.vocab)
    note = "" if found.matched else qa.NO_MATCH_NOTE
    return {"prompt": qa.prompt_text(question, fitted, note), "note": note, "matched": found.matched,
            "record_answer": found.answer,
            "sources": [{"n": s.n, "node": s.node, "t0_ms": s.t0_ms, "t1_ms": s.t1_ms, "text": s.text,
                         "prob": round(s.prob, 6)} for s in fitted]}


def question_specs(seed: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(question, kind, truth) of one node: qa_corpus's questions, then "none" ones (at most NONE_SHARE)."""
    node = qa_corpus.node_log(seed)
    rng = random.Random(seed * 7717 + 5)
    specs = [(q["question"], q["type"], _truth(node, q))
             for q in qa_corpus._questions_of(node)]  # noqa: SLF001 (the corpus's own question specs)
    n_none = int(len(specs) * NONE_SHARE / (1 - NONE_SHARE))
    for q in _none_questions(node, rng, n_none):
        specs.append((q["question"], "none", {"machine": q["machine"], "event": "none", "asked": q["event"],
                                              "fault": q.get("fault"), "time": None, "evidence": [],
                                              "since": node["lines"][0][:16], "asks_when": False}))
    return specs


def with_answers(seed: int, qs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rng = random.Random(seed * 7723 + 9)
    for q in qs:
        q["answer"] = reference_answer(q["truth"], q["sources"], rng)
    return qs


def examples_of(seed: int, specs: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The specs' questions asked of a store of the node's log: prompt, sources, note (no answers yet)."""
    import tempfile

    tok = note_tokenizer()

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    out = []
    with tempfile.TemporaryDirectory(prefix="plant-text-") as tmp:
        db = Path(tmp) / "node.db"
        build_store(db, qa_corpus.node_log(seed))
        for text, kind, truth in specs:
            got = ask_windows(db, text, _prism(), count)
            out.append({"seed": seed, "question": text, "kind": kind, "truth": truth, "prompt": got["prompt"],
                        "note": got["note"], "matched": got["matched"], "sources": got["sources"],
                        "record_answer": got["record_answer"]})
            say("qa: seed %d, %d of %d questions retrieved" % (seed, len(out), len(specs)))
    return out


def retrieval_key() -> str:
    """What decides the windows a question gets: ask's retrieval code, the simulator description's words (what
    the questions' words mean) and the reranker's weights (a change to any makes the cached windows stale)."""
    h = hashlib.sha256()
    for rel in ("host/logwords.py", "host/store.py", "host/qa.py", "shared/plant_sim.json",
                "models/reranker/manifest.json"):
        h.update((ROOT / rel).read_bytes())
    return h.hexdigest()[:12]


def qa_seed(seed: int, kinds: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every question of one node (question_specs), or only those of `kinds` (filtered before retrieval),
    with its prompt, sources and reference answer. The windows are cached (retrieval + PRISM take seconds a
    question); the reference answers are cheap and made anew."""
    from host import qa

    specs = question_specs(seed)
    if kinds:
        specs = [s for s in specs if s[1] in kinds]
    name = "qa-handling" if kinds else "qa"
    key = _key("qa", K, qa.CANDIDATES, LINES, qa_corpus.VERSION, *((kinds,) if kinds else ()), retrieval_key())
    qs = _cached(CACHE / ("%s-%s" % (name, key)) / ("%d.json" % seed), lambda: examples_of(seed, specs))
    return with_answers(seed, qs)


def qa_seeds(split: str) -> range:
    return range(*corpus.SPLITS[split]) if split in corpus.SPLITS else qa_corpus.split_seeds(split)


def qa_examples(split: str, n: int) -> list[dict[str, Any]]:
    """n questions of the split, node by node in seed order (a smaller n is a prefix of a larger one); the
    "none" ones are kept at most NONE_SHARE of the n."""
    out: list[dict[str, Any]] = []
    for seed in qa_seeds(split):
        out += qa_seed(seed)
        say("qa: %d questions from seeds %d..%d" % (len(out), qa_seeds(split)[0], seed))
        if len(out) >= n:
            break
    out = out[:n]
    while sum(1 for q in out if q["kind"] == "none") > NONE_SHARE * len(out):
        i = max(j for j, q in enumerate(out) if q["kind"] == "none")
        del out[i]
    return out


HANDLING = ("ack", "clear", "onset", "sensor")  # the kinds of question the first 600 hold too few of
HANDLING_FROM = 100  # their seeds start here (qa_examples' questions come from the first seeds of the split)


def handling_examples(split: str, n: int) -> list[dict[str, Any]]:
    """n questions of the HANDLING kinds (when an alarm was acknowledged or cleared, when a fault began, which
    sensor fails), node by node from seed HANDLING_FROM of the split on: seeds qa_examples does not reach
    (a smaller n is a prefix of a larger one)."""
    seeds = qa_seeds(split)
    first = seeds[0] + HANDLING_FROM
    if first >= seeds[-1]:
        raise ValueError("split %r has no seeds from %d on" % (split, first))
    out: list[dict[str, Any]] = []
    for seed in range(first, seeds[-1] + 1):
        out += qa_seed(seed, HANDLING)
        say("qa: %d handling questions from seeds %d..%d" % (len(out), first, seed))
        if len(out) >= n:
            break
    return out[:n]


# what --kind makes (and make_target's DATA names): each maker takes (split, n)
MAKERS: dict[str, Callable[[str, int], list[Any]]] = {
    "notes": note_streams, "qa": qa_examples, "handling": handling_examples}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.plant_text", description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="train", choices=list(corpus.SPLITS))
    ap.add_argument("--kind", required=True, choices=list(MAKERS))
    ap.add_argument("--n", type=int, required=True, help="plant seeds (notes) or questions (qa)")
    ap.add_argument("--out", required=True, help="JSON lines file (- for stdout)")
    a = ap.parse_args(argv)
    if a.n < 1:
        ap.error("--n must be at least 1")
    try:
        rows = MAKERS[a.kind](a.split, a.n)
    except ValueError as e:
        ap.error(str(e))
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if a.out == "-":
        sys.stdout.write(text)
    else:
        Path(a.out).write_text(text)
    say("wrote %d %s to %s" % (len(rows), "streams" if a.kind == "notes" else "questions", a.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
