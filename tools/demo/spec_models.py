"""Deterministic matched model pairs for the speculative engine's tests and benches.

    pair = spec_models.make_pair(seed=1)            # tiny float Target + the INT4 MBF of the same weights
    node = spec_models.node_model(pair.mbf, sink=2, window=6, staged=8)     # shared.llama.Model
    twin = spec_models.FloatModel(pair.target, sink=2, window=6, staged=8)  # llama.Model-like, float
    other = spec_models.make_pair(seed=2)           # an unrelated draft: same shapes and vocabulary

The weights are drawn from one seeded numpy generator in a fixed order (like tools/formats/make_tiny_llama.py)
and quantised to INT4 (q4_numpy.quantize_matrix, groups of 32, float16 scales). The float Target gets
the *dequantised* INT4 weights, so target and node compute the same function and differ only by the
node's integer arithmetic (int8 activations and KV, Q16 softmax): a realistic, highly accepted draft.
FloatModel runs a Target behind the interface shared/drafter.py drives (step / prefill / logits in Q16
/ kv), so the drafter can draft with the target's own float weights (the "draft equals target" twin).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from host import tiny_target
from host.llama_np import LayerWeights, LlamaConfig, LlamaWeights, Target
from shared import mbf, ringkv
from tools.formats.mbf_write import build, layer_name, scales_name

GROUP = tiny_target.GROUP
LIM = (1 << 30) - 1


@dataclass
class SpecPair:
    target: Target
    mbf: bytes
    cfg: LlamaConfig
    seed: int


def make_pair(seed: int = 1, vocab: int = 64, dim: int = 32, hidden: int = 64, n_layers: int = 1,
              n_heads: int = 4, n_kv_heads: int = 2, seq_len: int = 64, logit_gain: float = 3.0,
              dequantised: bool = True) -> SpecPair:
    """A tiny llama (float Target) and its INT4 MBF, from one seed (host/tiny_target.make draws the weights:
    the gateway's `--model tiny:SEED` is this pair's target). dim, hidden and n_heads*head_dim must be
    multiples of 32 (the INT4 group). logit_gain scales the classifier: larger = peakier rows.
    dequantised=False gives the Target the original float weights instead of the INT4 ones."""
    target, segs, config = tiny_target.make(seed, vocab, dim, hidden, n_layers, n_heads, n_kv_heads, seq_len,
                                            logit_gain, dequantised)
    return SpecPair(target=target, mbf=build(config, b"", segs), cfg=target.cfg, seed=seed)


def node_kv(cfg_or_reader, sink: int, window: int, staged: int) -> ringkv.RingKV:
    c = cfg_or_reader
    return ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], sink, window, staged, "b", c["n_kv_heads"])


def node_model(src: bytes | str | Path, sink: int, window: int, staged: int, **kw):
    """shared.llama.Model over a fresh int8 RingKV, from MBF bytes or a path."""
    import io

    from shared import llama

    reader = mbf.open(io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else str(src))
    return llama.Model(reader, node_kv(reader.config, sink, window, staged), **kw)


class FullVocab:
    """The llama.Model token interface of a model whose logits cover the whole vocabulary."""

    n_out: int

    def row_of(self, token: int) -> int:
        if not (isinstance(token, int) and 0 <= token < self.n_out):
            raise ValueError("token id %r out of range 0..%d" % (token, self.n_out - 1))
        return token

    def token_of(self, i: int) -> int:
        return i


class FloatModel(FullVocab):
    """A float Target behind the llama.Model interface shared/drafter.py uses (host twin, tests).

    kv is the KVCache's RingKV; logits are Q16 ints (round(logit * 65536)); flogits the float32 row."""

    def __init__(self, target: Target, sink: int, window: int, staged: int):
        self.target = target
        self.cache = target.new_cache(sink, window, staged)
        self.kv = self.cache.ring
        self.n_out = target.cfg.vocab_size
        self.logits = array("i", bytes(4 * self.n_out))
        self.flogits = np.zeros(self.n_out, np.float32)
        self._view = np.frombuffer(self.logits, dtype=np.int32)

    def _set(self, row: np.ndarray) -> None:
        self.flogits = np.asarray(row, np.float32)
        self._view[:] = np.clip(np.rint(self.flogits.astype(np.float64) * 65536.0), -LIM, LIM).astype(np.int32)

    def step(self, token: int) -> int:
        s = self.kv.pending
        self._set(self.target.forward(self.cache, [self.row_of(int(token))])[0])
        return s

    def prefill(self, tokens, n: int = -1) -> None:
        if n < 0:
            n = len(tokens)
        ids = [self.row_of(int(tokens[i])) for i in range(n)]
        self._set(self.target.feed(self.cache, ids, last_only=True)[-1])


