# test_drafter.py: the node's drafter on the tiny fixture: greedy drafting against a scripted gateway
# (corrections, blocks drafted on top of rejected ones, ring wraps) gives target-only greedy token for
# token; verdict bookkeeping (duplicates, stale, malformed); offline commits and their PROMPT resend;
# draft / on_verdict / prompt allocate nothing (MicroPython, heap locked); sampled records are exactly
# the counts sampled from.
import gc
from array import array

import testkit
from shared import mbf, ringkv  # noqa: I001
from shared import llama, drafter  # noqa: E402

from shared import frame  # the body layouts and put/get helpers (the drafter's own)

# shared/frame_host.py (bodies as dicts) would take MicroPython test heap the model needs: the
# MicroPython runs use the local body readers below; on CPython every body is also checked with it.
frame_host = None
if not testkit.IS_MP:
    from shared import frame_host

TINY = "tests/shared/data/tiny_llama.mbf"
VOCAB = 96
SINK, WINDOW, STAGED = 2, 5, 8
PROMPT = array("i", [3, 14, 15, 92, 65])
N = 26  # annotation tokens per run: 5 + 26 tokens through a 7-token cache wrap the window 4+ times
FORCE = 4  # the scripted gateway replaces the greedy token at every position p with p % FORCE == 2

_M = []


def _model():
    if not _M:
        kv = ringkv.RingKV(2, 16, SINK, WINDOW, STAGED, "b", 2)
        _M.append(llama.Model(mbf.open(TINY), kv, stream=testkit.IS_MP, out_rows=7))
    m = _M[0]
    m.kv.reset()
    return m


def _reference(m, n):
    """Target-only greedy continuation of PROMPT, with the forced tokens the scripted gateway wants."""
    m.kv.reset()
    m.prefill(PROMPT)
    ref = array("i", bytearray(4 * n))
    for p in range(n):
        t = llama.argmax(m.logits, m.n_out)
        if p % FORCE == 2:
            t = (t + 1) % VOCAB
        ref[p] = t
        m.step(t)
        m.kv.commit(1)
    m.kv.reset()
    return ref


class Gate:
    """A scripted gateway: judges DRAFT blocks against a reference stream (allocation-free). Keeps
    (like host/verifier.py) a committed count and drops blocks drafted on top of a rejected block."""

    def __init__(self, ref, plen, accept_all=False):
        self.ref = ref
        self.plen = plen
        self.committed = plen
        self.min_id = -1
        self.accept_all = accept_all
        self.dropped = 0

    def verdict(self, d, dn, v):
        """DRAFT body d[0:dn] -> VERDICT body in v; its length, 0 when the block is dropped."""
        bid = frame.u16(d, 0)
        base = frame.u32s(d, 2)
        k = d[6]
        if self.min_id >= 0 and ((bid - self.min_id) & 0xFFFF) >= 0x8000:
            self.dropped += 1
            return 0
        if base != self.committed:
            self.dropped += 1
            return 0
        p = frame.DR_TOKENS
        acc = k
        corr = -1
        for i in range(k):
            m = d[p]
            t = frame.u16(d, p + 2 + 2 * d[p + 1])
            want = self.ref[base - self.plen + i]
            if self.accept_all:
                want = t
            if t != want:
                acc = i
                corr = want
                break
            p += frame.draft_token_bytes(m)
        self.committed += acc + (1 if corr >= 0 else 0)
        put_verdict(v, bid, base, acc, corr, False, self.committed)
        if corr >= 0:
            self.min_id = (bid + drafter.ID_SKIP) & 0xFFFF
        return frame.VERDICT_SIZE


def put_verdict(v, bid, base, acc, corr, stale, committed):
    """A VERDICT body (docs/PROTOCOL.md 3.7) in v, allocation-free."""
    frame.put_u16(v, 0, bid)
    frame.put_u32(v, 2, base)
    v[6] = acc
    v[7] = (frame.VD_CORRECTION if corr >= 0 else 0) | (frame.VD_STALE if stale else 0)
    frame.put_u16(v, 8, corr if corr >= 0 else 0)
    frame.put_u32(v, 10, committed)


