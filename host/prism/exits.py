"""Per-layer exit heads: a small scorer after each encoder layer but the last.

The model's own head (pooler + classifier) is trained on the last layer's [CLS] state; on an intermediate
state it scores little better than retrieval's order, so pruning cannot decide early with it. An exit head
reads what the layer has already computed: its [CLS] state and the mean of its token states, and predicts
the final exit's logit (a distillation target: fitted on train questions, tools/train/reranker_exits.py):

    logit_l = w2_l . gelu(W1_l [cls_l ; mean_l] + b1_l) + b2_l      for l < last; the last layer keeps the model's head

The heads live beside the model as exits.safetensors (tensors w1 [layers - 1, 2H, M], b1 [layers - 1, M],
w2 [layers - 1, M], b2 [layers - 1], float32; M hidden units); the engine, the full model's per-layer
record and calibration all score through exit_logits(), so what calibration replays is what a live query
computes.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from host.prism.bert import F32, BertCrossEncoder, PrismInputError, PrismModelError, gelu_erf

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
    """One small MLP per intermediate layer: logit_l = w2_l . gelu(W1_l x + b1_l) + b2_l, x = [cls_l ; mean_l].

    w1 [layers - 1, 2H, M], b1 [layers - 1, M], w2 [layers - 1, M], b2 [layers - 1]; the fit's input
    standardisation is folded into w1 and b1."""

    NAMES = ("w1", "b1", "w2", "b2")

    def __init__(self, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray, hidden_size: int,
                 num_layers: int, origin: str = "<arrays>"):
        arrays = [np.asarray(a) for a in (w1, b1, w2, b2)]
        e = num_layers - 1
        m = arrays[0].shape[-1] if arrays[0].ndim == 3 else -1
        want = ((e, 2 * hidden_size, m), (e, m), (e, m), (e,))
        for name, a, shape in zip(self.NAMES, arrays, want):
            if m < 1 or a.shape != shape:
                raise PrismModelError("%s: exit tensor %s has shape %s, the model needs %s" % (
                    origin, name, a.shape, (e, 2 * hidden_size, "M") if name == "w1" else shape))
            if not np.all(np.isfinite(a)):
                raise PrismModelError("%s: exit heads hold non-finite values" % origin)
        self.w1, self.b1, self.w2, self.b2 = (np.ascontiguousarray(a, dtype=F32) for a in arrays)
        self.num_layers = num_layers

    @classmethod
    def from_file(cls, path: str, hidden_size: int, num_layers: int) -> "ExitHeads":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            t = load_file(path)
        except (SafetensorError, OSError, ValueError) as e:
            raise PrismModelError("%s: not a readable safetensors file (%s)" % (path, e)) from None
        missing = [k for k in cls.NAMES if k not in t]
        if missing:
            raise PrismModelError("%s: no %s tensor" % (path, " or ".join(missing)))
        return cls(*(t[k] for k in cls.NAMES), hidden_size, num_layers, origin=path)

    def save(self, path: str) -> None:
        from safetensors.numpy import save_file

        save_file(dict(zip(self.NAMES, (self.w1, self.b1, self.w2, self.b2))), path,
                  metadata={"kind": "edgetwin prism exit heads"})

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.w1, self.b1, self.w2, self.b2)))

    def logits(self, layer: int, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[n, 1] logits of the exit after `layer` (< num_layers - 1) for states [n, T, H] under mask [n, T]."""
        if not 0 <= layer < self.num_layers - 1:
            raise PrismInputError("no exit head after layer %d (heads: 0..%d)" % (layer, self.num_layers - 2))
        return self.score(layer, pooled_states(hidden, mask))

    def score(self, layer: int, pooled: np.ndarray) -> np.ndarray:
        """[n, 1] logits of the exit after `layer` from pooled states [n, 2H] (pooled_states)."""
        h = gelu_erf(pooled @ self.w1[layer] + self.b1[layer])
        return (h @ self.w2[layer] + self.b2[layer])[:, None]


def read_exits(model_dir: str, hidden_size: int, num_layers: int) -> Optional[ExitHeads]:
    """The model directory's exit heads, or None when it ships none (the model's head then scores every exit)."""
    path = os.path.join(model_dir, EXITS_FILE)
    return ExitHeads.from_file(path, hidden_size, num_layers) if os.path.isfile(path) else None


def exit_logits(model: BertCrossEncoder, layer: int, hidden: np.ndarray, mask: np.ndarray,
                exits: Optional[ExitHeads]) -> np.ndarray:
    """The logits every exit scores with: the exit head after an intermediate layer when there is one, the
    model's own head (on [CLS]) otherwise and always after the last layer."""
    if exits is not None and layer < exits.num_layers - 1:
        return exits.logits(layer, hidden, mask)
    return model.head(hidden[:, 0])
