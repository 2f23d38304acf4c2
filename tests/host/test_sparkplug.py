"""Sparkplug B out (host/sparkplug.py, host/sparkplug_metrics.py, docs/MQTT.md 7) against a real broker.

A primary host application written here with paho and pysparkplug (the library the edge node encodes with)
follows one Mosquitto: it publishes its STATE (online, retained; offline when it goes) and records every
birth, death and data message. The edge node publishes a store that a gateway session fills with a node's
samples, alarms, trips and annotations (the plant description of examples/pump_skid.json, not the
simulator's). Mid-run the host goes away and comes back, then the broker is stopped and started again, and
lines arrive late as a node's spill ring sends them after a link cut. At the end every alarm, trip and
annotation row is in the host's DDATA exactly once, every sample value that changed beyond its deadband
too, with the line's own time; what waited is flagged is_historical and nothing live is; births carry the
description's units and limits as properties; seq and bdSeq follow the specification; a rebirth request
is answered.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from pysparkplug import DBirth, DData, DataType, Metric, NBirth, NCmd, NDeath

from host import plantdesc, sparkplug_metrics as spm
from host.mqtt_topics import MqttConfig
from host.sparkplug import SparkplugConfig, SparkplugNode, check_id
from host.store import LogStore

ROOT = Path(__file__).resolve().parents[2]
DESC = ROOT / "examples" / "pump_skid.json"
GROUP, EDGE, HOST_ID = "plant-a", "pump-hall", "scada-1"


def _stamp(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms // 1000))


def test_the_metrics_come_from_the_description_with_units_and_limits() -> None:
    desc = plantdesc.load(DESC)
    defs = {d.name: d for d in spm.device_defs(desc)}
    p = defs["P-1/discharge_press"]
    props = {k: v for k, _t, v in p.properties}
    assert p.datatype == DataType.DOUBLE and props["engUnit"] == "bar" and props["limitHIHI"] == 9.0
    assert (props["engLow"], props["engHigh"], props["deadband"]) == (0.0, 10.0, 0.2)
    assert {"P-1/discharge_press/alarm/HI", "P-1/discharge_press/alarm/HIHI", "P-1/discharge_press/alarm/BAD",
            "P-1/state", "P-1/trip", spm.ANNOTATION, spm.ANNOTATION_ID} <= set(defs)
    assert not any("P-101" in n for n in defs)  # nothing of the simulator's plant
    t = "2026-11-30T06:44:58Z"
    ups = spm.line_updates(t + " P-1 RUNNING P=6.1bar I=? T=61.0C", desc)
    assert [(u.name, u.value, u.good) for u in ups] == [("P-1/state", "RUNNING", True),
                                                        ("P-1/discharge_press", 6.1, True),
                                                        ("P-1/motor_current", None, False),
                                                        ("P-1/bearing_temp", 61.0, True)]
    ups = spm.line_updates(t + " ALARM HIHI P-1 discharge_press 9.3bar prio=4 RAISED", desc)
    assert [(u.name, u.value) for u in ups] == [("P-1/discharge_press/alarm/HIHI", "RAISED")]
    ups = spm.line_updates(t + " STATE P-1 RUNNING->TRIPPED interlock=HIHI_PRESS", desc)
    assert [(u.name, u.value) for u in ups] == [("P-1/state", "TRIPPED"), ("P-1/trip", "interlock=HIHI_PRESS")]
    for junk in ("", "NODE heap=1", t + " X-9 RUNNING P=1.0bar", t + " ALARM HI P-1 no_such 1.0bar prio=1 RAISED"):
        assert spm.line_updates(junk, desc) == []
    for bad in ("", "a/b", "a+b", "#", "x" * 65):
        with pytest.raises(ValueError):
            check_id("--sparkplug", bad)


class Host:
    """A Sparkplug 3.0 primary host application: STATE online at each connect (retained), offline as its
    will and when it leaves; it records every message of the group, decoded with the births' aliases."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.msgs: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.client: paho.Client | None = None
        self.hung: paho.Client | None = None

    def state(self, online: bool) -> bytes:
        return json.dumps({"online": online, "timestamp": int(time.time() * 1000)}).encode()

    def start(self, keepalive: int = 60) -> None:
        ready = threading.Event()
        c = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2, client_id=HOST_ID,
                        protocol=paho.MQTTv5)
        ts = int(time.time() * 1000)  # 3.0: the will's timestamp is the online STATE's
        c.will_set("spBv1.0/STATE/" + HOST_ID, json.dumps({"online": False, "timestamp": ts}), qos=1, retain=True)
        c.reconnect_delay_set(1, 1)

        def on_connect(client, u, f, rc, p):
            client.subscribe("spBv1.0/%s/#" % GROUP, qos=0)  # first subscribe, then say online (3.0)
            client.publish("spBv1.0/STATE/" + HOST_ID, json.dumps({"online": True, "timestamp": ts}), qos=1,
                           retain=True)
            ready.set()

        def on_message(client, u, m):
            with self.lock:
                self.msgs.append((m.topic, m.payload))

        c.on_connect = on_connect
        c.on_message = on_message
        c.connect_async("127.0.0.1", self.port, keepalive=keepalive)
        c.loop_start()
        self.client = c
        assert ready.wait(10)

    def hang(self) -> None:
        """The host hangs: it reads nothing more and sends no ping; the broker publishes its will 1.5
        keep-alives later, and what it sent the host meanwhile is lost."""
        assert self.client is not None
        self.client.loop_stop()
        self.hung = self.client
        self.client = None

    def leave(self) -> None:
        assert self.client is not None
        self.client.publish("spBv1.0/STATE/" + HOST_ID, self.state(False), qos=1, retain=True).wait_for_publish(5)
        self.client.disconnect()
        self.client.loop_stop()
        self.client = None

    def rebirth(self) -> None:
        assert self.client is not None
        cmd = NCmd(timestamp=int(time.time() * 1000),
                   metrics=(Metric(timestamp=None, name="Node Control/Rebirth", datatype=DataType.BOOLEAN,
                                   value=True),))
        self.client.publish("spBv1.0/%s/NCMD/%s" % (GROUP, EDGE), cmd.encode(include_dtypes=True), qos=0)

    def kinds(self) -> list[str]:
        with self.lock:
            return [t.split("/")[2] for t, _ in self.msgs]

    def decoded(self) -> list[tuple[str, str, object]]:
        """(type, device, payload object) in arrival order; DDATA names filled from the device's DBIRTH."""
        births: dict[str, DBirth] = {}
        out = []
        with self.lock:
            msgs = list(self.msgs)
        for topic, raw in msgs:
            parts = topic.split("/")
            kind, dev = parts[2], (parts[4] if len(parts) > 4 else "")
            if kind == "NBIRTH":
                out.append((kind, dev, NBirth.decode(raw)))
            elif kind == "NDEATH":
                out.append((kind, dev, NDeath.decode(raw)))
            elif kind == "DBIRTH":
                births[dev] = DBirth.decode(raw)
                out.append((kind, dev, births[dev]))
            elif kind == "DDATA":
                out.append((kind, dev, DData.decode(raw, birth=births[dev])))
            elif kind == "DDEATH":
                out.append((kind, dev, None))
        return out

    def data(self) -> list[Metric]:
        return [m for k, _d, p in self.decoded() if k == "DDATA" for m in p.metrics]

    def wait(self, pred, timeout: float = 30.0) -> bool:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if pred():
                return True
            time.sleep(0.05)
        return pred()


