"""More of the record's answers in an operator's words, on generated plants simulated with faults (the Plant of
tests/host/test_ask_operator.py): who acknowledged an alarm (the ACK line's by=NAME), a signal's highest or lowest
reading in a span, a store where nothing is in alarm answered without a window to rank, why a machine tripped, when
an alarm was acknowledged, a signal named by its tag, operators' short misspellings and words for a trip, how many
machines tripped. Every expected answer
is read here from the lines the store was made of; the questions are written here, none from the benches' sets."""

from __future__ import annotations

import datetime
import re

import pytest

from host import askintent, qa
from tests.host.test_ask_operator import Plant
from tools.plants import generate

OPERATORS = ("olga", "tariq", "mei-ling", "j.okafor")


class AckedPlant(Plant):
    """A Plant whose operators acknowledge under their own names (by=NAME, as the node logs an `edgetwin ack`)."""

    def _acks(self, n: int) -> list:
        out = []
        self.acked = []  # (tick of the ACK, name, the raise it acknowledges)
        for i, (t, line) in enumerate(super()._acks(n)):
            name = OPERATORS[i % len(OPERATORS)]
            out.append((t, line.replace("by=olga", "by=" + name)))
            raised = next(e for e in self.sim.events if e.get("acked") == t and e["event"] == "alarm"
                          and " %s %s " % (e["machine"], e["tag"]) in line)
            self.acked.append((t, name, raised, out[-1][1]))
        return out

    def samples(self, mid: str, key: str, t0: int = 0, t1: int | None = None) -> list[tuple[int, str, float]]:
        """(tick, value as written, number) of the machine's readings of `key` in ticks t0..t1, from the log file:
        its sample lines' KEY=value and the values its alarm lines of the signal's tag carry."""
        t1 = self.now_tick if t1 is None else t1
        tag = next(s["tag"] for s in self.machine(mid)["signals"] if s["key"] == key)
        out = []
        for line in (self.db.parent / "plant.log").read_text().splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            tick = int(datetime.datetime.strptime(parts[0], "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=datetime.timezone.utc).timestamp()) - self.epoch
            if parts[1] in ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE") and len(parts) > 5 and parts[3] == mid \
                    and parts[4] == tag and t0 <= tick <= t1:
                num = re.match(r"-?\d+(?:\.\d+)?", parts[5])
                if num:
                    out.append((tick, parts[5], float(num.group(0))))
                continue
            if parts[1] != mid:
                continue
            for kv in parts[3:]:
                k, _, v = kv.partition("=")
                num = re.match(r"-?\d+(?:\.\d+)?", v)
                if k == key and num and t0 <= tick <= t1:
                    out.append((tick, v, float(num.group(0))))
        return out


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> AckedPlant:
    desc = generate.plant(31, "seen", kinds=["centrifugal pump", "steam boiler", "water chiller", "belt conveyor"],
                          scheme="isa")
    pump, boiler, chiller, cv = (m["id"] for m in desc["machines"])
    return AckedPlant(tmp_path_factory.mktemp("seen"), desc, [(pump, "cavitation", 3000, 3),
                                                              (chiller, "condenser_fouling", 12000, 2),
                                                              (boiler, "low_water", 30000, 4),
                                                              (cv, "gearbox_wear", 39000, 2)], acks=3, seed=5)


@pytest.fixture(scope="module")
def unseen(tmp_path_factory) -> AckedPlant:
    desc = generate.plant(32, "unseen", kinds=["rotary kiln", "cooling tower", "batch mixer"], scheme="area")
    kiln, tower, mixer = (m["id"] for m in desc["machines"])
    return AckedPlant(tmp_path_factory.mktemp("unseen"), desc, [(kiln, "overfiring", 5000, 3),
                                                                (mixer, "runaway", 21000, 2),
                                                                (tower, "fan_bearing_wear", 38000, 3)], acks=3, seed=6)


def _body(text: str) -> str:
    return text.split("\nLines (UTC):")[0]


# ---------------------------------------------------------------------------------------------- who acknowledged


def test_who_acknowledged_an_alarm_names_the_operator_of_its_ack_line(seen, unseen):
    for p in (seen, unseen):
        assert p.acked, "each simulation ends with alarms an operator acknowledged"
        for tick, name, e, line in p.acked:
            r = p.ask("Who acknowledged the %s %s alarm on %s?" % (e["level"], e["tag"], e["machine"]))
            said = "%s acknowledged the %s %s alarm of %s (raised %s) at %s site time" % (
                name, e["level"], e["tag"], e["machine"], p.hm(e["tick"]), p.hm(tick))
            assert said in r.answer, r.answer
            assert line in r.answer.split("\nLines (UTC): ")[1], r.answer  # the ACK line quoted
            assert any(line in w.text for w in r.windows[:r.pinned]), [w.text for w in r.windows]
    # "the last alarm" of a machine in its own words: that raise only, acknowledged or not
    asked = 0
    for p in (seen, unseen):
        for tick, name, e, _ in p.acked:
            if p.events("alarm", e["machine"])[-1] is not e:
                continue
            asked += 1
            words = p.machine(e["machine"]).get("words") or [e["machine"]]
            r = p.ask("which operator took the last alarm on the %s?" % words[0])
            assert _body(r.answer) == "%s acknowledged the %s %s alarm of %s (raised %s) at %s site time on %s." % (
                name, e["level"], e["tag"], e["machine"], p.hm(e["tick"]), p.hm(tick),
                datetime.datetime.fromtimestamp(p.epoch + tick, p.tz).strftime("%Y-%m-%d")), r.answer
    assert asked, "some machine's last alarm was acknowledged"


def test_an_alarm_nobody_acknowledged_is_said_so(seen, unseen):
    for p in (seen, unseen):
        acked = {(e["machine"], e["level"], e["tag"]) for _, _, e, _ in p.acked}
        never = [e for e in p.sim.events if e["event"] == "alarm" and (e["machine"], e["level"], e["tag"]) not in acked]
        assert never, "the simulation raised alarms nobody acknowledged"
        e = never[0]
        r = p.ask("did anyone acknowledge the %s %s alarm on %s?" % (e["level"], e["tag"], e["machine"]))
        assert "The %s %s alarm of %s raised at %s site time was never acknowledged" % (
            e["level"], e["tag"], e["machine"], p.hm(e["tick"])) in r.answer, r.answer
        assert " acknowledged the " not in r.answer, r.answer


# ---------------------------------------------------------------------------------------------- peaks


def _temperatures(p: AckedPlant, mid: str) -> list[dict]:
    return [s for s in p.machine(mid)["signals"] if any("temperature" in w for w in s.get("words", []))]


def test_how_hot_did_a_machine_get(seen, unseen):
    for p, mid in ((seen, seen.ids[1]), (unseen, unseen.ids[0])):  # the boiler, the kiln
        temps = _temperatures(p, mid)
        assert temps
        r = p.ask("how hot did %s get?" % mid)
        for s in temps:
            top = max(p.samples(mid, s["key"]), key=lambda x: x[2])
            first = next(x for x in p.samples(mid, s["key"]) if x[2] == top[2])  # the first sample of the peak
            assert re.search(r"The highest [^.]*\(%s\) of %s [^.]* was %s, at %s site time" % (
                s["tag"], re.escape(mid), re.escape(first[1]), p.hm(first[0])), r.answer), (s["tag"], r.answer)
        assert len(re.findall(r"The highest", r.answer)) == len(temps), r.answer


def test_the_highest_and_lowest_of_a_named_signal_in_a_span(seen, unseen):
    pump = seen.ids[0]
    sig = next(s for s in seen.machine(pump)["signals"] if s["unit"] in ("bar", "psig", "psi", "kPa"))
    t0 = seen.tick_at(30, 0)
    got = seen.samples(pump, sig["key"], t0=t0)
    top = max(got, key=lambda x: x[2])
    top = next(x for x in got if x[2] == top[2])
    r = seen.ask("what was the highest %s on %s today?" % (sig["words"][0], pump))
    assert "was %s, at %s site time" % (top[1], seen.hm(top[0])) in r.answer and "today" in r.answer, r.answer
    r = seen.ask("how high did the pressure go on %s today?" % pump)
    assert "was %s, at %s site time" % (top[1], seen.hm(top[0])) in r.answer, r.answer
    # the lowest, between two times across midnight
    boiler = seen.ids[1]
    level = next(s for s in seen.machine(boiler)["signals"] if "level" in " ".join(s.get("words", [])))
    t0, t1 = seen.tick_at(29, 23), seen.tick_at(30, 7, 30)
    got = seen.samples(boiler, level["key"], t0=t0, t1=t1)
    low = min(got, key=lambda x: x[2])
    low = next(x for x in got if x[2] == low[2])
    r = seen.ask("lowest %s of the %s between 23:00 and 07:30" % (level["words"][0], boiler))
    assert _body(r.answer).startswith("The lowest") and "was %s, at %s site time" % (low[1], seen.hm(low[0])) in \
        r.answer, r.answer
    # a held-out plant: its vibration's peak on the night shift
    tower = unseen.ids[1]
    vib = next(s for s in unseen.machine(tower)["signals"] if "vibration" in " ".join(s.get("words", [])))
    t0, t1 = unseen.tick_at(29, 22), unseen.tick_at(30, 6) - 1
    got = unseen.samples(tower, vib["key"], t0=t0, t1=t1)
    top = max(got, key=lambda x: x[2])
    top = next(x for x in got if x[2] == top[2])
    r = unseen.ask("peak vibration of %s on the night shift?" % tower)
    assert "was %s, at %s site time" % (top[1], unseen.hm(top[0])) in r.answer, r.answer
    assert any(" %s " % tower in w.text and "%s=%s" % (vib["key"], top[1]) in w.text for w in r.windows[:r.pinned])


# ---------------------------------------------------------------------------------------------- nothing in alarm


def test_a_store_with_nothing_in_alarm_is_answered_without_windows(tmp_path):
    desc = generate.plant(33, "unseen", kinds=["cooling tower", "control valve"], scheme="area")
    p = Plant(tmp_path / "quiet", desc, [], acks=0, seed=7)
    assert not [e for e in p.sim.events if e["event"] in ("alarm", "trip")], "a quiet plant, no fault"
    for q, said in (("what is still in alarm now?", "No alarm is still active at the end of the log"),
                    ("how many trips today?", "0 trips today"),
                    ("how many alarms were there on the night shift?", "0 alarms raised on the night shift")):
        res = qa.ask(q, p.db, None, lambda: None)  # no reranker, no target: the record answers alone
        assert res["by_record"] and res["answer"].startswith(said), res["answer"]
        assert res["chosen"] == [] and res["said"] is None
        res = qa.ask(q, p.db, None, None)  # rank only (`ask --no-answer`): no error either
        assert res["answer"].startswith(said)


def test_never_acknowledged_is_not_said_where_the_node_lost_lines(seen, tmp_path):
    """A LOST line after the raise: the ACK may be among the lines the node dropped, so the record does not say
    "never"."""
    from host import cmd_import, plantdesc

    acked = {(e["machine"], e["level"], e["tag"]) for _, _, e, _ in seen.acked}
    e = next(e for e in seen.sim.events if e["event"] == "alarm" and (e["machine"], e["level"], e["tag"]) not in acked)
    lines = (seen.db.parent / "plant.log").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if " ALARM %s %s %s " % (e["level"], e["machine"], e["tag"]) in ln)
    lines.insert(at + 1, lines[at][:21] + "LOST events=3")
    (tmp_path / "plant.log").write_text("\n".join(lines) + "\n")
    db = tmp_path / "lost.db"
    cmd_import.import_log(tmp_path / "plant.log", db, "node-1", desc=plantdesc.load(seen.db.parent / "plant.json"))
    r = qa.retrieve(db, "did anyone acknowledge the %s %s alarm on %s?" % (e["level"], e["tag"], e["machine"]),
                    limit=4, lines=6)
    assert "never acknowledged" not in r.answer.split("raised at %s" % seen.hm(e["tick"]))[1].split(".")[0], r.answer
    assert "the record cannot say whether anyone acknowledged it" in r.answer, r.answer


# ---------------------------------------------------------------------------------------------- why a machine tripped


def _lock(trip: dict) -> str:
    return trip["cause"].split("=", 1)[1]


def test_why_a_machine_tripped_is_its_interlock_and_that_points_alarm(seen, unseen):
    for p in (seen, unseen):
        trips = [e for e in p.events("trip") if e["cause"].startswith("interlock=")]
        assert trips, "the faults trip machines"
        e = trips[0]
        mid, lock = e["machine"], _lock(e)
        sig, point = next((s, a) for s in p.machine(mid)["signals"] for a in s.get("alarms", [])
                          if a.get("interlock") == lock)
        raised = [a for a in p.events("alarm", mid, point["level"])
                  if a["tag"] == sig["tag"] and a["tick"] <= e["tick"]]
        for q in ("what made %s trip?" % mid, "%s went down - what was the reason?" % mid,
                  "which interlock shut %s down?" % mid, "what tripped %s?" % mid, "the %s - what stopped it?" % mid):
            r = p.ask(q)
            body = _body(r.answer)
            assert body.startswith("%s tripped at %s site time" % (mid, p.hm(e["tick"]))) or \
                "%s tripped at %s site time" % (mid, p.hm(e["tick"])) in body, (q, r.answer)
            assert "on interlock %s: %s %s" % (lock, mid, sig["tag"]) in body, (q, r.answer)
            assert "went %s" % point["level"] in body and "(alarm raised %s)" % p.hm(raised[-1]["tick"]) in body, \
                (q, r.answer)
            lines = r.answer.split("\nLines (UTC): ")[1]
            assert "STATE %s RUNNING->TRIPPED interlock=%s" % (mid, lock) in lines and \
                "ALARM %s %s %s " % (point["level"], mid, sig["tag"]) in lines, lines


def test_a_trip_asked_about_at_a_nearby_time_and_a_machine_that_never_tripped(unseen):
    p = unseen
    e = next(e for e in p.events("trip") if e["cause"].startswith("interlock="))
    later = p.hm(e["tick"] + 50 * 60)  # "around" reads 30 minutes either side: the trip is 20 minutes outside
    r = p.ask("why did %s trip around %s?" % (e["machine"], later))
    assert _body(r.answer).startswith("The trip nearest around %s: %s tripped at %s site time" % (
        later, e["machine"], p.hm(e["tick"]))), r.answer
    calm = [m for m in p.ids if not p.events("trip", m)]
    for mid in calm:
        r = p.ask("why did %s trip?" % mid)
        assert r.answer.startswith("Nothing of the kind in the log since ") and "no trip of %s" % mid in r.answer, \
            r.answer


# ---------------------------------------------------------------------------------------------- operators' spelling


def test_short_asking_words_mend_and_words_of_their_own_stay(seen):
    v = seen.vocab
    assert askintent.normalize("hwo many trips today", v) == "how many trips today"
    assert askintent.normalize("waht happened, whn did it stop, is it stil in alarm", v) == \
        "what happened, when did it stop, is it still in alarm"
    assert askintent.normalize("how hot did the two pumps get, who knows", v) == \
        "how hot did the two pumps get, who knows"  # hot, two and who are words
    for q in ("when did the pump go down?", "what time did it drop out", "what knocked the chiller out?",
              "the boiler went down this morning"):
        assert askintent.events(q) == ("trip",), q
    assert askintent.events("how far did the level go down to?") == ()  # a level going down is no trip


def test_how_many_machines_tripped_counts_machines(seen, unseen):
    for p in (seen, unseen):
        ids = list(dict.fromkeys(e["machine"] for e in p.events("trip")))
        r = p.ask("hwo many machines went down?")
        assert _body(r.answer).startswith("%d machine%s with trips since " % (len(ids), "s" if len(ids) != 1 else "")
                                          ) and all(m in r.answer for m in ids), r.answer


def test_when_an_alarm_was_acknowledged_comes_from_its_ack_line(seen, unseen):
    for p in (seen, unseen):
        for tick, name, e, _ in p.acked:
            r = p.ask("when was the %s %s alarm on %s acknowledged?" % (e["level"], e["tag"], e["machine"]))
            assert "%s acknowledged the %s %s alarm of %s (raised %s) at %s site time" % (
                name, e["level"], e["tag"], e["machine"], p.hm(e["tick"]), p.hm(tick)) in r.answer, r.answer
            assert "never acknowledged" not in r.answer, r.answer


def test_a_signal_named_by_its_tag(unseen):
    p = unseen
    kiln = p.ids[0]
    alarmed = {e["tag"] for e in p.events("alarm", kiln)}
    quiet = [s["tag"] for s in p.machine(kiln)["signals"] if s["tag"] not in alarmed and s.get("alarms")]
    assert alarmed and quiet
    tag = sorted(alarmed)[0]
    first = next(e for e in p.events("alarm", kiln) if e["tag"] == tag)
    r = p.ask("when did %s first raise a %s alarm?" % (kiln, tag))
    assert _body(r.answer).startswith("The first ") and "was at %s site time" % p.hm(first["tick"]) in r.answer \
        and " %s alarm raised" % tag in r.answer, r.answer
    r = p.ask("when did %s first raise a %s alarm?" % (kiln, quiet[0]))
    assert r.answer.startswith("Nothing of the kind in the log since ") and kiln in r.answer, r.answer


def test_what_tripped_with_no_machine_lists_the_trips(seen, unseen):
    for p in (seen, unseen):
        trips = p.events("trip")
        assert trips
        r = p.ask("what tripped?")
        body = _body(r.answer)
        assert body.startswith("%d trip%s since " % (len(trips), "s" if len(trips) != 1 else "")), r.answer
        for e in trips[:5]:
            assert "%s %s tripped" % (p.hm(e["tick"]), e["machine"]) in body, (e, r.answer)


def test_a_bare_hour_ending_the_question_is_a_time_and_a_count_is_not(seen):
    """"before 2?" at the end of a night (20:00-08:00): up to 02:00, the 2 the log has a before of; "after 2
    alarms" is no time."""
    p = seen
    mid = next(m for m in p.ids if p.events("alarm", m))
    two = p.tick_at(30, 2)
    before = [e for e in p.events("alarm", mid) if e["tick"] <= two]
    r = p.ask("was %s ever in alarm before 2?" % mid)
    body = _body(r.answer)
    assert re.search(r"\(20:0\d-02:00 site time", body), r.answer  # from the log's first line
    if before:
        assert body.startswith("Yes: %d alarm%s raised of %s before 2" % (
            len(before), "s" if len(before) != 1 else "", mid)), r.answer
    else:
        assert body.startswith("Nothing of the kind") and "before 2" in body, r.answer
    r = p.ask("did %s trip after 2 alarms?" % mid)
    assert "after 2" not in _body(r.answer) and re.search(r" since 20:0\d site time", _body(r.answer)), r.answer


def test_which_machine_tripped_and_why_gives_each_trips_interlock(seen, unseen):
    """The demo's own question, no machine named: each trip (the first MAX_ITEMS) with its interlock, from the
    record."""
    from host.askrecord import MAX_ITEMS

    for p in (seen, unseen):
        trips = [e for e in p.events("trip") if e["cause"].startswith("interlock=")]
        r = p.ask("Which machine stopped or tripped, and why?")
        body = _body(r.answer)
        for e in trips[:MAX_ITEMS]:
            assert "%s tripped at %s site time" % (e["machine"], p.hm(e["tick"])) in body, (e, r.answer)
            assert "on interlock %s" % _lock(e) in body, (e, r.answer)
        assert "STATE %s RUNNING->TRIPPED" % trips[0]["machine"] in r.answer.split("\nLines (UTC): ")[1]


def test_keywords_typed_as_into_a_search_box_list_the_events(seen, unseen):
    """"alarms on the kiln today", "trips today": no asking word, as an operator types into a search box; the record
    lists them (they went to the target before). A sentence that only mentions alarms is not a list."""
    for p in (seen, unseen):
        today = datetime.datetime.fromtimestamp(p.epoch + p.now_tick, p.tz).day
        t0 = p.tick_at(today, 0)
        mid = max(p.ids, key=lambda m: len(p.events("alarm", m, t0=t0)))
        alarms = p.events("alarm", mid, t0=t0)
        assert alarms
        body = _body(p.ask("alarms on %s today" % mid).answer)
        assert body.startswith("%d alarm%s raised of %s today" % (len(alarms), "s" if len(alarms) != 1 else "", mid)), \
            body
        assert "%s %s" % (p.hm(alarms[0]["tick"]), alarms[0]["level"]) in body, (alarms[0], body)
        trips = p.events("trip", t0=t0)
        body = _body(p.ask("trips today").answer)
        assert body.startswith("%d trip%s today" % (len(trips), "s" if len(trips) != 1 else "")) if trips else \
            body.startswith("Nothing of the kind"), body
    chat = askintent.read("alarms are annoying, tell me about the plant", seen.vocab)
    assert chat is None or chat.what != "list"
