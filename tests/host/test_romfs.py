"""tools/board/romfs.py: ROMFS images whose files start 32-byte aligned, readable by MicroPython's VfsRom; the
reader (shared/mbf.py) uses a ROMFS file in place only when it is word-aligned (mpremote's own builder does not
align), and the shared tests' image fixture is this builder's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mpremote.romfs import VfsRomWriter

from tools.board import romfs
from tools.board.vboard import micropython_exe

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "shared" / "data" / "tiny_llama.mbf"


def test_files_start_aligned_whatever_their_names_and_sizes() -> None:
    for n in range(1, 40):
        files = {"m" * n + ".mbf": bytes(range(n)) * 3, "a.txt": b"x" * (n * 7), "z": b""}
        image = romfs.build(files)
        assert image.startswith(VfsRomWriter.ROMFS_HEADER) and len(image) % 2 == 0
        offs = romfs.offsets(image)
        assert set(offs) == set(files)
        for name, off in offs.items():
            assert off % romfs.ALIGN == 0
            assert image[off:off + len(files[name])] == files[name]
    with pytest.raises(ValueError):
        romfs.build({"lib/x.py": b""})


def test_shared_fixture_is_this_builders_image() -> None:
    # tests/shared/test_inplace.py mounts it on the unix port: rebuild it with
    #   python -m tools.board.romfs tests/shared/data/tiny_llama.romfs tests/shared/data/tiny_llama.mbf
    fixture = ROOT / "tests" / "shared" / "data" / "tiny_llama.romfs"
    assert fixture.read_bytes() == romfs.build({TINY.name: TINY.read_bytes()})


MOUNT = """import sys, vfs, uctypes
sys.path.insert(0, %(root)r)
from shared import mbf
img = open(%(img)r, 'rb').read()
vfs.mount(vfs.VfsRom(img), '/rom')
f = open('/rom/tiny_llama.mbf', 'rb')
r = mbf.open(f)
r.verify_all()
print('OFF', uctypes.addressof(memoryview(f)) - uctypes.addressof(img), r.mem is not None)
"""


@pytest.mark.parametrize("aligned", [True, False])
def test_unix_port_mounts_the_image_and_reads_in_place_only_when_aligned(tmp_path: Path, aligned: bool) -> None:
    data = TINY.read_bytes()
    if aligned:
        image = romfs.build({TINY.name: data})
    else:  # mpremote's builder: the file right after its record headers
        w = VfsRomWriter()
        w.mkfile(TINY.name, data)
        image = w.finalise()
    path = tmp_path / "m.romfs"
    path.write_bytes(image)
    out = subprocess.run([micropython_exe(), "-c", MOUNT % {"root": str(ROOT), "img": str(path)}],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    _, off, in_place = out.stdout.split()
    assert (int(off) % 4 == 0) == (in_place == "True")
    assert in_place == ("True" if aligned else "False"), (off, in_place)
