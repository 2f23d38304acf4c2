"""`edgetwin gateway`: serve nodes on serial ports: store their logs, verify their drafts."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from host import linkkeys
from host.cliargs import check_out_path
from host.errors import UserError

HELP = "run the gateway: one session per serial port, logs into SQLite, drafts verified in batches"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from host import gateway_config

    gateway_config.attach(p)  # --config FILE: every option below, read from a TOML file
    p.add_argument("--port", action="append", required=True, metavar="PORT",
                   help="a node's serial port (a device, a virtual board's UART pty, or a pyserial URL); "
                        "repeat for more nodes. NAME=PORT names the node in the store (default: its plant "
                        "description's name, else node-<its unique id>)")
    p.add_argument("--plant", action="append", default=[], metavar="FILE",
                   help="the plant description the node logs (docs/PLANT.md): once for every port, or once per "
                        "--port in order. Its hash is checked against the node's PLANT line; default: the "
                        "built-in simulator's")
    p.add_argument("--db", default="edgetwin.db",
                   help="SQLite log store (created 0640 if missing, in an existing directory; default edgetwin.db)")
    p.add_argument("--keys", default=None, metavar="FILE", help=linkkeys.HELP)
    p.add_argument("--insecure", action="store_true",
                   help="also take nodes whose frames are not signed (nodes without a key, protocol 1.2 and older); "
                        "anything that can write to their serial line is then believed")
    p.add_argument("--baud", type=int, default=115200, help="baud rate (default 115200)")
    p.add_argument("--model", default=None,
                   help="the target model that verifies drafts: smollm2 (the shipped SmolLM2-135M-Instruct), a GGUF "
                        "file, or tiny:SEED for the tiny seeded target of host/tiny_target.py. Without it, drafts are not "
                        "verified (logs only)")
    p.add_argument("--target", choices=("domain", "stock"), default="domain",
                   help="with --model smollm2: domain (default: adapted to the plant, models/target) or stock")
    p.add_argument("--temperature", type=float, default=0.0, help="target sampling temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=0, help="target top-k (0: all)")
    p.add_argument("--seed", type=int, default=1, help="sampling seed")
    p.add_argument("--status", default=None, help="write a JSON status snapshot here twice a second")
    p.add_argument("--seconds", type=float, default=None, help="stop after this long (default: until Ctrl-C)")
    p.add_argument("--name", action="append", default=[], metavar="NAME",
                   help="name the nodes in the store and in `ask`, in the order of the --port options (the same as "
                        "NAME=PORT); default: the plant description's name, else node-<the node's unique id>")
    p.add_argument("--peer-timeout", type=float, default=3.5, metavar="SECONDS",
                   help="a node silent this long is lost (default 3.5; an emulated board runs 6-20x slower than a "
                        "real one: give it 30)")
    p.add_argument("--status-every", type=float, default=30.0, metavar="SECONDS",
                   help="print a status line this often: nodes up, lines stored, annotations, acceptance, tokens/s "
                        "(default 30)")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="append every drafting node's token stream here, one JSON line per PROMPT and VERDICT: "
                        '{"node", "kind": "prompt"|"verdict", "end": committed count after it, "ids"} (to replay '
                        "or audit what was committed)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (no sessions up/down, no status lines)")
    u = p.add_argument_group("dashboard (off by default; docs/DASHBOARD.md)")
    u.add_argument("--ui", action="store_true",
                   help="serve the dashboard beside the gateway: nodes, machines' plots, annotations, questions; "
                        "on 127.0.0.1 only unless told otherwise (its address is printed)")
    from host.cliargs import add_ask_arguments
    from host.ui import serve

    serve.add_arguments(u)
    add_ask_arguments(u, "--ui-")
    from host import mqtt_topics

    m = p.add_argument_group("MQTT (off by default; docs/MQTT.md)")
    mqtt_topics.add_broker_arguments(
        m, "publish committed annotations, alarms, trips and node status to this broker: mqtt://HOST:PORT "
           "(default port 1883) or mqtts://HOST:PORT (TLS, default 8883). The store is the outbox: nothing "
           "committed is lost while the broker is away")
    m.add_argument("--mqtt-gateway", default=None, metavar="NAME",
                   help="this gateway's name in topics and payloads (default: the host name)")
    m.add_argument("--mqtt-prefix", default=None, metavar="PREFIX",
                   help="topic prefix (default edgetwin/NAME: a fleet view subscribes to edgetwin/+/...)")
    m.add_argument("--sparkplug", default=None, metavar="GROUP",
                   help="also publish as a Sparkplug B 3.0 edge node (named by --mqtt-gateway) in this group on "
                        "the same broker: each node a device, each signal, alarm, trip and note a metric "
                        "(docs/MQTT.md 7)")
    m.add_argument("--sparkplug-host", default=None, metavar="ID",
                   help="the primary host application's id: hold the data (in the store) while its STATE says "
                        "offline, and send it marked historical when it is back")
    o = p.add_argument_group("OPC UA (off by default; docs/OPCUA.md)")
    from host import opcua_args

    opcua_args.add_arguments(o)

def _trace_writer(path: Path):
    """A NodeStream hook appending each PROMPT's and VERDICT's committed ids to path as a JSON line."""
    f = open(path, "a", buffering=1)  # line-buffered: a killed gateway leaves whole lines

    def hook(kind: str, sp, data) -> None:
        if kind not in ("prompt", "verdict"):
            return
        ids = data if kind == "prompt" else data["ids"]
        f.write(json.dumps({"node": sp.session.name, "kind": kind, "end": sp.stream.committed,
                            "ids": [int(t) for t in ids]}) + "\n")

    return hook


def _split(spec: str) -> tuple[str | None, str]:
    if "=" in spec and "://" not in spec.split("=", 1)[0]:
        name, port = spec.split("=", 1)
        if name and port:
            return name, port
    return None, spec


def _mqtt_config(args: argparse.Namespace):
    """host.mqtt_topics.MqttConfig from the --mqtt options, or None without --mqtt; UserError for a bad one."""
    given = [o for o in ("mqtt_gateway", "mqtt_prefix", "mqtt_user", "mqtt_password_file", "mqtt_ca", "mqtt_cert",
                         "mqtt_key") if getattr(args, o) is not None]
    if args.mqtt is None:
        if given:
            raise UserError("--%s needs --mqtt URL" % given[0].replace("_", "-"))
        return None
    from host import mqtt_topics

    try:
        broker = mqtt_topics.broker_settings(args)
        gateway = mqtt_topics.check_gateway_name(args.mqtt_gateway if args.mqtt_gateway is not None
                                                 else mqtt_topics.default_gateway_name())
        prefix = mqtt_topics.check_prefix(args.mqtt_prefix if args.mqtt_prefix is not None else "edgetwin/" + gateway)
    except mqtt_topics.MqttConfigError as e:
        raise UserError(str(e)) from None
    return mqtt_topics.MqttConfig(gateway=gateway, prefix=prefix, **broker)


def run(args: argparse.Namespace) -> int:
    pairs = [_split(p) for p in args.port]
    if len(args.name) > len(pairs):
        raise UserError("%d --name options for %d --port options" % (len(args.name), len(pairs)))
    for i, n in enumerate(args.name):
        if not n.strip():
            raise UserError("--name must not be empty")
        if pairs[i][0] is not None and pairs[i][0] != n:
            raise UserError("port %s is named twice: %s=... and --name %s" % (pairs[i][1], pairs[i][0], n))
        pairs[i] = (n, pairs[i][1])
    if not 0.5 <= args.peer_timeout <= 3600:
        raise UserError("--peer-timeout must be 0.5..3600 seconds, got %s" % args.peer_timeout)
    if not args.status_every > 0:
        raise UserError("--status-every must be a positive number of seconds, got %s" % args.status_every)
    ports = [p for _, p in pairs]
    names = [n for n, _ in pairs]
    if len(set(ports)) != len(ports):
        raise UserError("a port is given twice: %s" % ", ".join(sorted({p for p in ports if ports.count(p) > 1})))
    given = [n for n in names if n]
    if len(set(given)) != len(given):
        raise UserError("two --port options name the same node")
    plants = _plants(args.plant, len(ports))
    if args.baud <= 0:
        raise UserError("--baud must be positive, got %d" % args.baud)
    if not all(p.strip() for p in ports):
        raise UserError("--port: an empty port name")
    for opt, v in (("--top-k", args.top_k), ("--seed", args.seed)):
        if v < 0:
            raise UserError("%s must be >= 0, got %d" % (opt, v))
    if not 0 <= args.temperature < float("inf"):
        raise UserError("--temperature must be a number >= 0, got %s" % args.temperature)
    if args.seconds is not None and not 0 < args.seconds < float("inf"):
        raise UserError("--seconds must be a positive number, got %s" % args.seconds)
    mqtt_config = _mqtt_config(args)
    sparkplug = _sparkplug_config(args, mqtt_config)
    opcua_bind = _opcua_bind(args)
    ui_bind = _ui_bind(args)
    db = Path(args.db)
    check_out_path("--db", db)  # before the model loads (seconds): a bad path fails at once
    ui_server = None
    if ui_bind is not None:  # bound before anything is created: a port in use fails with nothing to undo
        from host.ui import serve

        ui_server = serve.listen(ui_bind)
    try:
        return _run(args, ports, names, db, mqtt_config, ui_bind, ui_server, plants, sparkplug, opcua_bind)
    finally:
        if ui_server is not None:
            ui_server.stop()


def _plants(files: list[str], n_ports: int) -> list:
    """The --plant descriptions (host/plantdesc.PlantDesc), one per port; [None] * n for the simulator's."""
    if not files:
        return [None] * n_ports
    if len(files) not in (1, n_ports):
        raise UserError("%d --plant options for %d --port options: give one for all, or one per port" % (
            len(files), n_ports))
    from host import plantdesc, plantfile

    out = []
    for f in files:
        try:
            out.append(plantdesc.load(f))
        except plantfile.PlantFileError as e:
            raise UserError(str(e)) from None
    return out * n_ports if len(out) == 1 else out


