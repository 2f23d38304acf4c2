"""The draft's training corpus: plant log streams with short notes, formatted exactly as the node's stream.

    python -m tools.train.corpus [--split train|validation|heldout|all] [--streams N] [--jobs N]

A stream is one plant seed (shared/plant.py, the same simulator as tools/train/gen_logs.py): a seeded process
fault is injected so every stream holds alarms and usually a trip; every tick with event lines (alarm,
state, lost: shared/episode.is_event) becomes an episode of those lines (the last MAX_LINES), and a tick
with none, once episode.SUMMARY_S plant seconds have passed since the last summary, a summary episode of
its sample lines ("kind": "event" / "summary"): exactly the episodes the node drafts (firmware/episodes.py,
docs/NODE.md "What the node annotates"). The stream's text is shared/episode.py's: the system prompt, then per
episode the lines, the cue "\\nNote:", and a note ended by a newline token (or cut at MAX_NOTE tokens).

Two notes per episode:
- "target": the gateway's default target (host/target_delta.choose: SmolLM2-135M-Instruct with the plant
  adapters of models/target merged in, the stock model where there are none; host/llama_np.py), over a
  sink + ring KV cache with the node's geometry (rp2040_pico: sink 4, window 28), the stream's previous
  tokens as context. Greedy on every validation and held-out stream and on the even training seeds: exactly
  the text greedy speculative decoding commits, what the held-out acceptance is measured on. On the odd
  training seeds the notes are sampled at temperature 0.7 from the target's whole distribution (the
  gateway's T = 0.7 rule, host/verifier.PRow, a specdec.Rng seeded by the plant seed): the text speculative
  sampling commits, so the draft also learns the target where its own sampled notes take it (on-policy);
- "template": written from the simulator's ground truth (machine, event, the fault developing on it,
  the trend of the alarmed signal over the last five samples).
`note` is the target's when it reads as a domain note (ends with a newline, names the machine or the
signal, no repetition loop, plain ASCII) and the template's otherwise; `source` says which. Counts are
in the split's summary.

A second family of streams, "plant": generated plants of the training kinds and naming schemes (tools/plants,
split "seen"; PLANT_STREAMS), the first PLANT_EPISODES episodes of each simulated day as the benchmarks cut them
(tools/plants/plantday.episodes), noted the same way; their template notes come from the lines and the
description (tools/train/line_notes.reference). So the draft learns the target's notes on plants with other
machines, names and signals, not the built-in plant's alone. The benchmarks' plants (seeds >= 2000, and every
held-out kind and scheme) are never made here.

Splits by plant seed (either family): < 1000 train, 1000..1999 validation, >= 2000 held-out (built-in only). Streams are generated in
lockstep batches (one target forward per token for the whole batch) and cached under build/corpus/
(git-ignored), one file per seed and configuration: the same seed always gives the same bytes.
Each stream file (.npz) holds the token ids of the target-text stream, a mask of the note tokens, and
the target's top-K logits at every position (row t = the distribution of token t + 1) with the log-sum-
exp of the full row, for distillation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared import episode, plant  # noqa: E402

CACHE = ROOT / "build" / "corpus"
SINK, WINDOW, STAGED = 4, 28, 64  # the target's cache: the rp2040_pico geometry (the node's view)
TOPK = 32
EPISODES = 8  # per stream
SAMPLE_EVERY = 60
MAX_TICKS = 3 * 3600
VERSION = 5  # bump when the text or the selection changes (part of the cache key)
SAMPLED_T = 0.7  # the odd training seeds' notes: sampled at this temperature (see the module docstring)

SPLITS = {"train": (0, 1000), "validation": (1000, 2000), "heldout": (2000, 1 << 31)}
DEFAULT_STREAMS = {"train": 320, "validation": 2, "heldout": 6}
# The shipped corpus's lockstep grouping (part of the recipe, see generate_default): train seeds
# 0..FIRST_TRAIN_BATCH-1 in one batch (the first corpus), then batches of TRAIN_BATCH from there.
FIRST_TRAIN_BATCH, TRAIN_BATCH = 26, 12
# The "plant" family: generated plants of the training kinds and naming schemes (tools/plants, split "seen"),
# each day cut into the node's episodes as the benchmarks cut theirs (tools/plants/plantday.episodes), the first
# PLANT_EPISODES of it. Their seeds split as the built-in plant's; the benchmarks' plants (2000 and on, and every
# unseen kind and scheme) are never made here.
FAMILIES = ("builtin", "plant")
PLANT_STREAMS = {"train": 160, "validation": 2}
PLANT_EPISODES = 12
PLANT_BATCH = 20

PROCESS_FAULTS = {"P": ("bearing_wear", "cavitation", "overheating", "clogged_filter"),
                  "M": ("bearing_wear", "overheating"), "C": ("bearing_wear", "overheating", "clogged_filter"),
                  "CV": ("bearing_wear", "overheating")}
SENSOR_FAULTS = ("sensor_dropout", "stuck_value", "drift")

TAG_KEY = {"bearing_temp": "T", "winding_temp": "T", "discharge_temp": "T", "gearbox_temp": "T",
           "vibration": "V", "motor_current": "I", "discharge_press": "P", "receiver_press": "P", "flow": "Q",
           "air_flow": "Q", "strainer_dp": "dP", "intake_filter_dp": "dP", "speed": "N", "belt_speed": "S"}
TAG_WORDS = {"bearing_temp": "bearing temperature", "winding_temp": "winding temperature",
             "discharge_temp": "discharge temperature", "gearbox_temp": "gearbox temperature",
             "vibration": "vibration", "motor_current": "motor current", "discharge_press": "discharge pressure",
             "receiver_press": "receiver pressure", "flow": "flow", "air_flow": "air flow",
             "strainer_dp": "strainer dP", "intake_filter_dp": "intake filter dP", "speed": "speed",
             "belt_speed": "belt speed"}
UNITS = {"T": "C", "V": "mm/s", "I": "A", "P": "bar", "Q": "m3/h", "dP": "kPa", "N": "rpm", "S": "m/s"}
TAG_CHECK = {"T": "check cooling and lubrication", "V": "check bearings and alignment", "I": "check the load",
             "P": "check valves and demand", "Q": "check suction and valves", "dP": "check the filter",
             "N": "check the drive", "S": "check the belt"}
INTERLOCKS = {"HIHI_TEMP": "high temperature", "HIHI_VIB": "high vibration", "HIHI_CURR": "high current",
              "HIHI_DP": "high filter dP", "LOLO_FLOW": "low flow", "HIHI_PRESS": "high pressure"}
FAULT_WORDS = {"bearing_wear": ("bearing wear", "check lubrication and bearings"),
               "cavitation": ("cavitation", "check suction pressure and inlet"),
               "overheating": ("overheating", "check cooling"),
               "clogged_filter": ("a clogged filter", "clean the filter"),
               "sensor_dropout": ("a sensor dropping out", "check the sensor wiring"),
               "stuck_value": ("a stuck sensor", "check the sensor"),
               "drift": ("sensor drift", "recalibrate the sensor")}
LEVEL_WORDS = {"HI": "high", "HIHI": "very high", "LO": "low", "LOLO": "very low", "BAD": "bad"}
DOMAIN_WORDS = ("pump", "motor", "compressor", "conveyor", "alarm", "trip", "temperature", "vibration",
                "pressure", "flow", "current", "filter", "bearing", "running", "stopped", "start", "machine")


def _family(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError("family %r: one of %s" % (family, ", ".join(FAMILIES)))
    return family


def split_of(seed: int) -> str:
    for name, (lo, hi) in SPLITS.items():
        if lo <= seed < hi:
            return name
    raise ValueError("seed %r is not a plant seed" % (seed,))


def seeds_of(split: str, n: int) -> list[int]:
    if split not in SPLITS:
        raise ValueError("split %r: one of %s" % (split, ", ".join(SPLITS)))
    lo, hi = SPLITS[split]
    if n < 1 or lo + n > hi:
        raise ValueError("%d streams do not fit split %s" % (n, split))
    return list(range(lo, lo + n))


# ---- the plant side: episodes, ground truth, templates ------------------------------------------------

def _parse_sample(rest: str) -> tuple[str, dict[str, float]]:
    parts = rest.split()
    vals = {}
    for kv in parts[2:]:
        k, _, v = kv.partition("=")
        num = v.rstrip("Cmm/sAbar3hkPrpm")
        try:
            vals[k] = float(num)
        except ValueError:
            pass
    return parts[0], vals


def plant_episodes(seed: int, n_episodes: int = EPISODES) -> list[dict]:
    """The first n_episodes event ticks of seed's plant, each with its lines and what the truth says."""
    rng = random.Random(seed * 7919 + 17)
    p = plant.Plant(seed, sample_every=SAMPLE_EVERY, fault_every_h=1)
    mach = p.ids[rng.randrange(p.n)]
    inject_at = rng.randrange(120, 900)
    kind = mach.split("-")[0]
    if rng.random() < 0.8:
        inj = (mach, rng.choice(PROCESS_FAULTS[kind]), rng.choice((3, 4, 4, 5)), None, 0)
    else:
        inj = (mach, rng.choice(SENSOR_FAULTS), rng.choice((2, 3)), None, 0)
    hist: dict[tuple[str, str], list[float]] = {}
    truth: list[dict] = []
    version = -1
    out: list[dict] = []
    next_summary = 0  # the first sample tick is a summary episode, as on the node (firmware/episodes.py)
    for t in range(MAX_TICKS):
        if t == inject_at:
            try:
                p.inject(inj[0], inj[1], inj[2], inj[3], inj[4])
            except plant.PlantError:
                pass
        n = p.step()
        events = []
        samples = []
        for i in range(n):
            ln = p.line(i)
            rest = ln[21:]
            if episode.is_event(ln):
                events.append(ln)
            else:
                samples.append(ln)
                m, vals = _parse_sample(rest)
                for k, v in vals.items():
                    h = hist.setdefault((m, k), [])
                    h.append(v)
                    if len(h) > 6:
                        del h[0]
        if p.faults.version != version:
            version = p.faults.version
            known = dict(((f["machine"], f["fault"], f["since_tick"]), f) for f in truth)
            for f in p.truth():
                known[(f["machine"], f["fault"], f["since_tick"])] = f
            truth = sorted(known.values(), key=lambda f: f["since_tick"])
        kind = "event" if events else None
        if not events and samples and episode.SUMMARY_S and t >= next_summary:
            kind = "summary"
            next_summary = t + episode.SUMMARY_S
        if kind:
            ep = {"tick": t, "kind": kind, "lines": (events or samples)[-episode.MAX_LINES:],
                  "faults": [dict(machine=f["machine"], fault=f["fault"], since=f["since_tick"])
                             for f in truth if f["since_tick"] <= t and (f.get("until_tick") is None or f["until_tick"] >= t)],
                  "trend": {}}
            for ln in ep["lines"]:
                w = ln[21:].split()
                if w[0] in ("ALARM", "ACK", "CLEAR") and len(w) > 3 and w[3] in TAG_KEY:
                    h = hist.get((w[2], TAG_KEY[w[3]]), [])
                    if len(h) >= 2:
                        ep["trend"][w[2] + " " + w[3]] = round((h[-1] - h[0]) / (len(h) - 1), 2)
            out.append(ep)
            if len(out) >= n_episodes:
                break
    return out


