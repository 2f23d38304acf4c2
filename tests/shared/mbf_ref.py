# mbf_ref.py: the MBF test fixture's recipe and byte-patching helpers, on both interpreters.
# The fixture (tests/shared/data/tiny.mbf) is written by tests/host/test_mbf_writer.py from FIXTURE_*;
# its segment bytes are pseudo-random (testkit.Rng seeded by the name), so MicroPython can recompute
# them. It is a container fixture: f16/f32 bytes are not meaningful numbers.
import binascii
import struct

import testkit

FIXTURE_PATH = "tests/shared/data/tiny.mbf"

FIXTURE_CONFIG = {
    "dim": 16, "hidden_dim": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "vocab_size": 40,
    "sub_vocab": 24, "seq_len": 64, "rope_theta": 10000.0, "norm_eps": 1e-5, "group_size": 16,
    "tied_embed": 1, "x_future": 7,
}

# (part, dtype, shape) of each layer; q4 parts get a '<name>.scales' f16 segment (last dim / 16).
LAYER_PARTS = (
    ("attn_norm", "f32", (16,)), ("attn_q", "q4", (16, 16)), ("attn_k", "q4", (8, 16)),
    ("attn_v", "q4", (8, 16)), ("attn_output", "q4", (16, 16)), ("ffn_norm", "f32", (16,)),
    ("ffn_gate", "q4", (32, 16)), ("ffn_up", "q4", (32, 16)), ("ffn_down", "q4", (16, 32)),
)
GLOBAL_SEGMENTS = (
    ("token_embd", "q4", (40, 16)), ("output_norm", "f32", (16,)), ("vocab_map", "u16", (24,)),
    ("misc.i8", "i8", (3, 5)), ("misc.i16", "i16", (2, 3, 4)), ("misc.i32", "i32", (1, 2, 1, 3)),
    ("misc.u8", "u8", (7,)),
)
SIZES = {"q4": 0, "f16": 2, "f32": 4, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4}
GROUP = 16


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n // 2 if dtype == "q4" else n * SIZES[dtype]


def fixture_segments():
    """[(name, dtype, shape)] of every segment, sorted by name as the file stores them."""
    out = []
    items = []
    for layer in range(FIXTURE_CONFIG["n_layers"]):
        for part, dtype, shape in LAYER_PARTS:
            items.append(("blk.%d.%s" % (layer, part), dtype, shape))
    for item in GLOBAL_SEGMENTS:
        items.append(item)
    for name, dtype, shape in items:
        out.append((name, dtype, shape))
        if dtype == "q4":
            out.append((name + ".scales", "f16", shape[:-1] + (shape[-1] // GROUP,)))
    out.sort()
    return out


def gen_bytes(name, n):
    """The fixture's bytes for segment name (the tokenizer is name 'tokenizer')."""
    rng = testkit.Rng(binascii.crc32(name.encode()) | 1)
    out = bytearray(n)
    for i in range(n):
        out[i] = rng.next() & 0xFF
    return out


FIXTURE_TOKENIZER_LEN = 40


def read_fixture():
    with open(FIXTURE_PATH, "rb") as f:
        return f.read()


class MemStream:
    """A seekable read-only stream over the first `size` bytes of a buffer, without copying it
    (io.BytesIO copies, and the MicroPython test heap is small and fragmented)."""

    def __init__(self, data, size=None):
        self.mv = memoryview(data)
        self.size = len(data) if size is None else size
        self.pos = 0

    def seek(self, pos, whence=0):
        if whence == 2:
            pos += self.size
        elif whence == 1:
            pos += self.pos
        self.pos = pos
        return pos

    def readinto(self, buf):
        if not testkit.IS_MP:
            buf = memoryview(buf).cast("B")
        n = min(len(buf), self.size - self.pos)
        if n <= 0:
            return 0
        buf[0:n] = self.mv[self.pos:self.pos + n]
        self.pos += n
        return n


# ---- byte patching (offsets as in docs/MBF.md) ---------------------------------------------------
H_MAGIC, H_MAJOR, H_MINOR, H_META, H_NCFG, H_NSEG = 0, 4, 6, 8, 12, 14
H_TOKOFF, H_TOKLEN, H_TOKCRC, H_FILELEN = 16, 20, 24, 28
E_NAME, E_DTYPE, E_NDIM, E_FLAGS, E_SHAPE, E_OFFSET, E_LENGTH, E_CRC = 0, 32, 33, 34, 36, 52, 56, 60


def u16(buf, off):
    return struct.unpack_from("<H", buf, off)[0]


def u32(buf, off):
    return struct.unpack_from("<I", buf, off)[0]


def put(buf, off, fmt, value):
    struct.pack_into(fmt, buf, off, value)


def meta_len(buf):
    return u32(buf, H_META)


def config_at(buf, e):
    """Byte offset of config entry e."""
    return 32 + 24 * e


def entry_at(buf, i):
    """Byte offset of segment table entry i."""
    return 32 + 24 * u16(buf, H_NCFG) + 64 * i


def set_name(buf, i, name):
    a = entry_at(buf, i)
    for k in range(32):
        buf[a + k] = 0
    for k in range(len(name)):
        buf[a + k] = name[k] if isinstance(name, (bytes, bytearray)) else ord(name[k])


def entry_name(buf, i):
    a = entry_at(buf, i)
    n = 0
    while n < 32 and buf[a + n]:
        n += 1
    return bytes(buf[a:a + n]).decode()


def find_entry(buf, name):
    for i in range(u16(buf, H_NSEG)):
        if entry_name(buf, i) == name:
            return i
    raise KeyError(name)


def refresh_crc(buf):
    """Recompute the header CRC so a patched header/config/table passes it (if meta_len is sane)."""
    m = meta_len(buf)
    if m + 4 <= len(buf):
        put(buf, m, "<I", binascii.crc32(memoryview(buf)[0:m]))
    return buf
