"""The fleet view's model: every gateway's nodes and notes, from what the gateways publish (docs/MQTT.md 6).

The contract:

- `Listener` subscribes with a persistent session: MQTT 5 ``clean_start=False``, a session expiry interval, a
  stable client id and QoS 1 subscriptions. While this view is away, or the broker restarts with
  ``persistence true``, the broker keeps its subscriptions and queues the events for it; they arrive at the
  next connect.
- A message is acknowledged (PUBACK, sent by hand: paho's manual_ack) only after `Fleet.handle` took it and
  the sink (the --jsonl writer) wrote a new event: an acknowledged event is never lost here, and one that
  was not is delivered again.
- Delivery is at least once (a gateway restart republishes its unacknowledged rows, a broker resends what
  it has no PUBACK for), so `Fleet` keeps each event's ``key`` (store, table, row id) and passes on each
  distinct event once; ``duplicates`` counts what it dropped.
- State (gateway and node statuses, retained) is the latest payload; events only add.

Threads: paho's network thread calls the callbacks; `Fleet` has a lock, taken by them and by whoever reads
it to draw (host/cmd_fleet.py).
"""

from __future__ import annotations

import collections
import json
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from host.mqtt import drain, login
from host.mqtt_topics import EVENT_KINDS, PAYLOAD_VERSION, MqttConfig

NOTES_KEPT = 3  # a node's latest annotations shown
# Keys remembered for de-duplication, oldest forgotten first. A repeat comes from a gateway's window in flight
# (64) or its last unrecorded acknowledgements, so it is never far behind the original; a million keys
# (about 120 MB, measured) is far more than that and bounds a view that runs for months.
SEEN_MAX = 1 << 20


@dataclass
class NodeView:
    """One node as its gateway last described it, with its latest notes and its last alarm."""

    gateway: str
    name: str
    online: bool = False
    since_ms: int | None = None
    board: str = ""
    why: str = ""
    health: dict = field(default_factory=dict)
    notice: str = ""
    notes: collections.deque = field(default_factory=lambda: collections.deque(maxlen=NOTES_KEPT))
    last_alarm: dict | None = None
    events: collections.Counter = field(default_factory=collections.Counter)


@dataclass
class GatewayView:
    """One gateway: its own status (None until one is seen) and its nodes by name."""

    name: str
    online: bool | None = None
    reason: str = ""
    since_ms: int | None = None
    nodes: dict[str, NodeView] = field(default_factory=dict)

    def node(self, name: str) -> NodeView:
        if name not in self.nodes:
            self.nodes[name] = NodeView(self.name, name)
        return self.nodes[name]

    def node_online(self, n: NodeView) -> bool:
        # a node's status is its gateway's view: it holds only while the gateway itself is online
        return bool(n.online and self.online)


