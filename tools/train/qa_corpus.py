"""Operator questions with the log windows that answer them, built from the plant simulator's ground truth.

Each plant seed is one node: `Plant(seed, 5 machines, sample_every=60)` run for 6 simulated hours with a
seeded schedule of injected faults (process faults of severity 3-4 that develop into trips, sensor faults,
and on purpose the same fault on a second machine and a second fault on the same machine, which make the
hard negatives). The node's log is cut into windows of consecutive lines of about `window_tokens` WordPiece
tokens (all-MiniLM-L6-v2's vocabulary); the question plus the window fit in `window_tokens`.

Questions come from what the simulator knows happened (`truth()`) and the event lines of the log:

    trip      "why did P-101 trip?"                     answer: the STATE ...->TRIPPED line
    onset     "when did C-301 start overheating?"       answer: the first alarm raised after the fault's onset
    which     "which pump is cavitating?"               answer: the machine's alarms during the fault
    sensor    "why is the gearbox temperature of CV-401 missing?"  answer: its BAD / false alarms
    ack/clear "when was the HIHI vibration alarm on P-101 raised at 06:50 acknowledged?"  answer: the ACK/CLEAR line

Relevance: 2 = the window holds an answer line; 1 = related (an event line of the same machine within
the fault's span +-10 min, or the window is within 5 min of the answer); 0 = other. Candidates: the
relevant windows, some related ones, hard negatives (the same machine at another time, the same kind of
event on another machine), random fill; shuffled. Splits by plant seed: train < 1000 <= validation <
2000 <= held-out. Deterministic; cached under build/qa_corpus/ (git-ignored).

    from tools.train.qa_corpus import load_split
    qs = load_split("held-out", n=40, n_candidates=20, window_tokens=512)
    python -m tools.train.qa_corpus --split validation --n 5      # print a few questions
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `shared` and `host` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared import plant  # noqa: E402

VERSION = 2  # bump when the generation changes: it names the cache directory
HOURS = 6
N_MACHINES = 5
SAMPLE_EVERY = 60
QUESTION_ROOM = 40  # tokens kept free in a window for [CLS] question [SEP] ... [SEP]
SPLITS = {"train": (0, 1000), "validation": (1000, 2000), "held-out": (2000, 3000)}
_ALIASES = {"heldout": "held-out", "held_out": "held-out", "test": "held-out", "val": "validation",
            "valid": "validation"}
DEFAULT_SEEDS = {"train": 40, "validation": 10, "held-out": 12}
ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = ROOT / "build" / "qa_corpus" / ("v%d" % VERSION)

PROCESS = {"pump": ("bearing_wear", "cavitation", "overheating", "clogged_filter"),
           "motor": ("bearing_wear", "overheating"),
           "compressor": ("bearing_wear", "overheating", "clogged_filter"),
           "conveyor": ("bearing_wear", "overheating")}
SENSOR = ("sensor_dropout", "drift", "stuck_value")

FAULT_NOUN = {"bearing_wear": ("bearing wear", "a worn bearing", "bearing damage"),
              "cavitation": ("cavitation", "cavitation"),
              "overheating": ("overheating", "excess heat"),
              "clogged_filter": ("a clogged filter", "filter clogging", "a blocked filter")}
FAULT_VERB = {"bearing_wear": ("wearing its bearing", "showing bearing wear", "developing a bearing fault"),
              "cavitation": ("cavitating", "showing cavitation"),
              "overheating": ("overheating", "running hot"),
              "clogged_filter": ("clogging its filter", "showing a clogged filter")}
TAG_NOUN = {"bearing_temp": "bearing temperature", "winding_temp": "winding temperature",
            "discharge_temp": "discharge temperature", "gearbox_temp": "gearbox temperature",
            "vibration": "vibration", "motor_current": "motor current", "discharge_press": "discharge pressure",
            "receiver_press": "receiver pressure", "flow": "flow", "air_flow": "air flow",
            "strainer_dp": "strainer differential pressure", "intake_filter_dp": "intake filter pressure drop",
            "speed": "speed", "belt_speed": "belt speed"}
LEVEL_NOUN = {"HI": ("high", "HI"), "HIHI": ("high-high", "HIHI"), "LO": ("low", "LO"),
              "LOLO": ("low-low", "LOLO"), "BAD": ("bad-value", "BAD")}


class CorpusError(ValueError):
    """Bad arguments to the corpus builder (unknown split, non-positive sizes)."""


# ---------------------------------------------------------------- the node's log


def _tokenizer():
    from host.weights import minilm_dir
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def _schedule(seed: int, kinds: list[str], ids: list[str]) -> list[tuple[int, str, str, int, str | None, int]]:
    """Seeded fault injections: (tick, machine, fault, severity, signal, duration_s), in tick order."""
    rng = random.Random(seed * 7919 + 17)
    ticks = HOURS * 3600
    out = []
    order = list(range(len(ids)))
    rng.shuffle(order)
    first = order[0]
    f0 = rng.choice(PROCESS[kinds[first]])
    out.append((rng.randrange(300, 3600), ids[first], f0, rng.choice((3, 3, 4)), None, 0))
    # the same fault on another machine (hard negatives for "which machine ..." and "why did X trip")
    others = [m for m in order[1:] if f0 in PROCESS[kinds[m]]]
    if others and rng.random() < 0.7:
        m = rng.choice(others)
        out.append((rng.randrange(3600, ticks - 7200), ids[m], f0, rng.choice((3, 4)), None, 0))
    # a second process fault on the first machine, later (same machine, other time)
    f1 = rng.choice(PROCESS[kinds[first]])
    out.append((rng.randrange(ticks // 2, ticks - 5400), ids[first], f1, rng.choice((3, 4)), None, 0))
    for _ in range(2):
        m = rng.randrange(len(ids))
        out.append((rng.randrange(300, ticks - 5400), ids[m], rng.choice(PROCESS[kinds[m]]), rng.choice((3, 4)),
                    None, 0))
    for _ in range(2):
        m = rng.randrange(len(ids))
        out.append((rng.randrange(300, ticks - 3600), ids[m], rng.choice(SENSOR), rng.choice((2, 3, 4)), None,
                    rng.randrange(1200, 3600)))
    return sorted(out)


def simulate(seed: int, hours: float = HOURS) -> dict[str, Any]:
    """Run the node of `seed`: its lines (with ticks), the machines and the merged fault truth.

    A shorter run gives a prefix of the lines of a longer one (the fault schedule is fixed by the seed)."""
    p = plant.Plant(seed, N_MACHINES, sample_every=SAMPLE_EVERY, fault_every_h=0)
    kinds = [plant.KINDS[k] for k in p.kind]
    pending = _schedule(seed, kinds, list(p.ids))
    lines: list[str] = []
    ticks: list[int] = []
    faults: dict[tuple, dict] = {}
    version = -1
    for t in range(int(hours * 3600)):
        while pending and pending[0][0] <= t:
            _, m, f, sev, sig, dur = pending.pop(0)
            try:
                p.inject(m, f, sev, sig, dur)
            except plant.PlantError:  # the slot is busy: the schedule just skips it
                pass
        for i in range(p.step()):
            lines.append(p.line(i))
            ticks.append(t)
        if p.faults.version != version:
            version = p.faults.version
            for f in p.truth():
                faults[(f["machine"], f["fault"], f["since_tick"])] = f
    return {"seed": seed, "ids": list(p.ids), "kinds": kinds, "lines": lines, "ticks": ticks,
            "truth": sorted(faults.values(), key=lambda f: (f["since_tick"], f["machine"]))}


def node_log(seed: int, cache: bool = True) -> dict[str, Any]:
    """simulate(seed) plus WordPiece token counts per line, cached in build/qa_corpus/."""
    path = CACHE_DIR / ("node_%d.json.gz" % seed)
    if cache and path.is_file():
        try:
            with gzip.open(path, "rt", encoding="ascii") as fh:
                return json.load(fh)
        except (OSError, ValueError, EOFError):
            pass  # a torn cache file: rebuild it
    node = simulate(seed)
    enc = _tokenizer().encode_batch(node["lines"], add_special_tokens=False)
    node["ntok"] = [len(e.ids) for e in enc]
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp%d" % os.getpid())
        with gzip.open(tmp, "wt", encoding="ascii") as fh:
            json.dump(node, fh)
        os.replace(tmp, path)
    return node


# ---------------------------------------------------------------- events and windows


def parse_event(line: str) -> dict[str, Any] | None:
    """An alarm or state line -> its fields; None for samples and LOST lines."""
    parts = line.split()
    if len(parts) < 4:
        return None
    verb = parts[1]
    if verb == "STATE":
        before, _, after = parts[3].partition("->")
        return {"verb": "STATE", "machine": parts[2], "from": before, "to": after, "cause": parts[4]}
    if verb in ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE") and len(parts) == 8:
        return {"verb": verb, "level": parts[2], "machine": parts[3], "tag": parts[4], "value": parts[5],
                "prio": int(parts[6][5:]), "state": parts[7]}
    return None


def windows(node: dict[str, Any], window_tokens: int) -> list[dict[str, Any]]:
    """Cut the log into consecutive windows of at most window_tokens - QUESTION_ROOM tokens (at least 1 line)."""
    budget = max(8, window_tokens - QUESTION_ROOM)
    out = []
    lines, ticks, ntok = node["lines"], node["ticks"], node["ntok"]
    start, used = 0, 0
    for i, n in enumerate(ntok):
        if i > start and used + n > budget:
            out.append((start, i))
            start, used = i, 0
        used += n
    out.append((start, len(lines)))
    return [{"i0": a, "i1": b, "tick0": ticks[a], "tick1": ticks[b - 1]} for a, b in out]


def _hhmm(node: dict[str, Any], tick: int) -> str:
    return plant.iso(plant.START_EPOCH + tick)[11:16]


def _ms(tick: int) -> int:
    return (plant.START_EPOCH + tick) * 1000


# ---------------------------------------------------------------- questions


def machine_name(rng: random.Random, machine: str, kind: str, ids: list[str]) -> str:
    """How a question names a machine: "P-101", "pump P-101", "the pump P-101", "the pump" or "pump 1"."""
    forms = [machine, machine, "%s %s" % (kind, machine), "the %s %s" % (kind, machine)]
    same = [i for i in ids if i.split("-")[0] == machine.split("-")[0]]
    if len(same) == 1:
        forms.append("the %s" % kind)
    else:
        forms.append("%s %d" % (kind, int(machine.split("-")[1]) % 100))
    return rng.choice(forms)


def _at(rng: random.Random, hhmm: str, need: bool) -> str:
    if not need and rng.random() < 0.5:
        return ""
    return rng.choice((" at %s", " around %s", " at about %s", " (%s)")) % hhmm


def trip_question(rng: random.Random, who: str, at: str) -> str:
    """'why did P-101 trip?' and its other wordings (at: "" or " at 06:40"), a third of them capitalised.
    tools/train/plant_text.py asks about trips that never happened in the same words, so the wording never
    tells the model whether the trip is in the log."""
    text = rng.choice(("why did %s trip%s?", "what tripped %s%s?", "what caused the %s trip%s?",
                       "%s tripped%s, what happened?", "which interlock stopped %s%s?",
                       "reason for the %s trip%s?")) % (who, at)
    return text[0].upper() + text[1:] if rng.random() < 0.3 else text


def onset_question(rng: random.Random, who: str, fault: str) -> str:
    """'when did P-101 start cavitating?' and its other wordings (the same for faults that never happened)."""
    return rng.choice(("when did %s start %s?" % (who, rng.choice(FAULT_VERB[fault])),
                       "when did %s begin on %s?" % (rng.choice(FAULT_NOUN[fault]), who),
                       "when was the first sign of %s on %s?" % (rng.choice(FAULT_NOUN[fault]), who),
                       "at what time did %s first show %s?" % (who, rng.choice(FAULT_NOUN[fault]))))


def _questions_of(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Question specs of one node: text, machine, the answer lines' indices, the related tick span."""
    rng = random.Random(node["seed"] * 104729 + 3)
    ids, kinds, lines, ticks = node["ids"], node["kinds"], node["lines"], node["ticks"]
    kind_of = dict(zip(ids, kinds))
    events = []
    for i, line in enumerate(lines):
        e = parse_event(line)
        if e is not None:
            e["i"], e["tick"] = i, ticks[i]
            events.append(e)
    trips = [e for e in events if e["verb"] == "STATE" and e["to"] == "TRIPPED"]
    raises = [e for e in events if e["verb"] == "ALARM" and e["state"] == "RAISED"]
    qs: list[dict[str, Any]] = []

    def add(text: str, machine: str, answer: list[int], lo: int, hi: int, qtype: str, key: str) -> None:
        if answer:
            text = text.replace("the the ", "the ").replace("The the ", "The ")
            qs.append({"question": text, "machine": machine, "answer": sorted(set(answer)), "lo": lo, "hi": hi,
                       "type": qtype, "key": key})

    n_trips = {m: sum(1 for t in trips if t["machine"] == m) for m in ids}
    used_trips = set()
    faults_by_type: dict[str, int] = {}
    for f in node["truth"]:
        faults_by_type[f["fault"]] = faults_by_type.get(f["fault"], 0) + 1
    onsets: set[tuple[str, str]] = set()  # (machine, fault) whose first episode was asked about
    for f in sorted(node["truth"], key=lambda f: f["since_tick"]):
        m, kind, ft = f["machine"], kind_of[f["machine"]], f["fault"]
        lo = f["since_tick"]
        hi = f["until_tick"] if f["until_tick"] is not None else ticks[-1]
        mine = [e for e in raises if e["machine"] == m and lo <= e["tick"] <= hi]
        if ft in PROCESS["pump"]:
            trip = next((t for t in trips if t["machine"] == m and lo <= t["tick"] <= hi), None)
            end = trip["tick"] if trip else hi
            before = [e for e in mine if e["tick"] <= end]
            if trip is not None:
                used_trips.add(trip["i"])
                who = machine_name(rng, m, kind, ids)
                at = _at(rng, _hhmm(node, trip["tick"]), n_trips[m] > 1)
                add(trip_question(rng, who, at), m, [trip["i"]], lo, end, "trip", "%s@%d" % (m, trip["tick"]))
            if before:
                who = machine_name(rng, m, kind, ids)
                text = onset_question(rng, who, ft)  # drawn either way: the questions after it stay the same
                if (m, ft) not in onsets:  # "when did P-101 start cavitating?" asks for the first time it did
                    add(text, m, [before[0]["i"]], lo, end, "onset", "%s:%s@%d" % (m, ft, lo))
                onsets.add((m, ft))
                if rng.random() < 0.6:
                    at = _at(rng, _hhmm(node, before[0]["tick"]), faults_by_type[ft] > 1)
                    noun = rng.choice(("machine", "machine", kind))
                    text = rng.choice(("which %s shows %s%s?" % (noun, rng.choice(FAULT_NOUN[ft]), at),
                                       "which %s is %s%s?" % (noun, rng.choice(FAULT_VERB[ft]), at),
                                       "what %s had %s%s?" % (noun, rng.choice(FAULT_NOUN[ft]), at)))
                    add(text, m, [e["i"] for e in before], lo, end, "which", "%s:%s@%d" % (m, ft, lo))
        else:
            tag_alarms = [e for e in mine if f["signal"] in (None, e["tag"])]
            if not tag_alarms or f["signal"] is None:
                continue
            who = machine_name(rng, m, kind, ids)
            tag = TAG_NOUN.get(f["signal"], f["signal"])
            if ft == "sensor_dropout":
                text = rng.choice(("why is the %s reading of %s missing?" % (tag, who),
                                   "why does %s report bad %s values?" % (who, tag),
                                   "which sensor is dropping out on %s?" % who))
            elif ft == "drift":
                text = rng.choice(("is the %s sensor on %s drifting?" % (tag, who),
                                   "why does %s %s keep alarming?" % (who, tag)))
            else:
                text = rng.choice(("is the %s reading of %s stuck?" % (tag, who),
                                   "why does %s %s alarm when nothing changes?" % (who, tag)))
            add(text, m, [e["i"] for e in tag_alarms], lo, hi, "sensor", "%s:%s@%d" % (m, ft, lo))
    # trips without a fault in the truth window (spurious trips from a drifting sensor, etc.)
    for t in trips:
        if t["i"] not in used_trips:
            who = machine_name(rng, t["machine"], kind_of[t["machine"]], ids)
            add("why did %s trip%s?" % (who, _at(rng, _hhmm(node, t["tick"]), n_trips[t["machine"]] > 1)),
                t["machine"], [t["i"]], max(0, t["tick"] - 1800), t["tick"], "trip", "%s@%d" % (t["machine"], t["tick"]))
    # alarm handling: acknowledgement and clearing of a few raised alarms
    picks = [e for e in raises if e["prio"] >= 2]
    rng.shuffle(picks)
    for e in picks[:4]:
        follow = [x for x in events if x["tick"] >= e["tick"] and x["i"] > e["i"] and x.get("machine") == e["machine"]
                  and x.get("tag") == e["tag"] and x.get("level") == e["level"]]
        ack = next((x for x in follow if x["verb"] == "ACK"), None)
        clr = next((x for x in follow if x["verb"] == "CLEAR"), None)
        m = e["machine"]
        who = machine_name(rng, m, kind_of[m], ids)
        lvl = rng.choice(LEVEL_NOUN[e["level"]])
        tag = TAG_NOUN.get(e["tag"], e["tag"])
        at = _hhmm(node, e["tick"])
        same = sum(1 for x in raises if x["machine"] == m and x["tag"] == e["tag"])
        when = (" raised at %s" % at) if same > 1 or rng.random() < 0.5 else ""
        if ack is not None and (clr is None or rng.random() < 0.5):
            text = rng.choice(("when was the %s %s alarm on %s%s acknowledged?" % (lvl, tag, who, when),
                               "did the operator acknowledge the %s alarm of %s%s?" % (tag, who, when),
                               "who acked the %s %s alarm on %s%s?" % (lvl, tag, who, when)))
            add(text, m, [ack["i"]], e["tick"], ack["tick"], "ack", "%s:%s:%s@%d" % (m, e["tag"], e["level"], e["tick"]))
        elif clr is not None:
            text = rng.choice(("when did the %s %s alarm on %s%s clear?" % (lvl, tag, who, when),
                               "when did the %s of %s return to normal after the alarm%s?" % (tag, who, when)))
            add(text, m, [clr["i"]], e["tick"], clr["tick"], "clear", "%s:%s:%s@%d" % (m, e["tag"], e["level"], e["tick"]))
    seen = set()
    out = []
    for q in qs:  # one question per (type, event)
        if (q["type"], q["key"]) not in seen:
            seen.add((q["type"], q["key"]))
            out.append(q)
    return out