def plant_day_episodes(seed: int, n_episodes: int = PLANT_EPISODES) -> list[dict]:
    """The first n_episodes of generated plant `seed`'s day (split "seen"), each with its lines, the plant's name,
    its machines and its reference note from the lines and the description (tools/train/line_notes.py: no fault
    model is read, so a template note never names a cause the lines do not show)."""
    from host import plantdesc
    from tools.plants import generate, plantday
    from tools.train import line_notes

    desc = generate.plant(seed, "seen")
    d = plantdesc.from_dict(desc)
    rng = random.Random(seed * 7919 + 17)
    out = []
    for e in plantday.episodes(plantday.day(desc, seed, hours=line_notes.HOURS), n_episodes)[:n_episodes]:
        out.append({"tick": e["tick"], "kind": e["kind"], "lines": e["lines"], "plant": desc["name"],
                    "machines": [m["id"] for m in desc["machines"]], "faults": [],
                    "template": line_notes.reference(e["lines"], d, rng)})
    return out


def _fault_on(ep: dict, machine: str) -> dict | None:
    fs = [f for f in ep["faults"] if f["machine"] == machine]
    return fs[-1] if fs else None


def summary_note(ep: dict) -> str:
    """A summary episode's note: the first machine with a fault developing (by the truth), else the
    sampled machines and their states."""
    states = [ln[21:].split()[:2] for ln in ep["lines"]]
    for m, st in states:
        f = _fault_on(ep, m)
        if f:
            return " %s %s with %s developing; %s.\n" % (m, st.lower(), *FAULT_WORDS[f["fault"]])
    return " Routine readings: %s; no alarm.\n" % ", ".join("%s %s" % (m, st.lower()) for m, st in states[:2])


