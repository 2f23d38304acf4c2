# frame.py: the link's frames: header, CRC-32, COBS wrapping, body layouts and checks (docs/PROTOCOL.md).
"""Frames of the node <-> gateway link, version 1.1 (reads 1.0 peers too). docs/PROTOCOL.md is the specification; this file
implements it. Every integer is little-endian. A frame on the wire is

    0x00  COBS(header[20] + body[len] + (signature[14] if type bit 7) + CRC-32[4])  0x00

Header (HDR = 20 bytes; bytes 0..3 and the trailing CRC keep this layout in every version, so any
peer can read the version and report a mismatch):

    off size field
    0   1    version   high nibble major (1), low nibble minor (0); another major is dropped
    1   1    type      bit 7: signed (HMAC trailer present); bits 0..6 the frame type
    2   2    len       body bytes
    4   2    seq       data frames: sequence number; control frames: the sender's next seq
    6   2    ack       last data seq delivered in order from `peer` (cumulative)
    8   4    epoch     the sender's boot epoch (random, nonzero)
    12  4    peer      the receiver epoch that ack and limit refer to (0: none yet)
    16  2    txoff     wire offset of this frame's leading 0x00 in the sender's byte stream (mod 2**16)
    18  2    limit     credit: the peer may send data frames while its txoff + size <= limit (mod 2**16)

The CRC-32 (zlib: init and final XOR 0xFFFFFFFF) covers every byte before it. The decoded size
(header + body + trailer + CRC) is capped at max_frame (MAX_FRAME = 1024 by default); a longer frame
is abandoned while it is being decoded.

Hot paths allocate nothing on MicroPython: Encoder.encode/seal/wrap build a frame in preallocated
buffers; Decoder.feed decodes, checks and parses into preallocated buffers and int attributes
(epochs stay as bytes in the buffer and are compared in place: a 32-bit epoch as an int would be a
heap long on the 31-bit-int boards); check_body validates a body without allocating. The CRC comes
from crc32.new(): binascii where 32-bit ints are small ints, else the table-free two-halves CRC that
writes and compares the 4 CRC bytes one by one, so no CRC value ever becomes a heap long on RP2040 or
ESP32. The pack_*/parse* helpers allocate (host side, tools, tests); so does signing (hashlib).
"""
from shared import cobs, crc32
from shared.compat import const

VERSION = const(0x11)  # major 1, minor 1 (1.1: LOG bodies carry a line sequence number)
VERSION_MAJOR = const(1)
MINOR = const(1)  # this side's minor; a peer's is the low nibble of its HELLO's version byte
MAX_FRAME = const(1024)  # default cap on a decoded frame (header + body + trailer + CRC)
MIN_FRAME = const(64)
MAX_FRAME_LIMIT = const(16384)

# header offsets
H_VER = const(0)
H_TYPE = const(1)
H_LEN = const(2)
H_SEQ = const(4)
H_ACK = const(6)
H_EPOCH = const(8)
H_PEER = const(12)
H_TXOFF = const(16)
H_LIMIT = const(18)
HDR = const(20)
CRC = const(4)
SIG = const(14)  # signature trailer: counter u48 + truncated HMAC-SHA256 (8 bytes)
SIG_COUNTER = const(6)
_SIG_TAG = const(8)
OVERHEAD = const(24)  # HDR + CRC, unsigned

# frame types (bits 0..6 of the type byte); 0x01..0x0F control, 0x10..0x7F sequenced data
SIGNED = const(0x80)
HELLO = const(0x01)
HEARTBEAT = const(0x02)
ACK = const(0x03)
ERROR = const(0x04)
DATA_MIN = const(0x10)
LOG = const(0x10)
DRAFT = const(0x11)
VERDICT = const(0x12)
KVSNAP = const(0x13)
PROMPT = const(0x14)
TIME = const(0x15)  # 1.1: the gateway's wall clock, sent periodically (3.10)
TYPE_NAMES = {HELLO: "HELLO", HEARTBEAT: "HEARTBEAT", ACK: "ACK", ERROR: "ERROR", LOG: "LOG",
              DRAFT: "DRAFT", VERDICT: "VERDICT", KVSNAP: "KVSNAP", PROMPT: "PROMPT", TIME: "TIME"}

