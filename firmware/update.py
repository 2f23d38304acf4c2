# update.py: a new draft model received over the link into a second slot, checked, switched to at the next boot.
"""The gateway sends UPDATE frames (docs/PROTOCOL.md 3.12): BEGIN (id, size, SHA-256), CHUNKs in order, or
ABORT. The node writes the chunks to `<model>.new` on its filesystem (the second slot; the model it runs
stays where it is: on the filesystem or in ROMFS) while it keeps logging, and answers with UPSTAT frames:
where it stands (RECEIVING and the bytes it holds: a transfer cut by a reboot, a gateway restart or a link
cut resumes there), VERIFIED (the whole file, hash right: `/update.json` marks it for the next boot),
BAD_HASH, NO_ROOM (with the free bytes), RUNNING or ROLLED_BACK (after that boot), ABORTED.

At the next boot (boot_model, called by firmware/node.py main before the model loads) the marked file is
tried: the marker's try count is raised first, so a boot that dies in the trial (a reset, the watchdog)
falls back at the boot after. If the model loads and drafts one step, commit() makes it the model (renamed
over the old filesystem copy) and `/update.done` records the outcome for the gateway's next BEGIN; if not,
rollback() deletes it and the previous model runs. Imported only when an update frame arrives or a marker
is there: the node that never updates carries none of this on its heap.

A BEGIN with the CODE flag (protocol 1.4) carries the node's code instead: a package of lib/
(host/codepkg.py), unpacked into /lib.new as it arrives, only the files that differ from /lib written
(firmware/ustar.py: each file's hash checked against its line of CODE.sums, whose hash with CODE.json's is
the BEGIN's; UNFIT when this node could not run it; the resume point, the end of the last whole file, kept
in codeslot.PART every 8 KB), then marked in firmware/codeslot.py's MARK. The boot stub (/codeslot.mpy, which
main.py runs first) switches to it at the next boot and rolls it back if it fails. A node whose code is
frozen into its firmware, or that has no boot stub, answers REFUSED.
"""
import json
import os

from shared import frame

MARK = "/update.json"  # the verified file waiting for the next boot: {"id", "sha", "model", "tries"}
DONE = "/update.done"  # the last outcome: {"id", "sha", "state"} (RUNNING or ROLLED_BACK)
STAT_EVERY = 8192  # bytes between RECEIVING reports (the gateway's progress and resume point)
MARGIN = 16384  # flash kept free beside the second slot (littlefs needs blocks to work in)
STUBS = ("/codeslot.mpy", "/codeslot.py")  # the boot stub a code update needs (the build puts it at the root)


def _size(path):
    try:
        return os.stat(path)[6]
    except OSError:
        return -1


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _read_json(path):
    try:
        with open(path) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def _write_json(path, obj):
    with open(path, "w") as f:
        f.write(json.dumps(obj))


def free_bytes(path="/"):
    try:
        st = os.statvfs(path)
        return st[0] * st[4]
    except (OSError, AttributeError):
        return 1 << 30  # a file system that cannot tell: let the write find out


def sha256_file(path, n):
    """The SHA-256 of the first n bytes of path (512 bytes read at a time)."""
    from shared.compat import sha256

    h = sha256()
    buf = bytearray(512)
    mv = memoryview(buf)
    left = n
    with open(path, "rb") as f:
        while left > 0:
            k = f.readinto(buf)
            if not k:
                break
            k = k if k < left else left
            h.update(mv[:k])
            left -= k
    return h.digest()


def code_refusal():
    """Why this node cannot take its code over the link, or None."""
    if not __file__.startswith("/"):  # frozen modules have no filesystem path
        return "this node's code is frozen into its firmware: flash a new firmware"
    for p in STUBS:
        if _size(p) >= 0:
            return None
    return "this node has no code slot (/codeslot.mpy, put there by a deploy of 1.4 or later): deploy it again"


