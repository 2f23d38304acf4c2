"""A serial cable the soak can cut and dirty: relays bytes between a virtual board's UART pty and a pty of its
own that the gateway opens through a stable symlink (as /dev/serial/by-id/... would be).

    r = Relay(tmp / "node-a")   # the gateway opens tmp/node-a (it may, before the board is there)
    r.attach(vnode.uart_port)
    r.cut()        # the cable is pulled: bytes both ways are lost until mend()
    r.mend()
    r.garbage(64)  # 64 random bytes down the line to each side, between frames or inside one
    r.close()

A gateway that is not reading (killed, restarting) loses what the line carried meanwhile, as a UART without
flow control does: a write the pty cannot take at once is dropped, never waited on, so a dead peer never
stalls the other direction. One thread per relay, select() with a short timeout.
"""

from __future__ import annotations

import os
import random
import select
import threading
from pathlib import Path

from tools.board.ptys import set_raw


class Relay:
    """Bytes between `node` (a tty path) and a fresh pty at `link_path`; see the module docstring."""

    def __init__(self, link_path: Path, seed: int = 1) -> None:
        self.node_fd = -1  # attach() plugs the board in: the gateway may open its end before that
        self.master, self.slave = os.openpty()
        set_raw(self.slave)  # kept open here: the line stays up while no gateway has it open
        os.set_blocking(self.master, False)
        self.link_path = Path(link_path)
        tmp = self.link_path.with_suffix(".new")
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(os.ttyname(self.slave), tmp)
        os.replace(tmp, self.link_path)
        self.rng = random.Random(seed)
        self.is_cut = False
        self.cut_bytes = 0  # bytes the cut cable lost
        self.lost_bytes = 0  # bytes a side could not take at once (its reader was gone)
        self.garbage_bytes = 0
        self.to_gw = 0
        self.to_node = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t: threading.Thread | None = None

    def attach(self, node: str) -> None:
        """Plug the board's UART (a tty path) in and start relaying."""
        self.node_fd = os.open(node, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        set_raw(self.node_fd)
        self._t = threading.Thread(target=self._run, name="soak-relay", daemon=True)
        self._t.start()

    def cut(self) -> None:
        self.is_cut = True

    def mend(self) -> None:
        self.is_cut = False

    def garbage(self, n: int) -> None:
        """n random bytes to each side (0x00 among them: they can end a frame as well as corrupt one)."""
        with self._lock:
            for fd in (self.master, self.node_fd):
                self._put(fd, bytes(self.rng.getrandbits(8) for _ in range(n)))
            self.garbage_bytes += 2 * n

    def _put(self, fd: int, data: bytes) -> None:
        try:
            n = os.write(fd, data)
        except (BlockingIOError, OSError):
            n = 0
        self.lost_bytes += len(data) - n

    def _run(self) -> None:
        fds = [self.node_fd, self.master]
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select(fds, [], [], 0.05)
            except (OSError, ValueError):
                return
            for fd in ready:
                try:
                    data = os.read(fd, 4096)
                except (BlockingIOError, OSError):
                    continue
                if not data:
                    continue
                with self._lock:
                    if self.is_cut:
                        self.cut_bytes += len(data)
                    elif fd == self.node_fd:
                        self.to_gw += len(data)
                        self._put(self.master, data)
                    else:
                        self.to_node += len(data)
                        self._put(self.node_fd, data)

    def close(self) -> None:
        self._stop.set()
        if self._t is not None:
            self._t.join(2)
        for fd in (self.master, self.slave, self.node_fd):
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.link_path.unlink()
        except OSError:
            pass
