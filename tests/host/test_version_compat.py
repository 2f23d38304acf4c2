"""A rollout, both ways: this tree's gateway with the previous release's node, and that release's gateway
with this tree's node (docs/GATEWAY.md "Rolling out a new version").

The previous release (protocol 1.3: link keys provisioned by deploy, model updates, no code updates) is
tests/host/fixtures/release-1.3.tar.xz, made by tools/board/release_fixture.py from git: its logs-only
node package runs on a virtual board of this tree (its sources on the board's filesystem, its own
/board.json), unkeyed ("old") and with a key provisioned as its deploy did ("oldkeyed"); its gateway is its
own `python -m host.cli gateway` run from the extracted tree. The link negotiates by the minor in HELLO.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gwkit  # noqa: E402

from host.store import LogStore  # noqa: E402
from shared import frame  # noqa: E402
from tools.board.vboard import VirtualBoard  # noqa: E402

pytestmark = pytest.mark.slow
RELEASE = Path(__file__).resolve().parent / "fixtures" / "release-1.3.tar.xz"
RELEASE_COMMIT = "9cfe7d3"
NODE_CFG = {"tick_ms": 100, "sample_every": 2, "report_ms": 500}
HEAP = 2 * 196608  # the drafting profile's heap on this 64-bit port (as tests/host/test_link_auth.py)
REFUSED = "its frames are not signed"  # this gateway's one line for an unsigned node (host/session.py)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release, extracted: what its node and its gateway run."""
    root = tmp_path_factory.mktemp("release-1.3")
    with tarfile.open(RELEASE) as t:
        assert t.pax_headers.get("comment", "").startswith(RELEASE_COMMIT)  # git archive's commit id
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+: nothing outside root, no links out
            t.extractall(root, filter="data")
        else:
            t.extractall(root)
    return root


def _minor(tree: Path) -> int:
    return int(re.search(r"^MINOR = const\((\d+)\)", (tree / "shared" / "frame.py").read_text(), re.M).group(1))


class OldNode:
    """The release's logs-only node on a virtual board: the files its mip package (package-logs.json) puts
    on a board, its board profile as /board.json, booted into firmware/node.py; unsigned, or with a key in
    `keys` as that release's `deploy --node` provisioned one (the key file and the unique id are as they were)."""

    def __init__(self, release: Path, root: Path, link_path: Path, keys: Path | None = None) -> None:
        for _, src in json.loads((release / "package-logs.json").read_text())["urls"]:
            dst = root / "lib" / src
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(release / src, dst)
        shutil.copyfile(release / "boards" / "rp2040_pico.json", root / "board.json")
        (root / "node.json").write_text(json.dumps(dict(NODE_CFG, model=None)))
        (root / "main.py").write_text("import firmware.node as n\nn.main()\n")
        if keys is not None:
            from host.linkkeys import KeyFile
            from tools.board.vnode import provision

            provision(root, KeyFile(keys), root.name)
        self.vb = VirtualBoard("rp2040_pico", root=root, heap_bytes=HEAP)
        self.vb.start()  # boots into main.py: the node runs
        try:
            self.ip = gwkit.Interposer(self.vb.uart_port, link_path)
        except BaseException:
            self.vb.stop()
            raise

    def close(self) -> None:
        self.ip.close()
        self.vb.stop()


