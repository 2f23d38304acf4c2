"""A virtual sensor node: a virtual board (tools/board/vboard.py) with the x64 build deployed by mpremote
(tools/board/deploy.py), a model file and /node.json on its filesystem, booted into firmware/node.py.

    node = VNode("rp2040_pico", root, build_dir, {"tick_ms": 200}, heap=393216, model=Path("draft.mbf"))
    node.uart_port        # the pty the gateway opens (pyserial)
    node.console()        # what the board printed on its REPL since the last call (tracebacks, NODE start)
    node.close()          # stops the interpreter, closes the ptys

The build is made once per board by build_x64(board, out_dir) (mpy-cross takes seconds).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tools.board import build, deploy
from tools.board.vboard import VirtualBoard, set_raw

MAIN = "import firmware.node as n\nn.main()\n"


def provision(root: Path, keys, name: str) -> str:
    """What `edgetwin deploy --node` does for a board, on a virtual board's filesystem: its unique id (kept in
    /node.uid: the unix port has no chip id) and a new link key in /link.key and in `keys` (host/linkkeys.py
    KeyFile). Returns the unique id (hex)."""
    uid_file = Path(root) / "node.uid"
    if not uid_file.is_file() or uid_file.stat().st_size != 8:
        uid_file.write_bytes(os.urandom(8))
    uid = uid_file.read_bytes().hex()
    key = keys.provision(uid, name)
    fd = os.open(str(Path(root) / "link.key"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, key)
    finally:
        os.close(fd)
    return uid


def build_x64(board: str, out_dir: Path) -> Path:
    """The x64 (unix port) build of a board profile's firmware into out_dir."""
    return build.build(board, arch="x64", out_dir=Path(out_dir))


class VNode:
    """A virtual board running firmware/node.py from /main.py; see the module docstring."""

    def __init__(self, board: str, root: Path, build_dir: Path, node_cfg: dict, heap: int | None = None,
                 model: Path | bytes | None = None, plant: bytes | None = None, buses: tuple = (),
                 keys=None, name: str = "") -> None:
        """plant: a compiled plant description (host/plantcompile.py) for /plant.json; buses: the UART ids of
        its RS-485 buses (each a pty: `bus_port(uart)`, where the Modbus slaves go); keys: a KeyFile
        (host/linkkeys.py) to provision the node's link key in (None: the node runs unsigned)."""
        self.board = board
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.vb = VirtualBoard(board, root=self.root, heap_bytes=heap, buses=buses)
        self.heap_bytes = self.vb.heap_bytes
        self.profile_heap_bytes = int(self.vb.profile["heap_bytes"])
        self._con = -1
        self.vb.start()
        try:
            self.deploy_report = deploy.deploy(Path(build_dir), self.vb.repl_port)
            cfg = dict(node_cfg)
            if model is None:
                cfg["model"] = None
            else:
                dst = self.root / "draft.mbf"
                if isinstance(model, (bytes, bytearray)):
                    dst.write_bytes(model)
                else:
                    shutil.copyfile(model, dst)
                cfg["model"] = "/draft.mbf"
            (self.root / "node.json").write_text(json.dumps(cfg))
            if plant is not None:
                (self.root / "plant.json").write_bytes(plant)
            (self.root / "main.py").write_text(MAIN)
            self.uid = provision(self.root, keys, name or board) if keys is not None else ""
            self.vb.reboot()  # boots into main.py: the node runs
        except BaseException:
            self.vb.stop()
            raise

    @property
    def uart_port(self) -> str:
        return self.vb.uart_port

    def bus_port(self, uart: int) -> str:
        return self.vb.bus_port(uart)

    def pid(self) -> int | None:
        return self.vb.interpreter_pid

    def console(self) -> str:
        """Text the board printed on its console since the last call (non-blocking)."""
        if self._con < 0:
            try:
                self._con = os.open(self.vb.repl_port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
                set_raw(self._con)
            except OSError:
                return ""
        out = bytearray()
        while True:
            try:
                data = os.read(self._con, 4096)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            out += data
        return out.decode("utf-8", "replace")

    def close(self) -> None:
        if self._con >= 0:
            try:
                os.close(self._con)
            except OSError:
                pass
            self._con = -1
        self.vb.stop()
