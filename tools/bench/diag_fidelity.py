"""Diagnose the INT4 runtime's fidelity loss on SmolLM2: one token (position 0), layer by layer.

Three forwards of the same first token:
  F  float32 target over the GGUF weights (host/llama_np.py functions),
  D  float64 over the MBF's own INT4 weights, dequantised (isolates the weight requantisation),
  I  the integer W4A8 runtime (shared/llama.py), read after each block via Model's own step methods.
Prints per block max|x|, relative RMS error of I vs D and D vs F, and intermediates (SwiGLU, attention).
Read-only: nothing in shared/ or host/ is modified; monkeypatching is limited to local wrappers.

    .venv/bin/python -m tools.bench.diag_fidelity [--token N] [--tokens K]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host import llama_np as T  # noqa: E402
from shared import bpe, kernels, llama, mbf, memplan, q4_numpy  # noqa: E402
from tools.bench import fidelity as B  # noqa: E402
from tools.demo import spec_models

LIM = (1 << 30) - 1


def q16(buf, n=None):
    return q4_numpy.from_q16(buf, n)


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.sqrt(np.sum((a - b) ** 2) / max(np.sum(b * b), 1e-30)))


def norm_gain(nw):
    return np.array(nw.g, dtype=np.float64) * 2.0 ** -nw.info[1]


def rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * g


def float_layers(x0, layers, eps, hd, nh, nkv, hid):
    """Position-0 forward: attention over one key = V of the token itself (softmax of one score = 1).
    layers: list of (attn_norm, Wq, Wk, Wv, Wo, ffn_norm, Wg, Wu, Wd) as (out, in) float64.
    Returns per-layer dicts of the intermediates."""
    x = np.asarray(x0, np.float64).copy()
    g = nh // nkv
    out = []
    for (an, wq, wk, wv, wo, fn, wg, wu, wd) in layers:
        r = {}
        h = rms(x, an, eps)
        r["h_attn"] = h
        q = wq @ h
        k = wk @ h
        v = wv @ h
        r["q"], r["k"], r["v"] = q, k, v
        qh = q.reshape(nh, hd)
        kh = k.reshape(nkv, hd)
        r["score"] = np.array([qh[i] @ kh[i // g] / np.sqrt(hd) for i in range(nh)])
        att = np.concatenate([v.reshape(nkv, hd)[i // g] for i in range(nh)])  # softmax([s]) = 1
        r["att"] = att
        ao = wo @ att
        r["attn_out"] = ao
        x = x + ao
        r["x_attn"] = x.copy()
        h = rms(x, fn, eps)
        r["h_ffn"] = h
        gt = wg @ h
        up = wu @ h
        r["gate"], r["up"] = gt, up
        s = gt / (1 + np.exp(-gt)) * up
        r["swiglu"] = s
        dn = wd @ s
        r["down"] = dn
        x = x + dn
        r["x"] = x.copy()
        out.append(r)
    return out, x


def int_layers(m, token):
    """Model.step's body, one block at a time, recording the buffers (no shared code changed)."""
    cfg = m.cfg
    kv = m.kv
    row = m.row_of(token)
    s = kv.stage()
    m._positions(s)
    slot = kv.capacity + s
    m.embed_rows.fill(row, m.x)
    x0 = q16(m.x)
    out = []
    store_bufs = []
    orig_store = m._store

    def store(layer, slot_, data, scales):
        store_bufs.append(q16(m.kvb))
        return orig_store(layer, slot_, data, scales)

    m._store = store
    for layer in range(cfg.n_layers):
        w = m.layers[layer]
        r = {}
        store_bufs.clear()
        m._attention_block(layer, w, slot)
        r["q"] = q16(m.q)
        r["k"], r["v"] = store_bufs[0], store_bufs[1]
        r["score"] = np.array([m.scores[h][0] for h in range(cfg.n_heads)]) / 65536.0
        r["att"] = q16(m.att)
        r["attn_out"] = q16(m.xb)
        r["x_attn"] = q16(m.x)
        # the FFN, step by step (same calls as Model._ffn_block)
        kernels.rmsnorm(m.xb, m.x, w.ffn_norm)
        r["h_ffn"] = q16(m.xb)
        kernels.quantize_act(m.act_d, m.xb)
        kernels.matvec(m.hb, w.w1, m.act_d)
        kernels.matvec(m.hb2, w.w3, m.act_d)
        r["gate"], r["up"] = q16(m.hb), q16(m.hb2)
        kernels.swiglu(m.hb, m.hb, m.hb2, cfg.hidden_dim)
        r["swiglu"] = q16(m.hb)
        kernels.quantize_act(m.act_h, m.hb)
        kernels.matvec(m.xb, w.w2, m.act_h)
        r["down"] = q16(m.xb)
        llama._add(m.x, m.xb, cfg.dim)
        r["x"] = q16(m.x)
        out.append(r)
    del m._store
    m._classifier()
    return x0, out, np.frombuffer(m.logits, dtype=np.int32) / 65536.0


