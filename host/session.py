"""One gateway session: a serial port (pyserial), the gateway end of the link, and what arrives on it.

A session owns:

- a `SerialTransport`: the port opened as docs/GATEWAY.md section 1 says (``serial_for_url(..., do_not_open=True)``,
  DTR and RTS False before ``open()`` so an ESP32 board is not reset, ``exclusive=True``), read and
  written without blocking, with the link's ``readinto(buf)`` / ``write(buf, n)`` interface. Before any
  byte is written, the log store commits: every frame the gateway sends carries the cumulative ack,
  so nothing acknowledged to the node can be lost by a gateway crash. A store that cannot keep what
  arrived (a full disk: host/store.py StoreFull) gets nothing written; the link goes back to the last
  frame committed and the node sends the rest again, once a second while the store stays full (`_hold`).
- a `shared.link.Link` with the gateway role (selective acks: reorder=8). After a restart the link is
  restored from the receive state persisted with the lines (``Link.restore``): its first HELLO acks
  what was stored, the node resends only the rest.
- the frame handler `on_frame`: LOG lines into the store (idempotent by node, epoch, seq: the link's
  sequence number unwrapped to 64 bits per boot epoch; and by node, boot, line seq for protocol 1.1
  nodes, whose LOG bodies carry them: the layout follows the minor version of the node's HELLO); PROMPT and DRAFT into the speculative stream
  (`spec`, see host/gateway.py); anything malformed is counted and dropped, never raised.
- the plant: the description this port's node should run (`plant`, host/plantdesc.py; the built-in
  simulator's by default). The first line of each node boot names the description it runs (`PLANT ...
  hash=H`, docs/PLANT.md); every line is stored under the hash its boot named. A node whose hash is not
  the expected one is reported (`plant_mismatch`, in the status and by the gateway in one line) and
  nothing of it is verified against the wrong description: its PROMPT and DRAFT frames are dropped
  (counted), its lines still stored.
- operators' commands (`edgetwin ack`: the store's `commands`): sent to a node speaking protocol 1.2 as
  CMD frames once its description is confirmed, marked done when the node's link acknowledged the frame;
  a command not yet delivered (the node away, rebooted, or this gateway restarted) is sent again.

On SerialException/OSError (unplugged board, closed pty), or a tty that hung up (a USB adapter unplugged:
reads return nothing and poll() says POLLHUP), the port is closed and reopened after `reopen_s`, the wait
doubling after each failed try up to `reopen_max_s`; the link keeps its state, so the node and gateway carry
on where they were. A port given as a link (/dev/serial/by-id/..., a udev rule's name) is reopened by that
path only, wherever it points when it is back: the link names the adapter, the tty behind it changes.
"""

from __future__ import annotations

import collections
import errno
import os
import select
import time
from typing import Callable

import serial

from host import linkkeys, plantdesc
from host.store import LogStore, StoreFull
from shared import frame, frame_codec, frame_host, link, plant_alarms
from shared.compat import MASK30, ticks_add, ticks_diff, ticks_ms



_VERBS = {"ACK": plant_alarms.ACK, "SHELVE": plant_alarms.SHELVE, "UNSHELVE": plant_alarms.UNSHELVE}
UPDATE_ACTIVE = ("queued", "sending", "verified")  # a job the gateway still sends or waits on
UPDATE_CHUNK = 512  # model bytes per UPDATE frame (less where the node's frames are smaller)
CTR_BLOCK = 1 << 20  # signed-frame counter values reserved in the store at a time
UNIX_MS_2000 = 946684800000  # 2000-01-01T00:00:00Z: the wire's wall times count days from here


def wall_split(unix_ms: int) -> tuple[int, int]:
    """(day, ms) of a Unix time in ms, as HELLO, TIME and LOG carry it (docs/PROTOCOL.md 3.1)."""
    return divmod(int(unix_ms) - UNIX_MS_2000, frame.MS_PER_DAY)


def wall_unix_ms(day: int, ms: int) -> int | None:
    """Unix ms of a wire wall time; None for WALL_NONE."""
    return None if day == frame.WALL_NONE else UNIX_MS_2000 + day * frame.MS_PER_DAY + ms


class PortError(OSError):
    """A serial port that cannot be opened: missing, busy, or not a serial device."""


