# seqlock.py: fixed slots of (version, record) with seqlock reads and compare-and-set writes; no allocation.
"""A versioned key/value store for data shared between IRQ handlers, threads and cores (docs/NODE.md, The loop).

Layout. `slots` slots, each holding a version and a record of `width` ints (width 1: one value, e.g.
a sensor reading in fixed point; width N: a record such as (reading, timestamp, status) written and
read as a whole). Everything lives in two preallocated `array('i')`: versions[slots] and
values[slots * width]. Values are signed ints in VALUE_MIN..VALUE_MAX (-2**30 .. 2**30-1): that is
MicroPython's small-int range on the 32-bit boards, so reading a value never allocates there.

Versions. Even = stable, odd = a write is in progress. A write turns version v into v+1 (odd), stores
the record, then stores v+2, wrapped to 0 at `wrap` (default 2**30), so every version fits a small int
on the boards (the largest stored value is the odd wrap-1) and never grows without bound.

Readers (read, read_into, version) take no lock: the seqlock pattern reads the version (odd: retry),
copies the record, re-reads the version and retries if it changed. After a few quick retries they call
irqlock.relax() between attempts, and after `timeout_ms` without a stable snapshot they raise Busy
(a writer that keeps rewriting the slot faster than a record can be copied, or a writer that died
mid-write). Readers never block writers.

Writers. cas(slot, expected, value) / cas_from(slot, expected, src) store only if the slot's version
is still `expected` (the version a read returned), inside irqlock.enter()/leave(); they return False
otherwise. A retry loop: `v = s.read_into(k, buf)`, compute, `s.cas(k, v, new)`, repeat until True:
no update is lost (read() then version() is not a consistent pair: use read_into() for that).
write(slot, value) / write_from(slot, src) are for single-writer slots, the only kind an IRQ handler
may write: no lock, only irqlock.mask() (IRQs off on this core, so no handler on this core can see
a half-written record), and safe to call inside a hard IRQ handler. A handler that needs a CAS defers
it with micropython.schedule (cas() takes a lock, handlers never do). Mixing write() with cas() on
one slot, or two writers of one single-writer slot, is a caller's bug (a write that finds an odd
version raises VersionedError when it can see it).

Why a wrap cannot make a torn read look valid. A reader accepts a copy only if the version it read
before copying is even and equal to the version it reads after. The writers move a slot's version
through the even values 0, 2, ..., wrap-2, 0, ... one step per completed write, so the version after
the copy equals the one before only if no write touched the slot during the copy, or exactly a
multiple of wrap/2 writes completed during it (and none is in progress, or the version would be odd).
With the default wrap that is 2**29 complete writes to one slot while one reader copies `width`
ints. A write takes ~2.7 us on this host's unix port (measured) and, by estimate, tens of us on the
boards, so 2**29 of them take over 20 minutes here and hours on a board, against a copy of a few
microseconds. On the boards a reader is only ever interrupted by IRQ handlers, which are short; on a
host an OS would have to deschedule a reader that long mid-copy while one slot is rewritten
continuously. The same bound covers cas(): a stale `expected` passes only after exactly a multiple of
2**29 writes. The tests show both the detection and, with a tiny wrap, that the bound is exactly
wrap/2 writes.

Allocation. read, read_into, version, cas, cas_from, write and write_from allocate nothing on
MicroPython (tests run them under micropython.heap_lock()); only their error paths allocate.
"""
from array import array

from shared import irqlock
from shared.compat import const, ticks_diff, ticks_ms  # only the slow path of a contended read uses the clock


VALUE_MIN = const(-1073741824)  # -2**30
VALUE_MAX = const(1073741823)  # 2**30 - 1
VERSION_WRAP = const(1073741824)  # 2**30: versions are even numbers in 0 .. 2**30-2
TIMEOUT_MS = const(1000)
_SPIN = const(32)  # quick retries before a reader relaxes and watches the clock


class VersionedError(ValueError):
    """Bad input: slot out of range, a value that is not an int in range, a record of the wrong size."""


class Busy(RuntimeError):
    """A reader found no stable snapshot of a slot within timeout_ms."""


def _int_arg(name, v, lo, hi):
    if type(v) is not int or v < lo or v > hi:
        raise VersionedError("%s must be an int in %d..%d, got %r" % (name, lo, hi, v))
    return v


