# test_seqlock.py: the versioned (CAS) store vs a reference, under real threads, at the wrap, allocation-free.
import sys
import time
from array import array

import testkit
from shared import irqlock, seqlock

try:
    import _thread
except ImportError:
    _thread = None
if testkit.IS_CP:  # CircuitPython's boards have no threads (irqlock is cooperative there): its unix port's
    _thread = None  # _thread is not what a node runs on

try:
    import micropython
except ImportError:
    micropython = None

V = seqlock.Versioned
WRAP = seqlock.VERSION_WRAP


class RefStore:
    """The obvious semantics: per slot a version (+2 per write, mod wrap) and a list of fields."""

    def __init__(self, slots, width=1, wrap=WRAP):
        self.wrap = wrap
        self.ver = [0] * slots
        self.val = [[0] * width for _ in range(slots)]

    def read(self, slot):
        return self.ver[slot], list(self.val[slot])

    def cas(self, slot, expected, record):
        if self.ver[slot] != expected:
            return False
        self.write(slot, record)
        return True

    def write(self, slot, record):
        self.val[slot] = list(record)
        self.ver[slot] = (self.ver[slot] + 2) % self.wrap
        return self.ver[slot]


def _ms():
    if hasattr(time, "ticks_ms"):
        return time.ticks_ms()
    return int(time.monotonic() * 1000)


def _since(t0):
    if hasattr(time, "ticks_diff"):
        return time.ticks_diff(time.ticks_ms(), t0)
    return _ms() - t0


def _sleep_ms(n):
    if hasattr(time, "sleep_ms"):
        time.sleep_ms(n)
    else:
        time.sleep(n / 1000)


def _fmt(e):
    try:
        import io

        buf = io.StringIO()
        if hasattr(sys, "print_exception"):
            sys.print_exception(e, buf)
        else:
            import traceback

            traceback.print_exception(type(e), e, e.__traceback__, file=buf)
        return buf.getvalue()
    except Exception:
        return repr(e)


def run_threads(workers, budget_ms):
    """Run worker(i) for each worker on its own thread; wait for all (MicroPython's _thread has no join).

    Any exception in a worker fails the calling test, with its traceback; so does a worker still running
    after budget_ms."""
    if _thread is None:
        testkit.skip("no threads on CircuitPython's boards" if testkit.IS_CP else "no _thread on this interpreter")
    guard = _thread.allocate_lock()
    done = [0]
    started = [0]
    go = [0]
    errors = []

    def wrap(fn, i):
        guard.acquire()
        started[0] += 1
        guard.release()
        while not go[0]:  # a start gate, so that the workers really overlap
            _sleep_ms(1)
        try:
            fn(i)
        except BaseException as e:  # noqa: B036 - a failing thread must fail the test
            text = _fmt(e)
            guard.acquire()
            errors.append("thread %d: %s" % (i, text))
            guard.release()
        guard.acquire()
        done[0] += 1
        guard.release()

    for i in range(len(workers)):
        _thread.start_new_thread(wrap, (workers[i], i))
    t0 = _ms()
    while started[0] < len(workers) and _since(t0) < budget_ms:
        _sleep_ms(1)
    go[0] = 1
    t0 = _ms()
    while done[0] < len(workers):
        if _since(t0) > budget_ms:
            raise AssertionError("%d of %d threads still running after %d ms"
                                 % (len(workers) - done[0], len(workers), budget_ms))
        _sleep_ms(5)
    assert not errors, "\n".join(errors)
    return _since(t0)


class _Switchy:
    """On CPython, switch threads every 20 us during a stress test so that threads really interleave."""

    def __enter__(self):
        self.old = sys.getswitchinterval() if hasattr(sys, "getswitchinterval") else None
        if self.old is not None:
            sys.setswitchinterval(2e-5)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            sys.setswitchinterval(self.old)
        return False


# ---------------------------------------------------------------- semantics