class Plant:
    """What a gateway session stores for node `pump-room` running examples/pump_skid.json: a sample a second
    (each at its own second, so a value and its time name one line), an alarm every 4th, a trip every 10th,
    an annotation every 5th; each row remembers the phase of the run it was stored in."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.desc = plantdesc.load(DESC)
        store.add_plant(self.desc)
        store.set_node_plant("pump-room", self.desc.hash)
        self.t0 = int(time.time()) * 1000
        self.k = 0
        self.seq = 0
        self.rows: list[tuple[str, int, str]] = []  # (text, level, phase)
        self.notes: list[int] = []
        self.press = 6.0

    def add(self, n: int, phase: str, late_s: int = 0) -> None:
        for _ in range(n):
            self.k += 1
            wall = self.t0 + self.k * 1000 - late_s * 1000
            t = _stamp(wall)
            # the pressure steps 0.5 bar (beyond its 0.2 deadband) except every third sample, which repeats
            if self.k % 3:
                self.press = round(self.press + (0.5 if self.k % 2 else -0.5), 1)
            lines = [(1, "%s P-1 RUNNING P=%.1fbar I=%.1fA T=60.0C" % (t, self.press, 20 + self.k % 4))]
            if self.k % 4 == 0:
                lines.append((2, "%s ALARM HI P-1 discharge_press 7.8bar prio=3 RAISED" % t))
            if self.k % 10 == 0:
                lines.append((3, "%s STATE P-1 RUNNING->TRIPPED interlock=HIHI_PRESS" % t))
            for level, text in lines:
                self.seq += 1
                self.store.add_log("pump-room", 7, self.seq, self.seq, wall, level, text, commit=False,
                                   plant=self.desc.hash)
                self.rows.append((text, level, phase))
            if self.k % 5 == 0:
                self.notes.append(self.store.add_annotation("pump-room", wall, wall + 500,
                                                            "P-1: discharge pressure %.1f bar" % self.press,
                                                            True, 9, commit=False))
        self.store.commit()

    def expected(self) -> dict[tuple[str, int, object], str]:
        """(metric, time, value) -> phase, for every update the host must get once: each alarm and state
        line's, each sample value that moved beyond its deadband (or changed, for text)."""
        last: dict[str, object] = {}
        out = {}
        for text, level, phase in self.rows:
            for u in spm.line_updates(text, self.desc):
                if level == 1 and u.name in last:
                    prev = last[u.name]
                    if isinstance(u.value, float) and isinstance(prev, float):
                        if abs(u.value - prev) <= self.desc.machine("P-1").signal(u.name.split("/")[1]).deadband:
                            continue
                    elif prev == u.value:
                        continue
                last[u.name] = u.value
                out[(u.name, u.ts, u.value)] = phase
        return out


