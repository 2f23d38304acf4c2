"""Copy a board build onto a board (real or virtual) with mpremote or adafruit-ampy, and check it arrived.

`deploy(build_dir, port)` takes a folder made by tools/board/build.py (lib/shared/*.mpy, lib/firmware/*.mpy,
board.json, MANIFEST.json, optionally main.py, node.json and *.mbf model files) and copies it to the board's filesystem with the real
tools, in as few invocations as the tool allows:

- mpremote (the default): one ``mpremote connect PORT exec <mkdir+clean> + fs cp F1 :/lib/... + ... +
  exec <verify>`` chain; files already identical on the board are skipped (mpremote compares sha256);
- ampy (the fallback; unmaintained since 2019): ``ampy run`` for the clean-up and the check and one
  ``ampy put`` per top-level entry (ampy soft-resets the board for every file it writes, so it is slower).

Before copying, files under the build's package folders on the board (/lib/shared, /lib/firmware) that
the build does not contain are removed: a stale ``.py`` would otherwise shadow the new ``.mpy`` (the
import system tries ``.py`` first), and so is any code update received over the link that waits for its
trial or is in it (/lib.new, /lib.old and their markers: firmware/codeslot.py), which a trial's rollback would
otherwise move back over the deployed code. Afterwards every file is listed back from the board and its size
compared with the build; the report also carries the board's heap use after a collect.

`run_on_board(port, code)` runs a snippet and returns what it printed.

Models (``*.mbf``) go into the board's ROMFS partition where its firmware has one (`make firmware`: 384 KB,
mounted at /rom) and the tool is mpremote: the build's models as one image (tools/board/romfs.py: files
word-aligned, so the node reads the weights in place from flash), written with ``mpremote romfs deploy``
unless the partition already holds exactly that image; a filesystem copy of the same name is removed (it
would override the ROM one: firmware/node.py `model_path`). Without ROMFS (stock firmware, a virtual board,
ampy) or when the image does not fit, models are copied to the filesystem as before.

Errors are `DeployError` subclasses whose message says what to do: missing or malformed build,
tool not installed, port missing/busy/not a serial device, board not answering (timeout), code that
raised on the board, files that did not arrive.
"""

from __future__ import annotations

import ast
import json
import os
import re
import select
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from host.board_profile import venv_exe

TOOLS = ("mpremote", "ampy")
# Files at the root of a build folder that go to the board's root (plus any *.mbf model file).
KEY_PATH = "/link.key"  # the node's link key (firmware/nodecfg.py key_path's default)
CODESLOT_FILES = ("/codeslot.mpy", "/codeslot.py")  # the code-update boot stub (firmware/codeslot.py)
TOP_FILES = ("board.json", "main.py", "code.py", "boot.py", "node.json", "plant.json", "codeslot.mpy", "codeslot.py")
REPORT_MARK = "@@EDGETWIN-DEPLOY "
FROZEN_STALE = ("/lib/shared", "/lib/firmware")  # the packages a frozen firmware carries
NATIVE_MODULE = "/lib/q4nat.mpy"  # the C kernels (tools/board/build.py): linked at import, never frozen
_EXEC_INLINE_MAX = 8000  # longer snippets go through a temporary file (`mpremote run`)
ROM = "/rom"  # where MicroPython mounts ROMFS partition 0 at boot

# Runs on the board (MicroPython): the size of ROMFS partition 0, 0 without one; with a length, whether the
# partition starts with the image of that length and sha256 (then deploy does not write it again).
_ROMFS_CODE = """import vfs
try:
    _d = memoryview(vfs.rom_ioctl(2, 0))
except Exception:
    _d = b''
_same = 0
if %(n)d and len(_d) >= %(n)d:
    import hashlib, binascii
    _same = int(binascii.hexlify(hashlib.sha256(_d[:%(n)d]).digest()) == %(sha)r)
print('@@ROMFS', len(_d), _same)
del _d, _same
"""
# Runs on the board after a ROMFS write (mpremote unmounts /rom to write it): mount the new image, as a boot does.
_ROM_MOUNT_CODE = """import vfs
try:
    vfs.umount('/rom')
except OSError:
    pass
vfs.mount(vfs.VfsRom(vfs.rom_ioctl(2, 0)), '/rom')
"""

