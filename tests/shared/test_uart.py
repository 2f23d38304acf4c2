# test_uart.py: link UART adapters and board selection, driven by fake machine/busio/board/usb_cdc modules.
# The fakes behave like the real drivers where it matters: readinto returns None when nothing arrived
# before the timeout, busio rejects a timeout that is not 0..100 seconds, usb_cdc.data is None until
# boot.py enables it.
import json
import sys

import testkit
from firmware import boardcfg, uart, uart_cp
from shared import profile

_FAKES = ("machine", "busio", "board", "microcontroller", "usb_cdc")


class _Module:
    """An object standing in for a module in sys.modules."""


class FakePin:
    def __init__(self, num):
        self.num = num


class FakeStream:
    """Receive queue + transmit log in preallocated bytearrays; readinto returns None when empty."""

    def __init__(self, size=512):
        self.rx = bytearray(size)
        self.rx_head = 0
        self.rx_tail = 0
        self.tx = bytearray(size)
        self.tx_len = 0
        self.closed = False

    def feed(self, data):
        for b in data:
            self.rx[self.rx_tail] = b
            self.rx_tail += 1

    def readinto(self, buf, nbytes=-1):
        if nbytes < 0:
            nbytes = len(buf)
        assert nbytes <= len(buf), "driver asked to overrun the buffer"
        avail = self.rx_tail - self.rx_head
        if avail == 0:
            return None  # exactly what machine.UART / busio.UART do on timeout
        if nbytes > avail:
            nbytes = avail
        for i in range(nbytes):
            buf[i] = self.rx[self.rx_head + i]
        self.rx_head += nbytes
        return nbytes

    def write(self, buf, nbytes=-1):
        if nbytes < 0:
            nbytes = len(buf)
        for i in range(nbytes):
            self.tx[self.tx_len + i] = buf[i]
        self.tx_len += nbytes
        return nbytes

    def pending(self):
        return self.rx_tail - self.rx_head

    def deinit(self):
        self.closed = True


class FakeMachineUART(FakeStream):
    def __init__(self, uart_id, baudrate=9600, tx=None, rx=None, rxbuf=256, timeout=0):
        if uart_id not in (0, 1):
            raise ValueError("UART(%d) doesn't exist" % uart_id)
        FakeStream.__init__(self)
        self.args = (uart_id, baudrate, tx, rx, rxbuf, timeout)

    def any(self):
        return self.pending()


class FakeBusioUART(FakeStream):
    def __init__(self, tx, rx, baudrate=9600, bits=8, parity=None, stop=1, timeout=1, receiver_buffer_size=64):
        # CircuitPython: "timeout must be 0.0-100.0" (seconds, a float)
        if not isinstance(timeout, (int, float)) or timeout < 0 or timeout > 100:
            raise ValueError("timeout must be 0.0-100.0")
        FakeStream.__init__(self)
        self.args = (tx, rx, baudrate, timeout, receiver_buffer_size)

    @property
    def in_waiting(self):
        return self.pending()

    # CircuitPython: "Disallow optional length argument for .readinto()"; write takes the buffer only
    def readinto(self, buf):
        return FakeStream.readinto(self, buf, len(buf))

    def write(self, buf):
        return FakeStream.write(self, buf, len(buf))


class FakeUsbData(FakeStream):
    def __init__(self):
        FakeStream.__init__(self)
        self.timeout = 1.0

    @property
    def in_waiting(self):
        return self.pending()

    def readinto(self, buf):
        return FakeStream.readinto(self, buf, len(buf)) or 0  # usb_cdc returns 0, not None

    def write(self, buf):
        return FakeStream.write(self, buf, len(buf))


def _install(**mods):
    saved = {}
    for name in _FAKES:
        saved[name] = sys.modules.get(name)
        if name in sys.modules:
            del sys.modules[name]
    for name in mods:
        sys.modules[name] = mods[name]
    return saved


def _restore(saved):
    for name in _FAKES:
        if name in sys.modules:
            del sys.modules[name]
        if saved[name] is not None:
            sys.modules[name] = saved[name]


def _machine(with_uart=True):
    m = _Module()
    m.Pin = FakePin
    if with_uart:
        m.UART = FakeMachineUART
    return m


