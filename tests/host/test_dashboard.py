"""The dashboard (host/ui) in a real browser: Debian's headless Chromium, driven by selenium through chromedriver.

A drafting node (firmware/node.py under CPython with the tiny draft, its plant faulted so it raises alarms)
talks over a pty to the real `edgetwin gateway --model tiny:3 --ui --ui-port 0` process. The page must show
the node's link and health, a machine's plot that gains points, annotations that arrive without a reload,
and a question answered by the real ask path (a tiny reranker, the domain target) citing windows shown with
their log text. Screenshots go to build/screenshots/. Chromium missing is a failure naming `make ui-setup`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import gwkit

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"
CHROMEDRIVER = "/usr/bin/chromedriver"
PROF = json.loads((ROOT / "boards" / "rp2040_pico.json").read_text())
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
         "--window-size=1280,1000")


def browser(tmp_path: Path):
    """A headless Chromium under selenium; fails (never skips) when the Makefile's ui-setup has not run."""
    if not (os.path.exists(CHROMEDRIVER) and (shutil.which("chromium") or os.path.exists("/usr/bin/chromium"))):
        pytest.fail("Debian's chromium and chromium-driver are not installed: run `make ui-setup` (make test does)")
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium's manager, should anything call it: no network
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument("--user-data-dir=%s" % (tmp_path / "chromium"))
    # the driver is Debian's, given by path: selenium's manager never looks for (or downloads) one
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError("the gateway exited (%s) while waiting for %s" % (proc.returncode, what))
        time.sleep(0.25)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


class Node(threading.Thread):
    """firmware/node.py's Node with the tiny draft on one end of a pty, stepping until stop()."""

    def __init__(self, tmp_path: Path, link: Path) -> None:
        from firmware import node, uart

        super().__init__(daemon=True)
        mbf = tmp_path / "tiny.mbf"
        mbf.write_bytes(gwkit.tiny_mbf())
        # sample_every 5: 20 lines a second for the link, which carries them all even on a busy machine (at 1, 100 a
        # second, the node's queue overflowed there and dropped the alarm lines this test looks for on the plots)
        cfg = {"tick_ms": 40, "sample_every": 5, "report_ms": 500, "model": str(mbf), "prompt_max": 12,
               "max_len": 24, "episodes": 3, "summary_s": 2,
               "faults": ["CV-401:sensor_dropout:4:V@3", "P-101:bearing_wear:5@1"]}
        self.m, self.s = os.openpty()
        gwkit.set_raw(self.s)
        self.relay = gwkit.Interposer(self.m, link)
        d, vocab = node.make_drafter(PROF, cfg)
        self.node_mod = node
        self.nd = node.Node(uart.PtyUART(os.ttyname(self.s)), PROF, cfg, d, vocab, now=node.ticks_ms())
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.nd.step(self.node_mod.ticks_ms())
            time.sleep(0.002)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.relay.close()
        for fd in (self.m, self.s):
            try:
                os.close(fd)
            except OSError:
                pass


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(local address as /proc/net writes it, port) of every TCP socket process `pid` listens on."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            f = row.split()
            addr, port = f[1].split(":")
            if f[3] == "0A" and f[9] in inodes:  # LISTEN, this process's
                out.append((addr, int(port, 16)))
    return out