# HELLO body
_HE_ROLE = const(0)
HE_FLAGS = const(1)
HE_RXBUF = const(2)
HE_MAXFRAME = const(4)
HE_TXBASE = const(6)
_HE_WINDOW = const(8)
_HE_DRAFTK = const(9)
_HE_TOPK = const(10)
_HE_QBITS = const(11)
_HE_SINK = const(12)
_HE_KVWIN = const(14)
_HE_STAGED = const(16)
_HE_MODEL = const(18)
_HE_TOK = const(22)
_HE_BOARD = const(26)
BOARD_ID_LEN = const(16)
HELLO_SIZE = const(42)  # the 1.0 HELLO; 1.1 appends the fields below (a receiver needs only these 42)
HE_UID = const(42)  # 8 bytes: the node's unique id (machine.unique_id(), or one kept on its filesystem)
HE_WDAY = const(50)  # u16: the sender's wall clock: days since 2000-01-01 (WALL_NONE: not known)
HE_WMS = const(52)  # u32 (u30): ms into that day (< MS_PER_DAY)
HELLO_SIZE_11 = const(56)
UID_LEN = const(8)
WALL_NONE = const(0xFFFF)
MS_PER_DAY = const(86400000)
ROLE_NODE = const(0)
ROLE_GATEWAY = const(1)
HELLO_AUTH = const(1)  # HELLO flags bit 0: the sender signs its frames and requires signed frames
HELLO_WANT = const(2)  # HELLO flags bit 1: the sender has not seen the receiver's HELLO: send one
MIN_RXBUF = const(256)
# HEARTBEAT body
_HB_FLAGS = const(0)
_HB_BAD = const(2)
_HB_DUP = const(4)
_HEARTBEAT_SIZE = const(6)
HB_PROBE = const(1)  # flags bit 0: answer with an ACK now (sent when out of credit)
# ACK body
_AK_FLAGS = const(0)
_ACK_SIZE = const(1)
ACK_GAP = const(1)  # flags bit 0: a frame after a missing one arrived: go back to ack + 1 now
ACK_SACK = const(2)  # flags bit 1: a u16 follows: bit i set = frame ack + 2 + i is held by the receiver
# ERROR body
_ER_CODE = const(0)
_ER_REF = const(1)
_ER_DETAIL = const(2)
_ER_TEXT = const(4)
_ERROR_MIN = const(4)
E_VERSION = const(1)  # detail: the version byte received; text: ours
E_HELLO = const(2)  # handshake refused; detail: R_* reason below
E_AUTH = const(3)
E_BODY = const(4)  # detail: the type whose body was malformed
E_APP = const(16)  # 16..255: application codes
R_MODEL = const(1)
R_TOKENIZER = const(2)
R_KV = const(3)
R_DRAFT = const(4)
R_ROLE = const(5)
# LOG body, version 1.1: ts u32 (u30), level u8, flags u8, boot u16, lseq u32 (u30), day u16, ms u32, text
_LG_TS = const(0)
_LG_LEVEL = const(4)
LG_FLAGS = const(5)
LG_BOOT = const(6)
LG_LSEQ = const(8)
LG_DAY = const(12)
LG_MS = const(14)
LG_TEXT = const(18)
LG_TEXT_10 = const(5)  # version 1.0: ts u32, level u8, text
LG_SPILLED = const(1)  # flags bit 0: the line waited in the node's flash spill ring
LG_BACKDATED = const(2)  # flags bit 1: logged before the node had the wall time; day/ms back-dated from ticks
LG_FLAGS_KNOWN = const(3)
# TIME body: day u16, ms u32 (u30): the gateway's wall clock when it sent the frame
TM_DAY = const(0)
TM_MS = const(2)
TIME_SIZE = const(6)
# DRAFT body
_DR_BLOCK = const(0)
_DR_BASE = const(2)
_DR_K = const(6)
_DR_FLAGS = const(7)
DR_TOKENS = const(8)
DR_GREEDY = const(1)
MAX_K = const(32)
MAX_TOPK = const(16)
Q_BITS = const(16)
Q_TOTAL = const(65536)  # a draft token's candidate counts sum to 2**16 (shared/specdec.py Q_TOTAL)
# VERDICT body
VD_BLOCK = const(0)
VD_BASE = const(2)
VD_ACCEPTED = const(6)
VD_FLAGS = const(7)
VD_TOKEN = const(8)
VD_COMMITTED = const(10)
VERDICT_SIZE = const(14)
VD_CORRECTION = const(1)
VD_STALE = const(2)
# KVSNAP body
_KS_ID = const(0)
_KS_TOTAL = const(2)
_KS_OFFSET = const(6)
_KS_CRC = const(10)
KS_DATA = const(14)
# PROMPT body: tokens both sides commit without verification (docs/PROTOCOL.md 3.9)
_PR_BASE = const(0)
_PR_N = const(4)
_PR_FLAGS = const(5)
PR_IDS = const(6)
PR_UNVERIFIED = const(1)  # flags bit 0: tokens the node committed alone while the gateway was away
PROMPT_MAX = const(255)  # ids per PROMPT frame
MASK30 = const(0x3FFFFFFF)  # positions, counts and timestamps travel modulo 2**30 (small ints)

# check_body results
BODY_OK = const(0)
BODY_SHORT = const(1)
BODY_FIELD = const(2)
BODY_Q = const(3)
BODY_OVERRUN = const(4)
BODY_DUP_ID = const(5)
BODY_VERDICT = const(6)
BODY_RANGE = const(7)
BODY_TRAILING = const(8)
BODY_ERRORS = ("ok", "body too short", "field out of range", "draft counts do not sum to 65536",
               "draft record runs past the body", "draft token ids are not strictly ascending",
               "verdict committed count is not base + accepted + correction",
               "snapshot chunk lies outside the snapshot", "bytes after the last draft record")



class FrameError(ValueError):
    """A malformed frame or body given to a parse helper, or a bad argument to an encoder."""


def max_wire(raw):
    """Most wire bytes (both delimiters included) a decoded frame of raw bytes can take."""
    return cobs.max_encoded(raw) + 2


