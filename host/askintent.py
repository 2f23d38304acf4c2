"""What an operator's question asks, in the words of the plants in the store: which machines (by id, words,
aliases, "conveyor two", "the second pump", typos and all), which events (trips, alarms of a level or signal,
acknowledgements, starts, stops), which time (host/asktime.py) and what kind of answer (a count, what is still
in alarm, what a machine did, a summary, the first or last of something, whether it happened at all, who
acknowledged an alarm, a signal's highest or lowest reading: "how hot" is read through QUANTITIES, the units and
words of physics, never a plant's names).

    q = askintent.normalize("how many trpis did the convyor two have?", vocab)   # "... trips ... conveyor 2 ..."
    ids = askintent.machines(question, vocab)                                   # the plant's second conveyor
    intent = askintent.read(question, vocab)                                    # Intent or None

No plant's names are here: a machine's words come from its description (host/logwords.Vocabulary), and what is
read as a machine's "head" word ("conveyor", "pump", "tower") is its kind, the kind's last word and its own
one-word words. Typos are mended against the plant's words and the asking words below (LEXICON): a word of 5 or
more letters that is neither, nor a common word (COMMON: "value" stays, though a plant has a "valve"), becomes
the one word within 1 edit (5-6 letters) or 2 edits (7 or more; a swap of two letters is one edit), when exactly
one is that close. host/askrecord.py answers the Intent from the store.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Optional

from host import logwords

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12}
ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
            "ninth": 9, "tenth": 10, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5, "6th": 6}
# the words of asking that operators misspell: what a word is mended to, besides the plant's own words
LEXICON = set("""
alarm alarms alarmed alarming acknowledge acknowledged acknowledgement acknowledgements active afternoon between
cleared clearing currently earlier evening events happen happened happening history interlock interlocks latest
minutes morning overnight overview previous raised recap restart restarted restarts running shift shifts started
starting stopped stopping summarise summarize summary today tonight tripped tripping trips yesterday outstanding
standing unacked unacknowledged shutdown shutdowns pressure temperature vibration status""".split())
# common words of 5+ letters that are never mended, however close to a plant's word they are ("value", "valve")
COMMON = set("""
about above accept across actual after again against ahead alarm allow almost alone along already also although
always among amount another answer anyone anything anyway anywhere apart appear apply area around asked aside
avoid aware awful badly based basic basis became because become been before began begin begun behind being below
besides better beyond bigger black block board bottom brief bring broad broke broken brought build built bunch
called calls came cannot careful carry cases catch cause caused causes center certain chance change changed
changes check checked clean clear clearly close closed closer comes coming common compare could count counted
couple course cover crazy cycle daily dates dealt doing doubt dozen drive driven early eight either elapsed else
empty ended ending enough entire error errors equal event every exact exactly except exist exists faster fault
faults fewer field final finally fine first fixed floor focus follow force forget found fourth frame front full
further given gives going gotten great greater group guess happy hardly heard heavy hello help hence highest
hourly hours house however human ideal inside issue issues items itself kinds known labor large later latter
least leave level levels light likely limit limits listed little local logged longer looked looking lower lowest
major maybe means meant might minor minus missed month months moved moving multiple named nearly needed never
night noted notes nothing noticed number often older order other others ought outside overall owner paper parts
passed place plain plant plants please point points power press prior probably problem problems proper quick
quickly quiet quite raise range rather reach react ready really reason recent recently record reading readings
refer remain report reset right round rules safety seems seen sense seven shall short should showed shown shows
since single sixth small sound speak spent start state states stays still stuff sudden super sure taken takes
talked tasks teams tells tenth terms thanks their theirs them then there these thick thing things think third
those though three through times title today total touch toward tower track tried tries truly under unless until
upper usual usually value values water weeks weird were whatever when where whether which while white whole whom
whose why wider within without woman words work worked working world worse worst would write wrong years young
yours knock knocked knocks dropped dropping complaining complain earliest latest
""".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
# the short words of asking, misspelt as often as the long ones ("hwo many", "wat happened", "stil active"): a word
# of 3-4 letters one edit from one of these is mended to it, unless it is a word of its own (SHORT_WORDS)
SHORT_ASK = ("when", "what", "how", "why", "trip", "still")
SHORT_WORDS = set("""
hot now who whom row bow cow low mow sow tow vow wow hoe hop hog hob hod hoc two ago
that wheat whet chat hat wait whit whim whip whiz shut wham whey watt wan war was way wet wit
then hen went want wean when wren whew
thy wry shy why whoa
trap tri tip rip trim trio grip drip trips tram tray trap
till stall stir still spill skill sill stilt steel steal stile silt
""".split())

# event words -> what they mean in the log grammar (docs/PLANT.md)
EVENTS = (
    # "went down", "dropped out", "what knocked it out": how operators say a trip
    ("trip", re.compile(r"\btrip\w*|\binterlock\w*|\b(?:go|goes|going|gone|went)\s+down\b(?!\s+to\b)|"
                        r"\bdrop(?:s|ped|ping)?\s+out\b|\bknock(?:s|ed|ing)?\s+(?:\S+\s+){0,3}?out\b")),
    ("ack", re.compile(r"acknowledg\w*|\back(?:s|ed|ked)?\b")),
    ("clear", re.compile(r"\bclear\w*|return\w* to normal|back to normal")),
    ("start", re.compile(r"\b(?:re)?start(?:s|ed|ing)?\b(?! (?:\w+ing|to|showing))|\bstart-?ups?\b")),
    ("stop", re.compile(r"\bstop(?:s|ped|ping)?\b|\bshut ?downs?\b|\bshut (?:it )?down\b")),
    ("state", re.compile(r"\bstate changes?\b|\bchanges? of state\b")),
    ("alarm", re.compile(r"\balarm\w*|\balerts?\b|\bwent (?:high|low)\b")),
)
_LEVEL = re.compile(r"\b(high-high|hihi|hi-hi|very high|low-low|lolo|lo-lo|very low|bad|high|hi|low|lo)\b"
                    r"(?=[\w\s-]*\b(?:alarm|alert|limit|level)|\s*$|\s*\?)")
LEVELS = {"high-high": "HIHI", "hihi": "HIHI", "hi-hi": "HIHI", "very high": "HIHI", "low-low": "LOLO",
          "lolo": "LOLO", "lo-lo": "LOLO", "very low": "LOLO", "bad": "BAD", "high": "HI", "hi": "HI", "low": "LO",
          "lo": "LO"}


def _any(*alternatives: str) -> re.Pattern:
    """One pattern of the alternatives, each a way operators put it."""
    return re.compile("|".join(alternatives))


ACTIVE = _any(r"\bstill (?:in )?alarm", r"\bstill (?:active|open|standing|up|on)\b",
              r"\bin alarm (?:now|right now|at the moment|currently|still)",
              r"\b(?:active|standing|open|outstanding|current|live) alarms?\b",
              r"\balarms? (?:are |is )?(?:still )?(?:active|standing|open|outstanding)\b",
              r"\bwhat(?:'s| is) (?:alarming|in alarm)", r"\bcurrently (?:in )?alarm",
              r"\b(?:not|never) (?:yet )?(?:been )?cleared",
              r"\b(?:has|have|had)(?:n'?t| not) (?:yet )?(?:been )?cleared",
              r"\bun-?ack\w*", r"\bnot (?:yet )?(?:been )?acknowledged\b", r"\balarms? (?:right )?now\b")
COUNT = _any(r"\bhow many\b", r"\bhow often\b", r"\bnumber of\b", r"\bcount\b", r"\bhow much trip")
SUMMARY = _any(r"\bsumm\w*", r"\brecap\b", r"\boverview\b", r"\bbrief me\b", r"\bwhat (?:has )?happened\b",
               r"\bwhat went on\b", r"\bwhat(?:'s| has) been going on\b", r"\banything (?:\w+ )?happen",
               r"\brun-?down\b",
               r"\bhand-?over\b", r"\bhow did the \w+ (?:shift )?go\b", r"\bhow was the\b",
               r"\bgive me (?:a|the) report\b", r"\bwhat (?:has )?happen\b", r"\b(?:any|the|all) events?\b",
               r"\banything (?:unusual|odd|abnormal|special|notable|interesting)\b",
               r"\bany (?:problems?|issues?|trouble)\b", r"\bwhat (?:was|has been) (?:logged|going on)\b",
               r"\bshow me (?:the )?(?:log|events)\b", r"\bsum (?:it |things |that )?up\b",
               r"\banything (?:i|we) (?:should|need to|ought to|must) know\b", r"\bwhat should (?:i|we) know\b",
               r"\bcatch me up\b", r"\bfill me in\b", r"\bwhat did (?:i|we) miss\b")
# "how did the night shift go?" is a summary, "how did the pump trip?" an open question
HOW_WENT = re.compile(r"\bhow (?:did|was|were|has|have|is)\s+(?:it |things |everything )?(?:go(?:ne|ing)? )?(?:on )?"
                      r"(?:the |last |this |our |today'?s? )?(?:day |late |night |early |morning |afternoon |evening )?"
                      r"(?:shift|night|morning|afternoon|evening|day)\b(?:\s+(?:go|been|going))?\W*$")
STATUS = _any(r"^\s*(?:is|are)\s+.*\b(?:running|stopped|tripped|down|up|on|off|working)\b", r"\bstatus\b",
              r"\bdoing (?:right )?now\b",
              r"\bwhat state is\b", r"\bwhat(?:'s| is) the state\b", r"\bcurrent state\b", r"\bstate now\b")
ACTIVITY = _any(r"\bwhat did .+ do\b", r"\bwhat (?:the )?[\w -]+ did\b", r"\bwhat (?:has|was) .+ (?:done|doing)\b",
                r"\bwhat happened (?:to|with|on|at)\b", r"\bhistory of\b", r"\bactivity\b",
                r"\bevents? (?:of|for|on)\b",
                r"\bwhat went on with\b", r"\bwhat (?:did|has) .+ (?:get up to|been up to)\b", r"\bwalk me through\b",
                r"\banything (?:going on|happening|up) (?:with|on|at)\b",
                r"\bwhat(?:'s| is| was) (?:going on|up) with\b",
                r"\beverything (?:that )?.+ did\b")
FIRST = re.compile(r"\bfirst\b|\bearliest\b|\binitial\b")
# "did the first HI alarm on the pump come before noon?": the first of something named as a noun is no list or
# yes-or-no of every such event (a "when" of it is the first's own time, read above)
THE_FIRST = re.compile(r"\bthe (?:very )?(?:first|earliest|initial)\b")
LAST = re.compile(r"\blast\b(?!\s+(?:\d+\s+|\w+\s+)?(?:hours?|hrs?|minutes?|mins?|night|shift)\b)|\blatest\b|"
                  r"\bmost recent(?:ly)?\b")
# "so when did ...", "hey, when ...", "quick one: when ...": the filler words operators start with
FILLER = r"^\s*(?:(?:and|so|hey|ok|okay|quick one)\b[,:]?\s*)*"
WHEN = re.compile(FILLER + r"(?:when|at what time|what time|which time)\b")
YESNO = re.compile(r"^\s*(?:so\s+)?(?:did|does|do|has|have|had|was|were|is|are|any|were there|was there|is there|"
                   r"are there|has there|have there|did any)\b")
# "alarms on the kiln before 9 today": the keywords an operator types into a search box list as "which alarms"
LIST = re.compile(r"^\s*(?:which|what|list|show|give)\b.*\b(?:alarms|trips|acknowledgements|acks|starts|stops|"
                  r"state changes|events)\b|^\s*(?:which|what) (?:machines|units|equipment)\b|"
                  r"^\s*(?:all\s+)?(?:the\s+)?(?:alarms|trips|acknowledgements|acks|starts|stops|state changes|events)"
                  r"\s+(?:on|of|for|at|from|in|today|this|since|before|after|between|during|last)\b")
# "what tripped the kiln?", "the kiln - what stopped it?": why it tripped (a machine named); "what tripped this
# morning?": which trips (none named)
WHAT_TRIPPED = re.compile(r"\bwhat (?:tripped|stopped|shut down|shut off)\b"
                          r"(?:\s+(it|the|our|that|this|[a-z]*\d[\w-]*|[a-z]+-[\w-]+)\b)?")
OPEN = re.compile(r"^\s*(?:why|how come|how did|how does|what caused|what made|what was the cause|what is the cause|"
                  r"explain|what led)\b|\bwhy\b|\b(?:the|what was the|what's the|whats the) (?:reason|story)\b|"
                  r"\bwhat (?:knocked|took|brought)\b")

# "who acknowledged the HI alarm on the pump?", "which operator took it?", "did anyone ack it?"
WHO = _any(r"\bwho\b.*\b(?:ack\w*|acknowledg\w*|took|take|handled?|answered|accepted|silenced)\b",
           r"\bwhich (?:operator|person|user|one of us|tech\w*|engineer|shift lead)\b",
           r"\b(?:anyone|anybody|someone|somebody|any ?one)\b.*\b(?:ack\w*|acknowledg\w*)",
           r"\b(?:ack\w*|acknowledg\w*) by (?:whom|anyone|anybody|someone|somebody)\b", r"\bby whom\b")
# "how hot did the kiln get?", "the highest pressure on the pump today", "lowest level between 2 and 4"
PEAK = _any(r"\bhow (?:hot|warm|high|fast)\b", r"\b(?:highest|hottest|warmest|fastest|max(?:imum)?|peak(?:ed|s)?)\b",
            r"\btop (?:temp\w*|press\w*|speed|flow|reading|value)")
LOWEST = _any(r"\bhow (?:cold|cool|low|slow)\b",
              r"\b(?:lowest|coldest|coolest|slowest|minimum|min(?= \w+ (?:of|on|for)\b))\b")
# what a peak question's quantity word means in any plant: the units it is logged in (docs/PLANT.md: the unit
# "as printed after the value") and the words of its tags; physics, not a plant's vocabulary
QUANTITIES = (
    (re.compile(r"\b(?:hot|hotter|hottest|warm|warmer|warmest|cold|colder|coldest|cool|cooler|coolest|temp|"
                r"temps|temperatures?|heat)\b"),
     frozenset("c f k degc degf degk".split()), "temp temperature".split()),
    (re.compile(r"\bpress(?:ure|ures)?\b|\bpsi\b|\bbar\b|\bdraft\b"),
     frozenset("bar mbar barg bara pa kpa kpag mpa psi psig psia inh2o inwc mmh2o mmwc mmhg inhg".split()),
     "press pressure dp".split()),
    (re.compile(r"\b(?:fast|faster|fastest|slow|slower|slowest|speed|rpm)\b"),
     frozenset("rpm hz m/s m/min ft/min fpm".split()), "speed rpm".split()),
    (re.compile(r"\bflows?\b|\bthroughput\b"),
     frozenset("m3/h m3/min l/min l/s gpm kg/h t/h klb/h lb/h cfm scfm".split()), "flow throughput".split()),
    (re.compile(r"\bvibrat\w*|\bshak\w*"), frozenset("mm/s in/s um mil".split()), "vibration vib".split()),
    (re.compile(r"\bcurrent\b|\bamps?\b|\bamperage\b"), frozenset("a ma".split()), "current amps".split()),
    (re.compile(r"\blevel\b|\bfull\b"), frozenset(), "level".split()),
)

ANCHOR = re.compile(r"(?i)\b(?:after|since|before)\s+(?:the|its|it)\s+(?:trip\w*|alarm|start\w*|stop\w*)")


@dataclass(frozen=True)
class Intent:
    """What the question asks: `what` is count, active, activity, summary, first, last, ever, list, status, who
    (who acknowledged an alarm), peak or lowest (a signal's highest or lowest reading), why (a trip's interlock)."""

    what: str
    machines: tuple[str, ...]
    events: tuple[str, ...]  # trip, alarm, ack, clear, start, stop, state (empty: every event)
    level: Optional[str] = None
    tags: tuple[str, ...] = ()  # the alarm tags of the signals it names (empty: any)
    signals: tuple[str, ...] = ()  # what people call those signals
    question: str = field(default="", compare=False)


def _osa(a: str, b: str, cap: int) -> int:
    """Optimal string alignment distance (a swap of neighbours is one edit), or cap + 1 once it exceeds cap."""
    if abs(len(a) - len(b)) > cap:
        return cap + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > cap:
            return cap + 1
        prev2, prev = prev, cur
    return prev[-1]


@functools.lru_cache(maxsize=16)
def _plant_words(vocab: logwords.Vocabulary) -> frozenset:
    """Every word of the plants' machines and signals, lowered (what a typo is mended to)."""
    out: set[str] = set()
    for d in vocab.descs:
        for m in d.machines:
            for text in (m.kind, *m.words, *m.aliases):
                out.update(w.lower() for w in _WORD.findall(text))
            for s in m.signals:
                out.update(w.lower() for text in (*s.words, s.tag.replace("_", " ")) for w in _WORD.findall(text))
    return frozenset(out)


