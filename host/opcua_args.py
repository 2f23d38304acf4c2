"""opcua_args.py: the `--opcua` options of `edgetwin gateway` and their bind rules (docs/OPCUA.md).

The same rules as the dashboard's (host/ui/serve.py): off by default, loopback without security is allowed
(anyone who can reach 127.0.0.1 can already read the store file), anything reachable from other machines
is refused unless it is signed and encrypted (Basic256Sha256, SignAndEncrypt) with a certificate and a
user name and password: then that is the only endpoint, and anonymous clients are refused. The security
options given on a loopback address turn the same secure-only mode on there.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import urllib.parse
from pathlib import Path

from host.errors import UserError
from host.ui.serve import is_loopback

DEFAULT_PORT = 4840  # IANA's port for OPC UA over TCP
DEFAULT_PATH = "/edgetwin/"
PASSWORD_ENV = "EDGETWIN_OPCUA_PASSWORD"
PASSWORD_MIN = 12  # characters: a password that crosses the network under a user name, not a PIN
_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_SECURITY = ("opcua_cert", "opcua_key", "opcua_user", "opcua_password_file")


def add_arguments(g) -> None:
    """The OPC UA server options (an argparse parser or argument group)."""
    g.add_argument("--opcua", default=None, metavar="URL",
                   help="serve an OPC UA view of the store at opc.tcp://HOST[:PORT][/PATH] (default off; port %d; "
                        "127.0.0.1 or ::1 needs no security, any other address --opcua-cert, --opcua-key, "
                        "--opcua-user and a password: docs/OPCUA.md)" % DEFAULT_PORT)
    g.add_argument("--opcua-cert", default=None, metavar="FILE",
                   help="the OPC UA server's certificate (PEM or DER); with it only Basic256Sha256 "
                        "SignAndEncrypt is served")
    g.add_argument("--opcua-key", default=None, metavar="FILE", help="and its private key (PEM or DER, unencrypted)")
    g.add_argument("--opcua-user", default=None, metavar="USER",
                   help="the user name OPC UA clients log in with (no anonymous clients then)")
    g.add_argument("--opcua-password-file", default=None, metavar="FILE",
                   help="the file whose first line is that user's password (or set %s)" % PASSWORD_ENV)


def given_options(args: argparse.Namespace) -> list[str]:
    """The --opcua-* options that are set (an error without --opcua)."""
    return ["--" + o.replace("_", "-") for o in _SECURITY if getattr(args, o, None) is not None]


def _host_port(url: str) -> tuple[str, int, str]:
    if not url.lower().startswith("opc.tcp://"):
        raise UserError("--opcua %s: the URL must start with opc.tcp:// (e.g. opc.tcp://127.0.0.1:%d)"
                        % (url, DEFAULT_PORT))
    u = urllib.parse.urlsplit(url)
    if u.query or u.fragment or u.username is not None or u.password is not None:
        raise UserError("--opcua %s: give opc.tcp://HOST[:PORT][/PATH] only (no user, query or fragment)" % url)
    try:
        port = u.port
    except ValueError:
        raise UserError("--opcua %s: the port must be 0..65535" % url) from None
    host = u.hostname or ""
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise UserError("--opcua %s: the host must be an IP address (127.0.0.1, ::1, 0.0.0.0) or localhost, got %r"
                        % (url, u.hostname or "")) from None
    path = u.path or DEFAULT_PATH
    if not re.fullmatch(r"(/[A-Za-z0-9_.~-]*)+", path):
        raise UserError("--opcua %s: the path may hold letters, digits and _.~- between slashes, got %r" % (url, path))
    return host, DEFAULT_PORT if port is None else port, path


def _password(args: argparse.Namespace) -> str | None:
    f = getattr(args, "opcua_password_file", None)
    if f is None:
        return os.environ.get(PASSWORD_ENV) or None
    try:
        lines = Path(f).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError("--opcua-password-file %s: no such file" % f) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError("--opcua-password-file %s: cannot read it (%s)" % (f, getattr(e, "strerror", None) or e)) \
            from None
    pw = lines[0].strip("\r") if lines else ""
    if not pw:
        raise UserError("--opcua-password-file %s: the first line is empty" % f)
    return pw


def bind(args: argparse.Namespace) -> dict | None:
    """The server's settings from the options (None without --opcua), or UserError (one line) for a bad or
    unsafe combination. secure: serve only Basic256Sha256 SignAndEncrypt with user and password."""
    url = getattr(args, "opcua", None)
    if url is None:
        return None
    host, port, path = _host_port(url.strip())
    cert, key, user = args.opcua_cert, args.opcua_key, args.opcua_user
    if (cert is None) != (key is None):
        raise UserError("--opcua-cert and --opcua-key go together")
    for opt, v in (("--opcua-cert", cert), ("--opcua-key", key)):
        if v is not None and not Path(v).is_file():
            raise UserError("%s %s: no such file" % (opt, v))
    if user is not None and not _USER.fullmatch(user):
        raise UserError("--opcua-user must be 1..64 letters, digits or _.@-, got %r" % user)
    password = _password(args) if (user is not None or args.opcua_password_file is not None) else None
    if (user is None) != (password is None):
        raise UserError("--opcua-user and a password go together (--opcua-password-file FILE or %s)" % PASSWORD_ENV)
    if password is not None and len(password) < PASSWORD_MIN:
        raise UserError("the --opcua-user password must be at least %d characters (e.g. from: openssl rand -hex 16)"
                        % PASSWORD_MIN)
    secure = cert is not None or user is not None
    if not is_loopback(host) and not (cert is not None and user is not None):
        raise UserError("--opcua %s is reachable from other machines: give --opcua-cert, --opcua-key, --opcua-user "
                        "and a password too (docs/OPCUA.md), or keep 127.0.0.1" % url)
    if secure and (cert is None or user is None):
        raise UserError("--opcua-cert, --opcua-key, --opcua-user and a password go together: security is "
                        "signed and encrypted with a user, or none on a loopback address (docs/OPCUA.md)")
    shown = "[%s]" % host if ":" in host else host
    return {"host": host, "port": port, "path": path, "cert": cert, "key": key, "user": user, "password": password,
            "secure": secure, "url": "opc.tcp://%s:%d%s" % (shown, port, path)}
