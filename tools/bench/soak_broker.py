"""The soak's MQTT side: a mosquitto of its own on a free loopback port (restarted on the same port), and a
subscriber that keeps every event the gateway publishes, by its key, across broker restarts.

    b = Broker(tmp); b.start(); b.restart()   # SIGTERM, then the same port again (its persistence kept)
    sub = Subscriber(b.port)                  # QoS 1, a persistent session: what the broker held for it while
    sub.keys("annotations")                   # it was away comes when it is back; the row ids received
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho

SETUP = "mosquitto is not installed: run `make mqtt-setup` (apt-get install -y mosquitto)"


class BrokerError(RuntimeError):
    pass


def mosquitto_bin() -> str:
    path = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None)
    if path is None:
        raise BrokerError(SETUP)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """mosquitto on 127.0.0.1:port with persistence in `root`; a restart keeps the port. `extra`: the listener's
    options (anonymous access, or TLS, passwords and an ACL: the MQTT tests use this class too)."""

    def __init__(self, root: Path, extra: str = "allow_anonymous true\n") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.restarts = 0

    def start(self) -> None:
        why = ""
        for _ in range(1 if self.port else 5):  # a port found free may be taken before mosquitto binds it
            port = self.port or free_port()
            conf = self.root / "mosquitto.conf"
            conf.write_text("listener %d 127.0.0.1\n%spersistence true\npersistence_location %s/\n"
                            "log_dest file %s\nuser %s\n" % (port, self.extra, self.root, self.root / "mosquitto.log",
                                                              getpass.getuser()))
            self.proc = subprocess.Popen([mosquitto_bin(), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 10 and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    self.port = port
                    return
                except OSError:
                    time.sleep(0.05)
            self.stop()
            log = self.root / "mosquitto.log"
            why = log.read_text()[-500:] if log.exists() else "it did not listen"
        raise BrokerError("mosquitto would not start: %s" % why)

    def restart(self, down_s: float = 1.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


class Subscriber:
    """A paho client on `topics` with a persistent session (clean_session off, QoS 1): the row ids of every
    event it received, per table, and how many came more than once (QoS 1 allows repeats; a consumer drops
    them by key)."""

    def __init__(self, port: int, topics: str = "edgetwin/#", client_id: str = "edgetwin-soak") -> None:
        self.ids: dict[str, set[int]] = {}
        self.repeats = 0
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.c = paho.Client(callback_api_version=paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=False, protocol=paho.MQTTv311)
        self.c.on_connect = lambda c, u, f, rc, p: c.subscribe(topics, qos=1)
        self.c.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.c.on_message = self._msg
        self.c.reconnect_delay_set(1, 2)
        self.c.connect_async("127.0.0.1", port)
        self.c.loop_start()
        if not self.subscribed.wait(15):
            self.close()
            raise BrokerError("the soak's subscriber could not subscribe to the broker on port %d" % port)

    def _msg(self, c, u, m) -> None:
        if m.retain or not m.payload:
            return  # retained state (node and gateway status), not an event row
        try:
            body = json.loads(m.payload)
            table, rid = str(body["table"]), int(body["id"])
        except (ValueError, KeyError, TypeError):
            return
        with self.lock:
            got = self.ids.setdefault(table, set())
            if rid in got:
                self.repeats += 1
            got.add(rid)

    def keys(self, table: str) -> set[int]:
        with self.lock:
            return set(self.ids.get(table, ()))

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()
