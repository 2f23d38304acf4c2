"""Plant I/O on the emulated RP2040 (tools/board/emulator/run.mjs through tools/board/emuboard.py): ADC inputs,
GPIO inputs, pulses and bounces reaching Pin.irq, MCP9600 and ADS1115 on I2C, UART1 with RS-485 driver-enable
timing, all with the real rp2 firmware (`make firmware`, cached).

One board boots for the whole module; the snippets run on one raw REPL, so globals carry from one snippet to
the next within a test. Pins: ADC0 = GP26 (ADC1 GP27, ADC2 GP28); GPIO inputs GP10 (level), GP11 (pulses),
GP12 (bouncing contact); I2C0 on GP4 (SDA) / GP5 (SCL), I2C1 on GP14 / GP15; UART1 TX GP8, RX GP9; RS-485
DE on GP2.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import serial

from tools.board import emuboard

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

DE_PIN = 2
MODBUS_READ = bytes.fromhex("010300000002c40b")  # read holding registers 0-1 of slave 1, CRC included




class RawRepl:
    """MicroPython's raw REPL on the board's USB CDC: one connection for every snippet (no soft reset between
    them, unlike an mpremote process per snippet)."""

    def __init__(self, port: str) -> None:
        self.ser = serial.Serial(port, 115200, timeout=0.05)
        self._buf = bytearray()
        self.ser.write(b"\r\x03\x03")
        time.sleep(0.2)
        self.ser.write(b"\x01")
        self.take(b"raw REPL; CTRL-B to exit\r\n>", 30)

    def take(self, end: bytes, timeout: float = 60) -> bytes:
        """The board's output up to `end` (consumed, not returned)."""
        deadline = time.monotonic() + timeout
        while end not in self._buf:
            assert time.monotonic() < deadline, "board: no %r in %.0f s; got %r" % (end, timeout,
                                                                                   bytes(self._buf[-400:]))
            self._buf += self.ser.read(max(1, self.ser.in_waiting))
        i = self._buf.index(end)
        out = bytes(self._buf[:i])
        del self._buf[:i + len(end)]
        return out

    def start(self, code: str) -> None:
        """Send a snippet; it runs on while the host acts (take() reads what it prints), finish() ends it."""
        self.ser.write(code.encode() + b"\x04")
        self.take(b"OK")

    def finish(self, timeout: float = 60) -> str:
        out = self.take(b"\x04", timeout)
        err = self.take(b"\x04>", timeout)
        assert not err, "board raised:\n" + err.decode(errors="replace")
        return out.decode()

    def run(self, code: str, timeout: float = 60) -> str:
        self.start(code)
        return self.finish(timeout)


@pytest.fixture(scope="module")
def board(image: Path, tmp_path_factory):
    eb = emuboard.EmuBoard("rp2040_pico", image, tmp_path_factory.mktemp("emu_io") / "flash.bin").start()
    yield eb
    eb.stop()


@pytest.fixture(scope="module")
def repl(board: emuboard.EmuBoard):
    r = RawRepl(board.repl_port)
    yield r
    r.ser.close()


def u16(code12: int) -> int:
    """machine.ADC.read_u16() of a 12-bit code on the rp2 port: the code scaled to 16 bits."""
    return code12 << 4 | code12 >> 8


def test_adc_channels_read_the_set_inputs(board: emuboard.EmuBoard, repl: RawRepl) -> None:
    board.set_adc(0, volts=1.65)
    board.set_adc(1, raw=1000)
    board.set_adc(2, volts=0.4)  # 4 mA through a 100 ohm shunt
    a, b, c = map(int, repl.run("from machine import ADC\na0, a1, a2 = ADC(26), ADC(27), ADC(28)\n"
                                "print(a0.read_u16(), a1.read_u16(), a2.read_u16())").split())
    assert abs(a - 32768) <= 3 * 16, a  # half the 3.3 V reference, within 3 LSB of 12 bits
    assert b == u16(1000)
    assert c == u16(round(0.4 / 3.3 * 4096))
    board.set_adc(0, volts=2.0)  # inputs are live: the next conversion sees the new level
    assert int(repl.run("print(a0.read_u16())")) == u16(round(2.0 / 3.3 * 4096))
    board.set_adc(1, volts=5.0)  # beyond the reference: the ADC saturates
    assert int(repl.run("print(a1.read_u16())")) == u16(4095)


