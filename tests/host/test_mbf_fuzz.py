"""Structure-aware fuzzing of the MBF reader (CPython): only MBFError, no hang, allocations within budget.

Each case mutates a valid file: fields of the header, config and segment table set to boundary values
(then the header CRC is recomputed so the parser's deeper checks are reached), table entries swapped,
copied, renamed or dropped, and raw byte damage (flips, truncation, insertion). Every file is then opened
and, if accepted, used through the whole API. Run alone to see throughput:
    .venv/bin/python -m pytest -s tests/host/test_mbf_fuzz.py
"""

from __future__ import annotations

import io
import json
import os
import math
import random
import re
import struct
import sys
import time
import tracemalloc

import pytest
from collections import Counter
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "shared"))
sys.path.insert(0, str(ROOT))

import mbf_ref as ref  # noqa: E402

from shared import mbf  # noqa: E402
from tools.formats.mbf_write import build  # noqa: E402

FIXTURE = (ROOT / ref.FIXTURE_PATH).read_bytes()
CASES = int(os.environ.get("MBF_FUZZ_CASES", "12000"))
# Python-object overhead the budget does not count (exceptions, tracebacks, descriptors, message
# strings): a constant, independent of what the file claims.
SLACK = 12 * 1024


def big_file(n_segments: int = 600) -> bytes:
    """A valid file with many small segments: its table alone is far larger than the small budgets."""
    cfg = dict(ref.FIXTURE_CONFIG, n_layers=1)
    segs = [("t.%04d" % i, "u8", (1 + i % 5,), bytes([i & 0xFF]) * (1 + i % 5)) for i in range(n_segments)]
    return build(cfg, b"tok", segs)


BIG = big_file()


def weights_file() -> bytes:
    """A valid file with the grouped-weight dtypes besides q4: q4a (+ .scales, .mins) and q8 (+ .scales)."""
    cfg = dict(ref.FIXTURE_CONFIG, n_layers=1)
    g = cfg["group_size"]
    segs = [("blk.0.attn_q", "q4a", (4, 2 * g), bytes(range(4 * g))),
            ("blk.0.attn_q.mins", "f16", (4, 2), bytes(range(16))),
            ("blk.0.attn_q.scales", "f16", (4, 2), bytes(range(16, 32))),
            ("blk.0.ffn_up", "q4", (2, g), bytes(g)), ("blk.0.ffn_up.scales", "f16", (2, 1), bytes(4)),
            ("token_embd", "q8", (3, 2 * g), bytes(range(6 * g))),
            ("token_embd.scales", "f16", (3, 2), bytes(12))]
    return build(cfg, b"tok", segs)


WEIGHTS = weights_file()

HEADER_FIELDS = [(ref.H_MAJOR, "<H"), (ref.H_MINOR, "<H"), (ref.H_META, "<I"), (ref.H_NCFG, "<H"),
                 (ref.H_NSEG, "<H"), (ref.H_TOKOFF, "<I"), (ref.H_TOKLEN, "<I"), (ref.H_TOKCRC, "<I"),
                 (ref.H_FILELEN, "<I")]
ENTRY_FIELDS = [(ref.E_DTYPE, "B"), (ref.E_NDIM, "B"), (ref.E_FLAGS, "<H"), (ref.E_SHAPE, "<I"),
                (ref.E_SHAPE + 4, "<I"), (ref.E_SHAPE + 8, "<I"), (ref.E_SHAPE + 12, "<I"),
                (ref.E_OFFSET, "<I"), (ref.E_LENGTH, "<I"), (ref.E_CRC, "<I")]
NAMES = ["blk.0.attn_q", "blk.0.attn_q.scales", "blk.0.attn_q.mins", "token_embd.mins", "x.mins", "blk.1.ffn_up", "blk.2.x", "blk.00.x", "blk..x", "blk.1",
         "token_embd", "token_embd.scales", "zzz", "a", ".scales", "x.scales", "misc.u8", "output_norm"]