@functools.lru_cache(maxsize=16)
def _tags(vocab: logwords.Vocabulary) -> frozenset:
    """The plants' signal tags, lowered."""
    return frozenset(s.tag.lower() for d in vocab.descs for m in d.machines for s in m.signals)


@functools.lru_cache(maxsize=16)
def heads(vocab: logwords.Vocabulary) -> dict:
    """head word -> the ids of the machines it heads, in the first description's order that has them: a
    machine's kind, its kind's last word and its one-word words ("pump", "tower", "agitator")."""
    out: dict[str, list[str]] = {}
    for d in vocab.descs:
        per: dict[str, list[str]] = {}
        for m in d.machines:
            hs = {m.kind.lower(), m.kind.lower().split()[-1]} | {w.lower() for w in m.words if " " not in w.strip()}
            for h in hs:
                if len(h) >= 3 and not re.search(r"\d", h):
                    per.setdefault(h, []).append(m.id)
        for h, ids in per.items():
            out.setdefault(h, ids)
    return out


def _heads_re(vocab: logwords.Vocabulary) -> Optional[str]:
    hs = sorted(heads(vocab), key=len, reverse=True)
    return "|".join(re.escape(h).replace(r"\ ", r"\s+") for h in hs) if hs else None


@functools.lru_cache(maxsize=16)
def _stems(known: frozenset) -> frozenset:
    return frozenset(logwords._stem(w) for w in known | LEXICON | COMMON)  # noqa: SLF001 (the one stemmer)


