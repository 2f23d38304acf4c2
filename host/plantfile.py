"""Read and check a plant description (docs/PLANT.md): the one line a user sees for each thing that is wrong.

    desc = plantfile.load("examples/pump_skid.json")              # checked, defaults filled in
    desc = plantfile.load(path, board_profile.resolve("rp2040_pico"))  # and checked against that board
    lines = plantfile.errors(path)                                # every problem, one line each ([] if none)
    desc, lines = plantfile.check(path)                           # both in one pass (desc None if lines)
    desc = plantfile.loads(text_or_bytes, name="<upload>")        # the same for a description in memory

A problem is one line: `FILE: machine P-1: signals[2].alarms[0].limit: must be a number, got "x"`, or
`FILE: buses.rs485.baud: ...` outside the machines, in the order the description's text has them.
`load` raises PlantFileError (a ValueError whose str is the first line; .lines has them all). Any input
gives lines, never a traceback: a file over 1 MiB, not UTF-8, not JSON, truncated, nested too deep or
not an object is one line; then the schema (host/plantschema.py), then, on a description whose shape is
right, the rules beyond it (host/plantrules.py) and the board's (host/plantboard.py).

The board is a validated profile (host/board_profile.resolve); without one, the file's "board" names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from host import plantboard, plantrules, plantschema
from host.plantschema import Problem

MAX_BYTES = 1 << 20
MAX_DEPTH = 32  # a description nests 8 levels; anything deeper is not one
MAX_DIGITS = 40  # an integer literal longer than this is no value a description holds


class PlantFileError(ValueError):
    """The description does not check: str(e) is the first problem's line, e.lines every line."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0])
        self.lines = lines


class _Refused(Exception):
    """The input is not a description at all (unreadable, not JSON...): one line, no path."""


def load(path: str | Path, board: dict | None = None) -> dict:
    return _result(str(path), _check_source(lambda: _read(path), board))


def errors(path: str | Path, board: dict | None = None) -> list[str]:
    return _lines(str(path), _check_source(lambda: _read(path), board))


def check(path: str | Path, board: dict | None = None) -> tuple[dict | None, list[str]]:
    """(the checked description, []) or (None, every problem's line): load and errors in one pass."""
    checked = _check_source(lambda: _read(path), board)
    lines = _lines(str(path), checked)
    return (None if lines else checked[0]), lines


def loads(data: str | bytes, name: str = "<plant>", board: dict | None = None) -> dict:
    return _result(name, _check_source(lambda: data, board))


def errors_in(data: str | bytes, name: str = "<plant>", board: dict | None = None) -> list[str]:
    return _lines(name, _check_source(lambda: data, board))


# ---- the steps ----

def _result(name: str, checked: tuple) -> dict:
    lines = _lines(name, checked)
    if lines:
        raise PlantFileError(lines)
    return checked[0]


def _lines(name: str, checked: tuple) -> list[str]:
    doc, problems, refused = checked
    if refused is not None:
        return ["%s: %s" % (name, refused)]
    return [_line(name, doc, p) for p in sorted(problems, key=lambda p: _position(doc, p.path))]


def _check_source(get: Any, board: dict | None) -> tuple[Any, list[Problem], str | None]:
    """(the description, its problems, None) or (None, [], why it is not a description)."""
    try:
        doc = _parse(get())
    except _Refused as e:
        return None, [], str(e)
    problems = plantschema.problems(doc)
    if problems:
        return doc, problems, None
    filled, defaulted = plantschema.fill(doc)
    plantrules.settle(filled, defaulted)
    profile, problems = plantboard.resolve(filled, board)
    problems += plantrules.check(filled, defaulted, profile)
    problems += plantboard.check(filled, profile)
    return filled, problems, None


def _read(path: str | Path) -> bytes:
    p = Path(path)
    try:
        if p.is_dir():
            raise _Refused("is a directory, not a plant description")
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise _Refused("no such file") from None
    except PermissionError:
        raise _Refused("cannot read it (permission denied)") from None
    except OSError as e:
        raise _Refused("cannot read it (%s)" % (e.strerror or type(e).__name__)) from None
    return data


