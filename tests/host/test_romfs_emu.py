"""The draft model in the firmware's ROMFS partition, read in place from flash (make firmware on the emulated Pico).

`edgetwin deploy` writes the model into ROMFS (tools/board/deploy.py, tools/board/romfs.py); the node finds it
at /rom (firmware/node.py `model_path`) and its weights are views of the flash (shared/mbf.py `Reader.mem`):
the Q4Matrix buffers lie in the XIP address range, and a copy of the model on the filesystem overrides the ROM
one. Kept short in host time: one deploy of the tiny model, two probes (the node itself is not run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.board import deploy, emuboard
from tools.board import romfs as romfs_image

ROOT = Path(__file__).resolve().parents[2]
MPREMOTE = str(Path(sys.executable).parent / "mpremote")
XIP_BASE = 0x10000000  # the RP2040's flash, memory-mapped (execute in place)

# Runs on the board: what make_drafter builds from /node.json, and where its weights are
PROBE = """import gc, json, uctypes
from firmware import boardcfg, node, nodecfg
prof = boardcfg.load()
cfg = nodecfg.load_config()
path = node.model_path(prof, cfg)
gc.collect()
before = gc.mem_alloc()
d, vocab = node.make_drafter(prof, cfg)
m = d.model
gc.collect()
w = m.layers[0].wq.buf
print('PROBE ' + json.dumps({'path': path, 'in_place': m.reader.mem is not None, 'mode': m.mode,
      'wq': type(w).__name__, 'wq_addr': uctypes.addressof(w), 'heap': gc.mem_alloc() - before}))
"""


def probe(port: str) -> dict:
    out = deploy.run_on_board(port, PROBE, timeout=120)
    return json.loads(out[out.index("PROBE ") + 6:].splitlines()[0])


@pytest.mark.slow
def test_model_in_romfs_is_read_in_place_and_a_filesystem_copy_overrides_it(image: Path, tmp_path: Path) -> None:
    import gwkit

    model = tmp_path / "tiny.mbf"
    model.write_bytes(gwkit.tiny_mbf())
    board = emuboard.EmuBoard("rp2040_pico", image, tmp_path / "flash.bin").start()
    try:
        # the firmware's partition is the profile's
        size, _same = deploy.romfs_state(board.repl_port)
        assert size == board.profile["romfs_bytes"]
        res = subprocess.run([sys.executable, "-m", "host.cli", "deploy", "--board", "rp2040_pico", "--port",
                              board.repl_port, "--node", "--model", str(model), "--no-reset"], cwd=str(ROOT),
                             capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        report = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
        paths = {f["path"] for f in report["files"]}
        assert {"/board.json", "/node.json", "/main.py", "/rom/draft-rp2040.mbf"} <= paths, paths
        assert "/draft-rp2040.mbf" not in paths  # the model is in ROMFS, not on the filesystem
        assert report["rom"]["written"] and report["rom"]["bytes"] == len(romfs_image.build(
            {"draft-rp2040.mbf": model.read_bytes()}))
        # the node's model: from /rom, resident, its weights in the flash (XIP), not in RAM
        rom = probe(board.repl_port)
        assert rom["path"] == "/rom/draft-rp2040.mbf" and rom["in_place"] and rom["mode"] == "resident", rom
        assert rom["wq"] == "memoryview" and XIP_BASE <= rom["wq_addr"] < XIP_BASE + board.flash_bytes, rom
        assert rom["wq_addr"] % 4 == 0
        # a copy on the filesystem (an update) overrides the ROM one: read into RAM as before
        subprocess.run([MPREMOTE, "connect", board.repl_port, "fs", "cp", str(model), ":draft-rp2040.mbf"],
                       check=True, capture_output=True, timeout=300)
        fs = probe(board.repl_port)
        assert fs["path"] == "/draft-rp2040.mbf" and not fs["in_place"], fs
        assert not XIP_BASE <= fs["wq_addr"] < XIP_BASE + board.flash_bytes
        print("tiny draft on the emulated Pico: heap held %d B from /rom (in place), %d B from the filesystem"
              % (rom["heap"], fs["heap"]))
        assert rom["heap"] < fs["heap"]
        # the partition holds exactly the image deploy built: a second deploy of the model would not rewrite it
        again = deploy.romfs_state(board.repl_port, romfs_image.build({"draft-rp2040.mbf": model.read_bytes()}))
        assert again == (size, True)
    finally:
        board.stop()
