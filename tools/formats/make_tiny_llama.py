"""Build the tiny random Llama used by the runtime's tests (deterministic: same bytes on every run).

    .venv/bin/python -m tools.formats.make_tiny_llama                      # rewrite tests/shared/data/tiny_llama.mbf
    .venv/bin/python -m tools.formats.make_tiny_llama --tied -o /tmp/t.mbf # the tied-embedding variant
    .venv/bin/python -m tools.formats.make_tiny_llama --check              # exit 1 if the committed file differs

The model: dim 32, hidden 64, 2 layers, 4 query heads / 2 KV heads (head_dim 8), vocabulary 96, seq_len
40, random Gaussian weights scaled so that attention is neither uniform nor one-hot and the logits spread
over several units, quantised with q4_numpy.quantize_matrix (INT4, groups of 32, float16 scales). RMSNorm
gains are f32 near 1. No tokenizer (the tests feed token ids). It is a mechanics fixture: it predicts
nothing meaningful. Small on purpose: the MicroPython tests build it next to the runtime compiled from
source on the rp2040 heap (docs/RUNTIME.md section 7); `--dim 64 --hidden 128 -o X` makes a bigger one
for benchmarks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from shared.q4_numpy import quantize_matrix
from tools.formats.mbf_write import build, layer_name, scales_name

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "shared" / "data" / "tiny_llama.mbf"
SEED = 20240611

CONFIG: dict[str, int | float] = {
    "dim": 32, "hidden_dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 96,
    "sub_vocab": 0, "seq_len": 40, "rope_theta": 10000.0, "norm_eps": 1e-5, "group_size": 32,
    "tied_embed": 0,
}


def _q4(name: str, w: np.ndarray) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    rows, cols = w.shape
    buf = bytes(quantize_matrix(w))
    nib = rows * cols // 2
    return [(name, "q4", (rows, cols), buf[:nib]), (scales_name(name), "f16", (rows, cols // 32), buf[nib:])]


def _norm(rng: np.random.RandomState, n: int) -> np.ndarray:
    return (1.0 + 0.1 * rng.standard_normal(n)).astype("<f4")


Segment = tuple[str, str, tuple[int, ...], "bytes | np.ndarray"]


def segments(tied: bool, config: dict[str, int | float] | None = None) -> list[Segment]:
    """Every segment of the model, drawn from one seeded generator in a fixed order."""
    c = config or CONFIG
    rng = np.random.RandomState(SEED)
    dim, hid, hd = c["dim"], c["hidden_dim"], c["dim"] // c["n_heads"]
    qd, kvd, vocab = c["n_heads"] * hd, c["n_kv_heads"] * hd, c["vocab_size"]

    def mat(rows: int, cols: int, gain: float) -> np.ndarray:
        return rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))

    segs: list = _q4("token_embd", rng.standard_normal((vocab, dim)))
    for layer in range(c["n_layers"]):
        segs.append((layer_name(layer, "attn_norm"), "f32", (dim,), _norm(rng, dim)))
        segs += _q4(layer_name(layer, "attn_q"), mat(qd, dim, 1.6))
        segs += _q4(layer_name(layer, "attn_k"), mat(kvd, dim, 1.6))
        segs += _q4(layer_name(layer, "attn_v"), mat(kvd, dim, 1.0))
        segs += _q4(layer_name(layer, "attn_output"), mat(dim, qd, 1.0))
        segs.append((layer_name(layer, "ffn_norm"), "f32", (dim,), _norm(rng, dim)))
        segs += _q4(layer_name(layer, "ffn_gate"), mat(hid, dim, 1.5))
        segs += _q4(layer_name(layer, "ffn_up"), mat(hid, dim, 1.5))
        segs += _q4(layer_name(layer, "ffn_down"), mat(dim, hid, 1.0))
    segs.append(("output_norm", "f32", (dim,), _norm(rng, dim)))
    out = mat(vocab, dim, 3.0)  # drawn for both variants, so they share every other weight
    if not tied:
        segs += _q4("output", out)
    return segs


def build_model(tied: bool = False, **sizes: int) -> bytes:
    """The MBF file's bytes; sizes (dim, hidden_dim, n_layers, vocab_size...) override the fixture's
    (e.g. dim=64, hidden_dim=128 for a benchmark model; dims must stay multiples of 32)."""
    config = dict(CONFIG, tied_embed=int(tied), **sizes)
    return build(config, b"", segments(tied, config))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=FIXTURE, help="output path (default: the test fixture)")
    ap.add_argument("--tied", action="store_true", help="tie the classifier to token_embd (no 'output')")
    ap.add_argument("--check", action="store_true", help="compare with the file at --out instead of writing it")
    ap.add_argument("--dim", type=int, help="model width (multiple of 32; the fixture's is %d)" % CONFIG["dim"])
    ap.add_argument("--hidden", type=int, help="SwiGLU width (multiple of 32; the fixture's is %d)"
                    % CONFIG["hidden_dim"])
    args = ap.parse_args(argv)
    sizes = {k: v for k, v in (("dim", args.dim), ("hidden_dim", args.hidden)) if v is not None}
    if (sizes or args.tied) and args.out == FIXTURE and not args.check:
        ap.error("--tied/--dim/--hidden build a different model: give -o (the fixture is the untied one)")
    data = build_model(args.tied, **sizes)
    if args.check:
        same = args.out.exists() and args.out.read_bytes() == data
        print("%s: %s" % (args.out, "up to date" if same else "DIFFERS from a fresh build; rerun without --check"))
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print("wrote %s (%d bytes)" % (args.out, len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
