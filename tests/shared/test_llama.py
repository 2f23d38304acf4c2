# test_llama.py: the integer Llama runtime on the tiny fixture: pinned logits, float reference, batch ==
# steps, streamed == resident, speculation, sampling, allocation-free decode steps, and bad input.
import binascii
import gc
import struct
import time
from array import array

import testkit

# MicroPython compiles these from source on the rp2040 test heap; the order below (the largest compile
# first, a collection after each) is the one that leaves that heap least fragmented for the models.
from shared import mbf  # noqa: I001

gc.collect()
from shared import kernels  # noqa: E402

gc.collect()
from shared import model_load, ringkv  # noqa: E402

gc.collect()
from shared import llama, lruk  # noqa: E402

ModelError = model_load.ModelError

TINY = "tests/shared/data/tiny_llama.mbf"
VOCAB = 96
LAYERS, KVD, KVH = 2, 16, 2
SINK, WINDOW, STAGED = 2, 5, 4  # 7 live tokens: a 40-token run wraps the window 7 times
N = 40
# CRC-32 of the logits (array('i') bytes) after each of the N decode steps of _tokens(N): the same on
# CPython (numpy and plain kernels) and on MicroPython (viper); test_matches_float_reference checks
# those logits against the float reference on CPython.
PIN = 0x5663A5EC
PIN_TIED = 0x3E6F86CB
PIN_SUB = 0xBE63E0EF
PIN_ROPE1 = 0x77109EBD
PIN_BIAS = 0x783FF4B2
PIN_DIST = 0x9E9534EC  # the Sampler's (idx, count) arrays in test_sampler_counts_sum_to_2_16_and_respect_top_k


def _tokens(n, seed=7):
    rng = testkit.Rng(seed)
    out = array("i", bytearray(4 * n))
    for i in range(n):
        out[i] = rng.below(VOCAB)
    return out


def _kv(sink=SINK, window=WINDOW, staged=STAGED):
    return ringkv.RingKV(LAYERS, KVD, sink, window, staged, "b", KVH)


_READER = []  # one open reader of the fixture, shared by the models built from it


def _model(path=TINY, stream=False, kv=None, **kw):
    r = _fixture() if path == TINY else mbf.open(path)
    try:
        return llama.Model(r, kv or _kv(), stream=stream, **kw)
    except ValueError:
        if path != TINY:
            r.close()
        raise


# One resident and one streamed model of the fixture serve most tests (kv.reset() between uses): the
# MicroPython test heap, fragmented by compiling the runtime from source, has room for few models.
_SHARED = {}
HEAP = {}  # bytes of heap each shared model holds (MicroPython), reported by the allocation test


def _shared(stream):
    m = _SHARED.get(stream)
    if m is None:
        _drop_shared()  # one model at a time
        _fixture()  # the reader is opened once, outside the measured heap
        before = testkit.heap_in_use()
        m = _SHARED[stream] = _model(stream=stream, out_rows=7)
        after = testkit.heap_in_use()
        if after is not None:
            HEAP[stream] = after - before
    m.kv.reset()
    m.embed_rows = m.rows
    return m


def _drop_shared():
    _SHARED.clear()
    testkit.heap_in_use()  # collect


def _crc(buf, crc):
    return binascii.crc32(buf, crc)


def _decode(m, toks, rows=None):
    """step + commit(1) for each token; CRC of the logits after every step (rows: keep copies)."""
    crc = 0
    for i in range(len(toks)):
        m.step(toks[i])
        m.kv.commit(1)
        crc = _crc(m.logits, crc)
        if rows is not None:
            rows.append(list(m.logits))
    return crc


# Files other than the fixture build one model each; on MicroPython only the streamed kind, whose
# buffers are small: the resident kind needs 1.7 KB blocks the fragmented test heap may lack by then.
STREAM_MODES = (True,) if testkit.IS_MP else (False, True)


def _tmp(name):
    return "/tmp/edgetwin_llama_%s_%d_%s.mbf" % ("mp" if testkit.IS_MP else "cp", time.time_ns() % 1000000, name)


def _fixture():
    if not _READER:
        _READER.append(mbf.open(TINY))
    return _READER[0]


