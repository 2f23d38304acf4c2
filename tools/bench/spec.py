"""`edgetwin bench spec --json`: the gateway's speedup from deferred speculative decoding, on the node's streams.

For N = 1, 2, 4 nodes, greedy and T = 0.7, on the same target in the same run, every node streams as the
node's annotator does (firmware/annotator.py with its tokenizer: shared/episode.py's format, a PROMPT per
episode, then the drafted note), the text being tools/train/corpus.py's, which the shipped draft was trained on
(the node's annotator drafts the same episodes, firmware/episodes.py, and cuts a PROMPT at prompt_max ids):

- its stream is the plant of a HELD-OUT seed (2000 + node index: tools/train/corpus.py's held-out split, the
  streams tools/train/eval_draft.py measures the draft's card on): the system prompt as the first PROMPT, then
  per episode (corpus.plant_episodes: the first `--episodes` event ticks and periodic summaries) the log lines
  and the cue as a PROMPT, then the note, decoded until a token that ends it (episode.is_stop: its bytes hold a newline;
  or EOS) or episode.MAX_NOTE tokens, then the next episode (after a note cut without a stop token its
  PROMPT starts with a newline, as in the corpus);
- KV geometry: the board profile's (--board, default rp2040_pico: sink 4 + window 28, what the shipped
  draft was trained with) for the node's draft cache AND the gateway's per-stream target cache, as the
  real gateway does (it takes the node's HELLO kv_sink / kv_window); staging: the node's profile
  (at least K x max_pending), the gateway's host/gateway.py rule (max(16, 4K + 1)).

Two modes, the same streams:

- baseline: the gateway decodes the N streams itself, autoregressively, batched: one target.forward_many
  per step over every stream that is inside a note (batching alone already amortises the weights); a
  stream whose note ended moves straight on to its next episode (its stop token and the next PROMPT are
  prefilled, then it samples the note's first token in the same step), so every unfinished stream decodes
  at every step;
- speculative: N drafters (shared/drafter.py under CPython, the nodes' host twins, stop ids = the
  target's newline tokens and EOS, max_len MAX_NOTE) send PROMPT and DRAFT bodies; the gateway
  (host/verifier.py) prefills each new PROMPT, then verifies every stream's pending blocks in one
  forward_many per round. Drafting is not charged (it runs on the nodes).
Greedy, both modes commit the target's greedy notes: `equals_baseline_greedy` checks them token for
token (a near-tie argmax may flip between batch shapes: float32 sums differ slightly).

The target is the gateway's default (`--target domain`: SmolLM2-135M-Instruct with models/target's plant
adapters merged, host/target_delta.choose; `stock`, or a GGUF file). Each (temperature, N) runs `--repeats`
times (default 3) in the same process; an entry is the run of the median speedup, with the median speedup
with prefill and every run's figures (`speedup_runs`). Top-level keys: speedup_nN / speedup_with_prefill_nN
(greedy), speedup_nN_t07 / speedup_with_prefill_nN_t07 (T = 0.7), acceptance_rate / acceptance_rate_t07 (at
the largest N).

Gateway time is process CPU time around the gateway's calls only (speculative: taking the PROMPT and
DRAFT bodies, verify(); baseline: forward + sampling), one BLAS thread. speedup = (committed note
tokens / decode CPU s, speculative) / (the same, baseline): decode only, the prefill of PROMPTs (system
prompt, every episode's lines + cue, and a note's last token when it is fed with the next PROMPT) is
excluded in both modes; speedup_with_prefill charges it in both (both prefill alike: what exceeds the
staging room first, all streams in the same chunked passes, then one batched pass). Also per N and
temperature: committed note tokens, episodes, acceptance_rate (accepted / drafted, counting the
blocks drafted on top of a rejected block, which the gateway drops unjudged; `acceptance_judged_blocks`
= accepted / tokens of judged blocks is the draft card's acceptance definition, `acceptance_per_test` =
accepted / tokens tested), target passes per committed token (decode passes x N / committed tokens),
wire bytes per draft token (DRAFT frames, framing included). Timings on a shared machine move by
+-15 % between runs; acceptance, passes and tokens do not.

Plants (--plants, episode format): "builtin" (default, above: the node's own simulator, held-out seeds; the draft
was distilled on its training seeds and on generated plants of the training kinds) or generated plants of held-out seeds (node i: seed 2000 + i of tools/plants/generate, its
simulated day cut into the node's episodes by tools/plants/plantday.episodes, the first `--episodes`): "seen"
(the training kinds and naming schemes) or "unseen" (held-out kinds and schemes), the plants bench quality's
seen and unseen figures are measured on.

Prompts (--format): "episode" (default, above); "free": one episode per node, a one-line instruction
and six log lines ending in "Note:" (plant seed = node index + 1), decoded for exactly `--tokens` tokens
(no stop ids). --quick: the tiny matched models of tools/spec_models.make_pair, synthetic PROMPT ids
and QUICK_STOPS as the newline ids.

Draft: models/draft/*.mbf if one exists with its card (a file named *card* or README.md), else the INT4
MBF of the target: build/models/smollm2-135m-q4a.mbf (asymmetric INT4, which reproduces the GGUF's Q4_1
layers), else smollm2-135m-q4.mbf (made with `edgetwin convert` if missing). Drafts up to
--integer-max-mb (the shipped one: 0.3 MB) run on shared/llama.py itself, the node's integer runtime;
larger ones on a float twin of the MBF (tools/spec_models.float_target_from_mbf: shared/llama.py takes
~1.4 s per SmolLM2 token under CPython). The JSON says which draft, twin and geometry were used.

    edgetwin bench spec --json                      # the domain target, 3 repeats (~15 min, 2 cores)
    edgetwin bench spec --json --quick              # tiny matched models, seconds (smoke test)
    edgetwin bench spec --json --format free --tokens 48 --window 252 --draft build/models/smollm2-135m-q4a.mbf
"""