def template_note(ep: dict) -> str:
    """A note from the ground truth: the most important line's machine and event, the fault developing
    on that machine, and the trend of an alarmed signal. Starts with a space, ends with a newline. A generated
    plant's episode carries its own (plant_day_episodes)."""
    if "template" in ep:
        return ep["template"]
    if ep.get("kind") == "summary":
        return summary_note(ep)
    rank = {"STATE": 1, "ALARM": 2, "CLEAR": 0, "ACK": 0, "SHELVE": 0, "UNSHELVE": 0, "LOST": 0}
    best = None
    for ln in ep["lines"]:
        w = ln[21:].split()
        r = rank.get(w[0], 0) + (3 if w[0] == "STATE" and "TRIPPED" in w[2].split("->")[-1] else 0)
        if best is None or r > best[0]:
            best = (r, w)
    w = best[1]
    verb = w[0]
    if verb == "LOST":
        return " Log events were lost this second; check the node's event queue.\n"
    if verb == "STATE":
        m = w[1]
        a, _, b = w[2].partition("->")
        cause = w[3] if len(w) > 3 else ""
        f = _fault_on(ep, m)
        if b == "TRIPPED":
            why = INTERLOCKS.get(cause.partition("=")[2], "an interlock")
            if f:
                return " %s tripped on %s, likely %s; %s before restart.\n" % (m, why, *FAULT_WORDS[f["fault"]])
            return " %s tripped on %s; inspect it before restart.\n" % (m, why)
        if a == "TRIPPED":
            return " %s reset by the operator after the trip; watch the restart.\n" % m
        if b == "STARTING":
            who = "the operator" if "operator" in cause else "its duty schedule"
            return " %s starting on %s.\n" % (m, who)
        if b == "RUNNING":
            if f:
                return " %s is running with %s developing; %s.\n" % (m, *FAULT_WORDS[f["fault"]])
            return " %s is up to speed and running normally.\n" % m
        if b == "STOPPING":
            return " %s stopping on schedule.\n" % m
        return " %s has stopped.\n" % m
    level, m, tag = w[1], w[2], w[3]
    words = TAG_WORDS.get(tag, tag)
    val = w[4]
    if verb == "ALARM":
        f = _fault_on(ep, m)
        key = TAG_KEY.get(tag, "T")
        tr = ep["trend"].get(m + " " + tag)
        trend = ""
        if tr is not None and abs(tr) >= 0.05:
            trend = ", %s %.1f %s/min" % ("rising" if tr > 0 else "falling", abs(tr), UNITS[key])
        if f:
            return " %s %s %s at %s%s, likely %s; %s.\n" % (m, words, LEVEL_WORDS.get(level, level), val, trend,
                                                            *FAULT_WORDS[f["fault"]])
        return " %s %s %s at %s%s; %s.\n" % (m, words, LEVEL_WORDS.get(level, level), val, trend, TAG_CHECK[key])
    if verb == "ACK":
        return " Operator acknowledged the %s alarm on %s.\n" % (words, m)
    if verb == "CLEAR":
        return " %s %s back to normal at %s.\n" % (m, words, val)
    if verb == "SHELVE":
        return " The %s alarm on %s is shelved for an hour.\n" % (words, m)
    return " The %s alarm on %s is unshelved.\n" % (words, m)