def test_gpio_levels_pulses_and_a_bouncing_contact_reach_the_firmware(board: emuboard.EmuBoard,
                                                                     repl: RawRepl) -> None:
    board.set_pin(10, 1)
    assert repl.run("from machine import Pin\np10 = Pin(10, Pin.IN)\nprint(p10.value())").strip() == "1"
    board.set_pin(10, 0)
    assert repl.run("print(p10.value())").strip() == "0"

    # pulse counting: a hard IRQ on rising edges counts every pulse of the train
    board.set_pin(11, 0)
    repl.run("p11 = Pin(11, Pin.IN)\nn11 = [0]\ndef count(_):\n    n11[0] += 1\n"
             "p11.irq(count, Pin.IRQ_RISING, hard=True)\n")
    since = len(board.events)
    board.pulse_pin(11, 40, period_us=500)
    done = board.wait_event("pin_done", since=since)
    assert (done["pin"], done["edges"], done["level"]) == (11, 80, 0)
    assert int(repl.run("print(n11[0])")) == 40
    since = len(board.events)
    board.pulse_pin(11, 7, period_us=2000, width_us=100)  # a second train adds to the count
    assert board.wait_event("pin_done", since=since)["edges"] == 14
    assert int(repl.run("print(n11[0])")) == 47
    since = len(board.events)
    board.pulse_pin(11, 3, period_us=100, width_us=100)  # a bad train: reported, and the board runs on
    assert "width_us" in board.wait_event("error", since=since)["message"]

    # a contact closing (1 -> 0) with bounces: toggles at 0, 300, 450, 700, 900 us, settled at 0 after 1400 us
    board.set_pin(12, 1)
    repl.run("p12 = Pin(12, Pin.IN)\nn12 = [0]\ndef edge(_):\n    n12[0] += 1\n"
             "p12.irq(edge, Pin.IRQ_RISING | Pin.IRQ_FALLING, hard=True)\n")
    since = len(board.events)
    board.bounce_pin(12, [300, 150, 250, 200, 500], final=0)
    done = board.wait_event("pin_done", since=since)
    assert (done["edges"], done["level"]) == (5, 0)
    assert repl.run("print(n12[0], p12.value())").split() == ["5", "0"]
    # ... and opening again with an odd number of toggles: the final level makes the last edge
    since = len(board.events)
    board.bounce_pin(12, [200, 200, 200, 400], final=1)  # 0 -> 1 -> 0 -> 1 -> 0, then settles at 1
    assert board.wait_event("pin_done", since=since)["edges"] == 5
    assert repl.run("print(n12[0], p12.value())").split() == ["10", "1"]


ADS_CODE = """
import time
def ads_single(i2c, addr, mux, pga, dr):
    cfg = 0x8000 | mux << 12 | pga << 9 | 0x100 | dr << 5 | 0x03
    t0 = time.ticks_us()
    i2c.writeto_mem(addr, 1, cfg.to_bytes(2, 'big'))
    busy = i2c.readfrom_mem(addr, 1, 2)[0] >> 7
    while not i2c.readfrom_mem(addr, 1, 2)[0] & 0x80:
        pass
    dt = time.ticks_diff(time.ticks_us(), t0)
    v = int.from_bytes(i2c.readfrom_mem(addr, 0, 2), 'big')
    return busy, dt, v - 65536 if v & 0x8000 else v
"""


