"""Nothing downstream of the node knows the simulator: its machine ids, tags, fault and interlock names live only in
the simulator and its description (docs/PLANT.md). Every other file of host/, firmware/ and shared/ learns a plant
from the description of the lines it reads, so none of them may write one of those names.

Scanned: every text file of the three folders but the simulator's own. Machine ids (P-101, CV-402: the simulator's
id syntax) anywhere, comments and docstrings too (examples use neutral ids such as P-1 or AHU-1); the tags that hold
an underscore, the fault names and the interlock names as exact string literals or identifiers; the one-word tags
("vibration", "flow", "speed") as exact string literals only, since they are plain English in prose. The forbidden
names are read from the simulator's catalogue, so the test follows the simulator when it changes.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from shared import plant_catalogue, plant_faults

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("host", "firmware", "shared")
# the simulator, its catalogue and fault model, its description, and the node's simulator source
SIMULATOR = {"shared/plant.py", "shared/plant_catalogue.py", "shared/plant_faults.py", "shared/plant_sim.json",
             "firmware/sampler.py"}
SIM_ID = re.compile(r"\b(?:P|M|C|CV)-\d{3}\b")

_TAGS = {t.decode() for t in plant_catalogue.TAG if t}
NAMES = ({t for t in _TAGS if "_" in t} | {f for f in plant_faults.NAMES if f != "none"}
         | {t.decode() for t in plant_catalogue.TRIPS if t})  # as literals and identifiers
WORDS = {t for t in _TAGS if "_" not in t}  # as literals only
_JS_STRING = re.compile(r"""(["'`])([A-Za-z_]+)\1""")


def _files() -> list[Path]:
    out = []
    for folder in FOLDERS:
        for p in sorted((ROOT / folder).rglob("*")):
            rel = p.relative_to(ROOT).as_posix()
            if p.is_file() and rel not in SIMULATOR and "__pycache__" not in p.parts and p.suffix != ".pyc":
                out.append(p)
    return out


def _py_hits(text: str) -> list[tuple[int, str]]:
    """(line, name) of the forbidden literals and identifiers of one Python file."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME and tok.string in NAMES:
            out.append((tok.start[0], tok.string))
        elif tok.type == tokenize.STRING:
            m = re.fullmatch(r"(?i)[rbu]*(['\"]{1,3})(.*)\1", tok.string, re.S)
            if m and (m.group(2) in NAMES or m.group(2) in WORDS):
                out.append((tok.start[0], m.group(2)))
    return out


def _other_hits(text: str) -> list[tuple[int, str]]:
    """(line, name) of the forbidden names quoted in a non-Python text file (the dashboard's scripts)."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in _JS_STRING.finditer(text)
            if m.group(2) in NAMES or m.group(2) in WORDS]


def simulator_words() -> dict[str, list[str]]:
    """file -> "line: what" for every simulator name found outside the simulator."""
    found: dict[str, list[str]] = {}
    for p in _files():
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not a text file
        rel = p.relative_to(ROOT).as_posix()
        hits = [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in SIM_ID.finditer(text)]
        hits += _py_hits(text) if p.suffix == ".py" else _other_hits(text)
        if hits:
            found[rel] = ["%d: %s" % h for h in sorted(set(hits))]
    return found


def test_the_catalogue_gives_the_names_to_look_for() -> None:
    assert {"bearing_temp", "strainer_dp", "bearing_wear", "drift", "HIHI_TEMP"} <= NAMES
    assert {"vibration", "flow", "speed"} == WORDS
    hits = _py_hits('x = "bearing_temp"\nbearing_wear = 1\ny = b"HIHI_VIB"\n"""vibration of the flow"""\nz = "flow"\n')
    assert hits == [(1, "bearing_temp"), (2, "bearing_wear"), (3, "HIHI_VIB"), (5, "flow")]


def test_no_simulator_words_outside_the_simulator() -> None:
    found = simulator_words()
    assert not found, "simulator names outside the simulator (use the plant's description):\n" + "\n".join(
        "%s: %s" % (f, ", ".join(h)) for f, h in sorted(found.items()))
