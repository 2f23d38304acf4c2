# wallclock.py: UTC wall time on a board without a clock: set from the gateway, kept by the tick counter.
"""A board boots without the time of day (an RP2040's RTC starts at 2021-01-01); the gateway sends its
wall clock in its HELLO and TIME frames (docs/PROTOCOL.md 3.10). WallClock keeps the last one as a day
(days since 1970-01-01) and the milliseconds into it at a tick, and stamps log lines from there. Until
the first sync it runs from the board's own clock, read once at boot (the unix port's is the host's;
an RP2040 without a battery is at 2021-01-01: lines logged before the gateway was first heard carry
that date, while their LOG frames' wall time is back-dated correctly once it is: firmware/node.py).

Days and milliseconds stay separate small ints (a Unix time in seconds passes 2**30 and would be a heap
int on the boards); stamp() allocates nothing.
"""
import time

from shared.compat import const, ticks_diff
from shared.linefmt import date_into, put_stamp

MS_DAY = const(86400000)
DAYS_1970_2000 = const(10957)  # the link's wall days count from 2000-01-01


class WallClock:
    def __init__(self, now):
        self.synced = False
        self.ymd = [0, 0, 0]
        try:
            t = int(time.time())  # boot time only (a heap int on a board: once)
            if t < 946684800:  # a port whose epoch is 2000-01-01
                t += 946684800
            self.day = t // 86400
            self.ms = (t % 86400) * 1000
        except (AttributeError, OverflowError, ValueError):
            self.day = DAYS_1970_2000
            self.ms = 0
        self.tick = now

    def set(self, day2000, ms, tick):
        """The gateway's wall clock: `ms` into day `day2000` (days since 2000-01-01) at our tick."""
        self.day = day2000 + DAYS_1970_2000
        self.ms = ms
        self.tick = tick
        self.synced = True

    def stamp(self, buf, j, now):
        """"YYYY-MM-DDThh:mm:ssZ " at buf[j]; returns the offset after the space."""
        ms = self.ms + ticks_diff(now, self.tick)
        d = self.day
        while ms >= MS_DAY:
            ms -= MS_DAY
            d += 1
        while ms < 0:
            ms += MS_DAY
            d -= 1
        if ticks_diff(now, self.tick) > MS_DAY:  # keep tick differences far from the clock's wrap
            self.day = d
            self.ms = ms
            self.tick = now
        date_into(d, self.ymd)
        j = put_stamp(buf, j, self.ymd, ms // 1000)
        buf[j] = 32
        return j + 1