def draft_token_bytes(m):
    """Bytes of one draft token record with m candidates: 4 if m == 1 (greedy), else 2 + 4m."""
    return 4 if m == 1 else 2 + 4 * m


def u16(buf, off):
    return buf[off] | (buf[off + 1] << 8)


def u32s(buf, off):
    """A u32 field that must be below 2**30 (positions, timestamps): its low 30 bits, as a small int."""
    return buf[off] | (buf[off + 1] << 8) | (buf[off + 2] << 16) | ((buf[off + 3] & 0x3F) << 24)


def put_u16(buf, off, v):
    buf[off] = v & 0xFF
    buf[off + 1] = (v >> 8) & 0xFF


def put_u32(buf, off, v):
    buf[off] = v & 0xFF
    buf[off + 1] = (v >> 8) & 0xFF
    buf[off + 2] = (v >> 16) & 0xFF
    buf[off + 3] = (v >> 24) & 0xFF


def same4(a, aoff, b, boff):
    """Compare 4 bytes in place (epochs, hashes) without building an int."""
    return (a[aoff] == b[boff] and a[aoff + 1] == b[boff + 1] and a[aoff + 2] == b[boff + 2]
            and a[aoff + 3] == b[boff + 3])


def copy4(dst, doff, src, soff):
    dst[doff] = src[soff]
    dst[doff + 1] = src[soff + 1]
    dst[doff + 2] = src[soff + 2]
    dst[doff + 3] = src[soff + 3]


def put_header(buf, off, ftype, blen, seq, ack, epoch, peer, txoff, limit, version=VERSION):
    """Write a version-1 header at buf[off:off+20]; epoch and peer are 4-byte buffers."""
    buf[off] = version
    buf[off + 1] = ftype
    put_u16(buf, off + H_LEN, blen)
    put_u16(buf, off + H_SEQ, seq)
    put_u16(buf, off + H_ACK, ack)
    copy4(buf, off + H_EPOCH, epoch, 0)
    copy4(buf, off + H_PEER, peer, 0)
    put_u16(buf, off + H_TXOFF, txoff)
    put_u16(buf, off + H_LIMIT, limit)


def raw_size(ftype, blen):
    """Decoded size of a frame: header + body + (signature) + CRC."""
    return HDR + blen + (SIG if ftype & SIGNED else 0) + CRC


class Encoder:
    """Builds frames in preallocated buffers: raw (decoded frame) and wire (COBS + delimiters).

    encode(...) builds a whole frame from a header and a body and returns its wire length (the wire
    bytes are wire[0:n]); seal() and wrap() do the two halves for a frame already laid out in some
    other buffer (the link's retransmit window). None of them allocates."""

    def __init__(self, max_frame=MAX_FRAME, raw_bytes=None, crc=None):
        if not isinstance(max_frame, int) or max_frame < MIN_FRAME or max_frame > MAX_FRAME_LIMIT:
            raise FrameError("max_frame must be an int in %d..%d, got %r" % (MIN_FRAME, MAX_FRAME_LIMIT, max_frame))
        self.max_frame = max_frame
        self.raw = bytearray(raw_bytes or max_frame)
        self.wire = bytearray(max_wire(max_frame))
        self.crc = crc if crc is not None else crc32.new()

    def seal(self, buf, off, blen):
        """CRC the frame at buf[off:] (header says its type) and write the CRC; return its raw size."""
        m = HDR + blen + (SIG if buf[off + H_TYPE] & SIGNED else 0)
        c = self.crc
        c.reset()
        c.update(buf, off, off + m)
        c.put(buf, off + m)
        return m + CRC

    def wrap(self, src, off, n):
        """COBS-encode src[off:off+n] between two 0x00 into wire; return the wire length."""
        if n > self.max_frame:
            raise FrameError("frame of %d bytes exceeds max_frame %d" % (n, self.max_frame))
        w = self.wire
        w[0] = 0
        e = cobs.encode_into(src, off, off + n, w, 1)
        w[e] = 0
        return e + 1

    def encode(self, ftype, seq, ack, epoch, peer, txoff, limit, body, boff, blen):
        """Header + body[boff:boff+blen] + CRC into raw, then into wire; returns the wire length.

        A signed type (bit 7) needs its trailer written by Signer.sign first: use put_header, copy
        the body, sign, then seal and wrap."""
        raw = self.raw
        if ftype & SIGNED:
            raise FrameError("encode() builds unsigned frames; sign with put_header/Signer/seal/wrap")
        if HDR + blen + CRC > len(raw):
            raise FrameError("body of %d bytes does not fit a %d-byte frame buffer" % (blen, len(raw)))
        put_header(raw, 0, ftype, blen, seq, ack, epoch, peer, txoff, limit)
        if boff == 0 and blen == len(body):
            raw[HDR:HDR + blen] = body
        else:
            for i in range(blen):
                raw[HDR + i] = body[boff + i]
        n = self.seal(raw, 0, blen)
        return self.wrap(raw, 0, n)


