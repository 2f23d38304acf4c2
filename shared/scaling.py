# scaling.py: raw readings -> a signal's internal units with small-int arithmetic only (no float, no long int).
"""Every scaling on the board is `((x * mul) >> shift) + add`, with the three ints chosen by the host's
compiler (host/plantcompile.py) from the description's scale, offset, range and decimals so that
|x * mul| < 2**30 for every raw x the source can give (16-bit raws: |mul| < 2**14). The result is the
signal's internal unit (shared/readings.py). Two raws are wider than one small int and get their own
forms, which never build the wide number:

    lin(x, mul, shift, add)                  16-bit raws, ADC averages, microamps, pulse counts
    lin32(hi, lo, signed, mul, shift, add)   a 32-bit register pair as two 16-bit halves
    f32(hi, lo, mul, shift, add)             an IEEE-754 float32 register pair: value = +-m * 2**(e - 140)
                                             with m the significand rounded to 14 bits (implicit 1 included),
                                             |mul| < 2**16

A result that would not fit (|v| >= 2**29), a float32 NaN or infinity, is OVER (shared/readings.py): the
engine logs it as a RANGE reading. Nothing allocates on MicroPython (all values stay below 2**30).
"""
from shared.compat import const
from shared.readings import OVER

_LIM = const(0x20000000)  # 2**29: the largest magnitude a scaled value may have


def _sum(t, add):
    # t + add for |t| < 2**30, |add| < 2**29, checked before it could leave the small ints
    if (t >= _LIM and add >= 0) or (t <= -_LIM and add <= 0):
        return OVER
    v = t + add
    if v >= _LIM or v <= -_LIM:
        return OVER
    return v


def lin(x, mul, shift, add):
    return _sum((x * mul) >> shift, add)


def _shl(p, n):
    # p << n without leaving the small ints: OVER when it would pass 2**29
    if p >= 0:
        if n >= 29 or p >= (_LIM >> n):
            return OVER if p else 0
    elif n >= 29 or -p >= (_LIM >> n):
        return OVER
    return p << n


def lin32(hi, lo, signed, mul, shift, add):
    """(hi * 65536 + lo) scaled; hi is taken as int16 when signed. Both halves are 0..65535. A negative
    value is scaled as its magnitude times -mul (x * mul = |x| * -mul, floored the same way): its halves
    never push an intermediate past 2**29 when the result fits (a small negative number is 0xFFFF in its
    high half)."""
    if signed and hi >= 0x8000:
        nlo = (0x10000 - lo) & 0xFFFF  # the two's complement's magnitude, as two halves
        nhi = 0xFFFF - hi + (1 if lo == 0 else 0)
        v = _mag32(nhi, nlo, -mul, shift)
        if v == OVER:
            return OVER
        return _sum(v, add)
    v = _mag32(hi, lo, mul, shift)
    if v == OVER:
        return OVER
    return _sum(v, add)


def _mag32(hi, lo, mul, shift):
    # (hi * 65536 + lo) * mul >> shift for 0 <= hi, lo < 2**16, without a wide intermediate
    a = hi * mul
    b = (lo * mul) >> shift  # 0 <= lo * mul < 2**30 (|mul| < 2**14); b may be negative for mul < 0
    if shift <= 16:
        a = _shl(a, 16 - shift)
        if a == OVER:
            return OVER
    else:
        a >>= shift - 16
    # |a| < 2**29 and |b| < 2**30: their sum stays a small int unless both lean the same way past 2**29
    if (a >= 0 and b >= _LIM) or (a <= 0 and b <= -_LIM):
        return OVER
    return _sum(a + b, 0)


def f32(hi, lo, mul, shift, add):
    """A float32 from its two 16-bit halves (hi holds the sign and exponent), scaled."""
    e = (hi >> 7) & 0xFF
    if e == 0:  # zero or a denormal: 0 at any scale we can show
        return _sum(0, add)
    if e == 0xFF:  # infinity or NaN
        return OVER
    m = (0x2000 | ((hi & 0x7F) << 6) | (lo >> 10)) + ((lo >> 9) & 1)  # rounded to 14 bits (may carry to 2**14)
    p = m * mul  # < 2**30: |mul| < 2**16
    n = e - 140 - shift
    if n >= 0:
        p = _shl(p, n)
        if p == OVER:
            return OVER
    elif n > -31:
        p = (p + (1 << (-n - 1))) >> -n  # rounded
    else:
        p = 0  # far below one unit
    if hi & 0x8000:
        p = -p
    return _sum(p, add)