def _sparkplug_config(args: argparse.Namespace, mqtt_config):
    """host.sparkplug.SparkplugConfig from --sparkplug (on --mqtt's broker), None without; UserError else."""
    if args.sparkplug is None:
        if args.sparkplug_host is not None:
            raise UserError("--sparkplug-host needs --sparkplug GROUP")
        return None
    if mqtt_config is None:
        raise UserError("--sparkplug needs --mqtt URL (the broker it publishes to)")
    from host import sparkplug

    try:
        group = sparkplug.check_id("--sparkplug", args.sparkplug)
        edge = sparkplug.check_id("--mqtt-gateway", mqtt_config.gateway)
        host_id = None if args.sparkplug_host is None else sparkplug.check_id("--sparkplug-host", args.sparkplug_host)
    except ValueError as e:
        raise UserError(str(e)) from None
    return sparkplug.SparkplugConfig(mqtt_config, group, edge, host_id)


def _opcua_bind(args: argparse.Namespace) -> dict | None:
    from host import opcua_args

    if args.opcua is None:
        given = opcua_args.given_options(args)
        if given:
            raise UserError("%s needs --opcua URL" % given[0])
        return None
    return opcua_args.bind(args)


def _run(args: argparse.Namespace, ports: list[str], names: list[str], db: Path, mqtt_config, ui_bind: dict | None,
         ui_server, plants: list, sparkplug=None, opcua_bind: dict | None = None) -> int:
    from host.gateway import Gateway
    from host.session import PortError
    from host.store import StoreError, remove_files, side_files

    outlets: list = []
    if mqtt_config is not None:  # before the model loads: bad TLS files fail at once
        from host import mqtt, mqtt_topics

        try:
            outlets.append(mqtt.Publisher(db, mqtt_config))
            if sparkplug is not None:
                from host.sparkplug import SparkplugNode

                outlets.append(SparkplugNode(db, sparkplug))
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError: a CA or key that is not PEM
            raise UserError("%s: cannot set up TLS with %s: %s"
                            % (args.mqtt, mqtt_topics.tls_files(mqtt_config), e)) from None
    if opcua_bind is not None:
        from host import mqtt_topics
        from host.opcua import OpcuaView

        gw_name = mqtt_config.gateway if mqtt_config is not None else mqtt_topics.default_gateway_name()
        outlets.insert(0, OpcuaView(db, opcua_bind, gw_name))  # first: a port in use fails before anything is sent
    status = Path(args.status) if args.status else None
    if status is not None:
        check_out_path("--status", status)
    for p in ports:  # before the store opens (a session records its node there): a typo changes no file
        if "://" not in p and not os.path.exists(p):
            raise UserError("serial port %s does not exist: is the board plugged in (or the virtual board running)?"
                            % p)
    spec_factory = verify = None
    trace_hook = None
    if args.trace is not None:
        trace = Path(args.trace)
        check_out_path("--trace", trace)
        if args.model is None:
            raise UserError("--trace records the token streams the target verifies: give --model too")
        trace_hook = _trace_writer(trace)
    domain = False
    if args.model == "smollm2":
        from host import target_delta, weights

        try:
            path, domain, label = target_delta.choose(args.target)
        except weights.ModelNotInstalled as e:
            raise UserError(str(e)) from None
        args.model = str(path)
        if not args.quiet:
            print("edgetwin gateway: target: %s" % label, flush=True)
    if args.model is not None and Path(args.model).is_dir():
        raise UserError("--model %s is a directory, not a GGUF model file" % args.model)
    if args.model is not None:
        from host import gateway

        if not args.quiet:
            print("edgetwin gateway: loading the target model %s" % args.model, flush=True)
        try:
            spec_factory, verify = gateway.make_spec(args.model, temperature=args.temperature, top_k=args.top_k,
                                                     seed=args.seed, hook=trace_hook, domain=domain)
        except (OSError, ValueError) as e:
            raise UserError("cannot load model %s: %s" % (args.model, e)) from None
    # A start that fails leaves nothing it created: a new store (and its -wal/-shm), the status file.
    ours = [] if db.exists() else [p for p in side_files(db) if not p.exists()]
    if status is not None:
        ours += [p for p in (status, status.with_suffix(".tmp")) if not p.exists()]
    keys = linkkeys.KeyFile(args.keys if args.keys is not None else linkkeys.default_path())
    try:
        gw = Gateway(ports, db, baud=args.baud, names=names, spec_factory=spec_factory, verify=verify,
                     status_path=args.status, out=None if args.quiet else sys.stdout,
                     status_every=args.status_every, peer_timeout_s=args.peer_timeout, outlets=outlets,
                     plants=plants, keys=keys, insecure=args.insecure)
    except (StoreError, ValueError) as e:
        remove_files(ours)
        raise UserError(str(e)) from None
    try:
        gw.open()
    except (PortError, StoreError, UserError) as e:  # a port, the store, an outlet (the OPC UA port in use)
        gw.close()
        remove_files(ours)
        raise UserError(str(e)) from None
    ui = None
    if ui_bind is not None:
        from host.ui import asking, serve

        gw.keep_status = True
        gw.write_status(force=True)
        try:
            ui = serve.start(db, ui_bind, lambda: gw.snapshot,
                             asker=asking.Asker(db, target=args.ui_target, reranker=args.ui_reranker),
                             title="edgetwin gateway: %s" % db.name, server=ui_server)
        except BaseException:
            gw.close()
            raise
        print("edgetwin gateway: dashboard on %s" % ui[0].url, flush=True)
    if not args.quiet:
        print("edgetwin gateway: %d port(s), store %s%s; a status line every %g s (--quiet: none)"
              % (len(ports), args.db, ", model %s" % args.model if args.model else "", args.status_every), flush=True)
        for s in gw.sessions:
            print("edgetwin gateway: %s: plant %s (hash %s)%s" % (s.url, s.plant.name, s.plant.hash,
                                                                  ", the built-in simulator" if s.plant.simulator
                                                                  else ""), flush=True)
        if args.insecure:  # (in the status file too: "insecure")
            print("edgetwin gateway: --insecure: nodes without a key are taken unsigned; anything that can write "
                  "to their serial line is believed (docs/PROTOCOL.md \"Authentication\")", flush=True)
        else:
            print("edgetwin gateway: link keys %s (%d node(s)); unsigned nodes are refused (--insecure takes them)"
                  % (keys.path, len(keys.nodes)), flush=True)
        if mqtt_config is not None:
            print("edgetwin gateway: publishing to %s under %s/ (the store is the outbox)"
                  % (args.mqtt, mqtt_config.prefix), flush=True)
        if sparkplug is not None:
            print("edgetwin gateway: Sparkplug B edge node %s/%s on %s%s" % (
                sparkplug.group, sparkplug.edge, args.mqtt,
                ", primary host %s" % sparkplug.host_id if sparkplug.host_id else ""), flush=True)
    from host import sdnotify

    gw.notifier = sdnotify.Notifier.from_env()  # under systemd (Type=notify): READY, WATCHDOG, STOPPING
    try:
        return gw.run(seconds=args.seconds)
    finally:
        if ui is not None:
            ui[0].stop(ui[1].close)  # the event streams end, then the server (run() closes its socket again)


def _ui_bind(args: argparse.Namespace) -> dict | None:
    """The dashboard's bind settings with --ui (host/ui/serve.check), None without; UserError for a bad one."""
    from host.cliargs import check_target
    from host.ui import serve

    if not args.ui:
        given = serve.given_options(args) + ["--" + o.replace("_", "-") for o, default in (
            ("ui_target", "domain"), ("ui_reranker", None)) if getattr(args, o) != default]
        if given:
            raise UserError("%s needs --ui" % given[0])
        return None
    bind = serve.check(args)
    check_target("--ui-target", args.ui_target)
    if args.ui_reranker is not None and not Path(args.ui_reranker).is_dir():
        raise UserError("--ui-reranker %s: no such directory" % args.ui_reranker)
    return bind
