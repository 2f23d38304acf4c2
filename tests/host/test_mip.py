"""package.json (the mip manifest): up to date with the sources, and `mpremote mip install` of it onto a
virtual board gives a core that imports and runs there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.board import build, deploy, mip_package
from tools.board.vboard import VirtualBoard

ROOT = Path(__file__).resolve().parents[2]


def test_package_json_is_current() -> None:
    assert mip_package.main(["--check"]) == 0, "package.json is stale: run python -m tools.board.mip_package"
    data = json.loads((ROOT / "package.json").read_text())
    paths = [dest for dest, src in data["urls"]]
    assert all(dest == src for dest, src in data["urls"])
    assert "shared/__init__.py" in paths and "shared/ringkv.py" in paths and "firmware/uart.py" in paths
    assert all((ROOT / p).is_file() for p in paths)
    assert not any(p in build.EXCLUDED["micropython"] for p in paths)  # host-only backends stay out


def test_check_reports_a_stale_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "repo"
    (fake / "shared").mkdir(parents=True)
    (fake / "firmware").mkdir()
    (fake / "shared" / "a.py").write_text("")
    (fake / "pyproject.toml").write_text('version = "9.9"\n')
    monkeypatch.setattr(mip_package, "ROOT", fake)
    assert mip_package.main(["--check"]) == 1  # no package.json yet
    assert mip_package.main([]) == 0
    assert mip_package.main(["--check"]) == 0
    (fake / "shared" / "b.py").write_text("")  # a new module makes it stale
    assert mip_package.main(["--check"]) == 1


@pytest.mark.slow
def test_mip_install_onto_a_virtual_board(tmp_path: Path) -> None:
    with VirtualBoard("rp2040_pico", root=tmp_path / "fs") as vb:
        out = subprocess.run([sys.executable, "-m", "mpremote", "connect", vb.repl_port, "mip", "install",
                              "--target", "/lib", str(ROOT / "package.json")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Done" in out.stdout
        assert (tmp_path / "fs" / "lib" / "shared" / "ringkv.py").is_file()
        assert not (tmp_path / "fs" / "lib" / "shared" / "q4_numpy.py").exists()
        code = ("from shared import lruk, crc32\n"
                "c = lruk.LRUK(8, 2)\nprint('slot', c.insert(5), c.lookup(5))\n"
                "print('crc', crc32.crc32(b'123456789'))\n")
        printed = deploy.run_on_board(vb.repl_port, code, timeout=60)
        assert "crc %d" % 0xCBF43926 in printed
        assert "slot 0 0" in printed
