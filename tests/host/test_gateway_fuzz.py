"""Structure-aware fuzzing of the two application frame handlers: the gateway session's and the node's.

tests/host/test_frame_fuzz.py fuzzes the decoder and the link; here the fuzzed frames carry valid CRCs,
the right epochs and the next sequence number, so the link delivers them and the handlers behind it
get them: host/session.Session.on_frame (LOG into SQLite, PROMPT/DRAFT into the verifier's stream,
verify passes in between) and firmware/node.Node.on_frame (VERDICTs into the drafter, with real
pending blocks so many verdicts match one). Bodies are mutations of valid ones: fields at their edges,
counts that still sum to 65536, ids outside the vocabulary, truncations, splices, retypes. 10**5
frames per handler; nothing may raise, counters must add up, the store must still open.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
from pathlib import Path

import pytest

from firmware import node as fnode
from host import gateway, verifier
from host.session import Session
from host.store import LogStore
from shared import frame, frame_codec, frame_host

N_EP = b"\x0a\x0a\x0a\x0a"  # the node's epoch
G_EP = b"\x0b\x0b\x0b\x0b"  # the gateway's
EDGE = (0, 1, 2, 3, 4, 0x7F, 0x80, 0xFE, 0xFF)
VOCAB = 64
N_FRAMES = int(__import__("os").environ.get("EDGETWIN_FUZZ_FRAMES", "100000"))


class Port:
    def __init__(self) -> None:
        self.rx = bytearray()

    def write(self, buf, n=None):
        return len(buf) if n is None else n

    def readinto(self, buf):
        n = min(len(buf), len(self.rx))
        buf[:n] = self.rx[:n]
        del self.rx[:n]
        return n


def _counts(rng: random.Random, m: int) -> list[int]:
    cuts = sorted(rng.sample(range(1, 65536), m - 1)) if m > 1 else []
    edges = [0] + cuts + [65536]
    return [edges[i + 1] - edges[i] for i in range(m)]


def draft_body(rng: random.Random, base: int, block: int) -> bytes:
    k = rng.choice((1, 2, 4, 4, 4, 8))
    greedy = rng.random() < 0.5
    toks = []
    for _ in range(k):
        m = 1 if greedy else rng.randint(1, 4)
        ids = sorted(rng.sample(range(VOCAB + (8 if rng.random() < 0.05 else 0)), m))
        toks.append((ids, _counts(rng, m) if m > 1 else [], rng.randrange(m)))
    return frame_host.pack_draft(block, base, toks, greedy=greedy)


def prompt_body(rng: random.Random, base: int) -> bytes:
    n = rng.randint(1, 40)
    ids = [b % VOCAB for b in rng.randbytes(n)]
    if rng.random() < 0.05:
        ids[rng.randrange(n)] = VOCAB + rng.randrange(4)  # outside the vocabulary
    return verifier.pack_prompt(base, ids, unverified=rng.random() < 0.2)


def mutate(rng: random.Random, body: bytes) -> bytes:
    b = bytearray(body)
    for _ in range(rng.choice((0, 1, 1, 2))):
        op = rng.randrange(5)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.choice(EDGE) if rng.random() < 0.5 else rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        elif op == 2:
            b += rng.randbytes(rng.randrange(1, 12))
        elif op == 3 and len(b) >= 6:
            struct.pack_into("<I", b, 2 if rng.random() < 0.5 else 0, rng.choice((0, 1, 5, 0x3FFFFFFF, 0x40000000)))
        elif op == 4 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def gateway_frames(rng: random.Random, spec: gateway.NodeStream | None):
    """(type, body) pairs: mostly near-valid for the stream's current state."""
    committed = spec.stream.committed if spec is not None else 0
    block = rng.randrange(0x10000)
    r = rng.random()
    if r < 0.3:
        text = rng.randbytes(rng.randrange(0, 120))
        if rng.random() < 0.3:
            text = b"NODE heap=1 committed=%d live=%d crc=%08x" % (rng.randrange(100), rng.randrange(40),
                                                                 rng.randrange(1 << 32))
        body = frame_host.pack_body(frame.LOG, ts=rng.randrange(1 << 30), level=rng.randrange(8), text=text)
        return frame.LOG, mutate(rng, body) if rng.random() < 0.2 else body
    if r < 0.55:
        base = rng.choice((committed, committed, 0, committed + 1, rng.randrange(1 << 30)))
        return frame.PROMPT, mutate(rng, prompt_body(rng, base))
    if r < 0.9:
        base = rng.choice((committed, committed, committed + 4, 0, rng.randrange(1 << 30)))
        return frame.DRAFT, mutate(rng, draft_body(rng, base, block))
    return rng.choice((frame.VERDICT, frame.KVSNAP, 0x15, 0x7F)), rng.randbytes(20)