FLOATS = [0.0, -1.0, 1.0, 0.1, 1e-5, 1e9, 1e9 + 1, 1e-300, 1e300, 5e-324, math.nan, math.inf, -math.inf]


def interesting(rng: random.Random, bits: int, cur: int, size: int) -> int:
    top = (1 << bits) - 1
    choices = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 255, 256, 4096, 4097, 65535, 65536,
               top, top - 1, top >> 1, (top >> 1) + 1, size, size - 1, size + 1, size + 32, size // 2,
               cur + 1, cur - 1, cur + 32, cur - 32, cur * 2, cur // 2, cur ^ (1 << rng.randrange(bits)),
               rng.getrandbits(bits)]
    return rng.choice(choices) & top


def _entries(buf: bytearray) -> tuple[int, int, int]:
    nc, ns = ref.u16(buf, ref.H_NCFG), ref.u16(buf, ref.H_NSEG)
    return nc, ns, 32 + 24 * nc


def mutate_header(buf: bytearray, rng: random.Random) -> None:
    off, fmt = rng.choice(HEADER_FIELDS)
    bits = struct.calcsize(fmt) * 8
    ref.put(buf, off, fmt, interesting(rng, bits, struct.unpack_from(fmt, buf, off)[0], len(buf)))


def mutate_config(buf: bytearray, rng: random.Random) -> None:
    nc, _ns, _t = _entries(buf)
    if nc == 0 or 32 + 24 * nc > len(buf):
        return mutate_header(buf, rng)
    a = 32 + 24 * rng.randrange(nc)
    what = rng.randrange(5)
    if what == 0:
        ref.put(buf, a + 16, "<q", rng.choice([0, 1, -1, 2, 3, 15, 17, 41, 1 << 20, 1 << 62, -(1 << 63),
                                               (1 << 63) - 1, rng.getrandbits(63)]))
    elif what == 1:
        ref.put(buf, a + 16, "<d", rng.choice(FLOATS))
    elif what == 2:
        buf[a + 15] = rng.choice([0, 1, 2, 3, 255])
    elif what == 3:  # key: another known key (duplicates), a random one, or unterminated
        key = rng.choice([s[0] for s in mbf.CONFIG] + ["x", "Dim", "d" * 15, ""]).encode()
        buf[a:a + 15] = key[:15].ljust(15, b"\0")
    else:
        buf[a + rng.randrange(15)] = rng.randrange(256)