def test_a_primary_host_gets_every_value_once_through_outages(tmp_path: Path) -> None:
    from test_mqtt import Broker

    broker = Broker(tmp_path)
    broker.start()
    store = LogStore(tmp_path / "g.db")
    plant = Plant(store)
    host = Host(broker.port)
    node = None

    def caught_up() -> bool:
        return host.wait(lambda: len([m for m in host.data() if m.name.startswith("P-1/")]) >= len(plant.expected())
                         and len([m for m in host.data() if m.name == spm.ANNOTATION_ID]) >= len(plant.notes), 40)

    try:
        host.start()
        cfg = SparkplugConfig(MqttConfig(host="127.0.0.1", port=broker.port, gateway=EDGE), GROUP, EDGE, HOST_ID)
        node = SparkplugNode(tmp_path / "g.db", cfg, poll_s=0.05, reconnect_max_s=1, host_wait_s=3)
        node.start()
        node.node_state("pump-room", True)
        assert host.wait(lambda: "DBIRTH" in host.kinds()), (host.kinds(), node.notices(), node.status())
        plant.add(12, "live")
        assert caught_up(), node.status()

        host.leave()  # the host goes: the edge node dies and holds the data
        assert host.wait(lambda: not node.born and not node.host_online)
        plant.add(10, "held")
        time.sleep(0.3)
        host.start()
        assert caught_up(), node.status()

        # the broker hangs, then dies (SIGKILL), while rows stream in: what it took and never handed on (the
        # edge node's QoS 0 messages, in its socket) is sent again
        stream = threading.Thread(target=lambda: [plant.add(1, "stream") or time.sleep(0.02) for _ in range(40)])
        stream.start()
        time.sleep(0.2)
        broker.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.6)
        broker.proc.kill()
        broker.proc.wait()
        broker.proc = None
        stream.join()
        plant.add(10, "held")
        time.sleep(0.3)
        broker.start()
        assert caught_up(), node.status()

        plant.add(4, "late", late_s=600)  # a node's spill ring, sent after a link cut: ten minutes late
        plant.add(3, "live")
        assert caught_up(), node.status()

        n_births = host.kinds().count("NBIRTH")
        host.rebirth()
        assert host.wait(lambda: host.kinds().count("NBIRTH") == n_births + 1)
        plant.add(2, "live")  # a rebirth is not an outage: what follows is live
        assert caught_up(), node.status()
    finally:
        if node is not None:
            node.stop()
        time.sleep(0.3)
        if host.client is not None:
            host.leave()
        store.close()
        broker.stop()

    got = host.data()
    want = plant.expected()
    seen = [(m.name, m.timestamp, m.value) for m in got if m.name.startswith("P-1/")]
    for key in want:  # exactly once each, with the line's own time
        assert seen.count(key) == 1, (key, seen.count(key))
    assert len(seen) == len(want), sorted(set(seen) - set(want))[:5]
    # what waited (the host or the broker away, a late line) is historical, what came live is not
    flags = {(m.name, m.timestamp, m.value): m.is_historical for m in got if m.name.startswith("P-1/")}
    wrong = [(k, phase) for k, phase in want.items() if phase != "stream" and flags[k] != (phase != "live")]
    assert not wrong, wrong[:5]
    assert sum(1 for p in want.values() if p != "live") >= 40
    ids = [m.value for m in got if m.name == spm.ANNOTATION_ID]
    assert sorted(ids) == plant.notes and len(set(ids)) == len(ids)
    # births: units and limits as properties; the NBIRTH's bdSeq is its NDEATH's; seq counts every message
    with host.lock:
        raws = list(host.msgs)
    dbirth_raw = next(r for t, r in raws if "/DBIRTH/" in t)
    props = {m.name: spm.read_properties(m) for m in spm.decode_pb(dbirth_raw).metrics}
    assert props["P-1/discharge_press"]["engUnit"] == "bar" and props["P-1/discharge_press"]["limitHIHI"] == 9.0
    assert props["P-1/bearing_temp"]["engHigh"] == 200.0
    seqs, bd = [], None
    for kind, _dev, p in host.decoded():
        if kind == "NBIRTH":
            assert p.seq == 0
            bd = next(m.value for m in p.metrics if m.name == "bdSeq")
            seqs = [0]
        elif kind == "NDEATH":
            assert p.bd_seq_metric.value == bd
        elif kind in ("DBIRTH", "DDATA"):
            seqs.append(p.seq)
            assert seqs[-1] == (seqs[-2] + 1) % 256, seqs[-5:]
    kinds = host.kinds()
    assert kinds.count("NBIRTH") >= 4 and kinds[-1] == "NDEATH", kinds  # born again after each outage; a clean stop
    print("SPARKPLUG-OUTAGES values=%d historical=%d notes=%d births=%d messages=%d" % (
        len(want), sum(1 for p in want.values() if p != "live"), len(ids), kinds.count("NBIRTH"), len(kinds)))


