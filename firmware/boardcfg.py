# boardcfg.py: read /board.json and open the link port that fits this interpreter and board.
"""    from firmware import boardcfg
    link = boardcfg.open_link()          # adapter from firmware.uart, per /board.json
    link = boardcfg.open_link(port="usb_cdc")   # CircuitPython: the USB data channel instead

Which adapter (see firmware/uart.py):
- $EDGETWIN_UART set (the virtual board, tools/board/vboard.py): PtyUART;
- MicroPython with machine.UART: MachineUART(uart.id, uart.baud, uart.tx, uart.rx, uart.rxbuf);
- CircuitPython with busio: BusioUART(uart.tx, uart.rx, uart.baud, uart.rxbuf); port="usb_cdc": UsbCdcData.
A profile written for the other interpreter is refused: its heap and KV sizes would be wrong here.

open_bus() opens an RS-485 bus of the plant description the same way, and hal() names the hardware
classes the input sources default to: machine's on MicroPython, firmware/cp_hal.py's on CircuitPython.
"""
import sys

from firmware import uart
from shared import profile

PROFILE_PATH = "/board.json"
PORTS = ("uart", "usb_cdc")


class BoardConfigError(ValueError):
    """The profile does not fit this interpreter/board, or no link port is available; says what to do."""


def load(path=PROFILE_PATH):
    """The validated board profile. A missing, unreadable or bad file (not JSON, not UTF-8, a missing,
    unknown, mistyped or out-of-range field, a name or model that is a path) raises an error naming
    the file and the field: shared.profile.ProfileError, a ValueError (the checks `edgetwin` runs on
    a profile before it deploys one)."""
    return profile.load(path)


def interpreter():
    """'micropython', 'circuitpython' or 'cpython'."""
    return sys.implementation.name


def _has_module(name):
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def hal(name):
    """The class `name` ("Pin", "ADC", "I2C") the input sources build their hardware with by default:
    machine's where the interpreter has a machine module (MicroPython), else firmware/cp_hal.py's
    adapter of the same face (CircuitPython, which has none). Asked when a source is built, so tests
    can put fakes in sys.modules first."""
    if _has_module("machine"):
        import machine

        return getattr(machine, name)
    from firmware import cp_hal

    return getattr(cp_hal, name)


def _virtual_uart():
    import os

    try:
        return os.getenv("EDGETWIN_UART") or None
    except AttributeError:  # the rp2 and esp32 ports' os has no getenv: a real board, not a virtual one
        return None


def choose(prof, port="uart", impl=None, virtual=None):
    """Name of the uart adapter class for `prof` here: 'PtyUART', 'MachineUART', 'BusioUART' or
    'UsbCdcData'. `impl` and `virtual` default to this interpreter and $EDGETWIN_UART."""
    if port not in PORTS:
        raise BoardConfigError("port %r is not one of %s" % (port, ", ".join(PORTS)))
    impl = impl or interpreter()
    if virtual is None:
        virtual = _virtual_uart()
    flavour = prof["flavour"]
    if virtual:
        if port != "uart":
            raise BoardConfigError("the virtual board has no %s port; its link is the UART pty" % port)
        if flavour != "micropython" or impl not in ("micropython", "cpython"):
            raise BoardConfigError("profile %s says %s but the virtual board runs MicroPython: pick a "
                                   "MicroPython profile for it" % (prof["name"], flavour))
        return "PtyUART"
    if impl == "cpython":
        raise BoardConfigError("no link port under CPython without EDGETWIN_UART: the gateway side uses "
                               "pyserial (host/), the node runs on a board or the virtual board")
    if impl != flavour:
        raise BoardConfigError("profile %s says %s but this interpreter is %s: copy the matching "
                               "boards/*.json to /board.json" % (prof["name"], flavour, impl))
    if flavour == "micropython":
        if port != "uart":
            raise BoardConfigError("usb_cdc is CircuitPython's; on MicroPython the link is a machine.UART")
        return "MachineUART"
    return "BusioUART" if port == "uart" else "UsbCdcData"