class Receiver:
    """The node's end of an update; `model` is the path of the model it runs (or the profile's); `board` and
    `flavour` are what a code package must be made for."""

    def __init__(self, model, board="", flavour=""):
        self.model = model[4:] if model.startswith("/rom/") else model  # ROMFS is read-only: the copy goes beside
        self.board = board
        self.flavour = flavour
        self.code = False  # what the transfer under way carries: a code package (into self.up), or a model
        self.up = None  # the code package's firmware.ustar.Unpacker while one arrives
        self.room = 0  # a code package: the flash its files take, checked once CODE.json has come
        self._slot(self.model)
        self.id = -1
        self.size = 0
        self.sha = b""
        self.got = 0
        self.flags = 0
        self.f = None
        self.stat = bytearray(frame.UPSTAT_SIZE)
        self.stat_due = False
        self.reset_due = False  # VERIFIED with UP_REBOOT: reset once the link has acknowledged the UPSTAT

    def _slot(self, path):
        self.slot = path
        self.new = path + ".new"
        self.part = path + ".part"  # id, size and hash of the transfer in .new (resuming needs them)

    def _say(self, state, off):
        b = self.stat
        frame.put_u16(b, frame.US_ID, self.id & 0xFFFF)
        b[frame.US_STATE] = state
        b[3] = 0
        frame.put_u32(b, frame.US_OFF, off & 0x3FFFFFFF)
        self.stat_due = True

    def _close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
        if self.up is not None:
            self.up.close()

    def on_frame(self, buf, off, n):
        """An UPDATE body (checked by the link); returns a line to log, or None."""
        uid = frame.u16(buf, off + frame.UP_ID)
        op = buf[off + frame.UP_OP]
        at = frame.u32s(buf, off + frame.UP_OFF)
        if op == frame.UP_BEGIN:
            return self._begin(uid, buf[off + frame.UP_FLAGS], at, bytes(buf[off + frame.UP_DATA:off + n]))
        if uid != self.id:
            self.id = uid
            self._say(frame.US_ABORTED, 0)  # not ours (a BEGIN this boot never saw): the gateway begins again
            return None
        if op == frame.UP_ABORT:
            if self.code:
                self._drop_code(frame.US_ABORTED)
            else:
                self._close()
                _remove(self.new)
                _remove(self.part)
                self._say(frame.US_ABORTED, 0)
            self.size = 0
            return "UPDATE aborted id=%d" % uid
        if self.f is None and self.up is None or at != self.got:  # out of step (a resend after a resume)
            self._say(frame.US_RECEIVING, self.got)
            return None
        k = n - frame.UP_DATA
        if self.got + k > self.size:
            k = self.size - self.got
        mv = memoryview(buf)[off + frame.UP_DATA:off + frame.UP_DATA + k]
        if self.up is not None:
            line = self._feed(mv)
            if line:
                return line
        else:
            self.f.write(mv)
        before = self.got
        self.got += k
        if self.got >= self.size:
            return self._finish()
        if self.got // STAT_EVERY != before // STAT_EVERY:
            if self.up is not None:  # the resume point: where the last whole file ended, and the files whole there
                from firmware import codeslot

                _write_json(codeslot.PART, {"sha": _hex(self.sha), "size": self.size, "at": self.up.at,
                                            "n": self.up.done})
            else:
                self.f.flush()
            self._say(frame.US_RECEIVING, self.got)
        return None

    def _begin(self, uid, flags, size, sha):
        self.id = uid
        self.flags = flags
        hx = _hex(sha)
        done = _read_json(DONE)
        if done is not None and done.get("sha") == hx:  # this update already ran its trial boot
            self._say(frame.US_RUNNING if done.get("state") == "running" else frame.US_ROLLED_BACK, size)
            return None
        code = bool(flags & frame.UP_CODE)
        path = MARK
        if code:
            why = code_refusal()
            if why:
                self._say(frame.US_REFUSED, 0)
                return "UPDATE refused id=%d: %s" % (uid, why)
            from firmware import codeslot

            path = codeslot.MARK
        mark = _read_json(path)
        if mark is not None and mark.get("sha") == hx:
            self._say(frame.US_VERIFIED, size)
            return None
        if code != self.code:  # the other kind than the last transfer
            self._close()
            self.f = self.up = None
            self.code = code
            self.sha = b""
        if code:
            return self._begin_code(uid, size, sha, hx)
        if self.f is not None and self.sha == sha and self.size == size:
            self._say(frame.US_RECEIVING, self.got)  # the same transfer, begun again (a gateway restart)
            return None
        self._close()
        part = _read_json(self.part)
        have = _size(self.new)
        if part is not None and part.get("sha") == hx and part.get("size") == size and 0 <= have <= size:
            self.got = have  # a transfer cut short (power, link, gateway): go on from what is on flash
            line = "UPDATE resumed id=%d at %d of %d" % (uid, have, size)
        else:
            _remove(self.new)
            free = free_bytes()
            if size + MARGIN > free:
                self._say(frame.US_NO_ROOM, free)
                return "UPDATE refused id=%d: the model is %d bytes, %d free beside the spill ring and the code" % (
                    uid, size, free)
            _write_json(self.part, {"sha": hx, "size": size})
            open(self.new, "wb").close()
            self.got = 0
            line = "UPDATE begun id=%d size=%d sha=%s into %s" % (uid, size, hx[:16], self.new)
        self.sha = sha
        self.size = size
        self.f = open(self.new, "ab")
        if self.got >= size:
            return self._finish()
        self._say(frame.US_RECEIVING, self.got)
        return line

    def _finish(self):
        if self.up is not None:
            return self._finish_code()
        self._close()
        if sha256_file(self.new, self.size) != self.sha:
            _remove(self.new)
            _remove(self.part)
            self._say(frame.US_BAD_HASH, 0)
            return "UPDATE id=%d: hash mismatch, file deleted" % self.id
        _write_json(MARK, {"id": self.id, "sha": _hex(self.sha), "model": self.slot, "new": self.new, "tries": 0})
        _remove(self.part)
        self._say(frame.US_VERIFIED, self.size)
        self.reset_due = bool(self.flags & frame.UP_REBOOT)
        return "UPDATE verified id=%d size=%d: %s at the next boot" % (self.id, self.size, self.slot)

    # ---- a code package (protocol 1.4) ----

    def _begin_code(self, uid, size, sha, hx):
        from firmware import codeslot, ustar

        if self.up is not None and self.sha == sha and self.size == size:
            self._say(frame.US_RECEIVING, self.got)  # the same transfer, begun again (a gateway restart)
            return None
        self._close()
        self.sha = sha
        self.size = size
        self.room = 0
        self.up = ustar.Unpacker(codeslot.NEW, hx, self.board, self.flavour, codeslot.CODE)
        part = _read_json(codeslot.PART)
        line = None
        if part is not None and part.get("sha") == hx and part.get("size") == size and 0 < part.get("at", 0) < size:
            try:  # a transfer cut short: its files up to `at` are in /lib.new, CODE.json and CODE.sums among them
                self.up.resume(part["at"], part.get("n", 0))
                self.got = part["at"]
                self.room = 1  # checked when it began: what it wrote since is on flash already
                line = "UPDATE code resumed id=%d at %d of %d" % (uid, self.got, size)
            except (OSError, ValueError):
                self.up.close()
                self.up = ustar.Unpacker(codeslot.NEW, hx, self.board, self.flavour, codeslot.CODE)
        if line is None:
            codeslot.rmtree(codeslot.NEW)
            free = free_bytes()
            if MARGIN > free:  # what its files take is known once CODE.sums has come (_feed)
                self.up = None
                self._say(frame.US_NO_ROOM, free)
                return "UPDATE refused id=%d: %d bytes free: no room for any code" % (uid, free)
            os.mkdir(codeslot.NEW)
            _write_json(codeslot.PART, {"sha": hx, "size": size, "at": 0, "n": 0})
            self.got = 0
            line = "UPDATE code begun id=%d size=%d sha=%s into %s" % (uid, size, hx[:16], codeslot.NEW)
        self._say(frame.US_RECEIVING, self.got)
        return line

    def _feed(self, mv):
        # the package's next bytes into its files; a line when it cannot go on
        from firmware import ustar

        try:
            self.up.feed(mv)
        except ustar.BadHash as e:
            self._drop_code(frame.US_BAD_HASH)
            return "UPDATE code id=%d: %s; the gateway sends it again" % (self.id, e)
        except ustar.Unfit as e:
            self._drop_code(frame.US_UNFIT)
            return "UPDATE code package id=%d refused: %s" % (self.id, e)
        if self.up.sums is not None and not self.room:  # CODE.sums is whole: the flash its files take
            try:
                bs = os.statvfs("/")[0]
            except (OSError, AttributeError):
                bs = 4096
            try:
                self.room = self.up.need(bs) + MARGIN
            except (ustar.Unfit, ValueError, IndexError) as e:
                self._drop_code(frame.US_UNFIT)
                return "UPDATE code package id=%d refused: %s" % (self.id, e)
            free = free_bytes()
            if self.room > free:
                n = self.up.changed
                self._drop_code(frame.US_NO_ROOM, free)
                return "UPDATE refused id=%d: the files it changes (%d) take %d bytes of flash with the margin, %d " \
                       "free" % (self.id, n, self.room, free)
        return None

    def _drop_code(self, state, off=0):
        from firmware import codeslot

        self._close()
        self.up = None
        codeslot.rmtree(codeslot.NEW)
        _remove(codeslot.PART)
        self._say(state, off)

    def _finish_code(self):
        from firmware import codeslot, ustar

        try:
            n = self.up.finish()
        except ustar.Unfit as e:
            self._drop_code(frame.US_UNFIT)
            return "UPDATE code package id=%d refused: %s" % (self.id, e)
        self.up = None
        _write_json(codeslot.MARK, {"id": self.id, "sha": _hex(self.sha), "tries": 0})
        _remove(codeslot.PART)
        self._say(frame.US_VERIFIED, self.size)
        self.reset_due = bool(self.flags & frame.UP_REBOOT)
        changed = len(codeslot.files(codeslot.NEW)) - len(codeslot.META)  # CODE.json and CODE.sums are there too
        return "UPDATE code verified id=%d: %d files, %d changed, in /lib.new; switched to at the next boot" % (
            self.id, n, changed)


