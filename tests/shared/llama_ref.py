# llama_ref.py: the float reference forward for shared.llama (plain Python floats; MicroPython-compatible).
"""RefModel is the obvious implementation the integer runtime is checked against: the same dequantised
INT4 weights (nibble * float16 scale, in floats), float RMSNorm with the f32 gains, float K/V kept
UN-rotated as lists, RoPE applied with math.cos/sin to the query and to every key at its cache position
at every step (absolute positions, not the runtime's relative distances), dense softmax attention over
the same live set: sinks, then the last W committed tokens, then the staged ones (a staged token's query
sees what it would see had the tokens staged before it been committed: the oldest window tokens they
would evict are left out). It allocates freely; it is for tests.
"""
import math
import struct
from array import array

from shared import mbf

TINY = "tests/shared/data/tiny_llama.mbf"


def f16(h):
    """float16 bits -> float."""
    e = (h >> 10) & 31
    m = h & 1023
    v = math.ldexp(m, -24) if e == 0 else math.ldexp(1024 + m, e - 25)
    return -v if h & 0x8000 else v


class RefMatrix:
    """A q4 segment as nibbles + float scales; matvec dequantises on the fly (little memory on a board)."""

    def __init__(self, reader, name):
        s = reader.seg(name)
        self.rows, self.cols = s.shape
        self.nib = bytearray(s.length)
        reader.read_into(name, self.nib)
        raw = bytearray(reader.seg(name + ".scales").length)
        reader.read_into(name + ".scales", raw)
        self.ng = self.cols // 32
        self.sc = array("f", [f16(raw[2 * i] | (raw[2 * i + 1] << 8)) for i in range(len(raw) // 2)])

    def row(self, r):
        out = [0.0] * self.cols
        half = self.cols // 2
        for g in range(self.ng):
            s = self.sc[r * self.ng + g]
            for j in range(16):
                b = self.nib[r * half + g * 16 + j]
                out[g * 32 + 2 * j] = ((b & 15) - 8) * s
                out[g * 32 + 2 * j + 1] = ((b >> 4) - 8) * s
        return out

    def matvec(self, x):
        out = []
        half = self.cols // 2
        nib = self.nib
        for r in range(self.rows):
            t = 0.0
            for g in range(self.ng):
                acc = 0.0
                o = r * half + g * 16
                for j in range(16):
                    b = nib[o + j]
                    acc += ((b & 15) - 8) * x[g * 32 + 2 * j] + ((b >> 4) - 8) * x[g * 32 + 2 * j + 1]
                t += acc * self.sc[r * self.ng + g]
            out.append(t)
        return out


def _floats(reader, name):
    s = reader.seg(name)
    raw = bytearray(s.length)
    reader.read_into(name, raw)
    if s.dtype == "f16":
        return [f16(raw[2 * i] | (raw[2 * i + 1] << 8)) for i in range(s.length // 2)]
    return [struct.unpack_from("<f", raw, 4 * i)[0] for i in range(s.length // 4)]


def _ids(reader, name):
    s = reader.seg(name)
    raw = bytearray(s.length)
    reader.read_into(name, raw)
    return list(array("H" if s.dtype == "u16" else "i", raw))


def _plus(x, b):
    return x if b is None else [x[i] + b[i] for i in range(len(x))]


def rmsnorm(x, w, eps):
    ss = 0.0
    for v in x:
        ss += v * v
    r = 1.0 / math.sqrt(ss / len(x) + eps)
    return [x[i] * r * w[i] for i in range(len(x))]


def rope(x, pos, hd, theta, style):
    """Rotate each head_dim slice of x by the angles of absolute position pos."""
    out = list(x)
    half = hd // 2
    for o in range(0, len(x), hd):
        for i in range(half):
            ang = pos * math.pow(theta, -2.0 * i / hd)
            c = math.cos(ang)
            s = math.sin(ang)
            a, b = (o + i, o + i + half) if style else (o + 2 * i, o + 2 * i + 1)
            out[a] = x[a] * c - x[b] * s
            out[b] = x[a] * s + x[b] * c
    return out


def softmax(x):
    m = max(x)
    e = [math.exp(v - m) for v in x]
    t = sum(e)
    return [v / t for v in e]


class RefModel:
    """Float forward with a list-based sink + window cache and staging (see the module docstring)."""

    def __init__(self, path, sink, window, staged):
        r = mbf.open(path, budget=1 << 20)
        c = r.config
        self.c = c
        self.sink, self.window, self.staged_max = sink, window, staged
        self.hd = c["head_dim"]
        self.style = c.get("rope_style", 0)
        self.layers = []
        for L in range(c["n_layers"]):
            p = "blk.%d." % L
            bias = c.get("attn_bias", 0)
            out_bias = c.get("attn_out_bias", 0)
            self.layers.append(dict(
                bq=_floats(r, p + "attn_q.bias") if bias else None,
                bk=_floats(r, p + "attn_k.bias") if bias else None,
                bv=_floats(r, p + "attn_v.bias") if bias else None,
                bo=_floats(r, p + "attn_output.bias") if out_bias else None,
                attn_norm=_floats(r, p + "attn_norm"), ffn_norm=_floats(r, p + "ffn_norm"),
                wq=RefMatrix(r, p + "attn_q"), wk=RefMatrix(r, p + "attn_k"), wv=RefMatrix(r, p + "attn_v"),
                wo=RefMatrix(r, p + "attn_output"), w1=RefMatrix(r, p + "ffn_gate"),
                w3=RefMatrix(r, p + "ffn_up"), w2=RefMatrix(r, p + "ffn_down")))
        self.out_norm = _floats(r, "output_norm")
        self.embd = RefMatrix(r, "token_embd")
        self.out = self.embd if c["tied_embed"] else RefMatrix(r, "output")
        self.embd_map = _ids(r, "embd_map") if "embd_map" in r else None
        self.vocab_map = _ids(r, "vocab_map") if c["sub_vocab"] else None
        r.close()
        self.live = []  # committed tokens: per layer (k, v) float lists, un-rotated
        self.draft = []

    def _keys(self):
        """The key set of the next query (without itself): live + staged with the virtual evictions."""
        v = self.live + self.draft
        cap = self.sink + self.window
        e = len(v) - cap if len(v) > cap else 0
        sp = min(self.sink, len(v))
        return v[:sp] + v[sp + e:]

    def step(self, token):
        c = self.c
        if len(self.draft) >= self.staged_max:
            raise ValueError("staging full")
        x = self.embd.row(self.embd_map[token] if self.embd_map else token)
        keys = self._keys()
        pos = len(keys)
        entry = []
        hd, nh, nkv = self.hd, c["n_heads"], c["n_kv_heads"]
        g = nh // nkv
        theta = c["rope_theta"]
        for L, w in enumerate(self.layers):
            xb = rmsnorm(x, w["attn_norm"], c["norm_eps"])
            q = _plus(w["wq"].matvec(xb), w["bq"])
            k = _plus(w["wk"].matvec(xb), w["bk"])
            v = _plus(w["wv"].matvec(xb), w["bv"])
            entry.append((k, v))
            ks = [t[L][0] for t in keys] + [k]
            vs = [t[L][1] for t in keys] + [v]
            qr = rope(q, pos, hd, theta, self.style)
            kr = [rope(ks[j], j, hd, theta, self.style) for j in range(len(ks))]
            att = [0.0] * (nh * hd)
            for h in range(nh):
                kh = h // g
                sc = []
                for j in range(len(ks)):
                    d = 0.0
                    for i in range(hd):
                        d += qr[h * hd + i] * kr[j][kh * hd + i]
                    sc.append(d / math.sqrt(hd))
                p = softmax(sc)
                for j in range(len(ks)):
                    for i in range(hd):
                        att[h * hd + i] += p[j] * vs[j][kh * hd + i]
            o = _plus(w["wo"].matvec(att), w["bo"])
            x = [x[i] + o[i] for i in range(len(x))]
            xb = rmsnorm(x, w["ffn_norm"], c["norm_eps"])
            a = w["w1"].matvec(xb)
            b = w["w3"].matvec(xb)
            hb = [a[i] / (1.0 + math.exp(-a[i])) * b[i] for i in range(len(a))]
            o = w["w2"].matvec(hb)
            x = [x[i] + o[i] for i in range(len(x))]
        self.draft.append(entry)
        return self.out.matvec(rmsnorm(x, self.out_norm, c["norm_eps"]))

    def commit(self, n):
        self.live += self.draft[:n]
        self.draft = []
        while len(self.live) > self.sink + self.window:
            del self.live[self.sink]

    def discard(self):
        self.draft = []
