# ads1115.py: driver for the TI ADS1115 16-bit I2C ADC, single-shot conversions, allocation-free.
"""The ADS1115 converts one of four inputs at a time with a programmable gain (PGA) and a true 16-bit
result (int16, big-endian; single-ended inputs give 0..32767). Its address is set by wiring its ADDR
pin: GND 0x48, VDD 0x49, SDA 0x4A, SCL 0x4B. It is the better ADC for 4-20 mA loops than the RP2040's
own (about 8.9 effective bits and erratum E11, docs/INPUTS.md).

Single-shot: start() writes the configuration register with OS=1 (start), the input's MUX, the PGA,
single-shot mode and 128 samples/s; the chip converts once (1/128 s, up to 10 % longer on its internal
oscillator: CONVERSION_MS) and powers down; read_raw() then reads the conversion register. The node's
loop (firmware/i2c_sensors.py) starts a conversion in one poll and reads it in a later one, so it never
waits on the bus; read() here waits, for a person at the REPL.

    pga   full scale   LSB          pga   full scale   LSB
    0     +-6.144 V    187.5 uV     3     +-1.024 V    31.25 uV
    1     +-4.096 V    125 uV       4     +-0.512 V    15.625 uV
    2     +-2.048 V    62.5 uV      5     +-0.256 V    7.8125 uV

No input may go above VDD + 0.3 V whatever the PGA says: at 3.3 V a 4-20 mA loop through 150 Ohm
(0.6-3.0 V) wants pga 1.

Use on a breadboard (Raspberry Pi Pico, SDA on GP4 and SCL on GP5, ADDR to GND)::

    from machine import I2C, Pin
    from firmware.ads1115 import ADS1115

    i2c = I2C(0, sda=Pin(4), scl=Pin(5), freq=400000)
    adc = ADS1115(i2c, 0x48)
    raw = adc.read(0, 1)              # AIN0 against GND, +-4.096 V
    print(raw, adc.millivolts(raw, 1), "mV")

On CircuitPython the same lines work with `from firmware.cp_hal import I2C, Pin` (busio.I2C underneath).

start(), busy() and read_raw() allocate nothing on MicroPython; a failed transfer raises the port's
OSError (ETIMEDOUT / EIO / ENODEV).
"""
from shared.compat import const

# registers
CONVERSION = const(0x00)  # the last result, int16
CONFIG = const(0x01)

# configuration register fields
_OS = const(0x8000)  # write: start a conversion; read: 1 when idle
_MUX_SINGLE = const(4)  # MUX 100..111: AIN0..AIN3 against GND
_MODE_SINGLE = const(0x0100)  # power down after one conversion
_DR_128 = const(0x0080)  # 128 samples/s (the power-up rate)
_COMP_OFF = const(0x0003)  # comparator off, ALERT/RDY high impedance

CONVERSION_MS = const(9)  # 1/128 s = 7.8 ms, plus the internal oscillator's 10 % tolerance
FULL_SCALE_MV = (6144, 4096, 2048, 1024, 512, 256)  # by pga


class ADS1115:
    def __init__(self, i2c, address=0x48):
        """i2c: a machine.I2C, a firmware.cp_hal.I2C (CircuitPython), or anything with readfrom_mem_into
        / writeto_mem. Touches no bus."""
        if not 0x48 <= address <= 0x4B:
            raise ValueError("ADS1115 address 0x%02x: it answers at 0x48..0x4B" % address)
        self.i2c = i2c
        self.address = address
        self._buf = bytearray(2)

    def start(self, channel, pga=2):
        """Start one conversion of AIN<channel> (0..3) against GND at gain pga (0..5)."""
        if not 0 <= channel <= 3 or not 0 <= pga <= 5:
            raise ValueError("ADS1115 channel 0..3 and pga 0..5")
        cfg = _OS | ((_MUX_SINGLE + channel) << 12) | (pga << 9) | _MODE_SINGLE | _DR_128 | _COMP_OFF
        b = self._buf
        b[0] = cfg >> 8
        b[1] = cfg & 0xFF
        self.i2c.writeto_mem(self.address, CONFIG, b)

    def busy(self):
        """True while a conversion is running (OS reads 0)."""
        self.i2c.readfrom_mem_into(self.address, CONFIG, self._buf)
        return not self._buf[0] & 0x80

    def read_raw(self):
        """The conversion register: int16 (-32768..32767)."""
        b = self._buf
        self.i2c.readfrom_mem_into(self.address, CONVERSION, b)
        v = (b[0] << 8) | b[1]
        return v - 0x10000 if v & 0x8000 else v

    def read(self, channel, pga=2):
        """Start a conversion, wait for it and return it (blocks ~8 ms: not for the node's loop)."""
        import time

        self.start(channel, pga)
        time.sleep(CONVERSION_MS / 1000)  # not sleep_ms: CircuitPython's time has none
        while self.busy():
            time.sleep(0.001)
        return self.read_raw()

    @staticmethod
    def millivolts(raw, pga=2):
        """raw in mV at gain pga (an int: full scale * raw / 32768)."""
        return raw * FULL_SCALE_MV[pga] // 32768
