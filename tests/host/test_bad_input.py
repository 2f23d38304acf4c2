"""Bad input at every `edgetwin` subcommand (issue 13, point 6): missing files, directories instead of
files, files that are not what they claim, bad numbers, bad database paths. Each is one stderr line
naming the file or the option, exit 2, no traceback, and nothing created or changed on disk.

Board profiles are the deploy helper's (tests/host/test_deploy.py and its profile fuzz); these are the
other inputs. The calls are in-process (host.cli.main), as the `edgetwin` script makes them."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
from pathlib import Path

import pytest

from host import cli
from host.store import LogStore
from tools.bench import commands as bench_commands

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    """Hostile inputs in tmp_path: text files posing as models and stores, truncated models."""
    from tools.demo import spec_models

    good = spec_models.make_pair(3, seq_len=64).mbf
    (tmp_path / "trunc.mbf").write_bytes(good[:len(good) // 3])
    (tmp_path / "head.mbf").write_bytes(good[:40])
    (tmp_path / "text.txt").write_text("not a model, not a store\n")
    (tmp_path / "trunc.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    (tmp_path / "zero.gguf").write_bytes(b"")
    (tmp_path / "hostile.bin").write_bytes(b"\xff\xff\xff\x7f" * 7 + b"\x00" * 8)  # a llama2.c header of huge dims
    (tmp_path / "dir").mkdir()
    store = tmp_path / "store.db"
    LogStore(store).close()
    with socket.socket() as s:  # a port nothing listens on: the fleet view's unreachable broker
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"PORT": str(port)} | {k: str(tmp_path / v) for k, v in (("T", ""), ("TRUNC", "trunc.mbf"), ("HEAD", "head.mbf"),
                                              ("TEXT", "text.txt"), ("TGGUF", "trunc.gguf"), ("ZGGUF", "zero.gguf"),
                                              ("HOSTILE", "hostile.bin"), ("DIR", "dir"), ("STORE", "store.db"))}


NOPORT = "/dev/edgetwin-no-such-port"
GW = ["gateway", "--port", "/dev/null"]  # exists, so the other mistakes are found; /dev/null is no serial port
ASK = ["ask", "why did P-101 trip?", "--no-answer"]
FLEET = ["fleet", "--mqtt", "mqtt://127.0.0.1:{PORT}"]

# (argv with {NAME} placeholders, a word the error line must contain)
CASES = [
    # gateway: database paths, model files, numbers, ports
    (GW + ["--db", "{T}/no/such/dir/g.db"], "--db"),
    (GW + ["--db", "{DIR}"], "{DIR}"),
    (GW + ["--db", "{TEXT}"], "{TEXT}"),
    (["gateway", "--port", NOPORT, "--db", "{T}/g.db"], NOPORT),
    (["gateway", "--port", NOPORT, "--db", "{STORE}"], NOPORT),  # an existing store is left as it was
    (GW + ["--db", "{T}/g.db"], "/dev/null"),  # the store is created, the port fails: the store is removed
    (["gateway", "--port", "{T}", "--db", "{T}/g.db"], "{T}"),  # a port that is not a serial device
    (GW + ["--db", "{T}/g.db", "--status", "{T}/none/st.json"], "--status"),
    (GW + ["--db", "{T}/g.db", "--status", "{DIR}"], "--status"),
    (GW + ["--db", "{T}/g.db", "--model", "{T}/none.gguf"], "none.gguf"),
    (GW + ["--db", "{T}/g.db", "--model", "{DIR}"], "{DIR}"),
    (GW + ["--db", "{T}/g.db", "--model", "{TEXT}"], "{TEXT}"),
    (GW + ["--db", "{T}/g.db", "--model", "{TGGUF}"], "{TGGUF}"),
    (GW + ["--db", "{T}/g.db", "--model", "{ZGGUF}"], "{ZGGUF}"),
    (GW + ["--db", "{T}/g.db", "--model", "tiny:x"], "tiny:"),
    (GW + ["--db", "{T}/g.db", "--baud", "fast"], "--baud"),
    (GW + ["--db", "{T}/g.db", "--baud", "0"], "--baud"),
    (GW + ["--db", "{T}/g.db", "--temperature", "-1"], "--temperature"),
    (GW + ["--db", "{T}/g.db", "--temperature", "nan"], "--temperature"),
    (GW + ["--db", "{T}/g.db", "--top-k", "-2"], "--top-k"),
    (GW + ["--db", "{T}/g.db", "--seconds", "0"], "--seconds"),
    (["gateway", "--db", "{T}/g.db"], "--port"),
    (["gateway", "--port", "", "--db", "{T}/g.db"], "--port"),
    # ask: the store, numbers
    (ASK + ["--db", "{T}/none.db"], "none.db"),
    (ASK + ["--db", "{DIR}"], "{DIR}"),
    (ASK + ["--db", "{TEXT}"], "{TEXT}"),
    (ASK + ["--db", "{TRUNC}"], "{TRUNC}"),
    (ASK + ["--db", "{STORE}", "--k", "0"], "--k"),
    (ASK + ["--db", "{STORE}", "--k", "many"], "--k"),
    (ASK + ["--db", "{STORE}", "--candidates", "-1"], "--candidates"),
    (ASK + ["--db", "{STORE}", "--threshold", "-1"], "--threshold"),
    (["ask", " ", "--db", "{STORE}"], "question"),
    # plan: model files, numbers (its board handling is the deploy helper's)
    (["plan", "--board", "rp2040_pico", "--model", "{T}/none.mbf"], "none.mbf"),
    (["plan", "--board", "rp2040_pico", "--model", "{DIR}"], "{DIR}"),
    (["plan", "--board", "rp2040_pico", "--model", "{TEXT}"], "{TEXT}"),
    (["plan", "--board", "rp2040_pico", "--model", "{TRUNC}"], "{TRUNC}"),
    (["plan", "--board", "rp2040_pico", "--model", "{HEAD}"], "{HEAD}"),
    (["plan", "--board", "rp2040_pico", "--model", "{TRUNC}", "--margin", "lots"], "--margin"),
    (["plan", "--board", "rp2040_pico", "--model", "{TRUNC}", "--mode", "all"], "--mode"),
    # convert: missing, directories, truncated and hostile sources, a destination nowhere
    (["convert", "{T}/none.gguf", "{T}/out.mbf"], "none.gguf"),
    (["convert", "{DIR}", "{T}/out.mbf"], "{DIR}"),
    (["convert", "{TGGUF}", "{T}/out.mbf"], "{TGGUF}"),
    (["convert", "{ZGGUF}", "{T}/out.mbf"], "{ZGGUF}"),
    (["convert", "{HOSTILE}", "{T}/out.mbf", "--from", "llama2c"], "{HOSTILE}"),
    (["convert", "{TEXT}", "{T}/out.mbf"], "{TEXT}"),
    (["convert", "{TGGUF}", "{T}/out.mbf", "--max-error", "x"], "--max-error"),
    # fleet: the broker's options, a broker nothing answers at, the --jsonl file, numbers
    (["fleet"], "--mqtt"),
    (["fleet", "--mqtt", "http://127.0.0.1"], "mqtt://"),
    (FLEET + ["--mqtt-topic", "edgetwin/#/x"], "--mqtt-topic"),
    (FLEET + ["--mqtt-ca", "{TEXT}"], "mqtts://"),
    (["fleet", "--mqtt", "mqtts://127.0.0.1:{PORT}", "--mqtt-ca", "{TEXT}"], "{TEXT}"),
    (FLEET + ["--mqtt-password-file", "{TEXT}"], "--mqtt-user"),
    (FLEET + ["--for", "0"], "--for"),
    (FLEET + ["--session-expiry", "0"], "--session-expiry"),
    (FLEET + ["--jsonl", "{T}/none/ev.jsonl"], "--jsonl"),
    (FLEET + ["--jsonl", "{DIR}"], "{DIR}"),
    (FLEET + ["--jsonl", "{STORE}"], "{STORE}"),  # not a file of events: never appended to
    (FLEET + ["--jsonl", "{T}/ev.jsonl"], "127.0.0.1:{PORT}"),  # nobody listens: nothing created
    (FLEET + ["--ui-port", "0"], "--ui"),
    (FLEET + ["--ui", "--ui-host", "0.0.0.0"], "--ui-token"),  # off loopback: a token and TLS, or nothing
    # the others: numbers, names, unknown options
    (["demo", "--duration", "-1"], "--duration"),
    (["demo", "--nodes", "zero"], "--nodes"),
    (["demo", "--max-answer", "0"], "--max-answer"),
    (["doctor", "--bogus"], "--bogus"),
    (["bench", "nosuch"], "nosuch"),
] + [(["bench", name, "--no-such-option"], "--no-such-option") for name in bench_commands.BENCHES] + [
    (["selftest", "--board", "no_such_board"], "no_such_board"),
    (["build", "--board", "no_such_board"], "no_such_board"),
    (["deploy", "--board", "rp2040_pico"], "--port"),
    (["deploy", "--board", "rp2040_pico_cp", "--port", "{T}nope", "--tool", "mpremote"], "os.ilistdir"),
    (["vboard"], "--board"),
    (["nosuchcommand"], "nosuchcommand"),
]


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p)] = (stat.S_IMODE(st.st_mode), "" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.mark.parametrize("argv,word", CASES, ids=[" ".join(a[:4]) + "|" + w for a, w in CASES])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], word: str, files: dict[str, str],
                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(**files) for a in argv]
    word = word.format(**files)
    before = _tree(tmp_path)
    build_before = sorted(os.listdir(ROOT / "build")) if (ROOT / "build").is_dir() else []
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("edgetwin") and ": error: " in lines[0], lines[0]
    assert word in lines[0], "%r does not name %r" % (lines[0], word)
    assert _tree(tmp_path) == before  # nothing created, removed, truncated or changed (modes included)
    if (ROOT / "build").is_dir():
        assert sorted(os.listdir(ROOT / "build")) == build_before


def test_store_and_wal_are_created_0640_in_existing_directories_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with pytest.raises(ValueError, match="does not exist"):
            LogStore(tmp_path / "a" / "b" / "g.db")
        assert not (tmp_path / "a").exists()
        s = LogStore(tmp_path / "g.db")
        s.add_log("n", 1, 1, 0, 0, 1, "line")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        s.close()
    finally:
        os.umask(old)
    assert modes == {"g.db": 0o640, "g.db-wal": 0o640, "g.db-shm": 0o640}, modes


def test_a_store_that_fails_to_open_leaves_what_it_found(tmp_path: Path) -> None:
    bad = tmp_path / "x.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x07" * 200)  # an SQLite header over garbage
    os.chmod(bad, 0o604)
    with pytest.raises(ValueError, match="x.db"):
        LogStore(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.db"]
    assert bad.read_bytes() == b"SQLite format 3\x00" + b"\x07" * 200 and stat.S_IMODE(bad.stat().st_mode) == 0o604


def test_a_reader_leaves_a_closed_store_as_it_found_it(tmp_path: Path) -> None:
    # `ask` opens the store read-only: on a store no gateway has open it creates no -wal/-shm beside it
    p = tmp_path / "g.db"
    s = LogStore(p)
    s.add_log("n", 1, 1, 0, 0, 1, "P-101 bearing hot")
    s.close()
    before = _tree(tmp_path)
    r = LogStore(p, readonly=True)
    assert [w.node for w in r.windows("P-101")] == ["n"]
    r.close()
    assert _tree(tmp_path) == before
    w = LogStore(p)  # with a gateway writing, a reader sees its committed lines
    w.add_log("n", 1, 2, 0, 0, 1, "P-102 bearing hot")
    r = LogStore(p, readonly=True)
    assert "P-102" in r.windows("P-102")[0].text
    r.close()
    w.close()