def test_i2c_mcp9600_and_ads1115_answer_on_both_controllers(board: emuboard.EmuBoard, repl: RawRepl) -> None:
    board.i2c_device("mcp9600", 0, 0x60, hot_c=85.5, cold_c=-3.25, rev=0x14)
    board.i2c_device("ads1115", 0, 0x48, volts=[1.2345, 0.5, -0.1, 3.0])
    board.i2c_device("ads1115", 1, 0x49, volts=[2.5, 0, 0, 0])
    out = repl.run("from machine import I2C, Pin\n"
                   "i2c = I2C(0, sda=Pin(4), scl=Pin(5), freq=400000)\n"
                   "i2c1 = I2C(1, sda=Pin(14), scl=Pin(15))\n"
                   "print(i2c.scan(), i2c1.scan())\n"
                   "print(i2c.readfrom_mem(0x60, 0x20, 2).hex())\n"
                   "s16 = lambda b: int.from_bytes(b, 'big') - (65536 if b[0] & 0x80 else 0)\n"
                   "print(s16(i2c.readfrom_mem(0x60, 0x00, 2)), s16(i2c.readfrom_mem(0x60, 0x01, 2)),"
                   " s16(i2c.readfrom_mem(0x60, 0x02, 2)))\n"
                   "i2c.writeto_mem(0x60, 0x05, bytes([0x1 << 4 | 0x3]))\n"  # type J, filter 3
                   "print(i2c.readfrom_mem(0x60, 0x05, 1).hex(), i2c.readfrom_mem(0x60, 0x06, 1).hex())\n")
    scans, dev_id, temps, cfgs = out.strip().splitlines()
    assert scans == "[72, 96] [73]"  # i2c.scan() bit-bangs the pins: the line model answers
    assert dev_id == "4014"
    assert temps.split() == [str(round(85.5 / 0.0625)), str(round(88.75 / 0.0625)), str(round(-3.25 / 0.0625))]
    assert cfgs.split() == ["13", "00"]  # the written sensor config reads back; device config untouched

    # ADS1115 single shots: AIN0 at +-2.048 V and 128 SPS, AIN2 (negative) at +-0.256 V, AIN0-AIN1 at 860 SPS
    repl.run(ADS_CODE)
    busy, dt, v = map(int, repl.run("print(*ads_single(i2c, 0x48, 4, 2, 4))").split())
    assert busy == 0  # OS reads 0 while the conversion runs
    assert abs(v - round(1.2345 / 2.048 * 32768)) <= 1, v
    assert 1e6 / 128 <= dt < 1e6 / 128 * 1.25, dt  # 1/DR of board time
    _, _, v = map(int, repl.run("print(*ads_single(i2c, 0x48, 6, 5, 4))").split())
    assert abs(v - round(-0.1 / 0.256 * 32768)) <= 1, v
    _, dt, v = map(int, repl.run("print(*ads_single(i2c, 0x48, 0, 1, 7))").split())
    assert abs(v - round((1.2345 - 0.5) / 4.096 * 32768)) <= 1, v
    assert 1e6 / 860 <= dt < 1e6 / 860 * 2, dt
    _, _, v = map(int, repl.run("print(*ads_single(i2c, 0x48, 7, 2, 7))").split())
    assert v == 32767  # 3.0 V beyond the 2.048 V full scale: clipped
    _, _, v = map(int, repl.run("print(*ads_single(i2c1, 0x49, 4, 1, 7))").split())  # the second controller
    assert abs(v - round(2.5 / 4.096 * 32768)) <= 1, v

    # a device taken off the bus NACKs its address; a NACKed data byte shows in the ACK count
    board.i2c_remove(0, 0x60)
    board.i2c_device("ads1115", 0, 0x48, nack_after=1)
    out = repl.run("try:\n    i2c.readfrom_mem(0x60, 0x00, 2)\n    print('read')\n"
                   "except OSError as e:\n    print('OSError', e.errno)\n"
                   "print(i2c.writeto(0x48, b'\\x02\\x80\\x00'), i2c.scan())\n")
    err, acks = out.strip().splitlines()
    assert err.split()[0] == "OSError" and int(err.split()[1]) in (5, 19), err  # EIO on the rp2 port
    assert acks == "1 [72]"
    board.i2c_device("ads1115", 0, 0x48, nack_after=None)
    assert repl.run("print(i2c.writeto(0x48, b'\\x02\\x80\\x00'))").strip() == "3"