from __future__ import annotations

import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_v] = "1"  # one BLAS thread; must be set before numpy is first imported

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from array import array  # noqa: E402
from pathlib import Path  # noqa: E402
from host.usage import Parser

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SYSTEM = "You annotate industrial plant logs. For each excerpt write one short note on what happened."
PLANT_SEED0 = 2000  # --plants seen/unseen: held-out seeds, as bench quality's (tools/bench/quality.PLANT_SEED0)
QUICK_STOPS = (5, 9)  # --quick: the tiny models' "newline" ids (both episode endings occur; tested)


def _numpy_late() -> bool:
    """numpy was imported before this module set the thread variables (BLAS may run threaded)."""
    return "numpy" in sys.modules and os.environ.get("_EDGETWIN_BENCH_SPEC_CHILD") != "1"


def plant_prompts(n: int, lines: int = 6, seconds: int = 900) -> list[str]:
    """One free-format prompt per node from shared/plant.py (the lines tools/train/gen_logs.py writes), seed =
    node index + 1."""
    from shared import plant

    out = []
    for i in range(n):
        p = plant.Plant(i + 1)
        buf = bytearray(plant.LINE_MAX + 1)
        got: list[str] = []
        for _ in range(seconds):
            for j in range(p.step()):
                m = p.line_into(j, buf)
                got.append(bytes(buf[:m]).decode("utf-8", "replace"))
        tail = [g for g in got if " ALARM" in g or "STATE" in g or "TRIP" in g][-lines:] or got[-lines:]
        if len(tail) < lines:
            tail = got[-lines:]
        out.append("%s\n\nLog:\n%s\nNote:" % (SYSTEM, "\n".join(tail)))
    return out


# ---- the nodes' streams -----------------------------------------------------------------------------

class Source:
    """One node's stream: `first` (the first PROMPT's ids, or empty), `episodes` and prompt(e, after_cap)
    (episode e's PROMPT ids; after_cap: the previous note ended at max_note without a stop token)."""

    def __init__(self, name: str, first: list[int], episodes: int, prompt):
        self.name = name
        self.first = list(first)
        self.episodes = episodes
        self._prompt = prompt
        self._memo: dict = {}

    def prompt(self, e: int, after_cap: bool) -> list[int]:
        if not 0 <= e < self.episodes:
            raise ValueError("%s: episode %d of %d" % (self.name, e, self.episodes))
        key = (e, bool(after_cap))
        if key not in self._memo:
            self._memo[key] = [int(t) for t in self._prompt(e, bool(after_cap))]
        return list(self._memo[key])


def episode_sources(n: int, episodes: int, tok) -> list[Source]:
    """Node i's stream: held-out plant seed 2000 + i (tools/train/corpus.py's streams: its episodes and text)."""
    from shared import episode
    from tools.train import corpus

    sys_ids = list(tok.encode(episode.system_prompt(), special=True))
    out = []
    for seed in corpus.seeds_of("heldout", n):
        eps = corpus.plant_episodes(seed, episodes)

        def prompt(e, cap, eps=eps):
            return tok.encode(episode.prompt_text(eps[e]["lines"], cap))

        out.append(Source("plant seed %d" % seed, sys_ids, len(eps), prompt))
    return out


