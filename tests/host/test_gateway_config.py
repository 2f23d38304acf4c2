"""`edgetwin gateway --config FILE` (host/gateway_config.py): every option of the gateway's parser can be set
from the TOML file, the command line wins, and a file that is not right is one line naming it and the key,
exit status 2."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from host import cmd_gateway, gateway_config
from host.cli import main, parser
from host.usage import Parser

ROOT = Path(__file__).resolve().parents[2]


def gateway_parser() -> argparse.ArgumentParser:
    p = Parser(prog="edgetwin gateway")
    cmd_gateway.add_arguments(p)
    return p


def write(tmp_path: Path, settings: dict, name: str = "gw.toml") -> Path:
    path = tmp_path / name
    # TOML's basic strings, numbers, booleans and arrays are written as JSON writes them
    path.write_text("".join("%s = %s\n" % (k, json.dumps(v)) for k, v in settings.items()))
    return path


def sample(a: argparse.Action):
    """(a TOML value for this option, what argparse must make of it): never the option's default."""
    if isinstance(a, argparse.BooleanOptionalAction):
        return (not a.default,) * 2
    if a.nargs == 0:
        return True, a.const
    if a.type in (int, float):
        v = 7 if a.type is int else 2.5
        v = next((c for c in a.choices if c != a.default), v) if a.choices else v
        return ([v, v], [v, v]) if isinstance(a, argparse._AppendAction) else (v, v)
    if a.choices:
        v = next(c for c in a.choices if c != a.default)
        return v, v
    conv = a.type or str  # an option's own converter (a Path, a checker) makes its value from the text
    if isinstance(a, argparse._AppendAction):
        return ["first-value", "-second-value"], [conv("first-value"), conv("-second-value")]
    return "-a-value", conv("-a-value")  # a leading "-" must not be taken for an option


def check_every_option(p: argparse.ArgumentParser, tmp_path: Path) -> int:
    keys = gateway_config.options(p)
    for i, (key, a) in enumerate(sorted(keys.items())):
        value, want = sample(a)
        for spelling in {key, key.replace("-", "_")}:
            settings = {spelling: value} if key == "port" else {"port": ["/dev/ttyUSB0"], spelling: value}
            args = p.parse_args(["--config", str(write(tmp_path, settings, "o%d.toml" % i))])
            assert getattr(args, a.dest) == want, (spelling, value, getattr(args, a.dest))
    return len(keys)


def test_every_option_of_the_parser_can_be_set_from_the_file(tmp_path: Path) -> None:
    p = gateway_parser()
    every = {o[2:] for a in p._actions for o in a.option_strings if o.startswith("--")} - {"help", "config"}
    assert set(gateway_config.options(p)) == every  # none left out
    assert check_every_option(p, tmp_path) == len(every) >= 40
    # an option added to the command later is a key at once: nothing to add to host/gateway_config.py
    p.add_argument("--later-file", metavar="FILE")
    p.add_argument("--later-flag", action="store_true")
    p.add_argument("--later-count", type=int, default=3)
    p.add_argument("--later-choice", choices=("a", "b"), default="a")
    p.add_argument("--later-bool", action=argparse.BooleanOptionalAction, default=True)
    assert check_every_option(p, tmp_path) == len(every) + 5
    args = p.parse_args(["--config", str(write(tmp_path, {"port": "/dev/x", "later-bool": False}))])
    assert args.later_bool is False and args.port == ["/dev/x"]  # one value for a repeatable option: a list of one


def test_the_command_line_wins(tmp_path: Path) -> None:
    cfg = write(tmp_path, {"port": ["a=/dev/ttyUSB0", "b=/dev/ttyUSB1"], "baud": 9600, "peer_timeout": 30,
                           "quiet": True, "name": ["x"], "target": "stock"})
    args = parser().parse_args(["gateway", "--config", str(cfg), "--baud", "19200", "--port", "/dev/ttyACM0"])
    assert args.baud == 19200 and args.port == ["/dev/ttyACM0"]  # a repeatable option's whole list replaced
    assert args.peer_timeout == 30.0 and args.quiet is True and args.name == ["x"] and args.target == "stock"
    args = parser().parse_args(["gateway", "--config", str(cfg), "--peer-timeout", "4", "--name", "y"])
    assert args.port == ["a=/dev/ttyUSB0", "b=/dev/ttyUSB1"] and args.peer_timeout == 4.0 and args.name == ["y"]
    args = parser().parse_args(["gateway", "--port", "/dev/ttyACM0"])
    assert args.config is None and args.baud == 115200 and args.quiet is False  # no file: as before


