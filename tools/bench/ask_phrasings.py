"""Held-out questions for `edgetwin bench quality`: operators' own words about a simulated plant day, with the
ground truth of each, and the scorer that judges an answer against it.

HELD OUT. Nothing trains on this module and nothing that chooses a checkpoint reads it: tools/train must never
import it (tests/host/test_bench_quality_plants.py reads every tools/train module's imports), and its templates,
typos and vocabulary are written here only, not copied from tools/train/qa_corpus.py. A model or a question
parser tuned on these words would make the benchmark measure its memory.

    qs = questions(day, rng, n)      # day: tools/plants/plantday.Day (a description, its log, its truth)
    v = score(answer_text, cited_texts, q, by_record)   # {"right", "cited", "why"}

Question kinds (KINDS): the first alarm of a signal, why and when a machine tripped, who acknowledged an alarm
and when, counts, what is still in alarm now, what a machine did between two times, a shift's summary, things
that never happened, and a signal's peak. Each question is "free" (an operator's words: machines by their words,
aliases or ordinals, relative times in site time, paraphrases, typos) or "templated" (benchmark-style: ids and
tags, close to the questions today's training uses).

Truth: the expected machine id (and every word of it unique in the plant), times as hh:mm in site time and in
UTC (the log is in UTC, ask's answers in site time: either is right), a count, a value, an operator's name, or
none (it never happened). The evidence: the log lines that prove it.
"""

from __future__ import annotations

import datetime
import random
import re
from dataclasses import dataclass, field
from typing import Any

from tools.plants import catalogue

KINDS = ("first_alarm", "trip_why", "trip_when", "ack_who", "ack_when", "count", "still_alarm", "between", "shift",
         "never", "peak")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")
LEVEL_SAID = {"HI": ("high", "hi"), "HIHI": ("high high", "hihi"), "LO": ("low", "lo"), "LOLO": ("low low", "lolo")}
# an operator's misspellings (the word as meant -> how it gets typed)
TYPOS = {"alarm": ("alram", "alarn", "allarm"), "tripped": ("triped", "trippd", "tirpped"), "trip": ("tirp", "trp"),
         "acknowledged": ("acknowleged", "acknowledgd", "aknowledged"), "when": ("wen", "whn"),
         "temperature": ("temprature", "temperture"), "pressure": ("presure", "pressur"), "what": ("wat", "waht"),
         "happened": ("happend", "hapened"), "still": ("stil",), "between": ("betwen", "bewteen"),
         "vibration": ("vibraton", "vibrations"), "level": ("levle",), "how": ("hwo",), "times": ("tiems",)}
SHIFTS = (("morning shift", 6, 14), ("day shift", 6, 14), ("afternoon shift", 14, 22), ("late shift", 14, 22),
          ("night shift", 22, 30), ("overnight", 22, 30))


@dataclass
class Question:
    text: str
    kind: str
    free: bool  # an operator's own words (else benchmark-style, ids and tags)
    truth: dict[str, Any]
    evidence: list[str] = field(default_factory=list)  # the log lines that prove the answer

    def as_dict(self) -> dict[str, Any]:
        return {"question": self.text, "kind": self.kind, "free": self.free, "truth": self.truth,
                "evidence": self.evidence}


# ---------------------------------------------------------------------------------------------- names


