# kvsnap.py: save / load a RingKV's committed state as a self-checking binary snapshot (CRC-32).
"""KV cache snapshots.

Format version 1, every integer little-endian:

    offset  size  field
    0       4     magic b"EKVS"
    4       2     format version (1)
    6       1     dtype: the array typecode in ASCII ('b' int8, 'f' float32)
    7       1     element size in bytes (1 or 4)
    8       2     layers
    10      2     heads (KV heads)
    12      4     kv_dim (elements per token row, all KV heads)
    16      4     sink S
    20      4     window W
    24      4     live (0..S+W)
    28      4     head (window index of the oldest window token; 0 unless live == S+W)
    32      4     tokens committed, modulo 2**30 (bookkeeping only)
    36      4     CRC-32 of bytes 0..35
    40            K rows: layer by layer, the S+W ring slots in physical order, kv_dim elements each
                  V rows: the same
                  K scales: layer by layer, S+W slots x heads int32
                  V scales: the same
    end-4   4     CRC-32 (binascii.crc32) of every byte before it; nothing may follow

Only committed state is saved; staged draft tokens are not, and the destination may have any staging
depth D. Element bytes are the arrays' native bytes (all supported targets are little-endian).

load() checks, in order: header length, magic, version, header CRC, dtype, shape, header fields; a
failure there raises KVSnapshotError with cache_reset False and leaves the destination cache exactly
as it was (staged tokens included). Past the header the data is streamed with readinto straight into
the cache's own buffers, so the cache is first reset to empty (live 0, nothing staged); a truncated
stream, a CRC mismatch or trailing bytes then raise KVSnapshotError with cache_reset True and the
cache stays empty (a valid state: the runtime must re-prefill or fetch the snapshot again). An
exception raised by the stream itself (OSError) during the data phase leaves the cache empty too.
Memory: load allocates a 40-byte header buffer and a few memoryview objects, never an amount read
from the file: all sizes come from the destination cache, after the header has matched it.
"""
import binascii
import struct
import sys

from shared.compat import MASK30

MAGIC = b"EKVS"
VERSION = 1
HEADER_SIZE = 40
_FIELDS = "<HBBHHIIIIII"  # version .. tokens, packed at offset 4


class KVSnapshotError(ValueError):
    """A snapshot that cannot be loaded into this cache. cache_reset says whether the cache was emptied."""

    def __init__(self, msg, cache_reset=False):
        super().__init__(msg)
        self.cache_reset = cache_reset


def _bytes_view(arr, itemsize):
    """A byte-addressed memoryview over arr's storage (no copy), so short reads can resume anywhere."""
    mv = memoryview(arr)
    if hasattr(mv, "cast"):  # CPython, CircuitPython: unsigned bytes (they range-check a signed 'b' view)
        return mv.cast("B")
    if itemsize == 1:  # MicroPython stores any int into a byte view without a range check
        return mv
    try:
        import uctypes

        return memoryview(uctypes.bytearray_at(uctypes.addressof(arr), len(arr) * itemsize))
    except ImportError:  # ports without uctypes: element view; _fill refuses split elements
        return memoryview(arr)