def test_the_shipped_example_sets_what_it_says(tmp_path: Path) -> None:
    args = parser().parse_args(["gateway", "--config", str(ROOT / "examples" / "gateway.toml")])
    assert args.port[0].startswith("pump-hall=/dev/serial/by-id/usb-") and len(args.port) == 2
    assert args.db == "/var/lib/edgetwin/edgetwin.db" and args.baud == 115200 and args.status_every == 60.0
    assert args.model is None and args.quiet is False  # commented out: the defaults


@pytest.mark.parametrize("text, key, why", [
    ("port = \"/dev/x\"\nprot = 1\n", "prot", "not an option of this command (did you mean port?)"),
    ("port = \"/dev/x\"\nbaud = \"fast\"\n", "baud", "expected an integer, got 'fast' (a string)"),
    ("port = \"/dev/x\"\nbaud = 9600.0\n", "baud", "expected an integer, got 9600.0 (a number)"),
    ("port = \"/dev/x\"\nquiet = \"yes\"\n", "quiet", "expected true or false, got 'yes' (a string)"),
    ("port = [1]\n", "port", "expected a string, got 1 (an integer)"),
    ("port = \"/dev/x\"\ntemperature = \"hot\"\n", "temperature", "expected a number, got 'hot' (a string)"),
    ("port = \"/dev/x\"\ntarget = \"nope\"\n", "target", "'nope' (a string) is not one of domain, stock"),
    ("port = \"/dev/x\"\ndb = [\"a\", \"b\"]\n", "db", "expected one value, got a list"),
    ("port = \"/dev/x\"\n[mqtt]\nhost = \"b\"\n", "mqtt", "expected a string, got {...} (a table)"),
    ("port = \"/dev/x\"\ntop-k = 1\ntop_k = 2\n", "top_k", "set twice (also as top-k)"),
    ("port = \"/dev/x\"\nconfig = \"other.toml\"\n", "config", "not an option of this command"),
    ("port = \"/dev/x\"\nhelp = true\n", "help", "not an option of this command"),
    ("port = \n", "", "not a TOML file: Invalid value (at line 1, column 8)"),
    (b"port = \"/dev/\xff\"\n", "", "not a TOML file"),
    ("port = " + "[" * 5000 + "]" * 5000 + "\n", "", "not a TOML file: nested too deeply"),
    ("port = [%s]\n" % ", ".join(['"/dev/x"'] * 1025), "port", "1025 values: at most 1024"),
    (b"#" * (1 << 20) + b"\n", "", "larger than 1024 KiB: not a config file"),
])
def test_a_file_that_is_not_right_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, text, key: str,
                                              why: str) -> None:
    cfg = tmp_path / "gw.toml"
    if isinstance(text, bytes):
        cfg.write_bytes(text)
    else:
        cfg.write_text(text)
    assert main(["gateway", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("edgetwin gateway: error: --config %s: %s%s" % (cfg, key + ": " if key else "", why)), err


def test_a_missing_file_or_option_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def one_line(argv: list[str]) -> str:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    gone = tmp_path / "nope.toml"
    assert "--config %s: cannot read it: No such file or directory" % gone in one_line(["gateway", "--config", str(gone)])
    assert "--config %s: cannot read it: Is a directory" % tmp_path in one_line(["gateway", "--config", str(tmp_path)])
    # no port anywhere: argparse's own line
    cfg = write(tmp_path, {"baud": 9600})
    assert "the following arguments are required: --port" in one_line(["gateway", "--config", str(cfg)])
    # a mistake on the command line is still told as argparse tells it, file or not
    cfg = write(tmp_path, {"port": "/dev/x"})
    assert "argument --baud: invalid int value: 'x'" in one_line(["gateway", "--config", str(cfg), "--baud", "x"])