def plant_sources(n: int, episodes: int, tok, split: str) -> list[Source]:
    """Node i's stream: generated plant 2000 + i of the split (tools/plants: "seen" held-out seeds of the training
    kinds and naming schemes, "unseen" held-out kinds and schemes), its simulated day cut into the node's
    episodes (tools/plants/plantday.episodes, as bench quality's notes), the first `episodes` of them."""
    from shared import episode
    from tools.plants import generate, plantday

    sys_ids = list(tok.encode(episode.system_prompt(), special=True))
    out = []
    for seed in range(PLANT_SEED0, PLANT_SEED0 + n):
        desc = generate.plant(seed, split)
        eps = plantday.episodes(plantday.day(desc, seed), episodes)[:episodes]

        def prompt(e, cap, eps=eps):
            return tok.encode(episode.prompt_text(eps[e]["lines"], cap))

        out.append(Source("%s plant seed %d (%s)" % (split, seed, desc["name"]), sys_ids, len(eps), prompt))
    return out


def free_sources(n: int, tok) -> list[Source]:
    return [Source("plant seed %d (free)" % (i + 1), [], 1, lambda e, cap, p=p: tok.encode(p))
            for i, p in enumerate(plant_prompts(n))]


def quick_sources(n: int, episodes: int, vocab: int) -> list[Source]:
    """--quick: token ids of the tiny models, deterministic per node and episode; the first PROMPT and
    every third episode's are longer than the gateway's staging room (prefilled in two steps)."""
    def prompt(e, cap, i):
        return ([QUICK_STOPS[0]] if cap else []) + [1 + (11 * i + 7 * e + 3 * j * j) % (vocab - 1)
                                                    for j in range(6 + 7 * (e % 3))]

    first = [1 + (3 * j) % (vocab - 1) for j in range(20)]
    return [Source("quick %d" % i, first, episodes, lambda e, cap, i=i: prompt(e, cap, i)) for i in range(n)]


def load_profile(board: str) -> dict:
    path = ROOT / "boards" / ("%s.json" % board)
    if not path.is_file():
        raise ValueError("no board profile %s (see boards/)" % path)
    return json.loads(path.read_text())


def gateway_staged(k: int) -> int:
    """The staging room host/gateway.py's NodeStream gives a node's target cache."""
    return max(16, 2 * max(1, k) * 2 + 1)


def find_draft(target_gguf: Path, given: str | None) -> tuple[Path, str]:
    if given:
        return Path(given), "given"
    found = sorted(glob.glob(str(ROOT / "models" / "draft" / "*.mbf")))
    cards = [c for c in glob.glob(str(ROOT / "models" / "draft" / "*")) if "card" in Path(c).name.lower()
             or Path(c).name.lower() == "readme.md"]
    if found and cards:
        return Path(found[0]), "models/draft (distilled draft; card %s)" % Path(cards[0]).name
    skipped = ""
    if found:  # a draft without its card is still being made: not the default (give it with --draft)
        skipped = "; %s found without a card: not used (pass --draft to measure it)" % Path(found[0]).name
    for name, what in (("smollm2-135m-q4a.mbf", "asymmetric INT4 (q4a)"),
                       ("smollm2-135m-q4.mbf", "symmetric INT4 (q4)")):
        own = ROOT / "build" / "models" / name
        if own.exists():
            return own, "%s MBF of the target itself (edgetwin convert)%s" % (what, skipped)
    from tools.formats.convert import convert

    own.parent.mkdir(parents=True, exist_ok=True)
    convert(str(target_gguf), str(own), dtype="q4")
    return own, "symmetric INT4 (q4) MBF of the target itself (edgetwin convert, made now)%s" % skipped


# ---- the two modes ----------------------------------------------------------------------------------

def _sample(row, temperature: float, rng) -> int:
    import numpy as np

    from host.verifier import PRow

    if temperature == 0:
        return int(np.argmax(row))
    return PRow(row, temperature, 0).sample(rng)


def prefill(target, items) -> tuple[list, int]:
    """Feed and commit each (cache, ids) exactly as host/verifier.Verifier.verify feeds the streams' queued
    prompt ids: what exceeds the staging room first (verifier.feed_batched: all streams in the same chunked
    passes), then the last `room` ids of every stream in one batched forward_many (last rows only).
    -> (the last logits row of each, target passes)."""
    from host.verifier import feed_batched

    heads, batch = [], []
    for cache, ids in items:
        room = cache.ring.room()
        if len(ids) > room:
            heads.append((cache, ids[:len(ids) - room]))
            ids = ids[len(ids) - room:]
        batch.append((cache, ids))
    passes = feed_batched(target, heads)[1] if heads else 0
    rows = target.forward_many(batch, last_only=True)
    for cache, ids in batch:
        cache.commit(len(ids))
    return [r[-1] for r in rows], passes + 1