# Runs on the board (MicroPython or CircuitPython: os.listdir and os.stat, which both have): create the build's folders (existing ones are fine).
_MKDIR_CODE = """import os
for _d in %(dirs)r:
    try:
        os.mkdir(_d)
    except OSError:
        pass
"""

# Runs on the board (MicroPython or CircuitPython): remove files under the package folders that the build lacks.
_CLEAN_CODE = """import os
def _clean(d, keep):
    try:
        ents = os.listdir(d)
    except OSError:
        return
    for e in ents:
        p = d + '/' + e
        if os.stat(p)[0] & 0x4000:
            _clean(p, keep)
            try:
                os.rmdir(p)
            except OSError:
                pass
        elif p not in keep:
            os.remove(p)
            print('removed', p)
_keep = set(%(keep)r)
for _d in %(dirs)r:
    _clean(_d, _keep)
# a code update received over the link, waiting or in its trial (firmware/codeslot.py): this code replaces it
for _d in ('/lib.new', '/lib.old'):
    _clean(_d, ())
    try:
        os.rmdir(_d)
    except OSError:
        pass
for _p in ('/code.json', '/code.switch', '/code.switch.tmp', '/code.part'):
    try:
        os.remove(_p)
        print('removed', _p)
    except OSError:
        pass
del _clean, _keep
"""

# Runs on CircuitPython before anything is written (see deploy()).
_CP_WRITABLE = """import storage
try:
    storage.remount('/', readonly=False)
except Exception as _e:
    raise OSError('CIRCUITPY is mounted by the computer over USB, so the board cannot write it (%s): eject '
                  'the drive and deploy again, or copy the build folder onto the drive by hand' % _e)
"""

# Runs on the board: list every deployed file with its size, and the heap after a collect.
_VERIFY_CODE = """import os, gc, json
def _walk(p, out):
    try:
        ents = os.listdir(p)
    except OSError:
        return
    for e in ents:
        q = p + '/' + e
        st = os.stat(q)
        if st[0] & 0x4000:
            _walk(q, out)
        else:
            out[q] = st[6]
_f = {}
_walk('/lib', _f)
for _p in %(top)r:
    try:
        _f[_p] = os.stat(_p)[6]
    except OSError:
        pass
gc.collect()
print(%(mark)r + json.dumps({'files': _f, 'mem_alloc': gc.mem_alloc(), 'mem_free': gc.mem_free()}))
del _walk, _f
"""


class DeployError(RuntimeError):
    """Deployment or a board command failed; the message says why and what to do."""


class BuildFolderError(DeployError, ValueError):
    """The build folder is missing, has no MANIFEST.json, or does not match its manifest."""


class ToolNotFoundError(DeployError):
    """mpremote or ampy is not installed (or an unknown tool was asked for)."""


class PortError(DeployError):
    """The serial port does not exist, is not a serial device, or is in use."""


class BoardTimeoutError(DeployError, TimeoutError):
    """The board did not answer in time."""


class BoardExecError(DeployError):
    """Code run on the board raised; `board_output` holds what it printed, traceback included."""

    def __init__(self, message: str, board_output: str = "") -> None:
        super().__init__(message)
        self.board_output = board_output


class VerifyError(DeployError):
    """Files listed back from the board are missing or have the wrong size; `report` has the details."""

    def __init__(self, message: str, report: dict) -> None:
        super().__init__(message)
        self.report = report


