# test_plant.py: the plant simulator gives the same bytes on both interpreters, behaves physically, trips on HIHI,
# follows ISA-18.2, allocates nothing per sample on MicroPython, and rejects bad arguments.
import binascii

import testkit
from shared import plant, plant_alarms
from shared.plant import Plant, PlantError
from shared.plant_alarms import ACK, ACKED, ALARM, BAD, CLEAR, HI, LO, NORMAL, RTN_UNACK, SHELVE, SHELVED, UNACK, UNSHELVE


def run(p, ticks, keep=None):
    """Step `ticks` times; return the lines that contain `keep` (all lines if keep is None)."""
    out = []
    for _ in range(ticks):
        for i in range(p.step()):
            s = p.line(i)
            if keep is None or keep in s:
                out.append(s)
    return out


def advance(p, ticks):
    for _ in range(ticks):
        p.step()


def field(line, key):
    """A sample line's value for key in tenths (rpm: whole units), or None when the reading is missing."""
    w = line.split(" " + key + "=")[1].split(" ")[0]
    if w == "?":
        return None
    digits = ""
    for c in w:
        if c in "-0123456789.":
            digits += c
        else:
            break
    return int(digits.replace(".", ""))


def lines_of(p, ticks):
    """The lines of `ticks` ticks, one at a time (a generator: the MicroPython heap cannot hold them all)."""
    for _ in range(ticks):
        for i in range(p.step()):
            yield p.line(i)


def crc_of(p, ticks):
    buf = bytearray(plant.LINE_MAX)
    crc = 0
    n = 0
    for _ in range(ticks):
        for i in range(p.step()):
            k = p.line_into(i, buf)
            buf[k] = 10
            crc = binascii.crc32(buf[:k + 1], crc)
            n += 1
    return crc & 0xFFFFFFFF, n


def running_pump(seed=5):
    p = Plant(seed, kinds=["pump"], fault_every_h=0)
    p.command("P-101", "start")
    advance(p, 120)
    assert p.state("P-101") == "RUNNING"
    return p


# ---- determinism ----

def test_prng_is_xorshift32_and_stays_below_2_30():
    for seed in (1, 7, 0xDEADBEEF, 0xFFFFFFFF):
        p = Plant(3)
        p._rh = seed >> 16
        p._rl = seed & 0xFFFF
        ref = testkit.Rng(seed)
        for _ in range(2000):
            r = p._rand()
            assert ((p._rh << 16) | p._rl) == ref.next()
            assert 0 <= r < (1 << 30)


def test_same_stream_on_both_interpreters():
    # CRC-32 of the first lines of three configurations (pinned from CPython; MicroPython must match)
    p = Plant(1, fault_every_h=1)
    assert crc_of(p, 5000) == (2545481471, 20020), crc_of(Plant(1, fault_every_h=1), 5000)
    assert p.summary()["faults_started"] == 5
    p = Plant(2026, 7, start_epoch_s=1830297590, sample_every=10, fault_every_h=1)
    assert crc_of(p, 6000) == (2972908101, 4245), crc_of(Plant(2026, 7, start_epoch_s=1830297590,
                                                                 sample_every=10, fault_every_h=1), 6000)
    p = Plant(99, kinds=["P", "M", "C", "CV", "P"], fault_every_h=0, events=1)
    for m, fault, sev, sig in (("P-101", "cavitation", 5, None), ("P-102", "clogged_filter", 5, None),
                               ("M-201", "overheating", 5, None), ("C-301", "bearing_wear", 5, None),
                               ("CV-401", "sensor_dropout", 4, "T"), ("P-101", "drift", 5, "Q"),
                               ("M-201", "stuck_value", 1, "N")):
        p.inject(m, fault, sev, sig)
    for m in p.ids:
        p.command(m, "start")
    got = crc_of(p, 3000)
    s = p.summary()
    assert got == (2072414324, 15035), (got, s)
    assert s["trips"] == 3 and s["events_dropped"] == 3, s
    assert s["alarms_by_prio"] == {1: 1, 2: 2, 3: 2, 4: 3}, s