def _note_summary(notes: list[list[list[int]]], stop, max_note: int) -> dict:
    flat = [nt for per in notes for nt in per]
    return {"committed": sum(len(nt) for nt in flat), "episodes": len(flat),
            "ended_at_stop": sum(1 for nt in flat if nt and stop[nt[-1]]),
            "ended_at_max_note": sum(1 for nt in flat if len(nt) == max_note and not stop[nt[-1]])}


def _rates(d: dict, n: int) -> None:
    c = max(1, d["committed"])
    d["tokens_per_s"] = round(c / max(d["gateway_cpu_s"], 1e-9), 3)
    d["tokens_per_s_with_prefill"] = round(c / max(d["gateway_cpu_s"] + d["prefill_cpu_s"], 1e-9), 3)
    d["target_passes_per_committed_token"] = round(d["target_passes"] * n / c, 4)
    d["cpu_s_per_pass"] = round(d["gateway_cpu_s"] / max(1, d["target_passes"]), 4)


def baseline(target, sources: list[Source], temperature: float, geo: dict, stop, max_note: int, seed: int) -> dict:
    """The N streams decoded by the gateway alone (see the module docstring). -> figures and `notes`
    (per stream, per episode: the committed note ids)."""
    from shared import specdec

    n = len(sources)
    caches = [target.new_cache(geo["sink"], geo["window"], geo["gateway_staged"]) for _ in sources]
    rngs = [specdec.Rng(seed + i) for i in range(n)]
    notes: list[list[list[int]]] = [[] for _ in sources]
    cur: list = [None] * n  # the note being decoded, None between episodes
    row: list = [None] * n
    unfed: list[list[int]] = [[] for _ in sources]  # a note's last token: fed with the next PROMPT
    after_cap = [False] * n
    ep = [0] * n
    cpu = pre_cpu = 0.0
    passes = pre_passes = 0
    first = [i for i in range(n) if sources[i].first]
    if first:  # the first PROMPT (system prompt) on its own, as the nodes send it
        t0 = time.process_time()
        _, pre_passes = prefill(target, [(caches[i], sources[i].first) for i in first])
        pre_cpu += time.process_time() - t0
    while True:
        need = [i for i in range(n) if cur[i] is None and ep[i] < sources[i].episodes]
        if need:
            items = [(caches[i], unfed[i] + sources[i].prompt(ep[i], after_cap[i])) for i in need]
            t0 = time.process_time()
            rows, p = prefill(target, items)
            pre_cpu += time.process_time() - t0
            pre_passes += p
            for i, r in zip(need, rows):
                row[i] = r
                cur[i] = []
                notes[i].append(cur[i])
                ep[i] += 1
                unfed[i] = []
        act = [i for i in range(n) if cur[i] is not None]
        if not act:
            break
        t0 = time.process_time()
        feed = []
        for i in act:
            t = _sample(row[i], temperature, rngs[i])
            cur[i].append(t)
            if stop[t] or len(cur[i]) >= max_note:  # the note is over: t goes in with the next PROMPT
                unfed[i] = [t]
                after_cap[i] = not stop[t]
                cur[i] = None
            else:
                feed.append((i, t))
        if feed:
            rows = target.forward_many([(caches[i], [t]) for i, t in feed])
            for (i, _), r in zip(feed, rows):
                caches[i].commit(1)
                row[i] = r[-1]
            passes += 1
        cpu += time.process_time() - t0
    out = _note_summary(notes, stop, max_note)
    out.update(gateway_cpu_s=round(cpu, 4), prefill_cpu_s=round(pre_cpu, 4), target_passes=passes,
               prefill_passes=pre_passes)
    _rates(out, n)
    out["notes"] = notes
    return out