def _board(names):
    b = _Module()
    for n in names:
        setattr(b, n, FakePin(n))
    return b


def _busio():
    m = _Module()
    m.UART = FakeBusioUART
    return m


def _profile(name="rp2040_pico"):
    with open("boards/%s.json" % name) as f:
        return profile.validate(json.loads(f.read()), name)


def _all_bytes():
    data = bytearray(256)
    for i in range(256):
        data[i] = i
    return data


class _Loop:
    """State for the locked hot loop (run_locked passes one argument; nothing is captured)."""

    def __init__(self, link, fake, size, n):
        self.link = link
        self.fake = fake
        self.buf = bytearray(size)
        self.n = n
        self.got = 0
        self.empty = -1


def _echo_loop(s):
    # Read everything pending in chunks of up to 7 bytes, echo each byte + 1, then read once more
    # with nothing pending: all of it must run with the heap locked.
    buf = s.buf
    while True:
        n = s.link.readinto(buf, s.n)
        if n == 0:
            break
        for i in range(n):
            buf[i] = (buf[i] + 1) & 0xFF
        s.link.write(buf, n)
        s.got += n
    s.empty = s.link.readinto(buf)
    return s.got


def _check_echo(link, fake, locked=True, size=32, n=7):
    # MachineUART and PtyUART: reads of n < len(buf) allocate nothing. busio/usb_cdc take no length
    # argument: allocation-free with whole-buffer reads and writes (n=None); n < len(buf) works, unlocked.
    fake.feed(_all_bytes())
    s = _Loop(link, fake, size, n)
    if locked:
        testkit.run_locked(_echo_loop, s)
    else:
        _echo_loop(s)
    assert s.got == 256, s.got
    assert s.empty == 0 and s.empty is not None
    for i in range(256):
        assert fake.tx[i] == (i + 1) & 0xFF, (i, fake.tx[i])
    assert fake.tx_len == 256


# ---------------------------------------------------------------- machine.UART (MicroPython)

def test_machine_uart_gets_profile_pins_baud_rxbuf():
    saved = _install(machine=_machine())
    try:
        link = uart.MachineUART(0, 115200, 0, 1, 1024)
        uid, baud, tx, rx, rxbuf, timeout = link._u.args
        assert (uid, baud, rxbuf, timeout) == (0, 115200, 1024, 0)
        assert tx.num == 0 and rx.num == 1
        nopins = uart.MachineUART(1, 921600, -1, -1, 256)
        assert nopins._u.args[2] is None and nopins._u.args[3] is None  # port's default pins
        link.close()
        assert link._u.closed
    finally:
        _restore(saved)


def test_machine_uart_none_on_timeout_becomes_zero():
    saved = _install(machine=_machine())
    try:
        link = uart.MachineUART(0, 115200, 0, 1, 1024)
        buf = bytearray(8)
        assert link._u.readinto(buf) is None  # the fake is as unhelpful as the real driver
        got = link.readinto(buf)
        assert got == 0 and got is not None
        assert link.any() == 0
        link._u.feed(b"abc")
        assert link.any() == 3
        assert link.readinto(buf, 2) == 2 and buf[:2] == b"ab"
        assert link.readinto(buf) == 1 and buf[0] == ord("c")
        assert link.readinto(buf) == 0
    finally:
        _restore(saved)


def test_machine_uart_all_byte_values_without_allocating():
    saved = _install(machine=_machine())
    try:
        link = uart.MachineUART(0, 115200, 0, 1, 1024)
        _check_echo(link, link._u)
    finally:
        _restore(saved)


def test_machine_uart_errors_are_clear():
    saved = _install(machine=_machine(with_uart=False))
    try:
        e = testkit.raises(uart.HalError, uart.MachineUART, 0, 115200, 0, 1, 1024)
        assert "no UART" in str(e) and "PtyUART" in str(e), str(e)
    finally:
        _restore(saved)
    saved = _install(machine=_machine())
    try:
        e = testkit.raises(uart.HalError, uart.MachineUART, 5, 115200, 0, 1, 1024)
        assert "machine.UART(5" in str(e) and "doesn't exist" in str(e), str(e)
        link = uart.MachineUART(0, 115200, 0, 1, 1024)
        buf = bytearray(8)
        e = testkit.raises(uart.HalError, link.readinto, buf, 9)
        assert "n=9" in str(e) and "len(buf)=8" in str(e), str(e)
        testkit.raises(uart.HalError, link.write, buf, -1)
        assert isinstance(e, ValueError)
    finally:
        _restore(saved)


