# vboot.py: boot script of the virtual board; runs inside the MicroPython unix port, not CPython.
#
# tools/board/vboard.py starts `micropython -X heapsize=N -i -c "import vboot"` on a pseudo-terminal with
# these environment variables:
#   EDGETWIN_VBOARD_ROOT  host directory that becomes the board's filesystem ('/')
#   EDGETWIN_VBOARD_MODE  'friendly' or 'raw': the REPL mode the board comes back in after a reset
#   EDGETWIN_VBOARD_FS_BYTES  filesystem size reported by os.statvfs (the profile's fs_bytes)
#   EDGETWIN_UART         host path of the board side of the virtual UART (a pty), openable from here
#   EDGETWIN_VBOARD_WDT   host path of the pipe machine.WDT tells the relay its feeds on (see WDT)
#   EDGETWIN_VBOARD_RESET machine.reset_cause() of this boot (1 power on, 3 watchdog, 5 soft: as the ESP32's)
# It mounts the sandboxed filesystem at '/', sets sys.path like a board, runs /boot.py and (in the
# friendly mode only, as bare-metal ports do) /main.py, then returns so the interpreter's own REPL
# starts. Markers written to stdout tell the relay where each phase begins; it strips them.
# The unix port's machine module has no reset(): sys.modules gets a stand-in whose reset() ends the
# process with exit status 0x71, which the relay treats as a hard reset (no "soft reboot").
import gc
import os
import sys
import time

_BOOT = "\x00VBOARD:BOOT\x00"
_READY = "\x00VBOARD:READY\x00"
_RESET = "\x00VBOARD:RESET\x00"
_FAIL = "\x00VBOARD:FAIL\x00"
_MAIN = "\x00VBOARD:MAIN\x00"
_HARD = "\x00VBOARD:HARD\x00"
_S_IFDIR = 0x4000
_ENOTDIR = 20