def _mend_short(word: str, known: frozenset) -> str:
    """A 3-4 letter word mended to the one asking word of SHORT_ASK within one edit; where two are that close,
    the one it lacks a letter of ("whn": "when", not "who")."""
    low = word.lower()
    if low in SHORT_WORDS or low in known or low in SHORT_ASK:
        return word
    near = [k for k in SHORT_ASK if _osa(low, k, 1) <= 1]
    if len(near) > 1:
        near = [k for k in near if len(k) == len(low) + 1]
    return near[0] if len(near) == 1 else word


def _mend(word: str, known: frozenset) -> str:
    low = word.lower()
    if 3 <= len(low) <= 4:
        return _mend_short(word, known)
    if len(low) < 5 or low in known or low in LEXICON or low in COMMON or "'" in low or \
            logwords._stem(low) in _stems(known):  # noqa: SLF001
        return word  # a word of the plant, of asking or of English, or another form of one ("vibrating")
    cap = 1 if len(low) <= 6 else 2
    best: list[str] = []
    top = cap + 1
    for k in known | LEXICON:
        if abs(len(k) - len(low)) > cap or len(k) < 4:
            continue
        d = _osa(low, k, cap)
        if d < top:
            best, top = [k], d
        elif d == top:
            best.append(k)
    # one word that close, or several forms of one ("alarm", "alarms"): the shortest form
    if best and len({logwords._stem(k) for k in best}) == 1:  # noqa: SLF001
        return min(best, key=len)
    return word


