"""`edgetwin build`: both board architectures compile, and every .mpy header names the right architecture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from host import cli
from tools.board import build


@pytest.mark.parametrize("board,arch", [("rp2040_pico", "armv6m"), ("esp32s3_devkitc", "xtensawin"), ("esp32s3_n8r8", "xtensawin")])
def test_build_names_board_architecture(tmp_path: Path, board: str, arch: str) -> None:
    out = build.build(board, out_dir=tmp_path / board)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["arch"] == arch
    sources = {str(p.relative_to(build.ROOT).with_suffix(".mpy")): p for p in build.sources("micropython")}
    assert not any("q4_numpy" in name for name in sources), "a host-only backend would waste the board's flash"
    # the C kernels (q4nat.mpy, a dynamic native module) where they are built for the arch: armv6m; the
    # ESP32-S3 has no LX7 toolchain here, and its boards draft with the viper kernels, which it carries
    nat = [f for f in manifest["files"] if f["path"] == "lib/" + build.NATIVE_MODULE]
    if arch == "armv6m":
        assert len(nat) == 1 and nat[0]["mpy_arch"] == arch and manifest["native_kernels"] == nat[0]["path"], nat
        hdr = build.read_mpy_header(out / nat[0]["path"])
        assert hdr.version == 6 and hdr.arch == arch
    else:
        assert not nat and "viper" in manifest["native_kernels"], manifest.get("native_kernels")
        assert any(f["path"] == "lib/shared/q4_viper.mpy" and f["native"] for f in manifest["files"])
    assert len(manifest["files"]) == len(sources) + len(nat)
    native_seen = 0
    for entry in manifest["files"]:
        if entry in nat:
            continue
        mpy = out / entry["path"]
        hdr = build.read_mpy_header(mpy)
        assert hdr.version == 6
        src = sources[entry["path"][len("lib/"):]]
        if build.has_native_code(src):
            native_seen += 1
            assert hdr.arch == arch, f"{entry['path']}: header says {hdr.arch}, expected {arch}"
            assert hdr.small_int_bits == 31
        else:
            assert hdr.arch == "none", f"{entry['path']}: bytecode-only file carries arch {hdr.arch}"
    assert native_seen >= 1, "no module with viper/native code was built: the architecture check checked nothing"
    assert json.loads((out / "board.json").read_text())["name"] == board


def test_circuitpython_build_ships_sources(tmp_path: Path) -> None:
    out = build.build("rp2040_pico_cp", out_dir=tmp_path / "cp")
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["arch"] == "source"
    assert all(f["path"].endswith(".py") for f in manifest["files"])
    # a plan of the shipped draft fits the measured heap, but stock CircuitPython compiles the sources into the
    # heap from CIRCUITPY: the logs-only package there, and room for the spill ring; with the firmware that
    # carries the code (make firmware-cp), a drafting node
    prof = build.board_profile("rp2040_pico_cp")
    assert build.can_draft(prof) and not build.drafts(prof) and build.drafts(prof, frozen=True)
    node = build.build("rp2040_pico_cp", out_dir=tmp_path / "cpn", node=True, frozen=True)
    nm = json.loads((node / "MANIFEST.json").read_text())
    assert nm["package"] == "drafting" and nm["node"]["main"] == "code.py" and nm["total_bytes"] < 400_000, nm
    assert (node / "code.py").read_text() == build.NODE_MAIN and "storage.remount" in (node / "boot.py").read_text()
    with pytest.raises(build.BuildError, match="make firmware-cp"):  # the drafting sources would not fit
        build.build("rp2040_pico_cp", out_dir=tmp_path / "cpd", node=True, model=build.DRAFT)
    paths = {f["path"] for f in manifest["files"]}
    assert manifest["package"] == "logs-only"
    assert not paths & {"lib/" + p for p in build.DRAFTING}
    assert "lib/firmware/node.py" in paths and "lib/firmware/spill.py" in paths
    prof = json.loads((out / "board.json").read_text())
    assert manifest["total_bytes"] + prof["spill_bytes"] <= prof["fs_bytes"]
    # 1.6 hours of the default line rate (docs/NODE.md): the 1 MB drive also holds the shipped draft
    assert prof["spill_bytes"] >= 128 * 4096


def test_drafting_profiles_get_the_drafting_package(tmp_path: Path) -> None:
    # a user's CircuitPython profile with room to draft gets the model runtime (the ulab backend, no viper)
    prof = dict(build.board_profile("rp2040_pico_cp"), name="big_cp", heap_bytes=4 * 1024 * 1024,
                psram_bytes=0, flash_bytes=8 * 1024 * 1024, fs_bytes=6 * 1024 * 1024)
    out = build.build(prof, out_dir=tmp_path / "big")
    manifest = json.loads((out / "MANIFEST.json").read_text())
    paths = {f["path"] for f in manifest["files"]}
    assert manifest["package"] == "drafting"
    assert "lib/shared/q4_viper.py" not in paths and "lib/shared/q4_ulab.py" in paths and "lib/shared/llama.py" in paths


def test_the_logs_only_package_runs_a_node_on_its_own(tmp_path: Path) -> None:
    # the CircuitPython build is source: run its node in a fresh interpreter that sees only that package,
    # over a loopback UART, and check it logs (and that the model runtime really is absent)
    out = build.build("rp2040_pico_cp", out_dir=tmp_path / "cp")
    script = (
        "import json, sys\n"
        "sys.path[:0] = [%r]\n"
        "from firmware import node\n"
        "from shared import frame\n"
        "class Loop:\n"
        "    def __init__(self): self.out = bytearray()\n"
        "    def write(self, b, n=None): b = bytes(b[:n] if n is not None else b); self.out += b; return len(b)\n"
        "    def readinto(self, buf): return 0\n"
        "    def any(self): return 0\n"
        "prof = json.load(open(%r))\n"
        "u = Loop()\n"
        "n = node.Node(u, prof, {'model': None, 'tick_ms': 1, 'spill_bytes': 0}, now=0)\n"
        "for t in range(0, 3000, 5): n.step(t)\n"
        "try:\n"
        "    import shared.llama\n"
        "    print('llama present')\n"
        "except ImportError:\n"
        "    print('no llama')\n"
        "print(n.q.queued, len(u.out))\n" % (str(out / "lib"), str(out / "board.json")))
    res = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("\n")
    assert lines[0] == "no llama"
    queued, wire = map(int, lines[1].split())
    assert queued > 20 and wire > 100  # lines were logged and the link sent bytes (its HELLOs at least)


def test_header_reader_rejects_non_mpy(tmp_path: Path) -> None:
    bad = tmp_path / "x.mpy"
    bad.write_bytes(b"print(1)\n")
    with pytest.raises(build.BuildError, match="not a .mpy"):
        build.read_mpy_header(bad)


def test_mpy_cross_errors_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    monkeypatch.setattr(build, "sources", lambda flavour=None, drafting=True: [broken])
    monkeypatch.setattr(build, "ROOT", tmp_path)
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "rp2040_pico.json").write_text((Path(cli.ROOT) / "boards" / "rp2040_pico.json").read_text())
    with pytest.raises(build.BuildError, match="mpy-cross failed on broken.py"):
        build.build("rp2040_pico", out_dir=tmp_path / "out")


def test_cli_build_and_unknown_board(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["build", "--board", "rp2040_pico"]) == 0
    assert "arch armv6m" in capsys.readouterr().out
    assert cli.main(["build", "--board", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown board 'nosuch'" in err and "rp2040_pico" in err


def test_cli_convert_is_wired(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["convert", "--help"])
    assert e.value.code == 0 and "SRC DST" in capsys.readouterr().out
    assert cli.main(["convert", str(tmp_path / "missing.gguf"), str(tmp_path / "out.mbf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.gguf" in err
    assert not (tmp_path / "out.mbf").exists()


def test_node_build_carries_the_draft_and_main(tmp_path: Path) -> None:
    out = build.build("rp2040_pico", arch="x64", out_dir=tmp_path / "n", node=True)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert (out / "draft-rp2040.mbf").read_bytes() == build.DRAFT.read_bytes()
    assert "firmware.node" in (out / "main.py").read_text()
    assert manifest["node"]["model"] == "draft-rp2040.mbf"
    from tools.board import deploy

    _, files = deploy.build_files(out)
    assert {"/draft-rp2040.mbf", "/main.py", "/board.json"} <= {remote for _, remote in files}
    with pytest.raises(build.BuildError, match="no draft model"):
        build.build("rp2040_pico", arch="x64", out_dir=tmp_path / "m", node=True, model=tmp_path / "none.mbf")


def _profile(tmp_path: Path, file: str, **changes: object) -> Path:
    doc = json.loads((Path(cli.ROOT) / "boards" / "rp2040_pico.json").read_text())
    doc.update(changes)
    path = tmp_path / file
    path.write_text(json.dumps(doc))
    return path


def test_a_profile_never_chooses_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from host import board_profile

    boards = tmp_path / "build" / "boards"
    monkeypatch.setattr(board_profile, "BUILD", boards)
    readme = (Path(cli.ROOT) / "README.md").read_bytes()
    for field, value in (("model", "../../README.md"), ("name", "../x"), ("name", "a/b"), ("model", "/etc/x.mbf"),
                         ("name", ".."), ("model", "..mbf")):
        path = _profile(tmp_path, "bad.json", **{field: value})
        assert cli.main(["build", "--board", str(path), "--node"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and "field '%s'" % field in err, err
    assert (Path(cli.ROOT) / "README.md").read_bytes() == readme
    assert not (tmp_path / "build").exists()  # a refused profile creates nothing
    # a user's profile named like one of build/'s own folders gets its own folder under build/boards/
    path = _profile(tmp_path, "mine.json", name="models")
    assert board_profile.build_dir(board_profile.resolve(str(path)), "x64") == (boards / "models-x64").resolve()
    assert board_profile.build_dir(board_profile.resolve("rp2040_pico")) == (boards / "rp2040_pico").resolve()


def test_build_replaces_only_a_build_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(build.BuildError, match="not a build folder"):
        build.build("rp2040_pico_cp", out_dir=out)
    assert (out / "notes.txt").read_text() == "mine"
    first = build.build("rp2040_pico_cp", out_dir=tmp_path / "cp")  # sources only: fast
    (first / "stale.txt").write_text("from an older build")
    again = build.build("rp2040_pico_cp", out_dir=tmp_path / "cp")
    assert again == first and not (again / "stale.txt").exists() and (again / "MANIFEST.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp", "out"]  # no temporary folder left behind


def test_mpy_cross_failure_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "src" / "broken.py"
    broken.parent.mkdir()
    broken.write_text("def f(:\n")
    monkeypatch.setattr(build, "sources", lambda flavour=None, drafting=True: [broken])
    monkeypatch.setattr(build, "ROOT", tmp_path / "src")
    (tmp_path / "src" / "boards").mkdir()
    (tmp_path / "src" / "boards" / "rp2040_pico.json").write_text((Path(cli.ROOT) / "boards" / "rp2040_pico.json").read_text())
    with pytest.raises(build.BuildError, match="mpy-cross failed"):
        build.build("rp2040_pico", out_dir=tmp_path / "new" / "deeper" / "out")
    assert not (tmp_path / "new").exists()
