"""A port named by a stable link (/dev/serial/by-id/...) followed across unplug and replug.

The adapter goes: its tty hangs up and udev removes the link; it comes back: the link reappears, pointing
at another tty. Here the adapter is a pty pair and the link a symlink in tmp_path, re-created (as udev
does, by rename) pointing at a NEW pty; the node is a CPython link endpoint on the master sending numbered
LOG lines. The gateway (host/gateway.py, in-process) reopens the link's path with a growing wait, says one
line when the port goes and one when it is back, and the node's session resumes: every line once, in order.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from host import session as hsession
from host.gateway import Gateway
from host.store import LogStore
from shared import frame, frame_host, link
from tools.board.ptys import set_raw


def pty() -> tuple[int, int, str]:
    m, s = os.openpty()
    set_raw(s)
    os.set_blocking(m, False)
    return m, s, os.ttyname(s)


def plug(by_id: Path, tty: str) -> None:
    """Point the link at tty the way udev does: a new name renamed over the old, never a missing link."""
    tmp = by_id.with_name(by_id.name + ".new")
    os.symlink(tty, tmp)
    os.replace(tmp, by_id)


class Node:
    """A node's link on a pty master: LOG lines "line N", numbered from 0 (fd -1: the cable is out)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lk = link.Link(self, role=frame.ROLE_NODE, now=hsession.ticks_ms(), board_id=b"by-id-test")
        self.n = 0

    def write(self, buf, n=None) -> int:
        n = len(buf) if n is None else n
        if self.fd < 0:
            return n  # into a cable that goes nowhere
        try:
            return os.write(self.fd, bytes(buf[:n]))
        except OSError:
            return 0

    def readinto(self, buf) -> int:
        if self.fd < 0:
            return 0
        try:
            data = os.read(self.fd, len(buf))
        except OSError:
            return 0
        buf[:len(data)] = data
        return len(data)

    def step(self, send: bool = True) -> None:
        self.lk.poll(hsession.ticks_ms())
        if send and self.lk.established and self.lk.free_slots():
            body = frame_host.pack_body(frame.LOG, ts=self.n, level=1, text="line %d" % self.n)
            if self.lk.send(frame.LOG, body):
                self.n += 1


def run_until(gw: Gateway, node: Node, done, timeout: float, send: bool = True) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        node.step(send)
        gw.round()
        gw.report()
        time.sleep(0.001)
    assert done(), "timed out: node %s, session %s" % (node.lk.stats(), gw.sessions[0].status())


def test_gateway_follows_a_by_id_link_to_a_new_pty(tmp_path: Path) -> None:
    by_id = tmp_path / "serial" / "by-id" / "usb-edgetwin_node_E66038B713579A2C-if00"
    by_id.parent.mkdir(parents=True)
    m, s, tty = pty()
    plug(by_id, tty)
    out = io.StringIO()
    gw = Gateway([str(by_id)], tmp_path / "g.db", names=["n1"], out=out)
    sess = gw.sessions[0]
    sess.reopen_s, sess.reopen_max_s = 0.05, 0.4  # this test's patience (0.5 s doubling to 5 s in service)
    gw.open()
    node = Node(m)
    m2 = s2 = -1
    try:
        run_until(gw, node, lambda: node.lk.tx_acked >= 100, 10)
        assert sess.device == tty and sess.url == str(by_id)
        # the new tty exists before the old one goes, so it is surely another one
        m2, s2, tty2 = pty()
        assert tty2 != tty
        # unplugged: the tty hangs up, the link goes; the node keeps logging into its window meanwhile
        node.fd = -1
        os.close(m)
        os.close(s)
        by_id.unlink()
        t0 = time.monotonic()
        run_until(gw, node, lambda: time.monotonic() - t0 > 2.0, 5)
        assert sess.transport is None and sess.reopen_tries >= 4, sess.status()  # tried, waiting longer each time
        sent_offline = node.n
        # plugged back: the link reappears, pointing at the new tty
        plug(by_id, tty2)
        node.fd = m2
        run_until(gw, node, lambda: node.lk.tx_acked >= sent_offline + 100, 10)
        run_until(gw, node, lambda: node.lk.tx_acked == node.n, 10, send=False)
        st = sess.status()
        assert st["url"] == str(by_id) and st["device"] == tty2 and st["open"], st
        assert st["disconnects"] == 1 and st["opens"] == 2 and st["established"], st
    finally:
        gw.close()
        for fd in (m2, s2):
            if fd >= 0:
                os.close(fd)
    store = LogStore(tmp_path / "g.db", readonly=True)
    texts = [r["text"] for r in store.logs("n1")]
    store.close()
    assert texts == ["line %d" % i for i in range(node.n)]  # every line once, in order, nothing missing
    lines = out.getvalue().splitlines()
    gone = [ln for ln in lines if "lost on %s" % by_id in ln or "port %s gone" % by_id in ln]
    back = [ln for ln in lines if "port %s back after" % by_id in ln]
    assert len(gone) == 1 and "reopening the port when it is back" in gone[0], lines  # one line, not one a try
    assert len(back) == 1 and back[0].endswith("(%s)" % tty2), lines
    assert sum(" connected " in ln for ln in lines) == 2, lines


