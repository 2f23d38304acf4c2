"""An annotation's time span starts at the log lines it annotates, not when the gateway got to verify it.

The store shows an annotation with the log windows whose wall time it overlaps (host/store.windows). A
busy gateway verifies a note seconds after its episode's lines were logged; had its span started at the
first verdict, the note would miss the window of the very lines it is about (what test_text_path saw on
a loaded CI machine). host/gateway.NodeStream remembers the node's recent plant lines and, at an
episode's PROMPT, takes the wall time of the earliest of its lines it knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from host import gateway, verifier
from host.session import Session
from host.store import LogStore
from shared import frame, frame_codec, frame_host

# the tiny target's ids, read as text by this test's decoder: two plant lines, the cue, a note, its stop
PIECES = {1: "P-101 ALARM T HI RAISED value=81.0C", 2: "\n", 3: "Note:", 4: " P-101 bearing hot",
          5: "M-201 RUNNING T=41.0C", 6: "C-301 ALARM P HI RAISED value=8.1bar"}
LINE_P = "2026-11-30T06:00:10Z " + PIECES[1]
LINE_C = "2026-11-30T06:00:20Z " + PIECES[6]


def _decode(ids: list[int]) -> str:
    return "".join(PIECES[int(i)] for i in ids)


@pytest.fixture()
def stream(tmp_path: Path):
    target = gateway.load_target("tiny:3")[0]
    store = LogStore(tmp_path / "g.db")
    now = [0]
    session = Session("n1", store, name="n1", wall=lambda: now[0])
    hello = frame_host.parse_body(frame.HELLO, frame_codec.pack_hello(role=0, draft_k=4, topk=4, kv_sink=4,
                                                                     kv_window=28, kv_staged=8, tx_base=0))
    sp = gateway.NodeStream(session, hello, target, 0.0, 0, 1, _decode)
    yield sp, store, now
    store.close()


def _prompt(sp, ids: list[int]) -> None:
    sp.on_prompt(verifier.pack_prompt(sp.stream.committed, ids))


def _log(store, sp, now, text: str, wall: int, seq: int) -> None:
    now[0] = wall
    store.add_log("n1", b"\x0a\x0a\x0a\x0a", seq, wall, wall, 1, text)
    sp.on_log(text, wall)


def test_a_late_verdict_keeps_the_span_of_its_lines(stream) -> None:
    sp, store, now = stream
    _log(store, sp, now, LINE_P, 10_000, 1)
    for i in range(2, 40):  # the plant goes on while the gateway is busy: 38 more lines, 1 s apart
        _log(store, sp, now, "2026-11-30T06:00:%02dZ %s" % (10 + i % 50, PIECES[5]), 10_000 + 1000 * i, i)
    now[0] = 60_000
    _prompt(sp, [1, 2, 3])  # the episode of the alarm line, sent late (the node waited for its verdicts)
    now[0] = 75_000  # verified 65 s after the alarm was logged
    sp.on_verdict(b"", [4, 2])
    ann = store.annotations()
    assert [(a["t0_ms"], a["t1_ms"], a["text"]) for a in ann] == [(10_000, 75_000, " P-101 bearing hot\n")]
    # the 8-line window of the alarm line (10 s to 18 s) shows the note
    w = next(w for w in store.windows("ALARM", lines=8) if w.t0_ms == 10_000)
    assert w.t1_ms == 18_000 and "NOTE: " + PIECES[4] in w.text, w.text


def test_the_earliest_known_line_of_the_prompt_and_the_newest_line_of_a_text(stream) -> None:
    sp, store, now = stream
    _log(store, sp, now, LINE_P, 5_000, 1)
    _log(store, sp, now, LINE_P, 10_000, 2)  # the same text again: the newer one is the episode's
    _log(store, sp, now, LINE_C, 12_000, 3)
    now[0] = 20_000
    _prompt(sp, [6, 2, 1, 2, 3])  # both lines in one episode
    sp.on_verdict(b"", [4, 2])
    assert store.annotations()[0]["t0_ms"] == 10_000


def test_a_prompt_in_several_frames_starts_at_its_first_line(stream) -> None:
    sp, store, now = stream
    _log(store, sp, now, LINE_P, 10_000, 1)
    _log(store, sp, now, LINE_C, 12_000, 2)
    now[0] = 20_000
    _prompt(sp, [1, 2])  # the episode's first line in one frame (a prompt longer than a frame holds)
    _prompt(sp, [6, 2, 3])  # the rest and the cue in the next
    sp.on_verdict(b"", [4, 2])
    _prompt(sp, [6, 2, 3])  # the next episode: only its own line counts
    sp.on_verdict(b"", [4, 2])
    assert [a["t0_ms"] for a in store.annotations()] == [10_000, 12_000]


def test_lines_the_gateway_never_saw_start_the_span_at_the_prompt(stream) -> None:
    sp, store, now = stream
    _log(store, sp, now, "2026-11-30T06:00:00Z NODE heap=1 committed=0 live=0 crc=00000000", 1_000, 1)
    now[0] = 30_000  # the episode's line is still queued behind its PROMPT (or was logged before we started)
    _prompt(sp, [1, 2, 3])
    now[0] = 31_000
    sp.on_verdict(b"", [4, 2])
    assert store.annotations()[0]["t0_ms"] == 30_000


def test_remembered_lines_are_bounded(stream) -> None:
    sp, store, now = stream
    for i in range(500):
        sp.on_log("2026-11-30T06:00:00Z M-201 RUNNING N=%drpm" % i, i)
    assert len(sp.recent) == gateway.NodeStream.RECENT
    assert "M-201 RUNNING N=499rpm" in sp.recent and "M-201 RUNNING N=0rpm" not in sp.recent


def _verdict(sp, ids: list[int], accepted: int, correction: bool) -> None:
    body = frame_host.pack_verdict(1, sp.stream.committed, accepted, correction=ids[-1] if correction else None,
                                   committed=sp.stream.committed + len(ids))
    sp.on_verdict(body, ids)


def test_the_store_tells_accepted_draft_tokens_from_corrections_and_offline_text(stream) -> None:
    """An annotation's spans (host/store.py): the draft tokens a verdict accepted, the target's correction after
    a rejection, and the text the node drafted while the gateway was away, in order, joining to its text."""
    sp, store, now = stream
    _log(store, sp, now, LINE_P, 10_000, 1)
    _prompt(sp, [1, 2, 3])
    _verdict(sp, [4], accepted=0, correction=True)  # the draft's first token rejected: the target's own
    _verdict(sp, [5, 2], accepted=2, correction=False)  # then two draft tokens accepted (the stop)
    a = store.annotations()[-1]
    assert a["text"] == PIECES[4] + PIECES[5] + "\n"
    assert a["spans"] == [["fix", PIECES[4]], ["draft", PIECES[5] + "\n"]]
    # the node alone (its gateway away): an UNVERIFIED prompt's ids are its own text
    sp.on_prompt(verifier.pack_prompt(sp.stream.committed, [4, 2], unverified=True))
    sp._flush()
    assert store.annotations()[-1]["spans"] == [["unverified", PIECES[4] + "\n"]]
    assert store.annotations()[-1]["verified"] == 0


def test_a_store_made_before_the_spans_column_stays_readable(tmp_path: Path) -> None:
    """A store without annotations.spans (an older gateway's): read as it is (spans None), and a gateway that
    opens it adds the column, keeping the rows it had."""
    import sqlite3

    db = tmp_path / "old.db"
    s = LogStore(db)
    s.add_annotation("n1", 1, 2, "an old note", True, 3)
    s.close()
    c = sqlite3.connect(db)
    c.execute("ALTER TABLE annotations DROP COLUMN spans")
    c.commit()
    c.close()
    ro = LogStore(db, readonly=True)
    assert [(a["text"], a["spans"]) for a in ro.annotations()] == [("an old note", None)]
    ro.close()
    s = LogStore(db)
    s.add_annotation("n1", 3, 4, "ab", True, 2, spans=[("draft", "a"), ("fix", "b")])
    assert [a["spans"] for a in s.annotations()] == [None, [["draft", "a"], ["fix", "b"]]]
    with pytest.raises(ValueError):
        s.add_annotation("n1", 3, 4, "ab", True, 2, spans=[("draft", "a")])  # the pieces must join to the text
    s.close()
