"""opcua.py: a read-only OPC UA server view of the gateway's log store (`edgetwin gateway --opcua`, docs/OPCUA.md).

An asyncua server in its own thread (its own asyncio loop) follows the store the way the dashboard's feed does
(host/ui/feed.py): through its own read-only SQLite connection, which in WAL mode sees committed rows only and
never makes the gateway's loop wait. Every poll_s it reads the log lines and annotations after the last ids it
read (a store of months is never rescanned; at start the FTS5 index finds each machine's latest sample, trip and
alarm-point states) and writes them into an address space built from the plant descriptions the nodes named:

    Objects/<gateway>/<node>/{Online, Board, LatestAnnotation}
    Objects/<gateway>/<node>/<machine>/{<tag> (AnalogItemType), State, LastTrip, LatestAnnotation, Alarms/<tag>_<LEVEL>}

Node ids are strings, ns=<urn:edgetwin:gateway>;s=<gateway>/<node>/<machine>/<tag> (each name with "%" and "/"
percent-encoded), so a SCADA addresses them stably across restarts. Nothing is ever deleted (a client may be
subscribed): a description that changes adds what is new and updates units and ranges. Every variable is
CurrentRead only and the clients' user is never an administrator, so no client can write.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import hmac
import logging
import queue
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

from host import plantlines
from host.errors import UserError
from host.store import open_reader, read_plant, side_files

NS_URI = "urn:edgetwin:gateway"  # the namespace of every node this view adds (ns=2: 0 is OPC UA's, 1 the server's)
APP_URI = "urn:edgetwin:server"  # the server's ApplicationUri (a certificate's subjectAltName URI should say it)
SEED_LOOK = 2000  # at start, the index hits read back per machine and point before giving up on finding one
POLL_ROWS = 5000  # log rows read per query (a poll reads on until it has caught up, a few queries at a time)
NOTICES = 100  # operator lines kept between two notices() calls
START_S = 120.0  # start() waits this long for the server to listen

# UNECE Recommendation 20 common codes of the units plant descriptions use (OPC UA Part 8, EUInformation):
# unit as a description writes it -> (code, name). Any other unit gets UnitId -1 (no code known).
UNECE = {
    "C": ("CEL", "degree Celsius"), "degC": ("CEL", "degree Celsius"), "F": ("FAH", "degree Fahrenheit"),
    "K": ("KEL", "kelvin"), "bar": ("BAR", "bar"), "mbar": ("MBR", "millibar"), "Pa": ("PAL", "pascal"),
    "kPa": ("KPA", "kilopascal"), "MPa": ("MPA", "megapascal"), "psi": ("PS", "pound-force per square inch"),
    "A": ("AMP", "ampere"), "mA": ("4K", "milliampere"), "V": ("VLT", "volt"), "mV": ("2Z", "millivolt"),
    "W": ("WTT", "watt"), "kW": ("KWT", "kilowatt"), "kWh": ("KWH", "kilowatt hour"), "Hz": ("HTZ", "hertz"),
    "rpm": ("RPM", "revolutions per minute"), "%": ("P1", "percent"), "mm/s": ("C16", "millimetre per second"),
    "m/s": ("MTS", "metre per second"), "m3/h": ("MQH", "cubic metre per hour"), "l/min": ("L2", "litre per minute"),
    "mm": ("MMT", "millimetre"), "m": ("MTR", "metre"), "kg": ("KGM", "kilogram"), "s": ("SEC", "second"),
    "min": ("MIN", "minute"), "h": ("HUR", "hour"), "ppm": ("59", "part per million"), "Nm": ("NU", "newton metre"),
}
UNECE_URI = "http://www.opcfoundation.org/UA/units/un/cefact"


def unit_id(code: str) -> int:
    """The EUInformation UnitId of a UNECE common code (OPC UA Part 8: its ASCII bytes, big-endian)."""
    n = 0
    for c in code:
        n = (n << 8) | ord(c)
    return n


def _seg(name: str) -> str:
    # a node name is often a serial port (/dev/ttyACM0): encode "/" so the id's segments stay unambiguous
    return name.replace("%", "%25").replace("/", "%2F")


def _ts(seconds_or_ms: float, ms: bool = False) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds_or_ms / 1000 if ms else seconds_or_ms, datetime.timezone.utc)


def _machine_named(mid: str) -> re.Pattern:
    # the id as a word of the text ("P-1: ..." names P-1, "P-1-A" and "XP-1" do not)
    return re.compile(r"(?<![A-Za-z0-9_-])%s(?![A-Za-z0-9_-])" % re.escape(mid))


def ranged(signal) -> tuple[float, float] | None:
    """A signal's EURange: its description's range, else its low and high alarm limits when it has both."""
    if signal.range is not None:
        return signal.range
    lows = [a.limit for a in signal.alarms if a.level in ("LO", "LOLO")]
    highs = [a.limit for a in signal.alarms if a.level in ("HI", "HIHI")]
    return (min(lows), max(highs)) if lows and highs else None


@dataclass
class _Sig:
    nodeid: object
    eu: object
    rng: object | None
    time: int = 0  # the shown reading's line time (s): an older one (a node's spill ring, late) never replaces it


@dataclass
class _Machine:
    base: str  # its node id string
    sigs: dict = field(default_factory=dict)  # sample key -> _Sig
    points: dict = field(default_factory=dict)  # (tag, level) -> node id
    named: re.Pattern | None = None
    state: str = ""
    state_time: int = 0  # the line time (s) of the state shown: an older line does not replace it
    note: tuple = (-1, -1)  # (t0_ms, id) of the annotation shown


@dataclass
class _Node:
    name: str
    base: str
    board: str = ""
    store_board: str = ""  # the board id the store had when last read
    plants: set = field(default_factory=set)  # the hashes merged into its tree (None: the simulator's)
    machines: dict = field(default_factory=dict)  # machine id -> _Machine
    note: tuple = (-1, -1)
    online: bool | None = None


class _Users:
    """asyncua's user manager: the one user and password in secure mode; on loopback without security, every
    (anonymous) client. Never an administrator: administrators may write."""

    def __init__(self, user: str | None, password: str | None) -> None:
        self.user, self.password = user, password

    def get_user(self, iserver, username=None, password=None, certificate=None):
        from asyncua.crypto.permission_rules import User, UserRole

        if self.user is None:
            return User(role=UserRole.User)
        # asyncua activates a session on an unsecured channel too (the one every server keeps open for
        # GetEndpoints), even when no endpoint offers it: `certificate` is the channel's client certificate, which
        # only a signed and encrypted channel has. No certificate, no session (nor a password sent in clear).
        if not certificate or username is None or password is None:  # (b"" on an unsecured channel)
            return None
        ok = hmac.compare_digest(str(username).encode(), self.user.encode())
        pw = password if isinstance(password, (bytes, bytearray)) else str(password).encode()
        ok = hmac.compare_digest(bytes(pw), self.password.encode()) and ok  # type: ignore[union-attr]
        return User(role=UserRole.User, name=self.user) if ok else None


class _Catch(logging.Handler):
    """asyncua's errors become the view's last_error and a notice, never a traceback on the gateway's console."""

    def __init__(self, view: "OpcuaView") -> None:
        super().__init__(logging.ERROR)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        thread = self.view._thread
        if thread is None or record.thread != thread.ident:  # another view's, or a client's in this process
            return
        try:
            msg = record.getMessage().splitlines()[0][:200]
        except Exception:  # a record that does not format: the name of what failed is enough
            msg = record.name
        if record.exc_info and record.exc_info[1] is not None:
            msg += ": %s" % str(record.exc_info[1]).splitlines()[0][:200] if str(record.exc_info[1]) else ""
        self.view._error(msg)


