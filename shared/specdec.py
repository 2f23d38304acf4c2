# specdec.py: exact speculative-sampling rules on integer distributions, with an integer PRNG and sampler.
"""The draft (node) and the target (gateway) speak integer distributions; every decision is exact.

A distribution is a `Dist`: token ids in ascending order and integer counts that sum exactly to its
`total`. Formats (docs/SPECDEC.md):

- q, the draft's: its top-k distribution quantised to counts summing to Q_TOTAL = 2**16. The node samples
  from exactly these counts and sends exactly these counts.
- p, the target's: its final sampling distribution (temperature, top-k applied first) quantised to
  counts summing to P_TOTAL = 2**24. Target-only sampling uses the same counts, so "exact" means the
  committed text has exactly the distribution of sampling from p.

The rule, with s = p.total // q.total (p.total must be a multiple of q.total), a = p-count of the draft
token x, B = s * q-count of x (so p(x)/q(x) = a/B):
- accept x if a >= B; reject it if a == 0; otherwise draw u uniformly from 0..B-1 and accept iff u < a.
  The probability of acceptance is min(1, a/B) exactly;
- on the first rejection, the correction is drawn from r(y) = max(0, a_y - s*b_y) over p's support,
  which is P_TOTAL * max(0, p(y) - q(y)): the residual over probabilities, never over logits;
- the correction is not an accepted draft token: the caller commits draft[:accepted] and then the
  correction when it is >= 0.

Everything is integer arithmetic on values below 2**30 (small ints on every port). Rng.below,
Dist.sample, Dist.count_of, Dist.argmax, argmax, accept, residual_sample and Dist.set_weights
(n <= LR_SCAN_MAX, weights summing below 2**28) allocate nothing on MicroPython; the verify_*
functions return a tuple (they run on the gateway).
"""
from array import array

from shared.compat import const

Q_TOTAL = const(65536)  # the draft's counts sum to this (2**16)
P_TOTAL = const(16777216)  # the target's counts sum to this (2**24)
MAX_TOTAL = const(0x20000000)  # 2**29: every count, residual sum and random bound stays below 2**30
MAX_TOKEN = const(0x3FFFFFFF)  # value bounds, not the clock's wrap mask (shared/compat.py MASK30):
_M30 = const(0x3FFFFFFF)  # 2**30 - 1, the largest value of Rng.next30()
LR_SCAN_MAX = 64  # largest-remainder by repeated scans (no allocation) up to this many entries; sort above


class SpecDecError(ValueError):
    """A malformed distribution, a draft token the draft could not have sampled, mismatched rows."""


class Rng:
    """xorshift32 (shifts 13, 17, 5) kept as two 16-bit halves, so no intermediate reaches 2**30.

    The 32-bit state sequence is that of the textbook xorshift32; next30() returns its top 30 bits and
    below(n) draws uniformly from 0..n-1 by rejection (no modulo bias). A seed of 0 becomes 1."""

    def __init__(self, seed=1):
        self._hi = 0
        self._lo = 1
        self.setstate(seed)

    def setstate(self, state):
        if type(state) is not int:
            raise SpecDecError("Rng state must be an int, got %r" % (state,))
        state &= 0xFFFFFFFF
        if state == 0:
            state = 1
        self._hi = state >> 16
        self._lo = state & 0xFFFF

    def getstate(self):
        """The 32-bit state (an int >= 2**30 allocates on the boards: not for the hot path)."""
        return (self._hi << 16) | self._lo

    def next30(self):
        hi = self._hi
        lo = self._lo
        hi ^= ((hi << 13) | (lo >> 3)) & 0xFFFF  # s ^= s << 13
        lo ^= (lo << 13) & 0xFFFF
        lo ^= hi >> 1  # s ^= s >> 17
        hi ^= ((hi << 5) | (lo >> 11)) & 0xFFFF  # s ^= s << 5
        lo ^= (lo << 5) & 0xFFFF
        self._hi = hi
        self._lo = lo
        return (hi << 14) | (lo >> 2)

    def below(self, n):
        """Uniform in 0..n-1 for 1 <= n <= 2**30 - 1: values above the last multiple of n are redrawn."""
        if type(n) is not int or n < 1 or n > _M30:
            raise SpecDecError("Rng.below needs an int in 1..2**30-1, got %r" % (n,))
        last = _M30 - (_M30 % n + 1) % n  # the 2**30 - (2**30 mod n) values 0..last split evenly
        while True:
            v = self.next30()
            if v <= last:
                return v % n


