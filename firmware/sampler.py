# sampler.py: the node's sensor source: plant ticks into versioned slots and log lines into a LineQueue.
"""One plant tick per `tick_ms` (the plant's second). Each tick the sampler

- writes every machine's readings (hundredths of their unit, shared/plant.py) and the tick number as
  one record into its single-writer slot of a shared/seqlock.py store: a reader on another thread,
  core or in an IRQ handler gets a consistent record without a lock;
- writes the tick's log lines (samples every `sample_every` ticks, alarms and state changes as they
  happen) into the LineQueue with the level the plant gives each (Plant.line_into: 1 info, 2 warning
  for an alarm raised or acknowledged and LOST, 3 error for a state change an interlock tripped);
- with an annotator, hands them to its EpisodeQueue too (firmware/episodes.py: the ticks that are episodes);
- injects /node.json's `faults` at their plant second (the demo's early events).

Where it runs: the main loop checks the clock (`poll(now)`), and while the draft model computes so does
the model's step hook between its kernels (firmware/node.py), so no tick waits for a whole draft step;
the work never runs in an IRQ, so plant.step() needs no lock. Allocation-free per tick.

The first line of a boot names the simulator's description (`PLANT name=simulator hash=...`: its hash is
shared/plant_catalogue.DESCRIPTION_HASH, the hash of shared/plant_sim.json), as a described plant's node
names its own (firmware/inputs.py)."""
from array import array

from shared import plant, seqlock
from firmware.logq import LINE_MAX
from shared.compat import MASK30, const, ticks_diff

NOTE_S = const(300)  # plant seconds between notes of the plant clock in the spill ring


class Sampler:
    def __init__(self, queue, seed=1, n_machines=4, sample_every=5, tick_ms=1000, now=0, spill=None,
                 episodes=None, faults=()):
        self.q = queue
        self.eq = episodes  # an EpisodeQueue or None
        # The plant's clock resumes after the last run's (kept in the flash spill ring every NOTE_S plant
        # seconds; the last run logged less than NOTE_S seconds past its last note), so a reboot never
        # logs the same plant times twice. Without a ring every boot starts at plant.START_EPOCH.
        self.spill = spill
        self.start_s = spill.plant_s + NOTE_S if spill is not None and spill.plant_s else 0
        self.plant = plant.Plant(seed, n_machines=n_machines, sample_every=sample_every,
                                 start_epoch_s=plant.START_EPOCH + self.start_s)
        if spill is not None:
            spill.note_plant(self.start_s)
        n = self.plant.n
        self.store = seqlock.Versioned(n, width=plant.NCH + 1)
        self.rec = array("i", bytearray(4 * (plant.NCH + 1)))
        self.scratch = bytearray(LINE_MAX)
        self.tick_ms = tick_ms
        self.next_at = now
        self.ticks = 0
        self.faults = list(faults)  # (tick, machine, fault, severity, signal) by tick: node.parse_fault, checked
        self.fault_errors = 0

    def plant_line(self, now):
        """The boot line naming the simulator's description, at the plant's clock (boot time: allocates)."""
        from shared.plant_catalogue import DESCRIPTION_HASH

        p = self.plant
        text = "%s PLANT name=simulator hash=%s machines=%d signals=%d" % (
            plant.iso(p.epoch_s(p.tick if p.tick >= 0 else 0)), DESCRIPTION_HASH, p.n, self.n_signals())
        off = self.q.slot()
        b = text.encode()
        for j in range(len(b)):
            self.q.buf[off + j] = b[j]
        self.q.put(len(b), 1, now)

    def n_signals(self):
        from shared.plant_catalogue import KEY

        n = 0
        for m in range(self.plant.n):
            for ch in range(plant.NCH):
                if KEY[self.plant.kind[m] * plant.NCH + ch] is not None:
                    n += 1
        return n

    def poll(self, now):
        """Run the ticks that are due; returns how many ran (at most 4 per call: catch up gradually)."""
        ran = 0
        while ran < 4:
            if ticks_diff(now, self.next_at) < 0:
                break
            self.next_at = (self.next_at + self.tick_ms) & MASK30
            self.tick(now)
            ran += 1
        return ran

    def tick(self, now):
        p = self.plant
        fs = self.faults
        while fs and fs[0][0] <= p.tick + 1:  # a fault due at the next tick (rare: may allocate)
            f = fs.pop(0)
            try:
                p.inject(f[1], f[2], f[3], f[4])
            except ValueError:  # PlantError: the slot holds a spontaneous fault already
                self.fault_errors += 1
        n = p.step()
        self.ticks += 1
        if self.spill is not None and self.ticks % NOTE_S == 0:
            self.spill.note_plant(self.start_s + self.ticks)
        rec = self.rec
        nch = plant.NCH
        for m in range(p.n):
            for ch in range(nch):
                rec[ch] = p.meas[m * nch + ch]
            rec[nch] = p.tick & MASK30
            self.store.write_from(m, rec)
        q = self.q
        eq = self.eq
        for i in range(n):
            off = q.slot()
            k = self._line(i, off)
            q.put(k, p.level, now)  # the level of the line the plant just wrote
            if eq is not None:
                eq.add(self.scratch, 0, k)
        if eq is not None:
            eq.end_tick(p.tick)

    def _line(self, i, off):
        # plant.line_into writes at offset 0 of its buffer: write into the scratch line, copy into the slot
        s = self.scratch
        k = self.plant.line_into(i, s)
        buf = self.q.buf
        for j in range(k):
            buf[off + j] = s[j]
        return k

    def reading(self, machine, out):
        """A consistent copy of machine's record (NCH readings, then the tick) into out; returns its version."""
        return self.store.read_into(machine, out)
