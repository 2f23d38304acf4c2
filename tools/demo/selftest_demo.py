"""The interim `make demo`: a virtual board, a real mpremote deploy, and the core's self-test on it.

Starts a virtual board of the chosen profile (MicroPython unix port with the profile's heap on a pty),
builds the core for it (x64 native code, since armv6m/xtensawin cannot run here), deploys it with
mpremote, runs firmware.selftest on the board through mpremote and reports what it did and measured.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tools.board import build, deploy, vboard


def run(board: str | dict, root: Path | None = None) -> dict:
    """Do the whole demo for a profile (name, path or dict); return a report dict (raises
    DeployError/VBoardError/BuildError on failure)."""
    t0 = time.monotonic()
    prof = build.board_profile(board)
    board = prof["name"]
    steps: list[str] = []
    out = build.build(prof, arch="x64")
    steps.append(f"built the core for a virtual {board} (mpy-cross -march=x64) into {out}")
    with tempfile.TemporaryDirectory(prefix=f"edgetwin-{board}-") as tmp:
        with vboard.VirtualBoard(prof, root=root or Path(tmp) / "fs") as vb:
            steps.append(f"started a virtual {board}: MicroPython unix port, heap {vb.heap_bytes} B, REPL on {vb.repl_port}, UART on {vb.uart_port}")
            dep = deploy.deploy(out, vb.repl_port, tool="mpremote")
            steps.append(f"deployed {len(dep['files'])} files ({dep['total_bytes']} bytes) with mpremote in {dep['seconds']:.1f} s")
            text = deploy.run_on_board(vb.repl_port, "import firmware.selftest as t; t.run()", timeout=120)
    line = next((ln for ln in text.splitlines() if ln.startswith("SELFTEST ")), None)
    if line is None:
        raise deploy.DeployError("the board printed no SELFTEST line:\n" + text[-2000:])
    result = json.loads(line[len("SELFTEST "):])
    steps.append("ran firmware.selftest on the board through mpremote")
    return {"board": board, "steps": steps, "deploy": {k: dep[k] for k in ("tool", "total_bytes", "board_mem_alloc", "board_mem_free", "seconds")},
            "selftest": result, "ok": bool(result.get("ok")), "seconds": round(time.monotonic() - t0, 1)}


def show(report: dict, console: Console) -> None:
    for s in report["steps"]:
        console.print(f"[green]✓[/] {s}")
    st = report["selftest"]
    t = Table(title=f"self-test on the virtual {report['board']} ({st['interpreter']} {st['version']})")
    for col in ("check", "result", "measured"):
        t.add_column(col)
    kv = st["ringkv"]
    t.add_row("sink+ring KV cache", "pass" if kv["ok"] else "FAIL",
              f"{kv['tokens_committed']} tokens committed, {kv['drafts_rejected']} drafts rejected, max position {kv['max_position']} "
              f"(limit {kv['position_limit']}), heap {kv['heap_bytes']} B, growth after run {kv['heap_growth_after_run']} B"
              + (", heap locked" if kv["heap_locked"] else ""))
    t.add_row("KV snapshot", "pass" if kv["snapshot_ok"] else "FAIL", f"{kv['snapshot_bytes']} bytes, restored into a fresh cache")
    lk = st["lruk"]
    t.add_row("LRU-K cache", "pass" if lk["ok"] else "FAIL",
              f"scan trace: LRU-2 {lk['hits_lru2']} hits vs LRU {lk['hits_lru']} of {lk['accesses']}, heap {lk['heap_bytes']} B"
              + (", heap locked" if lk["heap_locked"] else ""))
    vs = st["seqlock"]
    t.add_row("versioned store", "pass" if vs["ok"] else "FAIL", f"CAS increments {vs['cas_increments']} from {vs['threads']} threads")
    console.print(t)
    console.print(f"heap in use after the self-test: {st['heap_in_use']} B, free: {st.get('heap_free', '?')} B; "
                  f"deploy took {report['deploy']['seconds']:.1f} s; whole demo {report['seconds']} s")
    console.print("[bold green]all checks passed[/]" if report["ok"] else "[bold red]self-test FAILED[/]")


def main(board: str | dict = "rp2040_pico", as_json: bool = False) -> int:
    console = Console()
    name = board["name"] if isinstance(board, dict) else board
    if as_json:
        report = run(board)
        print(json.dumps(report))
    else:
        with console.status(f"building, starting a virtual {name}, deploying with mpremote, running the self-test..."):
            report = run(board)
        show(report, console)
    return 0 if report["ok"] else 1
