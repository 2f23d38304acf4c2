# uart.py: link UART adapters, one per port, all with readinto/write/any/close that never return None.
"""The node's link to its gateway is a byte stream; each port opens it differently and reports
"nothing yet" differently (machine.UART and busio.UART return None on timeout, a pty file returns 0,
pyserial on the host returns b''). The adapters below hide that: every one exposes

    readinto(buf, n=None) -> int   bytes read into buf[0:n] (n defaults to len(buf)); 0 when nothing
    write(buf, n=None)    -> int   bytes written from buf[0:n]
    any()                 -> int   bytes waiting (MachineUART, BusioUART, UsbCdcData), or 1/0 (PtyUART)

MachineUART and PtyUART live here; CircuitPython's BusioUART and UsbCdcData in firmware/uart_cp.py, so a
MicroPython board never holds their code.
    close()

readinto/write allocate nothing on MicroPython (no slicing, no *args, no float): the link's receive
loop calls them with buffers it allocated once. On CircuitPython (BusioUART, UsbCdcData) that holds for
whole-buffer calls (n=None or n=len(buf)): busio and usb_cdc take no length argument, so a partial n
costs a memoryview. Bad n raises HalError (a ValueError). The hardware adapters are thin on purpose: they cannot
run on the host, so tests/shared/test_uart.py drives them with fake machine/busio modules.
"""

from shared.compat import const

_VMIN = const(6)  # Linux termios c_cc indices (the MicroPython termios module has no names for them)
_VTIME = const(5)
_POLLIN = const(1)


class HalError(ValueError):
    """A link port cannot be opened or was used wrongly; the message says what to do."""


def _count(buf, n):
    # Validate n against buf once per call: int work only, no allocation.
    if n is None:
        return len(buf)
    if n < 0 or n > len(buf):
        raise HalError("n=%d is outside 0..len(buf)=%d" % (n, len(buf)))
    return n


class MachineUART:
    """MicroPython machine.UART: Raspberry Pi Pico (RP2040) UART0 on GP0/GP1, ESP32-S3 UART1 on
    GPIO17/18. `rxbuf` sizes the driver's receive ring (the ESP32 hardware FIFO is only 128 B, the
    RP2040's 32 B): at 115200 baud 1 KB is ~90 ms of traffic the application may fall behind by.
    timeout=0: reads return at once; the real readinto then returns None when nothing came. parity 0 none,
    1 even, 2 odd and stop 1 or 2 (an RS-485 Modbus bus: 8E1 by the standard)."""

    def __init__(self, uart_id, baud, tx=-1, rx=-1, rxbuf=1024, timeout_ms=0, parity=0, stop=1):
        import machine  # imported here so tests can put a fake in sys.modules first

        if not hasattr(machine, "UART"):
            raise HalError("this port's machine module has no UART (unix port?): use PtyUART on the "
                           "virtual board or run on a board")
        kw = {"baudrate": baud, "rxbuf": rxbuf, "timeout": timeout_ms}
        if parity or stop != 1:  # machine.UART: parity None, 0 (even) or 1 (odd)
            kw["bits"] = 8
            kw["parity"] = None if not parity else parity - 1
            kw["stop"] = stop
        if tx >= 0:
            kw["tx"] = machine.Pin(tx)
        if rx >= 0:
            kw["rx"] = machine.Pin(rx)
        try:
            self._u = machine.UART(uart_id, **kw)
        except (ValueError, OSError) as e:
            raise HalError("machine.UART(%d, tx=%d, rx=%d, baud=%d, rxbuf=%d) failed: %s"
                           % (uart_id, tx, rx, baud, rxbuf, e))

    def readinto(self, buf, n=None):
        got = self._u.readinto(buf, _count(buf, n))
        return got or 0  # None on timeout -> 0

    def write(self, buf, n=None):
        return self._u.write(buf, _count(buf, n)) or 0

    def any(self):
        return self._u.any()

    def flush(self):
        """Wait until every byte written has left the transmitter (machine.UART.flush; on the RP2040 the
        last stop bit included): the Modbus master drops RS-485 driver-enable after it."""
        self._u.flush()

    def close(self):
        self._u.deinit()


class PtyUART:
    """The virtual board's UART (tools/board/vboard.py): a pty whose path is in $EDGETWIN_UART inside the
    interpreter. The tty is switched to VMIN=0/VTIME=0 so readinto returns at once with what is there
    (0 when nothing) instead of waiting to fill the buffer; readable() asks select.poll with timeout 0.
    close() puts the tty back as it found it. Works on the MicroPython unix port and on CPython."""

    def __init__(self, path=None):
        import os
        import select
        import sys

        if path is None:
            path = os.getenv("EDGETWIN_UART")
            if not path:
                raise HalError("EDGETWIN_UART is not set: PtyUART runs on the virtual board "
                               "(python -m tools.board.vboard), which sets it to its UART's pty")
        try:
            import termios
        except ImportError:
            raise HalError("no termios module: PtyUART needs the MicroPython unix port or CPython on Linux")
        self._cpython = sys.implementation.name == "cpython"
        try:
            self._f = open(path, "r+b", 0) if self._cpython else open(path, "r+b")
        except OSError as e:
            raise HalError("cannot open the virtual UART %s: %s" % (path, e))
        self._termios = termios
        self._fd = self._f.fileno()
        try:
            self._saved = termios.tcgetattr(self._fd)
            attrs = termios.tcgetattr(self._fd)
        except Exception:  # noqa: BLE001  (OSError on MicroPython, termios.error on CPython)
            self._f.close()
            raise HalError("%s is not a tty: EDGETWIN_UART must name the virtual board's UART pty" % path)
        cc = attrs[6]
        cc[_VMIN] = 0
        cc[_VTIME] = 0
        termios.tcsetattr(self._fd, termios.TCSANOW, attrs)
        self.path = path
        self._poll = select.poll()
        self._poll.register(self._f, _POLLIN)
        self.readable()  # ipoll allocates its result tuple on first use only

    def readinto(self, buf, n=None):
        n = _count(buf, n)
        if self._cpython:
            return self._f.readinto(memoryview(buf)[:n]) or 0
        return self._f.readinto(buf, n) or 0

    def write(self, buf, n=None):
        n = _count(buf, n)
        if self._cpython:
            return self._f.write(memoryview(buf)[:n]) or 0
        return self._f.write(buf, n) or 0

    def readable(self):
        """1 if a read would return bytes now, else 0 (poll with timeout 0)."""
        if self._cpython:
            return 1 if self._poll.poll(0) else 0
        for _ in self._poll.ipoll(0):
            return 1
        return 0

    def any(self):
        return self.readable()

    def close(self):
        if self._f is None:
            return
        try:
            self._termios.tcsetattr(self._fd, self._termios.TCSANOW, self._saved)
        except Exception:  # noqa: BLE001  (the relay may have gone; the file still closes)
            pass
        self._f.close()
        self._f = None
