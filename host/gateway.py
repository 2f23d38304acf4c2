"""The gateway process: one session per serial port, one log store, one batched verifier.

    gw = Gateway(["/dev/ttyACM0", "/dev/ttyUSB1"], db="edgetwin.db", target=None)
    gw.run()                      # until SIGINT/SIGTERM (or gw.stop())

Each round: every session polls its link (reads, delivers LOG/PROMPT/DRAFT, acks, retransmits); then
the pending draft blocks of all nodes are verified in ONE batched target pass (host/verifier.py:
Verifier.verify over every session's Stream) and a VERDICT goes back to each node; committed
annotation tokens are decoded and stored. The loop sleeps in select() on the ports' fds (at most
`tick_s`) when nothing is pending.

Restart safety: everything a node was acknowledged is in the store (sessions commit before writing);
a restarted gateway restores each link's receive state from the store, and each node learns of the
restart from the new HELLO epoch and resends what was not acknowledged, plus (drafting nodes) its
recent token window as PROMPT frames so a fresh target cache is rebuilt (docs/GATEWAY.md).

With `status_path`, a JSON snapshot of every session (and its stream) is written there atomically every
`status_s` seconds and at exit: what the tests and an operator read.

With `outlets` (host/mqtt.Publisher for `--mqtt`, host/sparkplug.SparkplugNode for `--sparkplug`,
host/opcua.OpcuaView for `--opcua`), the committed rows go out from each outlet's own thread; the loop only
tells them when a node comes or goes, prints their notices and puts their status under their `name`.

With `keep_status` (`edgetwin gateway --ui`), the same snapshot is kept in `snapshot` for the dashboard
(host/ui), which serves it from its own thread.

With `out` (a text stream: `edgetwin gateway` gives stdout unless --quiet), the operator sees the sessions come
and go ("node NAME connected (board B, uid U) on PORT", "node NAME lost on PORT: why"), a port that goes
away and comes back ("port PORT gone: why; ...", "port PORT back after N s (DEVICE)": one line each, however
many tries the session makes between) and, every
`status_every` seconds, one status line: nodes up, lines stored, annotations, the draft acceptance rate and
the verified tokens per second since the last status line.
"""

from __future__ import annotations

import json
import os
import select
import zlib
import signal
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from host.session import PortError, Session
from host.store import LogStore, StoreFull
from shared import episode, frame, frame_host