def note_is_good(note: str, ep: dict) -> bool:
    """Does the target's note read as a domain note? (ends in a newline, names the machine or a signal
    or a domain word, no repetition loop, printable ASCII, at least two words: the domain target's
    "C-301 stopping (schedule)" is a whole note)"""
    if not note.endswith("\n") or len(note.split()) < 2:
        return False
    body = note.strip()
    if any(ord(c) < 32 or ord(c) > 126 for c in body):
        return False
    words = body.lower().replace(",", " ").replace(".", " ").split()
    if len(words) >= 6 and len(set(words)) < 0.6 * len(words):
        return False
    if "1.1.1" in body or "..." in body:
        return False
    if "machines" in ep:  # a generated plant: its own ids, whatever their shape
        machines = {m.lower() for m in ep["machines"]}
    else:
        text = " ".join(ep["lines"]).lower()
        machines = {w for w in text.split() if "-" in w and w[:1] in "pmc"}
    lower = body.lower()
    return any(mc in lower for mc in machines) or any(d in lower for d in DOMAIN_WORDS)


# ---- the target side: lockstep batched greedy ---------------------------------------------------------

_TOK = None
_TARGET = None


def tokenizer():
    """The full SmolLM2 tokenizer (shared/bpe.py), its blob cached under build/corpus/."""
    global _TOK
    if _TOK is None:
        from shared import bpe
        path = CACHE / "tok_full.bin"
        if not path.is_file():
            from host.weights import smollm2_gguf
            from tools.formats import tokenizer_export as te
            CACHE.mkdir(parents=True, exist_ok=True)
            blob = te.build_blob(te.read_gguf(smollm2_gguf()))
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, path)
        _TOK = bpe.BPE(path.read_bytes())
    return _TOK


