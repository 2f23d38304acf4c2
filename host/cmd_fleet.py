"""`edgetwin fleet --mqtt URL`: every gateway's nodes and notes, from the broker they publish to.

A live view (rich) of each gateway (online, or why not), its nodes (link up or down, board, health) and their
latest notes and alarms, refreshed in place; `--jsonl FILE` (or `-`) appends each distinct event once as one
JSON line, for a program to read. The subscription is a persistent session (host/fleet.py): nothing is missed
while the broker restarts or this view is away. docs/MQTT.md 6.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from host.errors import UserError

if TYPE_CHECKING:  # the imports run() makes lazily: `edgetwin --help` loads neither paho nor rich's live view
    from rich.console import Console, Group

    from host.fleet import Fleet, JsonlSink, Listener
    from host.mqtt_topics import MqttConfig

HELP = "follow every gateway's nodes and notes through an MQTT broker: a live view, or each event once as JSON lines"
DEFAULT_TOPIC = "edgetwin/#"
DEFAULT_EXPIRY_S = 7 * 24 * 3600  # a week: a view off over a long weekend still gets what it missed


def add_arguments(p: argparse.ArgumentParser) -> None:
    from host import mqtt_topics

    mqtt_topics.add_broker_arguments(
        p, "the broker the gateways publish to: mqtt://HOST:PORT (default port 1883) or mqtts://HOST:PORT (TLS, "
           "default 8883)", user_help="broker user name (with an ACL: one that may read the topics, not write)")
    p.add_argument("--mqtt-topic", action="append", default=None, metavar="FILTER",
                   help="a topic filter to subscribe to; repeat for more (default %s: every gateway under the default "
                        "prefix)" % DEFAULT_TOPIC)
    p.add_argument("--client-id", default=None, metavar="ID",
                   help="this view's MQTT client id, which names its session on the broker: start it again with the "
                        "same id to get what was published while it was away (default edgetwin-fleet-HOSTNAME). Two "
                        "views running at once need two ids")
    p.add_argument("--session-expiry", type=float, default=DEFAULT_EXPIRY_S, metavar="SECONDS",
                   help="how long the broker keeps the session (and queues events) after this view goes (default "
                        "%d: a week)" % DEFAULT_EXPIRY_S)
    p.add_argument("--jsonl", default=None, metavar="FILE",
                   help="append each distinct event (annotation, alarm, trip) once, as one JSON line (the payload of "
                        "docs/MQTT.md 3), to FILE, or to stdout with '-' (then the live view is off)")
    p.add_argument("--for", dest="seconds", type=float, default=None, metavar="SECONDS",
                   help="stop after this long (default: until Ctrl-C or SIGTERM)")
    from host.ui import serve

    u = p.add_argument_group("web view (off by default; docs/MQTT.md 6, docs/DASHBOARD.md)")
    u.add_argument("--ui", action="store_true",
                   help="serve the same view as a web page, live (server-sent events), on 127.0.0.1 only unless told "
                        "otherwise (its address is printed)")
    serve.add_arguments(u)


def _check(args: argparse.Namespace) -> "tuple[MqttConfig, list[str], str, int]":
    """(MqttConfig, topic filters, client id, expiry) from the options; UserError for a bad one."""
    from host import mqtt_topics
    from host.cliargs import check_out_path
    from host.fleet import default_client_id

    if args.mqtt is None:
        raise UserError("give the broker: --mqtt mqtt://HOST:PORT")
    try:
        broker = mqtt_topics.broker_settings(args)
        topics = [mqtt_topics.check_filter(t) for t in args.mqtt_topic or [DEFAULT_TOPIC]]
    except mqtt_topics.MqttConfigError as e:
        raise UserError(str(e)) from None
    client_id = args.client_id if args.client_id is not None else default_client_id(
        mqtt_topics.default_gateway_name())
    if not 1 <= len(client_id.encode()) <= 128:
        raise UserError("--client-id must be 1..128 bytes, got %r" % client_id)
    if not 1 <= args.session_expiry <= 0xFFFFFFFF:  # MQTT 5: a four-byte number of seconds
        raise UserError("--session-expiry must be 1..4294967295 seconds, got %s" % args.session_expiry)
    if args.seconds is not None and not 0 < args.seconds < float("inf"):
        raise UserError("--for must be a positive number of seconds, got %s" % args.seconds)
    if args.jsonl is not None and args.jsonl != "-":
        check_out_path("--jsonl", Path(args.jsonl))
    config = mqtt_topics.MqttConfig(**broker)  # its gateway name and prefix are the publisher's, unused here
    return config, topics, client_id, int(args.session_expiry)


def _ui_bind(args: argparse.Namespace) -> dict | None:
    """The web view's bind settings with --ui (host/ui/serve.check), None without; UserError for a bad one."""
    from host.ui import serve

    if not args.ui:
        given = serve.given_options(args)
        if given:
            raise UserError("%s needs --ui" % given[0])
        return None
    return serve.check(args)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    config, topics, client_id, expiry = _check(args)
    bind = _ui_bind(args)
    fleet, sink = _fleet(args)
    listener = _listener(args, config, topics, client_id, expiry, fleet)
    server = None
    if bind is not None:  # bound before the broker is tried: a port in use fails with nothing to undo
        from host.ui import serve

        server = serve.listen(bind)
    # with --jsonl - stdout carries the events: the messages go to stderr and there is no live view
    console = Console(stderr=args.jsonl == "-", highlight=False)
    page = None
    try:
        from host.fleet import ConnectError

        try:
            listener.connect()
        except ConnectError as e:
            raise UserError(str(e)) from None
        t0 = time.monotonic()
        console.print("edgetwin fleet: connected to %s, session %s (kept %d s), subscribed to %s%s"
                      % (listener.where, client_id, expiry, ", ".join(topics),
                         "; %d events already in %s" % (fleet.known, args.jsonl) if fleet.known else ""),
                      soft_wrap=True)
        if server is not None:
            from host.ui import serve
            from host.ui.fleet_page import FleetPage, make_fleet_app

            page = FleetPage(fleet, listener.where, lambda: listener.connected, token=bind["token"],
                             hosts=serve.allowed_hosts(bind))
            server.start(make_fleet_app(page))
            console.print("edgetwin fleet: web view on %s" % server.url, soft_wrap=True)
        try:
            _follow(args, console, fleet, listener, t0)
        finally:
            listener.stop()
            if sink is not None:
                sink.close()
    finally:
        if server is not None:
            server.stop(page.close if page is not None else None)
    tot = fleet.totals()
    # one line, never wrapped (soft_wrap): a script reads it
    console.print("edgetwin fleet: stopped after %.0f s: %d gateways (%d online), %d nodes (%d online), %d events "
                  "(%d duplicates dropped), %d statuses, %d other messages ignored, %d messages, %d connects"
                  % (time.monotonic() - t0, tot["gateways"], tot["gateways_online"], tot["nodes"], tot["nodes_online"],
                     tot["events"], tot["duplicates"], tot["statuses"], tot["ignored"], tot["messages"],
                     listener.connects), soft_wrap=True)
    sys.stdout.flush()
    if listener.error:
        print("edgetwin fleet: error: %s; not acknowledged, the broker keeps it for the next start" % listener.error,
              file=sys.stderr)
        return 1
    return 0