class _Bad(ValueError):
    pass


def _no_dupes(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Bad("the key %s appears twice in one object" % plantschema.shown(k))
        out[k] = v
    return out


def _float(s: str) -> float:
    x = float(s)
    if x in (float("inf"), float("-inf")):
        raise _Bad("the number %s is too large" % s[:40])
    return x


def _int(s: str) -> int:
    if len(s) > MAX_DIGITS:
        raise _Bad("a number with %d digits" % len(s))
    return int(s)


def _constant(s: str) -> Any:
    raise _Bad("%s is not a JSON number" % s)


def _parse(data: str | bytes) -> dict:
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise _Refused("over 1 MiB: not a plant description")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Refused("not UTF-8 text (byte %d)" % e.start) from None
    elif isinstance(data, str):
        text = data
        if len(text) > MAX_BYTES:
            raise _Refused("over 1 MiB: not a plant description")
    else:
        raise _Refused("not text: a %s" % type(data).__name__)
    text = text.lstrip("\ufeff")  # a byte-order mark some editors write
    if not text.strip():
        raise _Refused("empty: a plant description is a JSON object")
    try:
        doc = json.loads(text, object_pairs_hook=_no_dupes, parse_float=_float, parse_int=_int,
                         parse_constant=_constant)
    except RecursionError:
        raise _Refused("not valid JSON: nested too deep") from None
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            raise _Refused("not valid JSON: it ends early (truncated?) at line %d" % e.lineno) from None
        raise _Refused("not valid JSON: %s at line %d column %d" % (e.msg, e.lineno, e.colno)) from None
    except _Bad as e:
        raise _Refused("not valid JSON: %s" % e) from None
    except ValueError as e:  # a number Python's JSON cannot take
        raise _Refused("not valid JSON: %s" % " ".join(str(e).split())[:80]) from None
    if not isinstance(doc, dict):
        raise _Refused("a plant description is a JSON object ({...}), got %s" % _kind(doc))
    if _depth(doc) > MAX_DEPTH:
        raise _Refused("nested deeper than %d levels: not a plant description" % MAX_DEPTH)
    return doc


def _kind(v: Any) -> str:
    return "a list" if isinstance(v, list) else plantschema.shown(v)


def _depth(doc: Any) -> int:
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(node, dict):
            todo += [(v, d + 1) for v in node.values()]
        elif isinstance(node, list):
            todo += [(v, d + 1) for v in node]
    return deepest


# ---- one line per problem ----

def _line(name: str, doc: Any, p: Problem) -> str:
    path = p.path
    parts = [name]
    machine = _machine_id(doc, path)
    if machine is not None:
        parts.append("machine " + machine)
        path = path[2:]
    if path:
        parts.append(plantrules.fmt_path(path))
    parts.append(p.message)
    return " ".join(": ".join(parts).split())  # one line, whatever a value held


def _machine_id(doc: Any, path: tuple) -> str | None:
    """The id the problem's machine goes by, when its path is in one and the id is a proper one."""
    if len(path) < 2 or path[0] != "machines" or not isinstance(path[1], int):
        return None
    ms = doc.get("machines") if isinstance(doc, dict) else None
    if not isinstance(ms, list) or path[1] >= len(ms) or not isinstance(ms[path[1]], dict):
        return None
    mid = ms[path[1]].get("id")
    if not isinstance(mid, str) or not plantschema.valid_id(mid):
        return None
    if sum(1 for m in ms if isinstance(m, dict) and m.get("id") == mid) > 1:
        return None  # two machines go by it: their index tells them apart
    return mid


def _position(doc: Any, path: tuple) -> tuple:
    """Where the path is in the text: a key's place in its object (a missing key after the others), an index."""
    out = []
    node = doc
    for p in path:
        if isinstance(node, dict):
            keys = list(node)
            out.append(keys.index(p) if p in node else len(keys))
            node = node.get(p)
        elif isinstance(node, list) and isinstance(p, int) and p < len(node):
            out.append(p)
            node = node[p]
        else:
            out.append(0)
            node = None
    return tuple(out)
