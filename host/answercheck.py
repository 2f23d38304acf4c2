"""answercheck.py: the target's answer held against the plant's record before the operator reads it.

Only the record may say that something did not happen, and an answer never contradicts the store. So `check`
reads what the answer states and looks for each in the lines (docs/GATEWAY.md, "Asking"):

    c = check(answer, windows, store, vocab)   # the windows it was given (cited first), the open LogStore
    c.answer                                   # what the operator reads
    [x.as_dict() for x in c.unconfirmed]       # what no line confirms, and why

What it reads, sentence by sentence, in the words of the plants' descriptions (host/logwords.Vocabulary: no
plant's names are written here):

- machines: the ids the answer writes (in any case; an id-like word no description has, as P-7, too) and the
  machines it names by their words or aliases. Confirmed by a line that names the machine.
- events: trip, alarm (HI, HIHI, LO, LOLO, BAD where said), acknowledged, cleared, started, stopped, sensor lost
  or BAD. Confirmed by such a line of the sentence's machine (of any machine where it names none).
- times (hh:mm, hh:mm:ss): confirmed by a line of the machine and the event said nearest before the time (else
  after it) that carries that minute in site time (the time zone of the machine's plant description; a time the answer marks "UTC" is
  read as UTC). "first" in the sentence: the first such line of the record.
- values with a unit of the descriptions ("27.9C", "9.4 bar"): confirmed by a line of the machine said nearest
  before it (else after it) that carries that value in that unit, within the rounding the answer wrote it with.

The lines searched are the windows' and then the store's (every line of the machine, newest 200,000 at most):
what a window holds is cited with the confirming line, what only the store holds confirms just as well.

A sentence that says something did not happen ("nothing of the kind", "no ... alarm", "did not trip", "never") is
never shown as the model wrote it: it is replaced by the record's finding for the machine and event it names (those
of the answer's other sentences or the question where it names none): the first such line with its time where the
store has one, else the record's own sentence (host/record.nothing). Where it names no machine and event, it is left out
and listed as not confirmed. Machines are shown by their ids as the log writes them: an id written in another
case than the log's ("p-1" -> "P-1"), a machine named only by its words with its id after them ("the air handler
(AHU-1)"); a bare time that is a confirming line's UTC minute (the prompt's windows are in UTC) in site time.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from host import logwords, plantlines, record

RECORD_LINES = 200000  # lines of one machine read from the store at most (the newest)
NOTHING_CONFIRMED = ("No answer the log confirms: the model said only that something did not happen, which only the "
                     "plant's record may say, and named nothing the record could be asked about.")

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)|\n+")
_TIME = re.compile(r"(?<![\d:.])([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?(?!\d|:\d)(\s*(?:UTC\b|Z\b))?", re.I)
_FIRST = re.compile(r"\bfirst\b|\bearliest\b", re.I)
_ABSENCE = re.compile(
    r"\bnothing of the kind\b|\bnever\b|\bno (?:[\w-]+ ){0,4}?(?:alarms?|trips?|events?|faults?|records?|lines?|"
    r"signs?|acknowledge?ments?|acks?)\b|\b(?:did|does|do|has|have|had|was|were)(?:n't| not)\b|\bnot (?:tripped|"
    r"raised|acknowledged|cleared|started|stopped)\b|\bnone\b", re.I)
# Events in the answer's words -> what a line must be (the grammar's, docs/PLANT.md; every plant logs it).
_LEVEL_WORDS = {"high-high": "HIHI", "high high": "HIHI", "low-low": "LOLO", "low low": "LOLO", "high": "HI",
                "low": "LO"}  # and the log's own, as it writes them: HIHI, LOLO, HI, LO, BAD
_LEVEL = re.compile(r"\b((?i:high-high|high high|low-low|low low|high|low))\b|\b(HIHI|LOLO|HI|LO|BAD)\b")
_EVENTS = [(re.compile(p, re.I), kind) for p, kind in (
    (r"\btrip(?:s|ped|ping)?\b|\binterlock\w*", "trip"),
    (r"\backnowledg\w*|\back(?:s|ed|ked)?\b", "ack"),
    (r"\bclear(?:s|ed|ing)?\b|\b(?:returned|back) to normal\b", "clear"),
    (r"\bsensor (?:was |went |is )?(?:lost|bad|failed|fault\w*)|\bbad (?:values?|readings?|data)\b|"
     r"\bsensor (?:loss|failure|fault)\b|\blost (?:its |the )?(?:sensor|signal|reading)s?\b", "bad"),
    (r"\balarm(?:s|ed)?\b", "alarm"),
    # "started", "start up", "started running at"; not "started running hot", "started to vibrate"
    (r"\bstart(?:s|ed|ing)? up\b|\bstart(?:s|ed)? running\b(?=\s*(?:$|[.,;:?!(\[]|at\b|again\b|after\b|on\b))|"
     r"\bstart(?:s|ed)?(?! \w+ing\b)(?! to\b)\b", "start"),
    (r"\bstop(?:s|ped)?\b|\bshut ?down\b|\bshut down\b", "stop"),
)]
_BARE_LEVEL = re.compile(r"\b(HIHI|LOLO|HI|LO)\b")  # the log's own level word, written as the log writes it
_EVENT_NAMES = {"trip": "trip", "ack": "acknowledgement", "clear": "clear", "bad": "sensor fault (BAD)",
                "alarm": "alarm", "start": "start", "stop": "stop"}


@dataclass
class Claim:
    """One thing the answer states and whether a line of the record confirms it."""

    kind: str  # "machine" | "event" | "time" | "value" | "absence"
    text: str  # as the answer writes it ("P-1", "HI alarm", "06:34", "27.9C", a sentence)
    machine: Optional[str] = None  # the machine it is about, as the log writes its id
    confirmed: bool = False
    line: str = ""  # the line that confirms it (a window's where one does), or the record's finding
    why: str = ""  # what the record lacks (or holds instead), when not confirmed

    def as_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "machine": self.machine, "confirmed": self.confirmed,
                "line": self.line, "why": self.why}

    def describe(self) -> str:
        """One line for the operator: what was said, and why no line confirms it."""
        return "%s%s" % (self.text, " (%s)" % self.why if self.why else "")


@dataclass
class Check:
    """The answer as the operator reads it, the model's own text, and every claim found in it."""

    answer: str
    said: str
    claims: list = field(default_factory=list)

    @property
    def unconfirmed(self) -> list:
        return [c for c in self.claims if not c.confirmed]