class OldGateway(gwkit.GatewayProc):
    """The release's own `edgetwin gateway`, run from the extracted tree."""

    def __init__(self, release: Path, ports: list[str], db: Path, status: Path, extra: list[str]) -> None:
        self.release = release
        self.args = [sys.executable, "-m", "host.cli", "gateway", "--db", str(db), "--status", str(status),
                     "--baud", "921600", *extra]
        for p in ports:
            self.args += ["--port", p]
        self.status_path = status
        self.proc = None
        self.start()

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(self.release))
        self.proc = subprocess.Popen(self.args, cwd=str(self.release), env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def nodes(release: Path, tmp_path_factory: pytest.TempPathFactory):
    """Four virtual boards for the module: the release's node unkeyed ("old") and keyed ("oldkeyed", in
    keys.json), this tree's node provisioned with a key ("keyed", in keys.json) and this tree's node deployed
    without one ("bare")."""
    d = tmp_path_factory.mktemp("nodes")
    made = {}
    try:
        made["old"] = OldNode(release, d / "fsOld", d / "old")
        made["oldkeyed"] = OldNode(release, d / "fsOldkeyed", d / "oldkeyed", keys=d / "keys.json")
        made["keyed"] = gwkit.VNode("rp2040_pico", d / "fsKeyed", d / "keyed", NODE_CFG, heap=HEAP,
                                    keys=d / "keys.json")
        made["bare"] = gwkit.VNode("rp2040_pico", d / "fsBare", d / "bare", NODE_CFG, heap=HEAP)
        yield {"dir": d, "keys": d / "keys.json", "release": release, **made}
    finally:
        for n in made.values():
            n.close()


def _session(st: dict, name: str) -> dict:
    return next(s for s in st["sessions"] if s["name"] == name)


def _lines(db: Path, name: str) -> int:
    s = LogStore(db, readonly=True)
    try:
        return len(s.logs(name))
    finally:
        s.close()


def _old_lines(db: Path, name: str) -> int:
    """Lines of a node in the release's store (its own schema, read with plain SQL)."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        return con.execute("SELECT count(*) FROM logs JOIN nodes ON nodes.id = logs.node WHERE nodes.name = ?",
                           (name,)).fetchone()[0]
    finally:
        con.close()


def _stop(gw: gwkit.GatewayProc) -> str:
    """Stop the gateway; what it printed (its stdout). A gateway that did not end cleanly fails the test with
    its stderr, unless the test failed already (its own error says more)."""
    rc = gw.stop()
    out, err = gw.proc.stdout.read().decode(), gw.proc.stderr.read().decode()
    if sys.exc_info()[0] is None:
        assert rc == 0, err
    return out


def test_the_fixture_is_the_previous_minor(release: Path) -> None:
    old = _minor(release)
    assert old == 3 and frame.MINOR == old + 1  # the release before this tree's protocol minor
    assert (release / "host" / "linkkeys.py").exists()  # a release with link keys
    assert "UP_CODE" not in (release / "shared" / "frame.py").read_text()  # and without code updates


def test_this_gateway_refuses_the_previous_node_unless_insecure(nodes: dict, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"  # this gateway's keys: none for the old node (it has no key to hold)
    db = tmp_path / "g.db"
    gw = gwkit.GatewayProc(["old=%s" % (nodes["dir"] / "old")], db, tmp_path / "st.json", keys=keys)
    try:
        st = gw.wait_status(lambda st: _session(st, "old")["auth_unsigned"] >= 3, timeout=20,
                            what="the previous release's node refused")
    finally:
        out = _stop(gw)
    old = _session(st, "old")
    assert not st["insecure"] and not old["established"] and old["logs"] == 0, st
    assert _lines(db, "old") == 0
    refused = [ln for ln in out.splitlines() if REFUSED in ln]
    assert len(refused) == 1, out  # said once, however many frames were refused
    assert "`edgetwin deploy --node`" in refused[0] and "--insecure" in refused[0], refused

    # the same gateway with --insecure: the node's lines are stored, the ones it held meanwhile too
    gw = gwkit.GatewayProc(["old=%s" % (nodes["dir"] / "old")], db, tmp_path / "st.json", keys=None)
    try:
        st = gw.wait_status(lambda st: _session(st, "old")["logs"] >= 20, timeout=20,
                            what="the previous release's lines stored")
    finally:
        out = _stop(gw)
    old = _session(st, "old")
    assert st["insecure"] and old["auth_unsigned"] == 0 and old["bad_frames"] == 0, st
    assert REFUSED not in out
    stored = LogStore(db, readonly=True)
    try:
        rows = stored.logs("old")
        texts = [r["text"] for r in rows]
    finally:
        stored.close()
    assert len(texts) >= 20 and any(t.startswith("NODE ") for t in texts)
    # from its first frame on, the ones sent while it was refused included, each once
    assert len({r["epoch"] for r in rows}) == 1 and [r["seq"] for r in rows] == list(range(len(rows)))
    # every line the old node saw acknowledged is here (its NODE lines count them, as this tree's do)
    assert gwkit.check_logs_acked(db, "old")


def test_this_gateway_takes_a_keyed_new_node_and_an_unkeyed_old_one_with_insecure(nodes: dict, tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    gw = gwkit.GatewayProc(["old=%s" % (nodes["dir"] / "old"), "keyed=%s" % (nodes["dir"] / "keyed")], db,
                           tmp_path / "st.json", keys=nodes["keys"], extra=["--insecure"])
    try:
        st = gw.wait_status(lambda st: _session(st, "old")["logs"] >= 10 and _session(st, "keyed")["logs"] >= 10,
                            timeout=20, what="both nodes' lines")
        # new code for the old node: it speaks a protocol that takes none, so the update ends at once, said
        env = dict(os.environ, PYTHONPATH=str(gwkit.ROOT))
        r = subprocess.run([sys.executable, "-m", "host.cli", "update", "--node", "old", "--db", str(db), "--code",
                            str(gwkit.x64_build("rp2040_pico")), "--timeout", "30"], cwd=str(gwkit.ROOT), env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "speaks protocol 1.%d: it takes code over the link from 1.%d on" % (
            _minor(nodes["release"]), frame.MINOR_CODE) in r.stderr, r.stderr
    finally:
        out = _stop(gw)
    assert st["insecure"], st
    for name in ("old", "keyed"):
        s = _session(st, name)
        assert s["auth_unsigned"] == s["auth_bad_key"] == s["auth_replayed"] == 0, s
        assert _lines(db, name) >= 10
    assert REFUSED not in out
    stored = LogStore(db, readonly=True)
    try:  # the keyed node's lines came signed (its counter is kept), the old node's did not
        assert stored.peer_counter("keyed") is not None and stored.peer_counter("old") is None
    finally:
        stored.close()


def test_this_gateway_takes_the_previous_node_by_the_key_its_deploy_provisioned(nodes: dict, tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    gw = gwkit.GatewayProc(["oldkeyed=%s" % (nodes["dir"] / "oldkeyed")], db, tmp_path / "st.json",
                           keys=nodes["keys"])
    try:
        st = gw.wait_status(lambda st: _session(st, "oldkeyed")["logs"] >= 10, timeout=20,
                            what="the previous release's keyed node's lines")
    finally:
        out = _stop(gw)
    s = _session(st, "oldkeyed")
    assert not st["insecure"] and s["auth_unsigned"] == s["auth_bad_key"] == s["auth_replayed"] == 0, s
    assert REFUSED not in out and _lines(db, "oldkeyed") >= 10
    stored = LogStore(db, readonly=True)
    try:  # its lines came signed: the counter of its key is kept
        assert stored.peer_counter("oldkeyed") is not None
    finally:
        stored.close()


def test_the_previous_gateway_takes_new_nodes_by_their_keys_and_unkeyed_ones_with_insecure(
        nodes: dict, release: Path, tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    gw = OldGateway(release, ["bare=%s" % (nodes["dir"] / "bare"), "keyed=%s" % (nodes["dir"] / "keyed")], db,
                    tmp_path / "st.json", ["--keys", str(nodes["keys"]), "--insecure"])
    try:
        st = gw.wait_status(lambda st: _session(st, "bare")["logs"] >= 20 and _session(st, "keyed")["logs"] >= 20,
                            timeout=20, what="this tree's nodes' lines in the previous gateway")
    finally:
        out = _stop(gw)
    assert st["insecure"], st  # the release's own gateway ran, with link keys
    for name in ("bare", "keyed"):
        s = _session(st, name)
        # the keyed node signs every frame, and only a gateway that holds its key establishes a link with it and
        # stores its lines. (It talked to another gateway before: the frames still in its window when this one
        # starts, before its HELLO names the key to check them with, count once as auth_bad_key or replayed,
        # and go again.)
        assert s["established"] and s["bad_frames"] == 0 and s["auth_unsigned"] == 0, s
        assert _old_lines(db, name) >= 20
        assert "node %s connected" % name in out, out


def test_the_fixture_is_what_its_script_makes_from_git(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tools.board import release_fixture

    assert release_fixture.main(["--commit", "no-such-commit", "--out", str(tmp_path / "x.tar.xz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("release_fixture: git ")
    assert not (tmp_path / "x.tar.xz").exists()
    try:
        made = release_fixture.make(out=tmp_path / "r.tar.xz")
    except release_fixture.FixtureError as e:  # a clone without the release's history (shallow): the file stands
        pytest.skip("the release commit is not in this clone: %s" % e)
    assert made["bytes"] < 1_500_000 and made["commit"].startswith(RELEASE_COMMIT)
    assert _members(tmp_path / "r.tar.xz") == _members(RELEASE)  # made again: the same files (another git may
    # write another tar around them)


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