class Gateway:
    def __init__(self, ports: list[str], db: str | Path, baud: int = 115200, names: list[str] | None = None,
                 spec_factory: Callable | None = None, verify: Callable[[list], None] | None = None,
                 status_path: str | Path | None = None, status_s: float = 0.5, tick_s: float = 0.002,
                 out=None, status_every: float = 30.0, peer_timeout_s: float = 3.5, outlets: list | None = None,
                 plants: list | None = None, keys=None, insecure: bool = True) -> None:
        if not ports:
            raise ValueError("at least one --port is needed")
        if len(set(ports)) != len(ports):
            raise ValueError("a port is given twice: %s" % ", ".join(sorted(p for p in ports if ports.count(p) > 1)))
        self.store = LogStore(db)
        names = list(names or [None] * len(ports))  # type: ignore[list-item]
        plants = list(plants or [None] * len(ports))
        if len(plants) == 1 and len(ports) > 1:
            plants *= len(ports)
        if len(plants) != len(ports):
            raise ValueError("%d plant descriptions for %d ports" % (len(plants), len(ports)))
        for i, d in enumerate(plants):  # a node is named by its description when only it runs that plant
            if names[i] is None and d is not None and not d.simulator and plants.count(d) == 1:
                names[i] = d.name
        self.sessions = [Session(p, self.store, name=n, baud=baud, spec_factory=spec_factory,
                                 peer_timeout_s=peer_timeout_s, plant=d, keys=keys, insecure=insecure)
                         for p, n, d in zip(ports, names, plants)]
        self._plant_said = [""] * len(self.sessions)
        self.node_errors: dict[str, list[str]] = {}  # per node: its "NODE ... error: ..." lines (printed)
        for s in self.sessions:
            self._watch_errors(s)
        self.verify = verify
        self.outlets = list(outlets or ())  # started by open(), in order; stopped by close()
        self.status_path = Path(status_path) if status_path else None
        self.keep_status = False  # True: keep the latest status() in self.snapshot even without status_path
        self.snapshot: dict | None = None
        self.status_s = status_s
        self.tick_s = tick_s
        self._stop = False
        self._closed = False
        self._last_status = 0.0
        self.rounds = 0
        self.started = time.time()
        self.out = out
        self.status_every = status_every
        self._up = [False] * len(self.sessions)
        self._full_said = False  # whether the operator was told the store is full
        self._open: list[bool | None] = [None] * len(self.sessions)  # each port as report() last saw it
        self.notifier = None  # host/sdnotify.Notifier under systemd (Type=notify): set by `edgetwin gateway`
        self._next_line = time.monotonic() + status_every
        self._last_line = (time.monotonic(), 0)  # (when, verified tokens then)

    def _watch_errors(self, s: Session) -> None:
        # A node that boots logs-only (a corrupt model, a bad /node.json: firmware/node.py Node.notice) says
        # why in a level-2 LOG line "NODE model error: ..."; the store keeps it, the operator sees it here.
        inner = s.link.on_frame

        def on_frame(t: int, buf: bytearray, off: int, n: int) -> None:
            before = s.counts["logs"]
            inner(t, buf, off, n)
            j = off + (frame.LG_TEXT if s.link.peer_minor else frame.LG_TEXT_10)  # the node's LOG layout
            if t == frame.LOG and s.counts["logs"] > before and buf[off + frame.LG_LEVEL] & 7 == 2 and buf[j:j + 5] == b"NODE ":
                text = bytes(buf[j:off + n]).decode("utf-8", "replace")
                if " error: " in text:
                    self.node_errors.setdefault(s.name, []).append(text)
                    self._tell("edgetwin gateway: node %s: %s" % (s.name, text))

        s.link.on_frame = on_frame

    def _tell(self, line: str) -> None:
        """A line the operator must see (a node's error, a node on another plant): on `out`, else on stderr (a
        gateway run by a tool whose stdout is its own, `edgetwin demo --json`)."""
        f = self.out if self.out is not None else sys.stderr
        f.write(line + "\n")
        f.flush()

    def open(self) -> None:
        """Open every port now: PortError for the first that cannot be (a user mistake at start-up)."""
        for s in self.sessions:
            if s.transport is None:
                s.open()
        for o in self.outlets:
            o.start()

    def stop(self, *_: object) -> None:
        self._stop = True

    def round(self) -> None:
        for i, s in enumerate(self.sessions):
            s.poll()
            if s.plant_mismatch != self._plant_said[i]:  # said once per change, in one line
                self._plant_said[i] = s.plant_mismatch
                if s.plant_mismatch:
                    self._tell("edgetwin gateway: node %s %s" % (s.name, s.plant_mismatch))
        self._say_full()
        if self.verify is not None:
            streams = [s for s in self.sessions if s.spec is not None]
            if streams:
                self.verify(streams)
                for s in self.sessions:  # send the verdicts now, not a tick later
                    s.poll()
        self.rounds += 1

    def _say_full(self) -> None:
        """One line when the store fills (host/session.py: nothing it cannot keep is acknowledged), one when it
        has room again; never one per frame."""
        full = self.store.full
        if bool(full) == self._full_said:
            return
        self._full_said = bool(full)
        if full:
            self._tell("edgetwin gateway: log store %s is full (%s): new lines are not acknowledged, the nodes keep "
                       "them (in their flash spill rings once their queues fill) and send them again; trying again "
                       "every %g s: free some space (edgetwin store prune)"
                       % (self.store.path, full, self.sessions[0].full_retry_s))
        else:
            self._tell("edgetwin gateway: log store %s has room again: the lines held back are coming in (%d writes "
                       "refused meanwhile)" % (self.store.path, self.store.full_errors))

    def wait(self) -> None:
        fds = [fd for fd in (s.fileno() for s in self.sessions) if fd is not None]
        if fds:
            select.select(fds, [], [], self.tick_s)
        else:
            time.sleep(self.tick_s)

    def run(self, seconds: float | None = None, handle_signals: bool = True) -> int:
        old = {}
        if handle_signals:
            old = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        end = None if seconds is None else time.monotonic() + seconds
        sd = self.notifier
        try:
            if sd is not None:
                sd.ready("serving %d port(s)" % len(self.sessions))
            while not self._stop and (end is None or time.monotonic() < end):
                self.round()
                self.write_status()
                self.report()
                if sd is not None:
                    sd.tick()  # from the loop itself: a loop stuck anywhere stops the watchdog's pings
                self.wait()
        finally:
            if sd is not None:
                sd.stopping()
            for sig, h in old.items():
                signal.signal(sig, h)
            self.close()
        return 0

    def say(self, line: str) -> None:
        if self.out is not None:
            self.out.write(time.strftime("%H:%M:%S ") + line + "\n")
            self.out.flush()

    def _uid(self, s: Session) -> str:
        for k in ("unique_id", "uid", "node_uid"):  # the handshake's unique id, where the session has one
            v = getattr(s, k, None)
            if v:
                return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)
        return ""

    def _who(self, s: Session) -> str:
        return "node" if s.name is None else "node %s" % s.name  # named by its unique id once its HELLO came

    def report(self) -> None:
        """Sessions up/down since the last call (to `out` and the outlets), the outlets' notices, and a status
        line every status_every seconds (to `out`)."""
        if self.out is None and not self.outlets:
            return
        for i, s in enumerate(self.sessions):
            self._follow_port(i, s)
            up = bool(s.transport is not None and s.link.established)
            if up == self._up[i]:
                continue
            self._up[i] = up
            board, uid = getattr(s, "board_id", ""), self._uid(s)
            why = "" if up else (s.last_error if s.transport is None else "no frame from the node for a while")
            for o in self.outlets:
                o.node_state(s.name, up, board=board, uid=uid, why=why or ("" if up else "link down"))
            if up:
                who = ["board " + board] if board else []
                who += ["uid " + uid] if uid else []
                self.say("%s connected (%s) on %s" % (self._who(s), ", ".join(who) or "no board id", s.url))
            else:
                self.say("%s lost on %s: %s%s" % (self._who(s), s.url, why or "link down",
                                                  "; reopening the port when it is back" if s.transport is None else ""))
        for s in self.sessions:  # refused peers, key rotations: each said once
            while s.notices:
                self.say(s.notices.pop(0))
        for o in self.outlets:
            for line in o.notices():
                self.say(line)
        if self.out is None:
            return
        now = time.monotonic()
        if now >= self._next_line:
            self._next_line = now + self.status_every
            line = self.status_line(now)
            self.say(line)
            if self.notifier is not None:
                self.notifier.status(line)  # `systemctl status` shows it

    def _follow_port(self, i: int, s: Session) -> None:
        """A line when port i goes away (unless its node's "lost" line says it) and one when it is back."""
        is_open = s.transport is not None
        was, self._open[i] = self._open[i], is_open
        if was is None or was == is_open:
            return
        if not is_open and not self._up[i]:
            self.say("port %s gone: %s; reopening it when it is back" % (s.url, s.last_error))
        elif is_open:
            away = time.monotonic() - s.lost_at if s.lost_at is not None else 0.0
            self.say("port %s back after %.1f s%s" % (s.url, away, " (%s)" % s.device if s.device != s.url else ""))

    def status_line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        specs = [s.spec for s in self.sessions if s.spec is not None]
        drafted = sum(sp.stream.stats.get("drafted", 0) for sp in specs if hasattr(sp, "stream"))
        accepted = sum(sp.stream.stats.get("accepted", 0) for sp in specs if hasattr(sp, "stream"))
        notes = sum(sp.counts.get("annotations", 0) for sp in specs if hasattr(sp, "counts"))
        verified = sum(sp.counts.get("tokens_verified", 0) for sp in specs if hasattr(sp, "counts"))
        t0, v0 = self._last_line
        self._last_line = (now, verified)
        rate = (verified - v0) / max(1e-6, now - t0)
        return ("status: %d/%d nodes up, %d lines stored, %d annotations, acceptance %s, %.1f tokens/s"
                % (sum(self._up), len(self.sessions), self.store.count_logs(), notes,
                   "%.2f" % (accepted / drafted) if drafted else "-", rate))

    def status(self) -> dict:
        return {"pid": os.getpid(), "rounds": self.rounds, "uptime_s": round(time.time() - self.started, 3),
                "insecure": all(s.insecure for s in self.sessions),
                "logs_stored": self.store.count_logs(), "sessions": [s.status() for s in self.sessions],
                "store_full": self.store.full, "store_full_errors": self.store.full_errors,
                "node_errors": self.node_errors,
                **{o.name: o.status() for o in self.outlets}}

    def write_status(self, force: bool = False) -> None:
        if self.status_path is None and not self.keep_status:
            return
        now = time.monotonic()
        if not force and now - self._last_status < self.status_s:
            return
        self._last_status = now
        snap = self.status()
        self.snapshot = snap  # replaced whole: another thread (the dashboard, host/ui) reads it as it is
        if self.status_path is None:
            return
        tmp = self.status_path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(snap))
            os.replace(tmp, self.status_path)
        except OSError:  # a full disk: the next snapshot tries again (the store said it is full)
            pass

    def close(self) -> None:
        for s in self.sessions:
            s.close()
        try:
            if self.out is not None and not self._closed:
                self.say("stopped; " + self.status_line())
            self._closed = True
            self.write_status(force=True)
        finally:
            self.store.close()
            outlets, self.outlets = self.outlets, []
            for o in outlets:  # after the last commit: what it committed goes out too
                o.stop()


