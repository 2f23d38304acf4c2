# frame_host.py: whole frames and bodies built and parsed into Python values, for the gateway, tools and tests.
"""The allocating half of the wire format; shared/frame.py holds every layout (offsets, sizes, type
codes, flag bits) and the allocation-free helpers the node runs, docs/PROTOCOL.md specifies the bytes.

    pack_body(t, **fields) / parse_body(t, body)   a body of type t from / as named fields (BODIES)
    pack_draft / pack_verdict                      DRAFT and VERDICT bodies
    frame_bytes / wire_bytes / parse               a whole frame (header, body, signature, CRC)
    TYPE_NAMES, BODY_ERRORS                        names of frame types and of check_body's codes

Every function here allocates (struct, bytes, dicts), so the node never imports this module: its
import would cost the board's heap what the node never needs. Portable (CPython and MicroPython,
struct only) because the tests in tests/shared build their frames with it under both interpreters.
"""
import struct

from shared import cobs, crc32
from shared.frame_codec import counter_bytes
from shared.compat import MASK30
from shared.frame import (
    ACK,
    BOARD_ID_LEN,
    CRC,
    DRAFT,
    DR_GREEDY,
    ERROR,
    FrameError,
    HDR,
    HEARTBEAT,
    HELLO,
    HELLO_SIZE_11,
    H_ACK,
    H_EPOCH,
    H_LEN,
    H_LIMIT,
    H_PEER,
    H_SEQ,
    H_TXOFF,
    KVSNAP,
    LOG,
    MAX_FRAME,
    MAX_FRAME_LIMIT,
    MAX_TOPK,
    MINOR,
    PROMPT,
    Q_TOTAL,
    SIG,
    SIGNED,
    SIG_COUNTER,
    TIME,
    CMD,
    CM_TEXT,
    UPDATE,
    UPSTAT,
    UID_LEN,
    VD_CORRECTION,
    VD_STALE,
    VERDICT,
    VERSION,
    VERSION_MAJOR,
    WALL_NONE,
    check_body,
    draft_token_bytes,
    put_draft_token,
    put_header,
    raw_size,
    u16,
)

TYPE_NAMES = {HELLO: "HELLO", HEARTBEAT: "HEARTBEAT", ACK: "ACK", ERROR: "ERROR", LOG: "LOG",
              DRAFT: "DRAFT", VERDICT: "VERDICT", KVSNAP: "KVSNAP", PROMPT: "PROMPT", TIME: "TIME",
              CMD: "CMD", UPDATE: "UPDATE", UPSTAT: "UPSTAT"}

BODY_ERRORS = ("ok", "body too short", "field out of range", "draft counts do not sum to 65536",
               "draft record runs past the body", "draft token ids are not strictly ascending",
               "verdict committed count is not base + accepted + correction",
               "snapshot chunk lies outside the snapshot", "bytes after the last draft record")

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
    CMD: ("<IBBBBB", ("id", "verb", "level", "machine_len", "tag_len", "by_len"), "text"),
    UPDATE: ("<HBBI", ("id", "op", "flags", "offset"), "data"),
    UPSTAT: ("<HBBI", ("id", "state", "flags", "offset"), None),
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


def pack_cmd(cid, verb, machine, tag, by, level=0xFF):
    """CMD body (1.2): an operator's verb (plant_alarms ACK 1, SHELVE 3, UNSHELVE 4) for `tag` of `machine`,
    at `level` (0..4) or every level (255), naming who (`by`)."""
    m, t, b = (x.encode() if isinstance(x, str) else bytes(x) for x in (machine, tag, by))
    return pack_body(CMD, id=cid, verb=verb, level=level, machine_len=len(m), tag_len=len(t), by_len=len(b),
                     text=m + t + b)


def parse_cmd(body):
    """A CMD body's fields, with machine, tag and by split out as str."""
    f = parse_body(CMD, body)
    text = f.pop("text")
    m, t = f["machine_len"], f["tag_len"]
    f.update(machine=text[:m].decode(), tag=text[m:m + t].decode(), by=text[m + t:].decode())
    return f


def pack_draft(block, base, tokens, greedy=False):
    """DRAFT body: tokens is a list of (ids, counts, pick)."""
    return pack_body(DRAFT, block=block, base=base, k=len(tokens), flags=DR_GREEDY if greedy else 0, tokens=tokens)


def pack_verdict(block, base, accepted, correction=None, stale=False, committed=None):
    """VERDICT body; committed defaults to base + accepted + (1 if a correction), mod 2**30."""
    if committed is None:
        committed = (base + accepted + (correction is not None)) & MASK30
    return pack_body(VERDICT, block=block, base=base, accepted=accepted, token=correction or 0, committed=committed,
                     flags=(VD_CORRECTION if correction is not None else 0) | (VD_STALE if stale else 0))


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