def normalize(question: str, vocab: logwords.Vocabulary) -> str:
    """The question with typos mended (against the plant's and the asking words), number words after a head
    word as digits ("conveyor two": "conveyor 2") and ordinals before one as its number ("the second pump":
    "the pump 2")."""
    known = _plant_words(vocab)
    ids = {i.lower() for i in vocab.ids}
    q = _WORD.sub(lambda m: m.group(0) if m.group(0).lower() in ids else _mend(m.group(0), known), question)
    hre = _heads_re(vocab)
    if hre is None:
        return q
    nums = "|".join(NUMBERS)
    q = re.sub(r"(?i)\b(%s)(\s+(?:no\.?\s*|number\s*|#\s*)?)(%s)\b" % (hre, nums),
               lambda m: "%s%s%d" % (m.group(1), m.group(2), NUMBERS[m.group(3).lower()]), q)
    q = re.sub(r"(?i)\b(%s)\s+(%s)\b" % ("|".join(ORDINALS), hre),
               lambda m: "%s %d" % (m.group(2), ORDINALS[m.group(1).lower()]), q)
    return q


def machines(question: str, vocab: logwords.Vocabulary) -> list[str]:
    """The machine ids the question names: by id, words, aliases, kind and number (host/logwords), in its own
    words or mended (normalize), and by a head word and number ("conveyor 2": the plant's second conveyor)."""
    ids = logwords.named_ids(question, vocab)
    q = normalize(question, vocab)
    if q != question:
        ids += [i for i in logwords.named_ids(q, vocab) if i not in ids]
    tags = _tags(vocab)  # "ai02_shell_temp" looks like an id no description has, but it is a signal's tag
    ids = [i for i in ids if i in vocab.ids or i.lower() not in tags]
    hre = _heads_re(vocab)
    if hre is not None:
        taken = vocab.read(q).spans
        for m in re.finditer(r"(?i)\b(%s)(?:e?s)?\s*(?:no\.?\s*|number\s*|#\s*)?(\d{1,2})\b(?![:.]\d)" % hre, q):
            if any(a <= m.start() and m.end() <= b for a, b in taken):
                continue  # a whole word of a machine already ("Conveyor 1")
            h = re.sub(r"\s+", " ", m.group(1).lower())
            group, n = heads(vocab).get(h, []), int(m.group(2))
            if 0 < n <= len(group) and group[n - 1] not in ids:
                ids.append(group[n - 1])
    return ids[:16]


