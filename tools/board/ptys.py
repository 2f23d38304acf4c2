"""Pseudo-terminal pairs for the virtual boards (tools/board/vboard.py, tools/board/emuboard.py): a pty
pair that stays alive between clients, raw mode, and an outbox of bytes for a non-blocking fd."""

from __future__ import annotations

import errno
import os
import termios
import time

OUT_LIMIT = 256 * 1024  # bytes the relay keeps for a reader that is not reading; older bytes are dropped


def set_raw(fd: int) -> None:
    """Put a tty in raw mode: no echo, no line editing, no signals, no CR/LF translation, 8 bits."""
    iflag, oflag, cflag, lflag, ispeed, ospeed, cc = termios.tcgetattr(fd)
    iflag &= ~(termios.IGNBRK | termios.BRKINT | termios.PARMRK | termios.ISTRIP | termios.INLCR
               | termios.IGNCR | termios.ICRNL | termios.IXON | termios.IXOFF | termios.IXANY | termios.INPCK)
    oflag &= ~termios.OPOST
    cflag = (cflag & ~(termios.CSIZE | termios.PARENB)) | termios.CS8 | termios.CREAD | termios.CLOCAL
    lflag &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG | termios.IEXTEN)
    cc = list(cc)
    cc[termios.VMIN] = 1
    cc[termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, [iflag, oflag, cflag, lflag, ispeed, ospeed, cc])


class PtyEnd:
    """One pty pair we own: the master (relayed) and an open slave fd that keeps the device alive.

    Holding the slave open means the master never reports hang-up when no client has the device open,
    and the slave's termios (raw) persists between clients.
    """

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.path = os.ttyname(self.slave)
        set_raw(self.slave)
        os.set_blocking(self.master, False)

    def close(self) -> None:
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


def write_all(fd: int, data: bytes, stopped=None) -> bool:
    """Write all of data to a non-blocking fd, waiting out a full buffer. False if the fd failed (the peer
    went away) or stopped() turned true before everything was written."""
    while data:
        if stopped is not None and stopped():
            return False
        try:
            n = os.write(fd, data)
        except BlockingIOError:
            time.sleep(0.0005)
            continue
        except OSError:
            return False
        data = data[n:]
    return True


class Outbox:
    """Bytes waiting to be written to a non-blocking fd; the oldest are dropped past `limit`."""

    def __init__(self, fd: int, limit: int = OUT_LIMIT) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.limit = limit
        self.dropped = 0

    def put(self, data: bytes) -> None:
        self.buf += data
        over = len(self.buf) - self.limit
        if over > 0:
            del self.buf[:over]
            self.dropped += over

    def flush(self) -> None:
        while self.buf:
            try:
                n = os.write(self.fd, self.buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # the peer went away (EIO): nothing can be delivered
                if e.errno in (errno.EIO, errno.EBADF):
                    self.dropped += len(self.buf)
                    self.buf.clear()
                    return
                raise
            del self.buf[:n]
