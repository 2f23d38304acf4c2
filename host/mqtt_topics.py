"""MQTT for the gateway: the --mqtt options, the topic scheme and every payload (docs/MQTT.md), in one place.

host/mqtt.py publishes with these; a consumer reads what they write. Topics, under the prefix (default
``edgetwin/<gateway>``): ``status`` (the gateway, retained, its last will), ``node/<node>/status`` (retained),
``node/<node>/annotation``, ``.../alarm``, ``.../trip`` (QoS 1). Payloads are JSON with ``v`` = 1; events carry
their store row (``store``, ``table``, ``id``, joined as ``key``) so a consumer drops repeats.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass, field

from host.plantlines import ALARM_VERBS, REPORT, is_trip, report_pairs

PAYLOAD_VERSION = 1
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
    if is_trip(f):
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
    if not text.startswith(REPORT):
        return {"notice": text[5:]}
    return {k: int(v) if v.isdigit() else v for k, v in report_pairs(text)}


def gateway_status(gateway: str, since_ms: int, online: bool, reason: str) -> bytes:
    """The gateway's retained status (and, offline with reason "connection lost", its last will)."""
    # no clock time of its own: the will is made at the start and published by the broker much later
    body = {"v": PAYLOAD_VERSION, "gateway": gateway, "online": online, "reason": reason, "since_ms": since_ms}
    if online:
        body["pid"] = os.getpid()
    return json.dumps(body).encode()


def row_payload(store_id: str, gateway: str, source: str, kind: str, row: dict) -> bytes:
    """An event: an annotation row, or an alarm or trip line with its fields, keyed by its row in the store."""
    body = {"v": PAYLOAD_VERSION, "kind": kind, "key": "%s/%s/%d" % (store_id, source, row["id"]), "store": store_id,
            "table": source, "id": row["id"], "gateway": gateway, "node": row["node"]}
    if source == "annotations":
        body.update({"wall_ms": row["t0_ms"], "time": _iso(row["t0_ms"]), "t1_ms": row["t1_ms"],
                     "text": row["text"], "verified": bool(row["verified"]), "tokens": row["tokens"],
                     "created_ms": row["created_ms"]})
    else:
        body.update({"wall_ms": row["wall_ms"], "time": _iso(row["wall_ms"]), "level": row["level"],
                     "text": row["text"], "epoch": row["epoch"], "seq": row["seq"]})
        body.update(_line_fields(kind, row["text"]))
    return json.dumps(body).encode()