# ---------------------------------------------------------------- busio.UART (CircuitPython)

def test_busio_timeout_is_converted_to_seconds():
    saved = _install(busio=_busio(), board=_board(("GP0", "GP1")))
    try:
        link = uart_cp.BusioUART(0, 1, 115200, 1024, timeout_ms=2000)  # 2000 passed as-is would be refused
        tx, rx, baud, timeout, rxbuf = link._u.args
        assert tx.num == "GP0" and rx.num == "GP1"
        assert baud == 115200 and rxbuf == 1024
        assert abs(timeout - 2.0) < 1e-6, timeout
        link = uart_cp.BusioUART(0, 1, 115200, 1024, timeout_ms=50)
        assert abs(link._u.args[3] - 0.05) < 1e-6
        assert link._u.args[3] >= 0 and link._u.args[3] <= 100
        testkit.raises(ValueError, FakeBusioUART, tx, rx, 115200, 8, None, 1, 2000)  # the fake checks
        e = testkit.raises(uart.HalError, uart_cp.BusioUART, 0, 1, 115200, 1024, 200000)
        assert "100 s" in str(e), str(e)
    finally:
        _restore(saved)


def test_busio_none_becomes_zero_and_bytes_pass():
    saved = _install(busio=_busio(), board=_board(("GP0", "GP1")))
    try:
        link = uart_cp.BusioUART(0, 1, 115200, 1024)
        buf = bytearray(4)
        assert link._u.readinto(buf) is None
        got = link.readinto(buf)
        assert got == 0 and got is not None
        link._u.feed(b"xy")
        assert link.any() == 2
        link2 = uart_cp.BusioUART(0, 1, 115200, 1024)
        _check_echo(link2, link2._u, True, 8, None)  # 256 = 32 whole 8-byte writes
        link3 = uart_cp.BusioUART(0, 1, 115200, 1024)
        _check_echo(link3, link3._u, False, 32, 7)
        testkit.raises(TypeError, link3._u.readinto, buf, 2)  # the fake refuses a length, as busio does
        e = testkit.raises(uart.HalError, link3.readinto, buf, 5)
        assert "n=5" in str(e), str(e)
        link2.close()
        assert link2._u.closed
    finally:
        _restore(saved)


def test_busio_pins_by_board_name_or_chip_name():
    mc = _Module()
    mc.pin = _board(("GPIO17", "GPIO18"))
    saved = _install(busio=_busio(), board=_board(("IO5",)), microcontroller=mc)
    try:
        link = uart_cp.BusioUART(17, 18, 115200, 2048)
        assert link._u.args[0].num == "GPIO17" and link._u.args[1].num == "GPIO18"
        link = uart_cp.BusioUART(5, 18, 115200, 2048)
        assert link._u.args[0].num == "IO5"
        e = testkit.raises(uart.HalError, uart_cp.BusioUART, 40, 18, 115200, 2048)
        assert "GP40" in str(e) and "uart.tx" in str(e), str(e)
    finally:
        _restore(saved)


# ---------------------------------------------------------------- usb_cdc.data (CircuitPython)

def test_usb_cdc_data_needs_boot_py_then_works():
    cdc = _Module()
    cdc.data = None
    saved = _install(usb_cdc=cdc)
    try:
        e = testkit.raises(uart.HalError, uart_cp.UsbCdcData)
        assert "usb_cdc.enable(console=True, data=True)" in str(e) and "boot.py" in str(e), str(e)
        cdc.data = FakeUsbData()
        link = uart_cp.UsbCdcData(timeout_ms=250)
        assert abs(cdc.data.timeout - 0.25) < 1e-6
        buf = bytearray(4)
        got = link.readinto(buf)
        assert got == 0 and got is not None
        _check_echo(link, cdc.data, True, 8, None)
        link.close()
        assert not cdc.data.closed  # the USB channel is not ours to release
    finally:
        _restore(saved)
    saved = _install()  # no fake: neither CPython nor the unix port has usb_cdc
    try:
        e = testkit.raises(uart.HalError, uart_cp.UsbCdcData)
        assert "no usb_cdc" in str(e), str(e)
    finally:
        _restore(saved)


