"""The compiled plant (host/plantcompile.py, docs/PLANT.md "The compiled form"): the example's exact tables,
Modbus batching, determinism and the hash, and the scalings' accuracy on the board's own arithmetic
(shared/scaling.py) over many raws and scales: every Modbus type, ADC and ADS1115 loops and voltages in
their two steps, the MCP9600, pulse totals and rates."""

from __future__ import annotations

import copy
import json
import random
import struct
from fractions import Fraction
from math import floor
from pathlib import Path

import pytest

from host import board_profile, plantcompile, plantfile, plantscale
from shared import scaling
from shared.readings import OVER

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pump_skid.json"
# The example's hash: it changes only when the example or the compiled form does (then update it here,
# and rerun tools/board/simplant.py, whose hash changes with the form too).
EXAMPLE_HASH = "4b3554be290703ab"


def compiled(desc: dict, board: dict | None = None) -> dict:
    return json.loads(plantcompile.compile_plant(desc, board))


def example() -> dict:
    return plantfile.load(EXAMPLE)


def test_the_example_compiles_to_these_tables() -> None:
    c = compiled(example())
    assert c["f"] == 1 and c["name"] == "pump-skid-1" and c["tz"] == "Europe/Berlin"
    assert c["rs485"] == [[1, 4, 5, 3, 19200, 1, 1, 200, 2006]]  # gap: 3.5 characters of 11 bits at 19200 baud
    assert c["i2c"] == [[0, 8, 9, 100000]]
    # one unit (the drive), the discrete input and the input register in a batch each, by function code
    assert c["units"] == [[0, 1, 1000, [[2, 2, 1], [4, 3, 1]]]]
    assert c["machines"] == [["P-1", "pump", 5, 20, 0, 1, -1, 0]]
    assert c["contacts"] == [[1, 10, 1, 2, 20, 0],  # run: GP10, active high, pull down, 20 ms
                             [2, 0, 0, 0, -1, 0]]  # trip: unit 0, batch 0 (the discrete input), offset 0
    p, i, t = c["signals"]
    # P: ADC0 = GP26 on a Pico, 8 samples, a loop; count -> uA: 3.3e6 / 65535 / 150 ~ 11000 / 2**15;
    # uA - 4000 -> hundredths of a bar: 1000 / 16000 = 1 / 16 exactly
    assert p == [0, "P", "discharge_press", "bar", 1, 1000, 20, 1, 0, 2, 26, 8, 0, 11000, 15, 1, 4, 1]
    # I: Modbus unit 0, batch 1 (input registers), offset 0, uint16 AB, scale 0.1 A at 1 decimal: x 10 exactly
    assert i == [0, "I", "motor_current", "A", 1, 1000, 0, 0, 6000, 1, 0, 1, 0, 1, 0, 0, -1, 10, 0, 0]
    # T: the MCP9600 on i2c bus 0 at 96, type K; 0.0625 C per count in hundredths: 25 / 4 exactly
    assert t == [0, "T", "bearing_temp", "C", 1, 1000, 0, -2000, 20000, 4, 0, 96, 0, 25, 2, 1]
    assert c["alarms"] == [[0, 0, 750, 20, 5, 10, 3, 1, -1], [0, 1, 900, 0, 0, 0, 4, 0, 0],
                           [1, 0, 3200, 100, 5, 0, 2, 1, -1], [2, 0, 8000, 200, 10, 0, 2, 0, -1],
                           [2, 1, 9500, 0, 0, 0, 4, 0, 1]]
    assert c["bad"] == [[0, 3, 60, 1], [1, 3, 60, 1], [2, 3, 60, 1]]
    assert c["interlocks"] == ["HIHI_PRESS", "HIHI_TEMP"]
    assert "sim" not in c


