"""Operator Q&A: log windows from the store, the top K by PRISM, an answer from the target model citing them.

    found = retrieve(store_path, question)                     # FTS5 windows, or the fallback (below)
    chosen, ranking = rerank(prism, question, found.windows, k, labels=found.labels)   # PRISM top K
    answerer = Answerer.from_gguf(path)                          # SmolLM2 (or any llama GGUF with a GPT-2 BPE)
    text = answerer.answer(question, chosen, on_text=print)      # greedy, streamed piece by piece
    res = ask(question, store_path, prism, lambda: answerer)     # all of it, checked, with progress events

The prompt numbers the windows [1]..[K] with their node and time span and asks the model to cite them;
cited_sources() maps the [n] in the answer back to the windows. The target's tokenizer is built on the host
from the GGUF's own strings with the `tokenizers` package (load_text_model), the way
tests/host/test_bpe_reference.py builds SmolLM2's reference tokenizer; the gateway decodes the nodes'
annotations with the same tokenizer (host/gateway.load_target).

Time (docs/GATEWAY.md, "Asking"): the prompt is bounded (fit_sources keeps the lines of each window that
name the question's words, event lines and the lines nearest the hit, within PROMPT_BUDGET tokens), the
answer ends at its first blank line, an end-of-turn token or max_tokens, and decoding is KV-cached (one
token per forward after the prefill).

Words (host/logwords.py): the question is searched in the log's own words as well ("acknowledged" is ACK,
"pump 1" is the plant's first pump, "discharge pressure" its tag's "discharge press"), and the lines of the
machines and the minutes it names rank first. What the plant's words mean comes from the descriptions of the
lines in the store (vocabulary(): each node's own, the built-in simulator's for lines that name none).

Record: "when was the HI alarm on AHU-1 acknowledged?" and "when did P-1 start running hot?" are answered by
one line the alarm's lifecycle finds (its ACK or CLEAR after its raise; the machine's first raise of the
signals the question names by their words) better than words do; retrieve() puts that window first
(Retrieval.pinned) and rerank() keeps it. When the record proves there is no such line (P-1 never raised a
bearing temperature alarm; AHU-2 never tripped), that is the answer (Retrieval.answer: "Nothing of the kind
in the log since ..."), given without the target: three windows cannot show an absence, and the target,
shown another alarm of the machine, took it for the fault.

Operator's words (host/askintent.py, host/asktime.py, host/askrecord.py): the question is read with typos
mended and machines named by a head word and a number ("conveyor two", "the second pump"); a count ("how many
trips today?"), what is still in alarm, what a machine did in a span, a summary of a shift or a morning, the
first or last of something, whether it happened at all, a machine's state, who acknowledged an alarm and a
signal's highest or lowest sample are answered by the record itself (Retrieval.answer, the windows of the lines
it rests on pinned first), in site time, relative to the log's newest line. A record answer with no line to rest
on (nothing in alarm, a count of 0) and no window holding the question's words is returned by ask() as it is,
with nothing ranked. Open questions (why, how) keep the target, their windows kept to the time and machines asked
about (_in_scope).

Check (host/answercheck.py): the target's answer is held against the plant's record before anyone reads it
(check_answer): every machine, event, time and value it states is looked for in the windows it cites and the
store's lines, what no line confirms is returned as such ("unconfirmed"), and a sentence of the model's saying
that something did not happen is replaced by the record's finding. Only the record may say that something did
not happen; the model's text ("said") streams as "draft" reports only, never as the answer.

Fallback: when no log line holds the question's words (nothing has tripped yet, a word the logs never use),
retrieve() returns the most recent alarm/state windows instead (or the most recent lines, if there are no
events at all), says so (Retrieval.matched False, .how), and the prompt tells the target.

Node names: a window's node is shown by its label (node_labels): the name the operator gave the gateway
(--name, or NAME=PORT), else the node's unique id from the handshake where the store has one, else its
board id; a serial port path is never the label when anything better is known.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from host import askintent, askrecord, asktime
from host.record import descriptions, fmt_ms, nothing, vocabulary  # noqa: F401 (qa's own names too)

SYSTEM = ("You are the assistant of a plant's control room. Answer the operator's question in two or three "
          "sentences using only the numbered log windows. Cite the windows you use as [1], [2].")
NO_MATCH_NOTE = ("No log line contains the question's words; the windows below are the most recent alarm and "
                 "state lines. Say so if they do not answer the question.")
PREFILL_CHUNK = 256
# Windows retrieved for PRISM to rank. On 123 validation questions (plant seeds 1000-1007) the evidence reached
# the top 3 for 100 with PRISM over bm25's top 4 (as with bm25's own order), for 85 with PRISM over the top 20:
# the shipped reranker does not yet read the log's words as well as the boosted bm25 does (docs/QUALITY.md).
CANDIDATES = 4
PROMPT_BUDGET = 360  # tokens of window text in the prompt (the whole prompt is ~120 more)
EVENT_WORDS = ("ALARM", "STATE", "ACK", "CLEAR", "SHELVE", "UNSHELVE", "LOST", "NOTE")
FALLBACK_QUERY = "ALARM STATE TRIPPED LOST CLEAR ACK"
CONTROL = 3  # GGUF token type of control (special) tokens
_CITE = re.compile(r"\[(\d{1,3})\]")


class QAError(ValueError):
    """A question that cannot be answered (no candidates, bad k, unusable model); one line for the user."""


@dataclass
class Source:
    """One window given to the target: its number in the prompt, where and when it comes from."""

    n: int
    node: str
    t0_ms: int
    t1_ms: int
    text: str
    prob: float

    def span(self) -> str:
        return "%s %s to %s UTC" % (self.node, fmt_ms(self.t0_ms), fmt_ms(self.t1_ms, time_only=True))


# ---------------------------------------------------------------------------------------------- retrieval + rerank


def _open_store(store_path: str | Path, question: str):
    """The gateway's store, read-only, for a non-empty question (QAError otherwise)."""
    from host.store import LogStore, StoreError

    if not isinstance(question, str) or not question.strip():
        raise QAError("the question is empty")
    try:
        return LogStore(store_path, readonly=True)
    except StoreError as e:
        raise QAError(str(e)) from None


