"""PRISM: the gateway's cross-encoder reranker (numpy BERT run layer by layer, with pruning, streaming,
chunking and an embedding-row cache). Prism lives in host.prism.engine (imported on demand: it pulls in
shared.lruk and a thread pool)."""

from host.prism.bert import (
    BertConfig,
    BertCrossEncoder,
    Batch,
    PrismInputError,
    PrismModelError,
    ResidentWeights,
    WeightSource,
)

__all__ = [
    "BertConfig",
    "BertCrossEncoder",
    "Batch",
    "PrismInputError",
    "PrismModelError",
    "ResidentWeights",
    "WeightSource",
]
