# model_load.py: an MBF model's Llama config and weights as runtime buffers, checked; the row readers.
# Load time allocates freely but uses integers for every number the forward will see (board and host
# build the same bits). Errors are ModelError (a ValueError) naming the segment or key. What lives
# where, and the formats: docs/RUNTIME.md. shared/llama.py runs the forward over what this builds.
# Weights in place: where the reader's file is addressable (reader.mem: a ROMFS file in flash), a resident
# matrix's weight bytes are a view of the file (reader.view), never copied; its scales (and mins), converted
# at load, are the only RAM it takes.
import struct
from array import array

from shared import kernels, mbf
from shared.fixedmath import NormWeight
from shared.q4 import GROUP, KIND_ASYM, KIND_Q8, Q4Matrix, fp16_exponent, fp16_fixed, fp16_shift, prepare_scales, shift_sat
from shared.ringkv import RingKV

LAYER_Q4 = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
_CHUNK = 512  # read buffer for streamed load-time checks


class ModelError(ValueError):
    """A model file, config or cache that the Llama runtime cannot run (the message says which part)."""


class Config:
    """Hyper-parameters from an MBF reader's config (docs/MBF.md section 3), checked for this runtime."""

    def __init__(self, conf):
        self.dim = conf["dim"]
        self.hidden_dim = conf["hidden_dim"]
        self.n_layers = conf["n_layers"]
        self.n_heads = conf["n_heads"]
        self.n_kv_heads = conf["n_kv_heads"]
        self.head_dim = conf["head_dim"]
        self.vocab_size = conf["vocab_size"]
        self.sub_vocab = conf["sub_vocab"]
        self.seq_len = conf["seq_len"]
        self.norm_eps = conf["norm_eps"]
        self.tied = conf["tied_embed"] == 1
        self.rope_style = conf.get("rope_style", 0)
        self.attn_bias = conf.get("attn_bias", 0)  # q, k, v biases (Qwen2-style; docs/CONVERT.md)
        self.attn_out_bias = conf.get("attn_out_bias", 0)  # attention output projection bias
        # The residual stream is held in Q(16 - resid_shift): models with massive activations (SmolLM2's
        # first token reaches ~29000 in one channel) would saturate Q16's +-16384. Norms are scale-free,
        # so only the writers into the residual (embedding rows, attention output, FFN down, the
        # output bias) and the norms' eps change, all at load time (docs/RUNTIME.md).
        self.resid_shift = conf.get("resid_shift", 0)
        if self.resid_shift not in (0, 1, 2, 3, 4):
            raise ModelError("config resid_shift %r: 0..4" % (self.resid_shift,))
        for key in ("attn_bias", "attn_out_bias"):
            if conf.get(key, 0) not in (0, 1):
                raise ModelError("config %s %r: 0 or 1" % (key, conf[key]))
        theta = conf["rope_theta"]
        if theta != int(theta):
            raise ModelError("config rope_theta %r: the integer RoPE tables need an integer base" % (theta,))
        self.rope_theta = int(theta)
        if self.rope_style not in (0, 1):
            raise ModelError("config rope_style %r: 0 (interleaved pairs) or 1 (halves)" % (self.rope_style,))
        if conf["group_size"] != GROUP:
            raise ModelError("config group_size %d: the INT4 kernels use groups of %d" % (conf["group_size"], GROUP))
        self.q_dim = self.n_heads * self.head_dim
        self.kv_dim = self.n_kv_heads * self.head_dim
        self.group = self.n_heads // self.n_kv_heads  # query heads per KV head (GQA)
        self.n_out = self.sub_vocab if self.sub_vocab else self.vocab_size
        for name, v in (("dim", self.dim), ("hidden_dim", self.hidden_dim), ("n_heads * head_dim", self.q_dim)):
            if v % GROUP:
                raise ModelError("config %s = %d is not a multiple of %d (the kernels' group)" % (name, v, GROUP))
        if self.head_dim % 2:
            raise ModelError("config head_dim %d must be even (RoPE rotates pairs)" % self.head_dim)


