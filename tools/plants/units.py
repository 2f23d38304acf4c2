"""Metric and US units for each quantity a generated signal measures, and the conversions from metric.

The catalogue (catalogue.py) writes every value in the metric unit; a plant in US units shows the same
quantity in the US unit (`convert`), its hysteresis and noise in it too (`scale`: a difference, no offset).
A quantity may have two spellings per system (`C` and `degC`): a plant picks one of each, by its seed.
"""

from __future__ import annotations

from dataclasses import dataclass

SYSTEMS = ("metric", "us")


@dataclass(frozen=True)
class Quantity:
    name: str
    metric: tuple[str, ...]  # spellings of the metric unit (the catalogue's unit)
    us: tuple[str, ...]  # spellings of the US unit
    factor: float = 1.0  # us = metric * factor + offset
    offset: float = 0.0
    decimals: tuple[int, int] = (1, 1)  # (metric, us) digits after the point in lines


QUANTITIES = {q.name: q for q in (
    Quantity("temperature", ("C", "degC"), ("F", "degF"), 1.8, 32.0, (1, 1)),
    Quantity("pressure", ("bar",), ("psi", "psig"), 14.5038, 0.0, (2, 1)),
    Quantity("dp", ("kPa",), ("inH2O",), 4.01865, 0.0, (1, 1)),
    Quantity("low_dp", ("Pa",), ("inWC",), 0.00401865, 0.0, (0, 2)),  # a filter's dP, a furnace's draft
    Quantity("flow", ("m3/h",), ("gpm",), 4.40287, 0.0, (1, 0)),
    Quantity("airflow", ("m3/h",), ("cfm",), 0.588578, 0.0, (0, 0)),
    Quantity("steam", ("t/h",), ("klb/h",), 2.20462, 0.0, (2, 2)),
    Quantity("vibration", ("mm/s",), ("in/s",), 0.0393701, 0.0, (1, 3)),
    Quantity("current", ("A",), ("A",), 1.0, 0.0, (1, 1)),
    Quantity("speed", ("rpm",), ("rpm",), 1.0, 0.0, (0, 0)),
    Quantity("belt_speed", ("m/s",), ("fpm", "ft/min"), 196.85, 0.0, (2, 0)),
    Quantity("level", ("m",), ("ft",), 3.28084, 0.0, (2, 2)),
    Quantity("percent", ("%", "pct"), ("%", "pct"), 1.0, 0.0, (1, 1)),
    Quantity("conductivity", ("uS/cm",), ("uS/cm",), 1.0, 0.0, (0, 0)),
)}


def unit(quantity: str, system: str, variant: int = 0) -> str:
    """The unit a plant in `system` shows a quantity in (variant picks a spelling, wrapping around)."""
    q = QUANTITIES[quantity]
    names = q.metric if system == "metric" else q.us
    return names[variant % len(names)]


def decimals(quantity: str, system: str) -> int:
    return QUANTITIES[quantity].decimals[0 if system == "metric" else 1]


def convert(quantity: str, system: str, value: float) -> float:
    """A metric value in the system's unit."""
    if system == "metric":
        return value
    q = QUANTITIES[quantity]
    return value * q.factor + q.offset


def scale(quantity: str, system: str, delta: float) -> float:
    """A metric difference (a hysteresis, a noise) in the system's unit."""
    return delta if system == "metric" else delta * QUANTITIES[quantity].factor


def system_of(quantity: str, unit_name: str) -> str:
    """Which system a unit spelling belongs to (metric when both share it: amps, rpm, %)."""
    q = QUANTITIES[quantity]
    if unit_name in q.metric:
        return "metric"
    if unit_name in q.us:
        return "us"
    raise ValueError("%s is no unit of %s (metric %s, US %s)" % (unit_name, quantity, q.metric, q.us))
