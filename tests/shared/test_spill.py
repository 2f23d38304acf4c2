# The flash spill ring (firmware/spill.py) on both interpreters: order, reopen after a reboot, power cuts
# (a torn or truncated record loses only that line), wear (each block written once per pass, in order),
# the oldest lines lost first and counted, and an allocation-free append/peek/pop.
import os
import time

import testkit
from firmware import bootonce, spill

BLOCK = 512  # small blocks: many passes in a short test (a board uses spill.BLOCK = 4096)


def _path(name):
    base = (os.getenv("TMPDIR") if hasattr(os, "getenv") else None) or "/tmp"
    ns = time.time_ns() if hasattr(time, "time_ns") else time.ticks_us()
    return "%s/edgetwin_spill_%s_%d_%s.bin" % (base, "mp" if testkit.IS_MP else "cp", ns % 100000000, name)


def _rm(p):
    try:
        for n in os.listdir(p):
            if n[0] == "g":  # a subfolder of block files
                for m in os.listdir(p + "/" + n):
                    os.remove(p + "/" + n + "/" + m)
                os.rmdir(p + "/" + n)
            else:
                os.remove(p + "/" + n)
        os.rmdir(p)
    except OSError:
        pass


def _blocks(p):
    """The ring's block numbers on disk, each checked to be where block_name() says, and its subfolders."""
    got = []
    groups = sorted(os.listdir(p))
    for g in groups:
        for n in os.listdir(p + "/" + g):
            b = (int(g[1:]) << spill.GROUP_BITS) + int(n)
            assert spill.block_name(p, b) == p + "/" + g + "/" + n
            got.append(b)
    return sorted(got), len(groups)


def _line(i, buf):
    """Line i ("line 000123 ..." with a length that varies with i) into buf; returns its length."""
    s = "line %06d %s" % (i, "x" * (i * 7 % 90))
    for j in range(len(s)):
        buf[j] = ord(s[j])
    return len(s)


def _text(sp):
    return bytes(sp.rec[spill.REC_HDR:spill.REC_HDR + sp.n]).decode()


def _fill(sp, first, last):
    buf = bytearray(spill.LINE_MAX)
    for i in range(first, last + 1):
        n = _line(i, buf)
        sp.append(buf, 0, n, 1 + i % 3, i, i * 10)


def _drain(sp, limit=100000):
    out = []
    while len(out) < limit and sp.peek():
        assert _text(sp).startswith("line %06d" % sp.lseq)
        assert sp.ts == sp.lseq * 10 and sp.level == 1 + sp.lseq % 3
        out.append(sp.lseq)
        sp.pop()
    return out


def _next(boot):
    return boot % 65535 + 1  # boot numbers run 1..65535 (0: a node without a ring)


def test_lines_come_back_in_order_and_survive_a_reopen():
    p = _path("order")
    try:
        sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
        b0 = sp.boot
        assert 1 <= b0 <= 65535 and sp.count == 0 and not sp.peek()
        _fill(sp, 1, 30)
        assert sp.count == 30
        assert _drain(sp, 10) == list(range(1, 11))
        sp.close()
        # a reboot without a mark: the lines read but not marked delivered come again (the store drops the
        # duplicates by line seq), nothing is lost
        sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
        assert sp.boot == _next(b0) and sp.recovered == 30
        assert _drain(sp, 20) == list(range(1, 21))
        sp.mark()
        _fill(sp, 31, 35)
        sp.close()
        sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
        assert sp.boot == _next(_next(b0)) and sp.recovered == 15
        assert _drain(sp) == list(range(21, 36))
        sp.mark()
        sp.close()
        sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
        assert sp.boot == _next(_next(_next(b0))) and sp.count == 0 and not sp.peek()
        sp.close()
    finally:
        _rm(p)


def test_a_smaller_ring_removes_the_blocks_past_it_and_a_larger_one_adds_them():
    p = _path("resize")
    try:
        bootonce.make_ring(p, 40, BLOCK)
        assert _blocks(p) == (list(range(40)), 3)  # sixteen to a subfolder
        bootonce.make_ring(p, 20, BLOCK)
        assert _blocks(p) == (list(range(20)), 2)  # the emptied subfolder goes too
        bootonce.make_ring(p, 3, BLOCK)
        assert _blocks(p) == ([0, 1, 2], 1)
        bootonce.make_ring(p, 5, BLOCK)
        assert _blocks(p) == (list(range(5)), 1)
        assert all(os.stat(spill.block_name(p, b))[6] == BLOCK for b in range(5))
    finally:
        _rm(p)


