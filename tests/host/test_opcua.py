"""The OPC UA view (host/opcua.py, docs/OPCUA.md), read with asyncua's own client against a real store: the
browse tree gateway/node/machine/signal, values and source timestamps equal to the store's latest samples,
engineering units and ranges from the description, alarm-point states after ALARM/ACK/CLEAR lines, trips,
annotations, Bad quality for a "?" reading, new rows within a few poll periods, a new description's machines,
writes refused; the --opcua options' one-line errors (host/opcua_args.py); the secure mode (Basic256Sha256
SignAndEncrypt with user and password) refusing anonymous clients and wrong passwords."""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime
import json
import time
from pathlib import Path

import pytest
from asyncua import Client, ua

from host import opcua_args, plantdesc
from host.errors import UserError
from host.opcua import NS_URI, OpcuaView, unit_id
from host.store import LogStore

ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.2
NODE = "pump-room"
PORT_NODE = "/dev/ttyACM0"  # a serial port's name: "/" is encoded in the node ids
T0 = 1_796_000_000  # 2026-11-30, seconds
PASSWORD = "correct-horse-battery"


def _descriptions(tmp: Path) -> tuple[plantdesc.PlantDesc, plantdesc.PlantDesc]:
    """The example pump skid with motor_current's range taken away (its EURange comes from its LO and HI limits)
    and no BAD point on bearing_temp; v2 adds a second pump."""
    d = json.loads((ROOT / "examples" / "pump_skid.json").read_text())
    cur = d["machines"][0]["signals"][1]
    del cur["range"]
    cur["alarms"].append({"level": "LO", "limit": 2, "priority": "low"})
    d["machines"][0]["signals"][2]["bad"] = False
    (tmp / "v1.json").write_text(json.dumps(d))
    p2 = copy.deepcopy(d["machines"][0])
    p2["id"], p2["signals"] = "P-2", [p2["signals"][1]]
    p2["state"] = {"run": {"di": 11, "active": "high", "pull": "down", "debounce_ms": 20}, "settle_s": 20}
    d["machines"].append(p2)
    (tmp / "v2.json").write_text(json.dumps(d))
    return plantdesc.load(tmp / "v1.json"), plantdesc.load(tmp / "v2.json")


def stamp(t: int) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    """Writes lines the way a gateway session does (host/store.py's add_log, one seq after the other)."""

    def __init__(self, store: LogStore, node: str, plant: str) -> None:
        self.store, self.node, self.plant, self.seq = store, node, plant, 0

    def line(self, t: int, level: int, body: str, plant: str | None = None) -> None:
        self.seq += 1
        self.store.add_log(self.node, 7, self.seq, self.seq, t * 1000, level, "%s %s" % (stamp(t), body),
                           plant=plant or self.plant)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("opcua")
    v1, v2 = _descriptions(tmp)
    store = LogStore(tmp / "g.db")
    store.add_plant(v1)
    store.add_plant(v2)
    store.node_id(NODE, board_id="rp2040_pico")
    store.set_node_plant(NODE, v1.hash)
    store.set_node_plant(PORT_NODE, v1.hash)
    w = Writer(store, NODE, v1.hash)
    # history before the view starts: what it seeds from the index
    w.line(T0, 1, "P-1 RUNNING P=5.0bar I=14.0A T=60.0C")
    w.line(T0 + 5, 1, "P-1 RUNNING P=7.6bar I=14.7A T=61.5C")
    w.line(T0 + 6, 2, "ALARM HI P-1 discharge_press 7.6bar prio=3 RAISED")
    w.line(T0 + 8, 2, "ACK HI P-1 discharge_press 7.7bar prio=3 ACKED by=alice")
    w.line(T0 + 9, 3, "STATE P-1 RUNNING->TRIPPED interlock=HIHI_PRESS")
    w.store.add_log(NODE, 7, 1000, 1, (T0 + 9) * 1000, 0, "NODE heap=1000 dropped=0")
    store.add_annotation(NODE, (T0 + 6) * 1000, (T0 + 9) * 1000, "P-1: discharge pressure rose, then it tripped",
                         True, 9)
    store.add_annotation(NODE, (T0 + 10) * 1000, (T0 + 11) * 1000, "operator round done", True, 4)
    bind = opcua_args.bind(parse(["--opcua", "opc.tcp://127.0.0.1:0"]))
    view = OpcuaView(tmp / "g.db", bind, "gw-1", poll_s=POLL_S)
    view.start()
    try:
        yield {"store": store, "view": view, "w": w, "v1": v1, "v2": v2, "tmp": tmp}
    finally:
        view.stop()
        store.close()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    opcua_args.add_arguments(p)
    return p.parse_args(argv)