def test_edgetwin_gateway_sparkplug_and_opcua_with_a_node_on_a_pty(tmp_path: Path) -> None:
    """The real command with --plant, --sparkplug, --sparkplug-host and --opcua: a CPython node link on a pty
    sends its PLANT line, samples and an alarm; its link is cut (DDEATH), then it sends the lines its spill
    ring kept (flagged spilled, with their old times: historical) and live ones again (DBIRTH, live). An
    OPC UA client reads the latest reading with its unit from the same gateway."""
    import asyncio
    import os
    import re
    import subprocess
    import sys

    from asyncua import Client

    from host import session as hsession
    from shared import frame, frame_host
    from test_gateway_cli import NodeEnd, pty_pair
    from test_mqtt import Broker

    broker = Broker(tmp_path)
    broker.start()
    host = Host(broker.port)
    host.start()
    desc = plantdesc.load(DESC)
    m, s, path = pty_pair()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--insecure", "--port", "pump-room=" + path, "--db",
                          str(tmp_path / "g.db"), "--plant", str(DESC), "--peer-timeout", "1",
                          "--mqtt", "mqtt://127.0.0.1:%d" % broker.port, "--mqtt-gateway", EDGE,
                          "--sparkplug", GROUP, "--sparkplug-host", HOST_ID, "--opcua", "opc.tcp://127.0.0.1:0",
                          "--status-every", "60"], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
    reader.start()
    node = NodeEnd(m, board_id=b"pico-test")
    n = [0]

    def send(level: int, text: str, wall: int, flags: int = 0) -> None:
        day, ms = hsession.wall_split(wall)
        body = frame_host.pack_body(frame.LOG, ts=n[0], level=level, flags=flags, boot=1, lseq=n[0] + 1, day=day,
                                    ms=ms, text=text)
        while not (node.lk.established and node.lk.free_slots() and node.lk.send(frame.LOG, body)):
            node.lk.poll(hsession.ticks_ms())
            time.sleep(0.005)
        n[0] += 1

    def pump(pred, timeout: float = 30.0) -> bool:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout and not pred():
            node.lk.poll(hsession.ticks_ms())
            time.sleep(0.01)
        return pred()

    try:
        now = int(time.time() * 1000)
        send(0, "%s PLANT name=%s hash=%s machines=1 signals=3" % (_stamp(now), desc.name, desc.hash), now)
        assert pump(lambda: "DBIRTH" in host.kinds()), (host.kinds(), lines)  # rows before it would be backlog
        for i in range(3):
            send(1, "%s P-1 RUNNING P=%.1fbar I=20.0A T=60.0C" % (_stamp(now + i * 1000), 6.0 + i), now + i * 1000)
        send(2, "%s ALARM HI P-1 discharge_press 7.8bar prio=3 RAISED" % _stamp(now + 3000), now + 3000)
        assert pump(lambda: len(host.data()) >= 7), (host.kinds(), lines)
        cut = int(time.time() * 1000)
        time.sleep(2.5)  # the link is cut: no frame for longer than --peer-timeout
        assert host.wait(lambda: "DDEATH" in host.kinds(), 10), host.kinds()
        for i in range(3):  # what the spill ring kept meanwhile, sent first when the link is back
            w = cut + 500 + i * 500
            send(1, "%s P-1 RUNNING P=%.1fbar I=21.0A T=61.0C" % (_stamp(w), 3.0 + i), w, flags=frame.LG_SPILLED)
        live = int(time.time() * 1000) + 2000
        send(1, "%s P-1 RUNNING P=8.2bar I=22.0A T=62.0C" % _stamp(live), live)
        assert pump(lambda: any(m.name == "P-1/discharge_press" and m.value == 8.2 for m in host.data())), \
            (host.kinds(), lines)
        url = next(re.search(r"opc\.tcp://\S+", ln).group(0) for ln in lines if "opcua: serving" in ln)

        async def read() -> tuple:
            c = Client(url)
            async with c:
                v = c.get_node("ns=2;s=%s/pump-room/P-1/discharge_press" % EDGE)
                eu = await (await v.get_child("0:EngineeringUnits")).read_value()
                for _ in range(50):  # the view polls the store every second
                    if await v.read_value() == 8.2:
                        break
                    await asyncio.sleep(0.2)
                kids = await c.get_node("ns=2;s=%s/pump-room" % EDGE).get_children()
                names = {(await k.read_browse_name()).Name for k in kids}
                return (await v.read_value()), eu.DisplayName.Text, names

        # the node's own machine only: never the simulator's plant while it had not said what it runs yet
        assert asyncio.run(read()) == (8.2, "bar", {"Online", "Board", "LatestAnnotation", "P-1"})
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        err = p.stderr.read()
        os.close(m)
        os.close(s)
        if host.client is not None:
            host.leave()
        broker.stop()
    assert p.returncode == 0 and "Traceback" not in err, err
    press = [(m.value, m.is_historical) for m in host.data() if m.name == "P-1/discharge_press"]
    assert press == [(6.0, False), (7.0, False), (8.0, False), (3.0, True), (4.0, True), (5.0, True), (8.2, False)]
    kinds = host.kinds()
    assert kinds.index("DDEATH") < len(kinds) - 1 - kinds[::-1].index("DBIRTH"), kinds  # born again after the cut
    births = [p for k, _d, p in host.decoded() if k == "DBIRTH"]
    assert births and all({m.name.split("/")[0] for m in b.metrics} == {"P-1", "annotation"} for b in births)
    assert kinds[-1] == "NDEATH", kinds  # SIGTERM: a clean stop says so itself
    out = "".join(lines)
    assert "sparkplug: born as %s/%s" % (GROUP, EDGE) in out and "Sparkplug B edge node" in out, out