class Decoder:
    """Wire bytes in, checked frames out, in one preallocated buffer.

    feed(data, start, end) consumes bytes until a valid frame is ready (ready = True) or the input
    ends, and returns the index after the last byte consumed; call it again with the rest. While
    ready, the frame is buf[0:n]: attributes ftype (whole type byte), blen, seq, ack, txoff, limit,
    wire (its wire size: encoded bytes + 2 delimiters); epochs are compared in place at H_EPOCH and
    H_PEER. Rejected frames only bump counters: err_short, err_crc, err_version (last_version keeps
    the byte), err_length, and in the COBS layer cobs.err_cobs and cobs.oversize."""

    def __init__(self, max_frame=MAX_FRAME, crc=None):
        if not isinstance(max_frame, int) or max_frame < MIN_FRAME or max_frame > MAX_FRAME_LIMIT:
            raise FrameError("max_frame must be an int in %d..%d, got %r" % (MIN_FRAME, MAX_FRAME_LIMIT, max_frame))
        self.cobs = cobs.Decoder(max_frame)
        self.buf = self.cobs.buf
        self.crc = crc if crc is not None else crc32.new()
        self._one = bytearray(1)
        self.ready = False
        self.n = 0
        self.wire = 0
        self.ftype = 0
        self.blen = 0
        self.seq = 0
        self.ack = 0
        self.txoff = 0
        self.limit = 0
        self.ok = 0
        self.err_short = 0
        self.err_crc = 0
        self.err_version = 0
        self.err_length = 0
        self.last_version = -1

    def errors(self):
        """Frames rejected so far, for every reason."""
        c = self.cobs
        return self.err_short + self.err_crc + self.err_version + self.err_length + c.err_cobs + c.oversize

    def feed(self, data, start, end):
        self.ready = False
        c = self.cobs
        while start < end:
            start = c.feed(data, start, end)
            if c.done and self._check():
                self.ready = True
                return start
        return start

    def feed_byte(self, b):
        """Feed one byte; True when it completed a valid frame."""
        self._one[0] = b
        self.feed(self._one, 0, 1)
        return self.ready

    def _check(self):
        buf = self.buf
        n = self.cobs.n
        if n < 4 + CRC:  # too short for the frozen bytes 0..3 and a CRC
            self.err_short += 1
            return False
        crc = self.crc
        crc.reset()
        crc.update(buf, 0, n - CRC)
        if not crc.matches(buf, n - CRC):
            self.err_crc += 1
            return False
        v = buf[H_VER]
        if (v >> 4) != VERSION_MAJOR:
            self.err_version += 1
            self.last_version = v
            return False
        ftype = buf[H_TYPE]
        blen = buf[H_LEN] | (buf[H_LEN + 1] << 8)
        if n < HDR + CRC or n != HDR + blen + (SIG if ftype & SIGNED else 0) + CRC:
            self.err_length += 1
            return False
        self.n = n
        self.wire = self.cobs.enc + 2
        self.ftype = ftype
        self.blen = blen
        self.seq = buf[H_SEQ] | (buf[H_SEQ + 1] << 8)
        self.ack = buf[H_ACK] | (buf[H_ACK + 1] << 8)
        self.txoff = buf[H_TXOFF] | (buf[H_TXOFF + 1] << 8)
        self.limit = buf[H_LIMIT] | (buf[H_LIMIT + 1] << 8)
        self.ok += 1
        return True


# ---- bodies: checks (allocation-free) ----

def check_body(t, buf, off, n, minor=MINOR):
    """BODY_OK if the body buf[off:off+n] of a frame of type t (bits 0..6) is well-formed, else a
    BODY_* code (BODY_ERRORS[code] says why). Types it does not know pass. minor: the sender's minor
    version (LOG bodies differ between 1.0 and 1.1). Allocates nothing."""
    if t == DRAFT:
        return _check_draft(buf, off, n)
    if t == VERDICT:
        return _check_verdict(buf, off, n)
    if t == LOG:
        if n < (LG_TEXT if minor else LG_TEXT_10):
            return BODY_SHORT
        if buf[off + _LG_TS + 3] & 0xC0 or buf[off + _LG_LEVEL] > 7:
            return BODY_FIELD
        if minor and (buf[off + LG_FLAGS] & ~LG_FLAGS_KNOWN or buf[off + LG_LSEQ + 3] & 0xC0
                      or not _wall_ok(buf, off + LG_DAY, off + LG_MS, True)):
            return BODY_FIELD
        return BODY_OK
    if t == TIME:
        if n < TIME_SIZE:
            return BODY_SHORT
        return BODY_OK if _wall_ok(buf, off + TM_DAY, off + TM_MS, False) else BODY_FIELD
    if t == KVSNAP:
        return _check_kvsnap(buf, off, n)
    if t == PROMPT:
        return _check_prompt(buf, off, n)
    if t == HELLO:
        return _check_hello(buf, off, n)
    if t == HEARTBEAT:
        return BODY_SHORT if n < _HEARTBEAT_SIZE else BODY_OK
    if t == ACK:
        return BODY_SHORT if n < _ACK_SIZE or (buf[off] & ACK_SACK and n < _ACK_SIZE + 2) else BODY_OK
    if t == ERROR:
        return BODY_SHORT if n < _ERROR_MIN else BODY_OK
    return BODY_OK


