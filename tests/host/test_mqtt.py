"""MQTT out (host/mqtt.py, docs/MQTT.md) against a real broker: Debian's mosquitto, started by each test on
127.0.0.1 with its config, persistence and log in tmp_path, and real paho clients on both sides.

What is proved: every committed annotation, alarm and trip reaches a subscriber with its store id; rows
committed while the broker is down all arrive after it returns; a restarted publisher sends again only what
the broker never acknowledged; node and gateway status are retained and the will marks a vanished gateway
offline; `edgetwin gateway --mqtt` publishes what a node sends through the real command; bad --mqtt
options are one line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from host import mqtt, mqtt_topics
from host.cli import main
from host.store import LogStore
from tools.bench.soak_broker import Broker  # the soak's broker, which these tests start with their own options

ROOT = Path(__file__).resolve().parents[2]

SETUP = "mosquitto is not installed: `make test` installs it (its mqtt-setup step: apt-get install -y mosquitto)"


def mosquitto_bin() -> str:
    path = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None)
    if path is None:
        pytest.fail(SETUP)  # never a silent skip: the Makefile installs it
    return path


@pytest.fixture()
def broker(tmp_path: Path):
    b = Broker(tmp_path)
    b.start()
    yield b
    b.stop()


class Subscriber:
    """A real paho client on `topics` (re-subscribed at every connect), keeping every message it gets. With a
    client_id, a persistent session (MQTT 3.1.1, clean_session off): the broker keeps QoS 1 messages for it
    while it is away, across a broker restart (its persistence), as a consumer that must miss nothing has."""

    def __init__(self, port: int, topics: str = "edgetwin/#", setup=None, client_id: str | None = None) -> None:
        self.got: list[tuple[str, dict, bool]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        if client_id is None:
            self.c = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        else:
            self.c = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                 clean_session=False, protocol=paho.MQTTv311)
        self.c.on_connect = lambda c, u, f, rc, p: c.subscribe(topics, qos=1)
        self.c.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.c.on_message = self._msg
        self.c.reconnect_delay_set(1, 1)
        if setup is not None:
            setup(self.c)
        self.c.connect_async("127.0.0.1", port)
        self.c.loop_start()
        assert self.subscribed.wait(10), "the subscriber never subscribed"

    def _msg(self, c, u, m) -> None:
        with self.lock:
            self.got.append((m.topic, json.loads(m.payload) if m.payload else {}, bool(m.retain)))

    def of(self, suffix: str) -> list[dict]:
        with self.lock:
            return [p for t, p, _ in self.got if t.endswith(suffix)]

    def wait(self, pred, timeout: float = 45.0) -> bool:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if pred():
                return True
            time.sleep(0.05)
        return pred()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def config(port: int, gateway: str = "gw1") -> mqtt_topics.MqttConfig:
    return mqtt_topics.MqttConfig(host="127.0.0.1", port=port, gateway=gateway, prefix="edgetwin/" + gateway)


def publisher(db: Path, port: int, **kw) -> mqtt.Publisher:
    p = mqtt.Publisher(db, config(port), poll_s=0.05, reconnect_max_s=1, **kw)
    p.start()
    return p


ALARM = "2026-11-30T06:44:%02dZ ALARM HI P-101 vibration 7.4mm/s prio=3 RAISED"
TRIP = "2026-11-30T06:50:28Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB"
SAMPLE = "2026-11-30T06:50:28Z P-101 RUNNING T=69.7C V=11.4mm/s I=14.7A P=6.0bar Q=15.9m3/h dP=22.9kPa"


def fill(store: LogStore, node: str, start: int, n: int) -> tuple[list[int], list[int]]:
    """What a gateway session stores for a node: samples, alarms (level 2), a trip (level 3), NODE reports
    (level 0) and an annotation per 5 lines, each in the session's commit=False + commit() way. Returns the
    (alarm and trip log ids, annotation ids) of rows the publisher must send."""
    logs, notes = [], []
    for i in range(start, start + n):
        wall = 1_764_485_098_000 + i * 1000
        store.add_log(node, 7, 2 * i, i, wall, 1, SAMPLE, commit=False)
        store.add_log(node, 7, 2 * i + 1, i, wall, 2 if i % 7 else 3, ALARM % (i % 60) if i % 7 else TRIP,
                      commit=False)
        logs.append(_last_log_id(store))
        if i % 5 == 0:
            notes.append(store.add_annotation(node, wall, wall + 500, "P-101 vibration %d rising" % i, i % 2 == 0, 9,
                                              commit=False))
            store.add_log(node, 7, 10 ** 6 + i, i, wall, 0, "NODE heap=%d dropped=0 committed=%d" % (1000 + i, i),
                          commit=False)
        store.commit()
    return logs, notes


def _last_log_id(store: LogStore) -> int:
    with store._lock:
        return int(store._db.execute("SELECT max(id) FROM logs").fetchone()[0])


def ids_of(msgs: list[dict], table: str) -> list[int]:
    return [m["id"] for m in msgs if m["table"] == table]


def test_each_committed_row_arrives_with_its_id_and_status_is_retained(tmp_path: Path, broker: Broker) -> None:
    db = tmp_path / "g.db"
    store = LogStore(db)
    store.add_log("pump-room", 7, 0, 0, 1_764_485_000_000, 2, ALARM % 0)  # before MQTT was on: history, not sent
    old = _last_log_id(store)
    sub = Subscriber(broker.port)
    pub = publisher(db, broker.port)
    try:
        logs, notes = fill(store, "pump-room", 1, 20)
        pub.node_state("pump-room", True, board="rp2040_pico", uid="e661")
        assert sub.wait(lambda: len(sub.of("/alarm")) + len(sub.of("/trip")) >= 20 and len(sub.of("/annotation")) >= 4)
        alarms, trips, ann = sub.of("/alarm"), sub.of("/trip"), sub.of("/annotation")
        assert sorted(ids_of(alarms + trips, "logs")) == logs  # each once, with its store id, the samples left out
        assert old not in ids_of(alarms, "logs")  # the alarm stored before the first --mqtt start
        assert sorted(ids_of(ann, "annotations")) == notes
        a = alarms[0]
        assert a["gateway"] == "gw1" and a["node"] == "pump-room" and a["kind"] == "alarm" and a["level"] == 2
        assert (a["machine"], a["verb"], a["alarm_level"], a["tag"], a["priority"], a["state"]) == (
            "P-101", "ALARM", "HI", "vibration", 3, "RAISED")
        assert a["key"] == "%s/logs/%d" % (a["store"], a["id"]) and a["text"].endswith("RAISED")
        t = trips[0]
        assert (t["machine"], t["transition"], t["cause"]) == ("P-101", "RUNNING->TRIPPED", "HIHI_VIB")
        n = ann[0]
        assert n["text"].startswith("P-101 vibration") and isinstance(n["verified"], bool) and n["tokens"] == 9
        topics = {tp for tp, _, _ in sub.got}
        assert "edgetwin/gw1/node/pump-room/alarm" in topics and "edgetwin/gw1/node/pump-room/annotation" in topics
        assert sub.wait(lambda: pub.counts["acked"] == len(logs) + len(notes))
        assert sub.wait(lambda: pub.outbox is not None and pub.status()["in_flight"] == 0)
        # a consumer that comes later gets the retained status of the gateway and of each node (health included)
        late = Subscriber(broker.port, "edgetwin/+/#")
        assert late.wait(lambda: late.of("gw1/status") and late.of("pump-room/status"))
        late.close()
        assert all(r for tp, _, r in late.got if tp.endswith("/status"))
        assert late.of("gw1/status")[-1]["online"] is True
        st = late.of("pump-room/status")[-1]
        assert st["online"] is True and st["board"] == "rp2040_pico" and st["uid"] == "e661"
        assert st["health"]["heap"] == 1020 and st["health_id"] > 0
        assert not [tp for tp, _, r in late.got if not r]  # events are not retained
    finally:
        pub.stop()
        sub.close()
        store.close()
    # a clean stop says so itself (retained; no will)
    after = Subscriber(broker.port, "edgetwin/gw1/status")
    assert after.wait(lambda: after.of("gw1/status"))
    assert after.of("gw1/status")[-1]["online"] is False and after.of("gw1/status")[-1]["reason"] == "stopped"
    after.close()


def test_rows_committed_while_the_broker_is_down_all_arrive_after_it_returns(tmp_path: Path, broker: Broker) -> None:
    db = tmp_path / "g.db"
    store = LogStore(db)
    pub = publisher(db, broker.port)
    # a persistent session: the publisher may reconnect and deliver before a new subscriber subscribes (on a
    # loaded machine it did); the broker holds what comes meanwhile for this session
    sub = Subscriber(broker.port, client_id="edgetwin-test-consumer")
    try:
        logs1, notes1 = fill(store, "n1", 1, 5)
        assert sub.wait(lambda: pub.counts["acked"] == len(logs1) + len(notes1))
        sub.close()
        broker.stop()
        t0 = time.monotonic()
        logs2, notes2 = fill(store, "n1", 6, 40)  # the broker is away: the gateway's writes do not wait on it
        assert time.monotonic() - t0 < 10
        assert sub.wait(lambda: not pub.connected)
        broker.start()  # the same port
        sub = Subscriber(broker.port, client_id="edgetwin-test-consumer")

        def got():
            return sub.of("/alarm") + sub.of("/trip") + sub.of("/annotation")
        assert sub.wait(lambda: pub.counts["acked"] >= len(logs1 + logs2) + len(notes1 + notes2), timeout=60)
        # every row the publisher had acknowledged reaches the consumer (held for it if it came first)
        assert sub.wait(lambda: set(logs2) <= set(ids_of(got(), "logs")) and set(notes2) <= set(ids_of(got(), "annotations")),
                        timeout=30), (sorted(set(logs2) - set(ids_of(got(), "logs"))),
                                      sorted(set(notes2) - set(ids_of(got(), "annotations"))))
        assert pub.counts["disconnects"] >= 1 and pub.counts["connects"] >= 2
    finally:
        pub.stop()
        sub.close()
        store.close()


def test_a_restarted_publisher_sends_only_what_was_never_acknowledged(tmp_path: Path, broker: Broker) -> None:
    db = tmp_path / "g.db"
    store = LogStore(db)
    sub = Subscriber(broker.port)
    pub = publisher(db, broker.port)
    try:
        logs1, notes1 = fill(store, "n1", 1, 10)
        assert sub.wait(lambda: pub.counts["acked"] == len(logs1) + len(notes1) and not pub._inflight)
        sub.close()
        broker.stop()
        logs2, notes2 = fill(store, "n1", 11, 10)  # never acknowledged: the broker is down
        time.sleep(0.3)
        pub.kill()  # the gateway dies
        broker.start()
        sub = Subscriber(broker.port)
        pub = publisher(db, broker.port)
        logs3, notes3 = fill(store, "n1", 21, 5)
        want = logs2 + logs3 + notes2 + notes3
        assert sub.wait(lambda: pub.counts["acked"] >= len(want))
        time.sleep(0.5)
        got = sub.of("/alarm") + sub.of("/trip") + sub.of("/annotation")
        logs_seen, notes_seen = ids_of(got, "logs"), ids_of(got, "annotations")
        assert sorted(logs_seen) == sorted(logs2 + logs3) and sorted(notes_seen) == sorted(notes2 + notes3)
        assert not set(logs1) & set(logs_seen) and not set(notes1) & set(notes_seen)  # acknowledged: not again
        assert pub.counts["published"] == len(want)  # each unacknowledged row once more, no other
    finally:
        pub.stop()
        sub.close()
        store.close()
    with LogStore(db, readonly=True) as ro:  # the outbox's marks are at the end: nothing left to send
        marks = dict(ro._db.execute("SELECT source, acked_through FROM outbox_marks").fetchall())
        assert marks == {"logs": ro._db.execute("SELECT max(id) FROM logs").fetchone()[0], "annotations": max(notes3)}


def test_the_will_marks_a_vanished_gateway_offline(tmp_path: Path, broker: Broker) -> None:
    db = tmp_path / "g.db"
    LogStore(db).close()
    sub = Subscriber(broker.port, "edgetwin/gw1/status")
    pub = publisher(db, broker.port)
    assert sub.wait(lambda: any(p["online"] for p in sub.of("gw1/status")))
    pub.kill()  # the connection drops without a DISCONNECT: the broker publishes the will
    assert sub.wait(lambda: sub.of("gw1/status")[-1]["online"] is False, timeout=10)
    assert sub.of("gw1/status")[-1]["reason"] == "connection lost"
    sub.close()
    late = Subscriber(broker.port, "edgetwin/gw1/status")  # retained for whoever comes later
    assert late.wait(lambda: late.of("gw1/status")) and late.of("gw1/status")[-1]["online"] is False
    late.close()


def _tls_files(d: Path) -> None:
    """A test CA and a broker certificate for 127.0.0.1 signed by it (openssl, P-256 keys: fast)."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=edgetwin test CA")
    ssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "server.pem", "-days", "2", "-extfile", "san.ext")