def of_kind(question: str, vocab: logwords.Vocabulary) -> list[str]:
    """The machines the question names (machines()), else those its head words name together ("the tower":
    every tower of the plant): what an open question's windows are kept to."""
    ids = machines(question, vocab)
    if ids:
        return ids
    hre = _heads_re(vocab)
    if hre is None:
        return []
    out: list[str] = []
    for m in re.finditer(r"(?i)\b(%s)(?:e?s)?\b" % hre, normalize(question, vocab)):
        out += [i for i in heads(vocab).get(re.sub(r"\s+", " ", m.group(1).lower()), []) if i not in out]
    return out[:16]


def _by_word(question: str, vocab: logwords.Vocabulary, ids) -> tuple[list, list]:
    """([(machine id, signal)], the question's words that found them): the signals one of whose words holds a
    word of the question outside its machine names and head words ("temperature alarms": every signal called
    "... temperature"), of `ids` where given; the grammar's and the levels' words are no signal's."""
    taken = vocab.read(question).spans
    said = {logwords._stem(t.group(0)): t.group(0) for t in re.finditer(r"[a-z]{4,}", question.lower())  # noqa
            if not any(a <= t.start() < b for a, b in taken)}
    heads_said = {logwords._stem(w) for h in heads(vocab) for w in h.split()}  # noqa: SLF001 ("the pump")
    words = set(said) - {"alarm", "trip", "high", "clear", "raise"} - heads_said
    if not words:
        return [], []
    out = []
    for d in vocab.descs:
        for m in d.machines:
            if ids and m.id not in ids:
                continue
            for sig in m.signals:
                held = {logwords._stem(w) for p in sig.words for w in re.findall(r"[a-z]+", p.lower())}  # noqa
                if words & held:
                    out.append((m.id, sig))
    used = {logwords._stem(w) for _, sig in out for p in sig.words for w in re.findall(r"[a-z]+", p.lower())}  # noqa
    return out, [said[w] for w in said if w in words & used]