def test_same_seed_same_lines_different_seed_different_lines():
    a = run(Plant(11), 50)
    assert a == run(Plant(11), 50)
    assert a != run(Plant(12), 50)
    assert a[0].startswith("2026-11-30T06:00:00Z ")


def test_clock_rolls_over_days_months_leap_years():
    buf = bytearray(plant.LINE_MAX)
    # ten seconds before midnight: leap day, after the leap day, no leap day, new year, 2100 (no leap), 2000 (leap)
    for start, after in ((1835395190, "2028-02-29"), (1835481590, "2028-03-01"), (1803859190, "2027-03-01"),
                         (1830297590, "2028-01-01"), (4107542390, "2100-03-01"), (951782390, "2000-02-29"),
                         (1777593590, "2026-05-01")):
        p = Plant(4, 1, start_epoch_s=start)
        for t in range(20):
            p.step()
            p._put_ts(buf)
            assert bytes(buf[:20]).decode() == plant.iso(start + t) == p.timestamp(), (start, t)
        assert p.timestamp().startswith(after + "T00:00:09Z"), p.timestamp()
    p = Plant(4, 1, start_epoch_s=0)
    for t in range(20000):
        p.step()
        if t % 997 == 0:
            p._put_ts(buf)
            assert bytes(buf[:20]).decode() == plant.iso(t)
    assert plant.iso(0) == "1970-01-01T00:00:00Z" and plant.iso(1796018400) == "2026-11-30T06:00:00Z"


# ---- lines ----

def test_lines_have_the_documented_shape():
    p = Plant(8, 6, fault_every_h=1)
    heads = {}
    for s in lines_of(p, 3000):
        ts, rest = s[:20], s[21:]
        assert s[20] == " " and ts[4] == "-" and ts[10] == "T" and ts[19] == "Z", s
        w = rest.split(" ")
        if w[0] in ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE"):
            assert w[1] in ("HI", "HIHI", "LO", "LOLO", "BAD") and w[2] in p.ids and len(w) == 7, s
            assert w[5] in ("prio=1", "prio=2", "prio=3", "prio=4"), s
            assert w[6] in ("RAISED", "ACKED", "RTN_UNACK", "NORMAL", "SHELVED"), s
        elif w[0] == "STATE":
            assert w[1] in p.ids and "->" in w[2] and "=" in w[3] and len(w) == 4, s
        elif w[0] == "LOST":
            assert w[1].startswith("events="), s
        else:
            assert w[0] in p.ids and w[1] in ("STOPPED", "STARTING", "RUNNING", "STOPPING", "TRIPPED"), s
            assert len(w) in (6, 8) and w[2].startswith("T=") and w[3].startswith("V=") and w[4].startswith("I="), s
        assert len(s) <= plant.LINE_MAX
        heads[w[0] if not w[0] in p.ids else "sample"] = 1
    assert "sample" in heads and "STATE" in heads and "ALARM" in heads and "ACK" in heads and "CLEAR" in heads


def test_line_into_matches_line_and_lines():
    p = Plant(21, 5, fault_every_h=1)
    buf = bytearray(plant.LINE_MAX + 7)
    mv = memoryview(bytearray(plant.LINE_MAX))
    for _ in range(200):
        n = p.step()
        got = p.lines()
        assert len(got) == n
        for i in range(n):
            k = p.line_into(i, buf)
            assert bytes(buf[:k]).decode() == got[i] == p.line(i)
            assert p.line_into(i, mv) == k and bytes(mv[:k]) == bytes(buf[:k])


# ---- physics ----

