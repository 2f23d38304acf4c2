"""The time an operator's question is about, in the plant's site time: "around ten", "this morning", "on the
night shift", "in the last 2 hours", "between 9 and 10:30" -> a span of wall times (host/askrecord.py reads it).

Every word is read against the log's "now", the newest plant line in the store, never the wall clock: a store
read back from an archive, or a bench's simulated morning, answers as of its own last line. Hours are the site's
(the plant description's `timezone`, docs/PLANT.md); the store and the lines keep UTC.

    span = asktime.span("how many trips this morning?", now_ms, first_ms, tz)   # Span or None
    span.t0_ms, span.t1_ms, span.said                                           # "this morning (06:00-12:00)"

The words and the hours they mean (module constants, the one place that says them):

- "today" from 00:00; "yesterday" the day before; "this morning" 06-12, "this afternoon" 12-18, "this evening"
  18-22, "tonight" from 18:00 (to 06:00), "last night" 18:00 yesterday to 06:00 today (MORNING ... NIGHT);
- shifts (SHIFTS): day 06-14, late 14-22, night 22-06; "the night shift" is the latest one that began by now,
  "this shift" the one now is in;
- "in the last hour", "in the past 2 hours", "last 30 minutes": that long before now;
- "around ten", "about 10:30": AROUND minutes either side of 10:00 or 22:00 (an hour without am/pm), whichever
  is in the log's range and most recent; "at 14:05" is left to the minute search (host/logwords.minutes), and
  at_minute() reads it as AT minutes either side for the record's answers;
- "since 8", "since 08:30", "since yesterday", "after 23:00": from then to now ("before 9am": up to then; a bare
  hour only where it ends the question or a clause, "before 9?": "after 2 alarms" is no time); "between 9 and
  10:30", "from 9 to 11": that span on the latest day it has begun by now (across midnight when the end is before
  the start);
- "after the trip" / "before the trip": from / up to an event the caller finds (anchor()), the question's
  machine's latest trip.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Callable, Optional

SHIFTS = {"day": (6, 14), "late": (14, 22), "night": (22, 6)}  # site hours, start -> end
SHIFT_WORDS = {"day": "day", "morning": "day", "early": "day", "late": "late", "afternoon": "late",
               "evening": "late", "swing": "late", "night": "night", "graveyard": "night"}
MORNING, AFTERNOON, EVENING, NIGHT = (6, 12), (12, 18), (18, 22), (18, 6)
AROUND = 30  # minutes either side of "around ten"
AT = 10  # minutes either side of "at 22:20" (at_minute)
HOUR_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
              "ten": 10, "eleven": 11, "twelve": 12, "noon": 12, "midday": 12, "midnight": 0}
COUNT_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10,
               "half an": 0.5, "half a": 0.5}
_H = r"(?:%s|\d{1,2}(?:[:.h]\d\d)?)" % "|".join(HOUR_WORDS)  # "ten", "9", "10:30", "10.30", "10h30"
_CLOCK = r"(%s)(?:\s*(am|pm|a\.m\.|p\.m\.|o'?clock|in the morning|in the evening|at night))?" % _H
# a bare hour ends the question or its clause ("in alarm before 9?", "after two, today"): a time, not a count
_BARE_END = re.compile(r"\s*(?:[?.!,;]|$|today\b)")
_DAY_MS = 86400000
_HOUR_MS = 3600000


@dataclass(frozen=True)
class Span:
    """Wall times t0_ms .. t1_ms (UTC ms, t1 inclusive) and what the question said, with the site hours."""

    t0_ms: int
    t1_ms: int
    said: str
    tz: datetime.tzinfo

    def hm(self, ms: int) -> str:
        return hm(ms, self.tz)

    def describe(self) -> str:
        """ "this morning (06:00-12:00 site time, 2026-11-30)"."""
        d0 = site(self.t0_ms, self.tz)
        return "%s (%s-%s site time, %s)" % (self.said, self.hm(self.t0_ms), self.hm(self.t1_ms),
                                              d0.strftime("%Y-%m-%d"))


def site(ms: int, tz: datetime.tzinfo) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz)


def hm(ms: int, tz: datetime.tzinfo) -> str:
    """A wall time as the site's hh:mm."""
    return site(ms, tz).strftime("%H:%M")


