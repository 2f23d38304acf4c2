# ringkv.py: sink + rolling-window KV cache with staged speculation; fixed memory, bounded positions.
"""Sink + ring KV cache (docs/RUNTIME.md, Positions).

Vocabulary used below and by the model runtime:

* S sink tokens (the first S tokens ever committed, kept forever), a window of the last W committed
  tokens, and D staging slots for draft tokens that are not yet verified.
* Physical slots: 0..S-1 sinks, S..S+W-1 the ring, S+W..S+W+D-1 staging. The token committed as the
  pos-th token ever sits in slot pos if pos < S, else S + (pos - S) % W (the head index below is that
  modulo, kept bounded instead of computed from an unbounded counter).
* Live tokens are the committed ones still held: `live` of them, 0 <= live <= S+W. Logical index i
  (0 <= i < live) orders them sinks first, then the window oldest to newest; `slot_of(i)` maps it to
  its slot.
* Staged tokens: `pending` of them (0 <= pending <= D), staged index s in 0..pending-1, slot S+W+s.
* Keys are stored UN-rotated. RoPE positions are cache positions: live token i has position i, staged
  token s has position live + s, the largest position is S+W+D-1. The attention kernel rotates the
  query by the relative distance (query position - key position); nothing is ever re-rotated and no
  position grows with the length of the stream.

Data layout: `k` and `v` are arrays of `typecode` ('b' int8 on the boards, 'f' allowed on the host)
of layers * (S+W+D) * kv_dim elements; the row of (layer, slot) starts at `row(layer, slot)` and holds
kv_dim elements (heads KV heads of kv_dim // heads each). `kscale` and `vscale` are arrays 'i' of
layers * (S+W+D) * heads fixed-point scales, one per (layer, slot, KV head), starting at
`scale_at(layer, slot)`; only int8 caches use them and the runtime decides their fixed-point format.
All four arrays are allocated in the constructor and never again.

Speculation: `stage()` reserves the next staging slot (RingKVError when all D are taken), the runtime
writes that token's K/V rows there (`write`, `write_scales`, or directly at `row(l, staged_slot(s))`),
and the verdict calls `commit(n)`: the first n staged tokens enter the ring in order (each evicts the
oldest window token once S+W are live; sinks are never evicted) and the rest are discarded, or kept
(renumbered from 0) with `commit(n, True)`. `discard()` drops every staged token. Writes only ever
touch staging slots, so a rejected draft can never overwrite a live token.

Hot paths (stage, write, write_scales, commit, discard, append, slot_of, position, row, ...) allocate
nothing on MicroPython for int8 caches (row moves use ringkv_viper when available, else an element
loop). Float ('f') caches allocate on MicroPython without viper: they are meant for the host.
"""
import sys
from array import array

from shared.compat import MASK30, const

_IS_MP = sys.implementation.name != "cpython"  # MicroPython or CircuitPython

# Hot-path integers must stay below 2**30: on the RP2040/ESP32 ports a larger int is a heap object.
_MAX_ELEMENTS = const(0x1FFFFFFF)
TYPECODES = ("b", "f")
_ITEMSIZE = {"b": 1, "f": 4}


class RingKVError(ValueError):
    """Misuse of the cache: bad shape, index out of range, staging full, commit of unstaged tokens."""


def _move_loop(buf, dst, src, n):
    # Element loop: allocates nothing on MicroPython for int arrays (floats box on MicroPython).
    for i in range(n):
        buf[dst + i] = buf[src + i]


def _move_slice(buf, dst, src, n):
    # CPython: slice assignment is fast there and allocation does not matter.
    buf[dst:dst + n] = buf[src:src + n]


_move8 = _move32 = _move_loop if _IS_MP else _move_slice
try:
    from shared import ringkv_viper

    _move8 = ringkv_viper.move8
    _move32 = ringkv_viper.move32
except (ImportError, SyntaxError):  # CPython, or a port without native code (CircuitPython)
    pass


def _check_int(name, value, lo):
    if type(value) is not int or value < lo:
        raise RingKVError("RingKV: %s must be an int >= %d, got %r" % (name, lo, value))


