# annotator.py: drives the drafter over the link: system prompt, episodes, DRAFT/PROMPT out, verdicts in.
"""The node's side of the token stream (docs/NODE.md, The token stream):

    stream = system prompt, then episodes: PROMPT (an event tick's lines + a cue) + drafted annotation

- SYS: a fresh stream (boot, a gateway restart, a STALE verdict): drafter.reset(), prompt(system ids),
  sent as PROMPT at base 0. The gateway resets its stream on a PROMPT at base 0, so both caches restart
  together (`gen` counts these restarts).
- RUN: while the episode is not over, draft blocks (at most max_pending in flight) and send them as
  DRAFT; verdicts commit tokens. When the episode is over (stop id or max_len) and nothing is pending,
  the oldest episode waiting in the node's EpisodeQueue (firmware/episodes.py: a tick's event lines, or
  now and then a summary of its sample lines) starts as a PROMPT; with none waiting the stream idles.
- Offline (the link not established for `offline_ms`): pending blocks are dropped and the drafter
  commits its own tokens unverified (commit_offline), one per loop pass; at the end of an episode the
  next starts alone (prompt(..., offline=True)). At most sink + window ids wait for the gateway; if
  more were committed the stream restarts (SYS) when the link is back.
  When the link is back, the offline tokens go first, as PROMPT frames flagged UNVERIFIED; a gateway
  that disagrees answers STALE and both restart the stream (SYS).
- A gateway reboot (new epoch): its fresh target cache holds nothing, so the node resends the ids its own
  cache holds (drafter.resend_history: UNVERIFIED PROMPTs from base committed - live), which the
  gateway's new stream adopts; then drafting goes on. (The gateway's cache is then computed over those
  ids only, so acceptance may dip for a window; exactness does not depend on it.)

Tokens: the model's vocabulary. Without a tokenizer (the tiny test models) a log byte b becomes token
1 + b % (vocab - 1). With `tok` (a shared.bpe.BPE: the model's own tokenizer, e.g. the one the MBF
carries) the system prompt and each episode's prompt are shared/episode.py's text, encoded by it, so
the draft sees the stream format it was trained on (that encoding allocates, once per episode). Every buffer is allocated here; step() allocates nothing after warm-up.
"""
from array import array

from firmware.logq import LINE_MAX, put_bytes, put_hex4, put_uint
from shared import crc32, frame
from shared.compat import MASK30, const, ticks_ms
from shared.episode import MAX_LINES
from shared.frame import DR_TOKENS, MAX_K, MAX_TOPK, PR_IDS, PROMPT, PROMPT_MAX, draft_token_bytes

_SYS = const(0)
_RUN = const(1)
_OFFLINE = const(2)
SYSTEM = b"Plant log notes.\n"
CUE = b"\nNote:"
_TS = const(21)  # "2026-11-30T06:50:28Z ": a plant line's timestamp and its space


