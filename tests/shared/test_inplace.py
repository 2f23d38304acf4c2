# test_inplace.py: weights read in place (shared/mbf.py Reader.mem / view, shared/model_load.py): a model
# whose file is addressable (a ROMFS file in flash; here a buffer, and on the MicroPython unix port a VfsRom
# mounted from a ROMFS image) uses the file's bytes as its weight buffers, holds less heap by the weight
# bytes, plans no heap for them, and computes the same logits, bit for bit, as from a file.
import binascii
import gc
from array import array

import testkit

from shared import mbf  # noqa: I001

gc.collect()
from shared import memplan, model_load, ringkv  # noqa: E402

gc.collect()
from shared import llama  # noqa: E402

TINY = "tests/shared/data/tiny_llama.mbf"
ROMFS = "tests/shared/data/tiny_llama.romfs"  # tools/board/romfs.py's image of TINY (tests/host/test_romfs.py)
PIN = 0x5663A5EC  # test_llama.py's CRC of the fixture's logits over 40 decode steps on a 2+5+4 cache
N = 40
LAYER_Q4 = model_load.LAYER_Q4

try:
    from uctypes import addressof
except ImportError:
    addressof = None


def _data():
    with open(TINY, "rb") as f:
        return f.read()


def _kv():
    return ringkv.RingKV(2, 16, 2, 5, 4, "b", 2)


def _decode(m):
    rng = testkit.Rng(7)
    crc = 0
    for _ in range(N):
        m.step(rng.below(96))
        m.kv.commit(1)
        crc = binascii.crc32(m.logits, crc)
    return crc


def _weight_bytes(r):
    n = 0
    for name in r.names():
        if r.seg(name).dtype in ("q4", "q4a", "q8"):
            n += r.seg(name).length
    return n


def test_reader_over_a_buffer_views_segments_in_place():
    data = _data()
    r = mbf.open(data)
    assert r.mem is not None and len(r.mem) == len(data)
    for name in ("token_embd", "blk.1.ffn_down", "output_norm"):
        v = r.view(name)
        s = r.seg(name)
        assert len(v) == s.length and bytes(v) == data[s.offset:s.offset + s.length]
        assert bytes(v) == bytes(r.read(name))
        if addressof is not None:
            assert addressof(v) == addressof(data) + s.offset  # the buffer's own bytes, not a copy
    r.verify_all()  # CRCs over the same bytes
    with mbf.open(TINY) as f:  # a file (littlefs on a board, the OS's here) gives no buffer: copies
        assert f.mem is None and f.view("token_embd") is None
    testkit.raises(mbf.MBFError, r.view, "no_such_segment")
    r.close()
    assert r.mem is None


def test_in_place_weights_are_views_with_the_same_logits():
    data = _data()
    r = mbf.open(data)
    m = llama.Model(r, _kv())
    w = m.layers[1].wq
    s = r.seg("blk.1.attn_q")
    assert type(w.buf) is memoryview and len(w.buf) == s.length
    assert bytes(w.buf) == data[s.offset:s.offset + s.length]
    if addressof is not None:
        assert addressof(w.buf) == addressof(data) + s.offset
    elif not testkit.IS_MP:
        assert w.buf.obj is data  # CPython: a view of the caller's bytes
    assert type(w.scales) is bytearray  # scales are converted at load: in RAM
    assert type(m.emb.head.mat.buf) is memoryview  # the tied classifier / embedding table too
    assert _decode(m) == PIN  # bit for bit the file model's logits (test_llama.py pins them)
    toks = array("i", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8])

    def steps(t):
        for i in range(len(t)):
            m.step(t[i])
            m.kv.commit(1)

    steps(toks)  # warm up (numpy's weight cache on CPython)
    testkit.run_locked(steps, toks)  # decode steps over weights in place allocate nothing either


def test_in_place_model_holds_no_heap_for_its_weights():
    """The plan counts no weight bytes in place; on MicroPython the measured heap agrees."""
    data = _data()
    r = mbf.open(data)
    with mbf.open(TINY) as rf:
        p_file = memplan.layout(rf.config, 2, 5, 4, "resident", 64, memplan.native_word(), rf)
        assert not p_file.in_place
    p_rom = memplan.layout(r.config, 2, 5, 4, "resident", 64, memplan.native_word(), r)
    assert p_rom.in_place
    nib = _weight_bytes(r)
    saved = p_file.peak - p_rom.peak
    # each matrix's buffer loses its weight bytes (rounded to the heap's blocks)
    assert nib - 16 * len(LAYER_Q4) * 2 <= saved <= nib + 32 * 16, (saved, nib)
    # forced either way, whatever the reader
    assert memplan.layout(r.config, 2, 5, 4, "resident", 64, 8, r, in_place=False).peak == \
        memplan.layout(r.config, 2, 5, 4, "resident", 64, 8, None).peak
    if not testkit.IS_MP:
        return
    from shared import llama_fused  # noqa: F401  (the first model on the C kernels imports it: loaded before measuring)

    held = []
    for src in (TINY, data):
        rd = mbf.open(src)
        before = testkit.heap_in_use()
        m = llama.Model(rd, _kv())
        held.append(testkit.heap_in_use() - before)
        m = None
        rd.close()
        rd = None
    print("tiny model resident: %d B of heap from a file, %d B in place (weights %d B)" % (held[0], held[1], nib))
    assert held[0] - held[1] >= nib - 1024, held
    # the plan predicts the difference (what else the model holds is the same either way)
    assert abs((held[0] - held[1]) - saved) <= 1024, (held, saved)


def test_model_from_a_romfs_file_reads_flash_in_place():
    """The MicroPython unix port mounts a ROMFS image held in bytes (vfs.VfsRom), as the rp2 build mounts
    its flash partition at /rom: memoryview(f) of a file there is the image's bytes."""
    try:
        import vfs
        rom = vfs.VfsRom
    except (ImportError, AttributeError):
        testkit.skip("no vfs.VfsRom on this interpreter")
    with open(ROMFS, "rb") as f:
        image = f.read()
    vfs.mount(rom(image), "/rom_test")
    try:
        f = open("/rom_test/tiny_llama.mbf", "rb")
        r = mbf.open(f)
        assert r.mem is not None
        s = r.seg("blk.0.ffn_up")
        m = llama.Model(r, _kv())
        # the file's bytes are the image's (no copy), its data 32-aligned by the builder: segments stay so
        assert addressof(image) < addressof(r.mem) < addressof(image) + len(image)
        assert (addressof(r.mem) - addressof(image)) % 32 == 0
        assert addressof(m.layers[0].w3.buf) == addressof(r.mem) + s.offset
        assert _decode(m) == PIN
        f.close()
    finally:
        vfs.umount("/rom_test")


def test_unaligned_buffer_is_read_by_copying():
    """A file whose bytes start off a word (mpremote's own `romfs build` does not align files) is read
    into RAM as from littlefs: the viper kernels need word-aligned weights."""
    if addressof is None:
        testkit.skip("alignment is MicroPython's concern (uctypes)")
    data = _data()
    buf = bytearray(len(data) + 1)
    buf[1:] = data
    data = None
    r = mbf.open(memoryview(buf)[1:])
    assert r.mem is None and r.view("token_embd") is None
    gc.collect()
    m = llama.Model(r, _kv(), stream=True, out_rows=7)  # streamed: the test heap holds the image twice already
    assert _decode(m) == PIN
