# node.py: the board's main loop: sampler -> log lines -> LOG frames; drafter -> PROMPT/DRAFT; verdicts in.
"""Run on the board (real or virtual), usually from /main.py:

    import firmware.node as node; node.main()

It reads /board.json (the profile) and /node.json (optional; keys below), opens the link port
(firmware/boardcfg.py: PtyUART on the virtual board, machine.UART / busio.UART on a board) and loops:

    sampler.poll   the plant's inputs (or the simulator's ticks) due -> readings into versioned slots, log
                   lines into the LineQueue (each numbered: lseq 1, 2, ... per boot); a full queue moves its
                   oldest line to the flash spill ring (firmware/spill.py) instead of dropping it
    link.poll      read, deliver VERDICTs, acks, retransmit, heartbeat, handshake
    logs           the loop's new lines written ahead to the spill ring (one flush, node.json write_ahead), then
                   the ring's lines, then queued ones -> LOG frames while the link window has room;
                   logging comes first: drafts get the link only when no line is waiting
    annotator      system prompt / episode PROMPT / DRAFT blocks (firmware/annotator.py), when a model is
                   there and no line waits for the link (offline drafting goes on while the link is down);
                   episodes are the ticks with event lines (and now and then a summary of the samples)
                   the sampler copied into the episode queue (firmware/episodes.py)
    report         every report_ms a level-0 LOG line "NODE heap=... loops=... ..." (heap after gc.collect),
                   sent directly (not queued, lseq 0) so it describes the stream as the frames around it;
                   it takes the first free slot when due, so a lasting backlog of lines never holds it back

Every buffer is allocated in the constructor; the loop allocates nothing on MicroPython once warm, so
the heap stays flat however long it runs (the NODE lines let the gateway and the tests see it). The
node never waits for the gateway: without one it keeps sampling and queueing (lines beyond the queue
go to the spill ring; only when the ring's budget is full do the oldest lines go, counted as dropped)
and annotates alone (offline tokens, unverified).

/node.json holds the node's settings (firmware/nodecfg.py says every key and its default); /plant.json
the compiled plant description (docs/PLANT.md): with it the sampler step polls that plant's sources and
its engine writes the lines (firmware/inputs.py), without it the built-in simulator does
(firmware/sampler.py). Either way the first line of a boot names the description (`PLANT ... hash=`), so
the gateway can check it reads the lines against the same one. While the draft model computes, the inputs
are polled from its step hook between kernels, so they keep their period. Wall time: the gateway's HELLO
and TIME frames (docs/NODE.md "Time and identity"); each LOG line carries the wall time it was logged at.
A bad /node.json, /plant.json or model makes the node run logs-only (or without the plant's inputs) and
say why on the console and to the gateway (main, Node.notice), never stop at boot.

Heap: the big buffers (link, queue) are allocated before the plant simulator's modules are imported,
so they find contiguous room on a heap that module loading fragments (measured on the 64-bit unix
port with the rp2040_pico heap of 196608 B: frame + link + plant bytecode take ~130 KB there).
"""
import gc
import os
import sys
import time

from firmware import watchdog
from firmware.logq import LINE_MAX, LineQueue, put_bytes, put_uint
from firmware.nodecfg import CONFIG, DEFAULTS, ConfigError, load_config, parse_fault
from shared import frame, link
from shared.compat import MASK30, const, ticks_diff, ticks_ms
from shared.wallclock import WallClock

_HOST = sys.implementation.name == "cpython"
NOTE_MAX = const(192)  # bytes of a boot-time error line sent to the gateway (Node.notice)
KEEP = const(2)  # link window slots a prompt's prefill leaves free for the prompt's own frames

def _mem():
    gc.collect()
    return gc.mem_alloc() if hasattr(gc, "mem_alloc") else 0