def test_a_host_that_vanishes_gets_what_it_missed_again(tmp_path: Path) -> None:
    """A primary host that hangs (no goodbye: the broker publishes its will 1.5 keep-alives later) loses
    what the broker sent it meanwhile; its will tells the edge node, which sends the last host_replay_s
    again, flagged historical, when the host is back: every value arrives, a repeat carries its own time."""
    from test_mqtt import Broker

    broker = Broker(tmp_path)
    broker.start()
    store = LogStore(tmp_path / "g.db")
    plant = Plant(store)
    host = Host(broker.port)
    node = None
    try:
        host.start(keepalive=2)
        cfg = SparkplugConfig(MqttConfig(host="127.0.0.1", port=broker.port, gateway=EDGE), GROUP, EDGE, HOST_ID)
        node = SparkplugNode(tmp_path / "g.db", cfg, poll_s=0.05, reconnect_max_s=1, host_wait_s=3,
                             host_replay_s=20)
        node.start()
        node.node_state("pump-room", True)
        assert host.wait(lambda: "DBIRTH" in host.kinds())
        plant.add(6, "live")
        assert host.wait(lambda: len(host.data()) >= 6)
        host.hang()
        while node.host_online:  # rows keep coming until the will arrives
            plant.add(1, "lost")
            time.sleep(0.1)
        host.start()
        want = plant.expected()
        assert host.wait(lambda: set(want) <= {(m.name, m.timestamp, m.value) for m in host.data()}), \
            (len(want), node.status())
    finally:
        if node is not None:
            node.stop()
        if host.client is not None:
            host.leave()
        if host.hung is not None:
            host.hung.disconnect()
        store.close()
        broker.stop()
    got = [(m.name, m.timestamp, m.value, m.is_historical) for m in host.data() if m.name.startswith("P-1/")]
    lost = [k for k, phase in want.items() if phase == "lost"]
    assert len(lost) >= 10
    again = [g for g in got if (g[0], g[1], g[2]) in lost]
    assert again and all(g[3] for g in again)  # what it missed came back, historical
    assert {(g[0], g[1], g[2]) for g in got} == set(want)  # nothing else, each with its own time
    print("SPARKPLUG-VANISHED values=%d after_the_hang=%d received=%d repeats=%d" % (
        len(want), len(lost), len(got), len(got) - len(set((g[0], g[1], g[2]) for g in got))))


