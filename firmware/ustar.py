# ustar.py: a code package (a ustar archive of lib/) unpacked on the board as it arrives, each file's hash checked.
"""The gateway sends the node's code as one archive (host/codepkg.py makes it with Python's tarfile, POSIX
ustar, no compression). Its first entry, CODE.json, says what it is for ({"board", "flavour", "arch", "mpy",
"files", "bytes"}); the second, CODE.sums, lists every file that follows, in the archive's order, one line
each: "<sha256 hex> <size> <path>". The update's own hash (UPDATE BEGIN) is the SHA-256 of those two
entries' bytes. So the node never keeps the archive: Unpacker takes its bytes as they arrive (feed),
writes each file under lib/ that differs from the code the node runs (`base`: lib/x is base/x) to `dest`
(dest/x; CODE.json and CODE.sums beside them) and checks its hash against its line when it ends. So the
flash an update needs is that of the files it changes, once, and the RAM a line and a header. `at` is
where the last whole file ended and `done` how many files were whole there: a transfer cut by a reboot
goes on from there (resume()).

What it refuses (Unfit, with the reason; the caller deletes dest): a header whose checksum is wrong, an
entry other than a file or a folder, a path outside lib/ (absolute, `..`), a file other than the next one
CODE.sums lists, a package for another board or flavour, a .mpy of another bytecode version or a native
.mpy of another architecture (sys.implementation._mpy), a package without the node itself
(lib/firmware/node.*: need()), an archive that ends early. A file whose hash is not its line's, or a
CODE.json and CODE.sums that do not hash to the update's, raise BadHash (a damaged transfer: the gateway
sends it again).
Only the header fields a ustar writer fills are read: name (and prefix), size, typeflag, checksum. Not a
hot path: it runs once per update; one 512-byte header buffer, reused.
"""
import json
import os
import sys

from firmware.codeslot import mkdirs
from shared.compat import sha256

BLOCK = 512
META = "CODE.json"
SUMS = "CODE.sums"
META_MAX = 2048
SUMS_MAX = 1 << 20


class Unfit(ValueError):
    pass


class BadHash(ValueError):
    pass


def _octal(b, off, n):
    v = 0
    for i in range(off, off + n):
        c = b[i]
        if c == 0 or c == 32:
            if v or i > off:
                break
            continue
        if c < 48 or c > 55:
            raise Unfit("a header's number is not octal")
        v = v * 8 + c - 48
    return v


def _text(b, off, n):
    end = off
    while end < off + n and b[end]:
        end += 1
    return bytes(b[off:end]).decode()


def _checksum_ok(b):
    want = _octal(b, 148, 8)
    s = 0
    for i in range(BLOCK):
        s += 32 if 148 <= i < 156 else b[i]
    return s == want


def _hex(b):
    return "".join("%02x" % x for x in b)


def _my_mpy():
    # (bytecode version, native arch code) of this interpreter, or None where it does not say
    v = getattr(sys.implementation, "_mpy", None)
    return None if v is None else (v & 0xFF, v >> 10)


