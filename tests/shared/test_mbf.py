# test_mbf.py: the MBF reader on the committed fixture: parse, CRC'd reads, allocation-free layer
# streaming, and truncated / bit-flipped / hostile files each refused with a clear MBFError.
import io

import mbf_ref as ref
import testkit
from shared import mbf

DATA = ref.read_fixture()
SEGS = ref.fixture_segments()
# One scratch copy for every damaged variant: the MicroPython test heap is too fragmented to hold a
# fresh 7 KB copy per case. MemStream(WORK, size) shows the first `size` bytes as the file.
WORK = bytearray(len(DATA) + 64)


def _fresh():
    WORK[0:len(DATA)] = DATA
    for i in range(len(DATA), len(WORK)):
        WORK[i] = 0
    return WORK


def _open(data, budget=mbf.DEFAULT_BUDGET, size=None):
    if data is WORK and size is None:
        size = len(DATA)
    return mbf.open(ref.MemStream(data, size), budget)


def _expected(name):
    for n, dtype, shape in SEGS:
        if n == name:
            return ref.gen_bytes(name, ref.nbytes(dtype, shape))
    raise KeyError(name)


def _refused(data, words, budget=mbf.DEFAULT_BUDGET, size=None):
    """data must be refused at open with an MBFError whose message holds every word of words."""
    e = testkit.raises(mbf.MBFError, _open, data, budget, size)
    msg = str(e)
    for w in words.split("|"):
        assert w in msg, "expected %r in %r" % (w, msg)
    return msg


def test_header_config_and_table_parse():
    r = mbf.open(ref.FIXTURE_PATH)
    assert r.version == (1, 0) and r.size == len(DATA) == ref.u32(DATA, ref.H_FILELEN)
    for key in ref.FIXTURE_CONFIG:
        want = ref.FIXTURE_CONFIG[key]
        got = r.config[key]
        assert got == want if type(want) is int else abs(got - want) <= 1e-6 * abs(want), key
    assert r.config["head_dim"] == 8  # filled in: dim / n_heads
    assert r.names() == [s[0] for s in SEGS]
    assert r.tok_length == ref.FIXTURE_TOKENIZER_LEN and r.tok_offset % 32 == 0
    end = r.tok_offset + r.tok_length
    for name, dtype, shape in SEGS:
        s = r.seg(name)
        assert (s.name, s.dtype, s.shape) == (name, dtype, shape)
        assert s.length == ref.nbytes(dtype, shape) and s.offset % 32 == 0 and s.offset >= end
        end = s.offset + s.length
        assert name in r
    assert end == r.size
    assert "blk.9.attn_q" not in r and "x" * 40 not in r
    e = testkit.raises(mbf.MBFError, r.seg, "blk.0.attn_z")
    assert "'blk.0.attn_z'" in str(e)
    r.close()


def test_read_into_returns_the_written_bytes_and_checks_crc():
    with _open(DATA) as r:
        for name, dtype, shape in SEGS:
            buf = bytearray(ref.nbytes(dtype, shape))
            r.read_into(name, buf)
            assert buf == _expected(name), name
            assert r.read(name) == buf
            r.verify(name)
        assert r.read_tokenizer() == ref.gen_bytes("tokenizer", ref.FIXTURE_TOKENIZER_LEN)
        r.verify_all()
        row = bytearray(8)  # one row of token_embd: 16 int4 = 8 bytes
        r.read_range("token_embd", 3 * 8, row)
        assert row == _expected("token_embd")[24:32]


def test_wrong_buffers_are_refused():
    with _open(DATA) as r:
        for buf in (bytearray(63), bytearray(65), b"\0" * 64, "x" * 64, None):
            e = testkit.raises(mbf.MBFError, r.read_into, "blk.0.attn_norm", buf)
            assert "'blk.0.attn_norm' is 64 bytes" in str(e), str(e)
        testkit.raises(mbf.MBFError, r.read_range, "blk.0.attn_norm", 60, bytearray(8))
        testkit.raises(mbf.MBFError, r.read_range, "blk.0.attn_norm", -1, bytearray(1))
        testkit.raises(mbf.MBFError, r.read_tokenizer, bytearray(3))
        testkit.raises(mbf.MBFError, r.read_range, "blk.0.attn_norm", 1.5, bytearray(1))
        testkit.raises(mbf.MBFError, r.read_range, "blk.0.attn_norm", 0, b"\0")
        testkit.raises(mbf.MBFError, r.read_into, b"blk.0.attn_norm", bytearray(64))
        testkit.raises(mbf.MBFError, r.seg, None)
        testkit.raises(mbf.MBFError, r.load_layer, "0", r.layer_buffers())


