"""MQTT out: the gateway publishes committed annotations, alarms, trips and node health to a broker.

The contract (docs/MQTT.md has the topics and every payload):

- The log store is the outbox (host/store.Outbox). Only committed rows go out, read through the outbox's
  own connection after a mark, in id order. A row counts as delivered when the broker acknowledges it
  (PUBACK, QoS 1), and only then is it marked in the store. While the broker is away nothing is read
  beyond a bounded window and nothing is lost: the rows wait in the store. After a reconnect paho resends
  what was in flight; after a gateway restart the rows after the mark that the broker never acknowledged
  go out again (and only those). A consumer drops repeats by the payload's ``key`` (store, table, row id).
- Annotations, alarm lines and trip lines: QoS 1, not retained, on ``<prefix>/node/<node>/<kind>``.
- Node status: retained, on ``<prefix>/node/<node>/status``: online or not (from the gateway's sessions),
  board, uid and the node's latest NODE report (its health). State, not events: the latest wins, sent
  again at every connect.
- Gateway status: retained, on ``<prefix>/status``; the last will sets it offline when the gateway's
  connection drops without a goodbye (a crash, a cut cable); a clean stop says so itself.

Threads: paho's network thread (loop_start) only queues what it hears (PUBACKs, connects); one publisher
thread owns the outbox connection and the paho client's publishing. The gateway's loop only calls
``node_state`` and ``notices``, which never block, so a slow or absent broker never slows it.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import socket
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as paho

from host.store import Outbox

PAYLOAD_VERSION = 1
ALARM_VERBS = ("ALARM", "ACK", "CLEAR", "SHELVE", "UNSHELVE")  # docs/PLANT.md, Log grammar
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class MqttConfigError(ValueError):
    """A bad --mqtt URL or option (the CLI prints it as one line)."""


@dataclass
class MqttConfig:
    """Where and how to publish: the broker, TLS, credentials, and the topic prefix."""

    host: str
    port: int
    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    username: str | None = None
    password: str | None = None
    gateway: str = "gateway"
    prefix: str = "edgetwin/gateway"
    keepalive: int = 30
    client_id: str = field(default="")

    @property
    def dest(self) -> str:
        """The outbox's name for this destination: the broker and the prefix (never the credentials)."""
        return "mqtt%s://%s:%d/%s" % ("s" if self.tls else "", self.host, self.port, self.prefix)


def parse_url(url: str) -> tuple[bool, str, int]:
    """(tls, host, port) of mqtt://HOST[:PORT] (1883) or mqtts://HOST[:PORT] (8883); MqttConfigError else."""
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port
    except ValueError as e:
        raise MqttConfigError("--mqtt %s: %s (give mqtt://HOST:PORT or mqtts://HOST:PORT)" % (url, e)) from None
    if u.scheme not in ("mqtt", "mqtts"):
        raise MqttConfigError("--mqtt %s: the scheme must be mqtt:// or mqtts:// (TLS)" % url)
    if u.username is not None or u.password is not None:
        raise MqttConfigError("--mqtt %s: no credentials in the URL (they show in ps): use --mqtt-user and "
                              "EDGETWIN_MQTT_PASSWORD or --mqtt-password-file" % url)
    if not u.hostname:
        raise MqttConfigError("--mqtt %s: no broker host (give mqtt://HOST:PORT)" % url)
    if u.path not in ("", "/") or u.query or u.fragment:
        raise MqttConfigError("--mqtt %s: only mqtt://HOST:PORT, no path or query (the topic prefix is "
                              "--mqtt-prefix)" % url)
    if port == 0:
        raise MqttConfigError("--mqtt %s: port must be 1..65535" % url)
    return u.scheme == "mqtts", u.hostname, port or (8883 if u.scheme == "mqtts" else 1883)


def check_gateway_name(name: str) -> str:
    if not _NAME.fullmatch(name or ""):
        raise MqttConfigError("--mqtt-gateway %r: 1..64 letters, digits, '_', '.' or '-' (one topic level)" % name)
    return name


def check_prefix(prefix: str) -> str:
    levels = prefix.split("/")
    if (not prefix or len(prefix.encode()) > 200 or prefix.startswith("$") or any(not lv for lv in levels)
            or any(c in prefix for c in "+#\x00")):
        raise MqttConfigError("--mqtt-prefix %r: topic levels without '+', '#', NUL or empty levels, not starting "
                              "with '$' (e.g. edgetwin/pump-hall)" % prefix)
    return prefix


