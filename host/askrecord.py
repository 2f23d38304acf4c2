"""Answers from the plant's record, for questions an operator asks in their own words (host/askintent.py reads
them, host/asktime.py their times): counts, what is still in alarm, what a machine did, a summary, the first or
last of something, whether it happened at all (or which did), a machine's state now, who acknowledged an alarm
(the ACK line's by=NAME), a signal's highest or lowest reading in a span (the sample lines' KEY=valueUNIT and the
values alarm lines carry), why a named machine tripped (its trip line's interlock and that point's alarm line).
Deterministic: read from the store's event and sample lines, never from a model; each answer names the lines it
rests on (Found.lines), its times are hh:mm in site time (the plant description's timezone) and its machines are
ids as the log writes them.

    found = askrecord.answer(store, "how many trips on the night shift?", vocab)   # Found or None
    found.text, found.lines                                                     # the answer, [(node id, line id)]

"Nothing of the kind in the log since ..." is said only where the record proves it: no event line of the kind
asked in the span it states, which begins no earlier than the store's first line of the machine (of any machine,
when the question names none); a span wholly before the log is said to be so. An alarm is "still in alarm" when its last line at the log's end leaves it RAISED, ACKED or
SHELVED (docs/PLANT.md: a CLEAR's RTN_UNACK or NORMAL ends it). An alarm is "never acknowledged" when no ACK line of
its point follows its raise up to the point's next raise or the log's end, and its node logged no LOST line between.
"""

from __future__ import annotations

import datetime
import functools
import re
from dataclasses import dataclass, field
from typing import Optional

from host import askintent, asktime, plantlines

MAX_ITEMS = 12  # events listed in one answer (the rest are counted)
MAX_LINES = 4  # log lines quoted at the end of an answer
NEAR_MS = 45 * 60000  # "why did it trip around eight?": a trip this far outside the span said is still the one meant
WHY_MS = 3600 * 1000  # how far before a trip its interlock point's alarm line is looked for
STATUS_LINES = 20000  # a node's latest lines searched for a machine's state (its samples come every few seconds)
NOUNS = {"trip": ("trip", "trips"), "alarm": ("alarm raised", "alarms raised"),
         "ack": ("acknowledgement", "acknowledgements"), "clear": ("alarm cleared", "alarms cleared"),
         "start": ("start", "starts"), "stop": ("stop", "stops"), "state": ("state change", "state changes")}
MACHINES = re.compile(r"(?i)\bhow many (?:different |separate )?(?:machines|units|assets|pieces of equipment|"
                      r"of (?:them|the machines))\b")
_EVENT_MATCH = "alarm OR ack OR clear OR state OR shelve OR unshelve"


@dataclass
class Found:
    """The record's answer: its text, the (node id, line id) of the lines it rests on, a line saying what."""

    text: str
    lines: list = field(default_factory=list)
    what: str = ""


@dataclass(frozen=True)
class _Ev:
    lid: int
    nid: int
    line: plantlines.Line


def bounds(store) -> tuple[Optional[int], Optional[int]]:
    """(first, newest) wall ms of the store's plant lines: the log's range; its newest line is the log's now."""
    with store._lock:  # noqa: SLF001 (a read of the store's own connection)
        db = store._db  # noqa: SLF001
        lo = hi = None
        for (nid,) in db.execute("SELECT id FROM nodes").fetchall():
            a = db.execute("SELECT wall_ms FROM logs WHERE node=? AND level>0 ORDER BY wall_ms, id LIMIT 1",
                           (nid,)).fetchone()
            b = db.execute("SELECT wall_ms FROM logs WHERE node=? AND level>0 ORDER BY wall_ms DESC, id DESC LIMIT 1",
                           (nid,)).fetchone()
            if a is not None:
                lo = a[0] if lo is None else min(lo, a[0])
                hi = b[0] if hi is None else max(hi, b[0])
    return lo, hi