def _wall_ok(buf, dpos, mpos, none_ok):
    # a wall time (day u16, ms u30 below a day); day WALL_NONE (ms 0) where none_ok
    if u16(buf, dpos) == WALL_NONE:
        return none_ok and not (buf[mpos] | buf[mpos + 1] | buf[mpos + 2] | buf[mpos + 3])
    return not buf[mpos + 3] & 0xC0 and u32s(buf, mpos) < MS_PER_DAY


def _check_hello(buf, off, n):
    if n < HELLO_SIZE:
        return BODY_SHORT
    if n >= HELLO_SIZE_11 and not _wall_ok(buf, off + HE_WDAY, off + HE_WMS, True):
        return BODY_FIELD
    rxbuf = u16(buf, off + HE_RXBUF)
    maxf = u16(buf, off + HE_MAXFRAME)
    k = buf[off + _HE_DRAFTK]
    topk = buf[off + _HE_TOPK]
    q = buf[off + _HE_QBITS]
    if (buf[off + _HE_ROLE] > ROLE_GATEWAY or buf[off + HE_FLAGS] & 0xFC or rxbuf < MIN_RXBUF
            or rxbuf > MAX_FRAME_LIMIT or maxf < MIN_FRAME or maxf > MAX_FRAME_LIMIT or buf[off + _HE_WINDOW] == 0
            or k > MAX_K or topk > MAX_TOPK or (k and (q != Q_BITS or topk == 0)) or (not k and q not in (0, Q_BITS))):
        return BODY_FIELD
    return BODY_OK


def _check_draft(buf, off, n):
    if n < DR_TOKENS:
        return BODY_SHORT
    k = buf[off + _DR_K]
    flags = buf[off + _DR_FLAGS]
    if buf[off + _DR_BASE + 3] & 0xC0 or k < 1 or k > MAX_K or flags & 0xFE:
        return BODY_FIELD
    p = off + DR_TOKENS
    end = off + n
    for _ in range(k):
        if p + 2 > end:
            return BODY_OVERRUN
        m = buf[p]
        if m < 1 or m > MAX_TOPK or buf[p + 1] >= m or (flags & DR_GREEDY and m != 1):
            return BODY_FIELD
        need = draft_token_bytes(m)
        if p + need > end:
            return BODY_OVERRUN
        ids = p + 2
        prev = -1
        for j in range(ids, ids + 2 * m, 2):
            v = buf[j] | (buf[j + 1] << 8)
            if v <= prev:
                return BODY_DUP_ID
            prev = v
        if m > 1:
            s = 0  # at most 16 * 65536: a small int everywhere
            for j in range(ids + 2 * m, ids + 4 * m, 2):
                s += (buf[j] | (buf[j + 1] << 8)) + 1
            if s != Q_TOTAL:
                return BODY_Q
        p += need
    return BODY_OK if p == end else BODY_TRAILING


def _check_verdict(buf, off, n):
    if n < VERDICT_SIZE:
        return BODY_SHORT
    acc = buf[off + VD_ACCEPTED]
    flags = buf[off + VD_FLAGS]
    if (acc > MAX_K or flags & 0xFC or buf[off + VD_BASE + 3] & 0xC0 or buf[off + VD_COMMITTED + 3] & 0xC0
            or (not flags & VD_CORRECTION and u16(buf, off + VD_TOKEN))):
        return BODY_FIELD
    if not flags & VD_STALE:
        corr = 1 if flags & VD_CORRECTION else 0
        if (u32s(buf, off + VD_BASE) + acc + corr) & MASK30 != u32s(buf, off + VD_COMMITTED):
            return BODY_VERDICT
    return BODY_OK


def _check_kvsnap(buf, off, n):
    if n <= KS_DATA:
        return BODY_SHORT
    if buf[off + _KS_TOTAL + 3] & 0xC0 or buf[off + _KS_OFFSET + 3] & 0xC0:
        return BODY_FIELD
    total = u32s(buf, off + _KS_TOTAL)
    if u32s(buf, off + _KS_OFFSET) > total - (n - KS_DATA):
        return BODY_RANGE
    return BODY_OK


def _check_prompt(buf, off, n):
    if n < PR_IDS:
        return BODY_SHORT
    k = buf[off + _PR_N]
    if buf[off + _PR_BASE + 3] & 0xC0 or k == 0 or buf[off + _PR_FLAGS] & 0xFE:
        return BODY_FIELD
    need = PR_IDS + 2 * k
    if n < need:
        return BODY_OVERRUN
    return BODY_OK if n == need else BODY_TRAILING


# ---- allocation-free body writers for the node ----

def put_draft_head(buf, block, base, k, flags):
    """Write a DRAFT body's fixed part at buf[0:8]; token records follow from DR_TOKENS."""
    put_u16(buf, _DR_BLOCK, block)
    put_u32(buf, _DR_BASE, base & MASK30)
    buf[_DR_K] = k
    buf[_DR_FLAGS] = flags


def put_draft_token(buf, off, ids, counts, m, pick):
    """Write one draft token record at buf[off]: m candidates ids[0:m] (strictly ascending) with
    counts[0:m] (1..65536, summing to 65536; not sent when m == 1) and the sampled index pick
    (the drafted token is ids[pick]). Counts go on the wire as count - 1. Returns the offset after."""
    buf[off] = m
    buf[off + 1] = pick
    p = off + 2
    for j in range(m):
        put_u16(buf, p, ids[j])
        p += 2
    if m > 1:
        for j in range(m):
            put_u16(buf, p, counts[j] - 1)
            p += 2
    return p