class Node:
    def __init__(self, uart, prof, cfg, drafter=None, vocab=0, now=0, tok=None, reset=None):
        c = dict(DEFAULTS)
        c.update(cfg)
        self.cfg = c
        self.q = LineQueue(c["queue"])
        kv = prof["kv"]
        k = drafter.k if drafter is not None and hasattr(drafter, "k") else (c["k"] or prof["draft_k"])
        self.lk = link.Link(uart, on_frame=self.on_frame, on_event=self.on_event, role=frame.ROLE_NODE,
                            rxbuf=prof["uart"]["rxbuf"], board_id=prof["name"][:16],
                            kv=(kv["sink"], kv["window"], kv["staged"]),
                            draft_k=k if drafter is not None else 0, topk=c["top_k"] if drafter is not None else 0,
                            window=c["window"], window_bytes=c["window_bytes"], reorder=8, reorder_bytes=128, now=now)
        self.body = bytearray(frame.LG_TEXT + LINE_MAX)
        self.rep = bytearray(frame.LG_TEXT + 340)  # the NODE report's LOG body (every counter at 10 digits fits)
        self.reset = (reset or _reset_cause()).encode()  # why this boot began: every report of it says so
        self.wd = watchdog.Watchdog()  # none until main() opens the board's, after the boot work
        # boot-only code after the big buffers, so the room it frees is where the plant's modules go next:
        # the node's unique id (into our HELLO) and the spill ring
        once = __import__("firmware.bootonce", None, None, ("unique_id",))
        self.uid = once.unique_id(c["uid_path"], "uid_path" in cfg or not _HOST)
        h = self.lk._hello
        for i in range(frame.UID_LEN):
            h[frame.HE_UID + i] = self.uid[i]
        self.spill = once.open_spill(prof, c, "spill_path" in cfg, _HOST)
        self.ctr_end = 0  # the end of the reserved counter blocks (0: the link is unsigned)
        k, key_note = self._link_key(once, c)
        once.forget()
        del once
        if k is not None:  # SHA-256's code comes onto the heap once the boot-only code has left it
            self.lk.sign_with(k[0], k[1], k[2])
            self.ctr_end = k[3]
        self.q.spill = self.spill
        self.boot = self.spill.boot if self.spill is not None else 0
        self.wal = self.spill is not None and c["write_ahead"]  # every line through the ring before it is sent
        self.eq = None  # the episodes waiting for the annotator (firmware/episodes.py), with a model only
        if drafter is not None:
            from firmware.episodes import EpisodeQueue

            self.eq = EpisodeQueue(c["episodes"], c["summary_s"])
        self.notes = []  # boot-time error lines (a bad model, /node.json or /plant.json): sent once the link is up
        self.upd = None  # a model update's receiver (firmware/update.py), from the first UPDATE frame on
        self._prof = prof  # what an update must fit: its model file (where a model goes), board and flavour (code)
        # a code update's trial boot (firmware/codeslot.py): the tick by which the gateway must have adopted our
        # HELLO, or it rolls back (firmware/update.py code_trial); None: no trial
        self.code_trial = (now + c["code_trial_s"] * 1000) & MASK30 if _exists("/code.switch") and _exists(
            "/code.json") else None
        if key_note:
            self.notice(key_note)
        self.clock = WallClock(now)  # the lines' timestamps (a described plant's; the simulator keeps its own)
        self.sampler = self._inputs(prof, c, now)  # after the big buffers: its modules fragment the heap
        self._cmd = getattr(self.sampler, "command", None)  # a described plant's; the simulator takes none
        self.ann = None
        if drafter is not None:
            from firmware.annotator import Annotator

            self.ann = Annotator(drafter, self, vocab, c["prompt_max"], c["offline_ms"], tok)
            self.ann.poll = self._between_tokens  # a prompt's tokens are seconds apart: lines go out meanwhile
            if self.sampler is not None and hasattr(drafter, "model"):
                # a draft step takes half a second on an RP2040, encoding a prompt seconds: the inputs are
                # polled between the step's kernels and the prompt's pieces
                drafter.model.hook = self._hook
                if tok is not None and hasattr(tok, "poll"):
                    tok.poll = self._hook
        # types of the data frames in flight, by send order: acks release them in the same order, so
        # the node knows how many of its LOG lines the gateway has (logs_acked; it stored them first)
        self._types = bytearray(64)
        self._t_w = 0
        self._t_r = 0
        self.logs_acked = 0
        self.logs_sent = 0
        self.report_due = False
        self.report_ms = c["report_ms"]
        self.next_report = now
        self.loops = 0
        self.sent = 0
        self.reboots_seen = 0
        self.heap = 0
        self.link_lost = 0  # LOG frames the link gave up unacknowledged (EV_TX_DROPPED)
        # wall time from the gateway (its HELLO, then TIME frames): days since 2000 + ms, at our tick w_tick
        self.w_ok = False
        self.w_day = 0
        self.w_ms = 0
        self.w_tick = 0
        self.w_first = 0  # the tick of the first sync this boot: lines before it are back-dated
        self.syncs = 0
        self._hellos = 0
        self.notes_sent = 0

    def _link_key(self, once, c):
        # The provisioned key and its counters (firmware/bootonce.link_key reserves the counter first), and a
        # line for the gateway: without a key the node runs unsigned and says so.
        try:
            k = once.link_key(c)
        except (OSError, ValueError) as e:  # a bad key file, or no room to reserve the counter in
            print("NODE link key refused: %s" % e)
            return None, "NODE link unsigned: %s" % e
        if k is None:
            if not _HOST:  # on a board's console: why a gateway refuses it
                print("NODE link unsigned: no %s (edgetwin deploy --node provisions a key)" % c["key_path"])
            return None, None
        print("NODE link signed: key %s, counter block %d" % (c["key_path"], k[1] >> 16))
        return k, None

    def keep_counter(self):
        # The signed-frame counter entered the last reserved block: reserve further before it gets there
        # (a boot reuses no value: bootonce.link_key). Allocates a little, once every 2**16 frames.
        ctr = self.lk._ctr
        block = ctr[2] | ctr[3] << 8 | ctr[4] << 16
        if not self.ctr_end or block + 1 < self.ctr_end:
            return
        once = __import__("firmware.bootonce", None, None, ("write_counter",))
        try:
            once.write_counter(self.cfg["counter_path"], block + once.CTR_AHEAD, self.lk._peer_ctr)
            self.ctr_end = block + once.CTR_AHEAD
        except OSError as e:
            print("NODE link counter not saved: %s" % e)
        once.forget()

    def _inputs(self, prof, c, now):
        """The line producer: the described plant's sources and engine (firmware/inputs.py) when the board
        has a /plant.json, else the built-in simulator (firmware/sampler.py). A description that cannot be
        used leaves a node that logs nothing of the plant but says why (None)."""
        pc = None
        try:
            os.stat(c["plant"])
        except OSError:  # no description: the simulator's node never holds the loader's code
            pass
        else:
            from shared import plantcfg

            try:
                pc = plantcfg.load(c["plant"], prof)
            except (plantcfg.PlantConfigError, MemoryError) as e:
                self._boot_error("NODE plant error: %s; logging no plant inputs" % e)
                return None
        if pc is None:
            from firmware.sampler import Sampler

            faults = sorted((parse_fault(f) for f in c["faults"]), key=lambda f: f[0])
            s = Sampler(self.q, c["seed"], c["machines"], c["sample_every"], c["tick_ms"], now, self.spill,
                        self.eq, faults)
            if faults:  # names the plant does not know fail now (ValueError: logs-only, saying why), not hours later
                from shared import plant

                for f in faults:
                    plant.Plant(c["seed"], n_machines=c["machines"]).inject(f[1], f[2], f[3], f[4])
            s.plant_line(now)
            return s
        try:
            from firmware.inputs import PlantInputs

            s = PlantInputs(self.q, pc, prof, now, self.clock, self.eq)
        except (ValueError, OSError, MemoryError, ImportError) as e:  # a bus or pin the board cannot open
            self._boot_error("NODE plant error: %s: %s; logging no plant inputs" % (c["plant"], e))
            return None
        s.plant_line(now)
        return s

    def _boot_error(self, text):
        print(text)
        self.notice(text)

    def _hook(self):
        # the model's step hook (shared/llama.py): poll the inputs between the draft step's kernels
        self.wd.feed()
        self.sampler.poll(ticks_ms())

    # ---- link callbacks (called from lk.poll, allocation-free) ----

    def on_frame(self, t, buf, off, n):
        if t == frame.VERDICT and self.ann is not None:
            self.ann.on_verdict(buf, off, n)
        elif t == frame.CMD and self._cmd is not None:  # an operator's alarm command: the plant's engine logs it
            self._cmd(buf, off, n, self.lk.now)
        elif t == frame.TIME:
            self._sync(frame.u16(buf, off + frame.TM_DAY), frame.u32s(buf, off + frame.TM_MS), self.lk.now)
        elif t == frame.UPDATE:
            self._update(buf, off, n)

    # ---- a new model over the link (firmware/update.py) ----

    def _update(self, buf, off, n):
        if self.upd is None:  # the receiver's code comes onto the heap with the first update, not before
            try:
                from firmware.update import Receiver
            except ImportError:  # the logs-only package: no model to replace, no code to do it with
                b = bytearray(frame.UPSTAT_SIZE)
                b[0] = buf[off]
                b[1] = buf[off + 1]
                b[frame.US_STATE] = frame.US_REFUSED
                self.send(frame.UPSTAT, b, frame.UPSTAT_SIZE)
                return
            prof = self._prof
            model = prof.get("model") or "draft.mbf"
            try:  # the model it runs (on the filesystem or in ROMFS), else the profile's
                path = model_path({"model": model}, self.cfg) or "/" + model
            except ValueError:  # named in node.json but not on the board
                path = "/" + model
            self.upd = Receiver(path, prof["name"], prof.get("flavour", ""))
        if self.code_trial is not None:  # a BEGIN can come in the poll that adopted the gateway: commit before it is read
            __import__("firmware.update", None, None, ("code_trial",)).code_trial(self, ticks_ms())
        try:
            line = self.upd.on_frame(buf, off, n)
        except OSError as e:  # a full or failing file system: said, and the gateway begins again later
            self.upd._close()
            self.upd._say(frame.US_NO_ROOM, 0)
            line = "UPDATE write failed: %s" % e
        if line:
            print("NODE " + line)
            self.notice(line)

    def _update_stat(self):
        u = self.upd
        if u.stat_due and self.lk.established and self.lk.free_slots() > 0:
            if self.send(frame.UPSTAT, u.stat, frame.UPSTAT_SIZE):
                u.stat_due = False
        elif u.reset_due and not u.stat_due and not self.lk.queued():  # the gateway has the VERIFIED
            u.reset_due = False
            try:
                __import__("machine").reset()
            except (ImportError, AttributeError):
                self.notice("UPDATE no machine.reset here: reboot the board to switch models")

    # ---- wall time ----

    def _sync(self, day, ms, tick):
        if day == frame.WALL_NONE:
            return
        if not self.w_ok:
            self.w_ok = True
            self.w_first = tick
        self.clock.set(day, ms, tick)
        self.w_day = day
        self.w_ms = ms
        self.w_tick = tick
        self.syncs += 1

    def _put_wall(self, body, tick, boot):
        # LOG day/ms of a line logged at our tick in boot `boot`; returns the BACKDATED flag or 0
        if not self.w_ok or boot != self.boot:  # no time yet, or a line of an earlier boot (its ticks are gone)
            frame.put_u16(body, frame.LG_DAY, frame.WALL_NONE)
            frame.put_u32(body, frame.LG_MS, 0)
            return 0
        d = self.w_day  # the wall time at our tick (within +-6 days of the last sync: small ints)
        m = self.w_ms + ticks_diff(tick, self.w_tick)
        while m >= frame.MS_PER_DAY:
            m -= frame.MS_PER_DAY
            d += 1
        while m < 0:
            m += frame.MS_PER_DAY
            d -= 1
        frame.put_u16(body, frame.LG_DAY, d)
        frame.put_u32(body, frame.LG_MS, m)
        return frame.LG_BACKDATED if ticks_diff(tick, self.w_first) < 0 else 0

    def on_event(self, code, value):
        if code == link.EV_TX_DROPPED:  # the link dropped its oldest unacked frames: they will never be acked
            self._acked()
            for i in range(value):
                if self._t_r + i < self._t_w and self._types[(self._t_r + i) & 63] == frame.LOG:
                    self.link_lost += 1
            self._t_r += value
            if self._t_r > self._t_w:
                self._t_r = self._t_w
        elif code == link.EV_PEER_REBOOT:
            self.reboots_seen += 1
            if self.ann is not None:  # a restarted gateway holds no cache: rebuild it from our ids
                self.ann.gateway_restarted()

    # ---- sending (every data frame goes through here) ----

    def send(self, ftype, buf, n):
        if not self.lk.send(ftype, buf, n):
            return False
        self._types[self._t_w & 63] = ftype
        self._t_w += 1
        if ftype == frame.LOG:
            self.logs_sent += 1
        return True

    def _acked(self):
        done = self.lk.tx_acked
        while self._t_r < done and self._t_r < self._t_w:
            if self._types[self._t_r & 63] == frame.LOG:
                self.logs_acked += 1
            self._t_r += 1

    # ---- the loop ----

    def backlog(self):
        """Lines waiting for the link (RAM queue + spill ring)."""
        sp = self.spill
        return self.q.count + (sp.count if sp is not None else 0)

    def _put_head(self, body, ts, level, boot, lseq, flags):
        # A LOG body's head in the peer's layout: 1.1 (flags, boot, lseq, wall day/ms) or 1.0's (ts,
        # level); returns the text's offset. lseq 0: not a numbered line (reports, notices).
        frame.put_u32(body, frame.LG_TS, ts & MASK30)
        body[frame.LG_LEVEL] = level
        if not self.lk.peer_minor:
            return frame.LG_TEXT_10
        body[frame.LG_FLAGS] = flags | self._put_wall(body, ts, boot)
        frame.put_u16(body, frame.LG_BOOT, boot)
        frame.put_u32(body, frame.LG_LSEQ, lseq)
        return frame.LG_TEXT

    def _send_line(self, src, off, n, level, ts, boot, lseq, flags):
        # One LOG frame: the 1.1 layout (flags, boot, lseq), or 1.0's to a 1.0 gateway. False: no room.
        body = self.body
        j = self._put_head(body, ts, level, boot, lseq, flags)
        for i in range(n):
            body[j + i] = src[off + i]
        if not self.send(frame.LOG, body, j + n):
            return False
        self.sent += 1
        return True

    def _commit(self):
        # Write-ahead: the queued lines go to the flash ring with one flush for all of them, before any of
        # them is sent or counted in a report, so a power cut loses no line the gateway could have seen.
        q = self.q
        sp = self.spill
        if not self.wal or not q.count:
            return
        while q.count:
            h = q.head
            sp.append(q.buf, h * LINE_MAX, q.lens[h], q.levels[h], q.lseq[h], q.ts[h], 0, False)
            q.pop()
        sp.sync()

    def _send_logs(self, now, keep=0):
        # Every free slot of the link window (but `keep`) goes to lines, oldest first: the spill ring holds
        # older lines than the queue (the queue's oldest move there), so it drains first.
        self._commit()
        q = self.q
        lk = self.lk
        sp = self.spill
        while lk.free_slots() > keep:
            if sp is not None and sp.count and sp.peek():
                # SPILLED says the line waited (the gateway's Sparkplug sends it as historical, and takes a
                # PLANT line for this boot's only without it): a line of an earlier boot, one the RAM queue
                # pushed out, or, written ahead, one with more lines behind it than the RAM queue holds (a
                # queue of its own would have pushed it out too)
                f = sp.flags
                if sp.line_boot != self.boot or sp.count > q.slots:
                    f |= frame.LG_SPILLED
                if not self._send_line(sp.rec, sp.text_off, sp.n, sp.level, sp.ts, sp.line_boot, sp.lseq, f):
                    return
                if f & frame.LG_SPILLED:
                    sp.spilled += 1
                sp.pop()
            elif q.count:
                h = q.head
                if not self._send_line(q.buf, q.first(), q.lens[h], q.levels[h], q.ts[h], self.boot, q.lseq[h], 0):
                    return
                q.pop()
            else:
                break
        if (sp is not None and not sp.marked and lk.established and self.logs_acked == self.logs_sent
                and (self.wal or not sp.count)):
            # every line read from the ring is with the gateway: a reboot will not send them again (with
            # write-ahead the mark lasts from the next flush on: a power cut before it resends a few lines)
            sp.mark(not self.wal)

    def _report(self, now):
        # A level-0 LOG line formatted in place and sent at once, not through the line queue, so it
        # states the stream and the counters exactly as the frames around it on the wire:
        # NODE heap=.. loops=.. lines=.. dropped=.. logs_sent=.. logs_acked=.. boot=.. spilled=..
        # backlog=.. [poll=.. stall=..] [gen=.. offline=.. committed=.. live=.. crc=..]. lines: lines logged this boot (the
        # newest lseq); dropped: lines of this boot the node gave up (spill ring full, or no ring and the
        # queue full, or frames the link dropped); logs_sent counts the LOG frames sent before this one.
        # Its lseq is 0: a report is not a numbered line. False: no room, retry.
        if self.lk.free_slots() < 1 or not self.lk.established:
            return False
        self._commit()  # lines= counts only lines a power cut cannot take
        r = self.rep
        j = self._put_head(r, now, 0, self.boot, 0, 0)
        j = put_bytes(r, j, b"NODE heap=")
        j = put_uint(r, j, self.heap)
        j = put_bytes(r, j, b" loops=")
        j = put_uint(r, j, self.loops & MASK30)
        j = put_bytes(r, j, b" lines=")
        j = put_uint(r, j, self.q.queued & MASK30)
        sp = self.spill
        j = put_bytes(r, j, b" dropped=")
        j = put_uint(r, j, (self.q.dropped + self.link_lost + (sp.lost if sp is not None else 0)) & MASK30)
        j = put_bytes(r, j, b" logs_sent=")
        j = put_uint(r, j, self.logs_sent & MASK30)
        j = put_bytes(r, j, b" logs_acked=")
        j = put_uint(r, j, self.logs_acked & MASK30)
        j = put_bytes(r, j, b" boot=")
        j = put_uint(r, j, self.boot)
        j = put_bytes(r, j, b" reset=")
        j = put_bytes(r, j, self.reset)
        j = put_bytes(r, j, b" spilled=")
        j = put_uint(r, j, (sp.spilled if sp is not None else 0) & MASK30)
        j = put_bytes(r, j, b" backlog=")
        j = put_uint(r, j, self.backlog() & MASK30)
        sm = self.sampler
        if self._cmd is not None:  # a described plant: its worst poll cycle and loop stall so far (ms)
            j = put_bytes(r, j, b" poll=")
            j = put_uint(r, j, sm.engine.poll_gap_max() & MASK30)
            j = put_bytes(r, j, b" stall=")
            j = put_uint(r, j, sm.stall_max & MASK30)
        a = self.ann
        if a is not None:
            j = put_bytes(r, j, b" gen=")
            j = put_uint(r, j, a.gen)
            j = put_bytes(r, j, b" offline=")
            j = put_uint(r, j, a.offline_tokens & MASK30)
            j = put_bytes(r, j, b" episodes=")
            j = put_uint(r, j, a.episodes & MASK30)
            j = put_bytes(r, j, b" ep_dropped=")
            j = put_uint(r, j, self.eq.dropped & MASK30)
            r[j] = 32
            j = a.live_crc(r, j + 1)
        return self.send(frame.LOG, r, j)

    def notice(self, text):
        """Keep a level-2 line (at most NOTE_MAX bytes) to send directly once the link is up, before the
        queued lines: how a node that boots logs-only tells the gateway why. Boot time only (allocates)."""
        self.notes.append(text.encode()[:NOTE_MAX])

    def _send_note(self, now, text):
        # A notice's LOG body in the peer's layout (1.0 or 1.1, as _report), built when it is sent
        # (boot-time lines: allocating here is fine). Its lseq is 0: not a numbered line.
        body = bytearray(frame.LG_TEXT + len(text))
        j = self._put_head(body, now, 2, self.boot, 0, 0)
        body[j:j + len(text)] = text
        return self.send(frame.LOG, body, j + len(text))

    def _maybe_report(self, now, measure=True):
        if ticks_diff(now, self.next_report) >= 0:
            if not self.report_due:
                self.report_due = True
                if measure or not self.heap:  # gc.collect, then the bytes in use: flat when nothing leaks
                    self.heap = _mem()
            if self._report(now):
                self.report_due = False
                self.next_report = (now + self.report_ms) & MASK30
                self.keep_counter()

    def _between_tokens(self):
        # A prompt's prefill takes seconds on a board (a token a half second on an RP2040): between its tokens
        # the link is polled (acks, heartbeats; a verdict waits for the prompt's end: annotator.prompting) and
        # the lines and the report go out, keeping KEEP slots of the window for the prompt's own frames.
        now = ticks_ms()
        self.wd.feed()
        self.lk.poll(now)
        self._acked()
        if self.lk.free_slots() > KEEP:
            # the heap figure stays the main loop's: mid-prompt it would count the prompt's own buffers
            self._maybe_report(now, False)
        self._send_logs(now, KEEP)

    def step(self, now):
        self.wd.feed()  # a hang in any step below stops the feeds: the board resets (firmware/watchdog.py)
        if self.sampler is not None:
            self.sampler.poll(now)
        self.lk.poll(now)
        lk = self.lk
        if lk.hellos_in != self._hellos:  # a HELLO from the gateway: its wall time, if it sent one
            self._hellos = lk.hellos_in
            ph = lk.peer_hello
            self._sync(frame.u16(ph, frame.HE_WDAY), frame.u32s(ph, frame.HE_WMS), lk.peer_hello_at)
        self._acked()
        while self.notes_sent < len(self.notes) and self.lk.established and self.lk.free_slots() > 0:
            if not self._send_note(now, self.notes[self.notes_sent]):
                break
            self.notes_sent += 1
        self._maybe_report(now)  # before the lines: a backlog that lasts never starves the report
        if self.code_trial is not None:
            __import__("firmware.update", None, None, ("code_trial",)).code_trial(self, now)
        if self.upd is not None:
            self._update_stat()
        self._send_logs(now)
        if self.ann is not None and (not self.lk.established or not self.backlog()):
            self.ann.step(now, self.eq)  # drafting yields the link to waiting lines
        self.loops += 1

    def run(self, seconds=0):
        t0 = ticks_ms()
        limit = seconds * 1000
        idle = getattr(time, "sleep_ms", None)
        while True:
            now = ticks_ms()
            self.step(now)
            if limit and ticks_diff(now, t0) >= limit:
                return
            if self.ann is None and idle is not None:
                idle(1)  # logs only: nothing to compute between ticks


