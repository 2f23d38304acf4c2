# drafter.py: the node's speculative drafter: deferred blocks of K draft tokens over the ring KV cache.
"""The node side of deferred speculative decoding (docs/SPECDEC.md section 8, docs/PROTOCOL.md 3.6-3.9).

    d = drafter.Drafter(model, k=4, temperature=0.7, top_k=4, seed=epoch, stop_ids=(nl, eos))
    base = d.prompt(ids, n)                  # PROMPT tokens: committed at once (send them as PROMPT frames)
    n = d.draft(body)                        # one DRAFT body; 0 when it cannot draft now
    delta = d.on_verdict(vbody, vn)          # commits accepted + correction, redrafts from there
    m = d.take(out)                          # the annotation ids committed since the last take

Blocks. A block is K draft tokens (fewer at the end of an episode), each sampled from exactly the
integer distribution sent with it (specdec.Dist, Q_TOTAL counts over the top-k) or, greedy, the argmax.
Every draft token is stepped through the model at once, so its K/V sits in a staging slot of the
RingKV and the next block (up to max_pending blocks) is drafted on top of it, on the assumption that
the earlier ones are accepted: the node never waits for the gateway.

Verdicts (only for the oldest pending block, matched by block id and base; anything else changes
nothing): a fully accepted block is committed and the blocks on top of it stay staged (commit with
keep); a rejection at index i commits the i accepted tokens, discards every other staged token (the
rest of the block and every block on top of it), steps and commits the correction, and the next block
gets the rejected block's id + ID_SKIP, so the gateway can tell the blocks drafted on top of a rejected
one (ids below that) from fresh ones. A STALE verdict drops every pending block and counts `desync`.

Episodes. prompt() starts one; it ends when a stop id (newline, EOS) is committed or max_len
annotation tokens were; a stop id drafted ends the drafting of the episode until its verdict.

Offline. commit_offline(n) drafts and commits without verification; the ids are kept (at most
sink + window of them) and unsent_prompt() turns them into PROMPT bodies with UNVERIFIED when the
link is back. resend_history() queues the live token ids (what the cache holds) the same way, for a
gateway that lost its cache.

Everything after construction is allocation-free on MicroPython except errors (raised exceptions):
draft, on_verdict, prompt (for llama.Model), commit_offline, unsent_prompt, take, history.

The DRAFT / VERDICT / PROMPT layouts (docs/PROTOCOL.md 3.6, 3.7, 3.9) and their put/get helpers are
shared/frame.py's; the tests check every body against frame.check_body and frame_host.parse_body.
"""
from array import array

from shared import specdec
from shared.compat import MASK30, const
from shared.frame import (
    BODY_OK,
    DR_GREEDY,
    DR_TOKENS,
    MAX_K,
    MAX_TOPK,
    PR_BASE,
    PR_FLAGS,
    PR_IDS,
    PR_N,
    PR_UNVERIFIED,
    PROMPT_MAX,
    VD_ACCEPTED,
    VD_BASE,
    VD_BLOCK,
    VD_CORRECTION,
    VD_FLAGS,
    VD_STALE,
    VD_TOKEN,
    VERDICT,
    check_body,
    draft_token_bytes,
    put_draft_head,
    put_draft_token,
    put_u16,
    put_u32,
    u16,
    u32s,
)
from shared.llama import Sampler, argmax

ID_SKIP = const(32)  # block ids after a rejected block b start at b + ID_SKIP (>= any max_pending)
MAX_PENDING = const(16)
_MASK16 = const(0xFFFF)


class DrafterError(ValueError):
    """Bad arguments, a malformed or inconsistent verdict, a prompt while blocks are pending."""


def _ints(n):
    return array("i", bytearray(4 * n))