def tool_exe(tool: str) -> str:
    """Path of `tool` ('mpremote' or 'ampy'): next to the running Python (the venv), else on PATH."""
    if tool not in TOOLS:
        raise ToolNotFoundError("unknown deploy tool %r: use one of %s" % (tool, ", ".join(TOOLS)))
    found = venv_exe(tool)
    if not found:
        pkg = "mpremote" if tool == "mpremote" else "adafruit-ampy"
        raise ToolNotFoundError("%s not found: install it with `pip install %s` (make test installs both)"
                                % (tool, pkg))
    return found


def check_port(port: str) -> None:
    """Fail early and clearly if `port` is not an existing, accessible serial device."""
    if not isinstance(port, str) or not port:
        raise PortError("no serial port given: pass the board's port, e.g. /dev/ttyACM0 or a virtual board's REPL pty")
    if "://" in port:  # pyserial URL (socket://, rfc2217://): nothing to check locally
        return
    try:
        st = os.stat(port)
    except FileNotFoundError:
        raise PortError("serial port %s does not exist: is the board plugged in (or the virtual board running)?"
                        % port) from None
    except OSError as e:
        raise PortError("cannot access serial port %s: %s" % (port, e.strerror)) from None
    if not stat.S_ISCHR(st.st_mode):
        raise PortError("%s is not a serial device (not a character device)" % port)
    if not os.access(port, os.R_OK | os.W_OK):
        raise PortError("no permission to open %s: add yourself to the dialout group (or run with access to it)" % port)


def build_files(build_dir: Path) -> tuple[dict, list[tuple[Path, str]]]:
    """Read and check a build folder: (manifest, [(local file, board path)]) for everything to copy."""
    build_dir = Path(build_dir)
    if not build_dir.is_dir():
        raise BuildFolderError("build folder %s does not exist: run the build first (tools/board/build.py)" % build_dir)
    manifest_path = build_dir / "MANIFEST.json"
    if not manifest_path.is_file():
        raise BuildFolderError("%s has no MANIFEST.json: it is not a build folder made by tools/board/build.py" % build_dir)
    try:
        manifest = json.loads(manifest_path.read_text())
        entries = manifest["files"]
        sizes = {str(e["path"]): int(e["bytes"]) for e in entries}
    except (ValueError, KeyError, TypeError) as e:
        raise BuildFolderError("%s is malformed (%s): rebuild" % (manifest_path, e)) from None
    for rel, size in sizes.items():
        f = build_dir / rel
        if not f.is_file():
            raise BuildFolderError("%s lists %s but the file is missing: rebuild" % (manifest_path, rel))
        if f.stat().st_size != size:
            raise BuildFolderError("%s: %s is %d bytes, the manifest says %d: rebuild"
                                   % (manifest_path, rel, f.stat().st_size, size))
    files: list[tuple[Path, str]] = []
    lib = build_dir / "lib"
    if lib.is_dir():
        for f in sorted(p for p in lib.rglob("*") if p.is_file()):
            files.append((f, "/" + f.relative_to(build_dir).as_posix()))
    for name in TOP_FILES + tuple(sorted(p.name for p in build_dir.glob("*.mbf"))):
        if (build_dir / name).is_file():
            files.append((build_dir / name, "/" + name))
    if not (build_dir / "board.json").is_file():
        raise BuildFolderError("%s has no board.json: rebuild" % build_dir)
    return manifest, files


def _ampy_board_exception(err: str) -> tuple[str, str] | None:
    """ampy reports a board-side exception as a host traceback ending in PyboardError('exception', out, err)."""
    m = re.search(r"PyboardError: (\('exception',.*\))\s*$", err, re.S)
    if not m:
        return None
    try:
        _, out, tb = ast.literal_eval(m.group(1))
        return out.decode("utf-8", "replace"), tb.decode("utf-8", "replace")
    except (ValueError, SyntaxError, TypeError, AttributeError):
        return None