def _stream_all_layers(state):
    # state = (reader, bufs, rounds): every layer, `rounds` times, CRC-checked
    r, bufs, rounds = state
    for _ in range(rounds):
        for layer in range(2):
            r.load_layer(layer, bufs)
            r.load_layer(layer, bufs, False)
    return bufs


def _load_layer_1(state):
    r, bufs = state
    r.load_layer(1, bufs)


def _read_some(state):
    r, buf, row, view = state
    r.read_into("blk.1.ffn_up", view)  # a memoryview over a preallocated bytearray
    r.read_into("blk.1.ffn_up", buf)
    r.read_into("blk.1.ffn_up", buf, False)
    r.read_range("blk.1.ffn_up", 8, row)
    r.verify("blk.1.ffn_up")
    r.verify("token_embd")  # 320 bytes: streamed as 256 + 64 through the chunk views
    r.verify_all()
    return buf


def test_layer_streaming_with_fixed_buffers_allocates_nothing():
    with mbf.open(ref.FIXTURE_PATH) as r:  # a real file, as on the board's flash
        parts = r.layer_parts()
        want = []
        for part, dtype, shape in ref.LAYER_PARTS:
            want.append(part)
            if dtype == "q4":
                want.append(part + ".scales")
        want.sort()
        assert list(parts) == want
        bufs = r.layer_buffers()
        assert [len(b) for b in bufs] == list(r.layer_sizes())
        for layer in range(2):
            r.load_layer(layer, bufs)
            for j in range(len(parts)):
                assert bufs[j] == _expected("blk.%d.%s" % (layer, parts[j])), parts[j]
        before = testkit.heap_in_use()
        testkit.run_locked(_stream_all_layers, (r, bufs, 20))
        buf = bytearray(r.seg("blk.1.ffn_up").length)
        row = bytearray(8)
        view = memoryview(bytearray(len(buf)))
        testkit.run_locked(_read_some, (r, buf, row, view))
        assert buf == _expected("blk.1.ffn_up") and row == buf[8:16] and bytes(view) == buf
        after = testkit.heap_in_use()
        if testkit.IS_MP:
            assert after <= before + 1024, (before, after)  # buf, row, view: nothing proportional to the reads
        # the kernels' Q4Matrix layout: nibbles then scales in one buffer, as two views made once
        joined = []
        mats = []
        j = 0
        while j < len(parts):
            if j + 1 < len(parts) and parts[j + 1] == parts[j] + ".scales":
                sizes = r.layer_sizes()
                mat = bytearray(sizes[j] + sizes[j + 1])
                mv = memoryview(mat)
                joined.append(mv[0:sizes[j]])
                joined.append(mv[sizes[j]:])
                mats.append((parts[j], mat))
                j += 2
            else:
                joined.append(None)
                j += 1
        testkit.run_locked(_load_layer_1, (r, joined))
        for part, mat in mats:
            assert mat == _expected("blk.1." + part) + _expected("blk.1.%s.scales" % part), part
        assert len(mats) == 7
        # None skips a part; the rest are still filled
        skip = [None] * len(bufs)
        skip[0] = bytearray(len(bufs[0]))
        r.load_layer(1, skip)
        assert skip[0] == _expected("blk.1." + parts[0])
        testkit.raises(mbf.MBFError, r.load_layer, 2, bufs)
        testkit.raises(mbf.MBFError, r.load_layer, -1, bufs)
        testkit.raises(mbf.MBFError, r.load_layer, 0, bufs[1:])
        swapped = [bufs[1], bufs[0]] + bufs[2:]
        if len(bufs[0]) != len(bufs[1]):
            testkit.raises(mbf.MBFError, r.load_layer, 0, swapped)


