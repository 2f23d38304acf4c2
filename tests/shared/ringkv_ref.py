# ringkv_ref.py: slow, obvious reference for shared.ringkv (lists of un-rotated rows) plus RoPE attention.
import math


class RefKV:
    """Same semantics as RingKV, kept as plain lists in logical order.

    Each token is [k, v, ks, vs]: per layer a list of kv_dim values (k, v) and of heads scales (ks, vs).
    Committed tokens are appended to `rows`; while more than S+W are held, the first window token
    (list index S) is deleted. Staged tokens live in `draft` until committed or discarded."""

    def __init__(self, layers, kv_dim, sink, window, staged, heads=1):
        self.layers = layers
        self.kv_dim = kv_dim
        self.sink = sink
        self.window = window
        self.staged = staged
        self.heads = heads
        self.rows = []
        self.draft = []
        self.tokens = 0

    @property
    def live(self):
        return len(self.rows)

    @property
    def pending(self):
        return len(self.draft)

    def _blank(self):
        L, d, h = self.layers, self.kv_dim, self.heads
        return [[[0] * d for _ in range(L)], [[0] * d for _ in range(L)],
                [[0] * h for _ in range(L)], [[0] * h for _ in range(L)]]

    def stage(self):
        if len(self.draft) >= self.staged:
            raise ValueError("staging full")
        self.draft.append(self._blank())
        return len(self.draft) - 1

    def write(self, layer, s, krow, vrow):
        tok = self.draft[s]
        tok[0][layer] = [krow[i] for i in range(self.kv_dim)]
        tok[1][layer] = [vrow[i] for i in range(self.kv_dim)]

    def write_scales(self, layer, s, kscale, vscale):
        tok = self.draft[s]
        tok[2][layer] = [kscale[i] for i in range(self.heads)]
        tok[3][layer] = [vscale[i] for i in range(self.heads)]

    def commit(self, n, keep=False):
        if n < 0 or n > len(self.draft):
            raise ValueError("commit of more than staged")
        for tok in self.draft[:n]:
            self.rows.append(tok)
            if len(self.rows) > self.sink + self.window:
                del self.rows[self.sink]
        self.draft = self.draft[n:] if keep else []
        self.tokens += n

    def discard(self):
        self.draft = []

    def append(self, k, v, kscale=None, vscale=None):
        if self.draft:
            raise ValueError("append while staged")
        s = self.stage()
        d, h = self.kv_dim, self.heads
        for layer in range(self.layers):
            self.write(layer, s, k[layer * d:(layer + 1) * d], v[layer * d:(layer + 1) * d])
            if kscale is not None:
                self.write_scales(layer, s, kscale[layer * h:(layer + 1) * h], vscale[layer * h:(layer + 1) * h])
        self.commit(1)

    def token(self, i):
        """Logical index i < live: a live token; live <= i < live + pending: staged token i - live."""
        return self.rows[i] if i < len(self.rows) else self.draft[i - len(self.rows)]

    def position(self, i):
        return i  # live tokens and staged tokens are numbered contiguously from 0


# ---- RoPE and attention the obvious way: rotate every stored key at its current cache position ----

def rope(vec, pos, head_dim, base=10000.0):
    """Rotate each head's (even, odd) pairs of vec by pos * base**(-2j/head_dim); returns a new list."""
    out = list(vec)
    for h0 in range(0, len(vec), head_dim):
        for j in range(head_dim // 2):
            a = pos * base ** (-2.0 * j / head_dim)
            c, s = math.cos(a), math.sin(a)
            x, y = vec[h0 + 2 * j], vec[h0 + 2 * j + 1]
            out[h0 + 2 * j] = x * c - y * s
            out[h0 + 2 * j + 1] = x * s + y * c
    return out


def attend_ref(ref, layer, query, upto, head, head_dim):
    """One head's attention output for the query of the token at logical index upto-1 (live tokens,
    then staged ones) over tokens 0..upto-1. Query and keys are rotated at their current positions."""
    qpos = upto - 1
    q = rope(query, qpos, head_dim)
    lo = head * head_dim
    scores = []
    for i in range(upto):
        k = rope(ref.token(i)[0][layer], ref.position(i), head_dim)
        scores.append(sum(q[lo + j] * k[lo + j] for j in range(head_dim)) / math.sqrt(head_dim))
    m = max(scores)
    w = [math.exp(x - m) for x in scores]
    z = sum(w)
    out = [0.0] * head_dim
    for i in range(upto):
        v = ref.token(i)[1][layer]
        for j in range(head_dim):
            out[j] += w[i] / z * v[lo + j]
    return out
