# readings.py: the latest value and quality of every signal and contact of a described plant; fixed memory.
"""What the node's sources (Modbus units, ADC channels, contacts, pulse counters, I2C sensors) write and
its plant engine (shared/plant_engine.py) reads. Signals and contacts are numbered as in the compiled
plant description (docs/PLANT.md, "The compiled form"): signal s, contact c.

A signal's value is an int in its internal unit, 10**-(decimals + 1) of its engineering unit (a signal
shown with one decimal is kept in hundredths), so nothing on the board needs a float. Each reading is
either good (`why[s] == 0`) or BAD with a reason code (WHY, below) and a detail byte (a Modbus exception
code, an I2C errno). `fresh[s]` is set by the source when a reading arrived (good or bad) and cleared by
the engine when it has taken it; `at[s]` is the tick (ms, shared/compat) it arrived at.

The sources and the engine run in the same thread (the main loop, or the model's step hook between its
kernels: firmware/inputs.py), so there is no lock; every method is allocation-free.
"""
from array import array

from shared.compat import const

# why a reading is BAD (0: good); the words are the `why=` of a BAD alarm line (docs/PLANT.md)
GOOD = const(0)
TIMEOUT = const(1)  # a Modbus unit did not answer in its timeout
EXCEPTION = const(2)  # a Modbus exception response (detail: the exception code)
FRAME = const(3)  # a garbled answer: bad CRC, wrong unit, function or length
I2C = const(4)  # an I2C transfer failed (detail: errno)
LOOP_LOW = const(5)  # a 4-20 mA loop under 3.6 mA (NAMUR NE 43: broken wire)
LOOP_HIGH = const(6)  # a 4-20 mA loop over 21 mA (NAMUR NE 43: short circuit / transmitter fault)
RANGE = const(7)  # a value outside the signal's declared range (or too large for the board's integers)
SENSOR = const(8)  # the sensor itself reports a fault (e.g. an open thermocouple)
NONE_YET = const(9)  # no reading since boot
WHY = (b"", b"timeout", b"exception", b"frame", b"i2c", b"loop_low", b"loop_high", b"range", b"sensor", b"none")

OVER = const(-0x40000000)  # a scaled value that does not fit the board's small ints: a RANGE reading


class Readings:
    def __init__(self, n_signals, n_contacts):
        ns = n_signals if n_signals > 0 else 1
        nc = n_contacts if n_contacts > 0 else 1
        self.n_signals = n_signals
        self.n_contacts = n_contacts
        self.value = array("i", bytearray(4 * ns))
        self.why = bytearray(b"\x09" * ns)  # NONE_YET
        self.detail = bytearray(ns)
        self.fresh = bytearray(ns)
        self.at = array("i", bytearray(4 * ns))
        self.closed = bytearray(nc)  # 1: the contact is closed (its active level, after debouncing)
        self.cwhy = bytearray(b"\x09" * nc)
        self.cfresh = bytearray(nc)
        self.cat = array("i", bytearray(4 * nc))

    def put(self, s, v, now):
        """A good reading of signal s (internal units); OVER is taken as a RANGE reading."""
        if v == OVER:
            self.bad(s, RANGE, 0, now)
            return
        self.value[s] = v
        self.why[s] = GOOD
        self.detail[s] = 0
        self.fresh[s] = 1
        self.at[s] = now

    def bad(self, s, why, detail, now):
        self.why[s] = why
        self.detail[s] = detail & 0xFF
        self.fresh[s] = 1
        self.at[s] = now

    def put_contact(self, c, closed, now):
        self.closed[c] = 1 if closed else 0
        self.cwhy[c] = GOOD
        self.cfresh[c] = 1
        self.cat[c] = now

    def bad_contact(self, c, why, now):
        self.cwhy[c] = why
        self.cfresh[c] = 1
        self.cat[c] = now