@dataclass(frozen=True)
class _Event:
    kind: str  # a key of _EVENT_NAMES
    level: Optional[str]  # HI, HIHI, LO, LOLO, BAD or None
    span: tuple
    text: str

    def name(self) -> str:
        if self.kind in ("alarm", "ack", "clear") and self.level:
            return "%s %s" % (self.level, _EVENT_NAMES[self.kind])
        return _EVENT_NAMES[self.kind]

    def holds(self, ln: "plantlines.Line") -> bool:
        """Whether the parsed line is this event (of any machine)."""
        k = self.kind
        if k == "trip":
            return ln.is_trip
        if k in ("alarm", "ack", "clear"):
            verb = {"alarm": "ALARM", "ack": "ACK", "clear": "CLEAR"}[k]
            return ln.kind == "alarm" and ln.verb == verb and (self.level is None or ln.level == self.level)
        if k == "bad":
            return (ln.kind == "alarm" and ln.level == "BAD" and ln.verb == "ALARM"
                    or ln.kind == "sample" and any(v is None for v, _ in ln.values.values()))
        if k == "start":
            return ln.kind == "state" and ln.to_state in ("STARTING", "RUNNING") and ln.from_state != "STARTING"
        if k == "stop":
            return ln.kind == "state" and ln.to_state in ("STOPPING", "STOPPED", "TRIPPED")
        return False