def test_a_flat_ring_of_the_release_before_moves_into_subfolders_with_its_lines():
    # the release before kept block b at `path`/b: its block files are moved whole, and their unread lines
    # come out as they would have
    p = _path("flat")
    try:
        sp = bootonce.start_spill(p, 20 * BLOCK, BLOCK)
        _fill(sp, 1, 60)
        sp.close()
        for b in range(20):
            os.rename(spill.block_name(p, b), "%s/%d" % (p, b))
        os.rmdir(p + "/g0")
        os.rmdir(p + "/g1")
        for b in (20, 21):  # and that ring was larger
            with open("%s/%d" % (p, b), "wb") as f:
                f.write(bytes(BLOCK))
        sp = bootonce.start_spill(p, 20 * BLOCK, BLOCK)
        assert sorted(os.listdir(p)) == ["g0", "g1"] and _blocks(p) == (list(range(20)), 2)
        assert sp.recovered == 60 and _drain(sp) == list(range(1, 61))
        sp.close()
    finally:
        _rm(p)


def test_full_ring_gives_up_the_oldest_lines_and_counts_them():
    p = _path("full")
    try:
        sp = bootonce.start_spill(p, 4 * BLOCK, BLOCK)
        _fill(sp, 1, 300)  # about 4 times what 4 blocks of 512 bytes hold
        assert sp.lost > 200 and sp.lost + sp.count == 300 and sp.written == 301  # the boot record, 300 lines
        got = _drain(sp)
        assert got == list(range(sp.lost + 1, 301))  # exactly the newest ones, in order
        assert sp.count == 0
        # after the ring wrapped many times a reopen finds the same unread lines (here: none left)
        _fill(sp, 301, 340)
        lost = sp.lost
        sp.close()
        sp = bootonce.start_spill(p, 4 * BLOCK, BLOCK)
        again = _drain(sp)
        assert again[-1] == 340 and again == list(range(again[0], 341))
        assert again[0] > lost  # (no mark was written: lines read before the reboot come again, not older ones)
        sp.close()
    finally:
        _rm(p)


def test_interleaved_writes_and_reads_over_many_wraps():
    p = _path("mix")
    rng = testkit.Rng(5)
    try:
        sp = bootonce.start_spill(p, 3 * BLOCK, BLOCK)
        nxt = 1
        got = []
        for _ in range(400):
            for _ in range(rng.below(6)):
                _fill(sp, nxt, nxt)
                nxt += 1
            got += _drain(sp, rng.below(6))
        got += _drain(sp)
        assert got == sorted(got) and len(set(got)) == len(got)
        assert len(got) + sp.lost == nxt - 1  # every line appended was read or counted lost
        sp.close()
    finally:
        _rm(p)


def _last_record(sp):
    # the writer's block file and where the newest line record starts in it (just before ho)
    off = 0
    last = 0
    while off < sp.ho:
        sp._read(sp.hb, off)
        last = off
        off += spill.rec_size(sp.rec[2])
    return sp.name(sp.hb), last


def test_power_cut_mid_record_loses_only_that_line():
    for how in ("torn", "truncated"):
        p = _path(how)
        try:
            sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
            _fill(sp, 1, 25)
            name, at = _last_record(sp)
            sp.close()
            if how == "torn":  # the write stopped inside line 25: its tail is what was there before
                with open(name, "r+b") as f:
                    f.seek(at + spill.REC_HDR + 3)
                    f.write(b"\x00\x00\x00\x00\x00")
            else:  # the file ends inside the record (a filesystem that had not extended it yet)
                with open(name, "rb") as f:
                    data = f.read(at + 9)
                with open(name, "wb") as f:
                    f.write(data)
            sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
            assert sp.recovered == 24, (how, sp.recovered)
            _fill(sp, 26, 28)  # written where the torn line was
            assert _drain(sp) == list(range(1, 25)) + [26, 27, 28], how
            sp.close()
            sp = bootonce.start_spill(p, 8 * BLOCK, BLOCK)
            assert sp.recovered == 27, how
            sp.close()
        finally:
            _rm(p)


