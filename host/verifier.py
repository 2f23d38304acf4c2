"""The gateway side of deferred speculative decoding: per-node streams and one batched verification pass.

    streams = {node: TargetMirror(target, sink=4, window=28, staged=16, temperature=0.7, seed=1)}
    stream.on_prompt(body)                 # PROMPT (0x14): ids committed without verification
    stream.on_draft(body)                  # DRAFT (0x11): queued
    for stream, verdict, ids in Verifier(target).verify(list(streams.values())):
        send(VERDICT, verdict)             # ids: the tokens this verdict committed (accepted + correction)

A TargetMirror mirrors one node's token stream: a KVCache of the target with the node's sink and window
(the same logical slots as the node's RingKV), the committed count, the token ids (IdRing, as the node
keeps them) and the target row p after the last committed token.

verify() runs ONE target.forward_many over every stream's queued work: the prompt tokens (and the
correction of its last verdict, whose K/V the target has not computed yet) followed by its pending
blocks, chained (block n+1 was drafted on top of block n); prompt ids beyond the staging room go first,
every stream's in the same chunked passes (feed_batched). Then, per stream and block, the exact rule
of docs/SPECDEC.md (deferred): draft token i is tested against the target row before it; on the first
rejection the correction is drawn from norm(max(0, p - q)) and the block stops; a fully accepted block
gets no bonus token, its last row is row 0 of the next block (kept across calls in `row`). Greedy
streams (temperature 0) accept a draft token iff it is the argmax of the target's float logits.

p is the target's final sampling distribution (temperature, then top-k), quantised to P_TOTAL counts
by the rule of specdec.Dist.set_probs, vectorised here (quantise_probs; same counts, tested), and the
accept / residual steps are specdec.accept / residual_sample in numpy with the same integer draws from
the stream's specdec.Rng, so a block verified here gives exactly what shared/specdec.verify_block gives
on the same rows.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from host.llama_np import KVCache, Target
from shared import frame, frame_host, specdec
from shared.compat import MASK30  # positions travel mod 2**30, the tick clock's modulus
from shared.drafter import ID_SKIP, IdRing

P_TOTAL = specdec.P_TOTAL
Q_TOTAL = specdec.Q_TOTAL
TWO29 = float(1 << 29)


class VerifierError(ValueError):
    """A malformed or out-of-range PROMPT / DRAFT body, or a misused TargetMirror."""


class StreamDesync(VerifierError):
    """The node's stream and ours disagree (a PROMPT at another base): reset() and rebuild."""


def pack_prompt(base: int, ids: Sequence[int], unverified: bool = False) -> bytes:
    """PROMPT body (host side): ids (1..255) committed at base."""
    ids = [int(t) for t in ids]
    return frame_host.pack_body(frame.PROMPT, base=base, n=len(ids), flags=frame.PR_UNVERIFIED if unverified else 0,
                           ids=ids)


# ---- the integer rule, vectorised --------------------------------------------------------------------

def quantise_probs(probs: np.ndarray, total: int = P_TOTAL) -> np.ndarray:
    """Counts (int64, same length, summing to total) from probabilities: specdec.Dist.set_probs's rule.

    Weights w = floor(p * 2**29) (exact), count = floor(w * total / W), then the total - sum(counts)
    units left go one each to the largest remainders w * total mod W, ties to the lower index."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise VerifierError("quantise_probs needs a non-empty 1-D row")
    if not (np.all(p >= 0.0) and np.all(p <= 1.0)):
        raise VerifierError("quantise_probs: probabilities must lie in [0, 1]")
    w = np.floor(p * TWO29).astype(np.int64)
    wsum = int(w.sum())
    if wsum <= 0 or wsum > (1 << 30) - 1:
        raise VerifierError("quantise_probs: weights sum to %d (need 1..2**30-1)" % wsum)
    prod = w * total  # < 2**59
    c = prod // wsum
    rem = prod - c * wsum
    left = total - int(c.sum())
    if left:  # left < n: the `left` largest keys (remainder descending, then index ascending)
        n = p.size
        key = rem * (1 << 20) + ((1 << 20) - 1 - np.arange(n, dtype=np.int64))  # rem < 2**30, n < 2**20
        top = np.argpartition(-key, left - 1)[:left] if left < n else np.arange(n)
        c[top] += 1
    return c


def target_probs(logits: np.ndarray, temperature: float, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids ascending, probabilities) of the final sampling distribution: top-k by logit (ties: lower
    id; 0 = all), then softmax(logit / temperature) in float64 (specdec.sampling_probs's rule)."""
    x = np.asarray(logits, dtype=np.float64)
    n = x.size
    if 0 < top_k < n:
        kth = np.partition(x, n - top_k)[n - top_k]  # the top_k-th largest logit
        above = np.flatnonzero(x > kth)
        tied = np.flatnonzero(x == kth)[:top_k - above.size]  # ties at the threshold: the lower ids
        ids = np.sort(np.concatenate([above, tied]))
    else:
        ids = np.arange(n)
    z = x[ids]
    e = np.exp((z - z.max()) / temperature)
    return ids, e / e.sum()


