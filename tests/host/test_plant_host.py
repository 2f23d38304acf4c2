"""Property tests of the plant simulator on CPython: for any seed and configuration every line parses with the
grammar of docs/PLANT.md, timestamps are the simulated clock, readings stay in their physical ranges, alarm
lines replay as a valid ISA-18.2 sequence, PLC transitions follow the state machine and every trip names an
alarm raised in the same second; plus the gen_logs CLI."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import plant
from shared.plant import Plant
from tools.train import gen_logs

ROOT = Path(__file__).resolve().parent.parent.parent

# ---- the grammar of docs/PLANT.md ----
TS = r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
ID = r"(?P<id>(?:P|M|C|CV)-[1-4]\d\d)"
VALUE = r"(?:\?|-?\d+\.\d(?:C|mm/s|A|bar|m3/h|kPa|m/s)|\d+rpm)"
SAMPLE = re.compile(rf"^{TS} {ID} (?P<state>STOPPED|STARTING|RUNNING|STOPPING|TRIPPED)"
                    rf"(?P<fields>(?: (?:T|V|I|P|Q|dP|N|S)={VALUE})+)$")
ALARM = re.compile(rf"^{TS} (?P<verb>ALARM|ACK|CLEAR|SHELVE|UNSHELVE) (?P<level>HI|HIHI|LO|LOLO|BAD) {ID} "
                   rf"(?P<tag>[a-z_]+) (?P<value>{VALUE}) prio=(?P<prio>[1-4]) "
                   rf"(?P<state>RAISED|ACKED|RTN_UNACK|NORMAL|SHELVED)$")
STATE = re.compile(rf"^{TS} STATE {ID} (?P<src>[A-Z]+)->(?P<dst>[A-Z]+) "
                   r"(?P<cause>cmd=schedule|cmd=operator|ramp=done|reset=operator|"
                   r"interlock=(?:HIHI_TEMP|HIHI_VIB|HIHI_CURR|HIHI_DP|LOLO_FLOW|HIHI_PRESS))$")
LOST = re.compile(rf"^{TS} LOST events=(?P<n>[1-9]\d*)$")
FIELD = re.compile(r"(T|V|I|P|Q|dP|N|S)=(\?|-?\d+(?:\.\d)?)")

FIELDS = {"pump": "T V I P Q dP", "motor": "T V I N", "compressor": "T V I P Q dP", "conveyor": "T V I S"}
# physical ranges of the readings (sensor ranges): C, mm/s, A, bar, m3/h, kPa, rpm, m/s
RANGE = {"T": (-40, 250), "V": (0, 50), "I": (0, 540), "P": (0, 25), "Q": (0, 1200), "dP": (0, 250),
         "N": (0, 3552), "S": (0, 3.6)}
UNIT_KEY = {"C": "T", "mm/s": "V", "A": "I", "bar": "P", "m3/h": "Q", "kPa": "dP", "rpm": "N", "m/s": "S"}
PLC = {("STOPPED", "STARTING"), ("STARTING", "RUNNING"), ("STARTING", "STOPPING"), ("RUNNING", "STOPPING"),
       ("STOPPING", "STOPPED"), ("STARTING", "TRIPPED"), ("RUNNING", "TRIPPED"), ("STOPPING", "TRIPPED"),
       ("TRIPPED", "STOPPED")}
# ISA-18.2 replay: (state before, verb) -> state after
ISA = {("NORMAL", "ALARM"): "RAISED", ("RTN_UNACK", "ALARM"): "RAISED", ("RAISED", "ACK"): "ACKED",
       ("RTN_UNACK", "ACK"): "NORMAL", ("RAISED", "CLEAR"): "RTN_UNACK", ("ACKED", "CLEAR"): "NORMAL"}
TRIP_POINT = {"HIHI_TEMP": ("HIHI", "temp"), "HIHI_VIB": ("HIHI", "vibration"), "HIHI_CURR": ("HIHI", "current"),
              "HIHI_DP": ("HIHI", "_dp"), "LOLO_FLOW": ("LOLO", "flow"), "HIHI_PRESS": ("HIHI", "press")}


def check_stream(p: Plant, ticks: int, inject=(), min_gap: int = 5) -> dict[str, int]:
    """Run p, checking every line; returns counts of what was seen. No alarm point may be raised again within
    min_gap seconds (5: the shortest on-delay + off-delay of any point)."""
    kinds = {p.ids[m]: plant.KINDS[p.kind[m]] for m in range(p.n)}
    plc = {p.ids[m]: plant.STATES[p.plc[m]].decode() for m in range(p.n)}
    isa: dict[tuple[str, str, str], str] = {}
    last_raise: dict[tuple[str, str, str], int] = {}
    seen = {"sample": 0, "alarm": 0, "state": 0, "lost": 0, "trip": 0}
    pending = sorted(inject, key=lambda x: x[-1])
    for t in range(ticks):
        while pending and pending[0][-1] <= t:
            m, fault, sev, at = pending.pop(0)
            try:
                p.inject(m % p.n, fault, sev)
            except plant.PlantError:
                pass  # not for this kind of machine, or that slot is busy
        p.step()
        want_ts = (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=p.start_epoch + t))
        want_ts = want_ts.strftime("%Y-%m-%dT%H:%M:%SZ")
        raised_now: list[tuple[str, str, str]] = []
        for line in p.lines():
            assert len(line) <= plant.LINE_MAX and line.isascii(), line
            assert line[:20] == want_ts, (t, line)
            if m := SAMPLE.match(line):
                seen["sample"] += 1
                keys = [f[0] for f in FIELD.findall(m["fields"])]
                assert " ".join(keys) == FIELDS[kinds[m["id"]]], line
                assert m["state"] == plc[m["id"]], (line, plc[m["id"]])  # the state before this tick's change
                for key, val in FIELD.findall(m["fields"]):
                    if val != "?":
                        lo, hi = RANGE[key]
                        assert lo <= float(val) <= hi, line
            elif m := ALARM.match(line):
                seen["alarm"] += 1
                key = (m["id"], m["tag"], m["level"])
                before = isa.get(key, "NORMAL")
                if m["verb"] == "SHELVE":
                    assert before != "SHELVED" and m["state"] == "SHELVED", (line, before)
                elif m["verb"] == "UNSHELVE":
                    assert before == "SHELVED" and m["state"] in ("RAISED", "NORMAL"), (line, before)
                else:
                    assert ISA.get((before, m["verb"])) == m["state"], (line, before)
                isa[key] = m["state"]
                if m["verb"] == "ALARM":
                    raised_now.append(key)
                    assert t - last_raise.get(key, -10**6) >= min_gap, (line, t - last_raise[key])
                    last_raise[key] = t
                if m["value"] != "?":
                    num, unit = re.match(r"(-?\d+(?:\.\d)?)(.*)", m["value"]).groups()
                    lo, hi = RANGE[UNIT_KEY[unit]]
                    assert lo <= float(num) <= hi, line
            elif m := STATE.match(line):
                seen["state"] += 1
                assert m["src"] == plc[m["id"]] and (m["src"], m["dst"]) in PLC, line
                assert (m["dst"] == "TRIPPED") == m["cause"].startswith("interlock="), line
                if m["dst"] == "TRIPPED":
                    seen["trip"] += 1
                    level, tag_part = TRIP_POINT[m["cause"].split("=")[1]]
                    assert any(i == m["id"] and lv == level and tag_part in tag for i, tag, lv in raised_now), \
                        (line, raised_now)
                plc[m["id"]] = m["dst"]
            elif LOST.match(line):
                seen["lost"] += 1
            else:
                raise AssertionError("line does not parse: %r" % line)
    return seen


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8), every=st.sampled_from([1, 1, 7, 60]),
       faults=st.sampled_from([0, 1, 2]), start=st.integers(0, plant.MAX_EPOCH),
       inject=st.lists(st.tuples(st.integers(0, 15), st.sampled_from(plant.FAULTS[1:]), st.integers(4, 5),
                                 st.integers(0, 500)), max_size=4))
def test_any_seed_gives_parseable_consistent_lines(seed, n, every, faults, start, inject):
    p = Plant(seed, n, start_epoch_s=start, sample_every=every, fault_every_h=faults, events=256)
    seen = check_stream(p, 700, inject)
    assert p.dropped == 0 and seen["lost"] == 0
    assert seen["sample"] == n * len([t for t in range(700) if t % every == 0])
    assert seen["trip"] == p.trips


def test_busy_plants_parse_and_do_not_chatter():
    # every fault at a medium severity, on staggered machines, on top of spontaneous ones: no alarm point
    # is raised twice within a minute (deadband, on/off delays, state-based arming)
    alarms = trips = 0
    for seed in (31, 32):
        p = Plant(seed, 6, fault_every_h=1, sample_every=60, events=256)
        inject = [(i, f, 3, 300 + 1500 * i) for i, f in enumerate(plant.FAULTS[1:])]
        seen = check_stream(p, 4 * 3600, inject, min_gap=60)
        alarms += seen["alarm"]
        trips += seen["trip"]
    assert trips >= 4 and alarms >= 40, (trips, alarms)


def test_truth_labels_every_fault_with_its_interval():
    p = Plant(41, 4, fault_every_h=1)
    seen: dict[tuple, dict] = {}
    version = -1
    for _ in range(4 * 3600):
        p.step()
        if p.faults.version != version:
            version = p.faults.version
            for f in p.truth():
                seen[(f["machine"], f["fault"], f["since_tick"])] = f
    assert len(seen) == p.faults.started >= 4
    for f in seen.values():
        assert f["machine"] in p.ids and f["fault"] in plant.FAULTS[1:] and 1 <= f["severity"] <= 5
        assert f["since"] == p.timestamp(f["since_tick"])
        if f["active"]:
            assert f["until"] is None and f["ended_by"] is None
        else:
            assert f["until_tick"] >= f["since_tick"] and f["ended_by"] in ("repair", "expired")
        assert (f["signal"] is None) == (f["fault"] in ("bearing_wear", "cavitation", "overheating", "clogged_filter"))


# ---- tools/train/gen_logs.py ----

def test_gen_logs_writes_the_log_and_a_matching_summary(tmp_path, capsys):
    out = tmp_path / "p.log"
    truth = tmp_path / "t.json"
    assert gen_logs.main(["--seed", "5", "--hours", "0.5", "--machines", "3", "--fault-every-h", "1",
                          "--inject", "P-101:bearing_wear:5@60", "--out", str(out), "--truth", str(truth)]) == 0
    summary = json.loads(capsys.readouterr().out)
    lines = out.read_text().splitlines()
    assert summary["lines"] == len(lines) and summary["ticks"] == 1800
    assert summary["lines_by_kind"]["sample"] == 3 * 1800
    raised = [ln for ln in lines if ALARM.match(ln) and " ALARM " in ln]
    assert sum(summary["alarms_by_prio"].values()) == len(raised)
    assert summary["trips"] == len([ln for ln in lines if "->TRIPPED " in ln]) >= 1
    assert summary["faults"] == json.loads(truth.read_text())
    assert summary["faults"][0]["fault"] == "bearing_wear" and summary["faults"][0]["since_tick"] == 60
    assert lines[0].startswith("2026-11-30T06:00:00Z ") and summary["end"] == "2026-11-30T06:29:59Z"
    assert summary["lines_per_s"] > 0
    # the same seed gives the same bytes; the plant's own lines match
    again = tmp_path / "q.log"
    gen_logs.main(["--seed", "5", "--hours", "0.5", "--machines", "3", "--fault-every-h", "1",
                   "--inject", "P-101:bearing_wear:5@60", "--out", str(again)])
    assert again.read_bytes() == out.read_bytes()


def test_gen_logs_to_stdout_puts_the_summary_on_stderr():
    proc = subprocess.run([sys.executable, "-m", "tools.train.gen_logs", "--seed", "9", "--hours", "0.01",
                           "--start", "2027-12-31T23:59:30Z"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) >= 4 * 36 and lines[0].startswith("2027-12-31T23:59:30Z") and lines[-1].startswith("2028-01-01T")
    assert json.loads(proc.stderr)["lines"] == len(lines)


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "seed"),
    (["--seed", "1", "--hours", "0"], "hours"),
    (["--seed", "1", "--hours", "x"], "hours"),
    (["--seed", "1", "--machines", "99"], "n_machines"),
    (["--seed", "1", "--sample-every", "0"], "sample_every"),
    (["--seed", "1", "--start", "yesterday"], "start"),
    (["--seed", "1", "--inject", "P-101"], "MACHINE:FAULT"),
    (["--seed", "1", "--inject", "P-101:rust"], "rust"),
    (["--seed", "1", "--inject", "Z-9:drift"], "Z-9"),
    (["--seed", "1", "--inject", "P-101:drift:9"], "severity"),
    (["--seed", "1", "--inject", "P-101:drift@x"], "@"),
    (["--seed", "1", "--hours", "0.1", "--inject", "P-101:drift@9999"], "past the end"),
    (["--seed", "1", "--out", "/nonexistent/dir/x.log", "--hours", "0.01"], "cannot write"),
])
def test_gen_logs_rejects_bad_arguments(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        gen_logs.main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