def _label(node: dict[str, Any], q: dict[str, Any], w: dict[str, Any], ev_by_machine: dict[str, list[int]]) -> int:
    if any(w["i0"] <= i < w["i1"] for i in q["answer"]):
        return 2
    ticks = node["ticks"]
    lo, hi = q["lo"] - 600, q["hi"] + 600
    for i in ev_by_machine.get(q["machine"], ()):
        if w["i0"] <= i < w["i1"] and lo <= ticks[i] <= hi:
            return 1
    key = ticks[q["answer"][0]]
    if w["tick1"] >= key - 300 and w["tick0"] <= key + 300:
        return 1
    return 0


def _hardness(node: dict[str, Any], q: dict[str, Any], w: dict[str, Any]) -> int:
    """2 = same machine other time or the same kind of answer line on another machine; 1 = other events."""
    lines = node["lines"]
    key_lines = [lines[i] for i in q["answer"]]
    key_shape = set()
    for k in key_lines:
        e = parse_event(k)
        if e is not None:
            key_shape.add((e["verb"], e.get("to"), e.get("tag"), e.get("level")))
    score = 0
    for i in range(w["i0"], w["i1"]):
        e = parse_event(lines[i])
        if e is None or e["verb"] == "STATE" and e["to"] not in ("TRIPPED",):
            continue
        if e["machine"] == q["machine"] or (e["verb"], e.get("to"), e.get("tag"), e.get("level")) in key_shape:
            return 2
        score = 1
    return score