def _hex(b):
    return "".join("%02x" % x for x in b)


# ---- a code update's trial boot ----

def code_trial(node, now):
    """Called from the node's loop while its boot is a code update's trial (firmware/codeslot.py switched the
    files in): the new code is kept once the gateway has adopted our HELLO (it can still be told what to do),
    and rolled back, the board reset, if that has not happened by the tick node.code_trial."""
    from firmware import codeslot
    from shared.compat import ticks_diff

    if node.lk.established:
        node.code_trial = None
        line = codeslot.commit()
        print("NODE " + line)
        node.notice(line)
    elif ticks_diff(now, node.code_trial) > 0:  # new code that never reached the gateway: the old one did
        print("NODE " + codeslot.rollback(codeslot.read_mark(), "it did not reach the gateway in %d s"
                                           % node.cfg["code_trial_s"]))
        codeslot.reset()


# ---- boot ----

def boot_model():
    """The marked update to try at this boot: the marker (a dict, tries already raised and written) or
    None. A marker whose trial already failed to finish (tries > 1) is rolled back here."""
    mark = _read_json(MARK)
    if mark is None:
        return None
    mark["tries"] = mark.get("tries", 0) + 1
    if mark["tries"] > 1 or _size(mark.get("new", "")) < 0:
        rollback(mark)
        return None
    _write_json(MARK, mark)
    return mark


