"""MQTT for the gateway: the --mqtt options, the topic scheme and every payload (docs/MQTT.md), in one place.

host/mqtt.py publishes with these; a consumer (host/fleet.py) reads what they write. The broker options (URL,
user, password, TLS files) are the gateway's and the fleet view's alike. Topics, under the prefix (default
``edgetwin/<gateway>``): ``status`` (the gateway, retained, its last will), ``node/<node>/status`` (retained),
``node/<node>/annotation``, ``.../alarm``, ``.../trip`` (QoS 1). Payloads are JSON with ``v`` = 1; events carry
their store row (``store``, ``table``, ``id``, joined as ``key``) so a consumer drops repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass, field

from host import plantlines
from host.plantlines import REPORT, report_pairs

PAYLOAD_VERSION = 1
PASSWORD_ENV = "EDGETWIN_MQTT_PASSWORD"
EVENT_KINDS = ("annotation", "alarm", "trip")  # the QoS 1 events, each carrying its store row as `key`
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


def add_broker_arguments(g: "argparse._ActionsContainer", url_help: str, user_help: str = "broker user name") -> None:
    """--mqtt URL and the options to reach it (user, password file, TLS files): the same for every command."""
    g.add_argument("--mqtt", default=None, metavar="URL", help=url_help)
    g.add_argument("--mqtt-user", default=None, metavar="USER", help=user_help)
    g.add_argument("--mqtt-password-file", default=None, metavar="FILE",
                   help="a file holding the broker password (first line); or set %s" % PASSWORD_ENV)
    g.add_argument("--mqtt-ca", default=None, metavar="FILE",
                   help="with mqtts://: the CA certificate(s) that signed the broker's (default: the system's)")
    g.add_argument("--mqtt-cert", default=None, metavar="FILE",
                   help="with mqtts://: a client certificate (PEM), if the broker asks for one")
    g.add_argument("--mqtt-key", default=None, metavar="FILE", help="with --mqtt-cert: its private key (PEM)")


def broker_settings(args: argparse.Namespace) -> dict:
    """MqttConfig's broker fields (host, port, tls, ca, cert, key, username, password) from the options
    add_broker_arguments added (args.mqtt given); MqttConfigError for a bad one. The password comes from
    --mqtt-password-file, else PASSWORD_ENV: never from the command line, where ps shows it."""
    tls, host, port = parse_url(args.mqtt)
    for opt, v in (("--mqtt-ca", args.mqtt_ca), ("--mqtt-cert", args.mqtt_cert), ("--mqtt-key", args.mqtt_key)):
        if v is None:
            continue
        if not tls:
            raise MqttConfigError("%s is for TLS: give an mqtts:// URL" % opt)
        if not os.path.isfile(v):
            raise MqttConfigError("%s %s: no such file" % (opt, v))
    if (args.mqtt_cert is None) != (args.mqtt_key is None):
        raise MqttConfigError("--mqtt-cert and --mqtt-key go together")
    password = os.environ.get(PASSWORD_ENV)
    if args.mqtt_password_file is not None:
        f = args.mqtt_password_file
        try:
            with open(f, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise MqttConfigError("--mqtt-password-file %s: cannot read it (%s)"
                                  % (f, getattr(e, "strerror", None) or e)) from None
        if not lines or not lines[0]:
            raise MqttConfigError("--mqtt-password-file %s: the first line (the password) is empty" % f)
        password = lines[0]
    if password is not None and args.mqtt_user is None:
        raise MqttConfigError("a broker password (%s or --mqtt-password-file) needs --mqtt-user" % PASSWORD_ENV)
    if args.mqtt_user is not None and not args.mqtt_user:
        raise MqttConfigError("--mqtt-user must not be empty")
    return {"host": host, "port": port, "tls": tls, "ca": args.mqtt_ca, "cert": args.mqtt_cert, "key": args.mqtt_key,
            "username": args.mqtt_user, "password": password}


def tls_files(config: MqttConfig) -> str:
    """The TLS files a config names, for an error line ("--mqtt-ca ca.pem, ..." or "the system's CAs")."""
    files = ", ".join("%s %s" % (o, v) for o, v in (("--mqtt-ca", config.ca), ("--mqtt-cert", config.cert),
                                                     ("--mqtt-key", config.key)) if v)
    return files or "the system's CAs"


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


def check_filter(topic: str) -> str:
    """A topic filter to subscribe to (the fleet view's --mqtt-topic): '+' a whole level, '#' the last one."""
    levels = topic.split("/")
    if (not topic or len(topic.encode()) > 200 or "\x00" in topic
            or any(("+" in lv and lv != "+") or ("#" in lv and lv != "#") for lv in levels) or "#" in levels[:-1]):
        raise MqttConfigError("--mqtt-topic %r: a topic filter: '+' stands for one whole level, '#' for the rest "
                              "and only at the end (e.g. edgetwin/# or site-3/+/node/#)" % topic)
    return topic


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
    line = plantlines.parse(text)
    if line is None:
        return None
    if line.kind == "alarm":
        return "alarm"
    return "trip" if line.is_trip else None


def _line_fields(kind: str, text: str, desc=None) -> dict:
    """The line's own fields by the log grammar (docs/PLANT.md, host/plantlines.py), beside its text, and
    what the plant's description (a host.plantdesc.PlantDesc, None when unknown) says of the alarm point: its
    signal's key, its limit, the interlock's point for a trip."""
    line = plantlines.parse(text)
    if line is None or kind not in ("alarm", "trip"):
        return {}
    m = desc.machine(line.machine) if desc is not None else None
    out: dict = {"machine": line.machine}
    if desc is not None:
        out["plant"] = desc.name
    if m is not None:
        out["machine_kind"] = m.kind
    if kind == "alarm":
        out.update({"verb": line.verb, "alarm_level": line.level, "tag": line.tag,
                    "value": text.split()[5],  # as the line writes it ("7.4mm/s", "?")
                    "number": line.value, "unit": line.unit, "priority": line.prio, "state": line.astate})
        out.update(line.extras)  # by=, why=
        s = m.signal(line.tag) if m is not None else None
        if s is not None:
            out.update({"signal": s.key, "unit": s.unit})
            point = s.alarm(line.level)
            if point is not None:
                out["limit"] = point.limit
        return out
    out.update({"transition": "%s->%s" % (line.from_state, line.to_state), "cause": line.cause.split("=", 1)[1],
                "interlock": line.interlock})
    for s in m.signals if m is not None and line.interlock else ():
        point = next((a for a in s.alarms if a.interlock == line.interlock), None)
        if point is not None:  # the alarm point the interlock stands for
            out.update({"tag": s.tag, "signal": s.key, "unit": s.unit, "alarm_level": point.level,
                        "limit": point.limit, "priority": point.priority})
            break
    return out


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


def row_payload(store_id: str, gateway: str, source: str, kind: str, row: dict, desc=None) -> bytes:
    """An event: an annotation row, or an alarm or trip line with its fields, keyed by its row in the store.
    desc: the description the line was stored with (host/store.read_plant), for its unit, limit and priority."""
    body = {"v": PAYLOAD_VERSION, "kind": kind, "key": "%s/%s/%d" % (store_id, source, row["id"]), "store": store_id,
            "table": source, "id": row["id"], "gateway": gateway, "node": row["node"]}
    if source == "annotations":
        body.update({"wall_ms": row["t0_ms"], "time": _iso(row["t0_ms"]), "t1_ms": row["t1_ms"],
                     "text": row["text"], "verified": bool(row["verified"]), "tokens": row["tokens"],
                     "created_ms": row["created_ms"]})
    else:
        body.update({"wall_ms": row["wall_ms"], "time": _iso(row["wall_ms"]), "level": row["level"],
                     "text": row["text"], "epoch": row["epoch"], "seq": row["seq"]})
        body.update(_line_fields(kind, row["text"], desc))
    return json.dumps(body).encode()