def _windows(store, question: str, limit: int, lines: int, vocab) -> list:
    """The store's windows for the question in the log's words, its machines and minutes first (host/logwords)."""
    from host import logwords

    return store.windows(logwords.expand(question, vocab), limit=limit, lines=lines,
                         minutes=logwords.minutes(question), machines=askintent.of_kind(question, vocab))


def candidates(store_path: str | Path, question: str, limit: int = 20, lines: int = 8) -> list:
    """FTS5 log windows for the question from the gateway's store (read-only), best (boosted) bm25 first."""
    from host.store import StoreError

    store = _open_store(store_path, question)
    try:
        return _windows(store, question, limit, lines, vocabulary(store))
    except StoreError as e:
        raise QAError(str(e)) from None
    finally:
        store.close()


@dataclass
class Retrieval:
    """What retrieval found: the candidate windows (best first), whether they match the question's words, a
    line saying how they were found, and the store's node labels (store name -> what the operator reads)."""

    windows: list
    matched: bool
    how: str
    labels: dict
    pinned: int = 0  # the first `pinned` windows were found by an alarm's own record: rerank always keeps them
    answer: str = ""  # the plant's record answers it already (no such trip; a count, a summary): no target needed
    vocab: object = None  # the words of the plants searched (host/logwords.Vocabulary): fit_sources reads them


_PORTLIKE = re.compile(r"^(/|[A-Za-z][A-Za-z0-9+.-]*://|COM\d+$)")


def node_labels(store) -> dict:
    """Store node name -> label: the name itself when the operator gave it (not a port path), else the unique id
    from the handshake where the store's nodes table has one (uid / unique_id), else the board id, else the
    name. Equal labels get -2, -3... in the order the nodes were first seen."""
    with store._lock:  # noqa: SLF001 (a read of the store's own connection)
        cols = [r[1] for r in store._db.execute("PRAGMA table_info(nodes)").fetchall()]  # noqa: SLF001
        uid = next((c for c in ("unique_id", "uid", "node_uid") if c in cols), None)
        rows = store._db.execute("SELECT name, board_id, %s FROM nodes ORDER BY id"  # noqa: SLF001
                                 % (uid or "''")).fetchall()
    out: dict = {}
    used: dict = {}
    for name, board, u in rows:
        label = name
        if _PORTLIKE.match(name or ""):
            label = str(u) if u else (board or name)
        n = used.get(label, 0) + 1
        used[label] = n
        out[name] = label if n == 1 else "%s-%d" % (label, n)
    return out


