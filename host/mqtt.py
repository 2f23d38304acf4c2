"""MQTT out: the gateway publishes committed annotations, alarms, trips and node health to a broker.

The contract (docs/MQTT.md has the topics and every payload; host/mqtt_topics.py writes them):

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
import socket
import sqlite3
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho

from host.mqtt_topics import (PAYLOAD_VERSION, MqttConfig, classify, gateway_status, health_fields, row_payload,
                              topic_level)
from host.store import Outbox


def login(client: paho.Client, config: MqttConfig) -> None:
    """The user, password and TLS files of `config` on a paho client (the publisher's and the fleet view's).
    ssl.SSLError (an OSError) or ValueError for a CA, certificate or key that is not PEM."""
    if config.username is not None:
        client.username_pw_set(config.username, config.password)
    if config.tls:
        client.tls_set(ca_certs=config.ca, certfile=config.cert, keyfile=config.key)


def drain(q: queue.SimpleQueue) -> list:
    """Everything queued on q (paho's thread puts, the command's thread takes), oldest first, without waiting."""
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


class Publisher:
    """Publishes the store's committed rows to one broker; see the module docstring. Construct, start(),
    feed node_state() from the gateway's loop, stop() at the end (or kill() to vanish like a crash)."""

    name = "mqtt"  # its object in the gateway's status

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
        return gateway_status(self.config.gateway, self.since_ms, online, reason)

    def _row_payload(self, source: str, kind: str, row: dict) -> bytes:
        assert self.outbox is not None
        desc = None
        if source == "logs":
            try:
                desc = self.outbox.plant(row.get("plant"))  # the description the line was stored with
            except (OSError, ValueError):  # the simulator's own description missing or broken: the line's fields
                pass
        return row_payload(self.outbox.store_id, self.config.gateway, source, kind, row, desc)

    # ---- the paho client (its callbacks run in paho's thread: they only queue) ----

    def _client(self) -> paho.Client:
        c = self.config
        client = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2,
                             client_id=c.client_id or "edgetwin-%s-%d" % (c.gateway, os.getpid()),
                             protocol=paho.MQTTv5)
        login(client, c)
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
        return drain(self._notices)

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