class Names:
    """How a plant's machines and signals can be said: ids, the words and aliases only one machine has, ordinals."""

    def __init__(self, desc: dict) -> None:
        self.desc = desc
        self.machines = {m["id"]: m for m in desc["machines"]}
        said: dict[str, set] = {}
        for m in desc["machines"]:
            for w in m["words"] + m["aliases"]:
                said.setdefault(w.lower(), set()).add(m["id"])
        self.unique = {mid: [w for w in m["words"] + m["aliases"] if said[w.lower()] == {mid}]
                       for mid, m in self.machines.items()}
        self.by_kind: dict[str, list[str]] = {}
        for m in desc["machines"]:
            self.by_kind.setdefault(m["kind"], []).append(m["id"])

    def words_of(self, mid: str) -> list[str]:
        """Every way an answer may name the machine: its id, the id without punctuation, its unique words."""
        return [mid, re.sub(r"[-_]", "", mid), mid.replace("_", " ")] + self.unique[mid] + self.ordinal(mid)

    def ordinal(self, mid: str) -> list[str]:
        kind = self.machines[mid]["kind"]
        same = self.by_kind[kind]
        short = catalogue.kind(kind).words[-1] if kind != "air handling unit" else "air handler"
        short = min((w for w in catalogue.kind(kind).words if " " not in w), key=len, default=short)
        if len(same) == 1:
            return ["the %s" % short.lower()]
        return ["the %s %s" % (ORDINALS[same.index(mid)], short.lower())] if same.index(mid) < len(ORDINALS) else []

    def spoken(self, mid: str, rng: random.Random) -> str:
        """An operator's name for the machine: a word only it has, an alias, or an ordinal ("the second mixer")."""
        opts = ["the " + w if not w[0].isupper() and not w[0].isdigit() and w[0] != "#" else w
                for w in self.unique[mid]] + self.ordinal(mid)
        return rng.choice(opts) if opts else mid

    def signal(self, mid: str, key: str) -> dict:
        return next(s for s in self.machines[mid]["signals"] if s["key"] == key)

    def signal_words(self, mid: str, key: str) -> list[str]:
        """The signal's own words (the catalogue's, without the fault causes the generator adds), tag and key."""
        s = self.signal(mid, key)
        kind = catalogue.kind(self.machines[mid]["kind"])
        return list(kind.signal(s["source"]["register"]).words) + [s["tag"], s["tag"].replace("_", " "), s["key"]]

    def quantity(self, mid: str, key: str) -> str:
        s = self.signal(mid, key)
        return catalogue.kind(self.machines[mid]["kind"]).signal(s["source"]["register"]).quantity

    def interlock_key(self, mid: str, interlock: str) -> str | None:
        for s in self.machines[mid]["signals"]:
            if any(a.get("interlock") == interlock for a in s.get("alarms", ())):
                return s["key"]
        return None


# ---------------------------------------------------------------------------------------------- words


def typo(text: str, rng: random.Random, p: float = 0.35) -> str:
    """One operator's misspelling of a common word of the text, with probability p (machine names are spared)."""
    if rng.random() >= p:
        return text
    hits = [w for w in TYPOS if re.search(r"\b%s\b" % w, text)]
    if not hits:
        return text
    w = rng.choice(hits)
    return re.sub(r"\b%s\b" % w, rng.choice(TYPOS[w]), text, count=1)


def casual(text: str, rng: random.Random) -> str:
    """Lower-case, maybe no question mark, maybe a leading "hey"/"quick one:"."""
    if rng.random() < 0.3:
        text = text.rstrip("?")
    if rng.random() < 0.15:
        text = rng.choice(("hey, ", "quick one: ", "so ")) + text
    return text


def ambiguous(day, t: datetime.datetime) -> bool:
    """Would a 12-hour clock ("around eight", "5:20") name a time of the log the other way round as well?"""
    other = t + datetime.timedelta(hours=-12 if t.hour >= 12 else 12)
    return 0 <= day.tick_of_site(other) <= day.end_tick


def hour_said(day, t: datetime.datetime, rng: random.Random) -> str:
    """'around ten this morning', 'about 14:30', 'around 3 pm': the site time an operator gives (a 12-hour
    word gets its part of the day where the log holds both readings)."""
    h, m = t.hour, t.minute
    near = (h + (1 if m >= 30 else 0)) % 24
    h12 = near % 12 or 12
    tail = " " + part_of_day(t) if ambiguous(day, t) else ""
    forms = ["around %s%s" % (NUMBER_WORDS[h12], tail), "about %02d:%02d" % (h, m - m % 5),
             "around %d %s" % (h12, "am" if near < 12 else "pm"), "at roughly %02d:%02d" % (h, m - m % 10)]
    if 15 <= m < 45:
        forms.append("around half past %s%s" % (NUMBER_WORDS[h % 12 or 12], tail))
    return rng.choice(forms)


def part_of_day(t: datetime.datetime) -> str:
    h = t.hour
    return "this morning" if 5 <= h < 12 else "this afternoon" if 12 <= h < 17 else "this evening" if 17 <= h < 22 \
        else "tonight" if h >= 22 else "last night"


def hm(t: datetime.datetime) -> str:
    return t.strftime("%H:%M")


# ---------------------------------------------------------------------------------------------- questions


def _times(day, tick: int) -> dict[str, str]:
    return {"time": hm(day.site(tick)), "time_utc": hm(day.utc(tick))}


