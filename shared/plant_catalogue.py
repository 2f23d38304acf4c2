# plant_catalogue.py: the simulator's machine catalogue: kinds, signals, units, alarm points, interlocks, words.
"""What the simulated machines are (shared/plant.py simulates them; docs/SIMULATOR.md). Nothing outside the
simulator, its description and its tools reads this module: the node's engine and the gateway learn a
plant from its description (docs/PLANT.md), and the simulator's own description (shared/plant_sim.json,
made from this catalogue by tools/board/simplant.py) is how they learn this one.

Tables are per kind * NCH + channel. Readings are hundredths of the unit; the motor's speed is printed
in whole rpm, every other value in tenths.
"""
from shared.compat import const
from shared.plant_alarms import HI, HIHI, LO, LOLO

PUMP = const(0)
MOTOR = const(1)
COMPRESSOR = const(2)
CONVEYOR = const(3)
KINDS = ("pump", "motor", "compressor", "conveyor")
PREFIXES = ("P", "M", "C", "CV")  # machine n (1..) of kind k is PREFIXES[k]-(100 * (k + 1) + n): P-101, CV-402
MAX_MACHINES = const(16)

# channels
T = const(0)  # a temperature
V = const(1)  # vibration
I = const(2)  # noqa: E741  motor current
P = const(3)  # a pressure
Q = const(4)  # a flow
D = const(5)  # a filter's differential pressure
X = const(6)  # a speed
NCH = const(7)
UNIT = (b"C", b"mm/s", b"A", b"bar", b"m3/h", b"kPa", None)
UNIT_X = (None, b"rpm", None, b"m/s")  # the speed channel's unit by kind
# key in the sample line, alarm tag (None: the kind has no such sensor)
KEY = (b"T", b"V", b"I", b"P", b"Q", b"dP", None,
       b"T", b"V", b"I", None, None, None, b"N",
       b"T", b"V", b"I", b"P", b"Q", b"dP", None,
       b"T", b"V", b"I", None, None, None, b"S")
TAG = (b"bearing_temp", b"vibration", b"motor_current", b"discharge_press", b"flow", b"strainer_dp", None,
       b"winding_temp", b"vibration", b"motor_current", None, None, None, b"speed",
       b"discharge_temp", b"vibration", b"motor_current", b"receiver_press", b"air_flow", b"intake_filter_dp", None,
       b"gearbox_temp", b"vibration", b"motor_current", None, None, None, b"belt_speed")