def speculative(target, make_draft_model, sources: list[Source], temperature: float, geo: dict, k: int,
                max_pending: int, stop, stop_list: list[int], max_note: int, seed: int, draft_top_k: int) -> dict:
    """The N nodes drafting, the gateway verifying (see the module docstring). -> figures and `notes`."""
    from host.verifier import TargetMirror, Verifier, pack_prompt
    from shared import drafter, frame, frame_host
    from tools.demo.spec_models import Loop

    n = len(sources)
    pairs = []
    for i in range(n):
        d = drafter.Drafter(make_draft_model(), k, temperature=temperature, top_k=draft_top_k if temperature else 1,
                            seed=seed + 100 + i, max_pending=max_pending, stop_ids=stop_list, max_len=max_note,
                            out_cap=max(64, max_note))
        s = TargetMirror(target, geo["sink"], geo["window"], geo["gateway_staged"], temperature=temperature, seed=seed + i)
        pairs.append((d, s))
    ver = Verifier(target)
    loop = Loop(pairs, ver, lockstep=True)  # its buffers and lockstep check
    node_of = {id(s): d for d, s in pairs}
    notes: list[list[list[int]]] = [[] for _ in sources]
    cur: list = [None] * n
    after_cap = [False] * n
    ep = [0] * n
    cpu = pre_cpu = draft_cpu = 0.0
    passes = pre_passes = stream_passes = fed = 0
    wire = 0
    rounds = 0
    ids = array("i", bytes(4 * max(256, max_note)))

    def send_prompt(i: int, ids: list[int]) -> None:
        nonlocal pre_cpu
        d, s = pairs[i]
        base = d.prompt(ids)  # the node prefills its draft (not charged)
        bodies = [pack_prompt(base + a, ids[a:a + 255]) for a in range(0, len(ids), 255)]
        t0 = time.process_time()
        for body in bodies:  # the gateway takes the PROMPT frames (charged with the prefill)
            s.on_prompt(body)
        pre_cpu += time.process_time() - t0

    def prefill_verify(streams) -> None:
        nonlocal pre_cpu, pre_passes
        p0 = ver.passes
        t0 = time.process_time()
        res = ver.verify(streams)
        pre_cpu += time.process_time() - t0
        pre_passes += ver.passes - p0
        if res:
            raise AssertionError("a PROMPT-only pass gave %d verdicts" % len(res))

    first = [i for i in range(n) if sources[i].first]
    for i in first:  # the annotator's SYS state: the system prompt, no note after it
        send_prompt(i, sources[i].first)
        pairs[i][0].stopped = True
    if first:
        prefill_verify([pairs[i][1] for i in first])
    while True:
        new = []
        for i, (d, s) in enumerate(pairs):
            if cur[i] is None and not d.pending and ep[i] < sources[i].episodes:
                send_prompt(i, sources[i].prompt(ep[i], after_cap[i]))
                cur[i] = []
                notes[i].append(cur[i])
                ep[i] += 1
                new.append(s)
        if new:
            prefill_verify(new)
        t0 = time.process_time()
        bodies = []
        for (d, s), buf in zip(pairs, loop.bufs):  # the nodes (not charged to the gateway)
            while True:
                m = d.draft(buf)
                if not m:
                    break
                body = bytes(buf[:m])
                wire += len(frame_host.wire_bytes(frame.DRAFT, body, seq=rounds & 0xFFFF))
                bodies.append((s, body))
        t1 = time.process_time()
        for s, body in bodies:  # the gateway takes the DRAFT frames (charged)
            s.on_draft(body)
        cpu += time.process_time() - t1
        draft_cpu += t1 - t0
        # a stream with queued prompt ids but no block is a node whose last episode is over (its last
        # correction would go in with a next PROMPT): nothing to verify
        work = [s for _, s in pairs if s.blocks]
        if not work:
            if any(c is not None for c in cur):
                raise AssertionError("a node is inside a note but has no block to verify")
            break
        p0, f0 = ver.passes, ver.tokens_fed
        t0 = time.process_time()
        res = ver.verify(work)
        cpu += time.process_time() - t0
        passes += ver.passes - p0
        fed += ver.tokens_fed - f0
        stream_passes += len(work)
        rounds += 1
        for s, body, got_ids in res:
            got = node_of[id(s)].on_verdict(body, len(body))
            if got != len(got_ids):
                raise AssertionError("node committed %d tokens, the gateway %d" % (got, len(got_ids)))
        for i, (d, s) in enumerate(pairs):
            m = d.take(ids)
            if m:
                cur[i].extend(ids[:m])
            Loop.check(d, s)
            if cur[i] is not None and cur[i] and d.stopped and not d.pending:
                after_cap[i] = not stop[cur[i][-1]]
                cur[i] = None
    out = _note_summary(notes, stop, max_note)
    drafted = sum(d.drafted for d, _ in pairs)
    accepted = sum(d.accepted for d, _ in pairs)
    tested = sum(s.stats["tested"] for _, s in pairs)
    blocks = sum(s.stats["blocks"] for _, s in pairs)
    judged = sum(s.stats["drafted"] for _, s in pairs)
    out.update(gateway_cpu_s=round(cpu, 4), prefill_cpu_s=round(pre_cpu, 4), target_passes=passes,
               prefill_passes=pre_passes, draft_cpu_s_not_charged=round(draft_cpu, 2),
               drafted=drafted, accepted=accepted, tested=tested,
               acceptance_rate=round(accepted / max(1, drafted), 4),
               acceptance_per_test=round(accepted / max(1, tested), 4),
               acceptance_judged_blocks=round(accepted / max(1, judged), 4),
               target_tokens_per_pass=round(fed / max(1, passes), 2),
               tokens_per_block=round(out["committed"] / max(1, blocks), 3),
               tokens_per_stream_pass=round(out["committed"] / max(1, stream_passes), 3),
               wire_bytes_per_draft_token=round(wire / max(1, drafted), 2))
    _rates(out, n)
    out["notes"] = notes
    return out