def test_canonical_bytes_and_a_stable_hash() -> None:
    desc = example()
    data = plantcompile.compile_plant(desc)
    assert data == plantcompile.compile_plant(copy.deepcopy(desc))
    assert data.isascii() and b" " not in data.replace(b"pump-skid-1", b"")
    assert list(json.loads(data)) == sorted(json.loads(data))
    assert plantcompile.plant_hash(data) == EXAMPLE_HASH

    def ints_and_strings(v: object) -> bool:
        if isinstance(v, list):
            return all(ints_and_strings(x) for x in v)
        if isinstance(v, dict):
            return all(ints_and_strings(x) for x in v.values())
        return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))

    assert ints_and_strings(json.loads(data))
    # the order of a leaf object's fields and 9 vs 9.0 change nothing
    text = json.loads(EXAMPLE.read_text())
    sig = text["machines"][0]["signals"][0]
    text["machines"][0]["signals"][0] = dict(reversed(list(sig.items())))
    sig["alarms"][1]["limit"] = 9
    assert plantcompile.compile_plant(plantfile.loads(json.dumps(text), "x.json")) == data
    # and the board compiled for is the one the description names
    assert plantcompile.compile_plant(desc, board_profile.resolve("rp2040_pico")) == data


def test_a_description_change_changes_the_hash() -> None:
    text = json.loads(EXAMPLE.read_text())
    text["machines"][0]["signals"][1]["alarms"][0]["limit"] = 33
    other = plantcompile.compile_plant(plantfile.loads(json.dumps(text), "x.json"))
    assert plantcompile.plant_hash(other) != EXAMPLE_HASH and len(plantcompile.plant_hash(other)) == 16


# ---- Modbus batching ----

def test_batches_merge_gaps_of_up_to_8_and_split_at_125_registers() -> None:
    b = plantcompile.batches
    assert b([(3, 0, 1), (3, 9, 1)]) == [[3, 0, 10]]  # a gap of 8 registers: one request
    assert b([(3, 0, 1), (3, 10, 1)]) == [[3, 0, 1], [3, 10, 1]]  # a gap of 9: two
    assert b([(3, 0, 2), (3, 1, 1), (3, 2, 1)]) == [[3, 0, 3]]  # overlapping and 32-bit values
    assert b([(4, 5, 1), (3, 7, 1), (1, 0, 1)]) == [[1, 0, 1], [3, 7, 1], [4, 5, 1]]  # one table each, by fc
    run = [(3, a, 1) for a in range(0, 128, 2)]  # every other register, 0..124, then 126
    assert b(run) == [[3, 0, 125], [3, 126, 1]]
    assert b(run[:62] + [(3, 124, 2)]) == [[3, 0, 123], [3, 124, 2]]  # a pair is never split between requests
    bits = [(2, a, 1) for a in range(0, 2010, 9)]  # gaps of 8 bits: one run, split at 2000 bits
    assert b(bits) == [[2, 0, 1999], [2, 2007, 1]]
    assert b([(1, 0, 1), (1, 8, 1), (1, 17, 1), (1, 27, 1)]) == [[1, 0, 18], [1, 27, 1]]


def _modbus_plant(rng: random.Random) -> dict:
    regs = {}
    for n in range(60):
        table = rng.choice(["holding", "input", "coil", "discrete"])
        t = "bool" if table in ("coil", "discrete") else rng.choice(["int16", "uint16", "int32", "uint32", "float32",
                                                                      "bool"])
        r = {"register": table, "address": rng.randrange(0, 400), "data_type": t}
        if t == "bool" and table in ("holding", "input"):
            r["bit"] = rng.randrange(16)
        regs["r%d" % n] = r
    names = sorted(regs)
    machines = []
    for m in range(8):
        sigs = [{"key": "S%d" % j, "tag": "s%d" % j, "unit": "u", "decimals": 0, "range": [-1000, 1000],
                 "source": {"device": "d%d" % (m % 2), "register": names[(m * 8 + j) % len(names)]}}
                for j in range(8)]
        machines.append({"id": "M-%d" % m, "kind": "thing", "state": {"run": {"device": "d0", "register": "flag"}},
                         "signals": sigs})
    regs["flag"] = {"register": "coil", "address": 7}
    return {"format": "edgetwin-plant/1", "name": "batches",
            "buses": {"b": {"type": "rs485", "uart": 1, "tx": 4, "rx": 5}},
            "profiles": {"p": {"registers": regs}},
            "devices": {"d0": {"profile": "p", "bus": "b", "unit": 1}, "d1": {"profile": "p", "bus": "b", "unit": 2,
                                                                           "poll_ms": 500}},
            "machines": machines}