def default_gateway_name() -> str:
    """The host's name made into one topic level (the default --mqtt-gateway)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname().split(".")[0])[:64]
    return name or "gateway"


def topic_level(name: str) -> str:
    """A node name as one topic level: '/', '+', '#' and anything unusual percent-encoded (a node named
    after its port, /dev/ttyUSB0, is %2Fdev%2FttyUSB0); the payload carries the name as it is."""
    return urllib.parse.quote(name, safe="-_.~:@") or "%00"


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + ".%03dZ" % (ms % 1000)


def classify(text: str) -> str | None:
    """What a stored log line is for MQTT: 'alarm', 'trip', 'health' (the node's NODE lines), or None."""
    if text.startswith("NODE "):
        return "health"
    f = text.split()
    if len(f) >= 8 and f[1] in ALARM_VERBS:
        return "alarm"
    if len(f) >= 5 and f[1] == "STATE" and f[3].endswith("->TRIPPED"):
        return "trip"
    return None


def _line_fields(kind: str, text: str) -> dict:
    """The line's own fields by the plant's grammar (docs/PLANT.md), beside its text."""
    f = text.split()
    if kind == "alarm":
        return {"machine": f[3], "verb": f[1], "alarm_level": f[2], "tag": f[4], "value": f[5],
                "priority": int(f[6][5:]) if f[6][5:].isdigit() else None, "state": f[7]}
    if kind == "trip":
        return {"machine": f[2], "transition": f[3], "cause": f[4].split("=", 1)[-1]}
    return {}


def health_fields(text: str) -> dict:
    """A NODE report's key=value fields ("NODE heap=1234 dropped=0 ...", firmware/node.py), numbers as ints;
    any other NODE line (a notice at boot: "NODE model error: ...; running logs-only") as {"notice": its text}."""
    if not text.startswith("NODE heap="):
        return {"notice": text[5:]}
    out: dict = {}
    for kv in text.split()[1:]:
        if "=" in kv:
            k, v = kv.split("=", 1)
            out[k] = int(v) if v.isdigit() else v
    return out


class Publisher:
    """Publishes the store's committed rows to one broker; see the module docstring. Construct, start(),
    feed node_state() from the gateway's loop, stop() at the end (or kill() to vanish like a crash)."""

    def __init__(self, db: str | Path, config: MqttConfig, window: int = 64, poll_s: float = 0.2,
                 reconnect_max_s: float = 30.0, linger_s: float = 2.0) -> None:
        self.config = config
        self.db = Path(db)
        self.window = window
        self.poll_s = poll_s
        self.linger_s = linger_s
        self.reconnect_max_s = reconnect_max_s
        self.counts = {"published": 0, "acked": 0, "refused": 0, "skipped": 0, "connects": 0, "disconnects": 0}
        self.connected = False
        self.last_error = ""
        self._acks: collections.deque = collections.deque()  # (mid, failed) from paho's thread
        self._events: queue.SimpleQueue = queue.SimpleQueue()  # "connect" / "disconnect" / ("node", ...)
        self._notices: queue.SimpleQueue = queue.SimpleQueue()  # lines for the gateway to print
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.outbox: Outbox | None = None
        self._inflight: dict[int, tuple[str, int]] = {}  # mid -> (source, row id)
        self._open: dict[str, set[int]] = {}  # per source: ids published, not yet acknowledged
        self._unrecorded: dict[str, set[int]] = {}  # per source: acknowledged, not yet written to the store
        self._cursor: dict[str, int] = {}  # per source: the highest id read
        self._skip: dict[str, set[int]] = {}  # per source: acknowledged before a restart, above the mark
        self.nodes: dict[str, dict] = {}  # node name -> its status payload
        self._next_mark = 0.0  # monotonic time the mark may move again without a new acknowledgement
        self.since_ms = int(time.time() * 1000)
        self.client = self._client()

    # ---- topics and payloads ----

    def topic(self, *levels: str) -> str:
        return "/".join((self.config.prefix,) + levels)

    def node_topic(self, node: str, kind: str) -> str:
        return self.topic("node", topic_level(node), kind)

    def _gateway_status(self, online: bool, reason: str) -> bytes:
        # no clock time of its own: the will is made at the start and published by the broker much later
        body = {"v": PAYLOAD_VERSION, "gateway": self.config.gateway, "online": online, "reason": reason,
                "since_ms": self.since_ms}
        if online:
            body["pid"] = os.getpid()
        return json.dumps(body).encode()

    def _row_payload(self, source: str, kind: str, row: dict) -> bytes:
        assert self.outbox is not None
        body = {"v": PAYLOAD_VERSION, "kind": kind, "key": "%s/%s/%d" % (self.outbox.store_id, source, row["id"]),
                "store": self.outbox.store_id, "table": source, "id": row["id"], "gateway": self.config.gateway,
                "node": row["node"]}
        if source == "annotations":
            body.update({"wall_ms": row["t0_ms"], "time": _iso(row["t0_ms"]), "t1_ms": row["t1_ms"],
                         "text": row["text"], "verified": bool(row["verified"]), "tokens": row["tokens"],
                         "created_ms": row["created_ms"]})
        else:
            body.update({"wall_ms": row["wall_ms"], "time": _iso(row["wall_ms"]), "level": row["level"],
                         "text": row["text"], "epoch": row["epoch"], "seq": row["seq"]})
            body.update(_line_fields(kind, row["text"]))
        return json.dumps(body).encode()

    # ---- the paho client (its callbacks run in paho's thread: they only queue) ----

    def _client(self) -> paho.Client:
        c = self.config
        client = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2,
                             client_id=c.client_id or "edgetwin-%s-%d" % (c.gateway, os.getpid()),
                             protocol=paho.MQTTv5)
        if c.username is not None:
            client.username_pw_set(c.username, c.password)
        if c.tls:
            client.tls_set(ca_certs=c.ca, certfile=c.cert, keyfile=c.key)
        client.will_set(self.topic("status"), self._gateway_status(False, "connection lost"), qos=1, retain=True)
        client.reconnect_delay_set(1, max(1, int(self.reconnect_max_s)))
        client.max_inflight_messages_set(self.window)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_connect_fail = self._on_connect_fail
        client.on_publish = self._on_publish
        return client

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            self._events.put(("refused", str(reason_code)))
        else:
            self._events.put(("connect", ""))
        self._wake.set()

    def _on_connect_fail(self, client, userdata) -> None:  # no TCP/TLS connection (paho retries)
        self._events.put(("fail", "cannot connect"))
        self._wake.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self._events.put(("disconnect", str(reason_code)))
        self._wake.set()

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        self._acks.append((mid, bool(reason_code.is_failure)))
        self._wake.set()

    # ---- what the gateway calls (never blocks) ----

    def node_state(self, node: str, up: bool, board: str = "", uid: str = "", why: str = "") -> None:
        """A node came up or went away (the gateway's session): its retained status changes."""
        self._events.put(("node", (node, up, board, uid, why)))
        self._wake.set()

    def notices(self) -> list[str]:
        """Lines for the operator (connected, unreachable), oldest first, since the last call."""
        out = []
        while True:
            try:
                out.append(self._notices.get_nowait())
            except queue.Empty:
                return out

    def status(self) -> dict:
        st = dict(self.counts)
        st.update({"broker": "%s:%d" % (self.config.host, self.config.port), "tls": self.config.tls,
                   "prefix": self.config.prefix, "connected": self.connected, "in_flight": len(self._inflight),
                   "last_error": self.last_error})
        return st

    # ---- start / stop ----

    def start(self) -> None:
        """Open the outbox and start connecting (in the background: a broker that is down is retried)."""
        self.outbox = Outbox(self.db, self.config.dest)  # StoreError if the store cannot be one
        for src in Outbox.SOURCES:
            self._cursor[src] = self.outbox.marks[src]
            self._skip[src] = self.outbox.acked_above(src)
            self._open[src] = set()
            self._unrecorded[src] = set()
        self.client.connect_async(self.config.host, self.config.port, keepalive=self.config.keepalive)
        self.client.loop_start()
        self._thread = threading.Thread(target=self._run, name="mqtt-publisher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Say goodbye: in-flight rows get linger_s to be acknowledged (and marked), the gateway's status goes
        offline (retained), the connection closes cleanly (no will)."""
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self.linger_s + 5)
        self._thread = None
        if self.connected:
            for node, st in self.nodes.items():
                if st.get("online"):
                    st.update({"online": False, "why": "gateway stopped", "since_ms": int(time.time() * 1000)})
                    self.client.publish(self.node_topic(node, "status"), json.dumps(st).encode(), qos=1, retain=True)
            info = self.client.publish(self.topic("status"), self._gateway_status(False, "stopped"), qos=1,
                                       retain=True)
            try:
                info.wait_for_publish(timeout=self.linger_s)
            except (RuntimeError, ValueError):
                pass
        self.client.disconnect()
        self.client.loop_stop()
        if self.outbox is not None:
            self.outbox.close()

    def kill(self) -> None:
        """Vanish as a crash would (for tests): no goodbye, no acknowledgements stored, the socket dropped,
        so the broker publishes the will."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        sock = self.client.socket()
        self.client.loop_stop()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self.outbox is not None:
            self.outbox.close()

    # ---- the publisher thread ----

    def _seed_nodes(self) -> None:
        # the nodes the store knows, with their latest health: their retained status is right from the first
        # connect (in this thread: on a store of months that lookup takes a moment, the gateway does not wait)
        assert self.outbox is not None
        for r in self.outbox.latest_node_reports():
            st = self._node(r["node"])
            st.update({"board": st["board"] or r["board"], "uid": st["uid"] or r["uid"]})
            if r["id"] is not None:
                self._health(st, r)

    def _health(self, st: dict, row: dict) -> None:
        f = health_fields(row["text"])
        if "notice" in f:  # "NODE model error: ...": e.g. the node runs logs-only, and says why
            st.update({"notice": f["notice"], "notice_ms": row["wall_ms"]})
        else:
            st.update({"health": f, "health_id": row["id"], "health_ms": row["wall_ms"]})

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001  (a bug must not pass silently: the gateway prints it)
            self.last_error = "publisher stopped: %s: %s" % (type(e).__name__, e)
            self._notices.put("mqtt: %s; the store keeps every row for the next start" % self.last_error)

    def _loop(self) -> None:
        self._seed_nodes()
        linger_until = None
        locked = False
        while True:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            self._handle_events()
            try:
                self._handle_acks()
                if self.connected and not self._stop.is_set():
                    self._publish_rows()
                locked = False
            except sqlite3.OperationalError as e:
                # the store busy beyond its timeout (a long write elsewhere): what was not recorded is
                # recorded at the next pass; the acknowledgements wait in memory meanwhile
                if not locked:
                    self._notices.put("mqtt: the store is busy (%s); retrying" % e)
                locked = True
                continue
            if self._stop.is_set():
                # a clean stop: what the gateway committed last goes out too, and what is in flight gets a
                # moment to be acknowledged; the rest waits in the store for the next start
                if linger_until is None:
                    linger_until = time.monotonic() + self.linger_s
                    if self.connected:
                        self._publish_rows()
                if not self._inflight or not self.connected or time.monotonic() >= linger_until:
                    return

    def _node(self, node: str) -> dict:
        st = self.nodes.get(node)
        if st is None:
            st = self.nodes[node] = {"v": PAYLOAD_VERSION, "gateway": self.config.gateway, "node": node,
                                     "online": False, "since_ms": None, "board": "", "uid": ""}
        return st

    def _send_status(self, node: str) -> None:
        if self.connected:  # state: while away only the latest is kept, sent at the next connect
            self.client.publish(self.node_topic(node, "status"), json.dumps(self.nodes[node]).encode(), qos=1,
                                retain=True)

    def _handle_events(self) -> None:
        while True:
            try:
                what, arg = self._events.get_nowait()
            except queue.Empty:
                return
            if what == "connect":
                self.connected = True
                self.last_error = ""
                self.counts["connects"] += 1
                self._notices.put("mqtt: connected to %s:%d, publishing under %s/"
                                  % (self.config.host, self.config.port, self.config.prefix))
                self.client.publish(self.topic("status"), self._gateway_status(True, "running"), qos=1, retain=True)
                for node in self.nodes:
                    self._send_status(node)
            elif what in ("disconnect", "refused", "fail"):
                was = self.connected
                self.connected = False
                where = "%s:%d" % (self.config.host, self.config.port)
                # one line per change, not per retry: losing the broker, or a new reason it cannot be had
                line = None
                if was:
                    self.counts["disconnects"] += 1
                    line = "mqtt: lost the broker %s (%s)" % (where, arg)
                elif what == "refused" and arg != self.last_error:
                    line = "mqtt: the broker %s refused the connection: %s" % (where, arg)
                elif what == "fail" and not self.last_error:
                    line = "mqtt: cannot reach the broker %s" % where
                if line:
                    self._notices.put(line + "; retrying, nothing is lost (the store is the outbox)")
                if what != "disconnect" or was:
                    self.last_error = arg
            else:
                node, up, board, uid, why = arg
                st = self._node(node)
                st.update({"online": up, "since_ms": int(time.time() * 1000), "why": why})
                if board:
                    st["board"] = board
                if uid:
                    st["uid"] = uid
                self._send_status(node)

    def _handle_acks(self) -> None:
        acked: dict[str, list[int]] = {}
        while self._acks:
            mid, failed = self._acks.popleft()
            entry = self._inflight.pop(mid, None)
            if entry is None:
                continue  # a status message (not tracked: state, resent at every connect)
            src, rid = entry
            if failed:
                # the broker refused it (an MQTT 5 reason code: an ACL denies the topic, a quota): resending now
                # cannot help, so it leaves the window, but it stays unacknowledged in the store (the mark stops
                # below it) and goes out again at the next start, once the operator fixed the broker
                self.counts["refused"] += 1
                self.last_error = "the broker refused row %s/%d: check its ACL for %s/" % (src, rid, self.config.prefix)
                continue
            self._open[src].discard(rid)
            self.counts["acked"] += 1
            acked.setdefault(src, []).append(rid)
        for src in Outbox.SOURCES:
            self._store_acks(src, acked.get(src, []))

    def _store_acks(self, src: str, ids: list[int]) -> None:
        # the mark: every row up to it is acknowledged (or not one we publish); rows acknowledged above it
        # (ahead of an older row still in flight) are kept in the store individually
        assert self.outbox is not None
        self._unrecorded[src].update(ids)  # kept until written: a store busy now records them next time
        pending = self._open[src]
        through = min(pending) - 1 if pending else self._cursor[src]
        if not self._unrecorded[src] and (through == self.outbox.marks[src] or time.monotonic() < self._next_mark):
            # only rows that are not published (health reports) moved it: once a second is enough (a stale
            # mark costs a restart only a re-read), and the gateway's writes contend less
            return
        self._next_mark = time.monotonic() + 1.0
        self.outbox.ack(src, sorted(self._unrecorded[src]), through)
        self._unrecorded[src] = set()
        self._skip[src] = {i for i in self._skip[src] if i > through}

    def _publish_rows(self, budget: int = 2000) -> None:
        """Publish the committed rows after each source's cursor while the window has room, reading at most
        `budget` rows per call (then the thread comes back at once: acknowledgements keep flowing while a
        long backlog drains). A node's health changes publish its status once per call, not per report."""
        assert self.outbox is not None
        changed: set[str] = set()
        for src in Outbox.SOURCES:
            while budget > 0 and len(self._inflight) < self.window:
                rows = self.outbox.rows(src, self._cursor[src], limit=min(budget, 256))
                if not rows:
                    break
                budget -= len(rows)
                for row in rows:
                    if len(self._inflight) >= self.window:
                        break
                    self._cursor[src] = row["id"]
                    if row["id"] in self._skip[src]:
                        continue  # acknowledged before a restart
                    kind = "annotation" if src == "annotations" else classify(row["text"])
                    if kind == "health":
                        self._health(self._node(row["node"]), row)
                        changed.add(row["node"])
                    elif kind is None:
                        self.counts["skipped"] += 1
                    else:
                        info = self.client.publish(self.node_topic(row["node"], kind),
                                                   self._row_payload(src, kind, row), qos=1)
                        self._inflight[info.mid] = (src, row["id"])
                        self._open[src].add(row["id"])
                        self.counts["published"] += 1
            self._store_acks(src, [])
        for node in changed:
            self._send_status(node)
        if budget <= 0:
            self._wake.set()