# ---- speculative streams: one per drafting node, verified together ----

def _crc_ids(ids: list[int]) -> int:
    return zlib.crc32(b"".join(int(t).to_bytes(2, "little") for t in ids))


class NodeStream:
    """A drafting node's token stream at the gateway: host/verifier.TargetMirror plus what the gateway keeps
    about it: the annotation being committed (stored when the episode ends), and a record of
    (committed count -> CRC of the live ids) to check the node's NODE reports against (lockstep)."""

    HISTORY = 4096
    RECENT = 64  # plant lines remembered for _lines_wall: an episode holds at most episode.MAX_LINES

    def __init__(self, session: Session, hello: dict, target, temperature: float, top_k: int, seed: int,
                 decode: Callable[[list[int]], str]) -> None:
        from host import verifier

        self.verifier = verifier
        self.session = session
        self.decode = decode
        self.sink = hello["kv_sink"]
        self.window = hello["kv_window"]
        staged = max(16, 2 * max(1, hello["draft_k"]) * 2 + 1)
        self.stream = verifier.TargetMirror(target, self.sink, self.window, staged, temperature=temperature,
                                      top_k=top_k, seed=seed, name=session.name)
        # a new gateway (or a new session) does not know where the node's stream is: adopt the base of
        # its first PROMPT (0 for a fresh stream, committed - live for a resend_history after our restart)
        self.stream.reset(None)
        self.fresh = True  # adopted mid-stream, the node's resend (UNVERIFIED PROMPT) not yet in
        self.desynced = False
        self.ann: list[int] = []
        self.ann_runs: list[list] = []  # [kind, count] runs of self.ann: draft / fix / unverified (store.SPAN_KINDS)
        self.ann_t0 = 0
        self.ann_verified = True
        # the wall time of the lines the current episode annotates (its PROMPT's log lines, looked up in
        # the node's recent lines): an annotation's span starts there, not when the target got to verify
        # it, so a busy gateway's notes still overlap the log windows they are about (host/store.windows)
        self.episode_t0 = 0
        self.prompting = False  # PROMPT frames since the last VERDICT: one episode's prompt may take several
        self.recent: OrderedDict[str, int] = OrderedDict()  # the node's last RECENT plant lines -> wall ms
        self.history: dict[int, int] = {}
        self.order: list[int] = []
        self.claims: list[tuple[int, int, int]] = []
        self.hook: Callable | None = None  # hook(kind, self, data): "log" text, "prompt" ids, "verdict" dict, "note" text
        self.counts = {"desync": 0, "resets": 0, "rebuilds": 0, "tokens_verified": 0, "tokens_unverified": 0,
                       "annotations": 0,
                       "lockstep_ok": 0, "lockstep_bad": 0, "lockstep_unknown": 0, "verdicts": 0}

    # frames from the node (via Session.on_frame)
    def on_prompt(self, body: bytes) -> None:
        f = frame_host.parse_body(frame.PROMPT, body)  # FrameError (a ValueError): Session counts a bad frame
        base = f["base"]
        unverified = bool(f["flags"] & frame.PR_UNVERIFIED)
        if base == 0 and not unverified:  # the node (re)starts its stream: so do we
            self._restart(0)
        try:
            ids, unv = self.stream.on_prompt(body)
        except self.verifier.StreamDesync:
            if unverified and self.fresh:
                # a new gateway adopted a frame the node had queued for the old one before the node's
                # resend of its cache (UNVERIFIED, from committed - live): rebuild from the resend
                self._restart(None)
                self.counts["rebuilds"] += 1
                ids, unv = self.stream.on_prompt(body)
            else:
                self.counts["desync"] += 1
                self.desynced = True  # until the node restarts its stream (after our STALE verdict)
                self.last_desync = {"base": base, "committed": self.stream.committed, "unverified": unverified}
                return
        self.record()
        if self.hook is not None:
            self.hook("prompt", self, list(ids))
        if unv:
            self.fresh = False  # the node's resend (or offline ids) is in: from now on a wrong base is a desync
            self.counts["tokens_unverified"] += len(ids)
            if self.ann and self.ann_verified:
                self._flush()
            if not self.ann:
                self.ann_t0 = self.session.wall()
            self.ann_verified = False
            self._add(list(ids), "unverified")
        else:
            self._flush()
            t0 = self._lines_wall(ids)
            self.episode_t0 = min(self.episode_t0, t0) if self.prompting else t0
            self.prompting = True

    def _restart(self, committed: int | None) -> None:
        self._flush()
        self.stream.reset(committed)
        self._forget()
        self.fresh = committed is None and self.fresh
        self.desynced = False
        self.counts["resets"] += 1

    def on_draft(self, body: bytes) -> None:
        self.stream.on_draft(body)

    def on_verdict(self, body: bytes, ids: list[int]) -> None:
        self.counts["verdicts"] += 1
        self.counts["tokens_verified"] += len(ids)
        v = frame_host.parse_body(frame.VERDICT, body) if body else None  # (None: a test's stand-in verdict)
        if self.hook is not None and v is not None:
            self.hook("verdict", self, {"ids": list(ids), "accepted": v["accepted"],
                                        "correction": bool(v["flags"] & frame.VD_CORRECTION)})
        if self.ann and not self.ann_verified:
            self._flush()
        if not self.ann:
            self.ann_t0 = self.episode_t0 or self.session.wall()
        self.prompting = False
        self.ann_verified = True
        if v is None:
            self._add(list(ids), "")  # who wrote them is not known: the annotation's spans stay unknown
        else:
            acc = min(len(ids), int(v["accepted"]))  # ids: the accepted draft tokens, then the correction (if any)
            self._add(list(ids[:acc]), "draft")
            self._add(list(ids[acc:]), "fix")
        if ids and "\n" in self.decode([int(ids[-1])]):
            # the note's stop token (shared/episode.is_stop): store it now, not at the next episode's PROMPT,
            # which on a quiet plant comes a summary_s later
            self._flush()

    def on_reboot(self) -> None:  # the node rebooted: its new stream starts at base 0
        self._restart(0)

    def on_log(self, text: str, wall_ms: int | None = None) -> None:
        if self.hook is not None:
            self.hook("log", self, text)
        if not text.startswith("NODE "):
            if wall_ms is not None:
                self._remember(text, wall_ms)
            return
        f = dict(kv.split("=", 1) for kv in text.split()[1:] if "=" in kv)
        try:
            self.claims.append((int(f["committed"]), int(f["live"]), int(f["crc"], 16)))
        except (KeyError, ValueError):
            return
        if self.desynced:
            self.claims.clear()
            self.counts["lockstep_unknown"] += 1
            return
        self._check_claims()

    def _remember(self, text: str, wall_ms: int) -> None:
        try:
            line = episode.prompt_line(text)
        except episode.EpisodeError:
            return
        self.recent.pop(line, None)
        self.recent[line] = int(wall_ms)
        if len(self.recent) > self.RECENT:
            self.recent.popitem(last=False)

    def _lines_wall(self, ids) -> int:
        """The wall time of the earliest of a PROMPT's log lines among the node's recent lines (the newest
        line of that text); the gateway's clock when none is known (the system prompt, a gateway that
        started after the lines were logged, a line still queued behind the prompt)."""
        now = self.session.wall()
        seen = [self.recent[ln] for ln in self.decode([int(i) for i in ids]).split("\n") if ln in self.recent]
        return min([now] + seen)

    # bookkeeping after a verify pass
    def record(self) -> None:
        n = self.stream.committed
        if n in self.history or self.desynced:  # a desynced stream is not the node's: nothing to compare
            return
        ring = self.stream.ids
        if ring.live != min(n, ring.capacity):
            # adopted mid-stream (a frame queued for an earlier gateway): we hold fewer ids than the
            # node's cache does, so a report about this count cannot be compared (until a rebuild)
            return
        ids = ring.tolist()
        self.history[n] = (len(ids), _crc_ids(ids))  # type: ignore[assignment]
        self.order.append(n)
        if len(self.order) > self.HISTORY:
            self.history.pop(self.order.pop(0), None)
        self._check_claims()

    def _check_claims(self) -> None:
        keep = []
        top = self.stream.committed
        for n, live, crc in self.claims:
            if n in self.history:
                ok = self.history[n] == (live, crc)
                self.counts["lockstep_ok" if ok else "lockstep_bad"] += 1
                if not ok:
                    self.last_bad = {"committed": n, "node": (live, crc), "gateway": self.history[n]}
            elif n > top and len(self.claims) < 64:
                keep.append((n, live, crc))  # the gateway gets there after its next pass
            else:
                self.counts["lockstep_unknown"] += 1
        self.claims = keep

    def _forget(self) -> None:
        self.history.clear()
        self.order.clear()
        self.claims.clear()

    def _add(self, ids: list[int], kind: str) -> None:
        if not ids:
            return
        self.ann += ids
        if self.ann_runs and self.ann_runs[-1][0] == kind:
            self.ann_runs[-1][1] += len(ids)
        else:
            self.ann_runs.append([kind, len(ids)])

    def _spans(self, text: str) -> list | None:
        """The annotation's text cut at its runs' token boundaries (decoding each prefix, so a character split
        across two runs goes with the later one); None when the prefixes do not decode to prefixes of text."""
        out, done, n = [], "", 0
        if any(not kind for kind, _count in self.ann_runs):
            return None
        for kind, count in self.ann_runs:
            n += count
            upto = text if n == len(self.ann) else self.decode(self.ann[:n]).rstrip("\ufffd")
            if not text.startswith(upto) or len(upto) < len(done):
                return None
            if len(upto) > len(done):
                if out and out[-1][0] == kind:
                    out[-1][1] += upto[len(done):]
                else:
                    out.append([kind, upto[len(done):]])
            done = upto
        return out

    def _flush(self) -> None:
        if not self.ann:
            return
        text = self.decode(self.ann)
        if self.hook is not None:
            self.hook("note", self, text)
        try:
            self.session.store.add_annotation(self.session.name, self.ann_t0, max(self.ann_t0, self.session.wall()),
                                              text, self.ann_verified, len(self.ann), commit=False,
                                              spans=self._spans(text))
        except StoreFull:  # no room: the note stays and goes with the next one (the gateway says the store is full)
            return
        self.counts["annotations"] += 1
        self.ann = []
        self.ann_runs = []

    def status(self) -> dict:
        st = dict(self.counts)
        st["committed"] = self.stream.committed
        st["drafted"] = self.stream.stats.get("drafted", 0)  # draft tokens judged, and those accepted
        st["accepted"] = self.stream.stats.get("accepted", 0)
        ids = self.stream.ids.tolist()
        st["live"] = len(ids)
        st["live_crc"] = "%08x" % _crc_ids(ids)
        for k in ("last_bad", "last_desync"):
            if hasattr(self, k):
                st[k] = getattr(self, k)
        return st