def act_roundtrip(x):
    """QAct quantise/dequantise in float (int8 per group of 32, power-of-two scale): its error alone."""
    xs = np.clip(np.rint(np.asarray(x) * 65536), -LIM, LIM).astype(np.int64).reshape(-1, 32)
    amax = np.abs(xs).max(1)
    e = np.zeros(len(amax), np.int64)
    while True:
        more = ((amax + ((np.int64(1) << e) >> 1)) >> e) > 127
        if not more.any():
            break
        e += more
    q = (xs + ((np.int64(1) << e) >> 1)[:, None]) >> e[:, None]
    return (q << e[:, None]).ravel() / 65536.0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--token", type=int, default=None, help="token id (default: first token of the bench text)")
    args, _ = ap.parse_known_args(argv)

    reader = mbf.open(str(B.ROOT / "build/models/smollm2-135m-q4.mbf"), budget=1 << 20)
    tok = bpe.BPE(bytes(reader.read_tokenizer()))
    ids = tok.encode(B.TEXT)
    t0 = ids[0] if args.token is None else args.token
    kernels.use("numpy")
    cfg = reader.config
    kv = spec_models.node_kv(cfg, 4, 64, 8)
    # int_layers reads q, att, scores... after the fact: each buffer its own (no arenas shared by liveness)
    m = llama.Model(reader, kv, plan=memplan.layout(cfg, 4, 64, 8, word=8, reader=reader, share=False))
    c = m.cfg
    print("token %d %r  dim %d hidden %d heads %d/%d hd %d eps %g (int eps q32 %d)"
          % (t0, tok.decode([t0]) if hasattr(tok, "decode") else "", c.dim, c.hidden_dim, c.n_heads,
             c.n_kv_heads, c.head_dim, c.norm_eps, m.layers[0].attn_norm.info[2]))

    tg = T.Target.from_gguf(B.gguf_path())
    # F: the target's own weights (stored (in, out)) as (out, in) float64
    nq, nk = tg.cfg.q_dim, tg.cfg.kv_dim
    FL = []
    for (an, wqkv, wo, fn, wgu, wd) in tg.layers:
        W = wqkv.T.astype(np.float64)
        GU = wgu.T.astype(np.float64)
        FL.append((an.astype(np.float64), W[:nq], W[nq:nq + nk], W[nq + nk:], wo.T.astype(np.float64),
                   fn.astype(np.float64), GU[:tg.cfg.hidden_dim], GU[tg.cfg.hidden_dim:], wd.T.astype(np.float64)))
    xF0 = tg.embed_rows(np.array([t0]))[0].astype(np.float64)
    eps = tg.cfg.norm_eps
    # D: the MBF's weights dequantised (prepared fixed scales), the MBF's gains
    DL = []
    for w in m.layers:
        DL.append((norm_gain(w.attn_norm), q4_numpy.dequantize(w.wq), q4_numpy.dequantize(w.wk),
                   q4_numpy.dequantize(w.wv), q4_numpy.dequantize(w.wo), norm_gain(w.ffn_norm),
                   q4_numpy.dequantize(w.w1), q4_numpy.dequantize(w.w3), q4_numpy.dequantize(w.w2)))
    xI0, IR, logI = int_layers(m, t0)
    xD0 = xI0.copy()  # the integer embedding row, exactly (it is the dequantised q4 row)
    FR, xF = float_layers(xF0, FL, eps, hd, c.n_heads, c.n_kv_heads, c.hidden_dim)
    DR, xD = float_layers(xD0, DL, c.norm_eps, hd, c.n_heads, c.n_kv_heads, c.hidden_dim)

    print("embedding: rel(D vs F) %.4f  max|F| %.3f" % (rel(xD0, xF0), np.abs(xF0).max()))
    # gains / eps check
    g0F = FL[0][0]
    g0D = DL[0][0]
    print("attn_norm[0] gain rel(D vs F) %.2e ; out_norm rel %.2e" %
          (rel(g0D, g0F), rel(norm_gain(m.out_norm), tg.norm)))

    print("\nper layer (position 0).  max|x| F / I ; rel err I vs D, D vs F, I vs F of the residual x")
    print("%3s %9s %9s %7s %7s %7s | %9s %9s %9s | %7s %7s %7s %7s" %
          ("L", "max|xF|", "max|xI|", "I~D", "D~F", "I~F", "max|gtF|", "max|swF|", "max|scF|",
           "att", "sw", "down", "q"))
    first_jump = None
    prev = 0.0
    for L in range(c.n_layers):
        f, d, i = FR[L], DR[L], IR[L]
        e_id = rel(i["x"], d["x"])
        if first_jump is None and e_id > max(0.1, 3 * prev):
            first_jump = L
        prev = e_id
        print("%3d %9.2f %9.2f %7.4f %7.4f %7.4f | %9.2f %9.2f %9.2f | %7.4f %7.4f %7.4f %7.4f" %
              (L, np.abs(f["x"]).max(), np.abs(i["x"]).max(), e_id, rel(d["x"], f["x"]), rel(i["x"], f["x"]),
               np.abs(f["gate"]).max(), np.abs(f["swiglu"]).max(), np.abs(f["score"]).max(),
               rel(i["att"], d["att"]), rel(i["swiglu"], d["swiglu"]), rel(i["down"], d["down"]),
               rel(i["q"], d["q"])))
    print("first jump of I~D: layer", first_jump)
    sat = [(L, k, int(np.sum(np.abs(IR[L][k]) >= 16383.99))) for L in range(c.n_layers) for k in IR[L]
           if np.any(np.abs(IR[L][k]) >= 16383.99)]
    print("saturated (|v| = 16384) buffers in I:", sat[:20] if sat else "none")

    # block-by-block isolation: feed D's exact input to each integer step? cheaper: per-stage error
    # introduced inside each layer = error of the stage output given the stage's own inputs.
    print("\nwithin-layer stage errors, I vs D (the D stage output recomputed from I's own inputs):")
    print("%3s %8s %8s %8s %8s %8s %8s %8s" % ("L", "q", "k", "v", "att", "attn_o", "gate", "swiglu_dn"))
    for L in range(c.n_layers):
        i = IR[L]
        an, wq, wk, wv, wo, fn, wg, wu, wd = DL[L]
        xin = IR[L - 1]["x"] if L else xI0
        h = rms(xin, an, c.norm_eps)
        dn = wd @ i["swiglu"]
        print("%3d %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f" %
              (L, rel(i["q"], wq @ h), rel(i["k"], wk @ h), rel(i["v"], wv @ h),
               rel(i["att"], np.concatenate([i["v"].reshape(c.n_kv_heads, hd)[h_ // c.group]
                                             for h_ in range(c.n_heads)])),
               rel(i["attn_out"], wo @ i["att"]),
               rel(i["gate"], wg @ rms(i["x_attn"], fn, c.norm_eps)),
               rel(i["down"], dn)))

    # logits at position 0
    hF = rms(xF, tg.norm.astype(np.float64), eps) @ tg.head.astype(np.float64)
    hD = rms(xD, norm_gain(m.out_norm), c.norm_eps) @ q4_numpy.dequantize(m.emb.head.mat).T
    print("\nlogits pos0: corr(I,F) %.3f corr(D,F) %.3f corr(I,D) %.3f ; argmax F %d D %d I %d" %
          (np.corrcoef(logI, hF)[0, 1], np.corrcoef(hD, hF)[0, 1], np.corrcoef(logI, hD)[0, 1],
           hF.argmax(), hD.argmax(), logI.argmax()))
    # massive-activation channels
    L = c.n_layers // 2
    top = np.argsort(-np.abs(FR[L]["x"]))[:4]
    print("largest residual channels at layer %d (F): %s values %s" %
          (L, top.tolist(), np.round(FR[L]["x"][top], 1).tolist()))
    return FR, DR, IR


if __name__ == "__main__" and "--bench" not in sys.argv and "--ablation" not in sys.argv:
    main()


# ---- counterfactual fix: the residual stream in Q(16 - s) instead of Q16 (load-time changes only) ----

def apply_residual_shift(m, s):
    """Make Model m keep x in Q(16 - s) (range +-2**(14 + s)): wo and w2 outputs scaled by 2**-s via their
    wshift, embedding rows shifted right by s, RMSNorm eps scaled by 2**-2s (RMSNorm is otherwise
    scale-invariant, so its Q16 outputs - and everything downstream of a norm - are unchanged)."""
    for w in m.layers:
        w.wo.wshift += s
        w.w2.wshift += s
        for nw in (w.attn_norm, w.ffn_norm):
            nw.info[2] >>= 2 * s
    m.out_norm.info[2] >>= 2 * s
    inner = m.embed_rows

    class Shifted:
        def fill(self, row, out):
            inner.fill(row, out)
            for j in range(len(out)):
                out[j] = (out[j] + (1 << (s - 1))) >> s

    m.embed_rows = Shifted()


def bench(n_tokens=24, s=0, sink=4, window=64):
    """tools/bench/fidelity.run's comparison, with the residual shift s applied to the integer model."""
    reader = mbf.open(str(B.ROOT / "build/models/smollm2-135m-q4.mbf"), budget=1 << 20)
    tok = bpe.BPE(bytes(reader.read_tokenizer()))
    ids = tok.encode(B.TEXT)[:n_tokens]
    kernels.use("numpy")
    cfg = reader.config
    kv = spec_models.node_kv(cfg, sink, window, 8)
    m = llama.Model(reader, kv)
    if s:
        apply_residual_shift(m, s)
    child = np.zeros((len(ids), m.n_out))
    xmax = 0.0
    for i, t in enumerate(ids):
        m.step(t)
        kv.commit(1)
        child[i] = np.frombuffer(m.logits, dtype=np.int32) / 65536.0
        xmax = max(xmax, float(np.abs(q16(m.x)).max()) * 2 ** s)
    tg = T.Target.from_gguf(B.gguf_path())
    parent = tg.feed(tg.new_cache(sink, window, 8), ids, chunk=1).astype(np.float64)
    p, q = B.softmax(parent), B.softmax(child)
    kl = np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30)), axis=-1)
    top1 = parent.argmax(-1) == child.argmax(-1)
    corr0 = np.corrcoef(parent[0], child[0])[0, 1]
    print("shift %d: top1 %.3f  mean KL %.3f  max KL %.2f  pos0 KL %.2f corr %.3f  final max|x| %.0f"
          % (s, top1.mean(), kl.mean(), kl.max(), kl[0], corr0, xmax))
    return top1.mean(), kl.mean()


