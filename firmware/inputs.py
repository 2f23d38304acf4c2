# inputs.py: a described plant on the node: its sources polled, its engine's lines into the line queue.
"""The node's line producer when the board has a plant description (/plant.json, docs/PLANT.md); without
one the node runs the built-in simulator (firmware/sampler.py), which has the same poll(now) face.

    poll(now)   every source whose reading is due (Modbus units over RS-485, ADC channels, contacts,
                pulse counters, I2C sensors) -> shared/readings.py; then the engine (shared/plant_engine.py)
                turns new readings into lines: each into the LineQueue with its level, and into the
                episode queue for the annotator; each machine's record (its signals' values and state)
                into its single-writer slot of a shared/seqlock.py store, for any other reader.

poll() runs from the main loop and, while the draft model computes, from the model's step hook between
its kernels (shared/llama.py Model.hook; firmware/node.py wires it): a draft step takes half a second on
an RP2040, and the sources keep their period through it. Every source is a state machine that never
waits on its bus for longer than one short transfer, so poll() returns quickly. Nothing allocates per
poll on MicroPython; `stall_max` is the longest time between two polls (ms), `engine.poll_gap_max()` the
longest time a signal went without a reading: the figures `edgetwin bench inputs` reports.
"""
from array import array

from firmware.logq import LINE_MAX
from shared import frame, seqlock
from shared.compat import ticks_diff
from shared.plant_engine import Engine
from shared.plantcfg import ADC, ADS1115, DI, MCP9600, MODBUS, PULSE
from shared.readings import Readings


def _with_period(cfg, entries):
    # the compiled form keeps a signal's period in its head; the sources take it at the end of their entry
    return [e + [cfg.s_period[e[0]]] for e in entries]


class PlantInputs:
    def __init__(self, queue, cfg, prof, now, clock, episodes=None, hw=None):
        """hw: factories for tests (keys "bus", "pin", "adc", "i2c"); None on a board: machine.* on
        MicroPython, firmware/cp_hal.py's adapters on CircuitPython (firmware/boardcfg.py hal, open_bus)."""
        self.q = queue
        self.eq = episodes
        self.cfg = cfg
        self.r = Readings(cfg.n_signals, cfg.n_contacts)
        self.engine = Engine(cfg, self.r, self._emit, clock, now)
        self.scratch = bytearray(LINE_MAX)
        self.sources = []
        hw = hw or {}
        src = cfg.sources
        self._modbus(cfg, prof, hw, now)
        if ADC in src:
            from firmware.analog import AnalogInputs

            self.sources.append(AnalogInputs(self.r, _with_period(cfg, src[ADC]), now, adc=hw.get("adc"),
                                             pin=hw.get("pin")))
        if cfg.di_contacts or DI in src:
            from firmware.contacts import Contacts

            # one class for both: a 5-int entry is a state contact, a 6-int one a contact logged as a value
            self.sources.append(Contacts(self.r, cfg.di_contacts + src.get(DI, []), now, pin=hw.get("pin")))
        if PULSE in src:
            from firmware.pulses import PulseCounters

            ents = [e[:6] + [cfg.s_period[e[0]]] + e[6:] for e in src[PULSE]]
            self.sources.append(PulseCounters(self.r, ents, now, pin=hw.get("pin")))
        if ADS1115 in src or MCP9600 in src:
            from firmware.i2c_sensors import I2CSensors

            ents = _with_period(cfg, src.get(MCP9600, []) + src.get(ADS1115, []))
            self.sources.append(I2CSensors(self.r, ents, now, cfg.i2c, i2c=hw.get("i2c"), pin=hw.get("pin")))
        self._polls = tuple(s.poll for s in self.sources)  # bound once: a bound method per call would allocate
        nm = cfg.n_machines
        self.width = 12 + 2
        self.store = seqlock.Versioned(nm, width=self.width)  # per machine: values, state, tick
        self.rec = array("i", bytearray(4 * self.width))
        self.now = now
        self.t0 = now
        self.last = now
        self.stall_max = 0
        self.polls = 0
        # operators' commands (CMD frames) already applied this boot, by id: a resent one is applied once
        self.seen = array("i", [-1] * 8)
        self.seen_i = 0
        self.cmd_unknown = 0  # commands naming a machine and tag this plant does not have

    def _modbus(self, cfg, prof, hw, now):
        ents = cfg.sources.get(MODBUS, [])
        if not cfg.rs485:
            return
        from firmware import boardcfg
        from firmware.modbus import ModbusMaster

        for b, bus in enumerate(cfg.rs485):
            # this bus's units, renumbered from 0 for its master
            mine = [u for u in range(len(cfg.units)) if cfg.units[u][0] == b]
            if not mine:
                continue
            units = [cfg.units[u] for u in mine]
            sigs = [[e[0], mine.index(e[1])] + e[2:] for e in ents if e[1] in mine]
            cons = [[c[0], mine.index(c[1])] + c[2:] for c in cfg.modbus_contacts if c[1] in mine]
            open_bus = hw.get("bus") or boardcfg.open_bus
            uart, de = open_bus(prof, bus)
            self.sources.append(ModbusMaster(uart, de, bus, units, sigs, cons, self.r, now))

    def plant_line(self, now):
        """The boot line naming the description (PLANT name=... hash=...); not an episode."""
        self.now = now
        eq = self.eq
        self.eq = None
        self.engine.plant_line(now)
        self.eq = eq

    def command(self, buf, off, n, now):
        """A CMD body (docs/PROTOCOL.md 3.11, checked by the link): an operator's ACK / SHELVE / UNSHELVE,
        applied to the alarm points it names and logged naming who; returns the lines written."""
        cid = frame.u32s(buf, off + frame.CM_ID)
        for i in range(8):
            if self.seen[i] == cid:
                return 0
        self.seen[self.seen_i] = cid
        self.seen_i = (self.seen_i + 1) & 7
        ml = buf[off + frame.CM_MLEN]
        tl = buf[off + frame.CM_TLEN]
        t = off + frame.CM_TEXT
        s = self.engine.find(buf, t, ml, buf, t + ml, tl)
        if s < 0:
            self.cmd_unknown += 1
            return 0
        lv = buf[off + frame.CM_LEVEL]
        self.now = now
        return self.engine.operator(buf[off + frame.CM_VERB], s, -1 if lv == frame.CM_ALL else lv, buf,
                                    t + ml + tl, buf[off + frame.CM_BLEN], now)

    def _emit(self, buf, n, level):
        q = self.q
        off = q.slot()
        qb = q.buf
        for j in range(n):
            qb[off + j] = buf[j]
        q.put(n, level, self.now)
        if self.eq is not None:
            self.eq.add(buf, 0, n)

    def poll(self, now):
        """Poll the sources that are due and log what their readings mean; returns the lines written."""
        gap = ticks_diff(now, self.last)
        if gap > self.stall_max and self.polls:
            self.stall_max = gap
        self.last = now
        self.polls += 1
        self.now = now
        for p in self._polls:
            p(now)
        n = self.engine.step(now)
        if n:
            if self.eq is not None:
                self.eq.end_tick(ticks_diff(now, self.t0) // 1000)
            self._publish(now)
        return n

    def _publish(self, now):
        cfg = self.cfg
        eng = self.engine
        rec = self.rec
        r = self.r
        for m in range(cfg.n_machines):
            first = eng.m_first[m]
            k = eng.m_count[m]
            for i in range(k):
                rec[i] = r.value[eng.order[first + i]]
            rec[12] = eng.m_state[m]
            rec[13] = now
            self.store.write_from(m, rec)
