"""Which machine kinds and naming schemes are held out: the one place that says so.

A held-out kind or scheme is never in a "seen" plant: no training run, no checkpoint choice may read one.
"Unseen" plants are made of held-out kinds only, named by held-out schemes only, so a benchmark on them
judges a model on machines, names and signals it never met. Unit systems are not held out: both splits
draw metric and US plants.
"""

from __future__ import annotations

from tools.plants import catalogue, naming

HELD_OUT_KINDS = ("cooling tower", "rotary kiln", "control valve", "batch mixer")
HELD_OUT_SCHEMES = ("area", "legacy")

TRAIN_KINDS = tuple(k.name for k in catalogue.KINDS if k.name not in HELD_OUT_KINDS)
TRAIN_SCHEMES = tuple(s for s in naming.SCHEMES if s not in HELD_OUT_SCHEMES)
SPLITS = ("seen", "unseen")


def kinds(split: str) -> tuple[str, ...]:
    return {"seen": TRAIN_KINDS, "unseen": HELD_OUT_KINDS}[_known(split)]


def schemes(split: str) -> tuple[str, ...]:
    return {"seen": TRAIN_SCHEMES, "unseen": HELD_OUT_SCHEMES}[_known(split)]


def _known(split: str) -> str:
    if split not in SPLITS:
        raise ValueError("split must be seen or unseen, got %r" % (split,))
    return split


if not set(HELD_OUT_KINDS) < set(catalogue.BY_NAME) or not set(HELD_OUT_SCHEMES) < set(naming.SCHEMES):
    raise ImportError("split.py holds out a kind or scheme the catalogue or naming does not have, or all of them")