def other_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (none on a machine without a network)."""
    try:
        text = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout
    except OSError:
        text = ""
    return [a for a in text.split() if "." in a and not a.startswith("127.")]


@pytest.mark.slow
def test_dashboard_follows_a_node_live_and_answers_a_question(tmp_path: Path) -> None:
    from test_prism_bert import make_tiny

    SHOTS.mkdir(parents=True, exist_ok=True)
    reranker = make_tiny(tmp_path / "reranker", max_position_embeddings=64)
    link = tmp_path / "link"
    node = Node(tmp_path, link)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    gw = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--insecure", "--port", "pump-room=%s" % link, "--db",
                           str(tmp_path / "plant.db"), "--model", "tiny:%d" % gwkit.TINY_SEED, "--ui",
                           "--ui-port", "0", "--ui-target", "domain", "--ui-reranker", str(reranker),
                           "--status-every", "60"], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    drv = None
    try:
        url = None
        t0 = time.monotonic()
        while url is None and time.monotonic() - t0 < 60:
            line = gw.stdout.readline()
            if not line:
                break
            m = re.search(r"dashboard on (http://127\.0\.0\.1:\d+/)$", line.strip())
            url = m.group(1) if m else None
        assert url is not None, gw.stderr.read() if gw.poll() is not None else "no dashboard address printed"
        threading.Thread(target=gw.stdout.read, daemon=True).start()  # keep draining it
        port = int(url.rsplit(":", 1)[1].strip("/"))
        # it listens on loopback only: the gateway's one listening socket is 127.0.0.1's, and the machine's
        # other addresses refuse
        assert listening_sockets(gw.pid) == [("0100007F", port)], listening_sockets(gw.pid)
        for addr in other_addresses():
            with pytest.raises(OSError):
                import socket

                socket.create_connection((addr, port), timeout=2).close()
        node.start()

        drv = browser(tmp_path)
        drv.set_page_load_timeout(60)
        drv.get(url)
        from selenium.webdriver.common.by import By

        def js(expr: str):
            # one read in the page: the event stream replaces the plant table and the plots while we look, so
            # an element found by one call may be gone at the next (a stale reference)
            return drv.execute_script("return (function () { %s })()" % expr)

        def row() -> str:
            return js("var r = document.querySelector(\"#plant tr[data-node='pump-room']\"); "
                      "return r ? r.innerText : '';")

        def cell(text: str) -> bool:
            return text in row()

        wait_for(lambda: cell("up"), 60, "the node's link shown up", gw)
        wait_for(lambda: drv.find_element(By.ID, "live").text == "live", 20, "the event stream")

        def points(machine: str) -> int:
            return int(js("var e = document.querySelector(\"svg.plot[data-machine='%s']\"); "
                          "return e ? e.getAttribute('data-points') : 0;" % machine))

        first = wait_for(lambda: points("P-101"), 60, "P-101's plot", gw)
        wait_for(lambda: points("P-101") >= first + 3, 60, "P-101's plot gaining points without a reload", gw)
        wait_for(lambda: re.search(r"\d+ B", row()), 30, "the node's heap from its NODE report", gw)
        notes = wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#notes li.note")), 120,
                         "an annotation", gw)
        wait_for(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#notes li.note")) > notes, 120,
                 "another annotation arriving without a reload", gw)
        kinds = {e.get_attribute("class") for e in drv.find_elements(By.CSS_SELECTOR, "#notes li.note span:not(.meta)")}
        assert kinds & {"draft", "fix"}, kinds  # the target's verdicts are told apart
        wait_for(lambda: js("return document.querySelectorAll('svg.plot line.ev-alarm').length;"), 60,
                 "an alarm marked on a plot's time axis", gw)
        drv.save_screenshot(str(SHOTS / "dashboard-live.png"))

        drv.find_element(By.ID, "question").send_keys("what alarms did CV-401 raise?")
        drv.find_element(By.CSS_SELECTOR, "#ask-form button").click()
        wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#windows li.window pre"), 120,
                 "the windows chosen for the question", gw)
        wait_for(lambda: drv.find_element(By.ID, "answer").get_attribute("class") == "done", 180,
                 "the streamed answer", gw)
        progress = drv.find_element(By.ID, "ask-progress").text
        answer = drv.find_element(By.ID, "answer").text
        # the windows the answer cites are marked (the domain target cited [1] in every run here; whether it
        # cites depends on the windows, which depend on how far the node got: a run that cites none says so)
        shown = {e.get_attribute("id")[len("window-"):] for e in drv.find_elements(By.CSS_SELECTOR, "#windows li")}
        cites = set(re.findall(r"\[(\d+)\]", answer)) & shown
        cited = {e.get_attribute("id")[len("window-"):] for e in
                 drv.find_elements(By.CSS_SELECTOR, "#windows li.window.cited")}
        assert answer.strip() and cited == cites, (answer, cites, cited)
        assert progress == ("answered; the cited windows are marked" if cites else
                            "answered; the answer cites no window (it was given those below)"), (progress, answer)
        texts = [e.text for e in drv.find_elements(By.CSS_SELECTOR, "#windows li.window pre")]
        assert texts and all(re.search(r"2026-11-30T\d\d:\d\d:\d\dZ ", t) for t in texts), texts  # log text
        drv.execute_script("document.getElementById('notes').scrollIntoView()")
        drv.save_screenshot(str(SHOTS / "dashboard-answer.png"))
        drv.set_window_size(1280, min(3000, int(js("return document.body.scrollHeight;")) + 140))
        drv.execute_script("window.scrollTo(0, 0)")
        drv.save_screenshot(str(SHOTS / "dashboard-full.png"))  # the whole page (docs/dashboard.png is one)
    finally:
        if drv is not None:
            drv.quit()
        node.stop()
        if gw.poll() is None:
            gw.terminate()
        try:
            gw.wait(20)
        except subprocess.TimeoutExpired:
            gw.kill()
            gw.wait(5)
    assert gw.returncode == 0, gw.stderr.read()


def test_without_chromium_the_browser_tests_fail_naming_the_setup_step(tmp_path: Path, monkeypatch) -> None:
    """A machine without Debian's chromium or its driver fails these tests (never skips them), saying what to run."""
    monkeypatch.setattr(sys.modules[__name__], "CHROMEDRIVER", str(tmp_path / "no-chromedriver"))
    with pytest.raises(pytest.fail.Exception, match="make ui-setup"):
        browser(tmp_path)
