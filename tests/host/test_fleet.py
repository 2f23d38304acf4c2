"""`edgetwin fleet` (host/fleet.py, host/cmd_fleet.py, docs/MQTT.md 6): the fleet view over a real broker.

The end-to-end run: one Mosquitto with persistence, three real `edgetwin gateway --mqtt` processes with four
nodes each (one drafting node per gateway: firmware/node.py with the tiny draft against `--model tiny:3`; three
logs-only CPython links sending alarm, trip and sample lines), and the real `edgetwin fleet --jsonl` process on a
persistent session. Mid-run the broker restarts (same port, persistence kept) and one gateway is SIGKILLed and
started again on its store. At the end every annotation, alarm and trip committed in the three stores is in the
fleet's JSON lines exactly once, and nothing else is; replayed events are dropped by key and counted.
The model's own rules (statuses, de-duplication, the JSON-lines file) are checked without a broker first.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from host.cli import main
from host.fleet import Fleet, JsonlSink
from host.mqtt_topics import classify

ROOT = Path(__file__).resolve().parents[2]


def _event(key: str, kind: str = "annotation", gateway: str = "gw-a", node: str = "n1", **kw) -> bytes:
    store, table, rid = key.split("/")
    return json.dumps(dict({"v": 1, "kind": kind, "key": key, "store": store, "table": table, "id": int(rid),
                            "gateway": gateway, "node": node, "time": "2026-11-30T06:44:58.000Z", "text": "t " + key,
                            "verified": True}, **kw)).encode()


def test_the_model_keeps_state_and_passes_each_event_once(tmp_path: Path) -> None:
    out = JsonlSink(str(tmp_path / "ev.jsonl"))
    f = Fleet(sink=out.write)
    st = json.dumps({"v": 1, "gateway": "gw-a", "online": True, "reason": "running", "since_ms": 1}).encode()
    assert f.handle("edgetwin/gw-a/status", st) is None
    node = {"v": 1, "gateway": "gw-a", "node": "n1", "online": True, "board": "rp2040_pico", "health": {"heap": 9}}
    assert f.handle("edgetwin/gw-a/node/n1/status", json.dumps(node).encode()) is None
    assert f.handle("edgetwin/gw-a/node/n1/annotation", _event("s1/annotations/1"))["key"] == "s1/annotations/1"
    assert f.handle("edgetwin/gw-a/node/n1/annotation", _event("s1/annotations/1")) is None  # a repeat
    assert f.handle("edgetwin/gw-a/node/n1/alarm", _event("s1/logs/7", "alarm", machine="P-101")) is not None
    assert f.handle("edgetwin/gw-b/node/n1/annotation", _event("s2/annotations/1", gateway="gw-b")) is not None
    for junk in (b"", b"not json", b"[1]", json.dumps({"v": 2, "gateway": "gw-a", "online": True}).encode()):
        assert f.handle("edgetwin/gw-a/status", junk) is None
    g = f.gateways["gw-a"]
    assert g.online and g.node_online(g.nodes["n1"]) and g.nodes["n1"].health == {"heap": 9}
    assert [n["key"] for n in g.nodes["n1"].notes] == ["s1/annotations/1"]
    assert g.nodes["n1"].last_alarm["machine"] == "P-101"
    f.handle("edgetwin/gw-a/status", json.dumps({"v": 1, "gateway": "gw-a", "online": False,
                                                 "reason": "connection lost"}).encode())
    assert not g.node_online(g.nodes["n1"])  # a node's status holds only while its gateway is online
    tot = f.totals()
    assert (tot["gateways"], tot["nodes"], tot["events"], tot["duplicates"], tot["ignored"]) == (2, 2, 3, 1, 4)
    out.close()
    lines = (tmp_path / "ev.jsonl").read_text().splitlines()
    assert [json.loads(ln)["key"] for ln in lines] == ["s1/annotations/1", "s1/logs/7", "s2/annotations/1"]
    # a second run on the same file knows those keys (a line cut by a kill is skipped, then closed)
    with open(tmp_path / "ev.jsonl", "a") as fh:
        fh.write('{"v":1,"kind":"annot')
    again = JsonlSink(str(tmp_path / "ev.jsonl"))
    f2 = Fleet(again.keys(), sink=again.write)
    assert f2.handle("x/annotation", _event("s1/annotations/1")) is None
    assert f2.handle("x/annotation", _event("s1/annotations/2")) is not None
    again.close()
    keys = JsonlSink(str(tmp_path / "ev.jsonl")).keys()
    assert keys == ["s1/annotations/1", "s1/logs/7", "s2/annotations/1", "s1/annotations/2"]
    (tmp_path / "other.txt").write_text("hello\nworld\n")
    with pytest.raises(ValueError, match="line 1"):
        JsonlSink(str(tmp_path / "other.txt")).keys()


def test_the_keys_remembered_are_bounded_oldest_forgotten_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from host import fleet as hfleet

    monkeypatch.setattr(hfleet, "SEEN_MAX", 100)
    f = Fleet(["s1/annotations/%d" % i for i in range(50)])
    for i in range(50, 250):
        assert f.handle("x/annotation", _event("s1/annotations/%d" % i)) is not None
    assert f.handle("x/annotation", _event("s1/annotations/249")) is None  # recent: still a repeat
    assert f.handle("x/annotation", _event("s1/annotations/10")) is not None  # long forgotten: passed on again
    assert f.totals()["duplicates"] == 1


def test_a_refused_login_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_mqtt import Broker

    subprocess.run(["mosquitto_passwd", "-b", "-c", str(tmp_path / "passwd"), "fleet-view", "s3cret"], check=True,
                   capture_output=True)
    b = Broker(tmp_path, "allow_anonymous false\npassword_file %s\n" % (tmp_path / "passwd"))
    b.start()
    (tmp_path / "pw").write_text("wrong\n")
    try:
        rc = main(["fleet", "--mqtt", "mqtt://127.0.0.1:%d" % b.port, "--mqtt-user", "fleet-view",
                   "--mqtt-password-file", str(tmp_path / "pw"), "--jsonl", str(tmp_path / "ev.jsonl")])
    finally:
        b.stop()
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "refused the connection" in err, err
    assert not (tmp_path / "ev.jsonl").exists()


def test_jsonl_to_stdout_and_sigint_stop_it_cleanly(tmp_path: Path) -> None:
    """`--jsonl -`: stdout carries the events alone (one JSON object a line, each once), the messages and the
    summary go to stderr; SIGINT stops it with exit status 0."""
    from test_mqtt import Broker, fill, publisher

    from host.store import LogStore

    b = Broker(tmp_path)
    b.start()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "fleet", "--mqtt", "mqtt://127.0.0.1:%d" % b.port,
                          "--jsonl", "-", "--client-id", "fleet-sigint"], cwd=str(ROOT), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = LogStore(tmp_path / "g.db")
    pub = None
    try:
        assert p.stderr.readline().startswith("edgetwin fleet: connected to")  # subscribed from here on
        pub = publisher(tmp_path / "g.db", b.port)
        logs, notes = fill(store, "pump-room", 1, 10)
        lines = [p.stdout.readline() for _ in logs + notes]
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
    finally:
        if pub is not None:
            pub.stop()
        store.close()
        if p.poll() is None:
            p.kill()
            p.communicate()
        b.stop()
    assert p.returncode == 0 and "Traceback" not in err, err
    events = [json.loads(ln) for ln in lines + out.splitlines()]
    assert sorted(e["id"] for e in events if e["table"] == "logs") == logs
    assert sorted(e["id"] for e in events if e["table"] == "annotations") == notes
    assert re.search(r"edgetwin fleet: stopped after \d+ s: 1 gateways \(1 online\), 1 nodes \(0 online\), %d events "
                     r"\(0 duplicates dropped\)" % len(events), err), err


def _get(url: str, path: str, host: str | None = None, stream: bool = False) -> tuple[int, str]:
    """(status, body); with stream, the body up to the end of its first server-sent event."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", path, headers={"Host": host} if host else {})
    r = c.getresponse()
    if stream:
        lines = []
        while not lines or lines[-1] != b"\n":
            lines.append(r.readline())  # chunked: the response undoes it
        body = b"".join(lines).decode()
    else:
        body = r.read().decode()
    c.close()
    return r.status, body