def test_cas_succeeds_only_on_the_current_version():
    s = V(3)
    assert s.version(0) == 0 and s.read(0) == 0
    assert s.cas(0, 0, 17) is True
    assert s.version(0) == 2 and s.read(0) == 17
    assert s.cas(0, 0, 99) is False, "stale version must fail"
    assert s.read(0) == 17 and s.version(0) == 2
    assert s.cas(0, 4, 99) is False, "future version must fail"
    assert s.cas(0, 2, -5) is True and s.read(0) == -5 and s.version(0) == 4
    assert s.write(1, 8) == 2 and s.read(1) == 8
    assert s.cas(1, 0, 1) is False and s.read(1) == 8
    assert s.read(2) == 0 and s.version(2) == 0, "other slots untouched"
    buf = [7]
    assert s.read_into(0, buf) == 4 and buf == [-5]
    assert s.cas(0, 4, seqlock.VALUE_MAX) is True
    assert s.read(0) == seqlock.VALUE_MAX
    assert s.cas(0, 6, seqlock.VALUE_MIN) is True and s.read(0) == seqlock.VALUE_MIN


def test_records_are_written_and_read_whole():
    s = V(2, width=4)
    out = array("i", [0, 0, 0, 0, 0])  # longer than the record: only the first 4 are touched
    out[4] = 55
    assert s.cas_from(1, 0, (1, 2, 3, 4)) is True
    assert s.read_into(1, out) == 2 and list(out) == [1, 2, 3, 4, 55]
    assert s.cas_from(1, 0, [9, 9, 9, 9]) is False
    assert s.write_from(1, array("i", [5, 6, 7, 8])) == 4
    lst = [0] * 4
    assert s.read_into(1, lst) == 4 and lst == [5, 6, 7, 8]
    assert s.read_into(0, lst) == 0 and lst == [0, 0, 0, 0]


