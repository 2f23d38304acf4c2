"""The product path carries text: a virtual board (the real MicroPython unix port) runs firmware/node.py with the
shipped draft and its tokenizer; `python -m host.cli gateway --model smollm2` (a subprocess, not the demo's
in-process wiring) verifies its drafts and stores the annotations; then `python -m host.cli ask` (a
subprocess) answers from that store. Checked: the stored annotations are decoded text (words, not lists of
token ids), ask's output shows the windows with their log text and the annotations in them, names the node
by its unique id from the handshake (not the pty path it was stored under), and the gateway said what happened (connected,
status lines, stopped)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gwkit
from host import node_config, qa
from host.store import LogStore
from shared import profile
from tools.demo import demo
from tools.board import vboard

ROOT = Path(__file__).resolve().parents[2]
BOARD = "rp2040_pico"

pytestmark = pytest.mark.slow


def test_gateway_smollm2_stores_text_and_ask_quotes_it(tmp_path: Path) -> None:
    prof = profile.load(str(ROOT / "boards" / (BOARD + ".json")))
    heap = vboard.node_heap(prof)[0]  # what `edgetwin vboard` gives a drafting node of the profile
    # what `deploy --node` writes for the board (the plan's layout, tokenizer, stop ids), the demo's notes, and
    # the built-in simulator at ten plant seconds a second with the demo's faults: alarms within seconds
    cfg = dict(node_config.derive(prof, demo.DRAFT)[0], **demo.NODE_CFG, seed=1, tick_ms=100, sample_every=10,
               faults=demo.DEMO_FAULTS)
    link = tmp_path / "node0"
    db = tmp_path / "g.db"
    node = gwkit.VNode(BOARD, tmp_path / "fs", link, cfg, heap=heap, model=demo.DRAFT.read_bytes())
    gw = None
    try:
        gw = gwkit.GatewayProc([str(link)], db, tmp_path / "st.json",
                               extra=["--model", "smollm2", "--status-every", "2"])

        def notes(st: dict) -> bool:
            return st["sessions"][0].get("spec", {}).get("annotations", 0) >= 2

        gw.wait_status(notes, timeout=240, what="two annotations stored")
        assert gw.stop() == 0
        out = gw.proc.stdout.read().decode()
    finally:
        if gw is not None:
            gw.stop()
        node.close()
    # the gateway said what happened
    # no name given: the node is named by its unique id, and the port it came in on is said once
    assert re.search(r"node node-([0-9a-f]{16}) connected \(board %s, uid \1\) on %s" % (BOARD, re.escape(str(link))),
                     out), out
    assert re.search(r"status: 1/1 nodes up, \d+ lines stored, \d+ annotations, acceptance (0|1)\.\d\d, "
                     r"[\d.]+ tokens/s", out), out
    assert "stopped; status: " in out, out
    # the annotations are text: words, not "216 33 30 33 6799"
    store = LogStore(db, readonly=True)
    anns = store.annotations()
    logs = store.count_logs()
    store.close()
    assert len(anns) >= 2 and logs > 20
    for a in anns:
        assert not re.fullmatch(r"[\d\s]+", a["text"]), a
    # decoded SmolLM2 text: letters, units, punctuation, where ids would be numbers and spaces only; and the
    # domain target's (the gateway's default) words about this plant, naming its machines (the stock target
    # wrote "1.1.1.1.1.1.1.1" on the demo's event episodes)
    assert sum(len(re.findall(r"[^\d\s]", a["text"])) for a in anns) >= 3, anns
    assert any(re.search(r"\b(?:P|M|C|CV)-\d{3}\b", a["text"]) for a in anns), anns
    assert all(len(a["text"].split()) < a["tokens"] or not a["text"].split()[0].isdigit() for a in anns), anns
    # ask, on the real path: every window it is given, listed with its text (the annotations among it)
    question = "what happened to P-101?"
    found = qa.retrieve(db, question, limit=20, lines=40)
    assert found.matched
    k = len(found.windows)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "host.cli", "ask", question, "--db", str(db), "--candidates", "20",
                        "--lines", "40", "--k", str(k), "--max-tokens", "16"], cwd=str(ROOT), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = r.stdout.split("\nAnswer: ")[0]
    assert "Answer: " in r.stdout and re.search(r"reranking %d windows" % k, r.stderr), r.stderr
    assert str(link) not in r.stdout and "/dev/pts" not in r.stdout  # named by its unique id
    assert re.search(r"\[1\] node-[0-9a-f]{16} 20\d\d-", shown), shown[:500]  # named by its unique id
    assert re.search(r"^      NOTE( \(unverified\))?: ", shown, re.M), shown[-2000:]
    firsts = [next(ln.strip() for ln in a["text"].splitlines() if ln.strip()) for a in anns if a["text"].strip()]
    assert any(f in shown for f in firsts), (firsts, shown[-2000:])  # an annotation's text, quoted
    assert re.search(r"^      20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ P-101 ", shown, re.M)  # the log text itself
    print("TEXT-PATH annotations %d, e.g. %r; ask: %s" % (len(anns), anns[0]["text"][:80],
                                                         r.stdout.split("\nAnswer: ")[1][:200].strip()))
