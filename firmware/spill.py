# spill.py: a ring file on the board's flash that keeps the log lines the link cannot take yet.
"""When the node's RAM line queue is full (link down, or slower than the plant), its oldest line moves
here instead of being dropped; the node sends from here first when the link has room, so lines leave
in the order they were logged. With write-ahead (node.json `write_ahead`, on by default) every line comes
here before it is sent, each loop's new lines in one flush: a power cut then loses no line the gateway may
have seen or a NODE report counted, and after a reboot the lines past the newest mark go out again (the
gateway stores each once). docs/NODE.md ("Lossless logging") describes the format, the budget and the
flash wear.

The ring is a folder (`path`) of `blocks` files, each one block of at most `block` bytes (4096 by
default: a flash erase block), made once at full size so the room is held. Block b is `g<b // 16>/<b % 16>`:
sixteen to a subfolder, because littlefs slows down steeply with the entries of one folder (making the
Pico's 160 block files in one folder took 14.9 s of board time in the emulated RP2040, in ten folders 1.3 s,
and every later open of a block pays the same way). Records are appended
at increasing offsets within a block and blocks are filled in ring order; entering a block empties its
file first, so every write is an append to the file it goes to. One file per block, not one file for the
ring: littlefs (the boards' filesystem) keeps a file as a list of blocks that point backwards, so a write
into the middle of a file rewrites everything after it at the next flush: one file of 640 KB would cost
up to 160 block erases a record (and as much free room), an appended record in a 4 KB file costs one.
A record never crosses a block. Each record (little-endian):

    off size
    0   1    magic 0xA5
    1   1    kind: 1 line, 2 mark (lseq holds the rseq of the first record not yet delivered), 3 boot,
             4 plant clock (lseq holds the plant seconds reached)
    2   1    n: text bytes (0..LINE_MAX)
    3   1    level
    4   1    flags (the LOG frame's flags of the line: spilled when the RAM queue pushed it out; the node
             adds it for a line of an earlier boot, or one with more waiting behind it than the queue holds)
    5   1    0
    6   2    boot: the node's boot number when the line was logged
    8   4    rseq: record number in the ring (consecutive, u30)
    12  4    lseq: the line's sequence number (per boot, from 1)
    16  4    ts: the line's timestamp (ticks ms, u30)
    20  n    text
    20+n 4   CRC-32 of bytes 0 .. 20+n
    padding to a multiple of 8 bytes (REC_ALIGN)

Recovery (open): every block is scanned from offset 0 while records are valid (magic, size, CRC) and
their rseq is consecutive; the rest of a block is stale or torn. The head is the block ending with the
highest rseq; the oldest valid data is the longest run of blocks before it with consecutive rseq;
reading starts after the newest mark. A power cut during a write tears only that record: the
recovery stops before it and the next write goes there. The boot number is the highest seen + 1
(a fresh ring starts at a random one), written as a boot record at once, so it survives even if no
line is ever spilled.

When the writer must enter the block the oldest unread lines are in (the ring is full), that whole
block's unread lines are given up (`lost`): the oldest lines go first. append/peek/pop allocate
nothing within a block (one record buffer, one memoryview per aligned record size, readinto); entering
another block opens its file (a file object, every `block` bytes of lines, collected)."""

from shared import crc32
from shared.compat import MASK30, const

MAGIC = const(0xA5)
K_LINE = const(1)
K_MARK = const(2)
K_BOOT = const(3)
K_PLANT = const(4)  # the plant clock reached lseq seconds (firmware/sampler.py): a reboot resumes after it
REC_HDR = const(20)
REC_CRC = const(4)
REC_ALIGN = const(8)
LINE_MAX = const(128)
REC_MAX = const(152)  # (REC_HDR + LINE_MAX + REC_CRC) rounded up to REC_ALIGN
BLOCK = const(4096)
GROUP_BITS = const(4)  # 16 block files to a subfolder (the docstring says why)
MIN_BLOCKS = const(2)


def group_name(path, g):
    """Subfolder g of the ring in the folder path (blocks 16g .. 16g + 15)."""
    return "%s/g%d" % (path, g)


def block_name(path, blk):
    """The file of block blk of the ring in the folder path."""
    return "%s/%d" % (group_name(path, blk >> GROUP_BITS), blk & ((1 << GROUP_BITS) - 1))


def rec_size(n):
    """Bytes a record with n text bytes takes in the ring."""
    return (REC_HDR + n + REC_CRC + REC_ALIGN - 1) & ~(REC_ALIGN - 1)


