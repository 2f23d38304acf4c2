"""PRISM: the reranker with all five mechanisms on top of bert.py's embed / layer / head steps.

    prism = Prism.from_pretrained(model_dir)      # pruning settings from model_dir/prism.json when it has one
    r = prism.rank(question, windows, k=5)        # Ranking: r.top, r.latency_s, r.layers_per_candidate ...
    r = prism.rank(question, windows, k=5, prior=prism.retrieval_prior(len(windows), pinned=1))  # ask's order

Per query: the pairs are tokenized; the word-embedding rows of the query's distinct tokens come from
the LRU-K row cache (embed_cache.py), the rest of the embedding is done chunk by chunk; then layer by
layer: the layer's weights come from the streamer (streaming.py: two slots, layer l+1 read while layer
l computes), the active candidates go through it in chunks sized to the memory budget (chunked.py),
the exit after the layer scores every active candidate (exits.py: the model's exit head for that layer, or
its own head on [CLS]) and the router (pruning.py) selects, drops or
keeps candidates. The loop stops as soon as the top-k places are filled. Candidates given in retrieval's
order get the model's retrieval prior (prior.py) added to every exit's logit.
"""

from __future__ import annotations

import json
import math
import os
import time
import tracemalloc
from typing import Optional, Sequence

import numpy as np

from host.prism import wordpiece
from host.prism.bert import (
    F32, BertCrossEncoder, PrismInputError, PrismModelError, _read_config, layer_norm,
)
from host.prism.chunked import chunk_rows, run_layer
from host.prism.embed_cache import StreamedWeights
from host.prism.exits import ExitHeads, exit_logits, read_exits
from host.prism.prior import RetrievalPrior, check_prior
from host.prism.pruning import SPLITS, Router, check_settings, probabilities
from host.prism.ranking import Ranking, check_k
from host.prism.st_file import SafetensorsFile
from host.prism.streaming import LayerStreamer

DEFAULT_THRESHOLD = 0.3
DEFAULT_BUDGET = 32 << 20  # bytes of layer temporaries per chunk
SETTINGS_FILE = "prism.json"  # the model's calibrated pruning settings (written by tools/train/make_reranker.py)