# alarm points per kind: (channel, level, limit, deadband, on-delay s, off-delay s, prio 1..4, trip code,
# armed only when running, limit and deadband relative to the nominal in per mille); every channel also
# gets a BAD point (BAD_POINT: reading missing, on after 3 missing samples, off after 60 good ones, prio 1)
ALARMS = (
    ((T, HI, 8000, 200, 10, 10, 2, 0, 0, 0), (T, HIHI, 9500, 200, 3, 3, 4, 1, 0, 0),
     (V, HI, 710, 50, 5, 30, 3, 0, 0, 0), (V, HIHI, 1100, 50, 2, 3, 4, 2, 0, 0),
     (I, HI, 1100, 20, 5, 10, 2, 0, 1, 1), (I, HIHI, 1300, 20, 2, 3, 4, 3, 1, 1),
     (P, HI, 1250, 50, 5, 10, 3, 0, 1, 1), (Q, LO, 300, 30, 10, 10, 2, 0, 1, 1),
     (Q, LOLO, 120, 30, 5, 3, 4, 5, 1, 1),
     (D, HI, 6000, 300, 10, 10, 2, 0, 0, 0), (D, HIHI, 9000, 300, 3, 3, 4, 4, 0, 0)),
    ((T, HI, 12000, 300, 10, 10, 2, 0, 0, 0), (T, HIHI, 14000, 300, 3, 3, 4, 1, 0, 0),
     (V, HI, 710, 50, 5, 30, 3, 0, 0, 0), (V, HIHI, 1100, 50, 2, 3, 4, 2, 0, 0),
     (I, HI, 1100, 20, 5, 10, 2, 0, 1, 1), (I, HIHI, 1250, 20, 2, 3, 4, 3, 1, 1)),
    ((T, HI, 10500, 200, 10, 10, 2, 0, 0, 0), (T, HIHI, 11500, 200, 3, 3, 4, 1, 0, 0),
     (V, HI, 710, 50, 5, 30, 3, 0, 0, 0), (V, HIHI, 1100, 50, 2, 3, 4, 2, 0, 0),
     (I, HI, 1100, 20, 5, 10, 2, 0, 1, 1), (I, HIHI, 1300, 20, 2, 3, 4, 3, 1, 1),
     (P, LO, 550, 20, 30, 10, 2, 0, 1, 0), (P, HIHI, 950, 20, 2, 3, 4, 6, 0, 0),
     # the intake filter's dP falls whenever the compressor unloads: hold the alarm through an unload
     (D, HI, 600, 30, 10, 180, 2, 0, 0, 0), (D, HIHI, 900, 30, 3, 3, 4, 4, 0, 0)),
    ((T, HI, 8500, 200, 10, 10, 2, 0, 0, 0), (T, HIHI, 10000, 200, 3, 3, 4, 1, 0, 0),
     (V, HI, 710, 50, 5, 30, 3, 0, 0, 0), (V, HIHI, 1100, 50, 2, 3, 4, 2, 0, 0),
     (I, HI, 1150, 20, 5, 10, 2, 0, 1, 1), (I, HIHI, 1350, 20, 2, 3, 4, 3, 1, 1)),
)
BAD_POINT = (0, 0, 3, 60, 1, 0, 0, 0)  # a BAD point after (channel, level): limit, deadband, on, off, prio, ...
MAXP = const(17)  # alarm points per machine (the pump's 11 + 6 BAD)
SETTLE_S = const(20)  # running-only alarms arm this many seconds after RUNNING
TRIPS = (b"", b"HIHI_TEMP", b"HIHI_VIB", b"HIHI_CURR", b"HIHI_DP", b"LOLO_FLOW", b"HIHI_PRESS")  # by trip code

# What operators call the machines and their signals (the simulator description's words, for `ask`).
# A signal's words say what it measures and what shows first on it when the simulated faults develop.
KIND_WORDS = (("pump",), ("motor", "electric motor"), ("compressor", "air compressor"), ("conveyor", "belt conveyor"))
_HOT = ("temperature", "overheating", "running hot", "hot", "heat")
WORDS = {
    b"bearing_temp": ("bearing temperature",) + _HOT,
    b"winding_temp": ("winding temperature",) + _HOT,
    b"discharge_temp": ("discharge temperature",) + _HOT,
    b"gearbox_temp": ("gearbox temperature", "gearbox oil temperature") + _HOT,
    b"vibration": ("vibration", "bearing wear", "worn bearing", "bearing"),
    b"motor_current": ("motor current", "current", "amps", "load"),
    b"discharge_press": ("discharge pressure", "pressure"),
    b"receiver_press": ("receiver pressure", "air pressure", "pressure"),
    b"flow": ("flow", "flow rate"),
    b"air_flow": ("air flow", "flow"),
    b"strainer_dp": ("strainer differential pressure", "strainer", "filter", "clogged filter", "blocked filter"),
    b"intake_filter_dp": ("intake filter differential pressure", "intake filter", "filter", "clogged filter",
                          "blocked filter"),
    b"speed": ("speed", "rpm"),
    b"belt_speed": ("belt speed", "speed"),
}
PUMP_VIBRATION_WORDS = ("cavitation", "cavitating")  # a pump's vibration is also how cavitation shows


def machine_id(kind, n):
    """The id of machine n (1..16) of kind index `kind`: P-101, M-201, C-301, CV-401, P-102 ..."""
    return "%s-%d" % (PREFIXES[kind], 100 * (kind + 1) + n)

# the hash of shared/plant_sim.json (tools/board/simplant.py writes it): the node's PLANT line names it
DESCRIPTION_HASH = "15d713b6ea7e2131"