def _classify_failure(tool: str, port: str, rc: int, out: str, err: str) -> DeployError:
    if tool == "ampy":
        board = _ampy_board_exception(err)
        if board is not None:
            printed, tb = board
            return BoardExecError("code raised on the board:\n%s" % tb.strip(), out + tb)
        err = err.strip().splitlines()[-1] if err.strip() else ""  # the host traceback is ampy's, not ours
    text = (out + "\n" + err).strip()
    low = text.lower()
    if "failed to access" in low or "could not open port" in low or "resource temporarily unavailable" in low:
        return PortError("cannot open %s: it is in use by another program (a REPL, a gateway, another %s?); "
                         "close it and retry\n%s" % (port, tool, text[-1500:]))
    if "could not enter raw repl" in low or "timeout waiting" in low:
        return BoardTimeoutError("the board on %s did not answer %s (no MicroPython REPL there, or an application "
                                 "that owns the console: press reset and retry)\n%s" % (port, tool, text[-1500:]))
    if tool == "mpremote" and "Traceback (most recent call last)" in out:
        return BoardExecError("code raised on the board:\n%s" % out[out.index("Traceback"):][-3000:].strip(), out)
    return DeployError("%s failed (exit %d):\n%s" % (tool, rc, text[-3000:]))


def _run_tool(tool: str, args: list[str], port: str, timeout: float,
              on_line: Callable[[str], None] | None = None) -> str:
    """Run the tool; return its stdout. on_line gets each stdout line as the tool prints it."""
    cmd = [tool_exe(tool)] + args
    what = "%s %s" % (tool, args[2] if len(args) > 2 else "")
    timed_out = BoardTimeoutError("the board on %s did not answer within %.0f s (%s): is MicroPython running on it "
                                  "and the port free?" % (port, timeout, what.strip()))
    if on_line is None:
        try:
            res = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise timed_out from None
        rc, raw_out, raw_err = res.returncode, res.stdout, res.stderr
    else:
        rc, raw_out, raw_err = _run_streaming(cmd, timeout, on_line, timed_out)
    out = raw_out.decode("utf-8", "replace").replace("\r\n", "\n")
    err = raw_err.decode("utf-8", "replace").replace("\r\n", "\n")
    if rc != 0 or (tool == "ampy" and "Failed to find or read input file" in err):
        raise _classify_failure(tool, port, rc, out, err)
    return out