def test_bearing_wear_raises_vibration_and_temperature():
    a = running_pump()
    b = running_pump()
    b.inject("P-101", "bearing_wear", 4)  # fully developed after 10 min of running
    va = []
    vb = []
    ta = tb = 0
    for t in range(420):
        a.step()
        b.step()
        va.append(a.reading("P-101", "V"))
        vb.append(b.reading("P-101", "vibration"))
        ta = a.reading("P-101", "T")
        tb = b.reading("P-101", "bearing_temp")
    assert sum(vb[:60]) - sum(va[:60]) < 60 * 20  # early: within noise of the healthy twin
    late = (sum(vb[-60:]) - sum(va[-60:])) // 60
    assert late > 300, late  # > 3 mm/s more
    assert sum(vb[-60:]) > sum(vb[-120:-60]) > sum(vb[-180:-120])  # a rising trend
    assert tb - ta > 300, (ta, tb)  # bearing temperature creeps up too (> 3 C)
    assert b.state("P-101") == "RUNNING"
    t = b.truth()
    assert len(t) == 1 and t[0]["fault"] == "bearing_wear" and t[0]["active"] and t[0]["machine"] == "P-101"
    assert 600 <= t[0]["progress_permille"] <= 720 and t[0]["since_tick"] == 120


def test_clogged_filter_lowers_flow_and_raises_dp():
    a = running_pump(6)
    b = running_pump(6)
    b.inject("P-101", "clogged_filter", 3)
    advance(a, 300)
    advance(b, 300)
    qa, qb = a.reading("P-101", "Q"), b.reading("P-101", "Q")
    da, db = a.reading("P-101", "dP"), b.reading("P-101", "dP")
    assert qb * 100 < qa * 93, (qa, qb)
    assert db * 10 > da * 18, (da, db)


def test_start_transient_and_stop_ramp():
    p = Plant(9, kinds=["motor"], fault_every_h=0)
    p.command(0, "stop")
    run(p, 30)
    assert p.state("M-201") == "STOPPED"
    p.command("M-201", "start")
    got = run(p, 60)
    assert got[0].split(" ")[2] == "STOPPED" and got[1] == got[0][:20] + " STATE M-201 STOPPED->STARTING cmd=operator"
    starting = [s for s in got if " M-201 STARTING " in s]
    running = [s for s in got if " M-201 RUNNING " in s]
    assert len(starting) == 8 and len(running) > 40
    assert [s for s in got if "STARTING->RUNNING ramp=done" in s]
    inrush = field(starting[0], "I")
    steady = field(running[-1], "I")
    assert inrush > 2 * steady, (inrush, steady)  # starting current
    assert field(starting[0], "N") < field(running[-1], "N")
    p.command("M-201", "stop")
    got = run(p, 30)
    assert "RUNNING->STOPPING cmd=operator" in got[1] and [s for s in got if "STOPPING->STOPPED ramp=done" in s]
    assert field(got[-1], "N") == 0 and field(got[-1], "I") < 5


def test_sensor_dropout_gives_missing_readings_and_a_bad_alarm():
    p = running_pump(7)
    p.inject("P-101", "sensor_dropout", 3, "T")  # 3 in 5 readings missing
    got = run(p, 300)
    samples = [s for s in got if " P-101 RUNNING " in s]
    missing = len([s for s in samples if " T=? " in s])
    assert 120 < missing < 240, missing
    assert [field(s, "V") for s in samples if field(s, "V") is None] == []  # the other sensors are fine
    bad = [s for s in got if " BAD P-101 bearing_temp " in s]
    assert bad and bad[0].endswith(" ? prio=1 RAISED"), bad
    assert len([s for s in bad if s.endswith("RAISED")]) == 1  # off-delay 60: no chatter
    t = p.truth()[0]
    assert t["fault"] == "sensor_dropout" and t["signal"] == "bearing_temp" and t["active"]