def _recent_lines(store, limit: int, lines: int) -> list:
    """The most recent plant lines (level > 0) of every node, cut into windows of `lines`, newest first."""
    from host.store import Window

    out = []
    with store._lock:  # noqa: SLF001
        db = store._db  # noqa: SLF001
        for nid, name in db.execute("SELECT id, name FROM nodes ORDER BY id").fetchall():
            rows = db.execute("SELECT id, wall_ms, text FROM logs WHERE node=? AND level>0 ORDER BY id DESC LIMIT ?",
                              (nid, limit * lines)).fetchall()[::-1]
            for i in range(len(rows), 0, -lines):
                part = rows[max(0, i - lines):i]
                out.append(Window(name, part[0][1], part[-1][1], "\n".join(r[2] for r in part), 0.0,
                                  part[0][0], part[-1][0]))
    out.sort(key=lambda w: -w.t1_ms)
    return out[:limit]


def _with_sole_ids(store, question: str, vocab) -> str:
    """The question with "the silo" read as the store's one silo, where its log names only one of the silos
    of the plants' descriptions."""
    from host import logwords

    sole = {}
    for kind in logwords.unnamed_kinds(question, vocab):
        ids = store.machines(list(vocab.kinds[kind]))
        if len(ids) == 1:
            sole[kind] = ids[0]
    return logwords.with_sole_ids(question, sole, vocab) if sole else question


def _by_record(store, question: str, lines: int, vocab):
    """(the window of the line that answers by the plant's record, what it is, "") or (None, what, the answer)
    when the record proves that nothing of the kind happened, or None: the ACK or CLEAR line of the one alarm
    the question names (logwords.alarm_follow -> LogStore.alarm_follow); for "when did it start ...", the first
    alarm the machine raised of the signals the question names (logwords.onset -> LogStore.first_raise), and
    none of them ever raised is the answer; for "why did P-1 trip?", no trip of it ever logged is."""
    from host import logwords

    f = logwords.alarm_follow(question, vocab)
    if f is not None:
        w = store.alarm_follow(f["machine"], f["verb"], f["level"], f["words"], f["minute"], lines=lines)
        return None if w is None else (w, "the alarm's %s line" % f["verb"], "")
    f = logwords.onset(question, vocab)
    if f is not None:
        m = f["machine"]
        w = store.first_raise(m, f["words"], lines=lines, tags=f["tags"])
        if w is not None:
            return w, "%s's first alarm" % m, ""
        if f["tags"] is None:
            return None
        signals = " or ".join(f["signals"])  # in the description's words, as the operator knows them
        return None, "no %s alarm of %s" % (signals, m), nothing(store, m, "%s raised no %s alarm" % (m, signals))
    m = logwords.trip(question, vocab)
    if m is not None and not store.tripped(m):
        return None, "no trip of %s" % m, nothing(store, m, "no trip of %s" % m)
    return None


def _overlaps(w, windows) -> bool:
    """Whether window w shares lines with one of `windows` (they would repeat lines in the prompt's budget)."""
    return any(w.node == x.node and w.first_id <= x.last_id and x.first_id <= w.last_id for x in windows)


def _record_windows(store, cited, lines: int) -> list:
    """The windows around the lines a record answer rests on (host/askrecord.Found.lines), one per line that no
    earlier one holds."""
    out: list = []
    held: list = []  # (node id, first line id, last line id)
    with store._lock:  # noqa: SLF001 (the store's own window reader)
        for nid, lid in cited:
            if not any(n == nid and a <= lid <= b for n, a, b in held):
                w = store._record_window(nid, lid, lines)  # noqa: SLF001
                held.append((nid, w.first_id, w.last_id))
                out.append(w)
    return out