def _run_streaming(cmd: list[str], timeout: float, on_line: Callable[[str], None],
                   timed_out: DeployError) -> tuple[int, bytes, bytes]:
    """subprocess.run with stdout handed to on_line line by line as it comes (the tool unbuffered)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout
    out, err, line = bytearray(), bytearray(), bytearray()
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    try:
        while streams:
            left = deadline - time.monotonic()
            if left <= 0:
                raise timed_out
            ready, _, _ = select.select(list(streams), [], [], min(left, 1.0))
            for fd in ready:
                data = os.read(fd, 65536)
                if not data:
                    del streams[fd]
                    continue
                streams[fd] += data
                if fd == proc.stdout.fileno():
                    line += data
                    while b"\n" in line:
                        i = line.index(b"\n")
                        on_line(line[:i].decode("utf-8", "replace").rstrip("\r"))
                        del line[:i + 1]
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise timed_out from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return rc, bytes(out), bytes(err)


def _port_args(tool: str, port: str) -> list[str]:
    return ["connect", port] if tool == "mpremote" else ["--port", port]


def run_on_board(port: str, code: str, tool: str = "mpremote", timeout: float = 30.0) -> str:
    """Run `code` on the board at `port` (after the tool's usual soft reset); return what it printed.

    Line endings are normalised to '\\n'. Raises BoardExecError if the code raised (the traceback is
    in the message), BoardTimeoutError if nothing answered within `timeout` seconds, PortError or
    ToolNotFoundError for the obvious.
    """
    if not isinstance(code, str):
        raise TypeError("code must be a str, not %s" % type(code).__name__)
    tool_exe(tool)
    check_port(port)
    if tool == "mpremote" and len(code) <= _EXEC_INLINE_MAX:
        return _run_tool(tool, _port_args(tool, port) + ["exec", code], port, timeout)
    with tempfile.TemporaryDirectory(prefix="edgetwin-run-") as tmp:
        script = Path(tmp) / "snippet.py"
        script.write_text(code)
        return _run_tool(tool, _port_args(tool, port) + ["run", str(script)], port, timeout)


_UID_CODE = """import json, binascii
try:
    import storage
    storage.remount('/', readonly=False)
except Exception:
    pass
try:
    _p = json.load(open('/node.json')).get('uid_path', '/node.uid')
except Exception:
    _p = '/node.uid'
from firmware.bootonce import unique_id
print('EDGETWIN-UID', binascii.hexlify(unique_id(_p, True)).decode())
"""


def board_uid(port: str, tool: str = "mpremote", timeout: float = 30.0) -> str:
    """The unique id (16 hex digits) the node deployed at `port` puts in its HELLO: the same
    firmware/bootonce.unique_id the node runs, so a board without a chip id keeps the one made here."""
    out = run_on_board(port, _UID_CODE, tool=tool, timeout=timeout)
    m = re.search(r"EDGETWIN-UID ([0-9a-f]{16})", out)
    if m is None:
        raise DeployError("the board at %s did not say its unique id (it printed %r)" % (port, out[-200:]))
    return m.group(1)


def reset_board(port: str, tool: str = "mpremote", timeout: float = 30.0, circuitpython: bool = False) -> None:
    """Hard-reset the board (machine.reset(); microcontroller.reset() on CircuitPython, which has no
    machine): it boots into its /main.py (CircuitPython: /boot.py, then /code.py), e.g. the node."""
    tool_exe(tool)
    check_port(port)
    if circuitpython:
        with tempfile.TemporaryDirectory(prefix="edgetwin-reset-") as tmp:
            script = Path(tmp) / "reset.py"
            script.write_text("import microcontroller\nmicrocontroller.reset()\n")
            # the board resets before it answers: ampy waits for nothing
            _run_tool(tool, _port_args(tool, port) + ["run", "--no-output", str(script)], port, timeout)
        return
    args = _port_args(tool, port) + (["reset"] if tool == "mpremote" else ["reset", "--hard"])
    _run_tool(tool, args, port, timeout)


def _parse_report(out: str) -> dict:
    for line in out.splitlines():
        if line.startswith(REPORT_MARK):
            return json.loads(line[len(REPORT_MARK):])
    raise DeployError("the board did not report its files after the copy; its output was:\n%s" % out[-2000:])


def romfs_state(port: str, image: bytes = b"", tool: str = "mpremote") -> tuple[int, bool]:
    """(bytes of the board's ROMFS partition 0, 0 without one; whether it already starts with image)."""
    import hashlib

    code = _ROMFS_CODE % {"n": len(image), "sha": hashlib.sha256(image).hexdigest().encode()}
    for line in run_on_board(port, code, tool=tool).splitlines():
        if line.startswith("@@ROMFS "):
            size, same = line.split()[1:3]
            return int(size), same == "1"
    return 0, False


def _rom_models(files: list[tuple[Path, str]], port: str, say: Callable[[str], None], force: bool,
                timeout: float) -> dict | None:
    """Put the build's models into the board's ROMFS: {"bytes" (the image), "partition", "written", "models":
    {fs path: rom path}}; None (the models go to the filesystem) when there is no partition or they do not fit."""
    from tools.board import romfs

    models = [(local, remote) for local, remote in files if remote.endswith(".mbf") and remote.count("/") == 1]
    if not models:
        return None
    image = romfs.build({local.name: local.read_bytes() for local, _ in models})
    size, same = romfs_state(port, image)
    if not size:
        return None
    if len(image) > size:
        say("the models' ROMFS image (%s B) is larger than the board's ROMFS partition (%s B): copying them to "
            "the filesystem" % (format(len(image), ","), format(size, ",")))
        return None
    written = force or not same
    if written:
        say("ROMFS: writing %s B (%s) into the %s B partition" % (format(len(image), ","),
                                                                 ", ".join(r for _, r in models), format(size, ",")))
        with tempfile.TemporaryDirectory(prefix="edgetwin-romfs-") as tmp:
            path = Path(tmp) / "models.romfs"  # mpremote takes a prebuilt image by its .romfs suffix
            path.write_bytes(image)
            _run_tool("mpremote", _port_args("mpremote", port) + ["romfs", "deploy", str(path)], port, timeout)
    else:
        say("ROMFS: the partition already holds these models")
    return {"bytes": len(image), "partition": size, "written": written,
            "models": {remote: ROM + remote for _, remote in models}}


def deploy(build_dir: Path, port: str, tool: str = "mpremote", timeout: float | None = None,
           clean: bool = True, force: bool = False, progress: Callable[[str], None] | None = None,
           frozen: bool = False, rom: bool = True, key: bytes | None = None, unkeyed: bool = False) -> dict:
    """Copy every file of `build_dir` onto the board at `port` with `tool`, then verify it.

    `rom`: models go into the board's ROMFS partition when it has one (mpremote, MicroPython; see the module
    docstring); the report's "rom" says what was written, and its files list them under /rom.

    `frozen`: the board's firmware carries the code (`make firmware`, docs/BOARDS.md): the build's lib/
    is not copied, only board.json, node.json, main.py and the model; with `clean`, the board's
    /lib/shared and /lib/firmware are removed (frozen modules come first on sys.path, so they would only
    take the flash the model and the spill ring need).

    `clean` removes files in the build's package folders on the board that the build lacks; `force`
    rewrites files that are already identical (mpremote only). `timeout` (seconds) bounds each tool
    invocation; by default it grows with the build's size. `progress`, when given, gets one line per
    file as its copy starts ("[3/42] /lib/shared/frame.mpy 2,345 B", mpremote and ampy alike; "up to
    date" for a file mpremote skipped) and one per step (clean-up, check). Returns a report::

        {"tool", "port", "build", "board", "arch", "files": [{"path", "bytes"}], "total_bytes",
         "removed": [...], "board_mem_alloc", "board_mem_free", "seconds"}

    `key`: the node's link key, written to /link.key with the rest (from a 0600 file in a private temporary
    folder; never printed); `unkeyed`: remove a /link.key an earlier deploy wrote (the node runs unsigned).

    Raises VerifyError (with `.report`) if a file is missing or has the wrong size on the board.
    """
    if key is None:
        return _deploy(build_dir, port, tool, timeout, clean, force, progress, frozen, rom, None, unkeyed)
    with tempfile.TemporaryDirectory(prefix="edgetwin-key-") as tmp:  # 0700
        kf = Path(tmp) / "link.key"
        fd = os.open(str(kf), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key)
        finally:
            os.close(fd)
        return _deploy(build_dir, port, tool, timeout, clean, force, progress, frozen, rom, kf, False)


def _deploy(build_dir, port, tool, timeout, clean, force, progress, frozen, rom, key_file, unkeyed) -> dict:
    t0 = time.monotonic()
    manifest, files = build_files(Path(build_dir))
    if key_file is not None:
        files.append((key_file, KEY_PATH))
    if frozen:  # the firmware carries the code, but not the C kernels: a native module is linked at import.
        # Nor the code-update boot stub: frozen code is replaced by flashing, never over the link
        files = [(local, remote) for local, remote in files
                 if not remote.startswith("/lib/") and remote not in CODESLOT_FILES or remote == NATIVE_MODULE]
    tool_exe(tool)  # fails early, with install advice
    check_port(port)
    expected = {remote: local.stat().st_size for local, remote in files}
    total = sum(expected.values())
    if timeout is None:
        # mpremote writes 256-byte chunks, one raw-REPL exec each; ampy soft-resets per file.
        timeout = 60.0 + total / 2000.0 + (1.5 * len(files) if tool == "ampy" else 0.0)
    say = progress or (lambda line: None)
    rom_info = None
    if rom and tool == "mpremote" and manifest.get("flavour") != "circuitpython":
        rom_info = _rom_models(files, port, say, force, timeout)
    if rom_info is not None:  # the models live in ROMFS: not on the filesystem, where a copy would override them
        files = [(local, remote) for local, remote in files if remote not in rom_info["models"]]
    in_rom = sorted(rom_info["models"].values()) if rom_info is not None else []
    prepare, verify_code, cleaning = _board_code(files, clean, FROZEN_STALE if frozen else (), in_rom)
    if rom_info is not None:
        gone = sorted(rom_info["models"])
        prepare += (_ROM_MOUNT_CODE if rom_info["written"] else "") + \
            "import os\nfor _p in %r:\n    try:\n        os.remove(_p)\n        print('removed', _p)\n" \
            "    except OSError:\n        pass\n" % (gone,)
        for fs_path, rom_path in rom_info["models"].items():
            expected[rom_path] = expected.pop(fs_path)
    if manifest.get("flavour") == "circuitpython":
        # CIRCUITPY is read-only to code while a computer may write it over USB: take it for this session (a
        # computer that has the drive mounted keeps it, and the board refuses: then copy by hand)
        prepare = _CP_WRITABLE + prepare
    if unkeyed:
        prepare += "import os\ntry:\n    os.remove(%r)\n    print('removed', %r)\nexcept OSError:\n    pass\n" % (
            KEY_PATH, KEY_PATH)
    if ("node" in manifest or "logs_node" in manifest) and "plant" not in manifest:
        # a node deployed without a description runs the simulator: one from an earlier deploy must go
        prepare += "import os\ntry:\n    os.remove('/plant.json')\nexcept OSError:\n    pass\n"
    say("%s: %d files, %s B to %s%s" % (tool, len(files), format(total, ","), port,
                                        "; removing stale files first" if cleaning else ""))
    if tool == "mpremote":
        outputs = _copy_mpremote(port, files, expected, prepare, verify_code, force, timeout, say, progress is not None)
    else:
        outputs = _copy_ampy(port, files, expected, prepare, verify_code, timeout, say)
    report = _report(outputs, expected, tool, port, Path(build_dir).resolve(), manifest, total)
    if rom_info is not None:
        report["rom"] = rom_info
    report["seconds"] = round(time.monotonic() - t0, 2)
    if "problems" in report:
        raise VerifyError("deploy to %s did not verify:\n  %s" % (port, "\n  ".join(report["problems"])), report)
    return report


def _board_code(files: list[tuple[Path, str]], clean: bool, stale: tuple[str, ...] = (),
                in_rom: list[str] | tuple[str, ...] = ()) -> tuple[str, str, bool]:
    """(the snippet that makes the folders and, with clean, removes stale files (and everything under the
    folders `stale`); the check snippet (which also lists the files in_rom: models written to ROMFS); whether it
    cleans) for the board."""
    expected = sorted(remote for _, remote in files)
    pkg_dirs = sorted({"/".join(r.split("/")[:3]) for r in expected if r.startswith("/lib/") and r.count("/") >= 3}
                      | set(stale))
    clean_code = _CLEAN_CODE % {"keep": expected, "dirs": pkg_dirs}
    verify_code = _VERIFY_CODE % {"mark": REPORT_MARK,
                                  "top": [r for r in expected if not r.startswith("/lib/")] + list(in_rom)}
    # Explicit destination paths rather than `cp -r lib :`, whose result depends on whether the
    # destination exists (and on how the board's VFS answers stat('')).
    parts = [remote.split("/")[1:-1] for _, remote in files]
    dirs = sorted({"/" + "/".join(p[:i]) for p in parts for i in range(1, len(p) + 1)},
                  key=lambda d: (d.count("/"), d))  # parents first
    cleaning = bool(clean and pkg_dirs)
    return (_MKDIR_CODE % {"dirs": dirs}) + (clean_code if cleaning else ""), verify_code, cleaning


def _file_line(i: int, n: int, remote: str, size: int) -> str:
    return "[%d/%d] %s %s B" % (i, n, remote, format(size, ","))


def _copy_mpremote(port: str, files: list[tuple[Path, str]], expected: dict, prepare: str, verify_code: str,
                   force: bool, timeout: float, say: Callable[[str], None], stream: bool) -> list[str]:
    """One mpremote chain: prepare, every copy (identical files skipped unless force), the check."""
    by_local = {str(local): remote for local, remote in files}
    count = [0]

    def on_line(line: str) -> None:  # mpremote prints "cp LOCAL :REMOTE" as each copy starts
        if line.startswith("cp ") and " :" in line:
            remote = by_local.get(line[3:line.rindex(" :")])
            if remote is not None:
                count[0] += 1
                say(_file_line(count[0], len(files), remote, expected[remote]))
        elif line.startswith("Up to date: "):
            say("        up to date on the board")
        elif line.startswith("removed /"):
            say("removed stale " + line.split(" ", 1)[1])

    args = _port_args("mpremote", port) + ["exec", prepare, "+"]
    for local, remote in files:
        args += ["fs", "cp"] + (["--force"] if force else []) + [str(local), ":" + remote, "+"]
    args += ["exec", verify_code]
    return [_run_tool("mpremote", args, port, timeout, on_line if stream else None)]


def _copy_ampy(port: str, files: list[tuple[Path, str]], expected: dict, prepare: str, verify_code: str,
               timeout: float, say: Callable[[str], None]) -> list[str]:
    """`ampy run` of prepare, one `ampy put` per file (ampy prints nothing while it copies: slower than
    one put of the folder by a soft reset per file, but the user sees each file go), `ampy run` of the check."""
    outputs: list[str] = []
    base = _port_args("ampy", port)
    with tempfile.TemporaryDirectory(prefix="edgetwin-deploy-") as tmp:
        clean_py, verify_py = Path(tmp) / "clean.py", Path(tmp) / "verify.py"
        clean_py.write_text(prepare)
        verify_py.write_text(verify_code)
        outputs.append(_run_tool("ampy", base + ["run", str(clean_py)], port, timeout))
        for line in outputs[-1].splitlines():
            if line.startswith("removed /"):
                say("removed stale " + line.split(" ", 1)[1])
        for i, (local, remote) in enumerate(files, 1):
            say(_file_line(i, len(files), remote, expected[remote]))
            per_file = 30.0 + expected[remote] / 500.0
            outputs.append(_run_tool("ampy", base + ["put", str(local), remote], port, min(timeout, per_file)))
        say("checking the files on the board")
        outputs.append(_run_tool("ampy", base + ["run", str(verify_py)], port, timeout))
    return outputs


def _report(outputs: list[str], expected: dict, tool: str, port: str, build_dir: Path, manifest: dict,
            total: int) -> dict:
    """The deploy report from the tools' outputs (the last holds the board's listing), with "problems"
    when a file is missing or has the wrong size on the board."""
    board = _parse_report(outputs[-1])
    removed = [line.split(" ", 1)[1] for out in outputs for line in out.splitlines() if line.startswith("removed /")]
    on_board = {str(k): int(v) for k, v in board.get("files", {}).items()}
    problems = []
    for remote, size in sorted(expected.items()):
        if remote not in on_board:
            problems.append("%s is missing on the board" % remote)
        elif on_board[remote] != size:
            problems.append("%s is %d bytes on the board, %d in the build" % (remote, on_board[remote], size))
    report = {
        "tool": tool, "port": port, "build": str(build_dir), "board": manifest.get("board"),
        "arch": manifest.get("arch"),
        "files": [{"path": remote, "bytes": size} for remote, size in sorted(expected.items())],
        "total_bytes": total, "removed": removed,
        "board_mem_alloc": board.get("mem_alloc"), "board_mem_free": board.get("mem_free"),
    }
    if problems:
        report["problems"] = problems
    return report