def test_stuck_value_stays_constant():
    a = running_pump(8)
    b = running_pump(8)
    b.inject("P-101", "stuck_value", 1, "V")
    va, vb, ia, ib = [], [], [], []
    for t in range(200):
        if t == 100:
            a.command("P-101", "stop")
            b.command("P-101", "stop")
        a.step()
        b.step()
        va.append(field(a.line(0), "V"))
        vb.append(field(b.line(0), "V"))
        ia.append(field(a.line(0), "I"))
        ib.append(field(b.line(0), "I"))
    assert len(set(vb)) == 1, set(vb)  # running, stopping and stopped: one value
    assert len(set(va)) > 3 and va[-1] < 2  # the healthy twin's vibration varies, then stops
    assert ia == ib and ia[-1] < ia[50] // 10  # the other readings are untouched


def test_drift_adds_its_rate_per_hour():
    a = running_pump(10)
    b = running_pump(10)
    b.inject("P-101", "drift", 5, "T")  # 5 x 3 C/h
    advance(a, 3600)
    advance(b, 3600)
    assert abs(b.reading("P-101", "T") - a.reading("P-101", "T")) == 1500


def test_compressor_loads_and_unloads_within_its_band():
    p = Plant(12, kinds=["compressor"], fault_every_h=0)
    p.command(0, "start")
    advance(p, 600)
    lo, hi = 10 ** 9, 0
    for _ in range(900):
        p.step()
        v = p.reading(0, "P")
        lo, hi = min(lo, v), max(hi, v)
    cut_in = p.nom[3]  # channel P of machine 0: the cut-in pressure
    assert cut_in - 30 <= lo and hi <= cut_in + 130 and hi - lo > 80, (cut_in, lo, hi)


# ---- interlocks and alarms ----

def test_a_trip_follows_a_hihi_then_repair_and_reset():
    p = running_pump(13)
    p.inject("P-101", "bearing_wear", 5)
    trip = None
    for t in range(600):
        got = run(p, 1)
        if p.state("P-101") == "TRIPPED":
            trip = got
            break
    assert trip is not None, "no trip within 600 s of severe bearing wear"
    tail = [s[21:] for s in trip if " P-101 " in s and not s[21:].startswith("P-101")]
    assert tail[-2].startswith("ALARM HIHI P-101 vibration ") and tail[-2].endswith(" prio=4 RAISED"), tail
    assert tail[-1] == "STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB", tail
    assert float(tail[-2].split(" ")[4][:-4]) > 11.0
    assert p.trips == 1 and p.summary()["trips_by_interlock"]["HIHI_VIB"] == 1
    got = []
    reset_tick = -1
    for _ in range(3000):
        lines = [s for s in run(p, 1) if not s[21:].startswith("P-101 ")]  # events only
        got += lines
        if reset_tick < 0 and [s for s in lines if "STATE P-101 TRIPPED->STOPPED reset=operator" in s]:
            reset_tick = p.tick
    assert reset_tick > 0, got[-5:]
    assert [s for s in got if "STATE P-101 STOPPED->STARTING cmd=operator" in s]  # hand mode: starts again
    t = p.truth()[0]
    assert t["fault"] == "bearing_wear" and not t["active"] and t["ended_by"] == "repair"
    assert t["until_tick"] <= reset_tick and reset_tick - t["until_tick"] < 600  # repaired, cooled down, reset
    acks = [s for s in got if s[21:].startswith("ACK HIHI P-101 vibration")]
    assert len(acks) == 1  # the operator acknowledged the trip alarm


def test_interlock_blocks_a_start():
    p = Plant(14, kinds=["pump"], fault_every_h=0)
    p.command(0, "stop")
    run(p, 30)
    p.inject(0, "drift", 5, "dP", 0)
    for _ in range(10):
        p.faults.sval[0] = 12000 * 3600  # the strainer dP now reads 120 kPa more: beyond its HIHI
        run(p, 1)
    assert p.trip_now[0] == 4  # HIHI_DP is active
    p.command(0, "start")
    got = run(p, 60)
    assert p.state(0) == "STOPPED" and not [s for s in got if "STARTING" in s]