def _in_scope(store, question: str, found: list, vocab) -> list:
    """An open question's windows (why, how) kept to the time it asks about (host/asktime.span) where any are,
    those whose alarm or state lines name the machines it asks about (host/askintent.of_kind) first, then those
    naming them at all, in retrieval's order otherwise."""
    ids = askintent.of_kind(question, vocab)
    first, now = askrecord.bounds(store)
    span = None if now is None else asktime.span(question, now, first, askrecord.zone(vocab, ids))
    if span is not None:
        found = [w for w in found if w.t0_ms <= span.t1_ms and span.t0_ms <= w.t1_ms] or found
    if not ids:
        return found
    marks = [" %s " % i for i in ids]

    def scope(w) -> tuple:
        lines = [" %s " % ln for ln in w.text.splitlines()]
        events = [ln for ln in lines if any(" %s " % v in ln[:40] for v in ("ALARM", "STATE", "ACK", "CLEAR"))]
        return (not any(m in ln for ln in events for m in marks), not any(m in ln for ln in lines for m in marks))

    return sorted(found, key=scope)


def retrieve(store_path: str | Path, question: str, limit: int = 20, lines: int = 8) -> Retrieval:
    """Candidate windows for the question (see the module docstring: Fallback), read-only."""
    from host.store import StoreError

    store = _open_store(store_path, question)
    try:
        labels = node_labels(store)
        vocab = vocabulary(store)
        said = question
        question = _with_sole_ids(store, askintent.normalize(question, vocab), vocab)
        told = askrecord.answer(store, question, vocab)
        if told is not None:  # a count, what is in alarm, what a machine did, a summary: the record answers it
            rested = _record_windows(store, told.lines, lines)
            found = rested + [w for w in _in_scope(store, said, _windows(store, question, limit, lines, vocab), vocab)
                              if not _overlaps(w, rested)]
            return Retrieval(found[:max(limit, len(rested))], True, "the plant's record answers it: %s" % told.what,
                             labels, pinned=len(rested), answer=told.text, vocab=vocab)
        found = _in_scope(store, said, _windows(store, question, limit, lines, vocab), vocab)
        record = _by_record(store, question, lines, vocab)
        if record is not None and record[0] is None:
            _, what, answer = record
            how = "the plant's record answers it: %s" % what
            if found:
                return Retrieval(found, True, how, labels, answer=answer, vocab=vocab)
            return Retrieval(_recent_lines(store, limit, lines), False, how, labels, answer=answer, vocab=vocab)
        if record is not None:
            w0, what, _ = record
            # windows overlapping it would repeat its lines in the prompt's budget
            found = [w0] + [w for w in found if not _overlaps(w, [w0])][:limit - 1]
            return Retrieval(found, True, "%s (by the plant's record) and %d windows holding the question's words"
                             % (what, len(found) - 1), labels, pinned=1, vocab=vocab)
        if found:
            return Retrieval(found, True, "%d windows hold the question's words" % len(found), labels, vocab=vocab)
        found = store.windows(FALLBACK_QUERY, limit=limit, lines=lines)
        found.sort(key=lambda w: -w.t1_ms)
        if found:
            return Retrieval(found, False, "no log line holds the question's words: the %d most recent alarm/state "
                             "windows instead" % len(found), labels, vocab=vocab)
        found = _recent_lines(store, limit, lines)
        return Retrieval(found, False, "no log line holds the question's words and no alarm or state line is "
                         "stored: the %d most recent windows instead" % len(found), labels, vocab=vocab)
    except (StoreError, sqlite3.Error) as e:
        raise QAError(str(e)) from None
    finally:
        store.close()


