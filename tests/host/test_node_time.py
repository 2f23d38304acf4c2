"""Time and identity (issue 13, point 3), on the lossless-logging rig (tests/host/test_lossless_log.py:
the real Node and Session over a simulated UART on a virtual clock): the gateway's wall time reaches the
node in its HELLO and then in TIME frames, stored lines carry the node's wall time, lines logged before
the first handshake are back-dated from the node's ticks and flagged, a reboot neither replays the
plant's times nor the wall times, and the node's unique id (kept on its filesystem) is stored."""

from __future__ import annotations

from pathlib import Path

from shared import frame
from test_lossless_log import Rig

BASE = 1_790_000_000_000  # the gateway's wall clock at virtual time 0 (Rig's Session)


def _check_times(rig: Rig, rows: list[dict], tick0: int) -> int:
    """Every row's wall time is the gateway's clock when the node logged it (within the HELLO's transit);
    returns how many were back-dated."""
    back = 0
    for r in rows:
        logged_at = tick0 + r["ticks"]  # the node's ticks started at tick0
        assert abs(r["wall_ms"] - (BASE + logged_at)) < 100, r
        if r["flags"] & frame.LG_BACKDATED:
            back += 1
    return back


def test_wall_time_backdating_reboot_and_identity(tmp_path: Path) -> None:
    rig = Rig(tmp_path, {"uid_path": str(tmp_path / "node.uid")})
    rig.sess.time_ms = 2000
    first_boot = rig.node.boot
    rig.run(8000, cut=lambda t: t < 1000)  # no link for the first second: those lines wait for the time
    nd = rig.node
    assert nd.w_ok and nd.syncs >= 4  # the HELLO, then a TIME frame every 2 s
    uid = nd.uid
    rows1 = [r for r in rig.store.logs("n") if r["boot"] == first_boot and r["lseq"]]
    assert len(rows1) > 300
    back1 = _check_times(rig, rows1, 0)
    assert 40 < back1 < len(rows1)  # lines of the first second, and only those, back-dated
    assert all(bool(r["flags"] & frame.LG_BACKDATED) == (r["ticks"] < nd.w_first) for r in rows1)

    rig.reboot()
    assert rig.node.boot == first_boot % 65535 + 1 and rig.node.uid == uid
    t_reboot = rig.now
    rig.run(6000, cut=lambda t: t < t_reboot + 500)
    rows = rig.store.logs("n")
    rows2 = [r for r in rows if r["boot"] == rig.node.boot and r["lseq"]]
    assert len(rows2) > 200 and _check_times(rig, rows2, t_reboot) > 10
    # the plant resumed after its last run: no plant timestamp of the new boot repeats an old one
    plant1 = [r["text"][:20] for r in rows1]
    plant2 = [r["text"][:20] for r in rows2]
    assert min(plant2) > max(plant1), (max(plant1), min(plant2))
    assert min(r["wall_ms"] for r in rows2) > max(r["wall_ms"] for r in rows1)
    # the same node under its unique id, whatever its port or boot
    nodes = rig.store.nodes()
    assert len(nodes) == 1 and nodes[0]["uid"] == uid.hex() and len(uid) == 8
    assert rig.sess.counts["reboots"] == 1
    rig.store.close()


def test_without_a_gateway_clock_lines_keep_arrival_times(tmp_path: Path) -> None:
    # a node that never got a wall time (a 1.1 gateway always sends one: simulate its absence) sends day
    # WALL_NONE; the store then keeps the gateway's arrival time, and nothing is flagged back-dated
    rig = Rig(tmp_path, {"spill_bytes": 0})
    rig.sess.time_ms = 0
    rig.node._sync = lambda day, ms, tick: None  # type: ignore[method-assign]
    rig.run(3000)
    rows = [r for r in rig.store.logs("n") if r["lseq"]]
    assert len(rows) > 100 and not any(r["flags"] & frame.LG_BACKDATED for r in rows)
    assert all(BASE + r["ticks"] <= r["wall_ms"] < BASE + 3000 for r in rows)
    rig.store.close()