def run(coro):
    return asyncio.run(coro)


async def _client(url: str):
    c = Client(url, timeout=5)
    await c.connect()
    return c


async def child(node, *names: str):
    for n in names:
        kids = {(await k.read_browse_name()).Name: k for k in await node.get_children()}
        assert n in kids, "%s not in %s" % (n, sorted(kids))
        node = kids[n]
    return node


async def names(node) -> set[str]:
    return {(await k.read_browse_name()).Name for k in await node.get_children()}


async def until(fn, timeout: float = 10 * POLL_S + 2):
    """fn()'s value once it is truthy (new rows show within a few poll periods), else the last one."""
    end = time.monotonic() + timeout
    while True:
        v = await fn()
        if v or time.monotonic() > end:
            return v
        await asyncio.sleep(POLL_S / 2)


def ts(t: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc)


def _aware(d: datetime.datetime) -> datetime.datetime:
    return d if d.tzinfo else d.replace(tzinfo=datetime.timezone.utc)


def test_the_tree_holds_the_description_and_the_latest_values(world) -> None:
    view = world["view"]

    async def check() -> None:
        c = await _client(view.endpoint)
        try:
            ns = await c.get_namespace_index(NS_URI)
            assert ns == 2
            gw = await child(c.nodes.objects, "gw-1")
            assert await names(gw) == {NODE, PORT_NODE}
            node = await child(gw, NODE)
            assert {"Online", "Board", "LatestAnnotation", "P-1"} <= await names(node)
            assert await (await child(node, "Board")).read_value() == "rp2040_pico"
            m = await child(node, "P-1")
            assert await names(m) == {"discharge_press", "motor_current", "bearing_temp", "State", "LastTrip",
                                      "LatestAnnotation", "Alarms"}
            # the stable string node ids the docs promise; a serial port's "/" is encoded
            press = c.get_node("ns=2;s=gw-1/%s/P-1/discharge_press" % NODE)
            assert (await press.read_browse_name()).Name == "discharge_press"
            port_m = c.get_node("ns=2;s=gw-1/%2Fdev%2FttyACM0/P-1")
            assert (await port_m.read_browse_name()).Name == "P-1"
            # values and source timestamps: the store's latest sample
            want = {"discharge_press": (7.6, "bar", "BAR", (0.0, 10.0)),
                    "motor_current": (14.7, "A", "AMP", (2.0, 32.0)),
                    "bearing_temp": (61.5, "C", "CEL", (-20.0, 200.0))}
            for tag, (v, unit, code, rng) in want.items():
                sig = await child(m, tag)
                assert await sig.read_type_definition() == ua.NodeId(ua.ObjectIds.AnalogItemType)
                dv = await sig.read_data_value()
                assert dv.StatusCode.is_good() and dv.Value.Value == v
                assert dv.Value.VariantType == ua.VariantType.Double
                assert _aware(dv.SourceTimestamp) == ts(T0 + 5)
                eu = await (await sig.get_child("0:EngineeringUnits")).read_value()
                assert eu.DisplayName.Text == unit and eu.UnitId == unit_id(code)
                assert eu.NamespaceUri == "http://www.opcfoundation.org/UA/units/un/cefact"
                r = await (await sig.get_child("0:EURange")).read_value()
                assert (r.Low, r.High) == rng
                assert (await sig.read_description()).Text  # the signal's words
            assert unit_id("CEL") == 4408652
            # alarm points: one per level, BAD only where the signal has one; states after ALARM and ACK
            alarms = await child(m, "Alarms")
            assert await names(alarms) == {"discharge_press_HI", "discharge_press_HIHI", "discharge_press_BAD",
                                           "motor_current_HI", "motor_current_LO", "motor_current_BAD",
                                           "bearing_temp_HI", "bearing_temp_HIHI"}
            hi = await (await child(alarms, "discharge_press_HI")).read_data_value()
            assert hi.Value.Value == "ACKED" and _aware(hi.SourceTimestamp) == ts(T0 + 8)
            assert await (await child(alarms, "discharge_press_HIHI")).read_value() == "NORMAL"
            assert await (await child(m, "State")).read_value() == "TRIPPED"
            trip = await (await child(m, "LastTrip")).read_data_value()
            assert trip.Value.Value == "interlock=HIHI_PRESS" and _aware(trip.SourceTimestamp) == ts(T0 + 9)
            # the newest annotation naming the machine; the node's newest of all
            ann = await (await child(m, "LatestAnnotation")).read_data_value()
            assert ann.Value.Value.startswith("P-1: discharge") and _aware(ann.SourceTimestamp) == ts(T0 + 6)
            assert await (await child(node, "LatestAnnotation")).read_value() == "operator round done"
            # a node with no lines yet: its machines wait for their first sample
            idle = await (await child(gw, PORT_NODE, "P-1", "bearing_temp")).read_data_value(raise_on_bad_status=False)
            assert idle.StatusCode.value == ua.StatusCodes.BadWaitingForInitialData
        finally:
            await c.disconnect()

    run(check())