def verdict(bid, base, acc, corr=-1, stale=False, committed=-1):
    v = bytearray(frame.VERDICT_SIZE)
    if committed < 0:
        committed = base + acc + (1 if corr >= 0 else 0)
    put_verdict(v, bid, base, acc, corr, stale, committed)
    if frame_host is not None:
        assert frame.check_body(frame.VERDICT, v, 0, len(v)) == (frame.BODY_VERDICT if committed != base + acc + (
            1 if corr >= 0 else 0) and not stale else frame.BODY_OK)
    return v


def parse_draft(b, n):
    """DRAFT body -> dict like frame_host.parse_body's (checked against it on CPython)."""
    out = {"block": frame.u16(b, 0), "base": frame.u32s(b, 2), "k": b[6], "flags": b[7], "tokens": []}
    p = frame.DR_TOKENS
    for _ in range(b[6]):
        m = b[p]
        ids = [frame.u16(b, p + 2 + 2 * j) for j in range(m)]
        counts = [frame.u16(b, p + 2 + 2 * (m + j)) + 1 for j in range(m)] if m > 1 else [65536]
        out["tokens"].append({"ids": ids, "counts": counts, "pick": b[p + 1], "token": ids[b[p + 1]]})
        p += frame.draft_token_bytes(m)
    assert p == n
    if frame_host is not None:
        assert frame_host.parse_body(frame.DRAFT, bytes(b[:n])) == out
    return out


def parse_prompt(b, n):
    out = {"base": frame.u32s(b, 0), "n": b[4], "flags": b[5],
           "ids": [frame.u16(b, frame.PR_IDS + 2 * j) for j in range(b[4])]}
    assert n == frame.PR_IDS + 2 * b[4]
    if frame_host is not None:
        assert frame_host.parse_body(frame.PROMPT, bytes(b[:n])) == out
    return out


class Run:
    """Node + scripted gateway, one round = draft every block allowed, then judge and apply them."""

    def __init__(self, d, gate):
        self.d = d
        self.gate = gate
        self.bodies = [bytearray(d.body_max) for _ in range(d.max_pending)]
        self.lens = array("i", [0] * d.max_pending)
        self.v = bytearray(frame.VERDICT_SIZE)
        self.out = array("i", bytearray(4 * 16))
        self.got = array("i", bytearray(4 * 48))
        self.ngot = 0
        self.hist = array("i", bytearray(4 * (SINK + WINDOW)))
        self.rounds = 0

    def round(self, _=None):
        d = self.d
        nb = 0
        while nb < d.max_pending:
            n = d.draft(self.bodies[nb])
            if not n:
                break
            self.lens[nb] = n
            nb += 1
        for i in range(nb):
            vn = self.gate.verdict(self.bodies[i], self.lens[i], self.v)
            if vn:
                d.on_verdict(self.v, vn)
        n = d.take(self.out)
        for i in range(n):
            self.got[self.ngot] = self.out[i]
            self.ngot += 1
        self.rounds += 1
        return nb


def _run_rounds(r):
    for _ in range(4):
        r.round()
    return r.ngot


def _expected_history(ref, ncommit):
    full = list(PROMPT) + list(ref[:ncommit])
    if len(full) <= SINK + WINDOW:
        return full
    return full[:SINK] + full[len(full) - WINDOW:]


def test_greedy_drafting_reproduces_target_greedy_across_wraps_and_corrections():
    m = _model()
    ref = _reference(m, N)
    for k in (1, 2, 4):
        d = drafter.Drafter(m, k, temperature=0, max_pending=2, max_len=N)
        d.reset()
        d.prompt(PROMPT)
        gate = Gate(ref, len(PROMPT))
        r = Run(d, gate)
        while r.round():
            # lockstep: the node's ids are the reference stream's, in the cache's logical slots
            n = d.history(r.hist)
            assert list(r.hist[:n]) == _expected_history(ref, d.committed - len(PROMPT)), k
            assert d.kv.live == n and d.kv.pending == d.nstaged
            assert gate.committed == d.committed or d.pending
        assert d.stopped and not d.pending and d.episode == N
        assert list(r.got[:r.ngot]) == list(ref), (k, list(r.got[:r.ngot]), list(ref))
        forced = len([p for p in range(N) if p % FORCE == 2])
        assert d.corrections == forced, (k, d.corrections, forced)
        if k == 4:
            assert gate.dropped >= 1  # blocks drafted on top of a rejected one never reach a verdict
        assert d.draft(r.bodies[0]) == 0  # the episode is over
        d = r = gate = None  # free this drafter's buffers before the next one's, as a board would
        gc.collect()


