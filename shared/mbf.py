# mbf.py: streaming reader for MBF model files; validates everything, reads segments with readinto.
# Format: docs/MBF.md. Runs on CPython 3.10+ and MicroPython 1.22+.
# A file whose bytes are addressable (a ROMFS file in flash on MicroPython: memoryview(f) gives them; or a
# buffer passed to open()) is also readable in place: Reader.mem, Reader.view(name), no copy (docs/MBF.md 6).
import binascii
import struct
import sys

try:
    from uctypes import addressof as _addressof  # MicroPython: where a buffer's bytes start
except ImportError:
    _addressof = None

from shared.compat import const

_fopen = open  # this module's own open() shadows the builtin below
# MicroPython and CircuitPython: no memoryview.nbytes/cast, so byte buffers only (see _buf_bytes)
_MP = sys.implementation.name in ("micropython", "circuitpython")

MAGIC = b"MBF\x1a"
MAJOR = const(1)
MINOR = const(0)
HEADER = const(32)  # fixed header bytes
CFG_ENTRY = const(24)  # key[15] type[1] value[8]
SEG_ENTRY = const(64)  # name[32] dtype ndim flags shape[4] offset length crc
NAME_FIELD = const(32)  # segment name field: at most 31 characters, NUL-padded
KEY_FIELD = const(15)  # config key field: at most 14 characters, NUL-padded
ALIGN = const(32)
MAX_CONFIG = const(64)
MAX_SEGMENTS = const(4096)
MAX_DIMS = const(4)
CHUNK = const(512)  # the one I/O buffer; CRCs of segments stream through it
DEFAULT_BUDGET = const(65536)
T_INT = const(1)  # config value types: i64, f64
T_FLOAT = const(2)

# dtype code -> (name, bytes per element; 0 = q4 / q4a, two elements per byte)
DTYPES = {1: ("q4", 0), 2: ("f16", 2), 3: ("f32", 4), 4: ("i8", 1), 5: ("u8", 1),
          6: ("i16", 2), 7: ("u16", 2), 8: ("i32", 4), 9: ("q4a", 0), 10: ("q8", 1)}
DTYPE_CODES = {}
for _c in DTYPES:
    DTYPE_CODES[DTYPES[_c][0]] = _c
Q4 = const(1)
F16 = const(2)
Q4A = const(9)  # asymmetric INT4: with '.scales' and '.mins'
Q8 = const(10)  # INT8 weights: with '.scales'


# Known config keys: (key, type, minimum, maximum, required). A reader keeps unknown keys as they are.
CONFIG = (
    ("dim", T_INT, 1, 65536, True),
    ("hidden_dim", T_INT, 1, 1 << 20, True),
    ("n_layers", T_INT, 1, 1024, True),
    ("n_heads", T_INT, 1, 1024, True),
    ("n_kv_heads", T_INT, 1, 1024, True),
    ("head_dim", T_INT, 1, 4096, False),
    ("vocab_size", T_INT, 1, 1 << 24, True),
    ("sub_vocab", T_INT, 0, 1 << 24, True),
    ("seq_len", T_INT, 1, 1 << 24, True),
    ("rope_theta", T_FLOAT, 1.0, 1e9, True),
    ("norm_eps", T_FLOAT, 1e-12, 0.1, True),
    ("group_size", T_INT, 2, 4096, True),
    ("tied_embed", T_INT, 0, 1, True),
    ("hidden_dim_src", T_INT, 1, 1 << 20, False),  # hidden_dim zero-padded from this width (docs/MBF.md)
    ("tokenizer_kind", T_INT, 0, 1, False),  # the tokenizer region's format: 0 byte-level BPE, 1 llama2.c
)
TOK_BPE = const(0)  # tokenizer_kind: shared/bpe.py's ETOK blob (also when the key is absent)
TOK_LLAMA2C = const(1)  # shared/sptok.py's L2CT blob (llama2.c's scored vocabulary, byte fallback)
LAYER_PREFIX = "blk."
SCALES_SUFFIX = ".scales"
MINS_SUFFIX = ".mins"

