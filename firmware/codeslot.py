# codeslot.py: the node's code received over the link, switched in at boot before any of it loads, and rolled back.
"""A board build puts this file at the root of the board's filesystem (codeslot.mpy beside main.py, not
under /lib): a code update replaces files under /lib, and this is the part that must outlive a bad one.
main.py calls boot() before it imports the node, and failed(e) when the node raises.

The code the node runs is /lib (lib/shared, lib/firmware, the native kernels). firmware/update.py
receives a code package over the link and writes the files that differ from /lib into /lib.new (with the
package's CODE.json and CODE.sums), each hash checked, then writes MARK. At the next boot, boot() raises
the marker's try count and switches: it writes the JOURNAL (a line per file: "+path" replaced, "*path"
added, "-path" a file of /lib the package does not have), then moves each old file to /lib.old and each
new one into /lib. The new code commits (commit(), called by firmware/node.py once the gateway has adopted its
HELLO: it can still be told what to do) by deleting /lib.old. A trial that raises (failed), that does not
finish its boot (the next boot finds the marker tried: a reset, the watchdog, a power cut) or that does not
reach the gateway in time (firmware/node.py) is rolled back by the journal: every file back where it was.
Each outcome is kept in DONE for the gateway's next BEGIN and said once in a log line (NOTE). Every rename
is atomic on littlefs and FAT, and the journal says what each state means, so a power cut anywhere in a
switch, a commit or a rollback is finished or undone by the next boot. Nothing here may raise into
main.py: a node that cannot switch runs the code it has.
"""
import json
import os

CODE = "/lib"
NEW = "/lib.new"
OLD = "/lib.old"
MARK = "/code.json"  # a verified package in NEW: {"id", "sha", "tries"}
JOURNAL = "/code.switch"  # the switch under trial: "+path", "*path", "-path" lines, paths relative to CODE
PART = "/code.part"  # a package still arriving (firmware/update.py keeps its resume point here): NEW is kept
DONE = "/update.done"  # firmware/update.py DONE: the last outcome, {"id", "sha", "state", "kind"}
NOTE = "/code.note"  # the outcome's line, logged by the node that boots next (firmware/node.py)
META = ("CODE.json", "CODE.sums")  # the package's own description, kept in CODE with the files


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def _read(path):
    try:
        with open(path) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def mkdirs(path):
    """Every folder above the file `path`, from the top (os.makedirs is not on every port)."""
    j = 1
    while True:
        j = path.find("/", j)
        if j < 0:
            return
        try:
            os.mkdir(path[:j])
        except OSError:
            pass
        j += 1


def _is_dir(path):
    return os.stat(path)[0] & 0x4000


def rmtree(path):
    """Delete a folder and everything under it (os has no rmtree on the boards); a missing one is fine."""
    try:
        names = os.listdir(path)
    except OSError:
        _remove(path)
        return
    for name in names:
        p = path + "/" + name
        if _is_dir(p):
            rmtree(p)
        else:
            os.remove(p)
    os.rmdir(path)


def files(top, rel=""):
    """The files under top, as paths relative to it."""
    out = []
    try:
        names = os.listdir(top + rel)
    except OSError:
        return out
    for name in names:
        r = rel + "/" + name
        if _is_dir(top + r):
            out += files(top, r)
        else:
            out.append(r[1:])
    return out


def read_mark():
    """The marker of the package waiting or under trial ({} when none or unreadable)."""
    return _read(MARK) or {}


def in_trial():
    """True while this boot runs a code package that has not committed yet."""
    return _exists(MARK) and _exists(JOURNAL)


