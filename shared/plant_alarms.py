# plant_alarms.py: ISA-18.2-style alarm bank: limits with deadband, on/off delays, ack and shelving; fixed memory.
"""An AlarmBank holds N alarm points in arrays allocated by the constructor. A point compares one signal
with a limit (HI, HIHI trip above it; LO, LOLO below it) or watches a quality flag (BAD: reading
missing). The condition must hold for `on_delay` consecutive samples to become active, and must be gone
past the deadband (HI: value <= limit - deadband) for `off_delay` samples to clear, so a noisy signal
near its limit does not chatter. The annunciation follows ISA-18.2:

    NORMAL    --active-->  RAISED (active, unacknowledged)  --ack-->    ACKED
    RAISED    --clear-->   RTN_UNACK (returned to normal, unacknowledged)
    ACKED     --clear-->   NORMAL;     RTN_UNACK --ack--> NORMAL;     RTN_UNACK --active--> RAISED
    any       --shelve-->  SHELVED (condition still tracked, nothing annunciated)
    SHELVED   --unshelve-> RAISED if the condition is active, else NORMAL

Every method returns an event code `verb << 3 | new_state`, or -1 when nothing changed; the caller
decides what to log. Nothing allocates after construction.
"""
from array import array

from shared.compat import const

# levels
HI = const(0)
HIHI = const(1)
LO = const(2)
LOLO = const(3)
BAD = const(4)
UNUSED = const(255)
LEVELS = (b"HI", b"HIHI", b"LO", b"LOLO", b"BAD")

# ISA-18.2 states; the names are the last token of an alarm line
NORMAL = const(0)
UNACK = const(1)
ACKED = const(2)
RTN_UNACK = const(3)
SHELVED = const(4)
STATES = (b"NORMAL", b"RAISED", b"ACKED", b"RTN_UNACK", b"SHELVED")

# verbs (first token of an alarm line)
ALARM = const(0)
ACK = const(1)
CLEAR = const(2)
SHELVE = const(3)
UNSHELVE = const(4)
VERBS = (b"ALARM", b"ACK", b"CLEAR", b"SHELVE", b"UNSHELVE")

PRIORITIES = (b"", b"low", b"medium", b"high", b"critical")  # prio=1..4
LIMIT_MAX = const(1 << 29)


class AlarmError(ValueError):
    pass


class AlarmBank:
    """`n` alarm points; configure() each, then evaluate() every sample, ack()/shelve()/unshelve() on demand."""

    def __init__(self, n):
        if type(n) is not int or not 0 < n <= 4096:
            raise AlarmError("alarm bank size must be an int in 1..4096, got %r" % (n,))
        self.n = n
        self.level = bytearray(b"\xff" * n)
        self.prio = bytearray(n)
        self.on_delay = bytearray(n)
        self.off_delay = bytearray(n)
        self.count = bytearray(n)  # consecutive samples voting for a change of `active`
        self.active = bytearray(n)  # the condition (after delays and deadband)
        self.state = bytearray(n)  # ISA-18.2 annunciation state
        self.limit = array("i", bytearray(4 * n))
        self.deadband = array("i", bytearray(4 * n))

    def configure(self, p, level, limit, deadband, on_delay, off_delay, prio):
        if type(p) is not int or not 0 <= p < self.n:
            raise AlarmError("alarm point %r out of range 0..%d" % (p, self.n - 1))
        if level not in (HI, HIHI, LO, LOLO, BAD):
            raise AlarmError("alarm level must be one of HI, HIHI, LO, LOLO, BAD (0..4), got %r" % (level,))
        for name, v, lo, hi in (("limit", limit, -LIMIT_MAX, LIMIT_MAX), ("deadband", deadband, 0, LIMIT_MAX),
                                ("on_delay", on_delay, 0, 255), ("off_delay", off_delay, 0, 255),
                                ("prio", prio, 1, 4)):
            if type(v) is not int or not lo <= v <= hi:
                raise AlarmError("alarm %s must be an int in %d..%d, got %r" % (name, lo, hi, v))
        self.level[p] = level
        self.limit[p] = limit
        self.deadband[p] = deadband
        self.on_delay[p] = on_delay
        self.off_delay[p] = off_delay
        self.prio[p] = prio
        self.count[p] = 0
        self.active[p] = 0
        self.state[p] = NORMAL

    def evaluate(self, p, value, enabled):
        """One sample of point p. BAD points take value = 1 when the reading is missing. A disabled point
        (state-based alarming: e.g. low flow while the pump is stopped) clears at once."""
        lv = self.level[p]
        if lv == UNUSED:
            return -1
        act = self.active[p]
        cond = 0
        if enabled:
            if lv == BAD:
                cond = 1 if value else 0
            elif lv <= HIHI:
                cond = 1 if value > self.limit[p] - (self.deadband[p] if act else 0) else 0
            else:
                cond = 1 if value < self.limit[p] + (self.deadband[p] if act else 0) else 0
        if cond == act:
            self.count[p] = 0
            return -1
        if enabled:
            c = self.count[p] + 1
            if c < (self.on_delay[p] if cond else self.off_delay[p]):
                self.count[p] = c
                return -1
        self.count[p] = 0
        self.active[p] = cond
        st = self.state[p]
        if st == SHELVED:
            return -1
        if cond:  # from NORMAL or RTN_UNACK
            self.state[p] = UNACK
            return ALARM << 3 | UNACK
        if st == UNACK:
            self.state[p] = RTN_UNACK
            return CLEAR << 3 | RTN_UNACK
        self.state[p] = NORMAL
        return CLEAR << 3 | NORMAL

    def ack(self, p):
        st = self.state[p]
        if st == UNACK:
            self.state[p] = ACKED
            return ACK << 3 | ACKED
        if st == RTN_UNACK:
            self.state[p] = NORMAL
            return ACK << 3 | NORMAL
        return -1

    def shelve(self, p):
        if self.state[p] == SHELVED or self.level[p] == UNUSED:
            return -1
        self.state[p] = SHELVED
        return SHELVE << 3 | SHELVED

    def unshelve(self, p):
        if self.state[p] != SHELVED:
            return -1
        if self.active[p]:
            self.state[p] = UNACK
            return UNSHELVE << 3 | UNACK
        self.state[p] = NORMAL
        return UNSHELVE << 3 | NORMAL
