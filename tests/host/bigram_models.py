"""First-order (bigram) stand-ins for the speculative engine's statistical tests: the interfaces of
host.llama_np.Target and shared.llama.Model (tools/demo/spec_models.py), a table lookup instead of a
forward pass, so 10^4 episodes run in seconds. Test fixtures only: no tool or product code uses them.

    table = bigram_models.bigram_logits(seed=1, vocab=16)
    target = bigram_models.MarkovTarget(table)                       # for host/verifier.py
    draft = bigram_models.TableModel(table, sink=2, window=6, staged=8)  # for shared/drafter.py
"""

from __future__ import annotations

from array import array

import numpy as np

from host.llama_np import LlamaConfig, Target
from shared import ringkv
from tools.demo.spec_models import LIM, FullVocab


def bigram_logits(seed: int, vocab: int, spread: float = 1.5) -> np.ndarray:
    """A (vocab, vocab) float32 table: row t = the logits of the token after t."""
    return (np.random.RandomState(seed).standard_normal((vocab, vocab)) * spread).astype(np.float32)


class MarkovTarget(Target):
    """A Target whose logits after token t are table[t] (a first-order Markov model): forward_many stages
    tokens in the KVCache exactly as the real one does, so host/verifier.py runs unchanged, at the cost
    of a table lookup. For statistical tests that need 10^4 episodes."""

    def __init__(self, table: np.ndarray):  # noqa: D107  (no weights: Target.__init__ is not called)
        v = int(table.shape[0])
        self.cfg = LlamaConfig(vocab_size=v, dim=2, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=2, hidden_dim=2,
                               context_length=1 << 20)
        self.table = np.ascontiguousarray(table, dtype=np.float32)

    def forward_many(self, batch, last_only: bool = False):
        seqs = [(cache, self._tokens(toks)) for cache, toks in batch]
        for cache, toks in seqs:
            self._check_cache(cache, len(toks))
        out = []
        for cache, toks in seqs:
            rows = self.table[toks]
            for _ in range(len(toks)):
                cache.ring.stage()
            out.append(rows[-1:] if last_only and len(toks) else rows)
        return out


class TableModel(FullVocab):
    """The llama.Model interface over a bigram logits table (Q16 ints): for drafts in statistical tests."""

    def __init__(self, table: np.ndarray, sink: int, window: int, staged: int):
        self.n_out = int(table.shape[0])
        self.rows = [array("i", [int(v) for v in np.clip(np.rint(r.astype(np.float64) * 65536), -LIM, LIM)])
                     for r in table]
        self.kv = ringkv.RingKV(1, 1, sink, window, staged, "b", 1)
        self.logits = array("i", bytes(4 * self.n_out))

    def step(self, token: int) -> int:
        s = self.kv.stage()
        self.logits[:] = self.rows[self.row_of(token)]
        return s

    def prefill(self, tokens, n: int = -1) -> None:
        if n < 0:
            n = len(tokens)
        for i in range(n):
            self.step(tokens[i])
            self.kv.commit(1)