class BoardFS:
    """A VfsPosix rooted at the board directory that never lets a path climb above that root.

    VfsPosix alone resolves relative paths against the process's working directory and lets
    `chdir('..')` walk out of its root; here every path is made absolute against our own cwd and
    normalised ('..' stops at '/') before it reaches the host. The only host paths reachable outside
    the root are the device nodes named in `devices` (the virtual UARTs: the link's, the RS-485 buses').
    """

    def __init__(self, root, devices, fs_bytes):
        self._fs = os.VfsPosix(root)
        self._host = os.VfsPosix()
        self._root = root.rstrip("/")
        self._devices = devices
        self._fs_bytes = fs_bytes
        self._cwd = "/"

    def _abs(self, path):
        if not path.startswith("/"):
            path = self._cwd + "/" + path
        parts = []
        for p in path.split("/"):
            if p == "..":
                if parts:
                    parts.pop()
            elif p and p != ".":
                parts.append(p)
        return "/" + "/".join(parts)

    def mount(self, readonly, mkfs):
        pass

    def umount(self):
        pass

    def ilistdir(self, path):
        path = self._abs(path)
        stat = self._fs.stat
        for entry in self._fs.ilistdir(path):
            size = 0
            if entry[1] != _S_IFDIR:
                try:
                    size = stat(path.rstrip("/") + "/" + entry[0])[6]
                except OSError:
                    pass
            yield (entry[0], entry[1], entry[2], size)

    def chdir(self, path):
        path = self._abs(path)
        if not self._fs.stat(path)[0] & _S_IFDIR:
            raise OSError(_ENOTDIR)
        self._cwd = path

    def getcwd(self):
        return self._cwd

    def mkdir(self, path):
        self._fs.mkdir(self._abs(path))

    def remove(self, path):
        self._fs.remove(self._abs(path))

    def rmdir(self, path):
        self._fs.rmdir(self._abs(path))

    def rename(self, old, new):
        # VfsPosix(root).rename joins both paths to the root in one shared buffer (the second overwrites the
        # first: it renames new to itself): rename the host paths instead
        self._host.rename(self._root + self._abs(old), self._root + self._abs(new))

    def stat(self, path):
        if path in self._devices:
            return self._host.stat(path)
        st = self._fs.stat(self._abs(path))
        if st[0] & _S_IFDIR:  # flash filesystems report directories as 0 bytes, the host 4096
            st = st[:6] + (0,) + st[7:]
        return st

    def statvfs(self, path):
        # Report the profile's flash size, not the host disk: tools such as `mpremote df` show it.
        used = self._used("/")
        bsize = 4096
        blocks = self._fs_bytes // bsize
        free = max(0, blocks - (used + bsize - 1) // bsize)
        return (bsize, bsize, blocks, free, free, 0, 0, 0, 0, 255)

    def _used(self, path):
        total = 0
        for entry in self.ilistdir(path):
            if entry[1] == _S_IFDIR:
                total += self._used(path.rstrip("/") + "/" + entry[0])
            else:
                total += entry[3]
        return total

    def open(self, path, mode):
        if path in self._devices:
            return self._host.open(path, mode)
        return self._fs.open(self._abs(path), mode)


class WDT:
    """machine.WDT of the virtual board: the relay kills and restarts the interpreter (reset cause
    WDT_RESET) when feed() has not come for `timeout` ms. It tells the relay on a pipe: b"T<ms>\\n" when it
    starts, b"F" for a feed (at most every timeout/8 ms: a syscall, not a register write), b"S" for
    deinit() (as CircuitPython's; the rp2 and esp32 ports have none)."""

    def __init__(self, id=0, timeout=5000):
        if id != 0 or timeout < 1:
            raise ValueError("WDT(0, timeout=ms >= 1)")
        self._f = open(os.getenv("EDGETWIN_VBOARD_WDT"), "wb")
        self._f.write(("T%d\n" % timeout).encode())
        self._gap = max(1, timeout // 8)
        self._last = time.ticks_ms()

    def feed(self):
        now = time.ticks_ms()
        if time.ticks_diff(now, self._last) >= self._gap:
            self._last = now
            self._f.write(b"F")

    def deinit(self):
        self._f.write(b"S")


class Machine:
    """The built-in machine module plus reset() (a reset the software asked for), WDT and reset_cause()
    with the ESP32 port's constants; the relay says why this boot began in $EDGETWIN_VBOARD_RESET."""

    PWRON_RESET = 1
    HARD_RESET = 2
    WDT_RESET = 3
    DEEPSLEEP_RESET = 4
    SOFT_RESET = 5
    WDT = WDT

    def __init__(self, builtin):
        self._builtin = builtin
        self._cause = int(os.getenv("EDGETWIN_VBOARD_RESET") or "1")

    def __getattr__(self, name):
        return getattr(self._builtin, name)

    def __repr__(self):
        return "<module 'machine'>"

    def reset(self):
        raise SystemExit(0x71)  # the relay restarts the board as after a power cycle

    def reset_cause(self):
        return self._cause


def _run(name, marker=None):
    """Run /name in __main__'s namespace like pyexec_file: True to go on, False after sys.exit (a
    soft reset), "hard" after machine.reset()."""
    try:
        os.stat(name)
    except OSError:
        return True
    if marker:
        sys.stdout.write(marker)
    import __main__

    try:
        with open(name) as f:
            src = f.read()
        exec(compile(src, name, "exec"), __main__.__dict__)
        src = None
    except SystemExit as e:
        return "hard" if e.args and e.args[0] == 0x71 else False
    except BaseException as e:  # noqa: BLE001  (a board prints the traceback and carries on)
        sys.print_exception(e)
    return True


def _setup():
    # the link's UART and the RS-485 buses' UARTs (EDGETWIN_BUS0..3): the only host paths the board reaches
    names = ("EDGETWIN_UART", "EDGETWIN_BUS0", "EDGETWIN_BUS1", "EDGETWIN_BUS2", "EDGETWIN_BUS3", "EDGETWIN_VBOARD_WDT")
    devices = tuple(p for p in (os.getenv(n) or "" for n in names) if p)
    fs = BoardFS(os.getenv("EDGETWIN_VBOARD_ROOT"), devices, int(os.getenv("EDGETWIN_VBOARD_FS_BYTES") or "0"))
    os.umount("/")
    os.mount(fs, "/")
    os.chdir("/")
    while sys.path:
        sys.path.pop()
    sys.path.extend(("", ".frozen", "/lib"))
    while sys.argv:
        sys.argv.pop()
    import machine

    sys.modules["machine"] = Machine(machine)


def _boot():
    # (the module deletes these names once the board is up; they are only used before that)
    ok = _run("boot.py")  # noqa: F821
    if ok is True and os.getenv("EDGETWIN_VBOARD_MODE") != "raw":
        ok = _run("main.py", _MAIN)  # noqa: F821
    return ok


try:
    _setup()
except BaseException as e:  # noqa: BLE001  (the relay reports it and does not restart in a loop)
    sys.stdout.write(_FAIL)
    sys.print_exception(e)
    sys.stdout.write(_FAIL)
else:
    # The relay holds the user's input until this marker, so a Ctrl-C cannot land before the sandbox
    # is mounted; after it, Ctrl-C interrupts boot.py/main.py and the board goes on to its REPL.
    sys.stdout.write(_BOOT)
    try:
        _ok = _boot()
    except KeyboardInterrupt:
        _ok = True
    sys.stdout.write(_HARD if _ok == "hard" else _READY if _ok else _RESET)
    del _ok
# Only BoardFS stays alive (the mount holds it); drop the rest so the board keeps its heap.
del sys.modules["vboot"], _setup, _boot, _run, _BOOT, _READY, _RESET, _FAIL, _MAIN, _HARD
gc.collect()