if __name__ == "__main__" and "--bench" in sys.argv:
    for s in (0, 1, 2, 3):
        bench(24, s)


# ---- float sequence forward with optional simulated quantisations (what each costs, in KL) ----

def kv_roundtrip(x, hd):
    """int8 per head vector, scale amax/127 (the runtime's _quant8 up to its mantissa rounding)."""
    x = np.asarray(x, np.float64).reshape(-1, hd)
    s = np.abs(x).max(1, keepdims=True) / 127.0
    s[s == 0] = 1
    return (np.clip(np.rint(x / s), -127, 127) * s).ravel()


def float_seq(L, emb, head, onorm, eps, ids, hd, nh, nkv, actq=False, kvq=False, clip=None, theta=100000.0):
    """Dense causal forward, float64, one token at a time. L as in float_layers. actq: QAct round trip on
    every matvec input; kvq: int8 K/V (per head) and q; clip: saturate the residual to +-clip."""
    cos, sin = T.rope_tables(hd, theta, len(ids) + 1)
    A = act_roundtrip if actq else (lambda v: v)
    g = nh // nkv
    Ks = [[] for _ in L]
    Vs = [[] for _ in L]
    out = []
    for pos, t in enumerate(ids):
        x = emb[t].astype(np.float64).copy()
        for li, (an, wq, wk, wv, wo, fn, wg, wu, wd) in enumerate(L):
            h = A(rms(x, an, eps))
            q, k, v = wq @ h, wk @ h, wv @ h
            if kvq:
                k, v, q = kv_roundtrip(k, hd), kv_roundtrip(v, hd), kv_roundtrip(q, hd)
            Ks[li].append(k.reshape(nkv, hd))
            Vs[li].append(v.reshape(nkv, hd))
            K = np.array(Ks[li])
            V = np.array(Vs[li])
            n = len(K)
            Kr = T.rope(K.astype(np.float32), cos[:n], sin[:n], "interleaved").astype(np.float64)
            qr = T.rope(q.reshape(1, nh, hd).astype(np.float32), cos[pos:pos + 1], sin[pos:pos + 1],
                        "interleaved")[0].astype(np.float64)
            att = np.empty(nh * hd)
            for hh in range(nh):
                sc = Kr[:, hh // g] @ qr[hh] / np.sqrt(hd)
                p = np.exp(sc - sc.max())
                p /= p.sum()
                att[hh * hd:(hh + 1) * hd] = p @ V[:, hh // g]
            x = x + wo @ A(att)
            if clip:
                x = np.clip(x, -clip, clip)
            h = A(rms(x, fn, eps))
            gt, up = wg @ h, wu @ h
            x = x + wd @ A(gt / (1 + np.exp(-gt)) * up)
            if clip:
                x = np.clip(x, -clip, clip)
        out.append(head @ A(rms(x, onorm, eps)))
    return np.array(out)


def kl_top1(parent, child):
    p, q = B.softmax(parent), B.softmax(child)
    kl = np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30)), axis=-1)
    return float((parent.argmax(-1) == child.argmax(-1)).mean()), float(kl.mean()), float(kl[0])