ROM = "/rom"  # where MicroPython mounts the firmware's ROMFS partition (make firmware: the model's home)


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def model_path(prof, cfg):
    """The model file the node drafts with, or None: cfg['model'] (a path; "" the profile's /<model>) as a
    file on the filesystem, else the same path under /rom (the firmware's ROMFS, where deploy puts it).
    The one rule: a model on the filesystem (deployed there, or updated later) overrides the ROM one.
    ValueError when a model named in /node.json is in neither place."""
    path = cfg.get("model", "")
    if path is None:
        return None
    named = path
    if not path:
        path = "/" + prof["model"]
    if _exists(path):
        return path
    if path[0] == "/" and _exists(ROM + path):
        return ROM + path
    if named:
        raise ValueError("model file %s not found (nor %s): copy it to the board or set model: null in %s"
                         % (path, ROM + path, CONFIG))
    return None  # the profile's default model is not on the board: logs only


UPDATE_MARK = "/update.json"  # firmware/update.py MARK: a model received over the link waits for its trial
CODE_NOTE = "/code.note"  # firmware/codeslot.py NOTE


def make_drafter(prof, cfg):
    """(drafter, vocab) for the model model_path() finds, or (None, 0)."""
    path = model_path(prof, cfg)
    if path is None:
        return None, 0
    from shared import drafter, llama, mbf, ringkv

    r = mbf.open(path)
    c = r.config
    kv = prof["kv"]
    ring = ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], kv["sink"], kv["window"], kv["staged"],
                         "b", c["n_kv_heads"])
    # stream: the plan's layout (deploy writes the one `edgetwin plan` chose for a file); out_rows: the streamed
    # classifier's rows. A model in ROMFS is read in place (r.mem): resident, its weights never copied to RAM,
    # is then both the fastest and the smallest plan (its heap holds the scales only, docs/MBF.md)
    stream = False if r.mem is not None else cfg.get("stream", False)
    model = llama.Model(r, ring, stream=stream, out_rows=cfg.get("out_rows", 64))
    k = cfg.get("k") or prof["draft_k"]
    d = drafter.Drafter(model, k, temperature=cfg.get("temperature", 0), top_k=cfg.get("top_k", 4),
                        seed=cfg.get("seed", 1), max_pending=2, max_len=cfg.get("max_len", 16),
                        stop_ids=cfg.get("stop_ids") or ())
    return d, c["vocab_size"]


