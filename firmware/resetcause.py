# resetcause.py: why the board last reset, in one vocabulary for MicroPython and CircuitPython (boot only).
"""    from firmware import resetcause
    resetcause.reset_cause()     # "watchdog"
    resetcause.forget()          # boot-only: its bytecode goes once the node has the answer

    power_on    power applied              MicroPython PWRON_RESET      CircuitPython ResetReason.POWER_ON
    watchdog    the watchdog ran out        WDT_RESET                    WATCHDOG
    soft        software asked for it       SOFT_RESET (rp2: WDT_RESET   SOFTWARE
                (machine.reset(), ...)      with the FORCE reason bit)
    brownout    the supply dipped           (ports report power_on)      BROWNOUT
    hard        the reset pin, a debugger   HARD_RESET                   RESET_PIN, RESCUE_DEBUG
    deep_sleep  woken from deep sleep       DEEPSLEEP_RESET              DEEP_SLEEP_ALARM
    unknown     the port does not say

The node says it in every NODE report of the boot (`reset=`, firmware/node.py; docs/NODE.md).
"""
import sys

from shared.compat import const

POWER_ON = "power_on"
WATCHDOG = "watchdog"
SOFT = "soft"
BROWNOUT = "brownout"
HARD = "hard"
DEEP_SLEEP = "deep_sleep"
UNKNOWN = "unknown"
CAUSES = (POWER_ON, WATCHDOG, SOFT, BROWNOUT, HARD, DEEP_SLEEP, UNKNOWN)

# machine.reset_cause() constants and microcontroller.ResetReason members, by name (not every port has each)
MP_CAUSES = (("PWRON_RESET", POWER_ON), ("WDT_RESET", WATCHDOG), ("SOFT_RESET", SOFT), ("HARD_RESET", HARD),
             ("DEEPSLEEP_RESET", DEEP_SLEEP))
CP_CAUSES = (("POWER_ON", POWER_ON), ("WATCHDOG", WATCHDOG), ("SOFTWARE", SOFT), ("BROWNOUT", BROWNOUT),
             ("RESET_PIN", HARD), ("RESCUE_DEBUG", HARD), ("DEEP_SLEEP_ALARM", DEEP_SLEEP), ("UNKNOWN", UNKNOWN))

# the RP2040's WATCHDOG REASON register: bit 0 the timer ran out, bit 1 FORCE (pico-sdk's watchdog_reboot, which
# is what rp2's machine.reset() calls; its reset_cause() says WDT_RESET for both)
_RP2_REASON = const(0x40058008)
_RP2_FORCE = const(2)


def mp_cause(machine, platform):
    """A MicroPython machine module's reset_cause() in the vocabulary above."""
    f = getattr(machine, "reset_cause", None)
    if f is None:
        return UNKNOWN
    c = f()
    for name, word in MP_CAUSES:
        if getattr(machine, name, None) == c:
            if word == WATCHDOG and platform == "rp2" and machine.mem32[_RP2_REASON] & _RP2_FORCE:
                return SOFT
            return word
    return UNKNOWN


def cp_cause(mc):
    """A CircuitPython microcontroller module's cpu.reset_reason in the vocabulary above."""
    r = mc.cpu.reset_reason
    for name, word in CP_CAUSES:
        if getattr(mc.ResetReason, name, None) == r:
            return word
    return UNKNOWN


def _module(name):
    # the module, or None where this interpreter has none (sys.modules[name] None: MicroPython gives None)
    try:
        return __import__(name)
    except ImportError:
        return None


def reset_cause():
    """Why the board last reset (one of CAUSES), on whichever flavour this is; unknown on CPython."""
    machine = _module("machine")
    if machine is not None:
        return mp_cause(machine, sys.platform)
    mc = _module("microcontroller")
    return cp_cause(mc) if mc is not None else UNKNOWN


def forget():
    """Drop this module so that its bytecode can be collected (call it when done with it)."""
    from firmware import drop

    drop("resetcause")