def target():
    """The gateway's default target (host/target_delta.choose), loaded once."""
    global _TARGET
    if _TARGET is None:
        from host import qa, target_delta
        path, domain, _label = target_delta.choose(None)
        _TARGET = qa.load_text_model(path, domain)[0]
    return _TARGET


def target_id() -> str:
    """Which target writes the notes (part of the cache key): the domain target's merged SHA-256, or stock."""
    from host import target_delta
    return "domain-" + target_delta.read_manifest()["merged_sha256"][:16] if target_delta.installed() else "stock"


def sampled(seed: int) -> bool:
    """Whether the stream's notes are sampled at SAMPLED_T (odd training seeds, either family) rather than greedy."""
    return split_of(seed) == "train" and seed % 2 == 1


def stop_ids(tok) -> np.ndarray:
    """Boolean per token id: True if the token ends a note (its bytes hold a newline, or EOS)."""
    cache = CACHE / "stop_ids.npy"
    if cache.is_file():
        return np.load(cache)
    buf = bytearray(256)
    out = np.zeros(49152, bool)
    for t in range(49152):
        n = tok.token_bytes(t, buf, 0)
        out[t] = episode.is_stop(buf[:n])
    out[2] = True
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(cache, out)
    return out


def config_key() -> str:
    h = hashlib.sha256(json.dumps([VERSION, SINK, WINDOW, STAGED, TOPK, EPISODES, SAMPLE_EVERY, MAX_TICKS, PLANT_EPISODES,
                                   episode.SYSTEM, episode.CUE, episode.MAX_NOTE, episode.MAX_LINES,
                                   episode.SUMMARY_S, SAMPLED_T, target_id()]).encode())
    return h.hexdigest()[:10]


def stream_path(seed: int, family: str = "builtin") -> Path:
    prefix = "" if _family(family) == "builtin" else family + "-"
    return CACHE / config_key() / ("%s%s-%05d.npz" % (prefix, split_of(seed), seed))