UART1_CODE = """
from machine import UART, Pin
import time
u1 = UART(1, 19200, tx=Pin(8), rx=Pin(9), timeout=0)
msg = bytes(range(32, 80)) + b'\\n'
t0 = time.ticks_us(); u1.write(msg); u1.flush(); dt = time.ticks_diff(time.ticks_us(), t0)
buf = b''
t = time.ticks_ms()
while not buf.endswith(b'!\\n') and time.ticks_diff(time.ticks_ms(), t) < 30000:
    d = u1.read()
    if d: buf += d
    time.sleep_ms(1)
print(dt, buf.hex())
"""


def test_uart1_carries_bytes_both_ways_at_its_baud(board: emuboard.EmuBoard, repl: RawRepl) -> None:
    board.set_de_pin(None)  # no transceiver: every byte crosses
    msg = bytes(range(32, 80)) + b"\n"
    reply = b"\x00\xffslave-reply\x01\x02!\n"
    got = bytearray()
    with serial.Serial(board.uart1_port, 19200, timeout=0.1) as ser:
        def slave_side() -> None:
            t = time.monotonic()
            while not got.endswith(b"\n") and time.monotonic() - t < 60:
                got.extend(ser.read(256))
            ser.write(reply)

        th = threading.Thread(target=slave_side)
        th.start()
        out = repl.run(UART1_CODE, timeout=90)
        th.join()
    dt_us, hexed = out.split()
    assert bytes(got) == msg
    assert bytes.fromhex(hexed) == reply
    expect_us = len(msg) * 10 * 1e6 / 19200  # 8N1: 10 bits a byte
    assert expect_us * 0.97 < int(dt_us) < expect_us * 1.2, (dt_us, expect_us)
    assert board.uart1_bytes == {"to_board": len(reply), "from_board": len(msg)}


DE_CODE = """
from machine import UART, Pin
import time
de = Pin(%d, Pin.OUT, value=0)
u1 = UART(1, 19200, bits=8, parity=%s, stop=1, tx=Pin(8), rx=Pin(9), timeout=0)
def send(frame, wait=True):
    de.value(1)
    u1.write(frame)
    if wait:
        u1.flush()  # returns once the last stop bit has left (TXFE and not BUSY)
    de.value(0)
"""


def _de_transaction(board: emuboard.EmuBoard, repl: RawRepl, ser: serial.Serial, parity: str,
                    wait: bool = True) -> tuple[dict, bytes]:
    since = len(board.de_events)
    repl.run(DE_CODE % (DE_PIN, parity) + "send(%r, %s)\n" % (MODBUS_READ, wait))
    t = time.monotonic()
    while len(board.de_events) == since and time.monotonic() - t < 30:
        time.sleep(0.01)
    ev = board.de_events[since]
    got = bytearray()
    t = time.monotonic()
    while len(got) < ev["bytes"] and time.monotonic() - t < 10:
        got.extend(ser.read(64))
    got.extend(ser.read(64))  # nothing more may come
    return ev, bytes(got)


