"""sdnotify.py: tell systemd that the gateway is ready, alive and stopping (sd_notify(3), no libsystemd).

A service with Type=notify gets NOTIFY_SOCKET (a unix datagram socket's path, or "@name" in the abstract
namespace); each message is one datagram of KEY=VALUE lines. With WatchdogSec= it also gets WATCHDOG_USEC
(and WATCHDOG_PID, the process meant): "WATCHDOG=1" must come at least that often, or systemd kills the
service and (Restart=on-failure) starts it again; `tick()` sends it every half of that from the loop, so a
loop stuck anywhere stops it. Nothing is raised: a socket gone away never stops the gateway.
"""

from __future__ import annotations

import os
import socket
import time

_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    def __init__(self, address: str, watchdog_s: float | None = None) -> None:
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_s = watchdog_s
        self.sent = 0  # datagrams sent (the tests count them)
        self._next = 0.0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    @classmethod
    def from_env(cls, env=None, pid: int | None = None) -> "Notifier | None":
        """The notifier systemd's variables ask for (None outside a Type=notify service); the variables are
        taken out of `env` (os.environ by default), so no child process answers for this one."""
        env = os.environ if env is None else env
        address, usec, wpid = (env.pop(k, None) for k in _VARS)
        if not address or address[0] not in "/@":  # unset, or a kind this gateway does not speak (vsock:...)
            return None
        watchdog = None
        try:
            if usec and int(usec) > 0 and (not wpid or int(wpid) == (os.getpid() if pid is None else pid)):
                watchdog = int(usec) / 1e6
        except ValueError:
            watchdog = None
        return cls(address, watchdog)

    def send(self, *lines: str) -> bool:
        try:
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError:  # systemd restarting, the socket gone: the service goes on
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "") -> None:
        self.send("READY=1", *(["STATUS=" + status] if status else []))
        self._next = time.monotonic()
        self.tick()

    def tick(self, now: float | None = None) -> None:
        """WATCHDOG=1 when half the watchdog time has passed since the last one (cheap to call every round)."""
        if self.watchdog_s is None:
            return
        now = time.monotonic() if now is None else now
        if now >= self._next:
            self._next = now + self.watchdog_s / 2
            self.send("WATCHDOG=1")

    def status(self, text: str) -> None:
        self.send("STATUS=" + text)

    def stopping(self) -> None:
        self.send("STOPPING=1")
        self._sock.close()