def events(store, t0: int, t1: int) -> list[_Ev]:
    """The alarm and state lines with wall times t0..t1, in time order (the FTS5 index finds them: no scan)."""
    with store._lock:  # noqa: SLF001
        rows = store._db.execute(  # noqa: SLF001
            "SELECT logs.id, logs.node, logs.text FROM logs_fts JOIN logs ON logs.id=logs_fts.rowid WHERE logs_fts "
            "MATCH ? AND logs.level>0 AND logs.wall_ms BETWEEN ? AND ? ORDER BY logs.wall_ms, logs.id",
            (_EVENT_MATCH, t0, t1)).fetchall()
    out = []
    for lid, nid, text in rows:
        ln = plantlines.parse(text)
        if ln is not None and ln.kind in ("alarm", "state"):
            out.append(_Ev(lid, nid, ln))
    return out


def zone(vocab, ids) -> datetime.tzinfo:
    """The site time zone of the question's machines' plant (the first one's), else of the store's plants."""
    for d in vocab.descs:
        if any(d.machine(i) for i in ids):
            return d.tz
    real = [d for d in vocab.descs if not d.simulator] or list(vocab.descs)
    return real[0].tz if real else datetime.timezone.utc


def is_event(ln: plantlines.Line, what: str) -> bool:
    """Whether the line is an event of the kind (askintent.EVENTS' names) in the log grammar."""
    if ln.kind == "alarm":
        return {"alarm": "ALARM", "ack": "ACK", "clear": "CLEAR"}.get(what) == ln.verb
    if ln.kind != "state":
        return False
    a, b = ln.from_state, ln.to_state
    if what == "trip":
        return b == "TRIPPED"
    if what == "start":
        return b == "STARTING" or (b == "RUNNING" and a != "STARTING")
    if what == "stop":
        return b in ("STOPPING", "STOPPED") and a in ("RUNNING", "STARTING")
    return what == "state"


def _matches(ev: _Ev, it: askintent.Intent, kinds: tuple) -> bool:
    ln = ev.line
    if it.machines and ln.machine not in it.machines:
        return False
    if not any(is_event(ln, k) for k in kinds):
        return False
    if ln.kind == "alarm":
        if it.level and ln.level != it.level:
            return False
        if it.tags and ln.tag not in it.tags:
            return False
    return True


def describe(ln: plantlines.Line) -> str:
    """An event line in words: "HI bearing_temp alarm raised (81.2C)", "tripped (interlock HIHI_VIB)"."""
    if ln.kind == "alarm":
        v = "" if ln.value is None else " (%g%s)" % (ln.value, ln.unit or "")
        verb = {"ALARM": "alarm raised", "ACK": "alarm acknowledged", "CLEAR": "alarm cleared",
                "SHELVE": "alarm shelved", "UNSHELVE": "alarm unshelved"}[ln.verb]
        by = " by %s" % ln.extras["by"] if "by" in ln.extras else ""
        return "%s %s %s%s%s" % (ln.level, ln.tag, verb, by, v if ln.verb == "ALARM" else "")
    if ln.to_state == "TRIPPED":
        return "tripped (%s)" % (ln.cause or "").replace("=", " ")
    return "%s->%s (%s)" % (ln.from_state, ln.to_state, ln.cause)


def _noun(kind: str, n: int) -> str:
    return "%d %s" % (n, NOUNS[kind][n != 1])


def _date(ms: int, tz) -> str:
    return asktime.site(ms, tz).strftime("%Y-%m-%d")


