"""Virtual board: the real MicroPython unix port on pseudo-terminals, behaving like a USB-attached board.

A `VirtualBoard` gives you what a Pico on a USB cable gives you, without the hardware:

- `repl_port`: a pty device (``/dev/pts/N``) speaking MicroPython's friendly REPL, raw REPL and
  raw-paste protocol, so the real ``mpremote`` and ``ampy`` deploy to it and run code on it with their
  default commands (soft reset included);
- `uart_port`: a second pty device, the gateway side of the board's UART. The board side is a third
  pty whose path firmware reads from ``os.getenv("EDGETWIN_UART")`` (see `UART_ENV`) and opens like a
  file; the virtual board relays bytes both ways;
- `bus_port(uart)`: with `buses=(1,)`, the plant side of the board's UART1 (an RS-485 bus: a Modbus
  slave opens it with pyserial); the board side is a pty whose path firmware reads from
  ``os.getenv("EDGETWIN_BUS1")`` (firmware/boardcfg.py open_bus), relayed like the link's UART;
- `fs_root`: the host directory that *is* the board's filesystem. The interpreter sees it as ``/``
  and cannot reach the host's files (``..`` stops at the board's root);
- the heap of the board profile (``micropython -X heapsize=<heap_bytes>``).

How the reset behaves like a board's: the unix port ends its process on Ctrl-D at an empty REPL line,
``sys.exit()`` or ``machine.soft_reset()``. The relay keeps the user-facing pty open, prints
``MPY: soft reboot``, starts a fresh interpreter and brings it back in the REPL mode it was left in
(raw after a raw-REPL soft reset, which is what mpremote and ampy wait for). Each boot runs
``/boot.py``, and ``/main.py`` in the friendly mode only, as bare-metal ports do. `reboot()` and
``machine.reset()`` (which the unix port lacks; the board provides it) are hard resets: no "soft
reboot" line, the board comes back in the friendly REPL. A crash of the interpreter is a hard reset
too. The boot script is ``tools/board/vboot.py``, run inside MicroPython; the sandbox and the machine
stand-in it installs keep about 5 KB of the board's heap.

The watchdog: ``machine.WDT(timeout=ms)`` (vboot.WDT) tells the relay each feed on a pipe; when no feed
comes for ``ms``, the relay kills the interpreter and boots a new one (a hard reset, the REPL friendly),
whose ``machine.reset_cause()`` is ``WDT_RESET``. A power cycle (`start()`, `reboot()`) gives
``PWRON_RESET``, ``machine.reset()`` ``SOFT_RESET`` (software asked, as the ESP32 port says it), a crash of
the interpreter ``HARD_RESET``; a soft reset keeps both the cause and a running watchdog, as a chip does.

Ctrl-C interrupts running code as on a board. The unix port turns SIGINT into KeyboardInterrupt, and it
installs that handler exactly while Ctrl-C is enabled (code running, ``micropython.kbd_intr(3)``); so
the relay sends SIGINT for a 0x03 byte when the interpreter catches SIGINT (``/proc/<pid>/status``) and
passes the byte on as data otherwise: to the REPL's line editor, or to an application that called
``micropython.kbd_intr(-1)`` to read binary data from the console.

Command line (also ``edgetwin vboard``)::

    python -m tools.board.vboard --board rp2040_pico [--root DIR] [--heap BYTES]

It gives the board the heap a drafting node of the profile needs on this 64-bit port (`node_heap`:
objects are 8 bytes here, 4 on the boards; printed with its factor over the profile's heap) unless
--heap says otherwise, and keeps in DIR (default vboards/<board>): fs/ (the board's filesystem), the
symlinks repl and uart to this run's ptys (the same names after a restart, so a gateway can follow it)
and console.log (everything the board printed on its console, so a crash at boot can be read later).
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import signal
import select
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

from tools.board import build
from tools.board.ptys import OUT_LIMIT as _OUT_LIMIT  # the relay's pty pairs and outboxes (emuboard's too)
from tools.board.ptys import Outbox as _Outbox
from tools.board.ptys import PtyEnd as _PtyEnd
from tools.board.ptys import set_raw, write_all  # noqa: F401  (vnode's and the tests' names)

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(__file__).resolve().parent
VBOOT = TOOLS / "vboot.py"
UART_ENV = "EDGETWIN_UART"
"""Environment variable holding the host path of the board side of the UART, inside the interpreter."""

SOFT_REBOOT = b"MPY: soft reboot\r\n"
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n"
FRIENDLY_BANNER = b'Type "help()" for more information.\r\n'
PROMPT = b">>> "

_BOOT = b"\x00VBOARD:BOOT\x00"
_READY = b"\x00VBOARD:READY\x00"
_RESET = b"\x00VBOARD:RESET\x00"
_FAIL = b"\x00VBOARD:FAIL\x00"
_MAIN = b"\x00VBOARD:MAIN\x00"
_HARD = b"\x00VBOARD:HARD\x00"
HARD_RESET_EXIT = 0x71  # exit status of machine.reset() on the virtual board (see vboot.Machine)
# machine.reset_cause() on the virtual board (vboot.Machine: the ESP32 port's values)
PWRON_RESET, HARD_RESET, WDT_RESET, SOFT_RESET = 1, 2, 3, 5
WDT_FD = 3  # the interpreter's descriptor of the watchdog pipe (vboot.WDT writes its feeds there)

_LOG_LIMIT = 4 * 1024 * 1024  # console log bytes before it is rotated to <log>.1
_START_TIMEOUT_S = 10.0
_MAX_BOOT_FAILURES = 3
_QUICK_EXIT_S = 0.2  # a boot loop (main.py calling sys.exit) restarts no faster than this


class VBoardError(RuntimeError):
    """The virtual board could not start or stopped working; the message says why."""


def micropython_exe() -> str:
    """Path of the MicroPython unix port (host/board_profile.micropython_exe); VBoardError when it is missing."""
    from host import board_profile

    try:
        return board_profile.micropython_exe()
    except board_profile.MicroPythonMissing as e:
        raise VBoardError(str(e)) from None


def sigint_caught(pid: int) -> bool:
    """Whether process `pid` has a SIGINT handler installed (Linux: the SigCgt mask in /proc)."""
    try:
        with open("/proc/%d/status" % pid, "rb") as f:
            for line in f:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def default_root(board: str) -> Path:
    """Where a board's filesystem lives when no --root is given: <repo>/vboards/<board>."""
    return ROOT / "vboards" / board


