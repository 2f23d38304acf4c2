"""tools/board/deploy.py: copying a build onto a (virtual) board with the real mpremote and ampy, and its errors.

The end-to-end tests build the core for x64 (native .mpy that the unix port can load), start a virtual
board with the rp2040_pico profile (heap 241664 bytes), deploy, and run code on the board that imports
the deployed modules from /lib.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import serial

from tools.board import build, deploy
from tools.board.deploy import (BoardExecError, BoardTimeoutError, BuildFolderError, DeployError, PortError,
                          ToolNotFoundError, VerifyError)
from tools.board.vboard import VirtualBoard

HEAP = 241664  # boards/rp2040_pico.json


@pytest.fixture(scope="module")
def x64_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # our own output folder: other tests may rebuild build/ at the same time
    return build.build("rp2040_pico", arch="x64", out_dir=tmp_path_factory.mktemp("b") / "rp2040_pico-x64")


@pytest.fixture
def vb(tmp_path: Path):
    board = VirtualBoard("rp2040_pico", root=tmp_path / "fs")
    board.start()
    yield board
    board.stop()


def small_build(src: Path, dest: Path, main_py: str | None = None) -> Path:
    """A build folder holding only shared/__init__, shared/profile and board.json (ampy is slow per file)."""
    keep = ("lib/shared/__init__.mpy", "lib/shared/profile.mpy")
    manifest = json.loads((src / "MANIFEST.json").read_text())
    manifest["files"] = [f for f in manifest["files"] if f["path"] in keep]
    for rel in keep:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    shutil.copyfile(src / "board.json", dest / "board.json")
    (dest / "MANIFEST.json").write_text(json.dumps(manifest))
    if main_py is not None:
        (dest / "main.py").write_text(main_py)
    return dest


PROBE = """import gc, json
gc.collect()
before = gc.mem_alloc()
from shared import profile
p = profile.load('/board.json')
%s
gc.collect()
print(json.dumps({'name': p['name'], 'heap': p['heap_bytes'], 'file': profile.__file__,
                  'before': before, 'after': gc.mem_alloc(), 'total': gc.mem_alloc() + gc.mem_free()}))