def rerank(prism, question: str, windows: Sequence, k: int, labels: Optional[dict] = None, pinned: int = 0):
    """(the top k windows as Sources, best first, the PRISM Ranking); a window's node is shown by its label.
    The first `pinned` windows (Retrieval.pinned: found by an alarm's record, not by words) come first
    whatever PRISM makes of them; PRISM's best of the rest fill the k."""
    if not windows:
        raise QAError("no log windows to rank: the store holds no plant lines yet")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise QAError("k must be a positive integer, got %r" % (k,))
    if k > len(windows):
        raise QAError("k=%d is larger than the %d candidate windows found for this question; use --k %d or less"
                      % (k, len(windows), len(windows)))
    labels = labels or {}
    pinned = max(0, min(int(pinned), len(windows)))
    # the windows are in retrieval's order: the model's retrieval prior (host/prism/prior.py) reads it
    ranking = prism.rank(question, [w.text for w in windows], k, prior=prism.retrieval_prior(len(windows), pinned))
    first = min(pinned, k)  # at most k windows can be kept first
    order = list(range(first)) + [j for j in ranking.top if j >= first]
    chosen = [Source(i + 1, labels.get(windows[j].node, windows[j].node), int(windows[j].t0_ms),
                     int(windows[j].t1_ms), windows[j].text, float(ranking.probs[j]))
              for i, j in enumerate(order[:k])]
    return chosen, ranking


# ---------------------------------------------------------------------------------------------- prompt


def prompt_text(question: str, sources: Sequence[Source], note: str = "") -> str:
    """ChatML prompt (SmolLM2-Instruct's template) with the numbered windows (and a note to the model, if any).
    When every window is of one day, the day is said once (SmolLM2 reads each digit as a token)."""
    days = {fmt_ms(t)[:10] for s in sources for t in (s.t0_ms, s.t1_ms)}
    one_day = len(days) == 1

    def span(s: Source) -> str:
        if not one_day:
            return s.span()
        return "%s %s to %s" % (s.node, fmt_ms(s.t0_ms, time_only=True), fmt_ms(s.t1_ms, time_only=True))

    blocks = ["[%d] %s:\n%s" % (s.n, span(s), s.text.strip()) for s in sources]
    head = "Log windows of %s (UTC)" % days.pop() if one_day else "Log windows"
    user = "%s:\n\n%s\n\n%sQuestion: %s" % (head, "\n\n".join(blocks), note + "\n\n" if note else "",
                                             question.strip())
    return ("<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n"
            % (SYSTEM, user))


def _words(text: str) -> set:
    """The text's words, lowered, and the parts of a tag ("winding_temp" is "temp" too, as FTS5 reads it)."""
    from host.store import _STOP, _WORD

    out = set()
    for w in _WORD.findall(text):
        w = w.lower()
        out.update([w] + (w.split("_") if "_" in w else []))
    return {w for w in out if w not in _STOP and len(w) > 1}


def fit_sources(question: str, sources: Sequence[Source], count: Callable[[str], int],
                budget: int = PROMPT_BUDGET, vocab=None) -> list[Source]:
    """The sources with their text cut to fit `budget` tokens in all (count(line) = its tokens): each window
    keeps, in its own order, first the lines that hold most of the question's words (a word weighs 1 / the
    number of the window's lines that hold it, so the rare ones decide), then event and note lines, then the
    lines nearest its middle (where the FTS hit is), as many as its share of the budget allows
    (what one window leaves over goes to the next); every window keeps at least one line. Lines lose their
    ISO date (short_line). The question's words include the log's words for them (host/logwords.expand, in the
    words of `vocab`, the plants' the windows come from: Retrieval.vocab; None: the grammar's words only)."""
    from host import logwords

    want = _words(logwords.expand(question, vocab if vocab is not None else logwords.Vocabulary.of(())))
    out: list[Source] = []
    left = budget
    for i, s in enumerate(sources):
        lines = [short_line(ln) for ln in s.text.strip().splitlines() if ln.strip()] or [s.text.strip()]
        share = left // (len(sources) - i)
        mid = (len(lines) - 1) / 2.0
        held = [_words(ln) & want for ln in lines]
        df = Counter(w for ws in held for w in ws)

        def prio(j: int) -> tuple:
            # a question word counts 1/(lines of the window holding it): in a window where every line names
            # one machine and one of its signals, the one ACK line of "who acked ..." is what tells the answer
            weight = sum(1.0 / df[w] for w in held[j])
            return (-weight, not any(w in lines[j] for w in EVENT_WORDS), abs(j - mid))

        keep: list[int] = []
        used = 0
        for j in sorted(range(len(lines)), key=prio):
            c = count(lines[j]) + 1
            if keep and used + c > share:
                continue
            keep.append(j)
            used += c
        left -= used
        out.append(Source(s.n, s.node, s.t0_ms, s.t1_ms, "\n".join(lines[j] for j in sorted(keep)), s.prob))
    return out


