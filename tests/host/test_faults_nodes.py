"""Faults between virtual nodes and the gateway, one test each, with the invariants checked after each.

Two virtual boards for the whole module: a drafting node (rp2040_pico profile, the tiny INT4 draft) on the
profile's measured heap in this port's 8-byte words (gwkit.unix_heap: 483,328 B; the node's bytecode sits in
this heap here, in flash on a board built with `make firmware`) and a logs-only node on 393,216 B.
Each test starts a fresh `edgetwin gateway --model tiny:3` process on a fresh store (for the nodes, a
gateway restart), applies one fault on the UART path through the interposer (tests/host/gwkit.py) or to
a process, and then checks:

- the run goes on: the drafting stream commits more tokens after the fault;
- both KV caches are in lockstep: the node's reports (committed count, live ids CRC) match the
  gateway's record at the same count (no mismatch ever; several matches after the fault), so nothing
  committed is lost or duplicated on either side;
- no acknowledged log line is missing: for each node and boot epoch, the lines stored are at least the
  lines the node saw acknowledged (its logs_acked), and (node, epoch, seq) is unique in SQLite.

Faults: byte errors at 1e-4 and 1e-3 per byte both ways (bit flips, drops, inserts); 2 % of frames
dropped and 3 % duplicated both ways; the drafting node hard-reset mid-block (VirtualBoard.reboot);
the gateway killed with SIGKILL mid-session and restarted on the same store; the gateway's pty unplugged
for 7 s (the node goes offline and annotates alone) and plugged back under the same path.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

import gwkit

pytestmark = pytest.mark.slow

DRAFT_CFG = {"tick_ms": 200, "sample_every": 5, "report_ms": 700, "max_len": 48, "prompt_max": 12,
             "offline_ms": 1000, "summary_s": 1}  # summary_s 1: an episode at every sample tick, events or not
LOGS_CFG = {"tick_ms": 200, "sample_every": 3, "report_ms": 700}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("faults")
    out = []
    try:
        out.append(gwkit.VNode("rp2040_pico", tmp / "fsA", tmp / "nodeA", DRAFT_CFG, heap=gwkit.unix_heap("rp2040_pico"),
                               model=gwkit.tiny_mbf()))
        # 2 x 196608: the unix port's objects are twice a board's, and at 1x a logs-only node's boot sits on
        # the edge of heap fragmentation (issue 13 point 1 sizes the virtual board's heap)
        out.append(gwkit.VNode("rp2040_pico", tmp / "fsB", tmp / "nodeB", LOGS_CFG, heap=2 * 196608))
        yield out
    finally:
        for n in out:
            n.close()


def spec_of(st: dict) -> dict:
    return st["sessions"][0].get("spec") or {}


class Run:
    def __init__(self, nodes: list, tmp: Path) -> None:
        self.nodes = nodes
        self.db = tmp / "g.db"
        self.names = ["drafting", "logs-only"]  # named by the user, as the store and status know them
        self.gw = gwkit.GatewayProc(["%s=%s" % (name, n.ip.link_path) for name, n in zip(self.names, nodes)],
                                    self.db, tmp / "st.json",
                                    extra=["--model", "tiny:%d" % gwkit.TINY_SEED])

    def progress(self, tokens: int, checks: int, timeout: float = 60.0, what: str = "") -> dict:
        """Wait until the drafting stream has `tokens` more committed and `checks` more lockstep matches."""
        st = self.gw.wait_status(lambda s: "committed" in spec_of(s), timeout, "the drafting stream")
        c0 = spec_of(st)["committed"]
        k0 = spec_of(st)["lockstep_ok"]
        resets0 = spec_of(st)["resets"]

        def moved(s: dict) -> bool:
            sp = spec_of(s)
            # committed counts restart at 0 when the stream restarts: count from the restart then
            gained = sp["committed"] - (c0 if sp["resets"] == resets0 else 0)
            return gained >= tokens and sp["lockstep_ok"] - k0 >= checks

        try:
            return self.gw.wait_status(moved, timeout, what or "progress")
        except AssertionError as e:
            raise AssertionError("%s\nnode consoles: %r" % (e, [n.console() for n in self.nodes])) from None

    def check(self, st: dict) -> dict:
        sp = spec_of(st)
        if sp["lockstep_bad"]:
            print("LOCKSTEP %s" % json.dumps(sp))
        assert sp["lockstep_bad"] == 0, sp
        for name in self.names:
            gwkit.check_logs_acked(self.db, name)
        con = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True)
        dup = con.execute("SELECT count(*) FROM (SELECT node, epoch, seq FROM logs GROUP BY node, epoch, seq "
                          "HAVING count(*) > 1)").fetchone()[0]
        con.close()
        assert dup == 0
        return sp

    def close(self) -> None:
        self.gw.stop()


@pytest.fixture
def run(nodes, tmp_path: Path):
    for n in nodes:  # a clean line for each test
        n.ip.to_gw = gwkit.Faults()
        n.ip.to_node = gwkit.Faults()
    r = Run(nodes, tmp_path)
    yield r
    r.close()


@pytest.mark.parametrize("ppm", [100, 1000], ids=["1e-4", "1e-3"])
def test_byte_errors_on_the_uart(run: Run, nodes, ppm: int) -> None:
    run.progress(50, 1, what="start")
    for i, n in enumerate(nodes):
        n.ip.to_gw = gwkit.Faults(ppm=ppm, seed=10 + i)
        n.ip.to_node = gwkit.Faults(ppm=ppm, seed=20 + i)
    st = run.progress(1000, 4, what="tokens under byte errors")
    events = sum(n.ip.to_gw.events + n.ip.to_node.events for n in nodes)
    sp = run.check(st)
    assert events >= (1 if ppm == 100 else 20), events  # ~30 KB cross the line meanwhile
    errs = sum(s["link_err_crc"] + s["link_err_cobs"] for s in st["sessions"])
    if ppm == 1000:
        assert errs > 0, st  # the gateway really saw damaged frames, and dropped them
    print("FAULT bytes %d ppm: %d error events, %d frames rejected at the gateway, %s" % (ppm, events, errs, sp))


def test_dropped_and_duplicated_frames(run: Run, nodes) -> None:
    run.progress(50, 1, what="start")
    for i, n in enumerate(nodes):
        n.ip.to_gw = gwkit.Faults(drop_frames=0.02, dup_frames=0.03, seed=30 + i)
        n.ip.to_node = gwkit.Faults(drop_frames=0.02, dup_frames=0.03, seed=40 + i)
    st = run.progress(400, 3, what="tokens with frames dropped and duplicated")
    sp = run.check(st)
    dropped = sum(n.ip.to_gw.frames_dropped + n.ip.to_node.frames_dropped for n in nodes)
    duped = sum(n.ip.to_gw.frames_duped + n.ip.to_node.frames_duped for n in nodes)
    assert dropped > 3 and duped > 3, (dropped, duped)
    assert sum(s["link_rx_dup"] for s in st["sessions"]) > 0
    print("FAULT frames: %d dropped, %d duplicated, %s" % (dropped, duped, sp))


def test_node_rebooted_mid_block(run: Run, nodes) -> None:
    st = run.progress(200, 2, what="drafting before the reset")
    assert st["sessions"][0]["drafts"] > 0
    nodes[0].reboot()  # hard reset: the interpreter is killed wherever it was (blocks are always pending)
    st = run.gw.wait_status(lambda s: s["sessions"][0]["reboots"] >= 1, 30, "the gateway to see the reboot")
    st = run.progress(300, 3, what="the rebooted node's new stream")
    sp = run.check(st)
    epochs = {r["epoch"] for r in gwkit.node_reports(run.db, run.names[0])}
    assert len(epochs) >= 2, epochs  # lines from both boots are stored, each under its own epoch
    print("FAULT node reboot: %s" % sp)


def test_gateway_killed_and_restarted(run: Run, nodes) -> None:
    run.progress(200, 2, what="before the kill")
    before = gwkit.check_logs_acked(run.db, run.names[1])
    run.gw.kill9()
    time.sleep(1.0)  # the nodes keep sampling and drafting meanwhile
    run.gw.start()  # same store: the links resume from the persisted receive state
    st = run.progress(300, 3, timeout=90, what="after the restart")
    sp = run.check(st)
    after = gwkit.check_logs_acked(run.db, run.names[1])
    for ep, (stored, _) in before.items():
        assert after[ep][0] >= stored  # nothing stored before the kill went missing
    print("FAULT gateway kill -9: %s" % sp)


def test_pty_unplugged_and_plugged_back(run: Run, nodes) -> None:
    run.progress(200, 2, what="before the unplug")
    for n in nodes:
        n.ip.unplug()
    time.sleep(7.0)  # > dead_ms + offline_ms: the drafting node goes on alone (unverified tokens)
    for n in nodes:
        n.ip.replug()
    st = run.gw.wait_status(lambda s: all(x["established"] for x in s["sessions"]), 30, "reconnection")
    assert all(x["disconnects"] >= 1 and x["opens"] >= 2 for x in st["sessions"]), st
    st = run.progress(300, 3, what="after the replug")
    sp = run.check(st)
    assert sp["tokens_unverified"] > 0 or sp["resets"] > 1, sp  # offline tokens resent, or a clean restart
    print("FAULT pty unplug/replug: %s" % sp)
