"""An operator's words -> the log's words: what `ask` searches the log store for (host/qa.retrieve).

Log lines name things the plant's way (docs/PLANT.md): machines by id, signals by tag and key, events by verb:

    2026-11-30T08:12:39Z ACK HI AHU-1 supply_air_temp 27.9C prio=3 ACKED
    2026-11-30T06:34:18Z STATE P-1 RUNNING->TRIPPED interlock=HIHI_PRESS

Operators ask "when was the supply air temperature alarm on air handling unit 1 acknowledged?". FTS5 matches
words, and none of "unit", "1" or "acknowledged" is in that line, so `expand` adds the log's words for the
question's. What a plant's words mean comes from the descriptions of the lines searched, gathered in a
`Vocabulary` (host/plantdesc.PlantDesc): a machine's id (in any case), its words and aliases ("the raw water
pump", "pump 1"), its kind and number ("air handling unit 1", "pump no. 2": the description's n-th machine of
that kind, in its order), "the silo" for the one silo; a signal's words ("supply air temperature") mean its
tag's parts and its key ("supply air temp SAT"), the longest phrase winning ("bearing temperature" is the
temperature, not "bearing"). What the grammar's own words mean is the same for every plant and stays here
(GRAMMAR: "acknowledged" is ACK, a trip is "TRIPPED interlock", a first sign is "HI raised", a sensor a BAD
value). The question's own words stay; these are added, so nothing is lost where the words are the log's.

The times a question names ("at 08:11", "(06:34)") are `minutes`: FTS5 splits a line's timestamp into
tokens no question holds ("30t08", "11"), so LogStore.windows ranks the lines of those minutes that hold the
question's words first (docs/GATEWAY.md, section 6).

"When was the HI alarm on AHU-1 raised at 08:11 acknowledged?" is answered by one line that may be minutes
after the named time and shares few words with the question: `alarm_follow` reads what the alarm's own record
needs (the machine, ACK or CLEAR, the level, the raise minute) so that LogStore.alarm_follow can find that line
by the alarm's lifecycle instead of by words. "When did SILO-2 start running low?" is the machine's first alarm
raised of the signals the question names (`onset`, LogStore.first_raise).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from host import plantlines

if TYPE_CHECKING:
    from host.plantdesc import PlantDesc, Signal

_ACK = r"acknowledg\w*|\back(?:s|ed|ked)?\b"
_CLEAR = r"\bclear\w*|(?:back|return\w*) to normal|normal again"
# The log grammar's words (docs/PLANT.md): (what the operator says, the words of the lines that mean it), on the
# lowered question. Every plant logs these; its own words come from its description (Vocabulary).
GRAMMAR = [(re.compile(p), w) for p, w in (
    (_ACK, "ack"),
    (_CLEAR, "clear"),
    (r"\btrip\w*|interlock\w*|what stopped", "tripped interlock"),
    (r"\bstopp?\w*|shut ?down", "stopped"),
    (r"\bstart(?:s|ed|ing)? up\b|\bstarted\b", "starting"),
    (r"\bsensor\b|\bbad (?:values?|readings?|data)\b|drop ?out|\blost\b", "bad"),
    (r"first sign|first show\w*|start(?:s|ed)? (?:showing|to show)|\bonset\b|begin\w*", "hi raised"),
)]

_LEVEL = re.compile(r"\b(high-high|hihi|low-low|lolo|bad-value|bad|high|hi|low|lo)\b")
LEVELS = {"high-high": "HIHI", "hihi": "HIHI", "low-low": "LOLO", "lolo": "LOLO", "bad-value": "BAD", "bad": "BAD",
          "high": "HI", "hi": "HI", "low": "LO", "lo": "LO"}
SPAN = 10  # minutes from a named time: measured on validation questions (docs/GATEWAY.md, section 6)
_TIME = re.compile(r"(?<![\d:])([01]\d|2[0-3]):([0-5]\d)(?![\d])")
# a word in the id syntax with a digit and a "-" or "_" ("AHU-9", "SILO_7"): an id the operator writes that no
# description in play has is still the machine the question is about (the record then says no line names it)
_ID_LIKE = re.compile(r"(?<![\w-])(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9]*[-_])%s(?![\w-])" % plantlines.ID_RE.pattern)
_NUMBERED = r"\s*(?:no\.?\s*|number\s*|#\s*)?([1-9]\d?)(?!\w|:\d)"  # "2", "no. 2", "number 2", "#2"
_TOKEN = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ings", "ing", "ions", "ion", "ed", "es", "s", "e")


def _stem(word: str) -> str:
    """A word without its endings, so that "vibrating", "vibrates" and "vibration" meet ("vibrat"); both the
    question's words and the descriptions' are stemmed the same way, so only agreement matters."""
    while True:
        for suf in _SUFFIXES:
            if word.endswith(suf) and len(word) - len(suf) >= 3:
                word = word[:-len(suf)]
                break
        else:
            return word


def _stems(text: str) -> tuple[str, ...]:
    return tuple(_stem(t) for t in _TOKEN.findall(text.lower()))


def stems(text: str) -> tuple[str, ...]:
    """The text's words, lowered and without their endings: how a Vocabulary compares phrases (tools' judges
    compare a note's words with a description's the same way)."""
    return _stems(text)


def signal_name(signal: "Signal") -> str:
    """What people call a signal: its first word in the description, else its tag ("supply_temp": supply temp)."""
    return signal.words[0] if signal.words else signal.tag.replace("_", " ")


def _log_words_of(signals: list[tuple[str, "Signal"]]) -> list[str]:
    """The log's words for what may be one of these signals: the words their tags' parts and keys share
    ("bearing_temp" and "winding_temp" share "temp"), else all of them."""
    # a one-letter key ("T=61.2C") is no search word: FTS5 queries drop single letters (host/store.fts_query)
    sets = [[p for p in s.tag.split("_") if p] + ([s.key] if len(s.key) > 1 else []) for _, s in signals]
    low = [{w.lower() for w in ws} for ws in sets]
    shared = [w for w in sets[0] if all(w.lower() in x for x in low[1:])]
    return list(dict.fromkeys(shared or [w for ws in sets for w in ws]))


@dataclass(frozen=True)
class Reading:
    """What a question names in a Vocabulary's words."""

    written: tuple[str, ...]  # the machine ids it writes (those of the vocabulary as the descriptions spell them)
    by_name: tuple[str, ...]  # the machines it names by words or aliases, or by kind and number, in order
    by_number: tuple[str, ...]  # those it names by kind and number
    signals: tuple[tuple[tuple[str, "Signal"], ...], ...]  # per signal phrase: the (machine id, signal)s it may mean
    spans: tuple[tuple[int, int], ...]  # what those took of the question (character spans)

    @property
    def ids(self) -> list[str]:
        return list(dict.fromkeys(self.written + self.by_name))[:16]