def _zeros(n):
    return array("i", bytearray(4 * n))  # no temporary list: on a board n may be large


def _check_total(total):
    if type(total) is not int or total < 1 or total > MAX_TOTAL:
        raise SpecDecError("total must be an int in 1..2**29, got %r" % (total,))


def _lr_sorted(c, rem, n, left):
    """Host-sized rows: the same order as the scan (remainder descending, then index = id ascending).
    Its own function: a lambda in set_weights would make `rem` a closure cell, allocated on every call."""
    for i in sorted(range(n), key=lambda i: (-rem[i], i))[:left]:
        c[i] += 1


class Dist:
    """Integer counts over token ids, summing exactly to `total`; a sampling distribution.

    Sparse (the default): ids[0:n] strictly ascending, counts[0:n] >= 0, capacity entries preallocated.
    Dense (dense=True): ids is None, n == capacity == vocabulary size, counts[id] is the id's count.
    Fill with set_counts (received or computed counts, validated), set_weights (integer weights,
    largest remainder; the node) or set_probs (floats; the host)."""

    def __init__(self, capacity, total=Q_TOTAL, dense=False):
        if type(capacity) is not int or capacity < 1 or capacity > MAX_TOKEN:
            raise SpecDecError("capacity must be an int in 1..2**30-1, got %r" % (capacity,))
        _check_total(total)
        self.capacity = capacity
        self.total = total
        self.ids = None if dense else _zeros(capacity)
        self.counts = _zeros(capacity)
        self._rem = _zeros(capacity)  # largest-remainder scratch
        self.n = 0  # entries in use; a dense Dist has n == capacity once filled

    # ---- filling ----

    def _take(self, ids, n, what):
        self.n = 0  # empty (count_of 0, sample raises) until the new contents are validated
        if type(n) is not int or n < 1 or n > self.capacity:
            raise SpecDecError("%s: n must be 1..%d, got %r" % (what, self.capacity, n))
        if self.ids is None:
            if ids is not None or n != self.capacity:
                raise SpecDecError("%s: a dense Dist takes ids=None and n == %d" % (what, self.capacity))
            return
        if ids is None or len(ids) < n:
            raise SpecDecError("%s: need %d token ids" % (what, n))
        out = self.ids
        for i in range(n):
            t = ids[i]
            if type(t) is not int or t < 0 or t > MAX_TOKEN:
                raise SpecDecError("%s: token id %r out of range 0..2**30-1" % (what, t))
            out[i] = t

    def set_counts(self, ids, counts, n):
        """Copy n (id, count) pairs: ids strictly ascending, counts >= 0 summing to total."""
        self._take(ids, n, "set_counts")
        if len(counts) < n:
            raise SpecDecError("set_counts: need %d counts" % n)
        out = self.counts
        s = 0
        for i in range(n):
            c = counts[i]
            if type(c) is not int or c < 0 or c > MAX_TOTAL:
                raise SpecDecError("set_counts: count %r at entry %d out of range" % (c, i))
            out[i] = c
            s += c
        if s != self.total:
            raise SpecDecError("set_counts: counts sum to %d, not %d" % (s, self.total))
        ids = self.ids
        if ids is not None:
            for i in range(1, n):
                if ids[i] <= ids[i - 1]:
                    raise SpecDecError("set_counts: token ids must be strictly ascending (%d after %d)"
                                       % (ids[i], ids[i - 1]))
        self.n = n
        return self

    def set_weights(self, ids, weights, n):
        """Counts from n non-negative integer weights by largest remainder (ties: the lower token id).

        count_i = floor(w_i * total / W) (W = sum of weights), then the total - sum(floors) units left go
        one each to the largest remainders. Sparse ids may come in any order (e.g. top-k order): they are
        sorted; duplicate ids raise; entries left at count 0 are dropped. Allocates nothing on
        MicroPython when n <= LR_SCAN_MAX and W < 2**28."""
        self._take(ids, n, "set_weights")
        if len(weights) < n:
            raise SpecDecError("set_weights: need %d weights" % n)
        c = self.counts
        wsum = 0
        for i in range(n):
            w = weights[i]
            if type(w) is not int or w < 0 or w > MAX_TOKEN:
                raise SpecDecError("set_weights: weight %r at entry %d must be an int in 0..2**30-1" % (w, i))
            c[i] = w
            wsum += w
        if wsum == 0:
            raise SpecDecError("set_weights: all weights are 0")
        if wsum > _M30:
            raise SpecDecError("set_weights: weights sum to %d, more than 2**30-1" % wsum)
        ids = self.ids
        if ids is not None:
            for i in range(1, n):  # insertion sort by id, counts (still weights) alongside
                t = ids[i]
                w = c[i]
                j = i - 1
                while j >= 0 and ids[j] > t:
                    ids[j + 1] = ids[j]
                    c[j + 1] = c[j]
                    j -= 1
                ids[j + 1] = t
                c[j + 1] = w
            for i in range(1, n):
                if ids[i] == ids[i - 1]:
                    raise SpecDecError("set_weights: token id %d appears twice" % ids[i])
        total = self.total
        rem = self._rem
        left = total
        if total & (total - 1) == 0:
            # total = 2**t: long division in base 2**chunk, the largest chunk that keeps r << chunk < 2**30
            t = 0
            v = total
            while v > 1:
                v >>= 1
                t += 1
            chunk = 30
            v = wsum
            while v:
                v >>= 1
                chunk -= 1
            if chunk < 1:
                chunk = 1
            for i in range(n):  # c[i] = floor(w * total / wsum), rem[i] = w * total mod wsum
                r = c[i]
                q = 0
                if r >= wsum:
                    q = 1
                    r -= wsum
                bits = t
                while bits:
                    sh = chunk if chunk < bits else bits
                    r <<= sh
                    d = r // wsum
                    q = (q << sh) + d
                    r -= d * wsum
                    bits -= sh
                c[i] = q
                rem[i] = r
                left -= q
        else:
            top = 1
            while top * 2 <= total:
                top *= 2
            for i in range(n):  # the same by shift-and-add over the bits of total
                w = c[i]
                q = 0
                r = 0
                bit = top
                while bit:
                    q += q
                    r += r
                    if total & bit:
                        r += w
                    if r >= wsum:
                        d = r // wsum
                        q += d
                        r -= d * wsum
                    bit >>= 1
                c[i] = q
                rem[i] = r
                left -= q
        if left:
            if n <= LR_SCAN_MAX:
                for _ in range(left):  # left < n: one unit each to the largest remainders, lowest id first
                    best = 0
                    for i in range(1, n):
                        if rem[i] > rem[best]:
                            best = i
                    c[best] += 1
                    rem[best] = -1
            else:
                _lr_sorted(c, rem, n, left)
        if ids is not None:
            k = 0
            for i in range(n):
                if c[i]:
                    ids[k] = ids[i]
                    c[k] = c[i]
                    k += 1
            n = k
        self.n = n
        return self

    def set_probs(self, probs, ids=None):
        """Host helper: counts from float probabilities (final: temperature/top-k already applied).

        The rule is set_weights on floor(p * 2**29) (an exact float operation), so the result depends
        only on the floats given; they are renormalised, so they need only sum to about 1 (below 2)."""
        n = len(probs)
        weights = []
        for p in probs:
            if not (p >= 0.0 and p <= 1.0):  # also rejects NaN
                raise SpecDecError("set_probs: probability %r is not in [0, 1]" % (p,))
            weights.append(int(p * 536870912.0))  # p * 2**29 is exact, int() floors
        return self.set_weights(ids, weights, n)

    # ---- reading and sampling (allocation-free) ----

    def token(self, i):
        return i if self.ids is None else self.ids[i]

    def count_of(self, token):
        """The count of a token id (0 outside the support); binary search in a sparse Dist."""
        ids = self.ids
        if ids is None:
            if 0 <= token < self.n:
                return self.counts[token]
            return 0
        lo = 0
        hi = self.n
        while lo < hi:
            mid = (lo + hi) >> 1
            if ids[mid] < token:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.n and ids[lo] == token:
            return self.counts[lo]
        return 0

    def sample(self, rng):
        """A token id drawn with probability count / total: v = rng.below(total), first id whose
        cumulative count exceeds v, in ascending id order."""
        v = rng.below(self.total)
        c = self.counts
        for i in range(self.n):
            v -= c[i]
            if v < 0:
                return i if self.ids is None else self.ids[i]
        raise SpecDecError("Dist counts do not sum to its total")

    def argmax(self):
        """The id with the largest count; ties go to the lowest id."""
        if self.n < 1:
            raise SpecDecError("argmax of an empty Dist")
        c = self.counts
        best = 0
        for i in range(1, self.n):
            if c[i] > c[best]:
                best = i
        return best if self.ids is None else self.ids[best]

    def prob(self, token):
        """Host convenience: count / total as a float."""
        return self.count_of(token) / self.total

    def __repr__(self):
        return "Dist(total=%d, %s)" % (self.total, ", ".join("%d:%d" % (self.token(i), self.counts[i])
                                                              for i in range(self.n)))


