"""The gateway as a systemd service: the unit file (examples/systemd/edgetwin-gateway.service) verified and its
hardening scored by systemd-analyze, the command it starts parsed, and sd_notify (host/sdnotify.py) spoken to a
real unix datagram socket: READY once the ports are open, WATCHDOG from the loop, STOPPING on SIGTERM, from
the main process (NotifyAccess=main)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host import sdnotify
from host.cli import parser
from tools.board.ptys import set_raw

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "examples" / "systemd" / "edgetwin-gateway.service"
CONFIG = ROOT / "examples" / "gateway.toml"
EXPOSURE_MAX = 2.5  # systemd-analyze security's 0..10 scale: 1.9 today ("OK" up to 3.9)


def analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.fail("systemd-analyze not found: `make systemd-setup` installs it (Debian's systemd package; "
                    "as root), or run: sudo apt-get install -y systemd")
    return exe


def unit_settings(text: str) -> dict[str, list[str]]:
    """"Section.Key" -> every value it is given (a unit may repeat a key: DeviceAllow)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, _, v = line.partition("=")
        out.setdefault("%s.%s" % (section, k.strip()), []).append(v.strip())
    return out


def local_unit(tmp_path: Path, text: str | None = None) -> Path:
    """The unit with its ExecStart on this checkout's edgetwin (verify checks that the program exists)."""
    text = UNIT.read_text() if text is None else text
    exe = Path(sys.executable).parent / "edgetwin"
    assert exe.is_file(), "%s: the venv's console script (make venv)" % exe
    path = tmp_path / UNIT.name
    path.write_text(text.replace("/opt/edgetwin/bin/edgetwin", str(exe)))
    return path


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_COLORS="0"))


def test_unit_verifies_clean(tmp_path: Path) -> None:
    exe = analyze()
    r = run(exe, "verify", str(local_unit(tmp_path)))
    assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr  # not even a warning
    # the check sees what it must: a misspelt value is a warning (exit status 0), a missing program an error
    bad = run(exe, "verify", str(local_unit(tmp_path, UNIT.read_text().replace("Restart=on-failure",
                                                                             "Restart=sometimes"))))
    assert "restart specifier" in bad.stderr, bad
    gone = run(exe, "verify", str(local_unit(tmp_path, UNIT.read_text().replace(
        "/opt/edgetwin/bin/edgetwin", str(tmp_path / "no-such-edgetwin")))))
    assert gone.returncode != 0 and "not executable" in gone.stderr, gone


def test_unit_hardening_scores_ok(tmp_path: Path) -> None:
    r = run(analyze(), "security", "--offline=yes", "--threshold=%d" % (EXPOSURE_MAX * 10), str(local_unit(tmp_path)))
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d)", r.stdout + r.stderr)
    assert r.returncode == 0 and level and float(level.group(1)) <= EXPOSURE_MAX, r.stdout[-2000:] + r.stderr


def test_unit_runs_the_gateway_as_a_service() -> None:
    u = unit_settings(UNIT.read_text())
    one = {k: v[-1] for k, v in u.items()}
    assert one["Service.Type"] == "notify" and one["Service.NotifyAccess"] == "main"
    assert one["Service.Restart"] == "on-failure" and int(one["Service.WatchdogSec"]) >= 10
    assert one["Service.User"] == "edgetwin" and "dialout" in one["Service.SupplementaryGroups"].split()
    assert one["Service.StateDirectory"] == "edgetwin" and one["Service.ProtectSystem"] == "strict"
    assert one["Service.DevicePolicy"] == "closed"
    assert {"char-ttyACM rw", "char-ttyUSB rw"} <= set(u["Service.DeviceAllow"])  # RP2040 / ESP32-S3, USB-UART
    assert one["Install.WantedBy"] == "multi-user.target"
    # what it starts: `edgetwin gateway --config FILE`, with the shipped example as that file
    argv = shlex.split(one["Service.ExecStart"])
    assert argv[:2] == ["/opt/edgetwin/bin/edgetwin", "gateway"] and argv[2] == "--config"
    args = parser().parse_args(["gateway", "--config", str(CONFIG)] + argv[4:])
    assert args.port and all(p.split("=", 1)[-1].startswith("/dev/serial/by-id/") for p in args.port), args.port
    # it writes only where the hardened unit lets it: the state directory
    for path in (args.db, args.status, args.trace, args.keys):
        assert path is None or path.startswith("/var/lib/edgetwin/"), path