def _u32(b, o):
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | ((b[o + 3] & 0x3F) << 24)


def _put32(b, o, v):
    b[o] = v & 0xFF
    b[o + 1] = (v >> 8) & 0xFF
    b[o + 2] = (v >> 16) & 0xFF
    b[o + 3] = (v >> 24) & 0xFF


class SpillError(ValueError):
    """A spill file that cannot be used (size, path)."""


class Spill:
    """A ring of `size // block` blocks in the folder `path`. firmware/bootonce.start_spill makes one:
    it makes the block files if needed, runs the recovery scan and starts a boot, code the node runs once
    and then drops; this class holds what the loop needs. opener(name, mode) opens a block's file (tests
    pass one that counts writes)."""

    def __init__(self, path, size, block=BLOCK, opener=None):
        if not isinstance(size, int) or not isinstance(block, int) or block < 2 * REC_MAX or block & 7:
            raise SpillError("spill block must be a multiple of 8 >= %d, got %r" % (2 * REC_MAX, block))
        nb = size // block
        if nb < MIN_BLOCKS:
            raise SpillError("spill_bytes %d holds fewer than %d blocks of %d bytes" % (size, MIN_BLOCKS, block))
        self.path = path
        self.block = block
        self.blocks = nb
        self.size = nb * block
        self.rec = bytearray(REC_MAX)
        mv = memoryview(self.rec)
        self._views = [mv[:k] for k in range(0, REC_MAX + 1, REC_ALIGN)]  # write(view): no slice per record
        self.crc = crc32.new()
        self.opener = opener or open
        self.fw = None  # the writer's block file (block fw_b), open for reading and writing
        self.fw_b = -1
        self.fr = None  # the reader's, when it reads another block
        self.fr_b = -1
        # the line read by peek() (valid while self.ready)
        self.ready = False
        self.n = 0
        self.level = 0
        self.flags = 0
        self.line_boot = 0
        self.lseq = 0
        self.ts = 0
        self.text_off = REC_HDR  # the text is self.rec[REC_HDR:REC_HDR + n]
        # counters
        self.count = 0  # unread lines
        self.lost = 0  # lines given up because the ring was full (the oldest first)
        self.spilled = 0  # lines sent flagged spilled (firmware/node.py counts them)
        self.written = 0  # records written (lines, marks, boots)
        self.recovered = 0  # unread lines found at open
        self.marked = True  # False once a line has been read since the last mark
        self.plant_s = 0  # the newest plant clock record's seconds (0: none)
        self.boot = 0  # 1..65535 once started (bootonce.start_spill); 0 means "no spill ring" on the wire

    # ---- records ----

    def name(self, blk):
        return block_name(self.path, blk)

    def _file(self, blk):
        # The open file of block blk for reading (None: it has none, an empty block).
        if blk == self.fw_b:
            return self.fw
        if blk != self.fr_b:
            self._close_reader()
            try:
                self.fr = self.opener(self.name(blk), "rb")
            except OSError:
                return None
            self.fr_b = blk
        return self.fr

    def _close_reader(self):
        f = self.fr
        self.fr = None
        self.fr_b = -1
        if f is not None:
            f.close()

    def enter(self, blk, keep):
        """Make blk the writer's block: its file emptied (keep=False), or kept with its records (a boot
        resuming there)."""
        if self.fw is not None:
            self.fw.close()  # flushes what the last block still held
            self.fw = None
            self.fw_b = -1
        if blk == self.fr_b:
            self._close_reader()
        self.fw = self.opener(self.name(blk), "r+b" if keep else "w+b")
        self.fw_b = blk

    def _read(self, blk, off):
        """Read the record at (blk, off) into rec; its rseq if valid, else -1."""
        if off + REC_HDR + REC_CRC > self.block:
            return -1
        f = self._file(blk)
        if f is None:
            return -1
        f.seek(off)
        got = f.readinto(self.rec)
        r = self.rec
        if got is None or got < REC_HDR + REC_CRC or r[0] != MAGIC or r[1] < K_LINE or r[1] > K_PLANT:
            return -1
        n = r[2]
        if n > LINE_MAX or off + rec_size(n) > self.block or REC_HDR + n + REC_CRC > got:
            return -1
        c = self.crc
        c.reset()
        c.update(r, 0, REC_HDR + n)
        if not c.matches(r, REC_HDR + n):
            return -1
        return _u32(r, 8)

    def _append(self, kind, src, off, n, level, flags, lseq, ts, sync=True):
        L = rec_size(n)
        if self.ho + L > self.block:  # the next block: if it holds the oldest unread lines, they go
            nb = (self.hb + 1) % self.blocks
            if self.tail != self.head and self.tb == nb:
                self._drop_block()
            self.hb = nb
            self.ho = 0
        if self.fw_b != self.hb:
            self.enter(self.hb, self.ho > 0)
        if self.tail == self.head:  # empty: the reader starts at this record
            self.tb = self.hb
            self.to = self.ho
        r = self.rec
        r[0] = MAGIC
        r[1] = kind
        r[2] = n
        r[3] = level
        r[4] = flags
        r[5] = 0
        r[6] = self.boot & 0xFF
        r[7] = (self.boot >> 8) & 0xFF
        _put32(r, 8, self.head)
        _put32(r, 12, lseq)
        _put32(r, 16, ts)
        for i in range(n):
            r[REC_HDR + i] = src[off + i]
        c = self.crc
        c.reset()
        c.update(r, 0, REC_HDR + n)
        c.put(r, REC_HDR + n)
        for i in range(REC_HDR + n + REC_CRC, L):
            r[i] = 0
        f = self.fw
        f.seek(self.ho)
        f.write(self._views[L // REC_ALIGN])
        if sync:
            f.flush()  # a power cut from here on loses nothing written before
        self.ready = False  # rec was reused: a peeked line must be read again
        self.ho += L
        self.head = (self.head + 1) & MASK30
        self.written += 1

    def _drop_block(self):
        # The writer needs block tb: give up its unread lines (the oldest), move the reader past it.
        b = self.tb
        off = self.to
        rs = self.tail
        while rs != self.head:
            if self._read(b, off) != rs:
                break
            if self.rec[1] == K_LINE:
                self.count -= 1
                self.lost += 1
            off += rec_size(self.rec[2])
            rs += 1
        self.tb = (b + 1) % self.blocks
        self.to = 0
        self.tail = rs
        self.ready = False

    # ---- the node's side ----

    def append(self, src, off, n, level, lseq, ts, flags=0, sync=True):
        """Keep the line src[off:off+n] (the oldest lines go if the ring is full); flags are the LOG flags
        it is sent with. sync=False leaves the flush to sync(), so that a batch of lines costs one."""
        self._append(K_LINE, src, off, n, level, flags, lseq, ts, sync)
        self.count += 1

    def peek(self):
        """True with the oldest unread line in rec / n / level / flags / line_boot / lseq / ts."""
        if self.ready:
            return True
        nb = self.blocks
        hops = 0
        while self.count > 0 and self.tail != self.head:
            rs = self._read(self.tb, self.to)
            if rs != self.tail:  # the writer went on in the next block
                hops += 1
                if hops > nb:
                    self.count = 0  # cannot happen with a consistent file: stop rather than loop
                    return False
                self.tb = (self.tb + 1) % nb
                self.to = 0
                continue
            r = self.rec
            if r[1] != K_LINE:  # a mark or a boot record: step over it
                self.to += rec_size(r[2])
                self.tail = (self.tail + 1) & MASK30
                continue
            self.n = r[2]
            self.level = r[3]
            self.flags = r[4]
            self.line_boot = r[6] | (r[7] << 8)
            self.lseq = _u32(r, 12)
            self.ts = _u32(r, 16)
            self.ready = True
            return True
        return False

    def pop(self):
        """The line from peek() has been handed to the link."""
        if not self.ready:
            return
        self.ready = False
        self.to += rec_size(self.n)
        self.tail = (self.tail + 1) & MASK30
        self.count -= 1
        self.marked = False

    def note_plant(self, seconds):
        """Keep the plant clock (seconds since its start) so that a reboot does not replay its times."""
        self._append(K_PLANT, None, 0, 0, 0, 0, seconds & MASK30, 0)

    def sync(self):
        """Make every record written so far survive a power cut (a flash write on a board)."""
        if self.fw is not None:
            self.fw.flush()

    def mark(self, sync=True):
        """Record that every line read so far has been delivered (the gateway acknowledged them): after
        a reboot reading starts there. The node writes one whenever every line it sent is acknowledged.
        sync=False: the next sync() makes it last (until then a reboot sends some lines again, which the
        gateway stores once)."""
        self._append(K_MARK, None, 0, 0, 0, 0, self.tail, 0, sync)
        self.marked = True
        if self.count == 0:  # the mark itself is behind the reader
            self.tb = self.hb
            self.to = self.ho
            self.tail = self.head

    def close(self):
        for f in (self.fw, self.fr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self.fw = self.fr = None
        self.fw_b = self.fr_b = -1