def test_the_web_view_shows_the_fleet_escaped_and_live(tmp_path: Path) -> None:
    """--ui: the page, its event stream and /api/fleet from the same model; text from the broker is escaped;
    bound to loopback it answers only requests addressed to loopback."""
    from host.ui import serve
    from host.ui.fleet_page import FleetPage, make_fleet_app

    f = Fleet()
    evil = "<img src=x onerror=alert(1)>"
    f.handle("edgetwin/gw-a/status", json.dumps({"v": 1, "gateway": "gw-a", "online": True}).encode())
    f.handle("edgetwin/gw-a/node/x/status", json.dumps({"v": 1, "gateway": "gw-a", "node": evil, "online": True,
                                                        "board": "rp2040_pico", "health": {"heap": 152608}}).encode())
    f.handle("edgetwin/gw-a/node/x/annotation", _event("s1/annotations/1", node=evil, text="P-101 " + evil))
    f.handle("edgetwin/gw-a/node/x/annotation", _event("s1/annotations/1", node=evil, text="P-101 " + evil))
    bind = {"host": "127.0.0.1", "port": 0, "token": None, "cert": None, "key": None}
    server = serve.listen(bind)
    page = FleetPage(f, "127.0.0.1:1883", lambda: True, hosts=serve.allowed_hosts(bind))
    server.start(make_fleet_app(page))
    try:
        status, html = _get(server.url, "/")
        assert status == 200 and "gw-a" in html and "heap=152608" in html and "rp2040_pico" in html
        assert evil not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
        assert "1 gateways (1 online), 1 nodes (1 online), 1 events, 1 duplicates dropped" in html
        status, body = _get(server.url, "/api/fleet")
        api = json.loads(body)
        assert api["totals"]["events"] == 1 and api["gateways"]["gw-a"]["nodes"][evil]["annotations"] == 1
        status, stream = _get(server.url, "/events", stream=True)
        assert stream.startswith("event: fleet\ndata: ") and "gw-a" in stream and evil not in stream
        assert _get(server.url, "/", host="evil.example")[0] == 400  # DNS rebinding reads nothing
        assert _get(server.url, "/static/fleet.js")[0] == 200
    finally:
        server.stop(page.close)