def _variant(name, **kw):
    return write_variant(_fixture(), _tmp(name), **kw)


def _remove(path):
    import os

    try:
        os.remove(path)
    except OSError:
        pass


def _check_pin(got, want, what):
    assert got == want, "%s: logits CRC 0x%08x, pinned 0x%08x (%s kernels)" % (what, got, want, kernels.backend())


# ---- a minimal MBF writer for variants of the fixture (pure Python: MicroPython makes them too) ----

def _cfg_entry(key, value):
    kb = key.encode()
    if type(value) is float:
        return kb + bytes(15 - len(kb)) + bytes((2,)) + struct.pack("<d", value)
    return kb + bytes(15 - len(kb)) + bytes((1,)) + struct.pack("<q", value)


def _pad(n):
    return (n + 31) // 32 * 32


def write_variant(src, dst, drop=(), add=(), config=None):
    """Copy MBF file src (a path or an open reader) to path dst without the segments named in drop,
    with add's (name, dtype, shape, bytes) segments added (or replacing one of the same name), and
    config keys updated.
    Streams through small buffers (the MicroPython test heap is fragmented)."""
    r = src if isinstance(src, mbf.Reader) else mbf.open(src, budget=1 << 20)
    conf = dict(r.config)
    if "head_dim" in conf and conf["head_dim"] * conf["n_heads"] == conf["dim"]:
        del conf["head_dim"]  # the reader derives it; keep the original key set
    conf.update(config or {})
    new = {}
    for name, dtype, shape, data in add:
        new[name] = (mbf.DTYPE_CODES[dtype], tuple(shape), data)
    segs = []
    for name in r.names():
        if name not in drop and name not in new:
            s = r.seg(name)
            segs.append((name, mbf.DTYPE_CODES[s.dtype], s.shape, s.length, s.crc, None))
    for name in new:
        code, shape, data = new[name]
        segs.append((name, code, shape, len(data), binascii.crc32(data), data))
    segs.sort(key=lambda t: t[0])
    keys = sorted(conf)
    meta_len = 32 + 24 * len(keys) + 64 * len(segs)
    tok_off = _pad(meta_len + 4)
    pos = tok_off + r.tok_length
    offs = []
    for seg in segs:
        offs.append(_pad(pos))
        pos = offs[-1] + seg[3]
    tok_crc = r.tok_crc if r.tok_length else 0
    buf = bytearray(64)
    with open(dst, "wb") as f:
        piece = struct.pack("<4sHHIHHIIII", mbf.MAGIC, 1, 0, meta_len, len(keys), len(segs), tok_off,
                            r.tok_length, tok_crc, pos)
        crc = binascii.crc32(piece)
        f.write(piece)
        for k in keys:
            piece = _cfg_entry(k, conf[k])
            crc = binascii.crc32(piece, crc)
            f.write(piece)
        for i in range(len(segs)):
            name, code, shape, n, scrc = segs[i][:5]
            dims = list(shape) + [0] * (4 - len(shape))
            struct.pack_into("<32sBBH4IIII", buf, 0, name.encode(), code, len(shape), 0, dims[0], dims[1],
                             dims[2], dims[3], offs[i], n, scrc)
            crc = binascii.crc32(buf, crc)
            f.write(buf)
        f.write(struct.pack("<I", crc))
        at = meta_len + 4
        f.write(bytes(tok_off - at))
        at = tok_off
        if r.tok_length:
            _copy(r, None, r.tok_offset, r.tok_length, f, buf)
            at += r.tok_length
        for i in range(len(segs)):
            name, n, data = segs[i][0], segs[i][3], segs[i][5]
            f.write(bytes(offs[i] - at))
            if data is None:
                _copy(r, name, 0, n, f, buf)
            else:
                f.write(data)
            at = offs[i] + n
    if r is not src:
        r.close()
    return dst


def _copy(r, name, start, n, f, buf):
    """Copy n bytes of segment name from start (name None: file offset start) to f through buf."""
    pos = 0
    view = memoryview(buf)
    while pos < n:
        k = min(len(buf), n - pos)
        if name is None:
            r._f.seek(start + pos)
            r._f.readinto(view[0:k])
        else:
            r.read_range(name, start + pos, view[0:k])
        f.write(view[0:k])
        pos += k


