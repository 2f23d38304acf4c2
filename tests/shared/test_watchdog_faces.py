# firmware/watchdog.py and firmware/resetcause.py on CPython, MicroPython and CircuitPython: both flavours' reset
# causes in one vocabulary, the watchdog opened with the profile's timeout through either face, fed without
# allocating, stopped, and the hang test aid. The unix ports have no machine.WDT, machine.reset_cause or microcontroller module, so those are
# stand-ins here with the ports' constants and units (the virtual board's real relay and the emulated RP2040's
# watchdog run in tests/host/test_watchdog.py).
import json
import os
import sys
import time

import testkit
from firmware import resetcause, watchdog
from shared.compat import ticks_diff, ticks_ms

_FAKES = ("machine", "microcontroller", "watchdog")


class _Module:
    """An object standing in for a module in sys.modules."""


class MachineWDT:
    """machine.WDT as the rp2 and esp32 ports have it: WDT(id=0, timeout=ms), feed(), no deinit()."""

    made = []
    refuse = None  # the ValueError text the port raises for a timeout it cannot count

    def __init__(self, id=0, timeout=5000):
        if MachineWDT.refuse is not None:
            raise ValueError(MachineWDT.refuse)
        self.timeout = timeout
        self.feeds = 0
        MachineWDT.made.append(self)

    def feed(self):
        self.feeds += 1


class CpWatchdog:
    """microcontroller.watchdog (watchdog.WatchDogTimer): timeout in seconds, a mode, feed(), deinit()."""

    def __init__(self):
        self.timeout = 0
        self.mode = None
        self.feeds = 0

    def feed(self):
        if self.mode is None:
            raise ValueError("WatchDogTimer is not initialized")  # CircuitPython: no feed before a mode
        self.feeds += 1

    def deinit(self):
        self.mode = None


class Reason:
    """A member of microcontroller.ResetReason."""

    def __init__(self, name):
        self.name = name


CP_NAMES = ("POWER_ON", "BROWNOUT", "SOFTWARE", "DEEP_SLEEP_ALARM", "RESET_PIN", "WATCHDOG", "UNKNOWN", "RESCUE_DEBUG")


def _install(machine=None, mc=None, wd=None):
    saved = {}
    for name in _FAKES:
        saved[name] = sys.modules.get(name)
        sys.modules[name] = None
    if machine is not None:
        sys.modules["machine"] = machine
    if mc is not None:
        sys.modules["microcontroller"] = mc
    if wd is not None:
        sys.modules["watchdog"] = wd
    del MachineWDT.made[:]
    MachineWDT.refuse = None
    return saved


def _restore(saved):
    for name in _FAKES:
        del sys.modules[name]
        if saved[name] is not None:
            sys.modules[name] = saved[name]


def _mp_machine(cause=1, reason=0):
    m = _Module()
    m.PWRON_RESET, m.HARD_RESET, m.WDT_RESET, m.DEEPSLEEP_RESET, m.SOFT_RESET = 1, 2, 3, 4, 5  # the esp32 port's
    m.reset_cause = lambda: cause
    m.WDT = MachineWDT
    m.mem32 = {0x40058008: reason}  # the RP2040's WATCHDOG REASON register
    return m


def _cp_modules(reason="POWER_ON"):
    mc = _Module()
    mc.ResetReason = _Module()
    for name in CP_NAMES:
        setattr(mc.ResetReason, name, Reason(name))
    mc.cpu = _Module()
    mc.cpu.reset_reason = getattr(mc.ResetReason, reason)
    mc.watchdog = CpWatchdog()
    wd = _Module()
    wd.WatchDogMode = _Module()
    wd.WatchDogMode.RAISE = "raise"
    wd.WatchDogMode.RESET = "reset"
    return mc, wd