def test_verdict_bookkeeping_duplicates_stale_and_malformed():
    m = _model()
    d = drafter.Drafter(m, 3, temperature=0, max_pending=2, max_len=50)
    d.reset()
    assert d.draft(bytearray(d.body_max)) == 0  # no prompt yet
    base = d.prompt(PROMPT)
    assert base == 0 and d.committed == len(PROMPT)
    b0 = bytearray(d.body_max)
    b1 = bytearray(d.body_max)
    n0 = d.draft(b0)
    n1 = d.draft(b1)
    assert n0 == n1 == frame.DR_TOKENS + 3 * 4 and d.pending == 2 and d.nstaged == 6
    assert d.draft(bytearray(d.body_max)) == 0  # max_pending
    f0 = parse_draft(b0, n0)
    f1 = parse_draft(b1, n1)
    assert f0["base"] == 5 and f1["base"] == 8 and f1["block"] == f0["block"] + 1 and f0["flags"] == frame.DR_GREEDY
    e = testkit.raises(drafter.DrafterError, d.prompt, PROMPT)
    assert "pending" in str(e)
    # a verdict for the second block before the first: refused
    testkit.raises(drafter.DrafterError, d.on_verdict, verdict(f1["block"], 8, 3), 14)
    # inconsistent: 2 of 3 accepted without a correction
    bad = verdict(f0["block"], 5, 2)
    testkit.raises(drafter.DrafterError, d.on_verdict, bad, len(bad))
    testkit.raises(drafter.DrafterError, d.on_verdict, bytearray(5), 5)  # malformed: short
    bad = verdict(f0["block"], 5, 3, committed=9)
    testkit.raises(drafter.DrafterError, d.on_verdict, bad, len(bad))  # malformed: committed != base + 3
    v = verdict(f0["block"], 5, 3)
    assert d.on_verdict(v, len(v)) == 3 and d.pending == 1 and d.committed == 8
    assert d.on_verdict(v, len(v)) == 0 and d.ignored == 1 and d.committed == 8  # duplicate
    old = verdict(f0["block"], 4, 3)
    assert d.on_verdict(old, len(old)) == 0  # unknown (block, base)
    # second block: 1 accepted + correction (token 7): staged tail discarded, correction stepped in
    v = verdict(f1["block"], 8, 1, 7)
    assert d.on_verdict(v, len(v)) == 2 and d.pending == 0 and d.committed == 10 and d.kv.pending == 0
    out = array("i", bytearray(4 * 16))
    n = d.take(out)
    assert list(out[:n]) == [t["token"] for t in f0["tokens"]] + [f1["tokens"][0]["token"], 7]
    assert d.take(out) == 0
    n2 = d.draft(b0)
    f2 = parse_draft(b0, n2)
    assert f2["block"] == f1["block"] + drafter.ID_SKIP and f2["base"] == 10
    stale = verdict(f2["block"], 10, 0, -1, True, 999)
    assert d.on_verdict(stale, len(stale)) == 0 and d.desync == 1 and d.pending == 0 and d.kv.pending == 0
    assert d.committed == 10
    assert d.on_verdict(verdict(0, 0, 0, 0), 14) == 0  # no such block
    n3 = d.draft(b0)
    f3 = parse_draft(b0, n3)
    v = verdict(f3["block"], f3["base"], 0, VOCAB + 5)
    testkit.raises(ValueError, d.on_verdict, v, len(v))  # correction outside the vocabulary
    assert d.pending == 1  # refused verdicts change nothing


