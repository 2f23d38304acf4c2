"""A week of plant time with faults, that loses nothing: virtual nodes and a gateway under a fault schedule.

    edgetwin bench soak [--plant-days 7] [--tick-ms 3] [--faults N] [--short] [--json]

What runs (each a real process): three virtual boards (tools/board/vnode.py, the MicroPython unix port running
firmware/node.py, signed links provisioned in a keys file as `edgetwin deploy --node` does): a drafting node
(rp2040_pico, the tiny INT4 test draft) and two logs-only nodes (rp2040_pico, esp32s3_devkitc), each behind a
relay (tools/bench/soak_relay.py) that can cut its cable or send garbage down it; `edgetwin gateway --keys FILE
--model tiny:3 --mqtt URL` on a fresh store (started first, on the relays' ends, as a site's gateway waits for its
boards); a mosquitto of its own and a subscriber (tools/bench/soak_broker.py).
The plant clock is accelerated: one plant second every `--tick-ms` ms (node.json tick_ms), a sample line per
machine every SAMPLE_EVERY plant seconds, so 7 plant days take about 7 * 86400 * tick_ms ms.

Faults, spread over the run in turn (`--faults` rounds; kinds in FAULT_KINDS):
- link_cut_over_budget: a logs-only node's cable cut for longer than its spill ring (SPILL_BYTES) can hold: the
  ring gives up its oldest lines, and the node counts each one (dropped= in its NODE reports);
- gateway_kill9: SIGKILL, then the gateway again on the same store;
- broker_restart: mosquitto stopped (SIGTERM) and started again on the same port;
- power_cut_during_spill: a node's cable cut until its lines spill to flash, then its interpreter killed
  (VirtualBoard.reboot: a power cut), the cable mended after it booted again;
- power_cut_during_model_write: `edgetwin update` of another draft into the drafting node, its power cut while
  the gateway sends it (the node writing its second slot), the transfer followed to "verified", the power cut
  again (the new model's trial boot), which must end "running" (skipped, with the reason, where the product has
  no `edgetwin update`);
- disk_full: the gateway's files may not grow (RLIMIT_FSIZE set on the running process: SQLite's writes fail as
  on a full disk; the store says store_full and acknowledges nothing it cannot keep), then room again;
- garbage: random bytes down a node's line, both ways, in bursts.

The report (one JSON object): plant_days (the least any node's lines cover, from their plant timestamps) and
real_s; per node its board, whether it drafts, lines_produced (per boot: the node's newest line seq, from its
stored lines and its NODE reports' lines=), lines_stored (distinct line seqs stored), lines_dropped_reported
(the node's dropped= per boot), heap in the first and last plant hour of its longest boot (NODE heap=; a reboot
starts the heap afresh) and heap_flat (within HEAP_SLACK bytes); the sums
lines_lost_unreported (produced - stored - reported, per boot) and lines_duplicated (a line seq stored twice in
one boot); faults_injected and faults_survived per kind (the gateway still running, every node's link up again
and its lines flowing); committed_tokens (the drafting node's verified annotation tokens in the store) and the
rate; integrity_ok (PRAGMA integrity_check); outbox_consistent (every event row the outbox marked acknowledged
reached the subscriber; none left queued at the end). lines_lost_at_power_cut is the part of
lines_lost_unreported in boots a power cut ended: the nodes write every line ahead to their spill rings
(node.json write_ahead, the default), so it is 0; without write-ahead the LOG frames in flight and the lines
in the RAM queue when the power went would be lost, seen by nobody (at most power_cut_ram_lines_max: queue +
window). Exit 1 when a goal fails
(goals_met says which), 2 for a setup error."""

from __future__ import annotations

import calendar
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from host.usage import Parser  # noqa: E402

