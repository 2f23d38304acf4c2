"""The dashboard's server without a browser: its options (one line, exit 2, nothing created), the token and
TLS it needs off loopback, and `edgetwin ui` on a store alone following rows as they commit (its SSE feed)."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host import cli
from host.store import LogStore

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "0123456789abcdef0123"


def sample(i: int, t: float = 37.0) -> str:
    return "2026-11-30T06:%02d:%02dZ P-101 RUNNING T=%.1fC V=8.7mm/s I=11.5A P=3.6bar" % (i // 60, i % 60, t + i / 10)


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    db = tmp_path / "plant.db"
    s = LogStore(db)
    for i in range(20):
        s.add_log("pump-room", 1, i + 1, i, 1000 * i + 1, 1, sample(i))
    s.add_log("pump-room", 1, 21, 21, 21000, 2, "2026-11-30T06:00:19Z ALARM HIHI P-101 vibration 13.6mm/s prio=4 RAISED")
    s.add_log("pump-room", 1, 22, 22, 21000, 3, "2026-11-30T06:00:19Z STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB")
    s.add_annotation("pump-room", 1000, 2000, "P-101 tripped on vibration", True, 6,
                     spans=[("draft", "P-101 tripped"), ("fix", " on vibration")])
    s.close()
    return db


def one_line_error(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, err)
    return lines[0]


def test_bad_dashboard_options_are_one_line_and_exit_2(tmp_path: Path, store: Path, capsys) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    gw = ["gateway", "--port", "/dev/null", "--db", str(tmp_path / "g.db")]
    ui = ["ui", "--db", str(store)]
    cases = [
        (ui + ["--ui-host", "0.0.0.0"], "reachable from other machines"),
        (ui + ["--ui-host", "0.0.0.0", "--ui-token", TOKEN], "--ui-cert and --ui-key"),
        (ui + ["--ui-token", "short"], "16 characters"),
        (ui + ["--ui-cert", str(cert)], "go together"),
        (ui + ["--ui-cert", str(tmp_path / "none.pem"), "--ui-key", str(cert)], "none.pem"),
        (ui + ["--ui-port", "70000"], "--ui-port"),
        (ui + ["--ui-port", str(busy.getsockname()[1])], "cannot listen"),
        (ui + ["--ui-host", "plant.example"], "--ui-host"),
        (ui + ["--target", str(tmp_path / "none.gguf")], "--target"),
        (ui + ["--reranker", str(tmp_path / "none")], "--reranker"),
        (["ui", "--db", str(tmp_path / "none.db")], "does not exist"),
        (["ui", "--db", str(tmp_path)], "directory"),
        (gw + ["--ui-port", "0"], "needs --ui"),
        (gw + ["--ui-token", TOKEN], "needs --ui"),
        (gw + ["--ui", "--ui-host", "0.0.0.0"], "reachable from other machines"),
        (gw + ["--ui", "--ui-port", str(busy.getsockname()[1])], "cannot listen"),  # before the store is made
    ]
    before = sorted(os.listdir(tmp_path))
    try:
        for argv, word in cases:
            line = one_line_error(capsys, argv)
            assert line.startswith("edgetwin %s: error: " % argv[0]) and word in line, (argv, line)
    finally:
        busy.close()
    assert sorted(os.listdir(tmp_path)) == before  # nothing created


def start_ui(args: list[str]) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "ui", "--ui-port", "0", "--seconds", "120"] + args,
                         cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r" on (https?://[^ ]+/) ", line)
    if m is None:
        p.kill()
        raise AssertionError("no address printed: %r %s" % (line, p.communicate(timeout=10)[1]))
    return p, m.group(1)


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def test_off_loopback_it_needs_the_token_over_tls(tmp_path: Path, store: Path) -> None:
    """With --ui-token, --ui-cert and --ui-key (here on loopback, to keep the test off the network) it speaks
    HTTPS only and answers nothing without the token; ?token= sets the cookie and drops it from the address."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    p, url = start_ui(["--db", str(store), "--ui-token", TOKEN, "--ui-cert", str(cert), "--ui-key", str(key)])
    try:
        assert url.startswith("https://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1].strip("/"))
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False

        def get(path: str, headers: dict | None = None) -> http.client.HTTPResponse:
            c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            r.body = r.read()  # type: ignore[attr-defined]
            return r

        assert get("/").status == 401
        assert get("/api/status").status == 401
        assert get("/static/dashboard.js").status == 401
        assert get("/", {"Authorization": "Bearer " + TOKEN[:-1] + "x"}).status == 401
        assert get("/", {"Authorization": "Bearer " + TOKEN}).status == 200
        r = get("/?token=" + TOKEN)
        assert r.status == 303 and r.getheader("location") == "/"
        cookie = r.getheader("set-cookie")
        assert "HttpOnly" in cookie and "Secure" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        r = get("/api/status", {"Cookie": cookie.split(";")[0]})
        assert r.status == 200 and json.loads(r.body)["nodes"][0]["node"] == "pump-room"
        with pytest.raises((http.client.HTTPException, OSError)):  # no plain HTTP
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/")
            assert c.getresponse().status != 200
    finally:
        stop(p)


def read_event(r: http.client.HTTPResponse, timeout: float = 20) -> dict:
    """The next `update` event of an SSE stream."""
    deadline = time.monotonic() + timeout
    event, data = None, []
    while time.monotonic() < deadline:
        line = r.fp.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and event:
            if event == "update":
                return json.loads("".join(data))
            event, data = None, []
    raise AssertionError("no update event")


def test_edgetwin_ui_on_a_store_follows_new_rows(store: Path) -> None:
    """`edgetwin ui --db` alone: the page, then the event stream sends the plot, the trip, the annotation with
    its draft and correction pieces, and then what a writer commits later (a sample, an unverified note),
    though the writer came and went between two of its polls."""
    p, url = start_ui(["--db", str(store)])
    try:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/")
        page = c.getresponse().read().decode()
        assert "pump-room" in page and "/static/dashboard.js" in page and "http" not in page.split("<body", 1)[1]
        for path, code in (("/node/pump-room", 200), ("/node/nope", 404), ("/api/status", 200)):
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode()
            assert r.status == code, (path, r.status)
        assert json.loads(body)["nodes"][0]["lines"] == 22
        # a page elsewhere whose name resolves here (DNS rebinding) is refused: the Host must be loopback's
        c.request("GET", "/api/status", headers={"Host": "evil.example:%d" % port})
        r = c.getresponse()
        assert r.status == 400 and "pump-room" not in r.read().decode()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/events")
        r = c.getresponse()
        assert r.getheader("content-type").startswith("text/event-stream")
        first = read_event(r)
        plot = next(iter(first["plots"].values()))["svg"]
        assert 'data-machine="P-101"' in plot and 'data-points="20"' in plot and 'class="ev ev-trip"' in plot
        assert '<span class="draft">P-101 tripped</span><span class="fix"> on vibration</span>' in first["notes"][0]
        s = LogStore(store)
        s.add_log("pump-room", 1, 23, 23, 23000, 1, sample(21))
        s.add_annotation("pump-room", 3000, 4000, "drafted alone", False, 2, spans=[("unverified", "drafted alone")])
        s.close()
        got: dict = {"plots": {}, "notes": []}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (got["plots"] and got["notes"]):
            ev = read_event(r)
            got["plots"].update(ev["plots"])
            got["notes"] += ev["notes"]
        assert 'data-points="21"' in next(iter(got["plots"].values()))["svg"]
        assert "unverified" in got["notes"][0] and "drafted alone" in got["notes"][0]
    finally:
        stop(p)
    # a reader: a store no gateway holds open is left as it was found (no -wal, no -shm beside it)
    assert sorted(os.listdir(store.parent)) == ["plant.db"]