def make_tokenizer(prof, cfg):
    """The model file's own tokenizer when cfg['tokenizer'], else None: by the MBF's tokenizer_kind,
    shared.bpe.BPE (byte-level BPE, read lazily from flash) or shared.sptok.SPTok (llama2.c's scored
    vocabulary, a few KB read into RAM)."""
    if not cfg.get("tokenizer"):
        return None
    path = model_path(prof, cfg)
    if path is None:
        return None
    from shared import mbf

    r = mbf.open(path)
    off = r.tok_offset
    n = r.tok_length
    kind = r.config.get("tokenizer_kind", mbf.TOK_BPE)
    r.close()
    if not n:
        raise ValueError("model file %s carries no tokenizer: set tokenizer false in %s" % (path, CONFIG))
    if kind == mbf.TOK_LLAMA2C:
        from shared import sptok

        with open(path, "rb") as f:
            return sptok.SPTok(f, False, offset=off, length=n)
    from shared import bpe

    return bpe.BPE(open(path, "rb"), False, offset=off, length=n)


def _reset_cause():
    rc = __import__("firmware.resetcause", None, None, ("reset_cause",))  # boot-only, as bootonce
    why = rc.reset_cause()
    rc.forget()
    return why


def main(config=CONFIG):
    """Boot the node. A bad /node.json or a model that cannot be loaded never stops it: the reason is
    printed on the console and sent to the gateway as a level-2 line (see Node.notice), and the node runs
    logs-only (a bad /node.json: with every key at its default; a bad model: with the rest of the config)."""
    from firmware import boardcfg

    reset = _reset_cause()  # first: its code is gone before the model and the node's buffers take the heap
    prof = boardcfg.load()
    notes = []
    try:
        cfg = load_config(config)
    except ConfigError as e:
        notes.append("NODE config error: %s; running logs-only with the defaults" % e)
        cfg = {"model": None}
    uart = boardcfg.open_link(prof)
    if _exists(CODE_NOTE):  # the outcome of a code update's trial, written by firmware/codeslot.py
        with open(CODE_NOTE) as f:
            notes.append(f.read())
        os.remove(CODE_NOTE)
    if _exists(UPDATE_MARK):
        notes.append(__import__("firmware.update", None, None, ("trial",)).trial(prof, cfg, make_drafter))
    d, vocab, tok = None, 0, None
    try:
        d, vocab = make_drafter(prof, cfg)
        tok = make_tokenizer(prof, cfg) if d is not None else None
    except (ValueError, OSError, MemoryError) as e:  # shared.mbf.MBFError, llama/drafter errors, flash errors
        d = tok = None
        vocab = 0
        notes.append("NODE model error: %s; running logs-only" % (e if str(e) else type(e).__name__))
    gc.collect()
    try:
        node = Node(uart, prof, cfg, d, vocab, ticks_ms(), tok, reset)
    except (MemoryError, ValueError) as e:  # valid values that do not fit together or in this heap
        d = tok = None
        gc.collect()
        notes.append("NODE config error: %s with %s: %s; running logs-only with the defaults"
                     % ("the node does not fit the heap" if isinstance(e, MemoryError) else "the node cannot start",
                        config, e))
        cfg = {"model": None}
        node = Node(uart, prof, cfg, None, 0, ticks_ms(), None, reset)
    for text in notes:
        print(text)
        node.notice(text)
    # the watchdog opens after the boot work (a model load or a new spill ring take longer than it waits)
    node.wd = watchdog.Watchdog(prof.get("watchdog_ms", 0), node.notice)
    node.sampler = watchdog.hang_aid(node.sampler)  # a test aid: /hang_ms hangs the inputs (docs/NODE.md)
    print("NODE start board=%s model=%s heap=%d reset=%s watchdog_ms=%d"
          % (prof["name"], "yes" if d is not None else "no", _mem(), node.reset.decode(), node.wd.ms))
    try:
        micropython = __import__("micropython")
        micropython.kbd_intr(3)  # Ctrl-C from the REPL still stops the node (the link is not the console)
    except (ImportError, AttributeError):
        pass
    try:
        node.run(cfg.get("run_s", 0))
    except KeyboardInterrupt:  # someone at the console stopped the node: no reset while they use the REPL
        node.wd.stop()
        raise
    node.wd.stop()  # run_s ran out; a crash leaves it running, so a crashed node restarts