# ---- the run ----------------------------------------------------------------------------------------

def setup(args) -> dict:
    """Target, draft factory, the nodes' streams, stop ids and geometry from the arguments."""
    import numpy as np

    from shared import bpe, episode, mbf
    from tools.demo import spec_models as sm

    fmt = args.format
    n = max(args.nodes)
    prof = load_profile(args.board)
    tmp = None
    if args.quick:
        pair = sm.make_pair(1, vocab=64)
        target = pair.target
        draft_desc = {"source": "tools/spec_models.make_pair(1) (--quick)", "path": None}
        target_label = "tiny float (spec_models)"
        import tempfile

        tmp = tempfile.NamedTemporaryFile(suffix=".mbf", delete=False)
        tmp.write(pair.mbf)
        tmp.close()
        draft_path = Path(tmp.name)
        tok = None
        vocab = pair.cfg.vocab_size
        sources = quick_sources(n, args.episodes, vocab) if fmt == "episode" else [
            Source("quick %d" % i, [], 1, lambda e, cap, i=i: [1 + i, 2, 3, 4 + i]) for i in range(n)]
        stop_list = list(QUICK_STOPS)
        integer_max_mb = 1e9  # the tiny draft runs on shared/llama.py itself
    else:
        from host import qa, target_delta
        from tools.train import corpus
        from tools.formats import tokenizer_export

        gguf, domain, target_label = target_delta.choose(args.target)
        draft_path, source = find_draft(gguf, args.draft)
        target = qa.load_text_model(gguf, domain)[0]
        vocab = target.cfg.vocab_size
        draft_desc = {"source": source, "path": str(draft_path.relative_to(ROOT) if draft_path.is_relative_to(ROOT)
                                                      else draft_path)}
        tok = bpe.BPE(bytes(tokenizer_export.build_blob(tokenizer_export.read_gguf(gguf))))  # the target's
        if fmt == "episode":
            sources = (episode_sources(n, args.episodes, tok) if args.plants == "builtin"
                       else plant_sources(n, args.episodes, tok, args.plants))
            table = corpus.stop_ids(tok)  # newline tokens + EOS, as the corpus and eval_draft use
            stop_list = [int(t) for t in np.flatnonzero(table[:vocab])]
        else:
            sources = free_sources(n, tok)
            stop_list = []
        integer_max_mb = args.integer_max_mb
    stop = np.zeros(vocab, bool)
    if fmt == "episode":
        stop[stop_list] = True
        max_note = episode.MAX_NOTE
    else:
        stop_list = []
        max_note = args.tokens
    t0 = time.time()
    r = mbf.open(str(draft_path), budget=1 << 31)
    dconf = dict(r.config)
    r.close()
    k = args.k
    node_staged = max(int(prof["kv"]["staged"]), k * args.max_pending)
    sink = prof["kv"]["sink"] if args.sink is None else args.sink
    window = prof["kv"]["window"] if args.window is None else args.window
    window = min(window, int(dconf["seq_len"]) - sink - node_staged)  # the node's cache must fit its model
    geo = {"board": args.board, "sink": sink, "window": window, "node_staged": node_staged,
           "gateway_staged": gateway_staged(k)}
    if sink + window + geo["gateway_staged"] > target.cfg.context_length:
        raise ValueError("sink %d + window %d + staging %d exceed the target's context %d" % (
            sink, window, geo["gateway_staged"], target.cfg.context_length))
    integer = draft_path.stat().st_size <= integer_max_mb * 1e6  # small: the node's own runtime is fast
    draft_desc["config"] = {key: dconf[key] for key in ("dim", "n_layers", "n_heads", "vocab_size", "sub_vocab",
                                                        "seq_len") if key in dconf}
    if integer:
        data = draft_path.read_bytes()
        draft_desc["twin"] = "shared/llama.py (the node's integer runtime) under CPython, driven by shared/drafter.py"

        def make_draft_model():
            return sm.node_model(data, sink, window, node_staged)
    else:
        twin = sm.float_target_from_mbf(draft_path)
        draft_desc["twin"] = ("float twin of the MBF's INT4 weights (dequantised), driven by shared/drafter.py "
                              "(shared/llama.py takes ~1.4 s per token of a 135M model under CPython)")

        def make_draft_model():
            return sm.FloatModel(twin, sink, window, node_staged)
    draft_desc["twin_load_s"] = round(time.time() - t0, 1)
    if tmp is not None:
        os.unlink(draft_path)
    return {"target": target, "make_draft_model": make_draft_model, "sources": sources, "stop": stop,
            "stop_list": stop_list, "max_note": max_note, "geo": geo, "draft": draft_desc, "tok": tok,
            "target_label": target_label}


