# test_profile.py: board profiles load, and every bad field is named in the error.
import json

import testkit
from shared import profile

BOARDS = ("rp2040_pico", "rp2040_pico_cp", "esp32s3_devkitc", "esp32s3_n8r8")


def _good():
    with open("boards/rp2040_pico.json") as f:
        return json.loads(f.read())


def test_all_shipped_profiles_load():
    for b in BOARDS:
        p = profile.load("boards/%s.json" % b)
        assert p["name"] == b
        assert p["kv"]["staged"] >= p["draft_k"]


def test_missing_field_is_named():
    for name, _t, _lo, _hi in profile.FIELDS:
        doc = _good()
        parts = name.split(".")
        node = doc
        for p in parts[:-1]:
            node = node[p]
        del node[parts[-1]]
        e = testkit.raises(profile.ProfileError, profile.validate, doc, "x.json")
        assert "x.json" in str(e) and ("'%s'" % name) in str(e), str(e)


def test_wrong_types_and_ranges_are_named():
    cases = (
        ("heap_bytes", "190K"), ("heap_bytes", 190), ("heap_bytes", True), ("flavour", "zephyr"),
        ("mpy_arch", "armv7m"), ("native", 1), ("draft_k", 0), ("name", ""),
    )
    for field, bad in cases:
        doc = _good()
        doc[field] = bad
        e = testkit.raises(profile.ProfileError, profile.validate, doc, "b.json")
        assert ("'%s'" % field) in str(e), str(e)
    doc = _good()
    doc["uart"]["baud"] = 300
    e = testkit.raises(profile.ProfileError, profile.validate, doc, "b.json")
    assert "'uart.baud'" in str(e)


def test_cross_field_rules():
    doc = _good()
    doc["kv"]["staged"] = 2
    e = testkit.raises(profile.ProfileError, profile.validate, doc, "b.json")
    assert "kv.staged" in str(e)
    doc = _good()
    doc["flavour"] = "circuitpython"
    e = testkit.raises(profile.ProfileError, profile.validate, doc, "b.json")
    assert "CircuitPython" in str(e)
    doc = _good()
    doc["extra"] = 1
    e = testkit.raises(profile.ProfileError, profile.validate, doc, "b.json")
    assert "'extra'" in str(e)


def test_unreadable_and_malformed_files():
    e = testkit.raises(profile.ProfileError, profile.load, "boards/no_such_board.json")
    assert "no_such_board.json" in str(e)
    e = testkit.raises(profile.ProfileError, profile.validate, [1, 2], "list.json")
    assert "list.json" in str(e)


def test_io_section_is_checked():
    for b in BOARDS:
        io = profile.load("boards/%s.json" % b)["io"]
        assert io["gpio"] and len(io["adc"]) >= 4 and io["uart"] and io["i2c"]
    good = {"gpio": [[0, 29]]}
    cases = (
        (1, "'io'"), ({"gpio": 5}, "'io.gpio'"), ({"gpio": [[5, 2]]}, "'io.gpio'"), ({}, "'io.gpio'"),
        ({"gpio": [[0, 29]], "uart": {"x": {}}}, "'io.uart'"), ({"gpio": [[0, 29]], "uart": []}, "'io.uart'"),
        ({"gpio": [[0, 29]], "uart": {"1": {"tx": [99]}}}, "'io.uart.1.tx'"),
        ({"gpio": [[0, 29]], "i2c": {"0": {"tx": [1]}}}, "io.i2c.0.tx"),
        ({"gpio": [[0, 29]], "reserved": {"1": 5}}, "'io.reserved.1'"),
        ({"gpio": [[0, 29]], "adc": [26, True]}, "'io.adc'"), ({"gpio": [[0, 29]], "bogus": 1}, "io.bogus"),
    )
    for io, field in cases:
        doc = _good()
        doc["io"] = io
        e = testkit.raises(profile.ProfileError, profile.validate, doc, "b.json")
        assert field in str(e) and "b.json" in str(e), str(e)
    doc = _good()
    doc["io"] = good
    assert profile.validate(doc, "b.json")["io"] == good
    del doc["io"]  # the section is optional
    profile.validate(doc, "b.json")
