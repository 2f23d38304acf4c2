# linefmt.py: log-line text written into preallocated buffers: bytes, integers, decimals, UTC timestamps.
"""The node writes every log line into a bytearray slot (firmware/logq.py), never through str formatting
or floats (both allocate on MicroPython). Every function writes at buf[j] and returns the offset after
what it wrote; none allocates. Used by the plant engine (shared/plant_engine.py), the simulator
(shared/plant.py) and the node's own report lines.

    put_decimal(buf, j, 6123, 1)    "61.2": a value in 10**-(decimals+1) units, rounded half up
    date_into(20422, ymd)           ymd[0..2] = 2025, 11, 30: days since 1970-01-01 -> the civil date
    put_stamp(buf, j, ymd, sod)     "2025-11-30T06:00:00Z" (sod: seconds of the day)
"""
from shared.compat import const

_HEX = b"0123456789abcdef"
STAMP = const(20)  # "YYYY-MM-DDThh:mm:ssZ"


def put_bytes(buf, j, b):
    for i in range(len(b)):
        buf[j + i] = b[i]
    return j + len(b)


def put_uint(buf, j, x):
    """The decimal digits of x >= 0."""
    if x == 0:
        buf[j] = 48
        return j + 1
    n = 0
    y = x
    while y:
        y //= 10
        n += 1
    k = j + n
    while x:
        k -= 1
        buf[k] = 48 + x % 10
        x //= 10
    return j + n


def put_fixed(buf, j, x, width):
    """x >= 0 in exactly `width` digits (leading zeros)."""
    for w in range(width - 1, -1, -1):
        buf[j + w] = 48 + x % 10
        x //= 10
    return j + width


def put_hex4(buf, j, src, off):
    """The 4 bytes src[off..off+3] as 8 hex digits, most significant first (a little-endian u32)."""
    for i in range(3, -1, -1):
        v = src[off + i]
        buf[j] = _HEX[v >> 4]
        buf[j + 1] = _HEX[v & 15]
        j += 2
    return j


def put_decimal(buf, j, v, decimals):
    """v, in units of 10**-(decimals + 1), with `decimals` digits after the point: the last digit is
    rounded half up (v + 5) // 10, as the simulator's lines always were (-12.35 -> "-12.3")."""
    t = (v + 5) // 10
    if t < 0:
        buf[j] = 45
        j += 1
        t = -t
    if decimals == 0:
        return put_uint(buf, j, t)
    p = 10
    for _ in range(decimals - 1):
        p *= 10
    j = put_uint(buf, j, t // p)
    buf[j] = 46
    return put_fixed(buf, j + 1, t % p, decimals)


def date_into(day, ymd):
    """The proleptic Gregorian date of `day` days after 1970-01-01 into ymd[0], ymd[1], ymd[2] (integer
    arithmetic: the civil-from-days algorithm)."""
    z = day + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    mo = mp + 3 if mp < 10 else mp - 9
    ymd[0] = yoe + era * 400 + (1 if mo <= 2 else 0)
    ymd[1] = mo
    ymd[2] = d


def put_stamp(buf, j, ymd, sod):
    """"YYYY-MM-DDThh:mm:ssZ" of a date (ymd, from date_into) and the seconds of that day."""
    put_fixed(buf, j, ymd[0], 4)
    buf[j + 4] = 45
    put_fixed(buf, j + 5, ymd[1], 2)
    buf[j + 7] = 45
    put_fixed(buf, j + 8, ymd[2], 2)
    buf[j + 10] = 84
    put_fixed(buf, j + 11, sod // 3600, 2)
    buf[j + 13] = 58
    put_fixed(buf, j + 14, sod // 60 % 60, 2)
    buf[j + 16] = 58
    put_fixed(buf, j + 17, sod % 60, 2)
    buf[j + 19] = 90
    return j + 20