def quantity_signals(question: str, vocab: logwords.Vocabulary, ids) -> Optional[list]:
    """[(machine id, signal)] of the quantity a peak question names by a word of physics ("how hot": the
    signals logged in a temperature unit or whose tag or words say temperature), of `ids` where given; None
    when it names no quantity."""
    low = question.lower()
    out: Optional[list] = None
    for pat, units, stems in QUANTITIES:
        if not pat.search(low):
            continue
        out = out or []
        for d in vocab.descs:
            for m in d.machines:
                if ids and m.id not in ids:
                    continue
                for sig in m.signals:
                    parts = sig.tag.lower().split("_") + [w for p in sig.words for w in re.findall(r"[a-z0-9]+",
                                                                                                   p.lower())]
                    if sig.unit.lower() in units or any(x == st or x.startswith(st) for x in parts for st in stems):
                        if (m.id, sig) not in out:
                            out.append((m.id, sig))
    return out


def events(question: str) -> tuple[str, ...]:
    q = question.lower()
    found = [name for name, pat in EVENTS if pat.search(q)]
    if "trip" in found and "alarm" in found and re.search(r"\btrip\w* alarm", q):
        found.remove("trip")  # "trip alarm": the alarm that tripped it
    if "alarm" in found and ("ack" in found or "clear" in found):
        found.remove("alarm")  # "alarms acknowledged": the acknowledgements
    return tuple(found)