def ablation(n_tokens=24):
    reader = mbf.open(str(B.ROOT / "build/models/smollm2-135m-q4.mbf"), budget=1 << 20)
    tok = bpe.BPE(bytes(reader.read_tokenizer()))
    ids = tok.encode(B.TEXT)[:n_tokens]
    kernels.use("numpy")
    cfg = reader.config
    kv = spec_models.node_kv(cfg, 4, 64, 8)
    m = llama.Model(reader, kv)
    c = m.cfg
    tg = T.Target.from_gguf(B.gguf_path())
    nq, nk = tg.cfg.q_dim, tg.cfg.kv_dim
    FL = []
    for (an, wqkv, wo, fn, wgu, wd) in tg.layers:
        W = wqkv.T.astype(np.float64)
        GU = wgu.T.astype(np.float64)
        FL.append((an.astype(np.float64), W[:nq], W[nq:nq + nk], W[nq + nk:], wo.T.astype(np.float64),
                   fn.astype(np.float64), GU[:c.hidden_dim], GU[c.hidden_dim:], wd.T.astype(np.float64)))
    DL = [(norm_gain(w.attn_norm), q4_numpy.dequantize(w.wq), q4_numpy.dequantize(w.wk),
           q4_numpy.dequantize(w.wv), q4_numpy.dequantize(w.wo), norm_gain(w.ffn_norm),
           q4_numpy.dequantize(w.w1), q4_numpy.dequantize(w.w3), q4_numpy.dequantize(w.w2)) for w in m.layers]
    Fe = tg.head.T.astype(np.float64)
    De = q4_numpy.dequantize(m.emb.head.mat)
    args = (hd, c.n_heads, c.n_kv_heads)
    names = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")
    werr = np.array([[rel(d, f) for d, f in zip(DL[i], FL[i])] for i in range(c.n_layers)])
    print("weight rel RMS error, MBF INT4 vs GGUF (mean over layers):",
          {n: round(float(e), 4) for n, e in zip(names, werr.mean(0))}, " embed/head %.4f" % rel(De, Fe))
    F = float_seq(FL, Fe, Fe, tg.norm.astype(np.float64), tg.cfg.norm_eps, ids, *args)
    parent = tg.feed(tg.new_cache(4, 64, 8), ids, chunk=1).astype(np.float64)
    print("check: float64 replica vs target (top1, KL, KL0):", kl_top1(parent, F))
    on = norm_gain(m.out_norm)
    for name, kw in (("D (q4 weights, float)", {}), ("D + residual clip 16384", {"clip": 16384.0}),
                     ("D + act quant", {"actq": True}), ("D + int8 KV/q", {"kvq": True}),
                     ("D + act quant + int8 KV/q", {"actq": True, "kvq": True})):
        D = float_seq(DL, De, De, on, c.norm_eps, ids, *args, **kw)
        print("%-28s top1 %.3f  KL %.3f  KL pos0 %.2f" % ((name,) + kl_top1(parent, D)))


if __name__ == "__main__" and "--ablation" in sys.argv:
    ablation(24)