class Versioned:
    """`slots` slots of (version, record of `width` ints), preallocated; see the module docstring."""

    def __init__(self, slots, width=1, wrap=VERSION_WRAP, timeout_ms=TIMEOUT_MS):
        self.slots = _int_arg("slots", slots, 1, 1 << 20)
        self.width = _int_arg("width", width, 1, 1 << 12)
        _int_arg("slots * width", slots * width, 1, 1 << 20)
        self.wrap = _int_arg("wrap", wrap, 4, VERSION_WRAP)
        if wrap & 1:
            raise VersionedError("wrap must be even, got %d" % wrap)
        self.timeout_ms = _int_arg("timeout_ms", timeout_ms, 0, 3600 * 1000)
        self._ver = array("i", [0] * slots)
        self._val = array("i", [0] * (slots * width))

    # -- checks (shared by the hot paths; they allocate only when they raise) --

    def _slot(self, slot):
        if type(slot) is not int or slot < 0 or slot >= self.slots:
            raise VersionedError("slot must be an int in 0..%d, got %r" % (self.slots - 1, slot))
        return slot

    def _value(self, value):
        if type(value) is not int or value < VALUE_MIN or value > VALUE_MAX:
            raise VersionedError("value must be an int in %d..%d, got %r" % (VALUE_MIN, VALUE_MAX, value))

    def _record(self, src, need_exact):
        w = self.width
        try:
            n = len(src)
        except TypeError:
            raise VersionedError("%s must be a sequence of %d ints, got %r"
                                 % ("record" if need_exact else "destination", w, src)) from None
        if need_exact:
            if n != w:
                raise VersionedError("record must hold %d ints, got %d" % (w, n))
            for i in range(w):
                x = src[i]
                if type(x) is not int or x < VALUE_MIN or x > VALUE_MAX:
                    raise VersionedError("record field %d must be an int in %d..%d, got %r"
                                         % (i, VALUE_MIN, VALUE_MAX, x))
        elif n < w:
            raise VersionedError("destination must hold at least %d ints, got %d" % (w, n))

    def _expected(self, expected):
        if type(expected) is not int or expected < 0 or expected >= self.wrap or expected & 1:
            raise VersionedError("expected version must be an even int in 0..%d, got %r" % (self.wrap - 2, expected))

    def _scalar(self):
        if self.width != 1:
            raise VersionedError("slots hold records of %d ints: use read_into/cas_from/write_from" % self.width)

    def _wait(self, slot, tries, t0):
        # Slow path of a read that keeps finding a write in progress: let the writer run, watch the clock.
        if tries == _SPIN:
            return ticks_ms()
        irqlock.relax()
        if ticks_diff(ticks_ms(), t0) > self.timeout_ms:
            raise Busy("slot %d: no stable snapshot within %d ms (writer stalled or starving readers)"
                       % (slot, self.timeout_ms))
        return t0

    # -- readers: lock-free seqlock --

    def read(self, slot):
        """The value of a width-1 slot as of its last completed write."""
        self._scalar()
        self._slot(slot)
        ver = self._ver
        val = self._val
        tries = 0
        t0 = 0
        while True:
            v = ver[slot]
            if not v & 1:
                x = val[slot]
                if ver[slot] == v:
                    return x
            tries += 1
            if tries >= _SPIN:
                t0 = self._wait(slot, tries, t0)

    def read_into(self, slot, dst):
        """Copy the slot's record into dst[0:width] (a list or array); return the version it had.

        That version is what cas()/cas_from() expect to update exactly this record."""
        self._slot(slot)
        self._record(dst, False)
        w = self.width
        base = slot * w
        ver = self._ver
        val = self._val
        tries = 0
        t0 = 0
        while True:
            v = ver[slot]
            if not v & 1:
                try:
                    for i in range(w):
                        dst[i] = val[base + i]
                except (TypeError, ValueError, OverflowError):
                    raise VersionedError("destination must be a list or array('i'), got %r" % (dst,)) from None
                if ver[slot] == v:
                    return v
            tries += 1
            if tries >= _SPIN:
                t0 = self._wait(slot, tries, t0)

    def version(self, slot):
        """The slot's current stable (even) version, waiting out a write in progress."""
        self._slot(slot)
        ver = self._ver
        tries = 0
        t0 = 0
        while True:
            v = ver[slot]
            if not v & 1:
                return v
            tries += 1
            if tries >= _SPIN:
                t0 = self._wait(slot, tries, t0)

    # -- writers --

    def _next(self, v):
        v += 2
        if v >= self.wrap:
            v = 0
        return v

    def cas(self, slot, expected, value):
        """Store value in a width-1 slot if its version is still `expected`; True if stored."""
        self._scalar()
        self._slot(slot)
        self._expected(expected)
        self._value(value)
        ver = self._ver
        if ver[slot] != expected:
            return False  # already moved on (or a write is in progress): fail without the lock
        s = irqlock.enter()
        try:
            if ver[slot] != expected:
                return False
            ver[slot] = expected + 1
            self._val[slot] = value
            ver[slot] = self._next(expected)
        finally:
            irqlock.leave(s)
        return True

    def cas_from(self, slot, expected, src):
        """Store the record src[0:width] if the slot's version is still `expected`; True if stored."""
        self._slot(slot)
        self._expected(expected)
        self._record(src, True)
        ver = self._ver
        if ver[slot] != expected:
            return False
        val = self._val
        base = slot * self.width
        s = irqlock.enter()
        try:
            if ver[slot] != expected:
                return False
            ver[slot] = expected + 1
            for i in range(self.width):
                val[base + i] = src[i]
            ver[slot] = self._next(expected)
        finally:
            irqlock.leave(s)
        return True

    def write(self, slot, value):
        """Single-writer store into a width-1 slot (IRQ-safe, no lock); returns the new version."""
        self._scalar()
        self._slot(slot)
        self._value(value)
        ver = self._ver
        s = irqlock.mask()
        try:
            v = ver[slot]
            if not v & 1:
                ver[slot] = v + 1
                self._val[slot] = value
                v = self._next(v)
                ver[slot] = v
        finally:
            irqlock.unmask(s)
        if v & 1:
            raise VersionedError("slot %d: another write is in progress; write() is for single-writer slots" % slot)
        return v

    def write_from(self, slot, src):
        """Single-writer store of the record src[0:width] (IRQ-safe, no lock); returns the new version."""
        self._slot(slot)
        self._record(src, True)
        ver = self._ver
        val = self._val
        base = slot * self.width
        s = irqlock.mask()
        try:
            v = ver[slot]
            if not v & 1:
                ver[slot] = v + 1
                for i in range(self.width):
                    val[base + i] = src[i]
                v = self._next(v)
                ver[slot] = v
        finally:
            irqlock.unmask(s)
        if v & 1:
            raise VersionedError("slot %d: another write is in progress; write_from() is for single-writer slots"
                                 % slot)
        return v
