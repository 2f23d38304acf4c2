"""A new draft model sent over the link (`edgetwin update`, docs/PROTOCOL.md 3.12) to a virtual board that keeps
logging: into its second slot, hash checked, switched to at the next boot; a transfer cut by a link cut and a
power cut goes on from what the node holds; a model that fails its trial boot is rolled back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gwkit  # noqa: E402

from host.store import LogStore  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = gwkit.ROOT
NODE_CFG = {"tick_ms": 100, "sample_every": 2, "report_ms": 500, "max_len": 8, "prompt_max": 12, "summary_s": 1}


def _job(db: Path) -> dict:
    s = LogStore(db, readonly=True)
    try:
        return s.update_job("a") or {}
    finally:
        s.close()


def _lines(db: Path, like: str = "") -> list[str]:
    s = LogStore(db, readonly=True)
    try:
        return [r["text"] for r in s.logs("a") if like in r["text"]]
    finally:
        s.close()


def _update(db: Path, model: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "host.cli", "update", "--node", "a", "--model", str(model), "--db",
                             str(db), "--timeout", "120", *extra], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait(pred, what: str, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def test_model_update_resumes_after_a_link_cut_and_a_power_cut_runs_and_rolls_back(tmp_path: Path) -> None:
    from host.gateway import TINY_SEQ_LEN
    from tools.demo import spec_models

    keys, db = tmp_path / "keys.json", tmp_path / "g.db"
    new = tmp_path / "new.mbf"
    new.write_bytes(spec_models.make_pair(4, seq_len=TINY_SEQ_LEN).mbf)
    big = ROOT / "models" / "draft" / "draft.mbf"  # 311,668 bytes: long enough to be cut twice
    nd = gw = None
    try:
        nd = gwkit.VNode("rp2040_pico", tmp_path / "fs", tmp_path / "a", NODE_CFG, heap=gwkit.unix_heap("rp2040_pico"),
                         model=gwkit.tiny_mbf(),
                         keys=keys)
        gw = gwkit.GatewayProc(["a=%s" % (tmp_path / "a")], db, tmp_path / "st.json", keys=keys)
        gw.wait_status(lambda st: st["sessions"][0]["logs"] > 5, timeout=60, what="the node's lines")
        # 1. a small model: sent, verified, switched to at the next boot, the node logging all along
        p = _update(db, new)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "has the new model, verified" in out and "queued" in err, (out, err)
        n0 = len(_lines(db))
        nd.reboot()
        _wait(lambda: _job(db).get("state") == "running", "the node to run the new model")
        assert (tmp_path / "fs" / "draft.mbf").read_bytes() == new.read_bytes()
        assert not (tmp_path / "fs" / "draft.mbf.new").exists() and not (tmp_path / "fs" / "update.json").exists()
        assert any(t.startswith("UPDATE model /draft.mbf running") for t in _lines(db, "UPDATE")), _lines(db, "UPDATE")
        assert len(_lines(db)) > n0
        # 2. a big one, its transfer cut twice: the link (unplugged 2 s), then the node's power
        p = _update(db, big, "--no-wait")
        assert p.wait(60) == 0
        _wait(lambda: _job(db).get("offset", 0) >= 16384, "the first 16 KB")
        nd.ip.unplug()
        time.sleep(2.0)
        nd.ip.replug()
        _wait(lambda: _job(db).get("offset", 0) >= 65536, "64 KB after the link cut")
        nd.reboot()  # a power cut in the middle of the model's write
        _wait(lambda: _job(db).get("state") == "verified", "the whole big model, verified", timeout=120)
        resumed = [t for t in _lines(db, "UPDATE resumed")]
        assert resumed and int(resumed[-1].split(" at ")[1].split()[0]) >= 16384, resumed  # not from 0
        nd.reboot()  # its trial boot
        final = _wait(lambda: _job(db).get("state") in ("running", "rolled_back") and _job(db), "the trial's outcome")
        # the shipped draft held resident (node.json stream false) does not fit this heap beside the node: its
        # trial fails to load, the previous model stays where it was, the new one is gone
        fs = tmp_path / "fs"
        assert final["state"] == "rolled_back", final
        assert (fs / "draft.mbf").read_bytes() == new.read_bytes() and not (fs / "draft.mbf.new").exists()
        back = [t for t in _lines(db, "UPDATE rolled back")]
        assert len(back) == 1 and "failed to load" in back[0], _lines(db, "UPDATE")
        st = gw.status()["sessions"][0]
        assert st["auth_replayed"] == 0 and st["logs"] > 0
        assert gw.stop() == 0
        said = gw.proc.stdout.read().decode()
    finally:
        if gw is not None:
            gw.stop()
        if nd is not None:
            nd.close()
    assert "sending model update" in said and "verified on the node" in said, said
    gwkit.check_logs_acked(db, "a")
    print("UPDATE-LINK %s" % json.dumps({k: final.get(k) for k in ("state", "size", "why")}))


def test_update_command_mistakes_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    s = LogStore(db)
    s.node_id("a")
    s.commit()
    s.close()
    bad = tmp_path / "bad.mbf"
    bad.write_bytes(b"not a model at all")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv, want in ((["--node", "b", "--model", str(bad)], "no node b"),
                       (["--node", "a", "--model", str(bad)], "not a model the node can load"),
                       (["--node", "a", "--model", str(tmp_path)], "is a directory"),
                       (["--node", "a", "--model", str(tmp_path / "none.mbf")], "cannot read"),
                       (["--node", "a"], "give --model"),
                       (["--node", "a", "--model", str(bad), "--timeout", "0"], "--timeout")):
        r = subprocess.run([sys.executable, "-m", "host.cli", "update", "--db", str(db), *argv], cwd=str(ROOT), env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and want in r.stderr, (argv, r.stderr)
    r = subprocess.run([sys.executable, "-m", "host.cli", "update", "--db", str(db), "--node", "a", "--status"],
                       cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "no update for node a" in r.stdout