def _fleet(args: argparse.Namespace) -> "tuple[Fleet, JsonlSink | None]":
    """(Fleet, JsonlSink or None): the model, knowing the keys an earlier run wrote to the --jsonl file."""
    from host.fleet import Fleet, JsonlSink

    sink = JsonlSink(args.jsonl) if args.jsonl is not None else None
    try:
        seen = sink.keys() if sink is not None else []
    except OSError as e:
        raise UserError("--jsonl %s: cannot read it (%s)" % (args.jsonl, e.strerror or e)) from None
    except ValueError as e:
        raise UserError("--jsonl %s: %s" % (args.jsonl, e)) from None
    return Fleet(seen, sink=sink.write if sink is not None else None), sink


def _listener(args: argparse.Namespace, config: "MqttConfig", topics: list[str], client_id: str, expiry: int,
              fleet: "Fleet") -> "Listener":
    from host import mqtt_topics
    from host.fleet import Listener

    try:
        return Listener(config, topics, client_id, expiry, fleet)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError: a CA or key that is not PEM
        raise UserError("%s: cannot set up TLS with %s: %s" % (args.mqtt, mqtt_topics.tls_files(config), e)) from None


def _follow(args: argparse.Namespace, console: "Console", fleet: "Fleet", listener: "Listener", t0: float) -> None:
    """The live view (and the listener's lines) until a signal, --for, or a sink that cannot write."""
    from rich.live import Live

    done = threading.Event()
    old = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    live = None if args.jsonl == "-" else Live(console=console, get_renderable=lambda: view(fleet, listener),
                                               refresh_per_second=2)
    try:
        if live is not None:
            live.start()
        deadline = None if args.seconds is None else t0 + args.seconds
        while not done.is_set() and not listener.failed.is_set():
            for line in listener.notices():
                console.print("%s %s" % (time.strftime("%H:%M:%S"), line), soft_wrap=True)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            done.wait(0.25 if left is None else min(0.25, left))
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        if live is not None:
            live.stop()  # on a terminal the view stays as it was; elsewhere (a pipe) it is printed once, here
            if not console.is_terminal:
                console.line()


