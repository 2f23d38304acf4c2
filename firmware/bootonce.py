# bootonce.py: code the node runs once at boot (the spill ring's open and recovery scan, the node's unique
# id), imported when needed and then dropped from sys.modules (forget()) so that its bytecode does not
# stay on the heap: a board's heap holds what the loop needs, the boot-only code would cost it ~2 KB.
import os
from array import array

from firmware.spill import (BLOCK, GROUP_BITS, K_BOOT, K_LINE, K_MARK, K_PLANT, Spill, _u32, block_name, group_name,
                            rec_size)


def _isdir(path):
    try:
        return os.stat(path)[0] & 0x4000 != 0
    except OSError:
        return None  # nothing there


def make_ring(path, blocks, block):
    """The ring's folder with a file per block (firmware/spill.block_name), each made at full size (zeros)
    when it is missing, so the room is held from the first boot on; a block file in use holds its records and
    is left as it is. A single-file ring of an earlier release at `path` is removed first (its lines are not
    read again); the block files of a release that kept them all in the folder itself (`path`/b) are moved
    into their subfolders, records and all; block files past `blocks` (a smaller budget than before) are
    removed, and the subfolders they leave empty."""
    d = _isdir(path)
    if d is False:
        os.remove(path)
        print("NODE spill: %s was a single-file ring (an earlier release): replaced by a folder" % path)
    if not d:
        os.mkdir(path)
    z = bytearray(512)
    for b in range(blocks):
        if b & ((1 << GROUP_BITS) - 1) == 0 and _isdir(group_name(path, b >> GROUP_BITS)) is None:
            os.mkdir(group_name(path, b >> GROUP_BITS))
        name = block_name(path, b)
        try:
            os.stat(name)
            continue
        except OSError:
            pass
        try:
            os.rename("%s/%d" % (path, b), name)  # the flat folder of the release before: its records move along
        except OSError:
            with open(name, "wb") as f:
                left = block
                while left > 0:
                    k = 512 if left >= 512 else left
                    f.write(z if k == 512 else z[:k])
                    left -= k
    # the blocks of a larger ring before, numbered on from `blocks` (either layout): found one by one, not by
    # listing the folder (a 2 MB ring's listing is 512 names at once, a peak of about 20 KB on a board that has
    # just booted)
    b = blocks
    while True:
        try:
            os.remove(block_name(path, b))
        except OSError:
            try:
                os.remove("%s/%d" % (path, b))
            except OSError:
                break
        b += 1
    g = (blocks + (1 << GROUP_BITS) - 1) >> GROUP_BITS
    while True:
        try:
            os.rmdir(group_name(path, g))
        except OSError:
            break
        g += 1


def start_spill(path, size, block=BLOCK, opener=None):
    """The spill ring in the folder at path (firmware/spill.py), ready for this boot: its block files
    made the first time, the recovery scan run, the boot number (the highest seen + 1) written as a boot
    record at once. opener: how block files are opened (tests: one that counts writes)."""
    sp = Spill(path, size, block, opener)  # checks size and block before any file is touched
    make_ring(path, sp.blocks, sp.block)
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
        import microcontroller  # CircuitPython: no machine module, the chip's id is here

        u = bytes(microcontroller.cpu.uid)
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


LEGACY = "/spill.bin"  # where releases before the folder ring kept theirs


def open_spill(prof, c, path_given, host):
    """The node's spill ring (firmware/spill.py) as node.json / the profile say, or None."""
    size = c["spill_bytes"]
    if size < 0:
        size = prof.get("spill_bytes", 0)
    if not size or (not path_given and host):  # a node under CPython (tests) spills only where told
        return None
    try:
        if not host and _isdir(LEGACY) is False:  # an earlier release's ring: its room goes to this one
            os.remove(LEGACY)
            print("NODE spill: removed %s (an earlier release's single-file ring; now %s/)"
                  % (LEGACY, c["spill_path"]))
        return start_spill(c["spill_path"], size)
    except (OSError, ValueError) as e:  # no room on the filesystem, a bad size: log without it
        print("NODE spill off: %s (%s, %d bytes)" % (e, c["spill_path"], size))
        return None


def forget():
    """Drop this module so that its bytecode can be collected (call it when done with it)."""
    from firmware import drop

    drop("bootonce")


# ---- the link's key and its signed-frame counter (docs/PROTOCOL.md "Authentication") ----
# The counter of the frames this node signs must grow across reboots, or the gateway (which keeps the
# highest one it accepted) refuses them as replays. It is reserved ahead in blocks of 2**16 frames: at boot
# the node writes "next free block + CTR_AHEAD" before it signs anything, so a power cut at any point never
# reuses a value; the loop writes again (Node.keep_counter) when it enters the last reserved block. The
# record is written to two files in turn, so a cut in the middle of one write leaves the other whole.
CTR_AHEAD = 2  # blocks reserved past the one in use
CTR_MAGIC = b"EK"  # record: magic, block u32, ~block u32, the peer's last counter (6 bytes)


def read_key(path):
    """The link key in `path` (16..64 bytes), None where there is none; ValueError for a bad file."""
    try:
        with open(path, "rb") as f:
            k = f.read(65)
    except OSError:
        return None
    if not 16 <= len(k) <= 64:
        raise ValueError("%s holds %d bytes: a link key is 16..64 (edgetwin deploy --node writes one)"
                         % (path, len(k)))
    return k


def _ctr_record(path):
    try:
        with open(path, "rb") as f:
            r = f.read(16)
    except OSError:
        return -1, None
    if len(r) != 16 or r[:2] != CTR_MAGIC:
        return -1, None
    b = r[2] | r[3] << 8 | r[4] << 16 | r[5] << 24
    nb = r[6] | r[7] << 8 | r[8] << 16 | r[9] << 24
    if b ^ nb != 0xFFFFFFFF:
        return -1, None  # torn: the other copy holds the last whole record
    return b, r[10:16]


def write_counter(path, block, peer):
    """Write the reservation record (block, the peer's last counter) to both copies."""
    r = bytearray(16)
    r[0:2] = CTR_MAGIC
    nb = block ^ 0xFFFFFFFF
    for i in range(4):
        r[2 + i] = (block >> (8 * i)) & 0xFF
        r[6 + i] = (nb >> (8 * i)) & 0xFF
    r[10:16] = peer
    for p in (path + "2", path):
        with open(p, "wb") as f:
            f.write(r)


def link_key(c):
    """(key, first counter, the peer's last counter, reserved block end) for the node's link, or None
    when the node has no key (it runs unsigned). The reservation is written before this returns."""
    key = read_key(c["key_path"])
    if key is None:
        return None
    block, peer = -1, None
    for p in (c["counter_path"], c["counter_path"] + "2"):
        b, pc = _ctr_record(p)
        if b > block:
            block, peer = b, pc
    block = 0 if block < 0 else block
    peer = peer if peer is not None else bytes(6)
    write_counter(c["counter_path"], block + CTR_AHEAD, peer)
    return key, block << 16, peer, block + CTR_AHEAD
