"""The virtual board (tools/board/vboard.py + tools/board/vboot.py): REPL protocol, resets, UART relay, fs sandbox.

Everything here drives the real MicroPython unix port through real ptys, with pyserial and the real
mpremote, so the tests are marked slow (they still run in CI; the whole file takes a few seconds).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import serial

from tools.board import vboard
from tools.board.vboard import VBoardError, VirtualBoard

ROOT = Path(__file__).resolve().parents[2]
MPREMOTE = str(Path(sys.executable).parent / "mpremote")
HEAP = 241664  # boards/rp2040_pico.json (measured on the emulated Pico)


def mpremote(port: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([MPREMOTE, "connect", port, *args], capture_output=True, text=True, timeout=timeout)


def read_until(ser: serial.Serial, token: bytes, timeout: float = 5.0) -> bytes:
    """Read from `ser` until `token` has arrived; fail with what came if it does not within `timeout`."""
    got = b""
    deadline = time.monotonic() + timeout
    while not got.endswith(token):  # byte by byte: nothing after the token is consumed
        if time.monotonic() > deadline:
            raise AssertionError("waited %.0f s for %r, got %r" % (timeout, token, got))
        got += ser.read(1)
    return got


def sync(ser: serial.Serial) -> None:
    """Bring the friendly REPL to a fresh prompt with nothing unread behind it."""
    ser.write(b"\r\x03")
    ser.write(b"print('in' + 'sync')\r")  # the echo holds 'in' + 'sync', only the output 'insync'
    read_until(ser, b"insync")
    read_until(ser, b">>> ")


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def vb(tmp_path: Path):
    board = VirtualBoard("rp2040_pico", root=tmp_path / "fs")
    board.start()
    yield board
    board.stop()


@pytest.fixture
def repl(vb: VirtualBoard):
    ser = serial.Serial(vb.repl_port, 115200, timeout=0.2)
    yield ser
    ser.close()


# ---------------------------------------------------------------- bad input, no interpreter needed

def test_unknown_board_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(VBoardError, match="unknown board 'nope'.*rp2040_pico"):
        VirtualBoard("nope", root=tmp_path)


def test_bad_heap_and_root_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(VBoardError, match="too small"):
        VirtualBoard("rp2040_pico", root=tmp_path, heap_bytes=1000)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(VBoardError, match="not a directory"):
        VirtualBoard("rp2040_pico", root=f)
    with pytest.raises(VBoardError, match="not an executable"):
        VirtualBoard("rp2040_pico", root=tmp_path, interpreter=str(f))


def test_ports_before_start_are_an_error(tmp_path: Path) -> None:
    board = VirtualBoard("rp2040_pico", root=tmp_path)
    with pytest.raises(VBoardError, match="not started"):
        _ = board.repl_port
    with pytest.raises(VBoardError, match="not running"):
        board.reboot()
    board.stop()  # harmless


@pytest.mark.slow
def test_interpreter_that_fails_reports_its_output(tmp_path: Path) -> None:
    fake = tmp_path / "fake-micropython"
    fake.write_text("#!/bin/sh\necho 'fatal: cannot allocate heap' >&2\nexit 3\n")
    fake.chmod(0o755)
    before = open_fds()
    board = VirtualBoard("rp2040_pico", root=tmp_path / "fs", interpreter=str(fake))
    t0 = time.monotonic()
    with pytest.raises(VBoardError, match=r"(?s)failed to boot \(exit status 3\).*cannot allocate heap"):
        board.start()
    assert time.monotonic() - t0 < 5
    assert not board.running
    assert open_fds() == before


# ---------------------------------------------------------------- the REPL

@pytest.mark.slow
def test_repl_heap_fs_and_sys_path_are_a_boards(vb: VirtualBoard, repl: serial.Serial) -> None:
    sync(repl)
    repl.write(b"import gc, os, sys; gc.collect(); print('@@', gc.mem_alloc() + gc.mem_free(), gc.mem_alloc(), "
               b"os.getcwd(), os.getenv('EDGETWIN_UART'), sys.path, '@@')\r")
    got = read_until(repl, b"@@\n").decode()
    total, used, cwd, uart, path = got.rsplit("@@ ", 1)[1].split(" @@")[0].split(" ", 4)
    # the profile's heap (minus the allocator's own tables), not the unix default of several MB
    assert 0.9 * HEAP < int(total) <= HEAP
    # the sandboxed filesystem costs a few KB; a bare unix REPL holds ~1.5 KB at this point
    assert int(used) < 12 * 1024, used
    assert path == "['', '.frozen', '/lib']"
    assert cwd == "/"
    assert uart == vb.board_uart_path
    print("vboard heap after boot: total %s, in use %s bytes" % (total, used))


@pytest.mark.slow
def test_raw_repl_soft_reset_comes_back_raw(vb: VirtualBoard, repl: serial.Serial) -> None:
    # the exact exchange mpremote and ampy perform
    repl.write(b"\r\x03")
    repl.write(b"\r\x01")
    read_until(repl, b"raw REPL; CTRL-B to exit\r\n>")
    repl.write(b"x = 41\x04")
    read_until(repl, b"OK\x04\x04>")
    repl.write(b"\x04")  # soft reset from the raw REPL: the unix process ends, the board restarts
    got = read_until(repl, b"raw REPL; CTRL-B to exit\r\n>")
    assert b"soft reboot\r\n" in got and b"MicroPython" not in got  # no friendly banner in raw mode
    repl.write(b"print(x)\x04")  # a fresh interpreter: the old globals are gone
    assert b"NameError" in read_until(repl, b"\x04>")
    # raw-paste mode is offered and works
    repl.write(b"\x05A\x01")
    head = read_until(repl, b"\x01", timeout=2)
    assert head.startswith(b"R\x01")
    repl.write(b"print(6 * 7)\x04")
    assert b"42" in read_until(repl, b"\x04>")
    repl.write(b"\x02")  # back to the friendly REPL
    read_until(repl, b">>> ")
    repl.write(b"\x04")  # Ctrl-D there is a soft reset too, back in the friendly REPL
    got = read_until(repl, b">>> ")
    assert b"MPY: soft reboot\r\n" in got and b"MicroPython" in got
    assert vb.restarts == 2


@pytest.mark.slow
def test_sys_exit_and_machine_soft_reset_reboot_the_board(vb: VirtualBoard, repl: serial.Serial) -> None:
    for stmt in (b"import sys; sys.exit()", b"import machine; machine.soft_reset()"):
        repl.write(b"\r\x03")
        repl.write(stmt + b"\r")
        read_until(repl, b"MPY: soft reboot\r\n")
        read_until(repl, b">>> ")
    assert vb.restarts == 2
    # machine.reset() (missing from the unix port, provided by the virtual board) is a hard reset
    sync(repl)
    repl.write(b"import machine; machine.reset()\r")
    got = read_until(repl, b"for more information.\r\n>>> ")
    assert b"soft reboot" not in got and b"Traceback" not in got
    assert vb.restarts == 3


@pytest.mark.slow
def test_ctrl_c_interrupts_running_code(vb: VirtualBoard, repl: serial.Serial) -> None:
    sync(repl)
    repl.write(b"while True: pass\r\r")
    read_until(repl, b"... \r\n")
    time.sleep(0.2)
    repl.write(b"\x03")
    read_until(repl, b"KeyboardInterrupt")
    read_until(repl, b">>> ")
    repl.write(b"print(1 + 1)\r")
    assert read_until(repl, b">>> ").endswith(b"\r\n2\n>>> ")
    # an application that owns the console turns Ctrl-C off and reads 0x03 as data, as on a board
    repl.write(b"import micropython, sys; micropython.kbd_intr(-1); print(sys.stdin.buffer.read(3))\r")
    read_until(repl, b"read(3))\r\n")
    time.sleep(0.1)
    repl.write(b"a\x03b")
    assert read_until(repl, b">>> ").startswith(b"b'a\\x03b'\n")
    repl.write(b"while True: pass\r\r")  # and the next REPL command is interruptible again
    read_until(repl, b"... \r\n")
    time.sleep(0.1)
    repl.write(b"\x03")
    read_until(repl, b"KeyboardInterrupt")
    assert vb.restarts == 0


@pytest.mark.slow
def test_main_py_runs_on_boot_and_mpremote_still_gets_in(tmp_path: Path) -> None:
    fs = tmp_path / "fs"
    fs.mkdir()
    (fs / "boot.py").write_text("booted = 1\n")
    (fs / "main.py").write_text("import time\nticks = 0\nprint('app up')\nwhile True:\n    time.sleep(0.02)\n"
                                "    ticks += 1\n")
    with VirtualBoard("rp2040_pico", root=fs) as board:  # start() returns while main.py runs
        # mpremote interrupts the application, soft-resets into the raw REPL (main.py skipped there)
        res = mpremote(board.repl_port, "exec", "print('booted' in globals(), 'ticks' in globals())")
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.strip() == "True False"
        with serial.Serial(board.repl_port, timeout=0.2) as ser:
            ser.write(b"\x04")  # friendly soft reset: main.py runs again
            read_until(ser, b"app up")
            time.sleep(0.2)
            ser.write(b"\x03")
            got = read_until(ser, b">>> ")
            assert b"KeyboardInterrupt" in got
            ser.write(b"print(ticks > 0, booted)\r")  # main.py's globals are the REPL's, as on a board
            assert b"True 1" in read_until(ser, b">>> ")


@pytest.mark.slow
def test_main_py_calling_sys_exit_loops_without_spinning(tmp_path: Path) -> None:
    fs = tmp_path / "fs"
    fs.mkdir()
    (fs / "main.py").write_text("import sys\nprint('again')\nsys.exit()\n")
    board = VirtualBoard("rp2040_pico", root=fs)
    board.start()
    try:
        time.sleep(1.0)
        # a board resets on SystemExit in main.py; the restarts are paced (>= 0.2 s), not a busy loop
        assert 1 <= board.restarts <= 6
        assert board.error is None
    finally:
        board.stop()


@pytest.mark.slow
def test_reboot_mid_session_keeps_the_pty(vb: VirtualBoard, repl: serial.Serial) -> None:
    sync(repl)
    repl.write(b"marker = 123\r")
    read_until(repl, b">>> ")
    old_pid = vb.interpreter_pid
    assert old_pid is not None
    vb.reboot()
    assert vb.interpreter_pid != old_pid
    got = read_until(repl, b">>> ")  # the same open serial connection sees the new boot
    assert b"MicroPython" in got and b"soft reboot" not in got  # a hard reset, not a soft one
    repl.write(b"print('marker' in globals(), 2 + 3)\r")
    assert b"False 5" in read_until(repl, b">>> ")
    repl.close()
    res = mpremote(vb.repl_port, "eval", "7 * 6")
    assert res.returncode == 0 and res.stdout.strip() == "42", res.stdout + res.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)  # killed and reaped, not a zombie


# ---------------------------------------------------------------- UART and filesystem

@pytest.mark.slow
def test_uart_bytes_flow_both_ways(vb: VirtualBoard) -> None:
    payload = bytes(range(256))  # binary-clean: no CR/LF translation, no flow-control bytes eaten
    code = (
        "import os, select\n"
        "f = open(os.getenv('EDGETWIN_UART'), 'r+b')\n"
        "f.write(%r)\n"
        "p = select.poll(); p.register(f, select.POLLIN)\n"
        "assert p.poll(5000)\n"
        "buf = bytearray(6); mv = memoryview(buf); n = 0\n"
        "while n < 6:\n"
        "    n += f.readinto(mv[n:])\n"
        "print('board got', bytes(buf))\n" % payload
    )
    with serial.Serial(vb.uart_port, 115200, timeout=5) as gw:
        proc = subprocess.Popen([MPREMOTE, "connect", vb.repl_port, "exec", code],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            got = gw.read(len(payload))
            assert got == payload
            gw.write(b"pong\x00\xff")
            out, err = proc.communicate(timeout=15)
        finally:
            proc.kill()
            proc.wait()
    assert "board got b'pong\\x00\\xff'" in out, out + err


@pytest.mark.slow
def test_uart_without_a_gateway_does_not_block_the_board(vb: VirtualBoard) -> None:
    # nobody has the gateway side open: writes must not block the board (bytes go nowhere, as on a wire)
    code = ("import os\nf = open(os.getenv('EDGETWIN_UART'), 'wb')\n"
            "for i in range(300):\n    f.write(b'x' * 1024)\nprint('done')")
    res = mpremote(vb.repl_port, "exec", code, timeout=20)
    assert res.returncode == 0 and "done" in res.stdout, res.stdout + res.stderr


@pytest.mark.slow
def test_mpremote_filesystem_stays_inside_fs_root(vb: VirtualBoard, tmp_path: Path) -> None:
    src = tmp_path / "hello.py"
    src.write_text("print('hi')\n")
    outside = tmp_path / "escaped.py"
    res = mpremote(vb.repl_port, "fs", "mkdir", ":lib", "+", "fs", "cp", str(src), ":lib/hello.py", "+",
                   "fs", "cp", str(src), ":/../../escaped.py", "+", "fs", "ls", ":/")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (vb.fs_root / "lib" / "hello.py").read_text() == "print('hi')\n"
    assert (vb.fs_root / "escaped.py").exists() and not outside.exists()  # '..' stops at the board's '/'
    listing = res.stdout.split("ls :/", 1)[1]
    assert "lib/" in listing and "escaped.py" in listing and "tmp" not in listing and "etc" not in listing
    code = ("import os\nos.chdir('/../../..')\nprint(os.getcwd(), sorted(os.listdir()))\n"
            "try:\n    open('/etc/hostname')\nexcept OSError as e:\n    print('blocked', e.errno)\n"
            "import hello\n")
    res = mpremote(vb.repl_port, "exec", "import sys; sys.path.append('/lib')\n" + code)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["/ ['escaped.py', 'lib']", "blocked 2", "hi"]
    res = mpremote(vb.repl_port, "fs", "rm", ":escaped.py", "+", "fs", "ls")
    assert res.returncode == 0 and not (vb.fs_root / "escaped.py").exists()


@pytest.mark.slow
def test_statvfs_reports_the_profiles_flash(vb: VirtualBoard) -> None:
    (vb.fs_root / "blob.bin").write_bytes(b"\0" * 10000)
    res = mpremote(vb.repl_port, "exec", "import os; print(os.statvfs('/'))")
    bsize, _, blocks, free = eval(res.stdout.strip())[:4]  # noqa: S307 (a tuple of ints from the board)
    assert bsize * blocks == 1441792 // 4096 * 4096
    assert free == blocks - 3  # 10000 bytes -> 3 blocks of 4 KB


# ---------------------------------------------------------------- lifecycle

@pytest.mark.slow
def test_stop_reaps_the_interpreter_and_closes_everything(tmp_path: Path) -> None:
    before_fds = open_fds()
    before_threads = threading.active_count()
    board = VirtualBoard("rp2040_pico", root=tmp_path / "fs").start()
    pid = board.interpreter_pid
    assert pid is not None
    board.reboot()
    pid2 = board.interpreter_pid
    assert pid2 is not None and pid2 != pid
    board.stop()
    board.stop()
    for p in (pid, pid2):
        with pytest.raises(ProcessLookupError):
            os.kill(p, 0)
    assert open_fds() == before_fds
    assert threading.active_count() == before_threads
    board.start()  # a stopped board starts again on the same filesystem
    board.stop()


@pytest.mark.slow
def test_command_line_runs_until_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tools.board.vboard", "--board", "rp2040_pico", "--root", str(tmp_path),
                             "--heap", "241664"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Ctrl-C"):
            line = proc.stdout.readline()
            assert line, "vboard exited early: %s" % proc.stderr.read()
            lines.append(line)
        text = "".join(lines)
        repl_link = text.split("REPL", 1)[1].split()[0]
        assert repl_link == str(tmp_path / "repl") and "UART  %s ->" % (tmp_path / "uart") in text
        assert "fs    %s" % (tmp_path / "fs") in text and "heap 241664 bytes (--heap; 1x" in text
        res = mpremote(repl_link, "eval", "1 + 2")  # through the stable name
        assert res.stdout.strip() == "3", res.stdout + res.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert not (tmp_path / "repl").is_symlink() and (tmp_path / "console.log").is_file()


@pytest.mark.slow
def test_stable_links_follow_a_restart_and_the_console_log_keeps_a_boot_crash(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    board = VirtualBoard("rp2040_pico", root=tmp_path / "fs", links_dir=tmp_path, console_log=log)
    board.start()
    try:
        first = os.readlink(tmp_path / "repl"), os.readlink(tmp_path / "uart")
        assert first == (board.repl_port, board.uart_port)
        assert board.describe()["repl_link"] == str(tmp_path / "repl")
    finally:
        board.stop()
    assert not (tmp_path / "repl").is_symlink() and not (tmp_path / "uart").is_symlink()
    (tmp_path / "fs" / "main.py").write_text("print('booting')\nraise MemoryError('at boot')\n")
    board = VirtualBoard("rp2040_pico", root=tmp_path / "fs", links_dir=tmp_path, console_log=log)
    board.start()
    try:
        again = os.readlink(tmp_path / "repl"), os.readlink(tmp_path / "uart")
        assert again == (board.repl_port, board.uart_port) and os.path.exists(again[0])
        deadline = time.monotonic() + 10
        while "MemoryError: at boot" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.1)
        text = log.read_text(errors="replace")
        assert "booting" in text and "MemoryError: at boot" in text and text.count("--- virtual board") == 2
    finally:
        board.stop()
    (tmp_path / "repl").write_text("a user's file")  # never replaced by a link
    with pytest.raises(VBoardError, match="not a symlink"):
        VirtualBoard("rp2040_pico", root=tmp_path / "fs", links_dir=tmp_path).start()
    assert (tmp_path / "repl").read_text() == "a user's file"


def test_command_line_rejects_unknown_board(capsys: pytest.CaptureFixture[str]) -> None:
    assert vboard.main(["--board", "nope"]) == 2
    assert "unknown board 'nope'" in capsys.readouterr().err


def test_command_line_that_cannot_start_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "micropython"
    fake.write_text("#!/bin/sh\necho 'no such heap' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(vboard, "micropython_exe", lambda: str(fake))
    root = tmp_path / "board"
    assert vboard.main(["--board", "rp2040_pico", "--root", str(root), "--heap", "200000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "failed to boot" in err, err
    assert not root.exists()
    assert vboard.main(["--board", "rp2040_pico", "--root", str(root), "--heap", "5"]) == 2
    assert "--heap 5 is out of range" in capsys.readouterr().err and not root.exists()
