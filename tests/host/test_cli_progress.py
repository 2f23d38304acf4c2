"""Long commands say they are alive: `edgetwin bench NAME` prints a heartbeat line on stderr while it runs."""

from __future__ import annotations

import time

from host import cli


def test_heartbeat_lines_while_running_and_none_after(capsys):
    with cli._heartbeat("bench demo", every=0.05):
        time.sleep(0.3)
    time.sleep(0.15)
    err = capsys.readouterr().err.splitlines()
    assert len(err) >= 3 and all(line.startswith("edgetwin bench demo: still running (") for line in err), err
    time.sleep(0.15)
    assert capsys.readouterr().err == ""  # stopped with the command


def test_heartbeat_quiet_for_help(capsys):
    with cli._heartbeat("bench demo", every=0.02, quiet=True):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_bench_keeps_stdout_to_its_json(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_heartbeat", _fast)
    assert cli.main(["bench", "lruk", "--accesses", "2000", "--repeats", "1"]) == 0
    out = capsys.readouterr()
    import json

    json.loads(out.out)  # stdout is the JSON object alone; the heartbeat went to stderr


_real = cli._heartbeat


def _fast(what, quiet):
    return _real(what, every=0.01, quiet=quiet)