# What the budget charges (bytes), measured on the unix port with margin; 32-bit boards use less.
COST_FIXED = const(1792)  # the chunk buffer, its views, the reader object
COST_CONFIG = const(72)  # per config entry: its 24 bytes + the value in the config dict
COST_SEGMENT = const(76)  # per segment: its 64-byte entry + offset, length and CRC arrays
COST_PART = const(144)  # per layer part: its name, size, buffer object (+ 2 B per layer in the plan)


class MBFError(ValueError):
    """A model file that is not a valid MBF file (or a buffer that does not fit a segment)."""


def _name_char(c):
    # A-Z a-z 0-9 . _ -
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 46 or c == 95 or c == 45


def _field_text(raw, a, width, what, keychars):
    """Decode a NUL-padded ASCII field; raise MBFError if empty, unterminated or bad."""
    n = 0
    while n < width and raw[a + n] != 0:
        c = raw[a + n]
        if keychars:
            ok = (48 <= c <= 57) or (97 <= c <= 122) or c == 95
        else:
            ok = _name_char(c)
        if not ok:
            raise MBFError("%s: byte %d is 0x%02x, not an allowed name character" % (what, n, c))
        n += 1
    if n == 0:
        raise MBFError("%s: empty name" % what)
    if n == width:
        raise MBFError("%s: name is not NUL-terminated within %d bytes (too long)" % (what, width))
    for k in range(n, width):
        if raw[a + k] != 0:
            raise MBFError("%s: bytes after the name's NUL are not zero" % what)
    return bytes(raw[a:a + n]).decode()


def _buf_bytes(buf):
    """Byte size of a writable, contiguous byte buffer, else -1 (allocates nothing on MicroPython)."""
    if _MP:
        # MicroPython cannot tell an array's item size: only byte buffers are accepted
        if type(buf) is bytearray or type(buf) is memoryview:
            return len(buf)
        return -1
    try:
        m = memoryview(buf)
    except TypeError:
        return -1
    return m.nbytes if m.contiguous and not m.readonly else -1


class Seg:
    """Descriptor of one segment: name, dtype ('q4', 'f16'...), shape tuple, offset, length, crc."""

    def __init__(self, index, name, dtype, shape, offset, length, crc):
        self.index = index
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.offset = offset
        self.length = length
        self.crc = crc

    def __repr__(self):
        return "Seg(%r, %s, %r, offset=%d, length=%d)" % (self.name, self.dtype, self.shape, self.offset,
                                                           self.length)


def _in_place(src):
    """A read-only memoryview of all of src's bytes where src gives them in place (a VfsRom file on
    MicroPython, a bytes / mmap object), else None (littlefs and FAT files, CPython files: TypeError).
    Only word-aligned bytes qualify: the viper kernels load words from the weights (a Cortex-M0+ faults on
    an unaligned load), and every segment is 32-byte aligned within the file."""
    try:
        mv = memoryview(src)
    except TypeError:
        return None
    if _addressof is not None and _addressof(mv) & 3:
        return None
    return mv


def open(src, budget=DEFAULT_BUDGET):  # noqa: A001 - mbf.open(path) reads like the builtin it mirrors
    """Open an MBF file from a path, a binary stream (seek + readinto) or a buffer holding the whole file
    (bytes, memoryview, mmap: read in place). Loads no segment data.

    budget: the most bytes this reader may allocate: its tables (COST_FIXED + COST_CONFIG per config
    entry + COST_SEGMENT per segment), the layer plan, and any buffer it allocates for the caller
    (read, read_tokenizer, layer_buffers). What would exceed it is refused with MBFError first."""
    return Reader(src, budget)