class Vocabulary:
    """What a question's words mean in the plants whose lines are searched: the machines' ids, words, aliases
    and kinds and the signals' words, tags and keys of their descriptions. A vocabulary of no description
    knows the grammar's words only. Make one with `Vocabulary.of(descs)` (one per set of descriptions)."""

    _made: "OrderedDict[tuple, Vocabulary]" = OrderedDict()

    def __init__(self, descs: Iterable["PlantDesc"] = ()):
        self.descs = tuple(descs)
        self.ids: tuple[str, ...] = tuple(dict.fromkeys(m.id for d in self.descs for m in d.machines))
        self.kinds: dict[str, tuple[str, ...]] = {}
        self._kinds_of: dict[str, list[str]] = {}
        # phrase (stemmed words) -> [("machine", id) | ("signal", (id, Signal))]
        self._phrases: dict[tuple[str, ...], list[tuple[str, object]]] = {}
        for d in self.descs:
            names: dict[tuple[str, ...], set[str]] = {}
            for m in d.machines:
                self.kinds[m.kind] = tuple(dict.fromkeys(self.kinds.get(m.kind, ()) + (m.id,)))
                self._kinds_of.setdefault(m.id, []).append(m.kind)
                for w in m.words + m.aliases:
                    names.setdefault(_stems(w), set()).add(m.id)
                for s in m.signals:
                    phrases = set(s.words) | {s.tag.replace("_", " ")} | ({s.key} if len(s.key) > 1 else set())
                    for p in phrases:
                        self._add(_stems(p), ("signal", (m.id, s)))
            for p, ids in names.items():
                if len(ids) == 1:  # a word several machines of one plant share names none of them
                    self._add(p, ("machine", ids.pop()))
        self._id_re = None
        if self.ids:
            alts = "|".join(re.escape(i) for i in sorted(self.ids, key=len, reverse=True))
            self._id_re = re.compile(r"(?<![\w-])(?:%s)(?![\w]|-\w)" % alts, re.I)
            self._by_lower = {i.lower(): i for i in self.ids}
        self._kind_re = self._the_kind_re = None
        if self.kinds:
            kinds = "|".join(re.escape(k).replace(r"\ ", r"\s+") for k in sorted(self.kinds, key=len, reverse=True))
            self._kind_re = re.compile(r"(?<![\w-])(%s)(?:s|es)?%s" % (kinds, _NUMBERED), re.I)
            # "the silo", not "the silos", "the silo 2" or "the silo SILO-2"
            self._the_kind_re = re.compile(r"(?<![\w-])the\s+(%s)(?![\w-])(?!%s)" % (kinds, _NUMBERED), re.I)
        self._read: dict[str, Reading] = {}

    def _add(self, phrase: tuple[str, ...], entry: tuple[str, object]) -> None:
        if phrase and entry not in self._phrases.setdefault(phrase, []):
            self._phrases[phrase].append(entry)

    @classmethod
    def of(cls, descs: Iterable["PlantDesc"]) -> "Vocabulary":
        """The vocabulary of these descriptions, made once per set of them: by their hashes and their texts, since
        the hash is of the compiled form, which leaves the words out."""
        descs = tuple(descs)
        key = tuple((d.hash, hashlib.sha256(d.text.encode()).hexdigest()) if d.text else (d.hash, id(d))
                    for d in descs)
        v = cls._made.get(key)
        if v is None:
            v = cls._made[key] = cls(descs)
            while len(cls._made) > 16:
                cls._made.popitem(last=False)
        return v

    def kind_of(self, mid: str) -> list[str]:
        """The kinds machine `mid` has in the descriptions (one, unless two plants disagree)."""
        return self._kinds_of.get(mid, [])

    def numbered(self, kind: str, n: int) -> list[str]:
        """The n-th machine (1..) of a kind in each description that has one."""
        out = []
        for d in self.descs:
            ids = d.kinds.get(kind, ())
            if 0 < n <= len(ids) and ids[n - 1] not in out:
                out.append(ids[n - 1])
        return out

    def _kind(self, said: str) -> str:
        return next(k for k in self.kinds if re.fullmatch(re.escape(k).replace(r"\ ", r"\s+"), said, re.I))

    def read(self, question: str) -> Reading:
        """What the question names: the machines by id, word, alias, kind and number, and the signals by word;
        where phrases overlap, the longest wins."""
        got = self._read.get(question)
        if got is None:
            got = self._read[question] = self._reading(question)
            if len(self._read) > 256:
                self._read.pop(next(iter(self._read)))
        return got

    def _reading(self, question: str) -> Reading:
        written: list[tuple[int, str]] = []
        taken: list[tuple[int, int]] = []
        if self._id_re is not None:
            for m in self._id_re.finditer(question):
                written.append((m.start(), self._by_lower[m.group(0).lower()]))
                taken.append(m.span())
        for m in _ID_LIKE.finditer(question):
            if not any(a < m.end() and m.start() < b for a, b in taken):
                written.append((m.start(), m.group(0)))
                taken.append(m.span())
        written.sort()
        # candidates: (tokens, chars, 0 a phrase / 1 a kind and number, start, end, [(what, which)])
        cands = []
        toks = [(t.start(), t.end(), _stem(t.group(0))) for t in _TOKEN.finditer(question.lower())
                if not any(a < t.end() and t.start() < b for a, b in taken)]
        longest = max((len(p) for p in self._phrases), default=0)
        for i in range(len(toks)):
            for n in range(1, min(longest, len(toks) - i) + 1):
                entries = self._phrases.get(tuple(t[2] for t in toks[i:i + n]))
                if entries:
                    a, b = toks[i][0], toks[i + n - 1][1]
                    cands.append((n, b - a, 0, a, b, entries))
        if self._kind_re is not None:
            for m in self._kind_re.finditer(question):
                if not any(a < m.end() and m.start() < b for a, b in taken):
                    ids = self.numbered(self._kind(m.group(1)), int(m.group(2)))
                    n = len(_TOKEN.findall(m.group(0)))
                    cands.append((n, m.end() - m.start(), 1, m.start(), m.end(), [("machine", i) for i in ids]))
        cands.sort(key=lambda c: (-c[0], -c[1], c[2], c[3]))
        chosen = []
        by_number = []
        for c in cands:
            same = next((x for x in chosen if (x[3], x[4]) == (c[3], c[4])), None)
            if same is not None:  # "pump 1": an alias, and a plant's first pump
                same[5].extend(e for e in c[5] if e not in same[5])
            elif not any(a < c[4] and c[3] < b for a, b in taken):
                chosen.append((c[0], c[1], c[2], c[3], c[4], list(c[5])))
                taken.append((c[3], c[4]))
            else:
                continue
            if c[2] == 1:
                by_number += [(c[3], e[1]) for e in c[5]]
        chosen.sort(key=lambda c: c[3])
        by_name = [e[1] for c in chosen for e in c[5] if e[0] == "machine"]
        by_number = [i for _, i in sorted(by_number)]
        signals = [tuple(e[1] for e in c[5] if e[0] == "signal") for c in chosen]
        return Reading(tuple(dict.fromkeys(i for _, i in written)), tuple(dict.fromkeys(by_name)),
                       tuple(dict.fromkeys(by_number)), tuple(s for s in signals if s), tuple(taken))

    def signal_words(self, question: str, machines: Iterable[str] = ()) -> list[str]:
        """The log's words for the signals the question names (of `machines` where they have them)."""
        out: list[str] = []
        for sigs in self.signals(question, machines):
            out += [w for w in _log_words_of(sigs) if w.lower() not in {x.lower() for x in out}]
        return out

    def signals(self, question: str, machines: Iterable[str] = ()) -> list[list[tuple[str, "Signal"]]]:
        """Per signal phrase of the question, the (machine id, signal)s it means: those of `machines` where they
        have one, else every one the phrase is a word of."""
        machines = set(machines)
        out = []
        for sigs in self.read(question).signals:
            own = [x for x in sigs if x[0] in machines]
            out.append(own or list(sigs))
        return out


