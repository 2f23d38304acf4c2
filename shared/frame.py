# frame.py: the wire layouts: header, every body's offsets, sizes, type codes and flags, their put/get and checks.
"""Frames of the node <-> gateway link, version 1.2 (reads 1.1 and 1.0 peers too). docs/PROTOCOL.md is the specification;
this module holds every layout in it. Every integer is little-endian. A frame on the wire is

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

Nothing here allocates on MicroPython: the put/get helpers, put_header, check_body (validates a body)
and the node's body writers (put_draft_head, put_draft_token, put_prompt, prompt_ids) work in the
caller's buffers, and epochs stay as bytes compared in place (a 32-bit epoch as an int would be a heap
long on the 31-bit-int boards). The rest of the wire format lives in two modules over this one:
shared/frame_codec.py, the link's codec (Encoder/Decoder: COBS + CRC-32, the HMAC Signer, the HELLO it
sends), and shared/frame_host.py, which builds and parses whole frames and bodies as Python values
for the gateway, tools and tests (it allocates; the node never imports it). The drafter and the
annotator write bodies but no frames, so they import this module only.
"""
from shared.compat import MASK30, const  # positions, counts and timestamps travel mod 2**30 (small ints)

# major 1, minor 4 (1.1: LOG bodies carry a line sequence number; 1.2: CMD frames, operators' alarm commands;
# 1.3: UPDATE / UPSTAT frames, a new model sent to the node over the link; 1.4: UPDATE's CODE flag, the node's
# code sent the same way, and UPSTAT's UNFIT)
VERSION = const(0x14)
VERSION_MAJOR = const(1)
MINOR = const(4)  # this side's minor; a peer's is the low nibble of its HELLO's version byte
MINOR_CMD = const(2)  # the first minor that takes CMD frames
MINOR_UPDATE = const(3)  # the first minor that takes UPDATE frames (and sends UPSTAT)
MINOR_CODE = const(4)  # the first minor that takes a code package in UPDATE (flag CODE; UPSTAT UNFIT)
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
SIG_TAG = const(8)
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
CMD = const(0x16)  # 1.2: an operator's ACK / SHELVE / UNSHELVE of an alarm, for the node to apply and log (3.11)
UPDATE = const(0x17)  # 1.3: gateway -> node: a new model's BEGIN, CHUNKs of it, or ABORT (3.12)
UPSTAT = const(0x18)  # 1.3: node -> gateway: where an update stands (3.12)

