"""The gateway's link keys: one secret per node, found by the unique id the node's HELLO carries.

The keys file (JSON, mode 0600, never printed) is written by `edgetwin deploy --node` as it provisions a
node and read by `edgetwin gateway --keys FILE`:

    {"version": 1, "nodes": {"e6614103e7452d2f": {"name": "pico-1", "key": "<64 hex digits>",
                                                  "previous": [], "provisioned": "2026-12-06T20:40:00Z"}}}

Provisioning a node that already has a key rotates it: the new key becomes current and the old one is kept
in "previous" until the node is seen with the new one (its redeploy and reboot take a while; the node spills
meanwhile), then the gateway drops it (settle). A gateway reads the file again when a node it holds no key
for says hello, so a node provisioned while the gateway runs is taken without a restart. docs/PROTOCOL.md
"Authentication" has the threat model.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path

from host.errors import UserError

KEY_BYTES = 32  # HMAC-SHA256's block allows up to 64; 32 random bytes is its strength
DEFAULT_PATH = "~/.config/edgetwin/keys.json"  # where deploy and the gateway look without --keys
HELP = ("the node keys file: written (0600) by `edgetwin deploy --node`, read by the gateway (default "
        + DEFAULT_PATH + "; $EDGETWIN_KEYS overrides)")


class KeyFileError(UserError):
    """A keys file that cannot be used: one line naming the file and what is wrong."""


def default_path() -> Path:
    return Path(os.environ.get("EDGETWIN_KEYS") or DEFAULT_PATH).expanduser()


def _uid(v: str) -> bool:
    return isinstance(v, str) and len(v) == 16 and all(c in "0123456789abcdef" for c in v)


def _key(v) -> bytes | None:
    if not isinstance(v, str) or not 32 <= len(v) <= 128 or len(v) % 2:
        return None
    try:
        return bytes.fromhex(v)
    except ValueError:
        return None


class KeyFile:
    """The keys file at `path` (it may not exist yet: no node is provisioned)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._mtime: float | None = -1.0
        self.nodes: dict[str, dict] = {}
        self.load()

    # ---- reading ----

    def load(self) -> None:
        """Read the file (again); KeyFileError for a file that is not a keys file or is open to others."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._mtime, self.nodes = None, {}
            return
        except OSError as e:
            raise KeyFileError("keys file %s: %s" % (self.path, e.strerror or e)) from None
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError("keys file %s is not a regular file" % self.path)
        if st.st_mode & 0o077:
            raise KeyFileError("keys file %s can be read by other users (mode %o): chmod 600 %s"
                               % (self.path, st.st_mode & 0o777, self.path))
        try:
            doc = json.loads(self.path.read_bytes())
        except OSError as e:
            raise KeyFileError("keys file %s: %s" % (self.path, e.strerror or e)) from None
        except ValueError as e:
            raise KeyFileError("keys file %s is not JSON: %s" % (self.path, e)) from None
        self.nodes = self._check(doc)
        self._mtime = st.st_mtime_ns

    def _check(self, doc) -> dict[str, dict]:
        if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("nodes"), dict):
            raise KeyFileError("keys file %s: not an edgetwin keys file (want {\"version\": 1, \"nodes\": {...}})"
                               % self.path)
        out = {}
        for uid, e in doc["nodes"].items():
            where = "keys file %s: node %s" % (self.path, str(uid)[:40])
            if not _uid(uid):
                raise KeyFileError(where + ": a unique id is 16 lower-case hex digits")
            if not isinstance(e, dict) or _key(e.get("key")) is None:
                raise KeyFileError(where + ": 'key' must be 32..128 hex digits")
            prev = e.get("previous", [])
            if not isinstance(prev, list) or any(_key(p) is None for p in prev):
                raise KeyFileError(where + ": 'previous' must be a list of keys (hex)")
            if not isinstance(e.get("name", ""), str):
                raise KeyFileError(where + ": 'name' must be a string")
            out[uid] = e
        return out

    def changed(self) -> bool:
        try:
            m = self.path.stat().st_mtime_ns
        except OSError:
            m = None
        return m != self._mtime

    def keys_for(self, uid: str) -> list[bytes]:
        """The keys a node may sign with, current first; the file is read again when it changed (a node
        provisioned, or provisioned again, while the gateway runs)."""
        if self.changed():
            self.load()
        e = self.nodes.get(uid)
        if e is None:
            return []
        return [bytes.fromhex(e["key"])] + [bytes.fromhex(p) for p in e.get("previous", [])]

    def name(self, uid: str) -> str:
        return self.nodes.get(uid, {}).get("name", "")

    # ---- writing (deploy provisions, the gateway settles a rotation) ----

    @contextlib.contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.load()  # what another writer left
            yield
            self._write()
        finally:
            os.close(lock)

    def _write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps({"version": 1, "nodes": self.nodes}, indent=1, sort_keys=True).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self._mtime = self.path.stat().st_mtime_ns

    def provision(self, uid: str, name: str, key: bytes | None = None) -> bytes:
        """A new key (random unless given) for the node with this unique id (hex); its old key, if any, is
        kept until settle()."""
        if not _uid(uid):
            raise KeyFileError("a node's unique id is 16 hex digits, got %r" % uid)
        key = secrets.token_bytes(KEY_BYTES) if key is None else bytes(key)
        with self._locked():
            old = self.nodes.get(uid)
            prev = ([old["key"]] + old.get("previous", []))[:4] if old else []
            self.nodes[uid] = {"name": name, "key": key.hex(), "previous": prev,
                               "provisioned": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        return key

    def settle(self, uid: str) -> None:
        """The node signed with its current key: its previous keys are no longer accepted."""
        if not self.nodes.get(uid, {}).get("previous"):
            return
        with self._locked():
            if uid in self.nodes:
                self.nodes[uid]["previous"] = []


def fingerprint(key: bytes) -> bytes:
    """8 bytes that tell keys apart without revealing them (what the store keeps beside the counter)."""
    import hashlib

    return hashlib.sha256(b"edgetwin-key-id" + key).digest()[:8]
