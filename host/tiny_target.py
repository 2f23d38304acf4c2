"""The gateway's `--model tiny:SEED` target: a tiny llama drawn from one seed, INT4-dequantised.

    target, segs, config = tiny_target.make(seed=3, seq_len=512)

The weights are drawn from one seeded numpy generator in a fixed order (like tools/formats/make_tiny_llama.py)
and quantised to INT4 (q4_numpy.quantize_matrix, groups of 32, float16 scales). The float Target gets
the *dequantised* INT4 weights, so it computes what a node running the same INT4 weights computes, up
to the node's integer arithmetic. `segs` and `config` are the MBF segments and header of those weights:
tools/demo/spec_models.make_pair writes them into the node's .mbf (the matched test pair), so a node
deployed with that .mbf drafts for a gateway started with the same seed.
"""

from __future__ import annotations

import numpy as np

from host.llama_np import LayerWeights, LlamaConfig, LlamaWeights, Target
from shared import mbf
from shared.q4_numpy import quantize_matrix

GROUP = 32


def _q4(rng_w: np.ndarray) -> tuple[bytes, bytes, np.ndarray]:
    """INT4 nibbles, f16 scales and the dequantised float32 matrix of rng_w."""
    rows, cols = rng_w.shape
    buf = bytes(quantize_matrix(rng_w))
    nb = rows * cols // 2
    packed = np.frombuffer(buf[:nb], np.uint8).reshape(rows, cols // 2)
    q = np.empty((rows, cols), np.float64)
    q[:, 0::2] = (packed & 15).astype(np.float64) - 8
    q[:, 1::2] = (packed >> 4).astype(np.float64) - 8
    sc = np.frombuffer(buf[nb:], "<f2").astype(np.float64).reshape(rows, cols // GROUP)
    deq = (q.reshape(rows, cols // GROUP, GROUP) * sc[:, :, None]).reshape(rows, cols)
    return buf[:nb], buf[nb:], deq.astype(np.float32)


def make(seed: int = 1, vocab: int = 64, dim: int = 32, hidden: int = 64, n_layers: int = 1,
         n_heads: int = 4, n_kv_heads: int = 2, seq_len: int = 64, logit_gain: float = 3.0,
         dequantised: bool = True) -> tuple[Target, list, dict]:
    """(target, segs, config): a tiny llama (float Target), its MBF segments [(name, dtype, shape, data)]
    and MBF config, from one seed. dim, hidden and n_heads*head_dim must be multiples of 32 (the INT4
    group). logit_gain scales the classifier: larger = peakier rows. dequantised=False gives the Target
    the original float weights instead of the INT4 ones."""
    if dim % GROUP or hidden % GROUP:
        raise ValueError("dim and hidden must be multiples of 32, got %d, %d" % (dim, hidden))
    rng = np.random.RandomState(seed)
    hd = dim // n_heads
    qd, kvd = n_heads * hd, n_kv_heads * hd

    def mat(rows: int, cols: int, gain: float) -> np.ndarray:
        return rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    segs: list = []

    def _layer(li: int, part: str) -> str:  # tools/formats/mbf_write.layer_name
        return "%s%d.%s" % (mbf.LAYER_PREFIX, li, part)

    def q4seg(name: str, w: np.ndarray) -> np.ndarray:
        nib, sc, deq = _q4(w)
        segs.append((name, "q4", w.shape, nib))
        segs.append((name + mbf.SCALES_SUFFIX, "f16", (w.shape[0], w.shape[1] // GROUP), sc))
        return deq if dequantised else w.astype(np.float32)

    embed = q4seg("token_embd", rng.standard_normal((vocab, dim)))
    layers = []
    for li in range(n_layers):
        an = norm(dim)
        segs.append((_layer(li, "attn_norm"), "f32", (dim,), an.astype("<f4")))
        wq = q4seg(_layer(li, "attn_q"), mat(qd, dim, 1.6))
        wk = q4seg(_layer(li, "attn_k"), mat(kvd, dim, 1.6))
        wv = q4seg(_layer(li, "attn_v"), mat(kvd, dim, 1.0))
        wo = q4seg(_layer(li, "attn_output"), mat(dim, qd, 1.0))
        fn = norm(dim)
        segs.append((_layer(li, "ffn_norm"), "f32", (dim,), fn.astype("<f4")))
        wg = q4seg(_layer(li, "ffn_gate"), mat(hidden, dim, 1.5))
        wu = q4seg(_layer(li, "ffn_up"), mat(hidden, dim, 1.5))
        wd = q4seg(_layer(li, "ffn_down"), mat(dim, hidden, 1.0))
        layers.append(LayerWeights(an, wq, wk, wv, wo, fn, wg, wu, wd))
    on = norm(dim)
    segs.append(("output_norm", "f32", (dim,), on.astype("<f4")))
    out = q4seg("output", mat(vocab, dim, logit_gain))
    config = {"dim": dim, "hidden_dim": hidden, "n_layers": n_layers, "n_heads": n_heads, "n_kv_heads": n_kv_heads,
              "head_dim": hd, "vocab_size": vocab, "sub_vocab": 0, "seq_len": seq_len, "rope_theta": 10000.0,
              "norm_eps": 1e-5, "group_size": GROUP, "tied_embed": 0, "rope_style": 0}
    cfg = LlamaConfig(vocab_size=vocab, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                      head_dim=hd, hidden_dim=hidden, norm_eps=1e-5, rope_theta=10000.0, rope_style="interleaved",
                      context_length=seq_len, tied_embeddings=False)
    return Target(cfg, LlamaWeights(embed=embed, layers=layers, norm=on, output=out)), segs, config
