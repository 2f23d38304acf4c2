# memplan.py: the heap plan of a forward step: every buffer, its live range, shared arenas, streaming, peak.
"""A plan lists every buffer a decode step needs, in bytes, with its live range over the steps of
the forward (numbered T_*, named in STEPS; a layer's steps repeat per layer, so a buffer used across
layers spans them). Buffers of one kind whose live ranges never overlap share an arena (one allocation,
the size of its largest member): the int32 activations (INT32) and the streamed weight buffers (BYTES).
Heap bytes count the interpreter's objects: a header block plus the data rounded up to blocks of 4
words (word = 4 on the boards, 8 on the 64-bit unix port that runs the virtual board).

    p = memplan.layout(cfg, sink, window, staged, "phase", out_rows=32)   # one given layout
    p.peak, p.mode, p.out_rows, p.names[i], p.arena[i] ...
    memfit.fit(cfg, prof)     # the fastest layout whose peak fits a board profile's heap

Modes, fastest first: resident (every matrix in RAM), layer (one layer's matrices read at the layer's
start), phase (the attention matrices, then the FFN matrices, through one shared buffer), matrix (each
matrix read just before its matvec, through one buffer of the largest). Streamed modes keep every
scale resident and read the classifier in blocks of out_rows rows. docs/RUNTIME.md, "Memory plan".
In place (a reader whose file is addressable, a board's ROMFS: model_load reads weights as views of it),
a resident matrix costs the heap its scales only: the plan counts no weight bytes.
"""
from array import array

from shared.model_load import LAYER_Q4, Config, ModelError, layer_shapes
from shared.compat import const

# The steps of llama.Model's forward, in order (STEPS names them: a space-separated string, so the
# board interns no names it never prints).
STEPS = "positions embed attn_norm wq wk wv query scores mix att_q wo ffn_norm w1 w3 swiglu w2 out_norm head after"
T_POS = const(0)
T_EMBED = const(1)
T_ANORM = const(2)
T_WQ = const(3)
T_WK = const(4)
T_WV = const(5)
T_QUERY = const(6)
T_SCORES = const(7)
T_MIX = const(8)
T_ATTQ = const(9)
T_WO = const(10)
T_FNORM = const(11)
T_W1 = const(12)
T_W3 = const(13)
T_SWIGLU = const(14)
T_W2 = const(15)
T_ONORM = const(16)
T_HEAD = const(17)
T_END = const(18)  # "after": the caller reads the logits; 0..T_END is the whole step
N_STEPS = const(19)
MODES = ("resident", "layer", "phase", "matrix")
OWN = const(0)  # a buffer's kind: its own allocation, or one that may share an arena of its kind
INT32 = const(1)
BYTES = const(2)
# The step where each layer matrix is used (in matrix mode, read just before it)
_USE = (T_WQ, T_WK, T_WV, T_WO, T_W1, T_W3, T_W2)  # LAYER_Q4 order
_INST = const(5)  # blocks of an instance with a handful of attributes (a Q4Matrix: 160 bytes on x64)
_HDR = const(8)  # QAct info header (q4.I_HDR)


