"""The dashboard plots any plant as its description names it (host/ui/feed.py, svg.py, app.py): a hall with an
air handling unit AHU-1 (SAT, RAT, FAN) and a silo SILO-2, stored with its description: each signal's label
and unit, the alarm limits as dashed lines, the node titled by the plant's name, times in Berlin's time."""

from __future__ import annotations

import re
from pathlib import Path

import hallplant
import pytest

from host import cmd_import
from host.store import LogStore
from host.ui import svg
from host.ui.app import Dashboard
from host.ui.feed import Feed


@pytest.fixture()
def hall_store(tmp_path: Path) -> Path:
    desc = hallplant.desc()
    log = tmp_path / "hall.log"
    log.write_text("".join(ln + "\n" for ln in hallplant.lines(desc.hash)))
    db = tmp_path / "hall.db"
    cmd_import.import_log(log, db, "/dev/ttyACM0", desc=desc)  # a node stored under its port's name
    st = LogStore(db)
    t0 = int(hallplant.START.timestamp()) * 1000 + 420000  # the trip
    st.add_annotation("/dev/ttyACM0", t0, t0 + 5000, "AHU-1 tripped on supply air.", True, 6)
    st.close()
    return db


def _plots(db: Path) -> tuple[dict, str, list[str]]:
    feed = Feed(db)
    feed.poll()
    dash = Dashboard(feed, lambda: None)
    try:
        plots = {p["svg"].split('data-machine="', 1)[1].split('"', 1)[0]: p for p in dash.plots(None, {}).values()}
        return plots, dash.plant_html(None), dash.notes(None, 0)[0]
    finally:
        feed.close()


def test_a_plant_that_is_not_the_simulator_is_plotted_as_described(hall_store: Path) -> None:
    plots, table, notes = _plots(hall_store)
    assert sorted(plots) == ["AHU-1", "SILO-2"]
    ahu = plots["AHU-1"]["svg"]
    # each signal's row: its key, what operators call it, its unit
    labels = re.findall(r'class="label" data-key="([^"]+)" data-unit="([^"]*)"><title>([^<]*)</title>', ahu)
    assert labels == [("SAT", "C", "SAT supply air temperature (C)"), ("RAT", "C", "RAT return air temperature (C)"),
                      ("FAN", "%", "FAN fan speed (%)")], labels
    assert "air handling unit" in ahu and 'class="value">80 %<' not in ahu  # the fan stopped with the trip
    assert re.search(r'class="value">0 %<', ahu) and re.search(r'class="value">[\d.]+ C<', ahu)
    # the alarm limits the description has, dashed across the signal's row; none where it has none
    limits = re.findall(r'<line class="limit limit-(\w+)"[^>]*data-level="(\w+)" data-limit="([\d.]+)"', ahu)
    assert limits == [("hi", "HI", "24"), ("hihi", "HIHI", "30")], limits
    silo = plots["SILO-2"]["svg"]
    assert re.findall(r'data-level="(\w+)" data-limit="([\d.]+)"', silo) == [("LO", "1.5"), ("LOLO", "0.5")]
    assert 'data-key="L" data-unit="m"><title>L silo level (m)</title>L silo level<' in silo
    # the alarms and the trip on the time axis, in the site's time (Berlin: UTC+1 in November), labelled
    assert ahu.count('class="ev ev-alarm"') == 2 and ahu.count('class="ev ev-trip"') == 1
    assert "<title>07:07:00 TRIPPED interlock=HIHI_SAT</title>" in ahu
    assert 'data-tz="Europe/Berlin"' in ahu and "Europe/Berlin (site time)" in ahu
    assert re.search(r'class="axis">07:00:00<', ahu)
    # the node is titled by its plant's name, not by the port it is stored under (which is still shown)
    assert plots["AHU-1"]["title"] == "hall-3" and plots["AHU-1"]["node"] == "/dev/ttyACM0"
    assert '>hall-3</a><div class="who">/dev/ttyACM0' in table
    assert "2026-11-30 07:07:00 Europe/Berlin" in notes[0]


def test_the_simulator_is_plotted_in_utc_with_its_own_units() -> None:
    samples = [(1796018400.0 + i, "RUNNING", {"T": (50.0 + i, "C"), "N": (970.0, "rpm")}) for i in range(5)]
    out = svg.machine_plot("M-201", samples, [(1796018402.0, "alarm", "HI winding_temp 52C")])
    assert 'data-tz="UTC"' in out and "06:00:04 UTC (site time)" in out and 'data-points="5"' in out
    assert 'data-key="T" data-unit="C"><title>T (C)</title>T<' in out and 'class="value">970 rpm<' in out
    assert "limit" not in out  # no description: no limits


def test_a_far_limit_is_named_not_drawn() -> None:
    # a limit far from the readings would flatten them to a line: it is named beside the row, the near one drawn
    from host import plantdesc

    d = plantdesc.from_dict({"name": "x", "machines": [{"id": "AHU-1", "kind": "air handling unit", "signals": [
        {"key": "SAT", "tag": "supply_temp", "unit": "C", "alarms": [{"level": "HI", "limit": 24},
                                                                    {"level": "HIHI", "limit": 95}]}]}]}, "0" * 16)
    samples = [(1796018400.0 + i, "RUNNING", {"SAT": (20.0 + i / 10, "C")}) for i in range(11)]
    out = svg.machine_plot("AHU-1", samples, [], d.machine("AHU-1"))
    assert re.findall(r'data-level="(\w+)" data-limit="([\d.]+)"', out) == [("HI", "24")]
    assert 'class="range">20..24 C HIHI 95\u2191<' in out