def read_settings(model_dir: str) -> dict:
    """{"threshold", "clusters", "margin", "split", "prior"} calibrated for the model in model_dir ({} when it has
    no prism.json).

    threshold null in the file means never prune (calibration found no threshold meeting its target);
    prior (a RetrievalPrior, or None when the file has none) is what retrieval's order adds to a logit."""
    path = os.path.join(model_dir, SETTINGS_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        raise PrismModelError("%s: not readable JSON (%s)" % (path, e)) from None
    if not isinstance(data, dict):
        raise PrismModelError("%s: expected a JSON object" % path)
    thr = data.get("threshold", DEFAULT_THRESHOLD)
    thr = math.inf if thr is None else thr
    clusters = data.get("clusters", 3)
    margin = data.get("margin", 0)
    split = data.get("cluster_on", "prob")  # what the k-means splits (pruning.py's Router split=)
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not thr >= 0:
        raise PrismModelError("%s: threshold must be a number >= 0 or null, got %r" % (path, thr))
    if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 2:
        raise PrismModelError("%s: clusters must be an int >= 2, got %r" % (path, clusters))
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise PrismModelError("%s: margin must be an int >= 0, got %r" % (path, margin))
    if split not in SPLITS:
        raise PrismModelError("%s: cluster_on must be one of %s, got %r" % (path, ", ".join(SPLITS), split))
    return {"threshold": float(thr), "clusters": clusters, "margin": margin, "split": split,
            "prior": RetrievalPrior.from_settings(data.get("prior"), path)}


class Prism:
    """PRISM reranker over a Hugging Face BERT cross-encoder directory (see the module docstring)."""

    def __init__(self, model: BertCrossEncoder, st: SafetensorsFile, *, threshold: float = DEFAULT_THRESHOLD,
                 clusters: int = 3, start_layer: int = 0, memory_budget: int = DEFAULT_BUDGET,
                 prefetch: bool = True, prune: bool = True, prior: Optional[RetrievalPrior] = None,
                 margin: int = 0, split: str = "prob", exits: Optional[ExitHeads] = None):
        if not isinstance(model.weights, StreamedWeights):
            raise PrismModelError("Prism needs a model built on StreamedWeights (use Prism.from_pretrained)")
        self.model = model
        self.cfg = model.config
        self.st = st
        self.threshold, self.clusters, self.start_layer = threshold, clusters, start_layer
        check_settings(threshold, clusters, margin, split)  # here, not at the first query
        self.margin, self.split = margin, split
        self.memory_budget = memory_budget
        self.prune = prune
        self.prior = prior
        if exits is not None and exits.num_layers != model.config.num_layers:
            raise PrismModelError("exit heads for %d layers on a %d-layer model" % (exits.num_layers, model.config.num_layers))
        self.exits = exits
        chunk_rows(self.cfg, 1, memory_budget)  # validates the budget
        self.weights: StreamedWeights = model.weights
        self.streamer = LayerStreamer(st, model.prefix, self.cfg, prefetch=prefetch)
        p = model.prefix
        self._pos = self.weights.get(p + "embeddings.position_embeddings.weight")
        self._types = self.weights.get(p + "embeddings.token_type_embeddings.weight")
        self._ln = (self.weights.get(p + "embeddings.LayerNorm.weight"), self.weights.get(p + "embeddings.LayerNorm.bias"))

    @classmethod
    def from_pretrained(cls, model_dir: str, *, init_head: bool = False, seed: int = 0,
                        max_length: Optional[int] = None, cache_fraction: float = 0.1, use_exits: bool = True,
                        **kw) -> "Prism":
        """use_exits=False scores every exit with the model's own head even when model_dir has exit heads."""
        model_dir = str(model_dir)
        if not os.path.isdir(model_dir):
            raise PrismModelError("model directory %s does not exist" % model_dir)
        config = _read_config(model_dir)
        st = SafetensorsFile(os.path.join(model_dir, "model.safetensors"))
        if not 0 < cache_fraction <= 1:
            raise PrismModelError("cache_fraction must be in (0, 1], got %r" % (cache_fraction,))
        weights = StreamedWeights(st, cache_fraction)
        limit = min(max_length or config.max_position, config.max_position)
        try:
            tok = wordpiece.load_tokenizer(model_dir, limit)
        except wordpiece.TokenizerError as exc:
            raise PrismModelError(str(exc)) from None
        if tok.get_vocab_size() > config.vocab_size:
            raise PrismModelError("%s: the tokenizer has %d tokens but config.json's vocab_size is %d (tokenizer and "
                                  "weights do not belong together)" % (model_dir, tok.get_vocab_size(), config.vocab_size))
        model = BertCrossEncoder(config, weights, tok, init_head=init_head, seed=seed, max_length=limit)
        for key, value in read_settings(model_dir).items():  # the model's calibration, unless the caller chose
            if kw.get(key) is None:
                kw[key] = value
        kw = {key: value for key, value in kw.items() if value is not None}
        if use_exits and kw.get("exits") is None:
            kw["exits"] = read_exits(model_dir, config.hidden_size, config.num_layers)
        return cls(model, st, **kw)

    def retrieval_prior(self, n: int, pinned: int = 0) -> Optional[np.ndarray]:
        """The model's prior for n candidates in retrieval's order (the first `pinned` found by the record), or
        None when the model has none (prior.py)."""
        return None if self.prior is None else self.prior.logits(n, pinned)

    @property
    def max_length(self) -> int:
        return self.model.max_length

    def resident_bytes(self) -> int:
        """Weights held between queries: two layer slots, the embedding-row cache, the small tensors, the head."""
        cache = self.weights.cache.nbytes if self.weights.cache is not None else 0
        head = sum(int(a.nbytes) for a in self.model.head_tensors().values())
        head += self.exits.nbytes if self.exits is not None else 0
        return 2 * self.streamer.layer_bytes + cache + self.weights.kept_bytes() + head

    def _embed(self, ids: np.ndarray, types: np.ndarray, rows: int) -> np.ndarray:
        """Embedding of the whole batch, one chunk at a time (the word rows of distinct tokens looked up once)."""
        cfg = self.cfg
        if ids.max() >= cfg.vocab_size:
            raise PrismModelError("token id %d outside the model's vocabulary (%d): tokenizer and weights do not "
                                  "belong together" % (int(ids.max()), cfg.vocab_size))
        if types.max() >= cfg.type_vocab_size:
            raise PrismInputError("token_type_ids outside 0..%d" % (cfg.type_vocab_size - 1))
        uniq, inverse = np.unique(ids, return_inverse=True)
        inverse = inverse.reshape(ids.shape)
        words = self.weights.rows(self.weights.word_name, uniq)  # [U, H] through the LRU-K cache
        b, t = ids.shape
        hidden = np.empty((b, t, cfg.hidden_size), F32)
        pos = self._pos[:t]
        for a in range(0, b, rows):
            e = min(b, a + rows)
            x = words[inverse[a:e]]
            x += pos
            x += self._types[types[a:e]]
            layer_norm(x, self._ln[0], self._ln[1], cfg.layer_norm_eps, out=hidden[a:e])
        return hidden

    def rank(self, question: str, passages: Sequence[str], k: int = 5, threshold: Optional[float] = None,
             prior: Optional[np.ndarray] = None) -> Ranking:
        """Top k of passages for question; Ranking carries the per-query report.

        prior: [n] logits added to every exit's (retrieval_prior() for candidates in retrieval's order), or None."""
        t0 = time.perf_counter()
        tracing = tracemalloc.is_tracing()
        if tracing:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
        model, cfg = self.model, self.cfg
        batch = model.encode(question, passages)
        n = batch.input_ids.shape[0]
        check_k(k, n)
        prior = check_prior(prior, n)
        thr = self.threshold if threshold is None else threshold
        router = Router(n, k, cfg.num_layers, thr if self.prune else float("inf"), self.clusters, self.start_layer,
                        self.margin, self.split)
        cache = self.weights.cache
        h0, m0 = (cache.hits, cache.misses) if cache is not None else (0, 0)
        self.streamer.reset_stats()
        t = batch.input_ids.shape[1]
        rows = chunk_rows(cfg, t, self.memory_budget)
        hidden = self._embed(batch.input_ids, batch.token_type_ids, rows)
        mask = batch.attention_mask
        for l in range(cfg.num_layers):
            lw = self.streamer.acquire(l)
            run_layer(hidden, mask, lw, cfg, rows)
            keep = router.after_layer(l, probabilities(exit_logits(model, l, hidden, mask, self.exits), prior))
            if router.done:
                break
            if not keep.all():
                hidden = hidden[keep]
                mask = mask[keep]
                prior = prior[keep] if prior is not None else None
        del hidden
        r = Ranking(
            top=list(router.selected), probs=router.last_prob.copy(), exit_layer=router.exit_layer.copy(),
            num_layers=cfg.num_layers, latency_s=time.perf_counter() - t0,
            truncated=int(batch.truncated.sum()) if batch.truncated is not None else 0, tokens=t,
        )
        if tracing:
            r.peak_bytes = tracemalloc.get_traced_memory()[1] - base
        r.stats = {
            "threshold": thr,
            "chunk_rows": rows,
            "prune_events": router.events,
            "io_hidden_fraction": round(self.streamer.io_hidden_fraction, 4),
            "layer_loads": self.streamer.loads,
        }
        if cache is not None:
            hits, misses = cache.hits - h0, cache.misses - m0
            r.stats["embed_cache_hits"] = hits
            r.stats["embed_cache_misses"] = misses
        # the next query starts with layer 0: read it now (its read counts for the query during which it ends)
        self.streamer.prefetch_next(0)
        return r

    def close(self) -> None:
        self.streamer.close()
        self.weights.close()
