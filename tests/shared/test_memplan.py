# test_memplan.py: the memory planner (shared/memplan.py, shared/memfit.py): liveness sharing, the
# streaming choice, the refusal when nothing fits, bad input, and Model built from every plan.
import binascii
import gc
from array import array

import testkit

from shared import mbf  # noqa: I001

gc.collect()
from shared import model_load, ringkv  # noqa: E402

gc.collect()
from shared import llama, memfit, memplan  # noqa: E402

ModelError = model_load.ModelError
TINY = "tests/shared/data/tiny_llama.mbf"
PIN = 0x5663A5EC  # test_llama.py's CRC of the fixture's logits over _tokens(40) on a 2+5+4 cache
N = 40
_READER = []


def _reader():
    if not _READER:
        _READER.append(mbf.open(TINY))
    return _READER[0]


def _conf():
    return _reader().config


def _tokens(n, seed=7):
    rng = testkit.Rng(seed)
    out = array("i", bytearray(4 * n))
    for i in range(n):
        out[i] = rng.below(96)
    return out


def _profile(heap, sink=4, window=28, staged=8):
    return {"name": "test_board", "description": "a board profile for the planner's tests",
            "flavour": "micropython", "mpy_arch": "armv6m", "native": True, "threads": False,
            "heap_bytes": heap, "flash_bytes": 2097152, "fs_bytes": 1048576, "psram_bytes": 0,
            "uart": {"id": 0, "tx": 0, "rx": 1, "baud": 115200, "rxbuf": 1024},
            "kv": {"sink": sink, "window": window, "staged": staged}, "draft_k": 4, "model": "m.mbf"}


def _big_conf():
    """An SmolLM2-135M-shaped config (dim 576, 30 layers, 9/3 heads, vocabulary 49152)."""
    c = dict(_conf())
    c.update(dim=576, hidden_dim=1536, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64,
             vocab_size=49152, seq_len=2048)
    return c


def _by_name(p):
    out = {}
    for i in range(len(p.names)):
        out[p.names[i]] = i
    return out


def test_arenas_share_only_buffers_never_live_together():
    for mode in memplan.MODES:
        p = memplan.layout(_conf(), 4, 28, 8, mode, 16, 4)
        n = len(p.names)
        for i in range(n):
            for j in range(i + 1, n):
                if p.arena[i] >= 0 and p.arena[i] == p.arena[j]:
                    assert p.kind[i] == p.kind[j]
                    apart = p.offset[i] + p.data[i] <= p.offset[j] or p.offset[j] + p.data[j] <= p.offset[i]
                    assert apart or p.last[i] < p.first[j] or p.last[j] < p.first[i], (p.names[i], p.names[j])
            if p.arena[i] >= 0:  # an arena holds its members
                assert p.arenas[p.arena[i]][1] >= p.offset[i] + p.data[i]
                assert p.offset[i] % 4 == 0
        ix = _by_name(p)
        # live together: the FFN's two hidden buffers, the residual and the scores
        for a, b in (("hb", "hb2"), ("x", "xb"), ("x", "hb"), ("scores.0", "scores.1"), ("q", "kvb")):
            assert p.arena[ix[a]] != p.arena[ix[b]], (mode, a, b)
        # never live together: attention scores and the FFN buffers, the query and the attention output
        assert p.arena[ix["hb"]] in (p.arena[ix["scores.0"]], p.arena[ix["scores.1"]], p.arena[ix["q"]])
        # the public logits are a whole arena of exactly their size
        lg = p.arena[ix["logits"]]
        assert p.arenas[lg][1] == p.data[ix["logits"]] == 4 * 96
        solo = memplan.layout(_conf(), 4, 28, 8, mode, 16, 4, share=False)
        assert solo.peak > p.peak and solo.arenas == [] and min(solo.arena) == -1


