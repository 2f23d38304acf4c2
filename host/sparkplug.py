"""Sparkplug B out: the gateway as a Sparkplug edge node, each of its nodes a device (docs/MQTT.md, Sparkplug).

The contract, after Eclipse Sparkplug 3.0:

- Topics ``spBv1.0/<group>/<TYPE>/<edge>[/<device>]``: the gateway is the edge node (``--mqtt-gateway``), a node
  is a device (its name made one topic level). NBIRTH (seq 0, the bdSeq of this connection's will, the
  ``Node Control/Rebirth`` metric) then a DBIRTH per device: every metric of its plant description with its
  datatype, alias, current value and properties (host/sparkplug_metrics.py). Then DDATA by alias, on change
  (a signal's deadband), with each value's own time. DDEATH when a node's link goes away, NDEATH as the will
  (QoS 1) and at a clean stop. seq counts every message after NBIRTH modulo 256; bdSeq grows with each
  connection and is kept in the store across restarts.
- The store is the outbox (host/store.Outbox with the samples in): rows are read after a mark, in id order.
  Sparkplug sends data at QoS 0, which the broker never acknowledges, so the edge node subscribes to its own
  DDATA and counts a row delivered when the broker hands its message back (one connection, one order: every
  message before it was handed on too). What was sent and not handed back when the broker went away is sent
  again after the next birth.
- With a primary host application (``--sparkplug-host ID``) nothing is born, so nothing is sent, until its
  STATE says online; when it says offline the edge node publishes NDEATH, disconnects and waits again. After
  losing the broker it waits for a STATE newer than the one it knew (the host re-subscribed) or, failing that
  within ``host_wait_s``, trusts the retained one.
- Rows that waited (stored before this birth, lines a node kept in its spill ring while its link was down,
  or a line more than ``late_ms`` older than now) go out marked ``is_historical`` with their original
  timestamps, in order; so does a value older than one already sent live for its metric.
- A rebirth request (NCMD ``Node Control/Rebirth`` true) is answered with NBIRTH and every DBIRTH.

Threads: paho's network thread only queues what it hears; one publisher thread owns the outbox connection,
the births and the sequence numbers. The gateway's loop calls ``node_state`` and ``notices``, which never block.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as paho
from pysparkplug import DataType, DBirth, DData, DDeath, Metric, NBirth, NCmd, NDeath

from host import sparkplug_metrics as spm
from host.mqtt import drain, login
from host.mqtt_topics import MqttConfig, topic_level
from host.store import SPARKPLUG_ROWS, Outbox
from shared.frame import LG_SPILLED

NAMESPACE = "spBv1.0"
REBIRTH = "Node Control/Rebirth"
BDSEQ = "bdSeq"


@dataclass
class SparkplugConfig:
    """The broker (as for --mqtt), the Sparkplug group, this edge node's id and the primary host's, if any."""

    broker: MqttConfig
    group: str
    edge: str
    host_id: str | None = None

    @property
    def dest(self) -> str:
        """The outbox's name for this destination (never the credentials)."""
        b = self.broker
        return "sparkplug%s://%s:%d/%s/%s" % ("s" if b.tls else "", b.host, b.port, self.group, self.edge)

    def topic(self, kind: str, device: str | None = None) -> str:
        t = "%s/%s/%s/%s" % (NAMESPACE, self.group, kind, self.edge)
        return t if device is None else t + "/" + device


def check_id(what: str, value: str) -> str:
    """A Sparkplug group, edge node or host id: UTF-8, not empty, none of ``/ + #`` (ValueError else)."""
    if not value or any(c in value for c in "/+#") or len(value.encode()) > 64 or not value.isprintable():
        raise ValueError("%s %r: 1..64 printable characters, none of / + #" % (what, value))
    return value


@dataclass
class Device:
    """One node as a Sparkplug device: its description, metrics and aliases, and its current values."""

    name: str
    desc: object  # host.plantdesc.PlantDesc; None until the node says what it runs
    defs: dict = field(default_factory=dict)  # metric name -> MetricDef
    current: dict = field(default_factory=dict)  # metric name -> (value, ts, good)
    born: bool = False
    up: bool = False

    @property
    def id(self) -> str:
        return topic_level(self.name)


