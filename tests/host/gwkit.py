"""Test kit for the gateway/node tests: a pty interposer with byte and frame faults, gateway processes.

Interposer(node_fd_path) relays bytes between a node-side tty (a virtual board's UART pty, or any pty)
and a fresh pty whose slave the gateway opens through a stable symlink (like /dev/serial/by-id/...).
Per direction it can corrupt bytes (flip a bit, drop, insert a random byte, each with probability
ppm/3 per million per byte), drop or duplicate whole frames (split at 0x00 delimiters), pace the line
at a baud rate (10 bits per byte), and unplug()/replug() the gateway side (the pty disappears and a
new one appears under the same symlink).
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tools.bench.link import byte_errors
from tools.board.vboard import set_raw, write_all

ROOT = Path(__file__).resolve().parents[2]


class Faults:
    def __init__(self, ppm: int = 0, drop_frames: float = 0.0, dup_frames: float = 0.0, seed: int = 1) -> None:
        self.ppm = ppm
        self.drop_frames = drop_frames
        self.dup_frames = dup_frames
        self.rng = random.Random(seed)
        self.events = 0
        self.frames = 0
        self.frames_dropped = 0
        self.frames_duped = 0
        self._pending = bytearray()

    def _bytes(self, data: bytes) -> bytes:
        if not self.ppm:
            return data
        out, events = byte_errors(data, self.ppm, self.rng)
        self.events += events
        return out

    def apply(self, data: bytes) -> bytes:
        if not (self.drop_frames or self.dup_frames):
            return self._bytes(data)
        self._pending += data
        out = bytearray()
        while True:
            i = self._pending.find(0, 1)  # a frame: from its leading 0x00 up to the next one
            if i < 0:
                break
            chunk = bytes(self._pending[:i])
            del self._pending[:i]
            if len(chunk) > 1:
                self.frames += 1
                r = self.rng.random()
                if r < self.drop_frames:
                    self.frames_dropped += 1
                    continue
                if r < self.drop_frames + self.dup_frames:
                    self.frames_duped += 1
                    out += chunk + b"\x00"
            out += chunk
        return self._bytes(bytes(out))


class Interposer:
    """Relay between `node_path` (a tty) and a new pty reachable at `link_path` (a symlink)."""

    def __init__(self, node: str | int, link_path: Path, to_gw: Faults | None = None, to_node: Faults | None = None,
                 baud: int = 0) -> None:
        if isinstance(node, int):  # a pty master we were given
            self.node_fd = node
            os.set_blocking(node, False)
        else:
            self.node_fd = os.open(node, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
            set_raw(self.node_fd)
        self.link_path = Path(link_path)
        self.to_gw = to_gw or Faults()
        self.to_node = to_node or Faults()
        self.baud = baud
        self._lock = threading.Lock()
        self._plug()
        self._stop = False
        self.bytes_to_gw = 0
        self.bytes_to_node = 0
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _plug(self) -> None:
        self.master, self.slave = os.openpty()
        set_raw(self.slave)
        os.set_blocking(self.master, False)
        tmp = self.link_path.with_suffix(".new")
        if tmp.exists() or tmp.is_symlink():
            tmp.unlink()
        os.symlink(os.ttyname(self.slave), tmp)
        os.replace(tmp, self.link_path)

    def unplug(self) -> None:
        """The gateway's port disappears (its reads fail); bytes from the node are lost meanwhile."""
        with self._lock:
            for fd in (self.master, self.slave):
                os.close(fd)
            self.master = self.slave = -1
            try:
                self.link_path.unlink()
            except FileNotFoundError:
                pass

    def replug(self) -> None:
        with self._lock:
            self._plug()

    def _run(self) -> None:
        sec_per_byte = 10.0 / self.baud if self.baud else 0.0
        while not self._stop:
            with self._lock:
                master = self.master
            fds = [self.node_fd] + ([master] if master >= 0 else [])
            try:
                ready, _, _ = select.select(fds, [], [], 0.01)
            except (OSError, ValueError):
                continue
            for fd in ready:
                try:
                    data = os.read(fd, 4096)
                except (BlockingIOError, OSError):
                    continue
                if not data:
                    continue
                with self._lock:
                    if fd == self.node_fd:
                        out = self.to_gw.apply(data)
                        self.bytes_to_gw += len(out)
                        if self.master >= 0:
                            write_all(self.master, out)
                    elif fd == self.master:
                        out = self.to_node.apply(data)
                        self.bytes_to_node += len(out)
                        write_all(self.node_fd, out)
                if sec_per_byte:
                    time.sleep(len(data) * sec_per_byte)

    def close(self) -> None:
        self._stop = True
        self._t.join(2)
        for fd in (self.master, self.slave, self.node_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


class GatewayProc:
    """`python -m host.cli gateway ...` as a subprocess, with its status file."""

    def __init__(self, ports: list[str], db: Path, status: Path, extra: list[str] | None = None,
                 baud: int = 921600, keys: Path | None = None) -> None:
        # keys: the keys file its nodes were provisioned in (VNode(keys=...)); None: --insecure (unsigned nodes)
        self.args = [sys.executable, "-m", "host.cli", "gateway", "--db", str(db), "--status", str(status),
                     "--baud", str(baud)] + (["--keys", str(keys)] if keys is not None else ["--insecure"])
        for p in ports:
            self.args += ["--port", p]
        self.args += extra or []
        self.status_path = status
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(self.args, cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def status(self) -> dict | None:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None

    def wait_status(self, pred, timeout: float = 30.0, what: str = "") -> dict:
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            st = self.status()
            if st is not None and st.get("pid") == self.proc.pid and pred(st):
                return st
            if self.proc.poll() is not None:
                raise AssertionError("gateway exited %s: %s" % (self.proc.returncode, self.proc.stderr.read().decode()))
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s; last status %s" % (what, st))

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


# ---------------------------------------------------------------- virtual nodes

_BUILDS: dict[str, Path] = {}
_BUILD_ROOT: Path | None = None


def x64_build(board: str) -> Path:
    """The x64 build of a board profile, made once per test process (mpy-cross takes seconds)."""
    global _BUILD_ROOT
    from tools.board import build

    if board not in _BUILDS:
        if _BUILD_ROOT is None:
            import tempfile

            _BUILD_ROOT = Path(tempfile.mkdtemp(prefix="edgetwin-gwkit-"))
        _BUILDS[board] = build.build(board, arch="x64", out_dir=_BUILD_ROOT / board)
    return _BUILDS[board]


TINY_SEED = 3

# MicroPython's heap is counted in words: 8 bytes on this 64-bit unix port, 4 on the boards
WORD_RATIO = 2


def unix_heap(board: str) -> int:
    """A board profile's measured heap_bytes in this port's bytes: the same number of heap words."""
    return int(json.loads((ROOT / "boards" / (board + ".json")).read_text())["heap_bytes"]) * WORD_RATIO


def tiny_mbf() -> bytes:
    from host.gateway import TINY_SEQ_LEN
    from tools.demo import spec_models

    return spec_models.make_pair(TINY_SEED, seq_len=TINY_SEQ_LEN).mbf


class VNode:
    """A virtual board running firmware/node.py from /main.py, its UART behind an Interposer."""

    def __init__(self, board: str, root: Path, link_path: Path, node_cfg: dict, heap: int | None = None,
                 model: bytes | None = None, to_gw: Faults | None = None, to_node: Faults | None = None,
                 keys: Path | None = None, stub: bool = False) -> None:
        """stub: the build's main.py and code-update boot stub (codeslot.mpy), as `edgetwin build --node` makes
        them; else a two-line main.py."""
        from tools.board import build, deploy
        from tools.board.vboard import VirtualBoard

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.vb = VirtualBoard(board, root=root, heap_bytes=heap)
        self.vb.start()
        try:
            deploy.deploy(x64_build(board), self.vb.repl_port)
            cfg = dict(node_cfg)
            if model is not None:
                (root / "draft.mbf").write_bytes(model)
                cfg["model"] = "/draft.mbf"
            else:
                cfg["model"] = None
            (root / "node.json").write_text(json.dumps(cfg))
            if stub:
                (root / "main.py").write_text(build.NODE_MAIN)
                build._add_codeslot(root, "x64", build.mpy_cross_exe())
            else:
                (root / "main.py").write_text("import firmware.node as n\nn.main()\n")
            if keys is not None:  # what deploy --node provisions: a key on the board and in the gateway's file
                from host.linkkeys import KeyFile
                from tools.board.vnode import provision

                self.uid = provision(root, KeyFile(keys), root.name)
            self.vb.reboot()  # boots into main.py: the node runs
            self.ip = Interposer(self.vb.uart_port, link_path, to_gw, to_node)
        except BaseException:
            self.vb.stop()
            raise

    def reboot(self) -> None:
        self.vb.reboot()

    def console(self, wait: float = 0.5) -> str:
        """What the board printed on its REPL (a traceback if the node died), read for `wait` seconds."""
        fd = os.open(self.vb.repl_port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        out = bytearray()
        try:
            end = time.monotonic() + wait
            while time.monotonic() < end:
                try:
                    out += os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    time.sleep(0.05)
        finally:
            os.close(fd)
        return out.decode("utf-8", "replace")[-3000:]

    def close(self) -> None:
        self.ip.close()
        self.vb.stop()


def node_reports(db: Path, name: str) -> list[dict]:
    """The NODE lines of one node in the store, parsed, with the boot epoch they came from."""
    from host.store import LogStore

    s = LogStore(db, readonly=True)
    try:
        out = []
        for r in s.logs(name):
            if r["text"].startswith("NODE "):
                f = dict(kv.split("=", 1) for kv in r["text"].split()[1:])
                f["epoch"] = r["epoch"]
                out.append(f)
        return out
    finally:
        s.close()


def check_logs_acked(db: Path, name: str) -> dict:
    """Every LOG line a node saw acknowledged by this store's gateway is stored.

    The node's NODE lines carry logs_acked (LOG frames acknowledged since its boot) and logs_sent (LOG
    frames sent before that report). Acks are cumulative and in send order. Per boot epoch: if the
    epoch's first frames went to this store, its latest logs_acked lines must all be here; otherwise
    (the epoch began with an earlier store) the first report stored here was never acknowledged by the
    earlier gateway (it would have been stored there and not resent), so neither was any LOG frame from
    it on: at least latest logs_acked - (logs_sent of that first report) lines must be here. A frame of an
    epoch may carry a line of an earlier boot from the flash ring (SPILLED, stored under its own boot and line
    number, once: a line the gateway already had is acknowledged and not stored again), so the epoch's frames
    sent SPILLED (its reports' spilled=) less the spilled lines stored under it are not required there (the
    store's own line numbers, LogStore.line_loss, account for those lines).
    Returns {epoch: (stored, required)}; AssertionError if a line is missing."""
    from host.store import LogStore

    s = LogStore(db, readonly=True)
    try:
        stored: dict[int, int] = {}
        own_spilled: dict[int, int] = {}
        low: dict[int, int] = {}
        for r in s.logs(name):
            stored[r["epoch"]] = stored.get(r["epoch"], 0) + 1
            own_spilled[r["epoch"]] = own_spilled.get(r["epoch"], 0) + (r["flags"] & 1)
            low[r["epoch"]] = min(low.get(r["epoch"], 1 << 62), r["seq"])
    finally:
        s.close()
    first_sent: dict[int, int] = {}
    last: dict[int, int] = {}
    spilled: dict[int, int] = {}
    for rep in node_reports(db, name):
        ep = rep["epoch"]
        first_sent.setdefault(ep, int(rep["logs_sent"]))
        last[ep] = max(last.get(ep, 0), int(rep["logs_acked"]))
        spilled[ep] = max(spilled.get(ep, 0), int(rep.get("spilled", 0)))
    out = {}
    for ep in last:
        began_here = low.get(ep, 1 << 62) < 16  # the epoch's first frames (seq 0...) went to this store
        earlier = max(0, spilled[ep] - own_spilled.get(ep, 0))  # frames carrying an earlier boot's lines
        need = last[ep] - (0 if began_here else first_sent[ep]) - earlier
        assert stored.get(ep, 0) >= need, "node %s epoch %08x: %d lines acked here, %d stored" % (
            name, ep, need, stored.get(ep, 0))
        out[ep] = (stored.get(ep, 0), need)
    return out


def tiny_drafting_run(uart_port: str, baud: int, kv: dict, tmp: Path, tokens: int, name: str = "pico",
                      target: str | None = None, signed: bool = False) -> dict:
    """A node drafting at uart_port against `edgetwin gateway --model TARGET --trace` (default: the tiny seeded
    target, tiny:TINY_SEED, for the tiny seeded draft; "smollm2" for the shipped draft), until `tokens` are
    verified and two more NODE reports are stored. Checks what every such run must hold: no bad frame, no CRC
    error, no desync, lockstep, and every verified token the target's own greedy token after the same prefix
    (the trace replayed through the target alone with the board's sink and window). Returns {"status" (the
    gateway's last), "run_s" (host time to the tokens), "replay", "db", "heaps" (the NODE reports' heap in use,
    in order)}. signed: the node was deployed with a key (`edgetwin deploy --node` into this run's keys file,
    $EDGETWIN_KEYS): the gateway refuses unsigned frames, and the run checks none was refused."""
    target = target or "tiny:%d" % TINY_SEED
    db, trace = tmp / "g.db", tmp / "trace.jsonl"
    gw = GatewayProc(["%s=%s" % (name, uart_port)], db, tmp / "st.json", baud=baud,
                     extra=["--peer-timeout", "30", "--model", target, "--trace", str(trace)],
                     keys=Path(os.environ["EDGETWIN_KEYS"]) if signed else None)
    t_run = time.monotonic()
    try:
        gw.wait_status(lambda s: s["sessions"] and s["sessions"][0].get("spec", {}).get("tokens_verified", 0) >= tokens,
                       timeout=600, what="%d verified draft tokens" % tokens)
        run_s = time.monotonic() - t_run
        n0 = len(node_reports(db, name))
        gw.wait_status(lambda s: len(node_reports(db, name)) >= n0 + 2, timeout=60, what="two more NODE reports")
        st = gw.status()
    finally:
        gw.stop()
    sess = st["sessions"][0]
    spec = sess["spec"]
    assert sess["bad_frames"] == 0 and sess["link_err_crc"] == 0 and spec["desync"] == 0, sess
    assert spec["lockstep_bad"] == 0 and spec["lockstep_ok"] >= 1, spec
    if signed:
        assert not st["insecure"] and sess["auth_unsigned"] == sess["auth_bad_key"] == sess["auth_replayed"] == 0, sess
    replay = greedy_replay(trace, name, target, kv)
    assert replay["verified"] >= tokens and replay["gaps"] == 0, replay
    assert replay["equal"] == replay["verified"], replay
    heaps = [int(r["heap"]) for r in node_reports(db, name) if "crc" in r]
    return {"status": st, "run_s": run_s, "replay": replay, "db": db, "heaps": heaps}


# The replay in a child Python with one BLAS thread, as the gateway runs: in the test's own process numpy's
# OpenBLAS threads spin for the cores the still-running board (an emulator, a virtual board) holds, and SmolLM2's
# forward steps ran 4-25x slower (a 96-token shipped-draft run's replay took ~2 minutes instead of ~15 s).
_REPLAY = """import json, sys
from tools.bench import board, trace_replay
trace, name, target, sink, window = sys.argv[1:]
print(json.dumps(trace_replay.greedy_replay(trace, name, board.load_target(target), int(sink), int(window))))
"""


def greedy_replay(trace: Path, name: str, target: str, kv: dict) -> dict:
    """tools/bench/trace_replay.greedy_replay of one node's stream through the target (a --model name)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", _REPLAY, str(trace), name, target, str(kv["sink"]), str(kv["window"])],
                         cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, "the trace replay failed:\n" + res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


class PtyLink:
    """A gateway Session on the master side of a pty whose slave is a CPython node's UART (what a virtual
    board's relay would be): `uart` is the node's end, `sess` polls the other. close() closes both fds."""

    def __init__(self, store, name: str = "n") -> None:
        from firmware import uart
        from host.session import Session

        self.m, self.s = os.openpty()
        set_raw(self.s)
        set_raw(self.m)
        os.set_blocking(self.m, False)
        self.sess = Session("/dev/null", store, name=name)
        self.sess.transport = self  # type: ignore[assignment]
        self.uart = uart.PtyUART(os.ttyname(self.s))

    def readinto(self, buf) -> int:
        try:
            got = os.read(self.m, len(buf))
        except BlockingIOError:
            return 0
        buf[:len(got)] = got
        return len(got)

    def write(self, buf, n=None) -> int:
        return os.write(self.m, bytes(buf[:len(buf) if n is None else n]))

    def fileno(self) -> int:
        return self.m

    def close(self) -> None:
        os.close(self.m)
        os.close(self.s)