@pytest.fixture(scope="module")
def spec_parts():
    pytest.importorskip("host.verifier")
    return gateway.make_spec("tiny:3")


def test_session_link_path_delivers_fuzzed_frames_in_order(tmp_path: Path, spec_parts) -> None:
    # the same bodies as whole frames through the gateway's link (valid CRC, epochs, next seq)
    factory, verify = spec_parts
    # the store on tmpfs when there is one: this test is about the handler, not about fsync (each
    # commit here fsyncs the WAL; the kill -9 tests in test_store.py are about that)
    shm = Path("/dev/shm")
    db = (Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path) / "l.db"
    store = LogStore(db)
    s = Session("fuzz", store, name="fuzz", spec_factory=factory, clock=lambda: 0)
    port = Port()
    s.transport = port  # type: ignore[assignment]
    s.link.t = s
    gw_ep = bytes(s.link._epoch)
    hello = frame_codec.pack_hello(role=0, draft_k=4, topk=4, kv_sink=4, kv_window=28, kv_staged=8, tx_base=0)
    port.rx += frame_host.wire_bytes(frame.HELLO, hello, epoch=N_EP, peer=gw_ep, ack=0xFFFF, limit=60000)
    s.poll()
    assert s.link.established and s.spec is not None
    rng = random.Random(9)
    seq = 0
    sent_ok = 0
    for i in range(N_FRAMES):
        t, body = gateway_frames(rng, s.spec)
        port.rx += frame_host.wire_bytes(t, body, seq=seq & 0xFFFF, ack=0xFFFF, epoch=N_EP, peer=gw_ep, txoff=0,
                                    limit=60000)
        seq += 1
        sent_ok += frame.check_body(t, body, 0, len(body)) == 0
        if i % 16 == 15:
            s.poll()
        if i % 64 == 63:
            verify([s])
    while port.rx:
        s.poll()
    s.poll()
    verify([s])
    st = s.status()
    ls = s.link.stats()
    assert ls["rx_delivered"] == sent_ok and ls["rx_delivered"] + ls["rx_bad_body"] == N_FRAMES, ls
    assert st["logs"] + st["log_dups"] + st["prompts"] + st["drafts"] + st["other"] == sent_ok
    assert 0 < st["bad_frames"] < st["prompts"] + st["drafts"]  # refused by the stream, counted, dropped
    assert sent_ok > 60_000 and st["logs"] > 10_000 and st["prompts"] + st["drafts"] > 25_000, st
    spec = st["spec"]
    assert spec["verdicts"] > 100 and spec["resets"] > 10, spec  # real work happened, not only rejections
    store.close()
    LogStore(db, readonly=True).close()  # the store is intact
    shutil.rmtree(db.parent, ignore_errors=True) if db.parent != tmp_path else None
    store.close()


