"""The structural half of the plant checker: host/plant_schema.json applied with `jsonschema`, its errors
turned into our one-line problems, and the schema's defaults filled in.

    problems = plantschema.problems(doc)        # [] when the structure is right
    filled, defaulted = plantschema.fill(doc)   # a copy with every default; the paths that were filled

A Problem is a path into the description (keys and list indexes) and what is wrong there, in words a
user can act on ("must be a number, got "x""); host/plantfile.py adds the file and the machine and puts
them in document order. The schema is the one home of the description's shape and defaults: the
editor's help (VS Code reads `patternErrorMessage` and `errorMessage` too) and this checker say the same.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from host.errors import UserError

SCHEMA = Path(__file__).resolve().parent / "plant_schema.json"

Where = tuple  # keys (str) and list indexes (int) from the description's root


@dataclass(frozen=True)
class Problem:
    path: Where
    message: str


_TYPES = {"number": "a number", "integer": "a whole number", "string": "a string", "object": "an object",
          "array": "a list", "boolean": "true or false", "null": "null"}
# when one place breaks several rules, the one that says most: a wrong type before a wrong pattern ...
_RANK = {"type": 0, "const": 1, "enum": 1, "anyOf": 2, "oneOf": 2, "not": 2, "required": 3, "additionalProperties": 3,
         "propertyNames": 3, "pattern": 4}


def shown(v: Any) -> str:
    """A value as a message shows it: JSON, ASCII, one line, at most 40 characters."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "a list"
    s = json.dumps(v, ensure_ascii=True)
    return s if len(s) <= 40 else s[:37] + "..."


def _num(x: Any) -> str:
    return str(int(x)) if isinstance(x, (int, float)) and float(x).is_integer() and abs(x) < 1e15 else repr(x)


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern:
    # ECMA-262's `$` matches only at the end; Python's also before a final newline, which would let a
    # line break into an id or a key: compile a trailing `$` as `\Z`.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


@functools.lru_cache(maxsize=1)
def _validator():  # noqa: ANN202 (a jsonschema validator class made here)
    """The schema's validator, with ECMA-262's `$` (jsonschema is imported here: the CLI starts without it)."""
    from jsonschema import Draft202012Validator, ValidationError, validators

    def pattern(validator, patrn, instance, schema):  # noqa: ANN001 (jsonschema's keyword signature)
        if validator.is_type(instance, "string") and not _regex(patrn).search(instance):
            yield ValidationError("%r does not match %r" % (instance, patrn))

    try:
        schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    except OSError as e:  # installed with the package (package-data); gone only from a damaged install
        raise UserError("the plant schema %s cannot be read (%s): reinstall edgetwin"
                        % (SCHEMA, e.strerror or e)) from None
    cls = validators.extend(Draft202012Validator, {"pattern": pattern})
    return cls(_inline(schema, schema))


def _inline(node: Any, root: dict) -> Any:
    """The schema with each {"$ref": R, ...} written as {"allOf": [R's schema], ...}: the same rule in 2020-12
    (a reference applies beside its siblings, whose additionalProperties see only their own properties), but
    the validator no longer looks a reference up at every use. The schema refers only to its own $defs."""
    if isinstance(node, list):
        return [_inline(x, root) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _inline(v, root) for k, v in node.items() if k != "$ref"}
    if "$ref" in node:
        target: Any = root
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        out["allOf"] = [_inline(target, root)] + out.get("allOf", [])
    return out


def schema() -> dict:
    return _validator().schema


# ---- errors -> problems ----

def problems(doc: Any) -> list[Problem]:
    """Every structural problem of a parsed description, one per place (the most telling one there)."""
    best: dict[Where, tuple[int, str]] = {}
    for err in _validator().iter_errors(doc):
        for path, rank, msg in _explain(err):
            if path not in best or rank < best[path][0]:
                best[path] = (rank, msg)
    return [Problem(p, m) for p, (r, m) in best.items()]