TINY_SEED = 3  # the tiny seeded draft + target pair (tools/demo/spec_models, host/gateway.py tiny:SEED)
SAMPLE_EVERY = 120  # plant seconds between a machine's sample lines
MACHINES = 4
QUEUE = 16  # node.json queue (lines in RAM)
WINDOW = 8  # node.json window (LOG frames in flight)
SPILL_BYTES = 4 * 4096  # a small ring (3 usable blocks, about 110 lines), so a cut can outgrow it in seconds
REPORT_MS = 1000
DRAIN_S = 120  # the longest wait at the end for every backlog and the outbox to empty
HEAP_SLACK = 256  # bytes: heap_flat allows this much between the first and the last plant hour
WORD_RATIO = 2  # the unix port's heap words are 8 bytes, the boards' 4: the same words in this port's bytes
NODES = (("drafting", "rp2040_pico", True), ("logs-a", "rp2040_pico", False), ("logs-b", "esp32s3_devkitc", False))
FAULT_KINDS = ("garbage", "link_cut_over_budget", "gateway_kill9", "broker_restart", "power_cut_during_spill",
               "disk_full", "power_cut_during_model_write")
MODEL_WRITE_SKIP = ("the over-the-link model update (`edgetwin update`) is not in the product yet: no model write "
                    "to cut the power in")


def _has_update() -> bool:
    """Whether the product has the over-the-link model update (`edgetwin update`, host/cmd_update.py)."""
    import importlib.util

    from host.store import LogStore

    return importlib.util.find_spec("host.cmd_update") is not None and hasattr(LogStore, "update_job")


class SoakError(RuntimeError):
    """A setup failure (no mosquitto, a board that does not boot): one line, exit 2."""


def _say(msg: str) -> None:
    print("bench soak: " + msg, file=sys.stderr, flush=True)


def plant_s(text: str) -> int | None:
    """The plant time (Unix s) a plant line starts with ("2026-11-30T06:00:00Z ..."), or None."""
    if len(text) < 21 or text[19:21] != "Z ":
        return None
    try:
        return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def fields(text: str) -> dict:
    return dict(kv.split("=", 1) for kv in text.split()[1:] if "=" in kv)


class Gateway:
    """`edgetwin gateway` as a process on the soak's store; output to a log file (a pipe nobody reads would
    stall it over a long run)."""

    def __init__(self, tmp: Path, ports: list[str], keys: Path, mqtt_port: int) -> None:
        self.db = tmp / "soak.db"
        self.status_path = tmp / "status.json"
        self.log = tmp / "gateway.log"
        self.args = [sys.executable, "-m", "host.cli", "gateway", "--db", str(self.db), "--status",
                     str(self.status_path), "--keys", str(keys), "--model", "tiny:%d" % TINY_SEED,
                     "--peer-timeout", "30", "--status-every", "3600", "--mqtt", "mqtt://127.0.0.1:%d" % mqtt_port,
                     "--mqtt-gateway", "soak"]
        for p in ports:
            self.args += ["--port", p]
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.start()

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.args, cwd=str(ROOT), env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict | None:
        try:
            st = json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None
        return st if self.proc is not None and st.get("pid") == self.proc.pid else None

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def limit_files(self, limit: int | None) -> None:
        """The gateway's files may not grow past `limit` bytes (a full disk); None: as before."""
        assert self.proc is not None
        hard = resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE)[1]
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (hard if limit is None else limit, hard))

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-600:]
        except OSError:
            return ""


class Progress:
    """What the store holds so far, read through its own read-only connection: per node the plant times its
    lines cover and how many lines are stored."""

    def __init__(self, db: Path, names: list[str]) -> None:
        self.db = db
        self.names = names
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.count: dict[str, int] = {n: 0 for n in names}

    def poll(self) -> None:
        try:
            con = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True, timeout=5)
        except sqlite3.Error:
            return
        try:
            for n in self.names:
                q = ("SELECT text FROM logs JOIN nodes ON nodes.id=logs.node WHERE nodes.name=? AND logs.level=1 "
                     "ORDER BY logs.id %s LIMIT 20")
                for order, into in (("ASC", self.first), ("DESC", self.last)):
                    if order == "ASC" and n in self.first:
                        continue
                    for (text,) in con.execute(q % order, (n,)).fetchall():
                        t = plant_s(text)
                        if t is not None:
                            into[n] = t
                            break
                self.count[n] = int(con.execute("SELECT count(*) FROM logs JOIN nodes ON nodes.id=logs.node WHERE "
                                                "nodes.name=?", (n,)).fetchone()[0])
        except sqlite3.Error:
            pass  # no tables yet, or the store busy: the next poll
        finally:
            con.close()

    def days(self, name: str) -> float:
        if name not in self.first or name not in self.last:
            return 0.0
        return (self.last[name] - self.first[name]) / 86400.0

    def min_days(self) -> float:
        return min(self.days(n) for n in self.names)