def boot():
    """Before the node loads: switch to a marked package (a trial), or finish what a cut left behind."""
    try:
        mark = _read(MARK)
        if mark is None:
            _remove(MARK)  # unreadable: nothing to try
            if _exists(JOURNAL) or _exists(OLD):  # a commit cut short: /lib is the code to keep
                rmtree(OLD)
                _remove(JOURNAL)
            if not _exists(PART):
                rmtree(NEW)  # a package that never became whole, and no transfer to resume
            return
        done = _read(DONE)
        if done is not None and done.get("sha") == mark.get("sha") and done.get("state") == "running":
            commit()  # the commit was cut short after it wrote DONE
            return
        tries = mark.get("tries", 0) + 1
        if tries > 1:
            rollback(mark, "its trial boot did not finish (a reset, the watchdog or a power cut)")
            return
        if not _exists(NEW + "/" + META[1]):
            rollback(mark, "its files are gone")
            return
        mark["tries"] = tries
        _write(MARK, json.dumps(mark))  # before any file moves: a cut after this finds the trial counted
        _switch()
    except Exception as e:  # a file system error: keep (or restore) the code that ran before
        try:
            rollback(read_mark(), "the switch failed: %r" % (e,))
        except Exception:
            pass


def _switch():
    keep = set(META)
    with open(NEW + "/" + META[1]) as f:
        for line in f:
            w = line.split()
            if len(w) == 3 and w[2].startswith("lib/"):
                keep.add(w[2][4:])
    new = files(NEW)
    gone = [r for r in files(CODE) if r not in keep]
    rmtree(OLD)  # a leftover of a commit cut short: never the code to go back to
    _write(JOURNAL + ".tmp", "".join(("+%s\n" if _exists(CODE + "/" + r) else "*%s\n") % r for r in new)
           + "".join("-%s\n" % r for r in gone))
    os.rename(JOURNAL + ".tmp", JOURNAL)  # whole or absent
    for r in new:
        if _exists(CODE + "/" + r):
            mkdirs(OLD + "/" + r)
            os.rename(CODE + "/" + r, OLD + "/" + r)
        mkdirs(CODE + "/" + r)
        os.rename(NEW + "/" + r, CODE + "/" + r)
    for r in gone:
        mkdirs(OLD + "/" + r)
        os.rename(CODE + "/" + r, OLD + "/" + r)


def failed(e):
    """main.py: the node raised e. In a trial: roll back and reset (the previous code boots); else nothing."""
    if not in_trial():
        return
    try:
        rollback(read_mark(), "it raised %s: %s" % (type(e).__name__, e))
    except Exception:
        return
    reset()


def commit():
    """The new code reached the gateway: it is the code now. The line to log."""
    mark = _read(MARK) or {}
    _write(DONE, json.dumps({"id": mark.get("id", 0), "sha": mark.get("sha", ""), "state": "running",
                             "kind": "code"}))
    _remove(MARK)
    rmtree(OLD)
    rmtree(NEW)
    _remove(JOURNAL)
    return "UPDATE code running: id=%d sha=%s" % (mark.get("id", 0), mark.get("sha", "")[:16])


def rollback(mark, why):
    """Back to the code that ran before the trial, by the journal; the package is deleted. The line to log
    (also kept in NOTE for the next boot's node)."""
    try:
        with open(JOURNAL) as f:
            lines = f.read().split("\n")
    except OSError:
        lines = ()  # no switch began
    # Each line's state tells what to do, so a rollback cut anywhere can run again: NEW and OLD stay until
    # the journal is gone
    for line in lines:
        r = line[1:]
        if not r:
            continue
        if _exists(OLD + "/" + r):  # moved aside: back it goes (over the new one, if that came)
            _remove(CODE + "/" + r)
            os.rename(OLD + "/" + r, CODE + "/" + r)
        elif line[0] == "*" and not _exists(NEW + "/" + r):  # a file the package added, switched in
            _remove(CODE + "/" + r)
    _remove(JOURNAL)
    _remove(JOURNAL + ".tmp")
    rmtree(NEW)
    rmtree(OLD)
    _remove(PART)
    _write(DONE, json.dumps({"id": mark.get("id", 0), "sha": mark.get("sha", ""), "state": "rolled_back",
                             "kind": "code"}))
    _remove(MARK)
    line = "UPDATE code rolled back id=%d: %s; the previous code runs" % (mark.get("id", 0), why)
    _write(NOTE, line)
    return line


def reset():
    try:
        __import__("machine").reset()
    except (ImportError, AttributeError):
        __import__("microcontroller").reset()