def argmax(values, n=-1):
    """Index of the largest of values[0:n] (ints or floats, e.g. logits); ties go to the lowest index."""
    if n < 0:
        n = len(values)
    if n < 1:
        raise SpecDecError("argmax of an empty row")
    best = 0
    for i in range(1, n):
        if values[i] > values[best]:
            best = i
    return best


def _scale(p, q):
    s = p.total // q.total
    if s * q.total != p.total:
        raise SpecDecError("p.total %d is not a multiple of q.total %d" % (p.total, q.total))
    return s


def accept(p, q, x, rng):
    """Accept draft token x with probability min(1, p(x)/q(x)), exactly. Draws a random number only
    when 0 < p(x) < q(x)."""
    s = _scale(p, q)
    b = q.count_of(x)
    if b <= 0:
        raise SpecDecError("draft token %r has q = 0: the draft cannot have sampled it" % (x,))
    b *= s
    a = p.count_of(x)
    if a >= b:
        return True
    if a == 0:
        return False
    return rng.below(b) < a


def residual_sample(p, q, rng):
    """A token drawn from norm(max(0, p - q)) over probabilities (ascending id order)."""
    s = _scale(p, q)
    pc = p.counts
    ids = p.ids
    r_sum = 0
    for i in range(p.n):
        r = pc[i] - s * q.count_of(i if ids is None else ids[i])
        if r > 0:
            r_sum += r
    if r_sum <= 0:
        raise SpecDecError("p <= q everywhere: there is no residual (such a draft token is never rejected)")
    v = rng.below(r_sum)
    for i in range(p.n):
        t = i if ids is None else ids[i]
        r = pc[i] - s * q.count_of(t)
        if r > 0:
            v -= r
            if v < 0:
                return t
    raise SpecDecError("residual walk fell off the end")  # unreachable