def _at(day: datetime.date, hour: int, minute: int, tz: datetime.tzinfo) -> int:
    """The wall ms of hour:minute on the site's `day` (hour may be 24+: the next day)."""
    d = datetime.datetime.combine(day, datetime.time(0, 0), tz) + datetime.timedelta(hours=hour, minutes=minute)
    return int(d.astimezone(datetime.timezone.utc).timestamp() * 1000)


def _clock(word: str, ampm: Optional[str]) -> tuple[int, int, bool]:
    """(hour, minute, whether the hour is pinned: am/pm, a 24-hour hour or a minute-less 0/13+)."""
    word = word.lower()
    if word in HOUR_WORDS:
        h, m = HOUR_WORDS[word], 0
        pinned = word in ("noon", "midday", "midnight")
    else:
        parts = re.split(r"[:.h]", word)
        h, m = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
        pinned = h == 0 or h > 12 or word.startswith("0")
    a = (ampm or "").replace(".", "")
    if a in ("pm", "in the evening", "at night"):
        h, pinned = h + 12 if h < 12 else h, True  # "12 pm" is noon, pinned as any pm hour
    elif a in ("am", "in the morning"):
        h, pinned = (0 if h == 12 else h), True
    return h % 24, min(m, 59), pinned


def _latest_start(now: datetime.datetime, hour: int, minute: int, tz) -> int:
    """The latest wall ms at hour:minute site time that is not after now."""
    t = _at(now.date(), hour, minute, tz)
    return t if t <= int(now.timestamp() * 1000) else _at(now.date() - datetime.timedelta(days=1), hour, minute, tz)


def _range(now: datetime.datetime, h0: int, h1: int, tz, day: Optional[datetime.date] = None) -> tuple[int, int]:
    """Site hours h0 -> h1 (across midnight when h1 <= h0) starting on `day` (default: the latest start by now)."""
    if day is None:
        t0 = _latest_start(now, h0, 0, tz)
        day = site(t0, tz).date()
    t0 = _at(day, h0, 0, tz)
    t1 = _at(day, h1 + (24 if h1 <= h0 else 0), 0, tz)
    return t0, t1 - 1