def machine_ids(question: str, vocab: Vocabulary) -> list[str]:
    """The machine ids the question means by kind and number ("pump 1": the description's first pump)."""
    return list(vocab.read(question).by_number)


def named_ids(question: str, vocab: Vocabulary) -> list[str]:
    """Every machine id the question means: those it writes (P-1, in any case) and those it names by words,
    aliases, kind and number, at most 16."""
    return vocab.read(question).ids


def _grammar_words(question: str) -> list[str]:
    low = question.lower()
    out: list[str] = []
    for pat, words in GRAMMAR:
        if pat.search(low):
            out += [w for w in words.split() if w not in out]
    return out


def expand(question: str, vocab: Vocabulary) -> str:
    """The question with the log's words for what it asks added (the search text for LogStore.windows): the ids
    of the machines it names by words or numbers, the grammar's words, the signals' words."""
    r = vocab.read(question)
    extra = list(r.by_name)
    for w in _grammar_words(question) + vocab.signal_words(question, r.ids):
        if w.lower() not in {x.lower() for x in extra}:
            extra.append(w)
    return question if not extra else "%s %s" % (question, " ".join(extra))


def minutes(question: str, span: int = SPAN) -> list[str]:
    """The minutes the question is about: each "HH:MM" it names and the span - 1 after it (an alarm "raised
    at 08:11" is acknowledged or cleared minutes later), in order, each once, at most 16."""
    out: list[str] = []
    for h, m in _TIME.findall(question):
        t0 = int(h) * 60 + int(m)
        for d in range(span):
            t = (t0 + d) % 1440
            hm = "%02d:%02d" % (t // 60, t % 60)
            if hm not in out:
                out.append(hm)
    return out[:16]


def _log_words(question: str, vocab: Vocabulary) -> list[str]:
    """The question's words and the log's words for them (expand), lowered, split at every non-alphanumeric
    character, sorted: what a record lookup matches an alarm's tag against ("supply_temp": supply, temp)."""
    return sorted(set(re.findall(r"[a-z0-9]+", expand(question, vocab).lower())))


def alarm_follow(question: str, vocab: Vocabulary) -> dict | None:
    """For a question about when one alarm was acknowledged or cleared: {"machine", "verb" ("ACK" or "CLEAR"),
    "level" (HI, HIHI, LO, LOLO, BAD or None), "words" (the question's words in the log's words, lowered: the
    alarm's tag is matched against them), "minute" (the raise time it names, "HH:MM", or None)}. None for any
    other question: one that does not say "alarm", names no machine or more than one, or asks both."""
    low = question.lower()
    ack, clear = re.search(_ACK, low), re.search(_CLEAR, low)
    ids = named_ids(question, vocab)
    if bool(ack) == bool(clear) or len(ids) != 1 or not re.search(r"\balarm", low):
        return None
    lv = _LEVEL.search(low)
    t = _TIME.search(question)
    return {"machine": ids[0], "verb": "ACK" if ack else "CLEAR", "level": LEVELS[lv.group(1)] if lv else None,
            "words": _log_words(question, vocab),
            "minute": "%s:%s" % t.groups() if t else None}


_ONSET = re.compile(r"first sign|first show\w*|\bstart(?:s|ed)? \w+ing\b|\bbegin\w*|\bbegan\b|\bonset\b|"
                    r"\bstart(?:s|ed)? (?:developing|showing|to)\b")
_ASKS_WHEN = re.compile(r"^\s*(?:(?:so|and|hey|ok|okay|quick one)\b[,:]?\s*)*(?:when|at what time|what time)\b")


def onset(question: str, vocab: Vocabulary) -> dict | None:
    """For "when did P-1 start running hot?" / "when was the first sign of ... on AHU-1?": {"machine", "words"
    (as alarm_follow's), "tags" (the tags of the signals the question names by their words, the machine's own
    where it has them; None when it names none), "signals" (what people call those signals, signal_name)}: the
    answer is the machine's first alarm raised of those tags (LogStore.first_raise), and none at all when it
    raised none. None for any other question: not a when, not one machine, a start-up ("start up",
    "started"), an alarm's handling."""
    low = question.lower()
    ids = named_ids(question, vocab)
    if len(ids) != 1 or not _ASKS_WHEN.search(low) or not _ONSET.search(low) or re.search(r"\bstart\w* up\b", low):
        return None
    if alarm_follow(question, vocab) is not None:
        return None
    sigs = [x for found in vocab.signals(question, ids) for x in found]
    tags = tuple(dict.fromkeys(s.tag for _, s in sigs)) or None
    names = list(dict.fromkeys(signal_name(s) for _, s in sigs))
    return {"machine": ids[0], "words": _log_words(question, vocab), "tags": tags, "signals": names}


_TRIP = re.compile(r"\btrip(?:s|ped|ping)?\b|\binterlock\w*|what stopped")


def trip(question: str, vocab: Vocabulary) -> str | None:
    """The one machine a question about its trip names ("why did P-1 trip?", "which interlock stopped the
    raw water pump?"), or None: no trip words, no machine or more than one, or an alarm's handling."""
    ids = named_ids(question, vocab)
    if len(ids) != 1 or not _TRIP.search(question.lower()) or alarm_follow(question, vocab) is not None:
        return None
    return ids[0]


def _the_kinds(question: str, vocab: Vocabulary) -> list[tuple[re.Match, str]]:
    """("the <kind>" match, kind) for each kind the question says that way, not as part of a longer name and
    not followed by a machine id."""
    if vocab._the_kind_re is None:  # noqa: SLF001 (its own class's table)
        return []
    taken = vocab.read(question).spans
    out = []
    for m in vocab._the_kind_re.finditer(question):  # noqa: SLF001
        a, b = m.span(1)
        if any(x < b and a < y and not (a <= x and y <= b) for x, y in taken):
            continue  # a part of a longer phrase ("the pump house fan")
        rest = question[m.end():]
        nxt = re.match(r"\s+(\S+)", rest)
        if nxt and named_ids(nxt.group(1).rstrip("?.,;:!)'\""), vocab):
            continue  # "the silo SILO-2": the id names it
        out.append((m, vocab._kind(m.group(1))))  # noqa: SLF001
    return out


def unnamed_kinds(question: str, vocab: Vocabulary) -> list[str]:
    """The kinds the question says as "the motor" without a number or an id, and of which it names no machine:
    the kinds whose one machine, if the log knows only one, is meant (with_sole_ids)."""
    named = {k for i in named_ids(question, vocab) for k in vocab.kind_of(i)}
    out = []
    for _, kind in _the_kinds(question, vocab):
        if kind not in named and kind not in out:
            out.append(kind)
    return out


def with_sole_ids(question: str, sole: dict, vocab: Vocabulary) -> str:
    """The question with the one machine of each kind written after "the <kind>" (sole: kind -> id)."""
    out, at = [], 0
    for m, kind in _the_kinds(question, vocab):
        mid = sole.get(kind)
        if mid:
            out += [question[at:m.end()], " " + mid]
            at = m.end()
    return "".join(out) + question[at:]