def load_target(model: str, domain: bool = False):
    """(target, decode) for --model: tiny:SEED (host/tiny_target.make(SEED, seq_len=TINY_SEQ_LEN); that test
    pair has no tokenizer, so its annotations are stored as token ids, "216 33 30") or a GGUF file (the target and
    the tokenizer the GGUF carries, host/qa.load_text_model: annotations are stored as the text they decode to;
    a GGUF without a tokenizer is refused)."""
    if model.startswith("tiny:"):
        from host import tiny_target

        try:
            seed = int(model[5:])
        except ValueError:
            raise ValueError("tiny:SEED needs an integer seed, got %r" % model[5:]) from None
        return tiny_target.make(seed, seq_len=TINY_SEQ_LEN)[0], lambda ids: " ".join(str(t) for t in ids)
    path = Path(model)
    if not path.is_file():
        raise OSError("no such model file %s" % path)
    from host import qa

    target, tok, _ = qa.load_text_model(path, domain)
    return target, qa.text_decoder(tok)


TINY_SEQ_LEN = 512


def make_spec(model: str, temperature: float = 0.0, top_k: int = 0, seed: int = 1, loaded: tuple | None = None,
              hook: Callable | None = None, domain: bool = False):
    """(spec_factory, verify) for Gateway: one NodeStream per drafting node, one batched pass per round.
    loaded: (target, decode) already loaded (e.g. with a text decoder: tools/demo/demo.py), instead of `model`;
    hook: set as every NodeStream's hook (see NodeStream.hook); domain: `model` is the base GGUF of the shipped
    plant adapters (host/target_delta.py), merged in."""
    from host import verifier

    target, decode = loaded if loaded is not None else load_target(model, domain)
    ver = verifier.Verifier(target)

    def factory(session: Session, hello: bytes):
        h = frame_host.parse_body(frame.HELLO, hello)
        if not h["draft_k"]:
            return None  # a node that does not draft: logs only
        sp = NodeStream(session, h, target, temperature, top_k, seed, decode)
        sp.hook = hook
        return sp

    def verify(sessions: list[Session]) -> None:
        specs = [s.spec for s in sessions if s.spec is not None]
        streams = [sp.stream for sp in specs]
        if not streams:
            return
        by_stream = {id(sp.stream): sp for sp in specs}
        for stream, body, ids in ver.verify(streams):
            sp = by_stream[id(stream)]
            if not sp.session.send(frame.VERDICT, body):
                sp.session.counts["verdicts_unsent"] = sp.session.counts.get("verdicts_unsent", 0) + 1
            sp.session.counts["verdicts"] += 1
            sp.on_verdict(body, ids)
        for sp in specs:
            sp.record()

    return factory, verify


__all__ = ["Gateway", "PortError", "NodeStream", "make_spec"]