_ISO_DAY = re.compile(r"^\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d)Z ")


def short_line(line: str) -> str:
    """A log line for the prompt: its ISO date dropped ("2026-11-30T07:25:00Z X" -> "07:25:00 X"); the window's
    span names the day, and SmolLM2 reads every digit as a token (11 tokens a line saved)."""
    return _ISO_DAY.sub(r"\1 ", line)


def cited_sources(answer: str, sources: Sequence[Source]) -> list[Source]:
    """The sources whose [n] appears in the answer, in order of first citation."""
    by_n = {s.n: s for s in sources}
    out: list[Source] = []
    for m in _CITE.finditer(answer):
        s = by_n.get(int(m.group(1)))
        if s is not None and s not in out:
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------------- target


def bpe_tokenizer(fields):
    """A `tokenizers.Tokenizer` from a GGUF's tokenizer fields (GPT-2 byte-level BPE; SmolLM2's "smollm"
    pre-tokenizer splits digits one by one first)."""
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - declared dependency
        raise QAError("the `tokenizers` package is not installed: pip install 'tokenizers>=0.19,<1'") from None
    if fields is None:
        raise QAError("the target GGUF carries no tokenizer")
    if fields.model != "gpt2":
        raise QAError("the target's tokenizer is %r; edgetwin ask supports GPT-2 style BPE (SmolLM2)" % fields.model)
    pre = [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]
    if fields.pre == "smollm":
        pre.insert(0, {"type": "Digits", "individual_digits": True})
    elif fields.pre not in ("gpt2", "default"):
        raise QAError("the target's pre-tokenizer %r is not supported (smollm, gpt2)" % fields.pre)
    names = fields.tokens
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": names[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(fields.token_types) if t == CONTROL],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {n: i for i, n in enumerate(names)}, "merges": [m.split(" ") for m in fields.merges]},
    }
    try:
        return tokenizers.Tokenizer.from_str(json.dumps(doc))
    except Exception as e:
        raise QAError("cannot build the target's tokenizer from the GGUF: %s" % e) from None