def view(fleet: "Fleet", listener: "Listener") -> "Group":
    """The live view: a header line, then per gateway a table of its nodes (link, health, alarms, latest notes)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    tot = fleet.totals()
    parts: list = [Text.assemble(
        ("edgetwin fleet  ", "bold"),
        ("%s %s  " % (listener.where, "connected" if listener.connected else "reconnecting..."),
         "green" if listener.connected else "red"),
        "%d gateways (%d online), %d nodes (%d online), %d events, %d duplicates dropped"
        % (tot["gateways"], tot["gateways_online"], tot["nodes"], tot["nodes_online"], tot["events"],
           tot["duplicates"]))]
    with fleet.lock:
        for g in sorted(fleet.gateways.values(), key=lambda g: g.name):
            state = "no status yet" if g.online is None else "online" if g.online else "offline: %s" % (g.reason or "?")
            t = Table(title=Text.assemble((g.name, "bold"), "  ", (state, "green" if g.online else "red")),
                      title_justify="left", expand=True)
            t.add_column("node", no_wrap=True)
            t.add_column("link", ratio=2)
            t.add_column("health", ratio=2)
            t.add_column("alarms / trips", ratio=2)
            t.add_column("latest notes", ratio=5)
            for n in sorted(g.nodes.values(), key=lambda n: n.name):
                up = g.node_online(n)
                # a node's state is its gateway's view: unknown while the gateway is offline
                link = Text("up" if up else "down" if g.online else "?", style="green" if up else "red")
                if n.board:
                    link.append(" " + n.board, style="dim")
                if n.why and not up:
                    link.append("\n" + n.why, style="dim")
                health = " ".join("%s=%s" % (k, n.health[k]) for k in ("heap", "dropped", "backlog", "committed")
                                  if k in n.health)
                if n.notice:
                    health += ("\n" if health else "") + n.notice
                alarms = "%d / %d" % (n.events["alarm"], n.events["trip"])
                if n.last_alarm is not None:
                    a = n.last_alarm
                    alarms += "\n%s %s %s %s" % (str(a.get("time", ""))[11:19], a.get("machine", ""), a.get("tag", ""),
                                                 a.get("state", ""))
                notes = Text()
                for i, note in enumerate(reversed(n.notes)):
                    notes.append(("\n" if i else "") + "%s " % str(note.get("time", ""))[11:19], style="dim")
                    # the node's own text while its gateway was away is not verified: told apart
                    notes.append(str(note.get("text", "")), style="" if note.get("verified") else "yellow")
                t.add_row(n.name, link, health, alarms, notes)
            parts.append(t)
    return Group(*parts)