def _events(sentence: str) -> list[_Event]:
    """The events a sentence names; an alarm's level is the level word said just before it ("the first HI alarm",
    "a high vibration alarm") or right after it ("alarm high"), an acknowledgement's or clear's the one before or
    just after it ("acked the HI alarm"); a level word as the log writes it ("went HIHI") that no event carries is
    an alarm of that level."""
    out: list[_Event] = []
    taken: list[tuple] = []
    for pat, kind in _EVENTS:
        for m in pat.finditer(sentence):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            taken.append(m.span())
            level = None
            if kind in ("alarm", "ack", "clear"):
                before = list(_LEVEL.finditer(sentence[:m.start()][-48:]))
                rest = sentence[m.end():m.end() + (12 if kind == "alarm" else 32)]
                after = [x for x in _LEVEL.finditer(rest) if kind != "alarm" or not rest[:x.start()].strip()]
                w = before[-1] if before else (after[0] if after else None)
                if w is not None:
                    level = _LEVEL_WORDS[w.group(1).lower()] if w.group(1) else w.group(2)
            out.append(_Event(kind, level, m.span(), m.group(0)))
    for m in _BARE_LEVEL.finditer(sentence):
        if not any(e.level == m.group(1) for e in out):
            out.append(_Event("alarm", m.group(1), m.span(), m.group(0)))
    return sorted(out, key=lambda e: e.span)


def _nearest(items: Sequence, span: tuple, pos: Callable) -> object:
    """The item said nearest before the span ("P-1 tripped at 06:34": the trip, P-1), else the nearest after it
    ("at 06:34 P-1 tripped"), or None."""
    before = [x for x in items if pos(x) < span[0]]
    if before:
        return max(before, key=pos)
    after = [x for x in items if pos(x) >= span[1]]
    return min(after, key=pos) if after else None


def _decimals(s: str) -> int:
    return len(s.split(".", 1)[1]) if "." in s else 0


class _Record:
    """The lines an answer is checked against: the windows' first, then the store's (per machine, read once)."""

    def __init__(self, store, vocab, windows: Sequence):
        self.store, self.vocab = store, vocab
        self.zones: dict = {}
        for d in vocab.descs:
            for m in d.machines:
                self.zones.setdefault(m.id, d.tz)
        zones = {str(z) for z in self.zones.values()}
        self.default_zone = next(iter(self.zones.values())) if len(zones) == 1 else datetime.timezone.utc
        self.window_lines: list = []
        seen: set = set()
        for w in windows:
            text = w if isinstance(w, str) else w.text
            for t in text.splitlines():
                ln = plantlines.parse(t.strip())
                if ln is not None and ln.text not in seen:
                    seen.add(ln.text)
                    self.window_lines.append(ln)
        self._of: dict = {}
        self._events: Optional[list] = None

    def zone(self, machine: Optional[str]):
        return self.zones.get(machine or "", self.default_zone)

    def hm(self, ln, utc: bool = False) -> str:
        """The line's minute "HH:MM" in its machine's site time (UTC when asked)."""
        tz = datetime.timezone.utc if utc else self.zone(ln.machine)
        return datetime.datetime.fromtimestamp(ln.time, tz).strftime("%H:%M")

    def zone_name(self, machine: Optional[str]) -> str:
        return str(self.zone(machine))  # "UTC", "Europe/Berlin"

    def any_at(self, hm: str, utc: bool) -> Optional["plantlines.Line"]:
        """A plant line of any machine whose minute is `hm` (site time, or UTC): for a time the answer gives with no
        machine or event to pin it to ("since 06:00")."""
        db = self.store._db  # noqa: SLF001 (as in _store_lines)
        tz = datetime.timezone.utc if utc else self.default_zone
        with self.store._lock:  # noqa: SLF001
            ends = db.execute("SELECT min(wall_ms), max(wall_ms) FROM logs WHERE level>0").fetchone()
            if ends[0] is None:
                return None
            want = set()  # that minute in UTC, at the offsets of the store's first and last lines
            for ms in ends:
                at = datetime.datetime.fromtimestamp(ms / 1000, tz)
                local = at.replace(hour=int(hm[:2]), minute=int(hm[3:]))
                want.add(local.astimezone(datetime.timezone.utc).strftime("%H:%M"))
            rows = db.execute("SELECT text FROM logs WHERE level>0 AND substr(text, 12, 5) IN (%s) ORDER BY id "
                              "LIMIT 64" % ",".join("?" * len(want)), tuple(want)).fetchall()
        for (t,) in rows:
            ln = plantlines.parse(t)
            if ln is not None and self.hm(ln, utc) == hm:
                return ln
        return None

    def _store_lines(self, sql_match: str, machine: Optional[str]) -> list:
        db = self.store._db  # noqa: SLF001 (a read of the store's own connection, as host/qa.py's)
        sql = ("SELECT text FROM (SELECT logs.id, logs.text FROM logs_fts JOIN logs ON logs.id=logs_fts.rowid "
               "WHERE logs_fts MATCH ? AND logs.level>0%s ORDER BY logs.id DESC LIMIT ?) ORDER BY id")
        with self.store._lock:  # noqa: SLF001
            if machine is None:
                rows = db.execute(sql % "", (sql_match, RECORD_LINES)).fetchall()
            else:
                rows = db.execute(sql % " AND instr(' ' || logs.text || ' ', ?) > 0",
                                  (sql_match, " %s " % machine, RECORD_LINES)).fetchall()
        out = []
        for (t,) in rows:
            ln = plantlines.parse(t)
            if ln is not None:
                out.append(ln)
        return out

    def lines(self, machine: Optional[str]) -> list:
        """The lines of `machine` (every event line where None): the windows' first, then the store's in order."""
        own = [ln for ln in self.window_lines if (ln.is_event if machine is None else ln.machine == machine)]
        held = {ln.text for ln in own}
        if machine is None:
            if self._events is None:
                self._events = self._store_lines("alarm OR state OR ack OR clear OR lost", None)
            rest = self._events
        else:
            if machine not in self._of:
                self._of[machine] = self._store_lines('"%s"' % machine.lower().replace('"', ""), machine)
            rest = self._of[machine]
        return own + [ln for ln in rest if ln.text not in held]

    def first(self, machine: Optional[str], pred: Callable) -> Optional["plantlines.Line"]:
        """The record's first line of `machine` that pred holds for (by time, then store order)."""
        hits = [ln for ln in self.lines(machine) if pred(ln)]
        return min(hits, key=lambda ln: ln.time) if hits else None

    def find(self, machine: Optional[str], pred: Callable) -> Optional["plantlines.Line"]:
        """A line of `machine` that pred holds for: a window's where one does, else the store's first."""
        for ln in self.lines(machine):
            if pred(ln):
                return ln
        return None