def test_random_sequences_match_the_reference():
    for slots, width, wrap, seed in ((1, 1, 4, 1), (3, 1, 8, 2), (4, 3, 6, 3), (5, 2, WRAP, 4)):
        rng = testkit.Rng(seed)
        s = V(slots, width=width, wrap=wrap)
        ref = RefStore(slots, width, wrap)
        buf = [0] * width
        for step in range(1500):
            k = rng.below(slots)
            rec = [rng.below(2001) - 1000 for _ in range(width)]
            op = rng.below(5)
            where = "slots=%d width=%d wrap=%d step %d op %d" % (slots, width, wrap, step, op)
            if op == 0:  # CAS with the version a read returned
                v = s.read_into(k, buf)
                assert (v, buf) == ref.read(k), where
                got = s.cas_from(k, v, rec) if width > 1 else s.cas(k, v, rec[0])
                assert got is True and ref.cas(k, v, rec), where
            elif op == 1:  # CAS with any even version: succeeds exactly when it is the current one
                e = 2 * rng.below(wrap // 2)
                got = s.cas_from(k, e, rec) if width > 1 else s.cas(k, e, rec[0])
                assert got == ref.cas(k, e, rec), where
            elif op == 2:
                got = s.write_from(k, rec) if width > 1 else s.write(k, rec[0])
                assert got == ref.write(k, rec), where
            elif op == 3:
                assert s.version(k) == ref.ver[k], where
            else:
                v = s.read_into(k, buf)
                assert (v, buf) == ref.read(k), where
                if width == 1:
                    assert s.read(k) == ref.val[k][0], where
        for k in range(slots):
            assert s.read_into(k, buf) == ref.ver[k] and buf == ref.val[k]


# ---------------------------------------------------------------- versions wrap


def test_versions_advance_and_wrap_in_a_bounded_even_range():
    s = V(1, wrap=8)
    seen = []
    for i in range(9):
        seen.append(s.write(0, i))
    assert seen == [2, 4, 6, 0, 2, 4, 6, 0, 2], seen
    assert s.cas(0, 2, 100) is True and s.version(0) == 4
    # The default range tops out below 2**30 (a small int on the 32-bit boards, no allocation).
    s = V(2, width=2)
    s._ver[0] = WRAP - 2
    s._ver[1] = WRAP - 2
    assert s.version(0) == WRAP - 2
    assert s.cas_from(0, WRAP - 2, [1, 2]) is True and s.version(0) == 0
    assert s.write_from(1, [3, 4]) == 0
    assert s.cas_from(0, WRAP - 2, [5, 6]) is False, "pre-wrap version must not pass after the wrap"
    assert WRAP <= 1 << 30 and WRAP - 1 < 1 << 30


def test_versions_at_the_top_of_the_range_do_not_allocate():
    s = V(1, width=3)
    rec = array("i", [1, 2, 3])
    out = array("i", [0, 0, 0])

    def go(n):
        for i in range(n):
            s._ver[0] = WRAP - 2
            if s.write_from(0, rec) != 0:
                return 1
            s._ver[0] = WRAP - 2
            if not s.cas_from(0, WRAP - 2, rec) or s.read_into(0, out) != 0:
                return 2
        return 0

    assert testkit.run_locked(go, 50) == 0


class _Hooked:
    """Stands in for the store's value array: runs hook() when a reader copies field `at` of the slot."""

    def __init__(self, arr, at, hook):
        self.arr = arr
        self.at = at
        self.hook = hook
        self.armed = 0

    def __len__(self):
        return len(self.arr)

    def __getitem__(self, i):
        if self.armed and i == self.at:
            self.armed = 0
            self.hook()
        return self.arr[i]

    def __setitem__(self, i, v):
        self.arr[i] = v


def _torn_read_setup(wrap, start_version, writes):
    """A reader copies slot 0 (width 3); after it took field 0, `writes` writes land. Returns what it saw."""
    s = V(1, width=3, wrap=wrap)
    s._ver[0] = start_version
    n = [0]

    def hook():
        for _ in range(writes):
            n[0] += 1
            s.write_from(0, [n[0], n[0], n[0]])

    s._val = _Hooked(s._val, 1, hook)
    s._val.armed = 1
    out = [9, 9, 9]
    v = s.read_into(0, out)
    return v, out, n[0]


def test_a_write_during_a_read_is_detected_across_the_wrap():
    # Version WRAP-2 -> the write lands at version 0 mid-copy: the reader must retry, not accept.
    v, out, n = _torn_read_setup(WRAP, WRAP - 2, 1)
    assert out == [1, 1, 1] and v == 0, (v, out)
    v, out, n = _torn_read_setup(WRAP, WRAP - 4, 2)  # two writes straddling the wrap
    assert out == [2, 2, 2] and v == 0, (v, out)
    v, out, n = _torn_read_setup(8, 6, 3)
    assert out == [3, 3, 3] and v == 4, (v, out)


def test_the_wrap_bound_is_exactly_half_the_wrap_in_writes():
    # The module's argument: a torn copy passes only if a multiple of wrap/2 writes complete during
    # it. With a tiny wrap of 4 that is 2 writes, and the reader is fooled; 1 or 3 are caught.
    v, out, n = _torn_read_setup(4, 2, 2)
    assert out == [0, 2, 2] and v == 2, "expected the (documented) ABA tear, got %r" % (out,)
    for writes in (1, 3):
        v, out, n = _torn_read_setup(4, 2, writes)
        assert out == [writes] * 3, (writes, out)
    # The default wrap needs 2**29 writes inside one copy: the same two writes are caught.
    v, out, n = _torn_read_setup(WRAP, 2, 2)
    assert out == [2, 2, 2] and v == 6


# ---------------------------------------------------------------- stalled writers, bad input


def test_a_stalled_writer_gives_busy_not_a_hang():
    s = V(2, timeout_ms=40)
    s._ver[1] = 5  # a writer died mid-write
    t0 = _ms()
    e = testkit.raises(seqlock.Busy, s.read, 1)
    took = _since(t0)
    assert "slot 1" in str(e) and "40 ms" in str(e), str(e)
    assert 30 <= took < 2000, took
    testkit.raises(seqlock.Busy, s.version, 1)
    testkit.raises(seqlock.Busy, s.read_into, 1, [0])
    assert s.cas(1, 4, 1) is False and s.cas(1, 6, 1) is False
    e = testkit.raises(seqlock.VersionedError, s.write, 1, 3)
    assert "single-writer" in str(e)
    assert s.read(0) == 0 and s.write(0, 1) == 2, "other slots unaffected"


def test_a_reader_waits_out_a_slow_writer():
    if _thread is None:
        testkit.skip("no threads on CircuitPython's boards" if testkit.IS_CP else "no _thread")
    s = V(1, width=2, timeout_ms=3000)
    s.write_from(0, [1, 1])

    def slow_writer(i):
        s._ver[0] = 3
        s._val[0] = 2
        _sleep_ms(200)  # readers meanwhile spin, relax and watch the clock
        s._val[1] = 2
        s._ver[0] = 4

    out = array("i", [0, 0])
    got = [0, 0, 0]

    def reader(i):
        while s._ver[0] == 2:
            pass
        got[2] = s._ver[0]  # 3: the reader arrives while the write is in progress
        got[0] = testkit.run_locked(read_it, out)  # the wait (spin, relax, clock) allocates nothing
        got[1] = out[0] * 10 + out[1]

    def read_it(buf):
        return s.read_into(0, buf)

    run_threads([reader, slow_writer], 10000)
    assert got == [4, 22, 3], got


def test_bad_input_gives_clear_errors():
    E = seqlock.VersionedError
    assert issubclass(E, ValueError)
    s = V(3)
    r = V(2, width=3)
    for bad in (-1, 3, 1.0, "0", None, True):
        e = testkit.raises(E, s.read, bad)
        assert "slot" in str(e), str(e)
        testkit.raises(E, s.cas, bad, 0, 1)
        testkit.raises(E, s.write, bad, 1)
        testkit.raises(E, s.version, bad)
        testkit.raises(E, r.read_into, bad, [0, 0, 0])
    for bad in (1.5, "7", None, True, 1 << 30, -(1 << 30) - 1, 1 << 70):
        e = testkit.raises(E, s.cas, 0, 0, bad)
        assert "value" in str(e), str(e)
        testkit.raises(E, s.write, 0, bad)
        e = testkit.raises(E, r.cas_from, 0, 0, [0, bad, 0])
        assert "record field 1" in str(e), str(e)
        testkit.raises(E, r.write_from, 0, [0, 0, bad])
    assert s.version(0) == 0 and r.version(0) == 0, "a rejected write must leave no trace"
    for bad in (1, -2, WRAP, 2.0, None, "0"):
        e = testkit.raises(E, s.cas, 0, bad, 1)
        assert "expected version" in str(e), str(e)
    e = testkit.raises(E, V(1, wrap=8).cas, 0, 8, 1)
    assert "0..6" in str(e), str(e)
    for bad in ([1, 2], [1, 2, 3, 4], 5, None, "ab"):
        e = testkit.raises(E, r.cas_from, 0, 0, bad)
        assert "record" in str(e), str(e)
        testkit.raises(E, r.write_from, 0, bad)
    e = testkit.raises(E, r.read_into, 0, [0, 0])
    assert "at least 3" in str(e), str(e)
    e = testkit.raises(E, r.read_into, 0, (0, 0, 0))
    assert "destination" in str(e), str(e)
    e = testkit.raises(E, r.read_into, 0, 7)
    e = testkit.raises(E, r.read, 0)
    assert "read_into" in str(e), str(e)
    testkit.raises(E, r.cas, 0, 0, 1)
    testkit.raises(E, r.write, 0, 1)
    for args in ((0,), (-1,), (1.0,), (2, 0), (2, 1, 7), (2, 1, 2), (2, 1, WRAP + 2), (2, 1, 8, -1), (1 << 21,)):
        testkit.raises(E, V, *args)
    assert r.version(0) == 0 and r.version(1) == 0


# ---------------------------------------------------------------- allocation and the critical section


def _hot_paths(s):
    """One pass over every hot path of a width-1 store `s` and a width-4 store (built before)."""
    r = _REC_STORE
    rec = _REC
    out = _OUT
    bad = 0
    for i in range(20):
        v = s.version(0)
        if not s.cas(0, v, i) or s.cas(0, v, i):  # success, then a stale failure
            bad += 1
        if s.read(0) != i or s.write(1, -i) & 1:
            bad += 1
        v = r.read_into(0, out)
        rec[0] = i
        if not r.cas_from(0, v, rec) or r.cas_from(0, v, rec):
            bad += 1
        r.write_from(1, rec)
        if r.read_into(1, out) & 1 or out[0] != i:
            bad += 1
    return bad


_REC_STORE = V(2, width=4)
_REC = array("i", [0, 1, 2, 3])
_OUT = array("i", [0, 0, 0, 0])


def test_hot_paths_allocate_nothing():
    s = V(2)
    assert testkit.run_locked(_hot_paths, s) == 0


class FakeMachine:
    """A `machine` with disable_irq/enable_irq; optionally locks the heap while IRQs are 'off'."""

    def __init__(self, lock_heap, log=None):
        self.lock_heap = lock_heap
        self.log = log
        self.depth = 0
        self.bad = 0

    def disable_irq(self):
        if self.lock_heap:
            micropython.heap_lock()
        if self.log is not None:
            self.log.append("irq off")
        self.depth += 1
        return 1000 + self.depth

    def enable_irq(self, state):
        if state != 1000 + self.depth:
            self.bad += 1
        self.depth -= 1
        if self.log is not None:
            self.log.append("irq on")
        if self.lock_heap:
            micropython.heap_unlock()


class FakeThread:
    def __init__(self, log, machine):
        self.log = log
        self.machine = machine

    def allocate_lock(self):
        return FakeLock(self.log, self.machine)


class FakeLock:
    def __init__(self, log, machine):
        self.log = log
        self.machine = machine

    def acquire(self):
        self.log.append("acquire (irq depth %d)" % self.machine.depth)
        return True

    def release(self):
        self.log.append("release (irq depth %d)" % self.machine.depth)


def test_the_critical_section_chosen_here():
    want = "lock" if _thread else "none"  # CPython: threading.Lock; unix port: a _thread lock, no IRQs
    assert irqlock.KIND == want, irqlock.KIND
    st = irqlock.enter()
    irqlock.leave(st)
    assert testkit.run_locked(lambda _: irqlock.leave(irqlock.enter()) or irqlock.unmask(irqlock.mask()) or 1) == 1


def test_irqlock_section_order_with_a_fake_machine():
    log = []
    m = FakeMachine(False, log)
    try:
        assert irqlock.configure(machine=m, thread=FakeThread(log, m)) == "irq+lock"
        s = V(1)
        assert s.cas(0, 0, 5) is True
        assert log == ["irq off", "acquire (irq depth 1)", "release (irq depth 1)", "irq on"], log
        del log[:]
        assert s.cas(0, 0, 6) is False and log == [], "a stale CAS fails before taking the section"
        assert s.write(0, 7) == 4
        assert log == ["irq off", "irq on"], "write() masks IRQs but takes no lock: %r" % log
        del log[:]
        assert s.read(0) == 7 and log == [], "readers take nothing"
        assert m.bad == 0 and m.depth == 0
        assert irqlock.configure(machine=m, thread=None) == "irq"
        assert s.cas(0, 4, 8) is True and log == ["irq off", "irq on"], log
        assert irqlock.configure(machine=None, thread=None) == "none"  # CircuitPython: cooperative
        del log[:]
        assert s.cas(0, 6, 9) is True and s.write(0, 10) == 10 and log == []
        assert irqlock.configure(machine=object(), thread=None) == "none", "a machine without disable_irq"
    finally:
        irqlock.configure()
    assert irqlock.KIND == ("lock" if _thread else "none")


def test_irqlock_section_allocates_nothing_with_irqs_that_lock_the_heap():
    # On MicroPython: disable_irq() locks the heap and enable_irq() unlocks it, so anything the
    # section (including its real _thread lock) allocated would raise MemoryError.
    if not testkit.IS_MP:
        testkit.skip("micropython.heap_lock is MicroPython's")
    if testkit.IS_CP:
        testkit.skip("CircuitPython has no user IRQs (no machine.disable_irq): its section is cooperative")
    m = FakeMachine(True)
    try:
        assert irqlock.configure(machine=m) == "irq+lock"
        s = V(2)
        try:
            bad = _hot_paths(s)
            for _ in range(10):
                st = irqlock.enter()
                irqlock.leave(st)
                st = irqlock.mask()
                irqlock.unmask(st)
        except MemoryError:
            raise AssertionError("the critical section allocated with IRQs off")
        assert bad == 0 and m.bad == 0 and m.depth == 0
        assert testkit.run_locked(_hot_paths, s) == 0
        assert irqlock.configure(machine=m, thread=None) == "irq"
        assert testkit.run_locked(_hot_paths, s) == 0
        assert irqlock.configure(machine=None, thread=None) == "none"
        assert testkit.run_locked(_hot_paths, s) == 0
    finally:
        irqlock.configure()


# ---------------------------------------------------------------- real threads


# The stress workers are methods of small classes, not closures: on MicroPython, calling a closure
# with more than 5 closed-over variables and arguments allocates its argument array on the heap.
# Each worker runs its whole loop under testkit.run_locked: on MicroPython, the reads, the CAS retry
# loops and the waits under contention allocate nothing. They run for STRESS_MS, checking the clock
# (ticks_ms, which allocates nothing) every 64 iterations.
STRESS_MS = 1200


class _Stress:
    def __init__(self, threads):
        self.t0 = _ms()
        self.stats = array("i", [0] * (3 * threads))

    def running(self, n):
        return n & 63 or _since(self.t0) < STRESS_MS

    def start(self):
        self.t0 = _ms()


class _Counters(_Stress):
    """Threads increment shared counters through CAS retry loops."""

    def __init__(self, threads, counters):
        _Stress.__init__(self, threads)
        self.s = V(counters)
        self.counters = counters
        self.bufs = [array("i", [0]) for _ in range(threads)]

    def worker(self, i):
        testkit.run_locked(self.count, i)

    def count(self, i):
        s = self.s
        buf = self.bufs[i]
        k = i % self.counters
        ok = 0
        fails = 0
        while self.running(ok):
            v = s.read_into(k, buf)
            if s.cas(k, v, buf[0] + 1):
                ok += 1
                k = (k + 1) % self.counters
            else:
                fails += 1
        self.stats[3 * i] = ok
        self.stats[3 * i + 1] = fails


def test_cas_counters_lose_no_update_under_threads():
    threads = 4
    c = _Counters(threads, 2)
    c.start()
    with _Switchy():
        took = run_threads([c.worker] * threads, STRESS_MS + 20000)
    s = c.s
    total = 0
    for k in range(c.counters):
        total += s.read(k)
        assert s.version(k) == 2 * s.read(k), "one version step per successful CAS: %d %d" % (s.version(k), s.read(k))
    done = sum(c.stats[3 * i] for i in range(threads))
    fails = sum(c.stats[3 * i + 1] for i in range(threads))
    assert total == done, "lost updates: %d of %d (%d failed CAS, %d ms)" % (done - total, done, fails, took)
    assert fails > 0, "no CAS ever failed: the threads never contended, the test proved nothing"
    print("cas stress: %d increments by %d threads, %d CAS retries, %d ms" % (total, threads, fails, took))


class _Records(_Stress):
    """Slot 0: records of equal fields, bumped by CAS writers; slot 1: records summing to 0, written by
    one plain (single-writer) writer. Seqlock readers check both invariants on every read; a naive
    reader copies the same records without the version check, as a control that tearing is possible."""

    def __init__(self, width, cas_writers, readers):
        threads = cas_writers + 2 + readers
        _Stress.__init__(self, threads)
        self.s = V(2, width=width)
        self.width = width
        self.cas_writers = cas_writers
        self.readers = readers
        self.bufs = [array("i", [0] * width) for _ in range(threads)]
        self.writing = array("i", [cas_writers + 1])  # writers still running (guarded by self.guard)
        self.guard = _thread.allocate_lock() if _thread else None

    def worker(self, i):
        cw = self.cas_writers
        if i < cw:
            testkit.run_locked(self.cas_write, i)
        elif i == cw:
            testkit.run_locked(self.plain_write, i)
        elif i == cw + 1:
            testkit.run_locked(self.naive_read, i)
        else:
            testkit.run_locked(self.read, i)

    def writer_done(self):
        self.guard.acquire()
        self.writing[0] -= 1
        self.guard.release()

    def cas_write(self, i):
        s = self.s
        rec = self.bufs[i]
        n = fails = 0
        while self.running(n):
            v = s.read_into(0, rec)
            x = rec[0] + 1
            for j in range(self.width):
                rec[j] = x
            if s.cas_from(0, v, rec):
                n += 1
            else:
                fails += 1
        self.stats[3 * i] = n
        self.stats[3 * i + 1] = fails
        self.writer_done()

    def plain_write(self, i):
        rec = self.bufs[i]
        x = 0
        while self.running(x):
            x += 1
            for j in range(0, self.width, 2):
                rec[j] = x + j
                rec[j + 1] = -(x + j)
            self.s.write_from(1, rec)
        self.stats[3 * i] = x
        self.writer_done()

    def torn(self, rec):
        w = self.width
        x = rec[0]
        for j in range(w):
            if rec[j] != x:
                return 1
        return 0

    def read(self, i):
        s = self.s
        w = self.width
        rec = self.bufs[i]
        reads = torn = changes = 0
        last0 = last1 = 0
        while reads < 200 or self.writing[0]:
            s.read_into(0, rec)
            torn += self.torn(rec)
            if rec[0] != last0:
                changes += 1
                last0 = rec[0]
            s.read_into(1, rec)
            t = 0
            for j in range(w):
                t += rec[j]
            if t != 0:
                torn += 1
            if rec[0] != last1:
                changes += 1
                last1 = rec[0]
            reads += 2
        self.stats[3 * i] = reads
        self.stats[3 * i + 1] = torn
        self.stats[3 * i + 2] = changes

    def naive_read(self, i):
        val = self.s._val  # the raw values, no version check
        rec = self.bufs[i]
        reads = torn = 0
        while self.writing[0]:
            for j in range(self.width):
                rec[j] = val[j]
            torn += self.torn(rec)
            reads += 1
        self.stats[3 * i] = reads
        self.stats[3 * i + 1] = torn


def test_records_are_never_torn_under_threads():
    width = 8
    cw = 2
    readers = 2
    t = _Records(width, cw, readers)
    t.start()
    with _Switchy():
        took = run_threads([t.worker] * (cw + 2 + readers), STRESS_MS + 20000)
    s = t.s
    st = t.stats
    cas_writes = sum(st[3 * i] for i in range(cw))
    cas_fails = sum(st[3 * i + 1] for i in range(cw))
    plain_writes = st[3 * cw]
    got = array("i", [0] * width)
    assert s.read_into(0, got) == (2 * cas_writes) % WRAP and list(got) == [cas_writes] * width, (list(got), cas_writes)
    assert s.read_into(1, got) == (2 * plain_writes) % WRAP and got[0] == plain_writes
    first = cw + 2
    reads = sum(st[3 * i] for i in range(first, first + readers))
    torn = sum(st[3 * i + 1] for i in range(first, first + readers))
    changes = sum(st[3 * i + 2] for i in range(first, first + readers))
    naive_reads, naive_torn = st[3 * (cw + 1)], st[3 * (cw + 1) + 1]
    assert torn == 0, "%d torn records in %d reads" % (torn, reads)
    assert changes >= 20, "the reads hardly overlapped the writes (%d changes seen)" % changes
    print("torn-read stress: %d seqlock reads (%d changes seen, 0 torn); naive reader: %d of %d torn; "
          "%d CAS writes (%d retries), %d plain writes; %d ms"
          % (reads, changes, naive_torn, naive_reads, cas_writes, cas_fails, plain_writes, took))
