"""Monolithic forwarding, the baseline "full model": all candidates as one batch through every layer.

Also records the relevance probability every candidate would get from its intermediate states
after each layer (the exit head or the pooler + classifier: negligible next to a layer), which is
what calibration replays the pruning router over.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from host.prism.bert import BertCrossEncoder, Batch
from host.prism.exits import ExitHeads, exit_logits
from host.prism.prior import check_prior
from host.prism.pruning import probabilities
from host.prism.ranking import Ranking, check_k


def layer_probs(model: BertCrossEncoder, batch: Batch, prior: Optional[np.ndarray] = None,
                exits: Optional[ExitHeads] = None) -> tuple[np.ndarray, np.ndarray]:
    """(final logits [B, labels], probabilities [layers, B] after each layer), whole batch at once.

    prior: [B] logits added at every exit (host/prism/prior.py), or None; exits: the model's exit heads
    (host/prism/exits.py) or None for its own head at every exit."""
    hidden = model.embed(batch.input_ids, batch.token_type_ids)
    prior = check_prior(prior, hidden.shape[0])
    probs = np.empty((model.config.num_layers, hidden.shape[0]))
    for l in range(model.config.num_layers):
        hidden = model.layer(l, hidden, batch.attention_mask)
        logits = exit_logits(model, l, hidden, batch.attention_mask, exits)
        probs[l] = probabilities(logits, prior)
    return logits, probs


def rank_full(model: BertCrossEncoder, question: str, passages: Sequence[str], k: int,
              prior: Optional[np.ndarray] = None, exits: Optional[ExitHeads] = None) -> Ranking:
    """Top k of the full model (every candidate through every layer, one batch); prior and exits as for
    layer_probs (the exits change only the per-layer record, never the final order)."""
    t0 = time.perf_counter()
    batch = model.encode(question, passages)
    n = batch.input_ids.shape[0]
    check_k(k, n)
    _, probs = layer_probs(model, batch, prior, exits)
    final = probs[-1]
    order = np.argsort(-final, kind="stable")
    L = model.config.num_layers
    return Ranking(
        top=[int(i) for i in order[:k]], probs=final, exit_layer=np.full(n, L - 1), num_layers=L,
        latency_s=time.perf_counter() - t0, truncated=int(batch.truncated.sum()) if batch.truncated is not None else 0,
        tokens=int(batch.input_ids.shape[1]), layer_probs=probs,
    )

