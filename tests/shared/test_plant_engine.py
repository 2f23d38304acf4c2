# test_plant_engine.py: a described plant's readings -> lines (shared/plant_engine.py over shared/plantcfg.py):
# alarms with delays and hysteresis, running-only arming, BAD with its reason, range, state from contacts and
# current, trips on an interlock or a trip contact, sample lines by period and deadband, operators' acks naming
# who, the PLANT line; and no allocation per step on MicroPython.
import json

import testkit
from shared import plantcfg, readings as rd
from shared.plant_alarms import ACK, SHELVE, UNSHELVE
from shared.plant_engine import Engine
from shared.wallclock import WallClock

# One pump with a run contact (0) and a trip contact (1): pressure P (4-20 mA on ADC, hundredths of a bar,
# range check off), current I (Modbus), temperature T (MCP9600) with a HIHI interlock; a fan whose state
# comes from its current.
DESC = {
    "f": 1, "name": "skid-1", "tz": "UTC",
    "rs485": [[1, 4, 5, 3, 19200, 1, 1, 200, 0]],
    "i2c": [[0, 8, 9, 100000]],
    "units": [[0, 1, 1000, [[3, 0, 4], [1, 0, 2]]]],
    "machines": [["P-1", "pump", 5, 20, 0, 1, -1, 0], ["FAN-2", "fan", 0, 0, -1, -1, 3, 200]],
    "contacts": [[1, 10, 1, 2, 20, 0], [2, 0, 1, 1, -1, 0]],
    "signals": [[0, "P", "discharge_press", "bar", 1, 1000, 20, 1, 0, 2, 26, 8, 0, 11000, 15, 1000, 14, 0],
                [0, "I", "motor_current", "A", 1, 1000, 0, 0, 6000, 1, 0, 0, 0, 1, 0, 0, -1, 10, 0, 0],
                [0, "T", "bearing_temp", "C", 1, 1000, 0, -2000, 20000, 4, 0, 96, 0, 25, 2, 0],
                [1, "I", "fan_current", "A", 0, 1000, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, -1, 10, 0, 0]],
    "alarms": [[0, 0, 750, 20, 2, 2, 3, 1, -1], [1, 0, 3200, 100, 0, 0, 2, 0, -1], [2, 1, 9500, 200, 1, 1, 4, 0, 0]],
    "bad": [[0, 3, 2, 1], [2, 1, 1, 1]],
    "interlocks": ["HIHI_TEMP"],
}
P, I, T, FAN = 0, 1, 2, 3
PROF = {"uart": {"id": 0, "tx": 0, "rx": 1}}  # the board's link: UART0 on GP0/GP1


class Rig:
    def __init__(self, desc=DESC):
        data = json.dumps(desc).encode()
        self.cfg = plantcfg.parse(data, "/plant.json", PROF)
        self.r = rd.Readings(self.cfg.n_signals, self.cfg.n_contacts)
        self.clock = WallClock(0)
        self.clock.set(9465, 6 * 3600000, 0)  # 2025-12-01T06:00:00Z at tick 0
        self.out = []
        self.levels = []
        self.now = 0
        self.e = Engine(self.cfg, self.r, self.emit, self.clock, 0)

    def emit(self, buf, n, level):
        self.out.append(bytes(buf[:n]).decode()[21:])
        self.levels.append(level)

    def second(self, p=None, i=None, t=None, fan=None, run=None, trip=None, bad=None):
        """One second: the given readings arrive, then a step. Returns the lines it wrote."""
        self.now += 1000
        r = self.r
        for s, v in ((P, p), (I, i), (T, t), (FAN, fan)):
            if v is not None:
                r.put(s, v, self.now)
        if bad is not None:
            r.bad(bad[0], bad[1], bad[2] if len(bad) > 2 else 0, self.now)
        if run is not None:
            r.put_contact(0, run, self.now)
        if trip is not None:
            r.put_contact(1, trip, self.now)
        k = len(self.out)
        self.e.step(self.now)
        return self.out[k:]

    def all(self, **kw):
        kw.setdefault("fan", 0)
        return self.second(**kw)