# ---- the end-to-end run ----

GATEWAYS = ("hall-1", "hall-2", "hall-3")
LOGS_ONLY = ("feed", "filter", "outfall")  # three logs-only nodes per gateway, beside the drafting one
RESTARTED = "hall-2"
# traffic before, between and after the two disruptions; each phase also runs until every gateway it names has
# committed a new note and a new alarm or trip, which is what the checks need, so a few seconds more add nothing
PHASE_S = 5.0


class LogsOnlyNodes(threading.Thread):
    """CPython node links (test_gateway_cli.NodeEnd) on ptys, each sending a sample, an alarm and now and then a
    trip, one line every `every` s while running; the links keep polling (and resend) until stop()."""

    def __init__(self, n: int, every: float = 0.25) -> None:
        from test_gateway_cli import NodeEnd, pty_pair

        super().__init__(daemon=True)
        self.ptys = [pty_pair() for _ in range(n)]
        self.ends = [NodeEnd(m, board_id=b"logs-%d" % i) for i, (m, _, _) in enumerate(self.ptys)]
        self.paths = [p for _, _, p in self.ptys]
        self.every = every
        self.sending = threading.Event()
        self.sending.set()
        self._halt = threading.Event()
        self.sent = 0

    def _line(self, i: int) -> tuple[int, str]:
        from test_mqtt import ALARM, SAMPLE, TRIP

        if i % 3 == 0:
            return 1, SAMPLE
        return (3, TRIP) if i % 10 == 8 else (2, ALARM % (i % 60))

    def run(self) -> None:
        from host.session import ticks_ms
        from shared import frame, frame_host

        due = [time.monotonic()] * len(self.ends)
        count = [0] * len(self.ends)
        while not self._halt.is_set():
            now = time.monotonic()
            for k, end in enumerate(self.ends):
                end.lk.poll(ticks_ms())
                if self.sending.is_set() and now >= due[k] and end.lk.established and end.lk.free_slots():
                    level, text = self._line(count[k])
                    if end.lk.send(frame.LOG, frame_host.pack_body(frame.LOG, ts=count[k], level=level, text=text)):
                        count[k] += 1
                        self.sent += 1
                        due[k] = now + self.every
            time.sleep(0.01)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        for m, s, _ in self.ptys:
            os.close(m)
            os.close(s)


