# uart_cp.py: CircuitPython's link adapters (busio.UART, usb_cdc.data) and its GPIO-number-to-pin lookup.
"""The CircuitPython half of firmware/uart.py, with the same face (readinto/write/any/close, 0 for
"nothing yet", HalError for a port that cannot open): in a module of its own so that a MicroPython board,
which never runs them, does not hold their code. board_pin() is also what firmware/cp_hal.py's input
adapters name their pins with.
"""
from firmware.uart import HalError, _count


def board_pin(num, fix="check the pin numbers in the plant description"):
    """The board's pin object for GPIO `num`: board.GPn, board.IOn or microcontroller.pin.GPIOn. Not Dn:
    on Feather boards D-numbers are not GPIO numbers. HalError (a ValueError) naming the pin and `fix`."""
    try:
        import board
    except ImportError:
        raise HalError("no board module: CircuitPython's pins are needed for GPIO%d" % num)
    for fmt in ("GP%d", "IO%d"):
        pin = getattr(board, fmt % num, None)
        if pin is not None:
            return pin
    try:
        import microcontroller

        pin = getattr(microcontroller.pin, "GPIO%d" % num, None)
    except ImportError:
        pin = None
    if pin is None:
        raise HalError("this board has no pin GP%d/IO%d/GPIO%d: %s" % (num, num, num, fix))
    return pin


class _CircuitPyStream:
    """What busio.UART and usb_cdc.Serial share: their readinto and write refuse a length argument
    (pyserial compatibility), so a whole buffer goes through as is, allocation-free, and a partial one
    needs a memoryview slice, which allocates: on CircuitPython size the buffer to the read you want.
    Both return None on timeout (-> 0). Subclasses set self._u."""

    def readinto(self, buf, n=None):
        if n is None or n == len(buf):
            return self._u.readinto(buf) or 0
        return self._u.readinto(memoryview(buf)[:_count(buf, n)]) or 0

    def write(self, buf, n=None):
        if n is None or n == len(buf):
            return self._u.write(buf) or 0
        return self._u.write(memoryview(buf)[:_count(buf, n)]) or 0

    def any(self):
        return self._u.in_waiting


class BusioUART(_CircuitPyStream):
    """CircuitPython busio.UART: Raspberry Pi Pico (RP2040) on GP0 (TX) / GP1 (RX), or any board
    whose profile names the pins; also an RS-485 bus's UART (boardcfg.open_bus). busio's timeout is in
    SECONDS (a float, at most 100); this adapter takes milliseconds like MachineUART and converts once,
    here. receiver_buffer_size plays rxbuf's part; parity 0 none, 1 even, 2 odd and stop 1 or 2 as
    MachineUART's. The real readinto returns None when nothing came in time and takes no length argument:
    readinto(buf) with n=None (or n == len(buf)) allocates nothing, a smaller n costs a memoryview.
    No flush(): busio cannot say when the last byte has left the transmitter. `pins_in` says where the
    pin numbers come from, for the error a missing pin gives."""

    def __init__(self, tx, rx, baud, rxbuf=1024, timeout_ms=0, parity=0, stop=1,
                 pins_in="uart.tx/uart.rx in /board.json"):
        import busio

        if timeout_ms < 0 or timeout_ms > 100000:
            raise HalError("timeout_ms=%d is outside 0..100000 (busio allows at most 100 s)" % timeout_ms)
        try:
            par = None
            if parity:
                par = busio.UART.Parity.EVEN if parity == 1 else busio.UART.Parity.ODD
            fix = "check " + pins_in
            self._u = busio.UART(board_pin(tx, fix), board_pin(rx, fix), baudrate=baud, parity=par, stop=stop,
                                 timeout=timeout_ms / 1000, receiver_buffer_size=rxbuf)
        except (ValueError, RuntimeError, OSError) as e:
            raise HalError("busio.UART(tx=%d, rx=%d, baud=%d, rxbuf=%d) failed: %s" % (tx, rx, baud, rxbuf, e))

    def close(self):
        self._u.deinit()


class UsbCdcData(_CircuitPyStream):
    """CircuitPython usb_cdc.data: the second USB serial channel (RP2040, ESP32-S3 with native USB), so
    the link needs no wiring and the REPL console stays free. It exists only after boot.py ran
    usb_cdc.enable(console=True, data=True) and the board was reset. Its timeout is in seconds too, and
    like busio its readinto takes no length: pass n=None (or len(buf)) to stay allocation-free."""

    def __init__(self, timeout_ms=0):
        try:
            import usb_cdc
        except ImportError:
            raise HalError("no usb_cdc module: UsbCdcData needs CircuitPython on a board with native USB")
        if usb_cdc.data is None:
            raise HalError("usb_cdc.data is not enabled: put usb_cdc.enable(console=True, data=True) in "
                           "boot.py and reset the board")
        self._u = usb_cdc.data
        self._u.timeout = timeout_ms / 1000

    def close(self):
        pass  # the channel belongs to the USB stack: nothing to release