def test_new_rows_show_within_a_few_polls(world) -> None:
    view, w, store = world["view"], world["w"], world["store"]

    async def check() -> None:
        c = await _client(view.endpoint)
        try:
            m = c.get_node("ns=2;s=gw-1/%s/P-1" % NODE)
            temp = await child(m, "bearing_temp")
            press = await child(m, "discharge_press")
            w.line(T0 + 20, 1, "P-1 RUNNING P=6.1bar I=15.0A T=?")
            w.line(T0 + 21, 1, "CLEAR HI P-1 discharge_press 6.1bar prio=3 NORMAL")
            w.line(T0 + 22, 2, "ALARM HI P-1 motor_current 33.0A prio=2 RAISED")
            store.add_annotation(NODE, (T0 + 23) * 1000, (T0 + 24) * 1000, "after the restart P-1 runs steady",
                                 False, 7)

            async def fresh():
                dv = await press.read_data_value()
                return dv if _aware(dv.SourceTimestamp) == ts(T0 + 20) else None

            dv = await until(fresh)
            assert dv is not None and dv.Value.Value == 6.1
            bad = await temp.read_data_value(raise_on_bad_status=False)
            assert bad.StatusCode.value == ua.StatusCodes.BadSensorFailure  # "?": Bad, and a Bad value is null
            assert bad.Value.Value is None and _aware(bad.SourceTimestamp) == ts(T0 + 20)
            with pytest.raises(ua.UaStatusCodeError):
                await temp.read_value()
            assert await (await child(m, "State")).read_value() == "RUNNING"

            async def alarm(name: str, want: str):
                return await (await child(m, "Alarms", name)).read_value() == want

            assert await until(lambda: alarm("discharge_press_HI", "NORMAL"))
            assert await until(lambda: alarm("motor_current_HI", "RAISED"))

            async def note():
                v = await (await child(m, "LatestAnnotation")).read_value()
                return v == "after the restart P-1 runs steady"

            assert await until(note)
            # the gateway's node states: queued, applied by the server's loop
            view.node_state(NODE, True, board="esp32s3_devkitc", uid="e661")
            online = c.get_node("ns=2;s=gw-1/%s/Online" % NODE)
            assert await until(online.read_value) is True
            assert await c.get_node("ns=2;s=gw-1/%s/Board" % NODE).read_value() == "esp32s3_devkitc"
            view.node_state(NODE, False, why="unplugged")

            async def offline():
                return await online.read_value() is False

            assert await until(offline)
            # a reading older than the one shown (a node's spill ring, sent after a link cut) is history: the
            # store keeps it, the current value and state stay
            w.line(T0 + 10, 1, "P-1 STOPPED P=3.0bar I=1.0A T=50.0C")
            w.line(T0 + 27, 2, "CLEAR HI P-1 motor_current 20.0A prio=2 NORMAL")
            assert await until(lambda: alarm("motor_current_HI", "NORMAL"))
            dv = await press.read_data_value()
            assert dv.Value.Value == 6.1 and _aware(dv.SourceTimestamp) == ts(T0 + 20)
            assert await (await child(m, "State")).read_value() == "RUNNING"
        finally:
            await c.disconnect()

    run(check())
    st = view.status()
    assert st["endpoint"] == view.endpoint and st["nodes"] == 2 and st["signals"] == 6 and st["updates"] > 10
    assert st["last_error"] is None