class _Stream:
    def __init__(self, seed, model, tok, family="builtin"):
        self.seed = seed
        self.family = family
        self.eps = plant_episodes(seed) if _family(family) == "builtin" else plant_day_episodes(seed)
        self.cache = model.new_cache(SINK, WINDOW, STAGED)
        self.ids: list[int] = []
        self.note_mask: list[int] = []
        self.rows: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self.unfed: list[int] = tok.encode(episode.system_prompt(), special=True)
        self.after_cap = False
        self.ep_meta: list[dict] = []
        self.rng = self.prow = None
        if sampled(seed):
            from host.verifier import PRow
            from shared import specdec
            self.rng, self.prow = specdec.Rng(seed + 1), PRow

    def choose(self, logits: np.ndarray) -> int:
        """The note's next token: the target's greedy one, or (sampled streams) a draw at SAMPLED_T."""
        if self.rng is None:
            return int(np.argmax(logits))
        return self.prow(logits, SAMPLED_T, 0).sample(self.rng)

    def add(self, ids, note):
        self.ids += ids
        self.note_mask += [1 if note else 0] * len(ids)


def _topk_rows(logits: np.ndarray, k: int):
    idx = np.argpartition(-logits, k, axis=1)[:, :k]
    vals = np.take_along_axis(logits, idx, 1)
    order = np.argsort(-vals, axis=1)
    idx = np.take_along_axis(idx, order, 1)
    vals = np.take_along_axis(vals, order, 1)
    m = logits.max(axis=1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))).astype(np.float32)
    return idx.astype(np.int32), vals.astype(np.float32), lse


def _feed(model, streams, parts):
    """Feed parts[i] (a list of ids) to streams[i] in lockstep chunks; record their rows; commit.
    Returns each stream's last logits row (float32, vocab)."""
    last = [None] * len(streams)
    pos = [0] * len(streams)
    while True:
        batch, who = [], []
        for i, (s, toks) in enumerate(zip(streams, parts)):
            if pos[i] < len(toks):
                chunk = toks[pos[i]:pos[i] + STAGED]
                batch.append((s.cache, chunk))
                who.append((i, chunk))
        if not batch:
            return last
        outs = model.forward_many(batch)
        for (i, chunk), lg in zip(who, outs):
            s = streams[i]
            s.cache.commit(len(chunk))
            base = len(s.ids) - len(parts[i]) + pos[i]  # parts are already appended to s.ids
            idx, vals, lse = _topk_rows(lg, TOPK)
            for r in range(len(chunk)):
                s.rows[base + r] = (idx[r], vals[r], lse[r])
            last[i] = lg[-1]
            pos[i] += len(chunk)


def generate(seeds: list[int], batch: int = 24, log=print, family: str = "builtin") -> list[Path]:
    """Generate (or reuse) the stream files of seeds (of the family); returns their paths."""
    todo = [s for s in seeds if not stream_path(s, family).is_file()]
    for a in range(0, len(todo), batch):
        t0 = time.time()
        _generate_batch(todo[a:a + batch], log, family)
        log("corpus: %s streams %s..%s in %.0f s" % (family, todo[a], todo[min(a + batch, len(todo)) - 1],
                                                     time.time() - t0))
    return [stream_path(s, family) for s in seeds]


def default_batches() -> list[list[int]]:
    """The shipped corpus's lockstep batches: train seeds 0..25 in one batch, the later train seeds in batches
    of TRAIN_BATCH (26..37, 38..49, ...), validation + held-out in another batch. (Batching is part of the
    recipe: float32 sums in a batched matmul depend on the batch, so another grouping can flip a near-tie
    argmax of the target and give a slightly different note.)"""
    train = seeds_of("train", DEFAULT_STREAMS["train"])
    rest = train[FIRST_TRAIN_BATCH:]
    return ([train[:FIRST_TRAIN_BATCH]] + [rest[a:a + TRAIN_BATCH] for a in range(0, len(rest), TRAIN_BATCH)]
            + [seeds_of("validation", DEFAULT_STREAMS["validation"]) + seeds_of("heldout", DEFAULT_STREAMS["heldout"])])