def expected_keys(db: Path) -> tuple[set[str], int]:
    """What a gateway publishes from its store: each annotation, alarm and trip row's key; and the annotations."""
    with sqlite3.connect("file:%s?mode=ro" % db, uri=True) as c:
        row = c.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        if row is None:  # a gateway just starting: its outbox has not named the store yet (nothing published)
            return set(), 0
        store = row[0]
        notes = [r[0] for r in c.execute("SELECT id FROM annotations")]
        logs = [r[0] for r in c.execute("SELECT id, text FROM logs WHERE level > 1") if classify(r[1]) in
                ("alarm", "trip")]
    c.close()
    return ({"%s/annotations/%d" % (store, i) for i in notes} | {"%s/logs/%d" % (store, i) for i in logs}), len(notes)


def counts(db: Path) -> tuple[int, int]:
    """(annotations, alarm and trip lines) committed in a store so far."""
    keys, notes = expected_keys(db)
    return notes, len(keys) - notes


def jsonl_keys(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(ln)["key"] for ln in path.read_text().splitlines() if ln.endswith("}")]


def wait_for(pred, timeout: float, what: str, procs: list[subprocess.Popen] = ()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        dead = [(p.pid, p.returncode) for p in procs if p.poll() is not None]
        assert not dead, "exited while waiting for %s: %s" % (what, dead)
        time.sleep(0.25)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


@pytest.mark.slow
def test_three_gateways_a_broker_restart_and_a_gateway_crash_every_note_arrives_once(tmp_path: Path) -> None:
    from test_dashboard import Node
    from test_mqtt import Broker

    import gwkit

    t_start = time.monotonic()
    broker = Broker(tmp_path)
    broker.start()
    url = "mqtt://127.0.0.1:%d" % broker.port
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    jsonl = tmp_path / "events.jsonl"
    fleet_out: list[str] = []
    fleet = subprocess.Popen([sys.executable, "-m", "host.cli", "fleet", "--mqtt", url, "--jsonl", str(jsonl),
                              "--client-id", "fleet-test-%d" % os.getpid(), "--session-expiry", "600", "--ui",
                              "--ui-port", "0"], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    first = fleet.stdout.readline()  # printed once subscribed: from here on nothing published is missed
    assert first.startswith("edgetwin fleet: connected to 127.0.0.1:%d" % broker.port), (first, fleet.poll())
    web = re.match(r"edgetwin fleet: web view on (http://127\.0\.0\.1:\d+/)$", fleet.stdout.readline().strip())
    assert web, fleet.poll()
    drain = threading.Thread(target=lambda: fleet_out.extend(fleet.stdout), daemon=True)
    drain.start()

    nodes: dict[str, Node] = {}
    logs = LogsOnlyNodes(len(GATEWAYS) * len(LOGS_ONLY))
    gws: dict[str, subprocess.Popen] = {}
    dbs = {g: tmp_path / ("%s.db" % g) for g in GATEWAYS}

    def start_gateway(i: int, g: str) -> subprocess.Popen:
        ports = ["pump-room=%s" % (tmp_path / g / "link")] + ["%s=%s" % (name, logs.paths[i * len(LOGS_ONLY) + k])
                                                                for k, name in enumerate(LOGS_ONLY)]
        argv = [sys.executable, "-m", "host.cli", "gateway", "--insecure", "--db", str(dbs[g]), "--model",
                "tiny:%d" % gwkit.TINY_SEED, "--mqtt", url, "--mqtt-gateway", g, "--status-every", "60"]
        for p in ports:
            argv += ["--port", p]
        with open(tmp_path / ("%s.log" % g), "a") as log:
            return subprocess.Popen(argv, cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT)

    def all_counts() -> dict[str, tuple[int, int]]:
        out = {}
        for g in GATEWAYS:
            try:
                out[g] = counts(dbs[g])
            except sqlite3.OperationalError:  # not created yet, or its schema half made
                out[g] = (0, 0)
        return out

    def phase(name: str, before: dict[str, tuple[int, int]], gateways=GATEWAYS) -> None:
        """Run on for PHASE_S at least, and until every gateway named committed a new annotation and new alarm or
        trip lines since `before` (so each disruption has traffic on both sides of it)."""
        t0 = time.monotonic()

        def grown() -> bool:
            now = all_counts()
            return time.monotonic() - t0 >= PHASE_S and all(now[g][0] > before[g][0] and now[g][1] > before[g][1]
                                                             for g in gateways)

        wait_for(grown, 120, name, list(gws.values()))
        phases[name] = round(time.monotonic() - t_start)

    phases = {}
    try:
        for g in GATEWAYS:
            (tmp_path / g).mkdir()
            nodes[g] = Node(tmp_path / g, tmp_path / g / "link")
        for i, g in enumerate(GATEWAYS):
            gws[g] = start_gateway(i, g)
        for n in nodes.values():
            n.start()
        logs.start()
        phase("every gateway's first notes and alarms", {g: (0, 0) for g in GATEWAYS})

        # the broker restarts: persistence kept, the same port; the fleet's session and its queue survive
        broker.stop()
        before = all_counts()
        time.sleep(3)
        during = all_counts()
        # the gateways stored on meanwhile (their outboxes hold it for the broker's return)
        assert all(during[g][1] > before[g][1] for g in GATEWAYS), (before, during)
        broker.start()
        phase("new notes after the broker restart", before)

        # one gateway crashes and starts again on its store: it republishes what was never acknowledged
        gws[RESTARTED].send_signal(signal.SIGKILL)
        gws[RESTARTED].wait(10)
        before = all_counts()
        time.sleep(2)  # its nodes keep their lines meanwhile (the link resends them)
        gws[RESTARTED] = start_gateway(GATEWAYS.index(RESTARTED), RESTARTED)
        phase("new notes from the restarted gateway", before, (RESTARTED,))

        # quiet: the nodes stop sending; every committed row reaches the fleet
        logs.sending.clear()
        for n in nodes.values():
            n.stop()
        time.sleep(1)

        def want() -> set[str]:
            return set().union(*(expected_keys(dbs[g])[0] for g in GATEWAYS))

        wait_for(lambda: want() <= set(jsonl_keys(jsonl)), 60, "every committed row in the fleet's JSON lines",
                 [fleet])
        for g in GATEWAYS:
            gws[g].send_signal(signal.SIGTERM)
        for g in GATEWAYS:
            assert gws[g].wait(30) == 0, (tmp_path / ("%s.log" % g)).read_text()[-2000:]
        expected = want()  # final: nothing is committed after the gateways stopped
        wait_for(lambda: expected <= set(jsonl_keys(jsonl)), 30, "the last rows", [fleet])
        phases["all arrived"] = round(time.monotonic() - t_start)

        # replays, as a gateway restart or a broker's resend makes them: the fleet drops them by key; a sentinel
        # published after them by the same client marks when they have all been handled (MQTT keeps its order)
        events = [json.loads(ln) for ln in jsonl.read_text().splitlines()]
        replays = ([e for e in events if e["kind"] == "annotation"][:3]
                   + [e for e in events if e["kind"] != "annotation"][:3])
        sentinel = dict(replays[0], key="sentinel/annotations/1", store="sentinel", id=1, text="sentinel")
        c = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        c.connect("127.0.0.1", broker.port)
        c.loop_start()
        for e in replays + [sentinel]:
            c.publish("edgetwin/%s/node/%s/%s" % (e["gateway"], e["node"], e["kind"]), json.dumps(e),
                      qos=1).wait_for_publish(10)
        c.disconnect()
        c.loop_stop()
        wait_for(lambda: "sentinel/annotations/1" in jsonl_keys(jsonl), 20, "the sentinel", [fleet])
        api = json.loads(_get(web.group(1), "/api/fleet")[1])  # the web view shows the same model
        assert sorted(api["gateways"]) == list(GATEWAYS)
        assert all(sorted(api["gateways"][g]["nodes"]) == sorted(("pump-room",) + LOGS_ONLY) for g in GATEWAYS)
        assert api["totals"]["events"] == len(jsonl_keys(jsonl))
        assert sum(n["annotations"] for g in api["gateways"].values() for n in g["nodes"].values()) == len(
            [k for k in jsonl_keys(jsonl) if "/annotations/" in k])
    finally:
        logs.stop()
        for n in nodes.values():
            if n.is_alive():
                n.stop()
        for p in gws.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        if fleet.poll() is None:
            fleet.send_signal(signal.SIGTERM)
        try:
            fleet.wait(30)
        except subprocess.TimeoutExpired:
            fleet.kill()
            fleet.wait(10)
        drain.join(10)
        broker.stop()
    err = fleet.stderr.read()
    assert fleet.returncode == 0 and "Traceback" not in err, err
    got = jsonl_keys(jsonl)
    assert got[-1] == "sentinel/annotations/1"
    got = got[:-1]
    assert len(got) == len(set(got)), "an event written twice: %s" % sorted(k for k in set(got) if got.count(k) > 1)
    assert set(got) == expected, ("missing", sorted(expected - set(got))[:10], "no store holds",
                                  sorted(set(got) - expected)[:10])
    out = "".join(fleet_out)
    summary = re.search(r"edgetwin fleet: stopped after \d+ s: (\d+) gateways \(\d+ online\), (\d+) nodes \(\d+ "
                        r"online\), (\d+) events \((\d+) duplicates dropped\)", out)
    assert summary, out[-3000:]
    n_gw, n_nodes, n_events, dups = (int(x) for x in summary.groups())
    assert (n_gw, n_nodes) == (3, 12), out[-3000:]
    assert n_events == len(got) + 1  # the distinct events are exactly the lines written
    assert dups >= len(replays), (dups, len(replays))  # every replay was dropped (and counted) by its key
    # the fleet's session survived the broker's restart: the broker had it (persistence), not a fresh one
    assert "had no session" not in out and re.search(r"connected to 127\.0\.0\.1:\d+ again", out), out[-3000:]
    notes = {g: expected_keys(dbs[g])[1] for g in GATEWAYS}
    wall = time.monotonic() - t_start
    print("\ntest_fleet: %.0f s; phases at %s; %d events (%s annotations by gateway), %d duplicates dropped (%d "
          "replayed by the test, %d from the run itself); %d lines sent by the logs-only nodes"
          % (wall, phases, len(got), notes, dups, len(replays), dups - len(replays), logs.sent))
    print("\n".join(ln for ln in out.splitlines() if ln.startswith(("edgetwin fleet: ", "0", "1", "2"))))