class Reader:
    """An open MBF file: config, tokenizer location, segment table; data read on demand."""

    def __init__(self, src, budget=DEFAULT_BUDGET):
        if type(budget) is not int or budget < COST_FIXED:
            raise MBFError("budget must be an int of at least %d bytes" % COST_FIXED)
        self._own = isinstance(src, str)
        if self._own:
            src = _fopen(src, "rb")
        # mem: the file's bytes in place, or None (then weights are read into the caller's buffers)
        self.mem = None
        mem = _in_place(src)
        if not (hasattr(src, "readinto") and hasattr(src, "seek")):
            try:
                memoryview(src)
            except TypeError:
                raise MBFError("open() needs a path, a binary stream with seek() and readinto(), or a buffer")
            import io

            src = io.BytesIO(src)  # parsing and read_into go through a stream over the same bytes
            self._own = True
        self._f = src
        self.budget = budget
        self._plan = None
        self._k = 0
        self._suffixes = ()
        try:
            self._load(mem)
        except BaseException:
            self.close()
            raise

    def close(self):
        if self._own and self._f is not None:
            self._f.close()
        self._f = None
        self.mem = None  # views handed out stay valid as long as their holders keep them

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- parsing -----------------------------------------------------------------------------
    def _readinto(self, buf, n, what):
        got = self._f.readinto(buf)
        if got != n:
            self._fill(buf, n, got, what)

    def _load(self, mem):
        f = self._f
        self.size = size = f.seek(0, 2)
        if type(size) is not int:
            raise MBFError("the stream's seek() must return the new position")
        if size < HEADER:
            raise MBFError("truncated: file is %d bytes, the MBF header alone is %d" % (size, HEADER))
        self._chunk = bytearray(CHUNK)
        spare = memoryview(bytearray(16))
        self._spare = [spare[0:1 << k] for k in range(5)]
        mv = memoryview(self._chunk)
        self._mv = mv
        # views of the chunk's first 2**k bytes: stream any tail length with no slicing later
        self._views = [mv[0:1 << k] for k in range(9)]
        f.seek(0)
        hdr = self._views[5]
        self._readinto(hdr, HEADER, "header")
        if bytes(hdr[0:4]) != MAGIC:
            raise MBFError("not an MBF file: magic is %r, expected %r" % (bytes(hdr[0:4]), MAGIC))
        (major, minor, meta_len, nc, ns, tok_off, tok_len, tok_crc,
         file_len) = struct.unpack_from("<HHIHHIIII", hdr, 4)
        if major != MAJOR:
            raise MBFError("MBF version %d.%d not supported: this reader reads %d.x" % (major, minor, MAJOR))
        if nc > MAX_CONFIG:
            raise MBFError("corrupt header: %d config entries, at most %d" % (nc, MAX_CONFIG))
        if ns > MAX_SEGMENTS:
            raise MBFError("too many segments: %d, at most %d" % (ns, MAX_SEGMENTS))
        if meta_len != HEADER + CFG_ENTRY * nc + SEG_ENTRY * ns:
            raise MBFError("corrupt header: metadata length %d != 32 + 24 x %d config + 64 x %d segments"
                           % (meta_len, nc, ns))
        if meta_len + 4 > size:
            raise MBFError("truncated: header, config and table need %d bytes, file has %d"
                           % (meta_len + 4, size))
        need = COST_FIXED + COST_CONFIG * nc + COST_SEGMENT * ns
        if need > self.budget:
            raise MBFError("budget: the config and %d-segment table need %d bytes, budget is %d"
                           % (ns, need, self.budget))
        self.used = need
        crc = binascii.crc32(hdr)
        cfg = bytearray(CFG_ENTRY * nc)
        self._readinto(cfg, len(cfg), "config")
        crc = binascii.crc32(cfg, crc)
        self._raw = raw = bytearray(SEG_ENTRY * ns)
        self._readinto(raw, len(raw), "segment table")
        crc = binascii.crc32(raw, crc)
        self._readinto(self._views[2], 4, "header CRC")
        stored = struct.unpack_from("<I", self._chunk, 0)[0]
        if crc != stored:
            raise MBFError("header CRC mismatch (stored 0x%08x, computed 0x%08x): header, config or table "
                           "corrupted" % (stored, crc))
        if file_len != size:
            if size < file_len:
                raise MBFError("truncated: header says the file is %d bytes, it has %d" % (file_len, size))
            raise MBFError("trailing data: header says the file is %d bytes, it has %d" % (file_len, size))
        self.version = (major, minor)
        self.config = self._parse_config(cfg, nc)
        if tok_off % ALIGN or tok_off < meta_len + 4 or tok_off > size or tok_len > size - tok_off:
            raise MBFError("tokenizer (offset %d, length %d) is misaligned or outside the file (%d bytes)"
                           % (tok_off, tok_len, size))
        self.tok_offset = tok_off
        self.tok_length = tok_len
        self.tok_crc = tok_crc
        self.n = ns
        self._parse_table(ns, tok_off + tok_len)
        if self.mem is None and mem is not None and len(mem) == size:
            self.mem = mem

    def _parse_config(self, cfg, nc):
        conf = {}
        known = {}
        for spec in CONFIG:
            known[spec[0]] = spec
        for e in range(nc):
            a = e * CFG_ENTRY
            key = _field_text(cfg, a, KEY_FIELD, "config entry %d" % e, True)
            typ = cfg[a + KEY_FIELD]
            if key in conf:
                raise MBFError("config: duplicate key '%s'" % key)
            if typ == T_INT:
                conf[key] = struct.unpack_from("<q", cfg, a + 16)[0]
            elif typ == T_FLOAT:
                conf[key] = struct.unpack_from("<d", cfg, a + 16)[0]
            elif key in known:
                raise MBFError("config '%s': unknown value type %d" % (key, typ))
            # an unknown key of an unknown type comes from a newer minor version: skipped
        for key, typ, lo, hi, required in CONFIG:
            if key not in conf:
                if required:
                    raise MBFError("config: missing key '%s'" % key)
                continue
            v = conf[key]
            if typ == T_INT and type(v) is not int:
                raise MBFError("config '%s' must be an integer, got %r" % (key, v))
            if typ == T_FLOAT:
                if type(v) is not float:
                    raise MBFError("config '%s' must be a float, got %r" % (key, v))
                if v != v:
                    raise MBFError("config '%s' is NaN" % key)
            if v < lo or v > hi:
                raise MBFError("config '%s' is %r; expected %r..%r" % (key, v, lo, hi))
        if conf["n_kv_heads"] > conf["n_heads"] or conf["n_heads"] % conf["n_kv_heads"]:
            raise MBFError("config: n_heads %d is not a multiple of n_kv_heads %d"
                           % (conf["n_heads"], conf["n_kv_heads"]))
        if "head_dim" not in conf:
            if conf["dim"] % conf["n_heads"]:
                raise MBFError("config: dim %d is not a multiple of n_heads %d (give head_dim)"
                               % (conf["dim"], conf["n_heads"]))
            conf["head_dim"] = conf["dim"] // conf["n_heads"]
        if conf.get("hidden_dim_src", 0) > conf["hidden_dim"]:
            raise MBFError("config: hidden_dim_src %d exceeds hidden_dim %d (it is the width before zero-padding)"
                           % (conf["hidden_dim_src"], conf["hidden_dim"]))
        if conf["sub_vocab"] > conf["vocab_size"]:
            raise MBFError("config: sub_vocab %d exceeds vocab_size %d" % (conf["sub_vocab"], conf["vocab_size"]))
        if conf["group_size"] % 2:
            raise MBFError("config: group_size %d must be even" % conf["group_size"])
        return conf

    def _parse_table(self, ns, data_start):
        from array import array

        raw = self._raw
        size = self.size
        self._off = offs = array("I", bytes(4 * ns))
        self._len = lens = array("I", bytes(4 * ns))
        self._crc = crcs = array("I", bytes(4 * ns))
        group = self.config["group_size"]
        n_layers = self.config["n_layers"]
        prev_end = data_start
        prev = None
        for i in range(ns):
            a = i * SEG_ENTRY
            name = _field_text(raw, a, NAME_FIELD, "segment %d" % i, False)
            if prev is not None and name <= prev:
                if name == prev:
                    raise MBFError("duplicate segment name '%s'" % name)
                raise MBFError("segment table not sorted by name: '%s' after '%s'" % (name, prev))
            prev = name
            what = "segment '%s'" % name
            code, ndim, flags, d0, d1, d2, d3, off, ln, crc = struct.unpack_from("<BBH4IIII", raw, a + 32)
            if code not in DTYPES:
                raise MBFError("%s: unknown dtype code %d" % (what, code))
            if ndim < 1 or ndim > MAX_DIMS:
                raise MBFError("%s: %d dimensions, expected 1..%d" % (what, ndim, MAX_DIMS))
            if flags:
                raise MBFError("%s: reserved flags 0x%04x are not zero" % (what, flags))
            dims = (d0, d1, d2, d3)
            count = 1
            for k in range(MAX_DIMS):
                d = dims[k]
                if k >= ndim:
                    if d:
                        raise MBFError("%s: unused dimension %d is %d, not 0" % (what, k, d))
                    continue
                if d == 0:
                    raise MBFError("%s: dimension %d is 0" % (what, k))
                count *= d
                if count > 2 * size:  # stops absurd shapes before their product can grow
                    raise MBFError("%s: shape %r holds more elements than the file could" % (what, dims[:ndim]))
            width = DTYPES[code][1]
            if code == Q4 or code == Q4A or code == Q8:
                last = dims[ndim - 1]
                if last % group:
                    raise MBFError("%s: %s last dimension %d is not a multiple of group_size %d"
                                   % (what, DTYPES[code][0], last, group))
                nbytes = count if code == Q8 else count // 2
            else:
                nbytes = count * width
            if ln != nbytes:
                raise MBFError("%s: length %d does not match %s x %r = %d bytes"
                               % (what, ln, DTYPES[code][0], dims[:ndim], nbytes))
            if off % ALIGN:
                raise MBFError("%s: offset %d is not %d-byte aligned" % (what, off, ALIGN))
            if off > size or ln > size - off:
                raise MBFError("%s (offset %d, length %d) runs past the end of the file (%d bytes)"
                               % (what, off, ln, size))
            if off < prev_end:
                raise MBFError("%s at offset %d overlaps what comes before it (ends at %d)" % (what, off, prev_end))
            prev_end = off + ln
            offs[i] = off
            lens[i] = ln
            crcs[i] = crc
            if name.startswith(LAYER_PREFIX):
                self._check_layer_name(name, n_layers)
        for i in range(ns):
            name = self._name(i)
            code = raw[i * SEG_ENTRY + 32]
            if code == Q4 or code == Q4A or code == Q8:
                self._check_scales(i, name, group, SCALES_SUFFIX)
                if code == Q4A:
                    self._check_scales(i, name, group, MINS_SUFFIX)
            elif name.endswith(SCALES_SUFFIX):
                owner = name[:-len(SCALES_SUFFIX)]
                j = self._find(owner)
                c = raw[j * SEG_ENTRY + 32] if j >= 0 else 0
                if c != Q4 and c != Q4A and c != Q8:
                    raise MBFError("segment '%s': a '.scales' segment needs a q4 segment '%s' (or q4a, q8)"
                                   % (name, owner))
            elif name.endswith(MINS_SUFFIX):
                owner = name[:-len(MINS_SUFFIX)]
                j = self._find(owner)
                if j < 0 or raw[j * SEG_ENTRY + 32] != Q4A:
                    raise MBFError("segment '%s': a '.mins' segment needs a q4a segment '%s'" % (name, owner))

    def _check_layer_name(self, name, n_layers):
        dot = name.find(".", len(LAYER_PREFIX))
        num = name[len(LAYER_PREFIX):dot] if dot > 0 else ""
        if (not num or dot == len(name) - 1 or (len(num) > 1 and num[0] == "0")
                or not all(48 <= ord(c) <= 57 for c in num) or len(num) > 4):
            raise MBFError("segment '%s': layer names are 'blk.<L>.<part>' with L in decimal" % name)
        if int(num) >= n_layers:
            raise MBFError("segment '%s' names layer %s but config n_layers is %d" % (name, num, n_layers))

    def _check_scales(self, i, name, group, suffix):
        raw = self._raw
        kind = DTYPES[raw[i * SEG_ENTRY + 32]][0]
        j = self._find(name + suffix)
        if j < 0:
            raise MBFError("%s segment '%s' has no '%s%s' segment" % (kind, name, name, suffix))
        a, b = i * SEG_ENTRY, j * SEG_ENTRY
        ndim = raw[a + 33]
        want = list(struct.unpack_from("<4I", raw, a + 36))
        want[ndim - 1] //= group
        got = list(struct.unpack_from("<4I", raw, b + 36))
        if raw[b + 32] != F16 or raw[b + 33] != ndim or got != want:
            raise MBFError("segment '%s%s' must be f16 of shape %r (%s shape with last dim / group_size %d)"
                           % (name, suffix, tuple(want[:ndim]), kind, group))

    # ---- lookup (allocation-free: compares the table's bytes in place) --------------------------
    def _cmp(self, i, name):
        raw = self._raw
        a = i * SEG_ENTRY
        for j in range(len(name)):
            c = raw[a + j]
            d = ord(name[j])
            if c != d:
                return -1 if c < d else 1
        return 0 if raw[a + len(name)] == 0 else 1

    def _find(self, name):
        """Index of segment name, or -1."""
        if len(name) >= NAME_FIELD:
            return -1
        lo = 0
        hi = self.n
        while lo < hi:
            mid = (lo + hi) >> 1
            c = self._cmp(mid, name)
            if c == 0:
                return mid
            if c < 0:
                lo = mid + 1
            else:
                hi = mid
        return -1

    def index(self, name):
        """Table index of segment name (MBFError if absent)."""
        if type(name) is not str:
            raise MBFError("segment names are str, got %r" % (name,))
        i = self._find(name)
        if i < 0:
            raise MBFError("no segment named '%s' in this file" % name)
        return i

    def __contains__(self, name):
        return self._find(name) >= 0

    def name(self, i):
        """The name of segment i (0 <= i < n, table order)."""
        if i < 0 or i >= self.n:
            raise MBFError("segment index %d outside 0..%d" % (i, self.n - 1))
        return self._name(i)

    def _name(self, i):
        raw = self._raw
        a = i * SEG_ENTRY
        n = 0
        while raw[a + n]:
            n += 1
        return bytes(raw[a:a + n]).decode()

    def seg(self, name):
        """The descriptor of segment name (MBFError if absent)."""
        i = self.index(name)
        code, ndim = self._raw[i * SEG_ENTRY + 32], self._raw[i * SEG_ENTRY + 33]
        shape = struct.unpack_from("<4I", self._raw, i * SEG_ENTRY + 36)[:ndim]
        return Seg(i, self._name(i), DTYPES[code][0], tuple(shape), self._off[i], self._len[i], self._crc[i])

    def names(self):
        """Every segment name in table (sorted) order; allocates a list."""
        return [self._name(i) for i in range(self.n)]

    def view(self, name):
        """Segment name's bytes in place (a read-only memoryview of self.mem: flash on a board's ROMFS), or
        None when the file is not addressable. Load time only: the slice is a new small object. The data
        is not CRC-checked here: verify() or verify_all() checks it, as for read_into."""
        i = self.index(name)
        if self.mem is None:
            return None
        return self.mem[self._off[i]:self._off[i] + self._len[i]]

    # ---- reading -----------------------------------------------------------------------------
    def _check_buf(self, buf, n, i):
        have = _buf_bytes(buf)
        if have != n:
            raise MBFError("segment '%s' is %d bytes; the buffer (%s) holds %d bytes or is not a writable "
                           "byte buffer" % (self._name(i), n, type(buf).__name__, have))

    def _fill(self, buf, n, got, what):
        """Finish a short readinto: the stream gave fewer bytes than asked (rare; never for files)."""
        pos = got or 0
        f = self._f
        while pos < n:
            if _MP:  # no slicing of buf: read into a spare view no longer than what is missing
                k = 4
                while (1 << k) > n - pos:
                    k -= 1
                c = self._spare[k]
                r = f.readinto(c) or 0
                for j in range(r):
                    buf[pos + j] = c[j]
            else:
                r = f.readinto(memoryview(buf).cast("B")[pos:])
            if not r:
                raise MBFError("%s: short read (%d of %d bytes): file truncated or changed" % (what, pos, n))
            pos += r

    def _read_idx(self, i, buf, verify):
        n = self._len[i]
        self._check_buf(buf, n, i)
        f = self._f
        f.seek(self._off[i])
        got = f.readinto(buf)
        if got != n:
            self._fill(buf, n, got, self._name(i))
        if verify and binascii.crc32(buf) != self._crc[i]:
            raise MBFError("segment '%s': CRC mismatch (data corrupted)" % self._name(i))

    def read_into(self, name, buf, verify=True):
        """Read segment name into buf (a writable byte buffer of exactly its length); check its CRC.

        Allocates nothing on MicroPython (on 31-bit-int boards a CRC >= 2**30 is a long int: use
        verify_all() once at boot and verify=False in the per-token streaming loop)."""
        self._read_idx(self.index(name), buf, verify)

    def read_range(self, name, start, buf):
        """Read len(buf) bytes of segment name from byte start (no CRC: e.g. one embedding row)."""
        i = self.index(name)
        n = _buf_bytes(buf)
        if type(start) is not int or n < 0 or start < 0 or start > self._len[i] or n > self._len[i] - start:
            raise MBFError("segment '%s' is %d bytes: range %d + %d is outside it" % (name, self._len[i], start, n))
        f = self._f
        f.seek(self._off[i] + start)
        got = f.readinto(buf)
        if got != n:
            self._fill(buf, n, got, name)

    def _alloc(self, n, what):
        if self.used + n > self.budget:
            raise MBFError("budget: %s needs %d bytes, %d of the %d-byte budget are left"
                           % (what, n, self.budget - self.used, self.budget))
        return bytearray(n)

    def read(self, name, verify=True):
        """A new bytearray holding segment name (refused if it exceeds the budget)."""
        i = self.index(name)
        buf = self._alloc(self._len[i], "segment '%s'" % name)
        self._read_idx(i, buf, verify)
        return buf

    def read_tokenizer(self, buf=None):
        """The tokenizer's bytes (its format belongs to the tokenizer module), CRC-checked."""
        n = self.tok_length
        if buf is None:
            buf = self._alloc(n, "the tokenizer")
        elif _buf_bytes(buf) != n:
            raise MBFError("the tokenizer is %d bytes; the buffer holds %d or is not a writable byte buffer"
                           % (n, _buf_bytes(buf)))
        self._f.seek(self.tok_offset)
        got = self._f.readinto(buf) if n else 0
        if got != n:
            self._fill(buf, n, got, "tokenizer")
        if binascii.crc32(buf) != self.tok_crc:
            raise MBFError("tokenizer: CRC mismatch (data corrupted)")
        return buf

    def _crc_region(self, off, n, what):
        """CRC-32 of n file bytes at off, streamed through the chunk buffer (no allocation)."""
        f = self._f
        f.seek(off)
        crc = 0
        chunk = self._mv
        while n >= CHUNK:
            self._readinto(chunk, CHUNK, what)
            crc = binascii.crc32(chunk, crc)
            n -= CHUNK
        for k in range(8, -1, -1):
            if n & (1 << k):
                v = self._views[k]
                self._readinto(v, 1 << k, what)
                crc = binascii.crc32(v, crc)
        return crc

    def verify(self, name):
        """Check segment name's CRC without a caller buffer."""
        i = self.index(name)
        if self._crc_region(self._off[i], self._len[i], name) != self._crc[i]:
            raise MBFError("segment '%s': CRC mismatch (data corrupted)" % name)

    def verify_all(self):
        """Check the tokenizer's and every segment's CRC (one pass over the file, 512-byte chunks)."""
        if self._crc_region(self.tok_offset, self.tok_length, "tokenizer") != self.tok_crc:
            raise MBFError("tokenizer: CRC mismatch (data corrupted)")
        for i in range(self.n):
            if self._crc_region(self._off[i], self._len[i], "segment") != self._crc[i]:
                raise MBFError("segment '%s': CRC mismatch (data corrupted)" % self._name(i))

    # ---- layer streaming ---------------------------------------------------------------------
    def _layer_range(self, layer):
        prefix = "%s%d." % (LAYER_PREFIX, layer)
        lo = 0
        hi = self.n
        while lo < hi:  # first entry >= prefix
            mid = (lo + hi) >> 1
            if self._name(mid) < prefix:
                lo = mid + 1
            else:
                hi = mid
        end = lo
        while end < self.n and self._name(end).startswith(prefix):
            end += 1
        return lo, end, len(prefix)

    def _build_plan(self):
        from array import array

        n_layers = self.config["n_layers"]
        first, end, plen = self._layer_range(0)
        k = end - first
        if k == 0:
            raise MBFError("no layer segments ('blk.0.*') in this file")
        suffixes = tuple(self._name(first + j)[plen:] for j in range(k))
        lens = [self._len[first + j] for j in range(k)]
        cost = (2 * n_layers + COST_PART) * k
        if self.used + cost > self.budget:
            raise MBFError("budget: the layer plan needs %d bytes" % cost)
        plan = array("H", bytes(2 * n_layers * k))
        for layer in range(n_layers):
            lo, hi, plen = self._layer_range(layer)
            for j in range(hi - lo):
                part = self._name(lo + j)[plen:]
                if j >= k or part != suffixes[j]:
                    raise MBFError("layer %d has segment '%s' that layer 0 lacks" % (layer, part))
                if self._len[lo + j] != lens[j] or self._raw[(lo + j) * SEG_ENTRY + 32] != \
                        self._raw[(first + j) * SEG_ENTRY + 32]:
                    raise MBFError("layer %d segment '%s' differs in dtype or size from layer 0" % (layer, part))
                plan[layer * k + j] = lo + j
            if hi - lo != k:
                raise MBFError("layer %d has %d segments, layer 0 has %d" % (layer, hi - lo, k))
        self.used += cost
        self._plan, self._k, self._suffixes, self._layer_lens = plan, k, suffixes, tuple(lens)

    def layer_parts(self):
        """The per-layer segment names without 'blk.<L>.' (sorted); every layer has the same set."""
        if self._plan is None:
            self._build_plan()
        return self._suffixes

    def layer_sizes(self):
        """Byte length of each layer part, in layer_parts() order."""
        if self._plan is None:
            self._build_plan()
        return self._layer_lens

    def layer_buffers(self):
        """One bytearray per layer part, sized for any layer (charged to the budget)."""
        sizes = self.layer_sizes()
        total = 0
        for s in sizes:
            total += s
        if self.used + total > self.budget:
            raise MBFError("budget: one layer's buffers need %d bytes, %d of the %d-byte budget are left"
                           % (total, self.budget - self.used, self.budget))
        self.used += total
        return [bytearray(s) for s in sizes]

    def load_layer(self, layer, bufs, verify=True):
        """Read layer's segments into bufs (layer_parts() order; None skips a part). No allocation."""
        if self._plan is None:
            self._build_plan()
        k = self._k
        if type(layer) is not int or layer < 0 or layer >= self.config["n_layers"] or len(bufs) != k:
            raise MBFError("load_layer(%r, %d buffers): expected layer 0..%d and %d buffers"
                           % (layer, len(bufs), self.config["n_layers"] - 1, k))
        plan = self._plan
        base = layer * k
        for j in range(k):
            b = bufs[j]
            if b is not None:
                self._read_idx(plan[base + j], b, verify)