def test_tls_password_and_acl(tmp_path: Path) -> None:
    """mqtts:// with the broker's CA, a user and password, and an ACL that lets this gateway write only under
    its own prefix: rows arrive; a wrong password is refused and nothing is marked sent."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed: `make test` installs it (its mqtt-setup step)")
    mosquitto_bin()
    _tls_files(tmp_path)
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(tmp_path / "passwd"), "hall-2", "s3cret"], check=True,
                   capture_output=True)
    (tmp_path / "acl").write_text("user hall-2\ntopic readwrite edgetwin/hall-2/#\n")
    b = Broker(tmp_path, "cafile {0}/ca.pem\ncertfile {0}/server.pem\nkeyfile {0}/server.key\nallow_anonymous false\n"
                         "password_file {0}/passwd\nacl_file {0}/acl\n".format(tmp_path))
    b.start()
    db = tmp_path / "g.db"
    store = LogStore(db)

    def cfg(password: str) -> mqtt_topics.MqttConfig:
        return mqtt_topics.MqttConfig(host="127.0.0.1", port=b.port, tls=True, ca=str(tmp_path / "ca.pem"),
                               username="hall-2", password=password, gateway="hall-2", prefix="edgetwin/hall-2")

    def login(c: paho.Client) -> None:
        c.tls_set(ca_certs=str(tmp_path / "ca.pem"))
        c.username_pw_set("hall-2", "s3cret")

    sub = pub = None
    try:
        bad = mqtt.Publisher(db, cfg("wrong"), poll_s=0.05, reconnect_max_s=1)
        bad.start()
        logs0, notes0 = fill(store, "n1", 1, 5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10 and not any("refused" in n for n in bad.notices()):
            time.sleep(0.05)
        assert not bad.connected and bad.counts["published"] == 0 and "authori" in bad.last_error.lower()
        bad.stop()
        sub = Subscriber(b.port, "edgetwin/hall-2/#", setup=login)
        pub = mqtt.Publisher(db, cfg("s3cret"), poll_s=0.05, reconnect_max_s=1)
        pub.start()
        logs, notes = fill(store, "n1", 6, 5)
        logs, notes = logs0 + logs, notes0 + notes  # what was committed while refused goes out too
        assert sub.wait(lambda: pub.counts["acked"] >= len(logs) + len(notes))
        got = sub.of("/alarm") + sub.of("/trip") + sub.of("/annotation")
        assert sorted(ids_of(got, "logs")) == logs and sorted(ids_of(got, "annotations")) == notes
        pub.stop()
        # a prefix the ACL does not allow: the broker refuses each publish (MQTT 5 PUBACK reason code); the
        # rows stay unacknowledged in the store, to go out at a later start
        other = mqtt_topics.MqttConfig(**dict(vars(cfg("s3cret")), prefix="edgetwin/elsewhere"))
        pub = mqtt.Publisher(db, other, poll_s=0.05, reconnect_max_s=1)
        pub.start()
        more, _ = fill(store, "n1", 11, 3)
        assert sub.wait(lambda: pub.counts["refused"] >= len(more))
        assert pub.counts["acked"] == 0 and "ACL" in pub.status()["last_error"]
        assert pub.outbox is not None and pub.outbox.marks["logs"] < min(more)
    finally:
        if pub is not None:
            pub.stop()
        if sub is not None:
            sub.close()
        store.close()
        b.stop()


def test_the_outbox_reads_committed_rows_only_and_keeps_marks_per_destination(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    store = LogStore(db)
    store.add_log("n1", 7, 1, 0, 1000, 2, ALARM % 1)  # before the destination was first seen
    a = store.outbox("mqtt://broker-a:1883/edgetwin/gw1")
    assert a.marks == {"logs": 1, "annotations": 0}  # a new destination starts at the store's end
    store.add_log("n1", 7, 2, 0, 1000, 2, ALARM % 2, commit=False)
    assert a.rows("logs", a.marks["logs"]) == []  # the gateway's open transaction is not the outbox's
    store.commit()
    store.add_log("n1", 7, 3, 0, 1000, 1, SAMPLE)
    store.add_log("n1", 7, 4, 0, 1000, 3, TRIP)
    assert [(r["id"], r["level"]) for r in a.rows("logs", 1)] == [(2, 2), (4, 3)]  # samples are not read
    a.ack("logs", [4], 1)  # 4 acknowledged ahead of 2
    a.close()
    a = store.outbox("mqtt://broker-a:1883/edgetwin/gw1")
    assert a.marks["logs"] == 1 and a.acked_above("logs") == {4}
    a.ack("logs", [2], 4)
    assert a.acked_above("logs") == set()
    b = store.outbox("mqtt://broker-b:1883/edgetwin/gw1")  # another broker: its own marks
    assert b.marks["logs"] == 4 and b.store_id == a.store_id
    a.close()
    b.close()
    store.close()


def test_another_plants_alarms_and_trips_carry_their_units_and_limits(tmp_path: Path, broker: Broker) -> None:
    # a plant that is not the simulator (tests/host/hallplant.py): its alarm and trip payloads are read by the
    # one grammar and carry what its description says of the point: the unit, the limit, the priority
    import hallplant

    desc = hallplant.desc()
    db = tmp_path / "g.db"
    store = LogStore(db)
    store.add_plant(desc)
    sub = Subscriber(broker.port)
    pub = publisher(db, broker.port)
    try:
        lines = [ln for ln in hallplant.lines(desc.hash) if " ALARM " in ln or " ACK " in ln or "->TRIPPED" in ln]
        for i, ln in enumerate(lines):
            store.add_log("hall", 7, i + 1, i, 1_796_018_400_000 + i, 3 if "->TRIPPED" in ln else 2, ln,
                          plant=desc.hash)
        store.add_log("sim", 7, 1, 0, 1_796_018_400_000, 2, ALARM % 1)  # the simulator's (no plant): as before
        assert sub.wait(lambda: len(sub.of("hall/alarm")) == 4 and len(sub.of("hall/trip")) == 1
                        and len(sub.of("sim/alarm")) == 1)
        hi, ack, lo, hihi = sorted(sub.of("hall/alarm"), key=lambda m: m["id"])
        assert (hi["machine"], hi["plant"], hi["machine_kind"], hi["signal"], hi["tag"], hi["value"], hi["number"],
                hi["unit"], hi["limit"], hi["priority"], hi["state"]) == (
            "AHU-1", "hall-3", "air handling unit", "SAT", "supply_temp", "27.0C", 27.0, "C", 24.0, 2, "RAISED")
        assert ack["verb"] == "ACK" and ack["by"] == "alice" and "by" not in hi
        assert (hihi["alarm_level"], hihi["limit"], hihi["priority"]) == ("HIHI", 30.0, 4)
        assert (lo["machine"], lo["unit"], lo["limit"], lo["number"]) == ("SILO-2", "m", 1.5, 1.48)
        t = sub.of("hall/trip")[0]
        assert (t["machine"], t["transition"], t["cause"], t["interlock"], t["tag"], t["alarm_level"], t["limit"],
                t["unit"], t["priority"]) == ("AHU-1", "RUNNING->TRIPPED", "HIHI_SAT", "HIHI_SAT", "supply_temp",
                                              "HIHI", 30.0, "C", 4)
        s = sub.of("sim/alarm")[0]
        assert (s["machine"], s["tag"], s["value"], s["number"], s["unit"]) == ("P-101", "vibration", "7.4mm/s", 7.4,
                                                                              "mm/s")
    finally:
        pub.stop()
        sub.close()
        store.close()
    assert mqtt_topics.classify("2026-11-30T06:00:00Z STATE SILO-2 RUNNING->TRIPPED trip=contact") == "trip"
    assert mqtt_topics.classify("2026-11-30T06:00:00Z STATE SILO-2 STOPPED->RUNNING run=on") is None
    assert mqtt_topics.classify("2026-11-30T06:00:00Z SILO-2 RUNNING L=2.00m") is None


def test_good_urls() -> None:
    assert mqtt_topics.parse_url("mqtt://broker.plant.lan") == (False, "broker.plant.lan", 1883)
    assert mqtt_topics.parse_url("mqtts://broker.plant.lan") == (True, "broker.plant.lan", 8883)
    assert mqtt_topics.parse_url("mqtt://[::1]:1884/") == (False, "::1", 1884)
    assert mqtt_topics.check_prefix("site-3/edgetwin/pump-hall") == "site-3/edgetwin/pump-hall"


def test_node_names_become_one_topic_level() -> None:
    assert mqtt_topics.topic_level("/dev/ttyUSB0") == "%2Fdev%2FttyUSB0"
    assert mqtt_topics.topic_level("a+b#c") == "a%2Bb%23c"
    assert mqtt_topics.topic_level("pump-room") == "pump-room"


@pytest.mark.parametrize("argv,word", [
    (["--mqtt", "http://127.0.0.1:1883"], "mqtt://"),
    (["--mqtt", "mqtt://"], "host"),
    (["--mqtt", "mqtt://127.0.0.1:99999"], "--mqtt"),
    (["--mqtt", "mqtt://127.0.0.1:port"], "--mqtt"),
    (["--mqtt", "mqtt://user:pw@127.0.0.1"], "credentials"),
    (["--mqtt", "mqtt://127.0.0.1/topic"], "--mqtt-prefix"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-prefix", "edgetwin/#"], "--mqtt-prefix"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-prefix", "a//b"], "--mqtt-prefix"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-gateway", "a/b"], "--mqtt-gateway"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-ca", "{T}/ca.pem"], "mqtts://"),
    (["--mqtt", "mqtts://127.0.0.1", "--mqtt-ca", "{T}/none.pem"], "none.pem"),
    (["--mqtt", "mqtts://127.0.0.1", "--mqtt-cert", "{T}/ca.pem"], "--mqtt-key"),
    (["--mqtt", "mqtts://127.0.0.1", "--mqtt-ca", "{T}/ca.pem"], "ca.pem"),  # not a PEM certificate
    (["--mqtt", "mqtts://127.0.0.1", "--mqtt-cert", "{T}/ca.pem", "--mqtt-key", "{T}/ca.pem"], "--mqtt-cert"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-password-file", "{T}/none.txt", "--mqtt-user", "u"], "none.txt"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-password-file", "{T}/ca.pem"], "--mqtt-user"),
    (["--mqtt-user", "u"], "--mqtt"),
])
def test_bad_mqtt_options_are_one_line_and_exit_2(argv: list[str], word: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ca.pem").write_text("x\n")
    before = sorted(os.listdir(tmp_path))
    rc = main(["gateway", "--port", "/dev/null", "--db", str(tmp_path / "g.db")]
              + [a.format(T=tmp_path) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgetwin gateway: error: ") and word in lines[0], err
    assert sorted(os.listdir(tmp_path)) == before  # nothing created


def test_edgetwin_gateway_mqtt_publishes_a_nodes_alarms_and_its_will(tmp_path: Path, broker: Broker) -> None:
    """The real command, a CPython node link on a pty sending alarm lines; then the gateway is SIGKILLed."""
    from shared import frame, frame_host
    from test_gateway_cli import NodeEnd, pty_pair

    sub = Subscriber(broker.port, "edgetwin/#")
    m, s, path = pty_pair()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--insecure", "--port", "pump-room=" + path, "--db",
                          str(tmp_path / "g.db"), "--mqtt", "mqtt://127.0.0.1:%d" % broker.port,
                          "--mqtt-gateway", "hall-2", "--status-every", "60"], cwd=str(ROOT), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        node = NodeEnd(m, board_id=b"pico-test")
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and len(sub.of("/alarm")) < 10:
            node.lk.poll(mqtt_ticks())
            if node.lk.established and sent < 10 and node.lk.free_slots():
                body = frame_host.pack_body(frame.LOG, ts=sent, level=2, text=ALARM % sent)
                if node.lk.send(frame.LOG, body):
                    sent += 1
            time.sleep(0.005)
        alarms = sub.of("/alarm")
        assert len(alarms) == 10, (p.poll(), alarms)
        assert sorted(a["text"] for a in alarms) == sorted(ALARM % i for i in range(10))
        assert all(a["gateway"] == "hall-2" and a["node"] == "pump-room" for a in alarms)
        assert len({a["id"] for a in alarms}) == 10
        assert sub.wait(lambda: any(st.get("online") for st in sub.of("hall-2/node/pump-room/status")))
        assert sub.of("hall-2/status")[-1]["online"] is True
        p.send_signal(signal.SIGKILL)  # a crash: the broker says so with the will
        p.wait(10)
        assert sub.wait(lambda: sub.of("hall-2/status")[-1]["online"] is False, timeout=10)
        assert sub.of("hall-2/status")[-1]["reason"] == "connection lost"
    finally:
        if p.poll() is None:
            p.kill()
        out, err = p.communicate(timeout=10)
        os.close(m)
        os.close(s)
        sub.close()
    assert b"mqtt: connected to 127.0.0.1:%d" % broker.port in out, out


def test_edgetwin_gateway_stores_while_the_broker_is_down_and_sends_it_when_back(tmp_path: Path, broker: Broker) -> None:
    """The real command started with its broker down: the node's alarms are stored at once (the serial loop
    does not wait on MQTT); when the broker comes, they all go out; SIGTERM then says "stopped" itself."""
    from shared import frame, frame_host
    from test_gateway_cli import NodeEnd, pty_pair

    broker.stop()
    m, s, path = pty_pair()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    status = tmp_path / "st.json"
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--insecure", "--port", "pump-room=" + path, "--db",
                          str(tmp_path / "g.db"), "--status", str(status), "--mqtt",
                          "mqtt://127.0.0.1:%d" % broker.port, "--mqtt-gateway", "hall-3"], cwd=str(ROOT), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sub = None
    try:
        node = NodeEnd(m, board_id=b"pico-test")

        def stored() -> int:
            try:
                return json.loads(status.read_text())["sessions"][0]["logs"]
            except (OSError, ValueError, KeyError, IndexError):
                return 0

        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and stored() < 10:
            node.lk.poll(mqtt_ticks())
            if node.lk.established and sent < 10 and node.lk.free_slots():
                if node.lk.send(frame.LOG, frame_host.pack_body(frame.LOG, ts=sent, level=2, text=ALARM % sent)):
                    sent += 1
            time.sleep(0.005)
        assert stored() == 10  # stored with no broker at all
        assert json.loads(status.read_text())["mqtt"]["connected"] is False
        broker.start()
        sub = Subscriber(broker.port, "edgetwin/hall-3/#")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and len(sub.of("/alarm")) < 10:  # paho retries after 1, 2, 4... s
            node.lk.poll(mqtt_ticks())
            time.sleep(0.01)
        assert sorted(a["text"] for a in sub.of("/alarm")) == sorted(ALARM % i for i in range(10))
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
        assert sub.wait(lambda: sub.of("hall-3/status") and sub.of("hall-3/status")[-1]["reason"] == "stopped")
        node_st = sub.of("hall-3/node/pump-room/status")[-1]
        assert node_st["online"] is False and node_st["why"] == "gateway stopped"
        assert b"mqtt: cannot reach the broker" in out and b"mqtt: connected to" in out, out
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=10)
        os.close(m)
        os.close(s)
        if sub is not None:
            sub.close()


def mqtt_ticks() -> int:
    from host import session

    return session.ticks_ms()