def _check_rows(p_rows, q_rows, draft_tokens, need_p):
    k = len(draft_tokens)
    if k < 1:
        raise SpecDecError("empty draft block")
    if len(p_rows) < need_p or len(q_rows) < k:
        raise SpecDecError("a block of %d draft tokens needs %d target rows and %d draft rows, got %d and %d"
                           % (k, need_p, k, len(p_rows), len(q_rows)))
    for i in range(need_p):
        if not isinstance(p_rows[i], Dist) or (i < k and not isinstance(q_rows[i], Dist)):
            raise SpecDecError("row %d is not a Dist" % i)
    return k


def verify_block(p_rows, q_rows, draft_tokens, rng):
    """Deferred verification of one block -> (accepted, correction).

    p_rows[i] is the target's distribution and q_rows[i] the draft's at the position of draft_tokens[i].
    Tokens are tested in order; on the first rejection the correction comes from the residual and the
    block stops: (i, correction), correction not counted. A fully accepted block gives (K, -1): the next
    block's first draft token, tested against the target's row after this block, stands in for the
    bonus token."""
    k = _check_rows(p_rows, q_rows, draft_tokens, len(draft_tokens))
    for i in range(k):
        if not accept(p_rows[i], q_rows[i], draft_tokens[i], rng):
            return i, residual_sample(p_rows[i], q_rows[i], rng)
    return k, -1