class PRow:
    """One target row as P_TOTAL counts: ids ascending (the support) and counts, plus lookups."""

    __slots__ = ("ids", "counts", "dense")

    def __init__(self, logits: np.ndarray, temperature: float, top_k: int):
        ids, probs = target_probs(logits, temperature, top_k)
        c = quantise_probs(probs)
        keep = c > 0
        self.ids = ids[keep]
        self.counts = c[keep]
        self.dense = np.zeros(np.asarray(logits).size, np.int64)
        self.dense[self.ids] = self.counts

    def count_of(self, t: int) -> int:
        return int(self.dense[t]) if 0 <= t < self.dense.size else 0

    def sample(self, rng: specdec.Rng) -> int:
        v = rng.below(P_TOTAL)
        return int(self.ids[int(np.searchsorted(np.cumsum(self.counts), v, side="right"))])


def accept_np(p: PRow, q_ids: Sequence[int], q_counts: Sequence[int], x: int, rng: specdec.Rng) -> bool:
    """specdec.accept for a PRow p and the draft record (q_ids, q_counts): min(1, p(x)/q(x)) exactly."""
    s = P_TOTAL // Q_TOTAL
    b = 0
    for t, c in zip(q_ids, q_counts):
        if t == x:
            b = c
    if b <= 0:
        raise VerifierError("draft token %d has q = 0" % x)
    b *= s
    a = p.count_of(x)
    if a >= b:
        return True
    if a == 0:
        return False
    return rng.below(b) < a


def residual_np(p: PRow, q_ids: Sequence[int], q_counts: Sequence[int], rng: specdec.Rng) -> int:
    """specdec.residual_sample: a token from max(0, p - q) over p's support, ascending id, same draw."""
    s = P_TOTAL // Q_TOTAL
    sq = np.zeros(p.dense.size, np.int64)
    sq[np.asarray(q_ids, dtype=np.int64)] = np.asarray(q_counts, dtype=np.int64) * s
    r = np.maximum(p.counts - sq[p.ids], 0)
    cum = np.cumsum(r)
    total = int(cum[-1]) if cum.size else 0
    if total <= 0:
        raise VerifierError("no residual: p <= q everywhere")
    v = rng.below(total)
    return int(p.ids[int(np.searchsorted(cum, v, side="right"))])


# ---- streams -----------------------------------------------------------------------------------------

class Block:
    __slots__ = ("id", "base", "tokens", "q_ids", "q_counts")

    def __init__(self, bid: int, base: int, tokens: list[int], q_ids: list[list[int]], q_counts: list[list[int]]):
        self.id = bid
        self.base = base
        self.tokens = tokens
        self.q_ids = q_ids
        self.q_counts = q_counts


def _newer(a: int, b: int) -> bool:
    """Block id a is at or after b (16-bit serial numbers)."""
    return ((a - b) & 0xFFFF) < 0x8000