def _notify_socket(tmp_path: Path) -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    addr = str(tmp_path / "notify")
    sock.bind(addr)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # each datagram says which process sent it
    return sock, addr


def _receive(sock: socket.socket, timeout: float) -> tuple[str, int] | None:
    sock.settimeout(timeout)
    try:
        data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(12))
    except socket.timeout:
        return None
    pid = -1
    for level, kind, body in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack("iII", body[:12])[0]
    return data.decode(), pid


def test_gateway_tells_systemd_ready_watchdog_stopping(tmp_path: Path) -> None:
    m, s = os.openpty()
    set_raw(s)
    sock, addr = _notify_socket(tmp_path)
    cfg = tmp_path / "gateway.toml"
    cfg.write_text('port = ["%s"]\ndb = "%s"\nquiet = true\n' % (os.ttyname(s), tmp_path / "g.db"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), NOTIFY_SOCKET=addr, WATCHDOG_USEC="200000",
               EDGETWIN_KEYS=str(tmp_path / "keys.json"))  # not this machine's own keys file
    p = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--config", str(cfg)], cwd=str(ROOT),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got: list[tuple[str, int]] = []
        t0 = time.monotonic()
        while sum(m_ == "WATCHDOG=1" for m_, _ in got) < 4 and time.monotonic() - t0 < 30:
            msg = _receive(sock, 30)
            assert msg is not None, "no datagram from the gateway"
            got.append(msg)
        assert got[0][0] == "READY=1\nSTATUS=serving 1 port(s)", got
        watch = [t for t, _ in got[1:]]
        assert watch == ["WATCHDOG=1"] * len(watch) and len(watch) >= 4, got
        assert {pid for _, pid in got} == {p.pid}, got  # the main process (NotifyAccess=main)
        t1 = time.monotonic()
        while True:  # every half of WATCHDOG_USEC: 10 in a second
            msg = _receive(sock, 2)
            assert msg is not None and msg[0] == "WATCHDOG=1", msg
            if time.monotonic() - t1 > 1.0:
                break
            got.append(msg)
        assert 5 <= len(got) - len(watch) - 1 <= 14, got  # not one a round (500 a second)
        p.send_signal(signal.SIGTERM)
        rest = []
        while (msg := _receive(sock, 10)) is not None and msg[0] != "STOPPING=1":
            rest.append(msg)
        assert msg is not None and msg[0] == "STOPPING=1", rest
        assert p.wait(15) == 0
        assert p.stderr.read() == b""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
        sock.close()
        os.close(m)
        os.close(s)


def test_notifier_from_the_environment(tmp_path: Path) -> None:
    sock, addr = _notify_socket(tmp_path)
    env = {"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid()), "KEEP": "1"}
    n = sdnotify.Notifier.from_env(env)
    assert env == {"KEEP": "1"}  # taken out: no child process answers for this one
    assert n is not None and n.watchdog_s == 1.0
    n.ready("up")
    assert _receive(sock, 2)[0] == "READY=1\nSTATUS=up" and _receive(sock, 2)[0] == "WATCHDOG=1"
    n.tick()
    assert _receive(sock, 0.2) is None  # half a watchdog time not yet passed
    n.tick(time.monotonic() + 0.6)
    assert _receive(sock, 2)[0] == "WATCHDOG=1"
    # the watchdog of another process (WATCHDOG_PID), no socket, a kind not spoken: nothing to do
    other = sdnotify.Notifier.from_env({"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert other is not None and other.watchdog_s is None
    assert sdnotify.Notifier.from_env({}) is None
    assert sdnotify.Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}) is None
    # systemd's own socket is abstract ("@..."): the same datagrams
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = "edgetwin-test-%d-%d" % (os.getpid(), time.monotonic_ns())
    abstract.bind("\0" + name)
    try:
        a = sdnotify.Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        a.stopping()
        assert _receive(abstract, 2)[0] == "STOPPING=1"
    finally:
        abstract.close()
    sock.close()
    os.unlink(addr)
    assert n.send("WATCHDOG=1") is False  # the socket gone: no exception, the gateway goes on