def span(question: str, now_ms: int, first_ms: int, tz: datetime.tzinfo,
         anchor: Optional[Callable[[str], Optional[int]]] = None) -> Optional[Span]:
    """The span the question's time words mean (see the module docstring), clipped to end at now; None when it
    says none. anchor(word) -> the wall ms of an event the question refers to ("trip"), or None."""
    q = question.lower()
    now = site(now_ms, tz)
    today = now.date()

    def out(t0: int, t1: int, said: str) -> Span:
        return Span(int(t0), int(min(t1, now_ms)), said, tz)

    # in the last hour / past 2 hours / last 30 minutes
    m = re.search(r"\b(?:in |over |during |within )?(?:the )?(?:last|past|previous)\s+(?:(\d+(?:\.\d+)?|%s)\s+)?"
                  r"(hours?|hrs?|minutes?|mins?)\b" % "|".join(COUNT_WORDS), q)
    if m:
        n = m.group(1)
        n = 1.0 if n is None else float(COUNT_WORDS.get(n, n) if not n[0].isdigit() else n)
        unit = _HOUR_MS if m.group(2).startswith("h") else 60000
        return out(now_ms - int(n * unit), now_ms, m.group(0).strip())
    if re.search(r"\b(?:last|past|previous) half(?: an)? hour\b|\b(?:last|past) half an hour\b", q):
        return out(now_ms - _HOUR_MS // 2, now_ms, "in the last half hour")
    # between 9 and 10:30 / from 9 to 11
    m = re.search(r"\b(?:between|from)\s+%s\s+(?:and|to|until|till|-)\s+%s" % (_CLOCK, _CLOCK), q)
    if m:
        same = m.group(2) or (m.group(4) if m.group(4) in ("pm", "p.m.", "am", "a.m.") else None)
        h0, m0, p0 = _clock(m.group(1), same)  # "between 10 and 11 pm": both pm
        h1, m1, p1 = _clock(m.group(3), m.group(4) or m.group(2))
        if p1 and not m.group(2) and (h0, m0) > (h1, m1):
            h0, m0, p0 = _clock(m.group(1), None)  # "from 11 to 1 pm": 11 in the morning
        if not p1 and not p0 and h1 < h0 and h1 + 12 > h0:
            h1 += 12  # "between 11 and 1"
        if p1 and not p0 and h0 < 12 and (h0 + 12, m0) < (h1, m1):
            h0, p0 = h0 + 12, True  # "from 1 to 15:00": the afternoon's 1
        best = None
        for h0x, h1x in ((h0, h1), (h0 + 12, h1 + 12)) if not (p0 or p1) and h0 < 12 and h1 < 12 else ((h0, h1),):
            t0 = _latest_start(now, h0x % 24, m0, tz)
            d = site(t0, tz).date()
            t1 = _at(d, h1x % 24 + (24 if (h1x % 24, m1) <= (h0x % 24, m0) else 0), m1, tz)
            if best is None or t0 > best[0]:
                best = (t0, t1)
        return out(best[0], best[1], m.group(0).strip())
    # since 8 / since yesterday / since this morning
    m = re.search(r"\bsince\s+(yesterday|this morning|midnight|%s)" % _CLOCK, q)
    if m:
        w = m.group(1)
        if w == "yesterday":
            return out(_at(today - datetime.timedelta(days=1), 0, 0, tz), now_ms, m.group(0))
        if w == "this morning":
            return out(_at(today, MORNING[0], 0, tz), now_ms, m.group(0))
        h, mi, pinned = _clock(m.group(2) or w, m.group(3))
        cands = [_latest_start(now, h, mi, tz)] + ([] if pinned else [_latest_start(now, (h + 12) % 24, mi, tz)])
        return out(max(cands), now_ms, m.group(0))
    # after 23:00 / before 9am (a clock time: "after the trip" is below)
    m = re.search(r"\b(after|before|until|till|up to)\s+%s" % _CLOCK, q)
    if m and (re.fullmatch(r"\d{1,2}[:.h]\d\d", m.group(2)) or m.group(3) or _BARE_END.match(q, m.end())):
        h, mi, pinned = _clock(m.group(2), m.group(3))
        cands = [_latest_start(now, h, mi, tz)] + ([] if pinned else [_latest_start(now, (h + 12) % 24, mi, tz)])
        if m.group(1) == "after":
            return out(max(cands), now_ms, m.group(0))
        # "before 9" late in the day: the 9 the log has a before of (the morning's), not the evening's
        return out(first_ms, min([c for c in cands if c > first_ms] or [max(cands)]), m.group(0))
    # around ten / about 10:30
    m = re.search(r"\b(?:around|about|near|approximately|approx\.?|roughly|circa|ca\.)\s+(?:at\s+)?%s" % _CLOCK, q)
    if m:
        h, mi, pinned = _clock(m.group(1), m.group(2) or _half_of_day(q))
        # "about 10:05" is read off a 24-hour clock (a plant's), where "around ten" may be either half of the day
        pinned = pinned or ":" in m.group(1)
        cands = []
        for hh in (h,) if pinned else (h, (h + 12) % 24):
            for back in range(0, 8):
                c = _at(today - datetime.timedelta(days=back), hh, mi, tz)
                if first_ms - AROUND * 60000 <= c <= now_ms + AROUND * 60000:
                    cands.append(c)
        if cands:
            c = max(cands)
            return out(c - AROUND * 60000, c + AROUND * 60000, m.group(0).strip())
        c = _latest_start(now, h, mi, tz)
        return out(c - AROUND * 60000, c + AROUND * 60000, m.group(0).strip())
    # shifts
    m = re.search(r"\b(?:(this|current|present|last|previous)\s+)?(day|morning|early|late|afternoon|evening|swing|"
                  r"night|graveyard)[ -]shift\b", q)
    if m or re.search(r"\b(?:this|current|present) shift\b", q):
        if m is None:
            name = next(n for n, (a, b) in SHIFTS.items() if _in_hours(now.hour, a, b))
            said = "this shift"
        else:
            name, said = SHIFT_WORDS[m.group(2)], "on the %s shift" % SHIFT_WORDS[m.group(2)]
        a, b = SHIFTS[name]
        t0, t1 = _range(now, a, b, tz)
        if m is not None and m.group(1) in ("last", "previous") and t1 >= now_ms:  # the one before the current
            t0, t1 = t0 - _DAY_MS, t1 - _DAY_MS
        return out(t0, t1, "%s (%02d-%02d)" % (said, a, b))
    if re.search(r"\bovernight\b", q):
        a, b = SHIFTS["night"]
        t0, t1 = _range(now, a, b, tz)
        return out(t0, t1, "overnight")
    # parts of the day
    for pat, (a, b), said in ((r"(?<!in )\b(?:this|the) morning\b", MORNING, "this morning"),
                              (r"(?<!in )\b(?:this|the) afternoon\b", AFTERNOON, "this afternoon"),
                              (r"(?<!in )\b(?:this|the) evening\b", EVENING, "this evening")):
        if re.search(pat, q):
            return out(_at(today, a, 0, tz), _at(today, b, 0, tz) - 1, said)
    if re.search(r"\blast night\b|\bduring the night\b", q):
        d = today - datetime.timedelta(days=1)
        return out(_at(d, NIGHT[0], 0, tz), _at(today, NIGHT[1], 0, tz) - 1, "last night")
    if re.search(r"\btonight\b", q):
        d = today if now.hour >= NIGHT[1] else today - datetime.timedelta(days=1)
        return out(_at(d, NIGHT[0], 0, tz), _at(d, 24 + NIGHT[1], 0, tz) - 1, "tonight")
    if re.search(r"\byesterday\b", q):
        d = today - datetime.timedelta(days=1)
        return out(_at(d, 0, 0, tz), _at(today, 0, 0, tz) - 1, "yesterday")
    if re.search(r"\btoday\b|\bso far\b", q):
        return out(_at(today, 0, 0, tz), now_ms, "today")
    # after / before the trip
    m = re.search(r"\b(after|since|before)\s+(?:the|its|it)\s+(trip\w*|alarm|start\w*|stop\w*)", q)
    if m and anchor is not None:
        word = re.sub(r"(?:ped|ping|s|ed|ing|up)$", "", m.group(2)) or m.group(2)
        t = anchor(word)
        if t is not None:
            if m.group(1) == "before":
                return out(first_ms, t, "%s the %s" % (m.group(1), word))
            return out(t, now_ms, "%s the %s" % (m.group(1), word))
    return None


def _half_of_day(q: str) -> Optional[str]:
    """ "am" or "pm" where the question's part of the day says which ("around eight this morning"), else None."""
    if re.search(r"\b(?:this|the|in the) morning\b", q):
        return "am"
    if re.search(r"\b(?:this|the|in the) (?:afternoon|evening)\b|\btonight\b", q):
        return "pm"
    return None


_AT = re.compile(r"\b(?:at|around|about|near)?\s*([01]?\d|2[0-3])[:.h]([0-5]\d)\b(?!\s*(?:and|to|-))")


def at_minute(question: str, now_ms: int, tz: datetime.tzinfo) -> Optional[Span]:
    """ "what happened at 22:20?": AT minutes either side of the latest such minute (site time) by now, for the
    record's answers (span() leaves a named minute to the word search, which ranks its lines first)."""
    m = _AT.search(question)
    if m is None:
        return None
    t = _latest_start(site(now_ms, tz), int(m.group(1)), int(m.group(2)), tz)
    return Span(t - AT * 60000, min(now_ms, t + AT * 60000), "at %s:%s" % (m.group(1).zfill(2), m.group(2)), tz)


def _in_hours(h: int, a: int, b: int) -> bool:
    return a <= h < b if a < b else h >= a or h < b
