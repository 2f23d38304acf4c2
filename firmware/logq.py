# logq.py: a preallocated queue of log lines waiting for the link, and allocation-free number formatting.
"""The node writes a log line per plant event; the link takes them when its window has room. Lines wait
here in fixed slots (LINE_MAX bytes each), each with its line sequence number (lseq: 1, 2, ... per
boot, what the gateway's store checks for gaps). When the queue is full its oldest line moves to the
flash spill ring (firmware/spill.py) if the node has one, else it is dropped and counted (`dropped`):
the node never blocks on the link and never grows its heap. Nothing allocates after construction on
MicroPython."""

from shared.compat import MASK30, const

from shared.linefmt import put_bytes, put_hex4, put_uint  # noqa: F401 (the node's report lines use them)

LINE_MAX = const(128)


class LineQueue:
    """Up to `slots` lines of at most LINE_MAX bytes, each with a level and a timestamp (ms, u30)."""

    def __init__(self, slots=32, spill=None):
        self.slots = slots
        self.buf = bytearray(slots * LINE_MAX)
        self.lens = bytearray(slots)
        self.levels = bytearray(slots)
        self.ts = [0] * slots  # small ints (ms mod 2**30): stored in place, no allocation
        self.lseq = [0] * slots  # the lines' sequence numbers (u30)
        self.spill = spill  # a firmware.spill.Spill, or None
        self.head = 0
        self.count = 0
        self.dropped = 0
        self.queued = 0  # lines logged so far: also the newest line's lseq

    def slot(self):
        """Offset of the slot the next line goes to (call put() after writing it there)."""
        if self.count == self.slots:  # full: the oldest line makes room, in the spill ring if there is one
            h = self.head
            sp = self.spill
            if sp is not None:
                sp.append(self.buf, h * LINE_MAX, self.lens[h], self.levels[h], self.lseq[h], self.ts[h], 1)  # LG_SPILLED
            else:
                self.dropped += 1
            self.head = (h + 1) % self.slots
            self.count -= 1
        return ((self.head + self.count) % self.slots) * LINE_MAX

    def put(self, n, level, ts):
        i = (self.head + self.count) % self.slots
        self.lens[i] = n
        self.levels[i] = level
        self.ts[i] = ts
        self.queued = (self.queued + 1) & MASK30
        self.lseq[i] = self.queued
        self.count += 1

    def first(self):
        """Offset of the oldest line (count must be > 0)."""
        return self.head * LINE_MAX

    def pop(self):
        self.head = (self.head + 1) % self.slots
        self.count -= 1
