"""serve.py: the dashboard's options, its bind rules, and uvicorn in a thread beside the caller.

Loopback only by default (127.0.0.1). Any other --ui-host is refused unless --ui-token, --ui-cert and
--ui-key are all given: then the server speaks TLS only and every request needs the token. The socket is
bound here (port 0: a free one), so the address printed is the one that listens.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import threading
from pathlib import Path
from typing import Callable

from host.errors import UserError

DEFAULT_PORT = 8470
TOKEN_ENV = "EDGETWIN_UI_TOKEN"


def add_arguments(g, prefix_help: str = "") -> None:
    """The bind and security options (the same on `edgetwin ui` and `edgetwin gateway --ui`)."""
    g.add_argument("--ui-port", type=int, default=DEFAULT_PORT, metavar="PORT",
                   help="%sthe dashboard's port (default %d; 0 picks a free one; the address is printed)"
                        % (prefix_help, DEFAULT_PORT))
    g.add_argument("--ui-host", default="127.0.0.1", metavar="ADDRESS",
                   help="the address to listen on (default 127.0.0.1, this machine only). Any other needs "
                        "--ui-token, --ui-cert and --ui-key (docs/DASHBOARD.md)")
    g.add_argument("--ui-token", default=None, metavar="TOKEN",
                   help="every request must carry this token (at least 16 characters; or set %s)" % TOKEN_ENV)
    g.add_argument("--ui-cert", default=None, metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    g.add_argument("--ui-key", default=None, metavar="FILE", help="and its private key (PEM)")


def given_options(args: argparse.Namespace) -> list[str]:
    """The options add_arguments added that are set away from their defaults (an error without --ui)."""
    defaults = (("ui_port", DEFAULT_PORT), ("ui_host", "127.0.0.1"), ("ui_token", None), ("ui_cert", None),
                ("ui_key", None))
    return ["--" + o.replace("_", "-") for o, default in defaults if getattr(args, o) != default]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check(args: argparse.Namespace) -> dict:
    """The bind settings from the options, or UserError (one line) for a bad or unsafe combination."""
    token = args.ui_token if args.ui_token is not None else os.environ.get(TOKEN_ENV)
    if not 0 <= args.ui_port <= 65535:
        raise UserError("--ui-port must be 0..65535, got %d" % args.ui_port)
    host = args.ui_host
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise UserError("--ui-host must be an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1), got %r" % args.ui_host) from None
    if (args.ui_cert is None) != (args.ui_key is None):
        raise UserError("--ui-cert and --ui-key go together")
    for opt, v in (("--ui-cert", args.ui_cert), ("--ui-key", args.ui_key)):
        if v is not None and not Path(v).is_file():
            raise UserError("%s %s: no such file" % (opt, v))
    if token is not None and len(token) < 16:
        raise UserError("--ui-token must be at least 16 characters (e.g. from: openssl rand -hex 16)")
    if not is_loopback(host) and (token is None or args.ui_cert is None):
        raise UserError("--ui-host %s is reachable from other machines: give --ui-token, --ui-cert and --ui-key "
                        "too (docs/DASHBOARD.md), or keep the default 127.0.0.1" % args.ui_host)
    return {"host": host, "port": args.ui_port, "token": token, "cert": args.ui_cert, "key": args.ui_key}


class UiServer:
    """uvicorn serving an app from its own thread on a socket bound here (at construction: a port in use or a
    certificate that is not PEM fails before anything else is opened); start(app) serves."""

    def __init__(self, host: str, port: int, cert: str | None = None, key: str | None = None) -> None:
        import ssl

        if cert is not None:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
            except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
                raise UserError("--ui-cert %s / --ui-key %s: cannot set up TLS: %s" % (cert, key, e)) from None
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as e:
            self.sock.close()
            raise UserError("--ui-port %d on %s: cannot listen there (%s)" % (port, host, e.strerror or e)) from None
        self.sock.listen(64)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.cert, self.key = cert, key
        self.server = None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d/" % ("https" if self.cert else "http", host, self.port)

    def start(self, app) -> "UiServer":
        import uvicorn

        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", ssl_certfile=self.cert,
                                ssl_keyfile=self.key, timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, name="dashboard",
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self, before: Callable[[], None] | None = None) -> None:
        if before is not None:
            before()
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.sock.close()


def allowed_hosts(bind: dict) -> tuple:
    """The Host headers a server bound to loopback accepts (no DNS rebinding); () (any) elsewhere, where the
    token guards it."""
    return ("127.0.0.1", "localhost", "[::1]", "::1") if is_loopback(bind["host"]) else ()


def listen(bind: dict) -> UiServer:
    """The socket bound (UserError if it cannot be), nothing served yet: a caller binds before it creates files."""
    return UiServer(bind["host"], bind["port"], bind["cert"], bind["key"])


def start(db: str | Path, bind: dict, status: Callable[[], dict | None], asker=None, title: str = "edgetwin",
          server: UiServer | None = None):
    """(server, dashboard) serving the store `db` (on `server` if bound already): started; stop with
    server.stop(dashboard.close)."""
    from host.ui.app import Dashboard, make_app
    from host.ui.feed import Feed

    if server is None:
        server = listen(bind)  # first: nothing opened if it fails
    try:
        feed = Feed(db).start()
    except BaseException:
        server.stop()
        raise
    dash = Dashboard(feed, status, asker=asker, title=title, token=bind["token"], hosts=allowed_hosts(bind))
    return server.start(make_app(dash)), dash