class Unpacker:
    """Unpack a code package into dest as its bytes come; `sha` is the update's hash (hex)."""

    def __init__(self, dest, sha, board="", flavour="", base="/lib"):
        self.dest = dest
        self.base = base
        self.sha = sha
        self.board = board
        self.flavour = flavour
        self.mine = _my_mpy()
        self.hdr = bytearray(BLOCK)
        self.hn = 0  # header bytes held
        self.name = None  # the entry being read (None: between entries)
        self.left = 0  # its bytes still to come
        self.pad = 0  # padding after it, to the next 512-byte boundary
        self.f = None  # the file it goes to
        self.h = None  # its hash so far
        self.want = None  # its line of CODE.sums: (sha hex, size)
        self.first = 0  # a .mpy's header bytes still to come (checked once all 4 are here)
        self.head = bytearray(4)
        self.meta = None  # CODE.json, parsed
        self.mbuf = None  # CODE.json while it arrives
        self.mh = sha256()  # CODE.json and CODE.sums: the update's hash
        self.sums = None  # CODE.sums, open for reading once its hash is right
        self.pos = 0  # bytes of the archive taken
        self.at = 0  # where the last whole file ended (0 until CODE.sums is whole): the resume point
        self.done = 0  # files whole at `at`
        self.same = 0  # of them, the ones the node has already (not written again)
        self.ended = False

    def resume(self, at, done):
        """Go on at `at` with `done` files whole (both saved from a previous transfer of this package)."""
        with open(self.dest + "/" + META) as f:
            self._meta(f.read())
        self._open_sums()
        for _ in range(done):
            self.sums.readline()
        self.pos = self.at = at
        self.done = done
        self.mh = None

    def _open_sums(self):
        self.sums = open(self.dest + "/" + SUMS)

    def feed(self, data):
        """Take the archive's next bytes (a memoryview)."""
        i = 0
        n = len(data)
        while i < n:
            if self.name is not None:  # an entry's bytes
                k = min(self.left, n - i)
                self._body(data[i:i + k])
                self.left -= k
                i += k
                if not self.left:
                    self._end()
                    if not self.pad:
                        self._boundary(i)
                continue
            if self.pad:  # then its padding to the next 512-byte boundary
                k = min(self.pad, n - i)
                self.pad -= k
                i += k
                if not self.pad:
                    self._boundary(i)
                continue
            if self.ended:
                break  # the archive's trailing zero blocks
            k = min(BLOCK - self.hn, n - i)  # a header
            self.hdr[self.hn:self.hn + k] = data[i:i + k]
            self.hn += k
            i += k
            if self.hn == BLOCK:
                self.hn = 0
                self._header()
                if self.name is None and not self.pad and not self.ended:
                    self._boundary(i)
        self.pos += n

    def _boundary(self, i):
        if self.sums is not None:
            self.at = self.pos + i

    def _header(self):
        b = self.hdr
        if not any(b):
            self.ended = True  # end of archive
            return
        if not _checksum_ok(b):
            raise Unfit("a header's checksum is wrong: not a ustar archive, or a damaged one")
        name = _text(b, 0, 100)
        prefix = _text(b, 345, 155) if b[257:262] == b"ustar" else ""
        if prefix:
            name = prefix + "/" + name
        size = _octal(b, 124, 12)
        kind = b[156]
        if kind not in (0, 48, 53):  # "0" or NUL: a regular file, "5" a folder; links, devices... are refused
            raise Unfit("%s: entry type %r is not a file" % (name, chr(kind)))
        if self.meta is None and self.mbuf is None:
            if name != META or kind == 53 or size > META_MAX:
                raise Unfit("the package does not begin with CODE.json")
            self.mbuf = bytearray()
            self.f = open(self.dest + "/" + META, "wb")
        elif self.sums is None:
            if name != SUMS or kind == 53 or size > SUMS_MAX:
                raise Unfit("the package's second entry is not CODE.sums")
            self.f = open(self.dest + "/" + SUMS, "wb")
        elif kind == 53:  # a folder (made with its files anyway)
            self._path(name.rstrip("/") + "/x")
            self.pad = (BLOCK - size % BLOCK) % BLOCK
            return
        else:
            line = self.sums.readline().split()
            if len(line) != 3 or line[2] != name or int(line[1]) != size:
                raise Unfit("%s (%d bytes) is not the next file CODE.sums lists" % (name, size))
            self.want = line[0]
            out = self._path(name)
            if not self.has(name, size, self.want):
                mkdirs(out)
                self.f = open(out, "wb")
            self.h = sha256()
            self.first = 4 if name.endswith(".mpy") else 0
        self.name = name
        self.left = size
        self.pad = (BLOCK - size % BLOCK) % BLOCK
        if not size:
            self._end()

    def _path(self, name):
        if not name.startswith("lib/") or name.find("..") >= 0 or name.find("//") >= 0 or name.find("\\") >= 0:
            raise Unfit("%s: only files under lib/ may be in a code package" % name)
        return self.dest + name[3:]

    def has(self, name, size, sha):
        """Whether the node's code has the file lib/... `name` with that size and hash already."""
        path = self.base + name[3:]
        try:
            if os.stat(path)[6] != size:
                return False
            h = sha256()
            with open(path, "rb") as f:
                while True:
                    k = f.readinto(self.hdr)
                    if not k:
                        break
                    h.update(memoryview(self.hdr)[:k])
            return _hex(h.digest()) == sha
        except OSError:
            return False

    def _body(self, mv):
        if self.f is not None:
            self.f.write(mv)
        if self.h is None:  # CODE.json or CODE.sums
            self.mh.update(mv)
            if self.mbuf is not None:
                self.mbuf += mv
            return
        if self.first:
            j = 4 - self.first
            k = min(self.first, len(mv))
            self.head[j:j + k] = mv[:k]
            self.first -= k
            if not self.first:
                self._check_mpy(self.head)
        self.h.update(mv)

    def _check_mpy(self, head):
        name = self.name
        if head[0] != 77:  # "M"
            raise Unfit("%s is not a .mpy file" % name)
        mine = self.mine
        if mine is None:
            return
        if head[1] != mine[0]:
            raise Unfit("%s is .mpy version %d; this firmware runs version %d" % (name, head[1], mine[0]))
        arch = head[2] >> 2
        if arch and arch != mine[1]:
            raise Unfit("%s is native code for architecture %d; this chip runs %d" % (name, arch, mine[1]))

    def _end(self):
        if self.first:  # shorter than a .mpy's header
            raise Unfit("%s is not a .mpy file" % self.name)
        if self.f is not None:
            self.f.close()
        else:
            self.same += 1
        self.f = None
        if self.mbuf is not None:  # CODE.json
            m = bytes(self.mbuf)
            self.mbuf = None
            self._meta(m)
        elif self.h is None:  # CODE.sums: with CODE.json, the update's hash
            if _hex(self.mh.digest()) != self.sha:
                raise BadHash("CODE.json and CODE.sums do not hash to the update's SHA-256")
            self.mh = None
            self._open_sums()
        else:
            if _hex(self.h.digest()) != self.want:
                raise BadHash("%s: its hash is not the one CODE.sums lists" % self.name)
            self.h = None
            self.done += 1
        self.name = None

    def _meta(self, m):
        try:
            meta = json.loads(m)
            ok = isinstance(meta, dict) and isinstance(meta.get("files"), int)
        except ValueError:
            ok = False
        if not ok:
            raise Unfit("CODE.json is not a package's")
        if self.board and meta.get("board") not in (None, self.board):
            raise Unfit("the package is for board %s; this node is %s" % (meta.get("board"), self.board))
        if self.flavour and meta.get("flavour") not in (None, self.flavour):
            raise Unfit("the package is for %s; this node runs %s" % (meta.get("flavour"), self.flavour))
        self.meta = meta

    def need(self, bs):
        """The flash the package's files that differ from the node's take, in blocks of bs bytes (read from
        CODE.sums, once it is whole); their number in `changed`."""
        n = 0
        node = False
        self.changed = 0
        with open(self.dest + "/" + SUMS) as f:
            for line in f:
                w = line.split()
                size = int(w[1])
                if not self.has(w[2], size, w[0]):
                    n += (size + bs - 1) // bs * bs
                    self.changed += 1
                node = node or w[2].startswith("lib/firmware/node.")
        if not node:
            raise Unfit("the package holds no lib/firmware/node.mpy (or .py): the node would not start")
        return n

    def close(self):
        for f in (self.f, self.sums):
            if f is not None:
                f.close()
        self.f = self.sums = None

    def finish(self):
        """The whole archive arrived: every file CODE.sums lists is in dest. Returns their number."""
        rest = self.sums.readline() if self.sums is not None else "?"
        self.close()
        if self.meta is None or self.name is not None or rest:
            raise Unfit("the archive ends before the last file CODE.sums lists")
        if self.done != self.meta["files"]:
            raise Unfit("%d files arrived; CODE.json says %d" % (self.done, self.meta["files"]))
        return self.done