class Loop:
    """Nodes (drafters) and their gateway streams, linked without a wire: one round = every node drafts
    all the blocks it may, the verifier judges every stream in one pass, the verdicts are applied.

    pairs: [(drafter, stream)]. lockstep=True checks after every round that each node holds the same
    token ids as its stream, in the same logical slots, and the same number of live cache tokens."""

    def __init__(self, pairs, verifier, lockstep: bool = True):
        self.pairs = list(pairs)
        self.verifier = verifier
        self.lockstep = lockstep
        self.bufs = [bytearray(d.body_max) for d, _ in self.pairs]
        self.node_of = {id(s): d for d, s in self.pairs}
        self.rounds = 0
        self.wire_draft = 0  # DRAFT body bytes sent
        self.wire_verdict = 0

    def prompt(self, i: int, ids) -> None:
        from host.verifier import pack_prompt

        d, s = self.pairs[i]
        base = d.prompt(ids)
        for a in range(0, len(ids), 255):
            s.on_prompt(pack_prompt(base + a, ids[a:a + 255]))

    def round(self, active=None) -> int:
        """One round over the pairs (or the indexes in active); returns the verdicts applied."""
        idx = range(len(self.pairs)) if active is None else active
        for i in idx:
            d, s = self.pairs[i]
            buf = self.bufs[i]
            while True:
                n = d.draft(buf)
                if not n:
                    break
                self.wire_draft += n
                s.on_draft(bytes(buf[:n]))
        streams = [self.pairs[i][1] for i in idx]
        res = self.verifier.verify([s for s in streams if s.queued])
        for s, body, ids in res:
            d = self.node_of[id(s)]
            got = d.on_verdict(body, len(body))
            self.wire_verdict += len(body)
            if got != len(ids):
                raise AssertionError("node committed %d tokens, the gateway %d" % (got, len(ids)))
        self.rounds += 1
        if self.lockstep:
            for i in idx:
                d, s = self.pairs[i]
                self.check(d, s)
        return len(res)

    @staticmethod
    def check(d, s) -> None:
        if d.pending:
            return
        a, b = d.hist.tolist(), s.ids.tolist()
        if a != b or d.committed != s.committed:
            raise AssertionError("lockstep lost: node %r (%d) vs gateway %r (%d)" % (a, d.committed, b, s.committed))
        p, cap, live, glive = len(s.prefix), d.kv.capacity, d.kv.live, s.cache.live
        # the gateway's cache lags by the ids it has not fed yet (the last correction, new prompt ids)
        if not (glive == live - p if live < cap else cap - p <= glive <= cap) or d.kv.pending or s.cache.pending:
            raise AssertionError("cache sizes differ: node %d live, gateway %d live + %d unfed" % (
                d.kv.live, s.cache.live, len(s.prefix)))


# ---- an MBF's weights as a float Target (the drafter's host twin for big models) ----