def test_a_new_description_adds_its_machines_and_a_new_node_appears(world) -> None:
    view, store, v2, w = world["view"], world["store"], world["v2"], world["w"]
    view.notices()
    store.set_node_plant(NODE, v2.hash)
    w.line(T0 + 30, 1, "P-2 RUNNING I=12.5A", plant=v2.hash)
    w2 = Writer(store, "hall-2", v2.hash)
    w2.line(T0 + 31, 1, "P-2 STOPPED I=0.0A")

    async def check() -> None:
        c = await _client(view.endpoint)
        try:
            gw = c.get_node("ns=2;s=gw-1")

            async def both():
                node = c.get_node("ns=2;s=gw-1/%s" % NODE)
                return {"P-1", "P-2"} <= await names(node) and "hall-2" in await names(gw)

            assert await until(both)
            cur = c.get_node("ns=2;s=gw-1/%s/P-2/motor_current" % NODE)
            assert await until(cur.read_value) == 12.5
            assert await c.get_node("ns=2;s=gw-1/hall-2/P-2/State").read_value() == "STOPPED"
            # P-1 was kept as it was (nothing a client subscribed to disappears)
            assert await c.get_node("ns=2;s=gw-1/%s/P-1/discharge_press" % NODE).read_value() == 6.1
        finally:
            await c.disconnect()

    run(check())
    assert "opcua: node %s: 1 machines added from plant pump-skid-1 (%s)" % (NODE, v2.hash) in view.notices()


def test_clients_cannot_write(world) -> None:
    view = world["view"]

    async def check() -> None:
        c = await _client(view.endpoint)
        try:
            for path in ("gw-1/%s/P-1/discharge_press" % NODE, "gw-1/%s/P-1/Alarms/discharge_press_HI" % NODE,
                         "gw-1/%s/Online" % NODE):
                n = c.get_node("ns=2;s=" + path)
                assert await n.read_attribute(ua.AttributeIds.UserAccessLevel) is not None
                access = await n.get_user_access_level()
                assert ua.AccessLevel.CurrentWrite not in access and ua.AccessLevel.CurrentRead in access
                before = await n.read_data_value(raise_on_bad_status=False)
                value = {ua.VariantType.Double: 1.0, ua.VariantType.String: "NORMAL",
                         ua.VariantType.Boolean: True}[before.Value.VariantType]
                with pytest.raises(ua.UaStatusCodeError) as e:
                    await n.write_value(ua.DataValue(ua.Variant(value, before.Value.VariantType)))
                assert "BadUserAccessDenied" in type(e.value).__name__ or "AccessDenied" in str(e.value)
                assert (await n.read_data_value(raise_on_bad_status=False)).Value == before.Value
            # nor add nodes under the gateway's folder
            with pytest.raises(ua.UaStatusCodeError):
                await c.get_node("ns=2;s=gw-1").add_object(ua.NodeId("evil", 2), "2:evil")
        finally:
            await c.disconnect()

    run(check())


def test_notices_and_status(world) -> None:
    view = world["view"]
    port = int(view.endpoint.rsplit(":", 1)[1].split("/")[0])
    assert port > 0 and view.endpoint == "opc.tcp://127.0.0.1:%d/edgetwin/" % port
    st = view.status()
    assert set(st) == {"endpoint", "nodes", "signals", "updates", "clients", "last_error"}
    assert json.dumps(st)  # it goes into the gateway's status file


def test_the_first_notice_says_where_it_serves(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "g.db")
    # lines stored with no description named: the built-in simulator's
    store.add_log("n1", 7, 1, 1, T0 * 1000, 1, "%s P-101 RUNNING T=60.0C" % stamp(T0))
    store.node_id("n2")  # no line and no description yet: it has not said what it runs, so no machines
    view = OpcuaView(tmp_path / "g.db", opcua_args.bind(parse(["--opcua", "opc.tcp://localhost:0/plant"])), "gw")
    view.start()
    try:
        lines = view.notices()
        sim = sum(len(m.signals) for m in plantdesc.builtin().machines)
        assert lines == ["opcua: serving %s (2 nodes, %d signals, loopback, anonymous)" % (view.endpoint, sim)]
        assert view.endpoint.startswith("opc.tcp://127.0.0.1:") and view.endpoint.endswith("/plant")
        assert view.notices() == []
        # a second server on the same port cannot listen: one line
        port = int(view.endpoint.split(":")[2].split("/")[0])
        other = OpcuaView(tmp_path / "g.db", opcua_args.bind(parse(["--opcua", "opc.tcp://127.0.0.1:%d" % port])),
                          "gw")
        with pytest.raises(UserError) as e:
            other.start()
        assert "cannot listen" in str(e.value) and "\n" not in str(e.value)
    finally:
        view.stop()
        store.close()


