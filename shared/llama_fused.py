# llama_fused.py: the C kernels' bindings to one llama.Model's buffers (MicroPython with q4nat.mpy).
"""shared/llama.py makes a Fused when the native backend (shared/q4_native.py) is in use and the cache rows
are int8: its methods then hand these tuples to q4nat (firmware/natmod/q4nat.c) instead of running their
own loops: K/V storing, query quantising, attention scores and mix, the residual add, and where every layer
matrix is INT4 in memory or in place (no streamed plan, no Q8 matrix, no bias) the whole layer in one call.
Everything here is made once, when the model first runs with that backend; nothing in a step allocates.
"""
from array import array

from shared import fixedmath
from shared.q4 import KIND_Q8


class Fused:
    """The native backend's attention and glue bound to one Model's buffers (q4nat's store, query, scores,
    mix and add: firmware/natmod/q4nat.c), its argument tuples and info words made once."""

    def __init__(self, nat, m):
        kv = m.kv
        cfg = m.cfg
        self.nat = nat
        self.qg = tuple(m.qgrp)
        self.qfs = (m.qf, m.qsh)
        sc = tuple(m.scores)
        self.sbufs = (self.qg, kv.k, kv.kscale, m.rope.tab, m.qf, m.qsh, sc)
        self.mbufs = (sc, kv.v, kv.vscale, m.att, fixedmath.EXP_TAB)
        # n keys and the layer's row base are written per call
        self.ainfo = array("i", [0, 0, cfg.head_dim, cfg.group, cfg.n_kv_heads, cfg.kv_dim, m.rope.info[1]])
        self.sinfo = array("i", [kv.head_dim, kv.heads, 0, kv.kv_dim])
        self.qinfo = array("i", [cfg.head_dim, cfg.group, cfg.n_kv_heads, m.qshift, m.isq_m, m.isq_s])
        # q4nat.positions: live, capacity, sink, window, ring head, staged index (the first, last two per step)
        self.pinfo = array("i", [0, kv.capacity, kv.sink, kv.window, 0, 0])
        self.layer_bufs = self._layers(m, kv, cfg, sc)

    def _layers(self, m, kv, cfg, sc):
        """Per layer, the tuple q4nat.layer takes (firmware/natmod/q4nat.c), or None where a layer needs
        what only the kernel-by-kernel path has: matrices read during the step (a streamed plan), INT8
        (Q8) matrices, or biases."""
        for f in m.fetch:
            if f is not None:
                return None
        out = []
        dims = array("i", [cfg.dim, cfg.hidden_dim])
        for w in m.layers:
            mats = (w.wq, w.wk, w.wv, w.wo, w.w1, w.w3, w.w2)
            for mat in mats:
                if mat.kind == KIND_Q8:
                    return None
            if w.bq is not None or w.bk is not None or w.bv is not None or w.bo is not None:
                return None
            out.append((m.x, m.xb, m.q, m.kvb, m.att, m.hb, m.hb2, w.attn_norm.g, w.attn_norm.info, w.ffn_norm.g,
                        w.ffn_norm.info, m.act_d.q, m.act_d.info, m.act_q.q, m.act_q.info, m.act_h.q, m.act_h.info)
                       + tuple((x.buf, x.scales, x.mins, x.wshift, x.rows) for x in mats)
                       + (kv.k, kv.kscale, kv.v, kv.vscale, self.qg, self.qfs, self.qinfo, self.sinfo, self.sbufs,
                          self.mbufs, self.ainfo, fixedmath.SIG_TAB, m.kslot, dims))
        return tuple(out)