def check_kv(cfg, kv):
    """The RingKV must be int8 and shaped for this model, and its positions (0..S+W) within seq_len."""
    if not isinstance(kv, RingKV):
        raise ModelError("the model needs a RingKV, got %s" % type(kv).__name__)
    if kv.typecode != "b":
        raise ModelError("the integer runtime needs an int8 RingKV (typecode 'b'), got %r" % kv.typecode)
    want = (cfg.n_layers, cfg.kv_dim, cfg.n_kv_heads)
    if (kv.layers, kv.kv_dim, kv.heads) != want:
        raise ModelError("RingKV shape (layers %d, kv_dim %d, heads %d) does not match the model's "
                         "(n_layers %d, n_kv_heads * head_dim %d, n_kv_heads %d)"
                         % (kv.layers, kv.kv_dim, kv.heads, want[0], want[1], want[2]))
    if kv.capacity + 1 > cfg.seq_len:
        raise ModelError("RingKV sink + window = %d: positions up to %d exceed the model's seq_len %d"
                         % (kv.capacity, kv.capacity, cfg.seq_len))


class Layer:
    """One decoder layer's weights: two RMSNorm gains, seven INT4 matrices, optional Q16 biases."""

    def __init__(self, attn_norm, ffn_norm, mats, biases):
        self.attn_norm = attn_norm
        self.ffn_norm = ffn_norm
        self.wq, self.wk, self.wv, self.wo, self.w1, self.w3, self.w2 = mats  # w1 gate, w3 up, w2 down
        self.bq, self.bk, self.bv, self.bo = biases  # None when the model has none


def layer_shapes(cfg):
    """(rows, cols) of each layer matrix, by part name."""
    dim, hid, qd, kvd = cfg.dim, cfg.hidden_dim, cfg.q_dim, cfg.kv_dim
    return {"attn_q": (qd, dim), "attn_k": (kvd, dim), "attn_v": (kvd, dim), "attn_output": (dim, qd),
            "ffn_gate": (hid, dim), "ffn_up": (hid, dim), "ffn_down": (dim, hid)}


def reserve(reader, cfg):
    """Every resident weight matrix, allocated (empty) before anything else, largest first: on a
    fragmented MicroPython heap the big blocks must be taken before small objects split the holes.
    Each is the form its segment holds (Q4Matrix, with mins for q4a; Q8Matrix for q8), so nothing
    reserved is thrown away. Returns {segment name: matrix} for q4_resident to fill. Checks shapes.
    A reader in place reserves nothing: its matrices' only buffers are their small scales."""
    want = []
    shapes = layer_shapes(cfg)
    for layer in range(cfg.n_layers):
        for p in LAYER_Q4:
            rows, cols = shapes[p]
            name = "%s%d.%s" % (mbf.LAYER_PREFIX, layer, p)
            q4_shape(reader, name, rows, cols)
            want.append((reader.seg(name).length, name, rows, cols))
    rows = q4_shape(reader, "token_embd", None, cfg.dim)
    want.append((reader.seg("token_embd").length, "token_embd", rows, cfg.dim))
    if not cfg.tied:
        q4_shape(reader, "output", cfg.n_out, cfg.dim)
        want.append((reader.seg("output").length, "output", cfg.n_out, cfg.dim))
    if reader.mem is not None:
        return None
    want.sort(key=lambda w: -w[0])
    pool = {}
    for w in want:
        pool[w[1]] = _empty_matrix(reader.seg(w[1]).dtype, w[2], w[3])
    return pool