def load_text_model(path: str | Path, domain: bool = False):
    """(Target, tokenizer, stop ids) from one GGUF read: the target, the `tokenizers.Tokenizer` its own
    tokenizer fields make (bpe_tokenizer), and the ids that end a turn (eos, <|im_end|>, <|endoftext|>).
    domain: the GGUF is the base of the shipped plant adapters, merged in (host/target_delta.py)."""
    from host.gguf_load import load_gguf
    from host.llama_np import Target, TargetError

    try:
        if domain:
            from host import target_delta

            m = target_delta.load_domain(base=Path(path))
        else:
            m = load_gguf(path)
        target = Target(m.config, m.weights)
    except (TargetError, OSError, ValueError) as e:
        raise QAError("cannot load the target model %s: %s" % (path, e)) from None
    tok = bpe_tokenizer(m.tokenizer)
    stops = [i for i in (m.tokenizer.eos_id, tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>"))
             if i is not None]
    return target, tok, stops


def text_decoder(tokenizer) -> Callable[[Sequence[int]], str]:
    """ids -> text with the target's tokenizer (special tokens left out): how the gateway stores annotations."""
    return lambda ids: tokenizer.decode([int(t) for t in ids], skip_special_tokens=True)


class Answerer:
    """The target model + its tokenizer; answer() streams a greedy answer."""

    def __init__(self, target, tokenizer, stop_ids: Sequence[int]):
        self.target, self.tokenizer = target, tokenizer
        self.stop_ids = set(int(i) for i in stop_ids)
        self.last: dict = {}  # figures of the last answer: prompt/answer tokens, prefill/decode seconds, why it ended

    @classmethod
    def from_gguf(cls, path: str | Path, domain: bool = False) -> "Answerer":
        return cls(*load_text_model(path, domain))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def answer(self, question: str, sources: Sequence[Source], max_tokens: int = 64,
               on_text: Optional[Callable[[str], None]] = None, note: str = "",
               budget: Optional[int] = PROMPT_BUDGET, vocab=None) -> str:
        """Greedy answer; on_text gets each new piece of text as soon as it decodes to whole characters.

        The windows are cut to `budget` prompt tokens first (fit_sources, in the words of `vocab`; None: as
        they are); the answer ends at a stop id, at its first blank line after some text, or after max_tokens."""
        t0 = time.perf_counter()
        if budget is not None and sources:
            sources = fit_sources(question, sources, self.count, budget, vocab)
        ids = self.encode(prompt_text(question, sources, note))
        ctx = self.target.cfg.context_length
        staged = PREFILL_CHUNK  # the prompt is fed in chunks this long (larger matmuls: ~15% faster than 64)
        if len(ids) + max_tokens + staged > ctx:
            raise QAError("the prompt (%d tokens) and answer (%d) exceed the target's context of %d tokens; use a "
                          "smaller --k" % (len(ids), max_tokens, ctx - staged))
        cache = self.target.new_dense_cache(len(ids) + max_tokens, staged=staged)
        logits = self.target.feed(cache, ids, last_only=True)[-1]
        t1 = time.perf_counter()
        out: list[int] = []
        shown = ""
        ended = "max_tokens"
        text = ""
        for _ in range(max_tokens):
            tok = int(np.argmax(logits))
            if tok in self.stop_ids:
                ended = "end of turn"
                break
            out.append(tok)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            cut = text.find("\n\n", len(text) - len(text.lstrip()))
            if cut > 0:  # a blank line after some text: the answer is over (what follows is the model rambling)
                text = text[:cut]
                ended = "blank line"
                break
            if not text.endswith("\ufffd") and len(text) > len(shown) and text.startswith(shown):
                if on_text is not None:
                    on_text(text[len(shown):])
                shown = text
            if len(out) == max_tokens:
                break
            logits = self.target.forward(cache, [tok])[0]
            cache.commit(1)
        if ended != "blank line":
            text = self.tokenizer.decode(out, skip_special_tokens=True)
        if on_text is not None and len(text) > len(shown) and text.startswith(shown):
            on_text(text[len(shown):])
        t2 = time.perf_counter()
        self.last = {"prompt_tokens": len(ids), "answer_tokens": len(out), "prefill_s": round(t1 - t0, 3),
                     "decode_s": round(t2 - t1, 3), "ended": ended,
                     "prompt_lines": sum(len(s.text.splitlines()) for s in sources)}
        return text


def check_answer(text: str, chosen: Sequence[Source], store_path: str | Path, question: str = "", vocab=None):
    """The target's answer held against the plant's record (host/answercheck.check): the windows it cites first,
    then the rest it was given, then the store's lines."""
    from host import answercheck
    from host.store import LogStore, StoreError

    cited = cited_sources(text, chosen)
    try:
        store = LogStore(store_path, readonly=True)
    except StoreError as e:
        raise QAError(str(e)) from None
    try:
        return answercheck.check(text, cited + [s for s in chosen if s not in cited], store, vocab, question)
    except (StoreError, sqlite3.Error) as e:
        raise QAError(str(e)) from None
    finally:
        store.close()


class Background:
    """A model loaded in a thread while retrieval and ranking run: get() waits for it (and raises its error)."""

    def __init__(self, load: Callable[[], object]):
        self._load = load
        self._value: object = None
        self._error: Optional[BaseException] = None
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            self._value = self._load()
        except BaseException as e:  # handed to get()
            self._error = e

    def get(self):
        self._t.join()
        if self._error is not None:
            raise self._error
        return self._value


def ask(question: str, store_path: str | Path, prism, answerer: Optional[Callable[[], "Answerer"]], k: int = 3,
        limit: int = CANDIDATES, lines: int = 6, max_tokens: int = 64, budget: Optional[int] = PROMPT_BUDGET,
        report: Optional[Callable[[str, object], None]] = None) -> dict:
    """The whole question: retrieve, rank, answer. answer() is called for the Answerer (None: rank only).

    report(kind, data) sees it happen: ("progress", line), ("chosen", (retrieval, chosen, ranking)) before the
    answer starts, ("draft", piece) as the target's own text streams (for a progress view only: it is not the
    answer), then ("text", answer) once, the answer checked against the plant's record (check_answer). Returns
    the answer, the model's own text ("said"), the windows, the claims found in it (host/answercheck.Claim), those
    no line confirms ("unconfirmed") and the timings."""
    rep = report or (lambda kind, data: None)
    t0 = time.perf_counter()
    rep("progress", "retrieval: searching the log store")
    found = retrieve(store_path, question, limit=limit, lines=lines)
    t1 = time.perf_counter()
    rep("progress", "retrieval: %s (%.2f s)" % (found.how, t1 - t0))
    if found.answer and not found.windows:  # the record answers with no line to rest on (nothing in alarm, a
        # count of 0 in a store without such lines): its answer is the answer, with nothing to rank or show
        rep("text", found.answer)
        res = {"question": question, "matched": found.matched, "how": found.how, "candidates": 0, "chosen": [],
               "ranking": None, "answer": found.answer, "said": None, "cited": [], "claims": [], "unconfirmed": [],
               "by_record": True, "pinned": 0, "times": {"retrieve_s": round(t1 - t0, 3), "rerank_s": 0.0}}
        res["times"].update(wait_target_s=0.0, answer_s=0.0, check_s=0.0, total_s=round(time.perf_counter() - t0, 3),
                            prompt_tokens=0, answer_tokens=0, prefill_s=0.0, decode_s=0.0, prompt_lines=0,
                            ended="the plant's record")
        return res
    if 0 < len(found.windows) < k:  # a young store: every window there is, said so (k is a most)
        rep("progress", "only %d windows found: all of them are used (--k %d)" % (len(found.windows), k))
        k = len(found.windows)
    rep("progress", "reranking %d windows with PRISM" % len(found.windows))
    chosen, ranking = rerank(prism, question, found.windows, k, labels=found.labels, pinned=found.pinned)
    t2 = time.perf_counter()
    rep("progress", "reranked in %.2f s" % (t2 - t1))
    rep("chosen", (found, chosen, ranking))
    res = {"question": question, "matched": found.matched, "how": found.how, "candidates": len(found.windows),
           "chosen": chosen, "ranking": ranking, "answer": None, "said": None, "cited": [], "claims": [],
           "unconfirmed": [], "by_record": bool(found.answer), "pinned": found.pinned,
           "times": {"retrieve_s": round(t1 - t0, 3), "rerank_s": round(t2 - t1, 3)}}
    if answerer is None:
        res["times"]["total_s"] = round(time.perf_counter() - t0, 3)
        return res
    if found.answer:  # the record proves the absence, counts, summarises; a target reading three windows cannot
        rep("text", found.answer)
        res["answer"] = found.answer
        res["times"].update(wait_target_s=0.0, answer_s=0.0, check_s=0.0, total_s=round(time.perf_counter() - t0, 3),
                            prompt_tokens=0, answer_tokens=0, prefill_s=0.0, decode_s=0.0, prompt_lines=0,
                            ended="the plant's record")
        return res
    if not hasattr(answerer, "answer"):
        rep("progress", "waiting for the target model to load")
        answerer = answerer()
    t3 = time.perf_counter()
    rep("progress", "generating the answer (at most %d tokens)" % max_tokens)
    text = answerer.answer(question, chosen, max_tokens=max_tokens, budget=budget,
                           on_text=lambda piece: rep("draft", piece), note="" if found.matched else NO_MATCH_NOTE,
                           vocab=found.vocab)
    t4 = time.perf_counter()
    rep("progress", "checking the answer against the plant's record")
    checked = check_answer(text, chosen, store_path, question, found.vocab)
    t5 = time.perf_counter()
    rep("text", checked.answer)
    res.update(answer=checked.answer, said=text, cited=cited_sources(checked.answer, chosen), claims=checked.claims,
               unconfirmed=checked.unconfirmed)
    res["times"].update(wait_target_s=round(t3 - t2, 3), answer_s=round(t4 - t3, 3), check_s=round(t5 - t4, 3),
                        total_s=round(t5 - t0, 3))
    res["times"].update({k2: v for k2, v in answerer.last.items()})
    return res