class OpcuaView:
    """The OPC UA server view of store `db` (see the module docstring); bind: host/opcua_args.bind's dict."""

    name = "opcua"  # the key of its object in the gateway's status file

    def __init__(self, db: str | Path, bind: dict, gateway: str, poll_s: float = 1.0) -> None:
        self.db = Path(db)
        self.bind = dict(bind)
        self.gateway = gateway
        self.poll_s = float(poll_s)
        self._states: queue.SimpleQueue = queue.SimpleQueue()  # node_state() calls, for the server's loop
        self._lock = threading.Lock()  # guards the notices and the counters below
        self._notes: collections.deque = collections.deque(maxlen=NOTICES)
        self._nodes_n = self._signals_n = self._updates = self._clients = 0
        self._last_error: str | None = None
        self._port = int(bind["port"])
        self._ready = threading.Event()
        self._fail: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._catch = _Catch(self)
        # the loop's own state (only the server's thread touches it)
        self._conn: sqlite3.Connection | None = None
        self._immutable = False
        self._server = None
        self._ns = 0
        self._root = None
        self._descs: dict = {}
        self._nodes: dict[int, _Node] = {}  # store node id -> its view
        self._by_name: dict[str, int] = {}
        self._initial: list = []  # (node id, DataValue) to write once _add has added them
        self._pending: dict[str, dict] = {}  # node_state() of a node the store has no row for yet
        self._log_id = 0
        self._note_id = 0

    # ---- the gateway's side: never blocks ----

    @property
    def endpoint(self) -> str:
        """The URL served (its real port once started, when --opcua gave port 0)."""
        b = self.bind
        host = "[%s]" % b["host"] if ":" in b["host"] else b["host"]
        return "opc.tcp://%s:%d%s" % (host, self._port, b["path"])

    def start(self) -> None:
        """Open the store, build the address space and listen; UserError (one line) when it cannot."""
        log = logging.getLogger("asyncua")
        log.setLevel(logging.ERROR)  # its start logs a page of warnings; its errors go to _Catch
        log.propagate = False  # and not, with a traceback, to the console by the root logger
        log.addHandler(self._catch)
        self._thread = threading.Thread(target=self._run, name="opcua", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_S):
            self._fail = "opcua: the server did not start in %d s" % START_S
        if self._fail is not None:
            self.stop()
            raise UserError(self._fail)

    def stop(self) -> None:
        """Stop serving and close the store connection (the thread ends within a few seconds)."""
        self._stopping = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop is closed already
                pass
        if self._thread is not None:
            self._thread.join(timeout=10)
        logging.getLogger("asyncua").removeHandler(self._catch)

    def node_state(self, node: str, up: bool, board: str = "", uid: str = "", why: str = "") -> None:
        """A node's link came up (up=True, with its board) or went away (why): queued for the server's loop."""
        self._states.put((node, bool(up), board or "", uid or "", why or ""))
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not self._stopping:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass

    def notices(self) -> list[str]:
        """The operator's lines since the last call."""
        with self._lock:
            out = list(self._notes)
            self._notes.clear()
        return out

    def status(self) -> dict:
        with self._lock:
            return {"endpoint": self.endpoint, "nodes": self._nodes_n, "signals": self._signals_n,
                    "updates": self._updates, "clients": self._clients, "last_error": self._last_error}

    def _note(self, line: str) -> None:
        with self._lock:
            self._notes.append(line)

    def _error(self, msg: str) -> None:
        msg = msg if msg.startswith("opcua: ") else "opcua: " + msg
        with self._lock:
            repeat = msg == self._last_error
            self._last_error = msg
            if not repeat:  # a client retrying every second does not fill the console
                self._notes.append(msg)

    # ---- the server's thread ----

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main(loop))
        finally:
            loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = asyncio.Event()
        self._loop = loop
        try:
            await self._open()
        except UserError as e:
            self._fail = str(e)
        except Exception as e:  # asyncua or SQLite failing in a way the options did not predict
            self._fail = "opcua: cannot start: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__)
        if self._fail is not None:
            await self._close()
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stopping:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                if self._stopping:
                    break
                try:
                    await self._poll()
                except sqlite3.Error as e:  # the store busy or replaced: say so, try again next period
                    self._error("reading the store: %s" % e)
                except Exception as e:  # never let one bad row end the view
                    self._error("%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        finally:
            await self._close()

    async def _close(self) -> None:
        if self._server is not None:
            try:
                await self._server.stop()
            except Exception:  # stopping a half-started server: nothing left to do about it
                pass
            self._server = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connect(self) -> sqlite3.Connection:
        # leaving no -wal/-shm beside a closed store; _poll reconnects once a gateway opens it
        if not self.db.is_file():
            raise UserError("opcua: %s: no such store" % self.db)
        c, self._immutable = open_reader(self.db)
        c.execute("PRAGMA query_only=1")
        return c

    async def _open(self) -> None:
        from asyncua import Server, ua

        self._conn = self._connect()
        try:
            self._conn.execute("SELECT plant FROM nodes LIMIT 0")
            self._conn.execute("SELECT plant FROM logs LIMIT 0")
        except sqlite3.DatabaseError:
            raise UserError("opcua: %s is not an edgetwin store of schema 3 (open it with the gateway first)"
                            % self.db) from None
        b = self.bind
        server = Server(user_manager=_Users(b.get("user"), b.get("password")))
        self._server = server
        await server.init()
        server.allow_remote_admin(False)
        server.set_server_name("edgetwin gateway %s" % self.gateway)
        await server.set_application_uri(APP_URI)
        server.set_endpoint(self.endpoint)
        if b.get("secure"):
            await self._load_cert(server)
            server.set_security_policy([ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt])
            server.set_identity_tokens([ua.UserNameIdentityToken])
        else:
            server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
            server.set_identity_tokens([ua.AnonymousIdentityToken])
        self._ns = await server.register_namespace(NS_URI)
        await self._build()
        try:
            await server.start()
        except OSError as e:
            raise UserError("--opcua %s: cannot listen there (%s)" % (self.bind["url"], e.strerror or e)) from None
        port = server.bserver.port if server.bserver is not None else self._port
        self._port = int(port)
        # endpoints were made before the socket: give them the real port (port 0 picks a free one)
        for edp in server.iserver.endpoints:
            edp.EndpointUrl = self.endpoint
            edp.Server.DiscoveryUrls = [self.endpoint]
        self._count()
        self._note("opcua: serving %s (%d nodes, %d signals%s)" % (
            self.endpoint, self._nodes_n, self._signals_n,
            ", Basic256Sha256 SignAndEncrypt, user %s" % b["user"] if b.get("secure") else ", loopback, anonymous"))

    async def _load_cert(self, server) -> None:
        b = self.bind

        def read(path: str) -> tuple[bytes, str]:
            # asyncua takes the format from a file's suffix (only ".pem" is PEM): look at the content instead
            data = Path(path).read_bytes()
            return data, "pem" if data.lstrip().startswith(b"-----BEGIN") else "der"

        try:
            await server.load_certificate(*read(b["cert"]))
        except Exception as e:
            raise UserError("--opcua-cert %s: not a certificate (PEM or DER): %s"
                            % (b["cert"], str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
        try:
            data, fmt = read(b["key"])
            await server.load_private_key(data, None, fmt)
        except Exception as e:
            raise UserError("--opcua-key %s: not an unencrypted private key (PEM or DER): %s"
                            % (b["key"], str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
        cert, key = server.iserver.certificate, server.iserver.private_key
        try:
            same = cert.public_key().public_numbers() == key.public_key().public_numbers()
        except AttributeError:  # not an RSA pair: Basic256Sha256 needs RSA
            same = False
        if not same:
            raise UserError("--opcua-cert %s and --opcua-key %s are not one RSA key pair" % (b["cert"], b["key"]))

    # ---- the address space ----

    def _nid(self, path: str):
        from asyncua import ua

        return ua.NodeId(path, self._ns)

    async def _add(self, items: list) -> None:
        if not items:
            return
        results = await self._server.iserver.isession.add_nodes(items)
        for r in results:
            r.StatusCode.check()
        initial, self._initial = self._initial, []
        for nodeid, dv in initial:
            await self._server.write_attribute_value(nodeid, dv)

    def _object(self, parent, path: str, name: str, folder: bool = False, words: str = ""):
        from asyncua import ua

        it = ua.AddNodesItem()
        it.RequestedNewNodeId = self._nid(path)
        it.BrowseName = ua.QualifiedName(name, self._ns)
        it.NodeClass = ua.NodeClass.Object
        it.ParentNodeId = parent
        it.ReferenceTypeId = ua.NodeId(ua.ObjectIds.Organizes if folder else ua.ObjectIds.HasComponent)
        it.TypeDefinition = ua.NodeId(ua.ObjectIds.FolderType if folder else ua.ObjectIds.BaseObjectType)
        a = ua.ObjectAttributes()
        a.DisplayName = ua.LocalizedText(name)
        a.Description = ua.LocalizedText(words or name)
        a.EventNotifier = 0
        a.WriteMask = a.UserWriteMask = 0
        it.NodeAttributes = a
        return it

    def _variable(self, parent, path: str, name: str, value, vtype, dtype: int, typedef: int | None = None,
                  prop: bool = False, words: str = "", status=None):
        from asyncua import ua

        it = ua.AddNodesItem()
        it.RequestedNewNodeId = self._nid(path)
        it.BrowseName = ua.QualifiedName(name, 0 if prop else self._ns)  # standard properties are in ns 0
        it.NodeClass = ua.NodeClass.Variable
        it.ParentNodeId = parent
        it.ReferenceTypeId = ua.NodeId(ua.ObjectIds.HasProperty if prop else ua.ObjectIds.HasComponent)
        it.TypeDefinition = ua.NodeId(ua.ObjectIds.PropertyType if prop else typedef or
                                      ua.ObjectIds.BaseDataVariableType)
        a = ua.VariableAttributes()
        a.DisplayName = ua.LocalizedText(name)
        a.Description = ua.LocalizedText(words or name)
        a.DataType = ua.NodeId(dtype)
        a.Value = ua.Variant(value, vtype if value is not None else ua.VariantType.Null)
        if status is not None:  # AddNodes takes a value, not its quality: written once the node is there
            self._initial.append((it.RequestedNewNodeId, ua.DataValue(a.Value, StatusCode=status)))
        a.ValueRank = ua.ValueRank.Scalar
        a.ArrayDimensions = None
        a.AccessLevel = a.UserAccessLevel = ua.AccessLevel.CurrentRead.mask  # read-only, for every client
        a.WriteMask = a.UserWriteMask = 0
        a.Historizing = False
        it.NodeAttributes = a
        return it

    def _eu(self, unit: str):
        from asyncua import ua

        code = UNECE.get(unit)
        return ua.EUInformation(NamespaceUri=UNECE_URI, UnitId=unit_id(code[0]) if code else -1,
                                DisplayName=ua.LocalizedText(unit),
                                Description=ua.LocalizedText(code[1] if code else unit))

    async def _build(self) -> None:
        """The gateway's object and every node of the store with the machines of its description, their latest
        values (seeded from the index) and annotations; then the ids to follow from."""
        from asyncua import ua

        top = self._gw = "%s" % _seg(self.gateway)
        await self._add([self._object(ua.NodeId(ua.ObjectIds.ObjectsFolder), top, self.gateway, folder=True,
                                      words="edgetwin gateway %s: its nodes, their machines and signals (read-only)"
                                            % self.gateway)])
        db = self._conn
        self._log_id = int(db.execute("SELECT coalesce(max(id), 0) FROM logs").fetchone()[0])
        self._note_id = int(db.execute("SELECT coalesce(max(id), 0) FROM annotations").fetchone()[0])
        for nid, name, board, plant in db.execute("SELECT id, name, board_id, plant FROM nodes ORDER BY id").fetchall():
            node = await self._add_node(nid, name, board)
            # no hash and no line yet: the node has not said what it runs (not the simulator's 64 machines)
            if plant is not None or db.execute("SELECT 1 FROM logs WHERE node=? LIMIT 1", (nid,)).fetchone():
                await self._merge(node, plant)
            await self._seed(nid, node)

    async def _add_node(self, nid: int, name: str, board: str) -> _Node:
        from asyncua import ua

        base = "%s/%s" % (self._gw, _seg(name))
        node = _Node(name, base, board, board)
        p = self._nid(base)
        await self._add([
            self._object(self._nid(self._gw), base, name, words="node %s" % name),
            self._variable(p, base + "/Online", "Online", False, ua.VariantType.Boolean, ua.ObjectIds.Boolean,
                           words="the node's link to the gateway is up"),
            self._variable(p, base + "/Board", "Board", board, ua.VariantType.String, ua.ObjectIds.String,
                           words="the node's board id"),
            self._variable(p, base + "/LatestAnnotation", "LatestAnnotation", "", ua.VariantType.String,
                           ua.ObjectIds.String, words="the node's newest annotation"),
        ])
        self._nodes[nid] = node
        self._by_name[name] = nid
        st = self._pending.pop(name, None)
        if st is not None:
            await self._apply_state(node, st)
        return node

    def _desc(self, h: str | None):
        if h not in self._descs:
            try:
                self._descs[h] = read_plant(self._conn, h, {})
            except (OSError, ValueError):  # the simulator's description missing or broken, a bad hash
                self._descs[h] = None
        return self._descs[h]

    async def _merge(self, node: _Node, h: str | None) -> None:
        """Add to the node's tree what description `h` has that it lacks; a signal it has takes the description's
        unit and range (the newest description the node named is merged last). Nothing is removed."""
        if h in node.plants:
            return
        desc = self._desc(h)
        node.plants.add(h)
        if desc is None:
            self._error("node %s names plant description %s, which the store does not hold" % (node.name, h))
            return
        from asyncua import ua

        items: list = []
        added = 0
        for m in desc.machines:
            mv = node.machines.get(m.id)
            mbase = "%s/%s" % (node.base, _seg(m.id))
            if mv is None:
                added += 1
                mv = node.machines[m.id] = _Machine(mbase, named=_machine_named(m.id))
                p = self._nid(mbase)
                words = ", ".join(m.words) or m.kind
                items += [
                    self._object(self._nid(node.base), mbase, m.id, words="%s (%s)" % (words, m.kind)),
                    self._variable(p, mbase + "/State", "State", "", ua.VariantType.String, ua.ObjectIds.String,
                                   words="the machine's PLC state (RUNNING, TRIPPED, ...)"),
                    self._variable(p, mbase + "/LastTrip", "LastTrip", "", ua.VariantType.String, ua.ObjectIds.String,
                                   words="the cause of the machine's latest trip"),
                    self._variable(p, mbase + "/LatestAnnotation", "LatestAnnotation", "", ua.VariantType.String,
                                   ua.ObjectIds.String, words="the newest annotation that names the machine"),
                    self._object(p, mbase + "/Alarms", "Alarms", folder=True, words="the machine's alarm points"),
                ]
            p = self._nid(mbase)
            for s in m.signals:
                sbase = "%s/%s" % (mbase, s.tag)
                rng = ranged(s)
                eu = self._eu(s.unit)
                sv = mv.sigs.get(s.key)
                if sv is None:
                    sv = mv.sigs[s.key] = _Sig(self._nid(sbase), eu, rng)
                    typedef = ua.ObjectIds.AnalogItemType if rng is not None else ua.ObjectIds.BaseAnalogType
                    items.append(self._variable(p, sbase, s.tag, None, ua.VariantType.Double, ua.ObjectIds.Double,
                                                typedef=typedef, words=", ".join(s.words),
                                                status=ua.StatusCode(ua.StatusCodes.BadWaitingForInitialData)))
                    items.append(self._variable(sv.nodeid, sbase + "/EngineeringUnits", "EngineeringUnits", eu,
                                                ua.VariantType.ExtensionObject, ua.ObjectIds.EUInformation, prop=True))
                    items.append(self._variable(sv.nodeid, sbase + "/ValuePrecision", "ValuePrecision",
                                                float(s.decimals), ua.VariantType.Double, ua.ObjectIds.Double,
                                                prop=True))
                    if rng is not None:
                        items.append(self._variable(sv.nodeid, sbase + "/EURange", "EURange",
                                                    ua.Range(Low=rng[0], High=rng[1]), ua.VariantType.ExtensionObject,
                                                    ua.ObjectIds.Range, prop=True))
                else:
                    if eu != sv.eu:
                        sv.eu = eu
                        await self._write(self._nid(sbase + "/EngineeringUnits"), eu, ua.VariantType.ExtensionObject)
                    if rng is not None and rng != sv.rng and sv.rng is not None:  # a range added later: not here
                        sv.rng = rng
                        await self._write(self._nid(sbase + "/EURange"), ua.Range(Low=rng[0], High=rng[1]),
                                          ua.VariantType.ExtensionObject)
                levels = [a.level for a in s.alarms] + (["BAD"] if s.bad else [])
                for level in levels:
                    if (s.tag, level) in mv.points:
                        continue
                    pname = "%s_%s" % (s.tag, level)
                    ppath = "%s/Alarms/%s" % (mbase, pname)
                    mv.points[(s.tag, level)] = self._nid(ppath)
                    items.append(self._variable(self._nid(mbase + "/Alarms"), ppath, pname,
                                                "NORMAL", ua.VariantType.String, ua.ObjectIds.String,
                                                words="the state of %s's %s alarm point (%s)"
                                                      % (s.tag, level, ", ".join(plantlines.ALARM_STATES))))
        await self._add(items)
        if added and self._ready.is_set():
            self._note("opcua: node %s: %d machines added from plant %s (%s)" % (node.name, added, desc.name, h))
        self._count()

    async def _seed(self, nid: int, node: _Node) -> None:
        """Each machine's latest sample, state, trip and alarm-point states, and the latest annotations, from the
        lines up to the ids the poll follows from: index seeks (FTS5, logs_node_time), never a scan."""
        db = self._conn
        hits = ("SELECT logs.id, logs.text FROM logs_fts JOIN logs ON logs.id=logs_fts.rowid WHERE logs_fts MATCH ? "
                "AND logs_fts.rowid<=? AND logs.node=? AND logs.level>0 ORDER BY logs_fts.rowid DESC LIMIT ?")

        def lines(*words: str):
            match = " AND ".join('"%s"' % w.lower() for w in words)
            for _, text in db.execute(hits, (match, self._log_id, nid, SEED_LOOK)):
                line = plantlines.parse(text)
                if line is not None:
                    yield line

        for mid, mv in list(node.machines.items()):
            sample = state = None
            for line in lines(mid):
                if line.machine != mid or line.kind not in ("sample", "state"):
                    continue
                if state is None:
                    state = line
                if line.kind == "sample":
                    sample = line
                    break
            if sample is not None:
                await self._sample(mv, sample)
            if state is not None and state is not sample:
                await self._state(mv, state)
            trip = next((x for x in lines("state", "tripped", mid) if x.machine == mid and x.is_trip), None)
            if trip is not None and trip is not state:
                await self._trip(mv, trip)
            for tag, level in list(mv.points):
                hit = next((x for x in lines(mid, tag, level) if x.kind == "alarm" and x.machine == mid
                            and x.tag == tag and x.level == level), None)
                if hit is not None:
                    await self._alarm(mv, hit)
        want = set(node.machines)
        for aid, t0, text in db.execute("SELECT id, t0_ms, text FROM annotations WHERE node=? AND id<=? "
                                        "ORDER BY t0_ms DESC, id DESC LIMIT ?", (nid, self._note_id, SEED_LOOK)):
            await self._annotation(node, aid, t0, text)
            want -= {m for m in want if node.machines[m].note[1] >= 0}
            if not want:
                break

    # ---- updates ----

    async def _write(self, nodeid, value, vtype, status=None, source: datetime.datetime | None = None) -> None:
        from asyncua import ua

        now = datetime.datetime.now(datetime.timezone.utc)
        dv = ua.DataValue(ua.Variant(value, vtype if value is not None else ua.VariantType.Null),
                          StatusCode=status or ua.StatusCode(ua.StatusCodes.Good), SourceTimestamp=source or now,
                          ServerTimestamp=now)
        await self._server.write_attribute_value(nodeid, dv)
        with self._lock:
            self._updates += 1

    async def _sample(self, mv: _Machine, line: plantlines.Line) -> None:
        from asyncua import ua

        t = _ts(line.time)
        for key, (v, _unit) in line.values.items():
            sv = mv.sigs.get(key)
            if sv is None:  # a key the description lacks: plantlines.check's business, not shown here
                continue
            if line.time < sv.time:  # history (the store and Sparkplug keep it), not the current value
                continue
            sv.time = line.time
            if v is None:  # "?": the node could not read the sensor. A Bad value is null (OPC UA Part 4, 7.7.1)
                await self._write(sv.nodeid, None, ua.VariantType.Double,
                                  ua.StatusCode(ua.StatusCodes.BadSensorFailure), t)
            else:
                await self._write(sv.nodeid, float(v), ua.VariantType.Double, None, t)
        if line.plc and line.time >= mv.state_time:
            mv.state_time = line.time
        if line.plc and line.plc != mv.state and line.time >= mv.state_time:
            mv.state = line.plc
            await self._write(self._nid(mv.base + "/State"), line.plc, ua.VariantType.String, None, t)

    async def _state(self, mv: _Machine, line: plantlines.Line) -> None:
        from asyncua import ua

        if line.to_state and line.time >= mv.state_time:
            mv.state_time = line.time
            if line.to_state != mv.state:
                mv.state = line.to_state
            await self._write(self._nid(mv.base + "/State"), line.to_state, ua.VariantType.String, None,
                              _ts(line.time))
        if line.is_trip:
            await self._trip(mv, line)

    async def _trip(self, mv: _Machine, line: plantlines.Line) -> None:
        from asyncua import ua

        await self._write(self._nid(mv.base + "/LastTrip"), line.cause or "", ua.VariantType.String, None,
                          _ts(line.time))

    async def _alarm(self, mv: _Machine, line: plantlines.Line) -> None:
        from asyncua import ua

        pid = mv.points.get((line.tag, line.level))
        if pid is not None and line.astate:
            await self._write(pid, line.astate, ua.VariantType.String, None, _ts(line.time))

    async def _annotation(self, node: _Node, aid: int, t0: int, text: str) -> None:
        from asyncua import ua

        key = (t0, aid)
        if key > node.note:
            node.note = key
            await self._write(self._nid(node.base + "/LatestAnnotation"), text, ua.VariantType.String, None,
                              _ts(t0, ms=True))
        for mv in node.machines.values():
            if key > mv.note and mv.named is not None and mv.named.search(text):
                mv.note = key
                await self._write(self._nid(mv.base + "/LatestAnnotation"), text, ua.VariantType.String, None,
                                  _ts(t0, ms=True))

    async def _apply_state(self, node: _Node, st: dict) -> None:
        from asyncua import ua

        if st["up"] != node.online:
            node.online = st["up"]
            await self._write(self._nid(node.base + "/Online"), st["up"], ua.VariantType.Boolean)
        if st["board"] and st["board"] != node.board:
            node.board = st["board"]
            await self._write(self._nid(node.base + "/Board"), st["board"], ua.VariantType.String)

    async def _poll(self) -> None:
        """Apply the queued node states, then what the store committed since the last poll."""
        if self._immutable and side_files(self.db)[1].exists():
            self._conn.close()  # a gateway opened the store: follow its WAL from now on
            self._conn = self._connect()
        while True:
            try:
                name, up, board, _uid, _why = self._states.get_nowait()
            except queue.Empty:
                break
            nid = self._by_name.get(name)
            st = {"up": up, "board": board}
            if nid is None:
                self._pending[name] = st  # its row comes with its first line
            else:
                await self._apply_state(self._nodes[nid], st)
        db = self._conn
        for nid, name, board, plant in db.execute("SELECT id, name, board_id, plant FROM nodes ORDER BY id").fetchall():
            node = self._nodes.get(nid)
            if node is None:
                node = await self._add_node(nid, name, board)
            elif board and board != node.store_board:  # the store's changed (node_state's may be newer)
                node.store_board = board
                await self._apply_state(node, {"up": node.online, "board": board})
            if plant is not None:  # None: its lines bring the description they were stored with, if any
                await self._merge(node, plant)
        for _ in range(20):  # at most 100000 rows a poll: a backlog does not hold the clients' requests
            rows = db.execute("SELECT id, node, text, plant FROM logs WHERE id>? AND level>0 ORDER BY id LIMIT ?",
                              (self._log_id, POLL_ROWS)).fetchall()
            for lid, nid, text, plant in rows:
                self._log_id = lid
                node = self._nodes.get(nid)
                if node is None:
                    continue
                await self._merge(node, plant)
                line = plantlines.parse(text)
                mv = node.machines.get(line.machine or "") if line is not None else None
                if mv is None:
                    continue
                if line.kind == "sample":
                    await self._sample(mv, line)
                elif line.kind == "alarm":
                    await self._alarm(mv, line)
                elif line.kind == "state":
                    await self._state(mv, line)
            if len(rows) < POLL_ROWS:
                break
            await asyncio.sleep(0)
        for aid, nid, t0, text in db.execute("SELECT id, node, t0_ms, text FROM annotations WHERE id>? ORDER BY id "
                                             "LIMIT ?", (self._note_id, POLL_ROWS)).fetchall():
            self._note_id = aid
            node = self._nodes.get(nid)
            if node is not None:
                await self._annotation(node, aid, t0, text)
        self._count()

    def _count(self) -> None:
        clients = 0
        if self._server is not None:
            clients = len(getattr(self._server.iserver, "asyncio_transports", ()))
        with self._lock:
            self._nodes_n = len(self._nodes)
            self._signals_n = sum(len(m.sigs) for n in self._nodes.values() for m in n.machines.values())
            self._clients = clients