class _Ask:
    """One question against one store: its intent, span, zone and the lines found."""

    def __init__(self, store, it: askintent.Intent, vocab, first: int, now: int):
        self.store, self.it, self.vocab, self.first, self.now = store, it, vocab, first, now
        self.tz = zone(vocab, it.machines)
        self.span = asktime.span(it.question, now, first, self.tz, anchor=self._anchor) or \
            asktime.at_minute(it.question, now, self.tz)
        self.cited: list = []

    def _anchor(self, word: str) -> Optional[int]:
        kind = {"trip": "trip", "alarm": "alarm", "start": "start", "stop": "stop"}.get(word)
        if kind is None:
            return None
        evs = [e for e in events(self.store, self.first, self.now)
               if is_event(e.line, kind) and (not self.it.machines or e.line.machine in self.it.machines)]
        return evs[-1].line.wall_ms if evs else None

    def hm(self, ms: int) -> str:
        return asktime.hm(ms, self.tz)

    def window(self) -> tuple[int, int]:
        return (self.span.t0_ms, self.span.t1_ms) if self.span else (self.first, self.now)

    def when(self) -> str:
        """The span in words: "on the night shift (22:00-06:00 site time, 2026-11-29)" or "since 06:00 site time
        on 2026-11-30" (the whole log)."""
        if self.span is not None:
            return self.span.describe()
        return "since %s site time on %s" % (self.hm(self.first), _date(self.first, self.tz))

    def who(self) -> str:
        return " of %s" % ", ".join(self.it.machines) if self.it.machines else ""

    def nothing(self, what: str) -> Optional[str]:
        """The record's finding that nothing of the kind happened, where it proves it (else None)."""
        t0, t1 = self.window()
        since = min((s for s in (self.store.since_ms(m) for m in self.it.machines) if s is not None), default=None) \
            if self.it.machines else self.first
        if since is None:
            return "Nothing of the kind in the log: no line names %s." % ", ".join(self.it.machines)
        if t1 < since:
            return ("The log holds no line of that time: it begins at %s site time on %s."
                    % (self.hm(since), _date(since, self.tz)))
        t0 = max(t0, since)
        if self.span is None:
            return "Nothing of the kind in the log since %s site time on %s: %s." % (
                self.hm(t0), _date(t0, self.tz), what)
        return "Nothing of the kind in the log between %s and %s site time on %s (%s): %s." % (
            self.hm(t0), self.hm(t1), _date(t0, self.tz), self.span.said, what)

    def matching(self, kinds: tuple) -> list[_Ev]:
        t0, t1 = self.window()
        return [e for e in events(self.store, t0, t1) if _matches(e, self.it, kinds)]

    def cite(self, evs) -> None:
        for e in evs:
            if (e.nid, e.lid) not in self.cited:
                self.cited.append((e.nid, e.lid))

    def item(self, e: _Ev, machine: bool = True) -> str:
        return "%s %s%s" % (self.hm(e.line.wall_ms), e.line.machine + " " if machine else "", describe(e.line))

    def kind_words(self, kind: str, n: int = 2) -> str:
        """ "HI bearing temperature alarms raised": the kind's noun with the level and signals asked about."""
        lv = "%s " % self.it.level if self.it.level and kind in ("alarm", "ack", "clear") else ""
        sig = "%s " % " or ".join(self.it.signals) if self.it.signals and kind in ("alarm", "ack", "clear") else ""
        return lv + sig + NOUNS[kind][n != 1]

    # ---- the answers ----

    def count(self) -> str:
        parts = []
        for kind in self.it.events:
            evs = self.matching((kind,))
            if not evs:
                parts.append("0 %s%s %s. %s" % (self.kind_words(kind), self.who(), self.when(),
                                                  self.nothing("no %s%s" % (self.kind_words(kind), self.who()))))
                continue
            self.cite(evs[:MAX_LINES])
            ids = list(dict.fromkeys(e.line.machine for e in evs))
            if MACHINES.search(self.it.question):  # "how many machines went down?": machines, not events
                parts.append("%d machine%s with %s %s: %s (%s in all)." % (
                    len(ids), "s" if len(ids) != 1 else "", NOUNS[kind][1], self.when(), ", ".join(ids[:MAX_ITEMS]),
                    _noun(kind, len(evs))))
                continue
            many = len(ids) > 1 or len(self.it.machines) != 1
            times = ", ".join("%s%s" % (self.hm(e.line.wall_ms), " " + e.line.machine if many else "")
                              for e in evs[:MAX_ITEMS])
            more = " and %d more" % (len(evs) - MAX_ITEMS) if len(evs) > MAX_ITEMS else ""
            parts.append("%s %s%s %s: %s%s." % (len(evs), self.kind_words(kind, len(evs)), self.who(), self.when(),
                                                times, more))
        return " ".join(parts)

    def still_on(self, machines: tuple, logged: Optional[list] = None) -> tuple[list, dict]:
        """(the alarms of these machines (all: none named) still on at the end of the log, as (key, its latest
        line) in the order raised; every alarm's raise by key). logged: the event lines, where already read."""
        last: dict = {}
        raised: dict = {}
        for e in events(self.store, self.first, self.now) if logged is None else logged:
            ln = e.line
            if ln.kind != "alarm" or (machines and ln.machine not in machines):
                continue
            key = (e.nid, ln.machine, ln.level, ln.tag)
            last[key] = e
            if ln.verb == "ALARM":
                raised[key] = e
        on = [(k, e) for k, e in last.items() if e.line.astate in ("RAISED", "ACKED", "SHELVED") and k in raised]
        on.sort(key=lambda x: raised[x[0]].line.wall_ms)
        return on, raised

    def _on_items(self, on: list, raised: dict) -> str:
        items = []
        for k, e in on[:MAX_ITEMS]:
            r = raised[k].line
            state = {"ACKED": "acknowledged", "RAISED": "not acknowledged", "SHELVED": "shelved"}[e.line.astate]
            items.append("%s %s %s raised %s, %s" % (r.machine, r.level, r.tag, self.hm(r.wall_ms), state))
        more = "; and %d more" % (len(on) - MAX_ITEMS) if len(on) > MAX_ITEMS else ""
        return "; ".join(items) + more

    def active(self) -> str:
        on, raised = self.still_on(self.it.machines)
        at = "at the end of the log (%s site time, %s)" % (self.hm(self.now), _date(self.now, self.tz))
        if not on and not raised:  # a quiet log: nothing to clear
            return ("No alarm%s is still active %s: no alarm%s was raised since %s site time."
                    % (self.who(), at, self.who(), self.hm(self.first)))
        if not on:
            return ("No alarm%s is still active %s: every alarm raised since %s site time has cleared."
                    % (self.who(), at, self.hm(self.first)))
        self.cite([raised[k] for k, _ in on][:MAX_LINES])
        return "%d %s still active %s: %s." % (len(on), "alarm" if len(on) == 1 else "alarms", at,
                                               self._on_items(on, raised))

    def activity(self) -> str:
        kinds = self.it.events or ("trip", "alarm", "ack", "clear", "state")
        evs = self.matching(kinds)
        if not evs:
            what = "trip, alarm or state change" if not self.it.events else " or ".join(NOUNS[k][0] for k in kinds)
            return self.nothing("no %s%s" % (what, self.who()))
        self.cite(evs[:MAX_LINES])
        shown = evs[:MAX_ITEMS] if self.span is not None else evs[-MAX_ITEMS:]
        many = len(self.it.machines) != 1
        more = ""
        if len(evs) > len(shown):
            more = " (%d more %s)" % (len(evs) - len(shown), "after" if self.span is not None else "before these")
        return "%s %s: %d event%s%s: %s." % (", ".join(self.it.machines) or "The plant", self.when(), len(evs),
                                             "s" if len(evs) != 1 else "", more,
                                             "; ".join(self.item(e, many) for e in shown))

    def summary(self) -> str:
        kinds = self.it.events or ("trip", "alarm", "ack", "clear", "state")
        evs = self.matching(kinds)
        if not evs:
            return self.nothing("no trip, alarm or state change%s" % self.who())
        per: dict[str, list] = {}
        for e in evs:
            per.setdefault(e.line.machine, []).append(e)
        out = ["%s: %d %s on %d %s." % (self.when()[0].upper() + self.when()[1:], len(evs),
                                         "event" if len(evs) == 1 else "events", len(per),
                                         "machine" if len(per) == 1 else "machines")]
        for mid, es in per.items():
            bits = []
            for kind in ("trip", "alarm", "ack", "clear", "start", "stop"):
                if kind not in kinds and not (kind in ("start", "stop") and "state" in kinds):
                    continue
                ks = [e for e in es if is_event(e.line, kind)]
                if not ks:
                    continue
                if kind in ("trip", "alarm"):
                    self.cite(ks[:1])
                first = "%s %s" % (self.hm(ks[0].line.wall_ms), describe(ks[0].line) if kind == "alarm" else "")
                if len(ks) == 1:
                    bits.append("%s at %s" % (_noun(kind, 1), first.strip()))
                else:
                    bits.append("%s (first %s, last %s)" % (_noun(kind, len(ks)), first.strip(),
                                                            self.hm(ks[-1].line.wall_ms)))
            out.append("- %s: %s." % (mid, "; ".join(bits) or "%d events" % len(es)))
        quiet = [m for m in self._logged() if m not in per]
        if quiet and len(quiet) <= 8:
            out.append("- quiet (no such event): %s." % ", ".join(quiet))
        return "\n".join(out[:MAX_ITEMS + 2])

    def _logged(self) -> list[str]:
        ids = [m.id for d in self.vocab.descs if not d.simulator for m in d.machines]
        return self.store.machines(ids) if ids and len(ids) <= 256 else []

    def first_or_last(self, last: bool) -> str:
        evs = self.matching(self.it.events)
        kind = self.it.events[0]
        words = "%s%s" % (self.kind_words(kind), self.who())
        if not evs:
            return self.nothing("no %s" % words)
        e = evs[-1] if last else evs[0]
        self.cite([e])
        noun = NOUNS[kind][0] if not (self.it.level and kind == "alarm") else "%s alarm" % self.it.level
        if self.it.signals and kind == "alarm":
            noun = "%s alarm" % " ".join(x for x in (self.it.level, " or ".join(self.it.signals)) if x)
        return "The %s %s of %s was at %s site time on %s: %s." % (
            "last" if last else "first", noun, e.line.machine, self.hm(e.line.wall_ms), _date(e.line.wall_ms, self.tz),
            describe(e.line))

    def status(self) -> str:
        """Each machine's state in its latest line and since when (its last state change), and its alarms still
        on at the end of the log ("is it running normally, or is an alarm raised on it?" asks both)."""
        out = []
        logged = events(self.store, self.first, self.now)  # the state changes and alarms: one read for all
        for mid in self.it.machines:
            with self.store._lock:  # noqa: SLF001
                db = self.store._db  # noqa: SLF001
                rows = []  # each node's latest lines naming it (one index walk back from the end, bounded)
                for (nid,) in db.execute("SELECT id FROM nodes").fetchall():
                    rows += db.execute("SELECT id, node, text, wall_ms FROM (SELECT id, node, text, wall_ms FROM logs "
                                       "WHERE node=? AND level>0 ORDER BY wall_ms DESC, id DESC LIMIT ?) WHERE "
                                       "instr(text, ?) > 0 LIMIT 50", (nid, STATUS_LINES, " %s " % mid)).fetchall()
            rows.sort(key=lambda r: (-r[3], -r[0]))
            lines = [(lid, nid, plantlines.parse(t)) for lid, nid, t, _ in rows]
            last = next(((lid, nid, ln) for lid, nid, ln in lines if ln is not None and ln.machine == mid
                         and ln.kind in ("sample", "state")), None)
            if last is None:
                out.append(self.nothing("no line names %s's state" % mid) or "")
                continue
            lid, nid, ln = last
            state = ln.plc if ln.kind == "sample" else ln.to_state
            self.cite([_Ev(lid, nid, ln)])
            change = next((e for e in reversed(logged) if e.line.kind == "state" and e.line.machine == mid), None)
            since = ""
            if change is not None and change.line.to_state == state:
                since = " since %s (%s)" % (self.hm(change.line.wall_ms), describe(change.line))
                self.cite([change])
            on, raised = self.still_on((mid,), logged)
            if on:
                self.cite([raised[k] for k, _ in on][:MAX_LINES])
                alarms = "; %d %s still active: %s" % (len(on), "alarm" if len(on) == 1 else "alarms",
                                                       self._on_items(on, raised))
            else:
                alarms = "; no alarm on it is active"
            out.append("%s was %s in its latest line at %s site time%s%s." % (mid, state, self.hm(ln.wall_ms), since,
                                                                             alarms))
        return " ".join(out)

    def ever(self, yes: str = "Yes: ") -> str:
        """Whether such events happened: "Yes: " and them (list: them), or the record's "Nothing of the kind"."""
        out = []
        for kind in self.it.events:
            evs = self.matching((kind,))
            words = "%s%s" % (self.kind_words(kind), self.who())
            if not evs:
                out.append(self.nothing("no %s" % words))
                continue
            self.cite(evs[:MAX_LINES])
            many = len({e.line.machine for e in evs}) > 1
            out.append("%s%s%s %s: %s%s." % (yes, _noun(kind, len(evs)), self.who(), self.when(),
                                                 ", ".join(self.item(e, many) for e in evs[:MAX_ITEMS]),
                                                 " and %d more" % (len(evs) - MAX_ITEMS) if len(evs) > MAX_ITEMS
                                                 else ""))
        return " ".join(out)


    # ---- why a machine tripped ----

    def why(self) -> str:
        """The trips asked about, each with its interlock and the alarm of the interlock's point that came before
        it (the description's point, the ALARM line of its machine, tag and level up to the trip): what the log
        shows of why. An approximate time ("around eight") that holds no trip of the machine gives the nearest
        trip within NEAR_MS of it; only a machine with no trip in the log is told there was none."""
        t0, t1 = self.window()
        logged = events(self.store, self.first, self.now)  # the trips and their alarm lines: one read
        every = [e for e in logged if _matches(e, self.it, ("trip",))]
        trips = [e for e in every if t0 <= e.line.wall_ms <= t1]
        near = ""
        if not trips and every and self.span is not None:
            mid = (t0 + t1) // 2
            best = min(every, key=lambda e: abs(e.line.wall_ms - mid))
            if abs(best.line.wall_ms - mid) <= NEAR_MS + (t1 - t0) // 2:
                trips, near = [best], "The trip nearest %s: " % self.span.said
        if not trips:
            return self.nothing("no trip%s" % self.who())
        out = []
        for e in trips[:MAX_ITEMS]:
            ln = e.line
            lock = (ln.cause or "").partition("=")[2] if (ln.cause or "").startswith("interlock=") else ""
            self.cite([e])
            head = "%s tripped at %s site time on %s" % (ln.machine, self.hm(ln.wall_ms), _date(ln.wall_ms, self.tz))
            if not lock:
                out.append("%s; its STATE line names no interlock (%s)." % (head, ln.cause or "no cause"))
                continue
            point = self._interlock_point(ln.machine, lock)
            if point is None:
                out.append("%s on interlock %s; the plant's description names no alarm point of it." % (head, lock))
                continue
            sig, a = point
            name = "%s (%s)" % (sig.tag, sig.words[0]) if sig.words else sig.tag
            raised = [x for x in logged if ln.wall_ms - WHY_MS <= x.line.wall_ms <= ln.wall_ms
                      and x.line.kind == "alarm" and x.line.verb == "ALARM" and x.line.machine == ln.machine
                      and x.line.tag == sig.tag and x.line.level == a.level and x.nid == e.nid]
            limit = "" if a.limit is None else ", limit %g%s" % (a.limit, sig.unit or "")
            if raised:
                r = raised[-1]
                self.cite([r])
                v = "" if r.line.value is None else " at %g%s" % (r.line.value, r.line.unit or "")
                out.append("%s on interlock %s: %s %s went %s%s%s (alarm raised %s)." % (
                    head, lock, ln.machine, name, a.level, v, limit, self.hm(r.line.wall_ms)))
            else:
                out.append("%s on interlock %s, the %s %s point%s; no %s alarm line of it before the trip." % (
                    head, lock, name, a.level, limit, a.level))
        return near + " ".join(out)

    def _interlock_point(self, mid: str, lock: str):
        """(signal, alarm point) of the machine whose point trips it by that interlock name, from its description."""
        for d in self.vocab.descs:
            m = d.machine(mid)
            for s in (m.signals if m else ()):
                for a in s.alarms:
                    if a.interlock == lock:
                        return s, a
        return None

    # ---- who acknowledged an alarm ----

    def _lost(self, nid: int, t0: int, t1: int) -> bool:
        """Whether the node logged a LOST line (events it dropped) in t0..t1: then an absence is not proved."""
        with self.store._lock:  # noqa: SLF001
            row = self.store._db.execute(  # noqa: SLF001
                "SELECT 1 FROM logs_fts JOIN logs ON logs.id=logs_fts.rowid WHERE logs_fts MATCH 'lost' AND "
                "logs.node=? AND logs.wall_ms BETWEEN ? AND ? AND substr(logs.text, 22, 5)='LOST ' LIMIT 1",
                (nid, t0, t1)).fetchone()
        return row is not None

    def acked_by(self) -> str:
        """Who acknowledged the alarms asked about (the ACK line's by=NAME), raised in the span: each raise's first
        ACK of the same point before the point's next raise; one with none is said "never acknowledged" only where
        the log holds the point's lines to its end (no LOST line between)."""
        t0, t1 = self.window()
        later = [e for e in events(self.store, t0, self.now) if e.line.kind == "alarm"]
        raises = [e for e in later if e.line.wall_ms <= t1 and _matches(e, self.it, ("alarm",))]
        said: list[str] = []
        low = self.it.question.lower()
        pick = slice(-1, None) if askintent.LAST.search(low) else slice(0, 1) if askintent.FIRST.search(low) \
            else slice(None)  # "the last alarm", "the first one": that raise only
        raises = raises[pick]
        if not raises:  # raised before the span (or the log): the ACK lines in it
            acks = [e for e in later if e.line.wall_ms <= t1 and _matches(e, self.it, ("ack",))]
            if not acks:
                return self.nothing("no %s%s" % (self.kind_words("alarm"), self.who()))
            acks = acks[pick]
            self.cite(acks[-MAX_LINES:])
            for a in acks[-MAX_ITEMS:]:
                said.append(self._acked(a, None))
            return " ".join(said)
        unacked = []
        for r in raises:
            key = (r.nid, r.line.machine, r.line.level, r.line.tag)
            ack = None
            end = self.now
            for e in later:
                if e.line.wall_ms < r.line.wall_ms or e.lid == r.lid or (e.nid, e.line.machine, e.line.level,
                                                                          e.line.tag) != key:
                    continue
                if e.line.verb == "ALARM" and e.line.wall_ms >= r.line.wall_ms and e.lid > r.lid:
                    end = e.line.wall_ms
                    break
                if e.line.verb == "ACK":
                    ack = e
                    break
            if ack is not None:
                self.cite([ack])
                said.append(self._acked(ack, r))
            else:
                unacked.append((r, end))
        if said and unacked:  # the question is about the acknowledgement: the raises nobody took are counted only
            said.append("(%d more raise%s of it without an ACK line.)" % (len(unacked),
                                                                         "s" if len(unacked) > 1 else ""))
            unacked = []
        for r, end in unacked[:MAX_ITEMS]:
            ln = r.line
            head = "The %s %s alarm of %s raised at %s site time" % (ln.level, ln.tag, ln.machine,
                                                                     self.hm(ln.wall_ms))
            if self._lost(r.nid, ln.wall_ms, end):
                said.append("%s has no ACK line in the log, but its node lost lines after it: the record cannot say "
                            "whether anyone acknowledged it." % head)
                continue
            self.cite([r])
            upto = "the log's end (%s site time)" % self.hm(end) if end == self.now else \
                "its next raise at %s site time" % self.hm(end)
            said.append("%s was never acknowledged: no ACK line for it up to %s." % (head, upto))
        return " ".join(said[:MAX_ITEMS + 1])

    def _acked(self, ack: _Ev, raised: Optional[_Ev]) -> str:
        ln = ack.line
        at = "%s site time on %s" % (self.hm(ln.wall_ms), _date(ln.wall_ms, self.tz))
        what = "the %s %s alarm of %s" % (ln.level, ln.tag, ln.machine)
        rose = " (raised %s)" % self.hm(raised.line.wall_ms) if raised is not None else ""
        if "by" in ln.extras:
            return "%s acknowledged %s%s at %s." % (ln.extras["by"], what, rose, at)
        return "%s%s was acknowledged at %s; its ACK line names no operator." % (what[0].upper() + what[1:], rose, at)

    # ---- a signal's highest or lowest sample ----

    def extreme(self, lowest: bool) -> str:
        """The highest (lowest) reading of the asked signals of each asked machine in the span (its sample lines and
        the values its alarm lines carry), the value and unit as the log writes them and the time of that reading
        (the first such, at a tie)."""
        t0, t1 = self.window()
        out = []
        word = "lowest" if lowest else "highest"
        for mid in self.it.machines[:MAX_ITEMS]:
            sigs = [s for d in self.vocab.descs for m in d.machines if m.id == mid for s in m.signals
                    if s.tag in self.it.tags]
            sigs = list({s.key: s for s in sigs}.values())
            if not sigs:
                out.append("%s has no %s signal in its plant's description." % (
                    mid, " or ".join(self.it.signals) or "such"))
                continue
            best: dict = {}  # key -> (value, text of the value, line id, node id, wall ms)
            for lid, nid, text, ms in self._samples(mid, t0, t1):
                for s in sigs:
                    m = _pair(s.key).search(text)
                    if m is None or m.group(2) is None:
                        continue
                    v = float(m.group(2))
                    b = best.get(s.key)
                    if b is None or (v < b[0] if lowest else v > b[0]):
                        best[s.key] = (v, m.group(1), lid, nid, ms)
            by_tag = {s.tag: s for s in sigs}
            for e in events(self.store, t0, t1):  # an alarm line's reading is a reading too (and finer-grained)
                ln = e.line
                s = by_tag.get(ln.tag) if ln.kind == "alarm" and ln.machine == mid else None
                if s is None or ln.value is None:
                    continue
                b = best.get(s.key)
                if b is None or (ln.value < b[0] if lowest else ln.value > b[0]):
                    said = re.search(r" %s (-?\d\S*)" % re.escape(ln.tag), ln.text)  # the value as written
                    best[s.key] = (ln.value, said.group(1) if said else "%g%s" % (ln.value, ln.unit or ""), e.lid,
                                   e.nid, ln.wall_ms)
            for s in sigs:
                name = "%s (%s)" % (s.words[0], s.tag) if s.words else s.tag
                b = best.get(s.key)
                if b is None:
                    out.append(self.nothing("no sample of %s's %s" % (mid, name)) or "")
                    continue
                self.cite([_Ev(b[2], b[3], plantlines.Line(b[4] // 1000, "sample", ""))])
                out.append("The %s %s of %s %s was %s, at %s site time." % (word, name, mid, self.when(), b[1],
                                                                             self.hm(b[4])))
        return " ".join(out)

    def _samples(self, mid: str, t0: int, t1: int):
        """(line id, node id, text, wall ms) of the machine's sample lines with wall times t0..t1, each node's by
        its time index, the machine picked by the line's own id word (docs/PLANT.md: `timestamp SP id SP ...`)."""
        head = "%s " % mid
        with self.store._lock:  # noqa: SLF001
            db = self.store._db  # noqa: SLF001
            for (nid,) in db.execute("SELECT id FROM nodes").fetchall():
                yield from db.execute("SELECT id, node, text, wall_ms FROM logs WHERE node=? AND wall_ms BETWEEN ? "
                                      "AND ? AND level>0 AND substr(text, 22, ?)=?", (nid, t0, t1, len(head),
                                                                                      head)).fetchall()


@functools.lru_cache(maxsize=256)
def _pair(key: str) -> re.Pattern:
    """ " KEY=valueUNIT" of a sample line (docs/PLANT.md): group 1 the value as written, 2 its number."""
    return re.compile(r" %s=((-?\d+(?:\.\d+)?)[A-Za-z%%/][A-Za-z0-9/%%.^_]*|\?)(?= |$)" % re.escape(key))


def answer(store, question: str, vocab) -> Optional[Found]:
    """The record's answer to the question, or None when it is not one the record answers (see askintent.read)
    or the store holds no plant line."""
    it = askintent.read(question, vocab)
    if it is None:
        return None
    first, now = bounds(store)
    if first is None:
        return None
    a = _Ask(store, it, vocab, first, now)
    text = {"count": a.count, "active": a.active, "activity": a.activity, "summary": a.summary,
            "first": lambda: a.first_or_last(False), "last": lambda: a.first_or_last(True),
            "ever": a.ever, "list": lambda: a.ever(""), "status": a.status, "who": a.acked_by,
            "peak": lambda: a.extreme(False), "lowest": lambda: a.extreme(True), "why": a.why}[it.what]()
    quoted = _quote(store, a.cited[:MAX_LINES])
    if quoted:
        text += "\nLines (UTC): " + " | ".join(quoted)
    return Found(text, a.cited, "%s%s%s" % (it.what, " of " + ", ".join(it.machines) if it.machines else "",
                                           ", " + a.span.said if a.span else ""))


def _quote(store, cited) -> list[str]:
    if not cited:
        return []
    with store._lock:  # noqa: SLF001
        rows = dict(store._db.execute("SELECT id, text FROM logs WHERE id IN (%s)"  # noqa: SLF001
                                      % ",".join("?" * len(cited)), [lid for _, lid in cited]).fetchall())
    return [rows[lid] for _, lid in cited if lid in rows]