def put_prompt(buf, base, ids, off, n, flags):
    """Write a PROMPT body at buf[0:6 + 2n]: ids[off:off+n] (1..255 token ids, 0..65535) committed at
    position base (mod 2**30); flags PR_UNVERIFIED or 0. Returns the body length. Allocates nothing."""
    if n < 1 or n > PROMPT_MAX or flags & 0xFE:
        raise FrameError("bad PROMPT n/flags")
    put_u32(buf, _PR_BASE, base & MASK30)
    buf[_PR_N] = n
    buf[_PR_FLAGS] = flags
    p = PR_IDS
    for i in range(off, off + n):
        put_u16(buf, p, ids[i])
        p += 2
    return p


def prompt_ids(buf, boff, out):
    """Copy the ids of the (checked) PROMPT body at buf[boff] into out[0:n]; return n. No allocation."""
    n = buf[boff + _PR_N]
    if len(out) < n:
        raise FrameError("prompt_ids: out too small")
    p = boff + PR_IDS
    for i in range(n):
        out[i] = buf[p] | (buf[p + 1] << 8)
        p += 2
    return n


# ---- host helpers: build and parse whole frames and bodies (they allocate) ----

# type: (struct format of the fixed part, its field names, name of the variable-length tail or None)
BODIES = {
    HELLO: ("<BBHHHBBBBHHHII16s8sHI", ("role", "flags", "rxbuf", "max_frame", "tx_base", "window", "draft_k",
                                       "topk", "q_bits", "kv_sink", "kv_window", "kv_staged", "model_hash",
                                       "tokenizer_hash", "board_id", "uid", "wall_day", "wall_ms"), None),
    HEARTBEAT: ("<BBHH", ("flags", "reserved", "rx_bad", "rx_dup"), None),
    ACK: ("<B", ("flags",), "sack"),
    ERROR: ("<BBH", ("code", "ref", "detail"), "text"),
    LOG: ("<IBBHIHI", ("ts", "level", "flags", "boot", "lseq", "day", "ms"), "text"),
    DRAFT: ("<HIBB", ("block", "base", "k", "flags"), "tokens"),
    VERDICT: ("<HIBBHI", ("block", "base", "accepted", "flags", "token", "committed"), None),
    KVSNAP: ("<HIII", ("snap", "total", "offset", "crc"), "data"),
    PROMPT: ("<IBB", ("base", "n", "flags"), "ids"),
    TIME: ("<HI", ("day", "ms"), None),
}
BODIES_10 = {LOG: ("<IB", ("ts", "level"), "text"),  # version 1.0 layouts that 1.1 changed
             HELLO: (BODIES[HELLO][0][:-4], BODIES[HELLO][1][:-3], None)}

_RANGE = {"B": 0xFF, "H": 0xFFFF, "I": 0xFFFFFFFF}


def _name(t):
    return TYPE_NAMES.get(t, "type 0x%02x" % t)


def _checked(t, body, minor=MINOR):
    code = check_body(t, body, 0, len(body), minor)
    if code:
        raise FrameError("%s body: %s" % (_name(t), BODY_ERRORS[code]))
    return body


def pack_body(t, minor=MINOR, **fields):
    """A body of type t from named fields (BODIES; missing ones are 0, the tail b""), checked.
    minor=0: the version 1.0 layout (BODIES_10) where it differs.

    DRAFT's tail `tokens` is a list of (ids, counts, pick): ids ascending, counts summing to 65536
    (not sent for a single candidate), the drafted token ids[pick]."""
    import struct

    if t not in BODIES:
        raise FrameError("no body layout for %s" % _name(t))
    fmt, names, tail = BODIES_10[t] if not minor and t in BODIES_10 else BODIES[t]
    vals = []
    for code, name in zip(fmt[1:].replace("16s", "s").replace("8s", "s"), names):
        v = fields.pop(name, b"" if code == "s" else 0)
        if code == "s":
            v = v.encode() if isinstance(v, str) else bytes(v)
            most = BOARD_ID_LEN if name == "board_id" else UID_LEN
            if len(v) > most:
                raise FrameError("%s is %d bytes; at most %d" % (name, len(v), most))
        elif not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > _RANGE[code]:
            raise FrameError("%s %s must be an int in 0..%d, got %r" % (_name(t), name, _RANGE[code], v))
        vals.append(v)
    rest = fields.pop(tail, b"" if tail not in ("tokens", "ids") else []) if tail else b""
    if fields:
        raise FrameError("%s has no field %s" % (_name(t), ", ".join(sorted(fields))))
    body = bytearray(struct.pack(fmt, *vals))
    if tail == "tokens":
        for ids, counts, pick in rest:
            m = len(ids)
            if not 1 <= m <= MAX_TOPK or (m > 1 and len(counts) != m):
                raise FrameError("a draft token needs 1..%d ids and as many counts, got %d/%d" % (
                    MAX_TOPK, m, len(counts)))
            if any(not 0 <= c <= 0xFFFF for c in ids) or (m > 1 and any(not 1 <= c <= Q_TOTAL for c in counts)):
                raise FrameError("draft token ids must be 0..65535 and counts 1..65536")
            rec = bytearray(draft_token_bytes(m))
            put_draft_token(rec, 0, ids, counts, m, pick & 0xFF)
            body += rec
    elif tail == "ids":
        for v in rest:
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 0xFFFF:
                raise FrameError("PROMPT token ids must be ints in 0..65535, got %r" % (v,))
            body += bytes((v & 0xFF, v >> 8))
    else:
        body += rest.encode() if isinstance(rest, str) else bytes(rest)
    return bytes(_checked(t, body, minor))


