# The code-update boot stub (firmware/codeslot.py) on every interpreter: a marked package switched in file by file,
# committed or rolled back to exactly the code that ran before, and a power cut at every file operation of a
# switch, a rollback or a commit finished or undone by the next boot.
import json
import os
import time

import testkit
from firmware import codeslot

OLD_CODE = {"firmware/node.mpy": b"old node", "shared/frame.mpy": b"frame, the same in both",
            "shared/gone.mpy": b"a module the new code no longer has"}
NEW_FILES = {"firmware/node.mpy": b"new node", "shared/added.mpy": b"a module the new code adds"}
NEW_CODE = {"firmware/node.mpy": b"new node", "shared/frame.mpy": b"frame, the same in both",
            "shared/added.mpy": b"a module the new code adds"}
SUMS = "".join("%s %d lib/%s\n" % ("0" * 64, len(d), p) for p, d in sorted(NEW_CODE.items()))


class PowerCut(BaseException):
    pass


class CutOs:
    """os, whose n-th file operation that changes the flash never happens: the power goes first."""

    def __init__(self, real, n):
        self.real = real
        self.n = n

    def _tick(self):
        self.n -= 1
        if self.n < 0:
            raise PowerCut()

    def __getattr__(self, name):
        f = getattr(self.real, name)
        if name not in ("rename", "remove", "rmdir", "mkdir"):
            return f

        def op(*a):
            self._tick()
            return f(*a)
        return op


def _dir():
    base = (os.getenv("TMPDIR") if hasattr(os, "getenv") else None) or "/tmp"
    ns = time.time_ns() if hasattr(time, "time_ns") else time.ticks_us()
    return "%s/edgetwin_codeslot_%s_%d" % (base, "mp" if testkit.IS_MP else "py", ns % 100000000)


def _write(path, data):
    codeslot.mkdirs(path)
    with open(path, "wb") as f:
        f.write(data)


def _tree(top):
    out = {}
    for r in codeslot.files(top):
        with open(top + "/" + r, "rb") as f:
            out[r] = f.read()
    return out


class Board:
    """A board's filesystem in a temporary folder: codeslot's paths pointed into it."""

    def __init__(self):
        self.top = _dir()
        os.mkdir(self.top)
        self.saved = {}
        for k in ("CODE", "NEW", "OLD", "MARK", "JOURNAL", "PART", "DONE", "NOTE"):
            self.saved[k] = getattr(codeslot, k)
            setattr(codeslot, k, self.top + getattr(codeslot, k))
        for r, d in OLD_CODE.items():
            _write(codeslot.CODE + "/" + r, d)
        for r, d in NEW_FILES.items():  # what firmware/update.py leaves: the files that differ, and the sums
            _write(codeslot.NEW + "/" + r, d)
        _write(codeslot.NEW + "/CODE.json", b'{"files": 3}')
        _write(codeslot.NEW + "/CODE.sums", SUMS.encode())
        _write(codeslot.MARK, json.dumps({"id": 7, "sha": "ab" * 32, "tries": 0}).encode())

    def code(self):
        t = _tree(codeslot.CODE)
        t.pop("CODE.json", None)
        t.pop("CODE.sums", None)
        return t

    def leftovers(self):
        return [p for p in (codeslot.NEW, codeslot.OLD, codeslot.JOURNAL, codeslot.MARK) if _exists(p)]

    def done(self):
        with open(codeslot.DONE) as f:
            return json.loads(f.read())["state"]

    def close(self):
        codeslot.os = os
        codeslot.rmtree(self.top)
        for k, v in self.saved.items():
            setattr(codeslot, k, v)


def _exists(p):
    try:
        os.stat(p)
        return True
    except OSError:
        return False


def _cut(n, fn, *args):
    """Run fn with the power cut before the n-th change to the flash; True if it was cut."""
    codeslot.os = CutOs(os, n)
    try:
        fn(*args)
        return False
    except PowerCut:
        return True
    finally:
        codeslot.os = os


def test_a_package_switches_in_file_by_file_and_commits():
    b = Board()
    try:
        codeslot.boot()
        assert codeslot.in_trial() and b.code() == NEW_CODE
        assert _tree(codeslot.OLD) == {"firmware/node.mpy": b"old node", "shared/gone.mpy": OLD_CODE["shared/gone.mpy"]}
        line = codeslot.commit()
        assert line.startswith("UPDATE code running: id=7") and b.done() == "running"
        assert b.code() == NEW_CODE and b.leftovers() == [] and not codeslot.in_trial()
        codeslot.boot()  # the next boot: nothing to do
        assert b.code() == NEW_CODE and b.leftovers() == []
    finally:
        b.close()


def test_a_trial_that_raises_or_never_finishes_is_rolled_back_to_the_code_before():
    b = Board()
    try:
        codeslot.boot()
        assert codeslot.in_trial()
        codeslot.boot()  # the trial boot died (a reset, the watchdog): the next one rolls back
        assert b.code() == OLD_CODE and b.leftovers() == [] and b.done() == "rolled_back"
        with open(codeslot.NOTE) as f:
            assert "rolled back id=7: its trial boot did not finish" in f.read()
    finally:
        b.close()


def test_a_power_cut_anywhere_in_a_switch_or_a_rollback_leaves_the_code_before():
    n = 0
    while True:
        b = Board()
        try:
            cut = _cut(n, codeslot.boot)
            if not cut:
                assert b.code() == NEW_CODE  # past the last operation: the whole switch ran
                break
            m = 0
            while _cut(m, codeslot.boot):  # the next boot rolls back, and is itself cut at every step
                m += 1
            assert b.code() == OLD_CODE, (n, m)
            assert b.leftovers() == [] and b.done() == "rolled_back", (n, m, b.leftovers())
        finally:
            b.close()
        n += 1
    assert n > 8  # every rename, folder and journal write of the switch was cut once


def test_a_power_cut_anywhere_in_a_commit_is_finished_by_the_next_boot():
    n = 0
    while True:
        b = Board()
        try:
            codeslot.boot()
            if not _cut(n, codeslot.commit):
                break
            codeslot.boot()
            assert b.code() == NEW_CODE and b.leftovers() == [] and b.done() == "running", (n, b.leftovers())
        finally:
            b.close()
        n += 1
    assert n > 3


def test_a_transfer_still_arriving_keeps_its_files_across_a_boot():
    b = Board()
    try:
        os.remove(codeslot.MARK)
        _write(codeslot.PART, b'{"at": 4096}')
        codeslot.boot()
        assert _exists(codeslot.NEW + "/CODE.sums") and b.code() == OLD_CODE
        os.remove(codeslot.PART)
        codeslot.boot()  # no transfer to resume, no marker: a package that never became whole is deleted
        assert not _exists(codeslot.NEW) and b.code() == OLD_CODE
    finally:
        b.close()