def measure(env: dict, n: int, temperature: float, args) -> dict:
    """Both modes for the first n streams at one temperature -> the JSON entry (notes kept in `_notes`)."""
    src = env["sources"][:n]
    b = baseline(env["target"], src, temperature, env["geo"], env["stop"], env["max_note"], args.seed)
    s = speculative(env["target"], env["make_draft_model"], src, temperature, env["geo"], args.k, args.max_pending,
                    env["stop"], env["stop_list"], env["max_note"], args.seed, args.draft_top_k)
    if temperature == 0:
        s["equals_baseline_greedy"] = s["notes"] == b["notes"]
    notes = {"speculative": s.pop("notes"), "baseline": b.pop("notes")}
    tok = env["tok"]
    first = notes["speculative"][0]
    sample = [tok.decode(nt) for nt in first[:3]] if tok else first[:3]
    sp = s["tokens_per_s"] / b["tokens_per_s"]
    spp = s["tokens_per_s_with_prefill"] / b["tokens_per_s_with_prefill"]
    return {"speedup": round(sp, 3), "speedup_with_prefill": round(spp, 3), "committed": s["committed"],
            "episodes": s["episodes"], "acceptance_rate": s["acceptance_rate"],
            "target_passes_per_committed_token": s["target_passes_per_committed_token"],
            "wire_bytes_per_draft_token": s["wire_bytes_per_draft_token"],
            "speculative": s, "baseline_batched_ar": b, "sample_notes_node0": sample, "_notes": notes}


