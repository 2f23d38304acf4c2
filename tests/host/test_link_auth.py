"""The authenticated link on virtual boards: keys provisioned as `edgetwin deploy --node` does, a gateway that
refuses an unkeyed node in one line, node reboots and a gateway kill -9 that no replay check trips over, a key
rotation that loses no line; the keys file and the node's counter reservation on their own."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gwkit  # noqa: E402

from firmware import bootonce  # noqa: E402
from host import linkkeys  # noqa: E402
from host.store import LogStore  # noqa: E402

pytestmark = pytest.mark.slow
NODE_CFG = {"tick_ms": 100, "sample_every": 2, "report_ms": 500}
HEAP = 2 * 196608


def _session(st: dict, name: str) -> dict:
    return next(s for s in st["sessions"] if s["name"] == name)


def _lines(db: Path, name: str) -> int:
    s = LogStore(db, readonly=True)
    try:
        return len(s.logs(name))
    finally:
        s.close()


def test_keyed_node_gets_in_unkeyed_is_refused_and_reboots_restarts_rotation_lose_nothing(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    db = tmp_path / "g.db"
    a = b = c = gw = None
    try:
        a = gwkit.VNode("rp2040_pico", tmp_path / "fsA", tmp_path / "a", NODE_CFG, heap=HEAP, keys=keys)
        b = gwkit.VNode("rp2040_pico", tmp_path / "fsB", tmp_path / "b", NODE_CFG, heap=HEAP)  # never provisioned
        # provisioned for another gateway's keys file: signed, with a key this gateway does not hold
        c = gwkit.VNode("rp2040_pico", tmp_path / "fsC", tmp_path / "c", NODE_CFG, heap=HEAP, keys=tmp_path / "other.json")
        assert oct(keys.stat().st_mode & 0o777) == "0o600"
        gw = gwkit.GatewayProc(["keyed=%s" % (tmp_path / "a"), "bare=%s" % (tmp_path / "b"),
                                "stranger=%s" % (tmp_path / "c")], db, tmp_path / "st.json", keys=keys)
        st = gw.wait_status(lambda st: _session(st, "keyed")["logs"] >= 20 and _session(st, "bare")["auth_unsigned"] > 3
                            and _session(st, "stranger")["auth_bad_key"] > 3,
                            timeout=60, what="the keyed node's lines, the bare node and the stranger refused")
        bare, stranger = _session(st, "bare"), _session(st, "stranger")
        assert not st["insecure"] and bare["logs"] == stranger["logs"] == 0
        assert not bare["established"] and not stranger["established"]
        c_uid = c.uid
        # the node keeps its counter ahead across reboots: the gateway takes the next boot's frames
        a.reboot()
        st = gw.wait_status(lambda st: _session(st, "keyed")["reboots"] >= 1 and _session(st, "keyed")["established"],
                            timeout=60, what="the keyed node back after its reboot")
        # a gateway killed and started again signs above what the node has seen (counter reserved in the store)
        gw.kill9()
        n0 = _lines(db, "keyed")
        gw.start()
        gw.wait_status(lambda st: _session(st, "keyed")["logs"] >= 10, timeout=60, what="lines after the gateway restart")
        # rotation: a new key on the board and in the file (the old one kept), the node rebooted into it
        uid = a.uid
        kf = linkkeys.KeyFile(keys)
        old = kf.keys_for(uid)[0]
        os.chmod(tmp_path / "fsA" / "link.key", 0o600)
        (tmp_path / "fsA" / "link.key").write_bytes(kf.provision(uid, "keyed"))
        assert kf.keys_for(uid)[1] == old
        a.reboot()
        gw.wait_status(lambda st: _session(st, "keyed")["reboots"] >= 1 and _session(st, "keyed")["logs"] >= 10
                       and linkkeys.KeyFile(keys).keys_for(uid)[1:] == [], timeout=60, what="the node on its new key")
        time.sleep(1.5)  # a few more reports: what the node saw acknowledged after the rotation
        st = gw.status()
        keyed = _session(st, "keyed")
        # frames that crossed the rotation before the node's HELLO showed its new key are counted as bad tags (how
        # many depends on timing) but never said: the one "signed with a key" line below is the stranger's
        assert keyed["auth_replayed"] == keyed["auth_unsigned"] == 0, keyed
        assert gw.stop() == 0
        out = gw.proc.stdout.read().decode()
    finally:
        for x in (gw,):
            if x is not None:
                x.stop()
        for n in (a, b, c):
            if n is not None:
                n.close()
    # every line the node saw acknowledged is stored, none twice (the store is idempotent by node, boot, line)
    gwkit.check_logs_acked(db, "keyed")
    assert _lines(db, "keyed") > n0 > 0
    refused = [ln for ln in out.splitlines() if "its frames are not signed" in ln]
    assert len(refused) == 1 and "edgetwin deploy --node" in refused[0] and "--insecure" in refused[0], out
    assert "link keys %s (1 node(s)); unsigned nodes are refused" % keys in out
    assert "key rotation done" in out
    wrong = [ln for ln in out.splitlines() if "signed with a key" in ln]  # the stranger, said once
    assert len(wrong) == 1 and "uid %s" % c_uid in wrong[0] and "has no entry for" in wrong[0], out
    assert linkkeys.KeyFile(keys).keys_for(uid) != [old]
    s = LogStore(db, readonly=True)
    assert s.peer_counter("keyed") is not None and s.peer_counter("bare") is None
    s.close()


def test_the_node_reserves_its_counter_before_signing_and_survives_a_torn_record(tmp_path: Path) -> None:
    c = {"key_path": str(tmp_path / "link.key"), "counter_path": str(tmp_path / "link.ctr")}
    assert bootonce.link_key(c) is None  # no key: unsigned, nothing written
    assert not (tmp_path / "link.ctr").exists()
    (tmp_path / "link.key").write_bytes(b"k" * 32)
    starts = []
    for boot in range(4):
        key, first, peer, end = bootonce.link_key(c)
        assert key == b"k" * 32 and end == (first >> 16) + bootonce.CTR_AHEAD
        starts.append(first)
    assert starts == sorted(set(starts)) and starts[0] == 0
    bootonce.write_counter(c["counter_path"], 40, b"\x01\x02\x03\x04\x05\x06")
    # a power cut in the middle of the second copy's write: the first copy (written before it) still holds
    (tmp_path / "link.ctr").write_bytes(b"EK\x00")
    key, first, peer, end = bootonce.link_key(c)
    assert first == 40 << 16 and peer == b"\x01\x02\x03\x04\x05\x06"
    (tmp_path / "link.key").write_bytes(b"short")
    with pytest.raises(ValueError, match="16..64"):
        bootonce.link_key(c)


def test_keys_file_mistakes_are_one_line(tmp_path: Path) -> None:
    f = tmp_path / "keys.json"
    f.write_text("{}")
    os.chmod(f, 0o644)
    with pytest.raises(linkkeys.KeyFileError, match="chmod 600"):
        linkkeys.KeyFile(f)
    os.chmod(f, 0o600)
    for text, want in (("{", "not JSON"), ("{}", "not an edgetwin keys file"),
                       (json.dumps({"version": 1, "nodes": {"xyz": {"key": "00" * 32}}}), "16 lower-case hex"),
                       (json.dumps({"version": 1, "nodes": {"0011223344556677": {"key": "zz"}}}), "'key'")):
        f.write_text(text)
        with pytest.raises(linkkeys.KeyFileError, match=want):
            linkkeys.KeyFile(f)
    # the gateway command: one line, exit 2, nothing created
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(gwkit.ROOT))
    r = subprocess.run([sys.executable, "-m", "host.cli", "gateway", "--port", "/dev/null", "--db", str(tmp_path / "g.db"),
                        "--keys", str(f)], cwd=str(gwkit.ROOT), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "'key'" in r.stderr, r.stderr
    assert not (tmp_path / "g.db").exists()
    # provisioning twice keeps the old key until the node shows the new one, never more than 4 back
    g = linkkeys.KeyFile(tmp_path / "new" / "keys.json")
    ks = [g.provision("0011223344556677", "n") for _ in range(6)]
    assert g.keys_for("0011223344556677") == [ks[5], ks[4], ks[3], ks[2], ks[1]]
    g.settle("0011223344556677")
    assert linkkeys.KeyFile(tmp_path / "new" / "keys.json").keys_for("0011223344556677") == [ks[5]]
    assert oct((tmp_path / "new" / "keys.json").stat().st_mode & 0o777) == "0o600"


def test_each_refusal_is_counted_and_said_once(tmp_path: Path) -> None:
    from host.session import Session
    from shared import link

    store = LogStore(tmp_path / "g.db")
    s = Session("/dev/null", store, name="n1", keys=linkkeys.KeyFile(tmp_path / "keys.json"), insecure=False)
    for _ in range(3):
        for why in (link.AUTH_REPLAY, link.AUTH_UNSIGNED, link.AUTH_BAD_TAG):
            s.on_event(link.EV_AUTH, why)
    assert (s.counts["auth_replayed"], s.counts["auth_unsigned"], s.counts["auth_bad_key"]) == (3, 3, 3)
    # a bad tag on a frame other than a HELLO is counted only (it happens around every reboot into a new key)
    assert len(s.notices) == 2, s.notices
    replay = [n for n in s.notices if "as replays" in n]
    assert len(replay) == 1 and "edgetwin deploy --node" in replay[0] and "n1" in replay[0], s.notices
    store.close()