def _bad(tmp: Path) -> list[tuple[list[str], str]]:
    cert, key, pw, short = tmp / "c.pem", tmp / "k.pem", tmp / "pw", tmp / "short"
    cert.write_text("x")
    key.write_text("x")
    pw.write_text(PASSWORD + "\n")
    short.write_text("abc\n")
    sec = ["--opcua-cert", str(cert), "--opcua-key", str(key), "--opcua-user", "scada",
           "--opcua-password-file", str(pw)]
    return [
        (["--opcua", "http://127.0.0.1:4840"], "must start with opc.tcp://"),
        (["--opcua", "opc.tcp://127.0.0.1:99999"], "port must be 0..65535"),
        (["--opcua", "opc.tcp://127.0.0.1:port"], "port must be 0..65535"),
        (["--opcua", "opc.tcp://plant.example.com:4840"], "must be an IP address"),
        (["--opcua", "opc.tcp://127.0.0.1:4840/a b"], "the path may hold"),
        (["--opcua", "opc.tcp://0.0.0.0:4840"],
         "--opcua opc.tcp://0.0.0.0:4840 is reachable from other machines: give --opcua-cert, --opcua-key, "
         "--opcua-user and a password too (docs/OPCUA.md), or keep 127.0.0.1"),
        (["--opcua", "opc.tcp://0.0.0.0:4840"] + sec[:4], "is reachable from other machines"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-cert", str(cert)],
         "--opcua-cert and --opcua-key go together"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-cert", str(tmp / "nope"), "--opcua-key", str(key)],
         "no such file"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-user", "scada"], "--opcua-user and a password go together"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-password-file", str(pw)], "go together"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-user", "scada", "--opcua-password-file", str(short)],
         "at least 12 characters"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-user", "scada", "--opcua-password-file", str(tmp / "no")],
         "no such file"),
        (["--opcua", "opc.tcp://127.0.0.1:4840", "--opcua-user", "a b"] + sec[6:], "--opcua-user must be"),
        (["--opcua", "opc.tcp://127.0.0.1:4840"] + sec[:4], "go together: security is signed and encrypted"),
        (["--opcua", "opc.tcp://127.0.0.1:4840"] + sec[4:], "go together: security is signed and encrypted"),
    ]


def test_bad_options_are_one_line_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(opcua_args.PASSWORD_ENV, raising=False)
    for argv, want in _bad(tmp_path):
        with pytest.raises(UserError) as e:
            opcua_args.bind(parse(argv))
        msg = str(e.value)
        assert want in msg and "\n" not in msg, (argv, msg)
    assert opcua_args.bind(parse([])) is None
    assert opcua_args.given_options(parse(["--opcua-user", "scada"])) == ["--opcua-user"]
    assert opcua_args.given_options(parse(["--opcua", "opc.tcp://127.0.0.1"])) == []
    b = opcua_args.bind(parse(["--opcua", "opc.tcp://[::1]"]))
    assert b["url"] == "opc.tcp://[::1]:4840/edgetwin/" and not b["secure"] and b["user"] is None
    monkeypatch.setenv(opcua_args.PASSWORD_ENV, PASSWORD)
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    b = opcua_args.bind(parse(["--opcua", "opc.tcp://0.0.0.0:4841/x", "--opcua-cert", str(cert), "--opcua-key",
                               str(key), "--opcua-user", "scada"]))
    assert b["secure"] and b["password"] == PASSWORD and (b["host"], b["port"], b["path"]) == ("0.0.0.0", 4841, "/x")