def test_micropython_reset_causes_map_to_one_vocabulary():
    want = {1: "power_on", 2: "hard", 3: "watchdog", 4: "deep_sleep", 5: "soft", 99: "unknown"}
    for cause, word in want.items():
        assert resetcause.mp_cause(_mp_machine(cause), "esp32") == word, (cause, word)
    # rp2 says WDT_RESET for machine.reset() too (pico-sdk's watchdog_reboot): the REASON register's FORCE bit
    assert resetcause.mp_cause(_mp_machine(3, 1), "rp2") == "watchdog"  # TIMER: the watchdog ran out
    assert resetcause.mp_cause(_mp_machine(3, 2), "rp2") == "soft"  # FORCE: software asked
    assert resetcause.mp_cause(_mp_machine(1, 2), "rp2") == "power_on"
    bare = _Module()  # the unix port's machine: no reset_cause
    assert resetcause.mp_cause(bare, "linux") == "unknown"
    for word in want.values():
        assert word in resetcause.CAUSES


def test_circuitpython_reset_reasons_map_to_one_vocabulary():
    want = {"POWER_ON": "power_on", "BROWNOUT": "brownout", "SOFTWARE": "soft", "DEEP_SLEEP_ALARM": "deep_sleep",
            "RESET_PIN": "hard", "WATCHDOG": "watchdog", "UNKNOWN": "unknown", "RESCUE_DEBUG": "hard"}
    for name, word in want.items():
        mc, _wd = _cp_modules(name)
        assert resetcause.cp_cause(mc) == word, (name, word)
    mc, _wd = _cp_modules()
    mc.cpu.reset_reason = Reason("SOMETHING_NEW")  # a member a later CircuitPython adds
    assert resetcause.cp_cause(mc) == "unknown"


def test_reset_cause_asks_the_flavour_it_runs_on():
    saved = _install(machine=_mp_machine(3))
    try:
        assert resetcause.reset_cause() == "watchdog"
    finally:
        _restore(saved)
    mc, wd = _cp_modules("BROWNOUT")
    saved = _install(mc=mc, wd=wd)  # no machine module: CircuitPython
    try:
        assert resetcause.reset_cause() == "brownout"
    finally:
        _restore(saved)
    saved = _install()
    try:
        assert resetcause.reset_cause() == "unknown"  # neither (CPython)
    finally:
        _restore(saved)
    resetcause.forget()  # boot-only: the node drops it once it has the answer
    assert "firmware.resetcause" not in sys.modules
    resetcause.forget()  # twice is fine


def test_micropython_watchdog_opens_with_the_timeout_and_feeds_without_allocating():
    saved = _install(machine=_mp_machine())
    try:
        wd = watchdog.Watchdog(1500)
        assert wd.ms == 1500 and len(MachineWDT.made) == 1 and MachineWDT.made[0].timeout == 1500
        testkit.run_locked(lambda _: wd.feed())
        testkit.run_locked(lambda _: wd.feed())
        assert MachineWDT.made[0].feeds == 2
        # the esp32 port cannot stop it (no deinit, not an RP2040): stop() says so, and feeds go nowhere
        assert wd.stop() is False and wd.ms == 0
        wd.feed()
        assert MachineWDT.made[0].feeds == 2
        off = watchdog.Watchdog(0)  # 0: none opened
        off.feed()
        assert off.ms == 0 and len(MachineWDT.made) == 1 and off.stop() is True
    finally:
        _restore(saved)


def test_a_timeout_the_port_refuses_leaves_the_node_running_and_says_why():
    saved = _install(machine=_mp_machine())
    said = []
    try:
        MachineWDT.refuse = "timeout exceeds 8388"
        wd = watchdog.Watchdog(9000, said.append)
        wd.feed()
        assert wd.ms == 0 and MachineWDT.made == []
        assert said == ["NODE watchdog error: 9000 ms: timeout exceeds 8388; running without one"], said
    finally:
        _restore(saved)
    saved = _install(machine=_Module())  # the unix port: a machine module without WDT
    try:
        wd = watchdog.Watchdog(1500, said.append)
        wd.feed()
        assert wd.ms == 0 and len(said) == 1
    finally:
        _restore(saved)


