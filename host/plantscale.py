"""The ints of the board's scalings: for each source, the mul, shift and add of shared/scaling.py.

The board computes `((x * mul) >> shift) + add` (lin, and its 32-bit and float32 forms lin32 and f32)
in small ints only. For a raw x whose engineering value is x * scale + offset, shown with d decimals,
the ideal internal value is round((x * scale + offset) * 10**(d + 1)) = round(x * k + c). The compiler
takes k and c as exact fractions of the numbers the user wrote (0.1 is 1/10, not the nearest double) and
chooses:

    mul, shift  the largest shift whose mul = round(k * 2**shift) stays within the form's bound (16-bit
                raws and lin32: |mul| < 2**14; float32: |mul| < 2**16; any lin: |x * mul| < 2**30 over the
                raw's range), or the smallest shift at which k * 2**shift is a whole number (shift 0 for
                a whole k): exact whenever k allows it;
    add         round(c + b), where b is the mean the form's floors take off (0 when nothing is
                floored, 1/2 per floor of lin and lin32, 0 for f32, which rounds).

The board's value is then within 1 internal unit of the ideal wherever |x| * |mul / 2**shift - k| < 1/2
(every value below about 2**13 units: 819.2 at one decimal), and within 1 + |value| * 2**-14 beyond,
the precision a 14-bit mul can give (tests/host/test_plant_compile.py measures both). A scaling that
cannot be built (k too large for the bound, an offset past 2**29 units, a scale under one unit over the
whole raw range) is a ScaleError whose message is the checker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import floor

LIM = 1 << 29  # the largest magnitude of a scaled value (shared/scaling.py)
MUL16 = 1 << 14  # |mul| bound for 16-bit raws and lin32 (both halves of a pair times mul stay below 2**30)
MULF32 = 1 << 16  # |mul| bound for f32 (its significand has 14 bits)
MAX_SHIFT = 48
LOOP_LO_UA, LOOP_HI_UA, LOOP_ZERO_UA, LOOP_SPAN_UA = 3600, 21000, 4000, 16000  # NAMUR NE 43, 4-20 mA
ADC_FULL = 65535  # read_u16() at the ADC's reference voltage
ADS_FULL = 32768  # an ADS1115 count at its full-scale range
ADS_GAINS = (6.144, 4.096, 2.048, 1.024, 0.512, 0.256)  # the PGA setting's index is the compiled pga
MCP_LSB = Fraction(1, 16)  # an MCP9600 hot-junction count: 0.0625 C
MCP_RANGE = (Fraction(-2048), Fraction(32767, 16))
RAW = {"int16": (-32768, 32767), "uint16": (0, 65535), "int32": (-(1 << 31), (1 << 31) - 1),
       "uint32": (0, (1 << 32) - 1), "bool": (0, 1)}
PER = {"s": 1, "min": 60, "h": 3600}


class ScaleError(ValueError):
    """A scaling the board's ints cannot do: the message says why and what to change."""


@dataclass(frozen=True)
class Lin:
    mul: int
    shift: int
    add: int


def exact(x: float | int) -> Fraction:
    """The number as the user wrote it: a float's shortest decimal form (0.1 -> 1/10)."""
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


def units(x: float | int, decimals: int) -> int:
    """An engineering value in internal units, 10**-(decimals + 1), rounded half away from zero."""
    v = exact(x) * 10 ** (decimals + 1)
    return int(floor(abs(v) + Fraction(1, 2))) * (1 if v >= 0 else -1)