def verify_block_bonus(p_rows, q_rows, draft_tokens, rng):
    """Standard (non-deferred) verification: as verify_block, but a fully accepted block returns
    (K, bonus) with the bonus token sampled from p_rows[K], the target's row after the last draft
    token. For when no next block exists (the node stopped drafting, or one block at a time)."""
    k = _check_rows(p_rows, q_rows, draft_tokens, len(draft_tokens) + 1)
    for i in range(k):
        if not accept(p_rows[i], q_rows[i], draft_tokens[i], rng):
            return i, residual_sample(p_rows[i], q_rows[i], rng)
    return k, p_rows[k].sample(rng)


def _row_argmax(row):
    return row.argmax() if isinstance(row, Dist) else argmax(row)


def verify_greedy(p_rows, draft_tokens, bonus=False):
    """Temperature 0: accept draft_tokens[i] iff it is the target's argmax at i (ties: lowest id).

    Rows are Dists or sequences of scores indexed by token id (logits: pass the rows target-only greedy
    decoding uses, so quantisation cannot create ties it would not see). -> (accepted, correction): the
    correction is the target's argmax at the first mismatch; a fully accepted block gives -1, or with
    bonus=True the argmax of p_rows[K]."""
    k = len(draft_tokens)
    if k < 1:
        raise SpecDecError("empty draft block")
    if len(p_rows) < k + (1 if bonus else 0):
        raise SpecDecError("a block of %d draft tokens needs %d target rows, got %d"
                           % (k, k + (1 if bonus else 0), len(p_rows)))
    for i in range(k):
        best = _row_argmax(p_rows[i])
        if draft_tokens[i] != best:
            return i, best
    return k, (_row_argmax(p_rows[k]) if bonus else -1)


def sampling_probs(logits, temperature=1.0, top_k=0):
    """Host helper: the final sampling distribution of a logit row -> (ids ascending, probs).

    Top-k first (by logit, ties: lowest id; 0 keeps all), then softmax(logit / temperature) over the
    kept ids. Temperature 0 is greedy decoding: use argmax / verify_greedy instead."""
    import math

    n = len(logits)
    if n < 1:
        raise SpecDecError("sampling_probs: empty logit row")
    if not temperature > 0.0:
        raise SpecDecError("sampling_probs: temperature must be > 0 (0 is greedy: use argmax), got %r"
                           % (temperature,))
    if type(top_k) is not int or top_k < 0:
        raise SpecDecError("sampling_probs: top_k must be an int >= 0, got %r" % (top_k,))
    order = sorted(range(n), key=lambda i: (-logits[i], i))
    kept = sorted(order[:top_k] if 0 < top_k < n else order)
    hi = logits[order[0]]
    ex = [math.exp((logits[i] - hi) / temperature) for i in kept]
    z = sum(ex)
    return kept, [e / z for e in ex]