def test_a_hung_up_tty_is_a_lost_port() -> None:
    # A USB adapter unplugged hangs its tty up: reads return nothing (as when nothing waits) and only a write
    # would fail, while select() says readable at once: the gateway would spin. poll() tells them apart.
    m, s, tty = pty()
    t = hsession.SerialTransport(hsession.open_serial(tty, 115200))
    buf = bytearray(16)
    try:
        assert t.readinto(buf) == 0  # nothing waiting: no error
        os.write(m, b"abc")
        deadline = time.monotonic() + 2
        got = 0
        while got == 0 and time.monotonic() < deadline:
            got = t.readinto(buf)
        assert bytes(buf[:got]) == b"abc"
        os.close(m)  # the other end goes: the tty hangs up
        with pytest.raises(OSError, match="hung up"):
            t.readinto(buf)
    finally:
        t.close()
        os.close(s)


def test_reopen_waits_longer_after_each_failed_try(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "g.db")
    path = tmp_path / "by-id-link"
    sess = hsession.Session(str(path), store, name="n", reopen_s=0.02, reopen_max_s=0.16)
    tries: list[float] = []
    m = s = -1
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            before = sess.reopen_tries
            sess.poll()
            if sess.reopen_tries > before:
                tries.append(time.monotonic())
            time.sleep(0.002)
        gaps = [b - a for a, b in zip(tries, tries[1:])]
        assert 5 <= len(tries) <= 12, gaps  # 50 at a fixed 0.02 s
        for i, g in enumerate(gaps):
            assert g >= min(0.02 * 2 ** (i + 1), 0.16) - 0.003, gaps  # 0.04, 0.08, 0.16, 0.16...
        m, s, tty = pty()
        plug(path, tty)
        t1 = time.monotonic()
        while sess.transport is None and time.monotonic() - t1 < 3:
            sess.poll()
            time.sleep(0.002)
        assert sess.transport is not None and time.monotonic() - t1 < 0.16 + 0.5  # within the longest wait
        assert sess.stable and sess.device == tty
    finally:
        sess.close()
        store.close()
        for fd in (m, s):
            if fd >= 0:
                os.close(fd)


def test_a_link_is_not_swapped_for_the_device_it_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /dev/ttyACM0 coming back as ACM1 is found by its USB identity; a by-id link is not swapped for the tty
    # it named (udev makes the tty, then the link): the session waits for the link and keeps its name
    m, s, tty = pty()
    by_id = tmp_path / "usb-Raspberry_Pi_Pico_E66038B7-if00"
    plug(by_id, tty)
    store = LogStore(tmp_path / "g.db")
    sess = hsession.Session(str(by_id), store, name="n")
    from serial.tools import list_ports

    class Info:
        device, vid, pid, serial_number = tty, 0x2E8A, 0x0005, "E66038B7"

    monkeypatch.setattr(list_ports, "comports", lambda: [Info()])
    try:
        sess.open()
        assert sess.stable and sess.usb_id == (0x2E8A, 0x0005, "E66038B7")
        sess.close()
        by_id.unlink()
        with pytest.raises(hsession.PortError, match="does not exist"):
            sess.open()
        assert sess.url == str(by_id)
    finally:
        sess.close()
        store.close()
        os.close(m)
        os.close(s)