def level(question: str) -> Optional[str]:
    m = _LEVEL.search(question.lower())
    return LEVELS[m.group(1)] if m else None


def read(question: str, vocab: logwords.Vocabulary) -> Optional[Intent]:
    """The Intent of a question the record can answer, or None (a why or how other than why a named machine
    tripped, an alarm's clearing or the acknowledgement of the one raised at a named minute: host/logwords and
    the target answer those)."""
    q = normalize(question, vocab)
    low = q.lower()
    named = machines(question, vocab)  # by id, alias or words; of_kind: "the pump" when the plant has one
    ids = tuple(named or of_kind(question, vocab))
    evs = events(ANCHOR.sub(" ", q))  # "after the trip" says when, not what
    lv = level(q)
    sigs = [x for found in vocab.signals(q, ids) for x in found]
    if not sigs:  # a tag as the log writes it ("ai02_shell_temp", "pdt915")
        sigs = [(m.id, s) for d in vocab.descs for m in d.machines if not ids or m.id in ids for s in m.signals
                if re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(s.tag.lower()), low)]
    names = tuple(dict.fromkeys(logwords.signal_name(s) for _, s in sigs))
    if not sigs:
        sigs, said = _by_word(q, vocab, ids)
        names = tuple(said)  # "temperature", not every signal called so
    tags = tuple(dict.fromkeys(s.tag for _, s in sigs))

    def intent(what: str, evs=evs) -> Intent:
        return Intent(what, ids, tuple(evs), lv, tags, names, question)

    if WHO.search(low) and re.search(r"\balarm|\back|acknowledg", low):
        return intent("who", ("ack",))
    peak, lowest = PEAK.search(low), LOWEST.search(low)
    if (peak or lowest) and not COUNT.search(low) and not OPEN.search(low):  # "what caused the peak?": the target's
        by_quantity = quantity_signals(q, vocab, ids)
        if by_quantity is not None:  # "how hot": the temperatures, those the question names by words first
            sigs = [x for x in sigs if x in by_quantity] or by_quantity
            names = tuple(dict.fromkeys(logwords.signal_name(s) for _, s in sigs))
        if sigs:
            tags = tuple(dict.fromkeys(s.tag for _, s in sigs))
            # "how low did the level go": the lowest; "how hot ... lowest alarm": the word that comes first
            low_first = lowest and (not peak or lowest.start() < peak.start())
            return Intent("lowest" if low_first else "peak", ids or tuple(dict.fromkeys(m for m, _ in sigs)), (),
                          None, tags, names, question)
    active = ACTIVE.search(low)
    if active and active.group(0).startswith("current") and any(n.lower().endswith("current") for n in names):
        active = None  # "the motor current alarm": a signal's alarm, not the alarms current now
    if active and not (OPEN.search(low) and not HOW_WENT.search(low)):
        return intent("active", ("alarm",))
    if OPEN.search(low) and not HOW_WENT.search(low):
        # "why did the kiln trip?", "what knocked out the fan?": the trip line names its interlock, and the
        # interlock's alarm point the signal; other whys (an alarm's cause, a trend) are the target's
        if ids and evs == ("trip",) and not sigs and named:  # named, not "the pump" of two
            return intent("why", ("trip",))
        if not ids and "trip" in evs and not sigs and re.search(r"\b(?:which|what) (?:machines?|units?|equipment)\b",
                                                                low):
            return intent("why", ("trip",))  # "which machine stopped or tripped, and why?": every trip's why
        return None
    what = WHAT_TRIPPED.search(low)
    if what and named and (what.group(1) or "") not in ("", "this") \
            and not COUNT.search(low):
        return intent("why", ("trip",))  # the trip line's interlock (the record says so where none tripped)
    if what and not ids and not COUNT.search(low):
        return intent("list", ("trip",))
    if ids and re.search(r"\b(?:which|what) interlock\b", low) and "trip" in evs:
        return intent("why", ("trip",))  # "which interlock tripped the fan?"
    if STATUS.search(low) and ids and not COUNT.search(low) and not re.search(r"\b(?:ever|did|was|were)\b", low):
        return intent("status", ())
    follow = next((f for f in (logwords.alarm_follow(x, vocab) for x in (question, q)) if f is not None), None)
    if follow is not None and follow["verb"] == "ACK" and not follow["minute"]:
        # "when was the HI alarm on the fan acknowledged?": who took it and when, from its ACK line
        return Intent("who", (follow["machine"],), ("ack",), follow["level"] or lv, tags, names, question)
    if follow is not None:
        return None  # an alarm's clearing, or the one raised at a named minute: host/qa._by_record's
    first = next((f for f in (logwords.onset(x, vocab) for x in (question, q)) if f is not None), None)
    if first is not None:  # "when did the pump first start complaining about its bearing?": its first alarm
        found = tags or first["tags"] or ()
        if not found and re.search(r"\b(?:about|on|of|with)\s+(?:the |its |their )?[a-z]{3,}\s*\??\s*$", low):
            return None  # a signal named in words no signal has: the record cannot tell which
        return Intent("first", (first["machine"],), ("alarm",), lv, tuple(found),
                      names or tuple(first["signals"]), question)
    if COUNT.search(low) and (evs or lv):
        return intent("count", evs or ("alarm",))
    if ACTIVITY.search(low) and ids:
        return intent("activity", evs)
    if SUMMARY.search(low):
        return intent("activity" if ids and not re.search(r"\bshift\b|\bplant\b", low) else "summary", evs)
    if (evs or lv) and (WHEN.search(low) or re.search(r"\b(?:when|time|at what)\b", low)) and FIRST.search(low):
        return intent("first", evs or ("alarm",))
    if (evs or lv) and (WHEN.search(low) or re.search(r"\btime\b", low)) and LAST.search(low):
        return intent("last", evs or ("alarm",))
    if (evs or lv) and (YESNO.search(low) or WHEN.search(low) or re.search(r"\b(?:at )?what time\b", low)) \
            and not THE_FIRST.search(low):
        return intent("ever", evs or ("alarm",))
    if (evs or lv) and LIST.search(low) and not THE_FIRST.search(low):
        return intent("list", evs or ("alarm",))
    return None
