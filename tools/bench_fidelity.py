"""How close the board's INT4 runtime stays to the float model it came from; prints one JSON object.

The parent is SmolLM2-135M-Instruct as shipped (GGUF Q4_1, dequantised to float32 and run by the
gateway's numpy target, host/target.py). The child is the same model converted to an INT4 MBF
(tools/convert.py: group-32 symmetric INT4, float16 scales) and run by the board's integer W4A8
runtime (shared/llama.py) on its numpy backend, which computes the same integers as viper on a board.
Both see the same sink + ring cache, so the difference is the numbers alone. The text is tokenized
with the tokenizer stored in the MBF itself. Reported: top-1 agreement and mean KL(parent || child)
over the next-token distributions, and each side's time per token.

    edgetwin bench fidelity [--tokens 48] [--mbf build/models/smollm2-135m-q4.mbf]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("2026-11-30T10:15:02Z P-101 RUNNING T=61.2C V=4.1mm/s I=12.3A P=3.2bar Q=41.0m3/h\n"
        "2026-11-30T10:15:03Z ALARM HI P-101 bearing_temp 78.4C prio=2 RAISED\n"
        "Pump 3 bearing temperature is rising about 2 C per minute; check the lubrication before the next shift. "
        "The compressor tripped on high vibration at 10:14 and was restarted by the operator.")


def gguf_path() -> Path:
    from host.models import smollm2_gguf

    return smollm2_gguf()


def ensure_mbf(path: Path) -> Path:
    if not path.exists():
        from tools import convert

        path.parent.mkdir(parents=True, exist_ok=True)
        convert.convert(gguf_path(), path, dtype="q4")
    return path


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run(n_tokens: int, mbf_path: Path, sink: int = 4, window: int = 64) -> dict:
    from host.target import Target
    from shared import bpe, kernels, llama, mbf, ringkv

    reader = mbf.open(str(ensure_mbf(mbf_path)), budget=1 << 20)
    tok = bpe.BPE(bytes(reader.read_tokenizer()))
    ids = tok.encode(TEXT)[:n_tokens]
    if len(ids) < 2:
        raise SystemExit("bench fidelity: the text gave fewer than 2 tokens")

    kernels.use("numpy")
    cfg = reader.config
    n_kv = int(cfg["n_kv_heads"])
    hd = int(cfg["dim"]) // int(cfg["n_heads"])
    kv = ringkv.RingKV(int(cfg["n_layers"]), n_kv * hd, sink, window, 8, "b", n_kv)
    model = llama.Model(reader, kv)
    child = np.zeros((len(ids), model.n_out), np.float64)
    t0 = time.perf_counter()
    for i, t in enumerate(ids):
        model.step(t)
        kv.commit(1)
        child[i] = np.frombuffer(model.logits, dtype=np.int32) / 65536.0
    t_child = (time.perf_counter() - t0) / len(ids)

    target = Target.from_gguf(gguf_path())
    cache = target.new_cache(sink=sink, window=window, staged=8)
    t0 = time.perf_counter()
    parent = target.feed(cache, ids, chunk=1).astype(np.float64)
    t_parent = (time.perf_counter() - t0) / len(ids)

    p, q = softmax(parent), softmax(child)
    kl = np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30)), axis=-1)
    return {
        "model": "SmolLM2-135M-Instruct", "tokens": len(ids), "sink": sink, "window": window,
        "mbf_bytes": mbf_path.stat().st_size, "kernels_backend": "numpy (same integers as viper)",
        "top1_agreement": float(np.mean(parent.argmax(-1) == child.argmax(-1))),
        "mean_kl_nats": float(kl.mean()), "max_kl_nats": float(kl.max()),
        "parent_s_per_token": round(t_parent, 4), "int4_s_per_token": round(t_child, 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="edgetwin bench fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=48, help="tokens of the built-in text to score (default 48)")
    ap.add_argument("--mbf", type=Path, default=ROOT / "build" / "models" / "smollm2-135m-q4.mbf",
                    help="the INT4 MBF (converted from the shipped GGUF if missing)")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.tokens, args.mbf)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