def build_questions(seed: int, n_candidates: int = 20, window_tokens: int = 512, cache: bool = True
                    ) -> list[dict[str, Any]]:
    """All questions of one node with their candidate windows (see the module docstring)."""
    node = node_log(seed, cache)
    wins = windows(node, window_tokens)
    ev_by_machine: dict[str, list[int]] = {}
    for i, line in enumerate(node["lines"]):
        e = parse_event(line)
        if e is not None:
            ev_by_machine.setdefault(e["machine"], []).append(i)
    out = []
    for qi, q in enumerate(_questions_of(node)):
        rng = random.Random((seed * 1009 + qi) * 31 + window_tokens)
        labels = [_label(node, q, w, ev_by_machine) for w in wins]
        rel2 = [j for j, r in enumerate(labels) if r == 2]
        rel1 = [j for j, r in enumerate(labels) if r == 1]
        zero = [j for j, r in enumerate(labels) if r == 0]
        rng.shuffle(rel2)
        rng.shuffle(rel1)
        pick = rel2[:max(1, min(3, n_candidates // 4))]
        pick += rel1[:min(len(rel1), max(0, min(4, n_candidates // 4)))]
        hard = [j for j in zero if _hardness(node, q, wins[j]) == 2]
        mid = [j for j in zero if j not in set(hard) and _hardness(node, q, wins[j]) == 1]
        rng.shuffle(hard)
        rng.shuffle(mid)
        room = n_candidates - len(pick)
        take_hard = hard[:max(0, room // 2)]
        pick += take_hard
        rest = [j for j in zero if j not in set(take_hard)]
        rng.shuffle(rest)
        chosen_mid = [j for j in mid if j not in set(take_hard)][:max(0, (n_candidates - len(pick)) // 2)]
        pick += chosen_mid
        pick += [j for j in rest if j not in set(chosen_mid)][:max(0, n_candidates - len(pick))]
        pick = pick[:n_candidates]
        rng.shuffle(pick)
        cands = []
        for j in pick:
            w = wins[j]
            cands.append({"text": "\n".join(node["lines"][w["i0"]:w["i1"]]), "node": "node-%d" % seed,
                          "t0_ms": _ms(w["tick0"]), "t1_ms": _ms(w["tick1"]), "relevance": labels[j]})
        out.append({"question": q["question"], "type": q["type"], "machine": q["machine"], "seed": seed,
                    "answer_lines": [node["lines"][i] for i in q["answer"]], "candidates": cands})
    return out


def split_seeds(split: str) -> range:
    """The seed range of a split: train 0..999, validation 1000..1999, held-out 2000.. ."""
    s = _ALIASES.get(split, split)
    if s not in SPLITS:
        raise CorpusError("unknown split %r: use train, validation or held-out" % (split,))
    return range(*SPLITS[s])


def load_split(split: str, n: int | None = None, n_candidates: int = 20, window_tokens: int = 512
               ) -> list[dict[str, Any]]:
    """Questions of a split: each {"question", "candidates": [{"text", "node", "t0_ms", "t1_ms", "relevance"}]}.

    n: how many questions (None: all questions of the split's default number of seeds, train 40,
    validation 10, held-out 12 nodes); taken node by node in seed order, so a smaller n is a prefix of a larger.
    Extra keys per question: "type", "machine", "seed", "answer_lines".
    """
    seeds = split_seeds(split)
    s = _ALIASES.get(split, split)
    for name, v in (("n_candidates", n_candidates), ("window_tokens", window_tokens)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise CorpusError("%s must be a positive integer, got %r" % (name, v))
    if window_tokens < QUESTION_ROOM + 24:
        raise CorpusError("window_tokens must be at least %d, got %d" % (QUESTION_ROOM + 24, window_tokens))
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise CorpusError("n must be a positive integer or None, got %r" % (n,))
    out: list[dict[str, Any]] = []
    limit = DEFAULT_SEEDS[s] if n is None else len(seeds)
    for seed in seeds[:limit]:
        out += build_questions(seed, n_candidates, window_tokens)
        if n is not None and len(out) >= n:
            return out[:n]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="qa_corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="validation")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--window-tokens", type=int, default=512)
    ap.add_argument("--stats", action="store_true", help="print counts instead of the questions")
    args = ap.parse_args(argv)
    try:
        qs = load_split(args.split, args.n, args.candidates, args.window_tokens)
    except CorpusError as e:
        ap.error(str(e))
    if args.stats:
        by_type: dict[str, int] = {}
        for q in qs:
            by_type[q["type"]] = by_type.get(q["type"], 0) + 1
        rel = [sum(1 for c in q["candidates"] if c["relevance"] == r) for q in qs for r in (0, 1, 2)]
        print(json.dumps({"questions": len(qs), "by_type": by_type, "relevance_counts": {
            str(r): sum(rel[r::3]) for r in (0, 1, 2)}}, indent=1))
        return 0
    for q in qs:
        print("Q:", q["question"], "[%s %s seed %d]" % (q["type"], q["machine"], q["seed"]))
        print("   answer:", q["answer_lines"][0])
        print("   relevance:", [c["relevance"] for c in q["candidates"]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