def solve(k: Fraction, c: Fraction, x_max: int, mul_lim: int, form: str = "lin", add: bool = True) -> Lin:
    """mul, shift, add for x * k + c over raws |x| <= x_max; |mul| < mul_lim. form: lin, lin32 or f32
    (how the board floors); add=False for a step whose form has no add (it must then be 0)."""
    if k == 0:
        mul, shift = 0, 0
    else:
        if x_max and abs(k) * x_max < Fraction(1, 2):
            raise ScaleError("%s internal units per raw count: every reading would show the same value; use more "
                             "decimals or a larger scale" % _short(k))
        if abs(round(k)) >= mul_lim:
            raise ScaleError("%s internal units per raw count is more than the board's scaling takes (under %d): "
                             "use fewer decimals or a smaller scale" % (_short(k), mul_lim))
        # the largest shift with round(|k| * 2**shift) < mul_lim: start at the estimate from bit lengths
        ak = abs(k)
        shift = min(MAX_SHIFT, max(0, (mul_lim * ak.denominator // ak.numerator).bit_length() - 1))
        while shift > 0 and round(ak * 2 ** shift) >= mul_lim:
            shift -= 1
        while shift < MAX_SHIFT and round(ak * 2 ** (shift + 1)) < mul_lim:
            shift += 1
        den = k.denominator
        if den & (den - 1) == 0 and den.bit_length() - 1 <= shift:  # k * 2**t is whole: exact at shift t
            shift = den.bit_length() - 1
        mul = round(k * 2 ** shift)
        if mul == 0:
            shift = 0
    if not add:
        return Lin(mul, shift, 0)
    b = Fraction(0)
    if shift and form == "lin":
        b = Fraction(1, 2)
    elif shift and form == "lin32":
        b = Fraction(1, 2) if shift <= 16 else Fraction(1)
    a = floor(c + b + Fraction(1, 2))
    if abs(a) >= LIM:
        raise ScaleError("the offset is %s internal units, past the board's 2**29: use fewer decimals or a smaller "
                         "offset" % _short(c))
    return Lin(mul, shift, a)


def _short(f: Fraction) -> str:
    return "%.6g" % float(f)


def _dec(decimals: int) -> int:
    return 10 ** (decimals + 1)


# ---- per source ----

def modbus(reg: dict, decimals: int) -> Lin:
    """A Modbus value (a profile's register, defaults filled) -> the signal's internal units."""
    k = exact(reg.get("scale", 1)) * _dec(decimals)
    c = exact(reg.get("offset", 0)) * _dec(decimals)
    t = reg["data_type"]
    if t == "float32":
        return solve(k, c, 0, MULF32, "f32")
    lo, hi = RAW[t]
    if t in ("int32", "uint32"):
        return solve(k, c, max(-lo, hi), MUL16, "lin32")
    return solve(k, c, max(-lo, hi), MUL16 if t != "bool" else (1 << 30), "lin")


def _loop_or_volts(src: dict, rng: list, decimals: int, k1: Fraction, x_min: int, x_max: int) -> tuple[Lin, Lin]:
    """The two steps of an analog input: the count (x_min..x_max) to microamps (a loop) or millivolts (k1
    per count), then to the signal."""
    step1 = solve(k1, Fraction(0), max(-x_min, x_max), MUL16, add=False)
    lo, hi = exact(rng[0]) * _dec(decimals), exact(rng[1]) * _dec(decimals)
    if src["input"] == "4-20mA":
        k2 = (hi - lo) / LOOP_SPAN_UA
        return step1, solve(k2, lo, LOOP_HI_UA - LOOP_ZERO_UA, (2 ** 30 - 1) // (LOOP_HI_UA - LOOP_ZERO_UA) + 1)
    v0, v1 = exact(src["volts"][0]) * 1000, exact(src["volts"][1]) * 1000
    if v1 == v0:
        raise ScaleError("volts: the two voltages must differ")
    k2 = (hi - lo) / (v1 - v0)
    # the first step's largest output magnitude, as the board computes it
    x2 = max(abs((x * step1.mul) >> step1.shift) for x in (x_min, x_max)) + 1
    return step1, solve(k2, lo - v0 * k2, x2, (2 ** 30 - 1) // x2 + 1)


def adc(src: dict, rng: list, decimals: int) -> tuple[Lin, Lin]:
    """The board's ADC (read_u16, 0..65535 at vref)."""
    vref = exact(src["vref"])
    if src["input"] == "4-20mA":
        k1 = vref * 10 ** 6 / (ADC_FULL * exact(src["shunt_ohm"]))
    else:
        k1 = vref * 1000 / ADC_FULL
    return _loop_or_volts(src, rng, decimals, k1, 0, ADC_FULL)


def ads1115(src: dict, rng: list, decimals: int) -> tuple[Lin, Lin]:
    """An ADS1115 channel (signed counts, +-32768 at the gain's full-scale volts)."""
    fs = exact(src["gain"])
    if src["input"] == "4-20mA":
        k1 = fs * 10 ** 6 / (ADS_FULL * exact(src["shunt_ohm"]))
    else:
        k1 = fs * 1000 / ADS_FULL
    return _loop_or_volts(src, rng, decimals, k1, -ADS_FULL, ADS_FULL - 1)


def mcp9600(decimals: int) -> Lin:
    return solve(MCP_LSB * _dec(decimals), Fraction(0), 32768, MUL16)


def pulses(src: dict, decimals: int, period_ms: int) -> Lin:
    """A pulse count (lin32 of the count's halves): a total, or the pulses of one period as a rate."""
    k = exact(src["per_pulse"]) * _dec(decimals)
    if src["measure"] == "rate":
        k = k * 1000 * PER[src["per"]] / period_ms
    return solve(k, Fraction(0), 1 << 30, MUL16, "lin32")


# ---- the values a source can give (for the sample line's width) ----

def extremes(source_kind: str, src: dict, reg: dict | None, rng: list | None) -> tuple[Fraction, Fraction] | None:
    """The lowest and highest engineering value the signal can show (None: unbounded, the board's limit)."""
    if source_kind in ("adc", "ads1115"):
        if rng is None:  # refused: an analog input needs its range
            return None
        lo, hi = exact(rng[0]), exact(rng[1])
        if src["input"] == "4-20mA":
            a = lo + (hi - lo) * (LOOP_LO_UA - LOOP_ZERO_UA) / LOOP_SPAN_UA
            b = lo + (hi - lo) * (LOOP_HI_UA - LOOP_ZERO_UA) / LOOP_SPAN_UA
        else:
            top = exact(src["vref"]) * 1000 if source_kind == "adc" else exact(src["gain"]) * 1000
            bottom = Fraction(0) if source_kind == "adc" else -top
            v0, v1 = exact(src["volts"][0]) * 1000, exact(src["volts"][1]) * 1000
            if v0 == v1:  # refused: the scaling says so
                return None
            a = lo + (bottom - v0) * (hi - lo) / (v1 - v0)
            b = lo + (top - v0) * (hi - lo) / (v1 - v0)
        return min(a, b), max(a, b)
    if rng is not None:
        return exact(rng[0]), exact(rng[1])
    if source_kind == "modbus":
        if reg is None or reg["data_type"] == "float32":  # no such register (refused), or a float's any value
            return None
        lo, hi = RAW[reg["data_type"]]
        s, o = exact(reg["scale"]), exact(reg["offset"])
        return min(lo * s, hi * s) + o, max(lo * s, hi * s) + o
    if source_kind == "mcp9600":
        return MCP_RANGE
    if source_kind == "contact":
        return Fraction(0), Fraction(1)
    return None  # pulses: a total grows without bound