def test_isa_raise_ack_clear():
    bank = plant_alarms.AlarmBank(2)
    bank.configure(0, HI, 1000, 50, 3, 2, 2)
    assert [bank.evaluate(0, 1001, 1) for _ in range(3)] == [-1, -1, ALARM << 3 | UNACK]
    assert bank.state[0] == UNACK and bank.active[0] == 1
    assert bank.ack(0) == ACK << 3 | ACKED and bank.ack(0) == -1
    assert bank.evaluate(0, 960, 1) == -1  # inside the deadband: still active
    assert bank.evaluate(0, 950, 1) == -1 and bank.evaluate(0, 950, 1) == CLEAR << 3 | NORMAL
    assert bank.state[0] == NORMAL and bank.ack(0) == -1
    assert plant_alarms.STATES[UNACK] == b"RAISED" and plant_alarms.VERBS[ALARM] == b"ALARM"


def test_isa_clear_before_ack_and_reraise():
    bank = plant_alarms.AlarmBank(1)
    bank.configure(0, LO, 100, 10, 1, 1, 3)
    assert bank.evaluate(0, 99, 1) == ALARM << 3 | UNACK
    assert bank.evaluate(0, 111, 1) == CLEAR << 3 | RTN_UNACK  # returned to normal, not acknowledged
    assert bank.evaluate(0, 50, 1) == ALARM << 3 | UNACK  # comes back: annunciated again
    assert bank.evaluate(0, 200, 1) == CLEAR << 3 | RTN_UNACK
    assert bank.ack(0) == ACK << 3 | NORMAL and bank.state[0] == NORMAL


def test_isa_shelving_and_state_based_disarm():
    bank = plant_alarms.AlarmBank(2)
    bank.configure(1, BAD, 0, 0, 2, 5, 1)
    assert bank.shelve(1) == SHELVE << 3 | SHELVED and bank.shelve(1) == -1
    assert [bank.evaluate(1, 1, 1) for _ in range(4)] == [-1, -1, -1, -1]  # active but shelved: silent
    assert bank.active[1] == 1
    assert bank.unshelve(1) == UNSHELVE << 3 | UNACK and bank.unshelve(1) == -1
    bank.shelve(1)
    for _ in range(5):
        bank.evaluate(1, 0, 1)
    assert bank.active[1] == 0 and bank.unshelve(1) == UNSHELVE << 3 | NORMAL
    bank.configure(0, HI, 10, 0, 5, 5, 4)
    for _ in range(5):
        bank.evaluate(0, 11, 1)
    assert bank.state[0] == UNACK
    assert bank.evaluate(0, 11, 0) == CLEAR << 3 | RTN_UNACK  # disarmed (machine stopped): clears at once
    assert bank.evaluate(1, 0, 1) == -1 and bank.evaluate(0, 0, 1) == -1  # unused level / no change


def test_deadband_and_delays_stop_chatter():
    rng = testkit.Rng(5)
    noisy = [1000 + rng.below(61) - 30 for _ in range(2000)]  # +-3 % around the limit
    bank = plant_alarms.AlarmBank(2)
    bank.configure(0, HI, 1000, 50, 5, 10, 2)  # deadband 5 %, on-delay 5, off-delay 10
    bank.configure(1, HI, 1000, 0, 0, 0, 2)  # neither
    raised = [0, 0]
    for v in noisy:
        for p in (0, 1):
            if bank.evaluate(p, v, 1) == ALARM << 3 | UNACK:
                raised[p] += 1
    assert raised[0] == 1 and raised[1] > 300, raised