def open_serial(url: str, baud: int) -> serial.Serial:
    """Open a port as docs/GATEWAY.md section 1 says; PortError with a one-line reason if it cannot be."""
    try:
        s = serial.serial_for_url(url, baudrate=baud, timeout=0, write_timeout=0, do_not_open=True,
                                  exclusive=True)
    except (serial.SerialException, ValueError) as e:
        raise PortError("cannot use serial port %s: %s" % (url, e)) from None
    s.dtr = False  # before open(): toggling DTR/RTS resets ESP32 boards
    s.rts = False
    try:
        s.open()
    except serial.SerialException as e:
        text = str(e)
        if "exclusively lock" in text or "Resource temporarily unavailable" in text or getattr(e, "errno", 0) in (
                errno.EAGAIN, errno.EBUSY):
            raise PortError("serial port %s is busy: another program (a gateway, mpremote, a terminal) has it "
                            "open" % url) from None
        if getattr(e, "errno", 0) == errno.ENOENT or "No such file" in text:
            raise PortError("serial port %s does not exist: is the board plugged in (or the virtual board "
                            "running)?" % url) from None
        raise PortError("cannot open serial port %s: %s" % (url, text)) from None
    return s


def usb_identity(url: str) -> tuple | None:
    """(vid, pid, serial number) of the USB device behind a port path, or None (ptys, sockets, no USB)."""
    try:
        from serial.tools import list_ports

        real = os.path.realpath(url)
        for p in list_ports.comports():
            if p.vid is not None and os.path.realpath(p.device) == real:
                return (p.vid, p.pid, p.serial_number)
    except Exception:  # noqa: BLE001  (no sysfs, odd platforms: no identity, plain reopen)
        return None
    return None


def find_same_device(ident: tuple) -> str | None:
    try:
        from serial.tools import list_ports

        for p in list_ports.comports():
            if (p.vid, p.pid, p.serial_number) == ident:
                return p.device
    except Exception:  # noqa: BLE001
        return None
    return None


class SerialTransport:
    """pyserial port with the link's transport interface; never blocks; errors surface as OSError."""

    def __init__(self, port: serial.Serial, before_write: Callable[[], None] | None = None) -> None:
        self.port = port
        self.before_write = before_write
        self._fd = getattr(port, "fd", None)  # posix ports: direct non-blocking os.read/os.write
        self._hup = None
        if self._fd is not None and hasattr(select, "poll"):
            self._hup = select.poll()
            self._hup.register(self._fd, select.POLLIN)

    def fileno(self) -> int | None:
        return self._fd

    def readinto(self, buf: bytearray) -> int:
        if self._fd is not None:
            try:
                data = os.read(self._fd, len(buf))
            except BlockingIOError:
                return 0
            if not data:
                # a raw tty (VMIN=0) reads nothing when nothing waits, and also once hung up (its USB adapter
                # unplugged: only a write would fail, and select() says readable at once, for ever)
                for _, ev in self._hup.poll(0) if self._hup is not None else ():
                    if ev & (select.POLLHUP | select.POLLERR):
                        raise OSError(errno.EIO, "the port hung up (its adapter unplugged?)")
                return 0
        else:
            data = self.port.read(len(buf))
        n = len(data)
        buf[:n] = data
        return n

    def write(self, buf: bytearray, n: int | None = None) -> int:
        if n is None:
            n = len(buf)
        if self.before_write is not None and self.before_write() is False:
            return n  # not written: its header acks what the store could not keep (data frames go again)
        view = memoryview(buf)[:n]
        if self._fd is not None:
            try:
                return os.write(self._fd, view)
            except BlockingIOError:
                return 0
        return self.port.write(view) or 0

    def close(self) -> None:
        try:
            self.port.close()
        except Exception:  # noqa: BLE001  (closing a port that is already gone)
            pass