"""


def probe(port: str, tool: str, native: list[str]) -> dict:
    imports = "\n".join("import shared.%s" % m for m in native)
    out = deploy.run_on_board(port, PROBE % imports, tool=tool)
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------- bad input

def test_missing_or_malformed_build_folder(tmp_path: Path) -> None:
    with pytest.raises(BuildFolderError, match="does not exist: run the build"):
        deploy.deploy(tmp_path / "nope", "/dev/null")
    with pytest.raises(BuildFolderError, match="no MANIFEST.json"):
        deploy.deploy(tmp_path, "/dev/null")
    (tmp_path / "MANIFEST.json").write_text("{not json")
    with pytest.raises(BuildFolderError, match="malformed"):
        deploy.deploy(tmp_path, "/dev/null")
    assert issubclass(BuildFolderError, ValueError)


def test_build_that_does_not_match_its_manifest(x64_build: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(x64_build, tmp_path / "b")
    (copy / "lib/shared/profile.mpy").write_bytes(b"M\x06")
    with pytest.raises(BuildFolderError, match="profile.mpy is 2 bytes, the manifest says"):
        deploy.deploy(copy, "/dev/null")
    (copy / "lib/shared/profile.mpy").unlink()
    with pytest.raises(BuildFolderError, match="profile.mpy but the file is missing"):
        deploy.deploy(copy, "/dev/null")


def test_unknown_or_missing_tool(x64_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ToolNotFoundError, match="unknown deploy tool 'rshell'"):
        deploy.deploy(x64_build, "/dev/null", tool="rshell")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolNotFoundError, match="pip install adafruit-ampy"):
        deploy.run_on_board("/dev/null", "print(1)", tool="ampy")


def test_bad_ports(x64_build: Path, tmp_path: Path) -> None:
    with pytest.raises(PortError, match="does not exist: is the board plugged in"):
        deploy.deploy(x64_build, "/dev/ttyACM-none")
    (tmp_path / "plain").write_text("")
    with pytest.raises(PortError, match="not a serial device"):
        deploy.run_on_board(str(tmp_path / "plain"), "print(1)")
    with pytest.raises(PortError, match="no serial port given"):
        deploy.run_on_board("", "print(1)")
    with pytest.raises(TypeError):
        deploy.run_on_board("/dev/null", b"print(1)")  # type: ignore[arg-type]


@pytest.mark.slow
def test_port_with_no_board_times_out(x64_build: Path) -> None:
    master, slave = os.openpty()  # a serial device nobody answers on
    try:
        t0 = time.monotonic()
        with pytest.raises(BoardTimeoutError, match="did not answer within 2 s"):
            deploy.deploy(x64_build, os.ttyname(slave), timeout=2)
        assert time.monotonic() - t0 < 10
        assert issubclass(BoardTimeoutError, TimeoutError)
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.slow
def test_busy_port(vb: VirtualBoard, x64_build: Path) -> None:
    with serial.Serial(vb.repl_port, exclusive=True):  # e.g. a terminal left open on the board
        with pytest.raises(PortError, match="in use by another program"):
            deploy.deploy(x64_build, vb.repl_port)


def test_verification_catches_missing_and_short_files(x64_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, files = deploy.build_files(x64_build)
    on_board = {remote: local.stat().st_size for local, remote in files}
    del on_board["/lib/shared/profile.mpy"]
    on_board["/board.json"] -= 1

    def fake_tool(tool: str, args: list[str], port: str, timeout: float, on_line=None) -> str:
        return "cp ...\n" + deploy.REPORT_MARK + json.dumps({"files": on_board, "mem_alloc": 1, "mem_free": 2})

    monkeypatch.setattr(deploy, "_run_tool", fake_tool)
    with pytest.raises(VerifyError) as info:
        deploy.deploy(x64_build, "/dev/null")
    problems = info.value.report["problems"]
    assert "/lib/shared/profile.mpy is missing on the board" in problems
    assert any(p.startswith("/board.json is %d bytes on the board" % on_board["/board.json"]) for p in problems)


# ---------------------------------------------------------------- end to end

@pytest.mark.slow
def test_deploy_with_mpremote_then_import_on_the_board(vb: VirtualBoard, x64_build: Path) -> None:
    stale = vb.fs_root / "lib" / "shared" / "profile.py"  # would shadow profile.mpy if left behind
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('stale source')\n")
    (vb.fs_root / "notes.txt").write_text("user file outside the package folders: kept\n")
    # a code update in its trial (firmware/codeslot.py): its rollback would move the old files back over these
    (vb.fs_root / "lib.old" / "firmware").mkdir(parents=True)
    (vb.fs_root / "lib.old" / "firmware" / "node.mpy").write_bytes(b"M\x06 the code before the trial")
    (vb.fs_root / "code.json").write_text('{"id": 1, "sha": "", "tries": 1}')
    (vb.fs_root / "code.switch").write_text("+firmware/node.mpy\n")
    lines: list[str] = []
    report = deploy.deploy(x64_build, vb.repl_port, progress=lines.append)
    n = len(report["files"])
    assert [ln for ln in lines if ln.startswith("[")] == [
        "[%d/%d] %s %s B" % (i, n, f, format(report_size, ",")) for i, (f, report_size) in enumerate(
            ((remote, local.stat().st_size) for local, remote in deploy.build_files(x64_build)[1]), 1)]
    assert "removed stale /lib/shared/profile.py" in lines
    manifest = json.loads((x64_build / "MANIFEST.json").read_text())
    assert report["removed"] == ["/lib/shared/profile.py", "/lib.old/firmware/node.mpy", "/code.json",
                                 "/code.switch"] and not stale.exists()
    assert not (vb.fs_root / "lib.old").exists() and not (vb.fs_root / "code.json").exists()
    assert (vb.fs_root / "notes.txt").exists()
    assert {f["path"] for f in report["files"]} == {"/" + f["path"] for f in manifest["files"]} | {"/board.json"}
    for f in report["files"]:  # byte for byte what the build holds
        assert (vb.fs_root / f["path"].lstrip("/")).read_bytes() == (x64_build / f["path"].lstrip("/")).read_bytes()
    assert report["board"] == "rp2040_pico" and report["arch"] == "x64"
    assert 0 < report["board_mem_alloc"] < 32 * 1024

    native = [Path(f["path"]).stem for f in manifest["files"] if f.get("native") and "/shared/" in f["path"]]
    result = probe(vb.repl_port, "mpremote", native)
    assert result["name"] == "rp2040_pico" and result["heap"] == HEAP
    assert result["file"] == "/lib/shared/profile.mpy"
    assert 0.9 * HEAP < result["total"] <= HEAP
    assert result["after"] > result["before"]
    print("mpremote deploy: %d files, %d bytes in %.2f s; board heap after deploy %d B; importing "
          "shared.profile%s: %d -> %d B in use"
          % (len(report["files"]), report["total_bytes"], report["seconds"], report["board_mem_alloc"],
             " + native " + ",".join(native) if native else "", result["before"], result["after"]))

    again = deploy.deploy(x64_build, vb.repl_port)  # identical files are skipped, nothing to remove
    assert again["removed"] == [] and again["files"] == report["files"]


@pytest.mark.slow
def test_deploy_with_ampy_then_run(vb: VirtualBoard, x64_build: Path, tmp_path: Path) -> None:
    small = small_build(x64_build, tmp_path / "small", main_py="print('app main')\n")
    lines: list[tuple[float, str]] = []
    report = deploy.deploy(small, vb.repl_port, tool="ampy", progress=lambda ln: lines.append((time.monotonic(), ln)))
    assert [f["path"] for f in report["files"]] == [
        "/board.json", "/lib/shared/__init__.mpy", "/lib/shared/profile.mpy", "/main.py"]
    # one line per file as its copy starts (ampy itself prints nothing), then the check
    text = [ln for _, ln in lines]
    files = [ln for ln in text if ln.startswith("[")]
    assert [ln.split()[0] for ln in files] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    assert sorted(ln.split()[1] for ln in files) == [f["path"] for f in report["files"]]
    assert text[0].startswith("ampy: 4 files") and text[-1] == "checking the files on the board"
    stamps = [t for t, ln in lines if ln.startswith("[")]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))  # they come as the copy goes, not at the end
    assert (vb.fs_root / "main.py").read_text() == "print('app main')\n"
    result = probe(vb.repl_port, "ampy", [])
    assert result["name"] == "rp2040_pico" and result["file"] == "/lib/shared/profile.mpy"
    print("ampy deploy: %d files in %.2f s; shared.profile import: %d -> %d B in use"
          % (len(report["files"]), report["seconds"], result["before"], result["after"]))
    with pytest.raises(BoardExecError, match="ZeroDivisionError") as info:
        deploy.run_on_board(vb.repl_port, "print('partial')\n1/0", tool="ampy")
    assert info.value.board_output.startswith("partial\n")


@pytest.mark.slow
def test_run_on_board_errors_and_long_code(vb: VirtualBoard) -> None:
    with pytest.raises(BoardExecError, match="(?s)Traceback.*NameError"):
        deploy.run_on_board(vb.repl_port, "print(undefined_name)")
    long_code = "# padding\n" * 1000 + "print(sum(range(10)))\n"  # > the inline limit: sent as a file
    assert deploy.run_on_board(vb.repl_port, long_code) == "45\n"
    assert issubclass(BoardExecError, DeployError)


@pytest.mark.slow
def test_deploy_then_reboot_runs_the_deployed_main(vb: VirtualBoard, x64_build: Path, tmp_path: Path) -> None:
    app = "from shared import profile\nprint('main sees', profile.load('/board.json')['name'])\n"
    small = small_build(x64_build, tmp_path / "small", main_py=app)
    deploy.deploy(small, vb.repl_port)
    with serial.Serial(vb.repl_port, timeout=0.2) as ser:
        vb.reboot()
        got = b""
        deadline = time.monotonic() + 5
        while b">>> " not in got and time.monotonic() < deadline:
            got += ser.read(256)
    assert b"main sees rp2040_pico" in got, got
    mpremote = str(Path(sys.executable).parent / "mpremote")
    res = subprocess.run([mpremote, "connect", vb.repl_port, "fs", "ls", ":lib/shared"],
                         capture_output=True, text=True, timeout=30)
    assert "profile.mpy" in res.stdout


@pytest.mark.slow
def test_cli_deploy_detects_a_virtual_board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from host import cli
    from tools.board.vboard import VirtualBoard

    with VirtualBoard("rp2040_pico", root=tmp_path / "fs") as vb:
        assert cli.main(["deploy", "--board", "rp2040_pico", "--port", vb.repl_port]) == 0
        out = capsys.readouterr().out
        assert "virtual board" in out
        got = deploy.run_on_board(vb.repl_port, "from shared import ringkv_viper; print(ringkv_viper.__name__)")
        assert got.strip() == "shared.ringkv_viper"  # the x64 native module imports: the right build went on
    assert cli.main(["deploy", "--board", "rp2040_pico", "--port", str(tmp_path / "nope")]) == 2
    assert "edgetwin deploy: error:" in capsys.readouterr().err
