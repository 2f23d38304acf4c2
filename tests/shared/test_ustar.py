# A code package unpacked as it arrives (firmware/ustar.py), on every interpreter: each file checked against its
# CODE.sums line, files the node has already left alone, a transfer resumed at the last whole file, and every
# hostile or damaged archive refused with its reason before it can touch the code the node runs.
import os
import time

import testkit
from firmware import codeslot, ustar
from shared.compat import sha256


def _hex(b):
    return "".join("%02x" % x for x in b)


def _dir(name):
    base = (os.getenv("TMPDIR") if hasattr(os, "getenv") else None) or "/tmp"
    ns = time.time_ns() if hasattr(time, "time_ns") else time.ticks_us()
    return "%s/edgetwin_ustar_%s_%d_%s" % (base, "mp" if testkit.IS_MP else "py", ns % 100000000, name)


def _rm(p):
    try:
        names = os.listdir(p)
    except OSError:
        try:
            os.remove(p)
        except OSError:
            pass
        return
    for n in names:
        _rm(p + "/" + n)
    os.rmdir(p)


def _header(name, size, kind=b"0", good_sum=True):
    # a POSIX ustar header, as Python's tarfile writes one
    h = bytearray(512)
    n = name.encode()
    h[0:len(n)] = n
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = ("%011o" % size).encode() + b"\x00"
    h[136:148] = b"00000000000\x00"
    h[148:156] = b"        "
    h[156] = kind[0]
    h[257:265] = b"ustar\x0000"
    s = sum(h) + (0 if good_sum else 1)
    h[148:156] = ("%06o" % s).encode() + b"\x00 "
    return bytes(h)


def _entry(name, data, kind=b"0", good_sum=True):
    pad = (512 - len(data) % 512) % 512
    return _header(name, len(data), kind, good_sum) + data + bytes(pad)


def _package(files, board="pico", extra=b"", sums_for=None):
    """(archive, hash) of files [(path, bytes)]: CODE.json, CODE.sums, the files, the end blocks."""
    meta = ('{"board": "%s", "bytes": %d, "files": %d, "flavour": null}' % (
        board, sum(len(d) for _, d in files), len(files))).encode()
    sums = "".join("%s %d %s\n" % (_hex(sha256(d).digest()), len(d), p) for p, d in (sums_for or files)).encode()
    out = _entry("CODE.json", meta) + _entry("CODE.sums", sums)
    for p, d in files:
        out += _entry(p, d)
    return out + extra + bytes(1024), _hex(sha256(meta + sums).digest())


MPY = b"M" + bytes((6, 0, 31)) + b"code" * 40  # a bytecode .mpy header (version 6, no native arch)
FILES = [("lib/firmware/node.mpy", MPY + b"node"), ("lib/firmware/update.mpy", MPY + b"update" * 200),
         ("lib/shared/frame.mpy", MPY + b"frame" * 300), ("lib/shared/empty.py", b"")]


def _feed(u, data, step):
    mv = memoryview(data)
    for i in range(0, len(data), step):
        u.feed(mv[i:i + step])


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _unpacker(top, sha, board="pico"):
    return ustar.Unpacker(top + "/new", sha, board, "", top + "/lib")


def _setup(name):
    top = _dir(name)
    os.mkdir(top)
    os.mkdir(top + "/new")
    return top


def test_a_package_unpacks_in_any_chunking_each_file_checked_the_same_ones_skipped():
    for step in (1, 7, 512, 700, 100000):
        top = _setup("all")
        try:
            data, sha = _package(FILES)
            u = _unpacker(top, sha)
            _feed(u, data, step)
            assert u.finish() == 4 and u.same == 0
            for p, d in FILES:
                assert _read(top + "/new" + p[3:]) == d, p
        finally:
            _rm(top)
    # the node already runs two of the files: they are checked as they pass and not written again
    top = _setup("same")
    try:
        codeslot.mkdirs(top + "/lib/firmware/x")
        codeslot.mkdirs(top + "/lib/shared/x")
        for p, d in FILES[:1] + FILES[2:3]:
            with open(top + "/" + p, "wb") as f:
                f.write(d)
        data, sha = _package(FILES)
        u = _unpacker(top, sha)
        _feed(u, data, 333)
        assert u.need(4096) == 4096  # update.mpy's one block; the empty file takes none; the rest are there
        assert u.changed == 2
        assert u.finish() == 4 and u.same == 2
        assert sorted(os.listdir(top + "/new/firmware")) == ["update.mpy"]
        assert sorted(os.listdir(top + "/new/shared")) == ["empty.py"]
    finally:
        _rm(top)