def parse_body(t, body, minor=MINOR):
    """A body's fields as a dict (host side); FrameError if check_body rejects it. minor: the
    sender's minor version (0: read a 1.0 LOG body; its flags, boot and lseq are then 0)."""
    import struct

    body = bytes(_checked(t, bytes(body), minor))
    if t not in BODIES:
        return {"raw": body}
    old = (not minor and t in BODIES_10) or (t == HELLO and len(body) < HELLO_SIZE_11)
    fmt, names, tail = BODIES_10[t] if old else BODIES[t]
    out = dict(zip(names, struct.unpack_from(fmt, body, 0)))
    if t == HELLO:
        out["board_id"] = out["board_id"].rstrip(b"\x00")
        if "uid" not in out:  # a 1.0 HELLO (42 bytes)
            out.update(uid=bytes(UID_LEN), wall_day=WALL_NONE, wall_ms=0)
    p = struct.calcsize(fmt)
    if tail == "tokens":
        toks = []
        for _ in range(out["k"]):
            m = body[p]
            ids = [u16(body, p + 2 + 2 * j) for j in range(m)]
            counts = [u16(body, p + 2 + 2 * (m + j)) + 1 for j in range(m)] if m > 1 else [Q_TOTAL]
            toks.append({"ids": ids, "counts": counts, "pick": body[p + 1], "token": ids[body[p + 1]]})
            p += draft_token_bytes(m)
        out["tokens"] = toks
    elif tail == "ids":
        out["ids"] = [u16(body, p + 2 * j) for j in range(out["n"])]
    elif tail:
        out[tail] = body[p:]
    if old and t == LOG:
        out.update(flags=0, boot=0, lseq=0, day=WALL_NONE, ms=0)
    return out


def pack_draft(block, base, tokens, greedy=False):
    """DRAFT body: tokens is a list of (ids, counts, pick)."""
    return pack_body(DRAFT, block=block, base=base, k=len(tokens), flags=DR_GREEDY if greedy else 0, tokens=tokens)


def pack_verdict(block, base, accepted, correction=None, stale=False, committed=None):
    """VERDICT body; committed defaults to base + accepted + (1 if a correction), mod 2**30."""
    if committed is None:
        committed = (base + accepted + (correction is not None)) & MASK30
    return pack_body(VERDICT, block=block, base=base, accepted=accepted, token=correction or 0, committed=committed,
                     flags=(VD_CORRECTION if correction is not None else 0) | (VD_STALE if stale else 0))


def pack_hello(**fields):
    """HELLO body with the link's defaults (rxbuf 1024, max_frame 1024, window 8; q_bits 16 if drafting;
    wall time not known). minor=0: the 42-byte 1.0 HELLO."""
    f = {"rxbuf": 1024, "max_frame": MAX_FRAME, "window": 8, "q_bits": Q_BITS if fields.get("draft_k") else 0}
    if fields.get("minor", MINOR):
        f["wall_day"] = WALL_NONE
    f.update(fields)
    return pack_body(HELLO, **f)


def _b4(v, name):
    if isinstance(v, int):
        if not 0 <= v <= 0xFFFFFFFF:
            raise FrameError("%s must fit 32 bits, got %r" % (name, v))
        return bytes((v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, v >> 24))
    if len(v) != 4:
        raise FrameError("%s must be 4 bytes, got %d" % (name, len(v)))
    return bytes(v)


def frame_bytes(ftype, body=b"", seq=0, ack=0, epoch=1, peer=0, txoff=0, limit=0, signer=None, counter=0,
                version=VERSION):
    """The decoded frame (header + body + trailer + CRC) as bytes; epoch/peer: int or 4 bytes;
    version: the header's version byte (0x10 builds a 1.0 peer's frame)."""
    for name, v, hi in (("type", ftype, 0x7F), ("seq", seq, 0xFFFF), ("ack", ack, 0xFFFF), ("txoff", txoff, 0xFFFF),
                        ("limit", limit, 0xFFFF), ("body length", len(body), MAX_FRAME_LIMIT)):
        if not isinstance(v, int) or not (1 if name == "type" else 0) <= v <= hi:
            raise FrameError("%s must be an int in 0..%d, got %r" % (name, hi, v))
    if signer is not None:
        ftype |= SIGNED
    raw = bytearray(raw_size(ftype, len(body)))
    put_header(raw, 0, ftype, len(body), seq, ack, _b4(epoch, "epoch"), _b4(peer, "peer"), txoff, limit, version)
    raw[HDR:HDR + len(body)] = body
    if signer is not None:
        signer.sign(raw, 0, len(body), counter_bytes(counter))
    c = crc32.new()
    c.update(raw, 0, len(raw) - CRC)
    c.put(raw, len(raw) - CRC)
    return bytes(raw)