class _Trickle:
    """A stream that gives at most 7 bytes per readinto (like a slow serial or network stream)."""

    def __init__(self, data):
        self.s = ref.MemStream(data)

    def seek(self, pos, whence=0):
        return self.s.seek(pos, whence)

    def readinto(self, buf):
        tmp = bytearray(min(7, len(buf)))
        n = self.s.readinto(tmp)
        buf[0:n] = tmp[0:n]
        return n


def test_short_reads_are_completed():
    r = mbf.open(_Trickle(DATA))
    for name in ("blk.0.ffn_down", "token_embd.scales", "misc.u8"):
        buf = bytearray(r.seg(name).length)
        r.read_into(name, buf)
        assert buf == _expected(name)
    assert r.read_tokenizer() == ref.gen_bytes("tokenizer", ref.FIXTURE_TOKENIZER_LEN)


def test_file_changed_after_open_is_a_short_read():
    r = mbf.open(io.BytesIO(DATA))  # any stream with seek and readinto
    r._f = ref.MemStream(DATA, len(DATA) - 100)  # the same file, cut after open()
    e = testkit.raises(mbf.MBFError, r.read_into, "vocab_map", bytearray(48))
    assert "short read" in str(e)


def test_truncated_at_many_lengths():
    meta = ref.meta_len(DATA)
    for n in range(len(DATA)):  # every length
        e = testkit.raises(mbf.MBFError, mbf.open, ref.MemStream(DATA, n))
        msg = str(e)
        assert "truncated" in msg, msg
        if n >= meta + 4:
            assert "header says the file is %d bytes, it has %d" % (len(DATA), n) in msg, msg
        elif n >= 32:
            assert "header, config and table need %d bytes" % (meta + 4) in msg, msg


def _covered(r):
    """(start, end) of every byte range a CRC covers."""
    spans = [(0, ref.meta_len(DATA) + 4), (r.tok_offset, r.tok_offset + r.tok_length)]
    for name, _d, _s in SEGS:
        s = r.seg(name)
        spans.append((s.offset, s.offset + s.length))
    return spans


def test_bit_flips_at_many_positions():
    r0 = _open(DATA)
    spans = _covered(r0)
    rng = testkit.Rng(11)
    count = 4000
    meta = ref.meta_len(DATA) + 4
    caught = padding = 0
    _fresh()
    for k in range(count):
        pos = k * 7 % meta if k % 3 == 0 else rng.below(len(DATA))  # a third in the metadata
        bad = WORK
        bit = 1 << rng.below(8)
        bad[pos] ^= bit
        covered = False
        for a, b in spans:
            if a <= pos < b:
                covered = True
        try:
            try:
                r = _open(bad)
                r.verify_all()
            finally:
                bad[pos] ^= bit
        except mbf.MBFError as e:
            assert covered, "a flip in padding at %d was refused: %s" % (pos, e)
            msg = str(e)
            assert "CRC mismatch" in msg or "corrupt header" in msg or "not an MBF" in msg \
                or "version" in msg or "too many" in msg or "truncated" in msg, msg
            caught += 1
            continue
        assert not covered, "flip at byte %d went unnoticed" % pos
        padding += 1
    assert caught > count * 3 // 4 and padding > 0, (caught, padding)


def test_data_corruption_is_named_by_read_into():
    s = _open(DATA).seg("blk.1.attn_v")
    bad = _fresh()
    bad[s.offset + 5] ^= 0x40
    with _open(bad) as r:
        buf = bytearray(s.length)
        e = testkit.raises(mbf.MBFError, r.read_into, "blk.1.attn_v", buf)
        assert "'blk.1.attn_v': CRC mismatch" in str(e)
        r.read_into("blk.1.attn_v", buf, False)  # verify=False reads it anyway
        assert buf[5] == _expected("blk.1.attn_v")[5] ^ 0x40
        testkit.raises(mbf.MBFError, r.verify_all)
        bufs = r.layer_buffers()
        r.load_layer(0, bufs)
        e = testkit.raises(mbf.MBFError, r.load_layer, 1, bufs)
        assert "blk.1.attn_v" in str(e)
    bad = _fresh()
    bad[_open(DATA).tok_offset] ^= 1
    e = testkit.raises(mbf.MBFError, _open(bad).read_tokenizer)
    assert "tokenizer: CRC" in str(e)