class Fleet:
    """Gateways -> nodes -> status, health, latest notes; each event passed on once by its key."""

    def __init__(self, seen: list[str] | None = None, sink: Callable[[dict], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.sink = sink  # each new event, before its key counts as seen (an OSError leaves it unseen)
        self.gateways: dict[str, GatewayView] = {}
        self.counts = {"messages": 0, "events": 0, "duplicates": 0, "statuses": 0, "ignored": 0}
        # OrderedDict, not dict: forgetting the oldest is O(1) (a dict's iteration skips the holes deletions leave)
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        for key in seen or ():
            self._remember(key)
        self.known = len(self._seen)  # keys an earlier run passed on (the --jsonl file's)

    def _remember(self, key: str) -> None:
        self._seen[key] = None
        if len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)

    def gateway(self, name: str) -> GatewayView:
        if name not in self.gateways:
            self.gateways[name] = GatewayView(name)
        return self.gateways[name]

    def handle(self, topic: str, payload: bytes) -> dict | None:
        """Take one message: update the state; return the event if it is a new one (None for a status, a
        repeat, or what is not an edgetwin v1 payload)."""
        with self.lock:
            self.counts["messages"] += 1
            body = _json(payload)
            if body is None or body.get("v") != PAYLOAD_VERSION or not isinstance(body.get("gateway"), str):
                self.counts["ignored"] += 1  # a cleared retained topic, another program's message, a later version
                return None
            keyed = isinstance(body.get("key"), str) and isinstance(body.get("node"), str)
            if body.get("kind") in EVENT_KINDS and keyed:
                return self._event(body)
            if topic.endswith("/status"):
                self.counts["statuses"] += 1
                self._status(body)
                return None
            self.counts["ignored"] += 1
            return None

    def _event(self, body: dict) -> dict | None:
        if body["key"] in self._seen:
            self.counts["duplicates"] += 1
            return None
        if self.sink is not None:
            self.sink(body)
        self._remember(body["key"])
        self.counts["events"] += 1
        n = self.gateway(body["gateway"]).node(body["node"])
        n.events[body["kind"]] += 1
        if body["kind"] == "annotation":
            n.notes.append(body)
        elif body["kind"] == "alarm":
            n.last_alarm = body
        return body

    def _status(self, body: dict) -> None:
        g = self.gateway(body["gateway"])
        if isinstance(body.get("node"), str):
            n = g.node(body["node"])
            n.online = bool(body.get("online"))
            n.since_ms = body.get("since_ms")
            n.board = str(body.get("board") or n.board)
            n.why = str(body.get("why") or "")
            if isinstance(body.get("health"), dict):
                n.health = body["health"]
            n.notice = str(body.get("notice") or n.notice)
        else:
            g.online = bool(body.get("online"))
            g.reason = str(body.get("reason") or "")
            g.since_ms = body.get("since_ms")

    def totals(self) -> dict:
        """Gateways and nodes seen and online, with the message counts."""
        with self.lock:
            nodes = [(g, n) for g in self.gateways.values() for n in g.nodes.values()]
            return dict(self.counts, gateways=len(self.gateways),
                        gateways_online=sum(1 for g in self.gateways.values() if g.online),
                        nodes=len(nodes), nodes_online=sum(1 for g, n in nodes if g.node_online(n)))


def _json(payload: bytes) -> dict | None:
    try:
        body = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


class JsonlSink:
    """Each new event as one JSON line (the payload as the gateway sent it), appended to a file or stdout.

    A file written before (an earlier run) gives its keys back, so a restarted view with the same file and
    session appends each event once across runs too. The file is created at the first event: a run that
    never connects leaves nothing behind."""

    def __init__(self, path: str) -> None:
        self.path = None if path == "-" else Path(path)
        self._f: TextIO | None = sys.stdout if self.path is None else None
        self.written = 0

    def keys(self) -> list[str]:
        """The keys of the events already in the file. A line cut by a kill mid-write (an event's start, then
        the newline write() adds) is skipped; any other line that is not a JSON object is a ValueError: this is
        not a file to append events to."""
        if self.path is None or not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            lines = f.read().split(b"\n")
        out = []
        for i, line in enumerate(lines):
            body = _json(line)
            if body is None:
                if not line.strip() or line.startswith(b'{"v":'):
                    continue
                raise ValueError("line %d is not a JSON object: not a file of events" % (i + 1))
            if isinstance(body.get("key"), str):
                out.append(body["key"])
        return out

    def write(self, event: dict) -> None:
        if self._f is None:
            assert self.path is not None
            self._f = open(self.path, "a", encoding="utf-8")
            if self._f.tell() and not self._ends_with_newline():
                self._f.write("\n")  # a line cut by a kill: the next event starts a line of its own
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")
        # flushed before the PUBACK goes: what the broker forgets has reached the OS
        self._f.flush()
        self.written += 1

    def _ends_with_newline(self) -> bool:
        assert self.path is not None
        with open(self.path, "rb") as f:
            f.seek(-1, 2)
            return f.read(1) == b"\n"

    def close(self) -> None:
        if self._f is not None and self.path is not None:
            self._f.close()
        self._f = None


class ConnectError(Exception):
    """The broker cannot be had at start: unreachable, refusing the login, or not answering."""


class Listener:
    """A paho client (MQTT 5) with a persistent session feeding a Fleet; see the module docstring.
    connect() once (ConnectError when that fails), then it reconnects by itself until stop()."""

    def __init__(self, config: MqttConfig, topics: list[str], client_id: str, session_expiry_s: int, fleet: Fleet,
                 reconnect_max_s: int = 30) -> None:
        self.config = config
        self.topics = topics
        self.client_id = client_id
        self.session_expiry_s = session_expiry_s
        self.fleet = fleet
        self.connected = False
        self.connects = 0
        self.error = ""  # a sink that failed: the command stops
        self.failed = threading.Event()
        self._first = threading.Event()
        self._first_error = ""
        self._notices: queue.SimpleQueue = queue.SimpleQueue()
        self.client = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=paho.MQTTv5, manual_ack=True)
        login(self.client, config)  # ssl.SSLError or ValueError for TLS files that are not PEM
        self.client.reconnect_delay_set(1, reconnect_max_s)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    @property
    def where(self) -> str:
        return "%s:%d" % (self.config.host, self.config.port)

    def connect(self, timeout: float = 10.0) -> None:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = self.session_expiry_s
        try:
            # clean_start False at every connect (paho's default cleans the first one): the session survives
            self.client.connect(self.config.host, self.config.port, keepalive=self.config.keepalive,
                                clean_start=False, properties=props)
        except (OSError, ValueError) as e:  # refused, no route, a name that does not resolve, a TLS failure
            raise ConnectError("cannot reach the broker %s: %s" % (self.where, getattr(e, "strerror", None) or e)) \
                from None
        self.client.loop_start()
        if not self._first.wait(timeout) or self._first_error:
            self.client.loop_stop()
            self.client.disconnect()
            raise ConnectError(self._first_error or "the broker %s did not answer within %g s" % (self.where, timeout))

    def notices(self) -> list[str]:
        return drain(self._notices)

    def stop(self) -> None:
        """Disconnect cleanly; the broker keeps the session (and queues for it) for session_expiry_s."""
        self.client.disconnect()
        self.client.loop_stop()

    # ---- paho's thread ----

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            if not self._first.is_set():
                self._first_error = "the broker %s refused the connection: %s" % (self.where, reason_code)
                self._first.set()
            else:
                self._notices.put("the broker %s refused the connection: %s; retrying" % (self.where, reason_code))
            return
        self.connected = True
        self.connects += 1
        if self.connects > 1 and not flags.session_present:
            self._notices.put("the broker %s had no session for %s (it restarted without persistence, or the "
                              "session expired): events published meanwhile may be missing here; the gateways' "
                              "stores have them" % (self.where, self.client_id))
        # subscribed at every connect: cheap, and the retained statuses come again, fresh after an outage
        client.subscribe([(t, SubscribeOptions(qos=1)) for t in self.topics])

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        bad = [t for t, rc in zip(self.topics, reason_codes) if rc.is_failure]
        if bad:
            line = "the broker %s refused the subscription to %s (%s): check its ACL" % (
                self.where, ", ".join(bad), ", ".join(str(rc) for rc in reason_codes if rc.is_failure))
            if not self._first.is_set():
                self._first_error = line
            else:
                self._notices.put(line)
        elif self.connects > 1:
            self._notices.put("connected to %s again, session %s" % (self.where, self.client_id))
        self._first.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        if self.connected:
            self._notices.put("lost the broker %s (%s); reconnecting: the broker queues the events for session %s"
                              % (self.where, reason_code, self.client_id))
        self.connected = False

    def _on_message(self, client, userdata, message) -> None:
        if self.failed.is_set():
            return  # not acknowledged: the broker delivers it again at the next connect
        try:
            self.fleet.handle(message.topic, message.payload)
        except OSError as e:  # the sink's disk is full or gone: stop, leaving the event unacknowledged
            self.error = "cannot write an event: %s" % (e.strerror or e)
            self.failed.set()
            return
        client.ack(message.mid, message.qos)


def default_client_id(host: str) -> str:
    """A stable client id per machine: the same view started again resumes its session."""
    return "edgetwin-fleet-%s" % host