class Session:
    """The gateway side of one node's link. Call poll() often (every few ms); see the module docstring."""

    def __init__(self, url: str, store: LogStore, name: str | None = None, baud: int = 115200,
                 spec_factory: Callable[["Session", bytes], object] | None = None, reopen_s: float = 0.5,
                 clock: Callable[[], int] = ticks_ms, wall: Callable[[], int] | None = None,
                 time_s: float = 30.0, peer_timeout_s: float = 3.5,
                 plant: plantdesc.PlantDesc | None = None, reopen_max_s: float = 5.0,
                 keys: linkkeys.KeyFile | None = None, insecure: bool = True) -> None:
        self.url = url
        # the node's name in the store: given (--name, the description's), else "node-<unique id>" once its
        # HELLO says it (a port path names a cable, not a node: an adapter moves, a pty changes every run)
        self.name = name
        self.plant = plant or plantdesc.builtin()  # the description this node should run
        self.node_plant = ""  # the hash the node's current boot named in its PLANT line ("" until then)
        self.plant_mismatch = ""  # one line saying how the node's description differs from ours
        self._boot_plant: dict[int, str] = {}  # boot -> the hash its PLANT line named (spilled lines of older boots)
        self._cmd_inflight: dict[int, int] = {}  # command id -> link acks that mean it was delivered
        self._next_cmd = 0
        self.store = store
        self.baud = baud
        self.reopen_s = reopen_s
        self.reopen_max_s = max(reopen_s, reopen_max_s)
        self._retry_s = reopen_s  # the wait before the next try to reopen the port: doubles, up to reopen_max_s
        self.reopen_tries = 0  # failed tries since the port was lost
        self.lost_at: float | None = None  # time.monotonic() when the port was last lost (None: never)
        self.device = ""  # the tty the port's path named when it was opened (a by-id link's target)
        self.stable = False  # the port was given as a link: reopened by that path only
        self.clock = clock
        self.wall = wall or (lambda: int(time.time() * 1000))
        self.spec_factory = spec_factory
        self.time_ms = int(time_s * 1000)  # the node gets a TIME frame this often (and our time in HELLO)
        self._next_time: int | None = None
        self.uid = ""
        self.spec: object | None = None  # the speculative stream of this node (host/gateway.py)
        self.transport: SerialTransport | None = None
        self.usb_id: tuple | None = None  # (vid, pid, serial number) of a USB serial adapter, once seen
        self._next_open = 0.0
        self.opens = 0
        self.disconnects = 0
        self.last_error = ""
        self.counts = {"logs": 0, "log_dups": 0, "bad_frames": 0, "prompts": 0, "drafts": 0, "verdicts": 0,
                       "reboots": 0, "lost": 0, "other": 0, "spilled": 0, "unverified_plant": 0, "commands": 0,
                       "auth_unsigned": 0, "auth_bad_key": 0, "auth_replayed": 0, "held": 0}
        self.outbox: collections.deque = collections.deque()
        self._seq_base: dict[int, int] = {}  # peer epoch -> last full (64-bit) seq delivered
        # (peer epoch, seq) before the first frame not yet committed, and the line counts then
        self._mark: tuple[bytes, int, int, int] | None = None
        self.full_retry_s = 1.0  # while the store is full, how often a frame is tried again
        self._retry_at = 0.0
        # the link's keys (docs/PROTOCOL.md "Authentication"): a node's key is found by the unique id in its
        # HELLO; without --insecure an unsigned node is refused, each refused frame counted and said once
        self.keys = keys
        self.insecure = insecure or keys is None
        self.notices: list[str] = []  # lines for the operator (the gateway prints them once)
        self._upd: dict | None = None  # the model update being sent (the store's job: edgetwin update)
        self._upd_file = None
        self._upd_next: int | None = None  # the next byte to send; None until the node said where it stands
        self._upd_begun = False
        self._upd_check = 0.0
        self._auth_said: set[str] = set()
        self._auth_uid = ""  # the unique id of the last HELLO whose key was looked for
        self._hello_refused = False  # that HELLO verified with no key of its unique id
        self._key_id = b""  # the fingerprint of the key the node signs with (stored beside its counter)
        self._ctr_end = 0  # the end of the counter range reserved in the store for frames we sign
        self.link = link.Link(self, on_frame=self.on_frame, on_event=self.on_event, role=frame.ROLE_GATEWAY,
                              rxbuf=4096, reorder=8, board_id=b"gateway", now=clock(),
                              dead_ms=int(peer_timeout_s * 1000),
                              auth=self._find_key if keys is not None else None, unsigned=self.insecure)
        self.store.add_plant(self.plant)
        if self.name is not None:
            state = store.rx_state(self.name)
            if state is not None:  # restarted: resume after what is stored
                self.link.restore(state[0], state[1])
            self.store.node_id(self.name)
            self._known_plant()

    def _known_plant(self) -> None:
        # a restarted gateway knows what the node named before (its PLANT line came to the last one): the next
        # boot's PLANT line updates it
        h = self.store.node_plant(self.name)
        if h:
            self._compare_plant(h, None)

    # ---- transport for the link (delegates to the open port; disconnected = nothing moves) ----

    def readinto(self, buf: bytearray) -> int:
        t = self.transport
        if t is None:
            return 0
        try:
            return t.readinto(buf)
        except (OSError, serial.SerialException) as e:
            self._lost_port(e)
            return 0

    def write(self, buf: bytearray, n: int | None = None) -> int:
        t = self.transport
        if t is None:
            return len(buf) if n is None else n  # the bytes go nowhere, as on an unplugged cable
        try:
            return t.write(buf, n)
        except (OSError, serial.SerialException) as e:
            self._lost_port(e)
            return len(buf) if n is None else n

    # ---- a new model for the node over the link (docs/PROTOCOL.md 3.12; edgetwin update queues it) ----

    def _update_poll(self) -> None:
        lk = self.link
        if not self.name or not lk.established:
            return
        if self._upd is None:
            now = time.monotonic()
            if now < self._upd_check:
                return
            self._upd_check = now + 1.0
            job = self.store.update_job(self.name)
            if job is None or job.get("state") not in UPDATE_ACTIVE:
                return
            what = job.get("kind", "model")
            need = frame.MINOR_CODE if what == "code" else frame.MINOR_UPDATE
            if lk.peer_minor < need:
                self._upd = job
                if what == "code" and job["state"] == "verified":  # it booted the package: older code and protocol
                    self._update_end(job, "running", "the node runs the package's code (protocol 1.%d)"
                                     % lk.peer_minor)
                else:
                    self._update_end(job, "failed", "the node speaks protocol 1.%d: it takes %s over the link from 1.%d "
                                     "on; deploy it at the bench (`edgetwin deploy --node`)"
                                     % (lk.peer_minor, "code" if what == "code" else "a model", need))
                return
            try:
                self._upd_file = open(job["file"], "rb")
            except OSError as e:
                self._upd = job
                self._update_end(job, "failed", "the %s file %s cannot be read: %s" % (what, job["file"], e.strerror))
                return
            self._upd, self._upd_begun, self._upd_next = job, False, None
            self.notices.append("node %s: sending %s update %d (%d bytes, sha256 %s...)"
                                % (self.name, what, job["id"], job["size"], job["sha"][:16]))
        job = self._upd
        if not self._upd_begun:
            if lk.free_slots() > 2:
                flags = (frame.UP_REBOOT if job.get("reboot") else 0) | (
                    frame.UP_CODE if job.get("kind") == "code" else 0)
                body = frame_host.pack_body(frame.UPDATE, id=job["id"], op=frame.UP_BEGIN, offset=job["size"],
                                            flags=flags, data=bytes.fromhex(job["sha"]))
                self._upd_begun = lk.send(frame.UPDATE, body)
            return
        if self._upd_next is None or job["state"] not in ("queued", "sending"):
            return
        n = min(lk.max_body() - frame.UP_DATA, UPDATE_CHUNK)
        f = self._upd_file
        while self._upd_next < job["size"] and lk.free_slots() > 2:  # two slots stay for verdicts and time
            f.seek(self._upd_next)
            data = f.read(n)
            if not data:
                self._update_end(job, "failed", "the file %s is shorter than queued" % job["file"])
                return
            body = frame_host.pack_body(frame.UPDATE, id=job["id"], op=frame.UP_CHUNK, flags=0,
                                        offset=self._upd_next, data=data)
            if not lk.send(frame.UPDATE, body):
                break
            self._upd_next += len(data)

    def _upstat(self, body: bytes) -> None:
        f = frame_host.parse_body(frame.UPSTAT, body)
        job = self._upd
        if job is None or f["id"] != job["id"]:
            return
        st, off = f["state"], f["offset"]
        what = job.get("kind", "model")
        if st == frame.US_RECEIVING:
            if self._upd_next is None:
                self._upd_next = off  # where the node's copy ends: 0, or the resume point
            job.update(state="sending", offset=off)
            self.store.set_update_job(self.name, job)
        elif st == frame.US_VERIFIED:
            job.update(state="verified", offset=job["size"])
            self.store.set_update_job(self.name, job)
            self.notices.append("node %s: %s update %d verified on the node; it switches at its next boot"
                                % (self.name, what, job["id"]))
        elif st == frame.US_BAD_HASH:
            job["tries"] = job.get("tries", 0) + 1
            if job["tries"] >= 3:
                self._update_end(job, "failed", "the node's copy had the wrong hash 3 times")
            else:
                job.update(state="sending", offset=0)
                self.store.set_update_job(self.name, job)
                self._upd_begun, self._upd_next = False, None
        elif st == frame.US_NO_ROOM:
            self._update_end(job, "no_room", "the node has %d bytes free, %s" % (off, (
                "too few for the files the package changes (its UPDATE line says what they take)" if what == "code"
                else "the model needs %d and a margin" % job["size"])))
        elif st == frame.US_RUNNING:
            self._update_end(job, "running", "the node runs the new %s" % what)
        elif st == frame.US_ROLLED_BACK:
            self._update_end(job, "rolled_back", "the new %s failed its trial on the node; the previous one runs (the "
                             "node's UPDATE line says why)" % what)
        elif st == frame.US_REFUSED:
            self._update_end(job, "failed", "the node cannot take code over the link (its code is frozen into its "
                             "firmware, or it has no code slot: its UPDATE line says which)" if what == "code" else
                             "the node runs the logs-only package (no model, no update code): "
                             "deploy it with --node and a model first")
        elif st == frame.US_UNFIT:
            self._update_end(job, "failed", "the node cannot run this code package (another board, .mpy version or "
                             "architecture: its UPDATE line says which); nothing changed on it")
        elif st == frame.US_ABORTED and job["state"] in UPDATE_ACTIVE:
            self._upd_begun, self._upd_next = False, None  # the node lost the transfer (a reboot): begin again

    def _update_end(self, job: dict, state: str, why: str) -> None:
        job.update(state=state, why=why)
        self.store.set_update_job(self.name, job)
        if self._upd_file is not None:
            self._upd_file.close()
        self._upd, self._upd_file, self._upd_next, self._upd_begun = None, None, None, False
        self.notices.append("node %s: %s update %d %s: %s" % (self.name, job.get("kind", "model"), job["id"],
                                                              state.replace("_", " "), why))

    def _commit(self) -> bool:
        """Commit what arrived (before any byte is written); False when the store had no room (_hold)."""
        try:
            if self._ctr_end and self.link.counter() > self._ctr_end - CTR_BLOCK // 2:
                self._reserve_counter()
            if self.store.pending:
                self.store.commit()
        except StoreFull:
            self._hold()
            return False
        self._mark = None
        return True

    # ---- a full store (host/store.py StoreFull): nothing it could not keep is acknowledged ----

    def _hold(self) -> None:
        """The store rolled back what arrived since the mark (the disk is full): the link goes back to the
        mark, so none of it is acknowledged and the node keeps it in its window (its flash spill ring once
        the window and queue are full) and sends it again; until `full_retry_s` has passed, what arrives is
        sent back the same way without trying the store (the gateway says it once: Gateway.round)."""
        if self._mark is not None and any(self._mark[0]):
            self.link.restore(self._mark[0], self._mark[1])
            self.counts["logs"], self.counts["spilled"] = self._mark[2:]  # those lines come again
        self._mark = None
        self._seq_base.clear()  # the 64-bit seqs are taken from the store again
        self.counts["held"] += 1
        self._retry_at = time.monotonic() + self.full_retry_s

    def _held(self, epoch: bytes, seq16: int) -> bool:
        """A frame that arrives while the store is full, before the next try: not taken (the link goes back
        one frame: the node sends it again)."""
        if not self.store.full or time.monotonic() >= self._retry_at:
            return False
        self.link.restore(epoch, (seq16 - 1) & 0xFFFF)
        self.counts["held"] += 1
        return True

    # ---- authentication (docs/PROTOCOL.md "Authentication") ----

    def _find_key(self, buf: bytearray, blen: int):
        """The link's auth: (key, our first counter, the node's last counter) for the signed HELLO in buf
        when the keys file holds a key of the unique id it names that verifies it; None otherwise."""
        uid = bytes(buf[frame.HDR + frame.HE_UID:frame.HDR + frame.HE_UID + frame.UID_LEN]).hex()
        self._auth_uid = uid
        try:
            cands = self.keys.keys_for(uid)  # type: ignore[union-attr]
        except linkkeys.KeyFileError as e:
            self._say_once("keys", str(e))
            return None
        for i, k in enumerate(cands):
            if not frame_codec.Signer(k).verify(buf, 0, blen):
                continue
            name = self.name or "node-" + uid
            kid = linkkeys.fingerprint(k)
            kept = self.store.peer_counter(name)
            # the node's counter is checked from where it was when this gateway last stored one of its lines
            # signed with the same key (a new key starts over: nothing recorded under the old one passes)
            peer = bytes(kept[:frame.SIG_COUNTER]) if kept and bytes(kept[frame.SIG_COUNTER:]) == kid else bytes(6)
            try:
                start = self._reserve_counter(name)
            except StoreFull:  # no room to reserve counters in: the node's next HELLO tries again
                return None
            self._key_id = kid
            if i == 0:
                if len(cands) > 1:
                    self.keys.settle(uid)  # type: ignore[union-attr]
                    self.notices.append("node %s (uid %s): key rotation done, its previous key is no longer taken"
                                        % (name, uid))
            else:
                self._say_once("old-key", "node %s (uid %s) signs with a previous key: it was provisioned again but "
                               "not yet redeployed; the old key is taken until it is" % (name, uid))
            return k, start, peer
        self._hello_refused = True
        return None

    def _reserve_counter(self, name: str | None = None) -> int:
        # The counter of the frames we sign must grow across gateway restarts (the node refuses a replay):
        # ranges are reserved in the store before use, never below the wall clock's ms x 16 (so a new store,
        # or a restored backup, still starts above what the node has seen).
        floor = int(self.wall()) * 16
        start = self.store.reserve_tx_counter(name or self.name or "node-" + self._auth_uid, CTR_BLOCK, floor)
        self._ctr_end = start + CTR_BLOCK
        return start

    def _say_once(self, kind: str, line: str) -> None:
        if kind not in self._auth_said:
            self._auth_said.add(kind)
            self.notices.append(line)

    def _auth_refused(self, value: int) -> None:
        keys = self.keys.path if self.keys is not None else "--keys FILE"
        uid = self._auth_uid
        who = "node %s (uid %s)" % (self.name, uid) if self.name else ("node uid %s" % uid if uid else "a node")
        if value == link.AUTH_UNSIGNED:
            self.counts["auth_unsigned"] += 1
            self._say_once("unsigned", "refused a node on %s: its frames are not signed (a node deployed without a "
                           "key: --insecure, or by an edgetwin older than link keys): provision it with `edgetwin deploy --node` (its key goes "
                           "to %s), or start the gateway with --insecure to take unsigned nodes" % (self.url, keys))
        elif value == link.AUTH_REPLAY:
            self.counts["auth_replayed"] += 1
            self._say_once("replayed", "refused frames of %s on %s as replays (a signed counter not above the last "
                           "one taken): frames recorded earlier are being sent again, or the node lost its "
                           "/link.ctr (flash erased): provision it again with `edgetwin deploy --node`"
                           % (who, self.url))
        else:
            # counted always; said when a HELLO found no key: other frames fail this way for a moment around
            # every reboot into a new key, before the node's HELLO shows it
            self.counts["auth_bad_key"] += 1
            if not self._hello_refused:
                return
            self._hello_refused = False
            held = self.keys is not None and uid and self.keys.keys_for(uid)
            self._say_once("bad_key", "refused %s on %s: signed with a key that %s does not hold (%s): provision it "
                           "again with `edgetwin deploy --node`, or copy its entry into %s"
                           % (who, self.url, keys, "not its current or previous key" if held
                              else "it has no entry for that uid", keys))

    def _lost_port(self, e: BaseException) -> None:
        self.last_error = str(e)
        self.disconnects += 1
        if self.transport is not None:
            self.transport.close()
        self.transport = None
        self.lost_at = time.monotonic()
        self.reopen_tries = 0
        self._retry_s = self.reopen_s
        self._next_open = self.lost_at + self._retry_s

    # ---- port ----

    def open(self) -> None:
        """Open the port now; PortError if it cannot be (the caller decides whether that is fatal).

        A USB adapter that was unplugged may come back under another name (/dev/ttyACM0 -> ACM1): when
        the port is missing, a device with the same VID, PID and serial number is opened instead."""
        try:
            port = open_serial(self.url, self.baud)
        except PortError:
            # a link comes back with its adapter (udev makes it): the tty alone may be there first
            alt = find_same_device(self.usb_id) if self.usb_id and not self.stable else None
            if alt is None:
                raise
            port = open_serial(alt, self.baud)
            self.url = alt
        if self.usb_id is None:
            self.usb_id = usb_identity(self.url)
        self.stable = self.stable or os.path.islink(self.url)
        self.device = os.path.realpath(self.url) if "://" not in self.url else self.url
        self.transport = SerialTransport(port, before_write=self._commit)
        self.opens += 1
        self._retry_s = self.reopen_s

    def fileno(self) -> int | None:
        return self.transport.fileno() if self.transport is not None else None

    def poll(self) -> None:
        if self.transport is None and time.monotonic() >= self._next_open:
            try:
                self.open()
            except PortError as e:
                self.last_error = str(e)
                self.reopen_tries += 1
                self._retry_s = min(self._retry_s * 2, self.reopen_max_s)
                self._next_open = time.monotonic() + self._retry_s
        self._flush_outbox()
        now = self.clock()
        day, ms = wall_split(self.wall())
        h = self.link._hello  # every HELLO we send carries our wall time (docs/PROTOCOL.md 3.1)
        frame.put_u16(h, frame.HE_WDAY, day)
        frame.put_u32(h, frame.HE_WMS, ms)
        lk = self.link
        if lk.established and lk.peer_minor and self.time_ms > 0:
            if self._next_time is None or ticks_diff(now, self._next_time) >= 0:
                self._next_time = ticks_add(now, self.time_ms)
                if not self.outbox:  # a TIME waiting behind verdicts would be late: skip it, next one soon
                    self.send(frame.TIME, frame_host.pack_body(frame.TIME, day=day, ms=ms))
        try:
            self._commands(now)
            self._update_poll()
        except StoreFull:  # a command's or an update's state waits for room: it is sent (or marked done) again
            self._hold()
        self.link.poll(now)
        self._commit()

    def _commands(self, now: int) -> None:
        """Operators' commands for this node (the store's queue) out as CMD frames; the delivered ones done."""
        lk = self.link
        if not lk.established or lk.peer_minor < frame.MINOR_CMD or self.plant_mismatch or not self.node_plant:
            return
        for cid, target in list(self._cmd_inflight.items()):
            if lk.tx_acked - target >= 0:
                self.store.command_done(cid, self.wall(), "delivered")
                del self._cmd_inflight[cid]
        if ticks_diff(now, self._next_cmd) < 0:
            return
        self._next_cmd = ticks_add(now, 1000)
        for c in self.store.pending_commands(self.name):
            if c.id in self._cmd_inflight:
                continue
            level = 0xFF if not c.level else plant_alarms.LEVELS.index(c.level.encode())
            body = frame_host.pack_cmd(c.id & MASK30, _VERBS[c.verb], c.machine, c.tag, c.by, level)
            if self.outbox or not lk.send(frame.CMD, body):
                break  # no room now: next round
            self._cmd_inflight[c.id] = lk.tx_acked + lk.queued()
            self.counts["commands"] += 1
            self.store.command_sent(c.id, self.wall())

    def close(self) -> None:
        self._commit()
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    # ---- what arrives ----

    def _full_seq(self, epoch: bytes, seq16: int) -> int:
        key = int.from_bytes(epoch, "little")
        base = self._seq_base.get(key)
        if base is None:
            base = self.store.last_seq(self.name, epoch)
        full = seq16 if base is None else base + ((seq16 - base) & 0xFFFF)
        self._seq_base[key] = full
        return full

    def on_frame(self, ftype: int, buf: bytearray, off: int, n: int) -> None:
        """Called by the link for each data frame, in order and exactly once. Never raises."""
        errors = self.store.full_errors
        try:
            epoch, seq16, _ = self.link.rx_state()
            if self._held(epoch, seq16):
                return
            if self._mark is None:  # the first frame since the last commit: where a full store sends the link back
                self._mark = (epoch, (seq16 - 1) & 0xFFFF, self.counts["logs"], self.counts["spilled"])
            if ftype == frame.LOG:
                self._log(epoch, seq16, buf, off, n)
            elif ftype == frame.UPSTAT:
                self._upstat(bytes(buf[off:off + n]))
            elif ftype in (frame.PROMPT, frame.DRAFT) and self.plant_mismatch:
                self.counts["unverified_plant"] += 1  # not verified against a description the node does not run
            elif ftype in (frame.PROMPT, frame.DRAFT) and self.spec is not None:
                body = bytes(buf[off:off + n])
                if ftype == frame.PROMPT:
                    self.counts["prompts"] += 1
                    self.spec.on_prompt(body)  # type: ignore[attr-defined]
                else:
                    self.counts["drafts"] += 1
                    self.spec.on_draft(body)  # type: ignore[attr-defined]
            else:
                self.counts["other"] += 1
            # the receive state goes into the same transaction as the lines it covers
            self.store.set_rx_state(self.name, epoch, seq16, commit=False)
            if self._key_id:  # and the node's signed counter with them: a restart still refuses replays
                self.store.set_peer_counter(self.name, bytes(self.link.rx_state()[2]) + self._key_id, commit=False)
        except StoreFull:
            self._hold()
        except ValueError:  # a malformed body (spec's errors are ValueError subclasses): count, drop
            self.counts["bad_frames"] += 1
        self._rolled_back(errors)

    def _log(self, epoch: bytes, seq16: int, buf: bytearray, off: int, n: int) -> None:
        ts = frame.u32s(buf, off + frame.LG_TS)
        level = buf[off + frame.LG_LEVEL] & 7
        wall = None
        if self.link.peer_minor:  # 1.1: flags, boot, line seq, the node's wall time (docs/PROTOCOL.md 3.5)
            flags = buf[off + frame.LG_FLAGS]
            boot = frame.u16(buf, off + frame.LG_BOOT)
            lseq = frame.u32s(buf, off + frame.LG_LSEQ)
            wall = wall_unix_ms(frame.u16(buf, off + frame.LG_DAY), frame.u32s(buf, off + frame.LG_MS))
            start = frame.LG_TEXT
        else:  # a 1.0 node: no line seq, no wall time
            flags = boot = lseq = 0
            start = frame.LG_TEXT_10
        text = bytes(buf[off + start:off + n]).decode("utf-8", "replace")
        full = self._full_seq(epoch, seq16)
        if wall is None:
            wall = self.wall()
        if text[21:27] == "PLANT " and not flags & frame.LG_SPILLED:
            self._plant_line(text, boot)
        plant = self._boot_plant.get(boot, self.node_plant) if flags & frame.LG_SPILLED else self.node_plant
        if self.store.add_log(self.name, epoch, full, ts, wall, level, text,
                              commit=False, boot=boot,
                              lseq=lseq, flags=flags, plant=plant or None):
            self.counts["logs"] += 1
            if flags & frame.LG_SPILLED:
                self.counts["spilled"] += 1
            if self.spec is not None and hasattr(self.spec, "on_log"):
                self.spec.on_log(text, wall)  # type: ignore[attr-defined]
        else:
            self.counts["log_dups"] += 1

    def _plant_line(self, text: str, boot: int) -> None:
        """A node's boot line naming its description: remember it, compare it with ours."""
        f = dict(w.split("=", 1) for w in text[27:].split() if "=" in w)
        h = f.get("hash", "")
        self._boot_plant[boot] = h
        self.store.set_node_plant(self.name, h)
        self._compare_plant(h, f.get("name", "?"))

    def _compare_plant(self, h: str, name: str | None) -> None:
        self.node_plant = h
        if name is None:  # known from the store: the description's own name, where it keeps it
            d = self.store.plant(h)
            name = d.name if d is not None else "?"
        f = {"name": name}
        if h == self.plant.hash:
            self.plant_mismatch = ""
            return
        known = self.store.plant(h) if h else None
        self.plant_mismatch = ("runs plant description %s (%s), not %s (%s) given to this gateway: its lines are "
                               "stored under its own hash, nothing of it is verified or answered against %s; "
                               "start the gateway with --plant set to the node's description"
                               % (f.get("name", "?"), h or "no hash", self.plant.name, self.plant.hash,
                                  self.plant.name) + ("" if known else " (this store has no description %s)" % h))

    def on_event(self, code: int, value: int) -> None:
        """Called by the link for its events (inside its poll): never raises."""
        errors = self.store.full_errors
        try:
            self._on_event(code, value)
        except StoreFull:  # a node row the store had no room for: what arrived since the mark goes again
            self._hold()
        self._rolled_back(errors)

    def _rolled_back(self, errors: int) -> None:
        # a write that found no room and was handled where it failed (a note: host/gateway.py) still rolled
        # back what this session had pending
        if self.store.full_errors != errors and self._mark is not None:
            self._hold()

    def _on_event(self, code: int, value: int) -> None:
        if code == link.EV_AUTH:
            self._auth_refused(value)
        elif code == link.EV_ESTABLISHED:
            self._auth_said.clear()  # a node that got in: the next refusal is news again
            ph = frame_host.parse_body(frame.HELLO, bytes(self.link.peer_hello))
            bid = ph["board_id"].decode("ascii", "replace")
            self.uid = ph["uid"].hex() if any(ph["uid"]) else ""
            if self.name is None:  # named by its unique id (a 1.0 node has none: by its board id)
                self.name = "node-" + (self.uid or bid or "unknown")
                self.store.node_id(self.name, bid, uid=self.uid)
                self._known_plant()
            self.store.node_id(self.name, bid, uid=self.uid)
            self._next_time = None
            self.board_id = bid
            if self.spec is None and self.spec_factory is not None:
                self.spec = self.spec_factory(self, bytes(self.link.peer_hello))
        elif code == link.EV_PEER_REBOOT:
            self.counts["reboots"] += 1
            self._upd_begun, self._upd_next = False, None  # an update goes on from what the node kept
            self._cmd_inflight.clear()  # frames the rebooted node never acknowledged: sent again
            if self.spec is not None and hasattr(self.spec, "on_reboot"):
                self.spec.on_reboot()  # type: ignore[attr-defined]
        elif code == link.EV_PEER_LOST:
            self.counts["lost"] += 1

    def send(self, ftype: int, body: bytes) -> bool:
        """Queue a data frame (a VERDICT); it waits in order in the outbox while the link window is full."""
        self.outbox.append((ftype, bytes(body)))
        self._flush_outbox()
        return True

    def _flush_outbox(self) -> None:
        while self.outbox and self.link.send(*self.outbox[0]):
            self.outbox.popleft()

    def status(self) -> dict:
        st = {"name": self.name or "", "uid": self.uid, "url": self.url, "device": self.device,
              "open": self.transport is not None, "reopen_tries": self.reopen_tries,
              "established": self.link.established, "opens": self.opens, "disconnects": self.disconnects,
              "last_error": self.last_error,
              "plant": {"name": self.plant.name, "hash": self.plant.hash, "node_hash": self.node_plant,
                        "mismatch": self.plant_mismatch}}
        st.update(self.counts)
        ls = self.link.stats()
        for k in ("rx_delivered", "rx_dup", "tx_retx", "tx_data", "peer_reboots", "err_crc", "err_cobs"):
            st["link_" + k] = ls[k]
        if self.spec is not None and hasattr(self.spec, "status"):
            st["spec"] = self.spec.status()  # type: ignore[attr-defined]
        return st