class IdRing:
    """The token ids of a RingKV in its logical order: the first `sink` ids ever pushed are kept, then
    the last `window`. push and fill allocate nothing."""

    def __init__(self, sink, window):
        if type(sink) is not int or type(window) is not int or sink < 0 or window < 1:
            raise DrafterError("IdRing needs sink >= 0 and window >= 1, got %r, %r" % (sink, window))
        self.sink = sink
        self.window = window
        self.capacity = sink + window
        self.ids = _ints(self.capacity)
        self.live = 0
        self.head = 0

    def reset(self):
        self.live = 0
        self.head = 0

    def push(self, t):
        live = self.live
        if live < self.capacity:
            self.ids[live] = t
            self.live = live + 1
        else:
            h = self.head
            self.ids[self.sink + h] = t
            h += 1
            if h == self.window:
                h = 0
            self.head = h

    def get(self, i):
        """The i-th live id in logical order (sinks first, then the window oldest to newest)."""
        if i < 0 or i >= self.live:
            raise DrafterError("IdRing index %d out of range 0..%d" % (i, self.live - 1))
        if i < self.sink:
            return self.ids[i]
        j = self.head + i - self.sink
        if j >= self.window:
            j -= self.window
        return self.ids[self.sink + j]

    def fill(self, out):
        """Copy the live ids, in logical order, into out[0:live]; return live."""
        n = self.live
        if len(out) < n:
            raise DrafterError("IdRing.fill needs room for %d ids, got %d" % (n, len(out)))
        for i in range(n):
            out[i] = self.get(i)
        return n

    def tolist(self):
        """Host convenience (allocates)."""
        return [self.get(i) for i in range(self.live)]


