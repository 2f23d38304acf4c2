"""PRISM: the gateway's cross-encoder reranker (numpy BERT run layer by layer)."""

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
