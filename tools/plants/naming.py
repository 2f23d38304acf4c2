"""Naming schemes: what a generated plant calls its machines (id, words, aliases) and signals (key, tag).

    isa     ISA-5.1 tags: machines P-301, K-302 (or P-3A, P-3B), signals PT311 / pt311
    site    what a site says: Boiler-2, AHU-3 ("Boiler 2", "cooling tower two"), signals Pd / discharge_press
    plain   plain ids: m1, line3_fan; signals pd / discharge_press
    area    area-coded: A3-PMP01, signals by input channel AI01 / ai01_discharge_press
    legacy  an old PLC's: PUMP1, KILN2, signals by register R40001 / dp1

Every scheme gives each machine words an operator would use ("boiler feed pump", "conveyor two") and aliases;
split.py says which schemes training may see. Ids and keys fit docs/PLANT.md's patterns (the checker holds them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tools.plants.catalogue import Kind, Signal

SCHEMES = ("isa", "site", "plain", "area", "legacy")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen")


@dataclass(frozen=True)
class Names:
    id: str
    words: tuple[str, ...]
    aliases: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]  # (key, tag) per signal, in the kind's order


@dataclass(frozen=True)
class Style:
    """A plant's choices inside its scheme, drawn once per plant."""

    scheme: str
    area: int  # 1..9: the plant area / line number
    variant: int  # 0 or 1: the scheme's second spelling (P-3A instead of P-301, line3_fan instead of m1)


def style(scheme: str, rng: random.Random) -> Style:
    if scheme not in SCHEMES:
        raise ValueError("naming scheme must be one of %s, got %r" % (", ".join(SCHEMES), scheme))
    return Style(scheme, rng.randint(1, 9), rng.randint(0, 1))


def short(kind: Kind) -> str:
    """One lower-case word for the kind: pump, fan, exchanger, ahu."""
    single = [w for w in kind.words if " " not in w]
    return (min(single, key=len) if single else kind.isa).lower()


def abbrev(kind: Kind) -> str:
    """Three letters: PMP, CMP, KLN, TWR."""
    w = short(kind).upper()
    cons = w[0] + "".join(c for c in w[1:] if c not in "AEIOU")
    return (cons + w[1:])[:3]


def names(kind: Kind, n: int, index: int, st: Style, rng: random.Random) -> Names:
    """Machine n (1..) of its kind, index (0..) in the plant, named by the plant's style."""
    service = rng.choice(kind.services)
    sh = short(kind)
    num = NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)
    said = ("%s %s" % (service, sh), kind.words[0])
    sigs = kind.signals
    if st.scheme == "isa":
        mid = "%s-%d%s" % (kind.isa, st.area, "ABCDEFGHJK"[n - 1]) if st.variant else "%s-%d%02d" % (
            kind.isa, st.area, n)
        loop = "%d%d" % (st.area, n % 10)
        keys = tuple(("%s%s%d" % (s.isa, loop, j + 1), ("%s%s%d" % (s.isa, loop, j + 1)).lower())
                     for j, s in enumerate(sigs))
        return Names(mid, said + ("%s %s" % (sh, mid.split("-", 1)[1]),), (mid.replace("-", ""),), keys)
    if st.scheme == "site":
        mid = "%s-%d" % (kind.site if kind.site.isupper() else kind.site.title().replace(" ", ""), n)
        spoken = "%s %s" % (kind.site if kind.site.isupper() else kind.site.lower(), num)
        return Names(mid, said + ("%s %d" % (kind.site, n), spoken),
                     ("%s No. %d" % (kind.site, n), "#%d %s" % (n, sh)), tuple((s.key, s.tag) for s in sigs))
    if st.scheme == "plain":
        mid = "line%d_%s%s" % (st.area, sh, n if n > 1 else "") if st.variant else "m%d" % (index + 1)
        if len(mid) > 16:
            mid = "%s%d" % (sh, n)
        return Names(mid, said + ("line %d %s" % (st.area, sh), "%s %s" % (sh, num)), (mid.replace("_", " "),),
                     tuple((s.key.lower(), s.tag) for s in sigs))
    if st.scheme == "area":
        mid = "A%d-%s%02d" % (st.area, abbrev(kind), n)
        keys = tuple(("AI%02d" % (j + 1), "ai%02d_%s" % (j + 1, s.tag)) for j, s in enumerate(sigs))
        return Names(mid, said + ("area %d %s" % (st.area, sh), "%s %s" % (sh, num)), ("%s%02d" % (abbrev(kind), n),),
                     keys)
    # legacy
    mid = "%s%d" % (sh.upper(), n)
    keys = tuple(("R%d" % (40001 + 2 * j), "%s%d" % (_initials(s), j + 1)) for j, s in enumerate(sigs))
    return Names(mid, said + ("%s number %d" % (sh, n), "no. %d %s" % (n, sh)), ("%s %s" % (sh, num),), keys)


def _initials(s: Signal) -> str:
    return "".join(p[0] for p in s.tag.split("_") if p)