class Drafter:
    """Drafts deferred blocks for one token stream; see the module docstring.

    model: shared.llama.Model (or anything with step(token), prefill(ids, n), logits, n_out,
    token_of(i), row_of(token) and a RingKV-like kv). k: tokens per block (1..32). temperature: 0 for
    greedy, else > 0 (float, or Q16 int) with top_k in 1..16 (the DRAFT record's limit). max_pending:
    blocks in flight (the RingKV needs k * max_pending staging slots). stop_ids: token ids that end an
    episode; max_len: most annotation tokens per episode. out_cap: ids kept for take()."""

    def __init__(self, model, k, temperature=0, top_k=4, seed=1, max_pending=2, stop_ids=(), max_len=64,
                 out_cap=64):
        kv = model.kv
        if type(k) is not int or k < 1 or k > MAX_K:
            raise DrafterError("k must be an int in 1..%d, got %r" % (MAX_K, k))
        if type(max_pending) is not int or max_pending < 1 or max_pending > MAX_PENDING:
            raise DrafterError("max_pending must be an int in 1..%d, got %r" % (MAX_PENDING, max_pending))
        if kv.staged < k * max_pending:
            raise DrafterError("the KV cache has %d staging slots; k=%d x max_pending=%d need %d"
                               % (kv.staged, k, max_pending, k * max_pending))
        if type(max_len) is not int or max_len < 1:
            raise DrafterError("max_len must be an int >= 1, got %r" % (max_len,))
        if type(out_cap) is not int or out_cap < 1:
            raise DrafterError("out_cap must be an int >= 1, got %r" % (out_cap,))
        self.greedy = temperature == 0
        if not self.greedy:
            if type(top_k) is not int or top_k < 1 or top_k > MAX_TOPK:
                raise DrafterError("sampling needs top_k in 1..%d (the DRAFT record's limit), got %r"
                                   % (MAX_TOPK, top_k))
        else:
            top_k = 1
        # every attribute before the buffers: the instance's attribute table moves to a bigger block as names
        # are added, and moved between the buffers it leaves holes that a nearly full heap cannot reuse
        self.sampler = self.q = self.rng = self._tid = self._one = self.stop = None
        self.b_id = self.b_base = self.b_k = self.staged_ids = self.hist = self.out = self.unsent_ids = None
        self.flags = self.body_max = 0
        self.next_id = 0  # block ids run on across reset(): a gateway never sees an old id again soon
        self.reset_stats()
        self._clear()  # the counters; the id ring below starts empty
        self.model = model
        self.kv = kv
        self.k = k
        self.top_k = top_k
        self.max_pending = max_pending
        self.max_len = max_len
        self.sampler = None if self.greedy else Sampler(model.n_out, top_k, temperature)
        self.q = specdec.Dist(top_k, specdec.Q_TOTAL)
        self.rng = specdec.Rng(seed)
        self._tid = _ints(top_k)  # token ids of the sampler's entries (logits index -> token id)
        self._one = _ints(1)  # prompt(poll=...): one id at a time; the greedy record's single candidate
        self.stop = array("i", stop_ids)
        for t in self.stop:
            model.row_of(t)  # ModelError for an id the model does not have
        # pending blocks, oldest first
        self.b_id = _ints(max_pending)
        self.b_base = _ints(max_pending)
        self.b_k = _ints(max_pending)
        self.staged_ids = _ints(k * max_pending)
        self.hist = IdRing(kv.sink, kv.window)
        self.out = _ints(out_cap)
        self.unsent_ids = _ints(kv.sink + kv.window)
        self.flags = DR_GREEDY if self.greedy else 0
        self.body_max = DR_TOKENS + k * draft_token_bytes(top_k)

    def reset_stats(self):
        self.drafted = 0  # draft tokens sent
        self.accepted = 0  # of them accepted
        self.corrections = 0
        self.verdicts = 0
        self.ignored = 0  # duplicate, unknown or stale verdicts
        self.desync = 0  # STALE verdicts for a pending block
        self.offline = 0  # tokens committed unverified
        self.out_lost = 0  # committed ids dropped from the take() buffer before being taken

    def _clear(self):
        self.committed = 0  # tokens committed, mod 2**30 (the next token's position)
        self.pending = 0  # blocks pending
        self.nstaged = 0  # draft tokens staged (all pending blocks)
        self.started = False  # a prompt was committed
        self.stopped = True  # the episode is over (no pending block); prompt() starts the next
        self.halt = False  # a stop id was drafted: no more drafting until its verdict
        self.episode = 0  # annotation tokens committed in this episode
        self.capped = False  # the episode ended at max_len, its last token not a stop id
        if self.hist is not None:  # None while __init__ sets the attributes up
            self.hist.reset()
        self.out_w = 0
        self.out_r = 0
        self.unsent = 0
        self.unsent_r = 0
        self.unsent_base = 0
        self.unsent_lost = 0

    def reset(self):
        """Forget every token (the cache too); then prompt() again."""
        if self.pending:
            self.next_id = (self.b_id[0] + ID_SKIP) & _MASK16
        self.kv.reset()
        self._clear()

    # ---- committing ----

    def _record(self, t, annotation):
        self.hist.push(t)
        self.committed = (self.committed + 1) & MASK30
        if annotation:
            self.episode += 1
            cap = len(self.out)
            if self.out_w - self.out_r >= cap:
                self.out_r += 1
                self.out_lost += 1
            self.out[self.out_w % cap] = t
            self.out_w += 1
            if self.out_w >= 0x20000000:  # keep both counters small ints on 31-bit ports
                self.out_w -= 0x10000000
                self.out_r -= 0x10000000

    def _is_stop(self, t):
        s = self.stop
        for i in range(len(s)):
            if s[i] == t:
                return True
        return False

    def _end_check(self, t):
        stop = self._is_stop(t)
        if stop or self.episode >= self.max_len:
            self.stopped = True
            self.halt = False
            self.capped = not stop

    def prompt(self, ids, n=-1, offline=False, poll=None):
        """Commit ids[0:n] (all by default) as PROMPT tokens and start an episode; returns the position
        of the first one (send them as PROMPT frames from that base). Only when no block is pending.
        offline=True (no gateway): the ids are also queued for unsent_prompt(), after the offline
        tokens before them, so the gateway gets every token in order when the link is back.
        poll: called after each token's step (the ids are then prefilled one at a time): on a board a
        48-token prompt takes seconds, and the link must keep answering (acks, heartbeats) meanwhile."""
        if n < 0:
            n = len(ids)
        if self.pending or self.nstaged:
            raise DrafterError("prompt() with %d blocks pending: wait for their verdicts" % self.pending)
        if n < 1 or n > len(ids):
            raise DrafterError("prompt() needs 1..%d ids, got n=%d" % (len(ids), n))
        if self.unsent and not offline:
            raise DrafterError("prompt() with %d unsent ids: send them (unsent_prompt) first" % self.unsent)
        base = self.committed
        if poll is None:
            self.model.prefill(ids, n)
        else:
            one = self._one
            for i in range(n):
                one[0] = ids[i]
                self.model.prefill(one, 1)
                poll()
        for i in range(n):
            if offline:
                if not self.unsent:
                    self.unsent_base = self.committed
                self._unsent_push(ids[i])
            self._record(ids[i], False)
        self.started = True
        self.stopped = False
        self.halt = False
        self.episode = 0
        self.capped = False
        return base

    # ---- drafting ----

    def _pick(self):
        """Sample the next token from the model's logits; for sampling, self.q holds what is sent."""
        m = self.model
        if self.greedy:
            return m.token_of(argmax(m.logits, m.n_out))
        s = self.sampler
        kk = s.distribution(m.logits)
        tid = self._tid
        idx = s.idx
        for j in range(kk):
            tid[j] = m.token_of(idx[j])
        q = self.q
        q.set_weights(tid, s.count, kk)  # counts already sum to 2**16: the same counts, sorted by id
        return q.sample(self.rng)

    def can_draft(self):
        return (self.started and not self.stopped and not self.halt and self.pending < self.max_pending
                and self.episode + self.nstaged < self.max_len and not self.unsent)

    def draft(self, buf):
        """Draft the next block into buf (a DRAFT body, at least body_max bytes); return its length, or
        0 when no block can be drafted now (max_pending reached, episode stopped, no prompt yet, offline
        ids not yet sent)."""
        if not self.can_draft():
            return 0
        kk = self.max_len - self.episode - self.nstaged
        if kk > self.k:
            kk = self.k
        base = (self.committed + self.nstaged) & MASK30
        bid = self.next_id
        m = self.model
        p = DR_TOKENS
        n = 0
        while n < kk:
            t = self._pick()
            if self.greedy:  # one candidate: count, pick 0, the id (frame.put_draft_token's m == 1 record)
                buf[p] = 1
                buf[p + 1] = 0
                put_u16(buf, p + 2, t)
                p += 4
            else:  # m candidates (ascending ids), the pick, then the counts - 1
                q = self.q
                ids = q.ids
                pick = 0
                while ids[pick] != t:
                    pick += 1
                p = put_draft_token(buf, p, ids, q.counts, q.n, pick)
            m.step(t)
            self.staged_ids[self.nstaged] = t
            self.nstaged += 1
            n += 1
            if self._is_stop(t):
                self.halt = True
                break
        put_draft_head(buf, bid, base, n, self.flags)
        j = self.pending
        self.b_id[j] = bid
        self.b_base[j] = base
        self.b_k[j] = n
        self.pending = j + 1
        self.next_id = (bid + 1) & _MASK16
        self.drafted += n
        return p

    # ---- verdicts ----

    def on_verdict(self, body, n):
        """Apply a VERDICT body (body[0:n]); return the tokens it committed (accepted + correction), 0 for
        a verdict that matches no pending block (duplicate, old, unknown) or a STALE one."""
        if check_body(VERDICT, body, 0, n) != BODY_OK:
            raise DrafterError("malformed VERDICT body")
        bid = u16(body, VD_BLOCK)
        base = u32s(body, VD_BASE)
        if not self.pending or self.b_id[0] != bid or self.b_base[0] != base:
            for j in range(1, self.pending):
                if self.b_id[j] == bid and self.b_base[j] == base:
                    raise DrafterError("VERDICT for block %d before the verdict of block %d" % (bid, self.b_id[0]))
            self.ignored += 1
            return 0
        flags = body[VD_FLAGS]
        if flags & VD_STALE:
            self.drop_pending()
            self.desync += 1
            self.ignored += 1
            return 0
        acc = body[VD_ACCEPTED]
        kb = self.b_k[0]
        corr = flags & VD_CORRECTION
        if acc > kb or (acc == kb) == bool(corr):
            raise DrafterError("VERDICT of block %d: %d accepted of %d with%s correction" % (
                bid, acc, kb, "" if corr else "out"))
        tok = u16(body, VD_TOKEN)
        if corr:
            self.model.row_of(tok)  # ModelError (a ValueError) for an id outside the model
        self.verdicts += 1
        self.accepted += acc
        st = self.staged_ids
        kv = self.kv
        if not corr:  # fully accepted: the blocks on top stay staged
            kv.commit(kb, True)
            last = 0
            for i in range(kb):
                last = st[i]
                self._record(last, True)
            rest = self.nstaged - kb
            for i in range(rest):
                st[i] = st[kb + i]
            self.nstaged = rest
            for j in range(1, self.pending):
                self.b_id[j - 1] = self.b_id[j]
                self.b_base[j - 1] = self.b_base[j]
                self.b_k[j - 1] = self.b_k[j]
            self.pending -= 1
            self._end_check(last)
            return kb
        kv.commit(acc)  # the rest of this block and every block on top of it are discarded
        for i in range(acc):
            self._record(st[i], True)
        self.nstaged = 0
        self.pending = 0
        self.halt = False
        self.next_id = (bid + ID_SKIP) & _MASK16
        self.model.step(tok)
        kv.commit(1)
        self._record(tok, True)
        self.corrections += 1
        self._end_check(tok)
        return acc + 1

    def drop_pending(self):
        """Discard every pending block (link lost, gateway restarted). Their verdicts, if any arrive,
        are ignored; a gateway that verified them is out of step (it answers the next block with STALE)."""
        if self.pending:
            self.next_id = (self.b_id[0] + ID_SKIP) & _MASK16
        self.kv.discard()
        self.nstaged = 0
        self.pending = 0
        self.halt = False

    # ---- offline ----

    def _unsent_push(self, t):
        cap = len(self.unsent_ids)
        if self.unsent == cap:
            self.unsent_r += 1
            if self.unsent_r == cap:
                self.unsent_r = 0
            self.unsent -= 1
            self.unsent_base = (self.unsent_base + 1) & MASK30
            self.unsent_lost += 1
        i = self.unsent_r + self.unsent
        if i >= cap:
            i -= cap
        self.unsent_ids[i] = t
        self.unsent += 1

    def commit_offline(self, max_tokens):
        """Draft and commit up to max_tokens tokens without verification (no gateway); stops at the end of
        the episode. Pending blocks are dropped first. Returns the tokens committed."""
        if self.pending:
            self.drop_pending()
        n = 0
        m = self.model
        kv = self.kv
        while n < max_tokens and self.started and not self.stopped:
            t = self._pick()
            m.step(t)
            kv.commit(1)
            if not self.unsent:
                self.unsent_base = self.committed
            self._unsent_push(t)
            self._record(t, True)
            self.offline += 1
            n += 1
            self._end_check(t)
        return n

    def resend_history(self):
        """Queue the live token ids (what the cache holds, sinks first) for unsent_prompt(): a gateway
        that lost its cache rebuilds from them (its stream adopts the first PROMPT's base)."""
        if self.pending:
            self.drop_pending()
        h = self.hist
        self.unsent = 0
        self.unsent_r = 0
        self.unsent_lost = 0
        self.unsent_base = (self.committed - h.live) & MASK30
        for i in range(h.live):
            self._unsent_push(h.get(i))

    def unsent_prompt(self, buf):
        """The next PROMPT body (UNVERIFIED) of queued offline / history ids into buf (6 + 2 * 255 bytes
        at most); its length, or 0 when the queue is empty."""
        m = self.unsent
        if m == 0:
            return 0
        if m > PROMPT_MAX:
            m = PROMPT_MAX
        put_u32(buf, PR_BASE, self.unsent_base)  # frame.put_prompt's layout, from a ring of ids
        buf[PR_N] = m
        buf[PR_FLAGS] = PR_UNVERIFIED
        cap = len(self.unsent_ids)
        r = self.unsent_r
        p = PR_IDS
        for _ in range(m):
            put_u16(buf, p, self.unsent_ids[r])
            p += 2
            r += 1
            if r == cap:
                r = 0
        self.unsent_r = r
        self.unsent -= m
        self.unsent_base = (self.unsent_base + m) & MASK30
        return p

    # ---- reading ----

    def take(self, out):
        """Copy the annotation ids committed since the last take (verified, corrections and offline ones)
        into out[0:n], oldest first; return n (at most len(out))."""
        n = self.out_w - self.out_r
        if n > len(out):
            n = len(out)
        cap = len(self.out)
        r = self.out_r
        for i in range(n):
            out[i] = self.out[(r + i) % cap]
        self.out_r = r + n
        return n

    def history(self, out):
        """The live token ids (the cache's logical order: sinks, then the window) into out; return n."""
        return self.hist.fill(out)
