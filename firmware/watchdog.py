# watchdog.py: the board's hardware watchdog, fed by the node's loop, and a test aid that hangs the node.
"""The node opens the watchdog once its boot work is done (model, spill ring, plant) with the board
profile's `watchdog_ms` (0 or absent: none) and feeds it from its main loop, from the draft model's step
hook and between a prompt's tokens (firmware/node.py). A hang anywhere else (a source's driver, the model,
the link) stops the feeds and the chip resets itself watchdog_ms later; the next boot's NODE reports say
why (`reset=`, firmware/resetcause.py).

Faces: machine.WDT(timeout=ms).feed() on MicroPython (what each chip can count: shared/profile.py
WATCHDOG_MAX_MS); microcontroller.watchdog (timeout in s, mode WatchDogMode.RESET, feed, deinit) on
CircuitPython. feed() allocates nothing. stop() is for a person at the console who pressed Ctrl-C:
deinit() where the port has it, the RP2040's CTRL.ENABLE bit cleared on rp2; where neither (ESP32) the
board resets watchdog_ms later.

Test aid (docs/NODE.md "Watchdog and reset cause"): a file /hang_ms holding a number N makes the node's
inputs hang, as a driver stuck on its bus would, N ms after the watchdog opens; the node removes the file
first, so only that boot hangs.
"""
import os
import sys

from shared.compat import const, ticks_add, ticks_diff, ticks_ms

# RP2040 WATCHDOG CTRL: bit 30 ENABLE
_RP2_CTRL = const(0x40058000)
HANG_PATH = "/hang_ms"


def _module(name):
    # the module, or None where this interpreter has none (CircuitPython has no machine, MicroPython no
    # microcontroller; CircuitPython's `watchdog` is not ours, which is firmware.watchdog)
    try:
        return __import__(name)
    except ImportError:
        return None


def _open(ms):
    # the port's watchdog started with a timeout of ms, or None where the port has none (the unix port)
    machine = _module("machine")
    if machine is not None:
        wdt = getattr(machine, "WDT", None)
        return wdt(timeout=ms) if wdt is not None else None
    mc = _module("microcontroller")
    wd = _module("watchdog") if mc is not None else None
    if wd is None:
        return None
    w = mc.watchdog
    w.timeout = ms / 1000
    w.mode = wd.WatchDogMode.RESET
    w.feed()
    return w


class Watchdog:
    """The board's watchdog with a timeout of `ms` (0: none); `say(text)` hears why it could not open."""

    def __init__(self, ms=0, say=None):
        self.ms = 0  # the timeout it runs with; 0 while none runs
        self._w = None
        if not ms:
            return
        try:
            self._w = _open(ms)
        except (ValueError, OSError, RuntimeError, NotImplementedError) as e:  # out of range, in use
            text = "NODE watchdog error: %d ms: %s; running without one" % (ms, e)
            print(text)
            if say is not None:
                say(text)
            return
        if self._w is not None:
            self.ms = ms

    def feed(self):
        w = self._w
        if w is not None:
            w.feed()

    def stop(self):
        """Stop it where the port can (True); the board then waits at its REPL as long as anyone likes."""
        w = self._w
        if w is None:
            return True
        self._w = None
        self.ms = 0
        if hasattr(w, "deinit"):
            w.deinit()
            return True
        if sys.platform == "rp2":
            m = _module("machine").mem32
            m[_RP2_CTRL] = m[_RP2_CTRL] & ~(1 << 30)
            return True
        return False


class Hang:
    """Test aid: the node's inputs (anything with poll(now)) whose poll never returns from tick `at` on;
    every other attribute is the inputs' own."""

    def __init__(self, inputs, at):
        self._in = inputs
        self._at = at

    def poll(self, now):
        if ticks_diff(now, self._at) >= 0:
            while True:  # stuck, as a driver waiting on a bus that never answers
                pass
        return self._in.poll(now)

    def __getattr__(self, name):
        return getattr(self._in, name)


def hang_aid(inputs, path=HANG_PATH):
    """`inputs`, or Hang(inputs) when the file at `path` holds N (ms from now): the file is removed first, so
    the boot after the reset runs normally. Boot time only."""
    if inputs is None:
        return None
    try:
        with open(path) as f:
            ms = int(f.read().strip())
    except (OSError, ValueError):
        return inputs
    try:
        os.remove(path)
    except OSError:  # a read-only filesystem: every boot would hang, so this one does not
        return inputs
    return Hang(inputs, ticks_add(ticks_ms(), ms))