@pytest.mark.parametrize("parity, bits", [("None", 10), ("0", 11)])  # 8N1, 8E1
def test_rs485_driver_enable_spans_the_frame_and_is_reported(board: emuboard.EmuBoard, repl: RawRepl,
                                                            parity: str, bits: int) -> None:
    board.set_de_pin(DE_PIN)
    char_ns = bits * 1e9 / 19200
    with serial.Serial(board.uart1_port, 19200, timeout=0.05) as ser:
        ser.reset_input_buffer()
        ev, got = _de_transaction(board, repl, ser, parity)
        assert got == MODBUS_READ
        assert ev["bits"] == bits and abs(ev["char_ns"] - char_ns) < 2
        assert (ev["bytes"], ev["tx_cut"], ev["rx_dropped"]) == (8, 0, 0)
        assert ev["de_high_ns"] <= ev["first_start_ns"]
        assert ev["last_stop_end_ns"] <= ev["de_low_ns"] <= ev["last_stop_end_ns"] + 2 * char_ns, ev
        # the 8 bytes leave back to back from the FIFO: 8 characters of `bits` bit times
        assert abs(ev["last_stop_end_ns"] - ev["first_start_ns"] - 8 * char_ns) < 8 * 2, ev
        print("%s: DE high %.0f us before the first start bit, low %.0f us after the last stop bit (a char is %.0f us)"
              % ("8N1" if bits == 10 else "8E1", (ev["first_start_ns"] - ev["de_high_ns"]) / 1e3,
                 (ev["de_low_ns"] - ev["last_stop_end_ns"]) / 1e3, char_ns / 1e3))

        # a firmware that drops DE right after write() (no flush) cuts the frame: the event shows it
        ev, got = _de_transaction(board, repl, ser, parity, wait=False)
        assert ev["tx_cut"] > 0 and ev["bytes"] < 8, ev
        assert len(got) == ev["bytes"] < len(MODBUS_READ)


def test_rs485_bytes_from_the_bus_while_de_is_high_are_dropped(board: emuboard.EmuBoard, repl: RawRepl) -> None:
    board.set_de_pin(DE_PIN)
    since = len(board.de_events)
    with serial.Serial(board.uart1_port, 19200, timeout=0.05) as ser:
        repl.start(DE_CODE % (DE_PIN, "None") + "import sys\nu1.read()\n"
                   "de.value(1)\nprint('DE-HIGH')\nsys.stdin.read(1)\ntime.sleep_ms(20)\nde.value(0)\n"
                   "print('DE-LOW')\nsys.stdin.read(1)\ntime.sleep_ms(20)\nprint(u1.read())\n")
        repl.take(b"DE-HIGH")
        ser.write(b"early")  # the transceiver drives the bus: its receiver is off
        ser.flush()
        time.sleep(0.3)
        repl.ser.write(b"g")
        repl.take(b"DE-LOW")
        ser.write(b"late")
        ser.flush()
        time.sleep(0.3)
        repl.ser.write(b"g")
        out = repl.finish()
    assert out.strip() == "b'late'"
    ev = board.de_events[since]
    assert (ev["rx_dropped"], ev["bytes"]) == (5, 0)
    stats = board.wait_event("stats", since=len(board.events))  # the runner's periodic stats count them too
    assert stats["uart1_rx_dropped"] >= 5
    board.set_de_pin(None)


def test_the_plant_stays_wired_across_a_restart(board: emuboard.EmuBoard, repl: RawRepl) -> None:
    # last in the file: the REPL connection is opened again after the power cycle
    board.set_adc(3, raw=3000)
    board.set_pin(13, 1)
    board.i2c_device("mcp9600", 1, 0x67, hot_c=21.0)
    board.i2c_device("mcp9600", 1, 0x67, cold_c=19.5)  # an update keeps the earlier values
    repl.ser.close()
    board.restart()
    again = RawRepl(board.repl_port)
    try:
        out = again.run("from machine import ADC, I2C, Pin\ni2c1 = I2C(1, sda=Pin(14), scl=Pin(15))\n"
                        "print(ADC(29).read_u16(), Pin(13, Pin.IN).value(), i2c1.scan(),"
                        " i2c1.readfrom_mem(0x67, 0, 2).hex(), i2c1.readfrom_mem(0x67, 2, 2).hex())")
    finally:
        again.ser.close()
    assert board.boots == 2
    assert out.split() == [str(u16(3000)), "1", "[73,", "103]", "%04x" % round(21.0 / 0.0625),
                           "%04x" % round(19.5 / 0.0625)]