@pytest.mark.parametrize("argv,word", [
    (["--sparkplug", "plant-a"], "--mqtt"),
    (["--sparkplug-host", "scada-1"], "--sparkplug"),
    (["--mqtt", "mqtt://127.0.0.1", "--sparkplug", "a/b"], "--sparkplug"),
    (["--mqtt", "mqtt://127.0.0.1", "--sparkplug", ""], "--sparkplug"),
    (["--mqtt", "mqtt://127.0.0.1", "--sparkplug", "g", "--sparkplug-host", "x#"], "--sparkplug-host"),
    (["--mqtt", "mqtt://127.0.0.1", "--mqtt-gateway", "a+b", "--sparkplug", "g"], "--mqtt-gateway"),
    (["--opcua-user", "u"], "--opcua"),
    (["--opcua", "http://127.0.0.1:4840"], "opc.tcp://"),
    (["--opcua", "opc.tcp://0.0.0.0:4840"], "reachable from other machines"),
])
def test_bad_sparkplug_and_opcua_options_are_one_line_and_exit_2(argv: list[str], word: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from host.cli import main

    rc = main(["gateway", "--port", "/dev/null", "--db", str(tmp_path / "g.db")] + argv)
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgetwin gateway: error: ") and word in lines[0], err
    assert not list(tmp_path.iterdir())  # nothing created


def test_an_opcua_port_in_use_is_one_line_and_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import socket

    from host.cli import main
    from test_gateway_cli import pty_pair

    m, s, path = pty_pair()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        rc = main(["gateway", "--insecure", "--port", path, "--db", str(tmp_path / "g.db"), "--quiet", "--seconds", "5",
                   "--opcua", "opc.tcp://127.0.0.1:%d" % taken.getsockname()[1]])
    finally:
        taken.close()
        os.close(m)
        os.close(s)
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out + err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--opcua" in lines[0] and "cannot listen" in lines[0], err
    assert not list(tmp_path.iterdir())  # the new store is removed again


def test_a_broker_that_hides_our_own_data_is_said_and_nothing_is_marked(tmp_path: Path) -> None:
    """An ACL that lets the edge node publish but not read its own DDATA back (Mosquitto grants the
    subscription and delivers nothing): one notice says so, no row counts as delivered (the mark stays), and
    the rows wait in the store."""
    from test_mqtt import Broker

    from host.store import Outbox

    (tmp_path / "acl").write_text("topic write spBv1.0/#\ntopic read spBv1.0/+/NCMD/#\n")
    broker = Broker(tmp_path, "allow_anonymous true\nacl_file %s\n" % (tmp_path / "acl"))
    broker.start()
    store = LogStore(tmp_path / "g.db")
    plant = Plant(store)
    cfg = SparkplugConfig(MqttConfig(host="127.0.0.1", port=broker.port, gateway=EDGE), GROUP, EDGE)
    node = SparkplugNode(tmp_path / "g.db", cfg, poll_s=0.05, stall_s=1.0)
    notes: list[str] = []
    try:
        node.start()
        node.node_state("pump-room", True)
        plant.add(5, "live")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10 and not any("handed back none" in n for n in notes):
            notes += node.notices()
            time.sleep(0.05)
        time.sleep(0.5)
        sent = node.counts["rows_sent"]
    finally:
        node.stop()
        notes += node.notices()
        broker.stop()
    assert sum("handed back none of our data for 1 s" in n and "DDATA" in n for n in notes) == 1, notes
    assert sent >= 5 and node.counts["rows_confirmed"] == 0
    ob = Outbox(tmp_path / "g.db", cfg.dest)
    try:
        assert ob.marks["logs"] == 0  # nothing counted as delivered: the next start sends it all again
    finally:
        ob.close()
        store.close()


def test_a_real_nodes_spilled_lines_go_out_historical(tmp_path: Path) -> None:
    """The node itself (firmware/node.py on the MicroPython unix port, the built-in simulator's plant) behind
    `edgetwin gateway --sparkplug --sparkplug-host`: its link is unplugged for a few seconds (DDEATH), the node
    keeps logging and its lines wait in its flash spill ring; plugged back (DBIRTH), they arrive flagged as
    spilled, and every one that makes a metric reaches the primary host marked historical with its own time."""
    import gwkit
    from test_mqtt import Broker

    broker = Broker(tmp_path)
    broker.start()
    host = Host(broker.port)
    host.start()
    node = gw = None
    db = tmp_path / "g.db"
    try:
        node = gwkit.VNode("rp2040_pico", tmp_path / "fs", tmp_path / "node",
                           {"tick_ms": 200, "sample_every": 3, "report_ms": 700}, heap=2 * 196608)
        gw = gwkit.GatewayProc(["room=" + str(tmp_path / "node")], db, tmp_path / "st.json",
                               extra=["--mqtt", "mqtt://127.0.0.1:%d" % broker.port, "--mqtt-gateway", EDGE,
                                      "--sparkplug", GROUP, "--sparkplug-host", HOST_ID, "--peer-timeout", "1"])
        assert host.wait(lambda: "DBIRTH" in host.kinds() and len(host.data()) >= 20, 60), host.kinds()[:5]
        node.ip.unplug()  # the cable is pulled: the node logs on, into its spill ring
        assert host.wait(lambda: "DDEATH" in host.kinds(), 20), host.kinds()[-5:]
        time.sleep(4)
        node.ip.replug()
        gw.wait_status(lambda st: st["sessions"][0].get("spilled", 0) > 0, 60, "spilled lines stored")
        births = host.kinds().count("DBIRTH")
        assert host.wait(lambda: host.kinds().count("DBIRTH") == births and len(host.data()) > 0, 5)
        time.sleep(2)  # what the gateway stored goes out (the edge node reads the store every 0.2 s)
    finally:
        if gw is not None:
            assert gw.stop() == 0
        if node is not None:
            node.close()
        if host.client is not None:
            host.leave()
        broker.stop()
    store = LogStore(db, readonly=True)
    try:
        with store._lock:
            spilled = [(r[0], r[1]) for r in store._db.execute(
                "SELECT text, plant FROM logs WHERE flags & 1 AND level > 0 ORDER BY id").fetchall()]
        desc = store.plant(None)
    finally:
        store.close()
    assert len(spilled) >= 5, len(spilled)
    from host import plantlines

    got = {(m.name, m.timestamp, m.value): m.is_historical for m in host.data()}
    ups = [(plantlines.parse(text).kind, u) for text, _p in spilled for u in spm.line_updates(text, desc)]
    # each alarm and state line is an event: every one of them went out, historical
    events = [(u.name, u.ts, u.value) for kind, u in ups if kind != "sample"]
    assert all(got.get(k) is True for k in events), [k for k in events if got.get(k) is not True][:5]
    # a sample's values go out when they changed: those that did are historical too
    sent = [got[k] for kind, u in ups if kind == "sample" for k in [(u.name, u.ts, u.value)] if k in got]
    assert len(sent) >= 5 and all(sent), (len(sent), sum(sent))
    print("SPARKPLUG-SPILL spilled=%d events=%d sample_values_sent=%d" % (len(spilled), len(events), len(sent)))
    kinds = host.kinds()
    assert kinds.index("DDEATH") < len(kinds) - 1 - kinds[::-1].index("DBIRTH")