def wire_bytes(ftype, body=b"", **kw):
    """The frame as sent: 0x00 + COBS(frame_bytes(...)) + 0x00."""
    return b"\x00" + cobs.encode(frame_bytes(ftype, body, **kw)) + b"\x00"


def parse(raw, max_frame=MAX_FRAME):
    """Check a decoded frame (the bytes between delimiters, after COBS) and return its fields.

    Raises FrameError naming the first check that failed: size, CRC, version, length, body."""
    raw = bytes(raw)
    n = len(raw)
    if n > max_frame or n < 4 + CRC:
        raise FrameError("frame of %d bytes: must be %d..%d" % (n, 4 + CRC, max_frame))
    if crc32.crc32(raw[:n - CRC]) != (raw[n - 4] | raw[n - 3] << 8 | raw[n - 2] << 16 | raw[n - 1] << 24):
        raise FrameError("CRC mismatch")
    if raw[0] >> 4 != VERSION_MAJOR:
        raise FrameError("unsupported protocol version 0x%02x (this side speaks 0x%02x)" % (raw[0], VERSION))
    ftype = raw[1]
    blen = u16(raw, H_LEN)
    if n < HDR + CRC or n != raw_size(ftype, blen):
        raise FrameError("length field %d does not match a %d-byte frame" % (blen, n))
    out = {"version": raw[0], "type": ftype & 0x7F, "signed": bool(ftype & SIGNED), "len": blen,
           "seq": u16(raw, H_SEQ), "ack": u16(raw, H_ACK), "epoch": raw[H_EPOCH:H_EPOCH + 4],
           "peer": raw[H_PEER:H_PEER + 4], "txoff": u16(raw, H_TXOFF), "limit": u16(raw, H_LIMIT),
           "body": _checked(ftype & 0x7F, raw[HDR:HDR + blen], raw[0] & 15)}
    if ftype & SIGNED:
        out["counter"] = raw[HDR + blen:HDR + blen + SIG_COUNTER]
        out["tag"] = raw[HDR + blen + SIG_COUNTER:HDR + blen + SIG]
    return out


# ---- optional authentication: HMAC-SHA256, truncated to 8 bytes, with a 48-bit counter ----

def counter_bytes(v):
    """A 48-bit counter as 6 little-endian bytes."""
    if not isinstance(v, int) or not 0 <= v < (1 << 48):
        raise FrameError("counter must be an int in 0..2**48-1, got %r" % (v,))
    return bytes((v >> (8 * i)) & 0xFF for i in range(SIG_COUNTER))


def counter_newer(a, aoff, b, boff):
    """True if the 48-bit LE counter at a[aoff] is greater than the one at b[boff] (no big ints)."""
    for i in range(SIG_COUNTER - 1, -1, -1):
        x = a[aoff + i]
        y = b[boff + i]
        if x != y:
            return x > y
    return False


def counter_inc(c):
    """Add one to a 6-byte LE counter in place; False if it wrapped (the key must be changed)."""
    for i in range(SIG_COUNTER):
        v = (c[i] + 1) & 0xFF
        c[i] = v
        if v:
            return True
    return False


class Signer:
    """HMAC-SHA256 (RFC 2104, by hand: MicroPython has no hmac module) over header + body + counter.

    The trailer after the body is the 6-byte counter, then the first 8 bytes of the HMAC. Allocates
    (hashlib objects, digests, a memoryview): signing is off the allocation-free path."""

    def __init__(self, key):
        import hashlib

        self._sha = hashlib.sha256
        if not isinstance(key, (bytes, bytearray)) or len(key) < 16:
            raise FrameError("an HMAC key must be at least 16 bytes")
        if len(key) > 64:
            key = self._sha(key).digest()
        k = bytes(key) + bytes(64 - len(key))
        self._ipad = bytes(x ^ 0x36 for x in k)
        self._opad = bytes(x ^ 0x5C for x in k)

    def mac(self, data):
        """The full 32-byte HMAC-SHA256 of data."""
        inner = self._sha(self._ipad)
        inner.update(data)
        outer = self._sha(self._opad)
        outer.update(inner.digest())
        return outer.digest()

    def sign(self, buf, off, blen, counter):
        """Write counter (6 bytes) and the tag after the body of the frame at buf[off]."""
        p = off + HDR + blen
        for i in range(SIG_COUNTER):
            buf[p + i] = counter[i]
        tag = self.mac(memoryview(buf)[off:p + SIG_COUNTER])
        p += SIG_COUNTER
        for i in range(_SIG_TAG):
            buf[p + i] = tag[i]

    def verify(self, buf, off, blen):
        """True if the frame's tag matches (compared without early exit)."""
        p = off + HDR + blen + SIG_COUNTER
        tag = self.mac(memoryview(buf)[off:p])
        diff = 0
        for i in range(_SIG_TAG):
            diff |= tag[i] ^ buf[p + i]
        return diff == 0