def test_state_from_contacts_and_first_sample_line():
    g = Rig()
    got = g.all(p=500, i=2000, t=4000, run=1, trip=0)
    assert got == ["P-1 RUNNING P=5.0bar I=20.0A T=40.0C"], got  # FAN-2 logs samples only on change (sample_s 0)
    assert g.all(p=500, i=2000, t=4000) == []  # the next sample line 5 s after the last
    for _ in range(3):
        g.all(p=500, i=2000, t=4000)
    assert g.all(p=500, i=2000, t=4000) == ["P-1 RUNNING P=5.0bar I=20.0A T=40.0C"]
    assert g.all(p=500, i=2000, t=4000, run=0) == ["STATE P-1 RUNNING->STOPPED run=off"]
    assert g.all(p=500, i=2000, t=4000, run=1) == ["STATE P-1 STOPPED->RUNNING run=on"]


def test_running_only_alarm_arms_after_settle_and_delays_count_readings():
    g = Rig()
    g.all(p=500, i=2000, t=4000, run=1, trip=0)
    g.e.m_since[0] = g.now  # just started
    lines = []
    for _ in range(19):  # P above its HI limit (7.5 bar) but the point is not armed yet
        lines += g.all(p=800, i=2000, t=4000)
    assert not [x for x in lines if x.startswith("ALARM")], lines
    lines = []
    for _ in range(4):
        lines += g.all(p=800, i=2000, t=4000)
    raised = [x for x in lines if x.startswith("ALARM")]
    assert raised == ["ALARM HI P-1 discharge_press 8.0bar prio=3 RAISED"], lines
    assert g.levels[g.out.index(raised[0])] == 2
    # within the hysteresis (7.3 bar) nothing clears; below it for 2 readings it does
    assert [x for x in g.all(p=740, i=2000, t=4000) if "CLEAR" in x] == []
    got = g.all(p=700, i=2000, t=4000) + g.all(p=700, i=2000, t=4000)
    assert "CLEAR HI P-1 discharge_press 7.0bar prio=3 RTN_UNACK" in got, got


def test_bad_reading_raises_bad_with_its_reason_and_range():
    g = Rig()
    g.all(p=500, i=2000, t=4000, run=1, trip=0)
    got = []
    for _ in range(3):
        got += g.all(i=2000, t=4000, bad=(P, rd.LOOP_LOW))
    assert "ALARM BAD P-1 discharge_press ? prio=1 RAISED why=loop_low" in got, got
    got = g.all(p=500, i=2000, t=4000) + g.all(p=500, i=2000, t=4000)
    assert "CLEAR BAD P-1 discharge_press 5.0bar prio=1 RTN_UNACK" in got, got
    got = g.all(p=500, i=2000, t=30000)  # T out of its range -20..200 C: BAD (why=range) after 1 reading
    assert "ALARM BAD P-1 bearing_temp ? prio=1 RAISED why=range" in got, got


def test_interlock_trip_and_trip_contact():
    g = Rig()
    g.all(p=500, i=2000, t=4000, run=1, trip=0)
    got = g.all(p=500, i=2000, t=9600)  # HIHI (on-delay 1 reading)
    assert "ALARM HIHI P-1 bearing_temp 96.0C prio=4 RAISED" in got, got
    got = g.all(p=500, i=2000, t=9600, run=0)
    assert got[-1] == "STATE P-1 RUNNING->TRIPPED interlock=HIHI_TEMP", got
    assert g.levels[-1] == 3 and g.e.trips == 1
    assert g.all(p=500, i=2000, t=4000, run=1)[-1] == "STATE P-1 TRIPPED->RUNNING run=on"
    # the condition alone explains a stop whose alarm is not raised yet (its reading came with the stop)
    g2 = Rig()
    g2.all(p=500, i=2000, t=4000, run=1, trip=0)
    g2.e.bank.on_delay[g2.e.s_pt[5 * T + 1]] = 5
    assert g2.all(p=500, i=2000, t=9700, run=0)[-1] == "STATE P-1 RUNNING->TRIPPED interlock=HIHI_TEMP"
    # a trip contact with no interlock point active
    g3 = Rig()
    g3.all(p=500, i=2000, t=4000, run=1, trip=0)
    assert g3.all(p=500, i=2000, t=4000, trip=1)[-1] == "STATE P-1 RUNNING->TRIPPED trip=contact"
    assert g3.all(p=500, i=2000, t=4000, trip=0, run=0)[-1] == "STATE P-1 TRIPPED->STOPPED reset=contact"