class Soak:
    """One run: its processes (start, close), the fault schedule (run, inject), the drain at the end."""

    def __init__(self, tmp: Path, plant_days: float, tick_ms: int, rounds: int, max_s: float) -> None:
        self.tmp = tmp
        self.plant_days = plant_days
        self.tick_ms = tick_ms
        self.rounds = rounds
        self.deadline = time.monotonic() + max_s - DRAIN_S - 30  # room for the drain and the report
        self.nodes: dict = {}
        self.relays: dict = {}
        self.names = [n for n, _b, _d in NODES]
        self.injected = {k: 0 for k in FAULT_KINDS}
        self.survived = {k: True for k in FAULT_KINDS}
        self.skipped = {} if _has_update() else {"power_cut_during_model_write": MODEL_WRITE_SKIP}
        self.fault_log: list[dict] = []
        self.gw: Gateway | None = None
        self.broker = None
        self.sub = None
        self.progress: Progress | None = None
        self.rate = 0.0  # plant days per real second, measured

    # ---- setup ----

    def node_cfg(self, drafting: bool) -> dict:
        cfg = {"tick_ms": self.tick_ms, "sample_every": SAMPLE_EVERY, "machines": MACHINES, "report_ms": REPORT_MS,
               "queue": QUEUE, "window": WINDOW, "spill_bytes": SPILL_BYTES}
        if drafting:  # short notes from short prompts: the tiny draft's context is small
            cfg.update(max_len=48, prompt_max=12, offline_ms=1000, summary_s=300)
        return cfg

    def start(self) -> None:
        from host.gateway import TINY_SEQ_LEN
        from host.linkkeys import KeyFile
        from tools.bench.soak_broker import Broker, BrokerError, Subscriber
        from tools.bench.soak_relay import Relay
        from tools.board.vboard import VBoardError
        from tools.board.vnode import VNode, build_x64
        from tools.demo import spec_models

        keys_path = self.tmp / "keys.json"
        keys = KeyFile(keys_path)
        draft = spec_models.make_pair(TINY_SEED, seq_len=TINY_SEQ_LEN).mbf
        try:
            self.broker = Broker(self.tmp / "mqtt")
            self.broker.start()
            self.sub = Subscriber(self.broker.port)
        except BrokerError as e:
            raise SoakError(str(e)) from None
        # the gateway first, on the relays' ends, as a site's gateway waits for its boards: no node's ring fills
        # while the others boot
        for i, name in enumerate(self.names):
            self.relays[name] = Relay(self.tmp / ("link-" + name), seed=i + 1)
        self.gw = Gateway(self.tmp, ["%s=%s" % (n, self.relays[n].link_path) for n in self.names], keys_path,
                          self.broker.port)
        self.progress = Progress(self.gw.db, self.names)
        builds: dict[str, Path] = {}
        for name, board, drafting in NODES:
            if board not in builds:
                builds[board] = build_x64(board, self.tmp / "build" / board)
            heap = int(json.loads((ROOT / "boards" / (board + ".json")).read_text())["heap_bytes"]) * WORD_RATIO
            try:
                self.nodes[name] = VNode(board, self.tmp / "fs" / name, builds[board], self.node_cfg(drafting),
                                         heap=heap, model=draft if drafting else None, keys=keys, name=name)
            except VBoardError as e:
                raise SoakError("virtual board %s (%s) did not boot: %s" % (name, board, e)) from None
            self.relays[name].attach(self.nodes[name].uart_port)
            _say("%s (%s%s) booted" % (name, board, ", drafting" if drafting else ""))

    def close(self) -> None:
        if self.gw is not None:
            self.gw.stop()
        for r in self.relays.values():
            r.close()
        for n in self.nodes.values():
            n.close()
        if self.sub is not None:
            self.sub.close()
        if self.broker is not None:
            self.broker.stop()

    # ---- waiting ----

    def wait(self, seconds: float) -> None:
        """Let the run go on for `seconds`, keeping an eye on the gateway and the boards."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))
            self.check_alive()

    def check_alive(self) -> None:
        assert self.gw is not None
        if not self.gw.alive():
            raise SoakError("the gateway exited (%s) outside a fault: %s" % (self.gw.proc.returncode, self.gw.tail()))
        for name, n in self.nodes.items():
            if not n.vb.running:
                raise SoakError("virtual board %s stopped: %s" % (name, n.vb.error))

    def flowing(self, names: list[str], timeout: float) -> bool:
        """Every named node's session up again and new lines of each stored within `timeout` s."""
        assert self.progress is not None and self.gw is not None
        self.progress.poll()
        before = dict(self.progress.count)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            time.sleep(0.5)
            if not self.gw.alive():
                return False
            self.progress.poll()
            st = self.gw.status()
            up = {s["name"] for s in (st or {}).get("sessions", []) if s.get("established")}
            if all(n in up and self.progress.count[n] > before[n] for n in names):
                return True
        return False

    # ---- faults ----

    def lines_per_s(self) -> float:
        """Lines a node logs per real second at the plant rate measured so far (its sample lines)."""
        plant_per_s = self.rate * 86400 if self.rate > 0 else 1000.0 / self.tick_ms
        return MACHINES / SAMPLE_EVERY * plant_per_s

    def ring_lines(self) -> int:
        """Lines the spill ring holds at most (usable blocks of 4096 B, records of at most 112 B here)."""
        return (SPILL_BYTES // 4096 - 1) * (4096 // 112)

    def inject(self, kind: str, i: int) -> None:
        """Fault `kind` (its i-th round), then: did everything come back (the gateway up, every node's session
        up again and its lines flowing)?"""
        t0 = time.monotonic()
        note: dict = {"kind": kind}
        ok = getattr(self, "_" + kind)(i, note)  # False: the fault's own check failed
        self.injected[kind] += 1
        flowing = self.flowing(self.names, 90.0)
        if not (ok and flowing):
            self.survived[kind] = False
        note.update(ok=ok and flowing, s=round(time.monotonic() - t0, 1))
        self.fault_log.append(note)
        _say("fault %s %s" % (kind, json.dumps({k: v for k, v in note.items() if k != "kind"})))

    def _garbage(self, i: int, note: dict) -> bool:
        name = self.names[i % len(self.names)]
        for _ in range(5):
            self.relays[name].garbage(256)
            self.wait(0.3)
        note["node"] = name
        return True

    def _link_cut_over_budget(self, i: int, note: dict) -> bool:
        logs = [n for n, _b, d in NODES if not d]
        name = logs[i % len(logs)]
        over = (self.ring_lines() + QUEUE) * 2.0 / max(self.lines_per_s(), 0.1)  # twice what ring + queue hold
        self.relays[name].cut()
        self.wait(over)
        self.relays[name].mend()
        note.update(node=name, cut_s=round(over, 1), lines_in_cut=round(over * self.lines_per_s()))
        return True

    def _gateway_kill9(self, i: int, note: dict) -> bool:
        assert self.gw is not None
        self.gw.kill9()
        time.sleep(1.0)
        self.gw.start()
        return True

    def _broker_restart(self, i: int, note: dict) -> bool:
        assert self.broker is not None
        self.broker.restart(1.0)
        return True

    def _power_cut_during_spill(self, i: int, note: dict) -> bool:
        name = self.names[i % len(self.names)]
        spill_s = (QUEUE + self.ring_lines() / 3) / max(self.lines_per_s(), 0.1)  # a third of the ring used
        self.relays[name].cut()
        self.wait(spill_s)
        self.nodes[name].vb.reboot()  # the interpreter killed: a power cut; it boots again (boot.py, main.py)
        self.wait(1.0)
        self.relays[name].mend()
        note.update(node=name, spill_s=round(spill_s, 1))
        return True

    def _disk_full(self, i: int, note: dict) -> bool:
        assert self.gw is not None
        self.gw.limit_files(65536)  # far below the store's size by now: no write that grows a file succeeds
        full = False
        end = time.monotonic() + 20
        while time.monotonic() < end and not full:
            self.wait(0.5)
            full = bool((self.gw.status() or {}).get("store_full"))
        hold = min(8.0, self.ring_lines() / 2 / max(self.lines_per_s(), 0.1))  # within the nodes' rings
        self.wait(hold)
        self.gw.limit_files(None)
        note.update(store_said_full=full, held_s=round(hold, 1))
        room = self.flowing(self.names, 90.0) and not (self.gw.status() or {}).get("store_full")
        return full and room

    def _power_cut_during_model_write(self, i: int, note: dict) -> bool:
        note.update(self.model_write_cut(i))
        return note.get("final") == "running"

    def model_write_cut(self, i: int) -> dict:
        """`edgetwin update` a new draft into the drafting node, cut its power while the gateway sends it (the
        node writing its second slot), follow the transfer to "verified" (it resumes from what the node holds),
        then cut the power again: that boot is the new model's trial, which must end "running"."""
        from host.gateway import TINY_SEQ_LEN
        from host.store import LogStore
        from tools.demo import spec_models

        assert self.gw is not None
        name = next(n for n, _b, d in NODES if d)
        # another draft of the same shape (its logits scaled a little differently): a real change of model
        model = self.tmp / ("update-%d.mbf" % i)
        model.write_bytes(spec_models.make_pair(TINY_SEED, seq_len=TINY_SEQ_LEN, logit_gain=3.0 + 0.25 * (i + 1)).mbf)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        q = subprocess.run([sys.executable, "-m", "host.cli", "update", "--node", name, "--model", str(model), "--db",
                            str(self.gw.db), "--no-wait"], cwd=str(ROOT), env=env, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        if q.returncode != 0:
            return {"node": name, "final": "not queued: " + (q.stderr.strip().splitlines() or ["?"])[-1][:200]}

        def job() -> dict:
            st = LogStore(self.gw.db, readonly=True)
            try:
                return st.update_job(name) or {}
            finally:
                st.close()

        def until(states: tuple, timeout: float) -> dict:
            end = time.monotonic() + timeout
            j: dict = {}
            while time.monotonic() < end:
                j = job()
                if j.get("state") in states:
                    break
                self.wait(0.05)
            return j

        out: dict = {"node": name, "model_bytes": model.stat().st_size}
        j = until(("sending", "verified", "failed", "no_room"), 60)  # the gateway sends: the node is writing
        out["state_at_cut"] = "%s at %s bytes" % (j.get("state"), j.get("offset"))
        self.nodes[name].vb.reboot()
        j = until(("verified", "failed", "no_room"), 120)
        out["after_cut"] = j.get("state")
        st = LogStore(self.gw.db, readonly=True)
        try:  # where the node took the transfer up again after the cut ("UPDATE resumed id=N at B of S")
            resumed = [r["text"] for r in st.logs(name)[-400:] if r["text"].startswith("UPDATE resumed")]
        finally:
            st.close()
        out["resumed"] = resumed[-1] if resumed else None
        if j.get("state") == "verified":
            self.nodes[name].vb.reboot()  # the next boot: the new model's trial
            j = until(("running", "rolled_back", "failed"), 120)
        out["final"] = j.get("state")
        return out

    # ---- the run ----

    def run(self) -> None:
        assert self.gw is not None and self.progress is not None
        t0 = time.monotonic()
        if not self.flowing(self.names, 120.0):
            raise SoakError("the nodes' lines never reached the store: %s" % self.gw.tail())
        kinds = [k for k in FAULT_KINDS if k not in self.skipped]
        schedule = [kinds[j % len(kinds)] for j in range(self.rounds * len(kinds))]
        # the faults at evenly spaced fractions of the plant days, from 10 % to 85 %: the first and the last
        # plant hour stay quiet (the heap is compared there)
        at = [0.1 + 0.75 * j / max(1, len(schedule) - 1) for j in range(len(schedule))]
        nxt = 0
        last_say = 0.0
        t_first = time.monotonic()
        d_first = 0.0
        while True:
            self.wait(1.0)
            self.progress.poll()
            days = self.progress.min_days()
            el = time.monotonic() - t_first
            if days > 0 and d_first == 0.0:
                d_first, t_first = days, time.monotonic()
            elif el > 5 and days > d_first:
                self.rate = (days - d_first) / el
            if time.monotonic() - last_say > 15:
                last_say = time.monotonic()
                _say("%.2f of %g plant days, %.0f s, %d faults" % (days, self.plant_days, time.monotonic() - t0, nxt))
            if nxt < len(schedule) and days >= at[nxt] * self.plant_days:
                self.inject(schedule[nxt], nxt // len(kinds))
                nxt += 1
                continue
            if days >= self.plant_days and nxt >= len(schedule):
                break
            if time.monotonic() > self.deadline:
                _say("the time limit came before %g plant days" % self.plant_days)
                break
        for r in self.relays.values():
            r.mend()

    def drain(self, timeout: float) -> bool:
        """Wait until every node reported an empty backlog after its lines so far were stored, and the outbox
        has nothing queued; True when all of it happened within `timeout` s."""
        assert self.gw is not None
        end = time.monotonic() + timeout
        q = ("SELECT text FROM logs JOIN nodes ON nodes.id=logs.node WHERE nodes.name=? AND logs.level=0 AND "
             "logs.text LIKE 'NODE heap=%' ORDER BY logs.id DESC LIMIT 1")
        while time.monotonic() < end:
            self.wait(1.0)
            con = sqlite3.connect("file:%s?mode=ro" % self.gw.db, uri=True, timeout=5)
            try:
                last = [con.execute(q, (n,)).fetchone() for n in self.names]
            finally:
                con.close()
            if all(r is not None and fields(r[0]).get("backlog") == "0" for r in last) and self.outbox_queued() == 0:
                return True
        return False

    def outbox_queued(self) -> int:
        return len(self.outbox_state()[1])

    def outbox_state(self) -> tuple[dict, list]:
        """({table: ids the outbox holds acknowledged}, [(table, id) of events not acknowledged yet])."""
        from host.mqtt_topics import classify
        from host.store import Outbox

        assert self.gw is not None
        ob = Outbox(self.gw.db, self._dest())
        try:
            acked: dict[str, set[int]] = {}
            queued: list = []
            for src in Outbox.SOURCES:
                above = ob.acked_above(src)
                mark = ob.marks[src]
                got = acked.setdefault(src, set())
                for row in ob.rows(src, 0, 10 ** 7):
                    kind = "annotation" if src == "annotations" else classify(row["text"])
                    if kind is None or kind == "health":
                        continue
                    if row["id"] <= mark or row["id"] in above:
                        got.add(row["id"])
                    else:
                        queued.append((src, row["id"]))
            return acked, queued
        finally:
            ob.close()

    def _dest(self) -> str:
        con = sqlite3.connect("file:%s?mode=ro" % self.gw.db, uri=True, timeout=5)
        try:
            return str(con.execute("SELECT dest FROM outbox_marks LIMIT 1").fetchone()[0])
        finally:
            con.close()


def node_figures(st, name: str, board: str, drafting: bool) -> dict:
    """A node's line accounting per boot and its heap in the first and last plant hour it reported in."""
    rows = st.logs(name)
    seqs: dict[int, list[int]] = {}
    produced: dict[int, int] = {}
    dropped: dict[int, int] = {}
    reset: dict[int, str] = {}  # why each boot began (NODE reset=)
    heaps: list[tuple[int, int, int]] = []  # (plant time, boot, heap)
    t_plant = None
    for r in rows:
        t = plant_s(r["text"])
        if t is not None:
            t_plant = t
        if r["lseq"]:
            b = int(r["boot"])
            seqs.setdefault(b, []).append(int(r["lseq"]))
            produced[b] = max(produced.get(b, 0), int(r["lseq"]))
        elif r["text"].startswith("NODE heap="):
            f = fields(r["text"])
            b = int(f.get("boot", 0))
            reset.setdefault(b, f.get("reset", "?"))
            produced[b] = max(produced.get(b, 0), int(f.get("lines", 0)))
            dropped[b] = max(dropped.get(b, 0), int(f.get("dropped", 0)))
            if t_plant is not None and (not drafting or "crc" in f):  # a drafting node's main-loop figure
                heaps.append((t_plant, b, int(f["heap"])))
    order = list(reset)  # boots in the order they first reported
    cut = {b for b, nxt in zip(order, order[1:]) if reset[nxt] == "power_on"}  # boots a power cut ended
    stored = {b: len(set(v)) for b, v in seqs.items()}
    dup = sum(len(v) - len(set(v)) for v in seqs.values())
    lost = at_cut = over = 0
    for b, p in produced.items():
        d = p - stored.get(b, 0) - dropped.get(b, 0)
        lost += max(0, d)
        at_cut += max(0, d) if b in cut else 0
        over += max(0, -d)  # reported dropped but stored after all (a frame the link gave up had arrived)
    plant = [t for t in (plant_s(r["text"]) for r in rows) if t is not None]
    # the heap in the first and the last plant hour of the node's longest boot (after 3 reports of warm-up): a
    # reboot starts the heap afresh (and a boot after a model update holds the update's code), so a leak shows
    # within one boot
    by_boot: dict[int, list[tuple[int, int]]] = {}
    for t, b, h in heaps:
        by_boot.setdefault(b, []).append((t, h))
    longest = max((v[3:] for v in by_boot.values() if len(v) > 3), key=lambda v: v[-1][0] - v[0][0], default=[])
    h_first = [h for t, h in longest if t < longest[0][0] + 3600]
    h_last = [h for t, h in longest if t > longest[-1][0] - 3600]
    hf = max(h_first) if h_first else None
    hl = max(h_last) if h_last else None
    return {"board": board, "drafting": drafting, "boots": len(produced), "resets": [reset[b] for b in order],
            "plant_days": round((plant[-1] - plant[0]) / 86400, 3) if plant else 0.0,
            "lines_produced": sum(produced.values()), "lines_stored": sum(stored.values()),
            "lines_dropped_reported": sum(dropped.values()), "lines_lost_unreported": lost,
            "lines_lost_at_power_cut": at_cut, "lines_reported_but_stored": over, "lines_duplicated": dup,
            "lines_spilled_stored": sum(1 for r in rows if r["lseq"] and r["flags"] & 1),
            "heap_first_hour": hf, "heap_last_hour": hl, "heap_reports": len(heaps),
            "heap_boot_plant_hours": round((longest[-1][0] - longest[0][0]) / 3600, 1) if longest else 0,
            "heap_flat": hf is not None and hl is not None and abs(hl - hf) <= HEAP_SLACK}


def report(soak: Soak, real_s: float, drained: bool) -> dict:
    from host.store import LogStore

    assert soak.gw is not None and soak.sub is not None
    acked, queued = soak.outbox_state()
    missing = {src: sorted(ids - soak.sub.keys(src))[:10] for src, ids in acked.items() if ids - soak.sub.keys(src)}
    code = soak.gw.stop()
    con = sqlite3.connect(str(soak.gw.db))
    try:
        integrity = [r[0] for r in con.execute("PRAGMA integrity_check").fetchall()]
    finally:
        con.close()
    st = LogStore(soak.gw.db, readonly=True)
    try:
        nodes = {n: node_figures(st, n, b, d) for n, b, d in NODES}
        notes = [a for a in st.annotations("drafting")]
    finally:
        st.close()
    committed = sum(int(a["tokens"]) for a in notes if a["verified"])
    offline = sum(int(a["tokens"]) for a in notes if not a["verified"])
    tok_s = committed / real_s if real_s else 0.0
    out = {
        "plant_days": round(min(v["plant_days"] for v in nodes.values()), 3), "real_s": round(real_s, 1),
        "tick_ms": soak.tick_ms, "sample_every_s": SAMPLE_EVERY, "machines_per_node": MACHINES,
        "spill_bytes": SPILL_BYTES, "nodes": nodes,
        "lines_lost_unreported": sum(v["lines_lost_unreported"] for v in nodes.values()),
        "lines_lost_reported": sum(v["lines_dropped_reported"] for v in nodes.values()),
        "lines_lost_at_power_cut": sum(v["lines_lost_at_power_cut"] for v in nodes.values()),
        "lines_duplicated": sum(v["lines_duplicated"] for v in nodes.values()),
        "heap_flat": all(v["heap_flat"] for v in nodes.values()),
        "power_cut_ram_lines_max": QUEUE + WINDOW,
        "faults_injected": soak.injected, "faults_survived": {k: v for k, v in soak.survived.items()
                                                              if soak.injected[k]},
        "faults_skipped": soak.skipped, "faults": soak.fault_log,
        "committed_tokens": committed, "offline_tokens": offline, "committed_tokens_per_s": round(tok_s, 2),
        "committed_tokens_1e6_real_h": round(1e6 / tok_s / 3600, 1) if tok_s else None,
        "integrity_ok": integrity == ["ok"], "integrity": integrity[:3],
        "outbox_consistent": not missing and not queued, "outbox_acked": sum(len(v) for v in acked.values()),
        "outbox_queued_at_end": len(queued), "outbox_missing_at_subscriber": missing,
        "subscriber_repeats": soak.sub.repeats, "drained": drained, "gateway_exit": code,
        "gateway_starts": soak.gw.starts, "broker_restarts": soak.broker.restarts if soak.broker else 0,
        "models": {"draft": "tiny INT4 test draft, seed %d (tools/demo/spec_models.make_pair)" % TINY_SEED,
                   "target": "tiny:%d (host/tiny_target)" % TINY_SEED},
    }
    out["goals_met"] = goals(out, soak.plant_days)
    return out


def goals(out: dict, plant_days: float) -> dict:
    return {"plant_days": out["plant_days"] >= plant_days * 0.98,
            "lines_lost_unreported": out["lines_lost_unreported"] == 0,
            "lines_duplicated": out["lines_duplicated"] == 0, "heap_flat": out["heap_flat"],
            "integrity_ok": out["integrity_ok"], "outbox_consistent": out["outbox_consistent"],
            "faults_survived": all(out["faults_survived"].values()), "drained": out["drained"]}


def keep(tmp: Path, dest: Path) -> None:
    """The run's store, the gateway's log and its last status, for a look after the run."""
    import shutil

    dest.mkdir()
    for name in ("soak.db", "gateway.log", "status.json"):
        if (tmp / name).exists():
            shutil.copyfile(tmp / name, dest / name)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plant-days", type=float, default=7.0, help="plant days to run (default 7)")
    ap.add_argument("--tick-ms", type=int, default=3, help="real ms per plant second (default 3: 7 days in ~30 min)")
    ap.add_argument("--faults", type=int, default=3, help="rounds of the fault schedule, every kind once a round "
                    "(default 3)")
    ap.add_argument("--short", action="store_true", help="the test's version: 0.2 plant days at tick 2, one round")
    ap.add_argument("--max-minutes", type=float, default=45.0, help="stop there even if the plant days are not "
                    "reached (default 45)")
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR",
                    help="copy the store and the gateway's log into DIR (a new directory) for a look afterwards")
    ap.add_argument("--json", action="store_true", help="print the JSON object only, on one line")
    args = ap.parse_args(argv)
    if args.keep is not None and (args.keep.exists() or not args.keep.parent.is_dir()):
        ap.error("--keep %s: must be a new directory in an existing one" % args.keep)
    if args.short:
        args.plant_days, args.tick_ms, args.faults = 0.2, 2, 1
    if not 0.05 <= args.plant_days <= 60:
        ap.error("--plant-days must be 0.05..60")
    if not 1 <= args.tick_ms <= 1000:
        ap.error("--tick-ms must be 1..1000")
    if not 0 <= args.faults <= 20:
        ap.error("--faults must be 0..20")
    if not 1 <= args.max_minutes <= 24 * 60:
        ap.error("--max-minutes must be 1..1440")
    t0 = time.monotonic()
    # a soak stopped with SIGTERM still stops its gateway, boards and broker: a gateway left running follows its
    # ports by path and would talk into the next programs' ptys
    signal.signal(signal.SIGTERM, lambda _sig, _frm: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="edgetwin-soak-") as tmp:
        soak = Soak(Path(tmp), args.plant_days, args.tick_ms, args.faults, args.max_minutes * 60)
        try:
            soak.start()
            t_run = time.monotonic()
            soak.run()
            drained = soak.drain(DRAIN_S)
            out = report(soak, time.monotonic() - t_run, drained)
        except SoakError as e:
            print("edgetwin bench soak: %s" % e, file=sys.stderr)
            return 2
        finally:
            soak.close()
            if args.keep is not None:
                keep(Path(tmp), args.keep)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out, indent=None if args.json else 2))
    return 0 if all(out["goals_met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