def _patched(fn):
    bad = _fresh()
    fn(bad)
    return ref.refresh_crc(bad)


def _entry(name, field, fmt, value):
    def fn(b):
        ref.put(b, ref.entry_at(b, ref.find_entry(b, name)) + field, fmt, value)
    return fn


def _rename(old, new):
    def fn(b):
        ref.set_name(b, ref.find_entry(b, old), new)
    return fn


def test_hostile_tables_are_refused_by_name():
    size = len(DATA)
    last = SEGS[-1][0]
    o = _open(DATA)
    prev_off = o.seg("blk.0.attn_k").offset
    cases = (
        (_entry(last, ref.E_OFFSET, "<I", (size + 31) // 32 * 32), "'%s' (offset|runs past the end" % last),
        (_entry("blk.0.attn_k.scales", ref.E_OFFSET, "<I", prev_off), "'blk.0.attn_k.scales' at offset|overlaps"),
        (_entry("blk.0.attn_k", ref.E_OFFSET, "<I", 0), "'blk.0.attn_k' at offset 0 overlaps"),
        (_entry("misc.u8", ref.E_OFFSET, "<I", o.seg("misc.u8").offset + 1), "not 32-byte aligned"),
        (_entry("misc.u8", ref.E_LENGTH, "<I", 8), "'misc.u8': length 8 does not match u8 x (7,) = 7"),
        (_entry("misc.u8", ref.E_LENGTH, "<I", 0xFFFFFFFF), "length 4294967295 does not match"),
        (_entry("misc.i32", ref.E_SHAPE, "<Q", 0), None),
        (_entry("blk.0.attn_q", ref.E_DTYPE, "B", 99), "'blk.0.attn_q': unknown dtype code 99"),
        (_entry("blk.0.attn_q", ref.E_NDIM, "B", 0), "0 dimensions"),
        (_entry("blk.0.attn_q", ref.E_NDIM, "B", 5), "5 dimensions"),
        (_entry("blk.0.attn_q", ref.E_NDIM, "B", 1), "unused dimension 1 is 16"),
        (_entry("blk.0.attn_q", ref.E_FLAGS, "<H", 4), "reserved flags"),
        (_entry("blk.0.attn_q", ref.E_SHAPE + 4, "<I", 0), "dimension 1 is 0"),
        (_entry("blk.0.attn_q", ref.E_SHAPE + 4, "<I", 24), "multiple of group_size 16"),
        (_rename("blk.0.attn_k.scales", "blk.0.attn_k"), "duplicate segment name 'blk.0.attn_k'"),
        (_rename("blk.0.attn_k", "zzz"), "not sorted by name: 'blk.0.attn_k.scales' after 'zzz'"),
        (_rename("misc.u8", b"m" * 32), "not NUL-terminated"),
        (_rename("misc.u8", b"misc.u\xff"), "not an allowed name character"),
        (_rename("misc.u8", b"misc u8"), "0x20"),
        (_rename("misc.u8", b"misc.u8\0x"), "after the name's NUL"),
        (_rename("misc.u8", b""), "empty name"),
        (_rename("token_embd.scales", "token_embd.scalez"), "'token_embd' has no 'token_embd.scales'"),
        (_rename("output_norm", "output_norm.scales"), "needs a q4 segment 'output_norm'"),
        (_entry("token_embd.scales", ref.E_DTYPE, "B", 6), "'token_embd.scales' must be f16 of shape (40, 1)"),
        (_rename("blk.0.ffn_up.scales", "blk.00.x"), "'blk.00.x': layer names are"),
        (_rename("blk.0.ffn_up.scales", "blk.0a.x"), "layer names are"),
        (_rename("blk.0.ffn_up.scales", "blk.01"), "'blk.01': layer names are"),
    )
    for fn, words in cases:
        bad = _patched(fn)
        if words is None:  # 4-dim shape (0, 0, 1, 3)
            words = "'misc.i32': dimension 0 is 0"
        _refused(bad, words)


def test_absurd_shapes_stop_before_their_product_grows():
    def huge(b):
        a = ref.entry_at(b, ref.find_entry(b, "misc.i32"))
        for k in range(4):
            ref.put(b, a + ref.E_SHAPE + 4 * k, "<I", 0xFFFFFFFF)
    _refused(_patched(huge), "'misc.i32': shape|more elements than the file could")

    def wraps32(b):  # 65536 x 65536 = 2**32: zero in 32-bit arithmetic, length 0 would "match"
        a = ref.entry_at(b, ref.find_entry(b, "misc.i16"))
        ref.put(b, a + ref.E_SHAPE, "<I", 65536)
        ref.put(b, a + ref.E_SHAPE + 4, "<I", 65536)
        ref.put(b, a + ref.E_SHAPE + 8, "<I", 0)
        ref.put(b, a + ref.E_NDIM, "B", 2)
        ref.put(b, a + ref.E_LENGTH, "<I", 0)
    _refused(_patched(wraps32), "more elements than the file could")


def test_header_fields_are_checked():
    _refused(b"", "truncated: file is 0 bytes")
    _refused(_patched(lambda b: ref.put(b, 0, "4s", b"GGUF")), "not an MBF file")
    _refused(_patched(lambda b: ref.put(b, ref.H_MAJOR, "<H", 2)), "MBF version 2.0 not supported")
    newer = _patched(lambda b: ref.put(b, ref.H_MINOR, "<H", 7))
    assert _open(newer).version == (1, 7)
    _refused(_patched(lambda b: ref.put(b, ref.H_NSEG, "<H", 5000)), "too many segments: 5000")
    _refused(_patched(lambda b: ref.put(b, ref.H_NCFG, "<H", 65)), "65 config entries")
    _refused(_patched(lambda b: ref.put(b, ref.H_NSEG, "<H", len(SEGS) - 1)), "corrupt header: metadata length")
    bad = _fresh()
    bad[100] ^= 4
    _refused(bad, "header CRC mismatch")
    _refused(_fresh(), "trailing data", mbf.DEFAULT_BUDGET, len(DATA) + 1)
    _refused(_patched(lambda b: ref.put(b, ref.H_TOKLEN, "<I", 1 << 30)), "tokenizer (offset")
    _refused(_patched(lambda b: ref.put(b, ref.H_TOKOFF, "<I", 0)), "tokenizer (offset 0")
    _refused(_patched(lambda b: ref.put(b, ref.H_TOKOFF, "<I", ref.u32(b, ref.H_TOKOFF) + 1)), "misaligned")
    _refused(_patched(lambda b: ref.put(b, ref.H_TOKLEN, "<I", 1000)), "overlaps what comes before")
    testkit.raises(mbf.MBFError, mbf.open, 42)
    testkit.raises(mbf.MBFError, _open, DATA, 100)


def _config_key(b, key):
    for e in range(ref.u16(b, ref.H_NCFG)):
        a = ref.config_at(b, e)
        n = 0
        while b[a + n]:
            n += 1
        if bytes(b[a:a + n]) == key:
            return a
    raise KeyError(key)


def _cfg(key, fn):
    def patch(b):
        fn(b, _config_key(b, key))
    return patch


def test_config_entries_are_checked():
    def rename(new):
        def fn(b, a):
            for k in range(15):
                b[a + k] = new[k] if k < len(new) else 0
        return fn

    def put_int(v):
        return lambda b, a: ref.put(b, a + 16, "<q", v)

    cases = (
        (_cfg(b"dim", rename(b"dix")), "missing key 'dim'"),
        (_cfg(b"dim", rename(b"seq_len")), "duplicate key 'seq_len'"),
        (_cfg(b"dim", rename(b"Dim")), "config entry 0"),
        (_cfg(b"dim", rename(b"d" * 15)), "not NUL-terminated"),
        (_cfg(b"dim", lambda b, a: ref.put(b, a + 15, "B", 2)), "'dim' must be an integer"),
        (_cfg(b"dim", lambda b, a: ref.put(b, a + 15, "B", 9)), "'dim': unknown value type 9"),
        (_cfg(b"norm_eps", lambda b, a: ref.put(b, a + 15, "B", 1)), "'norm_eps' must be a float"),
        (_cfg(b"norm_eps", lambda b, a: ref.put(b, a + 16, "<Q", 0x7FF8000000000000)), "'norm_eps' is NaN"),
        (_cfg(b"rope_theta", lambda b, a: ref.put(b, a + 16, "<Q", 0x7FF0000000000000)), "'rope_theta' is inf"),
        (_cfg(b"n_heads", put_int(0)), "'n_heads' is 0; expected 1..1024"),
        (_cfg(b"n_heads", put_int(-1 << 63)), "'n_heads' is -9223372036854775808"),
        (_cfg(b"n_kv_heads", put_int(3)), "n_heads 2 is not a multiple of n_kv_heads 3"),
        (_cfg(b"dim", put_int(17)), "dim 17 is not a multiple of n_heads 2"),
        (_cfg(b"sub_vocab", put_int(41)), "sub_vocab 41 exceeds vocab_size 40"),
        (_cfg(b"group_size", put_int(15)), "group_size 15 must be even"),
        (_cfg(b"n_layers", put_int(1)), "'blk.1.attn_k' names layer 1 but config n_layers is 1"),
    )
    for fn, words in cases:
        _refused(_patched(fn), words)
    # an unknown key of an unknown type comes from a newer minor version: skipped
    later = _patched(_cfg(b"x_future", lambda b, a: ref.put(b, a + 15, "B", 7)))
    r = _open(later)
    assert "x_future" not in r.config and r.config["dim"] == 16
    assert _open(DATA).config["x_future"] == 7


def test_budget_bounds_every_allocation():
    ns = len(SEGS)
    need = mbf.COST_FIXED + mbf.COST_CONFIG * len(ref.FIXTURE_CONFIG) + mbf.COST_SEGMENT * ns
    _refused(DATA, "budget: the config and %d-segment table need %d bytes, budget is %d" % (ns, need, need - 1),
             need - 1)
    r = _open(DATA, need + 100)
    assert r.used == need
    e = testkit.raises(mbf.MBFError, r.read, "token_embd")  # 320 bytes > 100 left
    assert "budget: segment 'token_embd' needs 320 bytes" in str(e)
    assert len(r.read("misc.u8")) == 7
    testkit.raises(mbf.MBFError, r.layer_buffers)
    layer = 0
    for part, dtype, shape in ref.LAYER_PARTS:
        layer += ref.nbytes(dtype, shape)
        if dtype == "q4":
            layer += ref.nbytes("f16", shape[:-1] + (shape[-1] // ref.GROUP,))
    plan = (2 * 2 + mbf.COST_PART) * 16  # 16 parts, 2 layers
    r = _open(DATA, need + plan + layer + 100)  # the plan and one buffer set
    assert sum(len(b) for b in r.layer_buffers()) == sum(r.layer_sizes()) == layer
    e = testkit.raises(mbf.MBFError, r.layer_buffers)  # a second set does not fit
    assert "budget: one layer's buffers need %d bytes" % layer in str(e)


def test_layer_sets_must_match_across_layers():
    bad = _patched(_rename("blk.1.ffn_up.scales", "blk.1.ffn_upx"))
    # blk.1.ffn_up now lacks its scales: open already refuses that
    _refused(bad, "'blk.1.ffn_up' has no")
    # a norm of a different dtype of the same size: open accepts, streaming refuses
    odd = _patched(_entry("blk.1.attn_norm", ref.E_DTYPE, "B", 8))  # f32 -> i32, same 64 bytes
    r = _open(odd)
    e = testkit.raises(mbf.MBFError, r.layer_parts)
    assert "layer 1 segment 'attn_norm' differs" in str(e)


def test_heap_use_stays_within_the_budget_accounting():
    if not testkit.IS_MP:
        testkit.skip("measured with gc.mem_alloc on MicroPython; tests/host/test_mbf_fuzz.py uses tracemalloc")
    before = testkit.heap_in_use()
    r = mbf.open(ref.FIXTURE_PATH, 16000)
    opened = testkit.heap_in_use() - before
    assert opened <= r.used, (opened, r.used)
    bufs = r.layer_buffers()
    both = testkit.heap_in_use() - before
    assert both <= r.used, (both, r.used)
    assert len(bufs) == 16 and both > sum(r.layer_sizes())
    print("MBF heap: open %d B, with layer buffers %d B; charged %d B" % (opened, both, r.used))
