"""The plant checker (host/plantfile.py and its rules) and `edgetwin plant check|compile`: the example passes,
each rule refuses with its exact one-line message (file, machine, field), --all lists every problem, the
board's pins, UARTs, I2C controllers, ADC channels and heap are checked, hostile files are one line and
exit 2, and a fuzz of mutated descriptions either loads (and then compiles) or gives one line."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from host import board_profile, cli, plantboard, plantcompile, plantfile

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pump_skid.json"
BASE = json.loads(EXAMPLE.read_text())


def lines_for(change: Callable[[dict], Any], board: str | None = None, name: str = "ex.json") -> list[str]:
    doc = copy.deepcopy(BASE)
    change(doc)
    return plantfile.errors_in(json.dumps(doc), name, board_profile.resolve(board) if board else None)


def m0(d: dict) -> dict:
    return d["machines"][0]


def sig(d: dict, i: int) -> dict:
    return d["machines"][0]["signals"][i]


def test_the_example_checks() -> None:
    desc = plantfile.load(EXAMPLE)
    assert desc["name"] == "pump-skid-1" and len(desc["machines"][0]["signals"]) == 3
    assert plantfile.errors(EXAMPLE) == []
    assert plantfile.load(EXAMPLE, board_profile.resolve("rp2040_pico")) == desc
    # defaults are filled in, and a filled description checks again unchanged
    assert sig(desc, 1)["decimals"] == 1 and sig(desc, 1)["bad"] == {"on_delay_s": 3, "off_delay_s": 60,
                                                                      "priority": "low"}
    assert desc["profiles"]["vfd"]["registers"]["faulted"]["data_type"] == "bool"
    assert plantfile.loads(json.dumps(desc), "again.json") == desc


def test_the_cli_prints_ok_and_the_hash(capsys: pytest.CaptureFixture[str]) -> None:
    h = plantcompile.plant_hash(plantcompile.compile_plant(plantfile.load(EXAMPLE)))
    assert cli.main(["plant", "check", str(EXAMPLE), "--board", "rp2040_pico"]) == 0
    out, err = capsys.readouterr()
    assert out == "%s: ok: pump-skid-1, 1 machines, 3 signals, hash %s\n" % (EXAMPLE, h) and err == ""
    assert cli.main(["plant", "check", str(EXAMPLE), "--json"]) == 0
    got = json.loads(capsys.readouterr()[0])
    assert got == {"file": str(EXAMPLE), "ok": True, "name": "pump-skid-1", "machines": 1, "signals": 3, "hash": h,
                   "board": "rp2040_pico"}


def test_compile_writes_the_board_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plant.json"
    assert cli.main(["plant", "compile", str(EXAMPLE), "--board", "rp2040_pico", "-o", str(out)]) == 0
    data = out.read_bytes()
    h = plantcompile.plant_hash(data)
    assert capsys.readouterr()[0] == "%s: %d bytes, hash %s\n" % (out, len(data), h)
    assert cli.main(["plant", "compile", str(EXAMPLE)]) == 0
    o, e = capsys.readouterr()
    assert o.encode() == data + b"\n" and e == "hash %s\n" % h


def wide(d: dict, n: int) -> None:
    """n signals of a uint16 register at scale 1, no range, whole units: "65535A" at the widest."""
    d["profiles"]["vfd"]["registers"]["current"]["scale"] = 1
    proto = {"key": "K", "tag": "t", "unit": "A", "decimals": 0, "source": {"device": "drive", "register": "current"}}
    m0(d)["signals"] = [dict(proto, key="K%d" % i, tag="t%d" % i) for i in range(n)]


def test_nine_wide_signals_fit_the_line() -> None:
    assert lines_for(lambda d: wide(d, 9)) == []


# Each rule: a change to the example and the exact line it gives.
RULES = [
    # the schema, inside a machine and outside
    (lambda d: sig(d, 2)["alarms"][0].update(limit="x"),
     'machine P-1: signals[2].alarms[0].limit: must be a number, got "x"'),
    (lambda d: d["buses"]["rs485"].update(baud=5), "buses.rs485.baud: must be 1200..1000000, got 5"),
    (lambda d: d["buses"]["rs485"].update(colour="red"), "buses.rs485.colour: unknown field; known here: type, uart, "
                                                         "tx, rx, de, baud, parity, stop_bits, timeout_ms, gap_ms"),
    (lambda d: sig(d, 0).pop("unit"), "machine P-1: signals[0].unit: missing (required)"),
    (lambda d: sig(d, 0).update(key="1x"),
     'machine P-1: signals[0].key: "1x" is not valid: a letter, then up to 7 letters, digits or _'),
    (lambda d: sig(d, 0).update(source={"adc": 0, "input": "4-20mA", "volts": [0, 1]}),
     'machine P-1: signals[0].source: volts is for "input": "voltage" (a 4-20 mA loop has shunt_ohm and range)'),
    (lambda d: sig(d, 0).update(source={"wire": 1}),
     'machine P-1: signals[0].source: must say where the value comes from: "device" (Modbus), "adc", "i2c" (with '
     '"chip"), "pulse" or "di"'),
    (lambda d: sig(d, 0)["alarms"][0].update(hysteresis=-1),
     "machine P-1: signals[0].alarms[0].hysteresis: must be 0..1000000000, got -1"),
    (lambda d: sig(d, 0)["alarms"][0].update(on_delay_s=300),
     "machine P-1: signals[0].alarms[0].on_delay_s: must be 0..255, got 300"),
    (lambda d: sig(d, 0).update(bad={"priority": "urgent"}),
     'machine P-1: signals[0].bad.priority: must be one of "low", "medium", "high", "critical", 1, 2, 3, 4, got '
     '"urgent"'),
    (lambda d: d.update(format="edgetwin-plant/2"), 'format: must be "edgetwin-plant/1", got "edgetwin-plant/2"'),
    (lambda d: d.update(machines=[]), "machines: must have at least 1 item, got 0"),
    (lambda d: sig(d, 1).update(range=[0]), "machine P-1: signals[1].range: must have 2 items, got 1"),
    (lambda d: sig(d, 0).update(source={"sim": True}),
     'machine P-1: signals[0].source: only the simulator\'s own description ("simulator": true) has simulated '
     'signals'),
    # ids, keys, tags
    (lambda d: m0(d).update(id="STATE"), "machines[0].id: is a word of the log lines (ALARM ACK CLEAR SHELVE "
                                         "UNSHELVE STATE LOST PLANT NODE): choose another id"),
    (lambda d: m0(d).update(id="P 1"), 'machines[0].id: "P 1" is not valid: a letter first, then letters, digits, '
                                       '_, and - between parts (P-1, AHU-1, SILO_2), at most 16'),
    (lambda d: d["machines"].append(copy.deepcopy(m0(d))) or d["machines"][1]["state"].pop("run")
     or d["machines"][1]["signals"][0]["source"].update(adc=1) or d["machines"][1]["signals"].pop(2),
     'machines[1].id: "P-1" is the id of machines[0] too: ids are unique'),
    (lambda d: sig(d, 1).update(key="P"), 'machine P-1: signals[1].key: "P" is the key of signals[0] too: unique in '
                                          'the machine'),
    (lambda d: sig(d, 2).update(tag="motor_current"),
     'machine P-1: signals[2].tag: "motor_current" is the tag of signals[1] too: unique in the machine'),
    # references
    (lambda d: d["devices"]["drive"].update(profile="vfx"), 'devices.drive.profile: no profile "vfx" (profiles: vfd)'),
    (lambda d: d["devices"]["drive"].update(bus="rs48"), 'devices.drive.bus: no bus "rs48" (buses: rs485, i2c)'),
    (lambda d: d["devices"]["drive"].update(bus="i2c"),
     'devices.drive.bus: bus "i2c" is an i2c bus: a Modbus device needs an rs485 bus'),
    (lambda d: sig(d, 1)["source"].update(device="pump"),
     'machine P-1: signals[1].source.device: no device "pump" (devices: drive)'),
    (lambda d: sig(d, 1)["source"].update(register="speed"),
     'machine P-1: signals[1].source.register: profile "vfd" has no register "speed" (it has: current, faulted)'),
    (lambda d: sig(d, 2)["source"].update(i2c="rs485"),
     'machine P-1: signals[2].source.i2c: bus "rs485" is an rs485 bus: an I2C chip needs an i2c bus'),
    (lambda d: m0(d)["state"]["trip"].update(register="current"),
     'machine P-1: state.trip.register: register "current" is uint16: a contact needs a bool (a coil, a discrete '
     'input or a bit of a register)'),
    (lambda d: m0(d)["state"].update(current={"signal": "Z", "above": 2}),
     'machine P-1: state.current.signal: the machine has no signal with the key "Z" (keys: P, I, T)'),
    (lambda d: m0(d)["state"].pop("run"),
     "machine P-1: state: needs run (a contact closed while the machine runs) or current (a signal above a "
     "threshold)"),
    # pins and chips used twice
    (lambda d: m0(d)["state"]["run"].update(di=4), "machine P-1: state.run.di: GPIO 4 is used by buses.rs485.tx too"),
    (lambda d: sig(d, 1).update(source={"i2c": "i2c", "chip": "mcp9600"}, unit="C"),
     'machine P-1: signals[2].source: the MCP9600 at address 96 on bus "i2c" is read by machine P-1 '
     'signals[1].source too'),
    # limits, delays, ranges, the board's integers
    (lambda d: sig(d, 0)["alarms"][1].update(limit=7),
     "machine P-1: signals[0].alarms[1].limit: the HIHI limit (7) must be above the HI limit (7.5)"),
    (lambda d: sig(d, 2)["alarms"].append({"level": "LO", "limit": 90}),
     "machine P-1: signals[2].alarms[2].limit: the HI limit (80) must be above the LO limit (90)"),
    (lambda d: sig(d, 0)["alarms"][1].update(level="HI"),
     "machine P-1: signals[0].alarms[1].level: alarms[0] is a HI point too: at most one point per level"),
    (lambda d: sig(d, 1)["alarms"][0].update(interlock="OVERLOAD"),
     "machine P-1: signals[1].alarms[0].interlock: only a HIHI or LOLO point names an interlock (this one is HI)"),
    (lambda d: sig(d, 0).update(period_ms=100) or sig(d, 0)["alarms"][0].update(off_delay_s=30),
     "machine P-1: signals[0].alarms[0].off_delay_s: 30 s is 300 readings at period_ms 100; the board counts at "
     "most 255: use a shorter delay or a longer period_ms"),
    (lambda d: d["devices"]["drive"].update(poll_ms=100) or sig(d, 1)["alarms"][0].update(off_delay_s=30),
     "machine P-1: signals[1].alarms[0].off_delay_s: 30 s is 300 readings at period_ms 100; the board counts at "
     "most 255: use a shorter delay or a longer period_ms"),  # a Modbus signal's period is its device's poll
    (lambda d: sig(d, 2).update(range=[-20, 2e7], decimals=3),
     "machine P-1: signals[2].range[1]: 20000000.0 does not fit the board's integers at 3 decimals (2**29 internal "
     "units): use fewer decimals"),
    (lambda d: sig(d, 1).update(range=[60, 0]), "machine P-1: signals[1].range: must be [lo, hi] with lo below hi, "
                                                "got [60, 0]"),
    (lambda d: sig(d, 0).pop("range"), "machine P-1: signals[0].range: missing: an analog input needs range, the "
                                       "values at 4 and 20 mA (or at its volts)"),
    (lambda d: sig(d, 1).update(period_ms=500), "machine P-1: signals[1].period_ms: a Modbus signal is read every "
                                                "poll_ms of its device (1000): leave period_ms out or set "
                                                "devices.drive.poll_ms"),
    (lambda d: d["profiles"]["vfd"]["registers"]["current"].update(scale=1000),
     "machine P-1: signals[1].source: 100000 internal units per raw count is more than the board's scaling takes "
     "(under 16384): use fewer decimals or a smaller scale"),
    (lambda d: d["profiles"]["vfd"]["registers"]["current"].update(scale=0),
     "profiles.vfd.registers.current.scale: must not be 0: every reading would be the offset"),
    (lambda d: d["profiles"]["vfd"]["registers"]["current"].update(data_type="bool"),
     "profiles.vfd.registers.current.bit: missing: a bool read from a holding or input register needs the bit "
     "(0..15)"),
    (lambda d: sig(d, 2).update(unit="F"),
     'machine P-1: signals[2].unit: an MCP9600 reads degrees Celsius: the unit must be "C"'),
    (lambda d: wide(d, 10),  # 21 + "P-1" + 1 + "STOPPED" + 10 x " Kn=65535A"
     "machine P-1: signals: the sample line can be 132 bytes at the signals' widest values, over the 128 a line may "
     "have: give ranges, fewer decimals, shorter keys or units, or fewer signals"),
    (lambda d: d.update(timezone="Mars/Olympus"),
     'timezone: "Mars/Olympus" is not an IANA time zone (Europe/Berlin, America/Chicago, UTC)'),
    (lambda d: d.update(board="nano"), 'board: unknown board nano (known: esp32s3_devkitc, esp32s3_n8r8, rp2040_pico, '
                                       'rp2040_pico_cp); for a profile of your own leave "board" out and pass '
                                       '--board PATH'),
    (lambda d: d.pop("board"), "machine P-1: signals[0].source.adc: an ADC channel's pin depends on the board: set "
                               "\"board\" (e.g. \"rp2040_pico\") or pass --board"),
]


@pytest.mark.parametrize("change,want", RULES, ids=[w.split(": ")[-2][:40] for _, w in RULES])
def test_each_rule_is_one_line_naming_file_machine_and_field(change: Callable, want: str) -> None:
    got = lines_for(change)
    assert got and got[0] == "ex.json: " + want, got
    with pytest.raises(plantfile.PlantFileError) as e:
        doc = copy.deepcopy(BASE)
        change(doc)
        plantfile.loads(json.dumps(doc), "ex.json")
    assert str(e.value) == got[0] and "\n" not in str(e.value) and e.value.lines == got


def test_all_lists_every_problem_in_document_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def change(d: dict) -> None:
        d["buses"]["rs485"]["baud"] = "fast"
        sig(d, 0)["alarms"][0]["priority"] = 9
        sig(d, 2)["decimals"] = 7
        m0(d)["sample_s"] = -1

    got = lines_for(change)
    assert got == ['ex.json: buses.rs485.baud: must be a whole number, got "fast"',
                   "ex.json: machine P-1: sample_s: must be 0..3600, got -1",
                   'ex.json: machine P-1: signals[0].alarms[0].priority: must be one of "low", "medium", "high", '
                   '"critical", 1, 2, 3, 4, got 9',
                   "ex.json: machine P-1: signals[2].decimals: must be 0..3, got 7"]
    path = tmp_path / "bad.json"
    doc = copy.deepcopy(BASE)
    change(doc)
    path.write_text(json.dumps(doc))
    assert cli.main(["plant", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == got[0].replace("ex.json", str(path)) + "\n"
    assert cli.main(["plant", "check", str(path), "--all"]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [g.replace("ex.json", str(path)) for g in got]
    assert cli.main(["plant", "check", str(path), "--json"]) == 2
    assert json.loads(capsys.readouterr()[0])["errors"] == [g.replace("ex.json", str(path)) for g in got]
    # the rules beyond the schema list every problem too
    more = lines_for(lambda d: (m0(d)["state"]["run"].update(di=5), sig(d, 1).update(key="P"),
                                sig(d, 0)["alarms"][1].update(limit=1)))
    assert [x.split(": ", 3)[2] for x in more] == ["state.run.di", "signals[0].alarms[1].limit", "signals[1].key"]


# ---- the board ----

BOARD_RULES = [
    ("rp2040_pico", lambda d: m0(d)["state"]["run"].update(di=30),
     "machine P-1: state.run.di: GPIO 30: rp2040_pico has no such pin (GPIO 0..29)"),
    ("rp2040_pico", lambda d: m0(d)["state"]["run"].update(di=25),
     "machine P-1: state.run.di: GPIO 25 is reserved on rp2040_pico (the on-board LED): use another pin"),
    ("rp2040_pico", lambda d: d["buses"]["rs485"].update(uart=0, tx=0, rx=1),
     "buses.rs485.tx: GPIO 0 is the link's TX to the gateway (UART0) on rp2040_pico: use another pin"),
    ("rp2040_pico", lambda d: d["buses"]["rs485"].update(uart=0, tx=12, rx=13),
     "buses.rs485.uart: UART0 carries the link to the gateway on rp2040_pico: use UART1"),
    ("rp2040_pico", lambda d: d["buses"]["rs485"].update(tx=6),
     "buses.rs485.tx: GPIO 6 cannot be UART1's TX on rp2040_pico (UART1 TX: GPIO 4, 8, 20, 24)"),
    ("rp2040_pico", lambda d: d["buses"]["i2c"].update(sda=7, scl=6),
     "buses.i2c.sda: GPIO 7 cannot be I2C0's SDA on rp2040_pico (I2C0 SDA: GPIO 0, 4, 8, 12, 16, 20, 24, 28)"),
    ("rp2040_pico", lambda d: d["buses"]["i2c"].update(id=2),
     "buses.i2c.id: rp2040_pico has no I2C2 a description may take (it has: I2C0, I2C1)"),
    ("rp2040_pico", lambda d: sig(d, 0)["source"].update(adc=3),
     "machine P-1: signals[0].source.adc: ADC3 (GPIO 29) is reserved on rp2040_pico (VSYS/3, the supply voltage): "
     "use another pin"),
    ("rp2040_pico", lambda d: sig(d, 0)["source"].update(adc=5),
     "machine P-1: signals[0].source.adc: rp2040_pico has ADC channels 0..3"),
    ("rp2040_pico", lambda d: m0(d)["state"]["run"].update(di=26),
     "machine P-1: signals[0].source.adc: GPIO 26 is used by machine P-1 state.run.di too"),
    ("esp32s3_n8r8", lambda d: (d.pop("board"), d["buses"]["rs485"].update(uart=2, de=33)),
     "buses.rs485.de: GPIO 33 is reserved on esp32s3_n8r8 (octal PSRAM): use another pin"),
    ("esp32s3_devkitc", lambda d: (d.pop("board"), d["buses"]["rs485"].update(uart=2, de=45)),
     "buses.rs485.de: GPIO 45 is reserved on esp32s3_devkitc (a strapping pin: flash voltage): use another pin"),
    ("esp32s3_devkitc", lambda d: (d.pop("board"), d["buses"]["rs485"].update(uart=2, tx=17)),
     "buses.rs485.tx: GPIO 17 is the link's TX to the gateway (UART1) on esp32s3_devkitc: use another pin"),
    ("esp32s3_devkitc", lambda d: None,
     "board: the description is wired for rp2040_pico, not for the board given (esp32s3_devkitc): change \"board\" "
     "or give --board rp2040_pico"),
]


@pytest.mark.parametrize("board,change,want", BOARD_RULES, ids=[w.split(": ")[-1][:40] for _, _, w in BOARD_RULES])
def test_board_rules(board: str, change: Callable, want: str) -> None:
    got = lines_for(change, board)
    assert "ex.json: " + want in got, got


def test_an_esp32s3_takes_any_matrix_pin_and_adc1() -> None:
    def rewire(d: dict) -> None:
        d.pop("board")
        d["buses"]["rs485"].update(uart=2, tx=38, rx=39, de=40)
        d["buses"]["i2c"].update(id=1, sda=41, scl=42)
        sig(d, 0)["source"]["adc"] = 9  # ADC1 channel 9: GPIO10
        m0(d)["state"]["run"]["di"] = 11

    assert lines_for(rewire, "esp32s3_devkitc") == []
    assert lines_for(rewire, "esp32s3_n8r8") == []
    doc = copy.deepcopy(BASE)
    rewire(doc)
    esp = board_profile.resolve("esp32s3_n8r8")
    c = json.loads(plantcompile.compile_plant(plantfile.loads(json.dumps(doc), board=esp), esp))
    assert c["signals"][0][10] == 10


def test_too_many_signals_for_the_heap_says_how_many_fit() -> None:
    def big(d: dict) -> None:
        d["board"] = "rp2040_pico_cp"
        proto = copy.deepcopy(m0(d))
        proto["state"] = {"current": {"signal": "I", "above": 2}}
        d["machines"] = []
        for n in range(16):
            m = copy.deepcopy(proto)
            m["id"] = "P-%d" % (n + 1)
            m["signals"] = [s for s in m["signals"] if "device" in s["source"]]
            for j in range(1, 6):
                m["signals"].append(dict(copy.deepcopy(m["signals"][0]), key="I%d" % j, tag="current_%d" % j))
            d["machines"].append(m)

    got = lines_for(big)
    # 16 machines, 96 signals, 96 alarm points + 96 BAD points on a heap of 195584 B: 15 % is 29337 B
    need = plantboard.heap_estimate(16, 96, 192)
    per = plantboard.PER_SIGNAL + plantboard.PER_ALARM * 2
    fit = (195584 * 15 // 100 - plantboard.BASE - plantboard.PER_MACHINE * 16) // per
    assert got == ["ex.json: machines: 96 signals with 192 alarm points take about %d bytes of the board's heap, over "
                   "the 29337 (15 %% of rp2040_pico_cp's heap) a description may take: about %d signals fit"
                   % (need, fit)]
    assert 0 < fit < 96
    assert lines_for(big, "esp32s3_n8r8")[0].startswith("ex.json: board: the description is wired for rp2040_pico_cp")


# ---- hostile input: one line, exit 2, never a traceback ----

def _cli_one_line(capsys: pytest.CaptureFixture[str], path: Path, want: str) -> None:
    assert cli.main(["plant", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "%s: %s\n" % (path, want), err


def test_files_that_are_not_descriptions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _cli_one_line(capsys, tmp_path / "missing.json", "no such file")
    _cli_one_line(capsys, tmp_path, "is a directory, not a plant description")
    cases = {
        "binary.json": (bytes(range(256)) * 4, "not UTF-8 text (byte 128)"),
        "truncated.json": (EXAMPLE.read_bytes()[:500], "not valid JSON: it ends early (truncated?) at line 15"),
        "huge.json": (b" " * (2 << 20) + b"{}", "over 1 MiB: not a plant description"),
        "deep.json": (b"[" * 100000 + b"]" * 100000, "not valid JSON: nested too deep"),
        "deep2.json": (b'{"a":' * 40 + b"1" + b"}" * 40, "nested deeper than 32 levels: not a plant description"),
        "list.json": (b"[1, 2]", "a plant description is a JSON object ({...}), got a list"),
        "nan.json": (b'{"name": NaN}', "not valid JSON: NaN is not a JSON number"),
        "dup.json": (b'{"name": "a", "name": "b"}', 'not valid JSON: the key "name" appears twice in one object'),
        "empty.json": (b"", "empty: a plant description is a JSON object"),
        "junk.json": (b"{'name': 1}", "not valid JSON: Expecting property name enclosed in double quotes at line 1 "
                                      "column 2"),
        "bigint.json": (b'{"name": 1' + b"0" * 5000 + b"}", "not valid JSON: a number with 5001 digits"),
    }
    for name, (data, want) in cases.items():
        (tmp_path / name).write_bytes(data)
        _cli_one_line(capsys, tmp_path / name, want)
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes())
    assert plantfile.errors(tmp_path / "bom.json") == []


def test_a_subprocess_sees_one_line_too(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b"\x00\x01{")
    for argv in (["check", str(path)], ["compile", str(path)], ["check", str(tmp_path / "nope.json"), "--all"]):
        res = subprocess.run([sys.executable, "-m", "host.cli", "plant", *argv], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
        assert "Traceback" not in res.stderr


# ---- fuzz ----

def larger() -> dict:
    """A description of every source kind on a Pico: 8 machines, 44 signals."""
    regs = {"u16": {"register": "holding", "address": 0, "scale": 0.1},
            "i16": {"register": "input", "address": 10, "data_type": "int16", "scale": 0.01, "offset": -5},
            "u32": {"register": "holding", "address": 20, "data_type": "uint32", "byte_order": "CDAB"},
            "i32": {"register": "holding", "address": 22, "data_type": "int32", "scale": 0.001},
            "f32": {"register": "input", "address": 30, "data_type": "float32", "byte_order": "DCBA"},
            "run": {"register": "coil", "address": 0}, "trip": {"register": "discrete", "address": 1},
            "flag": {"register": "holding", "address": 40, "data_type": "bool", "bit": 3}}
    machines = []
    pins = iter([10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22])
    for n in range(8):
        sigs = []
        for j, r in enumerate(("u16", "i16", "u32", "i32", "f32")):
            sigs.append({"key": "M%d" % j, "tag": "modbus_%d" % j, "unit": "kPa", "decimals": j % 3,
                         "range": [-100, 1000], "source": {"device": "dev%d" % (n % 2), "register": r},
                         "alarms": [{"level": "HI", "limit": 800, "hysteresis": 5, "on_delay_s": 3},
                                    {"level": "LO", "limit": -50, "priority": 3}]})
        if n < 3:
            sigs.append({"key": "A", "tag": "analog", "unit": "bar", "range": [0, 16],
                         "source": {"adc": n, "input": "4-20mA" if n % 2 else "voltage", "volts": [0.5, 3.0]}
                         if n % 2 == 0 else {"adc": n, "input": "4-20mA"}})
        elif n < 5:
            sigs.append({"key": "T", "tag": "temp", "unit": "C", "range": [-50, 600],
                         "source": {"i2c": "bus", "chip": "mcp9600", "address": 96 + n}})
        else:
            sigs.append({"key": "L", "tag": "level", "unit": "mA", "range": [0, 20], "decimals": 2,
                         "source": {"i2c": "bus", "chip": "ads1115", "address": 72, "channel": n - 5,
                                    "input": "4-20mA", "gain": 4.096}})
        if n % 2:
            sigs.append({"key": "F", "tag": "flow", "unit": "m3/h", "range": [0, 500],
                         "source": {"pulse": next(pins), "per_pulse": 0.01, "measure": "rate", "per": "h"},
                         "period_ms": 5000})
        state: dict = {"run": {"device": "dev%d" % (n % 2), "register": "run"},
                       "trip": {"device": "dev%d" % (n % 2), "register": "flag", "invert": True}}
        if n % 3 == 0:
            state = {"run": {"di": next(pins), "active": "low", "pull": "up"}}
        if n == 7:
            state = {"current": {"signal": "M0", "above": 1.5}, "settle_s": 30}
            sigs.append({"key": "D", "tag": "door", "unit": "x", "decimals": 0, "bad": False,
                         "source": {"di": next(pins)}})
        machines.append({"id": "MX-%d" % (n + 1), "kind": "machine", "words": ["unit %d" % n], "sample_s": n,
                         "state": state, "signals": sigs})
    return {"format": "edgetwin-plant/1", "name": "larger", "board": "rp2040_pico", "timezone": "America/Chicago",
            "buses": {"line": {"type": "rs485", "uart": 1, "tx": 8, "rx": 9, "de": 7, "baud": 38400, "parity": "none",
                               "stop_bits": 2},
                      "bus": {"type": "i2c", "id": 1, "sda": 2, "scl": 3, "freq": 400000}},
            "profiles": {"meter": {"registers": regs}},
            "devices": {"dev0": {"profile": "meter", "bus": "line", "unit": 1},
                        "dev1": {"profile": "meter", "bus": "line", "unit": 2, "poll_ms": 250}},
            "machines": machines}


def test_the_larger_description_checks_and_compiles() -> None:
    doc = larger()
    assert plantfile.errors_in(json.dumps(doc), "larger.json") == []
    c = json.loads(plantcompile.compile_plant(plantfile.loads(json.dumps(doc))))
    assert len(c["signals"]) == sum(len(m["signals"]) for m in doc["machines"]) == 53
    assert {s[9] for s in c["signals"]} == {1, 2, 3, 4, 5, 6}


HOSTILE = (None, True, False, 0, -1, 1.5, 1e308, -1e308, 10 ** 30, -(10 ** 30), 2 ** 31, 255, 256, 65536, "", "x",
           "é" * 100, "a" * 5000, "P-1", "HI", "\n", "\x00", "../x", [], {}, [1, 2], {"a": 1}, [0, 0], 0.1, -0.0,
           "4-20mA", "rs485", "device", 1e-300)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append(prefix + (i,))
            out += _paths(v, prefix + (i,))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


def mutate(rng: random.Random, doc: dict) -> str:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = rng.choice(paths)
        parent = _parent(doc, path)
        kind = rng.randrange(10)
        if kind == 0:  # a key or an item deleted
            del parent[path[-1]]
        elif kind in (1, 2, 3):  # a wrong type or a hostile value
            parent[path[-1]] = rng.choice(HOSTILE)
        elif kind == 4:  # a number nudged past or onto a bound
            v = parent[path[-1]]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                parent[path[-1]] = rng.choice((v * 1000, -v, v + 1, v - 1, 0, v * 2 ** 20, v / 7, v + 0.5))
        elif kind == 5:  # a long or non-ASCII string
            if isinstance(parent[path[-1]], str):
                parent[path[-1]] = rng.choice((parent[path[-1]] * 40, parent[path[-1]] + "ü", "Ω" + parent[path[-1]],
                                               parent[path[-1]].upper(), parent[path[-1]] + " "))
        elif kind == 6:  # a machine or a signal duplicated
            if rng.random() < 0.5:
                doc["machines"].append(copy.deepcopy(rng.choice(doc["machines"])))
            else:
                m = rng.choice(doc["machines"])
                m["signals"].append(copy.deepcopy(rng.choice(m["signals"])))
        elif kind == 7:  # an unknown key
            if isinstance(parent[path[-1]], dict):
                parent[path[-1]][rng.choice(("extra", "Key", "sim", "pin"))] = rng.choice(HOSTILE)
        elif kind == 8:  # a list or object where the other was
            v = parent[path[-1]]
            parent[path[-1]] = list(v.values()) if isinstance(v, dict) else {str(i): x for i, x in enumerate(v)} \
                if isinstance(v, list) else [v]
        else:  # truncated text
            text = json.dumps(doc)
            return text[:rng.randrange(len(text))]
    return json.dumps(doc)


def test_fuzz_mutated_descriptions_load_or_give_one_line() -> None:
    rng = random.Random(2024)
    bases = [BASE, larger()]
    loaded = refused = 0
    # this process's CPU time, not the wall clock: a checker that hangs on some input (a regex that backtracks)
    # shows in it, and another process's load on the machine does not (it took 41 s of wall time beside the rest)
    t0 = time.process_time()
    messages = set()
    for i in range(1000):
        text = mutate(rng, bases[i % 2])
        try:
            desc = plantfile.loads(text, "fuzz.json")
        except plantfile.PlantFileError as e:
            line = str(e)
            assert line.startswith("fuzz.json: ") and "\n" not in line and len(line) < 600, line
            assert all("\n" not in x for x in e.lines)
            messages.add(line.split(": ", 2)[-1][:30])
            refused += 1
            continue
        data = plantcompile.compile_plant(desc)
        assert json.loads(data)["name"] == desc["name"]
        if loaded % 4 == 0:  # what load gives (defaults filled in) checks again as it is
            assert plantfile.loads(json.dumps(desc), "again.json") == desc
        loaded += 1
    elapsed = time.process_time() - t0
    assert loaded >= 150 and refused >= 500, (loaded, refused)
    assert len(messages) >= 60  # many different problems, each named
    assert elapsed < 30, elapsed
