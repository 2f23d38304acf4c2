# bootonce.py: code the node runs once at boot (the spill ring's open and recovery scan, the node's unique
# id), imported when needed and then dropped from sys.modules (forget()) so that its bytecode does not
# stay on the heap: a board's heap holds what the loop needs, the boot-only code would cost it ~2 KB.
import os
from array import array

from firmware.spill import BLOCK, K_BOOT, K_LINE, K_MARK, K_PLANT, Spill, _u32, rec_size


def open_ring(path, want):
    """The ring file, preallocated to `want` bytes the first time (or extended if a cut left it short)."""
    try:
        have = os.stat(path)[6]
    except OSError:
        have = -1
    if have != want:  # first use (or another budget): preallocate the whole ring once
        z = bytearray(512)
        # shorter (a cut while it was being created or extended): keep what is there, add the rest
        with open(path, "r+b" if 0 <= have < want else "wb") as f:
            left = want
            if 0 <= have < want:
                f.seek(have)
                left = want - have
            while left > 0:
                k = 512 if left >= 512 else left
                f.write(z if k == 512 else z[:k])
                left -= k
    return open(path, "r+b")


def start_spill(path, size, block=BLOCK, f=None):
    """The spill ring in the file at path (firmware/spill.py), ready for this boot: the file opened
    (created and preallocated the first time), the recovery scan run, the boot number (the highest seen
    + 1) written as a boot record at once. f: an already open binary file (tests: one that counts writes)."""
    sp = Spill(path, size, block, f)  # checks size and block before any file is touched
    if f is None:
        sp.f = open_ring(path, sp.size)
    recover(sp)
    sp.boot = (sp._max_boot % 0xFFFF) + 1  # 1..65535: 0 means "no spill ring" on the wire
    sp._append(K_BOOT, None, 0, 0, 0, 0, 0, 0)
    return sp


def recover(self):
    """Scan the ring (firmware/spill.py docstring): head, tail after the newest mark, unread lines, boot, plant clock."""
    nb = self.blocks
    first = array("i", bytes(4 * nb))  # rseq of each block's first record
    cnt = array("H", bytes(2 * nb))
    end = array("H", bytes(2 * nb))
    self._max_boot = 0
    for b in range(nb):
        off = 0
        prev = -1
        while True:
            rs = self._read(b, off)
            if rs < 0 or (prev >= 0 and rs != prev + 1):
                break
            if prev < 0:
                first[b] = rs
            prev = rs
            cnt[b] += 1
            bt = self.rec[6] | (self.rec[7] << 8)
            if bt > self._max_boot:
                self._max_boot = bt
            if self.rec[1] == K_PLANT and _u32(self.rec, 12) > self.plant_s:
                self.plant_s = _u32(self.rec, 12)
            off += rec_size(self.rec[2])
        end[b] = off
    hb = -1
    for b in range(nb):
        if cnt[b] and (hb < 0 or first[b] + cnt[b] > first[hb] + cnt[hb]):
            hb = b
    if hb < 0:  # a fresh ring: boot numbers start at random, so a reformatted board does not
        try:  # reuse the (boot, line seq) pairs the gateway already stored
            u = os.urandom(2)
            self._max_boot = u[0] | (u[1] << 8)
        except (AttributeError, OSError, NotImplementedError):
            pass
        self.hb = self.ho = self.tb = self.to = 0
        self.head = self.tail = 1
        return
    self.hb = hb
    self.ho = end[hb]
    self.head = first[hb] + cnt[hb]  # the next record's rseq
    sb = hb
    for _ in range(nb - 1):  # the oldest block of the run that leads to the head
        p = (sb - 1) % nb
        if cnt[p] and first[p] + cnt[p] == first[sb]:
            sb = p
        else:
            break
    # reading starts at the newest mark's position (the first record not yet delivered), else at
    # the run's start: a first walk finds that mark, a second counts the lines from there
    want = first[sb]
    for walk in (0, 1):
        b, off, rs = sb, 0, first[sb]
        lines = 0
        hops = 0
        while rs != self.head and hops <= nb:
            if self._read(b, off) != rs:
                b = (b + 1) % nb
                off = 0
                hops += 1
                continue
            if walk and rs == want:
                self.tb, self.to, self.tail = b, off, rs
            k = self.rec[1]
            if k == K_MARK and not walk:
                v = _u32(self.rec, 12)
                if first[sb] <= v <= self.head:
                    want = v
            elif k == K_LINE and walk and rs >= want:
                lines += 1
            off += rec_size(self.rec[2])
            rs += 1
    if want == self.head:
        self.tb, self.to, self.tail = self.hb, self.ho, self.head
    self.count = lines
    self.recovered = lines


def unique_id(path, persist=True):
    """The node's 8-byte id: machine.unique_id() (RP2040: 8 bytes, ESP32: 6, padded) where the board has
    one, else the id kept in `path`, else a new random one written there (the unix port)."""
    try:
        import machine

        u = bytes(machine.unique_id())
        if u:
            return (u + bytes(8))[:8]
    except (ImportError, AttributeError, OSError):
        pass
    try:
        with open(path, "rb") as f:
            u = f.read(8)
        if len(u) == 8:
            return u
    except OSError:
        pass
    u = bytes(os.urandom(8))
    if persist:
        try:
            with open(path, "wb") as f:
                f.write(u)
        except OSError:
            pass
    return u


def open_spill(prof, c, path_given, host):
    """The node's spill ring (firmware/spill.py) as node.json / the profile say, or None."""
    size = c["spill_bytes"]
    if size < 0:
        size = prof.get("spill_bytes", 0)
    if not size or (not path_given and host):  # a node under CPython (tests) spills only where told
        return None
    try:
        return start_spill(c["spill_path"], size)
    except (OSError, ValueError) as e:  # no room on the filesystem, a bad size: log without it
        print("NODE spill off: %s (%s, %d bytes)" % (e, c["spill_path"], size))
        return None


def forget():
    """Drop this module so that its bytecode can be collected (call it when done with it)."""
    import sys

    sys.modules.pop("firmware.bootonce", None)
    pkg = sys.modules.get("firmware")
    if pkg is not None:
        try:
            delattr(pkg, "bootonce")
        except (AttributeError, KeyError, TypeError):  # already gone (MicroPython raises KeyError)
            pass
