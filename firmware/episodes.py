# episodes.py: which plant lines start an annotation episode, and a bounded queue of the episodes waiting.
"""The node annotates events, not whichever line came last (docs/NODE.md, What the node annotates). The
sampler hands every line of a plant tick to an EpisodeQueue (add), then closes the tick (end_tick):

- a tick holding event lines (shared/episode.is_event_at: ALARM, ACK, CLEAR, SHELVE, UNSHELVE, STATE,
  LOST) is an event episode; its prompt holds that tick's event lines, the last episode.MAX_LINES;
- a tick with no event line but sample lines, once `summary_s` plant seconds (ticks) have passed since
  the last summary (the first at the first sample tick: a node shows it drafts at boot), is a summary episode of its sample lines (the last
  MAX_LINES); summary_s 0: none.

That is exactly how tools/train/corpus.py cuts a plant stream into episodes, so the draft is trained on
the episodes the node drafts. Episodes wait here, in `slots` preallocated slots, until the annotator takes
the oldest (head, line, pop). A full queue drops its oldest episode, counted in `dropped` (the NODE report's
ep_dropped): the newest events are the ones worth a note. Log lines are not touched: this queue holds
copies. Nothing allocates after construction (add and end_tick run every tick).
"""
from firmware.logq import LINE_MAX
from shared import episode
from shared.compat import const

EVENT = const(1)
SUMMARY = const(2)
_ML = episode.MAX_LINES


class EpisodeQueue:
    def __init__(self, slots=4, summary_s=episode.SUMMARY_S):
        if slots < 1:
            raise ValueError("an episode queue needs at least one slot")
        self.slots = slots
        self.summary_s = summary_s
        self.next_summary = 0  # the first sample tick is a summary: the node drafts at once
        self.buf = bytearray(slots * _ML * LINE_MAX)
        self.lens = bytearray(slots * _ML)
        self.nlines = bytearray(slots)
        self.kinds = bytearray(slots)
        # the tick being collected: its event lines and its sample lines, each a ring of the last MAX_LINES
        self.ev = bytearray(_ML * LINE_MAX)
        self.ev_lens = bytearray(_ML)
        self.ev_n = 0  # event lines this tick (all of them; the ring keeps the last MAX_LINES)
        self.sm = bytearray(_ML * LINE_MAX)
        self.sm_lens = bytearray(_ML)
        self.sm_n = 0
        self.head = 0
        self.count = 0
        self.dropped = 0  # episodes dropped because the queue was full (the oldest goes)
        self.events = 0  # event episodes queued
        self.summaries = 0  # summary episodes queued

    def add(self, buf, off, n):
        """One line of the current tick (buf[off:off+n], a plant line with its timestamp)."""
        if n > LINE_MAX:
            n = LINE_MAX
        if episode.is_event_at(buf, off, n):
            dst = self.ev
            lens = self.ev_lens
            i = self.ev_n % _ML
            self.ev_n += 1
        else:
            dst = self.sm
            lens = self.sm_lens
            i = self.sm_n % _ML
            self.sm_n += 1
        o = i * LINE_MAX
        for j in range(n):
            dst[o + j] = buf[off + j]
        lens[i] = n

    def end_tick(self, tick):
        """Close plant tick `tick`: queue its episode if it is one. Returns the kind queued (0: none)."""
        kind = 0
        if self.ev_n:
            self._push(self.ev, self.ev_lens, self.ev_n, EVENT)
            self.events += 1
            kind = EVENT
        elif self.sm_n and self.summary_s and tick >= self.next_summary:
            self._push(self.sm, self.sm_lens, self.sm_n, SUMMARY)
            self.next_summary = tick + self.summary_s
            self.summaries += 1
            kind = SUMMARY
        self.ev_n = 0
        self.sm_n = 0
        return kind

    def _push(self, src, lens, total, kind):
        if self.count == self.slots:  # full: the oldest episode goes
            self.head = (self.head + 1) % self.slots
            self.count -= 1
            self.dropped += 1
        s = (self.head + self.count) % self.slots
        k = total if total < _ML else _ML
        first = total - k  # ring index of the oldest line kept
        base = s * _ML
        for i in range(k):
            r = (first + i) % _ML
            n = lens[r]
            o = (base + i) * LINE_MAX
            ro = r * LINE_MAX
            for j in range(n):
                self.buf[o + j] = src[ro + j]
            self.lens[base + i] = n
        self.nlines[s] = k
        self.kinds[s] = kind
        self.count += 1

    # ---- the annotator's side: the oldest episode ----

    def head_lines(self):
        """Lines of the oldest episode (count must be > 0)."""
        return self.nlines[self.head]

    def head_kind(self):
        return self.kinds[self.head]

    def line_off(self, i):
        """Offset into buf of line i of the oldest episode."""
        return (self.head * _ML + i) * LINE_MAX

    def line_len(self, i):
        return self.lens[self.head * _ML + i]

    def pop(self):
        self.head = (self.head + 1) % self.slots
        self.count -= 1