def questions(day, rng: random.Random, n: int | None = None, free_share: float = 0.55) -> list[Question]:
    """Questions about the plant day with their truth, at most n (a mix of kinds), about free_share in an
    operator's words. day: tools/plants/plantday.Day."""
    names = Names(day.desc)
    ev = [e for e in day.events if e.get("line")]
    raises = [e for e in ev if e["event"] == "alarm"]
    trips = [e for e in ev if e["event"] == "trip"]
    acks = [e for e in ev if e["event"] == "ack"]
    pool: list[Question] = []

    def free() -> bool:
        return rng.random() < free_share

    # first alarm of a signal
    firsts: dict[tuple, dict] = {}
    for e in raises:
        firsts.setdefault((e["machine"], e["key"]), e)
    for (mid, key), e in firsts.items():
        pool.append(_first_alarm(day, names, mid, key, e, rng, free()))
    # trips: why and when
    n_trips = {}
    for e in trips:
        n_trips[e["machine"]] = n_trips.get(e["machine"], 0) + 1
    for e in trips:
        pool.append(_trip_why(day, names, e, n_trips[e["machine"]], rng, free()))
        if n_trips[e["machine"]] == 1:
            pool.append(_trip_when(day, names, e, rng, free()))
    # acknowledgements
    for e in acks:
        pool.append(_ack(day, names, e, rng, free(), rng.random() < 0.5))
    # counts
    pool += _counts(day, names, trips, raises, rng, free)
    # still in alarm now
    pool.append(_still(day, names, ev, rng, free()))
    # what did X do between T1 and T2
    for mid in rng.sample(sorted(names.machines), min(2, len(names.machines))):
        pool.append(_between(day, names, mid, ev, rng, True))
    # shift summary (a day shorter than a shift has none)
    shift = _shift(day, names, ev, rng)
    if shift is not None:
        pool.append(shift)
    # never happened
    pool += _never(day, names, trips, raises, rng, free)
    # peaks
    for mid in rng.sample(sorted(names.machines), min(2, len(names.machines))):
        key = rng.choice([s["key"] for s in names.machines[mid]["signals"]])
        pool.append(_peak(day, names, mid, key, rng, free()))
    rng.shuffle(pool)
    if n is None or n >= len(pool):
        return pool
    # a mix: round-robin over the kinds so a plant's many alarms do not crowd out the rest
    by_kind: dict[str, list[Question]] = {}
    for q in pool:
        by_kind.setdefault(q.kind, []).append(q)
    order = list(KINDS)
    rng.shuffle(order)
    out: list[Question] = []
    while len(out) < n:
        for k in order:
            if by_kind.get(k) and len(out) < n:
                out.append(by_kind[k].pop())
    return out


def _first_alarm(day, names: Names, mid: str, key: str, e: dict, rng, free: bool) -> Question:
    words = names.signal_words(mid, key)
    truth = {"machine": mid, "key": key, **_times(day, e["tick"])}
    if not free:
        text = rng.choice(("when did %s first raise an alarm on %s?", "at what time did %s %s alarm first?",
                           "first alarm of %s %s: when?")) % (mid, e["tag"])
        return Question(text, "first_alarm", False, truth, [e["line"]])
    who, sig = names.spoken(mid, rng), rng.choice(words[:len(words) - 3] or words)
    text = rng.choice(("when did %(m)s first start complaining about %(s)s?",
                       "what time did the %(s)s on %(m)s go into alarm the first time?",
                       "%(m)s - when was the earliest %(s)s alarm today?",
                       "first time %(m)s alarmed on %(s)s, what time was that?",
                       "when did the %(s)s alarm on %(m)s first come in?")) % {"m": who, "s": sig}
    return Question(casual(typo(text, rng), rng), "first_alarm", True, truth, [e["line"]])


