# memfit.py: the fastest memory plan (shared/memplan.py) whose peak fits a board profile's heap.
import gc
import sys

from shared import memplan, profile
from shared.model_load import ModelError

MARGIN_PCT = 10  # of the heap, kept free besides the plan (fragmentation, the application's objects)
# The largest single buffer or arena of a plan, at most this share of the heap: it needs one contiguous
# block after the node's boot objects. Measured on the emulated Pico (241,840 B free at boot, code frozen):
# the draft's `layer` arena of 73,744 B (30% of the heap) failed to allocate in the node; its `matrix`
# plan (largest 16,400 B, 7%) loads and drafts.
MAX_BLOCK_PCT = 20
# What the heap holds besides the plan: the interpreter's own objects, the imported runtime (.mpy), the
# MBF reader and the plan object itself. 64-bit: measured on the virtual board (~126 KB with a reader,
# docs/BOARDS.md, + the plan); 32-bit: 80 KB kept over the 54,400 B a drafting node holds besides its model
# on the emulated RP2040 with the code frozen (docs/BOARDS.md); from .mpy files on stock firmware the
# code itself takes ~174 KB of heap and no drafting plan fits.
# Both include the C kernels (q4nat.mpy, linked into the heap at import): about 11 KB on x64, 11 KB on armv6m
# (the 64-bit figure grew by 12 KB with them; the 32-bit one still covers the node's 65 KB).
RESERVE = {8: 148 * 1024, 4: 80 * 1024}


def word_of(arch):
    """Object word size of an mpy arch: 8 for x64 (the virtual board), 4 for the boards."""
    return 8 if arch == "x64" else 4


def fit(cfg, prof, word=None, margin=MARGIN_PCT, reserve=None, reader=None, modes=memplan.MODES,
        max_block_pct=MAX_BLOCK_PCT, in_place=None):
    """The first layout, in modes order (fastest first), then from 64 classifier rows per block down
    to 1, whose load peak (the step's peak plus the largest construction temporary) fits the budget:
    the profile's heap less the reserve and margin% of the heap, and whose largest buffer is at most
    max_block_pct of the heap. in_place: the weights stay in flash (the model in the board's ROMFS: a
    resident plan then holds scales only; None: as reader reads, see memplan.layout). Sets p.board, p.heap_bytes, p.reserve, p.margin, p.budget, p.max_block on
    it. ModelError, saying by how much, when even the smallest does not fit. cfg: a model_load.Config or MBF config dict; prof: a board profile dict (shared/profile.py)."""
    prof = profile.validate(prof)
    if word is None:
        word = word_of(prof["mpy_arch"])
    if reserve is None:
        reserve = RESERVE.get(word, 0)
    memplan.check_int("margin", margin, 0, 90)
    heap = prof["heap_bytes"]
    memplan.check_int("reserve", reserve, 0, heap)
    if not modes:
        raise ModelError("fit needs at least one mode of %s" % (memplan.MODES,))
    budget = heap - reserve - heap * margin // 100
    memplan.check_int("max_block_pct", max_block_pct, 1, 100)
    max_block = heap * max_block_pct // 100
    kv = prof["kv"]
    c = memplan.config(cfg)
    best = None
    for mode in modes:
        b = 1 if mode == "resident" else (64 if c.n_out > 64 else c.n_out)
        while b >= 1:
            p = memplan.layout(c, kv["sink"], kv["window"], kv["staged"], mode, b, word, reader, in_place=in_place)
            if best is None or p.load_peak < best.load_peak:
                best = p
            if p.load_peak <= budget and p.largest <= max_block:
                # Build it again after a collection: the search's garbage gone, the plan the Model is
                # built from lies low in the heap instead of pinning holes among it (MicroPython).
                p = best = None
                if sys.implementation.name != "cpython":
                    gc.collect()
                p = memplan.layout(c, kv["sink"], kv["window"], kv["staged"], mode, b, word, reader, in_place=in_place)
                p.board = prof["name"]
                p.heap_bytes = heap
                p.reserve = reserve
                p.margin = margin
                p.budget = budget
                p.max_block = max_block
                return p
            b >>= 1
    if best.load_peak <= budget:
        raise ModelError("no memory plan fits %s: the smallest (mode %s, %d classifier rows per block) needs one "
                         "block of %d bytes, more than the %d (%d%% of heap %d) a plan may take in one piece"
                         % (prof["name"], best.mode, best.out_rows, best.largest, max_block, max_block_pct, heap))
    raise ModelError("no memory plan fits %s: the smallest (mode %s, %d classifier rows per block) needs %d "
                     "bytes, the budget is %d (heap %d - reserve %d - %d%% margin): short by %d bytes"
                     % (prof["name"], best.mode, best.out_rows, best.load_peak, budget, heap, reserve, margin,
                        best.load_peak - budget))