def test_bad_arguments_raise():
    m = _model()
    testkit.raises(drafter.DrafterError, drafter.Drafter, m, 0)
    testkit.raises(drafter.DrafterError, drafter.Drafter, m, 33)
    testkit.raises(drafter.DrafterError, drafter.Drafter, m, 5, 0, 4, 1, 2)  # 10 staging slots > 8
    testkit.raises(drafter.DrafterError, drafter.Drafter, m, 2, 0.8, 17)  # top_k beyond the record
    testkit.raises(drafter.DrafterError, drafter.Drafter, m, 2, 0.8, 0)
    testkit.raises(ValueError, drafter.Drafter, m, 2, 0, 4, 1, 2, (VOCAB,))  # stop id outside the model
    d = drafter.Drafter(m, 2)
    d.reset()
    testkit.raises(drafter.DrafterError, d.prompt, PROMPT, 0)
    testkit.raises(drafter.DrafterError, drafter.IdRing, 0, 0)


def test_stop_ids_and_max_len_end_the_episode():
    m = _model()
    ref = _reference(m, N)
    stop = ref[5]  # a token the reference reaches: the episode ends there
    d = drafter.Drafter(m, 4, temperature=0, max_pending=2, stop_ids=(stop,), max_len=N)
    d.reset()
    d.prompt(PROMPT)
    r = Run(d, Gate(ref, len(PROMPT)))
    while r.round():
        pass
    first = [i for i in range(N) if ref[i] == stop][0]
    assert d.stopped and not d.capped and list(r.got[:r.ngot]) == list(ref[:first + 1])
    d = r = None  # one drafter at a time, as on a board: the next one reuses this one's heap
    gc.collect()
    # a stop id as the max_len-th token: the note ended by its stop, not capped (no newline put first)
    d1 = drafter.Drafter(m, 4, temperature=0, max_pending=2, stop_ids=(stop,), max_len=first + 1)
    d1.reset()
    d1.prompt(PROMPT)
    r = Run(d1, Gate(ref, len(PROMPT)))
    while r.round():
        pass
    assert d1.stopped and d1.episode == first + 1 and not d1.capped
    d1 = r = None
    gc.collect()
    d2 = drafter.Drafter(m, 4, temperature=0, max_pending=2, max_len=7)
    d2.reset()
    d2.prompt(PROMPT)
    r = Run(d2, Gate(ref, len(PROMPT)))
    while r.round():
        pass
    assert d2.stopped and d2.episode == 7 and d2.capped and list(r.got[:r.ngot]) == list(ref[:7])
    d2.prompt(PROMPT)
    assert not d2.capped  # a new episode


def test_offline_commits_resend_as_unverified_prompts():
    m = _model()
    d = drafter.Drafter(m, 2, temperature=0, max_pending=2, max_len=12)
    d.reset()
    d.prompt(PROMPT)
    b = bytearray(d.body_max)
    assert d.draft(b)
    n = d.commit_offline(20)  # drops the pending block, commits until max_len
    # 12 ids, 7 kept for the resend (sink + window): the 5 oldest are lost (a full resync is needed)
    assert n == 12 and d.stopped and d.pending == 0 and d.offline == 12 and d.unsent == 7 and d.unsent_lost == 5
    out = array("i", bytearray(4 * 32))
    got = list(out[:d.take(out)])
    pb = bytearray(frame.PR_IDS + 2 * frame.PROMPT_MAX)
    pn = d.unsent_prompt(pb)
    f = parse_prompt(pb, pn)
    assert f["base"] == len(PROMPT) + 5 and f["flags"] == frame.PR_UNVERIFIED and f["ids"] == got[5:]
    assert d.unsent_prompt(pb) == 0
    # offline prompt + offline tokens: queued in order behind each other
    d.prompt(PROMPT, 4, True)
    d.commit_offline(3)
    pn = d.unsent_prompt(pb)
    f = parse_prompt(pb, pn)
    assert f["base"] == len(PROMPT) + 12 and f["ids"][:4] == list(PROMPT[:4]) and len(f["ids"]) == 7
    # the whole history for a gateway that lost its cache
    d.resend_history()
    hist = array("i", bytearray(4 * 8))
    h = d.history(hist)
    pn = d.unsent_prompt(pb)
    f = parse_prompt(pb, pn)
    assert f["ids"] == list(hist[:h]) and f["base"] == d.committed - h
    # unsent ids block verified drafting and plain prompts until sent
    d.prompt(PROMPT, -1, True)
    assert d.draft(b) == 0
    testkit.raises(drafter.DrafterError, d.prompt, PROMPT)
    while d.unsent_prompt(pb):
        pass
    assert d.draft(b) > 0


