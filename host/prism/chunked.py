"""Chunked execution: a layer runs over the batch in chunks of candidates sized to a memory budget.

Candidates are independent rows (each attends only to its own tokens), so running a layer chunk by
chunk gives the same numbers as the whole batch at once while the layer's temporaries (Q/K/V, the
[heads, T, T] attention block, the [rows, T, intermediate] feed-forward activation and its GELU
temporaries) exist for one chunk only. The result is written back into the hidden array in place.
"""

from __future__ import annotations

import numpy as np

from host.prism.bert import BertConfig, LayerWeights, PrismInputError, attention_bias, encoder_layer

# Float32 arrays of [rows, T, hidden] / [rows, T, intermediate] alive at the peak of encoder_layer
# (measured with tracemalloc on MiniLM: Q, K, V, context, projections and LayerNorm temporaries; the
# feed-forward output and the erf-GELU's temporaries), plus one sequence's [heads, T, T] scores (x2:
# softmax input and product).
_HIDDEN_COPIES = 10
_INTER_COPIES = 5


def transient_bytes(cfg: BertConfig, tokens: int, rows: int) -> int:
    """Estimated peak temporary bytes of one encoder layer over `rows` candidates of `tokens` tokens."""
    per_row = 4 * tokens * (_HIDDEN_COPIES * cfg.hidden_size + _INTER_COPIES * cfg.intermediate_size)
    return rows * per_row + 2 * 4 * cfg.num_heads * tokens * tokens


def chunk_rows(cfg: BertConfig, tokens: int, budget_bytes: int) -> int:
    """Most candidates per chunk whose layer temporaries fit budget_bytes (at least 1)."""
    if not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise PrismInputError("memory budget must be a positive number of bytes, got %r" % (budget_bytes,))
    one = transient_bytes(cfg, tokens, 1)
    extra = transient_bytes(cfg, tokens, 2) - one
    if budget_bytes <= one:
        return 1
    return 1 + (budget_bytes - one) // extra


def run_layer(hidden: np.ndarray, mask: np.ndarray, lw: LayerWeights, cfg: BertConfig, rows: int) -> np.ndarray:
    """hidden [B, T, H] through one encoder layer, `rows` candidates at a time; updates hidden in place."""
    if rows < 1:
        raise PrismInputError("chunk size must be >= 1, got %d" % rows)
    b = hidden.shape[0]
    for a in range(0, b, rows):
        e = min(b, a + rows)
        hidden[a:e] = encoder_layer(hidden[a:e], lw, attention_bias(mask[a:e]), cfg)
    return hidden