def plant_batches() -> list[list[int]]:
    """The plant family's lockstep batches: its train seeds in batches of PLANT_BATCH, then its validation seeds."""
    train = seeds_of("train", PLANT_STREAMS["train"])
    return [train[a:a + PLANT_BATCH] for a in range(0, len(train), PLANT_BATCH)] + \
        [seeds_of("validation", PLANT_STREAMS["validation"])]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _generate_group(task: tuple[str, list[int]]) -> None:
    """One lockstep batch (family, seeds) in a worker process (generate_default's jobs)."""
    family, seeds = task
    generate(seeds, len(seeds), _stderr, family)


def generate_default(log=print, jobs: int = 1) -> None:
    """The shipped corpus (default_batches of the built-in plant, plant_batches of generated plants), each batch
    as one lockstep batch. jobs > 1 runs the batches in that many processes of one BLAS thread each (the same
    batches, so the same streams: on 2 cores two such processes take about half the time of one process with
    two BLAS threads)."""
    tasks = [("builtin", b) for b in default_batches()] + [("plant", b) for b in plant_batches()]
    if jobs <= 1:
        for family, b in tasks:
            generate(b, len(b), log, family)
        return
    import concurrent.futures
    import multiprocessing

    todo = [t for t in tasks if not all(stream_path(s, t[0]).is_file() for s in t[1])]
    if not todo:
        return
    from tools.environ import ONE_BLAS_THREAD, environ

    # the workers read these when they import numpy (spawned processes inherit the environment)
    with environ(ONE_BLAS_THREAD):
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            for _ in pool.map(_generate_group, todo):
                pass
    log("corpus: %d lockstep batches made in %d processes" % (len(todo), jobs))