def test_event_overflow_is_counted_and_reported():
    p = Plant(15, kinds=["pump"], fault_every_h=0, events=1)
    p.command(0, "start")
    run(p, 60)
    p.inject(0, "bearing_wear", 5)
    got = run(p, 400)
    got += run(p, 1)  # a LOST line reports the previous tick's losses
    assert p.dropped > 0
    lost = [s for s in got if " LOST events=" in s]
    assert lost and sum(int(s.split("=")[1]) for s in lost) == p.dropped
    assert p.summary()["events_dropped"] == p.dropped


# ---- the node's hot path ----

def _hot(ctx):
    p = ctx[0]
    buf = ctx[1]
    total = 0
    for _ in range(ctx[2]):
        n = p.step()
        for i in range(n):
            total += p.line_into(i, buf)
    return total


def test_step_and_line_into_allocate_nothing():
    before = testkit.heap_in_use()
    p = Plant(16, 4, fault_every_h=1, events=1)
    after = testkit.heap_in_use()
    if testkit.IS_MP:
        print("plant heap bytes:", after - before)
        assert after - before < 16000, after - before
    for m, f in (("P-101", "bearing_wear"), ("C-301", "clogged_filter"), ("CV-401", "overheating"),
                 ("M-201", "sensor_dropout")):
        p.inject(m, f, 5)
        p.command(m, "start")
    ctx = [p, bytearray(plant.LINE_MAX), 4000]
    assert testkit.run_locked(_hot, ctx) > 4000 * 4 * 60
    s = p.summary()
    assert s["trips"] >= 3 and s["events_dropped"] > 0 and s["faults_started"] > 4, s
    assert len([t for t in p.truth() if t["ended_by"] == "repair"]) >= 2


def _sniffed(buf, off, k):
    """The level firmware/sampler.py read from a line's text before the plant gave it (the reference)."""
    ts = 21  # "YYYY-MM-DDTHH:MM:SSZ "
    c = buf[off + ts] if k > ts else 0
    if c == 65 or c == 76:  # ALARM ..., ACK ..., LOST ...
        return 2
    if c == 83 and k > ts + 6:  # STATE ... (or SHELVE ...): an interlock trip is an error
        for j in range(off + ts, off + k - 9):
            if buf[j] == 105 and buf[j + 1] == 110 and buf[j + 2] == 116 and buf[j + 8] == 107:  # "interlock"
                return 3
    return 1


def _stored_levels(events, ticks, levels, starts):
    """Run the node's Sampler over a plant with a fault on every machine; check each stored line's level
    against the sniffed one and count the levels and the first word of the lines that are not samples."""
    from firmware.logq import LineQueue
    from firmware.sampler import Sampler

    q = LineQueue(4)
    smp = Sampler(q, 16, 4, 5, 1000)
    p = smp.plant = Plant(16, 4, sample_every=5, events=events)
    for m, f in (("P-101", "bearing_wear"), ("C-301", "clogged_filter"), ("CV-401", "overheating"),
                 ("M-201", "sensor_dropout")):
        p.inject(m, f, 5)
        p.command(m, "start")
    for t in range(ticks):
        smp.tick(t)
        while q.count:
            off = q.first()
            k = q.lens[q.head]
            lv = q.levels[q.head]
            assert lv == _sniffed(q.buf, off, k), bytes(q.buf[off:off + k])
            levels[lv] += 1
            w = bytes(q.buf[off + 21:off + 24])
            starts[w] = starts.get(w, 0) + 1
            q.pop()


def test_line_levels_are_the_ones_the_sampler_sniffed():
    # long, eventful runs through the node's Sampler (trips, a BAD alarm shelved for an hour and
    # unshelved; with one event slot, LOST lines): every stored line's level is what the text sniffing
    # gave, and every level and every kind of line occurs
    levels = [0, 0, 0, 0]
    starts = {}
    _stored_levels(2, 5000, levels, starts)
    _stored_levels(1, 800, levels, starts)
    assert levels[0] == 0 and min(levels[1:]) > 0, levels
    assert {b"ALA", b"ACK", b"CLE", b"SHE", b"UNS", b"STA", b"LOS"} <= set(starts), starts