def _explain(e) -> Iterator[tuple[Where, int, str]]:  # noqa: ANN001 (a jsonschema ValidationError)
    path = tuple(e.absolute_path)
    kw = e.validator
    sch = e.schema if isinstance(e.schema, dict) else {}
    rank = _RANK.get(kw, 5)
    inst = e.instance
    if "propertyNames" in e.absolute_schema_path:  # the error is about a key, not its value
        hint = sch.get("patternErrorMessage", "letters, digits, _ and -")
        yield path + (inst,), 3, "%s is not a valid name: %s" % (shown(inst), hint)
        return
    if kw == "type":
        want = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        yield path, rank, "must be %s, got %s" % (" or ".join(_TYPES.get(t, t) for t in want), shown(inst))
    elif kw == "enum":
        yield path, rank, "must be one of %s, got %s" % (", ".join(shown(x) for x in e.validator_value), shown(inst))
    elif kw == "const":
        yield path, rank, "must be %s, got %s" % (shown(e.validator_value), shown(inst))
    elif kw == "required":
        for k in e.validator_value:
            if isinstance(inst, dict) and k not in inst:
                yield path + (k,), rank, "missing (required)"
    elif kw == "additionalProperties":
        known = list(sch.get("properties", {}))
        for k in inst:
            if k not in known:
                yield path + (k,), rank, "unknown field; known here: %s" % ", ".join(known)
    elif kw in ("anyOf", "oneOf"):
        yield from _alternatives(e, path, sch)
    elif kw == "not":
        yield path, rank, sch.get("errorMessage", "is not allowed here")
    elif kw == "pattern":
        yield path, rank, "%s is not valid: %s" % (shown(inst), sch.get("patternErrorMessage", "must match "
                                                                                            + e.validator_value))
    elif kw in ("minLength", "maxLength"):
        yield path, rank, "must be %s characters, got %d" % (_bounds(sch, "minLength", "maxLength"), len(inst))
    elif kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        yield path, rank, "must be %s, got %s" % (_number_bounds(sch), shown(inst))
    elif kw in ("minItems", "maxItems"):
        b = _bounds(sch, "minItems", "maxItems")
        yield path, rank, "must have %s item%s, got %d" % (b, "" if b.endswith(" 1") else "s", len(inst))
    elif kw == "minProperties":
        yield path, rank, "must have at least %d entries" % e.validator_value
    elif kw == "uniqueItems":
        yield path, rank, "holds the same item twice"
    elif kw is None:  # a `false` schema
        yield path, rank, "is not allowed here"
    else:
        yield path, rank, " ".join(e.message.split())[:200]


def _alternatives(e, path: Where, sch: dict) -> Iterator[tuple[Where, int, str]]:  # noqa: ANN001
    """anyOf/oneOf: when exactly one alternative has the value's shape, its own errors say most; else the
    schema's errorMessage names the forms."""
    branches: dict[int, list] = {}
    for c in e.context or ():
        branches.setdefault(c.relative_schema_path[0], []).append(c)
    fitting = [errs for errs in branches.values()
               if not any(tuple(c.absolute_path) == path and c.validator in ("type", "const", "enum", "required")
                          for c in errs)]
    if len(fitting) == 1:
        for c in fitting[0]:
            yield from _explain(c)
        return
    yield path, 2, sch.get("errorMessage", "does not fit any of the allowed forms, got %s" % shown(e.instance))


def _bounds(sch: dict, lo_key: str, hi_key: str) -> str:
    lo, hi = sch.get(lo_key), sch.get(hi_key)
    if lo is not None and lo == hi:
        return "%d" % lo
    if lo is not None and hi is not None:
        return "%d..%d" % (lo, hi)
    return "at least %d" % lo if lo is not None else "at most %d" % hi


def _number_bounds(sch: dict) -> str:
    lo, hi = sch.get("minimum"), sch.get("maximum")
    xlo, xhi = sch.get("exclusiveMinimum"), sch.get("exclusiveMaximum")
    if lo is not None and hi is not None:
        return "%s..%s" % (_num(lo), _num(hi))
    parts = []
    if lo is not None:
        parts.append("at least %s" % _num(lo))
    if xlo is not None:
        parts.append("above %s" % _num(xlo))
    if hi is not None:
        parts.append("at most %s" % _num(hi))
    if xhi is not None:
        parts.append("below %s" % _num(xhi))
    return " and ".join(parts)


# ---- defaults ----

_NO = object()