@dataclass
class Sent:
    """A row in flight: the message that carries it (None: the row makes none) and how to undo its changes."""

    src: str
    row_id: int
    payload: bytes | None
    undo: list = field(default_factory=list)  # (metric key, previous chain value or None)
    confirmed: bool = False
    sent_at: float = 0.0  # time.monotonic() when it was published


class SparkplugNode:
    """Publishes the store's rows as a Sparkplug B edge node; see the module docstring. Construct, start(),
    feed node_state() from the gateway's loop, stop() at the end."""

    name = "sparkplug"

    # window: messages not handed back yet, at most; below 256 so two in flight never share a seq
    def __init__(self, db: str | Path, config: SparkplugConfig, window: int = 128, poll_s: float = 0.2,
                 reconnect_max_s: float = 30.0, host_wait_s: float = 10.0, late_ms: int = 30_000,
                 host_replay_s: float = 90.0, linger_s: float = 2.0, stall_s: float = 15.0) -> None:
        self.config = config
        self.db = Path(db)
        self.window = window
        self.poll_s = poll_s
        self.reconnect_max_s = reconnect_max_s
        self.host_wait_s = host_wait_s
        self.host_replay_s = host_replay_s
        self.late_ms = late_ms
        self.linger_s = linger_s
        self.stall_s = stall_s
        self.counts = {"messages": 0, "rows_sent": 0, "rows_confirmed": 0, "historical": 0, "births": 0,
                       "rebirth_requests": 0, "connects": 0, "disconnects": 0}
        self.connected = False
        self.born = False
        self.host_online = config.host_id is None
        self.last_error = ""
        self.bdseq = 0
        self.seq = 0
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._notices: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.outbox: Outbox | None = None
        self.devices: dict[str, Device] = {}
        self._alias: dict[tuple[str, str], int] = {}  # (device or "", metric) -> alias, unique on the edge node
        self._cursor: dict[str, int] = {}
        self._inflight: collections.deque[Sent] = collections.deque()
        self._by_payload: dict[bytes, Sent] = {}
        self._chain: dict[tuple[str, str], tuple] = {}  # (device, metric) -> (value, good) last sent: on change
        self._live_ts: dict[tuple[str, str], int] = {}  # (device, metric) -> newest time sent live
        self._backlog_top: dict[str, int] = {}  # per table: rows up to here waited (sent as historical)
        self._state_ts = 0  # the newest primary host STATE timestamp seen
        self._online_ts = None  # the timestamp of the host's online STATE: its will carries the same
        self._recent: collections.deque[tuple[float, Sent]] = collections.deque()  # handed back, host_replay_s
        self._fresh_after = None  # after a lost broker: a STATE newer than this (or host_wait_s) before birth
        self._wait_until = 0.0
        self._reconnect_at = 0.0
        self._backoff = 1.0
        self._gen = 0  # which client an event came from: a dropped client's late events are ignored
        self._drained = False  # the last pass read every committed row
        self._stalled = False  # said once: the broker hands nothing back
        self.client: paho.Client | None = None

    # ---- what the gateway calls (never blocks) ----

    def node_state(self, node: str, up: bool, board: str = "", uid: str = "", why: str = "") -> None:
        """A node's link came up or went away: its device is born or dies."""
        self._put(None, ("node", (node, up)))

    def notices(self) -> list[str]:
        return drain(self._notices)

    def status(self) -> dict:
        st = dict(self.counts)
        b = self.config.broker
        st.update({"broker": "%s:%d" % (b.host, b.port), "tls": b.tls, "group": self.config.group,
                   "edge": self.config.edge, "primary_host": self.config.host_id, "connected": self.connected,
                   "born": self.born, "host_online": self.host_online, "bdseq": self.bdseq,
                   "in_flight": len(self._inflight), "last_error": self.last_error})
        return st

    # ---- start / stop ----

    def start(self) -> None:
        self.outbox = Outbox(self.db, self.config.dest, rows=SPARKPLUG_ROWS)  # StoreError if it cannot be one
        for src in Outbox.SOURCES:
            self._cursor[src] = self.outbox.marks[src]
        self.bdseq = int(self.outbox.meta("sparkplug_bdseq:" + self.config.dest) or -1) + 1 & 0xFF
        self._connect()
        self._thread = threading.Thread(target=self._run, name="sparkplug", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """A clean stop: what is in flight gets linger_s to be handed back, then NDEATH, and the connection
        closes (the broker does not publish the will)."""
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self.linger_s + 5)
        self._thread = None
        if self.connected and self.client is not None:
            info = self.client.publish(self.config.topic("NDEATH"), self._ndeath(), qos=1)
            try:
                info.wait_for_publish(timeout=self.linger_s)
            except (RuntimeError, ValueError):
                pass
        self._drop_client()
        if self.outbox is not None:
            self.outbox.close()

    # ---- the paho client (its callbacks run in paho's thread: they only queue) ----

    def _ndeath(self) -> bytes:
        return NDeath(timestamp=_now(), bd_seq_metric=Metric(timestamp=_now(), name=BDSEQ, datatype=DataType.INT64,
                                                             value=self.bdseq)).encode()

    def _connect(self) -> None:
        b = self.config.broker
        self._gen += 1
        gen = self._gen
        # paho retries a first connection that fails by itself (same will: no session began); a connection
        # that ends is started again here, with the next bdSeq in its will
        client = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2,
                             client_id="%s-sparkplug-%s-%d" % (self.config.group, self.config.edge, os.getpid()),
                             protocol=paho.MQTTv5, reconnect_on_failure=False)
        login(client, b)
        client.reconnect_delay_set(1, max(1, int(self.reconnect_max_s)))
        # the will carries this connection's bdSeq: a host pairs it with the NBIRTH that follows
        client.will_set(self.config.topic("NDEATH"), self._ndeath(), qos=1, retain=False)
        client.on_connect = lambda c, u, f, rc, p: self._put(gen, ("refused", str(rc)) if rc.is_failure
                                                             else ("connect", ""))
        client.on_connect_fail = lambda c, u: self._put(gen, ("fail", "cannot connect"))
        client.on_disconnect = lambda c, u, f, rc, p: self._put(gen, ("disconnect", str(rc)))
        client.on_message = lambda c, u, m: self._put(gen, ("message", (m.topic, m.payload)))
        client.on_subscribe = lambda c, u, mid, rcs, p: self._put(gen, ("suback", [str(r) for r in rcs
                                                                                    if r.is_failure]))
        client.connect_async(b.host, b.port, keepalive=b.keepalive, clean_start=True)
        client.loop_start()
        self.client = client

    def _put(self, gen: int | None, event: tuple) -> None:
        self._events.put((gen, event))
        self._wake.set()

    def _drop_client(self) -> None:
        if self.client is not None:
            try:
                self.client.disconnect()
            finally:
                self.client.loop_stop()
            self.client = None

    def _reconnect(self, delay: bool = True) -> None:
        """A new connection with the next bdSeq (paho's own retry would reuse the old will)."""
        self._drop_client()
        self.connected = False
        self.bdseq = (self.bdseq + 1) & 0xFF
        self._reconnect_at = time.monotonic() + (self._backoff if delay else 0.0)
        if delay:
            self._backoff = min(self._backoff * 2, self.reconnect_max_s)

    # ---- the publisher thread ----

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001  (a bug must not pass silently: the gateway prints it)
            self.last_error = "sparkplug stopped: %s: %s" % (type(e).__name__, e)
            self._notices.put("sparkplug: %s; the store keeps every row for the next start" % self.last_error)

    def _loop(self) -> None:
        linger_until = None
        while True:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            try:
                self._handle_events()
                if self.client is None and not self._stop.is_set() and time.monotonic() >= self._reconnect_at:
                    self._connect()
                if self.connected and not self.born and self.host_online and not self._stop.is_set():
                    if self._fresh_after is None or time.monotonic() >= self._wait_until:
                        self._birth()
                if self.born and not self._stop.is_set():
                    self._publish_rows()
                self._record()
                self._check_stall()
            except sqlite3.OperationalError as e:  # the store busy beyond its timeout: next pass
                self._notices.put("sparkplug: the store is busy (%s); retrying" % e)
                continue
            if self._stop.is_set():
                if linger_until is None:
                    linger_until = time.monotonic() + self.linger_s
                    if self.born:
                        self._publish_rows()
                if not self._unconfirmed() or not self.connected or time.monotonic() >= linger_until:
                    self._record()
                    return

    def _check_stall(self) -> None:
        """One line when the broker has handed nothing back for a while (an ACL that hides our own DDATA
        from us, a broker that drops QoS 0 under load): the rows wait in the store, and the operator knows."""
        oldest = next((s for s in self._inflight if not s.confirmed), None)
        stalled = self.connected and oldest is not None and time.monotonic() - oldest.sent_at > self.stall_s
        if stalled and not self._stalled:
            self.last_error = "the broker hands back none of our data"
            self._notices.put("sparkplug: the broker has handed back none of our data for %g s; holding rows in "
                              "the store (can this user read spBv1.0/%s/DDATA/%s/+? docs/MQTT.md 7)"
                              % (self.stall_s, self.config.group, self.config.edge))
        self._stalled = stalled

    def _handle_events(self) -> None:
        while True:
            try:
                gen, (what, arg) = self._events.get_nowait()
            except queue.Empty:
                return
            if gen is not None and gen != self._gen:
                continue  # from a client already dropped
            if what == "connect":
                self._on_connected()
            elif what in ("disconnect", "refused", "fail"):
                self._on_lost(what, arg)
            elif what == "message":
                self._on_message(*arg)
            elif what == "node":
                self._on_node(*arg)
            elif what == "suback" and arg:
                self.last_error = "the broker refused a subscription (%s)" % ", ".join(arg)
                self._notices.put("sparkplug: %s: let this user read spBv1.0/%s/+/%s/# and spBv1.0/STATE/# "
                                  "(docs/MQTT.md 7); data waits in the store meanwhile"
                                  % (self.last_error, self.config.group, self.config.edge))

    def _on_connected(self) -> None:
        assert self.client is not None and self.outbox is not None
        self.connected = True
        self._backoff = 1.0
        self.last_error = ""
        self.counts["connects"] += 1
        self.outbox.set_meta("sparkplug_bdseq:" + self.config.dest, str(self.bdseq))
        c = self.config
        self.client.subscribe(c.topic("NCMD"), qos=1)
        self.client.subscribe(c.topic("DCMD") + "/+", qos=1)
        self.client.subscribe(c.topic("DDATA") + "/+", qos=0)  # our own data, handed back: delivered
        if c.host_id is not None:
            self.host_online = False
            self.client.subscribe("%s/STATE/%s" % (NAMESPACE, c.host_id), qos=1)
        b = c.broker
        self._notices.put("sparkplug: connected to %s:%d as %s/%s%s" % (
            b.host, b.port, c.group, c.edge,
            ", waiting for primary host %s" % c.host_id if c.host_id is not None else ""))

    def _on_lost(self, what: str, why: str) -> None:
        b = self.config.broker
        if what != "disconnect":  # no session began (paho retries, a refusal ends in a disconnect too)
            if why != self.last_error:
                self._notices.put("sparkplug: %s %s:%d: %s; retrying" % (
                    "the broker refused the connection at" if what == "refused" else "cannot reach the broker",
                    b.host, b.port, why))
            self.last_error = why
            return
        was = self.connected
        self._unbirth()
        if was:
            self.counts["disconnects"] += 1
            self.last_error = why
            self._notices.put("sparkplug: lost the broker %s:%d (%s); retrying, nothing is lost (the store is "
                              "the outbox)" % (b.host, b.port, why))
            if self.config.host_id is not None:
                self._fresh_after = self._state_ts  # the host must show it subscribed again
        self._reconnect()

    def _unbirth(self, replay: bool = False) -> None:
        """The session ended: what was sent and not handed back goes out again after the next birth (as
        historical: it waited), its on-change bookkeeping undone. Each table's cursor goes back to just below
        its first row not handed back; the rows after it are read again. replay: also the rows handed back
        in the last host_replay_s (a host that vanished may have missed them)."""
        self.born = False
        for d in self.devices.values():
            d.born = False
        self._record()
        recent = [s for _t, s in self._recent] if replay else []
        self._recent.clear()
        back: dict[str, int] = {}
        replayed = {id(s) for s in recent}
        for s in recent + list(self._inflight):
            if (id(s) in replayed or not s.confirmed) and s.src not in back:
                back[s.src] = s.row_id - 1
        redo = recent + [s for s in self._inflight if s.src in back and s.row_id > back[s.src]]
        for s in reversed(redo):  # newest first: the chain goes back to what it was before the oldest
            for key, prev in reversed(s.undo):
                if prev is None:
                    self._chain.pop(key, None)
                else:
                    self._chain[key] = prev
        self._inflight = collections.deque(s for s in self._inflight if s.src not in back or s.row_id <= back[s.src])
        self._by_payload = {}
        self._cursor.update(back)

    def _on_message(self, topic: str, payload: bytes) -> None:
        c = self.config
        if topic.startswith(c.topic("DDATA") + "/"):
            s = self._by_payload.pop(payload, None)
            if s is not None:
                s.confirmed = True
            return
        if topic == "%s/STATE/%s" % (NAMESPACE, c.host_id):
            try:
                st = json.loads(payload)
                online, ts = bool(st["online"]), int(st["timestamp"])
            except (ValueError, KeyError, TypeError):
                self._notices.put("sparkplug: ignored a STATE message that is not Sparkplug 3.0 JSON")
                return
            if ts < self._state_ts:
                return  # an older host session's word
            self._state_ts = ts
            if online:
                self._online_ts = ts
                if self._fresh_after is not None and ts > self._fresh_after:
                    self._fresh_after = None
                elif self._fresh_after is not None:
                    self._wait_until = time.monotonic() + self.host_wait_s
                if not self.host_online:
                    self._notices.put("sparkplug: primary host %s is online" % c.host_id)
                self.host_online = True
            else:
                self.host_online = False
                # its will (Sparkplug 3.0: the online STATE's timestamp) says it vanished: the broker noticed
                # 1.5 keep-alives late and what went out meanwhile was lost to it; a host that said goodbye
                # itself got everything
                vanished = ts == self._online_ts
                if self.born:
                    # Sparkplug: the edge node dies and waits for its host; the data waits in the store
                    self._notices.put("sparkplug: primary host %s went offline%s; holding data until it is back"
                                      % (c.host_id, " without a goodbye: the last %g s go out again"
                                         % self.host_replay_s if vanished else ""))
                    assert self.client is not None
                    self.client.publish(c.topic("NDEATH"), self._ndeath(), qos=1)
                    self._unbirth(replay=vanished)
                    self._reconnect(delay=False)
            return
        if topic == c.topic("NCMD"):
            try:
                cmd = NCmd.decode(payload)
            except Exception:  # noqa: BLE001  (any bytes arrive here: protobuf raises several kinds)
                self._notices.put("sparkplug: ignored an NCMD that does not decode")
                return
            if any(m.name == REBIRTH and m.value for m in cmd.metrics) and self.born:
                self.counts["rebirth_requests"] += 1
                self._birth(rebirth=True)

    def _on_node(self, node: str, up: bool) -> None:
        d = self.devices.get(node)
        if d is None:
            if not up:
                return
            d = self._device(node)
        d.up = up
        if not self.born:
            return
        if up and not d.born and d.desc is not None:
            self._dbirth(d)
        elif not up and d.born and self._drained and not self._inflight:
            self._ddeath(d)

    # ---- births, deaths and data ----

    def _next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFF
        return self.seq

    def _send(self, topic: str, payload: bytes) -> None:
        assert self.client is not None
        self.client.publish(topic, payload, qos=0)
        self.counts["messages"] += 1

    def _alias_of(self, device: str, name: str) -> int:
        key = (device, name)
        a = self._alias.get(key)
        if a is None:
            a = self._alias[key] = len(self._alias) + 1
        return a

    def _device(self, node: str) -> Device:
        assert self.outbox is not None
        h = self.outbox.node_plants().get(node)
        # no hash and no line yet: the node has not said what it runs; it is born with its first line's
        known = h is not None or self.outbox.recent_logs(node, 1)
        d = self.devices[node] = Device(node, None)
        self._define(d, self.outbox.plant(h) if known else None)
        return d

    def _define(self, d: Device, desc) -> None:
        d.desc = desc
        d.defs = {m.name: m for m in spm.device_defs(desc)} if desc is not None else {}

    def _seed(self, d: Device) -> None:
        """The device's current values from its newest stored lines (newest wins), for its birth."""
        assert self.outbox is not None
        cur: dict = {}
        for row in self.outbox.recent_logs(d.name, 5000):
            if row["level"] == 0:
                continue
            for u in spm.line_updates(row["text"], self.outbox.plant(row["plant"])):
                if u.name in d.defs and u.name not in cur:
                    cur[u.name] = (u.value, u.ts, u.good)
            if len(cur) >= len(d.defs) - 3:  # every line metric found (the 3 annotation ones come next)
                break
        note = self.outbox.latest_annotation(d.name)
        if note is not None:
            cur[spm.ANNOTATION] = (note["text"], note["t0_ms"], True)
            cur[spm.ANNOTATION_ID] = (note["id"], note["t0_ms"], True)
            cur[spm.ANNOTATION_VERIFIED] = (bool(note["verified"]), note["t0_ms"], True)
        for name, mdef in d.defs.items():
            if name not in cur and "/alarm/" in name:
                cur[name] = (spm.ALARM_NORMAL, None, True)  # no line yet: the point is normal
        for name, v in d.current.items():  # what this process sent live is newer than the store's
            if name in d.defs and (name not in cur or (v[1] or 0) >= (cur[name][1] or 0)):
                cur[name] = v
        d.current = cur

    def _birth(self, rebirth: bool = False) -> None:
        """NBIRTH (seq 0), then a DBIRTH for each node whose link is up; rows stored until now are backlog
        (not on a rebirth request: nothing waited then)."""
        assert self.outbox is not None
        c = self.config
        self.seq = 0
        metrics = (Metric(timestamp=_now(), name=BDSEQ, datatype=DataType.INT64, value=self.bdseq,
                          alias=self._alias_of("", BDSEQ)),
                   Metric(timestamp=_now(), name=REBIRTH, datatype=DataType.BOOLEAN, value=False,
                          alias=self._alias_of("", REBIRTH)),
                   Metric(timestamp=_now(), name="Properties/software", datatype=DataType.STRING,
                          value="edgetwin", alias=self._alias_of("", "Properties/software")))
        self._send(c.topic("NBIRTH"), NBirth(timestamp=_now(), seq=0, metrics=metrics).encode())
        self.born = True
        self.counts["births"] += 1
        if not rebirth:
            for src in Outbox.SOURCES:
                self._backlog_top[src] = self.outbox.top(src)
        for d in self.devices.values():
            d.born = False
            if d.up and d.desc is not None:
                self._dbirth(d)
        self._fresh_after = None
        self._notices.put("sparkplug: born as %s/%s (bdSeq %d), %d devices" % (
            c.group, c.edge, self.bdseq, sum(1 for d in self.devices.values() if d.born)))

    def _dbirth(self, d: Device) -> None:
        self._seed(d)
        metrics = []
        for name, mdef in d.defs.items():
            value, ts, good = d.current.get(name, (None, None, True))
            metrics.append(spm.to_metric(mdef, value, ts or _now(), self._alias_of(d.name, name), good=good))
        raw = DBirth(timestamp=_now(), seq=self._next_seq(), metrics=tuple(metrics)).encode()
        raw = spm.with_properties(raw, {m.name: m.properties for m in d.defs.values() if m.properties})
        self._send(self.config.topic("DBIRTH", d.id), raw)
        d.born = True

    def _ddeath(self, d: Device) -> None:
        self._send(self.config.topic("DDEATH", d.id), DDeath(timestamp=_now(), seq=self._next_seq()).encode())
        d.born = False

    def _publish_rows(self, budget: int = 2000) -> None:
        assert self.outbox is not None
        drained = True
        for src in Outbox.SOURCES:
            while True:
                if budget <= 0 or self._unconfirmed() >= self.window:
                    drained = False
                    break
                rows = self.outbox.rows(src, self._cursor[src], limit=min(budget, 256))
                if not rows:
                    break
                budget -= len(rows)
                for row in rows:
                    if self._unconfirmed() >= self.window:
                        break
                    self._cursor[src] = row["id"]
                    self._row(src, row)
        self._drained = drained
        if drained and not self._unconfirmed():
            for d in self.devices.values():  # a node that went away while its backlog drained dies now
                if d.born and not d.up:
                    self._ddeath(d)
        if budget <= 0:
            self._wake.set()

    def _unconfirmed(self) -> int:
        return len(self._by_payload)

    def _row(self, src: str, row: dict) -> None:
        assert self.outbox is not None
        node = row["node"]
        d = self.devices.get(node) or self._device(node)
        if src == "annotations":
            ts = row["t0_ms"]  # the episode it annotates; it was stored at created_ms
            updates = [spm.Update(spm.ANNOTATION, row["text"], ts), spm.Update(spm.ANNOTATION_ID, row["id"], ts),
                       spm.Update(spm.ANNOTATION_VERIFIED, bool(row["verified"]), ts)]
            on_change = False
            stored_ms = row["created_ms"]
        else:
            desc = self.outbox.plant(row["plant"])
            if desc is not None and (d.desc is None or desc.hash != d.desc.hash):
                self._define(d, desc)  # the node says what it runs, or runs another description now
                d.born = False
                if d.up:
                    self._dbirth(d)
            updates = [u for u in spm.line_updates(row["text"], desc) if u.name in d.defs]
            on_change = row["level"] == 1  # samples on change; every alarm and state line is an event
            stored_ms = row["wall_ms"]
        # it waited: stored before this birth, a line from the node's spill ring, or one that came late
        historical_row = (row["id"] <= self._backlog_top.get(src, 0) or bool(row.get("flags", 0) & LG_SPILLED)
                          or _now() - stored_ms > self.late_ms)
        metrics, undo = [], []
        for u in updates:
            key = (node, u.name)
            mdef = d.defs[u.name]
            prev = self._chain.get(key)
            if on_change and prev is not None and prev[1] == u.good and _same(prev[0], u.value, mdef):
                continue
            undo.append((key, prev))
            self._chain[key] = (u.value, u.good)
            historical = historical_row or u.ts < self._live_ts.get(key, 0)
            if not historical:
                self._live_ts[key] = u.ts
                d.current[u.name] = (u.value, u.ts, u.good)
            metrics.append(spm.to_metric(mdef, u.value, u.ts, self._alias_of(node, u.name), name=False,
                                         historical=historical, good=u.good))
            self.counts["historical"] += historical
        payload = None
        if metrics:
            if not d.born:
                self._dbirth(d)
            payload = DData(timestamp=_now(), seq=self._next_seq(), metrics=tuple(metrics)).encode()
            self._send(self.config.topic("DDATA", d.id), payload)
            self.counts["rows_sent"] += 1
        s = Sent(src, row["id"], payload, undo, confirmed=payload is None, sent_at=time.monotonic())
        self._inflight.append(s)
        if payload is not None:
            self._by_payload[payload] = s

    def _record(self) -> None:
        """Move each table's mark over the rows handed back (or making no message), oldest first."""
        assert self.outbox is not None
        through: dict[str, int] = {}
        while self._inflight:
            s = self._inflight[0]
            if not s.confirmed:
                break
            self._inflight.popleft()
            if s.payload is not None:
                self.counts["rows_confirmed"] += 1
                if self.config.host_id is not None:
                    self._recent.append((time.monotonic(), s))
            through[s.src] = s.row_id
        self._prune()
        for src, rid in through.items():
            if rid > self.outbox.marks[src]:
                self.outbox.ack(src, [], rid)


    def _prune(self) -> None:
        old = time.monotonic() - self.host_replay_s
        while self._recent and self._recent[0][0] < old:
            self._recent.popleft()


def _same(a, b, mdef) -> bool:
    """Within the signal's deadband (a Double) or equal (anything else)."""
    if a is None or b is None or mdef.datatype != DataType.DOUBLE:
        return a == b
    deadband = next((v for k, _t, v in mdef.properties if k == "deadband"), 0.0)
    return abs(float(a) - float(b)) <= deadband


def _now() -> int:
    return int(time.time() * 1000)