def _empty_matrix(dtype, rows, cols, weights=None):
    """A matrix of the segment's form: one new buffer for weights and scales, or (weights: the weight
    bytes in place, read-only) new scales only."""
    scales = None if weights is None else bytearray(rows * (cols // GROUP) * 2)
    if dtype == "q8":
        from shared import q4a_q8
        return q4a_q8.Q8Matrix(rows, cols, weights, scales)
    mat = Q4Matrix(rows, cols, weights, scales)
    if dtype == "q4a":
        mat.set_mins(bytearray(rows * (cols // GROUP) * 2))
    return mat


def load_layers(reader, cfg, stream, pool=None, nibbles=None):
    """(layers, bufs): every layer's Layer. Resident matrices come from pool (see reserve) when given.
    With stream, the q4 matrices of all layers share one nibble buffer per part (bufs: the load_layer
    list that fills them all) and keep their own prepared scales. nibbles: {part: buffer} to use instead
    of one new bytearray per part (memplan's arenas: parts never live together may share memory)."""
    shapes = layer_shapes(cfg)
    if stream and nibbles is None:
        nibbles = {}
        for p in LAYER_Q4:
            nibbles[p] = bytearray(reader.seg("%s0.%s" % (mbf.LAYER_PREFIX, p)).length)
    layers = []
    for layer in range(cfg.n_layers):
        pre = "%s%d." % (mbf.LAYER_PREFIX, layer)
        mats = []
        for p in LAYER_Q4:
            rows, cols = shapes[p]
            if stream:
                mats.append(q4_streamed(reader, pre + p, rows, cols, nibbles[p]))
            else:
                mats.append(q4_resident(reader, pre + p, rows, cols, pool))
        qkv = cfg.attn_bias
        biases = (bias(reader, pre + "attn_q.bias", cfg.q_dim) if qkv else None,
                  bias(reader, pre + "attn_k.bias", cfg.kv_dim) if qkv else None,
                  bias(reader, pre + "attn_v.bias", cfg.kv_dim) if qkv else None,
                  bias(reader, pre + "attn_output.bias", cfg.dim) if cfg.attn_out_bias else None)
        rs = cfg.resid_shift
        if rs:
            mats[3].wshift += rs  # attn_output and ffn_down write the residual: scale them by 2**-rs
            mats[6].wshift += rs
            if biases[3] is not None:
                shift_q16(biases[3], rs)
        layers.append(Layer(norm(reader, pre + "attn_norm", cfg.dim, resid_eps(cfg)),
                            norm(reader, pre + "ffn_norm", cfg.dim, resid_eps(cfg)), mats, biases))
    bufs = None
    if stream:  # None for the other parts: norms and scales stay resident, never re-read
        bufs = [nibbles.get(p) for p in reader.layer_parts()]
    return layers, bufs


class Embeddings:
    """token id -> token_embd row (embd_map, resident or read on demand), the row source, the classifier
    (Head) and the sub-vocabulary map. See docs/RUNTIME.md for which parts stay resident."""

    def __init__(self, reader, cfg, stream, out_rows, pool=None):
        dim = cfg.dim
        name = "token_embd"
        self.reader = reader
        self.vocab = cfg.vocab_size
        n_rows = q4_shape(reader, name, None, dim)
        self.map = None  # resident embd_map
        self.map_size = 0  # bytes per entry of a streamed (or in place) embd_map
        self.mapview = None  # the embd_map's bytes in place (reader.view): entries read from flash, no copy
        if "embd_map" in reader:
            what = "a row of token_embd"
            if stream or reader.mem is not None:
                self.map_size = check_map_streamed(reader, "embd_map", cfg.vocab_size, n_rows, what)
                self.mapview = reader.view("embd_map")
                self.mapbuf = bytearray(self.map_size) if self.mapview is None else None
            else:
                self.map = token_map(reader, "embd_map", cfg.vocab_size, n_rows, what)
        elif n_rows != cfg.vocab_size:
            raise ModelError("token_embd has %d rows but vocab_size is %d (and there is no embd_map)"
                             % (n_rows, cfg.vocab_size))
        self.vocab_map = None
        if cfg.sub_vocab:
            self.vocab_map = token_map(reader, "vocab_map", cfg.sub_vocab, cfg.vocab_size, "a token id")
        if cfg.tied:
            if "output" in reader:
                raise ModelError("config tied_embed is 1 but the file has an 'output' segment")
            if n_rows != cfg.n_out:
                raise ModelError("tied embeddings: token_embd has %d rows but the output needs %d (%s)"
                                 % (n_rows, cfg.n_out, "sub_vocab" if cfg.sub_vocab else "vocab_size"))
            self.head = Head(reader, name, n_rows, dim, stream, out_rows, pool)
            if stream:
                self.rows = EmbedRows(reader, name, n_rows, dim, scales=self.head.scales, wshift=self.head.wshift,
                                      mins=self.head.mins)
            else:
                self.rows = EmbedRows(reader, name, n_rows, dim, mat=self.head.mat)
        else:
            self.head = Head(reader, "output", cfg.n_out, dim, stream, out_rows, pool)
            if stream:
                self.rows = EmbedRows(reader, name, n_rows, dim, wshift=weight_shift(reader, name))
            else:
                self.rows = EmbedRows(reader, name, n_rows, dim, mat=q4_resident(reader, name, n_rows, dim, pool))
        self.rows.rshift = cfg.resid_shift

    def row_of(self, token):
        """Row of token_embd for token id token (ModelError if it is not a valid id)."""
        if type(token) is not int or token < 0 or token >= self.vocab:
            raise ModelError("token id %r is not an int in 0..%d" % (token, self.vocab - 1))
        if self.map is not None:
            return self.map[token]
        if self.map_size:
            b = self.mapview
            o = token * self.map_size
            if b is None:
                b = self.mapbuf
                self.reader.read_range("embd_map", o, b)
                o = 0
            if self.map_size == 2:
                return b[o] | (b[o + 1] << 8)
            return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | ((b[o + 3] & 63) << 24)  # checked < n_rows at load
        return token


class EmbedRows:
    """The default row source: fill(row, out) dequantises row `row` of token_embd to Q16 (dim values).

    Hook: Model.embed_rows may be any object whose fill(row, out) writes the same values without
    allocating (e.g. an LRU-K cache of dequantised rows in front of this one). Values are
    q * ws * 2**(16 - wshift) (q4: q = nibble - 8; q8: the int8), or ((nibble - 8) * ws + mf) *
    2**(16 - wshift) for q4a, rounded, with the matrix's prepared fixed-point scales (the classifier of
    a tied model uses the same numbers); a streamed table reads the row's weights and float16 scales
    (and mins) with read_range and converts them exactly as prepare() does. wshift: an int, or for q4a
    the (t, k) pair of q4a_q8.asym_shifts (weight_shift gives either)."""

    def __init__(self, reader, name, rows, dim, mat=None, scales=None, wshift=None, mins=None):
        self.reader = reader
        self.name = name
        self.sname = name + mbf.SCALES_SUFFIX
        self.mname = name + mbf.MINS_SUFFIX
        self.rows = rows
        self.dim = dim
        self.ng = dim // GROUP
        dtype = reader.seg(name).dtype if mat is None else None
        self.kind = mat.kind if mat is not None else (KIND_Q8 if dtype == "q8" else KIND_ASYM if dtype == "q4a"
                                                      else 0)
        self.rowbytes = dim if self.kind == KIND_Q8 else dim // 2
        self.mat = mat  # resident: weights and prepared scales in memory
        self.scales = scales  # streamed weights, resident prepared scales (tied + streamed)
        self.mins = mins if mat is None else mat.mins
        self.t = self.k = 0
        if mat is not None:
            self.wshift = mat.wshift
        elif type(wshift) is tuple:  # q4a read from the file: (t, k) of q4a_q8.asym_shifts
            self.t, self.k = wshift
            self.wshift = self.t - self.k
        else:
            self.wshift = wshift
        self.nib = None if mat is not None else bytearray(self.rowbytes)
        conv = mat is None and scales is None
        self.sbuf = bytearray(2 * self.ng) if conv else None
        self.mbuf = None
        if conv and self.kind == KIND_ASYM:
            from shared import q4a_q8  # the row conversion of prepare_asym, kept as plain function attributes
            self.mbuf = bytearray(2 * self.ng)
            self.fix_min = q4a_q8.asym_fixed_min
            self.round_shift = q4a_q8.round_shift
        self.rshift = 0  # rows go into the residual stream, in Q(16 - rshift) (Config.resid_shift)
        self.einfo = array("i", [0, self.ng, 0])  # q4nat.embed's row, groups and shift

    def fill(self, row, out):
        f = kernels.fused()
        if f is not None and self.mat is not None and self.kind != KIND_Q8:  # q4nat.embed: the same values in C
            ei = self.einfo
            ei[0] = row
            ei[2] = 16 - self.wshift - self.rshift
            f.embed(out, self.mat.buf, self.mat.scales, self.mat.mins, ei)
            return
        rb = self.rowbytes
        ng = self.ng
        kind = self.kind
        conv = False
        mn = self.mins
        if self.mat is not None:
            nib = self.mat.buf
            no = row * rb
            sc = self.mat.scales
            so = row * ng * 2
        else:
            self.reader.read_range(self.name, row * rb, self.nib)
            nib = self.nib
            no = 0
            if self.scales is not None:
                sc = self.scales
                so = row * ng * 2
            else:
                self.reader.read_range(self.sname, row * ng * 2, self.sbuf)
                sc = self.sbuf
                so = 0
                conv = True
                if kind == KIND_ASYM:
                    self.reader.read_range(self.mname, row * ng * 2, self.mbuf)
                    mn = self.mbuf
        sh = 16 - self.wshift - self.rshift
        c = 0
        for g in range(ng):
            ws = sc[so] | (sc[so + 1] << 8)
            mf = 0
            if kind == KIND_ASYM:
                mf = mn[so] | (mn[so + 1] << 8)
                if conv:
                    mf = self.fix_min(ws, mf, self.t, self.k)
                    ws = self.round_shift(fp16_fixed(ws, self.t), self.k)
                elif mf & 0x8000:
                    mf -= 0x10000
            elif conv:
                ws = fp16_fixed(ws, self.wshift)
            so += 2
            if kind == KIND_Q8:
                for j in range(GROUP):
                    b = nib[no]
                    no += 1
                    out[c] = shift_sat((b - 256 if b & 128 else b) * ws, sh)  # |q * ws| < 2**18
                    c += 1
                continue
            for j in range(16):
                b = nib[no]
                no += 1
                out[c] = shift_sat(((b & 15) - 8) * ws + mf, sh)  # |q * ws + mf| < 2**18
                out[c + 1] = shift_sat(((b >> 4) - 8) * ws + mf, sh)
                c += 2


class Head:
    """The classifier: logits(out, act) = W . act over W's rows (whole vocabulary or sub-vocabulary).

    Resident: one matvec. Streamed: blocks of `block` rows read with read_range into one weight
    buffer, with the whole matrix's prepared scales (and mins) resident (the integers equal the
    resident ones). W may be q4, q4a or q8."""

    def __init__(self, reader, name, rows, dim, stream, block, pool=None):
        self.name = name
        self.rows = rows
        self.mat = None
        self.mins = None
        if not stream:
            self.mat = q4_resident(reader, name, rows, dim, pool)
            return
        q4_shape(reader, name, rows, dim)
        if type(block) is not int or block < 1:
            raise ModelError("out_rows (classifier rows per streamed block) must be an int >= 1, got %r" % (block,))
        dtype = reader.seg(name).dtype
        if dtype != "q4":
            from shared import q4a_q8
        b = block if block < rows else rows
        ng = dim // GROUP
        self.reader = reader
        self.half = dim if dtype == "q8" else dim // 2  # weight bytes per row
        self.scales = bytearray(rows * ng * 2)
        reader.read_into(name + mbf.SCALES_SUFFIX, self.scales, False)
        if dtype == "q4a":
            self.mins = bytearray(rows * ng * 2)
            reader.read_into(name + mbf.MINS_SUFFIX, self.mins, False)
            self.wshift = q4a_q8.prepare_asym(self.scales, self.mins)
        elif dtype == "q8":
            self.wshift = q4a_q8.prepare_scales8(self.scales)
        else:
            self.wshift = prepare_scales(self.scales)
        nib = bytearray(b * self.half)
        sv = memoryview(self.scales)
        self.nblocks = (rows + b - 1) // b
        self.views = [sv[i * b * ng * 2:min(rows, (i + 1) * b) * ng * 2] for i in range(self.nblocks)]
        self.mviews = None
        if self.mins is not None:
            mv = memoryview(self.mins)
            self.mviews = [mv[i * b * ng * 2:min(rows, (i + 1) * b) * ng * 2] for i in range(self.nblocks)]
        tail = rows - (self.nblocks - 1) * b
        if dtype == "q8":
            self.full = q4a_q8.Q8Matrix(b, dim, nib, self.views[0])
            self.tail = q4a_q8.Q8Matrix(tail, dim, memoryview(nib)[0:tail * self.half], self.views[-1])
        else:
            mins = self.mviews
            self.full = Q4Matrix(b, dim, nib, self.views[0], mins[0] if mins else None)
            self.tail = Q4Matrix(tail, dim, memoryview(nib)[0:tail * self.half], self.views[-1],
                                 mins[-1] if mins else None)
        self.full.wshift = self.tail.wshift = self.wshift
        self.tmp = array("i", bytearray(4 * b))

    def logits(self, out, act, hook=None):
        # hook (streamed): called between blocks; a board's node polls its inputs there (in one piece the
        # classifier held an RP2040's loop for over 300 ms)
        if self.mat is not None:
            kernels.matvec(out, self.mat, act)
            return
        r = 0
        last = self.nblocks - 1
        tmp = self.tmp
        mviews = self.mviews
        for i in range(self.nblocks):
            if hook and i:
                hook()
            mat = self.tail if i == last else self.full
            n = mat.rows
            self.reader.read_range(self.name, r * self.half, mat.buf)
            mat.scales = self.views[i]
            if mviews is not None:
                mat.mins = mviews[i]
            kernels.matvec(tmp, mat, act)
            f = kernels.fused()
            if f is not None:  # q4nat.copy: the block's logits without a bytecode loop
                f.copy(out, tmp, r, n)
            else:
                for j in range(n):
                    out[r + j] = tmp[j]
            r += n


# ---- segments -> buffers ----

def seg(reader, name, dtypes, shape):
    """The descriptor of segment name, checked against the allowed dtypes and the expected shape."""
    if name not in reader:
        raise ModelError("the model file has no segment '%s' (needed by the Llama runtime)" % name)
    s = reader.seg(name)
    if s.dtype not in dtypes:
        raise ModelError("segment '%s' is %s; the runtime reads %s" % (name, s.dtype, " or ".join(dtypes)))
    if shape is not None and tuple(s.shape) != tuple(shape):
        raise ModelError("segment '%s' has shape %r; the config implies %r" % (name, tuple(s.shape), tuple(shape)))
    return s


WEIGHT_DTYPES = ("q4", "q4a", "q8")  # symmetric INT4, asymmetric INT4 (+ .mins), INT8 (docs/MBF.md)


def q4_shape(reader, name, rows, cols):
    """Check a weight matrix (q4, q4a or q8; rows None: any count) and return its row count (the reader
    checked its scales and mins)."""
    s = seg(reader, name, WEIGHT_DTYPES, None)
    if len(s.shape) != 2 or s.shape[1] != cols or (rows is not None and s.shape[0] != rows):
        raise ModelError("segment '%s' has shape %r; the config implies (%s, %d)"
                         % (name, tuple(s.shape), "rows" if rows is None else rows, cols))
    return s.shape[0]


def q4_resident(reader, name, rows, cols, pool=None):
    """A prepared weight matrix holding segment name's weights, scales (and mins): a Q4Matrix (pool's,
    if it has one) for q4 / q4a, a Q8Matrix for q8. With a reader in place its weights are the file's
    bytes (reader.view), not a copy."""
    q4_shape(reader, name, rows, cols)
    dtype = reader.seg(name).dtype
    weights = reader.view(name)
    mat = pool.pop(name, None) if pool else None
    if mat is None:
        mat = _empty_matrix(dtype, rows, cols, weights)
    if dtype == "q4a":
        reader.read_into(name + mbf.MINS_SUFFIX, mat.mins, False)
    if weights is None:
        reader.read_into(name, memoryview(mat.buf)[0:mat.nib_bytes], False)
    reader.read_into(name + mbf.SCALES_SUFFIX, mat.scales, False)
    if dtype == "q4a":  # the loader picks that form's conversion: q4 never imports q4a_q8
        from shared import q4a_q8
        return q4a_q8.prepare(mat)
    return mat.prepare()


def q4_streamed(reader, name, rows, cols, nibbles):
    """A prepared Q4Matrix (Q8Matrix for q8) over a shared weight buffer (filled per use) with its own
    resident scales (and mins, for q4a)."""
    q4_shape(reader, name, rows, cols)
    dtype = reader.seg(name).dtype
    n = rows * (cols // GROUP) * 2
    scales = bytearray(n)
    reader.read_into(name + mbf.SCALES_SUFFIX, scales, False)
    if dtype == "q8":
        from shared import q4a_q8
        return q4a_q8.Q8Matrix(rows, cols, nibbles, scales).prepare()
    mins = None
    if dtype == "q4a":
        mins = bytearray(n)
        reader.read_into(name + mbf.MINS_SUFFIX, mins, False)
    mat = Q4Matrix(rows, cols, nibbles, scales, mins)
    if mins is not None:
        from shared import q4a_q8
        return q4a_q8.prepare(mat)
    return mat.prepare()


def _chunks(reader, name, chunk, fn):
    """Stream segment name through chunk, calling fn(chunk, k, pos) for each piece of k bytes."""
    n = reader.seg(name).length
    pos = 0
    while pos < n:
        k = len(chunk) if n - pos >= len(chunk) else n - pos
        reader.read_range(name, pos, chunk if k == len(chunk) else memoryview(chunk)[0:k])
        fn(chunk, k, pos)
        pos += k


def fp16_scale_shift(reader, name):
    """The wshift prepare() would give q4 segment name, from its f16 scales streamed through a small
    buffer: a streamed embedding then converts one row's scales exactly as a resident one."""
    emax = [0]

    def scan(chunk, k, pos):
        for o in range(0, k, 2):
            e = fp16_exponent(chunk[o] | (chunk[o + 1] << 8), False)
            if e > emax[0]:
                emax[0] = e
    _chunks(reader, name + mbf.SCALES_SUFFIX, bytearray(_CHUNK), scan)
    return fp16_shift(emax[0])


def weight_shift(reader, name):
    """What a streamed row reader needs to convert segment name's rows as prepare() would: the wshift
    of a q4 or q8 matrix, or (t, k) of a q4a one (q4a_q8.asym_scan), from its float16 scales (and mins)
    streamed through small buffers."""
    dtype = reader.seg(name).dtype
    sh = fp16_scale_shift(reader, name) if dtype != "q4a" else 0
    if dtype == "q4":
        return sh
    if dtype == "q8":
        return sh - 4 if sh else 0  # q4a_q8.prepare_scales8: the largest scale in [2**10, 2**11)
    from shared import q4a_q8
    return q4a_q8.asym_scan(reader, name + mbf.SCALES_SUFFIX, name + mbf.MINS_SUFFIX, _CHUNK)


def f32_to_f16(b):
    """float32 bits -> float16 bits, round to nearest even, integers only (as numpy's astype)."""
    sign = (b >> 16) & 0x8000
    e = (b >> 23) & 255
    m = b & 0x7FFFFF
    if e == 255:
        raise ModelError("an RMSNorm gain is Inf or NaN (float32 bits 0x%08x)" % b)
    if e < 102:  # below 2**-25, half the smallest float16 subnormal: rounds to zero
        return sign
    m |= 0x800000  # value = m * 2**(e - 150)
    if e < 113:  # float16 subnormal: units of 2**-24, so keep m * 2**(e - 126)
        sh = 126 - e
        base = 0
    else:
        sh = 13
        base = (e - 112) << 10  # biased float16 exponent
        m -= 0x800000
    q = m >> sh
    rem = m - (q << sh)
    half = 1 << (sh - 1)
    if rem > half or (rem == half and q & 1):
        q += 1
    h = base + q  # a mantissa carry moves into the exponent field by itself
    if h >= 0x7C00:
        raise ModelError("an RMSNorm gain (float32 bits 0x%08x) is beyond the float16 range" % b)
    return sign | h


def f32_to_q16(b):
    """float32 bits -> round(value * 2**16) (half up), saturated to +-(2**30 - 1); integers only."""
    e = (b >> 23) & 255
    if e == 255:
        raise ModelError("a bias is Inf or NaN (float32 bits 0x%08x)" % b)
    m = (b & 0x7FFFFF) | (0x800000 if e else 0)  # value = m * 2**(max(e, 1) - 150)
    k = (e if e else 1) - 134  # Q16 = m * 2**k
    if k >= 0:
        v = 0x3FFFFFFF if k > 6 or (m << k) > 0x3FFFFFFF else m << k
    else:
        v = (m + (1 << (-k - 1))) >> -k if k > -30 else 0
    return -v if b & 0x80000000 else v


def resid_eps(cfg):
    """RMSNorm's eps for an input in Q(16 - resid_shift): mean(x**2) shrinks by 4**resid_shift."""
    return cfg.norm_eps / (1 << (2 * cfg.resid_shift))


def shift_q16(buf, s):
    """buf[i] >>= s, rounded half up (load time): a Q16 vector into Q(16 - s)."""
    half = 1 << (s - 1)
    for i in range(len(buf)):
        buf[i] = (buf[i] + half) >> s


def bias(reader, name, n):
    """array('i') of n Q16 values from an f32 segment (attention biases)."""
    s = seg(reader, name, ("f32",), (n,))
    raw = bytearray(s.length)
    reader.read_into(name, raw, False)
    out = array("i", bytearray(4 * n))
    for i in range(n):
        out[i] = f32_to_q16(struct.unpack_from("<I", raw, 4 * i)[0])
    return out


def norm(reader, name, n, eps):
    """NormWeight of n gains from an f32 (or f16) segment."""
    s = seg(reader, name, ("f32", "f16"), (n,))
    raw = bytearray(s.length)
    reader.read_into(name, raw, False)
    bits = array("H", bytearray(2 * n))
    for i in range(n):
        if s.dtype == "f16":
            bits[i] = raw[2 * i] | (raw[2 * i + 1] << 8)
        else:
            bits[i] = f32_to_f16(struct.unpack_from("<I", raw, 4 * i)[0])
    try:
        return NormWeight(n, eps).load_fp16(bits)
    except ValueError as e:
        raise ModelError("segment '%s': %s" % (name, e))


def token_map(reader, name, n, limit, what):
    """array of the n ids of segment name (u16 or i32), each checked to be in 0..limit-1."""
    s = seg(reader, name, ("u16", "i32"), (n,))
    raw = bytearray(s.length)
    reader.read_into(name, raw, False)
    out = array("H" if s.dtype == "u16" else "i", raw)
    for i in range(n):
        if out[i] < 0 or out[i] >= limit:
            raise ModelError("segment '%s': entry %d is %d, outside 0..%d (%s)" % (name, i, out[i], limit - 1, what))
    return out


def check_map_streamed(reader, name, n, limit, what):
    """Check a map too large to keep (read through a small buffer); return its bytes per entry."""
    s = seg(reader, name, ("u16", "i32"), (n,))
    size = 2 if s.dtype == "u16" else 4

    def scan(chunk, k, pos):
        for o in range(0, k, size):
            v = chunk[o] | (chunk[o + 1] << 8) if size == 2 else struct.unpack_from("<i", chunk, o)[0]
            if v < 0 or v >= limit:
                raise ModelError("segment '%s': entry %d is %d, outside 0..%d (%s)"
                                 % (name, (pos + o) // size, v, limit - 1, what))
    _chunks(reader, name, bytearray(_CHUNK), scan)
    return size