def q4_rows(src, name, rows):
    """(nibble bytes, scale bytes) of the given rows of q4 segment name, in that order."""
    r = src if isinstance(src, mbf.Reader) else mbf.open(src, budget=1 << 20)
    cols = r.seg(name).shape[1]
    nib = bytearray(cols // 2)
    sc = bytearray(2 * (cols // 32))
    a = bytearray()
    b = bytearray()
    for i in rows:
        r.read_range(name, i * len(nib), nib)
        r.read_range(name + ".scales", i * len(sc), sc)
        a += nib
        b += sc
    if r is not src:
        r.close()
    return bytes(a), bytes(b)


# feed() output rows, allocated at import while the heap still has room for 1.5 KB blocks
OUT = array("i", bytearray(4 * STAGED * VOCAB))


# ---- the numbers ----

def test_decode_logits_are_pinned():
    """The same logits under every kernel backend of this interpreter: on MicroPython the C kernels (whose
    attention and glue replace the model's own loops), viper and plain."""
    m = _shared(False)
    try:
        for name in kernels.available():
            kernels.use(name)
            m.kv.reset()
            _check_pin(_decode(m, _tokens(N)), PIN, "resident decode, %s kernels" % name)
            assert m.kv.live == SINK + WINDOW and m.kv.pending == 0
            assert (m._nat is not None) == (name == "native"), name
    finally:
        kernels.use()
    if testkit.IS_MP and not testkit.IS_CP:
        assert kernels.available()[:2] == ["native", "viper"]


def test_matches_float_reference():
    """Integer forward vs the float reference (tests/shared/llama_ref.py), 48 steps through 9 wraps of the window.
    Tolerance: max |logit difference| <= 10% of the step's logit range (measured: <= 5%); top-1
    agrees in >= 90% of steps (measured: all) and in every step whose reference top-1/top-2 margin
    exceeds 20% of the range. A position, window or RoPE mistake gives 44-93% (checked by hand)."""
    if testkit.IS_MP:
        testkit.skip("the float reference (boxed floats, ~100 KB) does not fit the rp2040 test heap next to "
                     "the compiled runtime; the MicroPython logits equal the checked CPython ones (PIN)")
    import llama_ref

    toks = _tokens(48, seed=3)
    m = _shared(False)
    ref = llama_ref.RefModel(TINY, SINK, WINDOW, STAGED)
    worst = 0.0
    agree = 0
    for t in range(len(toks)):
        m.step(toks[t])
        m.kv.commit(1)
        lr = ref.step(toks[t])
        ref.commit(1)
        hi = max(lr)
        span = hi - min(lr)
        diff = max(abs(m.logits[i] / 65536.0 - lr[i]) for i in range(VOCAB))
        worst = max(worst, diff / span)
        top = llama.argmax(m.logits, VOCAB)
        want = lr.index(hi)
        agree += top == want
        second = max(lr[i] for i in range(VOCAB) if i != want)
        assert top == want or (hi - second) <= 0.2 * span, (t, top, want, hi - second, span)
    print("integer vs float: max |logit diff| %.3f of the range, top-1 agrees %d/%d" % (worst, agree, len(toks)))
    assert worst <= 0.10, worst
    assert agree >= 0.9 * len(toks), agree


def test_batch_equals_steps():
    """feed(T) then commit(T) gives the logits of T x (step, commit(1)), bit for bit, through wraps."""
    m = _shared(False)
    toks = _tokens(N)
    out = OUT
    crc = 0
    i = 0
    sizes = (4, 1, 3, 2)
    b = 0
    while i < N:
        t = min(sizes[b % len(sizes)], N - i)
        b += 1
        blk = array("i", toks[i:i + t])
        assert m.feed(blk, t, out) == t
        assert m.kv.pending == t
        m.kv.commit(t)
        for r in range(t):
            crc = _crc(memoryview(out)[r * VOCAB:(r + 1) * VOCAB], crc)
        i += t
    _check_pin(crc, PIN, "batched feed")


def test_speculation_commit_prefix_discard_restep():
    """Stage K drafts (the true next tokens, then wrong guesses), commit an accepted prefix, discard
    the rest, redraft: the committed tokens' logits equal the plain decode's. Also a block accepted
    whole with the next block kept staged on top of it (commit(n, keep=True))."""
    m = _shared(False)
    toks = _tokens(N)
    rng = testkit.Rng(99)
    crc = 0
    i = 0
    out = OUT
    draft = array("i", bytearray(4 * STAGED))
    rounds = 0
    while i < N:
        k = min(1 + rng.below(STAGED), N - i)
        good = rng.below(k + 1)  # accepted prefix length (0: the first draft is wrong)
        for j in range(k):
            draft[j] = toks[i + j] if j < good else (toks[i + j] + 1 + rng.below(VOCAB - 1)) % VOCAB
        m.feed(draft, k, out)
        for r in range(good):
            crc = _crc(memoryview(out)[r * VOCAB:(r + 1) * VOCAB], crc)
        if good == k and i + k < N and rng.below(2):
            # whole block accepted while the next token was already drafted on top: keep it staged
            m.step(toks[i + k])
            m.kv.commit(k, True)
            assert m.kv.pending == 1
            crc = _crc(m.logits, crc)
            m.kv.commit(1)
            i += k + 1
        else:
            m.kv.commit(good)  # the rest is discarded
            i += good
            if good < k and i < N:  # the correction: the true token, stepped alone
                m.step(toks[i])
                m.kv.commit(1)
                crc = _crc(m.logits, crc)
                i += 1
        rounds += 1
    _check_pin(crc, PIN, "speculative decode (%d rounds)" % rounds)


def test_streamed_equals_resident():
    """One layer's nibbles resident, embedding rows and classifier blocks (7 rows: a short tail)
    read from the file: the same integers as the resident model."""
    m = _shared(True)
    assert m.emb.head.nblocks == 14
    _check_pin(_decode(m, _tokens(N)), PIN, "streamed decode")


def test_row_cache_hook():
    """Model.embed_rows: an LRU-K cache of dequantised rows in front of the default source gives the
    same logits, allocation-free on hits and misses."""

    class CachedRows:
        def __init__(self, base, slots):
            self.base = base
            self.dim = base.dim
            self.cache = lruk.LRUK(slots, 2)
            self.buf = array("i", bytearray(4 * slots * base.dim))
            self.tmp = array("i", bytearray(4 * base.dim))
            self.misses = 0

        def fill(self, row, out):
            slot = self.cache.access(row)
            d = self.dim
            o = slot * d
            if not self.cache.hit:
                self.misses += 1
                self.base.fill(row, self.tmp)
                for i in range(d):
                    self.buf[o + i] = self.tmp[i]
            for i in range(d):
                out[i] = self.buf[o + i]

    m = _shared(False)
    rows = CachedRows(m.rows, 8)
    m.embed_rows = rows
    crc = testkit.run_locked(lambda t: _decode(m, t), _tokens(N))
    _check_pin(crc, PIN, "decode through an LRU-K row cache")
    toks = _tokens(N, seed=11)
    for i in range(N):
        toks[i] = toks[i] % 10  # a working set of 10 rows over 8 slots: hits and misses
    m.kv.reset()
    misses = rows.misses
    cached = testkit.run_locked(lambda t: _decode(m, t), toks)
    assert 10 <= rows.misses - misses < N, rows.misses - misses
    m.kv.reset()
    m.embed_rows = m.rows
    assert _decode(m, toks) == cached


# ---- memory and time ----

def test_decode_steps_allocate_nothing():
    """Whole decode steps (step + commit, and a feed of STAGED tokens + commit) under heap_lock,
    resident and streamed; reports the heap each model holds and the time per decode step."""
    toks = _tokens(3 * N)
    for stream in (False, True):
        m = _shared(stream)

        def steps(t):
            for i in range(len(t)):
                m.step(t[i])
                m.kv.commit(1)
            m.feed(t, STAGED)
            m.kv.commit(STAGED)

        steps(toks)  # warm up (numpy's weight cache on CPython)
        held = testkit.heap_in_use()
        t0 = time.ticks_ms() if testkit.IS_MP else time.time()
        testkit.run_locked(steps, toks)
        dt = time.ticks_diff(time.ticks_ms(), t0) if testkit.IS_MP else int((time.time() - t0) * 1000)
        after = testkit.heap_in_use()
        n = len(toks) + STAGED
        what = "streamed" if stream else "resident"
        if testkit.IS_MP:
            assert after <= held, "heap grew from %d to %d over %d steps" % (held, after, n)
            print("%s model (%s kernels): %d B of heap (weights, %d+%d+%d RingKV, buffers; the reader is apart), "
                  "%d us per decode step" % (what, kernels.backend(), HEAP[stream], SINK, WINDOW, STAGED,
                                             dt * 1000 // n))
        else:
            print("%s model (%s kernels): %d us per decode step" % (what, kernels.backend(), dt * 1000 // n))
        m = steps = None  # let _shared drop this model before building the other


# ---- sampling ----

def test_sampler_counts_sum_to_2_16_and_respect_top_k():
    m = _shared(False)
    toks = _tokens(6)
    s = llama.Sampler(VOCAB, top_k=5, temperature=0.8)
    crc = 0
    for i in range(6):
        m.step(toks[i])
        m.kv.commit(1)
        for temp, top_k in ((0.8, 5), (1.0, 0), (0.25, 12), (3.0, 1)):
            s.set(temp, top_k)
            k = s.distribution(m.logits)
            assert sum(s.count[j] for j in range(k)) == 65536
            assert all(s.count[j] > 0 for j in range(k))
            assert all(s.idx[j] < s.idx[j + 1] for j in range(k - 1))
            if top_k:
                assert k <= top_k
                cut = sorted(m.logits, reverse=True)[top_k - 1]
                assert all(m.logits[s.idx[j]] >= cut for j in range(k))
            crc = _crc(memoryview(s.count)[0:k], _crc(memoryview(s.idx)[0:k], crc))
        s.set(0, 0)
        assert s.distribution(m.logits) == 1 and s.idx[0] == llama.argmax(m.logits, VOCAB)
        assert s.count[0] == 65536 and s.draw(65535) == s.idx[0]
    assert crc == PIN_DIST, "distributions CRC 0x%08x, pinned 0x%08x (%s kernels)" % (crc, PIN_DIST, kernels.backend())


def test_sampler_known_values_ties_and_draw():
    x = array("i", [65536 * v for v in (1, 5, 3, 5, 2, 0, 5, -1, 4, 5)])
    s = llama.Sampler(10, top_k=3, temperature=1.0)
    assert s.distribution(x) == 3
    assert list(s.idx[0:3]) == [1, 3, 6]  # four logits tie at 5: the three lowest indexes
    assert list(s.count[0:3]) == [21846, 21845, 21845]
    assert [s.draw(r) for r in (0, 21845, 21846, 43690, 43691, 65535)] == [1, 1, 3, 3, 6, 6]
    s.set(65536, 0)  # Q16 1.0 == 1.0
    k = s.distribution(x)
    assert k == 10 and sum(s.count[j] for j in range(k)) == 65536
    # exp(v - 5) / sum: the counts are within 2 of round(65536 * p)
    import math

    t = 0.0
    for v in (1, 5, 3, 5, 2, 0, 5, -1, 4, 5):
        t += math.exp(v - 5)
    for j in range(k):
        p = math.exp(x[s.idx[j]] // 65536 - 5) / t
        assert abs(s.count[j] - 65536 * p) <= 2.0, (j, s.count[j], 65536 * p)
    s.set(0.0001, 0)  # near-greedy: everything on the ties at 5
    k = s.distribution(x)
    assert list(s.idx[0:k]) == [1, 3, 6, 9] and sum(s.count[j] for j in range(k)) == 65536
    s.set(0, 3)
    assert s.distribution(x) == 1 and s.idx[0] == 1  # greedy: the lowest index among ties
    extreme = array("i", [0x3FFFFFFF, -0x3FFFFFFF, 0, -0x3FFFFFFF])
    s2 = llama.Sampler(4, 0, 1.0)
    assert s2.distribution(extreme) == 1 and s2.count[0] == 65536


def test_sampler_allocates_nothing():
    x = _tokens(VOCAB)
    for i in range(VOCAB):
        x[i] = (x[i] - 48) * 20000
    s = llama.Sampler(VOCAB, top_k=20, temperature=0.7)

    def run(arg):
        t = 0
        for r in range(0, 65536, 4099):
            s.distribution(arg)
            t += s.draw(r)
        return t

    assert testkit.run_locked(run, x) == run(x)


# ---- bad input ----

def test_bad_tokens_and_feeds():
    m = _shared(False)
    for bad in (VOCAB, -1, "a", 1.0, None):
        e = testkit.raises(ModelError, m.step, bad)
        assert "token id" in str(e)
    assert m.kv.pending == 0  # a refused token stages nothing
    toks = array("i", [1, 2, 3, 4, 5])
    e = testkit.raises(ModelError, m.feed, toks)
    assert "staging" in str(e) and m.kv.pending == 0
    toks[2] = 500
    e = testkit.raises(ModelError, m.feed, toks, 3)
    assert "500" in str(e) and m.kv.pending == 0
    m.feed(toks, 2)
    e = testkit.raises(ModelError, m.feed, toks, 3)  # only 2 slots left
    assert m.kv.pending == 2
    e = testkit.raises(ModelError, m.prefill, toks, 2)
    m.kv.discard()
    m.prefill(toks, 2)
    assert m.kv.live == 2 and m.kv.pending == 0
    s = llama.Sampler(VOCAB)
    for bad in (-1, 65536, 1.5):
        testkit.raises(ModelError, s.draw, bad)
    testkit.raises(ModelError, llama.Sampler, 0)
    testkit.raises(ModelError, s.set, -0.5, 0)
    testkit.raises(ModelError, s.set, 1.0, -2)
    testkit.raises(ModelError, s.distribution, m.logits, VOCAB + 1)


def test_cache_must_match_the_model():
    _drop_shared()  # the tests below build their own models
    r = mbf.open(TINY)
    for kv, what in ((ringkv.RingKV(3, KVD, 2, 5, 4, "b", KVH), "layers 3"),
                     (ringkv.RingKV(LAYERS, 32, 2, 5, 4, "b", KVH), "kv_dim 32"),
                     (ringkv.RingKV(LAYERS, KVD, 2, 5, 4, "b", 1), "heads 1"),
                     (ringkv.RingKV(LAYERS, KVD, 2, 5, 4, "f", KVH), "int8"),
                     (ringkv.RingKV(LAYERS, KVD, 4, 36, 4, "b", KVH), "seq_len 40"),
                     (None, "RingKV")):
        e = testkit.raises(ModelError, llama.Model, r, kv)
        assert what in str(e), (what, str(e))
    e = testkit.raises(ModelError, llama.Model, TINY, _kv())
    assert "mbf.Reader" in str(e)
    llama.Model(r, ringkv.RingKV(LAYERS, KVD, 4, 35, 4, "b", KVH), stream=testkit.IS_MP)  # 0..39 fit


def test_bad_model_files():
    nib, sc = q4_rows(_fixture(), "output", range(40))
    cases = (
        (dict(drop=("blk.1.ffn_up", "blk.1.ffn_up.scales")), "blk.1.ffn_up"),
        (dict(drop=("output_norm",)), "output_norm"),
        (dict(drop=("output", "output.scales")), "output"),
        (dict(add=(("output", "q4", (40, 32), nib), ("output.scales", "f16", (40, 1), sc)), config={"sub_vocab": 40}),
         "vocab_map"),
        (dict(add=(("output", "q4", (40, 32), nib), ("output.scales", "f16", (40, 1), sc),
                   ("vocab_map", "u16", (40,), bytes(array("H", [VOCAB] * 40)))), config={"sub_vocab": 40}),
         "entry 0 is 96"),
        (dict(config={"tied_embed": 1}), "'output'"),
        (dict(config={"rope_theta": 10000.5}), "rope_theta"),
        (dict(config={"rope_style": 2}), "rope_style"),
        (dict(add=(("blk.0.attn_norm", "f32", (16,), bytes(64)),)), "blk.0.attn_norm"),
        (dict(add=(("embd_map", "u16", (VOCAB,), bytes(array("H", [95] * VOCAB))),),
              drop=()), None),  # valid: every id on row 95
        (dict(add=(("embd_map", "u16", (VOCAB,), bytes(array("H", [96] * VOCAB))),)), "embd_map"),
    )
    for kw, what in cases:
        gc.collect()
        path = _variant("bad", **kw)
        try:
            for stream in STREAM_MODES:
                if what is None:
                    m = _model(path, stream=stream)
                    m.step(3)
                    m.reader.close()
                    m = None
                    continue
                e = testkit.raises(ValueError, _model, path, stream)
                assert what in str(e), (kw, stream, str(e))
        finally:
            _remove(path)


def _biases():
    """Qwen2-style attention biases for every layer: f32 values in [-0.5, 0.5)."""
    rng = testkit.Rng(21)
    out = []
    for layer in range(LAYERS):
        for part, n in (("attn_q", 32), ("attn_k", KVD), ("attn_v", KVD), ("attn_output", 32)):
            vals = [(rng.below(1 << 16) - (1 << 15)) / 65536.0 for _ in range(n)]
            out.append(("blk.%d.%s.bias" % (layer, part), "f32", (n,), struct.pack("<%df" % n, *vals)))
    return tuple(out)


def test_variants_tied_subvocab_rope_style_biases():
    """Tied embeddings; a sub-vocabulary head (40 ids) with an embedding map (rare tokens share rows);
    RoPE on halves (style 1); q/k/v and output biases (Qwen2-style). Pinned on both interpreters;
    against the float reference on CPython."""
    _drop_shared()
    sub = [i * 2 + (i % 3 == 0) for i in range(40)]
    nib, sc = q4_rows(_fixture(), "output", sub)
    emb_rows = [i % 64 for i in range(VOCAB)]  # 96 ids on 64 rows
    enib, esc = q4_rows(_fixture(), "token_embd", range(64))
    cases = (
        ("tied", PIN_TIED, VOCAB, dict(drop=("output", "output.scales"), config={"tied_embed": 1})),
        ("sub", PIN_SUB, 40, dict(add=(
            ("output", "q4", (40, 32), nib), ("output.scales", "f16", (40, 1), sc),
            ("vocab_map", "u16", (40,), bytes(array("H", sub))),
            ("token_embd", "q4", (64, 32), enib), ("token_embd.scales", "f16", (64, 1), esc),
            ("embd_map", "u16", (VOCAB,), bytes(array("H", emb_rows)))), config={"sub_vocab": 40})),
        ("rope1", PIN_ROPE1, VOCAB, dict(config={"rope_style": 1})),
        ("bias", PIN_BIAS, VOCAB, dict(add=_biases(), config={"attn_bias": 1, "attn_out_bias": 1})),
    )
    emb_rows = nib = sc = enib = esc = None  # only the variant files need them: heap for the models
    toks = _tokens(16, seed=5)
    for name, pin, n_out, kw in cases:
        path = _variant(name, **kw)
        try:
            rows = None if testkit.IS_MP else []  # the resident run's logits, for the float reference
            for stream in STREAM_MODES:
                m = _model(path, stream=stream, out_rows=16)
                assert m.n_out == n_out
                _check_pin(_decode(m, toks, None if stream else rows), pin, "%s variant (stream=%s)" % (name, stream))
                m = None
            if name == "sub":
                m = _model(path, stream=True)
                assert [m.token_of(i) for i in (0, 1, 39)] == [sub[0], sub[1], sub[39]]
                assert m.row_of(70) == 6 and m.row_of(95) == 31  # embd_map, read from the file
                m = None
            if not testkit.IS_MP:
                import llama_ref

                ref = llama_ref.RefModel(path, SINK, WINDOW, STAGED)
                for t in range(len(toks)):
                    lr = ref.step(toks[t])
                    ref.commit(1)
                    span = max(lr) - min(lr)
                    diff = max(abs(rows[t][i] / 65536.0 - lr[i]) for i in range(n_out))
                    assert diff <= 0.10 * span, (name, t, diff / span)
        finally:
            _remove(path)