def fill(doc: dict) -> tuple[dict, set]:
    """A copy of a structurally valid description with the schema's defaults filled in (conditional ones
    too: a coil's data_type is bool, a 32-bit value's byte_order ABCD), integral numbers where the schema
    wants integers as ints; and the set of paths that were filled."""
    out = copy.deepcopy(doc)
    filled: set = set()
    v = _validator()
    return _fill(v, v.schema, out, (), filled), filled


def _fill(v, sch: dict, inst: Any, path: Where, filled: set) -> Any:  # noqa: ANN001 (the validator)
    applied: list[dict] = []
    _apply(v, sch, inst, path, filled, applied)
    if isinstance(inst, dict):
        for k in list(inst):
            subs = [s["properties"][k] for s in applied if k in s.get("properties", {})]
            if not subs:
                subs = [s["additionalProperties"] for s in applied if isinstance(s.get("additionalProperties"), dict)]
            for sub in subs:
                inst[k] = _fill(v, sub, inst[k], path + (k,), filled)
    elif isinstance(inst, list):
        subs = [s["items"] for s in applied if isinstance(s.get("items"), dict)]
        for i in range(len(inst)):
            for sub in subs:
                inst[i] = _fill(v, sub, inst[i], path + (i,), filled)
    elif isinstance(inst, float) and inst.is_integer() and any(s.get("type") == "integer" for s in applied):
        return int(inst)
    return inst


def _apply(v, sch: Any, inst: Any, path: Where, filled: set, applied: list) -> None:  # noqa: ANN001
    """Fill the defaults of every subschema that applies to inst, in the schema's order (an if sees the
    defaults filled before it), and collect those subschemas."""
    if not isinstance(sch, dict):
        return
    applied.append(sch)
    if isinstance(inst, dict):
        for k, sub in sch.get("properties", {}).items():
            d = sub.get("default", _NO) if isinstance(sub, dict) else _NO
            if k not in inst and d is not _NO:
                inst[k] = copy.deepcopy(d)
                filled.add(path + (k,))
    if "$ref" in sch:
        _apply(v, _resolve(v, sch["$ref"]), inst, path, filled, applied)
    for sub in sch.get("allOf", ()):
        _apply(v, sub, inst, path, filled, applied)
    if "if" in sch:
        branch = sch.get("then") if _holds(v, sch["if"], inst) else sch.get("else")
        _apply(v, branch, inst, path, filled, applied)
    for key in ("anyOf", "oneOf"):
        for sub in sch.get(key, ()):
            if _holds(v, sub, inst):
                _apply(v, sub, inst, path, filled, applied)
                break


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _holds(v, sch: dict, inst: Any) -> bool:  # noqa: ANN001
    """Whether inst is valid under sch. The conditions the schema branches on (keys present, a key's value
    one of some constants) are judged here, quickly; anything else by jsonschema."""
    if not set(sch) <= {"required", "properties", "const"}:
        return _sub(v, sch).is_valid(inst)
    if "const" in sch and not _same(inst, sch["const"]):
        return False
    if not isinstance(inst, dict):
        return "const" in sch or _sub(v, sch).is_valid(inst)
    if any(k not in inst for k in sch.get("required", ())):
        return False
    for k, sub in sch.get("properties", {}).items():
        if k not in inst:
            continue
        if not set(sub) <= {"const", "enum"}:
            return _sub(v, sch).is_valid(inst)
        if "const" in sub and not _same(inst[k], sub["const"]):
            return False
        if "enum" in sub and not any(_same(inst[k], x) for x in sub["enum"]):
            return False
    return True


_SUBS: dict[int, Any] = {}


def _sub(v, sch: Any):  # noqa: ANN001, ANN202 (jsonschema validators)
    """A validator for one subschema of the plant schema (made once: the schema lives as long as the process)."""
    got = _SUBS.get(id(sch))
    if got is None:
        got = _SUBS[id(sch)] = v.evolve(schema=sch)
    return got


def _resolve(v, ref: str) -> dict:  # noqa: ANN001
    # the schema's references are all local: "#/$defs/NAME"
    node: Any = v.schema
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


def valid_id(mid: str) -> bool:
    """Whether a machine id is a proper one (the schema's rule), so messages can name the machine by it."""
    v = _validator()
    return _sub(v, v.schema["$defs"]["machine"]["properties"]["id"]).is_valid(mid)