def test_streamed_buffers_follow_the_mode():
    c = memplan.config(_big_conf())
    shapes = model_load.layer_shapes(c)
    nib = [shapes[q][0] * shapes[q][1] // 2 for q in model_load.LAYER_Q4]
    peaks = []
    for mode in memplan.MODES:
        p = memplan.layout(c, 4, 28, 8, mode, 64, 4)
        peaks.append(p.peak)
        chunk = [a[1] for a in p.arenas if a[0] == memplan.BYTES]
        if mode == "resident":
            assert chunk == []
        elif mode == "layer":  # every matrix of a layer at once: side by side
            assert chunk == [sum(nib)]
        elif mode == "phase":  # the attention's matrices over the FFN's
            assert chunk == [max(sum(nib[:4]), sum(nib[4:]))] and chunk[0] == sum(nib[4:])
        else:  # one matrix at a time: one buffer of the largest
            assert chunk == [max(nib)]
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3], peaks
    # the classifier's block: out_rows rows of nibbles and their int32 outputs, plus one scale view per
    # block. Fewer rows per block save memory on a small vocabulary; on 49152 rows the views dominate.
    mid = memplan.config(_mid_conf())
    a = memplan.layout(mid, 4, 28, 8, "matrix", 64, 4)
    b = memplan.layout(mid, 4, 28, 8, "matrix", 8, 4)
    views = (512 // 8 - 512 // 64) * 16 + (512 // 8 - 512 // 64) * 4
    assert a.peak - b.peak == (64 - 8) * (64 + 4) - views, (a.peak - b.peak, views)
    assert memplan.layout(c, 4, 28, 8, "matrix", 8, 4).peak > memplan.layout(c, 4, 28, 8, "matrix", 64, 4).peak
    assert b.out_rows == 8 and memplan.layout(_conf(), 4, 28, 8, "matrix", 500, 4).out_rows == 96


def _mid_conf():
    c = dict(_conf())
    c.update(dim=128, hidden_dim=384, n_layers=4, vocab_size=512, head_dim=32)
    return c


def test_fit_chooses_the_fastest_plan_that_fits():
    c = _mid_conf()

    def peak(mode, rows):
        return memplan.layout(c, 4, 28, 8, mode, rows, 4).load_peak

    def fit(heap):  # the whole heap for the plan: no reserve, no margin, any block size
        return memfit.fit(c, _profile(heap), reserve=0, margin=0, max_block_pct=100)

    assert fit(64 << 20).mode == "resident"
    for mode in ("resident", "layer", "phase", "matrix"):
        p = fit(peak(mode, 64))  # a budget of exactly this plan's peak: this plan
        assert (p.mode, p.out_rows, p.load_peak, p.budget) == (mode, 64 if mode != "resident" else 512,
                                                              peak(mode, 64), peak(mode, 64))
    p = fit(peak("layer", 64) - 1)  # a byte short: the same mode with fewer classifier rows per block
    assert (p.mode, p.out_rows) == ("layer", 32)
    # the smallest plan: matrix mode, and the block size where the block and its scale views cost least
    sizes = [(peak("matrix", 1 << k), 1 << k) for k in range(7)]
    small, rows = min(sizes)
    assert 1 < rows < 64, sizes  # 64 rows cost more block, 1 row more views
    p = fit(small)
    assert (p.mode, p.out_rows, p.load_peak) == ("matrix", rows, small)
    e = testkit.raises(ModelError, fit, small - 1)
    assert "no memory plan fits test_board" in str(e) and "short by 1 bytes" in str(e), str(e)
    assert "(mode matrix, %d classifier rows per block) needs %d" % (rows, small) in str(e), str(e)
    # the default reserve and margin: 10% of the heap and the 32-bit reserve come off the budget. The
    # vboard test's streamed model (dim 64, hidden 128, 2 layers, 96 tokens) is resident on a Pico (32-bit
    # objects, no 64-bit runtime beside it); 4 such layers stream per layer, 8 with 16 rows per block (32 before
    # the C kernels' bindings were counted: 2 KB more for 8 layers)
    b = dict(_conf())
    b.update(dim=64, hidden_dim=128, n_layers=2, head_dim=16)
    p = memfit.fit(b, _profile(196608))
    assert p.budget == 196608 - memfit.RESERVE[4] - 19660 and p.load_peak <= p.budget
    assert p.mode == "resident"
    b["n_layers"] = 4
    assert (memfit.fit(b, _profile(196608)).mode, memfit.fit(b, _profile(196608)).out_rows) == ("layer", 64)
    b["n_layers"] = 8
    p = memfit.fit(b, _profile(196608))
    assert (p.mode, p.out_rows) == ("layer", 16) and memfit.fit(b, _profile(400000)).mode == "resident"
    e = testkit.raises(ModelError, memfit.fit, _big_conf(), _profile(196608))
    assert "short by" in str(e) and "(mode matrix, 64 classifier rows per block)" in str(e), str(e)


def test_fit_refuses_a_plan_whose_largest_block_is_over_its_share_of_the_heap():
    c = _mid_conf()
    lay = memplan.layout(c, 4, 28, 8, "layer", 64, 4)
    heap = lay.load_peak
    pct = lay.largest * 100 // heap  # layer's arena is just over this share of the heap
    assert memfit.fit(c, _profile(heap), reserve=0, margin=0, max_block_pct=pct + 1).mode == "layer"
    p = memfit.fit(c, _profile(heap), reserve=0, margin=0, max_block_pct=pct)
    assert p.mode in ("phase", "matrix") and p.largest <= heap * pct // 100 == p.max_block, (p.mode, p.largest)
    # room for every plan, but each one's largest block over the limit: one line that says so
    e = testkit.raises(ModelError, memfit.fit, c, _profile(heap), None, 0, 0, None, memplan.MODES, 1)
    assert "needs one block of" in str(e) and "(1%% of heap %d)" % heap in str(e), str(e)


def test_bad_input_is_refused_clearly():
    conf = _conf()
    bad = dict(conf)
    del bad["hidden_dim"]
    cases = (
        (memplan.layout, ("not a config", 4, 28, 8), "model_load.Config or an MBF config dict"),
        (memplan.layout, (bad, 4, 28, 8), "lacks key"),
        (memplan.layout, (conf, 4, 28, 8, "tiles"), "mode must be one of resident, layer, phase, matrix"),
        (memplan.layout, (conf, -1, 28, 8), "sink must be an int"),
        (memplan.layout, (conf, 4, 0, 8), "window must be an int"),
        (memplan.layout, (conf, 4, 28, 8, "matrix", 0), "out_rows must be an int"),
        (memplan.layout, (conf, 4, 28, 8, "resident", 64, 5), "word must be 4"),
        (memplan.layout, (conf, 4, 36, 8), "beyond the model's seq_len 40"),
        (memfit.fit, (conf, {"name": "x"}), "missing field"),
        (memfit.fit, (conf, _profile(196608), None, 95), "margin must be an int in 0..90"),
        (memfit.fit, (conf, _profile(196608), None, 10, 1 << 20), "reserve must be an int in 0..196608"),
        (memfit.fit, (conf, _profile(196608), None, 10, None, None, ()), "at least one mode"),
    )
    for fn, args, what in cases:
        e = testkit.raises(ValueError, fn, *args)
        assert what in str(e), (what, str(e))
    # a plan for another cache or another model is refused by Model
    r = _reader()
    kv = ringkv.RingKV(2, 16, 2, 5, 4, "b", 2)
    e = testkit.raises(ModelError, llama.Model, r, kv, False, 64, True, None, memplan.layout(conf, 2, 6, 4))
    assert "the plan is for a 2+6+4 cache, the RingKV is 2+5+4" in str(e)
    other = dict(conf)
    other["hidden_dim"] = 96
    e = testkit.raises(ModelError, llama.Model, r, kv, False, 64, True, None, memplan.layout(other, 2, 5, 4))
    assert "the plan is for a model shaped" in str(e)
    e = testkit.raises(ModelError, llama.Model, r, kv, False, 64, True, None, "matrix")
    assert "plan must be a memplan.Plan" in str(e)
    e = testkit.raises(ModelError, llama.Model, r, kv, "tiles")
    assert "stream must be True, False or one of" in str(e)


def _decode(m, toks):
    crc = 0
    for i in range(len(toks)):
        m.step(toks[i])
        m.kv.commit(1)
        crc = binascii.crc32(m.logits, crc)
    return crc


def test_every_plan_runs_the_same_model():
    """Each mode with shared arenas (and one without): the pinned logits of test_llama, feed(T) +
    commit equal to T single steps, decode steps under heap_lock, and (MicroPython) the heap the model
    and its cache hold within 1 KB + 5% of the plan's peak for this interpreter's word size."""
    toks = _tokens(N)
    word = memplan.native_word()
    for mode, share in (("resident", True), ("layer", True), ("phase", True), ("matrix", True), ("phase", False)):
        r = mbf.open(TINY)
        r.layer_parts()  # the reader's layer index, built now: the measurement below leaves it out
        before = testkit.heap_in_use()
        kv = ringkv.RingKV(2, 16, 2, 5, 4, "b", 2)
        h_kv = testkit.heap_in_use()
        plan = memplan.layout(r.config, 2, 5, 4, mode, 7, word, r, share)
        h_plan = testkit.heap_in_use()  # the plan object stays referenced: measure around it
        m = llama.Model(r, kv, plan=plan)
        held = testkit.heap_in_use()
        peak = plan.peak
        if mode != "resident":
            peak -= plan.heap[plan.index("reader layer index")]
        assert m.mode == mode
        if before is not None:
            got = (h_kv - before) + (held - h_plan)
            assert abs(got - peak) <= 1024 + peak // 20, (mode, share, got, peak)
            print("%s%s: plan %d B, measured %d B" % (mode, "" if share else " (unshared)", peak, got))
        plan = None
        crc = testkit.run_locked(lambda t: _decode(m, t), toks)
        assert crc == PIN, (mode, share, hex(crc))
        m.kv.reset()
        batch = array("i", bytearray(4 * 4 * m.n_out))
        m.feed(toks, 4, batch)
        m.kv.commit(4)
        crc_b = binascii.crc32(batch)
        m.kv.reset()
        crc_s = 0
        for i in range(4):
            m.step(toks[i])
            m.kv.commit(1)
            crc_s = binascii.crc32(m.logits, crc_s)
        assert crc_b == crc_s, (mode, share)
        r.close()
        m = kv = batch = None


def test_step_numbers_agree_with_the_forward():
    """llama.py keeps its own const copies of the load points (no module lookups in the step)."""
    if testkit.IS_MP:
        testkit.skip("underscore consts are compiled away on MicroPython")
    for name in ("T_ANORM", "T_WQ", "T_WK", "T_WV", "T_WO", "T_FNORM", "T_W1", "T_W3", "T_W2"):
        assert getattr(llama, "_" + name) == getattr(memplan, name), name
    steps = memplan.STEPS.split()
    assert len(steps) == memplan.N_STEPS and steps[memplan.T_WO] == "wo" and steps[memplan.T_END] == "after"