def test_current_threshold_state_and_deadband_report_on_change():
    g = Rig()
    g.all(p=500, i=2000, t=4000, run=1, trip=0)
    assert g.all(p=500, i=2000, t=4000, fan=300) == ["STATE FAN-2 STOPPED->RUNNING current=on"]
    assert g.all(p=500, i=2000, t=4000, fan=100) == ["STATE FAN-2 RUNNING->STOPPED current=off"]
    g.all(p=500, i=2000, t=4000)
    got = g.all(p=530, i=2000, t=4000)  # P moved 0.3 bar > deadband 0.2 bar: a sample line now
    assert got == ["P-1 RUNNING P=5.3bar I=20.0A T=40.0C"], got


def test_operator_ack_and_shelve_name_who():
    g = Rig()
    g.all(p=500, i=2000, t=4000, run=1, trip=0)
    g.all(p=500, i=3400, t=4000)  # I HI, no delay, always armed
    by = b"xxalicexx"
    s = g.e.find(b"P-1", 0, 3, b"motor_current", 0, 13)
    assert s == I and g.e.find(b"P-2", 0, 3, b"motor_current", 0, 13) == -1
    assert g.e.operator(ACK, s, -1, by, 2, 5, g.now) == 1
    assert g.out[-1] == "ACK HI P-1 motor_current 34.0A prio=2 ACKED by=alice", g.out[-1]
    assert g.e.operator(ACK, s, -1, by, 2, 5, g.now) == 0  # already acknowledged: nothing logged
    assert g.e.operator(SHELVE, s, 0, by, 2, 5, g.now) == 1
    assert g.out[-1].endswith("SHELVED by=alice")
    assert g.e.operator(UNSHELVE, s, 0, by, 2, 5, g.now) == 1
    assert g.out[-1].startswith("UNSHELVE HI P-1 motor_current")


def test_plant_line_names_the_hash():
    g = Rig()
    g.e.plant_line(0)
    assert g.out[-1] == "PLANT name=skid-1 hash=%s machines=2 signals=4" % g.cfg.hash
    assert len(g.cfg.hash) == 16 or (testkit.IS_MP and g.cfg.hash == "")


def _run_steps(g):
    for k in range(300):
        g.now += 1000
        r = g.r
        r.put(P, 500 + (k % 7) * 60, g.now)
        r.put(I, 2000 + (k % 11) * 150, g.now)
        if k % 13 == 5:
            r.bad(T, rd.I2C, 5, g.now)
        else:
            r.put(T, 4000 + (k % 50) * 120, g.now)
        r.put(FAN, (k // 20 % 2) * 500, g.now)
        r.put_contact(0, 0 if k % 50 >= 48 or k % 50 < 3 else 1, g.now)  # stops while hot: a trip
        r.put_contact(1, 0, g.now)
        g.e.step(g.now)


def test_step_allocates_nothing():
    g = Rig()
    n = [0]

    def count(buf, k, level):
        n[0] += 1

    g.e.emit = count
    g.all(p=500, i=2000, t=4000, run=1, trip=0)
    testkit.run_locked(_run_steps, g)
    assert n[0] > 100 and g.e.trips >= 1 and g.e.raised >= 3


def _parse(data):
    return plantcfg.parse(data, "/plant.json", PROF)


def _set(lst, i, v):
    lst[i] = v


def test_loader_refuses_bad_files_in_one_line():
    def bad(mutate, words):
        d = json.loads(json.dumps(DESC))
        mutate(d)
        e = testkit.raises(plantcfg.PlantConfigError, _parse, json.dumps(d).encode())
        assert words in str(e) and str(e).startswith("/plant.json: "), str(e)

    bad(lambda d: d.update(f=2), "compiled form")
    bad(lambda d: _set(d["machines"][0], 0, "ALARM"), "machines[0][0]")
    bad(lambda d: _set(d["signals"][0], 10, 1), "GPIO 1 carries the link")
    bad(lambda d: _set(d["signals"][1], 10, 7), "unit")
    bad(lambda d: _set(d["alarms"][0], 8, 0), "only HIHI and LOLO")
    bad(lambda d: _set(d["machines"][1], 6, 0), "belongs to another machine")
    bad(lambda d: _set(d["units"][0][3][0], 2, 126), "units[0][3][0][2]")
    bad(lambda d: _set(d["rs485"][0], 0, 0), "UART0 is the link")
    bad(lambda d: _set(d["contacts"][0], 1, 4), "already used")
    e = testkit.raises(plantcfg.PlantConfigError, _parse, json.dumps(DESC).encode()[:-9])
    assert "not valid JSON" in str(e)
