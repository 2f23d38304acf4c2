# llama.py: the Llama-family forward on the W4A8 integer kernels over a RingKV, and integer sampling.
# Read it like llama2.c's run.c: model_load.py holds the config (Config), the weights (Layer, Embeddings)
# and their loading; here Model owns the buffers and has one method per step of the forward, then the
# integer sampler. docs/RUNTIME.md has every step with its formats:
#   embed -> per layer [rmsnorm, q k v, store k v (int8), attention, output proj, +x]
#                      [rmsnorm, gate up, swiglu, down, +x] -> final rmsnorm -> classifier -> logits (Q16)
# Between kernels everything is Q16 in array('i'); no float after construction, so a decode step
# allocates nothing on MicroPython and every kernel backend gives the same integers.
#
#   kv = ringkv.RingKV(n_layers, n_kv_heads * head_dim, sink, window, staged, "b", n_kv_heads)
#   m = llama.Model(mbf.open(path), kv)      # stream=True / a mode name: layer matrices read from flash
#   m = llama.Model(r, kv, plan=memfit.fit(r.config, profile, reader=r))   # the plan that fits the board
#   m.step(token); kv.commit(1)              # or m.feed(tokens), then kv.commit(n) / kv.discard()
#   s = llama.Sampler(m.n_out, top_k=40, temperature=0.8)
#   k = s.distribution(m.logits)             # s.idx[:k], s.count[:k]: counts summing to 2**16
#   i = s.draw(r)                            # r in 0..65535; m.token_of(i) is the token id
#
# Cache positions (docs/RUNTIME.md, Positions): the query of staged token s sees what it would see had the s staged
# tokens before it been committed one by one (the oldest window tokens those commits would evict are
# left out; keys take their index in what remains as position, the query comes next). So feed(T) then
# commit(T) gives the same logits, bit for bit, as T x (step, commit(1)), and no position exceeds S+W.
import gc
import sys
from array import array

from shared import kernels, mbf, memplan, model_load
from shared import fixedmath
from shared.fixedmath import RopeTable
from shared.model_load import ModelError
from shared.q4 import LIM, QAct, bitlen, ceil_log2, mulshift, shift_sat
from shared.compat import const

# The forward's steps where a streamed plan may read layer matrices (memplan's numbering)
_T_ANORM = const(2)
_T_WQ = const(3)
_T_WK = const(4)
_T_WV = const(5)
_T_WO = const(10)
_T_FNORM = const(11)
_T_W1 = const(12)
_T_W3 = const(13)
_T_W2 = const(15)
_MP = sys.implementation.name != "cpython"
ONE = const(65536)  # a distribution's counts sum to exactly this (2**16)
_XBIAS = const(64)  # K/V/query scale packing: ((x + 64) << 15) | m means m * 2**x (Q16 units per int8 unit)


def _zeros(n):
    return array("i", bytearray(4 * n))