def _units(vocab) -> list[str]:
    return sorted({s.unit for d in vocab.descs for m in d.machines for s in m.signals}, key=len, reverse=True)


def _value_re(units: Sequence[str]) -> Optional[re.Pattern]:
    if not units:
        return None
    alts = "|".join(re.escape(u) for u in units)
    return re.compile(r"(?<![\w.:-])(-?\d+(?:\.\d+)?)\s?(?:°|deg(?:rees)?\s?)?(%s)(?![\w/%%-])" % alts)


def _machine_spans(sentence: str, vocab, nodes: set) -> list[tuple]:
    """(start, end, id, written) of each machine the sentence names: an id as written, or its words."""
    r = vocab.read(sentence)
    low = sentence.lower()
    out = []
    for mid in r.written:
        if mid in nodes:
            continue
        for m in re.finditer(r"(?<![\w-])%s(?![\w]|-\w)" % re.escape(mid), sentence, re.I):
            out.append((m.start(), m.end(), mid, m.group(0)))
    for mid in r.by_name:
        names = [w for d in vocab.descs for mm in d.machines if mm.id == mid for w in mm.words + mm.aliases]
        hit = None
        for w in sorted(names, key=len, reverse=True):
            i = low.find(w.lower())
            if i >= 0:
                hit = (i, i + len(w), mid, sentence[i:i + len(w)])
                break
        if hit is None:  # by kind and number ("pump 2"): where the kind is said
            kinds = vocab.kind_of(mid)
            i = next((low.find(k.lower()) for k in kinds if low.find(k.lower()) >= 0), 0)
            hit = (i, i + 1, mid, "")
        if not any(a < hit[1] and hit[0] < b for a, b, _, _ in out):
            out.append(hit)
    return sorted(out)