def test_sampled_records_are_the_counts_sampled_from():
    m = _model()
    d = drafter.Drafter(m, 4, temperature=0.9, top_k=4, seed=5, max_pending=2, max_len=40)
    d.reset()
    d.prompt(PROMPT)
    b = bytearray(d.body_max)
    n = d.draft(b)
    f = parse_draft(b, n)
    assert f["flags"] == 0 and f["k"] == 4
    for t in f["tokens"]:
        assert sum(t["counts"]) == 65536 and 1 <= len(t["ids"]) <= 4 and t["ids"] == sorted(t["ids"])
    # replaying the drafter's rng over the recorded counts picks the same tokens
    from shared import specdec

    rng = specdec.Rng(5)
    q = specdec.Dist(4, specdec.Q_TOTAL)
    for t in f["tokens"]:
        q.set_counts(t["ids"], t["counts"], len(t["ids"]))
        assert q.sample(rng) == t["token"]


def test_hot_paths_allocate_nothing():
    m = _model()
    ref = _reference(m, 40)
    for temp in (0, 0.8):
        d = drafter.Drafter(m, 4, temperature=temp, top_k=4, seed=9, max_pending=2, max_len=40)
        d.reset()
        d.prompt(PROMPT)
        r = Run(d, Gate(ref, len(PROMPT), accept_all=temp != 0))
        r.round()  # warm-up: first calls may intern attributes
        before = testkit.heap_in_use()
        got = testkit.run_locked(_run_rounds, r)
        assert got > 4 and d.verdicts >= 4, (temp, got)
        after = testkit.heap_in_use()
        if before is not None:
            assert after <= before, (before, after)
        # the next drafter is built beside this one otherwise: two of them and their rounds'
        # buffers nearly fill the rp2040 test heap, and CI's run ran out of it here
        d = r = None
        gc.collect()
    # prompt() and the offline paths too
    d = drafter.Drafter(m, 2, temperature=0, max_pending=2, max_len=10)
    d.reset()
    d.prompt(PROMPT)
    pb = bytearray(frame.PR_IDS + 2 * frame.PROMPT_MAX)

    def offline(_):
        d.commit_offline(4)
        d.unsent_prompt(pb)
        d.prompt(PROMPT, 3, True)
        return d.unsent

    assert testkit.run_locked(offline, 0) == 3


def test_prompt_with_poll_prefills_one_token_at_a_time_to_the_same_state():
    # a board's prompt takes seconds: with poll, the drafter calls it after every token (the node polls
    # its link there) and ends in the state a single prefill gives: same history, same next-token logits
    m = _model()
    calls = [0]

    def poll():
        calls[0] += 1

    def digest(a, n):  # no list or slice per run: the test's heap is the board's, with little to spare
        h = 0
        for i in range(n):
            h = (h * 31 + a[i]) & 0x3FFFFFFF
        return h

    got = []
    # one drafter for both runs (reset between them): a second one built in the first one's freed
    # fragments sits on the edge of the test heap
    d = drafter.Drafter(m, 2, temperature=0, max_pending=2, max_len=8)
    hist = array("i", bytearray(4 * d.hist.capacity))
    for p in (None, poll):
        d.reset()
        base = d.prompt(PROMPT, -1, False, p)
        n = d.history(hist)
        got.append((base, n, digest(hist, n), digest(m.logits, m.n_out)))
        gc.collect()
    assert calls[0] == len(PROMPT)
    assert got[0] == got[1]
