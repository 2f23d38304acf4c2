# test_q4_int4_only.py: a symmetric-INT4 model loads and decodes without ever importing shared/q4a_q8.py
# (the asymmetric and INT8 forms), and the INT8 kernels reach the plain backend without q4a_q8 patching
# q4 (q4's kernels hand a Q8Matrix to its own methods), giving the integers they gave before that change.
import binascii
import sys
from array import array

import testkit
from shared import q4  # alone: q4 must not bring q4a_q8 with it (checked below on a clean slate)

TINY = "tests/shared/data/tiny_llama.mbf"  # q4, f16 and f32 segments only
# CRC-32 of the plain kernels' matvec and group_dots output on _q8_case(), measured with the code before
# q4a_q8 stopped setting q4.matvec8 / q4.group_dots8 (the same on CPython and MicroPython).
PIN_MATVEC8 = 0x87B2A65B
PIN_DOTS8 = 0x78BFB16A


def _forget_shared():
    """Take every shared.* module out of sys.modules (CPython runs all test files in one process, so the
    other tests' imports would be seen); returns them for _put_back. On MicroPython each test runs in a
    fresh interpreter where this module imported shared.q4 alone."""
    saved = {}
    for k in list(sys.modules):
        if k == "shared" or k.startswith("shared."):
            saved[k] = sys.modules.pop(k)
    return saved


def _put_back(saved):
    for k in list(sys.modules):
        if k == "shared" or k.startswith("shared."):
            del sys.modules[k]
    for k in saved:
        sys.modules[k] = saved[k]


def test_int4_model_never_imports_q4a_q8():
    saved = _forget_shared()
    try:
        from shared import q4 as fresh  # noqa: F401

        assert "shared.q4a_q8" not in sys.modules, "importing shared.q4 loaded shared.q4a_q8"
        from shared import kernels, llama, mbf, ringkv

        r = mbf.open(TINY)
        try:
            m = llama.Model(r, ringkv.RingKV(2, 16, 2, 5, 4, "b", 2))
            crcs = {}
            try:
                for name in kernels.available():  # the plain backend too: q4's kernels are where Q8 is dispatched
                    kernels.use(name)
                    m.kv.reset()
                    crc = 0
                    for tok in (3, 41, 7, 95, 0):
                        m.step(tok)
                        m.kv.commit(1)
                        crc = binascii.crc32(m.logits, crc)
                    crcs[name] = crc
            finally:
                kernels.use()
        finally:
            r.close()
        assert "plain" in crcs and len(set(crcs.values())) == 1, crcs
        assert "shared.q4a_q8" not in sys.modules, "a q4-only model loaded shared.q4a_q8"
    finally:
        _put_back(saved)


def _q8_case():
    from shared import q4a_q8

    rng = testkit.Rng(41)
    m = q4a_q8.Q8Matrix(5, 96)
    b = m.buf
    for i in range(m.nib_bytes):
        b[i] = rng.below(256)
    for o in range(m.nib_bytes, len(b), 2):
        h = 0x2000 + rng.below(0x1400)
        b[o] = h & 255
        b[o + 1] = h >> 8
    m.prepare()
    x = array("i", [(rng.below(1 << 20) - (1 << 19)) << rng.below(4) for _ in range(96)])
    return m, x, q4.QAct(96)


def test_int8_kernels_without_patching_q4():
    from shared import kernels
    from shared.q4 import GROUP

    m, x, act = _q8_case()  # imports q4a_q8
    assert not hasattr(q4, "matvec8") and not hasattr(q4, "group_dots8"), "q4a_q8 patched q4"
    out = array("i", bytes(4 * m.rows))
    gd = array("i", bytes(4 * m.ng))
    got = {}
    try:
        for name in kernels.available():
            kernels.use(name)
            kernels.quantize_act(act, x)
            kernels.matvec(out, m, act)
            dots = []
            for r in range(m.rows):
                kernels.group_dots(gd, m, r, act)
                dots.extend(gd)
            got[name] = (list(out), dots)
    finally:
        kernels.use()
    plain_out, plain_dots = got["plain"]
    for name in got:
        assert got[name] == got["plain"], (name, got[name], got["plain"])
    # the documented formula, from the weights (int8) and the quantised activations
    info = act.info
    for r in range(m.rows):
        t = 0
        for g in range(m.ng):
            want = 0
            for c in range(g * GROUP, (g + 1) * GROUP):
                want += m.weight(r, c) * act.value(c)
            assert plain_dots[r * m.ng + g] == want, (r, g)
            s = info[q4.I_HDR + g]
            if s <= 30:
                t += (want * m.scale(r, g) + ((1 << s) >> 1)) >> s
        assert plain_out[r] == q4.shift_sat(t, info[q4.I_EH] - m.wshift), r
    assert binascii.crc32(array("i", plain_out)) == PIN_MATVEC8, hex(binascii.crc32(array("i", plain_out)))
    assert binascii.crc32(array("i", plain_dots)) == PIN_DOTS8, hex(binascii.crc32(array("i", plain_dots)))