class RingKV:
    """Keys and values for S sink tokens and the last W tokens, plus D staged draft slots."""

    def __init__(self, layers, kv_dim, sink, window, staged, typecode="b", heads=1):
        _check_int("layers", layers, 1)
        _check_int("kv_dim", kv_dim, 1)
        _check_int("sink", sink, 0)
        _check_int("window", window, 1)
        _check_int("staged", staged, 1)
        _check_int("heads", heads, 1)
        if typecode not in TYPECODES:
            raise RingKVError("RingKV: typecode must be one of %s, got %r" % (", ".join(TYPECODES), typecode))
        if kv_dim % heads:
            raise RingKVError("RingKV: kv_dim %d is not a multiple of heads %d" % (kv_dim, heads))
        slots = sink + window + staged
        if layers * slots * kv_dim > _MAX_ELEMENTS or layers * slots * heads > _MAX_ELEMENTS:
            raise RingKVError("RingKV: %d layers x %d slots x %d is too large" % (layers, slots, kv_dim))
        self.layers = layers
        self.kv_dim = kv_dim
        self.heads = heads
        self.head_dim = kv_dim // heads
        self.sink = sink
        self.window = window
        self.staged = staged
        self.capacity = sink + window  # live tokens at most; also the first staging slot
        self.slots = slots
        self.typecode = typecode
        self.itemsize = _ITEMSIZE[typecode]
        # array(tc, bytearray) copies raw zero bytes on both interpreters (MicroPython has no array * n).
        zero = bytearray(layers * slots * kv_dim * self.itemsize)
        self.k = array(typecode, zero)
        self.v = array(typecode, zero)
        zero = None
        zero = bytearray(layers * slots * heads * 4)
        self.kscale = array("i", zero)
        self.vscale = array("i", zero)
        zero = None
        self._mvdata = _move8 if typecode == "b" else _move32
        self._mvscale = _move32
        self.live = 0  # committed tokens held, 0..S+W
        self.head = 0  # window index (0..W-1) of the oldest window token; moves only once the ring is full
        self.pending = 0  # staged tokens, 0..D
        self.tokens = 0  # tokens ever committed, modulo 2**30: bookkeeping only, never a position

    def __repr__(self):
        return "RingKV(layers=%d, kv_dim=%d, sink=%d, window=%d, staged=%d, typecode=%r, heads=%d)" % (
            self.layers, self.kv_dim, self.sink, self.window, self.staged, self.typecode, self.heads)

    def reset(self):
        """Forget every token (live and staged). Buffers keep their bytes; none of them is live."""
        self.live = 0
        self.head = 0
        self.pending = 0
        self.tokens = 0

    # ---- addressing (what the attention loop needs; no allocation) ----

    def row(self, layer, slot):
        """Element offset in k / v of the kv_dim-element row of (layer, physical slot)."""
        return (layer * self.slots + slot) * self.kv_dim

    def scale_at(self, layer, slot):
        """Index in kscale / vscale of KV head 0 of (layer, physical slot); head h is at + h."""
        return (layer * self.slots + slot) * self.heads

    def slot_of(self, i):
        """Physical slot of live token i (logical order: sinks, then the window oldest to newest)."""
        if i < 0 or i >= self.live:
            raise RingKVError("RingKV: live index %d out of range 0..%d" % (i, self.live - 1))
        s = self.sink
        if i < s:
            return i
        j = self.head + i - s
        if j >= self.window:
            j -= self.window
        return s + j

    def position(self, i):
        """RoPE cache position of live token i: i itself (bounded by S+W-1)."""
        if i < 0 or i >= self.live:
            raise RingKVError("RingKV: live index %d out of range 0..%d" % (i, self.live - 1))
        return i

    def staged_slot(self, s):
        """Physical slot of staged token s (0 <= s < pending)."""
        if s < 0 or s >= self.pending:
            raise RingKVError("RingKV: staged index %d out of range 0..%d" % (s, self.pending - 1))
        return self.capacity + s

    def staged_position(self, s):
        """live + s: staged token s's index in the cache's logical order (bounded by S+W+D-1).

        This is its RoPE position only while committing the staged tokens before it would evict
        nothing. Once the ring is full, the query of staged token s sees what it would see had the s
        tokens before it been committed one by one (the s oldest window tokens drop out), so its
        position is S+W; shared/llama.py and host/llama_np.py compute the positions that way."""
        if s < 0 or s >= self.pending:
            raise RingKVError("RingKV: staged index %d out of range 0..%d" % (s, self.pending - 1))
        return self.live + s

    def fill_slots(self, out):
        """Write slot_of(i) for every live i into out[0..live-1] (a preallocated int array); return live."""
        n = self.live
        if len(out) < n:
            raise RingKVError("RingKV: fill_slots needs room for %d slots, got %d" % (n, len(out)))
        s = self.sink
        w = self.window
        j = self.head
        for i in range(n):
            if i < s:
                out[i] = i
            else:
                out[i] = s + j
                j += 1
                if j == w:
                    j = 0
        return n

    def room(self):
        """Staging slots still free (D - pending)."""
        return self.staged - self.pending

    # ---- speculation ----

    def stage(self):
        """Reserve the next staging slot for a draft token; return its staged index s.

        Raises RingKVError when all D slots are taken: a speculative batch larger than the free room
        is refused, never written over anything."""
        s = self.pending
        if s >= self.staged:
            raise RingKVError("RingKV: staging full (%d of %d draft slots taken); commit or discard first"
                              % (s, self.staged))
        self.pending = s + 1
        return s

    def write(self, layer, s, krow, vrow):
        """Copy kv_dim elements of krow and vrow (sequences of the cache's element type) into layer's
        row of staged token s. int8 values must lie in -128..127."""
        if layer < 0 or layer >= self.layers:
            raise RingKVError("RingKV: layer %d out of range 0..%d" % (layer, self.layers - 1))
        if s < 0 or s >= self.pending:
            raise RingKVError("RingKV: staged index %d out of range 0..%d" % (s, self.pending - 1))
        d = self.kv_dim
        o = (layer * self.slots + self.capacity + s) * d
        k = self.k
        v = self.v
        for i in range(d):
            k[o + i] = krow[i]
            v[o + i] = vrow[i]

    def write_scales(self, layer, s, kscale, vscale):
        """Copy the heads per-head scales of kscale and vscale (int sequences) for layer, staged token s."""
        if layer < 0 or layer >= self.layers:
            raise RingKVError("RingKV: layer %d out of range 0..%d" % (layer, self.layers - 1))
        if s < 0 or s >= self.pending:
            raise RingKVError("RingKV: staged index %d out of range 0..%d" % (s, self.pending - 1))
        h = self.heads
        o = (layer * self.slots + self.capacity + s) * h
        ks = self.kscale
        vs = self.vscale
        for i in range(h):
            ks[o + i] = kscale[i]
            vs[o + i] = vscale[i]

    def _move_slot(self, src, dst):
        # Copy every layer's K, V rows and scales of physical slot src to slot dst (distinct slots).
        n = self.slots
        d = self.kv_dim
        h = self.heads
        mv = self._mvdata
        ms = self._mvscale
        k = self.k
        v = self.v
        ks = self.kscale
        vs = self.vscale
        for layer in range(self.layers):
            b = layer * n
            mv(k, (b + dst) * d, (b + src) * d, d)
            mv(v, (b + dst) * d, (b + src) * d, d)
            ms(ks, (b + dst) * h, (b + src) * h, h)
            ms(vs, (b + dst) * h, (b + src) * h, h)

    def commit(self, n, keep=False):
        """Move the first n staged tokens into the ring, in order, then discard the other staged tokens
        (or, with keep=True, keep them staged, renumbered 0..pending-n-1).

        Each committed token fills the next sink while fewer than S are live, then the next window
        slot while fewer than S+W are live, and from then on overwrites the oldest window token (that
        token is evicted; sinks never are). So with exactly S+W live, the next commit evicts exactly
        the oldest window token. Raises RingKVError (and changes nothing) if n < 0 or n > pending."""
        p = self.pending
        if n < 0 or n > p:
            raise RingKVError("RingKV: commit of %d tokens but %d are staged" % (n, p))
        cap = self.capacity
        s = self.sink
        w = self.window
        for t in range(n):
            live = self.live
            if live < cap:
                dst = live  # filling: sinks, then the window in order (head stays 0)
                self.live = live + 1
            else:
                h = self.head
                dst = s + h  # the oldest window token is evicted
                h += 1
                if h == w:
                    h = 0
                self.head = h
            self._move_slot(cap + t, dst)
        if keep:
            for t in range(n, p):
                self._move_slot(cap + t, cap + t - n)
            self.pending = p - n
        else:
            self.pending = 0
        self.tokens = (self.tokens + n) & MASK30

    def discard(self):
        """Drop every staged token (a rejected draft); live tokens are untouched."""
        self.pending = 0

    def append(self, k, v, kscale=None, vscale=None):
        """Commit one token directly (no speculation): k and v hold layers * kv_dim elements, layer by
        layer; kscale / vscale, layers * heads scales, or None for zeros. Same as stage, write each
        layer, commit(1). Raises RingKVError if draft tokens are staged (commit or discard them first)."""
        if self.pending:
            raise RingKVError("RingKV: append while %d draft tokens are staged; commit or discard first"
                              % self.pending)
        self.pending = 1
        d = self.kv_dim
        h = self.heads
        cap = self.capacity
        n = self.slots
        kk = self.k
        vv = self.v
        for layer in range(self.layers):
            o = (layer * n + cap) * d
            src = layer * d
            for i in range(d):
                kk[o + i] = k[src + i]
                vv[o + i] = v[src + i]
            o = (layer * n + cap) * h
            src = layer * h
            ks = self.kscale
            vs = self.vscale
            for i in range(h):
                if kscale is None:
                    ks[o + i] = 0
                    vs[o + i] = 0
                else:
                    ks[o + i] = kscale[src + i]
                    vs[o + i] = vscale[src + i]
        self.commit(1)