def test_every_value_is_read_by_its_batch() -> None:
    rng = random.Random(3)
    for _ in range(20):
        desc = plantfile.loads(json.dumps(_modbus_plant(rng)), "b.json")
        c = compiled(desc)
        regs = desc["profiles"]["p"]["registers"]
        for unit in c["units"]:
            for fc, start, count in unit[3]:
                assert count <= (2000 if fc <= 2 else 125)
        for (s, sig) in zip(c["signals"], [s for m in desc["machines"] for s in m["signals"]]):
            reg = regs[sig["source"]["register"]]
            unit, batch, offset = s[10:13]
            fc, start, count = c["units"][unit][3][batch]
            assert fc == plantcompile.FC[reg["register"]] and start + offset == reg["address"]
            assert offset + (2 if reg["data_type"] in ("int32", "uint32", "float32") else 1) <= count
            assert s[5] == c["units"][unit][2]  # a Modbus signal's period is its device's poll
            assert s[16] == reg.get("bit", -1)
        for contact in c["contacts"]:
            fc, start, count = c["units"][contact[1]][3][contact[2]]
            assert (fc, start + contact[3]) == (1, 7)


# ---- scaling accuracy on the board's arithmetic ----

def _round(f: Fraction) -> int:
    return floor(f + Fraction(1, 2))


SCALES = (1, 0.1, 0.01, 0.001, 1 / 3, -0.5, 2.5, 1e-5, 12.34, -7.77, 0.0625, 1000, 3e-7, 0.3048, -1, 25.4)
OFFSETS = (0, 0, 1.5, -40, 273.15, 0.05, -0.5)


def _check(got: int, ideal: Fraction, lin: plantscale.Lin, k: Fraction, x: Fraction, extra: Fraction) -> None:
    """The board's value is within 1 (+ what the form adds) of the ideal plus mul's quantisation error at x;
    where that error is under half a unit, within 1 of the ideal rounded."""
    q = abs(x) * abs(Fraction(lin.mul, 2 ** lin.shift) - k)
    assert got != OVER and abs(got - ideal) <= 1 + extra + q, (got, float(ideal), lin, x)
    if q + extra < Fraction(1, 2):
        assert abs(got - _round(ideal)) <= 1, (got, float(ideal), lin, x)


def _mul_bounds(lin: plantscale.Lin, k: Fraction, mul_lim: int) -> None:
    assert abs(lin.mul) < mul_lim and abs(lin.add) < 2 ** 29 and lin.shift >= 0
    if k.denominator & (k.denominator - 1) == 0 and k.denominator <= 2 ** lin.shift:  # exact: the smallest shift
        assert Fraction(lin.mul, 2 ** lin.shift) == k and (lin.shift == 0 or lin.mul % 2)
    elif lin.mul:  # else the largest shift that keeps mul in range
        assert abs(round(k * 2 ** (lin.shift + 1))) >= mul_lim or lin.shift == plantscale.MAX_SHIFT


@pytest.mark.parametrize("dtype", ["int16", "uint16", "bool", "int32", "uint32", "float32"])
def test_modbus_scalings_match_the_ideal_value(dtype: str) -> None:
    rng = random.Random(dtype)
    cases = 0
    for scale in SCALES:
        for sign in (1, -1):
            for off in OFFSETS:
                for d in range(4):
                    s = float("%.6g" % (scale * sign * rng.choice((1, 1, 1.7))))
                    reg = {"data_type": dtype, "scale": s, "offset": off}
                    try:
                        lin = plantscale.modbus(reg, d)
                    except plantscale.ScaleError:
                        continue
                    cases += 1
                    k, c = plantscale.exact(s) * 10 ** (d + 1), plantscale.exact(off) * 10 ** (d + 1)
                    bound = {"float32": plantscale.MULF32, "bool": 2 ** 30}.get(dtype, plantscale.MUL16)
                    _mul_bounds(lin, k, bound)
                    for _ in range(60):
                        _one_raw(rng, dtype, lin, k, c)
    assert cases > 200