def test_a_cut_transfer_resumes_at_the_last_whole_file():
    data, sha = _package(FILES)
    top = _setup("resume")
    try:
        u = _unpacker(top, sha)
        cut = len(data) - 2000  # inside the third file
        _feed(u, data[:cut], 256)
        at, done = u.at, u.done
        assert 0 < at < cut and at % 512 == 0 and done == 2, (at, cut, done)
        u.close()
        v = _unpacker(top, sha)
        v.resume(at, done)
        _feed(v, data[at:], 100)
        assert v.finish() == 4
        for p, d in FILES:
            assert _read(top + "/new" + p[3:]) == d, p
    finally:
        _rm(top)


def _refused(name, data, sha, exc=ustar.Unfit, board="pico"):
    top = _setup(name)
    try:
        u = _unpacker(top, sha, board)

        def run():
            _feed(u, data, 512)
            u.finish()

        e = testkit.raises(exc, run)
        u.close()
        return str(e)
    finally:
        _rm(top)


def test_hostile_and_damaged_archives_are_refused_with_their_reason():
    good, sha = _package(FILES)
    # a path out of lib/, a link, a file not listed, a header damaged, another board, another .mpy version
    for path in ("lib/../../main.py", "/lib/firmware/x.mpy", "boot.py"):
        files = FILES + [(path, b"x")]
        data, h = _package(files)
        assert "only files under lib/" in _refused("path", data, h)
    data, h = _package(FILES, extra=_entry("lib/firmware/link.mpy", b"", kind=b"2"))
    assert "is not a file" in _refused("link", data, h)
    data, h = _package(FILES, extra=_entry("lib/firmware/extra.mpy", MPY))
    assert "not the next file CODE.sums lists" in _refused("extra", data, h)
    bad = good[:2048] + _header(FILES[0][0], len(FILES[0][1]), good_sum=False) + good[2560:]
    assert "checksum" in _refused("sum", bad, sha)
    data, h = _package([(FILES[0][0], FILES[0][1])] + [(p, d) for p, d in FILES[1:]], board="esp32")
    assert "for board esp32; this node is pico" in _refused("board", data, h)
    old = [(p, (b"M\x05" + d[2:]) if p.endswith(".mpy") else d) for p, d in FILES]
    data, h = _package(old)
    if testkit.IS_MP:
        assert ".mpy version 5" in _refused("mpy", data, h)
    data, h = _package(FILES[1:])
    top = _setup("nonode")
    try:
        u = _unpacker(top, h)
        _feed(u, data, 512)
        assert "no lib/firmware/node" in str(testkit.raises(ustar.Unfit, u.need, 4096))
        u.close()
    finally:
        _rm(top)
    # a file whose bytes are not the ones its line lists, or a description that is not the update's
    swapped = _package(FILES, sums_for=[(FILES[0][0], FILES[0][1] + b"!")] + FILES[1:])[0]
    assert "CODE.sums" in _refused("hash", swapped, sha, ustar.BadHash)
    assert "not hash to the update" in _refused("meta", good, "0" * 64, ustar.BadHash)
    # truncated: the archive stops inside a file
    assert "ends before" in _refused("short", good[:len(good) - 1024 - 600], sha)
    assert "does not begin with CODE.json" in _refused("nometa", _entry("lib/firmware/node.mpy", MPY), sha)
