# irqlock.py: the one place that chooses the critical section for shared writes (IRQs, a lock, or none).
"""Critical sections for the portable core, chosen once by what the interpreter has.

    where                               enter()/leave()             mask()/unmask()
    MicroPython board (rp2, esp32)      IRQs off, then _thread lock  IRQs off
      (machine.disable_irq exists)      (lock only if _thread)
    MicroPython unix port               _thread lock                nothing
    CircuitPython (no threads/IRQs)     nothing: code is cooperative nothing
    CPython                             threading.Lock              nothing

enter() returns a state that must be passed to leave(); likewise mask()/unmask(). They are plain
functions, not a context manager, and allocate nothing on MicroPython (tests/shared/test_seqlock.py
proves it, also with a fake `machine` whose disable_irq() locks the heap). The section is not
reentrant and must not be entered from an IRQ handler: handlers never take locks, they
use mask()/unmask() at most.

IRQs go off before the lock is taken, as a spinlock with IRQs saved: a holder is never interrupted on
its own core, so the lock is only ever contended from the other core (RP2040) and held for a few
bytecodes.

relax() is what a spinning reader calls to let a preempted writer finish: a zero sleep where writers
are OS threads that can be descheduled mid-write (CPython, unix port), nothing on the boards, where a
writer in progress is always running (IRQs are off while it writes).

configure() re-chooses; tests use it to inject a fake `machine` or `_thread` module (or None for
"absent"), and configure() with no arguments restores the automatic choice. Reconfigure only while no
other thread is inside a section.
"""
import sys

_AUTO = object()

KIND = "none"  # "irq+lock", "irq", "lock" or "none": what enter() does here

_machine = None
_lock = None
_sleep0 = None


def _off():
    return _machine.disable_irq()


def _on(state):
    _machine.enable_irq(state)


def _irq_lock_enter():
    state = _machine.disable_irq()
    _lock.acquire()
    return state


def _irq_lock_leave(state):
    _lock.release()
    _machine.enable_irq(state)


def _lock_enter():
    _lock.acquire()
    return 0


def _lock_leave(state):
    _lock.release()


def _nothing():
    return 0


def _nothing_leave(state):
    pass


def _relax_sleep():
    _sleep0(0)


def _relax_nothing():
    pass


enter = _nothing
leave = _nothing_leave
mask = _nothing
unmask = _nothing_leave
relax = _relax_nothing


def _detect_machine():
    if sys.implementation.name != "micropython":
        return None  # CPython has no IRQs; CircuitPython has no user IRQs (and no `machine`)
    try:
        import machine
    except ImportError:
        return None
    return machine


def _detect_thread():
    name = sys.implementation.name
    if name == "circuitpython":
        return None
    if name != "micropython":
        import threading

        return threading  # CPython: threading.Lock
    try:
        import _thread
    except ImportError:
        return None
    return _thread


def _new_lock(mod):
    if hasattr(mod, "allocate_lock"):
        return mod.allocate_lock()
    return mod.Lock()


def configure(machine=_AUTO, thread=_AUTO):
    """Choose the critical section. machine: a module with disable_irq()/enable_irq(), None for none,
    or omitted to detect; thread: a module with allocate_lock() or Lock(), None, or omitted."""
    global KIND, _machine, _lock, _sleep0, enter, leave, mask, unmask, relax
    if machine is _AUTO:
        machine = _detect_machine()
    if thread is _AUTO:
        thread = _detect_thread()
    if machine is not None and not (hasattr(machine, "disable_irq") and hasattr(machine, "enable_irq")):
        machine = None  # e.g. the unix port's `machine`: no IRQs to disable
    _machine = machine
    _lock = _new_lock(thread) if thread is not None else None
    if machine is not None:
        mask, unmask = _off, _on
        if _lock is not None:
            KIND, enter, leave = "irq+lock", _irq_lock_enter, _irq_lock_leave
        else:
            KIND, enter, leave = "irq", _off, _on
        relax = _relax_nothing
    elif _lock is not None:
        KIND, enter, leave = "lock", _lock_enter, _lock_leave
        mask, unmask = _nothing, _nothing_leave
        relax = _relax_sleep
    else:
        KIND, enter, leave = "none", _nothing, _nothing_leave
        mask, unmask = _nothing, _nothing_leave
        relax = _relax_nothing
    if relax is _relax_sleep:
        import time

        _sleep0 = getattr(time, "sleep_ms", None) or time.sleep
    return KIND


configure()