def _regions(kv):
    # (byte view, byte offset, byte length) of each saved region, in file order
    cap = kv.capacity
    isz = kv.itemsize
    out = []
    for arr, width, size in ((kv.k, kv.kv_dim, isz), (kv.v, kv.kv_dim, isz),
                             (kv.kscale, kv.heads, 4), (kv.vscale, kv.heads, 4)):
        view = _bytes_view(arr, size)
        step = 1 if len(view) == len(arr) * size else size  # element view: offsets in elements
        for layer in range(kv.layers):
            start = layer * kv.slots * width * size
            out.append((view, start // step, cap * width * size // step, step))
    return out


def size(kv):
    """Bytes of a snapshot of kv (for the link's chunk offsets and totals)."""
    cap = kv.capacity
    return HEADER_SIZE + 2 * kv.layers * cap * (kv.kv_dim * kv.itemsize + kv.heads * 4) + 4


def _check_order():
    if sys.byteorder != "little":
        raise KVSnapshotError("KV snapshots are little-endian; this machine is %s-endian" % sys.byteorder)


def _write_all(stream, mv):
    done = 0
    total = len(mv)
    while done < total:
        n = stream.write(mv[done:] if done else mv)
        if n is None or n <= 0:
            if n is None:  # streams that do not report a count wrote it all
                return
            raise OSError("KV snapshot: stream accepted no bytes")
        done += n


def save(kv, stream):
    """Write kv's committed state (not its staged drafts) to stream; return the bytes written."""
    _check_order()
    hdr = bytearray(HEADER_SIZE)
    hdr[0:4] = MAGIC
    struct.pack_into(_FIELDS, hdr, 4, VERSION, ord(kv.typecode), kv.itemsize, kv.layers, kv.heads,
                     kv.kv_dim, kv.sink, kv.window, kv.live, kv.head, kv.tokens)
    struct.pack_into("<I", hdr, 36, binascii.crc32(memoryview(hdr)[0:36]))
    _write_all(stream, hdr)
    crc = binascii.crc32(hdr)
    for view, start, length, _step in _regions(kv):
        part = view[start:start + length]
        _write_all(stream, part)
        crc = binascii.crc32(part, crc)
    tail = bytearray(4)
    struct.pack_into("<I", tail, 0, crc)
    _write_all(stream, tail)
    return size(kv)


def _fill(stream, mv, step, expected):
    # Read len(mv) elements of step bytes into mv (data phase: the cache is already reset).
    got = 0
    total = len(mv)
    while got < total:
        n = stream.readinto(mv[got:] if got else mv)
        if not n:
            raise KVSnapshotError("KV snapshot truncated (a whole one is %d bytes); the cache was reset"
                                  % expected, True)
        if n % step:
            raise KVSnapshotError("KV snapshot: the stream split an element; load from a file or buffer", True)
        got += n // step


def _shape(layers, sink, window, kv_dim, heads):
    return "(layers=%d, sink=%d, window=%d, kv_dim=%d, heads=%d)" % (layers, sink, window, kv_dim, heads)


def _check_header(kv, hdr):
    if bytes(hdr[0:4]) != MAGIC:
        raise KVSnapshotError("not a KV snapshot: magic %r, expected %r" % (bytes(hdr[0:4]), MAGIC))
    version = hdr[4] | (hdr[5] << 8)
    if version != VERSION:
        raise KVSnapshotError("KV snapshot format version %d is unknown (this build reads %d)" % (version, VERSION))
    if struct.unpack_from("<I", hdr, 36)[0] != binascii.crc32(memoryview(hdr)[0:36]):
        raise KVSnapshotError("KV snapshot header is corrupted (header CRC-32 mismatch)")
    (_v, tc, isz, layers, heads, kv_dim, sink, window, live, head, tokens) = struct.unpack_from(_FIELDS, hdr, 4)
    if tc != ord(kv.typecode) or isz != kv.itemsize:
        raise KVSnapshotError("KV snapshot dtype %r (%d-byte elements) does not match this cache's %r (%d-byte)"
                              % (chr(tc) if 32 < tc < 127 else tc, isz, kv.typecode, kv.itemsize))
    if (layers, sink, window, kv_dim, heads) != (kv.layers, kv.sink, kv.window, kv.kv_dim, kv.heads):
        raise KVSnapshotError("KV snapshot shape %s does not match this cache %s" % (
            _shape(layers, sink, window, kv_dim, heads), _shape(kv.layers, kv.sink, kv.window, kv.kv_dim, kv.heads)))
    if live > sink + window or head >= window or (head and live < sink + window) or tokens > MASK30:
        raise KVSnapshotError("KV snapshot header is inconsistent: live=%d head=%d tokens=%d for sink=%d window=%d"
                              % (live, head, tokens, sink, window))
    return live, head, tokens


def load(kv, stream):
    """Replace kv's state with the snapshot read from stream (see the module docstring for failures)."""
    _check_order()
    hdr = bytearray(HEADER_SIZE)
    got = 0
    while got < HEADER_SIZE:
        n = stream.readinto(memoryview(hdr)[got:])
        if not n:
            raise KVSnapshotError("KV snapshot truncated: %d of %d header bytes; the cache is unchanged"
                                  % (got, HEADER_SIZE))
        got += n
    live, head, tokens = _check_header(kv, hdr)
    kv.reset()  # from here on the buffers are overwritten: the cache is empty until the CRC passes
    crc = binascii.crc32(hdr)
    expected = size(kv)
    for view, start, length, step in _regions(kv):
        part = view[start:start + length]
        _fill(stream, part, step, expected)
        crc = binascii.crc32(part, crc)
    tail = bytearray(4)
    _fill(stream, memoryview(tail), 1, expected)
    if struct.unpack_from("<I", tail, 0)[0] != crc:
        raise KVSnapshotError("KV snapshot is corrupted (CRC-32 mismatch); the cache was reset", True)
    extra = stream.read(1)
    if extra:
        raise KVSnapshotError("KV snapshot is followed by trailing bytes; the cache was reset", True)
    kv.live = live
    kv.head = head
    kv.tokens = tokens
