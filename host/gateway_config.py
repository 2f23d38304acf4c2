"""gateway_config.py: `edgetwin gateway --config FILE`, a TOML file whose keys are the gateway's long options.

    port = ["/dev/serial/by-id/usb-Raspberry_Pi_Pico_E66038B713579A2C-if00"]
    db = "/var/lib/edgetwin/edgetwin.db"
    peer-timeout = 5.0          # or peer_timeout
    quiet = true                # a flag: true gives it, false leaves it out

The keys are derived from the parser itself (`options`), so an option added to the command later is a key
at once, with no code here. Values are typed as the option is: a TOML integer for an int option, a number
for a float one, a string otherwise, true/false for a flag, a list (or one value) for a repeatable option.
The file's settings become the arguments they stand for and are parsed together with the command line,
which wins: an option given there replaces the file's setting (a repeatable option's whole list). Relative
paths are relative to the working directory, as on the command line. An unknown key, a value of the wrong
type, a missing, unreadable or malformed file: one line naming the file and the key, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import sys
import tomllib

_SKIP = (argparse._HelpAction, argparse._VersionAction)  # they act when met: nothing a file could set
MAX_BYTES = 1 << 20  # a config file is a few hundred bytes; this bounds what a wrong path makes us read
MAX_VALUES = 1024  # values of one key (a gateway serves dozens of ports): argparse slows down past thousands


def attach(p: argparse.ArgumentParser) -> None:
    """Give `p` a --config FILE option whose keys are p's other long options (read when p parses)."""
    p.add_argument("--config", metavar="FILE",
                   help="read options from this TOML file: each key a long option of this command without its "
                        "dashes (peer-timeout = 5.0, port = [\"/dev/serial/by-id/...\"], quiet = true); options on "
                        "the command line replace the file's (docs/GATEWAY.md, examples/gateway.toml)")
    parse = p.parse_known_args  # the parser's own, bound: what the wrapper calls with the file's arguments added

    def parse_known_args(args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        given = _given(p, args)
        if given is not None and given.get("config") is not None:
            args = file_arguments(p, given["config"], set(given)) + args
        return parse(args, namespace)

    # argparse calls a subcommand's parser through this method (argparse._SubParsersAction): the instance's
    # attribute is the one hook it offers without subclassing the parser host/cli.py makes
    p.parse_known_args = parse_known_args  # type: ignore[method-assign]


def options(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every key a config file may hold (a long option without its leading dashes) -> its action."""
    out = {}
    for a in p._actions:
        if isinstance(a, _SKIP) or a.dest in ("config", argparse.SUPPRESS):
            continue
        for o in a.option_strings:
            if o.startswith("--") and not (isinstance(a, argparse.BooleanOptionalAction) and o.startswith("--no-")):
                out[o[2:]] = a
    return out


def file_arguments(p: argparse.ArgumentParser, path: str, skip: set[str] = frozenset()) -> list[str]:
    """The arguments the file at `path` stands for, without those of the dests in `skip` (given on the command
    line); p.error (one line, exit 2) for a file that cannot be read or a key that is not right."""
    where = "--config %s" % path
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)  # not all of /dev/zero
    except OSError as e:
        p.error("%s: cannot read it: %s" % (where, e.strerror or e))
    if len(raw) > MAX_BYTES:
        p.error("%s: larger than %d KiB: not a config file" % (where, MAX_BYTES // 1024))
    try:
        table = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        p.error("%s: not a TOML file: %s" % (where, e))
    except RecursionError:  # tomllib recurses into nested arrays and tables
        p.error("%s: not a TOML file: nested too deeply" % where)
    known = options(p)
    seen: dict[str, str] = {}
    out: list[str] = []
    for key, value in table.items():
        name = key.replace("_", "-")
        a = known.get(name)
        if a is None:
            near = difflib.get_close_matches(name, known, n=1)
            p.error("%s: %s: not an option of this command%s" % (
                where, key, " (did you mean %s?)" % near[0] if near else ""))
        if a.dest in seen:
            p.error("%s: %s: set twice (also as %s)" % (where, key, seen[a.dest]))
        seen[a.dest] = key
        if a.dest in skip:
            continue
        try:
            out += _arguments("--" + name, a, value)
        except ValueError as e:
            p.error("%s: %s: %s" % (where, key, e))
    return out


def _arguments(opt: str, a: argparse.Action, value) -> list[str]:
    """The command-line arguments that give option `opt` (action `a`) this TOML value; ValueError if it cannot."""
    if isinstance(a, argparse.BooleanOptionalAction):
        return [opt if _flag(value) else "--no-" + opt[2:]]
    if isinstance(a, argparse._CountAction):
        if type(value) is not int or value < 0:
            raise ValueError("expected a count (an integer >= 0), got %s" % _shown(value))
        return [opt] * value
    if a.nargs == 0:  # store_true, store_false, store_const: true gives the flag
        return [opt] if _flag(value) else []
    repeat = isinstance(a, argparse._AppendAction)
    many = a.nargs not in (None, argparse.OPTIONAL)
    if repeat and many:
        raise ValueError("this option takes several values each time: give it on the command line")
    if isinstance(value, list) and not (repeat or many):
        raise ValueError("expected one value, got a list")
    if isinstance(value, list) and len(value) > MAX_VALUES:
        raise ValueError("%d values: at most %d" % (len(value), MAX_VALUES))
    items = [_scalar(a, v) for v in (value if isinstance(value, list) else [value])]
    if repeat:
        return ["%s=%s" % (opt, v) for v in items]  # "=": a value starting with "-" is not taken for an option
    if many:
        return [opt] + items
    return ["%s=%s" % (opt, items[0])]


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false, got %s" % _shown(value))
    return value


def _scalar(a: argparse.Action, v) -> str:
    """One value as the argument string argparse converts (with the option's type) and checks (choices)."""
    if a.type is int:
        if type(v) is not int:
            raise ValueError("expected an integer, got %s" % _shown(v))
    elif a.type is float:
        if type(v) not in (int, float):
            raise ValueError("expected a number, got %s" % _shown(v))
    elif a.type in (None, str):
        if not isinstance(v, str):
            raise ValueError("expected a string, got %s" % _shown(v))
    elif type(v) not in (str, int, float):  # the option's own converter takes it from its text
        raise ValueError("expected a string or a number, got %s" % _shown(v))
    s = str(v)
    if a.choices is not None:
        try:
            ok = (a.type(s) if callable(a.type) else s) in a.choices
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError("%s is not one of %s" % (_shown(v), ", ".join(str(c) for c in a.choices)))
    return s


def _shown(v) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(v), "a " + type(v).__name__)
    text = repr(v) if not isinstance(v, (dict, list)) else ("[...]" if isinstance(v, list) else "{...}")
    return "%s (%s)" % (text, kind)


def _given(p: argparse.ArgumentParser, args: list[str]) -> dict | None:
    """{dest: value} of the options the command line gives (no defaults); None if it does not parse (the real
    parse then says why, in its own words)."""
    probe = _Probe(prog=p.prog, add_help=False, allow_abbrev=p.allow_abbrev)
    for a in p._actions:
        if isinstance(a, _SKIP):
            continue
        c = copy.copy(a)
        c.default = argparse.SUPPRESS  # a dest the command line does not give stays absent
        c.required = False  # the file may give it
        probe._add_action(c)
    try:
        ns, _ = probe.parse_known_args(args)
    except _ProbeError:
        return None
    return vars(ns)


class _ProbeError(Exception):
    pass


class _Probe(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _ProbeError(message)