class Annotator:
    def __init__(self, drafter, node, vocab, prompt_max=48, offline_ms=4000, tok=None):
        self.d = drafter
        self.poll = self._poll_link  # bound once: prompts poll the link between their tokens (Drafter.prompt)
        self.prompting = False  # inside such a prompt: link callbacks that would change the stream wait
        self.restart_due = False  # a gateway restart seen while prompting: handled once the prompt is in
        self.verdict_due = 0  # the length of a verdict that arrived while prompting, applied after it
        self.stale_verdicts = 0  # further verdicts within that prompt, dropped (no block is pending then)
        self.tok = tok  # shared.bpe.BPE or None (byte tokens)
        self.node = node  # node.send(type, buf, n) sends a data frame; node.lk is the link
        self.lk = node.lk
        self.vocab = vocab
        self.prompt_max = prompt_max if prompt_max < PROMPT_MAX else PROMPT_MAX
        self.offline_ms = offline_ms
        self.body = bytearray(getattr(drafter, "body_max", DR_TOKENS + MAX_K * draft_token_bytes(MAX_TOPK)))
        self.pbuf = bytearray(PR_IDS + 2 * PROMPT_MAX)
        self.ptext = bytearray(MAX_LINES * (LINE_MAX + 1) + len(CUE))  # a byte-token prompt's text
        self.vbuf = bytearray(32)
        self.ids = array("i", bytearray(4 * PROMPT_MAX))
        cap = drafter.hist.capacity  # sink + window: the ids the cache holds
        self.hist = array("i", bytearray(4 * cap))
        self.hbuf = bytearray(2 * cap)
        self.crc = crc32.new("halves")
        self.crc4 = bytearray(4)
        self.state = _SYS
        self.gen = 0
        self.down_since = -1
        self.episodes = 0
        self.sent_drafts = 0
        self.offline_tokens = 0
        self.send_fail = 0
        self.desync_seen = 0
        self.resends = 0

    # ---- events from the node ----

    def restart(self):
        # a fresh stream on both sides (SYS): the gateway resets on the PROMPT at base 0
        self.state = _SYS

    def gateway_restarted(self):
        # a restarted gateway lost its target cache: resend the ids ours holds (UNVERIFIED PROMPTs), which
        # its fresh stream adopts (drafter.resend_history); nothing is drafted until they are out
        if self.prompting:
            self.restart_due = True
            return
        if self.state != _SYS:
            self.d.resend_history()
            self.resends += 1
            if self.state == _OFFLINE:
                self.state = _RUN

    def on_verdict(self, buf, off, n):
        vb = self.vbuf
        if n > len(vb):
            return
        if self.prompting and self.verdict_due:  # a second one within one prompt: none of ours is pending
            self.stale_verdicts += 1
            return
        for i in range(n):
            vb[i] = buf[off + i]
        if self.prompting:  # kept until the prompt is in (a STALE verdict must still restart the stream)
            self.verdict_due = n
            return
        self._verdict(n)

    def _verdict(self, n):
        vb = self.vbuf
        try:
            self.d.on_verdict(vb, n)
        except ValueError:  # a verdict that contradicts our blocks: start the stream again
            self.restart()
            return
        if self.d.desync != self.desync_seen:  # STALE: the gateway's stream is not ours
            self.desync_seen = self.d.desync
            self.restart()

    # ---- tokens ----

    def _tokens(self, src, off, n, j):
        ids = self.ids
        v = self.vocab - 1
        for i in range(n):
            if j >= self.prompt_max:
                break
            ids[j] = 1 + src[off + i] % v
            j += 1
        return j

    def _sys_ids(self):
        # the system prompt's ids into self.ids; returns their count
        if self.tok is None:
            return self._tokens(SYSTEM, 0, len(SYSTEM), 0)
        from shared import episode

        return self._encode(episode.system_prompt(), True)

    def _episode_ids(self, eq):
        # the oldest queued episode's prompt (its lines, then the cue) into self.ids; returns the count.
        # At most prompt_max ids: the end (the cue) is kept, the start of the first line dropped.
        buf = eq.buf
        nl = eq.head_lines()
        if self.tok is None:  # byte tokens: each line without its timestamp, "\n" between, then the cue
            pt = self.ptext
            k = 0
            for i in range(nl):
                off = eq.line_off(i)
                n = eq.line_len(i)
                s = _TS if n > _TS and buf[off + _TS - 1] == 32 and buf[off + 10] == 84 else 0
                if i:
                    pt[k] = 10
                    k += 1
                for b in range(off + s, off + n):
                    pt[k] = buf[b]
                    k += 1
            for b in range(len(CUE)):
                pt[k] = CUE[b]
                k += 1
            s = k - self.prompt_max if k > self.prompt_max else 0
            return self._tokens(pt, s, k - s, 0)
        from shared import episode

        d = self.d
        cap = d.capped  # the last note hit max_len without a newline: episode.py puts one first
        try:
            lines = [str(bytes(buf[eq.line_off(i):eq.line_off(i) + eq.line_len(i)]), "utf-8") for i in range(nl)]
            text = episode.prompt_text(lines, cap)
        except ValueError:  # EpisodeError, UnicodeError: a line the format cannot hold
            text = episode.CUE
        j = self._encode(text, False)
        if j > self.prompt_max:  # keep the end (the cue), drop the start of the line
            ids = self.ids
            s = j - self.prompt_max
            for i in range(self.prompt_max):
                ids[i] = ids[s + i]
            j = self.prompt_max
        return j

    def _encode(self, text, special):
        try:
            return self.tok.encode_into(text, self.ids, special)
        except ValueError:  # more ids than the buffer holds
            return self.tok.encode_into(CUE, self.ids, False)

    def _send_prompt(self, base, n, flags):
        # PROMPT frames of at most 255 ids from self.ids[0:n]; False if the link refused one
        i = 0
        while i < n:
            m = n - i if n - i < PROMPT_MAX else PROMPT_MAX
            k = frame.put_prompt(self.pbuf, base + i, self.ids, i, m, flags)
            if not self.node.send(PROMPT, self.pbuf, k):
                return False
            i += m
        return True

    # ---- the loop ----

    def step(self, now, eq):
        """One pass: eq (a firmware.episodes.EpisodeQueue) holds the episodes waiting for a note, oldest
        first; one is taken (and popped) when the last note is over. Returns work done (0/1)."""
        d = self.d
        lk = self.lk
        if not lk.established:
            if self.down_since < 0:
                self.down_since = now
            elif ((now - self.down_since) & MASK30) >= self.offline_ms and self.state == _RUN:
                self.state = _OFFLINE
                d.drop_pending()
            if self.state != _OFFLINE:
                return 0
            if d.stopped:  # next episode, alone: its prompt is queued for the gateway too
                if not eq.count or d.unsent_lost:
                    return 0
                j = self._episode_ids(eq)
                eq.pop()
                d.prompt(self.ids, j, True)
                self.episodes += 1
                return 1
            if d.commit_offline(1):
                self.offline_tokens += 1
                return 1
            return 0
        self.down_since = -1
        if self.state == _OFFLINE:
            self.state = _RUN
            if d.unsent_lost:  # more offline ids than we could keep: the gateway cannot follow
                self.state = _SYS
        if lk.free_slots() < 2:
            return 0
        if self.state == _SYS:
            d.reset()
            j = self._sys_ids()
            base = self._prompt(j)
            if self.tok is not None:  # episode.py's stream: an episode (log line + cue) comes first, no note
                d.stopped = True
            self.gen += 1
            self.state = _RUN
            if not self._send_prompt(base, j, 0):
                self.send_fail += 1
                self.state = _SYS
            return 1
        if d.unsent:
            k = d.unsent_prompt(self.pbuf)
            if k and not self.node.send(PROMPT, self.pbuf, k):
                self.send_fail += 1
                self.state = _SYS
            return 1
        if d.stopped:
            if d.pending or not eq.count:
                return 0
            j = self._episode_ids(eq)
            eq.pop()
            base = self._prompt(j)
            self.episodes += 1
            if not self._send_prompt(base, j, 0):
                self.send_fail += 1
                self.state = _SYS
            return 1
        k = d.draft(self.body)
        if k:
            if self.node.send(frame.DRAFT, self.body, k):
                self.sent_drafts += 1
            else:  # the block is pending on our side but never left: start over
                self.send_fail += 1
                self.state = _SYS
            return 1
        return 0

    def _poll_link(self):
        self.lk.poll(ticks_ms())

    def _prompt(self, j):
        # self.ids[:j] into the stream, the link polled after every token (acks, heartbeats: a prompt takes
        # seconds on a board); a gateway restart seen meanwhile is handled once the prompt is in
        self.prompting = True
        try:
            base = self.d.prompt(self.ids, j, False, self.poll)
        finally:
            self.prompting = False
        if self.restart_due:
            self.restart_due = False
            self.gateway_restarted()
        if self.verdict_due:
            n = self.verdict_due
            self.verdict_due = 0
            self._verdict(n)
        return base

    def lk_window(self):
        return len(self.hist)

    def live_crc(self, out, j):
        """Write 'committed=N crc=XXXXXXXX' for the live token ids (what the KV cache holds) at out[j]."""
        n = self.d.history(self.hist)
        hb = self.hbuf
        h = self.hist
        for i in range(n):
            v = h[i]
            hb[2 * i] = v & 0xFF
            hb[2 * i + 1] = (v >> 8) & 0xFF
        c = self.crc
        c.reset()
        c.update(hb, 0, 2 * n)
        c.put(self.crc4, 0)
        j = put_bytes(out, j, b"committed=")
        j = put_uint(out, j, self.d.committed)
        j = put_bytes(out, j, b" live=")
        j = put_uint(out, j, n)
        j = put_bytes(out, j, b" crc=")
        return put_hex4(out, j, self.crc4, 0)
