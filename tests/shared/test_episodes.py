# test_episodes.py: which plant lines start an annotation episode (firmware/episodes.py over the node's
# Sampler), the periodic summary rate, the bounded queue and its drop counter, and no allocation per tick
# on MicroPython; the episodes equal those a plain str reference (tools/train/corpus.py's rule) cuts.
import gc

import testkit
from firmware.episodes import EVENT, SUMMARY, EpisodeQueue
from firmware.logq import LineQueue
from firmware.sampler import Sampler
from shared import episode
from shared.plant import Plant

FAULTS = ((0, "P-101", "clogged_filter", 5, None), (0, "M-201", "sensor_dropout", 3, None),
          (300, "CV-401", "bearing_wear", 5, None))


def _sampler(slots=64, summary_s=120, sample_every=10, faults=FAULTS):
    eq = EpisodeQueue(slots, summary_s)
    q = LineQueue(8)
    return Sampler(q, 5, 4, sample_every, 1000, 0, None, eq, faults), eq, q


def _reference(ticks, summary_s, sample_every=10, faults=FAULTS):
    """The episodes by the corpus's rule, from the plant's str lines: (tick, kind, lines)."""
    p = Plant(5, n_machines=4, sample_every=sample_every)
    out = []
    nxt = 0  # the first sample tick is a summary
    fs = list(faults)
    for t in range(ticks):
        while fs and fs[0][0] <= t:
            f = fs.pop(0)
            p.inject(f[1], f[2], f[3], f[4])
        p.step()
        lines = p.lines()
        ev = [ln for ln in lines if episode.is_event(ln)]
        sm = [ln for ln in lines if not episode.is_event(ln)]
        if ev:
            out.append((t, EVENT, ev[-episode.MAX_LINES:]))
        elif sm and summary_s and t >= nxt:
            out.append((t, SUMMARY, sm[-episode.MAX_LINES:]))
            nxt = t + summary_s
    return out


def _take(eq):
    got = []
    while eq.count:
        lines = []
        for i in range(eq.head_lines()):
            o = eq.line_off(i)
            lines.append(str(bytes(eq.buf[o:o + eq.line_len(i)]), "utf-8"))
        got.append((eq.head_kind(), lines))
        eq.pop()
    return got


def test_event_lines_are_told_apart_from_samples():
    p = Plant(5, n_machines=5, sample_every=1)
    p.inject("P-101", "sensor_dropout", 5)
    p.command("M-201", "stop")
    heads = {}
    buf = bytearray(128)
    for _ in range(400):
        for i in range(p.step()):
            k = p.line_into(i, buf)
            s = str(bytes(buf[:k]), "utf-8")
            ev = episode.is_event_at(buf, 0, k)
            assert ev == episode.is_event(s), s
            heads[s[21:].split(" ")[0]] = ev
    assert heads["ALARM"] and heads["STATE"], heads
    ids = [h for h in heads if h[:1] in "PMC" and "-" in h]
    assert len(ids) == 5 and "CV-401" in ids and "C-301" in ids and not any(heads[h] for h in ids), heads
    assert not episode.is_event_at(b"2026-11-30T06:00:00Z C-301 RUNNING T=1.0C", 0, 41)
    assert episode.is_event_at(b"2026-11-30T06:00:00Z CLEAR HI C-301 flow 1.0m3/h prio=2 NORMAL", 0, 60)
    assert not episode.is_event_at(b"short", 0, 5)


def test_episodes_are_the_corpus_rule_event_ticks_and_summaries():
    ticks = 700
    smp, eq, q = _sampler()
    got = []
    for t in range(ticks):
        smp.tick(t)
        q.count = 0  # the link took the lines (not under test here)
        got.extend(_take(eq))
    ref = _reference(ticks, 120)
    assert [(k, ls) for _, k, ls in ref] == got
    kinds = [k for k, _ in got]
    assert EVENT in kinds and SUMMARY in kinds, kinds
    assert eq.events == kinds.count(EVENT) and eq.summaries == kinds.count(SUMMARY) and eq.dropped == 0
    # no episode is a plain sample tick unless it is a summary
    for k, ls in got:
        assert all(episode.is_event(ln) for ln in ls) == (k == EVENT), ls


def test_summary_rate_and_off():
    for summary_s in (100, 250, 0):
        smp, eq, q = _sampler(summary_s=summary_s, faults=())
        at = []
        for t in range(1000):
            smp.tick(t)
            q.count = 0
            while eq.count:
                if eq.head_kind() == SUMMARY:
                    at.append(t)
                eq.pop()
        ref = [t for t, k, _ in _reference(1000, summary_s, faults=()) if k == SUMMARY]
        assert at == ref, (summary_s, at, ref)
        if summary_s:  # one per summary_s plant seconds, on a sample tick, never closer
            assert len(at) >= 1000 // summary_s - 1 and at[0] == 0, (summary_s, at)
            assert all(a % 10 == 0 for a in at) and all(b - a >= summary_s for a, b in zip(at, at[1:])), at
        else:
            assert at == [] and eq.summaries == 0
        smp = eq = q = None  # one sampler at a time, as on a board: its 32 KB queue is freed for the next
        gc.collect()


def test_full_queue_drops_the_oldest_and_counts():
    eq = EpisodeQueue(2, 0)
    line = bytearray(b"2026-11-30T06:00:00Z STATE P-101 STOPPED->STARTING cmd=schedule")
    for t in range(5):
        line[19 - 1] = 48 + t  # the seconds' last digit tells the episodes apart
        eq.add(line, 0, len(line))
        assert eq.end_tick(t) == EVENT
    assert eq.count == 2 and eq.dropped == 3 and eq.events == 5
    got = _take(eq)
    assert [ls[0][18] for _, ls in got] == ["3", "4"], got
    # a tick of more event lines than MAX_LINES keeps its last ones, in order
    for i in range(episode.MAX_LINES + 2):
        line[19 - 1] = 48 + i
        eq.add(line, 0, len(line))
    eq.end_tick(9)
    (_, ls), = _take(eq)
    assert [ln[18] for ln in ls] == [str(i) for i in range(2, episode.MAX_LINES + 2)], ls
    assert testkit.raises(ValueError, EpisodeQueue, 0)


def _ticks(smp):
    q = smp.q
    eq = smp.eq
    for t in range(400):
        smp.tick(t)
        q.count = 0
        while eq.count:
            eq.pop()
    return 0


def test_sampler_with_episodes_allocates_nothing_per_tick():
    smp, eq, q = _sampler(slots=3, summary_s=60, faults=((0, "P-101", "clogged_filter", 5, None),
                                                         (0, "M-201", "sensor_dropout", 5, None)))
    smp.tick(0)  # the faults go in (boot-time work, allowed to allocate)
    testkit.run_locked(_ticks, smp)
    assert eq.events > 0 and eq.summaries > 0, (eq.events, eq.summaries)