def _dequant_q4(nib: bytes, scales: bytes, rows: int, cols: int) -> np.ndarray:
    packed = np.frombuffer(nib, np.uint8, count=rows * cols // 2).reshape(rows, cols // 2)
    q = np.empty((rows, cols), np.float32)
    q[:, 0::2] = (packed & 15).astype(np.float32) - 8
    q[:, 1::2] = (packed >> 4).astype(np.float32) - 8
    sc = np.frombuffer(scales, "<f2", count=rows * cols // GROUP).astype(np.float32).reshape(rows, cols // GROUP)
    return (q.reshape(rows, cols // GROUP, GROUP) * sc[:, :, None]).reshape(rows, cols)


def float_target_from_mbf(path: str | Path) -> Target:
    """The float Target computing what an MBF's weights say: INT4 ('q4') matrices dequantised with their
    float16 group scales, f16/f32 kept. The node's integer runtime approximates the same function (int8
    activations and KV, Q16 arithmetic), so a drafter over this twin drafts (nearly) what the node would."""
    r = mbf.open(str(path), budget=1 << 31)
    try:
        c = r.config

        def mat(name: str) -> np.ndarray:
            s = r.seg(name)
            if s.dtype == "q4":
                rows, cols = s.shape
                return _dequant_q4(bytes(r.read(name)), bytes(r.read(scales_name(name))), rows, cols)
            if s.dtype in ("q4a", "q8"):  # asymmetric INT4: scale * nibble + min; INT8: scale * q
                rows, cols = s.shape
                sc = np.frombuffer(bytes(r.read(scales_name(name))), "<f2").astype(np.float32).reshape(
                    rows, cols // GROUP, 1)
                raw = bytes(r.read(name))
                if s.dtype == "q8":
                    q = np.frombuffer(raw, np.int8, count=rows * cols).astype(np.float32)
                    return (q.reshape(rows, cols // GROUP, GROUP) * sc).reshape(rows, cols)
                packed = np.frombuffer(raw, np.uint8, count=rows * cols // 2).reshape(rows, cols // 2)
                q = np.empty((rows, cols), np.float32)
                q[:, 0::2] = packed & 15
                q[:, 1::2] = packed >> 4
                mn = np.frombuffer(bytes(r.read(name + mbf.MINS_SUFFIX)), "<f2").astype(np.float32).reshape(
                    rows, cols // GROUP, 1)
                return (q.reshape(rows, cols // GROUP, GROUP) * sc + mn).reshape(rows, cols)
            if s.dtype in ("f16", "f32"):
                return np.frombuffer(bytes(r.read(name)), "<f2" if s.dtype == "f16" else "<f4").astype(
                    np.float32).reshape(s.shape)
            raise ValueError("%s: segment %s has dtype %s; the float twin reads q4, q4a, q8, f16, f32" % (
                path, name, s.dtype))

        if c.get("attn_bias", 0) or c.get("attn_out_bias", 0) or c.get("sub_vocab", 0):
            raise ValueError("%s: biases / sub-vocabularies are not supported by the float twin" % path)
        layers = [LayerWeights(*(mat(layer_name(li, part)) for part in (
            "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")))
            for li in range(c["n_layers"])]
        embed = mat("token_embd")
        out = embed if c["tied_embed"] else mat("output")
        cfg = LlamaConfig(vocab_size=c["vocab_size"], dim=c["dim"], n_layers=c["n_layers"], n_heads=c["n_heads"],
                          n_kv_heads=c["n_kv_heads"], head_dim=c["head_dim"], hidden_dim=c["hidden_dim"],
                          norm_eps=float(c["norm_eps"]), rope_theta=float(c["rope_theta"]),
                          rope_style="interleaved" if c.get("rope_style", 0) == 0 else "half",
                          context_length=int(c["seq_len"]), tied_embeddings=bool(c["tied_embed"]))
        return Target(cfg, LlamaWeights(embed=embed, layers=layers, norm=mat("output_norm"), output=out))
    finally:
        r.close()