def check(answer: str, windows: Sequence, store, vocab=None, question: str = "") -> Check:
    """The answer held against the record: `windows` the ones it was given (Sources, Windows or their texts; the
    cited ones first), `store` an open host.store.LogStore, `vocab` the words of its plants (host/record.vocabulary;
    None: read from the store), `question` only where an absence names no machine or event of its own."""
    if vocab is None:
        vocab = record.vocabulary(store)
    rec = _Record(store, vocab, windows)
    nodes = {n["name"] for n in store.nodes()} | {getattr(w, "node", "") for w in windows}
    value_re = _value_re(_units(vocab))
    parts = [p for p in _SENTENCE.split(answer.strip()) if p.strip()]
    seen_machines = [m for p in parts for m in (x[2] for x in _machine_spans(p, vocab, nodes))]
    asked_machines = [m for m in logwords.named_ids(question, vocab) if m not in nodes] if question else []
    claims: list[Claim] = []
    shown: list[str] = []
    done: dict = {}  # (kind, text, machine) -> its claim: one claim per thing said

    def add(c: Claim) -> None:
        key = (c.kind, c.text, c.machine)
        if key not in done:
            done[key] = c
            claims.append(c)

    for part in parts:
        machines = _machine_spans(part, vocab, nodes)
        events = _events(part)
        if _ABSENCE.search(part):
            text, claim = _absence(part, machines, events, seen_machines, asked_machines, question, rec)
            add(claim)
            if text:
                shown.append(text)
            continue
        # machines: a line names each
        for a, b, mid, written in machines:
            known = bool(rec.lines(mid))
            add(Claim("machine", written or mid, mid, known, _line_of(rec, mid) if known else "",
                      "" if known else "no line of the log names %s" % mid))
        context = [m[2] for m in machines] or seen_machines[:1] or asked_machines[:1]
        # events: such a line of the sentence's machine
        for e in events:
            m = _nearest(machines, e.span, lambda x: x[0])
            mids = [m[2]] if m else context[:1] or [None]
            ln = next((x for mid in mids for x in [rec.find(mid, e.holds)] if x), None)
            said = "%s %s" % (mids[0], e.name()) if mids[0] else e.name()
            add(Claim("event", said, mids[0], ln is not None, ln.text if ln else "",
                      "" if ln else "no %s line of %s in the log" % (e.name(), mids[0] or "any machine")))
        # times: a line of the nearest machine and event carries that minute in site time
        # ids as the log writes them ("p-1" -> "P-1"), a machine named by its words with its id ("the air handler
        # (AHU-1)") where the sentence does not write it
        ids = {mid for a, b, mid, written in machines if written.lower() == mid.lower()}
        edits = [(a, b, mid) for a, b, mid, written in machines if written.lower() == mid.lower() and written != mid]
        edits += [(b, b, " (%s)" % mid) for a, b, mid, written in machines
                  if written and written.lower() != mid.lower() and mid not in ids]
        for t in _TIME.finditer(part):
            claim, site = _time_claim(part, t, machines, events, context, rec)
            add(claim)
            if site:
                edits.append((t.start(), t.start() + 5, site))
        # values: a line of the nearest machine carries it in that unit
        if value_re is not None:
            for v in value_re.finditer(part):
                add(_value_claim(v, machines, context, rec))
        for a, b, new in sorted(edits, reverse=True):
            part = part[:a] + new + part[b:]
        shown.append(part)
    text = " ".join(shown).strip()
    if not text and answer.strip():  # every sentence was an absence the record could not be asked about
        text = NOTHING_CONFIRMED
    return Check(text, answer, claims)


def _line_of(rec: _Record, mid: str) -> str:
    lines = rec.lines(mid)
    return lines[0].text if lines else ""