class Plan:
    """The buffers of one layout and what they cost; see the module docstring. Buffer i (plan order)
    is names[i], data[i] bytes of data, heap[i] heap bytes each (count[i] copies), live from step
    first[i] to last[i] (STEPS), kind[i] INT32 / BYTES (may share an arena of that kind) or OWN,
    arena[i] its arena or -1, offset[i] its place in a byte arena. arenas: [kind, data bytes, heap
    bytes] each. Arrays, not one object per buffer: the board builds a plan in every Model constructor
    (4-6 KB of heap on the 64-bit unix port while it lives, half that on the boards)."""

    def __init__(self, cfg, mode, out_rows, sink, window, staged, word, share=True, in_place=False):
        self.cfg = cfg
        self.in_place = in_place  # resident weights are views of the file in flash: no heap for them
        self.share = share
        self.mode = mode
        self.out_rows = out_rows
        self.sink = sink
        self.window = window
        self.staged = staged
        self.word = word
        self.block = 4 * word
        self.names = []
        self.data = array("i")
        self.heap = array("i")
        self.count = array("i")
        self.first = bytearray()
        self.last = bytearray()
        self.kind = bytearray()
        self.exact = bytearray()  # 1: shares only an arena of exactly its size (public: Model.logits)
        self.arena = array("h")
        self.offset = array("i")  # in a byte arena (int32 arenas: 0)
        self.arenas = []
        self.peak = 0  # heap bytes held during a step (a step allocates nothing)
        self.transient = 0  # the largest temporary of construction (an upper bound on the extra)
        self.load_peak = 0

    def obj(self, n):
        """Heap bytes of a bytearray / array / memoryview holding n data bytes."""
        b = self.block
        return b + (n + b - 1) // b * b

    def add(self, name, data, first=0, last=T_END, kind=OWN, extra=0, count=1, exact=False):
        """A buffer of data bytes (extra: heap bytes of objects around it, e.g. an instance)."""
        self.names.append(name)
        self.data.append(data)
        self.heap.append(self.obj(data) + extra)
        self.count.append(count)
        self.first.append(first)
        self.last.append(last)
        self.kind.append(kind if self.share else OWN)
        self.exact.append(1 if exact else 0)
        self.arena.append(-1)
        self.offset.append(0)

    def index(self, name):
        """Buffer number of name (ModelError if the plan has none)."""
        for i in range(len(self.names)):
            if self.names[i] == name:
                return i
        raise ModelError("the memory plan has no buffer %r" % (name,))

    def _fits(self, i, a):
        """Buffer i may join int32 arena a: exact size if it must, and no member live with it."""
        if self.arenas[a][0] != INT32 or (self.exact[i] and self.arenas[a][1] != self.data[i]):
            return False
        for j in range(len(self.names)):
            if self.arena[j] == a and self.first[i] <= self.last[j] and self.first[j] <= self.last[i]:
                return False
        return True

    def _gap(self, i, a):
        """The lowest offset in byte arena a clear of every member live with buffer i."""
        off = 0
        moved = True
        while moved:
            moved = False
            for j in range(len(self.names)):
                if self.arena[j] == a and self.first[i] <= self.last[j] and self.first[j] <= self.last[i] \
                        and self.offset[j] < off + self.data[i] and off < self.offset[j] + self.data[j]:
                    off = self.offset[j] + self.data[j]
                    moved = True
        return off

    def _total(self):
        """Placement, largest first (ties in plan order, so every interpreter agrees): an int32 buffer
        joins the first arena it fits (_fits; the kernels take whole arrays, so at offset 0) or opens
        one; a byte buffer goes into the one byte arena at the lowest offset clear of the buffers live
        with it (views of it are the Q4Matrix nibble buffers). Then the peak."""
        order = [i for i in range(len(self.names)) if self.kind[i]]
        n = len(self.names)
        order.sort(key=lambda i: self.data[i] * n + n - 1 - i, reverse=True)
        for i in order:
            if self.kind[i] == BYTES:
                a = 0
                while a < len(self.arenas) and self.arenas[a][0] != BYTES:
                    a += 1
                if a == len(self.arenas):
                    self.arenas.append([BYTES, 0, 0])
                self.offset[i] = self._gap(i, a)
                self.arena[i] = a
                end = self.offset[i] + self.data[i]
                if end > self.arenas[a][1]:
                    self.arenas[a][1] = end
                    self.arenas[a][2] = self.obj(end)
                continue
            for a in range(len(self.arenas)):
                if self._fits(i, a):
                    self.arena[i] = a
                    break
            if self.arena[i] < 0:
                self.arena[i] = len(self.arenas)
                self.arenas.append([self.kind[i], self.data[i], self.obj(self.data[i])])
        t = 0
        for i in range(len(self.names)):
            if self.arena[i] < 0:
                t += self.heap[i] * self.count[i]
        for a in self.arenas:
            t += a[2]
        self.peak = t
        self.load_peak = t + self.transient
        big = 0
        for i in range(len(self.names)):
            if self.arena[i] < 0 and self.heap[i] > big:
                big = self.heap[i]
        for a in self.arenas:
            if a[2] > big:
                big = a[2]
        self.largest = big  # the largest single allocation: it needs that much contiguous heap

    def check_kv(self, kv):
        """The RingKV must have this plan's sink / window / staging (ModelError otherwise)."""
        if (kv.sink, kv.window, kv.staged) != (self.sink, self.window, self.staged):
            raise ModelError("the plan is for a %d+%d+%d cache, the RingKV is %d+%d+%d"
                             % (self.sink, self.window, self.staged, kv.sink, kv.window, kv.staged))


