# mcp9600.py: driver for the Microchip MCP9600 thermocouple-to-temperature converter (I2C), allocation-free.
"""The MCP9600 measures a thermocouple's EMF, compensates the cold junction itself and gives the hot
junction's temperature as int16 in 1/16 C (0.0625 C per LSB, two's complement, big-endian). Breakouts
(Adafruit 4101, SparkFun, Seeed) carry it with pull-ups on SDA/SCL. Its address is 0x60..0x67, set by
the ADDR pin's voltage divider (0x60 with ADDR to GND, 0x67 to VDD: the breakout's jumpers). The
MCP9601 (device id 0x41) is the same chip with open/short detection added; this driver reads both.

It holds SCL low (clock stretching) while it prepares an answer: the RP2040's and ESP32-S3's I2C
controllers wait for it; keep the bus at 100 kHz. After power-up it converts continuously at 18 bits,
one conversion every ~320 ms (CONVERSION_MS), so a reading right after configure() is still of the old
type: wait one conversion.

Use on a breadboard (Raspberry Pi Pico, breakout SDA on GP4 and SCL on GP5, ADDR to GND)::

    from machine import I2C, Pin
    import time
    from firmware.mcp9600 import MCP9600, TYPE_K

    i2c = I2C(0, sda=Pin(4), scl=Pin(5), freq=100000)
    print([hex(a) for a in i2c.scan()])   # ['0x60']
    tc = MCP9600(i2c, 0x60)
    print(hex(tc.device_id()))            # 0x40
    tc.configure(TYPE_K)
    time.sleep_ms(400)
    while True:
        print(tc.celsius(), "C")          # e.g. 23.4375 C
        time.sleep(1)

On CircuitPython: `from firmware.cp_hal import I2C, Pin` instead (busio.I2C underneath), and
time.sleep(0.4) for time.sleep_ms(400).

Every method but celsius() allocates nothing on MicroPython (the node's loop uses read_raw(); see
firmware/i2c_sensors.py); a failed transfer raises the port's OSError (ETIMEDOUT / EIO / ENODEV).
"""
from shared.compat import const

# registers
HOT_JUNCTION = const(0x00)  # T_H: the thermocouple's temperature, int16, 1/16 C
JUNCTION_DELTA = const(0x01)  # T_H - T_C, int16, 1/16 C
COLD_JUNCTION = const(0x02)  # T_C: the chip's own (cold junction) temperature
STATUS = const(0x04)
SENSOR_CONFIG = const(0x05)  # bits 6..4 thermocouple type, bits 2..0 filter coefficient
DEVICE_CONFIG = const(0x06)  # resolution, burst, shutdown (power-up default: continuous, 18 bits)
DEVICE_ID = const(0x20)  # two bytes: the device id, then the silicon revision

ID_MCP9600 = const(0x40)
ID_MCP9601 = const(0x41)
CONVERSION_MS = const(320)  # one 18-bit conversion (the power-up resolution)

# thermocouple types: the SENSOR_CONFIG codes, in the datasheet's order
TYPE_K = const(0)
TYPE_J = const(1)
TYPE_T = const(2)
TYPE_N = const(3)
TYPE_S = const(4)
TYPE_E = const(5)
TYPE_B = const(6)
TYPE_R = const(7)


class MCP9600:
    def __init__(self, i2c, address=0x60):
        """i2c: a machine.I2C, a firmware.cp_hal.I2C (CircuitPython), or anything with readfrom_mem_into
        / writeto_mem. Touches no bus."""
        if not 0x60 <= address <= 0x67:
            raise ValueError("MCP9600 address 0x%02x: it answers at 0x60..0x67" % address)
        self.i2c = i2c
        self.address = address
        self._one = bytearray(1)
        self._two = bytearray(2)

    def device_id(self):
        """The device id byte: 0x40 for an MCP9600, 0x41 for an MCP9601. revision() is the byte after it."""
        self.i2c.readfrom_mem_into(self.address, DEVICE_ID, self._two)
        return self._two[0]

    def revision(self):
        """The silicon revision read by the last device_id()."""
        return self._two[1]

    def configure(self, tc_type=TYPE_K, filter_coef=0):
        """Set the thermocouple type (TYPE_K..TYPE_R) and the digital filter (0 off .. 7 strongest)."""
        if not 0 <= tc_type <= 7 or not 0 <= filter_coef <= 7:
            raise ValueError("thermocouple type 0..7 (K J T N S E B R), filter 0..7")
        self._one[0] = (tc_type << 4) | filter_coef
        self.i2c.writeto_mem(self.address, SENSOR_CONFIG, self._one)

    def read_raw(self, register=HOT_JUNCTION):
        """A temperature register as int16 in 1/16 C (the hot junction unless told)."""
        b = self._two
        self.i2c.readfrom_mem_into(self.address, register, b)
        v = (b[0] << 8) | b[1]
        return v - 0x10000 if v & 0x8000 else v

    def celsius(self):
        """The hot junction in C, as a float: for a person at the REPL (a float allocates)."""
        return self.read_raw() / 16