def mutate_entry(buf: bytearray, rng: random.Random) -> None:
    _nc, ns, t = _entries(buf)
    if ns == 0 or t + 64 * ns > len(buf):
        return mutate_header(buf, rng)
    i = rng.randrange(ns)
    a = t + 64 * i
    what = rng.randrange(10)
    if what < 5:
        off, fmt = rng.choice(ENTRY_FIELDS)
        bits = struct.calcsize(fmt) * 8
        j = t + 64 * rng.randrange(ns)  # values of other entries make plausible overlaps and duplicates
        cur = struct.unpack_from(fmt, buf, (a if rng.random() < 0.7 else j) + off)[0]
        ref.put(buf, a + off, fmt, interesting(rng, bits, cur, len(buf)))
    elif what == 5:  # rename to a plausible name, or to another entry's name
        if rng.random() < 0.5:
            ref.set_name(buf, i, rng.choice(NAMES).encode())
        else:
            j = t + 64 * rng.randrange(ns)
            buf[a:a + 32] = bytes(buf[j:j + 32])
    elif what == 6:  # random name bytes, possibly unterminated
        n = rng.randrange(33)
        buf[a:a + 32] = bytes(rng.choice(b"abz.09_-\xff \0") for _ in range(n)).ljust(32, b"\0")
    elif what == 7:  # swap two entries
        j = t + 64 * rng.randrange(ns)
        buf[a:a + 64], buf[j:j + 64] = bytes(buf[j:j + 64]), bytes(buf[a:a + 64])
    elif what == 8:  # copy one entry over another
        j = t + 64 * rng.randrange(ns)
        buf[a:a + 64] = bytes(buf[j:j + 64])
    else:  # consistent shape change: new dims and a matching length
        ndim = rng.randint(1, 4)
        dims = [rng.choice([1, 2, 3, 16, 32, 65536, 0xFFFFFFFF]) for _ in range(ndim)] + [0] * (4 - ndim)
        buf[a + ref.E_NDIM] = ndim
        struct.pack_into("<4I", buf, a + ref.E_SHAPE, *dims)
        count = math.prod(dims[:ndim])
        width = mbf.DTYPES.get(buf[a + ref.E_DTYPE], ("u8", 1))[1]
        ref.put(buf, a + ref.E_LENGTH, "<I", (count // 2 if width == 0 else count * width) & 0xFFFFFFFF)


def drop_entry(buf: bytearray, rng: random.Random) -> None:
    """Remove a config or table entry consistently: later entries move up, counts and meta_len follow
    (the freed bytes become padding before the tokenizer, so data offsets stay valid)."""
    nc, ns, t = _entries(buf)
    meta = ref.meta_len(buf)
    if meta + 4 > len(buf) or meta != t + 64 * ns:
        return mutate_header(buf, rng)
    if rng.random() < 0.3 and nc:
        a, width, field = 32 + 24 * rng.randrange(nc), 24, ref.H_NCFG
    elif ns:
        a, width, field = t + 64 * rng.randrange(ns), 64, ref.H_NSEG
    else:
        return
    buf[a:meta] = bytes(buf[a + width:meta]) + bytes(width)
    ref.put(buf, field, "<H", ref.u16(buf, field) - 1)
    ref.put(buf, ref.H_META, "<I", meta - width)


def raw_damage(buf: bytearray, rng: random.Random) -> bytearray:
    what = rng.randrange(6)
    if what == 0:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif what == 1:
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif what == 2:
        del buf[rng.randrange(len(buf)):]
    elif what == 3:
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif what == 4:
        at = rng.randrange(len(buf))
        buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    else:
        at = rng.randrange(len(buf))
        del buf[at:at + rng.randint(1, 40)]
    if len(buf) >= 32 and rng.random() < 0.5:  # make the size claim agree so deeper checks run
        ref.put(buf, ref.H_FILELEN, "<I", len(buf))
    return buf


MUTATORS: list[tuple[Callable[[bytearray, random.Random], object], int]] = [
    (mutate_header, 2), (mutate_config, 3), (mutate_entry, 8), (drop_entry, 2), (raw_damage, 3)]


def mutant(base: bytes, rng: random.Random) -> bytearray:
    buf = bytearray(base)
    funcs = [f for f, w in MUTATORS for _ in range(w)]
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        out = rng.choice(funcs)(buf, rng)
        if isinstance(out, bytearray):
            buf = out
        if len(buf) < 32:  # the header itself is cut: nothing left to mutate structurally
            return buf
    if rng.random() < 0.92:
        ref.refresh_crc(buf)
    return buf


def _try(fn: Callable, *args) -> bool:
    try:
        fn(*args)
        return True
    except mbf.MBFError:
        return False


def check_accepted(r: mbf.Reader) -> None:
    """What the reader accepted really is a sound table."""
    end = r.tok_offset + r.tok_length
    assert r.tok_offset % 32 == 0 and end <= r.size
    prev = ""
    for i in range(r.n):
        s = r.seg(r.name(i))
        assert s.name > prev and 1 <= len(s.shape) <= 4 and s.offset % 32 == 0
        assert s.offset >= end and s.offset + s.length <= r.size
        count = math.prod(s.shape)
        width = {"q4": 0, "q4a": 0, "q8": 1}.get(s.dtype, ref.SIZES.get(s.dtype))
        assert s.length == (count // 2 if width == 0 else count * width)
        if s.dtype in ("q4", "q4a", "q8"):
            parts = (".scales", ".mins") if s.dtype == "q4a" else (".scales",)
            for part in parts:
                sc = r.seg(s.name + part)
                assert sc.dtype == "f16" and sc.shape == s.shape[:-1] + (s.shape[-1] // r.config["group_size"],)
        if s.name.endswith(".mins"):
            assert r.seg(s.name[:-5]).dtype == "q4a"
        end, prev = s.offset + s.length, s.name


def exercise(data: bytes, budget: int, pool: memoryview) -> str:
    """Open data and use every API; returns 'refused: <message kind>' or 'accepted'."""
    try:
        r = mbf.open(io.BytesIO(data), budget)
    except mbf.MBFError as e:
        kind = re.sub(r"'[^']*'", "'_'", re.sub(r"(0x)?[0-9a-f]*\d[0-9a-f]*", "N", str(e)))
        return "refused: " + kind[:48]
    with r:
        check_accepted(r)
        for i in range(0, r.n, max(1, r.n // 50)):  # every segment of the fixture, a sample of BIG's
            name = r.name(i)
            n = r.seg(name).length
            _try(r.read_into, name, pool[:n])
            _try(r.read_into, name, pool[:n], False)
            _try(r.read_into, name, pool[:n + 1])
            _try(r.read_range, name, n // 2, pool[:min(8, n - n // 2)])
            _try(r.verify, name)
            if i % 5 == 0:
                _try(r.read, name)
        _try(r.read_tokenizer)
        _try(r.read_tokenizer, pool[:r.tok_length])
        _try(r.verify_all)
        _try(r.seg, "blk.0.attn_q")
        try:
            r.layer_parts()
            bufs = r.layer_buffers()
        except mbf.MBFError:
            return "accepted"
        for layer in range(r.config["n_layers"]):
            _try(r.load_layer, layer, bufs)
    return "accepted"


def test_fuzz_only_mbferror_no_hang_allocations_within_budget(tmp_path):
    rng = random.Random(20240601)
    pool = memoryview(bytearray(len(BIG) + 4096))
    table_need = {id(FIXTURE): mbf.COST_FIXED + mbf.COST_CONFIG * 13 + mbf.COST_SEGMENT * len(ref.fixture_segments())}
    outcomes: Counter[str] = Counter()
    worst = 0.0
    over = 0
    traced = 0
    t0 = time.perf_counter()
    for case in range(CASES):
        base = BIG if case % 40 == 0 else WEIGHTS if case % 5 == 1 else FIXTURE
        data = bytes(mutant(base, rng))
        # budgets from "too small for the table" to roomy: the budget must bind, not the file size
        budget = rng.choice([1000, 3000, 5000, 6500, 8000, 16000, 65536])
        # tracemalloc makes a case ~10x slower: every 8th case (and every BIG one) is traced
        trace = case % 8 == 0
        if trace:
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
        t = time.process_time()  # CPU time: a hang spins the CPU; waiting for a busy machine's core is not one
        try:
            outcome = exercise(data, budget, pool)
        except Exception as e:  # anything but MBFError is a bug: keep the file to reproduce it
            path = tmp_path / ("case%d.mbf" % case)
            path.write_bytes(data)
            raise AssertionError("case %d (budget %d, saved to %s): %r" % (case, budget, path, e)) from e
        dt = time.process_time() - t
        if trace:
            peak = tracemalloc.get_traced_memory()[1] - before
            tracemalloc.stop()
            traced += 1
            over = max(over, peak - budget)
            assert peak <= budget + SLACK, "case %d: peak %d B with a budget of %d B" % (case, peak, budget)
        assert dt < 5.0, "case %d took %.2f s: a hang?" % (case, dt)
        worst = max(worst, dt)
        outcomes[outcome if outcome == "accepted" else outcome.split(":")[0]] += 1
        outcomes["kind " + outcome] += 0 if outcome == "accepted" else 1
    elapsed = time.perf_counter() - t0
    kinds = [k for k in outcomes if k.startswith("kind ")]
    crc = sum(v for k, v in outcomes.items() if k.startswith("kind ") and "CRC" in k)
    report = {
        "cases": CASES, "traced_cases": traced, "seconds": round(elapsed, 2), "cases_per_s": round(CASES / elapsed),
        "accepted": outcomes["accepted"], "refused": outcomes["refused"], "refused_by_header_crc": crc,
        "distinct_refusals": len(kinds), "slowest_case_ms": round(worst * 1000, 2),
        "max_peak_over_budget_B": over, "table_bytes_fixture": table_need[id(FIXTURE)],
    }
    print("\nMBF fuzz: " + json.dumps(report))
    assert CASES >= 10000
    # structure-aware: most refusals come from the deeper checks, not the CRC, and many kinds are hit
    assert crc < outcomes["refused"] // 3, report
    assert len(kinds) >= 40 and outcomes["accepted"] > CASES // 50, report


def test_weight_dtypes_q4a_q8_rules():
    """q4a needs f16 '.scales' and '.mins' of the grouped shape, q8 needs '.scales' and one byte per
    element; a '.mins' without its q4a is refused; the accepted file reads back."""
    with mbf.open(io.BytesIO(WEIGHTS)) as r:
        assert r.seg("blk.0.attn_q").dtype == "q4a" and r.seg("blk.0.attn_q").length == 64
        assert r.seg("token_embd").dtype == "q8" and r.seg("token_embd").length == 96
        assert bytes(r.read("token_embd")) == bytes(range(96))
        r.verify_all()
    buf = bytearray(WEIGHTS)
    cases = [("blk.0.attn_q.mins", "blk.0.attn_q.minz", "has no 'blk.0.attn_q.mins'"),
             ("blk.0.ffn_up.scales", "blk.0.ffn_up.mins", "has no 'blk.0.ffn_up.scales'"),
             ("token_embd.scales", "token_embd.scalez", "q8 segment 'token_embd' has no")]
    for old, new, msg in cases:
        b = bytearray(buf)
        ref.set_name(b, ref.find_entry(b, old), new)
        ref.refresh_crc(b)
        with pytest.raises(mbf.MBFError, match=msg):
            mbf.open(io.BytesIO(bytes(b)))
    b = bytearray(buf)  # q8 declared as q4a: the length no longer matches
    ref.put(b, ref.entry_at(b, ref.find_entry(b, "token_embd")) + ref.E_DTYPE, "B", mbf.Q4A)
    ref.refresh_crc(b)
    with pytest.raises(mbf.MBFError, match="length 96 does not match q4a"):
        mbf.open(io.BytesIO(bytes(b)))
    b = bytearray(buf)  # q4a declared as q4: its '.mins' has no owner
    ref.put(b, ref.entry_at(b, ref.find_entry(b, "blk.0.attn_q")) + ref.E_DTYPE, "B", mbf.Q4)
    ref.refresh_crc(b)
    with pytest.raises(mbf.MBFError, match="'.mins' segment needs a q4a segment"):
        mbf.open(io.BytesIO(bytes(b)))


def test_budget_refuses_a_big_table_before_allocating_it():
    big = big_file(2000)  # 128 KB of table
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    try:
        mbf.open(io.BytesIO(big), 16 * 1024)
        raise AssertionError("a 2000-segment table fit a 16 KB budget")
    except mbf.MBFError as e:
        assert "budget: the config and 2000-segment table need" in str(e)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    assert peak < 8 * 1024, peak
    with mbf.open(io.BytesIO(big), 256 * 1024) as r:
        assert r.n == 2000 and r.used == mbf.COST_FIXED + mbf.COST_CONFIG * 13 + mbf.COST_SEGMENT * 2000
        assert bytes(r.read("t.1999")) == bytes([1999 & 0xFF]) * 5