# ---------------------------------------------------------------- PtyUART bad input

def test_pty_uart_bad_paths_are_clear():
    import os

    if testkit.IS_CP:  # no termios in CircuitPython's unix port: the refusal itself must be clear
        e = testkit.raises(uart.HalError, uart.PtyUART, "/dev/null")
        assert "termios" in str(e), str(e)
        testkit.skip("CircuitPython's unix port has no termios: the virtual board's pty link runs on MicroPython's")

    if not os.getenv("EDGETWIN_UART"):
        e = testkit.raises(uart.HalError, uart.PtyUART)
        assert "EDGETWIN_UART is not set" in str(e), str(e)
    e = testkit.raises(uart.HalError, uart.PtyUART, "/nonexistent/edgetwin-uart")
    assert "cannot open" in str(e) and "/nonexistent/edgetwin-uart" in str(e), str(e)
    e = testkit.raises(uart.HalError, uart.PtyUART, "boards/rp2040_pico.json")
    assert "not a tty" in str(e), str(e)


# ---------------------------------------------------------------- boardcfg

def test_choose_adapter_per_interpreter_and_board():
    mp = _profile("rp2040_pico")
    cp = _profile("rp2040_pico_cp")
    esp = _profile("esp32s3_devkitc")
    assert boardcfg.choose(mp, "uart", "micropython", "") == "MachineUART"
    assert boardcfg.choose(esp, "uart", "micropython", "") == "MachineUART"
    assert boardcfg.choose(cp, "uart", "circuitpython", "") == "BusioUART"
    assert boardcfg.choose(cp, "usb_cdc", "circuitpython", "") == "UsbCdcData"
    assert boardcfg.choose(mp, "uart", "micropython", "/dev/pts/9") == "PtyUART"
    cases = (
        (cp, "uart", "micropython", "", "says circuitpython but this interpreter is micropython"),
        (mp, "uart", "circuitpython", "", "says micropython but this interpreter is circuitpython"),
        (cp, "uart", "micropython", "/dev/pts/9", "virtual board runs MicroPython"),
        (mp, "usb_cdc", "micropython", "", "usb_cdc is CircuitPython's"),
        (mp, "usb_cdc", "micropython", "/dev/pts/9", "no usb_cdc port"),
        (mp, "spi", "micropython", "", "not one of uart, usb_cdc"),
        (mp, "uart", "cpython", "", "pyserial"),
    )
    for prof, port, impl, virt, words in cases:
        e = testkit.raises(boardcfg.BoardConfigError, boardcfg.choose, prof, port, impl, virt)
        assert words in str(e), (words, str(e))
        assert isinstance(e, ValueError)


def test_open_link_builds_machine_uart_from_profile():
    saved = _install(machine=_machine())
    try:
        link = boardcfg.open_link(_profile("esp32s3_devkitc"), "uart", impl="micropython", virtual="")
        assert isinstance(link, uart.MachineUART)
        uid, baud, tx, rx, rxbuf, timeout = link._u.args
        assert (uid, baud, tx.num, rx.num, rxbuf) == (1, 115200, 17, 18, 2048)
    finally:
        _restore(saved)
    saved = _install(busio=_busio(), board=_board(("GP0", "GP1")))
    try:
        link = boardcfg.open_link(_profile("rp2040_pico_cp"), impl="circuitpython", virtual="")
        assert isinstance(link, uart_cp.BusioUART) and link._u.args[4] == 1024
    finally:
        _restore(saved)


def test_open_link_bad_profile_is_clear():
    bad = _profile("rp2040_pico")
    bad["uart"]["baud"] = 300
    e = testkit.raises(profile.ProfileError, boardcfg.open_link, bad, "uart", "/board.json", 0, "micropython", "")
    assert "uart.baud" in str(e), str(e)
    e = testkit.raises(profile.ProfileError, boardcfg.open_link, None, "uart", "/nonexistent/board.json")
    assert "/nonexistent/board.json" in str(e), str(e)
    e = testkit.raises(ValueError, boardcfg.load, "tests/shared/test_uart.py")
    assert "not valid JSON" in str(e), str(e)