# HELLO body
HE_ROLE = const(0)
HE_FLAGS = const(1)
HE_RXBUF = const(2)
HE_MAXFRAME = const(4)
HE_TXBASE = const(6)
HE_WINDOW = const(8)
HE_DRAFTK = const(9)
HE_TOPK = const(10)
HE_QBITS = const(11)
HE_SINK = const(12)
HE_KVWIN = const(14)
HE_STAGED = const(16)
HE_MODEL = const(18)
HE_TOK = const(22)
HE_BOARD = const(26)
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
HB_FLAGS = const(0)
HB_BAD = const(2)
HB_DUP = const(4)
HEARTBEAT_SIZE = const(6)
HB_PROBE = const(1)  # flags bit 0: answer with an ACK now (sent when out of credit)
# ACK body
AK_FLAGS = const(0)
AK_SACK = const(1)  # u16 SACK bitmap (with ACK_SACK)
ACK_SIZE = const(1)
ACK_GAP = const(1)  # flags bit 0: a frame after a missing one arrived: go back to ack + 1 now
ACK_SACK = const(2)  # flags bit 1: a u16 follows: bit i set = frame ack + 2 + i is held by the receiver
# ERROR body
ER_CODE = const(0)
ER_REF = const(1)
ER_DETAIL = const(2)
ER_TEXT = const(4)
ERROR_MIN = const(4)
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
LG_TS = const(0)
LG_LEVEL = const(4)
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
# CMD body: id u32 (u30), verb u8, level u8, three lengths u8, then machine id, tag, operator name (ASCII)
CM_ID = const(0)
CM_VERB = const(4)  # shared/plant_alarms verb codes: 1 ACK, 3 SHELVE, 4 UNSHELVE
CM_LEVEL = const(5)  # 0 HI, 1 HIHI, 2 LO, 3 LOLO, 4 BAD; CM_ALL: every point of the signal
CM_MLEN = const(6)
CM_TLEN = const(7)
CM_BLEN = const(8)
CM_TEXT = const(9)
CM_ALL = const(255)
CM_MACHINE_MAX = const(16)
CM_TAG_MAX = const(32)
CM_BY_MAX = const(32)
# UPDATE body: id u16, op u8, flags u8, offset u32 (u30), data. BEGIN: offset = the file's size, data = its
# SHA-256 (32 bytes); CHUNK: the bytes at offset (at least 1); ABORT: no data.
UP_ID = const(0)
UP_OP = const(2)
UP_FLAGS = const(3)
UP_OFF = const(4)
UP_DATA = const(8)
UP_BEGIN = const(1)
UP_CHUNK = const(2)
UP_ABORT = const(3)
UP_REBOOT = const(1)  # flags bit 0 (BEGIN): reset into the new model once it is verified
UP_CODE = const(2)  # flags bit 1 (BEGIN, 1.4): the file is a code package (a ustar archive of lib/), not a model
UP_SHA = const(32)
# UPSTAT body: id u16, state u8, flags u8 (0), offset u32 (u30): the bytes held from 0 (RECEIVING, VERIFIED,
# RUNNING), or the free bytes the file system has (NO_ROOM)
US_ID = const(0)
US_STATE = const(2)
US_OFF = const(4)
UPSTAT_SIZE = const(8)
US_RECEIVING = const(1)
US_VERIFIED = const(2)  # the whole file, its hash right: the node switches to it at its next boot
US_BAD_HASH = const(3)  # the whole file, its hash wrong: deleted, send it again
US_NO_ROOM = const(4)
US_RUNNING = const(5)  # booted into it: it loaded and drafted
US_ROLLED_BACK = const(6)  # booted into it: it failed to load or to draft; the previous model runs
US_ABORTED = const(7)
US_REFUSED = const(8)  # this node takes no model (a logs-only package: no model, no update code), or no code
US_UNFIT = const(9)  # 1.4: a code package this node cannot run (not a package, another .mpy version or arch)
US_LAST = const(9)
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
PR_BASE = const(0)
PR_N = const(4)
PR_FLAGS = const(5)
PR_IDS = const(6)
PR_UNVERIFIED = const(1)  # flags bit 0: tokens the node committed alone while the gateway was away
PROMPT_MAX = const(255)  # ids per PROMPT frame

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



class FrameError(ValueError):
    """A malformed frame or body given to a parse helper, or a bad argument to an encoder."""


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
        if buf[off + LG_TS + 3] & 0xC0 or buf[off + LG_LEVEL] > 7:
            return BODY_FIELD
        if minor and (buf[off + LG_FLAGS] & ~LG_FLAGS_KNOWN or buf[off + LG_LSEQ + 3] & 0xC0
                      or not _wall_ok(buf, off + LG_DAY, off + LG_MS, True)):
            return BODY_FIELD
        return BODY_OK
    if t == TIME:
        if n < TIME_SIZE:
            return BODY_SHORT
        return BODY_OK if _wall_ok(buf, off + TM_DAY, off + TM_MS, False) else BODY_FIELD
    if t == CMD:
        return _check_cmd(buf, off, n)
    if t == UPDATE:
        return _check_update(buf, off, n, minor)
    if t == UPSTAT:
        if n < UPSTAT_SIZE:
            return BODY_SHORT
        st = buf[off + US_STATE]
        if st < 1 or st > (US_LAST if minor >= MINOR_CODE else US_REFUSED) or buf[off + 3] or buf[off + US_OFF + 3] & 0xC0:
            return BODY_FIELD
        return BODY_OK if n == UPSTAT_SIZE else BODY_TRAILING
    if t == KVSNAP:
        return _check_kvsnap(buf, off, n)
    if t == PROMPT:
        return _check_prompt(buf, off, n)
    if t == HELLO:
        return _check_hello(buf, off, n)
    if t == HEARTBEAT:
        return BODY_SHORT if n < HEARTBEAT_SIZE else BODY_OK
    if t == ACK:
        return BODY_SHORT if n < ACK_SIZE or (buf[off] & ACK_SACK and n < ACK_SIZE + 2) else BODY_OK
    if t == ERROR:
        return BODY_SHORT if n < ERROR_MIN else BODY_OK
    return BODY_OK