def open_bus(prof, bus, impl=None):
    """(uart adapter, driver-enable pin or None) for an RS-485 bus of the plant description (its compiled
    entry: [uart, tx, rx, de, baud, parity, stop, timeout_ms, gap_us]). On the virtual board the bus is a
    pty whose path is in $EDGETWIN_BUS<uart> (`edgetwin vboard --bus <uart>`); on MicroPython a
    machine.UART with a small receive ring (a Modbus answer is at most 256 bytes) and the DE pin an
    output driven low (receiving); on CircuitPython a BusioUART on the same pins (busio picks the UART
    by its pins) and the DE pin a digitalio output (firmware/cp_hal.py Pin). busio cannot say when the
    last stop bit has left, so BusioUART has no flush() and the Modbus master holds DE for the request's
    air time plus one character (firmware/modbus.py)."""
    uid, tx, rx, de, baud = bus[0], bus[1], bus[2], bus[3], bus[4]
    impl = impl or interpreter()
    if _virtual_uart():
        import os

        path = os.getenv("EDGETWIN_BUS%d" % uid)
        if not path:
            raise BoardConfigError("the virtual board has no UART%d for the RS-485 bus: start it with "
                                   "`edgetwin vboard --bus %d`" % (uid, uid))
        return uart.PtyUART(path), None
    if uid == prof["uart"]["id"]:
        raise BoardConfigError("UART%d is the link to the gateway: the RS-485 bus needs another" % uid)
    if impl == "circuitpython":
        return _busio_bus(bus)
    if impl != "micropython" or not _has_module("machine"):
        raise BoardConfigError("an RS-485 bus needs MicroPython's machine.UART or CircuitPython's busio.UART "
                               "(this is %s)" % impl)
    import machine

    u = uart.MachineUART(uid, baud, tx, rx, 512, 0, bus[5], bus[6])
    pin = None
    if de >= 0:
        pin = machine.Pin(de, machine.Pin.OUT, value=0)
    return u, pin


def _busio_bus(bus):
    if not _has_module("busio"):
        raise BoardConfigError("no busio module on this CircuitPython build: the RS-485 bus needs busio.UART")
    tx, rx, de = bus[1], bus[2], bus[3]
    from firmware import uart_cp

    u = uart_cp.BusioUART(tx, rx, bus[4], 512, 0, bus[5], bus[6], "the RS-485 bus's tx/rx in the plant description")
    pin = None
    if de >= 0:
        from firmware import cp_hal

        try:
            pin = cp_hal.Pin(de, cp_hal.Pin.OUT, value=0)
        except (ValueError, RuntimeError) as e:  # no such pin, or one already in use
            u.close()
            raise BoardConfigError("the RS-485 bus's DE pin GPIO%d: %s" % (de, e))
    return u, pin


def open_link(prof=None, port="uart", path=PROFILE_PATH, timeout_ms=0, impl=None, virtual=None):
    """Open and return the link adapter for this board (profile read from `path` unless given).
    `impl`/`virtual` override the detected interpreter and $EDGETWIN_UART (for tests)."""
    if prof is None:
        prof = load(path)
    else:
        profile.validate(prof, "<profile>")
    if virtual is None:
        virtual = _virtual_uart()
    name = choose(prof, port, impl, virtual)
    u = prof["uart"]
    if name == "PtyUART":
        return uart.PtyUART(virtual)
    if name == "MachineUART":
        if not _has_module("machine"):
            raise BoardConfigError("no machine module: this MicroPython port cannot drive a UART")
        return uart.MachineUART(u["id"], u["baud"], u["tx"], u["rx"], u["rxbuf"], timeout_ms)
    from firmware import uart_cp  # CircuitPython's adapters (a MicroPython board never loads them)

    if name == "BusioUART":
        if not _has_module("busio"):
            raise BoardConfigError("no busio module on this CircuitPython build")
        if u["tx"] < 0 or u["rx"] < 0:
            raise BoardConfigError("busio.UART needs explicit pins: set uart.tx and uart.rx in the profile")
        return uart_cp.BusioUART(u["tx"], u["rx"], u["baud"], u["rxbuf"], timeout_ms)
    return uart_cp.UsbCdcData(timeout_ms)
