"""`edgetwin bench spec --json`: the gateway's speedup from deferred speculative decoding.

For N = 1, 2, 4 nodes, greedy and T = 0.7, on the same target in the same run:

- baseline: the gateway decodes the N streams itself, autoregressively, the N streams batched into one
  target.forward_many per step (the fair baseline: batching alone already amortises the weights);
- speculative: N drafters (shared/drafter.py under CPython, the nodes' host twins) send DRAFT blocks;
  the gateway verifies every stream's pending blocks in one forward_many per round (host/verifier.py).

speedup_nN = (committed tokens / gateway CPU seconds, speculative) / (the same, baseline). Gateway time
is process CPU time around the gateway's calls only (verify(); forward + sampling in the baseline), with
one BLAS thread, so other load on the machine barely moves it; drafting is not charged (it runs on the
nodes). Prompt prefill is identical in both modes and is not timed. Every stream decodes exactly
`--tokens` tokens in both modes (no stop ids).

Prompts (--format): "episode" (default), the node's own stream format from shared/episode.py (system
prompt, the last event lines of a plant, the note cue): what the shipped draft was trained on; "free",
a one-line instruction and six log lines ending in "Note:".

Draft: models/draft/*.mbf if one exists with its card (a file named *card* or README.md), else the INT4
MBF of the target: build/models/smollm2-135m-q4a.mbf
(asymmetric INT4, which reproduces the GGUF's Q4_1 layers), else smollm2-135m-q4.mbf (symmetric INT4: about
0.3-0.4 greedy agreement with the target, docs/SPECDEC.md 8.5), made with `edgetwin convert` if missing.
The drafter drives a float twin of that MBF (its INT4 weights
dequantised: tools/spec_models.float_target_from_mbf), because shared/llama.py's integer runtime takes
~1.4 s per SmolLM2 token under CPython; the JSON says which draft and which twin were used.

    edgetwin bench spec --json                      # SmolLM2-135M-Instruct target (minutes)
    edgetwin bench spec --json --quick              # tiny matched models, seconds (smoke test)
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SYSTEM = "You annotate industrial plant logs. For each excerpt write one short note on what happened."


def _numpy_late() -> bool:
    """numpy was imported before this module set the thread variables (BLAS may run threaded)."""
    return "numpy" in sys.modules and os.environ.get("_EDGETWIN_BENCH_SPEC_CHILD") != "1"


def plant_prompts(n: int, lines: int = 6, seconds: int = 900) -> list[str]:
    """One prompt per node from shared/plant.py (the lines tools/gen_logs.py writes), seed = node index + 1."""
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


def episode_prompts(n: int, seconds: int = 900) -> list[tuple[str, str]]:
    """One episode per node in the node's own stream format (shared/episode.py, what the distilled draft
    was trained on): (system prompt, the last event lines + the note cue), plant seed = node index + 1."""
    from shared import episode

    out = []
    for text in plant_prompts(n, lines=episode.MAX_LINES, seconds=seconds):
        lines = text.split("\nLog:\n", 1)[1].rsplit("\nNote:", 1)[0].split("\n")
        out.append((episode.system_prompt(), episode.prompt_text(lines)))
    return out


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
    from tools.convert import convert

    own.parent.mkdir(parents=True, exist_ok=True)
    convert(str(target_gguf), str(own), dtype="q4")
    return own, "symmetric INT4 (q4) MBF of the target itself (edgetwin convert, made now)%s" % skipped


def _sample(row, temperature: float, rng) -> int:
    import numpy as np

    from host.verifier import PRow

    if temperature == 0:
        return int(np.argmax(row))
    return PRow(row, temperature, 0).sample(rng)


def baseline(target, prompts_ids, tokens: int, temperature: float, sink: int, window: int, seed: int) -> dict:
    """N streams decoded by the gateway alone, batched: one forward_many per step."""
    from shared import specdec

    caches = [target.new_cache(sink, window, 16) for _ in prompts_ids]
    rngs = [specdec.Rng(seed + i) for i in range(len(prompts_ids))]
    last = [target.feed(c, p, last_only=True)[-1] for c, p in zip(caches, prompts_ids)]  # not timed
    cpu = 0.0
    out: list[list[int]] = [[] for _ in prompts_ids]
    for step in range(tokens):
        t0 = time.process_time()
        toks = [_sample(r, temperature, g) for r, g in zip(last, rngs)]
        for o, t in zip(out, toks):
            o.append(t)
        if step + 1 < tokens:
            rows = target.forward_many([(c, [t]) for c, t in zip(caches, toks)])
            for c in caches:
                c.commit(1)
            last = [r[-1] for r in rows]
        cpu += time.process_time() - t0
    n = len(prompts_ids) * tokens
    return {"committed": n, "gateway_cpu_s": round(cpu, 4), "tokens_per_s": round(n / cpu, 3),
            "target_passes": tokens - 1, "outputs": out}


def speculative(target, make_draft_model, prompts_ids, tokens: int, temperature: float, k: int, sink: int,
                window: int, max_pending: int, seed: int) -> dict:
    from host.verifier import Stream, Verifier
    from shared import drafter, frame
    from tools.spec_models import Loop

    pairs = []
    for i in range(len(prompts_ids)):
        model = make_draft_model()
        d = drafter.Drafter(model, k, temperature=temperature, top_k=8 if temperature else 4, seed=seed + 100 + i,
                            max_pending=max_pending, max_len=tokens)
        s = Stream(target, sink, window, max(32, k * max_pending + 8), temperature=temperature, seed=seed + i)
        pairs.append((d, s))
    ver = Verifier(target)
    loop = Loop(pairs, ver, lockstep=True)
    for i, p in enumerate(prompts_ids):
        loop.prompt(i, p)
    ver.verify([s for _, s in pairs])  # prompt prefill, not timed (the baseline's is not either)
    passes0 = ver.passes
    cpu = 0.0
    draft_cpu = 0.0
    wire = 0
    bufs = [bytearray(d.body_max) for d, _ in pairs]
    out: list[list[int]] = [[] for _ in pairs]
    ids = array("i", bytes(4 * 256))
    rounds = 0
    while True:
        t0 = time.process_time()
        for (d, s), buf in zip(pairs, bufs):  # the nodes (not charged to the gateway)
            while True:
                n = d.draft(buf)
                if not n:
                    break
                body = bytes(buf[:n])
                wire += len(frame.wire_bytes(frame.DRAFT, body, seq=rounds & 0xFFFF))
                s.on_draft(body)
        t1 = time.process_time()
        res = ver.verify([s for _, s in pairs if s.queued])
        t2 = time.process_time()
        draft_cpu += t1 - t0
        cpu += t2 - t1
        if not res:
            break
        rounds += 1
        node_of = {id(s): d for d, s in pairs}
        for s, body, _ in res:
            node_of[id(s)].on_verdict(body, len(body))
        for i, (d, s) in enumerate(pairs):
            out[i] += list(ids[:d.take(ids)])
            Loop.check(d, s)
    committed = sum(len(o) for o in out)
    drafted = sum(d.drafted for d, _ in pairs)
    accepted = sum(d.accepted for d, _ in pairs)
    tested = sum(s.stats["tested"] for _, s in pairs)
    passes = ver.passes - passes0
    return {"committed": committed, "gateway_cpu_s": round(cpu, 4), "tokens_per_s": round(committed / cpu, 3),
            "draft_cpu_s_not_charged": round(draft_cpu, 2), "target_passes": passes,
            "target_passes_per_committed_token": round(passes * len(pairs) / committed, 4),
            "drafted": drafted, "accepted": accepted, "tested": tested,
            "acceptance_rate": round(accepted / max(1, drafted), 4),
            "acceptance_per_test": round(accepted / max(1, tested), 4),
            "tokens_per_block": round(committed / max(1, sum(s.stats["blocks"] for _, s in pairs)), 3),
            "wire_bytes_per_draft_token": round(wire / max(1, drafted), 2), "outputs": out}


def run(args) -> dict:
    from shared import bpe, mbf

    if args.quick:
        from tools import spec_models as sm

        pair = sm.make_pair(1, vocab=64)
        target = pair.target
        draft_desc = {"source": "tools/spec_models.make_pair(1) (--quick)", "path": None}
        import tempfile

        tmp = tempfile.NamedTemporaryFile(suffix=".mbf", delete=False)
        tmp.write(pair.mbf)
        tmp.close()
        draft_path = Path(tmp.name)
        prompts = ["quick %d" % i for i in range(4)]
        prompts_ids = [[1 + i, 2, 3, 4 + i] for i in range(4)]
        tok = None
        args.window = min(args.window, 16)
        args.integer_max_mb = 1e9  # the tiny draft runs on shared/llama.py itself
    else:
        from host.models import smollm2_gguf
        from host.target import Target

        gguf = Path(args.target) if args.target else smollm2_gguf()
        from tools import tokenizer_export

        draft_path, source = find_draft(gguf, args.draft)
        target = Target.from_gguf(gguf)
        draft_desc = {"source": source, "path": str(draft_path.relative_to(ROOT) if draft_path.is_relative_to(ROOT)
                                                      else draft_path)}
        tok = bpe.BPE(bytes(tokenizer_export.build_blob(tokenizer_export.read_gguf(gguf))))  # the target's
        if args.format == "episode":
            pairs = episode_prompts(max(args.nodes))
            prompts = [a + b for a, b in pairs]
            prompts_ids = [list(tok.encode(a, special=True)) + list(tok.encode(b)) for a, b in pairs]
        else:
            prompts = plant_prompts(max(args.nodes))
            prompts_ids = [list(tok.encode(p)) for p in prompts]
    from tools import spec_models as sm

    t0 = time.time()
    r = mbf.open(str(draft_path), budget=1 << 31)
    dconf = dict(r.config)
    r.close()
    node_staged = args.k * args.max_pending + 4
    sink = args.sink
    window = min(args.window, int(dconf["seq_len"]) - sink - node_staged)  # the node's cache must fit its model
    integer = draft_path.stat().st_size <= args.integer_max_mb * 1e6  # small: the node's own runtime is fast
    draft_desc["config"] = {k: dconf[k] for k in ("dim", "n_layers", "n_heads", "vocab_size", "sub_vocab", "seq_len")
                            if k in dconf}
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
    if args.quick:
        os.unlink(draft_path)

    results: dict = {}
    summary: dict = {}
    for temp in args.temps:
        key = "greedy" if temp == 0 else "t%g" % temp
        results[key] = {}
        for n in args.nodes:
            b = baseline(target, prompts_ids[:n], args.tokens, temp, sink, window, args.seed)
            s = speculative(target, make_draft_model, prompts_ids[:n], args.tokens, temp, args.k, sink, window,
                            args.max_pending, args.seed)
            if temp == 0:
                s["equals_baseline_greedy"] = s["outputs"] == b["outputs"]
            sample = tok.decode(s["outputs"][0][:40]) if tok else s["outputs"][0][:20]
            for d in (b, s):
                d.pop("outputs")
            sp = s["tokens_per_s"] / b["tokens_per_s"]
            results[key]["n%d" % n] = {"speedup": round(sp, 3), "speculative": s, "baseline_batched_ar": b,
                                       "sample_output_node0": sample}
            summary["%s_speedup_n%d" % (key, n)] = round(sp, 3)
            print("bench spec: %s n=%d speedup %.2f (acceptance %.3f, %.2f tokens/block)" % (
                key, n, sp, s["acceptance_rate"], s["tokens_per_block"]), file=sys.stderr)
    first = "greedy" if "greedy" in results else next(iter(results))
    out = {"bench": "spec", "quick": bool(args.quick),
           "note": "smoke test: tiny models, the timings mean nothing" if args.quick else
           "gateway CPU time; drafting (the nodes' work) not charged",
           "target": "tiny float (spec_models)" if args.quick else "SmolLM2-135M-Instruct (GGUF Q4_1, float32)",
           "draft": draft_desc, "k": args.k, "max_pending": args.max_pending, "kv": {"sink": sink, "window": window},
           "tokens_per_stream": args.tokens, "blas_threads": 1, "timing": "process CPU seconds of the gateway's calls"}
    for n in args.nodes:
        out["speedup_n%d" % n] = results[first]["n%d" % n]["speedup"]
    out.update(summary)
    g = results[first]["n%d" % max(args.nodes)]["speculative"]
    out["acceptance_rate"] = g["acceptance_rate"]
    out["wire_bytes_per_draft_token"] = g["wire_bytes_per_draft_token"]
    out["target_passes_per_committed_token"] = g["target_passes_per_committed_token"]
    out["goal_speedup_n4"] = 2.2
    out["prompts"] = prompts[:max(args.nodes)]
    out["results"] = results
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="edgetwin bench spec", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the JSON object (the default output anyway)")
    ap.add_argument("--quick", action="store_true", help="tiny matched models instead of SmolLM2 (seconds)")
    ap.add_argument("--target", help="target GGUF (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--draft", help="draft MBF (default: models/draft/*.mbf, else the target's INT4 MBF)")
    ap.add_argument("--format", choices=("episode", "free"), default="episode",
                    help="prompts: the node's episode format (shared/episode.py, what the shipped draft was "
                         "trained on; default) or a free instruction prompt")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per block (default 4)")
    ap.add_argument("--max-pending", type=int, default=2, help="blocks in flight per node (default 2)")
    ap.add_argument("--tokens", type=int, default=48, help="tokens decoded per stream and mode (default 48)")
    ap.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    ap.add_argument("--temps", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.7])
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--window", type=int, default=252)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--integer-max-mb", type=float, default=32.0,
                    help="drafts up to this size run on shared/llama.py itself; larger ones on a float twin")
    args = ap.parse_args(argv)
    if _numpy_late():  # BLAS was configured before our variables: rerun in a clean process
        import subprocess

        env = dict(os.environ, _EDGETWIN_BENCH_SPEC_CHILD="1")
        rest = argv if argv is not None else sys.argv[1:]
        return subprocess.call([sys.executable, "-m", "tools.bench_spec", *rest], env=env, cwd=str(ROOT))
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    os.environ["_EDGETWIN_BENCH_SPEC_CHILD"] = "1"
    sys.exit(main())