def trial(prof, cfg, make_drafter):
    """The trial of the marked model (firmware/node.py main, before the model loads): load it and draft one
    step; then it becomes the model (commit) or is deleted (rollback). The line that says which."""
    import gc

    mark = boot_model()
    if mark is None:
        return "UPDATE rolled back: its trial boot did not finish; the previous model runs"
    what = "load"
    try:
        d, _ = make_drafter(prof, dict(cfg, model=mark["new"]))
        if d is None:
            raise ValueError("no model")
        what = "draft"
        d.model.step(0)
        d = None
    except Exception as e:  # whatever a bad model raises: the previous one runs
        d = None
        gc.collect()
        return rollback(mark, "it failed to %s (%s)" % (what, e))
    gc.collect()
    return commit(mark)


def commit(mark):
    """The trial loaded and drafted: the new file becomes the model."""
    _remove(mark["model"])
    os.rename(mark["new"], mark["model"])
    _write_json(DONE, {"id": mark["id"], "sha": mark["sha"], "state": "running"})
    _remove(MARK)
    return "UPDATE model %s running: id=%d sha=%s" % (mark["model"], mark["id"], mark["sha"][:16])


def rollback(mark, why="its trial boot did not finish"):
    _remove(mark.get("new", ""))
    _write_json(DONE, {"id": mark.get("id", 0), "sha": mark.get("sha", ""), "state": "rolled_back"})
    _remove(MARK)
    return "UPDATE rolled back id=%d: %s; the previous model runs" % (mark.get("id", 0), why)
