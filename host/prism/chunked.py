"""Chunked execution: the batch runs through a layer in chunks of candidates sized to a memory budget.

Candidates are independent rows (each attends only to its own tokens), so running a layer chunk by
chunk gives the same numbers as the whole batch at once. encoder_layer itself works one sequence at a
time (short ones in groups of up to 512 rows) in preallocated scratch (bert.Workspace) and writes each
chunk back into the hidden array in place, so what grows with the chunk is the per-candidate part: the
engine's embedding of the chunk (word and token-type gathers, their layer norm) and its attention bias.
"""

from __future__ import annotations

import numpy as np

from host.prism.bert import BertConfig, LayerWeights, PrismInputError, attention_bias, encoder_layer, workspace_bytes

# Float32 [tokens, hidden] arrays per candidate of a chunk: the engine's embedding gathers (word rows,
# token-type rows) and their layer norm output; the attention bias adds one [tokens] row.
_HIDDEN_COPIES = 3


def transient_bytes(cfg: BertConfig, tokens: int, rows: int) -> int:
    """Estimated peak temporary bytes of one chunk of `rows` candidates of `tokens` tokens."""
    per_row = 4 * tokens * (_HIDDEN_COPIES * cfg.hidden_size + 1)
    return workspace_bytes(cfg, tokens) + rows * per_row


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
        encoder_layer(hidden[a:e], lw, attention_bias(mask[a:e]), cfg, out=hidden[a:e])
    return hidden