def _one_raw(rng: random.Random, dtype: str, lin: plantscale.Lin, k: Fraction, c: Fraction) -> None:
    extra = Fraction(0)
    if dtype == "float32":
        v = rng.choice((rng.uniform(-1e4, 1e4), rng.uniform(-10, 10), rng.uniform(-1e6, 1e6), 0.0))
        hi, lo = struct.unpack(">HH", struct.pack(">f", v))
        x = Fraction(struct.unpack(">f", struct.pack(">f", v))[0])
        got = scaling.f32(hi, lo, lin.mul, lin.shift, lin.add)
        # the significand rounded to 14 bits, and the product's last unit (scaling.f32)
        extra = abs(x * k) / 2 ** 14 + 1
    elif dtype in ("int32", "uint32"):
        lo_, hi_ = plantscale.RAW[dtype]
        x = rng.choice((rng.randint(lo_, hi_), rng.randint(max(lo_, -100000), 100000)))
        u = x & 0xFFFFFFFF
        got = scaling.lin32(u >> 16, u & 0xFFFF, dtype == "int32", lin.mul, lin.shift, lin.add)
        extra = Fraction(1 if lin.shift > 16 else 0)  # lin32 floors its two halves apart past a shift of 16
        x = Fraction(x)
    else:
        lo_, hi_ = plantscale.RAW[dtype]
        x = Fraction(rng.randint(lo_, hi_))
        got = scaling.lin(int(x), lin.mul, lin.shift, lin.add)
    ideal = x * k + c
    q = abs(x) * abs(Fraction(lin.mul, 2 ** lin.shift) - k)
    if max(abs(ideal), abs(x * k)) + 1 + extra + q >= 2 ** 29:  # past the board's ints before or after the add
        assert got == OVER or abs(got) < 2 ** 29
        return
    _check(got, ideal, lin, k, x, extra)


def test_whole_and_dyadic_scales_are_exact() -> None:
    for scale, d, want in ((0.1, 1, (10, 0)), (1, 0, (10, 0)), (0.0625, 1, (25, 2)), (0.5, 0, (5, 0)),
                           (0.01, 0, None), (-2, 2, (-2000, 0))):
        lin = plantscale.modbus({"data_type": "int16", "scale": scale, "offset": 0}, d)
        if want is not None:
            assert (lin.mul, lin.shift) == want, (scale, d, lin)
        for x in range(-32768, 32768, 97):
            got = scaling.lin(x, lin.mul, lin.shift, lin.add)
            ideal = x * plantscale.exact(scale) * 10 ** (d + 1)
            assert abs(got - _round(ideal)) <= (0 if want and want[1] == 0 else 1)


def test_scalings_the_board_cannot_do_are_refused() -> None:
    with pytest.raises(plantscale.ScaleError, match="more than the board's scaling takes"):
        plantscale.modbus({"data_type": "uint16", "scale": 1000, "offset": 0}, 2)
    with pytest.raises(plantscale.ScaleError, match="same value"):
        plantscale.modbus({"data_type": "bool", "scale": 0.001, "offset": 0}, 0)
    with pytest.raises(plantscale.ScaleError, match="offset"):
        plantscale.modbus({"data_type": "uint16", "scale": 1, "offset": 1e8}, 1)