def _trip_why(day, names: Names, e: dict, n_trips: int, rng, free: bool) -> Question:
    mid = e["machine"]
    interlock = e["cause"].split("=", 1)[1] if e["cause"].startswith("interlock=") else None
    key = names.interlock_key(mid, interlock) if interlock else None
    causes = ([interlock] if interlock else []) + (names.signal_words(mid, key) if key else [])
    truth = {"machine": mid, "causes": causes, **_times(day, e["tick"])}
    t = day.site(e["tick"])
    if not free:
        at = " at %s" % hm(t) if n_trips > 1 else ""
        text = rng.choice(("why did %s trip%s?", "what caused the %s trip%s?", "which interlock tripped %s%s?")) % (
            mid, at)
        return Question(text, "trip_why", False, truth, [e["line"]])
    who = names.spoken(mid, rng)
    when = hour_said(day, t, rng) if n_trips > 1 or rng.random() < 0.5 else part_of_day(t)
    text = rng.choice(("why did %(m)s trip %(w)s?", "%(m)s went down %(w)s, what happened?",
                       "what knocked out %(m)s %(w)s?", "%(m)s tripped %(w)s - what was the reason?",
                       "whats the story with %(m)s tripping %(w)s")) % {"m": who, "w": when}
    return Question(casual(typo(text, rng), rng), "trip_why", True, truth, [e["line"]])


def _trip_when(day, names: Names, e: dict, rng, free: bool) -> Question:
    mid = e["machine"]
    truth = {"machine": mid, **_times(day, e["tick"])}
    if not free:
        return Question(rng.choice(("when did %s trip?", "at what time did %s trip?")) % mid, "trip_when", False,
                        truth, [e["line"]])
    who = names.spoken(mid, rng)
    text = rng.choice(("what time did %(m)s trip?", "when exactly did %(m)s drop out?",
                       "%(m)s tripped today, at what time?", "when did %(m)s go down?")) % {"m": who}
    return Question(casual(typo(text, rng), rng), "trip_when", True, truth, [e["line"]])


def _ack(day, names: Names, e: dict, rng, free: bool, who_q: bool) -> Question:
    mid = e["machine"]
    kind = "ack_who" if who_q else "ack_when"
    truth = {"machine": mid, "key": e["key"], "who": e["by"], **_times(day, e["tick"])}
    if not free:
        lvl = e["level"]
        form = "who acknowledged the %s %s alarm on %s?" if who_q else "when was the %s %s alarm on %s acknowledged?"
        text = form % (lvl, e["tag"], mid)
        return Question(text, kind, False, truth, [e["line"]])
    who = names.spoken(mid, rng)
    words = names.signal_words(mid, e["key"])
    sig = rng.choice(words[:len(words) - 3] or words)
    lvl = rng.choice(LEVEL_SAID[e["level"]])
    if who_q:
        text = rng.choice(("who acked the %(l)s %(s)s alarm on %(m)s?", "which operator took the %(s)s alarm on %(m)s?",
                           "who acknowledged %(m)s's %(s)s alarm?", "who accepted the %(l)s %(s)s alarm for %(m)s")) \
            % {"l": lvl, "s": sig, "m": who}
    else:
        text = rng.choice(("when did someone ack the %(s)s alarm on %(m)s?",
                           "how long before the %(l)s %(s)s alarm on %(m)s was acknowledged - what time?",
                           "what time was %(m)s's %(s)s alarm acknowledged?")) % {"l": lvl, "s": sig, "m": who}
    return Question(casual(typo(text, rng), rng), kind, True, truth, [e["line"]])


def _today(day) -> tuple[int, int]:
    """Ticks of 'today' in site time: from the site's midnight before the end of the log (or the log's start)."""
    end = day.site(day.end_tick)
    midnight = end.replace(hour=0, minute=0, second=0, microsecond=0)
    return max(0, day.tick_of_site(midnight)), day.end_tick


def _counts(day, names: Names, trips, raises, rng, free) -> list[Question]:
    out = []
    t0, t1 = _today(day)
    today = [e for e in trips if t0 <= e["tick"] <= t1]
    if free():
        text = rng.choice(("how many trips today?", "how many times did something trip today",
                           "number of trips so far today?", "how many machines went down today?"))
        if "machines" in text:  # machines, not trips
            n = len({e["machine"] for e in today})
        else:
            n = len(today)
        out.append(Question(casual(typo(text, rng), rng), "count", True, {"count": n, "machine": None},
                            [e["line"] for e in today]))
    else:
        out.append(Question("how many trips were logged today?", "count", False, {"count": len(today),
                                                                                  "machine": None},
                            [e["line"] for e in today]))
    by_m: dict[str, list] = {}
    for e in raises:
        if t0 <= e["tick"] <= t1:
            by_m.setdefault(e["machine"], []).append(e)
    mids = sorted(names.machines)
    mid = rng.choice(mids)
    mine = by_m.get(mid, [])
    if free():
        text = rng.choice(("how many alarms did %(m)s throw today?", "how many times has %(m)s alarmed today",
                           "count of alarms on %(m)s today?")) % {"m": names.spoken(mid, rng)}
        out.append(Question(casual(typo(text, rng), rng), "count", True, {"count": len(mine), "machine": mid},
                            [e["line"] for e in mine]))
    else:
        out.append(Question("how many alarms did %s raise today?" % mid, "count", False,
                            {"count": len(mine), "machine": mid}, [e["line"] for e in mine]))
    return out


