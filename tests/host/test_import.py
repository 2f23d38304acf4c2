"""`edgetwin import LOGFILE --db DB --node NAME`: a gen_logs plant log lands in the store as the gateway
stores LOG lines (text, level, wall time, the FTS index), `ask`'s retrieval finds its events, a second
import stores nothing twice, and every bad input is one line, exit 2, with the store left as it was."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path

import pytest

from host import cli, cmd_import, qa
from host.store import LogStore
from shared import plant
from tools.train import gen_logs

PROF = json.loads((Path(__file__).resolve().parents[2] / "boards" / "rp2040_pico.json").read_text())
INJECT = [("P-101", "bearing_wear", 4, None, 300)]


def _log(path: Path, seed: int = 2003, ticks: int = 3600) -> list[tuple[str, int, int]]:
    """Write a gen_logs log of the seed (a fault that ends in a trip); returns (line, level, unix ms) of
    every line as the plant gave it."""
    p = plant.Plant(seed, 4, sample_every=10)
    buf = io.BytesIO()
    gen_logs.generate(p, ticks, buf, list(INJECT))
    path.write_bytes(buf.getvalue())
    q = plant.Plant(seed, 4, sample_every=10)  # the same run again, for each line's level and time
    out = []
    b = bytearray(plant.LINE_MAX)
    for t in range(ticks):
        if t == 300:
            q.inject("P-101", "bearing_wear", 4)
        for i in range(q.step()):
            k = q.line_into(i, b)
            out.append((bytes(b[:k]).decode(), q.level, q.epoch_s() * 1000))
    return out


def _import(*args: str, capsys=None) -> tuple[int, str, str]:
    code = cli.main(["import", *args])
    o, e = capsys.readouterr() if capsys is not None else ("", "")
    return code, o, e


def test_import_stores_the_gateways_rows_and_ask_finds_the_events(tmp_path: Path, capsys) -> None:
    log = tmp_path / "plant.log"
    want = _log(log)
    db = tmp_path / "s.db"
    code, out, _ = _import(str(log), "--db", str(db), "--node", "plant-2003", capsys=capsys)
    assert code == 0, out
    assert "%d lines, %d stored, 0 already there" % (len(want), len(want)) in out
    assert "2026-11-30T06:00:00Z .. 2026-11-30T06:59:50Z" in out
    st = LogStore(db, readonly=True)
    rows = st.logs("plant-2003")
    assert [(r["text"], r["level"], r["wall_ms"]) for r in rows] == want
    assert [r["seq"] for r in rows] == list(range(1, len(want) + 1)) and len({r["epoch"] for r in rows}) == 1
    assert all(r["boot"] is None and r["lseq"] is None and r["flags"] == 0 for r in rows)
    assert {lv for _, lv, _ in want} == {1, 2, 3}  # samples, alarms and a trip, each with its level
    assert [n["name"] for n in st.nodes()] == ["plant-2003"]
    st.close()
    # ask's own retrieval (host/qa.retrieve: the FTS5 windows PRISM then ranks) finds the trip and its alarm
    r = qa.retrieve(db, "Why did P-101 trip?", limit=10, lines=6)
    assert r.matched and r.windows
    top = "\n".join(w.text for w in r.windows[:3])
    assert "STATE P-101 RUNNING->TRIPPED interlock=HIHI_VIB" in top, top
    r = qa.retrieve(db, "vibration alarm on P-101", limit=10, lines=6)
    assert any("ALARM HI P-101 vibration" in w.text for w in r.windows[:3]), [w.text for w in r.windows[:3]]


def test_a_second_import_and_a_grown_file_store_each_line_once(tmp_path: Path, capsys) -> None:
    log = tmp_path / "plant.log"
    want = _log(log, ticks=900)
    text = log.read_bytes()
    cut = text.index(b"\n", len(text) // 2) + 1
    log.write_bytes(text[:cut])  # the first half, then the whole file (the log grew), then again
    db = tmp_path / "s.db"
    half = text[:cut].count(b"\n")
    assert _import(str(log), "--db", str(db), "--node", "n", "--quiet", capsys=capsys)[0] == 0
    log.write_bytes(text)
    code, out, _ = _import(str(log), "--db", str(db), "--node", "n", capsys=capsys)
    assert code == 0 and "%d stored, %d already there" % (len(want) - half, half) in out, out
    code, out, _ = _import(str(log), "--db", str(db), "--node", "n", capsys=capsys)
    assert code == 0 and "0 stored, %d already there" % len(want) in out, out
    st = LogStore(db, readonly=True)
    assert [r["text"] for r in st.logs("n")] == [w[0] for w in want]
    st.close()


def test_progress_lines_on_a_long_file(tmp_path: Path, capsys, monkeypatch) -> None:
    log = tmp_path / "plant.log"
    want = _log(log, ticks=1200)
    monkeypatch.setattr(cmd_import, "PROGRESS_LINES", 100)
    code, out, err = _import(str(log), "--db", str(tmp_path / "s.db"), "--node", "n", capsys=capsys)
    assert code == 0
    prog = [ln for ln in err.splitlines() if ln.startswith("edgetwin import: ")]
    assert len(prog) >= len(want) // 100 and "100 lines read, 100 stored" in prog[0], err
    assert "%d lines" % len(want) in out


def test_the_same_lines_a_gateway_stores(tmp_path: Path) -> None:
    # a CPython node (logs only) over a pty to a gateway session: the plant lines it stored, written to a
    # file and imported under the same name, are the same rows (text, level, order) in the same FTS index
    import gwkit
    from firmware import node

    gw = LogStore(tmp_path / "g.db")
    link = gwkit.PtyLink(gw)
    sess = link.sess
    nd = node.Node(link.uart, PROF, {"tick_ms": 5, "sample_every": 5, "report_ms": 500,
                                                       "faults": ["P-101:sensor_dropout:5@2"]}, now=node.ticks_ms())
    t0 = time.monotonic()
    while nd.logs_acked < 120 and time.monotonic() - t0 < 10:
        nd.step(node.ticks_ms())
        sess.poll()
    got = [r for r in gw.logs("n") if r["level"]]  # the node's NODE reports (level 0) are not plant lines
    gw.close()
    link.close()
    assert len(got) >= 100 and any(r["level"] == 2 for r in got)
    log = tmp_path / "n.log"
    log.write_text("".join(r["text"] + "\n" for r in got))
    db = tmp_path / "i.db"
    assert cli.main(["import", str(log), "--db", str(db), "--node", "n", "--quiet"]) == 0
    st = LogStore(db, readonly=True)
    mine = st.logs("n")
    assert [(r["text"], r["level"]) for r in mine] == [(r["text"], r["level"]) for r in got]
    for q in ("bearing_temp BAD", "P-101"):
        a = [w.text for w in LogStore(tmp_path / "g.db", readonly=True).windows(q, limit=5, lines=4)]
        b = [w.text for w in st.windows(q, limit=5, lines=4)]
        assert a and a == b, (q, a, b)
    st.close()


def _bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    good = tmp_path / "good.log"
    _log(good, ticks=120)
    lines = good.read_bytes().splitlines(keepends=True)
    trunc = tmp_path / "trunc.log"
    trunc.write_bytes(b"".join(lines[:20]) + lines[20][:30])
    other = tmp_path / "other.log"
    junk_line = b"Dec  1 21:29:10 host kernel: usb 1-1: new device\n"
    other.write_bytes(b"".join(lines[:40]) + junk_line + b"".join(lines[40:]))
    binf = tmp_path / "blob.bin"
    binf.write_bytes(bytes(range(256)) * 8)
    latin = tmp_path / "latin.log"
    latin.write_bytes(b"".join(lines[:5]) + "2026-11-30T06:00:10Z P-101 RUNNING T=1.0\xb0C\n".encode("latin-1"))
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    baddate = tmp_path / "date.log"
    baddate.write_bytes(b"2026-02-30T06:00:00Z LOST events=3\n")
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    junk_db = tmp_path / "junk.db"
    junk_db.write_bytes(b"not sqlite at all" * 100)
    db = str(tmp_path / "s.db")
    g = str(good)
    return [([str(tmp_path / "nope.log"), "--db", db, "--node", "n"], "nope.log: no such file"),
            ([str(tmp_path), "--db", db, "--node", "n"], "is a directory"),
            ([str(binf), "--db", db, "--node", "n"], "blob.bin:1: binary data"),
            ([str(latin), "--db", db, "--node", "n"], "latin.log:6: not ASCII"),
            ([str(trunc), "--db", db, "--node", "n"], "trunc.log:21: the last line has no newline"),
            ([str(other), "--db", db, "--node", "n"], "other.log:41: not a node log line"),
            ([str(empty), "--db", db, "--node", "n"], "empty.log is empty"),
            ([str(baddate), "--db", db, "--node", "n"], "date.log:1: the timestamp is not a valid date"),
            ([g, "--db", db, "--node", "two words"], "--node 'two words'"),
            ([g, "--db", db, "--node", ""], "--node ''"),
            ([g, "--db", str(a_file / "s.db"), "--node", "n"], "does not exist"),
            ([g, "--db", str(tmp_path), "--node", "n"], "is a directory"),
            ([g, "--db", "/proc/edgetwin-import-test.db", "--node", "n"], "cannot create log store"),  # unwritable
            ([g, "--db", str(junk_db), "--node", "n"], "not a usable SQLite database")]


def test_bad_input_one_line_exit_2_and_the_store_as_it_was(tmp_path: Path, capsys) -> None:
    cases = _bad_cases(tmp_path)
    kept = tmp_path / "kept.db"  # a store with lines already: every failed import leaves it as it was
    assert _import(str(tmp_path / "good.log"), "--db", str(kept), "--node", "n", "--quiet", capsys=capsys)[0] == 0
    before = LogStore(kept, readonly=True).logs()
    junk = (tmp_path / "junk.db").read_bytes()
    for args, msg in cases:
        for db in ("s.db", "kept.db"):
            a = [str(tmp_path / db) if x == str(tmp_path / "s.db") else x for x in args]
            code, out, err = _import(*a, capsys=capsys)
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert code == 2 and len(lines) == 1 and msg in lines[0] and "Traceback" not in err, (a, err)
            assert lines[0].startswith("edgetwin import: error: "), lines
            assert out == ""
        assert not (tmp_path / "s.db").exists(), args  # a failed import into a new store creates none
        assert not list(tmp_path.glob("s.db-*")), args
        assert LogStore(kept, readonly=True).logs() == before, args
        assert (tmp_path / "junk.db").read_bytes() == junk
    with pytest.raises(sqlite3.Error):  # sanity: the junk file really is no database
        sqlite3.connect(str(tmp_path / "junk.db")).execute("SELECT 1 FROM sqlite_master").fetchall()


def _hall_log(path: Path, h: str) -> list[str]:
    import hallplant

    lines = hallplant.lines(h)
    path.write_text("".join(ln + "\n" for ln in lines))
    return lines


def test_a_plant_that_is_not_the_simulator(tmp_path: Path) -> None:
    # import_log with a description (as --plant gives it): AHU-1 and SILO-2, stored with the description's hash
    import hallplant

    desc = hallplant.desc()
    log = tmp_path / "hall.log"
    want = _hall_log(log, desc.hash)
    db = tmp_path / "h.db"
    s = cmd_import.import_log(log, db, "hall", desc=desc)
    assert (s["lines"], s["stored"], s["plant"]) == (len(want), len(want), "hall-3")
    st = LogStore(db, readonly=True)
    rows = st.logs("hall")
    assert [r["text"] for r in rows] == want
    levels = {r["text"].split(" ", 2)[1]: r["level"] for r in rows}
    assert (levels["ALARM"], levels["ACK"], levels["STATE"], levels["PLANT"], levels["AHU-1"]) == (2, 2, 3, 1, 1)
    assert set(st.line_plants(range(1, len(want) + 1)).values()) == {desc.hash}
    assert st.node_plant("hall") == desc.hash and list(st.plants()) == [desc.hash]
    assert st.plant(desc.hash).machine("SILO-2").signal("level").unit == "m"
    st.close()
    assert qa.retrieve(db, "why did AHU-1 trip?", limit=5, lines=6).windows


def test_a_line_the_description_lacks_is_refused(tmp_path: Path) -> None:
    import hallplant

    desc = hallplant.desc()
    for i, (bad, msg) in enumerate([
            ("2026-11-30T06:10:00Z AHU-2 RUNNING SAT=18.0C", "no machine AHU-2 in plant hall-3"),
            ("2026-11-30T06:10:00Z AHU-1 RUNNING SAT=18.0C OAT=3.0C", "machine AHU-1 has no key OAT"),
            ("2026-11-30T06:10:00Z AHU-1 RUNNING SAT=64.4F", "machine AHU-1: key SAT is in C, not F"),
            ("2026-11-30T06:10:00Z ALARM HI SILO-2 weight 3.0t prio=2 RAISED", "machine SILO-2 has no tag weight"),
            ("2026-11-30T06:10:00Z STATE SILO-2 RUNNING->TRIPPED interlock=HIHI_SAT",
             "machine SILO-2 has no interlock HIHI_SAT"),
            ("2026-11-30T06:10:00Z P-101 RUNNING T=1.0C", "no machine P-101")]):
        log = tmp_path / ("bad%d.log" % i)
        lines = hallplant.lines(desc.hash, minutes=1)
        log.write_text("".join(ln + "\n" for ln in lines[:5] + [bad] + lines[5:]))
        with pytest.raises(cmd_import.LogFileError, match="bad%d.log:6: %s" % (i, msg)):
            cmd_import.import_log(log, tmp_path / "r.db", "hall", desc=desc)
        assert not (tmp_path / "r.db").exists()


def test_the_simulators_lines_are_not_another_plants(tmp_path: Path, capsys) -> None:
    # the built-in simulator's description refuses another plant's lines, naming --plant
    log = tmp_path / "hall.log"
    _hall_log(log, "0123456789abcdef")
    code, out, err = _import(str(log), "--db", str(tmp_path / "s.db"), "--node", "n", capsys=capsys)
    assert code == 2 and "hall.log:1: PLANT hash=0123456789abcdef is not the description's" in err
    assert "--plant FILE" in err and not (tmp_path / "s.db").exists()


def test_plant_option(tmp_path: Path, capsys) -> None:
    # the CLI's --plant: a description file, checked and hashed (host/plantfile.py), its lines imported
    pytest.importorskip("host.plantfile")
    import hallplant
    from host import plantdesc

    plant_file = hallplant.write(tmp_path / "hall.json")
    desc = plantdesc.load(plant_file)
    assert desc.ids == ("AHU-1", "SILO-2")
    log = tmp_path / "hall.log"
    want = _hall_log(log, desc.hash)
    db = tmp_path / "h.db"
    code, out, err = _import(str(log), "--db", str(db), "--node", "hall", "--plant", str(plant_file), capsys=capsys)
    assert code == 0 and "as node hall (plant hall-3): %d lines, %d stored" % (len(want), len(want)) in out, err
    st = LogStore(db, readonly=True)
    assert st.node_plant("hall") == desc.hash and [r["text"] for r in st.logs()] == want
    assert st.plant(desc.hash) == desc  # the description kept, read back as it was loaded
    st.close()
    # a bad --plant file is one line, exit 2, and nothing is imported
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(dict(hallplant.HALL, machines=[dict(hallplant.HALL["machines"][0], id="1AHU")])))
    for arg, msg in ((str(broken), "broken.json"), (str(tmp_path / "none.json"), "none.json: no such file"),
                     (str(tmp_path), "is a directory")):
        code, out, err = _import(str(log), "--db", str(tmp_path / "x.db"), "--node", "n", "--plant", arg,
                                 capsys=capsys)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and msg in lines[0] and "Traceback" not in err, err
        assert not (tmp_path / "x.db").exists()