def test_circuitpython_watchdog_takes_seconds_resets_and_deinits():
    mc, wd_mod = _cp_modules()
    saved = _install(mc=mc, wd=wd_mod)
    try:
        wd = watchdog.Watchdog(8000)
        w = mc.watchdog
        assert wd.ms == 8000 and w.timeout == 8.0 and w.mode == "reset" and w.feeds == 1
        testkit.run_locked(lambda _: wd.feed())
        assert w.feeds == 2
        assert wd.stop() is True and w.mode is None  # deinit(): Ctrl-C at the console resets nothing
        wd.feed()
        assert w.feeds == 2
    finally:
        _restore(saved)


class Inputs:
    def __init__(self):
        self.polls = 0
        self.engine = "the inputs' own"

    def poll(self, now):
        self.polls += 1
        return 1


def _path(name):
    base = (os.getenv("TMPDIR") if hasattr(os, "getenv") else None) or "/tmp"
    ns = time.time_ns() if hasattr(time, "time_ns") else time.ticks_us()
    return "%s/edgetwin-wd-%s-%d" % (base, name, ns)


def test_hang_aid_is_one_boot_only_and_without_its_file_changes_nothing():
    inputs = Inputs()
    path = _path("hang")
    assert watchdog.hang_aid(inputs, path) is inputs  # no file: the inputs themselves
    assert watchdog.hang_aid(None, path) is None  # a node without inputs
    with open(path, "w") as f:
        f.write("250\n")
    h = watchdog.hang_aid(inputs, path)
    assert h is not inputs and h.engine == "the inputs' own"  # every other attribute is the inputs'
    try:
        os.stat(path)
        raise AssertionError("the hang file is still there: every boot would hang")
    except OSError:
        pass
    assert watchdog.hang_aid(inputs, path) is inputs  # the next boot runs normally
    now = ticks_ms()
    assert h.poll(now) == 1 and inputs.polls == 1  # before its time the inputs are polled as ever
    # (from ticks_add(now, 250) on, poll never returns: tests/host/test_watchdog.py lets a board's watchdog end it)
    assert 200 <= ticks_diff(h._at, now) <= 250
    with open(path, "w") as f:
        f.write("soon")  # not a number: no hang
    assert watchdog.hang_aid(inputs, path) is inputs
    os.remove(path)


def test_profile_takes_a_watchdog_the_chip_can_count_or_none():
    from shared import profile

    with open("boards/rp2040_pico.json") as f:  # the shared tests run from the checkout (as test_profile.py)
        text = f.read()
    for ms, ok in ((0, True), (1000, True), (8000, True), (8388, True), (8389, False), (999, False), (-1, False)):
        doc = json.loads(text)
        doc["watchdog_ms"] = ms
        if ok:
            assert profile.validate(doc, "p.json")["watchdog_ms"] == ms
        else:
            e = testkit.raises(profile.ProfileError, profile.validate, doc, "p.json")
            assert "p.json: field 'watchdog_ms'" in str(e), str(e)
    doc = json.loads(text)
    doc["watchdog_ms"] = 9000
    assert "0 (none) or 1000..8388 for micropython on armv6m" in str(
        testkit.raises(profile.ProfileError, profile.validate, doc))
    with open("boards/rp2040_pico_cp.json") as f:
        cp = json.loads(f.read())
    cp["watchdog_ms"] = 8001  # CircuitPython's watchdog on the RP2040 takes up to 8 s
    assert "1000..8000 for circuitpython" in str(testkit.raises(profile.ProfileError, profile.validate, cp))
    doc["mpy_arch"] = "xtensawin"  # an ESP32-S3's watchdog counts longer
    assert profile.validate(doc)["watchdog_ms"] == 9000
    doc["watchdog_ms"] = True  # not an int
    assert "must be int" in str(testkit.raises(profile.ProfileError, profile.validate, doc))
    del doc["watchdog_ms"]  # absent: none (a profile written before the field)
    assert profile.validate(doc) is doc