class Model:
    """A Llama-family decoder over a RingKV: every buffer allocated here, nothing in step().

    reader: an open mbf.Reader; kv: a RingKV('b') shaped (n_layers, n_kv_heads * head_dim, heads =
    n_kv_heads) whose S+W positions fit seq_len. Buffers come from a memory plan (shared/memplan.py),
    made here once: plan=None plans from the config for this stream / out_rows, or pass one (memfit.fit
    chooses the fastest that fits a board's heap). Buffers never live at the same time share one
    allocation, so m.logits is valid from the end of a step until the next step starts (as before: the
    next step overwrites it). stream: False (resident), True ("phase") or a mode, "layer" / "phase" /
    "matrix": the INT4 nibbles are re-read with load_layer during each step (per layer, per attention /
    FFN phase, or per matrix; all scales and gains stay resident), embedding rows are read with
    read_range and the classifier in blocks of out_rows rows: for models larger than the heap.
    verify=True checks every CRC once here (streamed reads are then unchecked: docs/MBF.md).
    embed_rows: an object with fill(row, out) (see model_load.EmbedRows) replacing the default row
    source (self.rows), e.g. an LRU-K cache of dequantised rows. Weights: self.layers (Layer),
    self.out_norm, self.emb (token maps, row source, classifier); model_load builds them."""

    def __init__(self, reader, kv, stream=False, out_rows=64, verify=True, embed_rows=None, plan=None):
        if not isinstance(reader, mbf.Reader):
            raise ModelError("Model needs an open mbf.Reader, got %s" % type(reader).__name__)
        cfg = model_load.Config(reader.config)
        model_load.check_kv(cfg, kv)
        if _MP:
            gc.collect()  # garbage out of the way before the plan and the big blocks (fragmentation)
        if plan is None:
            plan = memplan.layout(cfg, kv.sink, kv.window, kv.staged, _mode(stream), out_rows,
                                  memplan.native_word(), reader)
        elif not isinstance(plan, memplan.Plan):
            raise ModelError("plan must be a memplan.Plan, got %s" % type(plan).__name__)
        else:
            _check_plan(plan, cfg, kv)
        if verify:
            reader.verify_all()
        self.cfg = cfg
        self.kv = kv
        self.reader = reader
        # Model has 37 attributes: one more grows MicroPython's attribute table to a 752-byte block,
        # which the fragmented rp2040 test heap may not have. The plan itself is not kept.
        self.mode = plan.mode
        self.n_out = cfg.n_out
        self.hook = None  # called before each kernel of a step: the node polls its inputs there (firmware/node.py)
        stream = plan.mode != "resident"
        pool = None if stream else model_load.reserve(reader, cfg)  # big blocks first
        nibbles = self._stream_buffers(plan) if stream else None
        acts = _arenas(plan, memplan.INT32, _zeros)  # the step's arenas, before the many small objects
        # RoPE by relative distance d = (query position) - (key position), 0 <= d <= S+W
        self.rope = RopeTable(cfg.head_dim, kv.capacity, cfg.rope_theta, cfg.rope_style)
        # the classifier (its block, its scales) before the layers' many small objects, as above
        self.emb = model_load.Embeddings(reader, cfg, stream, plan.out_rows, pool)
        self.rows = self.emb.rows
        self.vocab_map = self.emb.vocab_map
        self.embed_rows = self.rows if embed_rows is None else embed_rows
        self.layers = model_load.load_layers(reader, cfg, stream, pool, nibbles)[0]
        self.fetch = [None] * memplan.N_STEPS
        if stream:
            self._loads(plan, reader, nibbles)
        self.out_norm = model_load.norm(reader, "output_norm", cfg.dim, model_load.resid_eps(cfg))
        self._alloc(cfg, kv, plan, acts)

    # ---- construction ----

    def _stream_buffers(self, plan):
        """The streamed nibble buffers: views of the plan's weight arenas (or their own bytearrays)."""
        arenas = _arenas(plan, memplan.BYTES, bytearray)
        nibbles = {}
        for p in model_load.LAYER_Q4:
            i = plan.index("stream." + p)
            n = plan.data[i]
            if plan.arena[i] < 0:
                nibbles[p] = bytearray(n)
            else:
                o = plan.offset[i]
                nibbles[p] = memoryview(arenas[plan.arena[i]])[o:o + n]
        return nibbles

    def _loads(self, plan, reader, nibbles):
        """self.fetch: for each step of the forward (memplan.STEPS), the load_layer list of the layer
        matrices the plan reads there (their nibble buffers, None for the other parts), or None."""
        parts = reader.layer_parts()
        at = {}
        for p in model_load.LAYER_Q4:
            t = plan.first[plan.index("stream." + p)]
            if t not in at:
                at[t] = [None] * len(parts)
            at[t][parts.index(p)] = nibbles[p]
        self.fetch = [at.get(t) for t in range(memplan.N_STEPS)]

    def _alloc(self, cfg, kv, plan, arenas):
        """The step's int32 buffers: each its own array, or the plan's shared arena (same object)."""

        def get(name):
            i = plan.index(name)
            return arenas[plan.arena[i]] if plan.arena[i] >= 0 else _zeros(plan.data[i] // 4)

        hd, g = cfg.head_dim, cfg.group
        self.x = get("x")  # the residual stream
        self.xb = get("xb")
        self.q = get("q")
        self.kvb = get("kvb")
        self.att = get("att")
        self.hb = get("hb")
        self.hb2 = get("hb2")
        self.logits = get("logits")  # valid from the end of a step until the next step starts
        self.act_d = QAct(cfg.dim)
        self.act_q = QAct(cfg.q_dim)
        self.act_h = QAct(cfg.hidden_dim)
        # attention: the query heads of each KV head as int8 << qshift, one rotated copy, scores
        self.qshift = 15 - ceil_log2(hd)  # keeps every q.k dot product below 2**30 (docs/RUNTIME.md)
        self.qgrp = [get("qgrp.%d" % h) for h in range(cfg.n_kv_heads)]
        self.qrot = get("qrot")
        self.qf = get("qf")  # per query head: scale mantissa / sqrt(head_dim) ...
        self.qsh = get("qsh")  # ... and its shift
        self.isq_m, self.isq_s = _inv_sqrt(hd)
        self.scores = [get("scores.%d" % h) for h in range(cfg.n_heads)]
        self.lslot = get("lslot")
        self.kslot = get("kslot")  # physical slot of each key of the current query, by position
        self.nkeys = 0
        self.ai = array("i", bytearray(16))  # the attention kernels' offsets (fixedmath.dot_i8, axpy_i8)
        kernels.rope(self.qrot, self.qgrp[0], self.rope, kv.capacity, g)  # checks the shapes once
        self._att = [None, None, None]  # the attention loop's rope, dot_i8, axpy_i8 (_backend)
        self._fz = None
        self._backend()

    def _backend(self):
        # The attention loop calls the backend's rope directly: its arguments are fixed here and
        # checked once above, and kernels.rope's per-call checks cost 5x the rotation itself (viper).
        # So do the int8 dot and axpy of scores and mix (one call per key and head), where the backend
        # has them for this cache's int8 rows; else fixedmath's (any typecode). The native backend runs
        # the whole attention and the glue in C instead (shared/llama_fused.py), for int8 rows.
        # Nothing here allocates once the model has run natively (a step after kernels.use() calls this,
        # inside heap-locked tests too): the functions go into the list made in _alloc, and the native
        # backend's bound buffers (_fz: shared/llama_fused.py) are made once.
        name = kernels.backend()
        b = kernels.load(name)
        native = self.kv.typecode == "b"
        a = self._att
        a[0] = b.rope
        a[1] = getattr(b, "dot_i8", fixedmath.dot_i8) if native else fixedmath.dot_i8
        a[2] = getattr(b, "axpy_i8", fixedmath.axpy_i8) if native else fixedmath.axpy_i8
        f = kernels.fused()
        if f is not None and native and self._fz is None:
            from shared.llama_fused import Fused  # MicroPython with q4nat only: other boards never load it

            self._fz = Fused(f, self)
        self._nat = self._fz if f is not None and native else None
        self._kname = name

    # ---- the forward ----

    def row_of(self, token):
        """Row of token_embd for token id token (ModelError if it is not a valid id)."""
        return self.emb.row_of(token)

    def token_of(self, i):
        """The token id of logits index i (the sub-vocabulary's map, or i itself)."""
        return self.vocab_map[i] if self.vocab_map is not None else i

    def step(self, token):
        """Stage token, run the forward, write self.logits for the next token; return its staged index."""
        row = self.row_of(token)
        if kernels.backend() != self._kname:  # kernels.use() switched backends since
            self._backend()
        kv = self.kv
        s = kv.stage()
        self._positions(s)
        slot = kv.capacity + s
        self.embed_rows.fill(row, self.x)
        f = self._nat
        if f is not None and f.layer_bufs is not None:  # one C call a layer (shared/llama_fused.py)
            nat = f.nat
            lb = f.layer_bufs
            slots = kv.slots
            f.ainfo[0] = self.nkeys
            for layer in range(self.cfg.n_layers):
                if self.hook is not None:
                    self.hook()
                f.sinfo[2] = layer * slots + slot
                f.ainfo[1] = layer * slots
                nat.layer(lb[layer])
        else:
            for layer in range(self.cfg.n_layers):
                w = self.layers[layer]
                self._attention_block(layer, w, slot)
                self._ffn_block(layer, w)
        self._classifier()
        return s

    def _fetch(self, layer, t):
        """Before each kernel of a layer: the step hook, then (streamed) read the layer matrices the plan loads
        at step t (memplan.STEPS) into their buffers."""
        if self.hook is not None:
            self.hook()
        f = self.fetch[t]
        if f is not None:
            self.reader.load_layer(layer, f, False)

    def feed(self, tokens, n=-1, out=None):
        """Step tokens[0..n-1] (default all) in order: prefill or verification. With out (array('i')
        of n * n_out), the logits after each token go to out[i * n_out:]. Checks the ids and the
        free staging room first, so a refused feed stages nothing. The caller commits / discards."""
        if n < 0:
            n = len(tokens)
        if n > self.kv.room():
            raise ModelError("feed of %d tokens but only %d staging slots are free" % (n, self.kv.room()))
        if out is not None and len(out) < n * self.n_out:
            raise ModelError("feed output needs %d values, has %d" % (n * self.n_out, len(out)))
        for i in range(n):
            self.row_of(tokens[i])
        m = self.n_out
        lg = self.logits
        for i in range(n):
            self.step(tokens[i])
            if out is not None:
                o = i * m
                for j in range(m):
                    out[o + j] = lg[j]
        return n

    def prefill(self, tokens, n=-1):
        """Feed and commit tokens[0..n-1] in chunks that fit the staging area (nothing else staged)."""
        if n < 0:
            n = len(tokens)
        kv = self.kv
        if kv.pending:
            raise ModelError("prefill with %d tokens staged: commit or discard them first" % kv.pending)
        i = 0
        while i < n:
            k = n - i
            if k > kv.staged:
                k = kv.staged
            for j in range(k):
                self.row_of(tokens[i + j])
            for j in range(k):
                self.step(tokens[i + j])
            kv.commit(k)
            i += k

    def _positions(self, s):
        """Keys of staged token s's query, by position: kslot[j] is the slot of the key at position j,
        j < nkeys; the query itself is the last (distance 0). See "Cache positions" at the top."""
        kv = self.kv
        f = self._nat
        if f is not None:  # q4nat.positions: the same slots, in C
            pi = f.pinfo
            pi[0] = kv.live
            pi[4] = kv.head
            pi[5] = s
            self.nkeys = f.nat.positions(self.kslot, pi)
            return
        live = kv.live
        cap = kv.capacity
        nv = live + s  # the virtual committed sequence: live tokens, then staged 0..s-1
        e = nv - cap if nv > cap else 0  # its oldest non-sink tokens a commit would have evicted
        sp = kv.sink if nv > kv.sink else nv
        kv.fill_slots(self.lslot)
        lslot = self.lslot
        kslot = self.kslot
        n = 0
        for i in range(nv):
            if i < sp or i >= sp + e:
                kslot[n] = lslot[i] if i < live else cap + i - live
                n += 1
        kslot[n] = cap + s
        self.nkeys = n + 1

    def _attention_block(self, layer, w, slot):
        cfg = self.cfg
        self._fetch(layer, _T_ANORM)
        kernels.rmsnorm(self.xb, self.x, w.attn_norm)
        kernels.quantize_act(self.act_d, self.xb)
        self._fetch(layer, _T_WQ)
        kernels.matvec(self.q, w.wq, self.act_d)
        if w.bq is not None:
            self._plus(self.q, w.bq, cfg.q_dim)
        self._fetch(layer, _T_WK)
        kernels.matvec(self.kvb, w.wk, self.act_d)
        if w.bk is not None:
            self._plus(self.kvb, w.bk, cfg.kv_dim)
        self._store(layer, slot, self.kv.k, self.kv.kscale)
        self._fetch(layer, _T_WV)
        kernels.matvec(self.kvb, w.wv, self.act_d)
        if w.bv is not None:
            self._plus(self.kvb, w.bv, cfg.kv_dim)
        self._store(layer, slot, self.kv.v, self.kv.vscale)
        self._query()
        self._scores(layer)
        self._mix(layer)
        kernels.quantize_act(self.act_q, self.att)
        self._fetch(layer, _T_WO)
        kernels.matvec(self.xb, w.wo, self.act_q)
        if w.bo is not None:
            self._plus(self.xb, w.bo, cfg.dim)
        self._plus(self.x, self.xb, cfg.dim)

    def _ffn_block(self, layer, w):
        self._fetch(layer, _T_FNORM)
        kernels.rmsnorm(self.xb, self.x, w.ffn_norm)
        kernels.quantize_act(self.act_d, self.xb)
        self._fetch(layer, _T_W1)
        kernels.matvec(self.hb, w.w1, self.act_d)
        self._fetch(layer, _T_W3)
        kernels.matvec(self.hb2, w.w3, self.act_d)
        kernels.swiglu(self.hb, self.hb, self.hb2, self.cfg.hidden_dim)
        kernels.quantize_act(self.act_h, self.hb)
        self._fetch(layer, _T_W2)
        kernels.matvec(self.xb, w.w2, self.act_h)
        self._plus(self.x, self.xb, self.cfg.dim)

    def _plus(self, x, y, n):
        f = self._nat
        if f is not None:
            f.nat.add(x, y, n)
        else:
            _add(x, y, n)

    def _classifier(self):
        if self.hook is not None:
            self.hook()
        kernels.rmsnorm(self.xb, self.x, self.out_norm)
        kernels.quantize_act(self.act_d, self.xb)
        self.emb.head.logits(self.logits, self.act_d, self.hook)

    def _store(self, layer, slot, data, scales):
        """K or V of this token (self.kvb, Q16) -> int8 rows and packed scales at (layer, slot)."""
        kv = self.kv
        f = self._nat
        if f is not None:
            f.sinfo[2] = layer * kv.slots + slot
            f.nat.store(self.kvb, data, scales, f.sinfo)
            return
        hd = kv.head_dim
        nkv = kv.heads
        r = layer * kv.slots + slot
        for h in range(nkv):
            scales[r * nkv + h] = _quant8(self.kvb, h * hd, hd, data, r * kv.kv_dim + h * hd, 0)

    def _query(self):
        """Each query head -> int8 << qshift in its KV head's group buffer; the head's score factor
        (scale mantissa / sqrt(head_dim)) and shift in qf, qsh."""
        f = self._nat
        if f is not None:
            f.nat.query(self.q, f.qg, f.qfs, f.qinfo)
            return
        cfg = self.cfg
        hd = cfg.head_dim
        g = cfg.group
        qs = self.qshift
        for h in range(cfg.n_kv_heads):
            qg = self.qgrp[h]
            for a in range(g):
                hq = h * g + a
                sc = _quant8(self.q, hq * hd, hd, qg, a * hd, qs)
                # score = dot * mk * fq * 2**(xq + xk - qs - isq_s - 1), see docs/RUNTIME.md
                self.qf[hq] = ((sc & 32767) * self.isq_m + 16384) >> 15  # <= 2**15
                self.qsh[hq] = qs + self.isq_s - 14 - ((sc >> 15) - _XBIAS)

    def _scores(self, layer):
        """scores[head][j] = q . k_j / sqrt(head_dim) (Q16), q rotated by the distance to key j."""
        kv = self.kv
        f = self._nat
        if f is not None:
            f.ainfo[0] = self.nkeys
            f.ainfo[1] = layer * kv.slots
            f.nat.scores(f.sbufs, self.kslot, f.ainfo)
            return
        cfg = self.cfg
        hd = cfg.head_dim
        g = cfg.group
        nkv = cfg.n_kv_heads
        kvd = cfg.kv_dim
        n = self.nkeys
        kslot = self.kslot
        kk = kv.k
        ks = kv.kscale
        base = layer * kv.slots
        qr = self.qrot
        qf = self.qf
        qsh = self.qsh
        scores = self.scores
        rt = self.rope
        info = rt.info
        info[3] = g
        rope, dot, _ = self._att
        ai = self.ai
        ai[2] = hd
        for h in range(nkv):
            qg = self.qgrp[h]
            for j in range(n):
                slot = base + kslot[j]
                info[2] = n - 1 - j
                rope(qr, qg, rt, n - 1 - j, g)  # the group's g query heads, by distance n - 1 - j
                sc = ks[slot * nkv + h]
                mk = sc & 32767
                xk = (sc >> 15) - _XBIAS
                ai[1] = slot * kvd + h * hd
                for a in range(g):
                    ai[0] = a * hd
                    d = dot(qr, kk, ai)  # |d| < 2**30 (Cauchy-Schwarz, docs/RUNTIME.md)
                    hq = h * g + a
                    # score = d * mk * fq * 2**-(15 + qsh - xk): one factor (mk * fq) / 2**15 <= 2**15
                    scores[hq][j] = mulshift(d, (mk * qf[hq] + 16384) >> 15, qsh[hq] - xk)

    def _mix(self, layer):
        """att[head] = softmax(scores[head]) . V, Q16; V int8 rows with per-(slot, head) scales."""
        kv = self.kv
        f = self._nat
        if f is not None:  # ainfo as _scores left it for this layer
            f.nat.mix(f.mbufs, self.kslot, f.ainfo)
            return
        cfg = self.cfg
        hd = cfg.head_dim
        g = cfg.group
        nkv = cfg.n_kv_heads
        kvd = cfg.kv_dim
        n = self.nkeys
        kslot = self.kslot
        vv = kv.v
        vs = kv.vscale
        base = layer * kv.slots
        att = self.att
        axpy = self._att[2]
        ai = self.ai
        ai[2] = hd
        for h in range(nkv):
            big = -_XBIAS  # the largest V scale exponent among the keys
            for j in range(n):
                sc = vs[(base + kslot[j]) * nkv + h]
                if sc and (sc >> 15) - _XBIAS > big:
                    big = (sc >> 15) - _XBIAS
            for a in range(g):
                hq = h * g + a
                p = self.scores[hq]
                kernels.softmax(p, p, n)
                o = hq * hd
                for i in range(hd):
                    att[o + i] = 0
                ai[0] = o
                for j in range(n):
                    slot = base + kslot[j]
                    sc = vs[slot * nkv + h]
                    if sc == 0:
                        continue
                    # u = p * mv * 2**(xv - big - 9) <= p * 2**6: sum(u * v8) <= 2**22.1 * 127 < 2**30
                    u = mulshift(p[j], sc & 32767, 9 + big - ((sc >> 15) - _XBIAS))
                    if u == 0:
                        continue
                    ai[1] = slot * kvd + h * hd
                    ai[3] = u
                    axpy(att, vv, ai)
                for i in range(hd):
                    att[o + i] = shift_sat(att[o + i], big - 7)


# ---- construction helpers ----

def _mode(stream):
    """Model's stream argument -> a memplan mode: False resident, True "phase", or a mode name."""
    if type(stream) is not str:
        return "phase" if stream else "resident"
    if stream in memplan.MODES:
        return stream
    raise ModelError("stream must be True, False or one of %s, got %r" % (", ".join(memplan.MODES), stream))


def _check_plan(plan, cfg, kv):
    """A plan made for another model shape or cache is refused (its buffers would not fit)."""
    p = plan.cfg
    have = (p.dim, p.hidden_dim, p.n_layers, p.n_heads, p.n_kv_heads, p.head_dim, p.n_out)
    want = (cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.n_out)
    if have != want:
        raise ModelError("the plan is for a model shaped %r (dim, hidden, layers, heads, kv heads, head_dim, "
                         "outputs), this file is %r" % (have, want))
    plan.check_kv(kv)


def _arenas(plan, kind, make):
    """One buffer per arena of the plan's kind (memplan.INT32: words, BYTES: bytes), largest first."""
    out = {}
    order = []
    for i in range(len(plan.arenas)):
        if plan.arenas[i][0] == kind:
            order.append(i)
    order.sort(key=lambda i: -plan.arenas[i][1])
    for i in order:
        n = plan.arenas[i][1]
        out[i] = make(n // 4 if kind == memplan.INT32 else n)
    return out


# ---- integer helpers (allocation-free: small ints only, every intermediate < 2**30) ----

def _add(x, y, n):
    """x += y, saturated to +-LIM, without an intermediate beyond +-LIM (boards: 31-bit small ints)."""
    for i in range(n):
        a = x[i]
        b = y[i]
        if a >= 0:
            a = LIM if b > LIM - a else a + b
        else:
            a = -LIM if b < -LIM - a else a + b
        x[i] = a


def _ceil127(amax, x):
    """ceil(amax / (127 * 2**x)) for amax < 2**30 and -21 <= x <= 9."""
    if x >= 0:
        d = 127 << x
        return (amax + d - 1) // d
    return ((amax << -x) + 126) // 127  # amax << -x < 2**22


def _quant8(src, so, n, dst, do, lsh):
    """src[so:so+n] (Q16) -> int8 q (|q| <= 127) written as q << lsh to dst[do:do+n]; returns the packed
    scale ((x + 64) << 15) | m, the vector being q * m * 2**x, m in [2**14, 2**15); 0 for a zero vector."""
    amax = 0
    for i in range(so, so + n):
        v = src[i]
        if v < 0:
            v = -v
        if v > amax:
            amax = v
    if amax > LIM:
        amax = LIM
    if amax == 0:
        for i in range(do, do + n):
            dst[i] = 0
        return 0
    x = bitlen(amax) - 22  # amax * 2**-x in [2**21, 2**22): m in [16513, 33026]
    m = _ceil127(amax, x)
    if m > 32767:
        x += 1
        m = _ceil127(amax, x)
    r = ((1 << 28) + (m >> 1)) // m  # 2**28 / m in (2**13, 2**14]
    s = 28 + x
    for i in range(n):
        q = mulshift(src[so + i], r, s)  # round(v / (m * 2**x)), exact product, r within 2**-14
        if q > 127:
            q = 127
        elif q < -127:
            q = -127
        dst[do + i] = q << lsh
    return ((x + _XBIAS) << 15) | m


def _isqrt_big(v):
    """floor(sqrt(v)) for any int v >= 0 (load time: may use long ints)."""
    if v == 0:
        return 0
    x = 1 << ((bitlen(v) + 1) >> 1)
    while True:
        y = (x + v // x) >> 1
        if y >= x:
            return x
        x = y


def _inv_sqrt(n):
    """(m, s) with m * 2**-s = 1 / sqrt(n), m in [2**14, 2**15], integers only (host and board agree)."""
    s = 0
    while True:
        m = (_isqrt_big((1 << (2 * s + 2)) // n) + 1) >> 1
        if m >= 1 << 14:
            return m, s
        s += 1


# ---- sampling: integer distributions (docs/RUNTIME.md section 5) ----

def argmax(x, n):
    """Index of the largest of x[0..n-1]; ties go to the lowest index (greedy decoding)."""
    f = kernels.fused()
    if f is not None:
        return f.argmax(x, n)
    best = 0
    bv = x[0]
    for i in range(1, n):
        if x[i] > bv:
            bv = x[i]
            best = i
    return best


class Sampler:
    """The draft's sampling distribution as integers (docs/RUNTIME.md section 5): counts summing to exactly 2**16,
    the same on every interpreter and backend, and a draw from them with an integer random number.

    distribution(logits) keeps the top_k largest logits (all when top_k is 0 or >= n; ties go to the
    lower index), divides their distance to the largest by the temperature with integers, runs the
    softmax kernel, makes the counts sum to exactly 65536 (the kernel is within ~k/2: one unit each is
    added to, or taken from, the non-zero counts in index order) and drops zero counts. Result:
    idx[0..k-1] logits indexes in ascending order (the order of specdec.Dist), count[0..k-1] > 0.
    Temperature 0 is greedy: 65536 on argmax (ties: the lowest index). temperature: an int is Q16
    (65536 = 1.0); a float is rounded to Q16 once, in set(), so board and host agree. distribution
    and draw allocate nothing."""

    def __init__(self, n, top_k=0, temperature=1.0):
        if type(n) is not int or n < 1 or n > 65535:
            raise ModelError("Sampler size must be an int in 1..65535 (the softmax kernel's limit), got %r" % (n,))
        self.n = n
        self.idx = _zeros(n)
        self.count = _zeros(n)
        self.z = _zeros(n)
        self.k = 0
        self.set(temperature, top_k)

    def set(self, temperature, top_k=0):
        """Temperature (Q16 int or float, 0 = greedy) and top_k (0 = no cut)."""
        if type(top_k) is not int or top_k < 0:
            raise ModelError("top_k must be an int >= 0 (0: no cut), got %r" % (top_k,))
        if type(temperature) is float:
            if not temperature >= 0.0 or temperature > 16384.0:
                raise ModelError("temperature must be in 0..16384, got %r" % (temperature,))
            temperature = int(temperature * 65536.0 + 0.5)
        if type(temperature) is not int or temperature < 0 or temperature > LIM:
            raise ModelError("temperature (Q16 int) must be in 0..%d, got %r" % (LIM, temperature))
        self.top_k = top_k if 0 < top_k < self.n else self.n
        self.temp = temperature
        if temperature:  # 1 / T = 65536 / temperature = m * 2**-s with m in [2**14, 2**15]
            s = -17
            while True:
                m = ((1 << (17 + s)) // temperature + 1) >> 1  # round(2**(16 + s) / temperature)
                if m >= 1 << 14:
                    break
                s += 1
            self.tm = m
            self.ts = s
        return self

    def distribution(self, logits, n=-1):
        """Fill idx/count from logits[0..n-1] (default: the Sampler's size); return k, the entries."""
        if n < 0:
            n = self.n
        if n < 1 or n > self.n:
            raise ModelError("distribution over %d logits; this Sampler holds 1..%d" % (n, self.n))
        idx = self.idx
        cnt = self.count
        if self.temp == 0:
            idx[0] = argmax(logits, n)
            cnt[0] = ONE
            self.k = 1
            return 1
        k = self.top_k if self.top_k < n else n
        if k < n:
            _top_k(logits, n, k, idx)
        else:
            for i in range(n):
                idx[i] = i
        mx = -LIM
        for j in range(k):
            v = _clamp(logits[idx[j]])
            if v > mx:
                mx = v
        z = self.z
        for j in range(k):
            v = _clamp(logits[idx[j]])
            if v >= 0 or mx < 0:
                d = mx - v  # same sign: <= LIM
            else:
                d = LIM if v < mx - LIM else mx - v
            z[j] = -mulshift(d, self.tm, self.ts)  # (v - max) / T in Q16, >= -LIM
        kernels.softmax(cnt, z, k)
        _fix_sum(cnt, k)
        m = 0
        for j in range(k):  # drop zero counts (order kept)
            if cnt[j]:
                idx[m] = idx[j]
                cnt[m] = cnt[j]
                m += 1
        self.k = m
        return m

    def draw(self, r):
        """The logits index drawn by r in 0..65535: the first idx whose cumulative count exceeds r
        (with r uniform, exactly count / 65536)."""
        if type(r) is not int or r < 0 or r >= ONE:
            raise ModelError("draw needs an int in 0..65535, got %r" % (r,))
        c = 0
        cnt = self.count
        for j in range(self.k):
            c += cnt[j]
            if r < c:
                return self.idx[j]
        raise ModelError("draw before distribution()")

    def sample(self, logits, r):
        self.distribution(logits)
        return self.draw(r)


def _clamp(v):
    return LIM if v > LIM else (-LIM if v < -LIM else v)


def _top_k(x, n, k, idx):
    """idx[0..k-1] = the indexes of the k largest of x[0..n-1] (ties: the lower index), ascending.
    Selection by insertion (O(n k) worst case, O(n) typical), then one pass in index order."""
    m = 0
    for i in range(n):  # idx by decreasing value first
        v = x[i]
        if m < k:
            j = m
            m += 1
        elif v > x[idx[k - 1]]:
            j = k - 1
        else:
            continue
        while j > 0 and x[idx[j - 1]] < v:
            idx[j] = idx[j - 1]
            j -= 1
        idx[j] = i
    thr = x[idx[k - 1]]
    eq = 0  # how many entries equal to the threshold were kept (the lowest indexes among equals)
    for j in range(k):
        if x[idx[j]] == thr:
            eq += 1
    m = 0
    for i in range(n):
        v = x[i]
        if v > thr or (v == thr and eq > 0):
            if v == thr:
                eq -= 1
            idx[m] = i
            m += 1
            if m == k:
                break


def _fix_sum(cnt, k):
    """Make cnt[0..k-1] sum to exactly ONE: the softmax kernel is within ~k/2 of it. Walks the entries
    in order, repeatedly, adding 1 to non-zero counts (or taking 1 from counts > 1) until it does."""
    t = 0
    for j in range(k):
        t += cnt[j]
    diff = ONE - t
    while diff:
        moved = False
        for j in range(k):
            if diff > 0 and cnt[j] > 0:
                cnt[j] += 1
                diff -= 1
                moved = True
            elif diff < 0 and cnt[j] > 1:
                cnt[j] -= 1
                diff += 1
                moved = True
            if diff == 0:
                break
        if not moved:  # every count is 0 (cannot happen: the largest logit's exp is 2**30)
            cnt[0] += diff
            diff = 0