@pytest.mark.parametrize("chip", ["adc", "ads1115"])
@pytest.mark.parametrize("mode", ["4-20mA", "voltage"])
def test_analog_two_steps_match_the_ideal(chip: str, mode: str) -> None:
    rng = random.Random(chip + mode)
    for _ in range(150):
        d = rng.randrange(4)
        lo = float("%.4g" % rng.choice((0, -20, 0.5, rng.uniform(-500, 500))))
        hi = lo + float("%.4g" % rng.choice((10, 1, 250, -100, rng.uniform(0.01, 900))))
        src: dict = {"input": mode}
        if chip == "adc":
            src.update(adc=0, vref=rng.choice((3.3, 3.0, 2.5, 5.0)))
        else:
            src.update(i2c="i", chip="ads1115", gain=rng.choice(plantscale.ADS_GAINS))
        if mode == "4-20mA":
            src["shunt_ohm"] = rng.choice((150, 100, 250, 47.5))
        else:
            top = src["vref"] if chip == "adc" else src["gain"]
            src["volts"] = [round(rng.uniform(0, top / 3), 3), round(rng.uniform(top / 2, top), 3)]
        try:
            one, two = (plantscale.adc if chip == "adc" else plantscale.ads1115)(src, [lo, hi], d)
        except plantscale.ScaleError:
            continue
        assert one.add == 0 and abs(one.mul) < plantscale.MUL16
        fs = plantscale.exact(src["vref"] if chip == "adc" else src["gain"])
        full = plantscale.ADC_FULL if chip == "adc" else plantscale.ADS_FULL
        per = 10 ** 6 / plantscale.exact(src["shunt_ohm"]) if mode == "4-20mA" else Fraction(1000)
        k1 = fs * per / full  # uA (or mV) per count
        L, H = plantscale.exact(lo) * 10 ** (d + 1), plantscale.exact(hi) * 10 ** (d + 1)
        for _ in range(80):
            raw = rng.randint(0, 65535) if chip == "adc" else rng.randint(-32768, 32767)
            phys = scaling.lin(raw, one.mul, one.shift, 0)
            _check(phys, raw * k1, one, k1, Fraction(raw), Fraction(0))
            if mode == "4-20mA":
                if not 3600 <= phys <= 21000:
                    continue  # NAMUR NE 43: a BAD reading, never scaled
                x = phys - 4000
                k2 = (H - L) / 16000
                c2 = L
            else:
                v0, v1 = (plantscale.exact(v) * 1000 for v in src["volts"])
                x = phys
                k2 = (H - L) / (v1 - v0)
                c2 = L - v0 * k2
            assert abs(x * two.mul) < 2 ** 30
            got = scaling.lin(x, two.mul, two.shift, two.add)
            _check(got, x * k2 + c2, two, k2, Fraction(x), Fraction(0))
            # end to end: the first step's error of at most 1 uA (mV) plus its quantisation, through k2
            q1 = abs(raw) * abs(Fraction(one.mul, 2 ** one.shift) - k1)
            q2 = abs(x) * abs(Fraction(two.mul, 2 ** two.shift) - k2)
            ideal = (raw * k1 - (4000 if mode == "4-20mA" else 0)) * k2 + c2
            assert abs(got - ideal) <= 1 + q2 + abs(k2) * (1 + q1)


def test_mcp9600_counts_are_exact() -> None:
    for d in range(4):
        lin = plantscale.mcp9600(d)
        assert lin.mul * 16 == 10 ** (d + 1) * 2 ** lin.shift  # 0.0625 C is a dyadic step: no rounding of mul
        for raw in range(-32768, 32768, 37):
            got = scaling.lin(raw, lin.mul, lin.shift, lin.add)
            assert abs(got - _round(Fraction(raw, 16) * 10 ** (d + 1))) <= 1


def test_pulse_totals_and_rates() -> None:
    rng = random.Random(11)
    for _ in range(300):
        d = rng.randrange(4)
        src = {"per_pulse": float("%.3g" % rng.choice((0.01, 1, 10, 0.001, rng.uniform(0.0001, 50)))),
               "measure": rng.choice(("total", "rate")), "per": rng.choice(("s", "min", "h"))}
        period = rng.choice((100, 1000, 5000, 60000, 250))
        try:
            lin = plantscale.pulses(src, d, period)
        except plantscale.ScaleError:
            continue
        k = plantscale.exact(src["per_pulse"]) * 10 ** (d + 1)
        if src["measure"] == "rate":  # pulses in one period -> units per s, min or h
            k = k * 1000 * plantscale.PER[src["per"]] / period
        for _ in range(40):
            n = rng.choice((rng.randrange(0, 1000), rng.randrange(0, 2 ** 30)))
            got = scaling.lin32(n >> 16, n & 0xFFFF, 0, lin.mul, lin.shift, lin.add)
            ideal = n * k
            q = n * abs(Fraction(lin.mul, 2 ** lin.shift) - k)
            extra = 1 if lin.shift > 16 else 0
            if ideal + 2 + q >= 2 ** 29:
                continue
            _check(got, ideal, lin, k, Fraction(n), Fraction(extra))


def test_delays_become_reading_counts() -> None:
    text = json.loads(EXAMPLE.read_text())
    sig = text["machines"][0]["signals"][0]
    sig["period_ms"] = 300
    sig["alarms"][0].update(on_delay_s=5, off_delay_s=1)
    c = compiled(plantfile.loads(json.dumps(text), "x.json"))
    assert c["alarms"][0][4:6] == [17, 4]  # ceil(5000 / 300), ceil(1000 / 300)
    assert c["bad"][0][1:3] == [10, 200]  # ceil(3000 / 300); the default 60 s off-delay, 200 readings
    sig["period_ms"] = 100  # the default BAD off-delay (600 readings) is cut to the board's 255
    c = compiled(plantfile.loads(json.dumps(text), "x.json"))
    assert c["bad"][0][1:3] == [30, 255]
