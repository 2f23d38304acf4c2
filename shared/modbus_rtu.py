# modbus_rtu.py: Modbus RTU frames for a master: CRC-16, read requests, answer checks, register and bit getters.
"""The frame layer of the node's Modbus RTU master (firmware/modbus.py), kept portable so both interpreters
test it byte for byte. A master here only reads: function codes 1 (coils), 2 (discrete inputs), 3 (holding
registers) and 4 (input registers).

    request   unit, fc, start hi, start lo, count hi, count lo, crc lo, crc hi                  (8 bytes)
    answer    unit, fc, byte count, data..., crc lo, crc hi                          (5 + byte count)
    exception unit, fc | 0x80, exception code, crc lo, crc hi                                  (5 bytes)

Registers travel high byte first; a device that stores them the other way round is read with swap=1.
Bits travel packed, bit 0 of the first data byte is the first coil asked for. The CRC is CRC-16/MODBUS
(reflected polynomial 0xA001, initial value 0xFFFF), low byte first on the wire, so the CRC of a whole
good frame, its own two CRC bytes included, is 0.

Every function works in buffers the caller allocated once and allocates nothing on MicroPython.
"""
from array import array

from shared.compat import const

REQUEST_LEN = const(8)
EXCEPTION_LEN = const(5)
MAX_FRAME = const(256)  # the RTU limit: the longest answer a master can ask for is 255 bytes

# check(): what a received buffer holds so far
NEED = const(0)  # incomplete: keep collecting
OK = const(1)  # a good answer to the request
EXCEPTION = const(2)  # a good exception answer: its code is buf[2]
BAD_CRC = const(3)  # the right length, but the CRC does not match (noise on the line)
BAD_ID = const(4)  # not from the unit asked, or not an answer to the function asked
BAD_LEN = const(5)  # its byte count is not what the request asked for


def _table():
    # 256 entries of the byte-at-a-time CRC, 512 bytes built once at import: on the unix port it is
    # about 7x faster than eight shift-and-xor steps per byte (docs/MODBUS.md).
    t = array("H", bytearray(512))
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xA001 if c & 1 else c >> 1
        t[i] = c
    return t


_CRC = _table()


def crc16(buf, n):
    """CRC-16/MODBUS of buf[0:n]."""
    t = _CRC
    c = 0xFFFF
    for i in range(n):
        c = (c >> 8) ^ t[(c ^ buf[i]) & 0xFF]
    return c


def put_read_request(buf, unit, fc, start, count):
    """A read request (fc 1-4) in buf[0:8]; returns 8."""
    buf[0] = unit
    buf[1] = fc
    buf[2] = start >> 8
    buf[3] = start & 0xFF
    buf[4] = count >> 8
    buf[5] = count & 0xFF
    c = crc16(buf, 6)
    buf[6] = c & 0xFF
    buf[7] = c >> 8
    return REQUEST_LEN


def data_bytes(fc, count):
    """The byte count a good answer to a read of `count` items carries."""
    if fc <= 2:
        return (count + 7) >> 3
    return count << 1


def answer_len(fc, count):
    """The length of a good (not exception) answer, CRC included."""
    return 5 + data_bytes(fc, count)


def check(buf, n, unit, fc, count):
    """What buf[0:n], the bytes received since the request (unit, fc, count) went out, holds: NEED while
    it could still become a good frame, else OK, EXCEPTION, BAD_CRC, BAD_ID or BAD_LEN. Bytes past the
    frame's end are not looked at. A wrong first or second byte is reported at once: no length can be
    trusted after it, and the master lets the bus fall silent before its next request anyway."""
    if n < 1:
        return NEED
    if buf[0] != unit:
        return BAD_ID
    if n < 2:
        return NEED
    f = buf[1]
    if f == fc | 0x80:
        if n < EXCEPTION_LEN:
            return NEED
        return EXCEPTION if crc16(buf, EXCEPTION_LEN) == 0 else BAD_CRC
    if f != fc:
        return BAD_ID
    if n < 3:
        return NEED
    if buf[2] != data_bytes(fc, count):
        return BAD_LEN
    total = 5 + buf[2]
    if n < total:
        return NEED
    return OK if crc16(buf, total) == 0 else BAD_CRC


def u16(buf, i, swap):
    """Register i (0: the first asked for) of a good register answer; swap=1 for a device that puts
    the low byte first."""
    j = 3 + (i << 1)
    if swap:
        return (buf[j + 1] << 8) | buf[j]
    return (buf[j] << 8) | buf[j + 1]


def bit(buf, i):
    """Coil or discrete input i (0: the first asked for) of a good bit answer: 0 or 1."""
    return (buf[3 + (i >> 3)] >> (i & 7)) & 1
