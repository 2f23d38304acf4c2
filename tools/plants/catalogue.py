"""The machine kinds of generated plants: each kind's signals, alarm points, interlocks and faults, in metric units.

A signal's `nominal` is the range its running value is drawn from (per machine, by the simulator's seed); its
alarm limits are absolute and sit clear of that range (tests/host/test_training_plants.py checks the margins).
A fault moves signals the way its physics does: each `Effect` starts at a fraction of the fault's progress and
reaches `reach` times the distance from the nominal value to the signal's nearest alarm limit in its direction
(reach 2.5 crosses the first limit at 40 % progress; a shape of 2 accelerates, as bearing wear does). The signal
a fault moves first, far enough to alarm, is its `first`: the signal whose alarm a model should meet first, and
the one the simulator's first alarm comes on (the test runs every fault). A fault's `words` are the causes an
operator names; the generator puts them in the words of the fault's first signal (what `ask` searches by) and,
as cause hints, in the `causes` of every alarm point the fault drives past its limit (an effect reaching 1 or more
in the point's direction): what a note may name as the cause of that point's alarm (tools/bench/note_judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alarm:
    level: str  # HI HIHI LO LOLO
    limit: float  # metric, absolute
    hyst: float = 0.0
    on: int = 0  # on-delay, s
    off: int = 0
    prio: str = "medium"
    running: bool = False  # armed only settle_s after the machine starts
    interlock: str | None = None


@dataclass(frozen=True)
class Signal:
    role: str  # the catalogue's name for it, unique in the kind
    quantity: str  # units.QUANTITIES
    tag: str  # descriptive alarm-line tag
    key: str  # short mnemonic for sample lines
    isa: str  # ISA-5.1 instrument letters (PT, FT, TT, VT ...)
    words: tuple[str, ...]
    nominal: tuple[float, float]  # running value drawn from this range
    span: tuple[float, float]  # the sensor's range (a reading outside it is BAD)
    noise: float
    tau_s: float  # first-order lag toward its target
    alarms: tuple[Alarm, ...] = ()
    idle: float = 0.0  # stopped: this fraction of nominal ...
    idle_abs: float | None = None  # ... or this value
    ambient: bool = False  # ... or the ambient temperature


@dataclass(frozen=True)
class Effect:
    role: str
    sign: int  # +1 up, -1 down
    start: float  # progress at which it starts
    reach: float  # distance at full progress, in units of nominal -> nearest limit in that direction
    shape: float = 1.0
    osc: float = 0.0  # an oscillation at full progress, as a fraction of that distance


@dataclass(frozen=True)
class Fault:
    name: str
    first: str  # the role whose alarm comes first
    effects: tuple[Effect, ...]
    words: tuple[str, ...]  # the cause, as operators say it


@dataclass(frozen=True)
class Kind:
    name: str  # the description's `kind`
    isa: str  # ISA-5.1 equipment letters (P, K, E, TK ...)
    site: str  # what a site calls one ("Boiler", "AHU")
    words: tuple[str, ...]
    services: tuple[str, ...]  # what it serves ("boiler feed"): a machine's words say "boiler feed pump"
    signals: tuple[Signal, ...]
    faults: tuple[Fault, ...]
    settle_s: int = 20

    def signal(self, role: str) -> Signal:
        return next(s for s in self.signals if s.role == role)

    def fault(self, name: str) -> Fault:
        for f in self.faults:
            if f.name == name:
                return f
        raise KeyError("a %s has no fault %s (it has %s)" % (self.name, name, ", ".join(x.name for x in self.faults)))


# ---- building blocks many kinds share ----

def _vib(role: str = "vibration", tag: str = "vibration", words: tuple = ("vibration",), nom=(1.0, 2.5)) -> Signal:
    """ISO 10816 zones: 4.5 mm/s alert, 7.1 mm/s trip."""
    return Signal(role, "vibration", tag, "V", "VT", words, nom, (0, 50), 0.06, 2,
                  (Alarm("HI", 4.5, 0.3, 5, 30, "high"), Alarm("HIHI", 7.1, 0.3, 2, 3, "critical", False, "HIHI_VIB")))


def _temp(role, tag, key, words, nom, hi, hihi, interlock="HIHI_TEMP", tau=180, noise=0.2, span=(-20, 200),
          **kw) -> Signal:
    alarms = [Alarm("HI", hi, 2, 10, 10, "medium")]
    if hihi is not None:
        alarms.append(Alarm("HIHI", hihi, 2, 3, 3, "critical", False, interlock))
    return Signal(role, "temperature", tag, key, "TT", words, nom, span, noise, tau, tuple(alarms),
                  **({"ambient": True} | kw))


def _current(role="current", tag="motor_current", nom=(20, 40), hi=55, hihi=65, words=("motor current", "amps")):
    return Signal(role, "current", tag, "I", "IT", words + ("load",), nom, (0, 400), 0.25, 2,
                  (Alarm("HI", hi, 1, 5, 10, "medium", True),
                   Alarm("HIHI", hihi, 1, 2, 3, "critical", True, "HIHI_CURR")))


def E(role, sign, start, reach, shape=1.0, osc=0.0) -> Effect:  # noqa: N802  (a table row)
    return Effect(role, sign, start, reach, shape, osc)


_BEARING = ("bearing wear", "worn bearing", "bearing failure")

KINDS: tuple[Kind, ...] = (
    Kind("centrifugal pump", "P", "Pump", ("centrifugal pump", "pump"),
         ("boiler feed", "cooling water", "raw water", "condensate", "transfer", "chilled water"),
         (Signal("discharge_press", "pressure", "discharge_press", "Pd", "PT", ("discharge pressure", "pressure"),
                 (3.5, 6.0), (0, 16), 0.02, 2,
                 (Alarm("HI", 8.0, 0.2, 5, 10, "high", True), Alarm("LO", 2.5, 0.1, 5, 10, "medium", True),
                  Alarm("LOLO", 1.5, 0.1, 3, 3, "critical", True, "LOLO_PRESS")), idle=0.1),
          Signal("flow", "flow", "flow", "Q", "FT", ("flow", "flow rate"), (50, 90), (0, 250), 0.5, 3,
                 (Alarm("LO", 25, 2, 10, 10, "medium", True),)),
          _vib(words=("vibration", "pump vibration")),
          _temp("bearing_temp", "bearing_temp", "Tb", ("bearing temperature",), (45, 60), 80, 95),
          _current()),
         (Fault("cavitation", "discharge_press",
                (E("discharge_press", -1, 0, 2.5, osc=0.1), E("flow", -1, 0.1, 0.8, osc=0.1),
                 E("vibration", +1, 0.2, 1.4), E("bearing_temp", +1, 0.5, 0.6)),
                ("cavitation", "cavitating", "low suction pressure", "loss of prime")),
          Fault("bearing_wear", "vibration",
                (E("vibration", +1, 0, 2.5, 2.0), E("bearing_temp", +1, 0.3, 1.3), E("current", +1, 0.5, 0.4)),
                _BEARING))),
    Kind("air compressor", "K", "Compressor", ("air compressor", "compressor"),
         ("instrument air", "plant air", "service air"),
         (Signal("discharge_press", "pressure", "discharge_press", "Pd", "PT", ("discharge pressure", "air pressure"),
                 (6.8, 7.5), (0, 16), 0.02, 5,
                 (Alarm("HIHI", 9.5, 0.2, 2, 3, "critical", False, "HIHI_PRESS"),
                  Alarm("LO", 5.5, 0.2, 20, 10, "medium", True)), idle=0.7),
          _temp("discharge_temp", "discharge_temp", "Td", ("discharge temperature", "air temperature"), (75, 90),
                105, 115, tau=120),
          _current(nom=(70, 90), hi=105, hihi=120),
          _vib(),
          Signal("filter_dp", "dp", "intake_filter_dp", "dPf", "PDT", ("intake filter differential pressure",
                                                                         "intake filter"),
                 (1.5, 3.0), (0, 20), 0.04, 3,
                 (Alarm("HI", 5.0, 0.3, 10, 60, "medium"), Alarm("HIHI", 8.0, 0.3, 3, 3, "critical", False,
                                                                 "HIHI_DP")))),
         (Fault("clogged_filter", "filter_dp",
                (E("filter_dp", +1, 0, 2.5), E("discharge_temp", +1, 0.4, 1.2), E("discharge_press", -1, 0.5, 0.6)),
                ("clogged filter", "blocked intake filter", "dirty filter")),
          Fault("cooler_fouling", "discharge_temp",
                (E("discharge_temp", +1, 0, 2.5), E("current", +1, 0.6, 0.5)),
                ("aftercooler fouling", "cooler fouling", "overheating")),
          Fault("unloader_failure", "discharge_press",
                (E("discharge_press", -1, 0, 2.5), E("current", -1, 0.2, 0.5), E("discharge_temp", +1, 0.5, 0.6)),
                ("unloader valve failure", "air leak", "valve failure")))),
    Kind("induction motor", "M", "Motor", ("electric motor", "motor"),
         ("fan drive", "mill drive", "pump drive", "line shaft"),
         (_current(nom=(35, 60), hi=75, hihi=90),
          _temp("winding_temp", "winding_temp", "Tw", ("winding temperature", "stator temperature"), (60, 85), 120,
                140, tau=240),
          _vib(),
          Signal("speed", "speed", "speed", "N", "ST", ("speed", "rpm"), (1470, 1490), (0, 3600), 1.0, 3,
                 (Alarm("LO", 1400, 5, 10, 10, "medium", True),)),
          _temp("bearing_temp", "bearing_temp", "Tb", ("bearing temperature",), (40, 55), 85, 100, "HIHI_BRG")),
         (Fault("bearing_wear", "vibration",
                (E("vibration", +1, 0, 2.5, 2.0), E("bearing_temp", +1, 0.3, 1.3)), _BEARING),
          Fault("overload", "current",
                (E("current", +1, 0, 2.5), E("winding_temp", +1, 0.2, 1.3), E("speed", -1, 0.3, 0.5)),
                ("overload", "overloaded", "mechanical overload")),
          Fault("cooling_fan_failure", "winding_temp",
                (E("winding_temp", +1, 0, 2.5), E("bearing_temp", +1, 0.5, 0.5)),
                ("cooling fan failure", "blocked cooling", "overheating")))),
    Kind("belt conveyor", "CV", "Conveyor", ("belt conveyor", "conveyor"),
         ("feed", "transfer", "stacker", "reclaim"),
         (_current(tag="drive_current", nom=(12, 25), hi=32, hihi=38,
                   words=("drive current", "motor current", "amps")),
          Signal("belt_speed", "belt_speed", "belt_speed", "S", "ST", ("belt speed", "speed"), (1.8, 2.4), (0, 5),
                 0.008, 3, (Alarm("LO", 1.5, 0.05, 5, 10, "high", True),
                            Alarm("LOLO", 1.0, 0.05, 2, 3, "critical", True, "LOLO_SPEED"))),
          _temp("gearbox_temp", "gearbox_temp", "Tg", ("gearbox temperature", "gearbox oil temperature"), (50, 65),
                85, 100, tau=240),
          _vib(words=("gearbox vibration", "vibration"))),
         (Fault("jam", "current",
                (E("current", +1, 0, 2.5), E("belt_speed", -1, 0.4, 0.8), E("gearbox_temp", +1, 0.4, 0.7)),
                ("jam", "blockage", "overload", "material jam")),
          Fault("belt_slip", "belt_speed",
                (E("belt_speed", -1, 0, 2.5), E("current", -1, 0.3, 0.5)),
                ("belt slip", "slipping belt", "worn lagging")),
          Fault("gearbox_wear", "vibration",
                (E("vibration", +1, 0, 2.5, 2.0), E("gearbox_temp", +1, 0.3, 1.3)),
                ("gearbox wear", "worn gears", "gearbox failure")))),
    Kind("centrifugal fan", "FAN", "Fan", ("fan", "centrifugal fan"),
         ("exhaust", "supply", "induced draft", "forced draft", "dust collector"),
         (_vib(),
          _temp("bearing_temp", "bearing_temp", "Tb", ("bearing temperature",), (40, 55), 80, 95),
          _current(nom=(15, 30), hi=38, hihi=45),
          Signal("airflow", "airflow", "airflow", "F", "FT", ("air flow", "airflow"), (9000, 14000), (0, 30000),
                 60, 5, (Alarm("LO", 6000, 200, 20, 10, "medium", True),)),
          Signal("filter_dp", "low_dp", "filter_dp", "dPf", "PDT", ("filter differential pressure", "filter"),
                 (150, 300), (0, 2000), 3, 5, (Alarm("HI", 600, 20, 30, 30, "medium"),))),
         (Fault("imbalance", "vibration",
                (E("vibration", +1, 0, 2.5), E("bearing_temp", +1, 0.5, 0.6)),
                ("imbalance", "unbalanced impeller", "dirty impeller")),
          Fault("filter_blockage", "filter_dp",
                (E("filter_dp", +1, 0, 2.5), E("airflow", -1, 0.3, 1.3), E("current", -1, 0.3, 0.4)),
                ("clogged filter", "blocked filter", "dirty filter")))),
    Kind("steam boiler", "B", "Boiler", ("boiler", "steam boiler"),
         ("process steam", "heating", "package"),
         (Signal("steam_press", "pressure", "steam_press", "Ps", "PT", ("steam pressure", "pressure"), (8, 10),
                 (0, 20), 0.03, 20,
                 (Alarm("HIHI", 12.5, 0.2, 2, 3, "critical", False, "HIHI_PRESS"),
                  Alarm("HI", 11.5, 0.2, 5, 10, "high")), idle=0.2),
          Signal("drum_level", "percent", "drum_level", "L", "LT", ("drum level", "water level", "level"), (45, 55),
                 (0, 100), 0.4, 10,
                 (Alarm("HIHI", 88, 1, 2, 3, "critical", False, "HIHI_LEVEL"), Alarm("HI", 75, 1, 5, 10, "high"),
                  Alarm("LO", 30, 1, 5, 10, "high"), Alarm("LOLO", 15, 1, 2, 3, "critical", False, "LOLO_LEVEL")),
                 idle=1.0),
          _temp("flue_temp", "flue_gas_temp", "Tf", ("flue gas temperature", "stack temperature"), (170, 210), 260,
                300, "HIHI_FLUE", tau=120, noise=0.6, span=(0, 600)),
          Signal("steam_flow", "steam", "steam_flow", "Fs", "FT", ("steam flow", "load"), (5, 12), (0, 30), 0.05, 10),
          Signal("o2", "percent", "flue_o2", "O2", "AT", ("flue gas oxygen", "O2", "excess air"), (2.5, 4.0), (0, 25),
                 0.05, 10, (Alarm("HI", 7, 0.3, 30, 10, "medium", True), Alarm("LO", 1.5, 0.2, 10, 10, "high", True)),
                 idle_abs=20.9)),
         (Fault("low_water", "drum_level",
                (E("drum_level", -1, 0, 2.5), E("steam_press", -1, 0.5, 0.4)),
                ("low water", "feedwater failure", "feed pump failure")),
          Fault("tube_scaling", "flue_temp",
                (E("flue_temp", +1, 0, 2.5), E("steam_flow", -1, 0.4, 0.3)),
                ("tube scaling", "scale", "fouled tubes", "sooted tubes")),
          Fault("pressure_control_failure", "steam_press",
                (E("steam_press", +1, 0, 2.5), E("flue_temp", +1, 0.3, 0.8), E("o2", -1, 0.3, 0.7)),
                ("overfiring", "pressure control failure", "stuck firing rate")),
          Fault("air_shortage", "o2",
                (E("o2", -1, 0, 2.5), E("flue_temp", +1, 0.4, 0.7)),
                ("air shortage", "combustion air fan failure", "rich combustion")))),
    Kind("water chiller", "CH", "Chiller", ("chiller", "water chiller"),
         ("process cooling", "HVAC", "plant cooling"),
         (Signal("chw_temp", "temperature", "chw_supply_temp", "Tchw", "TT", ("chilled water supply temperature",
                                                                                "chilled water temperature"),
                 (6.0, 7.5), (-10, 50), 0.05, 60,
                 (Alarm("HI", 10, 0.3, 30, 10, "medium", True), Alarm("LO", 3.0, 0.2, 5, 10, "high"),
                  Alarm("LOLO", 2.0, 0.2, 2, 3, "critical", False, "LOLO_FREEZE")), ambient=True),
          Signal("cond_press", "pressure", "cond_press", "Pc", "PT", ("condenser pressure", "head pressure"), (8, 10),
                 (0, 25), 0.04, 30,
                 (Alarm("HIHI", 15, 0.2, 2, 3, "critical", False, "HIHI_COND"), Alarm("HI", 13, 0.2, 5, 10, "high")),
                 idle=0.6),
          Signal("evap_press", "pressure", "evap_press", "Pe", "PT", ("evaporator pressure", "suction pressure"),
                 (3.0, 3.6), (0, 10), 0.02, 30,
                 (Alarm("LO", 2.3, 0.1, 10, 10, "high", True),
                  Alarm("LOLO", 1.8, 0.1, 3, 3, "critical", True, "LOLO_EVAP")), idle=1.4),
          _current(tag="compressor_current", nom=(120, 160), hi=190, hihi=220,
                   words=("compressor current", "amps")),
          Signal("oil_press", "pressure", "oil_press", "Po", "PT", ("oil pressure",), (2.5, 3.2), (0, 10), 0.02, 3,
                 (Alarm("LO", 1.8, 0.1, 5, 10, "high", True),
                  Alarm("LOLO", 1.2, 0.1, 2, 3, "critical", True, "LOLO_OIL")))),
         (Fault("condenser_fouling", "cond_press",
                (E("cond_press", +1, 0, 2.5), E("current", +1, 0.4, 1.2), E("chw_temp", +1, 0.6, 0.5)),
                ("condenser fouling", "dirty condenser", "high head pressure")),
          Fault("refrigerant_leak", "evap_press",
                (E("evap_press", -1, 0, 2.5), E("chw_temp", +1, 0.4, 1.3), E("cond_press", -1, 0.4, 0.5)),
                ("refrigerant leak", "low refrigerant charge", "low charge")),
          Fault("oil_pump_wear", "oil_press", (E("oil_press", -1, 0, 2.5),),
                ("oil pump wear", "low oil", "oil pump failure")))),
    Kind("heat exchanger", "E", "Heat exchanger", ("heat exchanger", "exchanger"),
         ("feedwater", "process", "oil cooler", "interchanger"),
         (_temp("hot_in", "hot_in_temp", "Thi", ("hot side inlet temperature",), (85, 95), 110, None, tau=30),
          Signal("hot_out", "temperature", "hot_out_temp", "Tho", "TT", ("hot side outlet temperature",
                                                                          "outlet temperature", "approach"),
                 (45, 55), (-20, 200), 0.2, 40,
                 (Alarm("HI", 65, 1, 30, 10, "medium", True),
                  Alarm("HIHI", 75, 1, 5, 3, "critical", True, "HIHI_TEMP")), ambient=True),
          Signal("cold_out", "temperature", "cold_out_temp", "Tco", "TT", ("cold side outlet temperature",),
                 (38, 45), (-20, 200), 0.2, 40, (Alarm("LO", 30, 1, 30, 10, "low", True),), ambient=True),
          Signal("dp", "dp", "shell_dp", "dP", "PDT", ("differential pressure", "pressure drop"), (30, 50), (0, 250),
                 0.3, 5,
                 (Alarm("HI", 80, 2, 10, 10, "medium"), Alarm("HIHI", 110, 2, 3, 3, "critical", False, "HIHI_DP"))),
          Signal("cold_flow", "flow", "cold_flow", "Q", "FT", ("cooling water flow", "flow"), (50, 80), (0, 200), 0.5,
                 3, (Alarm("LO", 30, 2, 10, 10, "medium", True),))),
         (Fault("fouling", "dp",
                (E("dp", +1, 0, 2.5), E("hot_out", +1, 0.3, 1.3), E("cold_out", -1, 0.3, 0.8)),
                ("fouling", "fouled tubes", "scaling")),
          Fault("cooling_water_loss", "cold_flow",
                (E("cold_flow", -1, 0, 2.5), E("hot_out", +1, 0.2, 1.6), E("cold_out", +1, 0.2, 0.5)),
                ("loss of cooling water", "cooling water failure", "blocked strainer")))),
    Kind("storage tank", "TK", "Tank", ("tank", "storage tank"),
         ("raw water", "day", "buffer", "condensate", "product"),
         (Signal("level", "level", "level", "L", "LT", ("level", "tank level"), (3.0, 5.0), (0, 10), 0.01, 20,
                 (Alarm("HIHI", 9.0, 0.1, 2, 3, "critical", False, "HIHI_LEVEL"), Alarm("HI", 8.0, 0.1, 5, 10, "high"),
                  Alarm("LO", 1.5, 0.1, 5, 10, "high"), Alarm("LOLO", 0.8, 0.1, 2, 3, "critical", False, "LOLO_LEVEL")),
                 idle=1.0),
          _temp("temp", "liquid_temp", "T", ("liquid temperature", "temperature"), (15, 30), 45, None, tau=600,
                idle=1.0, ambient=False),
          Signal("in_flow", "flow", "inlet_flow", "Qi", "FT", ("inlet flow", "fill rate"), (20, 40), (0, 200), 0.4, 3),
          Signal("out_flow", "flow", "outlet_flow", "Qo", "FT", ("outlet flow", "draw rate"), (20, 40), (0, 200), 0.4,
                 3)),
         (Fault("overfill", "level",
                (E("level", +1, 0, 2.5), E("in_flow", +1, 0, 0.4)),
                ("overfill", "inlet valve stuck open", "level control failure")),
          Fault("leak", "level",
                (E("level", -1, 0, 2.5),),
                ("leak", "tank leak", "drain valve open")))),
    Kind("air handling unit", "AHU", "AHU", ("air handling unit", "AHU", "air handler"),
         ("office", "clean room", "warehouse", "laboratory"),
         (Signal("supply_temp", "temperature", "supply_air_temp", "Tsa", "TT", ("supply air temperature",), (13, 16),
                 (-30, 60), 0.1, 60,
                 (Alarm("HI", 20, 0.5, 60, 10, "medium", True), Alarm("LO", 6, 0.5, 10, 10, "high"),
                  Alarm("LOLO", 3, 0.5, 3, 3, "critical", False, "LOLO_FREEZE")), ambient=True),
          Signal("filter_dp", "low_dp", "filter_dp", "dPf", "PDT", ("filter differential pressure", "filter"),
                 (120, 200), (0, 2000), 3, 5, (Alarm("HI", 350, 15, 30, 30, "medium"),)),
          Signal("airflow", "airflow", "supply_airflow", "F", "FT", ("supply air flow", "airflow"), (8000, 12000),
                 (0, 25000), 50, 5, (Alarm("LO", 5500, 200, 20, 10, "medium", True),)),
          _current(tag="fan_current", nom=(10, 20), hi=26, hihi=30, words=("fan current", "amps")),
          _vib(tag="fan_vibration", words=("fan vibration", "vibration"), nom=(0.8, 2.0))),
         (Fault("filter_loading", "filter_dp",
                (E("filter_dp", +1, 0, 2.5), E("airflow", -1, 0.3, 1.3)),
                ("dirty filter", "clogged filter", "filter loading")),
          Fault("belt_slip", "airflow",
                (E("airflow", -1, 0, 2.5), E("current", -1, 0.2, 0.6)),
                ("fan belt slip", "broken belt", "slipping belt")),
          Fault("cooling_valve_stuck", "supply_temp",
                (E("supply_temp", +1, 0, 2.5),),
                ("chilled water valve stuck", "cooling valve failure", "no cooling")))),
    # ---- held out by split.py: kinds no training plant has ----
    Kind("cooling tower", "CT", "Cooling tower", ("cooling tower", "tower"),
         ("condenser water", "process cooling"),
         (Signal("cold_water", "temperature", "cold_water_temp", "Tcw", "TT", ("cold water temperature",
                                                                                "basin temperature"),
                 (26, 30), (-10, 60), 0.1, 90, (Alarm("HI", 34, 0.5, 60, 10, "medium", True),), ambient=True),
          Signal("hot_water", "temperature", "hot_water_temp", "Thw", "TT", ("hot water temperature",
                                                                              "return temperature"),
                 (34, 38), (-10, 80), 0.1, 60, (Alarm("HI", 45, 0.5, 30, 10, "low"),), ambient=True),
          _vib(tag="fan_vibration", words=("fan vibration", "vibration")),
          Signal("basin_level", "percent", "basin_level", "L", "LT", ("basin level", "level"), (60, 75), (0, 100), 0.3,
                 20, (Alarm("LO", 40, 1, 10, 10, "high"), Alarm("LOLO", 25, 1, 3, 3, "critical", False, "LOLO_LEVEL")),
                 idle=1.0),
          _current(tag="fan_current", nom=(20, 35), hi=45, hihi=52, words=("fan current", "amps"))),
         (Fault("fan_bearing_wear", "vibration",
                (E("vibration", +1, 0, 2.5, 2.0), E("current", +1, 0.5, 0.4)), ("fan bearing wear",) + _BEARING[1:]),
          Fault("fill_fouling", "cold_water",
                (E("cold_water", +1, 0, 2.5), E("hot_water", +1, 0.3, 0.6)),
                ("fill fouling", "scaled fill", "poor approach")),
          Fault("makeup_failure", "basin_level",
                (E("basin_level", -1, 0, 2.5),),
                ("makeup valve failure", "no makeup water", "basin leak")))),
    Kind("rotary kiln", "H", "Kiln", ("kiln", "rotary kiln"),
         ("lime", "cement", "calciner"),
         (Signal("zone_temp", "temperature", "burning_zone_temp", "Tz", "TT", ("burning zone temperature",
                                                                                "kiln temperature"),
                 (850, 920), (0, 1400), 1.5, 240,
                 (Alarm("HIHI", 1050, 5, 3, 3, "critical", False, "HIHI_TEMP"), Alarm("HI", 1000, 5, 10, 10, "high"),
                  Alarm("LO", 700, 5, 60, 10, "medium", True)), ambient=True),
          _temp("shell_temp", "shell_temp", "Tsh", ("shell temperature", "hot spot"), (180, 230), 300, 350,
                "HIHI_SHELL", tau=240, noise=0.8, span=(0, 600)),
          Signal("draft", "low_dp", "hood_draft", "Pd", "PT", ("hood draft", "draft"), (-80, -50), (-500, 100), 1.0, 3,
                 (Alarm("HIHI", -5, 2, 3, 3, "critical", True, "HIHI_DRAFT"),
                  Alarm("HI", -20, 2, 10, 10, "high", True))),
          Signal("o2", "percent", "flue_o2", "O2", "AT", ("flue gas oxygen", "O2", "excess air"), (2.0, 3.5), (0, 25),
                 0.05, 10, (Alarm("HI", 8, 0.3, 30, 10, "medium", True), Alarm("LO", 1.0, 0.2, 10, 10, "high", True)),
                 idle_abs=20.9),
          _current(tag="drive_current", nom=(40, 60), hi=75, hihi=90,
                   words=("drive current", "kiln drive", "amps"))),
         (Fault("refractory_failure", "shell_temp",
                (E("shell_temp", +1, 0, 2.5),), ("refractory failure", "lost refractory", "hot spot", "brick loss")),
          Fault("overfiring", "zone_temp",
                (E("zone_temp", +1, 0, 2.5), E("shell_temp", +1, 0.4, 0.8), E("o2", -1, 0.2, 0.8)),
                ("overfiring", "burner control failure", "too much fuel")),
          Fault("draft_fan_failure", "draft",
                (E("draft", +1, 0, 2.5), E("o2", -1, 0.3, 1.4)),
                ("ID fan failure", "loss of draft", "draft fan trip")),
          Fault("ring_buildup", "current",
                (E("current", +1, 0, 2.5),), ("ring build-up", "coating ring", "drive overload")))),
    Kind("control valve", "FV", "Valve", ("control valve", "valve"),
         ("feedwater", "steam", "cooling water", "level control"),
         (Signal("position", "percent", "valve_position", "Z", "ZT", ("valve position", "opening"), (40, 60), (0, 100),
                 0.2, 3, idle_abs=0.0),
          Signal("deviation", "percent", "position_deviation", "Dev", "ZDT", ("position deviation",
                                                                                "demand minus position"),
                 (0.3, 1.0), (0, 100), 0.08, 3,
                 (Alarm("HI", 5, 0.5, 10, 10, "medium"), Alarm("HIHI", 10, 0.5, 5, 3, "critical", False, "HIHI_DEV"))),
          Signal("air_press", "pressure", "air_supply_press", "Pa", "PT", ("air supply pressure", "instrument air"),
                 (5.5, 6.5), (0, 10), 0.02, 5,
                 (Alarm("LO", 4.0, 0.1, 5, 10, "high"), Alarm("LOLO", 3.0, 0.1, 2, 3, "critical", False, "LOLO_AIR")),
                 idle=1.0),
          Signal("flow", "flow", "flow", "Q", "FT", ("flow", "throughput"), (40, 80), (0, 200), 0.5, 3,
                 (Alarm("LO", 20, 2, 10, 10, "medium", True),))),
         (Fault("stiction", "deviation",
                (E("deviation", +1, 0, 2.5, osc=0.3), E("position", +1, 0, 0.2, osc=0.3),
                 E("flow", -1, 0, 0.3, osc=0.3)),
                ("stiction", "sticking valve", "packing friction", "hunting")),
          Fault("air_supply_leak", "air_press",
                (E("air_press", -1, 0, 2.5), E("deviation", +1, 0.5, 1.3)),
                ("air supply leak", "instrument air leak", "regulator failure")))),
    Kind("batch mixer", "AG", "Mixer", ("mixer", "agitator"),
         ("blend", "slurry", "batch"),
         (_current(nom=(15, 30), hi=38, hihi=45),
          Signal("speed", "speed", "agitator_speed", "N", "ST", ("agitator speed", "speed", "rpm"), (90, 120), (0, 300),
                 0.5, 3, (Alarm("LO", 70, 2, 10, 10, "medium", True),)),
          _temp("batch_temp", "batch_temp", "Tb", ("batch temperature", "product temperature"), (40, 55), 75, 85,
                tau=200, idle=1.0, ambient=False, span=(-20, 150)),
          _vib(words=("gearbox vibration", "vibration")),
          _temp("gearbox_temp", "gearbox_temp", "Tg", ("gearbox temperature",), (45, 60), 85, None, tau=240)),
         (Fault("viscosity_rise", "current",
                (E("current", +1, 0, 2.5), E("speed", -1, 0.3, 1.3)),
                ("viscosity rise", "thick batch", "overload")),
          Fault("gearbox_wear", "vibration",
                (E("vibration", +1, 0, 2.5, 2.0), E("gearbox_temp", +1, 0.3, 1.3)),
                ("gearbox wear", "worn gears", "gearbox failure")),
          Fault("runaway", "batch_temp",
                (E("batch_temp", +1, 0, 2.5),), ("runaway reaction", "exotherm", "cooling jacket failure")))),
)

BY_NAME = {k.name: k for k in KINDS}
AMBIENT_C = (15.0, 28.0)  # a plant's ambient temperature is drawn from this range


def kind(name: str) -> Kind:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError("no machine kind %r (known: %s)" % (name, ", ".join(BY_NAME))) from None


def faults() -> list[tuple[str, str]]:
    """(kind, fault) for every fault of every kind."""
    return [(k.name, f.name) for k in KINDS for f in k.faults]

