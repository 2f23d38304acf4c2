"""The gateway's target (host/llama_np.py) in PyTorch, with LoRA adapters, for fine-tuning on CPU.

    model = TargetLoRA(cfg, weights, rank=8, alpha=16)   # host/llama_config LlamaConfig / LlamaWeights
    logits = model(ids, sink=4, window=28)               # ids (B, T); the node stream's attention
    logits = model(ids)                                  # dense causal attention (operator answers)
    delta = model.delta()                                # {name: float32 array}: the LoRA tensors

The forward is llama_np's, step for step: RMSNorm, q/k/v, RoPE in the config's style, grouped-query
attention, SwiGLU, the final norm and the tied head. With `sink` and `window` the attention is the
streaming cache's (host/llama_np.py, "Positions"): query m sees the sinks and the last `window` tokens
before it; window keys sit at their true distance, sink scores use the query at min(m, sink + window).
So a model trained here sees exactly what the gateway's target computes over a node's stream.

Every base weight is frozen (float32, dequantised from the GGUF as the gateway does); only the adapters
train: W x + (alpha / rank) * B (A x), A (rank, in) small random, B (out, rank) zero, on every projection of
every layer (q, k, v, o, gate, up, down). host/target_delta.py merges the same tensors into the weights.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PROJ = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")  # host/llama_config.LayerWeights names


class LoRALinear(nn.Module):
    """y = x W^T + scale * (x A^T) B^T with W frozen; rank 0: y = x W^T (a layer left as it is)."""

    def __init__(self, w: np.ndarray, rank: int, scale: float, gen: torch.Generator):
        super().__init__()
        self.register_buffer("w", torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)))
        out_f, in_f = w.shape
        self.rank = rank
        if rank:
            self.a = nn.Parameter(torch.randn(rank, in_f, generator=gen) / math.sqrt(in_f))
            self.b = nn.Parameter(torch.zeros(out_f, rank))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.rank:
            return F.linear(x, self.w)
        return F.linear(x, self.w) + F.linear(F.linear(x, self.a), self.b) * self.scale


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """x (B, T, H, hd) rotated by per-position angles cos, sin (T, hd/2)."""
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    if style == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * c - b * s, a * s + b * c], -1)


class TargetLoRA(nn.Module):
    def __init__(self, cfg, weights, rank: int = 8, alpha: float = 16.0, seed: int = 0, layers: int | None = None):
        super().__init__()
        self.cfg = cfg
        self.rank, self.alpha = rank, alpha
        # adapters on the top `layers` layers only: the ones below run without autograd (no backward through them)
        self.first = cfg.n_layers - (cfg.n_layers if layers is None else layers)
        gen = torch.Generator().manual_seed(seed)
        scale = alpha / rank
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
        self.register_buffer("embed", t(weights.embed))
        self.register_buffer("norm", t(weights.norm))
        self.tied = weights.output is weights.embed
        if not self.tied:
            self.register_buffer("output", t(weights.output))
        self.norms = [(t(lw.attn_norm), t(lw.ffn_norm)) for lw in weights.layers]
        self.layers = nn.ModuleList(
            nn.ModuleDict({p: LoRALinear(getattr(lw, p), rank if i >= self.first else 0, scale, gen) for p in PROJ})
            for i, lw in enumerate(weights.layers))
        hd = cfg.head_dim
        inv = cfg.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        if weights.rope_freqs is not None:
            inv = inv / torch.from_numpy(np.asarray(weights.rope_freqs, dtype=np.float64))
        self.inv = inv

    def _angles(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ang = pos.to(torch.float64)[:, None] * self.inv[None, :]
        return torch.cos(ang).float(), torch.sin(ang).float()

    def forward(self, ids: torch.Tensor, sink: int = 0, window: int | None = None) -> torch.Tensor:
        return self.head_logits(self.hidden(ids, sink, window))

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits of final hidden states (after the final norm)."""
        return h @ (self.embed if self.tied else self.output).T

    def hidden(self, ids: torch.Tensor, sink: int = 0, window: int | None = None) -> torch.Tensor:
        """The final norm's output for every position, (B, T, dim)."""
        c = self.cfg
        b, t = ids.shape
        m = torch.arange(t)
        cos, sin = self._angles(m)
        qm = torch.clamp(m, max=sink + window) if window is not None else m
        sink_q = self._angles(qm) if sink and window is not None and bool((qm != m).any()) else None
        j = m[None, :]
        mi = m[:, None]
        ok = j <= mi
        if window is not None:
            ok = ok & ((j < sink) | (j >= mi - window))
        mask = torch.where(ok, 0.0, float("-inf"))
        x = self.embed[ids]
        g = c.n_heads // c.n_kv_heads
        for i, ((attn_norm, ffn_norm), ly) in enumerate(zip(self.norms, self.layers)):
            with torch.set_grad_enabled(torch.is_grad_enabled() and i >= self.first):
                x = self._layer(x, attn_norm, ffn_norm, ly, cos, sin, sink_q, sink, mask, g)
        return rmsnorm(x, self.norm, c.norm_eps)

    def _layer(self, x, attn_norm, ffn_norm, ly, cos, sin, sink_q, sink, mask, g):
        c = self.cfg
        b, t, _ = x.shape
        h = rmsnorm(x, attn_norm, c.norm_eps)
        q = ly["wq"](h).view(b, t, c.n_heads, c.head_dim)
        k = ly["wk"](h).view(b, t, c.n_kv_heads, c.head_dim)
        v = ly["wv"](h).view(b, t, c.n_kv_heads, c.head_dim)
        kr = rope(k, cos, sin, c.rope_style).transpose(1, 2).repeat_interleave(g, 1)  # (B, H, T, hd)
        vv = v.transpose(1, 2).repeat_interleave(g, 1)
        sc = rope(q, cos, sin, c.rope_style).transpose(1, 2) @ kr.transpose(-1, -2)
        if sink_q is not None:
            qs = rope(q, *sink_q, c.rope_style).transpose(1, 2)
            sc = torch.cat([qs @ kr[:, :, :sink].transpose(-1, -2), sc[..., sink:]], -1)
        sc = sc / math.sqrt(c.head_dim) + mask
        att = torch.softmax(sc, -1) @ vv
        x = x + ly["wo"](att.transpose(1, 2).reshape(b, t, -1))
        h = rmsnorm(x, ffn_norm, c.norm_eps)
        return x + ly["w_down"](F.silu(ly["w_gate"](h)) * ly["w_up"](h))

    def delta(self) -> dict[str, np.ndarray]:
        """The adapters as host/target_delta.py reads them: blk.{i}.{proj}.lora_a / .lora_b, float32."""
        out = {}
        for i, ly in enumerate(self.layers):
            if i < self.first:
                continue
            for p in PROJ:
                out["blk.%d.%s.lora_a" % (i, p)] = ly[p].a.detach().numpy().copy()
                out["blk.%d.%s.lora_b" % (i, p)] = ly[p].b.detach().numpy().copy()
        return out

    def load_delta(self, tensors: dict) -> None:
        with torch.no_grad():
            for i, ly in enumerate(self.layers):
                if i < self.first:
                    continue
                for p in PROJ:
                    ly[p].a.copy_(torch.as_tensor(np.asarray(tensors["blk.%d.%s.lora_a" % (i, p)], np.float32)))
                    ly[p].b.copy_(torch.as_tensor(np.asarray(tensors["blk.%d.%s.lora_b" % (i, p)], np.float32)))