class FakeModel:
    """The llama.Model interface the drafter drives, with pseudo-random logits and a real RingKV: the
    handler's robustness does not depend on the model, and this keeps 10**5 frames fast."""

    def __init__(self, sink: int, window: int, staged: int) -> None:
        from array import array

        from shared import ringkv

        self.kv = ringkv.RingKV(1, 2, sink, window, staged)
        self.n_out = VOCAB
        self.logits = array("i", bytes(4 * VOCAB))
        self._r = 12345

    def row_of(self, t: int) -> int:
        if not 0 <= t < VOCAB:
            raise ValueError("token id %r out of range" % t)
        return t

    def token_of(self, i: int) -> int:
        return i

    def _set(self, t: int) -> None:
        self._r = (self._r * 1103515245 + 12345 + t) & 0x7FFFFFFF
        for i in range(VOCAB):
            self.logits[i] = ((self._r >> (i % 16)) & 0xFFFF) * (1 + (i == self._r % VOCAB) * 8)

    def step(self, t: int) -> int:
        self.row_of(t)
        s = self.kv.stage()
        self._set(t)
        return s

    def prefill(self, ids, n: int = -1) -> None:
        n = len(ids) if n < 0 else n
        for i in range(n):
            self.row_of(ids[i])
            self.kv.stage()
            self.kv.commit(1)
        self._set(n)


def test_node_link_path_delivers_fuzzed_verdicts_in_order() -> None:
    # fuzzed VERDICT (and other) frames as whole frames through the node's own link: valid CRC, the
    # node's epoch as peer, the next sequence number; the link delivers them to Node.on_frame
    from shared import drafter

    prof = {"name": "fuzz", "kv": {"sink": 4, "window": 28, "staged": 8}, "uart": {"rxbuf": 1024}, "draft_k": 4}
    d = drafter.Drafter(FakeModel(4, 28, 8), 4, max_len=24)
    port = Port()
    nd = fnode.Node(port, prof, {"tick_ms": 1000}, d, VOCAB, 0)
    node_ep = bytes(nd.lk._epoch)
    hello = frame_codec.pack_hello(role=1, tx_base=0)
    port.rx += frame_host.wire_bytes(frame.HELLO, hello, epoch=G_EP, peer=node_ep, ack=0xFFFF, limit=60000)
    nd.lk.poll(0)
    assert nd.lk.established
    rng = random.Random(13)
    body = bytearray(d.body_max)
    d.prompt([1, 2, 3])
    ok = 0
    for i in range(N_FRAMES):
        if d.stopped and not d.pending:
            if rng.random() < 0.1:
                d.reset()
            d.prompt([rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 6))])
        while d.pending < 2 and d.draft(body):
            pass
        r = rng.random()
        if d.pending and r < 0.05:  # a verdict for the oldest pending block (maybe mutated below)
            k = d.b_k[0]
            acc = rng.randint(0, k)
            corr = rng.randrange(VOCAB + 2) if acc < k else None  # VOCAB, VOCAB+1: outside the model
            v = frame_host.pack_verdict(d.b_id[0], d.b_base[0], acc, correction=corr, stale=rng.random() < 0.02)
        elif d.pending and r < 0.5:  # near misses: the right block id with another base, or the next id
            v = frame_host.pack_verdict((d.b_id[0] + rng.choice((0, 1, 32))) & 0xFFFF, d.b_base[0] + rng.choice((0, 1, 4)),
                                   rng.randint(0, 3), correction=rng.choice((None, 7)))
        else:
            v = frame_host.pack_verdict(rng.randrange(0x10000), rng.randrange(1 << 30), rng.randint(0, 4),
                                   correction=rng.choice((None, 7)))
        v = mutate(rng, v) if rng.random() < 0.3 else v
        t = frame.VERDICT if rng.random() < 0.9 else rng.choice((frame.LOG, frame.PROMPT, 0x33))
        ok += frame.check_body(t, v, 0, len(v)) == 0
        port.rx += frame_host.wire_bytes(t, v, seq=i & 0xFFFF, ack=0xFFFF, epoch=G_EP, peer=node_ep, limit=60000)
        if i % 4 == 3:
            nd.lk.poll(i)
        assert 0 <= d.pending <= 2 and d.nstaged <= 8
    nd.lk.poll(N_FRAMES)
    ls = nd.lk.stats()
    assert ls["rx_delivered"] == ok and ls["rx_delivered"] + ls["rx_bad_body"] == N_FRAMES, ls
    assert d.verdicts > 2000 and d.corrections > 500 and d.ignored > 10_000, (d.verdicts, d.corrections, d.ignored)