class _Interpreter:
    """One run of the MicroPython process: its pty, pid, pidfd and where it is in its boot."""

    def __init__(self, pid: int, master: int, pidfd: int | None, mode: str, generation: int) -> None:
        self.pid = pid
        self.master = master
        self.pidfd = pidfd
        self.mode = mode  # REPL mode it was started in: "friendly" or "raw"
        self.generation = generation
        self.phase = "spawned"  # spawned -> booting -> (prompt_wait | raw_wait) -> running; or fail
        self.started = time.monotonic()
        self.carry = b""  # output held back because it may be the start of a marker
        self.tail = b""  # last bytes of output, to find banners split across reads
        self.interrupted = False  # a Ctrl-C reached boot.py/main.py: hold further input until the REPL
        # why we killed it: "reboot" (the API), "hard"/"soft" (boot.py or main.py called machine.reset()
        # or sys.exit()), "fail" (the boot script could not set up the board)
        self.kill_reason: str | None = None
        self.early_output = bytearray()  # what it printed before the boot script ran (errors)
        self.fail_text = bytearray()
        self.eof = False

    def returncode_text(self, status: int) -> str:
        if os.WIFSIGNALED(status):
            return "killed by signal %d" % os.WTERMSIG(status)
        return "exit status %d" % os.WEXITSTATUS(status)