def config(cfg):
    """A model_load.Config from a Config or an MBF config dict (ModelError naming a missing key)."""
    if isinstance(cfg, Config):
        return cfg
    if not isinstance(cfg, dict):
        raise ModelError("a memory plan needs a model_load.Config or an MBF config dict, got %s"
                         % type(cfg).__name__)
    try:
        return Config(cfg)
    except KeyError as e:
        raise ModelError("model config lacks key %s" % e)
    except TypeError as e:
        raise ModelError("model config has a value of the wrong type (%s)" % e)


def check_int(name, v, lo, hi):
    if type(v) is not int or v < lo or v > hi:
        raise ModelError("%s must be an int in %d..%d, got %r" % (name, lo, hi, v))


def _seg(reader, name, nib, extra):
    """(weight bytes, scale and min bytes) of matrix name: q4 by default, else the file's sizes."""
    if reader is None or name not in reader:
        return nib, extra
    extra = 0
    for suffix in (".scales", ".mins"):
        if name + suffix in reader:
            extra += reader.seg(name + suffix).length
    return reader.seg(name).length, extra


def _map_size(reader, name, default):
    if reader is None or name not in reader:
        return default
    return 2 if reader.seg(name).dtype == "u16" else 4


def layout(cfg, sink, window, staged, mode="resident", out_rows=64, word=4, reader=None, share=True,
           in_place=None):
    """The Plan of one layout (no heap check): cfg a Config or config dict, the RingKV's sink, window
    and staging, mode one of MODES, out_rows the streamed classifier's rows per block, word 4 or 8,
    reader (optional) the open mbf.Reader whose segment sizes replace the config's estimate. share=False
    gives every buffer its own allocation (tools that read the buffers after the fact). in_place: the
    weights stay in flash (the model in a board's ROMFS); None: whether reader reads in place (reader.mem)."""
    c = config(cfg)
    if in_place is None:
        in_place = reader is not None and getattr(reader, "mem", None) is not None
    if mode not in MODES:
        raise ModelError("memory plan mode must be one of %s, got %r" % (", ".join(MODES), mode))
    check_int("sink", sink, 0, 65535)
    check_int("window", window, 1, 65535)
    check_int("staged", staged, 1, 65535)
    check_int("out_rows", out_rows, 1, 1 << 24)
    if word not in (4, 8):
        raise ModelError("word must be 4 (32-bit boards) or 8 (64-bit unix port), got %r" % (word,))
    if sink + window + 1 > c.seq_len:
        raise ModelError("a %d+%d cache has positions up to %d, beyond the model's seq_len %d"
                         % (sink, window, sink + window, c.seq_len))
    stream = mode != "resident"
    b = out_rows if out_rows < c.n_out else c.n_out
    p = Plan(c, mode, b if stream else c.n_out, sink, window, staged, word, share, in_place)
    kept = 0 if in_place else 1  # resident weight bytes on the heap: none when they are views of flash
    inst = _INST * p.block
    L = c.n_layers
    cap = sink + window
    slots = cap + staged
    hd, g = c.head_dim, c.group
    # the KV cache (the caller's RingKV): int8 K and V, a packed scale per (slot, head)
    p.add("kv.k", L * slots * c.kv_dim, extra=inst)
    p.add("kv.v", L * slots * c.kv_dim)
    p.add("kv.scales", L * slots * c.n_kv_heads * 4, count=2)
    p.transient = p.obj(L * slots * c.kv_dim)  # RingKV's zero source; larger than any other temporary
    # weights: resident, or their scales resident and the nibbles read into the stream buffers
    shapes = layer_shapes(c)
    for j in range(7):
        part = LAYER_Q4[j]
        r, k = shapes[part]
        nib, extra = _seg(reader, "blk.0." + part, r * k // 2, r * k // 16)
        if not stream:  # weights and scales in one buffer (the weights a view beside it when in place)
            p.add("w." + part, nib * kept + extra, extra=inst + p.block, count=L)
            continue
        p.add("scales." + part, extra, extra=inst + p.block, count=L)
        if mode == "layer":
            first, last = T_ANORM, T_W2
        elif mode == "phase":
            first, last = (T_ANORM, T_WO) if j < 4 else (T_FNORM, T_W2)
        else:
            first = last = _USE[j]
        p.add("stream." + part, nib, first, last, BYTES)
    if stream:
        # llama.Model's load lists (one per load point, one entry per layer part) and nibble views, and
        # the reader's layer index (built on first use: part names, sizes, segment numbers)
        k = 16 + 3 * c.attn_bias + c.attn_out_bias
        if reader is not None:
            try:
                k = len(reader.layer_parts())
            except ValueError:  # an inconsistent file: model_load names the segment later
                pass
        loads = {"layer": 1, "phase": 2, "matrix": 7}[mode]
        p.add("stream lists", 0, extra=p.obj(word * N_STEPS) + loads * p.obj(word * k) + 7 * p.block)
        p.add("reader layer index", 2 * L * k, extra=2 * p.obj(word * k) + k * 2 * p.block)
    norms = 2 * L + 1
    p.add("norm gains", 2 * c.dim, extra=p.obj(20) + inst, count=norms)
    if c.attn_bias:
        p.add("bias q,k,v", 4 * (c.q_dim + 2 * c.kv_dim), extra=2 * p.block, count=L)
    if c.attn_out_bias:
        p.add("bias output", 4 * c.dim, count=L)
    _head(p, c, reader, stream, inst, kept)
    p.add("rope table", 2 * (cap + 1) * hd, extra=p.obj(16) + inst)
    # activations (int32): live ranges as in llama.Model's forward
    act = (("x", c.dim, T_EMBED, T_ONORM), ("xb", c.dim, T_ANORM, T_ONORM), ("q", c.q_dim, T_WQ, T_QUERY),
           ("kvb", c.kv_dim, T_WK, T_WV), ("qrot", g * hd, T_SCORES, T_SCORES),
           ("qf", c.n_heads, T_QUERY, T_SCORES), ("qsh", c.n_heads, T_QUERY, T_SCORES),
           ("att", c.q_dim, T_MIX, T_ATTQ), ("hb", c.hidden_dim, T_W1, T_SWIGLU),
           ("hb2", c.hidden_dim, T_W3, T_SWIGLU), ("logits", c.n_out, T_HEAD, T_END),
           ("lslot", cap, T_POS, T_POS), ("kslot", cap + 1, T_POS, T_W2))
    for name, n, first, last in act:
        p.add(name, 4 * n, first, last, INT32, exact=name == "logits")
    for h in range(c.n_kv_heads):
        p.add("qgrp.%d" % h, 4 * g * hd, T_QUERY, T_SCORES, INT32)
    for h in range(c.n_heads):
        p.add("scores.%d" % h, 4 * (cap + 1), T_SCORES, T_MIX, INT32)
    for name, n in (("act_d", c.dim), ("act_q", c.q_dim), ("act_h", c.hidden_dim)):
        # QAct: int8 values, its info array (header + 2 per group), a 1-int scratch, the instance
        p.add(name, n, extra=p.obj(4 * (_HDR + n // 16)) + p.obj(4) + inst)
    # the Model, its Layer objects and lists, the reader's layer plan: a small fixed part per layer
    p.add("objects", 0, extra=(8 + 3 * L) * inst + p.obj(word * (L + c.n_heads + c.n_kv_heads + 24)) + p.obj(12))
    # the C kernels' bindings (llama._Fused, made where q4nat is the backend: MicroPython's default where it
    # is on the path; elsewhere they over-count a KB): attention's argument tuples and info arrays, the
    # instance and its attributes, and unless streamed, per layer q4nat.layer's 38 buffers and 7 matrix tuples
    nat = (_tup(p, 7) + _tup(p, 5) + _tup(p, c.n_kv_heads) + _tup(p, 2) + _tup(p, c.n_heads)
           + p.obj(28) + p.obj(16) + 2 * p.obj(24) + inst + _tup(p, 24))
    if not stream:
        nat += _tup(p, L) + p.obj(8) + L * (_tup(p, 38) + 7 * _tup(p, 5))
    p.add("native bindings", 0, extra=nat)
    p._total()
    return p


def _tup(p, n):
    """Heap bytes of a tuple of n items (one block run: header and items)."""
    b = p.block
    return (p.word * (2 + n) + b - 1) // b * b


def _head(p, c, reader, stream, inst, kept=1):
    """Embedding rows, token maps and the classifier (model_load.Embeddings and Head); kept 0: resident
    weights in place (views of flash)."""
    dim = c.dim
    rows = c.vocab_size  # token_embd rows (fewer with an embd_map)
    if reader is not None and "token_embd" in reader and len(reader.seg("token_embd").shape) == 2:
        rows = reader.seg("token_embd").shape[0]
    emb = _seg(reader, "token_embd", rows * dim // 2, rows * dim // 16)
    out = emb if c.tied else _seg(reader, "output", c.n_out * dim // 2, c.n_out * dim // 16)
    if not stream:
        p.add("token_embd", emb[0] * kept + emb[1], extra=inst + p.block)
        if not c.tied:
            p.add("output", out[0] * kept + out[1], extra=inst + p.block)
    else:
        b = p.out_rows
        nblocks = (c.n_out + b - 1) // b
        p.add("head scales", out[1])  # a tied classifier is token_embd (n_out rows)
        p.add("head block", b * (out[0] // c.n_out), T_HEAD, T_HEAD, extra=2 * inst + p.block)
        p.add("head out", 4 * b, T_HEAD, T_HEAD)
        p.add("head views", 0, extra=nblocks * p.block + p.obj(p.word * nblocks))
        p.add("embed row", emb[0] // rows, T_EMBED, T_EMBED, extra=inst)
        if not c.tied:
            p.add("embed row scales", dim // 16, T_EMBED, T_EMBED)
    m = _map_size(reader, "embd_map", 0)
    if m:
        if not kept:  # in place: entries read from flash through a view
            p.add("embd_map view", 0, extra=p.block)
        elif stream:
            p.add("embd_map entry", m, T_EMBED, T_EMBED)
        else:
            p.add("embd_map", m * c.vocab_size)
    if c.sub_vocab:
        p.add("vocab_map", _map_size(reader, "vocab_map", 2) * c.sub_vocab)


def native_word():
    """Object word size of this interpreter (8 on 64-bit builds, CPython included)."""
    import sys
    return 8 if sys.maxsize > 1 << 32 else 4