def _check_cmd(buf, off, n):
    if n < CM_TEXT:
        return BODY_SHORT
    v = buf[off + CM_VERB]
    lv = buf[off + CM_LEVEL]
    ml = buf[off + CM_MLEN]
    tl = buf[off + CM_TLEN]
    bl = buf[off + CM_BLEN]
    if (buf[off + CM_ID + 3] & 0xC0 or not (v == 1 or v == 3 or v == 4) or (lv > 4 and lv != CM_ALL)
            or not 0 < ml <= CM_MACHINE_MAX or not 0 < tl <= CM_TAG_MAX or not 0 < bl <= CM_BY_MAX):
        return BODY_FIELD
    if n < CM_TEXT + ml + tl + bl:
        return BODY_SHORT
    if n > CM_TEXT + ml + tl + bl:
        return BODY_TRAILING
    for i in range(off + CM_TEXT, off + n):
        c = buf[i]
        if c < 33 or c > 126:  # printable ASCII without spaces: each lands in a log line as one word
            return BODY_FIELD
    return BODY_OK


def _check_update(buf, off, n, minor):
    if n < UP_DATA:
        return BODY_SHORT
    op = buf[off + UP_OP]
    known = UP_REBOOT | UP_CODE if minor >= MINOR_CODE else UP_REBOOT
    if op < UP_BEGIN or op > UP_ABORT or buf[off + UP_FLAGS] & ~known & 0xFF or buf[off + UP_OFF + 3] & 0xC0:
        return BODY_FIELD
    if op == UP_BEGIN:
        if u32s(buf, off + UP_OFF) == 0:
            return BODY_FIELD
        return BODY_SHORT if n < UP_DATA + UP_SHA else (BODY_OK if n == UP_DATA + UP_SHA else BODY_TRAILING)
    if op == UP_CHUNK:
        return BODY_SHORT if n == UP_DATA else BODY_OK
    return BODY_OK if n == UP_DATA else BODY_TRAILING


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
    k = buf[off + HE_DRAFTK]
    topk = buf[off + HE_TOPK]
    q = buf[off + HE_QBITS]
    if (buf[off + HE_ROLE] > ROLE_GATEWAY or buf[off + HE_FLAGS] & 0xFC or rxbuf < MIN_RXBUF
            or rxbuf > MAX_FRAME_LIMIT or maxf < MIN_FRAME or maxf > MAX_FRAME_LIMIT or buf[off + HE_WINDOW] == 0
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
    k = buf[off + PR_N]
    if buf[off + PR_BASE + 3] & 0xC0 or k == 0 or buf[off + PR_FLAGS] & 0xFE:
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
    put_u32(buf, PR_BASE, base & MASK30)
    buf[PR_N] = n
    buf[PR_FLAGS] = flags
    p = PR_IDS
    for i in range(off, off + n):
        put_u16(buf, p, ids[i])
        p += 2
    return p


def prompt_ids(buf, boff, out):
    """Copy the ids of the (checked) PROMPT body at buf[boff] into out[0:n]; return n. No allocation."""
    n = buf[boff + PR_N]
    if len(out) < n:
        raise FrameError("prompt_ids: out too small")
    p = boff + PR_IDS
    for i in range(n):
        out[i] = buf[p] | (buf[p + 1] << 8)
        p += 2
    return n