def _generate_batch(seeds: list[int], log=None, family: str = "builtin") -> None:
    tok = tokenizer()
    model = target()
    stops = stop_ids(tok)
    streams = [_Stream(s, model, tok, family) for s in seeds]
    for s in streams:  # the system prompt
        s.add(s.unfed, False)
    _feed(model, streams, [s.unfed for s in streams])
    for s in streams:
        s.unfed = []
    n_ep = max(len(s.eps) for s in streams)
    for e in range(n_ep):
        if log:
            log("corpus: episode %d of %d (%d streams)" % (e + 1, n_ep, len(streams)))
        act = [s for s in streams if e < len(s.eps)]
        parts = []
        for s in act:
            ep = s.eps[e]
            pr = tok.encode(episode.prompt_text(ep["lines"], s.after_cap))
            s.add(s.unfed, True)  # the previous note's stop token (a note token, fed now)
            s.add(pr, False)
            parts.append(s.unfed + pr)
            s.unfed = []
            s.ep_meta.append({"start": len(s.ids) - len(pr), "prompt_len": len(pr)})
        last = _feed(model, act, parts)
        notes = {id(s): [] for s in act}
        live = list(range(len(act)))
        while live:
            nxt = []
            for i in live:
                s = act[i]
                t = s.choose(last[i])
                notes[id(s)].append(t)
                if stops[t] or len(notes[id(s)]) >= episode.MAX_NOTE:
                    s.unfed = [t]  # fed with the next episode's prompt
                    s.after_cap = not stops[t]
                else:
                    nxt.append(i)
            # append every decoded token but the stopping ones (those go in with the next feed)
            feed_streams, feed_parts = [], []
            for i in nxt:
                s = act[i]
                t = notes[id(s)][-1]
                s.add([t], True)
                feed_streams.append(s)
                feed_parts.append([t])
            if feed_streams:
                outs = _feed(model, feed_streams, feed_parts)
                for i, o in zip(nxt, outs):
                    last[i] = o
            live = nxt
        for s in act:
            ids = notes[id(s)]
            ep = s.eps[e]
            text = tok.decode(ids)
            tmpl = template_note(ep)
            good = note_is_good(text, ep)
            s.ep_meta[-1].update(note_len=len(ids), target_note=text, template_note=tmpl,
                                 note=text if good else tmpl, source="target" if good else "template",
                                 decode="T=%g" % SAMPLED_T if s.rng is not None else "greedy",
                                 kind=ep["kind"], lines=ep["lines"], faults=ep["faults"], tick=ep["tick"])
    for s in streams:  # the last stop token, so every row exists
        s.add(s.unfed, True)
    _feed(model, streams, [s.unfed for s in streams])
    for s in streams:
        n = len(s.ids)
        idx = np.zeros((n, TOPK), np.int32)
        vals = np.zeros((n, TOPK), np.float16)
        lse = np.zeros(n, np.float32)
        for r, (a, b, c) in s.rows.items():
            idx[r], vals[r], lse[r] = a, b, c
        path = stream_path(s.seed, family)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        meta = {"seed": s.seed, "split": split_of(s.seed), "family": family, "episodes": s.ep_meta,
                "geometry": {"sink": SINK, "window": WINDOW}}
        np.savez_compressed(tmp, ids=np.array(s.ids, np.int32), note=np.array(s.note_mask, np.uint8),
                            topk_ids=idx, topk_logits=vals, lse=lse, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
        os.replace(tmp, path)


def load_stream(path: Path) -> dict:
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    d["meta"] = json.loads(bytes(d["meta"]).decode())
    return d


def load_split(split: str, n: int | None = None, family: str = "builtin") -> list[dict]:
    if _family(family) == "plant" and split not in PLANT_STREAMS:
        raise ValueError("the plant family has no %s split (the benchmarks' plants are never made here)" % split)
    seeds = seeds_of(split, n or (DEFAULT_STREAMS if family == "builtin" else PLANT_STREAMS)[split])
    return [load_stream(p) for p in generate(seeds, family=family)]


def load_training(split: str) -> list[dict]:
    """A training or validation split of both families: the built-in plant's streams, then the generated plants'."""
    return load_split(split) + load_split(split, family="plant")


def summary(streams: list[dict]) -> dict:
    eps = [e for s in streams for e in s["meta"]["episodes"]]
    src = [e["source"] for e in eps]
    return {"streams": len(streams), "episodes": len(eps), "tokens": int(sum(len(s["ids"]) for s in streams)),
            "note_tokens": int(sum(int(s["note"].sum()) for s in streams)),
            "notes_by_target": src.count("target"), "notes_by_template": src.count("template"),
            "notes_sampled": sum(1 for e in eps if e.get("decode", "greedy") != "greedy"),
            "target_fraction": round(src.count("target") / max(1, len(src)), 3)}


def corpus_text(stream: dict) -> str:
    """The stream's text with the chosen notes (target where good, template elsewhere)."""
    out = episode.system_prompt()
    after = False
    for e in stream["meta"]["episodes"]:
        out += episode.episode_text(e["lines"], e["note"], after)
        after = not e["note"].endswith("\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.train.corpus", description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="all", choices=["all", *SPLITS])
    ap.add_argument("--streams", type=int, help="streams per split (default: %s)" % DEFAULT_STREAMS)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--jobs", type=int, default=1, help="processes for the default corpus's batches")
    ap.add_argument("--text", help="write the chosen-note text of the streams to this file")
    args = ap.parse_args(argv)
    splits = list(SPLITS) if args.split == "all" else [args.split]
    report = {}
    texts = []
    want = {sp: seeds_of(sp, args.streams or DEFAULT_STREAMS[sp]) for sp in splits}
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.split == "all" and not args.streams:
        generate_default(log, jobs=max(1, args.jobs))
    generate([s for sp in splits for s in want[sp]], args.batch, log=log)
    for sp in splits:
        streams = [load_stream(stream_path(s)) for s in want[sp]]
        report[sp] = summary(streams)
        texts += [corpus_text(s) for s in streams]
        if sp in PLANT_STREAMS and not args.streams:
            streams = load_split(sp, family="plant")
            report["plant_" + sp] = summary(streams)
            texts += [corpus_text(s) for s in streams]
    if args.text:
        Path(args.text).write_text("\n".join(texts))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