class VirtualBoard:
    """A board profile run by the MicroPython unix port on ptys; see the module docstring.

    Use as a context manager or call start()/stop()::

        with VirtualBoard("rp2040_pico") as vb:
            subprocess.run(["mpremote", "connect", vb.repl_port, "exec", "print(1)"])
    """

    def __init__(self, board: str | dict, root: Path | None = None, heap_bytes: int | None = None,
                 interpreter: str | None = None, links_dir: Path | None = None,
                 console_log: Path | None = None, buses: tuple = ()) -> None:
        """`board` is a profile (a name, a path to a profile JSON or a profile dict); `root` is the host
        directory used as the board's filesystem (default vboards/<board>, created on start);
        `heap_bytes` overrides the profile's heap; `interpreter` overrides the MicroPython executable
        (e.g. a coverage or debug build). `links_dir`: where the symlinks `repl` and `uart` to the ptys
        are kept while the board runs (stable names across restarts); `console_log`: a file that keeps
        everything the board prints on its console (appended; rotated to .1 past 4 MiB)."""
        try:
            self.profile = build.board_profile(board)
        except build.BuildError as e:
            raise VBoardError(str(e)) from None
        self.board = self.profile["name"]
        board = self.board
        self.heap_bytes = int(heap_bytes if heap_bytes is not None else self.profile["heap_bytes"])
        if self.heap_bytes < 16 * 1024:
            raise VBoardError("heap of %d bytes is too small for the interpreter (at least 16384)" % self.heap_bytes)
        self.fs_root = Path(root if root is not None else default_root(board)).resolve()
        if self.fs_root.exists() and not self.fs_root.is_dir():
            raise VBoardError("board filesystem root %s exists and is not a directory" % self.fs_root)
        if not VBOOT.is_file():
            raise VBoardError("the boot script %s is missing: reinstall the project" % VBOOT)
        self.links_dir = Path(links_dir) if links_dir is not None else None
        self.console_log = Path(console_log) if console_log is not None else None
        self._log_fd = -1
        self._log_bytes = 0
        self._links: list[Path] = []
        self.exe = interpreter if interpreter is not None else micropython_exe()
        if not os.access(self.exe, os.X_OK):
            raise VBoardError("interpreter %s is not an executable file" % self.exe)
        self._repl: _PtyEnd | None = None
        self._uart_gw: _PtyEnd | None = None
        self._uart_board: _PtyEnd | None = None
        self.buses = tuple(int(b) for b in buses)  # extra UARTs (RS-485 buses): uart id -> [plant end, board end]
        if any(not 0 <= b <= 3 for b in self.buses):
            raise VBoardError("bus UART ids are 0..3, got %s" % (self.buses,))
        self._bus: dict = {}
        self._wake_r = self._wake_w = -1
        # the watchdog (vboot.WDT): its pipe, the timeout it runs with, when it next runs out, why this boot began
        self._wdt_r = self._wdt_w = -1
        self._wdt_ms = 0
        self._wdt_due: float | None = None
        self._wdt_carry = b""
        self.reset_cause = PWRON_RESET
        self.watchdog_resets = 0
        self._thread: threading.Thread | None = None
        self._commands: collections.deque[str] = collections.deque()
        self._cond = threading.Condition()
        self._interp: _Interpreter | None = None
        self._generation = 0
        self._ready_generation = 0  # latest interpreter whose REPL is up or whose main.py runs
        self._mode = "friendly"
        self._held = bytearray()  # user input not yet deliverable to the interpreter
        self._restart_at: float | None = None
        self._boot_failures = 0
        self._error: str | None = None
        self._stopping = False
        self._starting = False
        self._out: _Outbox | None = None
        self._to_gw: _Outbox | None = None
        self._to_board_uart: _Outbox | None = None
        self._to_interp: _Outbox | None = None
        self.restarts = 0

    # ----------------------------------------------------------------- public API

    @property
    def repl_port(self) -> str:
        """Path of the REPL pty (what `mpremote connect` / `ampy --port` open)."""
        return self._require(self._repl).path

    @property
    def uart_port(self) -> str:
        """Path of the gateway side of the board's UART (open it with pyserial)."""
        return self._require(self._uart_gw).path

    def bus_port(self, uart: int) -> str:
        """Path of the plant side of the board's UART `uart` (an RS-485 bus): what a Modbus slave opens."""
        return self._require(self._bus.get(uart, (None, None))[0]).path

    @property
    def board_uart_path(self) -> str:
        """Path of the board side of the UART, as the interpreter sees it in $EDGETWIN_UART."""
        return self._require(self._uart_board).path

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def interpreter_pid(self) -> int | None:
        """Process id of the current MicroPython process (None between restarts)."""
        interp = self._interp
        return interp.pid if interp is not None else None

    @property
    def error(self) -> str | None:
        """Why the board stopped restarting its interpreter, or None."""
        return self._error

    def start(self, timeout: float = _START_TIMEOUT_S) -> "VirtualBoard":
        """Create the ptys, boot the interpreter and wait for its REPL; raises VBoardError on failure."""
        if self._thread is not None:
            raise VBoardError("virtual board %s is already started" % self.board)
        self.fs_root.mkdir(parents=True, exist_ok=True)
        self._stopping = False
        self._error = None
        self._starting = True
        self._mode = "friendly"  # a board powers up in the friendly REPL
        self._held.clear()
        self._commands.clear()
        self._boot_failures = 0
        self._restart_at = None
        try:
            self._repl, self._uart_gw, self._uart_board = _PtyEnd(), _PtyEnd(), _PtyEnd()
            for b in self.buses:  # [plant end, board end, to plant, to board]
                pe, be = _PtyEnd(), _PtyEnd()
                self._bus[b] = [pe, be, _Outbox(pe.master), _Outbox(be.master)]
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            self._wdt_r, self._wdt_w = os.pipe()
            os.set_blocking(self._wdt_r, False)
            self._wdt_off()
            self.reset_cause = PWRON_RESET
            self._out = _Outbox(self._repl.master)
            self._to_gw = _Outbox(self._uart_gw.master)
            self._to_board_uart = _Outbox(self._uart_board.master)
            self._make_links()
            self._open_log()
            self._spawn()
        except BaseException:
            self._close_fds()
            raise
        self._thread = threading.Thread(target=self._loop, name="vboard-%s" % self.board, daemon=True)
        self._thread.start()
        try:
            self.wait_ready(timeout)
        except BaseException:  # VBoardError, or Ctrl-C while waiting: leave nothing running
            self.stop()
            raise
        finally:
            self._starting = False
        return self

    def wait_ready(self, timeout: float = _START_TIMEOUT_S, after_generation: int = 0) -> None:
        """Block until an interpreter newer than `after_generation` is up: its REPL waits for input, or
        its /main.py runs (an application that never returns is a booted board too)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._ready_generation <= after_generation:
                if self._error is not None:
                    raise VBoardError(self._error)
                if self._thread is None or not self._thread.is_alive():
                    raise VBoardError("virtual board %s is not running" % self.board)
                left = deadline - time.monotonic()
                if left <= 0:
                    interp = self._interp
                    said = bytes(interp.early_output).decode("utf-8", "replace").strip() if interp else ""
                    raise VBoardError("virtual board %s: the interpreter did not boot within %.0f s%s"
                                      % (self.board, timeout, ("; it printed:\n" + said) if said else ""))
                self._cond.wait(left)

    def reboot(self, wait: bool = True, timeout: float = _START_TIMEOUT_S) -> None:
        """Hard reset: kill the interpreter; a new one boots (boot.py, main.py) into the friendly REPL.

        The REPL and UART ptys stay open, as a board's USB serial port would come back.
        """
        if not self.running:
            raise VBoardError("virtual board %s is not running" % self.board)
        with self._cond:
            before = self._generation
        self._command("reboot")
        if wait:
            self.wait_ready(timeout, after_generation=before)

    def stop(self) -> None:
        """Kill the interpreter, stop the relay thread and close every fd. Safe to call twice."""
        thread = self._thread
        if thread is not None:
            self._command("stop")
            thread.join(timeout=10)
            self._thread = None
        if self._interp is not None:  # the thread did not get to it (or never ran)
            self._finish_interp(self._interp, kill=True)
            self._interp = None
        self._close_fds()

    def __enter__(self) -> "VirtualBoard":
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def describe(self) -> dict:
        """The facts a user needs to connect (what `edgetwin vboard` prints)."""
        links = {p.name: str(p) for p in self._links}
        return {"board": self.board, "heap_bytes": self.heap_bytes, "repl_port": self.repl_port,
                "uart_port": self.uart_port, "board_uart_path": self.board_uart_path,
                "repl_link": links.get("repl"), "uart_link": links.get("uart"),
                "console_log": str(self.console_log) if self.console_log is not None else None,
                "fs_root": str(self.fs_root), "interpreter": self.exe}

    # ----------------------------------------------------------------- internals

    @staticmethod
    def _require(end: _PtyEnd | None) -> _PtyEnd:
        if end is None:
            raise VBoardError("virtual board not started")
        return end

    def _command(self, name: str) -> None:
        self._commands.append(name)
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass  # already woken (pipe full) or closed

    def _open_log(self) -> None:
        if self.console_log is None:
            return
        self.console_log.parent.mkdir(parents=True, exist_ok=True)
        self._log_fd = os.open(self.console_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        self._log_bytes = os.fstat(self._log_fd).st_size
        os.write(self._log_fd, ("\n--- virtual board %s started %s, heap %d bytes ---\n"
                                % (self.board, time.strftime("%Y-%m-%d %H:%M:%S"), self.heap_bytes)).encode())

    def _log(self, data: bytes) -> None:
        if self._log_fd < 0:
            return
        try:
            if self._log_bytes + len(data) > _LOG_LIMIT and self.console_log is not None:
                os.close(self._log_fd)
                os.replace(self.console_log, str(self.console_log) + ".1")
                self._log_fd = os.open(self.console_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
                self._log_bytes = 0
            os.write(self._log_fd, data)
            self._log_bytes += len(data)
        except OSError:  # a full disk must not stop the board
            pass

    def _make_links(self) -> None:
        """Symlinks <links_dir>/repl and /uart to this run's ptys; an existing file that is not a symlink stays."""
        if self.links_dir is None:
            return
        self.links_dir.mkdir(parents=True, exist_ok=True)
        for name, end in (("repl", self._repl), ("uart", self._uart_gw)):
            assert end is not None
            link = self.links_dir / name
            if link.exists() and not link.is_symlink():
                raise VBoardError("%s exists and is not a symlink: not replacing it" % link)
            tmp = self.links_dir / (".%s.%d" % (name, os.getpid()))
            if tmp.is_symlink():
                tmp.unlink()
            os.symlink(end.path, tmp)
            os.replace(tmp, link)  # atomic: a gateway reopening the name never finds it missing
            self._links.append(link)

    def _remove_links(self) -> None:
        for link in self._links:
            try:
                if link.is_symlink():
                    link.unlink()
            except OSError:
                pass
        self._links = []

    def _close_fds(self) -> None:
        self._remove_links()
        if self._log_fd >= 0:
            try:
                os.close(self._log_fd)
            except OSError:
                pass
            self._log_fd = -1
        for end in (self._repl, self._uart_gw, self._uart_board):
            if end is not None:
                end.close()
        for pe, be, _a, _b in self._bus.values():
            pe.close()
            be.close()
        self._bus = {}
        self._repl = self._uart_gw = self._uart_board = None
        for fd in (self._wake_r, self._wake_w, self._wdt_r, self._wdt_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = self._wdt_r = self._wdt_w = -1

    def _spawn(self) -> None:
        """Start a fresh interpreter on a fresh pty, in the current REPL mode."""
        master, slave = os.openpty()
        try:
            set_raw(slave)
            slave_path = os.ttyname(slave)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "EDGETWIN_VBOARD_ROOT": str(self.fs_root),
                "EDGETWIN_VBOARD_MODE": self._mode,
                # no ROMFS on the unix port: its filesystem is the stock layout's (fs_bytes + romfs_bytes)
                "EDGETWIN_VBOARD_FS_BYTES": str(self.profile.get("fs_bytes", 0) + self.profile.get("romfs_bytes", 0)),
                "EDGETWIN_BOARD": self.board,
                UART_ENV: self.board_uart_path,
                "MICROPYPATH": str(TOOLS),
                "EDGETWIN_VBOARD_WDT": "/dev/fd/%d" % WDT_FD,
                "EDGETWIN_VBOARD_RESET": str(self.reset_cause),
            }
            for b, (_pe, be, _a, _b) in self._bus.items():
                env["EDGETWIN_BUS%d" % b] = be.path
            code = "import sys;sys.path.insert(0,%r);import vboot;del vboot,sys" % str(TOOLS)
            argv = [self.exe, "-X", "heapsize=%d" % self.heap_bytes, "-i", "-c", code]
            # its own session (killpg ends anything it starts), the pty as its controlling terminal
            actions = [(os.POSIX_SPAWN_OPEN, 0, slave_path, os.O_RDWR, 0),
                       (os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2),
                       (os.POSIX_SPAWN_DUP2, self._wdt_w, WDT_FD)]
            try:
                pid = os.posix_spawn(self.exe, argv, env, file_actions=actions, setsid=True)
            except OSError as e:
                os.close(master)
                raise VBoardError("could not start %s: %s" % (self.exe, e)) from None
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        pidfd: int | None = None
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None  # old kernel: exits are found from the pty's EOF instead
        self._generation += 1
        self._interp = _Interpreter(pid, master, pidfd, self._mode, self._generation)
        self._to_interp = _Outbox(master)
        self._restart_at = None

    def _loop(self) -> None:
        try:
            self._relay()
        except Exception as e:  # noqa: BLE001  (recorded and raised to callers of wait_ready)
            with self._cond:
                self._error = "virtual board relay failed: %r" % (e,)
                self._cond.notify_all()
        finally:
            if self._interp is not None:
                self._finish_interp(self._interp, kill=True)
                self._interp = None
            with self._cond:
                self._cond.notify_all()

    def _relay(self) -> None:
        assert self._repl and self._uart_gw and self._uart_board and self._out and self._to_gw
        assert self._to_board_uart
        repl, gw, bu = self._repl.master, self._uart_gw.master, self._uart_board.master
        while True:
            while self._commands:
                cmd = self._commands.popleft()
                if cmd == "stop":
                    self._stopping = True
                    return
                if cmd == "reboot" and self._interp is not None:
                    self._interp.kill_reason = "reboot"
                    self._kill(self._interp)
                elif cmd == "reboot" and self._error is None:
                    self._mode = "friendly"
                    self.reset_cause = PWRON_RESET
                    self._wdt_off()
                    self._spawn()
            interp = self._interp
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            poller.register(self._wdt_r, select.POLLIN)
            poller.register(repl, select.POLLIN | (select.POLLOUT if self._out.buf else 0))
            poller.register(gw, select.POLLIN | (select.POLLOUT if self._to_gw.buf else 0))
            poller.register(bu, select.POLLIN | (select.POLLOUT if self._to_board_uart.buf else 0))
            bus_fds = {}
            for pe, be, to_plant, to_board in self._bus.values():
                poller.register(pe.master, select.POLLIN | (select.POLLOUT if to_plant.buf else 0))
                poller.register(be.master, select.POLLIN | (select.POLLOUT if to_board.buf else 0))
                bus_fds[pe.master] = (to_board, to_plant)
                bus_fds[be.master] = (to_plant, to_board)
            if interp is not None:
                if not interp.eof:
                    out_flag = select.POLLOUT if self._to_interp and self._to_interp.buf else 0
                    poller.register(interp.master, select.POLLIN | out_flag)
                if interp.pidfd is not None:
                    poller.register(interp.pidfd, select.POLLIN)
            timeout_ms: float | None = None
            if self._restart_at is not None:
                timeout_ms = max(0.0, (self._restart_at - time.monotonic()) * 1000)
            elif interp is not None and interp.eof and interp.pidfd is None:
                timeout_ms = 50  # no pidfd: look for the exit after the pty closed
            if self._wdt_due is not None and interp is not None:
                left = max(0.0, (self._wdt_due - time.monotonic()) * 1000)
                timeout_ms = left if timeout_ms is None else min(timeout_ms, left)
            events = poller.poll(timeout_ms)
            for fd, ev in events:
                if fd == self._wake_r:
                    self._drain(self._wake_r)
                elif fd == self._wdt_r:
                    self._on_watchdog(self._read(self._wdt_r))
                elif fd == repl:
                    if ev & select.POLLIN:
                        self._on_user_input(self._read(repl))
                    if ev & select.POLLOUT:
                        self._out.flush()
                elif fd == gw:
                    if ev & select.POLLIN:
                        self._to_board_uart.put(self._read(gw))
                        self._to_board_uart.flush()
                    if ev & select.POLLOUT:
                        self._to_gw.flush()
                elif fd == bu:
                    if ev & select.POLLIN:
                        self._to_gw.put(self._read(bu))
                        self._to_gw.flush()
                    if ev & select.POLLOUT:
                        self._to_board_uart.flush()
                elif fd in bus_fds:  # an RS-485 bus: bytes from one end to the other
                    other, mine = bus_fds[fd]
                    if ev & select.POLLIN:
                        other.put(self._read(fd))
                        other.flush()
                    if ev & select.POLLOUT:
                        mine.flush()
                elif interp is not None and fd == interp.master:
                    if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                        data = self._read(interp.master)
                        if data:
                            self._on_output(interp, data)
                        elif ev & (select.POLLHUP | select.POLLERR):
                            interp.eof = True
                    if ev & select.POLLOUT and self._to_interp is not None:
                        self._to_interp.flush()
                elif interp is not None and fd == interp.pidfd:
                    self._on_exit(interp)
            if interp is not None and interp is self._interp and interp.eof and interp.pidfd is None:
                if os.waitpid(interp.pid, os.WNOHANG)[0] != 0:  # pragma: no cover (kernels without pidfd)
                    self._on_exit(interp, reaped=True)
            interp = self._interp
            if (self._wdt_due is not None and interp is not None and interp.kill_reason is None
                    and time.monotonic() >= self._wdt_due):
                interp.kill_reason = "watchdog"  # not fed in time: the chip resets itself
                self._log(b"\n--- the watchdog ran out: reset ---\n")
                self._kill(interp)
            if self._restart_at is not None and time.monotonic() >= self._restart_at and self._interp is None:
                self._spawn()
            self._out.flush()

    @staticmethod
    def _read(fd: int) -> bytes:
        try:
            return os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as e:
            if e.errno == errno.EIO:
                return b""
            raise

    @staticmethod
    def _drain(fd: int) -> None:
        try:
            while os.read(fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # ----- the watchdog (vboot.WDT)

    def _wdt_off(self) -> None:
        self._wdt_ms = 0
        self._wdt_due = None
        self._wdt_carry = b""
        if self._wdt_r >= 0:
            self._drain(self._wdt_r)  # what a killed interpreter wrote last

    def _on_watchdog(self, data: bytes) -> None:
        """b"T<ms>\\n" started it, b"F" fed it, b"S" stopped it (deinit)."""
        buf = self._wdt_carry + data
        self._wdt_carry = b""
        i = 0
        while i < len(buf):
            c = buf[i:i + 1]
            if c == b"T":
                end = buf.find(b"\n", i)
                if end < 0:
                    self._wdt_carry = buf[i:i + 32]
                    return
                try:
                    self._wdt_ms = max(1, int(buf[i + 1:end]))
                except ValueError:
                    self._wdt_ms = 0
                i = end
            elif c == b"S":
                self._wdt_ms = 0
            i += 1
        self._wdt_due = time.monotonic() + self._wdt_ms / 1000 if self._wdt_ms else None

    # ----- user input -> interpreter

    def _on_user_input(self, data: bytes) -> None:
        if not data:
            return
        interp = self._interp
        if interp is None or self._to_interp is None:
            self._hold(data)
            return
        if interp.phase == "running" and not self._held:
            self._deliver(data)
        elif interp.phase == "booting" and interp.mode == "friendly" and not interp.interrupted and not self._held:
            # boot.py / main.py may read the console and Ctrl-C must interrupt them; after a Ctrl-C
            # the rest waits for the REPL (mpremote sends Ctrl-C then Ctrl-A without waiting).
            cut = data.find(b"\x03")
            if cut >= 0:
                interp.interrupted = True
                self._deliver(data[:cut + 1])
                self._hold(data[cut + 1:])
            else:
                self._deliver(data)
        else:
            self._hold(data)

    def _deliver(self, data: bytes) -> None:
        """Write user input to the interpreter; a Ctrl-C becomes SIGINT while the interpreter catches it."""
        interp, box = self._interp, self._to_interp
        assert interp is not None and box is not None
        while data:
            cut = data.find(b"\x03")
            if cut < 0:
                box.put(data)
                break
            box.put(data[:cut])
            if sigint_caught(interp.pid):
                box.flush()
                try:
                    os.kill(interp.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
            else:
                box.put(b"\x03")
            data = data[cut + 1:]
        box.flush()

    def _hold(self, data: bytes) -> None:
        self._held += data
        if len(self._held) > _OUT_LIMIT:
            del self._held[:len(self._held) - _OUT_LIMIT]

    def _release_held(self) -> None:
        if self._held and self._to_interp is not None:
            held = bytes(self._held)
            self._held.clear()
            self._deliver(held)

    # ----- interpreter output -> user

    def _emit(self, data: bytes) -> None:
        if data and self._out is not None:
            self._out.put(data)
            self._log(data)

    def _split(self, interp: _Interpreter, data: bytes,
               markers: tuple[bytes, ...]) -> tuple[bytes, bytes | None, bytes]:
        """Find the first marker in carry+data: (bytes before, marker or None, bytes after)."""
        buf = interp.carry + data
        interp.carry = b""
        best: tuple[int, bytes] | None = None
        for m in markers:
            i = buf.find(m)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, m)
        if best is not None:
            i, m = best
            return buf[:i], m, buf[i + len(m):]
        # keep a possible partial marker (all markers start with NUL) for the next read
        z = buf.rfind(b"\x00", max(0, len(buf) - max(len(m) for m in markers)))
        if z >= 0 and any(m.startswith(buf[z:]) for m in markers):
            interp.carry = buf[z:]
            return buf[:z], None, b""
        return buf, None, b""

    def _on_output(self, interp: _Interpreter, data: bytes) -> None:
        while data:
            if interp.phase == "spawned":
                before, marker, data = self._split(interp, data, (_BOOT, _FAIL))
                interp.early_output += before
                del interp.early_output[:-4096]
                self._emit(before)
                if marker is None:
                    return
                if marker == _FAIL:  # the sandbox could not be set up: report, do not restart
                    interp.phase = "fail"
                    continue
                interp.phase = "booting"
                if interp.mode == "friendly" and self._held:
                    held = bytes(self._held)
                    self._held.clear()
                    self._on_user_input(held)
            elif interp.phase == "booting":
                before, marker, data = self._split(interp, data, (_READY, _RESET, _FAIL, _MAIN, _HARD))
                self._emit(before)
                if marker is None:
                    return
                if marker == _MAIN:  # the application runs: the board is up even if its REPL is not
                    self._set_ready(interp)
                elif marker == _READY:
                    if interp.mode == "raw":
                        interp.phase = "raw_wait"
                        assert self._to_interp is not None
                        self._to_interp.put(b"\x01")  # Ctrl-A: back into the raw REPL, as before the reset
                        self._to_interp.flush()
                    else:
                        interp.phase = "prompt_wait"
                elif marker in (_RESET, _HARD):  # boot.py/main.py called sys.exit or machine.reset
                    interp.kill_reason = "soft" if marker == _RESET else "hard"
                    interp.phase = "fail"
                    self._kill(interp)
                    return
                else:
                    interp.phase = "fail"
            elif interp.phase == "fail":
                before, marker, data = self._split(interp, data, (_FAIL,))
                interp.fail_text += before
                del interp.fail_text[:-4096]
                self._emit(before)
                if marker is not None and interp.kill_reason is None:
                    interp.kill_reason = "fail"
                    self._kill(interp)
                return
            elif interp.phase == "prompt_wait":
                buf = interp.tail + data
                self._emit(data)
                data = b""
                if buf.find(PROMPT) >= 0:
                    self._set_running(interp, "friendly")
                interp.tail = buf[-64:]
            elif interp.phase == "raw_wait":
                buf = interp.tail + data
                i = buf.find(RAW_BANNER)
                if i < 0:
                    interp.tail = buf[-len(RAW_BANNER):]  # the friendly banner: not shown after a reset
                    return
                self._emit(buf[i:])
                interp.tail = buf[-64:]
                data = b""
                self._set_running(interp, "raw")
            else:  # running
                self._emit(data)
                buf = interp.tail + data
                raw_at, friendly_at = buf.rfind(RAW_BANNER), buf.rfind(FRIENDLY_BANNER)
                if raw_at > friendly_at:
                    self._mode = "raw"
                elif friendly_at > raw_at:
                    self._mode = "friendly"
                interp.tail = buf[-64:]
                data = b""

    def _set_running(self, interp: _Interpreter, mode: str) -> None:
        interp.phase = "running"
        self._mode = mode
        self._release_held()
        self._set_ready(interp)

    def _set_ready(self, interp: _Interpreter) -> None:
        self._boot_failures = 0
        with self._cond:
            self._ready_generation = interp.generation
            self._cond.notify_all()

    # ----- interpreter lifecycle

    def _kill(self, interp: _Interpreter) -> None:
        try:
            os.killpg(interp.pid, signal.SIGKILL)  # its own session: also ends anything it started
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(interp.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _finish_interp(self, interp: _Interpreter, kill: bool = False, reaped: bool = False) -> int:
        """Drain, reap and close one interpreter; returns its wait status."""
        if kill:
            self._kill(interp)
        status = 0
        if not reaped:
            try:
                _, status = os.waitpid(interp.pid, 0)
            except ChildProcessError:
                status = 0
        for fd in (interp.master, interp.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return status

    def _on_exit(self, interp: _Interpreter, reaped: bool = False) -> None:
        # everything it wrote before exiting is still in the pty: pass it on first
        while not interp.eof:
            data = self._read(interp.master)
            if not data:
                break
            self._on_output(interp, data)
        carry, interp.carry = interp.carry, b""
        if carry and interp.phase not in ("raw_wait",):
            self._emit(carry)
        status = self._finish_interp(interp, reaped=reaped)
        self._interp = None
        self._to_interp = None
        if self._stopping:
            return
        self.restarts += 1
        reached = self._ready_generation >= interp.generation
        if interp.phase in ("spawned", "fail") and interp.kill_reason in (None, "fail"):
            self._boot_failures += 1
            text = (interp.early_output + interp.fail_text).decode("utf-8", "replace").strip()
            msg = ("virtual board %s: the interpreter failed to boot (%s)%s"
                   % (self.board, interp.returncode_text(status), (":\n" + text) if text else ""))
            if self._starting or self._boot_failures >= _MAX_BOOT_FAILURES:
                self._emit(("\n%s\n" % msg).replace("\n", "\r\n").encode())
                with self._cond:
                    self._error = msg
                    self._cond.notify_all()
                return
            self._restart_at = time.monotonic() + _QUICK_EXIT_S * self._boot_failures
            return
        hard = (interp.kill_reason in ("reboot", "hard", "watchdog")
                or (os.WIFSIGNALED(status) and interp.kill_reason != "soft")
                or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == HARD_RESET_EXIT))
        if hard:  # the chip reset: its watchdog with it; a soft reset leaves both as they were, as on a board
            self._mode = "friendly"
            self._wdt_off()
            if interp.kill_reason == "watchdog":
                self.reset_cause = WDT_RESET
                self.watchdog_resets += 1
            elif interp.kill_reason == "reboot":
                self.reset_cause = PWRON_RESET
            elif interp.kill_reason == "hard" or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == HARD_RESET_EXIT):
                self.reset_cause = SOFT_RESET  # machine.reset(): software asked (the ESP32 port's SOFT_RESET)
            else:
                self.reset_cause = HARD_RESET  # the interpreter crashed
        else:
            self._emit(SOFT_REBOOT)
        # an interpreter that died before it was up (a crash) or whose main.py called sys.exit comes
        # back after a pause, so a boot loop costs no CPU; a soft reset from the REPL is immediate.
        paced = not reached or interp.kill_reason in ("soft", "hard")
        self._restart_at = time.monotonic() + (_QUICK_EXIT_S if paced else 0.0)


# What a drafting node holds on the 64-bit unix port besides its model's plan: the bytecode of the
# firmware and the core, the link and line queue, the plant simulator, the tokenizer. Measured with
# `edgetwin deploy --node` on this port (NODE start heap= minus the x64 plan's peak): 326,720 B
# (rp2040_pico, KV 4+28+8) and 327,136 B (esp32s3_devkitc, 4+60+8).
NODE_BASE_X64 = 328 * 1024
NODE_HEADROOM_PCT = 20  # fragmentation: 2.4x the rp2040_pico heap fails a 48 KB allocation, 2.5x boots


def node_heap(prof: dict, model: Path | None = None) -> tuple[int, float, str]:
    """(heap bytes, factor over the profile's heap, why) a drafting node of `prof` needs on the unix port.

    The node streams (or not) as host/node_config.py derives from the board's plan; here objects are
    8 bytes (4 on the boards), so its layout is planned again with 8-byte words, plus NODE_BASE_X64 and
    NODE_HEADROOM_PCT, and rounded up to a half-step factor of the profile's heap (at least 1)."""
    from host import node_config
    from host.errors import UserError
    from shared import mbf, memplan

    model = Path(model) if model is not None else build.DRAFT
    heap = int(prof["heap_bytes"])
    try:
        cfg, _plan = node_config.derive(prof, model)
        with mbf.open(str(model)) as r:
            kv = prof["kv"]
            mode = cfg["stream"] or "resident"  # the planned mode, which firmware/node.py builds
            p8 = memplan.layout(r.config, kv["sink"], kv["window"], kv["staged"], mode, cfg["out_rows"], 8, r)
    except (UserError, OSError, ValueError) as e:
        return heap * 2, 2.0, "no drafting plan for %s (%s): twice the heap, for 8-byte objects" % (prof["name"], e)
    need = (NODE_BASE_X64 + p8.peak) * (100 + NODE_HEADROOM_PCT) // 100
    factor = max(1.0, -(-need * 2 // heap) / 2)
    why = ("a drafting node (%s, %s mode on 8-byte objects: plan peak %d B + %d B firmware, link, plant and "
           "tokenizer + %d%%) needs %d B" % (model.name, mode, p8.peak, NODE_BASE_X64, NODE_HEADROOM_PCT, need))
    return int(heap * factor), factor, why


def run(board: str | dict, root: Path | str | None = None, heap: int | None = None, rig_file: str | None = None) -> int:
    """`edgetwin vboard`: run a virtual board until Ctrl-C or SIGTERM. `root` is its directory: root/fs is
    the board's filesystem, root/repl and root/uart link to its ptys, root/console.log keeps its console.
    `rig_file`: a plant description whose Modbus devices the plant simulator serves on the board's RS-485
    buses (ptys; tools/board/rig.py: the unix port has no ADC, GPIO or I2C to drive)."""
    from tools.board import rig

    prof = build.board_profile(board) if not isinstance(board, dict) else board
    try:
        buses = rig.rs485_uarts(rig_file, prof) if rig_file else ()
    except rig.RigError as e:
        raise VBoardError(str(e)) from None
    base = Path(root) if root is not None else default_root(prof["name"])
    if heap is None:
        heap, factor, why = node_heap(prof)
        heap_note = "heap %d bytes = %gx the profile's %d: %s" % (heap, factor, prof["heap_bytes"], why)
    else:
        if heap < 16 * 1024 or heap > 1024 * 1024 * 1024:
            raise VBoardError("--heap %d is out of range (16384..1073741824 bytes)" % heap)
        heap_note = "heap %d bytes (--heap; %.3gx the profile's %d)" % (heap, heap / prof["heap_bytes"], prof["heap_bytes"])
    if base.exists() and not base.is_dir():
        raise VBoardError("%s exists and is not a directory" % base)
    log = base / "console.log"
    made = [p for p in (base, base / "fs") if not p.exists()] + ([log] if not log.exists() else [])
    vb = VirtualBoard(prof, base / "fs", heap_bytes=heap, links_dir=base, console_log=log, buses=buses)
    try:
        vb.start()
    except (VBoardError, KeyboardInterrupt) as e:
        # a board that did not start leaves nothing it created; the error says why, in one line
        for p in reversed(made):
            try:
                p.unlink() if p.is_file() else p.rmdir()
            except OSError:
                pass
        if isinstance(e, KeyboardInterrupt):
            return 130
        raise VBoardError(" ".join(str(e).split())[:600]) from None
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    plant_rig = None
    try:
        info = vb.describe()
        print("virtual board %s (MicroPython unix port, %s)" % (vb.board, heap_note))
        print("  REPL  %s -> %s    (mpremote connect %s)" % (info["repl_link"], info["repl_port"], info["repl_link"]))
        print("  UART  %s -> %s    (gateway side; the board opens %s, given in $%s)"
              % (info["uart_link"], info["uart_port"], info["board_uart_path"], UART_ENV))
        print("  fs    %s" % info["fs_root"])
        print("  log   %s    (the board's console: boot messages, tracebacks)" % info["console_log"])
        plant_rig = None
        if rig_file:
            plant_rig = rig.rig_for(rig_file, prof, bus_port=vb.bus_port(buses[0]) if buses else None)
            print("  rig   %s: the plant simulator's %s behind Modbus slaves on UART%s (%s)"
                  % (rig_file, ", ".join(plant_rig.map), buses[0] if buses else "-",
                     vb.bus_port(buses[0]) if buses else "no RS-485 bus"))
        print("Ctrl-C or SIGTERM stops it.", flush=True)
        while not done.wait(0.5):
            if not vb.running or vb.error:
                print("error: %s (console log: %s)" % (vb.error or "the virtual board stopped", info["console_log"]),
                      file=sys.stderr)
                return 1
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if rig_file and plant_rig is not None:
            plant_rig.stop()
        vb.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.board.vboard --board B [--root DIR] [--heap N]` (the same as `edgetwin vboard`)."""
    parser = argparse.ArgumentParser(prog="edgetwin vboard", description=(
        "Run a virtual board: the MicroPython unix port with the heap a drafting node of the profile needs "
        "there, its REPL and UART on pseudo-terminals (stable symlinks DIR/repl, DIR/uart), its filesystem "
        "in DIR/fs, its console in DIR/console.log. Deploy with `mpremote connect DIR/repl`."))
    parser.add_argument("--board", required=True, help="board profile: a name (boards/<name>.json) or a path")
    parser.add_argument("--root", type=Path, default=None,
                        help="the board's directory (default: vboards/<board>): fs/, repl, uart, console.log")
    parser.add_argument("--heap", type=int, default=None,
                        help="heap bytes (default: what a drafting node of the profile needs here, printed)")
    parser.add_argument("--emulate", action="store_true", help=(
        "run the real rp2 firmware (make firmware; make firmware-cp for rp2040_pico_cp) on an emulated RP2040 instead (rp2040_pico; "
        "options: python -m tools.board.emuboard --help)"))
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--emulate" in argv:  # tools/board/emuboard.py takes its own options (--image, --flash)
        from tools.board import emuboard

        return emuboard.main([a for a in argv if a != "--emulate"])
    args = parser.parse_args(argv)
    from host.errors import UserError

    try:
        from host import board_profile

        return run(board_profile.resolve(args.board), args.root, args.heap)
    except (VBoardError, UserError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