def _still(day, names: Names, ev, rng, free: bool) -> Question:
    active: dict[tuple, dict] = {}
    for e in ev:
        pt = (e["machine"], e.get("level"), e.get("tag"))
        if e["event"] == "alarm":
            active[pt] = e
        elif e["event"] == "clear":
            active.pop(pt, None)
    machines = sorted({pt[0] for pt in active})
    truth = {"machines": machines, "none": not machines, "machine": None}
    text = rng.choice(("what is still in alarm now?", "anything still alarming right now?",
                       "which alarms are still active?", "whats still in alarm at the moment")) if free \
        else "which alarms are active now?"
    return Question(casual(typo(text, rng), rng) if free else text, "still_alarm", free, truth,
                    [e["line"] for e in active.values()])


def _between(day, names: Names, mid: str, ev, rng, free: bool) -> Question:
    mine = [e for e in ev if e["machine"] == mid and e["event"] in ("alarm", "trip", "ack", "clear", "state")
            and e["tick"] > 0]
    if mine and rng.random() < 0.8:  # a window around something it did
        e = rng.choice(mine)
        a = day.site(e["tick"]).replace(second=0, microsecond=0) - datetime.timedelta(minutes=rng.randint(10, 50))
    else:
        tick = rng.randint(min(1800, day.end_tick // 2), max(1800, day.end_tick - 7200))
        a = day.site(tick).replace(second=0, microsecond=0)
    a = a.replace(minute=a.minute - a.minute % 10)
    b = a + datetime.timedelta(minutes=rng.choice((60, 90, 120)))
    t0, t1 = max(0, day.tick_of_site(a)), min(day.end_tick, day.tick_of_site(b))
    inside = [e for e in mine if t0 <= e["tick"] <= t1]
    truth = {"machine": mid, "none": not inside, "times": sorted({hm(day.site(e["tick"])) for e in inside}),
             "times_utc": sorted({hm(day.utc(e["tick"])) for e in inside}), "window": [hm(a), hm(b)]}
    if not free:
        text = "what did %s do between %s and %s?" % (mid, hm(a), hm(b))
    else:
        text = rng.choice(("what did %(m)s do between %(a)s and %(b)s?",
                           "anything going on with %(m)s from %(a)s to %(b)s?",
                           "%(m)s between %(a)s and %(b)s - what happened?",
                           "what happened on %(m)s between %(a)s and %(b)s"))
        text = text % {"m": names.spoken(mid, rng), "a": _clock(day, a, rng), "b": _clock(day, b, rng)}
        text = casual(typo(text, rng), rng)
    return Question(text, "between", free, truth, [e["line"] for e in inside])


def _clock(day, t: datetime.datetime, rng) -> str:
    """'2', '2 pm', '14:00', '9:40', '09:40': a bare 12-hour number only where it cannot mean the other half."""
    h12 = t.hour % 12 or 12
    both = ambiguous(day, t)
    if t.minute == 0:
        return rng.choice(("%02d:00" % t.hour if both else "%d" % h12, "%d %s" % (h12, "am" if t.hour < 12 else "pm"),
                           "%02d:00" % t.hour))
    return rng.choice(("%02d:%02d" % (t.hour, t.minute) if both and t.hour < 12 else "%d:%02d" % (t.hour, t.minute),
                       "%02d:%02d" % (t.hour, t.minute)))


def _shift(day, names: Names, ev, rng) -> Question | None:
    """A summary of a whole shift inside the log (site time)."""
    start, end = day.site(0), day.site(day.end_tick)
    opts = []
    for name, h0, h1 in SHIFTS:
        for d in (start.date(), end.date(), start.date() + datetime.timedelta(days=1)):
            a = datetime.datetime(d.year, d.month, d.day, tzinfo=start.tzinfo) + datetime.timedelta(hours=h0)
            b = a + datetime.timedelta(hours=h1 - h0)
            if a >= start and b <= end:
                opts.append((name, a, b))
    if not opts:
        return None
    name, a, b = rng.choice(opts)
    t0, t1 = day.tick_of_site(a), day.tick_of_site(b)
    inside = [e for e in ev if t0 <= e["tick"] <= t1 and e["event"] in ("alarm", "trip")]
    tripped = sorted({e["machine"] for e in inside if e["event"] == "trip"})
    alarmed = sorted({e["machine"] for e in inside})
    truth = {"machine": None, "none": not inside, "tripped": tripped, "alarmed": alarmed,
             "times": sorted({hm(day.site(e["tick"])) for e in inside}),
             "times_utc": sorted({hm(day.utc(e["tick"])) for e in inside}), "window": [hm(a), hm(b)]}
    text = rng.choice(("give me a summary of the %(s)s", "how did the %(s)s go?", "what happened on the %(s)s",
                       "sum up the %(s)s for me", "anything I should know from the %(s)s?")) % {"s": name}
    if name == "overnight":
        text = rng.choice(("what happened overnight?", "anything happen overnight"))
    return Question(casual(typo(text, rng), rng), "shift", True, truth, [e["line"] for e in inside])


def _never(day, names: Names, trips, raises, rng, free) -> list[Question]:
    out = []
    calm = sorted(set(names.machines) - {e["machine"] for e in trips})
    if calm:
        mid = rng.choice(calm)
        truth = {"machine": mid, "none": True}
        if free():
            text = rng.choice(("why did %(m)s trip this morning?", "did %(m)s trip at all today?",
                               "what made %(m)s trip?", "when did %(m)s last trip?")) % {"m": names.spoken(mid, rng)}
            out.append(Question(casual(typo(text, rng), rng), "never", True, truth))
        else:
            out.append(Question("why did %s trip?" % mid, "never", False, truth))
    quiet = [(m["id"], s["key"]) for m in day.desc["machines"] for s in m["signals"] if s.get("alarms")
             and not any(e["machine"] == m["id"] and e["key"] == s["key"] for e in raises)]
    if quiet:
        mid, key = rng.choice(quiet)
        truth = {"machine": mid, "key": key, "none": True}
        words = names.signal_words(mid, key)
        if free():
            text = rng.choice(("when did the %(s)s alarm on %(m)s go off?", "when did %(m)s first alarm on %(s)s?",
                               "what time did %(m)s get a %(s)s alarm?"))
            text = text % {"m": names.spoken(mid, rng), "s": rng.choice(words[:len(words) - 3] or words)}
            out.append(Question(casual(typo(text, rng), rng), "never", True, truth))
        else:
            out.append(Question("when did %s first raise a %s alarm?" % (mid, names.signal(mid, key)["tag"]), "never",
                                False, truth))
    return out


def _peak(day, names: Names, mid: str, key: str, rng, free: bool) -> Question:
    value, line = day.peaks[(mid, key)]
    s = names.signal(mid, key)
    truth = {"machine": mid, "key": key, "value": value, "unit": s["unit"], "decimals": s.get("decimals", 1)}
    if not free:
        text = "what was the highest %s of %s today?" % (s["tag"], mid)
        return Question(text, "peak", False, truth, [line])
    who = names.spoken(mid, rng)
    words = names.signal_words(mid, key)
    sig = rng.choice(words[:len(words) - 3] or words)
    q = names.quantity(mid, key)
    temps = [x for x in names.machines[mid]["signals"] if names.quantity(mid, x["key"]) == "temperature"]
    if q == "temperature" and len(temps) == 1:
        text = rng.choice(("how hot did %(m)s get today?", "hottest %(m)s got today?"))
    elif q == "temperature":
        text = rng.choice(("how hot did the %(s)s on %(m)s get?", "how high did %(m)s's %(s)s go today"))
    else:
        text = rng.choice(("how high did the %(s)s on %(m)s go today?", "peak %(s)s on %(m)s today?",
                           "what's the max %(s)s %(m)s hit today", "highest %(s)s reading on %(m)s?"))
    return Question(casual(typo(text % {"m": who, "s": sig}, rng), rng), "peak", True, truth, [line])


# ---------------------------------------------------------------------------------------------- the scorer

ABSENCE = re.compile(r"\bnothing of the kind\b|\bno such\b|\bnever\b|\bno (?:[\w-]+ ){0,3}?(?:alarms?|trips?|events?|"
                     r"records?|lines?|acknowledge?ments?|acks?)\b|\b(?:did|does|was|were|has|have)(?:n't| not) "
                     r"(?:trip|alarm|raise|go|record|log|happen)\w*|\bnone\b|\bnothing\b|\bquiet\b|\bno activity\b",
                     re.I)
TIME = re.compile(r"(?<![\d:.])([01]?\d|2[0-3]):([0-5]\d)(?::[0-5]\d)?(?!\d)")
_TRIP = r"\btrip|\binterlock|\bwent down|\bshut ?down|\bdropped out"
EVENT_WORDS = {"trip_why": _TRIP, "trip_when": _TRIP, "ack_who": r"\back|acknowledg|\baccepted",
               "ack_when": r"\back|acknowledg|\baccepted", "first_alarm": r"alarm|\braised?\b|\bhi\b|\blo\b|high|low"}
SPAN_SAID = re.compile(r"\bbetween (\d\d:\d\d) and (\d\d:\d\d)\b")
REFUSED = "(ask: "  # how the bench writes ask's refusal (QAError) in place of an answer
OTHER_EVENT = {"first_alarm": r"acknowledg\w*|\backed\b|\bcleared\b|returned to normal"}
NUMBER = re.compile(r"(?<![\w.:-])(-?\d+(?:\.\d+)?)(?![\d:])")


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


ISO_STAMP = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def times_in(text: str) -> list[str]:
    """The hh:mm the text states (a log line it quotes is evidence, not a claim: its ISO stamps are not read)."""
    text = ISO_STAMP.sub(" ", text)
    return ["%02d:%s" % (int(m.group(1)), m.group(2)) for m in TIME.finditer(text)]


def _near(t: str, want: list[str], slack: int = 1) -> bool:
    return any(abs(_minutes(t) - _minutes(w)) % 1440 <= slack or abs(_minutes(t) - _minutes(w)) >= 1440 - slack
               for w in want)


def names_machine(text: str, mid: str, names: Names) -> bool:
    low = text.lower()
    for w in names.words_of(mid):
        w = w.lower()
        if re.search(r"(?<![\w-])%s(?![\w])" % re.escape(w), low):
            return True
    return False


def _numbers(text: str) -> list[float]:
    stripped = TIME.sub(" ", text)
    stripped = re.sub(r"\[\d+\]", " ", stripped)
    return [float(m.group(1)) for m in NUMBER.finditer(stripped)]


def _count_said(text: str, n: int) -> bool:
    if n in _numbers(text):
        return True
    if n < len(NUMBER_WORDS) and re.search(r"\b%s\b" % NUMBER_WORDS[n], text.lower()):
        return True
    return n == 0 and bool(ABSENCE.search(text))


def _said(word: str, low: str) -> bool:
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(word.lower()), low) is not None


def _other_signal(low: str, names: Names, mid: str, key: str) -> str | None:
    """A signal of the machine other than the one asked about, named where the asked one is not."""
    mine = [w.lower() for w in names.signal_words(mid, key)]
    if any(_said(w, low) for w in mine):
        return None
    for s in names.machines[mid]["signals"]:
        if s["key"] == key:
            continue
        for w in names.signal_words(mid, s["key"])[:-1]:  # not the bare key ("L", "AI01")
            if len(w) > 3 and not any(w.lower() in m for m in mine) and _said(w, low):
                return w
    return None


def score(answer: str, cited: list[str], q: dict[str, Any], desc: dict, by_record: bool = False,
          log_start: list[str] | None = None) -> dict[str, Any]:
    """Is the answer right, and does it cite the line that proves it?

    answer: the text the operator reads; cited: the texts of the windows it cites ([n]); q: Question.as_dict();
    log_start: the log's first minute (site and UTC): a record's "nothing since 06:00" names it.
    right: names the expected machine (id or a word only it has), the expected time (hh:mm, +-1 min, site time or
      UTC) / count / value / operator / cause, and claims no absence when the event is in the truth; for a "none"
      truth, states the absence and names no time but the log's start.
    cited: at least one cited window holds an evidence line, or the answer quotes one (None where there is none to
      cite: an absence, a count of zero). An answer starting with REFUSED (ask refused the question) is wrong."""
    if answer.startswith(REFUSED):  # ask gave no answer (quality.ask_one writes its refusal so)
        return {"right": False, "cited": False if q.get("evidence") else None, "why": ["ask refused: " + answer]}
    names = Names(desc)
    t = q["truth"]
    kind = q["kind"]
    why: list[str] = []
    absent = bool(ABSENCE.search(answer))
    said_times = times_in(answer)
    if t.get("none"):
        if not absent:
            why.append("does not say it did not happen")
        # the log's start ("nothing since 05:30") and the window asked about may be named
        # so may the bounds of the span an absence is stated for ("nothing ... between 06:00 and 11:59")
        bounds = [x for pair in SPAN_SAID.findall(answer) for x in pair]
        extra = [x for x in said_times if not _near(x, (log_start or []) + t.get("window", []) + bounds, 1)]
        if extra and kind in ("never",):
            why.append("names a time for an event that did not happen: %s" % ", ".join(extra))
        if kind in ("between", "shift") and extra:
            why.append("names a time in a window where nothing happened: %s" % ", ".join(extra))
        return {"right": not why, "cited": None, "why": why}
    if absent and kind not in ("count", "shift"):  # a shift's summary may say what did not happen as well
        why.append("claims an absence; the truth has the event")
    mid = t.get("machine")
    if mid and not names_machine(answer, mid, names):
        # "when did the kiln one go down?" - "At 09:06 it tripped [1]." names it through the question; an answer
        # naming another machine instead does not
        others = [m for m in names.machines if m != mid and names_machine(answer, m, names)]
        if others or not names_machine(q["question"], mid, names):
            why.append("does not name %s" % mid)
    low = answer.lower()
    need = EVENT_WORDS.get(kind)
    if need and not re.search(need, low):
        why.append("does not name the event (%s)" % kind)
    want_t = [x for x in (t.get("time"), t.get("time_utc")) if x]
    if kind in ("first_alarm", "trip_when", "ack_when"):
        # the expected minute among the times it names ("since 05:30 ... 07:10 tripped" names the log's start
        # first), and not a list of every time there is
        told = sorted({x for x in said_times if not _near(x, log_start or [], 0)})
        if not told:
            why.append("names no time")
        elif not any(_near(x, want_t) for x in told):
            why.append("time %s, truth %s (UTC %s)" % (told[0], t["time"], t["time_utc"]))
        elif len(told) > 3:
            why.append("names %d times: a list, not the answer" % len(told))
    if t.get("key") and kind in ("first_alarm", "ack_who", "ack_when"):
        other = _other_signal(low, names, t["machine"], t["key"])
        if other:
            why.append("names another signal (%s)" % other)
    wrong = OTHER_EVENT.get(kind)
    if wrong and re.search(wrong, low):
        why.append("names another event (%s)" % re.search(wrong, low).group(0))
    elif kind == "trip_why":
        if t["causes"] and not any(_said(c, low) for c in t["causes"]):
            why.append("not the cause (%s)" % t["causes"][0])
    elif kind == "ack_who":
        if not re.search(r"\b%s\b" % re.escape(t["who"]), answer, re.I):
            why.append("not the operator %s" % t["who"])
    elif kind == "count":
        if not _count_said(answer, t["count"]):
            why.append("not the count %d" % t["count"])
        if t["count"] and absent:
            why.append("claims an absence; the truth counts %d" % t["count"])
    elif kind == "still_alarm":
        missing = [m for m in t["machines"][:3] if not names_machine(answer, m, names)]
        if missing:
            why.append("does not name %s" % ", ".join(missing))
    elif kind in ("between", "shift"):
        if kind == "shift":
            named = [m for m in (t["tripped"] or t["alarmed"]) if names_machine(answer, m, names)]
            if not named:
                why.append("names none of %s" % ", ".join(t["tripped"] or t["alarmed"]))
        if not any(_near(x, t["times"] + t["times_utc"]) for x in said_times):
            why.append("names no time of an event in the window")
    elif kind == "peak":
        v, d = float(t["value"]), int(t.get("decimals", 1))
        tol = max(0.02 * abs(v), 2 * 10 ** -d)
        if not any(abs(x - v) <= tol for x in _numbers(answer)):
            why.append("not the peak %g%s" % (v, t["unit"]))
    ev = q.get("evidence") or []
    cited_ok = None
    if ev:  # a window it cites holds a proving line; a record answer quotes the line itself
        cited_ok = any(e in c.splitlines() for c in cited for e in ev) or any(e in answer for e in ev)
    return {"right": not why, "cited": cited_ok, "why": why}
