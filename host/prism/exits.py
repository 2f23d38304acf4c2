"""Per-layer exit heads: a small linear scorer after each encoder layer but the last.

The model's own head (pooler + classifier) is trained on the last layer's [CLS] state; on an intermediate
state it scores little better than retrieval's order, so pruning cannot decide early with it. An exit head
reads what the layer has already computed: its [CLS] state and the mean of its token states, and predicts
the final exit's logit (a distillation target: fitted by ridge regression on train questions,
tools/train/reranker_exits.py):

    logit_l = w_l . [cls_l ; mean_l] + b_l          for l < last; the last layer keeps the model's head

The heads live beside the model as exits.safetensors (tensors "weight" [layers - 1, 2H] and "bias"
[layers - 1], float32); the engine, the full model's per-layer record and calibration all score through
exit_logits(), so what calibration replays is what a live query computes.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from host.prism.bert import F32, PrismInputError, PrismModelError

EXITS_FILE = "exits.safetensors"


def pooled_states(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[n, T, H] states and [n, T] attention mask -> [n, 2H]: the [CLS] state, then the mean of the real tokens."""
    m = np.asarray(mask, dtype=F32)
    count = m.sum(axis=1, keepdims=True)
    if np.any(count <= 0):
        raise PrismInputError("a candidate has no tokens in its attention mask")
    mean = np.einsum("nt,nth->nh", m, hidden, optimize=True) / count
    return np.concatenate([hidden[:, 0], mean.astype(F32)], axis=1)


class ExitHeads:
    """weight [layers - 1, 2H], bias [layers - 1]: the exit after layer l (l < layers - 1) is row l."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, hidden_size: int, num_layers: int,
                 origin: str = "<arrays>"):
        w = np.asarray(weight)
        b = np.asarray(bias)
        want = (num_layers - 1, 2 * hidden_size)
        if w.shape != want:
            raise PrismModelError("%s: exit weight has shape %s, the model needs %s" % (origin, w.shape, want))
        if b.shape != (num_layers - 1,):
            raise PrismModelError("%s: exit bias has shape %s, the model needs (%d,)" % (origin, b.shape, num_layers - 1))
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise PrismModelError("%s: exit heads hold non-finite values" % origin)
        self.weight = np.ascontiguousarray(w, dtype=F32)
        self.bias = np.ascontiguousarray(b, dtype=F32)
        self.num_layers = num_layers

    @classmethod
    def from_file(cls, path: str, hidden_size: int, num_layers: int) -> "ExitHeads":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            t = load_file(path)
        except (SafetensorError, OSError, ValueError) as e:
            raise PrismModelError("%s: not a readable safetensors file (%s)" % (path, e)) from None
        missing = [k for k in ("weight", "bias") if k not in t]
        if missing:
            raise PrismModelError("%s: no %s tensor" % (path, " or ".join(missing)))
        return cls(t["weight"], t["bias"], hidden_size, num_layers, origin=path)

    def save(self, path: str) -> None:
        from safetensors.numpy import save_file

        save_file({"weight": self.weight, "bias": self.bias}, path, metadata={"kind": "edgetwin prism exit heads"})

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes + self.bias.nbytes)

    def logits(self, layer: int, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[n, 1] logits of the exit after `layer` (< num_layers - 1) for states [n, T, H] under mask [n, T]."""
        if not 0 <= layer < self.num_layers - 1:
            raise PrismInputError("no exit head after layer %d (heads: 0..%d)" % (layer, self.num_layers - 2))
        return (pooled_states(hidden, mask) @ self.weight[layer] + self.bias[layer])[:, None]


def read_exits(model_dir: str, hidden_size: int, num_layers: int) -> Optional[ExitHeads]:
    """The model directory's exit heads, or None when it ships none (the model's head then scores every exit)."""
    path = os.path.join(model_dir, EXITS_FILE)
    return ExitHeads.from_file(path, hidden_size, num_layers) if os.path.isfile(path) else None


def exit_logits(model, layer: int, hidden: np.ndarray, mask: np.ndarray, exits: Optional[ExitHeads]) -> np.ndarray:
    """The logits every exit scores with: the exit head after an intermediate layer when there is one, the
    model's own head (on [CLS]) otherwise and always after the last layer."""
    if exits is not None and layer < exits.num_layers - 1:
        return exits.logits(layer, hidden, mask)
    return model.head(hidden[:, 0])