def _time_claim(part: str, t: re.Match, machines: list, events: list, context: list,
                rec: _Record) -> tuple[Claim, str]:
    """(the claim of one time, the site time to show instead or ""): a bare time that is the confirming line's
    UTC minute (the prompt's windows are in UTC) but not its site minute is shown in site time."""
    hm = "%s:%s" % (t.group(1), t.group(2))
    utc = bool(t.group(4))
    m = _nearest(machines, t.span(), lambda x: x[0])
    mid = m[2] if m else (context[0] if context else None)
    e = _nearest(events, t.span(), lambda x: x.span[0])
    first = bool(_FIRST.search(part)) and e is not None
    what = ("%s %s" % (mid, e.name()) if mid else e.name()) if e else (mid or "a line")
    text = t.group(0).strip()
    # a bare time may be site time or the windows' UTC: both are tried (on a store of plants in several zones and
    # no machine named, the site time is each line's own machine's)
    for as_utc in (False, True) if not utc else (True,):
        if first:
            ln = rec.first(mid, e.holds)
            ok = ln is not None and rec.hm(ln, as_utc) == hm
        elif mid is None and e is None:
            ln = rec.any_at(hm, as_utc)
            ok = ln is not None
        else:
            ln = rec.find(mid, lambda x: (e is None or e.holds(x)) and rec.hm(x, as_utc) == hm)
            ok = ln is not None
        if ok:
            site = rec.hm(ln) if as_utc and not utc else ""
            return Claim("time", site or text, mid, True, ln.text), site
    # what the record holds instead, in site time
    other = rec.first(mid, e.holds) if e is not None else None
    zone = "UTC" if utc else rec.zone_name(other.machine if other is not None else mid)
    if other is not None:
        why = "the log has %s%s at %s %s, not %s: %s" % ("the first " if first else "", what,
                                                        rec.hm(other, utc), zone, hm, other.text)
    elif e is not None:
        why = "no %s line in the log" % what
    else:
        why = "no line of %s at %s %s" % (mid or "the log", hm, zone)
    return Claim("time", text, mid, False, "", why), ""


def _value_claim(v: re.Match, machines: list, context: list, rec: _Record) -> Claim:
    num, unit = v.group(1), v.group(2)
    x = float(num)
    tol = 0.5 * 10 ** -_decimals(num) + 1e-9
    m = _nearest(machines, v.span(), lambda y: y[0])
    mid = m[2] if m else (context[0] if context else None)

    def carries(ln) -> bool:
        if ln.kind == "alarm":
            vals = [(ln.value, ln.unit)]
        elif ln.kind == "sample":
            vals = list(ln.values.values())
        else:
            return False
        return any(val is not None and u == unit and abs(val - x) <= tol for val, u in vals)

    ln = rec.find(mid, carries)
    text = v.group(0)
    if ln is not None:
        return Claim("value", text, mid, True, ln.text)
    return Claim("value", text, mid, False, "", "no line of %s carries %s%s" % (mid or "the log", num, unit))


def _absence(part: str, machines: list, events: list, seen: list, asked: list, question: str,
             rec: _Record) -> tuple[str, Claim]:
    """(what the operator reads instead of the sentence, its claim): the record's finding for the machine and
    event the sentence names (else the answer's, else the question's); "" and an unconfirmed claim when there is
    none to look up."""
    mids = [m[2] for m in machines] or seen[:1] or asked[:1]
    evs = events or (_events(question) if question else [])
    said = part.strip()
    if not mids:
        return "", Claim("absence", said, None, False, "", "only the plant's record may say that something did not "
                         "happen, and this names no machine to look up; left out")
    mid = mids[0]
    if not rec.lines(mid):
        finding = record.nothing(rec.store, mid, "no line names %s" % mid)
        return finding, Claim("absence", said, mid, True, finding)
    if not evs:
        return "", Claim("absence", said, mid, False, "", "only the plant's record may say that something did not "
                         "happen, and this names no event of %s to look up; left out" % mid)
    # the event denied: the first said after the denial ("no HI alarm", "was never acknowledged"), else the last
    at = _ABSENCE.search(part).start()
    e = next((x for x in evs if x.span[0] >= at), evs[-1]) if events else evs[0]
    wanted = [x for x in (_events(question) if question else []) if x.kind == e.kind and x.level]
    if e.level is None and wanted:  # "no alarm" to "when did the first LO alarm ...?": the LO alarm
        e = _Event(e.kind, wanted[0].level, e.span, e.text)
    ln = rec.first(mid, e.holds)
    if ln is None:
        what = ("%s raised no %s alarm" % (mid, e.level) if e.kind == "alarm" and e.level
                else "no %s of %s" % (e.name(), mid))
        finding = record.nothing(rec.store, mid, what)
        return finding, Claim("absence", said, mid, True, finding)
    finding = "The log has %s's first %s at %s %s: %s" % (mid, e.name(), rec.hm(ln), rec.zone_name(mid), ln.text)
    return finding, Claim("absence", said, mid, False, ln.text, "the log says otherwise; replaced by the record's "
                          "finding")