def _pair(tmp: Path, name: str, uri: str, suffixes: tuple[str, str]) -> tuple[Path, Path]:
    """A self-signed RSA certificate for an OPC UA application (its ApplicationUri in subjectAltName)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri), x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=True, key_encipherment=True,
                                         data_encipherment=True, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           False)
            .sign(key, hashes.SHA256()))
    c, k = tmp / (name + suffixes[0]), tmp / (name + suffixes[1])
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption()))
    return c, k


def test_secure_mode_needs_encryption_and_the_password(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "g.db")
    desc = _descriptions(tmp_path)[0]
    store.add_plant(desc)
    store.set_node_plant("n1", desc.hash)
    Writer(store, "n1", desc.hash).line(T0, 1, "P-1 RUNNING P=4.2bar I=10.0A T=50.0C")
    # the server's PEM files need no .pem suffix (the view looks at the content); asyncua's client does
    scert, skey = _pair(tmp_path, "server", "urn:edgetwin:server", (".crt", ".key"))
    ccert, ckey = _pair(tmp_path, "client", "urn:edgetwin:test-client", (".pem", "-key.pem"))
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    sec = ["--opcua-key", str(skey), "--opcua-user", "scada", "--opcua-password-file", str(pw)]
    bad = OpcuaView(tmp_path / "g.db", opcua_args.bind(parse(["--opcua", "opc.tcp://127.0.0.1:0", "--opcua-cert",
                                                              str(garbage)] + sec)), "gw")
    with pytest.raises(UserError) as e:
        bad.start()
    assert str(e.value).startswith("--opcua-cert %s: not a certificate" % garbage) and "\n" not in str(e.value)
    mixed = OpcuaView(tmp_path / "g.db", opcua_args.bind(parse(["--opcua", "opc.tcp://127.0.0.1:0", "--opcua-cert",
                                                                str(ccert)] + sec)), "gw")
    with pytest.raises(UserError, match="are not one RSA key pair"):
        mixed.start()
    bind = opcua_args.bind(parse(["--opcua", "opc.tcp://127.0.0.1:0", "--opcua-cert", str(scert)] + sec))
    assert bind["secure"]
    view = OpcuaView(tmp_path / "g.db", bind, "gw", poll_s=POLL_S)
    view.start()
    path = "ns=2;s=gw/n1/P-1/discharge_press"

    async def secure(user: str, password: str):
        c = Client(view.endpoint, timeout=5)
        c.application_uri = "urn:edgetwin:test-client"
        await c.set_security_string("Basic256Sha256,SignAndEncrypt,%s,%s" % (ccert, ckey))
        c.set_user(user)
        c.set_password(password)
        await c.connect()
        try:
            return await c.get_node(path).read_value()
        finally:
            await c.disconnect()

    async def anonymous():
        c = Client(view.endpoint, timeout=5)
        await c.connect()
        try:
            return await c.get_node(path).read_value()
        finally:
            await c.disconnect()

    async def password_in_clear():
        """What asyncua's client will not do: open the unsecured channel every server keeps for GetEndpoints, then
        create and activate a session on it with the right user and password."""
        c = Client(view.endpoint, timeout=5)
        await c.connect_socket()
        try:
            await c.send_hello()
            await c.open_secure_channel()
            p = ua.CreateSessionParameters(ClientDescription=ua.ApplicationDescription(
                ApplicationUri="urn:x", ApplicationType=ua.ApplicationType.Client), EndpointUrl=view.endpoint,
                SessionName="x", ClientNonce=b"0" * 32, RequestedSessionTimeout=60000)
            await c.uaclient.create_session(p)
            a = ua.ActivateSessionParameters(LocaleIds=["en"], UserIdentityToken=ua.UserNameIdentityToken(
                PolicyId="username", UserName="scada", Password=PASSWORD.encode()))
            await c.uaclient.activate_session(a)
            read = ua.ReadParameters(NodesToRead=[ua.ReadValueId(NodeId=ua.NodeId.from_string(path),
                                                                  AttributeId=ua.AttributeIds.Value)])
            return await c.uaclient.read(read)
        finally:
            c.disconnect_socket()

    async def endpoints():
        c = Client(view.endpoint, timeout=5)
        return await c.connect_and_get_server_endpoints()

    try:
        assert run(secure("scada", PASSWORD)) == 4.2
        eps = run(endpoints())
        assert [(e.SecurityPolicyUri.rsplit("#", 1)[1], e.SecurityMode) for e in eps] == [
            ("Basic256Sha256", ua.MessageSecurityMode.SignAndEncrypt)]
        assert [t.TokenType for t in eps[0].UserIdentityTokens] == [ua.UserTokenType.UserName]
        assert eps[0].EndpointUrl == view.endpoint
        with pytest.raises(ua.UaError, match="No matching endpoints"):  # none offers security None
            run(anonymous())
        with pytest.raises(ua.uaerrors.BadUserAccessDenied):
            run(password_in_clear())
        with pytest.raises(ua.uaerrors.BadUserAccessDenied):
            run(secure("scada", PASSWORD + "x"))
        with pytest.raises(ua.uaerrors.BadUserAccessDenied):
            run(secure("admin", PASSWORD))
        assert run(secure("scada", PASSWORD)) == 4.2  # and the right one still gets in
        assert "BadUserAccessDenied" in view.status()["last_error"]
    finally:
        view.stop()
        store.close()