class TargetMirror:
    """One node's token stream on the gateway (see the module docstring)."""

    def __init__(self, target: Target, sink: int, window: int, staged: int = 32, temperature: float = 0.0,
                 top_k: int = 0, seed: int = 1, name: str = ""):
        if not isinstance(target, Target):
            raise VerifierError("TargetMirror needs a host.llama_np.Target, got %s" % type(target).__name__)
        if not (isinstance(temperature, (int, float)) and temperature >= 0):
            raise VerifierError("temperature must be >= 0, got %r" % (temperature,))
        if not isinstance(top_k, int) or top_k < 0:
            raise VerifierError("top_k must be an int >= 0, got %r" % (top_k,))
        self.target = target
        self.cache: KVCache = target.new_cache(sink, window, staged)
        self.temperature = float(temperature)
        self.top_k = top_k
        self.rng = specdec.Rng(seed)
        self.name = name
        self.vocab = target.cfg.vocab_size
        self.ids = IdRing(sink, window)
        self.stats = {"blocks": 0, "drafted": 0, "accepted": 0, "corrections": 0, "tested": 0, "stale": 0,
                      "dropped": 0, "prompt": 0, "unverified": 0, "passes": 0}
        self.reset(0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def reset(self, committed: int | None = 0) -> None:
        """Empty the cache and the queues. committed=None: adopt the base of the next PROMPT (a rebuild
        from the node's resend_history)."""
        self.cache.reset()
        self.ids.reset()
        self.committed = 0 if committed is None else committed & MASK30
        self.adopt = committed is None
        self.prefix: list[int] = []  # committed, not yet through the target (prompt ids, the last correction)
        self.row: np.ndarray | None = None  # target logits after the last committed token, when computed
        self.blocks: list[Block] = []
        # blocks with ids before this are dead: judged already, or drafted on top of a rejected block (the
        # node's next block after a rejection of b is b + ID_SKIP); moves with every verdict, so 16-bit
        # serial comparison stays valid however long the stream runs
        self.min_id: int | None = None

    # ---- input ----

    def _commit_ids(self, ids: Sequence[int]) -> None:
        for t in ids:
            self.ids.push(int(t))
        self.committed = (self.committed + len(ids)) & MASK30

    def on_prompt(self, body: bytes | bytearray | memoryview) -> tuple[list[int], bool]:
        """Queue a PROMPT body's ids (committed now, fed with the next pass) -> (ids, unverified)."""
        try:
            f = frame_host.parse_body(frame.PROMPT, body)
        except frame.FrameError as e:
            raise VerifierError(str(e)) from None
        ids = f["ids"]
        bad = [t for t in ids if t >= self.vocab]
        if bad:
            raise VerifierError("PROMPT token id %d out of range 0..%d" % (bad[0], self.vocab - 1))
        if self.adopt:
            self.committed = f["base"]
            self.adopt = False
        if f["base"] != self.committed:
            raise StreamDesync("PROMPT at base %d but %d tokens are committed here" % (f["base"], self.committed))
        if self.blocks:  # the node sends a PROMPT only once every block is judged: these are dead
            self.stats["dropped"] += len(self.blocks)
            self.blocks = []
        self._commit_ids(ids)
        self.prefix.extend(ids)
        self.row = None
        unverified = bool(f["flags"] & frame.PR_UNVERIFIED)
        self.stats["unverified" if unverified else "prompt"] += len(ids)
        return ids, unverified

    def on_draft(self, body: bytes | bytearray | memoryview) -> None:
        """Queue a DRAFT body's block (VerifierError if malformed or out of range)."""
        try:
            f = frame_host.parse_body(frame.DRAFT, body)
        except frame.FrameError as e:
            raise VerifierError(str(e)) from None
        toks = f["tokens"]
        for r in toks:
            if max(r["ids"]) >= self.vocab:
                raise VerifierError("DRAFT token id %d out of range 0..%d" % (max(r["ids"]), self.vocab - 1))
        if len(toks) > self.cache.staged:
            raise VerifierError("DRAFT block of %d tokens exceeds the stream's staging room %d" % (
                len(toks), self.cache.staged))
        self.blocks.append(Block(f["block"], f["base"], [r["token"] for r in toks], [r["ids"] for r in toks],
                                 [r["counts"] for r in toks]))

    @property
    def queued(self) -> bool:
        return bool(self.prefix or self.blocks)

    # ---- one pass: planning and judging ----

    def _plan(self) -> tuple[list, list[Block]]:
        """-> (STALE verdicts for blocks that cannot be judged, the chain of blocks this pass verifies).
        Dead blocks (ids before min_id) are dropped; blocks that do not fit the staging room wait."""
        out: list = []
        chain: list[Block] = []
        expect = (self.committed) & MASK30
        room = self.cache.ring.room()
        fed = 0  # block tokens; a long prefix is prefilled first (Verifier.verify) to make room
        keep: list[Block] = []
        for b in self.blocks:
            if self.min_id is not None and not _newer(b.id, self.min_id):
                self.stats["dropped"] += 1  # drafted on top of a rejected block: the node discarded it
                continue
            if chain and b.base == expect and fed + len(b.tokens) <= room:
                chain.append(b)
                fed += len(b.tokens)
                expect = (expect + len(b.tokens)) & MASK30
            elif not chain and b.base == expect and (self.row is not None or self.prefix):
                if fed + len(b.tokens) > room:
                    keep.append(b)  # prefill first; judged next pass
                    continue
                chain.append(b)
                fed += len(b.tokens)
                expect = (expect + len(b.tokens)) & MASK30
            elif chain or keep:
                keep.append(b)
            else:
                self.stats["stale"] += 1
                out.append((self, frame_host.pack_verdict(b.id, b.base, 0, stale=True, committed=self.committed), []))
        self.blocks = keep
        return out, chain

    def _judge(self, rows: np.ndarray, chain: list[Block]) -> list:
        """Verdicts for the chained blocks from this pass's logits rows (prefix rows first)."""
        out: list = []
        npre = len(self.prefix)
        cache = self.cache
        r = npre - 1  # row index before the next draft token (-1: the kept row)
        commit = npre
        greedy = self.greedy
        self.prefix = []
        for bi, b in enumerate(chain):
            acc, corr = len(b.tokens), -1
            for i, x in enumerate(b.tokens):
                row = self.row if r < 0 else rows[r]
                self.stats["tested"] += 1
                if greedy:
                    best = int(np.argmax(row))
                    ok = x == best
                    if not ok:
                        corr = best
                else:
                    p = PRow(row, self.temperature, self.top_k)
                    ok = accept_np(p, b.q_ids[i], b.q_counts[i], x, self.rng)
                    if not ok:
                        corr = residual_np(p, b.q_ids[i], b.q_counts[i], self.rng)
                if not ok:
                    acc = i
                    break
                r += 1
            self.stats["blocks"] += 1
            self.stats["drafted"] += len(b.tokens)
            self.stats["accepted"] += acc
            committed_ids = b.tokens[:acc] + ([corr] if corr >= 0 else [])
            self._commit_ids(committed_ids)
            commit += acc
            out.append((self, frame_host.pack_verdict(b.id, b.base, acc, correction=corr if corr >= 0 else None,
                                                 committed=self.committed), committed_ids))
            # ids before min_id are dead: on top of a rejected block (id + ID_SKIP), or already judged
            self.min_id = (b.id + (ID_SKIP if corr >= 0 else 1)) & 0xFFFF
            if corr >= 0:
                self.stats["corrections"] += 1
                cache.commit(commit)  # the rest of this pass (this block's tail, the blocks on top) goes
                self.prefix = [corr]
                self.row = None
                dropped = len(chain) - bi - 1
                self.stats["dropped"] += dropped
                return out
        cache.commit(commit)
        if not chain:  # prompt ids only: the pass may have computed their last row alone (last_only)
            self.row = rows[-1]
        elif r >= 0:
            self.row = rows[r]
        return out


def feed_batched(target: Target, items: Sequence[tuple[KVCache, Sequence[int]]]) -> tuple[list, int]:
    """Feed and commit each (cache, ids) (caches with nothing staged), all in the same passes: one
    forward_many per chunk of at most each cache's staging room. -> (each one's last logits row, or None
    for no ids; the passes run)."""
    pos = [0] * len(items)
    last: list = [None] * len(items)
    passes = 0
    for cache, _ in items:
        if cache.pending or cache.ring.room() < 1:
            raise VerifierError("feed_batched needs caches with nothing staged")
    while True:
        batch, who = [], []
        for j, (cache, ids) in enumerate(items):
            if pos[j] < len(ids):
                m = min(len(ids) - pos[j], cache.ring.room())
                batch.append((cache, ids[pos[j]:pos[j] + m]))
                who.append((j, m))
        if not batch:
            return last, passes
        rows = target.forward_many(batch, last_only=True)
        passes += 1
        for (j, m), (cache, _), r in zip(who, batch, rows):
            cache.commit(m)
            pos[j] += m
            last[j] = r[-1]


class Verifier:
    """Verifies every stream's queued work in one batched target pass."""

    def __init__(self, target: Target):
        if not isinstance(target, Target):
            raise VerifierError("Verifier needs a host.llama_np.Target, got %s" % type(target).__name__)
        self.target = target
        self.passes = 0
        self.tokens_fed = 0

    def verify(self, streams: Sequence[TargetMirror]) -> list[tuple[TargetMirror, bytes, list[int]]]:
        """One batched forward over all streams' prompt tokens and pending blocks; the verdicts, in stream
        order and, per stream, block order: (stream, VERDICT body, committed ids)."""
        out: list = []
        batch = []
        plans = []
        heads: list = []
        for s in streams:
            if s.target is not self.target:
                raise VerifierError("stream %r belongs to another target" % s.name)
            stale, chain = s._plan()
            out.extend(stale)
            room = s.cache.ring.room() - sum(len(b.tokens) for b in chain)
            if len(s.prefix) > room:  # a long prompt: prefill all but the last `room` ids first
                heads.append((s, s.prefix[:len(s.prefix) - room]))
                s.prefix = s.prefix[len(s.prefix) - room:]
            toks = s.prefix + [t for b in chain for t in b.tokens]
            if toks:
                batch.append((s.cache, toks))
                plans.append((s, chain))
        if heads:  # every stream's head in the same chunked passes (batched like the pass below)
            lasts, n = feed_batched(self.target, [(s.cache, h) for s, h in heads])
            self.passes += n
            self.tokens_fed += sum(len(h) for _, h in heads)
            for (s, _), last in zip(heads, lasts):
                if not s.prefix:
                    s.row = last
        if not batch:
            return out
        # a pass of prompt ids only needs each stream's last row: the others' logits (a vocab-wide matmul
        # per token) are not computed
        rows = self.target.forward_many(batch, last_only=all(not chain for _, chain in plans))
        self.passes += 1
        self.tokens_fed += sum(len(t) for _, t in batch)
        for (s, chain), r in zip(plans, rows):
            s.stats["passes"] += 1
            out.extend(s._judge(r, chain))
        return out
