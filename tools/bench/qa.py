"""Time to the whole cited answer of `edgetwin ask`, warm and cold, as one JSON object.

    python -m host.cli bench qa --json [--questions 20] [--cold 20] [--hours 6] [--nodes 2] [--candidates 4]

The store: `--nodes` plant simulators (shared/plant.py, seeds 7, 11, ...; one process fault injected on each,
severity 4, so something trips) run `--hours` plant hours each, one sample line a minute per machine plus
every event line, stored as nodes node-1, node-2... in a fresh SQLite store (host/store.py), as a gateway
would have stored them. The questions: about the machines the simulators' ground truth says faulted (what
went wrong, why they ran hot, their alarms) and a few about machines that were fine, cycled to `--questions`;
those the plant's record answers (docs/GATEWAY.md 6) take no target time, the open ones the target's.

- warm: one process loads PRISM and the target `ask` uses by default (the domain target where models/target
  is installed, host/target_delta.choose) once, then answers every question (host/qa.ask: retrieval,
  PRISM over `--candidates` windows, the target's whole answer);
- cold: `--cold` fresh `python -m host.cli ask QUESTION --db STORE` processes, each timed from its start
  to its exit (Python start, imports, both models loaded, the whole answer).

p50 and p90 of each, the per-stage medians of the warm runs (where the time goes), the machine's load
average before and after (it is shared: say what it was doing), and the goals (warm p50 <= 10 s, cold p50
<= 20 s on an idle machine). One BLAS thread unless OPENBLAS_NUM_THREADS says otherwise (on 2 shared cores
OpenBLAS's own threads stall on each other). Progress on stderr.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from host import cmd_ask
from host.usage import Parser

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads (see the module docstring)

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (7, 11, 13, 17, 19, 23, 29, 31)
INJECT = (("P-101", "overheating"), ("C-301", "bearing_wear"), ("M-201", "overheating"), ("CV-401", "bearing_wear"))
GOALS = {"warm_p50_s": 10.0, "cold_p50_s": 20.0}


def say(msg: str) -> None:
    sys.stderr.write("bench qa: %s\n" % msg)
    sys.stderr.flush()


def build_store(db: Path, hours: float, nodes: int) -> tuple[int, list[dict]]:
    """(lines stored, the faults' ground truth of every node) for a store of `nodes` simulated nodes."""
    from host.store import LogStore
    from shared import plant
    from tools.train.gen_logs import generate

    store = LogStore(db)
    truth: list[dict] = []
    n = 0
    try:
        for i in range(nodes):
            p = plant.Plant(SEEDS[i % len(SEEDS)] + 100 * (i // len(SEEDS)), 4, sample_every=60)
            machine, fault = INJECT[i % len(INJECT)]
            buf = io.BytesIO()
            res = generate(p, int(hours * 3600), buf, [(machine, fault, 4, None, 1800)])
            name = "node-%d" % (i + 1)
            for f in res["faults"]:
                truth.append(dict(f, node=name))
            for seq, raw in enumerate(buf.getvalue().decode().splitlines()):
                wall = plant_ms(raw)
                level = 3 if " TRIPPED" in raw else 2 if raw[21:26] in ("ALARM", "CLEAR", "STATE") else 1
                store.add_log(name, i + 1, seq, seq % (1 << 30), wall, level, raw, commit=False)
                n += 1
            store.commit()
    finally:
        store.close()
    return n, truth


def plant_ms(line: str) -> int:
    import calendar

    return calendar.timegm(time.strptime(line[:20], "%Y-%m-%dT%H:%M:%SZ")) * 1000


def questions(truth: list[dict], n: int) -> list[str]:
    """n operator questions from the ground truth (trips, onsets, alarms), then about machines that were fine."""
    qs: list[str] = []
    for f in truth:
        m, fault = f["machine"], f["fault"].replace("_", " ")
        # open questions first, the target's to answer (the record answers why a machine tripped and when its
        # first alarm came: askrecord), then one the record answers
        qs.append("what went wrong with %s?" % m)
        qs.append("why did %s run %s?" % (m, "hot" if fault == "overheating" else "badly"))
        qs.append("which alarms were raised on %s?" % m)
    qs += ["is pump P-101 running normally?", "which machine tripped most recently?", "what is the bearing "
           "temperature of M-201?", "was any alarm acknowledged?", "is the conveyor CV-401 running?",
           "did the compressor C-301 stop?", "what happened to the pressure of P-101?"]
    out: list[str] = []
    seen = set()
    for q in qs:
        if q not in seen:
            seen.add(q)
            out.append(q)
    while len(out) < n:  # cycle: the same questions again (warm runs answer them again from scratch)
        out += out[:n - len(out)]
    return out[:n]


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    import numpy as np

    return round(float(np.percentile(np.array(xs, dtype=float), p)), 2)


def warm(db: Path, qs: list[str], k: int, candidates: int, max_tokens: int) -> dict:
    from host import qa, target_delta, weights
    from host.prism.engine import Prism

    t0 = time.perf_counter()
    prism = Prism.from_pretrained(str(weights.reranker_dir()))
    path, domain, label = target_delta.choose(None)  # what `edgetwin ask` answers with (the cold runs too)
    answerer = qa.Answerer.from_gguf(path, domain)
    say("warm: target %s" % label)
    load_s = time.perf_counter() - t0
    say("warm: models loaded in %.1f s" % load_s)
    runs = []
    try:
        for i, q in enumerate(qs):
            t = time.perf_counter()
            res = qa.ask(q, db, prism, answerer, k=k, limit=candidates, max_tokens=max_tokens)
            took = time.perf_counter() - t
            r = dict(res["times"], total_s=round(took, 3), question=q, cited=len(res["cited"]),
                     matched=res["matched"], candidates=res["candidates"], answer=res["answer"])
            runs.append(r)
            say("warm %d/%d: %.1f s (rerank %.1f, prompt %d tok %.1f s, answer %d tok %.1f s) %s"
                % (i + 1, len(qs), took, r["rerank_s"], r["prompt_tokens"], r["prefill_s"], r["answer_tokens"],
                   r["decode_s"], q))
    finally:
        prism.close()
    totals = [r["total_s"] for r in runs]
    stages = {}
    for key in ("retrieve_s", "rerank_s", "prefill_s", "decode_s", "prompt_tokens", "answer_tokens"):
        stages[key] = pct([r[key] for r in runs], 50)
    return {"n": len(runs), "p50_s": pct(totals, 50), "p90_s": pct(totals, 90), "max_s": round(max(totals), 2),
            "models_load_s": round(load_s, 2), "target": label, "stages_p50": stages,
            "cited_fraction": round(sum(1 for r in runs if r["cited"]) / len(runs), 3),
            "candidates_p50": pct([r["candidates"] for r in runs], 50),
            "examples": [{"question": r["question"], "answer": r["answer"]} for r in runs[:3]]}


def cold(db: Path, qs: list[str], k: int, candidates: int, max_tokens: int) -> dict:
    times = []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i, q in enumerate(qs):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "host.cli", "ask", q, "--db", str(db), "--k", str(k),
                            "--candidates", str(candidates), "--max-tokens", str(max_tokens), "--quiet"],
                           cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=900)
        took = time.perf_counter() - t
        if r.returncode != 0 or "Answer: " not in r.stdout:
            raise RuntimeError("edgetwin ask exited %d for %r: %s" % (r.returncode, q, r.stderr.strip()[-500:]))
        times.append(took)
        say("cold %d/%d: %.1f s %s" % (i + 1, len(qs), took, q))
    return {"n": len(times), "p50_s": pct(times, 50), "p90_s": pct(times, 90),
            "max_s": round(max(times), 2) if times else None}


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench qa", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="(the output is always one JSON object)")
    ap.add_argument("--questions", type=int, default=20, help="warm questions (default 20)")
    ap.add_argument("--cold", type=int, default=20, help="cold `edgetwin ask` processes (default 20; 0: none)")
    ap.add_argument("--hours", type=float, default=6.0, help="plant hours per node (default 6)")
    ap.add_argument("--nodes", type=int, default=2, help="nodes in the store (default 2)")
    ap.add_argument("--candidates", type=int, default=cmd_ask.CANDIDATES,
                    help="windows PRISM ranks (default %d, as ask)" % cmd_ask.CANDIDATES)
    ap.add_argument("--k", type=int, default=3, help="windows given to the target (default 3, as ask)")
    ap.add_argument("--max-tokens", type=int, default=64, help="longest answer (default 64, as ask)")
    a = ap.parse_args(argv)
    if a.questions < 1 or a.cold < 0 or a.nodes < 1 or a.candidates < a.k or a.k < 1 or a.max_tokens < 1:
        ap.error("need --questions >= 1, --cold >= 0, --nodes >= 1, 1 <= --k <= --candidates, --max-tokens >= 1")
    if not 0 < a.hours <= 48:
        ap.error("--hours must be in (0, 48]")
    from host import weights

    try:
        weights.smollm2_gguf()
        weights.reranker_dir()
    except (OSError, ValueError) as e:
        print("edgetwin bench qa: error: %s" % e, file=sys.stderr)
        return 2
    load0 = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="edgetwin-bench-qa-") as tmp:
        db = Path(tmp) / "plant.db"
        t = time.perf_counter()
        lines, truth = build_store(db, a.hours, a.nodes)
        say("store: %d lines from %d nodes x %g plant hours in %.1f s" % (lines, a.nodes, a.hours,
                                                                        time.perf_counter() - t))
        qs = questions(truth, max(a.questions, a.cold))
        w = warm(db, qs[:a.questions], a.k, a.candidates, a.max_tokens)
        c = cold(db, qs[:a.cold], a.k, a.candidates, a.max_tokens)
    load1 = [round(x, 2) for x in os.getloadavg()]
    out = {
        "bench": "qa", "store": {"nodes": a.nodes, "plant_hours_per_node": a.hours, "lines": lines},
        "candidates": a.candidates, "k": a.k, "max_tokens": a.max_tokens,
        "warm": w, "cold": c, "goals": GOALS,
        "goals_met": {"warm_p50": w["p50_s"] <= GOALS["warm_p50_s"],
                      "cold_p50": None if c["p50_s"] is None else c["p50_s"] <= GOALS["cold_p50_s"]},
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load0, "loadavg_after": load1,
                    "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS")},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