def median_of(runs: list[dict]) -> dict:
    """The repeats of one (temperature, N) as one entry: the run of the median speedup, with the median
    speedup with prefill and every run's figures beside them (acceptance and tokens do not move between runs;
    the timings do)."""
    mid = sorted(runs, key=lambda m: m["speedup"])[len(runs) // 2]
    out = dict(mid)
    wp = sorted(m["speedup_with_prefill"] for m in runs)
    out["speedup_with_prefill"] = wp[len(wp) // 2]
    out["runs"] = len(runs)
    out["speedup_runs"] = [m["speedup"] for m in runs]
    out["speedup_with_prefill_runs"] = [m["speedup_with_prefill"] for m in runs]
    return out


def run(args) -> dict:
    env = setup(args)
    results: dict = {}
    summary: dict = {}
    repeats = max(1, getattr(args, "repeats", 1))
    for temp in args.temps:
        key = "greedy" if temp == 0 else "t%g" % temp
        results[key] = {}
        for n in args.nodes:
            runs = []
            for _ in range(repeats):
                m = measure(env, n, temp, args)
                m.pop("_notes")
                runs.append(m)
            m = median_of(runs)
            results[key]["n%d" % n] = m
            summary["%s_speedup_n%d" % (key, n)] = m["speedup"]
            summary["%s_speedup_with_prefill_n%d" % (key, n)] = m["speedup_with_prefill"]
            print("bench spec: %s n=%d speedup %.2f (with prefill %.2f; acceptance %.3f, %.2f tokens/block, "
                  "%d note tokens in %d episodes)" % (key, n, m["speedup"], m["speedup_with_prefill"],
                                                      m["acceptance_rate"], m["speculative"]["tokens_per_block"],
                                                      m["committed"], m["episodes"]), file=sys.stderr)
    first = "greedy" if "greedy" in results else next(iter(results))
    geo = env["geo"]
    out = {"bench": "spec", "quick": bool(args.quick), "format": args.format,
           "note": "smoke test: tiny models, the timings mean nothing" if args.quick else
           "gateway CPU time; drafting (the nodes' work) not charged",
           "target": env["target_label"], "repeats": repeats,
           "draft": env["draft"], "k": args.k, "max_pending": args.max_pending,
           "draft_top_k_sampling": args.draft_top_k, "kv": geo,
           "plants": args.plants, "streams": [s.name for s in env["sources"]],
           "episodes_per_stream": args.episodes if args.format == "episode" else 1,
           "max_note": env["max_note"], "stop_ids": len(env["stop_list"]),
           "blas_threads": 1, "timing": "process CPU seconds of the gateway's calls",
           "speedup": "decode only (PROMPT prefill excluded in both modes); speedup_with_prefill: included"}
    for n in args.nodes:
        out["speedup_n%d" % n] = results[first]["n%d" % n]["speedup"]
    for n in args.nodes:
        out["speedup_with_prefill_n%d" % n] = results[first]["n%d" % n]["speedup_with_prefill"]
    out.update(summary)
    g = results[first]["n%d" % max(args.nodes)]
    out["acceptance_rate"] = g["acceptance_rate"]
    out["wire_bytes_per_draft_token"] = g["wire_bytes_per_draft_token"]
    out["target_passes_per_committed_token"] = g["target_passes_per_committed_token"]
    if "t0.7" in results:  # the names for the sampled figures
        for n in args.nodes:
            out["speedup_n%d_t07" % n] = results["t0.7"]["n%d" % n]["speedup"]
            out["speedup_with_prefill_n%d_t07" % n] = results["t0.7"]["n%d" % n]["speedup_with_prefill"]
        out["acceptance_rate_t07"] = results["t0.7"]["n%d" % max(args.nodes)]["acceptance_rate"]
    out["goal_speedup_n4"] = 2.5
    out["goal_speedup_n4_t07"] = 1.5
    out["results"] = results
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench spec", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the JSON object (the default output anyway)")
    ap.add_argument("--quick", action="store_true", help="tiny matched models instead of SmolLM2 (seconds)")
    ap.add_argument("--target", help="the target: domain (default: SmolLM2-135M-Instruct with the plant adapters "
                    "of models/target, as the gateway), stock, or a GGUF file")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each (temperature, N); the figures are their "
                    "median (default 3)")
    ap.add_argument("--draft", help="draft MBF (default: models/draft/*.mbf, else the target's INT4 MBF)")
    ap.add_argument("--format", choices=("episode", "free"), default="episode",
                    help="streams: the node's episodes (held-out plants, shared/episode.py; default) or one free "
                         "instruction prompt per node decoded for --tokens tokens")
    ap.add_argument("--plants", choices=("builtin", "seen", "unseen"), default="builtin",
                    help="episode format: whose streams (builtin: the node's own simulator, held-out seeds; seen / "
                         "unseen: generated plants of held-out seeds, of the training kinds and naming schemes or "
                         "of held-out ones)")
    ap.add_argument("--episodes", type=int, default=8, help="episodes per node (episode format; default 8, the "
                    "held-out corpus streams' count)")
    ap.add_argument("--tokens", type=int, default=48, help="tokens decoded per node, --format free (default 48)")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per block (default 4)")
    ap.add_argument("--max-pending", type=int, default=2, help="blocks in flight per node (default 2)")
    ap.add_argument("--draft-top-k", type=int, default=8, help="candidates per draft token when sampling (default 8)")
    ap.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    ap.add_argument("--temps", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.7])
    ap.add_argument("--board", default="rp2040_pico", help="board profile whose kv geometry the node and the "
                    "gateway use (default rp2040_pico: sink 4, window 28)")
    ap.add_argument("--sink", type=int, default=None, help="override the profile's kv sink")
    ap.add_argument("--window", type=int, default=None, help="override the profile's kv window")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--integer-max-mb", type=float, default=32.0,
                    help="drafts up to this size run on shared/llama.py itself; larger ones on a float twin")
    args = ap.parse_args(argv)
    if args.episodes < 1 or args.tokens < 1 or min(args.nodes) < 1 or args.repeats < 1:
        ap.error("--episodes, --tokens, --nodes and --repeats must be >= 1")
    if _numpy_late():  # BLAS was configured before our variables: rerun in a clean process
        import subprocess

        env = dict(os.environ, _EDGETWIN_BENCH_SPEC_CHILD="1")
        rest = argv if argv is not None else sys.argv[1:]
        return subprocess.call([sys.executable, "-m", "tools.bench.spec", *rest], env=env, cwd=str(ROOT))
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    os.environ["_EDGETWIN_BENCH_SPEC_CHILD"] = "1"
    sys.exit(main())