# ---- bad arguments ----

def test_bad_arguments_raise_clear_value_errors():
    for kw in ({"seed": -1}, {"seed": 1 << 32}, {"seed": "1"}, {"seed": 1.0}, {"seed": True}):
        e = testkit.raises(PlantError, lambda a: Plant(**a), kw)
        assert "seed" in str(e)
    assert "n_machines" in str(testkit.raises(PlantError, Plant, 1, 0))
    assert "n_machines" in str(testkit.raises(PlantError, Plant, 1, 17))
    assert "start_epoch_s" in str(testkit.raises(PlantError, Plant, 1, 4, -5))
    assert "sample_every" in str(testkit.raises(PlantError, Plant, 1, 4, 0, 0))
    assert "fault_every_h" in str(testkit.raises(PlantError, Plant, 1, 4, 0, 1, -1))
    assert "events" in str(testkit.raises(PlantError, Plant, 1, 4, 0, 1, 1, 0))
    assert "boiler" in str(testkit.raises(PlantError, Plant, 1, None, 0, 1, 1, 8, ["boiler"]))
    assert "disagrees" in str(testkit.raises(PlantError, Plant, 1, 3, 0, 1, 1, 8, ["P"]))
    assert "kinds" in str(testkit.raises(PlantError, Plant, 1, None, 0, 1, 1, 8, "P"))
    assert issubclass(PlantError, ValueError)
    p = Plant(1, kinds=["pump", "motor"])
    assert "X-999" in str(testkit.raises(PlantError, p.inject, "X-999", "drift"))
    assert "P-101" in str(testkit.raises(PlantError, p.inject, 5, "drift"))
    assert "rust" in str(testkit.raises(PlantError, p.inject, 0, "rust"))
    assert "severity" in str(testkit.raises(PlantError, p.inject, 0, "drift", 0))
    assert "severity" in str(testkit.raises(PlantError, p.inject, 0, "drift", 6))
    assert "severity" in str(testkit.raises(PlantError, p.inject, 0, "drift", "3"))
    assert "cavitation" in str(testkit.raises(PlantError, p.inject, "M-201", "cavitation"))
    assert "Q" in str(testkit.raises(PlantError, p.inject, "M-201", "drift", 2, "Q"))
    assert "sensor faults" in str(testkit.raises(PlantError, p.inject, 0, "bearing_wear", 2, "T"))
    p.inject(0, "bearing_wear")
    assert "already" in str(testkit.raises(PlantError, p.inject, 0, "overheating"))
    assert "duration_s" in str(testkit.raises(PlantError, p.inject, 0, "drift", 2, "T", -1))
    assert "command" in str(testkit.raises(PlantError, p.command, 0, "jog"))
    n = p.step()
    buf = bytearray(plant.LINE_MAX)
    assert "out of range" in str(testkit.raises(PlantError, p.line_into, n, buf))
    assert "out of range" in str(testkit.raises(PlantError, p.line_into, -1, buf))
    assert "bytearray" in str(testkit.raises(PlantError, p.line_into, 0, bytearray(plant.LINE_MAX - 1)))
    assert "bytearray" in str(testkit.raises(PlantError, p.line_into, 0, bytes(plant.LINE_MAX)))
    assert "alarm" in str(testkit.raises(ValueError, plant_alarms.AlarmBank, 0))
    bank = plant_alarms.AlarmBank(1)
    assert "prio" in str(testkit.raises(ValueError, bank.configure, 0, HI, 0, 0, 0, 0, 5))
    assert "level" in str(testkit.raises(ValueError, bank.configure, 0, 9, 0, 0, 0, 0, 1))
    assert "deadband" in str(testkit.raises(ValueError, bank.configure, 0, HI, 0, -1, 0, 0, 1))
    assert "point" in str(testkit.raises(ValueError, bank.configure, 1, HI, 0, 0, 0, 0, 1))
