# spill_lfs.py: bench spill's board side, run by the MicroPython unix port (tools/bench/spill.py starts it).
"""Mounts MicroPython's own littlefs (VfsLfs2, the filesystem of the rp2 and esp32 ports) on a RAM block
device that counts erases and programmed bytes, writes the node's spill ring on it and prints one JSON line.

    micropython spill_lfs.py FS_BYTES RING_BYTES LINES PER_SYNC LAYOUT

LAYOUT "folder" is firmware/spill.py as the node runs it (a file per block); "file" is the layout before it
(one preallocated file, records written in place at increasing offsets, as the earlier release did), the
baseline. PER_SYNC: lines per flush (1: each line flushed on its own, as a spill during a link cut; 4: the
default plant's four sample lines of a tick written ahead together)."""
import json
import os
import sys

from firmware import bootonce, spill

ERASE_BLOCK = 4096


class CountingFlash:
    """A NOR flash of `n` blocks in RAM, as littlefs sees a board's (the extended block protocol)."""

    def __init__(self, n):
        self.data = bytearray(ERASE_BLOCK * n)
        self.n = n
        self.erases = 0
        self.programmed = 0

    def readblocks(self, b, buf, off=0):
        a = b * ERASE_BLOCK + off
        buf[:] = self.data[a:a + len(buf)]

    def writeblocks(self, b, buf, off=None):
        if off is None:  # the simple protocol: erase, then write the whole block
            self.erases += 1
            off = 0
        a = b * ERASE_BLOCK + off
        self.data[a:a + len(buf)] = buf
        self.programmed += len(buf)

    def ioctl(self, op, arg):
        if op == 4:  # block count
            return self.n
        if op == 5:  # block size
            return ERASE_BLOCK
        if op == 6:  # erase
            self.erases += 1
            return 0
        return None


def line_text(i, buf):
    # a sample line of the default plant's length (about 80 bytes)
    s = "2026-12-06T08:%02d:%02dZ P-101 RUNNING flow=%d.%d m3/h dP=0.41 bar T=61.2 C vib=2.1 mm/s" % (
        i // 60 % 60, i % 60, 40 + i % 9, i % 10)
    for j in range(len(s)):
        buf[j] = ord(s[j])
    return len(s)


class FileRing:
    """The earlier layout, for the baseline: one file of `size` bytes, records in place at rising offsets."""

    def __init__(self, path, size):
        with open(path, "wb") as f:
            z = bytearray(512)
            for _ in range(size // 512):
                f.write(z)
        self.f = open(path, "r+b")
        self.size = size
        self.off = 0
        self.rec = bytearray(spill.REC_MAX)

    def append(self, buf, n, sync):
        k = spill.rec_size(n)
        if self.off + k > self.size:
            self.off = 0
        self.rec[spill.REC_HDR:spill.REC_HDR + n] = buf[:n]
        self.f.seek(self.off)
        self.f.write(memoryview(self.rec)[:k])
        if sync:
            self.f.flush()
        self.off += k


def main(argv):
    fs_bytes, ring, lines, per_sync, layout = int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    dev = CountingFlash(fs_bytes // ERASE_BLOCK)
    os.VfsLfs2.mkfs(dev, progsize=256)  # as the rp2 port formats and mounts its flash (256-byte pages)
    os.mount(os.VfsLfs2(dev, progsize=256), "/fs")
    out = {"layout": layout, "fs_bytes": fs_bytes, "ring_bytes": ring, "lines": lines, "lines_per_flush": per_sync}
    buf = bytearray(spill.LINE_MAX)
    try:
        if layout == "folder":
            sp = bootonce.start_spill("/fs/spill", ring)
            put = lambda i, n, sync: sp.append(buf, 0, n, 1, i + 1, i, 0, sync)  # noqa: E731
            sync = sp.sync
        else:
            fr = FileRing("/fs/spill.bin", ring)
            put = lambda i, n, sync: fr.append(buf, n, sync)  # noqa: E731
            sync = fr.f.flush
        e0, p0 = dev.erases, dev.programmed
        total = 0
        for i in range(lines):
            n = line_text(i, buf)
            total += n
            put(i, n, False)
            if (i + 1) % per_sync == 0:
                sync()
        out.update(ok=True, erases_per_line=(dev.erases - e0) / lines,
                   bytes_programmed_per_line=(dev.programmed - p0) / lines, text_bytes_per_line=total / lines)
    except OSError as e:  # ENOSPC: the layout needs more free room than the filesystem has
        out.update(ok=False, error="OSError %s" % e)
    print(json.dumps(out))


main(sys.argv)