class CountingFile:
    """A block file that records its writes as (block, offset, length) in a shared list."""

    def __init__(self, f, blk, writes):
        self.f = f
        self.blk = blk
        self.pos = 0
        self.writes = writes

    def seek(self, pos):
        self.pos = pos
        return self.f.seek(pos)

    def readinto(self, buf):
        n = self.f.readinto(buf)
        self.pos += n or 0
        return n

    def write(self, data):
        n = self.f.write(data)
        self.writes.append((self.blk, self.pos, len(data)))
        self.pos += len(data)
        return n

    def flush(self):
        self.f.flush()

    def close(self):
        self.f.close()


def test_each_block_is_written_once_per_pass_in_order():
    p = _path("wear")
    writes = []
    opens = []

    def opener(name, mode):
        blk = int(name[name.rindex("/") + 1:])
        if "r" not in mode or "+" in mode:
            opens.append((blk, mode))
        return CountingFile(open(name, mode), blk, writes)

    try:
        sp = bootonce.start_spill(p, 4 * BLOCK, BLOCK, opener)
        nxt = 1
        while len([1 for _, o, _ in writes if o == 0]) < 8 + 1:  # into the third pass
            _fill(sp, nxt, nxt)
            nxt += 1
            if nxt % 3 == 0:
                _drain(sp, 1)
        starts = [0] * 4
        last_end = [-1] * 4
        for b, off, n in writes:
            assert off + n <= BLOCK  # a record never crosses a block
            if off == 0:
                starts[b] += 1  # the writer enters the block: a new pass over it
            else:
                assert off == last_end[b], (b, off, last_end[b])  # append-only within the pass
            last_end[b] = off + n
        # passes: the ring went round twice and into a third pass; no block was entered more often
        assert max(starts) - min(starts) <= 1 and max(starts) == 3 and sum(starts) == 9, starts
        # and each entry emptied the block's file first: every write is an append to the file it goes to
        assert [m for _, m in opens] == ["w+b"] * 9 and [b for b, _ in opens] == [i % 4 for i in range(9)], opens
        sp.close()
    finally:
        _rm(p)


def test_append_peek_pop_allocate_nothing_within_a_block():
    p = _path("alloc")
    try:
        sp = bootonce.start_spill(p, 4 * BLOCK, BLOCK)
        buf = bytearray(spill.LINE_MAX)
        n = _line(7, buf)
        box = [sp, buf, n, 0]

        def hot(b):
            s = b[0]
            for i in range(3):  # 3 records of ~40 bytes after the boot record: within the first block
                s.append(b[1], 0, b[2], 1, i + 1, i)
                if s.peek():
                    b[3] += s.n
                    s.pop()
            return 0

        testkit.run_locked(hot, box)
        assert box[3] > 0 and sp.hb == 0
        sp.close()
    finally:
        _rm(p)


def test_heap_stays_flat_over_many_wraps():
    # entering a block opens its file (allocates a file object): nothing of it may stay
    p = _path("flat")
    try:
        sp = bootonce.start_spill(p, 4 * BLOCK, BLOCK)
        buf = bytearray(spill.LINE_MAX)
        n = _line(7, buf)
        marks = []
        for rnd in range(3):
            for i in range(100):  # about 8 passes of the 4-block ring per round: drops and block changes
                sp.append(buf, 0, n, 1, rnd * 100 + i + 1, i)
                if i % 2 and sp.peek():
                    sp.pop()
            marks.append(testkit.heap_in_use())
        assert sp.lost > 0
        if marks[0] is not None:
            assert marks[2] - marks[1] <= 256, marks
        sp.close()
    finally:
        _rm(p)


def test_bad_sizes_are_refused():
    e = testkit.raises(spill.SpillError, bootonce.start_spill, _path("bad"), BLOCK, BLOCK)
    assert "fewer than" in str(e)
    e = testkit.raises(spill.SpillError, bootonce.start_spill, _path("bad"), 8 * BLOCK, 100)
    assert "block" in str(e)
