"""Benchmark a drafting node on the emulated RP2040 (the real rp2 firmware in rp2040js), in board time.

    edgetwin bench board [--board rp2040_pico|rp2040_pico_cp] [--model MBF] [--target smollm2|tiny:SEED|GGUF]
                         [--steps N] [--tokens N] [--image UF2] [--json]

Either firmware: rp2040_pico runs MicroPython (`make firmware`), rp2040_pico_cp CircuitPython 10
(`make firmware-cp`), each with the node's code frozen. What it does, on a fresh emulated flash (a
temporary file):
1. boots the board's image and reads gc.mem_free() (heap_free_boot_bytes) and sys.implementation.name
   (implementation) from the board;
2. deploys the model as a user would (`edgetwin deploy --node --model MBF`: the profile, node.json with the
   memory plan's layout, main.py or boot.py and code.py, the model on the flash filesystem; mpremote on
   MicroPython, ampy on CircuitPython). A model whose memory plan refuses the board's heap is reported as
   `model_fits` false with the plan's `model_error`, as is a MemoryError on the board;
3. on the board, the model alone: a prompt prefilled, then 5 greedy decode steps with the plain-Python
   kernels and `--steps` more with the board's default ones (`fast_backend`: viper on MicroPython, ulab on
   CircuitPython), each step timed with the board's clock (emulated cycles at 125 MHz: time.ticks_us() on
   MicroPython, time.monotonic_ns() on CircuitPython, which has no ticks_us), the ids and a hash of each
   step's integer logits compared with shared/llama.py on CPython for the same model, cache and prompt
   (draft_ids_match_host); `draft_step_fast_vs_plain` is the plain step over the fast one
   (`draft_step_viper_vs_bytecode` too on MicroPython);
4. unless --tokens 0, the node itself (main.py or code.py, a 64 KB spill ring) against `edgetwin gateway
   --model TARGET`, until `--tokens` verified tokens: committed tokens, verified tokens per board second, the
   UART bytes relayed per committed token, and the node's heap (its NODE reports: in use after gc.collect);
   the gateway's --trace replayed through the target alone (tools/bench/trace_replay.py): every verified token must be
   the target's own greedy token after the same prefix (verified_equal_target_greedy). `--long-notes`
   runs the node with 48-token notes from 12-token prompts (the drafting test's episodes: more drafted
   tokens per board second than the default 16 from 48). node.json goes over with mpremote (MicroPython) or
   ampy put (CircuitPython, whose os lacks the ilistdir mpremote's fs commands need), then the board resets
   (machine.reset(); microcontroller.reset() on CircuitPython) into the node.

Every rate is in board time (cycles / 125 MHz), never host time. The emulator does not model the XIP
flash cache or its wait states: a real Pico runs code and reads the model from flash more slowly than this
where the cache misses. The default target is the tiny seeded target when the model is
tools/demo/spec_models' tiny draft (`--model tiny`), else SmolLM2 (`smollm2`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from host.board_profile import venv_exe  # noqa: E402
from host.usage import Parser  # noqa: E402

CPU_HZ = 125_000_000
BASELINE_STEPS = 5  # plain-Python steps (each one costs seconds of board time on the shipped draft)
VIPER_STEPS = 2  # viper steps beside the C kernels' (MicroPython with q4nat.mpy): the previous fast backend
SPILL_BYTES = 65536  # the bench node's spill ring: preallocating the profile's 640 KB takes minutes emulated
LONG_NOTES = {"max_len": 48, "prompt_max": 12}  # --long-notes

# Runs on the board (mpremote run, MicroPython or CircuitPython): the model of /node.json's plan, greedy from
# the prompt, with the plain kernels and then the board's default (fast) ones.
PROBE = r"""
import gc, json, time
from shared import fixedmath, kernels, llama, mbf, ringkv
FAST = kernels.default_name()  # native (q4nat.mpy) or viper on MicroPython, ulab on CircuitPython
if hasattr(time, 'ticks_us'):
    CLOCK = 'time.ticks_us'
    now = time.ticks_us

    def since_us(t):
        return time.ticks_diff(time.ticks_us(), t)
else:  # CircuitPython: no ticks_us; monotonic_ns is the board's clock at ns (ticks_ms only at ms)
    CLOCK = 'time.monotonic_ns'
    now = time.monotonic_ns

    def since_us(t):
        return (time.monotonic_ns() - t) // 1000
ERR = None
try:  # the node's code: in flash when frozen, in the heap from .mpy files (stock firmware)
    import firmware.node, firmware.sampler, firmware.annotator, firmware.spill, shared.drafter, shared.bpe
except MemoryError as e:
    ERR = 'importing the node code: MemoryError: ' + str(e)
gc.collect()
FREE_CODE = gc.mem_free()
PROMPT = %(prompt)r
STEPS = %(steps)d
BASE = %(base)d
VIPER = %(viper)d
prof = json.load(open('/board.json'))
cfg = json.load(open('/node.json'))
try:  # the node's rule: a filesystem copy first, else the firmware's ROMFS (read in place)
    from firmware.node import model_path
    PATH = model_path(prof, cfg)
except ImportError:
    PATH = '/' + prof['model']


def h(lg, n):
    x = 0
    for i in range(n):
        x = (x * 31 + lg[i]) & 0x3FFFFFFF
    return x


def parts(m, r, fast):
    # the step's parts with the fast kernels, each timed alone (mean of 3) on the model as its last step left
    # it: the layer matrices' products, flash reads, attention, norms, the FFN's gate and the classifier. With
    # the C kernels' whole-layer call the parts are q4nat's own functions called directly, less the cost of
    # calling one from bytecode (call), as the layer call runs them; else the kernels' Python entry points.
    kernels.use(fast)
    w = m.layers[0]
    L = len(m.layers)
    nat = kernels.fused()
    fz = m._nat if nat is not None else None
    whole = fz is not None and fz.layer_bufs is not None

    def t(fn):
        t0 = now()
        for _ in range(3):
            fn()
        return since_us(t0) // 3
    call = t(lambda: nat.argmax(m.logits, 1)) if whole else 0

    def mvf(out, mat, act):
        if not whole:
            return lambda: kernels.matvec(out, mat, act)
        info = act.info
        info[0] = 0
        info[1] = mat.rows
        info[3] = mat.wshift
        return lambda: nat.matvec(out, mat.buf, mat.scales, mat.mins, act.q, info)
    mv = {}
    for name, out, act in (('wq', m.q, m.act_d), ('wk', m.kvb, m.act_d), ('wv', m.kvb, m.act_d), ('wo', m.xb, m.act_q),
                           ('w1', m.hb, m.act_d), ('w3', m.hb2, m.act_d), ('w2', m.xb, m.act_h)):
        mat = getattr(w, name)
        mv[name] = [t(mvf(out, mat, act)) - call, mat.rows * mat.cols]
    flash = 0
    for f in m.fetch:
        if f is not None:
            flash += t(lambda: r.load_layer(0, f, False))
    res = {'layers': L, 'keys': m.nkeys, 'matvec': mv, 'flash_layer': flash, 'classifier': t(m._classifier),
           'classifier_macs': m.n_out * m.cfg.dim, 'call': call}
    if whole:
        fz.ainfo[1] = 0
        res['attention_layer'] = (t(lambda: nat.query(m.q, fz.qg, fz.qfs, fz.qinfo)) + t(lambda: nat.scores(
            fz.sbufs, m.kslot, fz.ainfo)) + t(lambda: nat.mix(fz.mbufs, m.kslot, fz.ainfo)) - 3 * call)
        res['norm_quant'] = (t(lambda: nat.rmsnorm(m.xb, m.x, w.attn_norm.g, w.attn_norm.info))
                             + t(lambda: nat.quantize_act(m.xb, m.act_d.q, m.act_d.info)) - 2 * call)
        res['swiglu_quant'] = (t(lambda: nat.silu(m.hb, m.hb, m.cfg.hidden_dim, fixedmath.SIG_TAB))
                               + t(lambda: nat.mul(m.hb, m.hb, m.hb2, m.cfg.hidden_dim))
                               + t(lambda: nat.quantize_act(m.hb, m.act_h.q, m.act_h.info)) - 3 * call)
        fz.sinfo[2] = m.kv.capacity  # the layer call stores K and V: into staging slot 0, not staged now
        res['layer'] = t(lambda: nat.layer(fz.layer_bufs[0])) - call
        return res

    def att():
        m._query()
        m._scores(0)
        m._mix(0)

    def norm():
        kernels.rmsnorm(m.xb, m.x, w.attn_norm)
        kernels.quantize_act(m.act_d, m.xb)

    def gate():
        kernels.swiglu(m.hb, m.hb, m.hb2, m.cfg.hidden_dim)
        kernels.quantize_act(m.act_h, m.hb)
    res['attention_layer'] = t(att)
    res['norm_quant'] = t(norm)
    res['swiglu_quant'] = t(gate)
    return res


def run():
    # one model: the prompt prefilled with FAST, then BASE steps with the plain kernels, VIPER with viper
    # (where FAST is the C kernels), then STEPS with FAST (the same integers every way, so the ids continue
    # one greedy sequence)
    if ERR:
        return {'fits': False, 'error': ERR, 'free_code': FREE_CODE}
    kernels.use(FAST)
    gc.collect()
    r = mbf.open(PATH)
    c = r.config
    kv = prof['kv']
    ring = ringkv.RingKV(c['n_layers'], c['n_kv_heads'] * c['head_dim'], kv['sink'], kv['window'], kv['staged'],
                         'b', c['n_kv_heads'])
    try:
        m = llama.Model(r, ring, stream=False if r.mem is not None else cfg.get('stream', False),
                        out_rows=cfg.get('out_rows', 64))
    except MemoryError as e:
        return {'fits': False, 'error': 'MemoryError: ' + str(e), 'free_code': FREE_CODE}
    gc.collect()
    held = gc.mem_alloc()
    m.prefill(PROMPT)
    out = []
    order = ['plain'] * BASE + (['viper'] * VIPER if FAST == 'native' else []) + [FAST] * STEPS
    us = {}
    for name in order:
        us[name] = []
    fmin = gc.mem_free()
    for name in order:
        kernels.use(name)
        lg = m.logits
        n = m.n_out
        best = 0
        for i in range(n):
            if lg[i] > lg[best]:
                best = i
        tok = m.token_of(best)
        out.append([tok, h(lg, n)])
        t = now()
        m.step(tok)
        ring.commit(1)
        us[name].append(since_us(t))
        f = gc.mem_free()
        if f < fmin:
            fmin = f
    br = parts(m, r, FAST)
    in_place = r.mem is not None
    r.close()
    return {'fits': True, 'ids': out, 'us': us, 'fast': FAST, 'clock': CLOCK, 'free_min': fmin, 'held': held,
            'free_code': FREE_CODE, 'parts': br, 'path': PATH, 'plan': m.mode, 'in_place': in_place}


try:
    res = run()
except MemoryError as e:  # loading, prefill or a step: the model does not fit beside the node's code
    gc.collect()
    res = {'fits': False, 'error': 'MemoryError: ' + str(e), 'free_code': FREE_CODE}
print('BENCH-BOARD ' + json.dumps(res))
"""


# Runs on the board just booted: its heap, and which interpreter it is (the board's word, not the profile's).
BOOT_FACTS = ("import gc, sys; gc.collect(); print(gc.mem_free(), gc.mem_alloc(), sys.implementation.name, "
              "'.'.join(str(x) for x in sys.implementation.version[:3]))")


class BenchError(RuntimeError):
    pass


def host_greedy(model: Path, prof: dict, cfg: dict, prompt: list[int], steps: int) -> list[list[int]]:
    """What PROBE's greedy run prints, computed by shared/llama.py on CPython (same integers)."""
    from shared import kernels, llama, mbf, ringkv

    kernels.use()
    r = mbf.open(str(model))
    c = r.config
    kv = prof["kv"]
    ring = ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], kv["sink"], kv["window"], kv["staged"],
                         "b", c["n_kv_heads"])
    m = llama.Model(r, ring, stream=cfg.get("stream", False), out_rows=cfg.get("out_rows", 64))
    m.prefill(prompt)
    out = []
    for _ in range(steps):
        lg = list(m.logits[:m.n_out])
        best = max(range(len(lg)), key=lambda i: (lg[i], -i))
        x = 0
        for v in lg:
            x = (x * 31 + v) & 0x3FFFFFFF
        tok = m.token_of(best)
        out.append([tok, x])
        m.step(tok)
        ring.commit(1)
    r.close()
    return out


def prompt_ids(model: Path, text: str, limit: int = 24) -> list[int]:
    """The model's own tokens of text (the tokenizer its MBF carries), else the annotator's byte tokens."""
    from host.node_config import tokenizer_class
    from shared import mbf

    r = mbf.open(str(model))
    try:
        vocab = r.config["vocab_size"]
        if not r.tok_length:
            return [1 + b % (vocab - 1) for b in text.encode()][:limit]
        with open(model, "rb") as f:
            tok = tokenizer_class(r.config)(f, offset=r.tok_offset, length=r.tok_length)
            return list(tok.encode(text))[:limit]
    finally:
        r.close()


def _mpremote(port: str, *args: str, timeout: float = 900) -> str:
    proc = subprocess.run([venv_exe("mpremote"), "connect", port, *args], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise BenchError("mpremote %s failed: %s" % (args[0], (proc.stdout + proc.stderr).strip()[-600:]))
    return proc.stdout


def _ampy(port: str, *args: str, timeout: float = 300) -> str:
    """ampy on the board at port (CircuitPython's copy tool here: its put needs no os.ilistdir)."""
    proc = subprocess.run([venv_exe("ampy"), "--port", port, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise BenchError("ampy %s failed: %s" % (args[0], (proc.stdout + proc.stderr).strip()[-600:]))
    return proc.stdout


def _say(msg: str) -> None:
    print("bench board: " + msg, file=sys.stderr, flush=True)


def _board_s(board) -> float:
    return float(board.stats.get("cycles", 0)) / CPU_HZ


def run(board_name: str, model: Path, target: str, steps: int, tokens: int, image: Path | None,
        long_notes: bool = False) -> dict:
    from tools.board import build, emuboard

    prof = build.board_profile(board_name)
    plan_error = _plan_error(prof, model)
    with tempfile.TemporaryDirectory(prefix="edgetwin-bench-board-") as tmp:
        tmpd = Path(tmp)
        board = emuboard.EmuBoard(board_name, image, tmpd / "flash.bin").start()
        # the image as booted (read now: a rebuild during a long run must not change what is reported)
        firmware = {"path": str(board.image), "bytes": board.image.stat().st_size,
                    "sha256": hashlib.sha256(board.image.read_bytes()).hexdigest(),
                    "flash_bin_bytes": board.image.with_suffix(".bin").stat().st_size}
        try:
            out = _mpremote(board.repl_port, "exec", BOOT_FACTS)
            free_boot, alloc_boot, impl, impl_version = out.split()[:4]
            free_boot, alloc_boot = int(free_boot), int(alloc_boot)
            _say("booted %s %s: gc.mem_free %d B" % (impl, impl_version, free_boot))
            if plan_error:  # the deploy would refuse it: nothing to copy or to run
                _say("the model does not fit: " + plan_error)
                figures, cfg, deploy_s, node = {"model_fits": False, "model_error": plan_error}, {}, None, None
            else:
                figures, cfg, deploy_s, node = _deploy_and_run(board, board_name, model, prof, target, steps, tokens,
                                                              long_notes, tmpd)
        finally:
            board.stop()
    total = free_boot + alloc_boot
    return {
        "board": board_name, "implementation": impl, "implementation_version": impl_version, "cpu_hz": CPU_HZ,
        "emulator": emuboard.emulator_version(), "firmware": firmware,
        "model": {"path": str(model), "bytes": model.stat().st_size, "plan": cfg.get("stream", False),
                  "out_rows": cfg.get("out_rows")},
        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        "heap_bytes_total": total, "heap_free_boot_bytes": free_boot,
        **figures, "heap_free_min_bytes": total - node["heap_in_use_max"] if node else None,
        "node": node, "tokens": node["committed"] if node else 0,
        "link_bytes_per_committed_token": node["link_bytes_per_committed_token"] if node else None,
        "verified_equal_target_greedy": node["verified_equal_target_greedy"] if node else None,
        "deploy_host_s": round(deploy_s, 1) if deploy_s is not None else None,
    }


def _plan_error(prof: dict, model: Path) -> str | None:
    """The memory plan's one line when no plan of the model fits the board's heap (the deploy would refuse it)."""
    from host import node_config
    from host.errors import UserError

    try:
        node_config.derive(prof, model)
    except UserError as e:
        return str(e)
    return None


def _deploy_and_run(board, board_name: str, model: Path, prof: dict, target: str, steps: int, tokens: int,
                    long_notes: bool, tmpd: Path) -> tuple[dict, dict, float, dict | None]:
    """Deploy the model as a user would, probe it alone, then (tokens > 0) run the node: (figures, node.json,
    deploy host seconds, the node's figures or None)."""
    _say("deploying %s (%s B)" % (model, format(model.stat().st_size, ",")))
    t = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    dep = subprocess.run([sys.executable, "-m", "host.cli", "deploy", "--board", board_name, "--port",
                          board.repl_port, "--node", "--model", str(model), "--no-reset", "--timeout",
                          "1800"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1800,
                         stdin=subprocess.DEVNULL)
    if dep.returncode != 0:
        raise BenchError("deploy failed: " + (dep.stdout + dep.stderr).strip()[-800:])
    deploy_s = time.monotonic() - t
    cfg = json.loads(_mpremote(board.repl_port, "exec", "print(open('node.json').read())"))
    _say("deployed in %.0f s (host); the model alone: %d plain steps, %d with the board's default kernels"
         % (deploy_s, BASELINE_STEPS, steps))
    figures = probe_model(board.repl_port, model, prof, cfg, steps, tmpd)
    fits = figures["model_fits"]
    node = _node_run(board, tmpd, cfg, prof, target, tokens, long_notes) if tokens and fits else None
    return figures, cfg, deploy_s, node


def probe_model(port: str, model: Path, prof: dict, cfg: dict, steps: int, tmpd: Path, prompt_limit: int = 24) -> dict:
    """The model alone on the board at `port` (deployed: /board.json, /node.json, the model): PROBE's plain and
    fast (the board's default kernels: viper, ulab) steps in board time, and whether its ids and logits
    hashes equal shared/llama.py's on CPython. prompt_limit: the prompt's tokens, prefilled before the timed
    steps (the prefill is most of the probe's board time where a step is slow)."""
    prompt = prompt_ids(model, "Plant log notes.\nM2 ALARM temp_c 81.5 > 80.0\nNote:", prompt_limit)
    script = tmpd / "probe.py"
    script.write_text(PROBE % {"prompt": prompt, "steps": steps, "base": BASELINE_STEPS, "viper": VIPER_STEPS})
    out = _mpremote(port, "run", str(script), timeout=3600)
    line = [x for x in out.splitlines() if x.startswith("BENCH-BOARD ")]
    if not line:
        raise BenchError("the board's probe printed no result: " + out[-800:])
    probe = json.loads(line[0][len("BENCH-BOARD "):])
    if not probe["fits"]:  # stock firmware: the node's code in the heap leaves no room for the model
        return {"model_fits": False, "model_error": probe["error"], "heap_free_after_code_bytes": probe["free_code"]}
    host = host_greedy(model, prof, cfg, prompt, len(probe["ids"]))
    fast = probe["fast"]
    f_us = sum(probe["us"][fast]) / len(probe["us"][fast])
    p_us = sum(probe["us"]["plain"]) / len(probe["us"]["plain"])
    ratio = round(p_us / f_us, 1)
    res = {"model_fits": True, "heap_free_after_code_bytes": probe["free_code"], "model_heap_bytes": probe["held"],
           "heap_free_min_bytes_model_alone": probe["free_min"], "fast_backend": fast, "step_clock": probe["clock"],
           "model_path": probe.get("path"), "model_plan": probe.get("plan"), "weights_in_place": probe.get("in_place", False),
           "draft_step_us": round(f_us), "draft_tokens_per_s": round(1e6 / f_us, 2),
           "plain_step_us": round(p_us), "draft_step_fast_vs_plain": ratio,
           "steps": {k: len(v) for k, v in probe["us"].items()},
           "draft_ids_match_host": probe["ids"] == host, "ids": [x[0] for x in probe["ids"]],
           "host_ids": [x[0] for x in host]}
    # the MicroPython figures' names (native code against bytecode), kept where they are true
    if fast in ("native", "viper"):
        res["draft_step_%s_vs_bytecode" % fast] = ratio
    if "viper" in probe["us"] and fast == "native":
        v_us = sum(probe["us"]["viper"]) / len(probe["us"]["viper"])
        res["viper_step_us"] = round(v_us)
        res["draft_step_native_vs_viper"] = round(v_us / f_us, 1)
    if "parts" in probe:
        res["step_breakdown"] = breakdown(probe["parts"], f_us)
    return res


def breakdown(p: dict, step_us: float) -> dict:
    """The probe's parts (each timed alone) as a breakdown of one decode step in board us, with cycles per
    multiply-accumulate for each layer matrix and the classifier. With the C kernels' whole-layer call
    (`layer_us`, per layer) the parts are its kernels and `glue_us` is the step less the layers and the
    classifier (the embedding row, the key positions, the step hook: Python); otherwise `glue_us` is the step
    less the parts, each part timed through its Python entry point."""
    L = p["layers"]
    cyc = CPU_HZ / 1e6
    mats = {k: {"us": v[0], "macs": v[1], "cycles_per_mac": round(v[0] * cyc / v[1], 1)} for k, v in p["matvec"].items()}
    parts = {"matvecs_us": L * sum(v[0] for v in p["matvec"].values()), "flash_reads_us": L * p["flash_layer"],
             "attention_us": L * p["attention_layer"],
             "norms_swiglu_quantize_us": 2 * L * p["norm_quant"] + L * p["swiglu_quant"],
             "classifier_us": p["classifier"]}
    macs = L * sum(v[1] for v in p["matvec"].values()) + p["classifier_macs"]
    out = {"keys": p["keys"], **parts}
    if "layer" in p:
        out["layer_us"] = p["layer"]
        out["layer_rest_us"] = L * p["layer"] - (parts["matvecs_us"] + parts["attention_us"]
                                                 + parts["norms_swiglu_quantize_us"])
        out["glue_us"] = round(step_us - L * p["layer"] - p["classifier"] - parts["flash_reads_us"])
        out["bytecode_call_us"] = p["call"]
    else:
        out["glue_us"] = round(step_us - sum(parts.values()))
    return {**out, "classifier_cycles_per_mac": round(p["classifier"] * cyc / p["classifier_macs"], 1),
            "macs_per_step": macs, "step_cycles_per_mac": round(step_us * cyc / macs, 1), "matvec": mats}


def _node_run(board, tmpd: Path, cfg: dict, prof: dict, target: str, tokens: int, long_notes: bool) -> dict:
    """The node itself against the real gateway until `tokens` verified tokens; figures in board time, and
    the gateway's trace replayed through the target alone."""
    from host.store import LogStore
    from tools.bench import trace_replay

    # summary_s 1: an episode at every sample tick, events or not, so the node drafts without waiting for an
    # alarm (the figures are the node's drafting rate, not the plant's event rate)
    node_cfg = dict(cfg, spill_bytes=SPILL_BYTES, report_ms=1000, summary_s=1,
                    **(LONG_NOTES if long_notes else {}))
    (tmpd / "node.json").write_text(json.dumps(node_cfg))
    boots = board.boots
    if prof["flavour"] == "circuitpython":
        from tools.board import deploy

        # CIRCUITPY is read-only to code until remounted (the deploy did it; a soft reset keeps it, again is fine)
        _mpremote(board.repl_port, "exec", "import storage; storage.remount('/', readonly=False)")
        _ampy(board.repl_port, "put", str(tmpd / "node.json"), "/node.json")
        try:
            deploy.reset_board(board.repl_port, "ampy", circuitpython=True)
        except deploy.DeployError as e:
            raise BenchError("resetting the board into the node: %s" % e) from None
    else:
        _mpremote(board.repl_port, "fs", "cp", str(tmpd / "node.json"), ":node.json", "+", "reset")
    t = time.monotonic()
    while board.boots == boots and time.monotonic() - t < 60:
        time.sleep(0.05)
    db, status, trace = tmpd / "g.db", tmpd / "st.json", tmpd / "trace.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    gw = subprocess.Popen([sys.executable, "-m", "host.cli", "gateway", "--insecure", "--port", "node=" + board.uart_port,
                           "--db", str(db), "--status", str(status), "--baud", str(prof["uart"]["baud"]),
                           "--model", target, "--peer-timeout", "30", "--trace", str(trace), "--quiet"], cwd=str(ROOT), env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _say("node and gateway (%s) running until %d verified tokens" % (target, tokens))
    st = None
    t0_board = None
    u0 = None
    last = time.monotonic()
    try:
        while True:
            if gw.poll() is not None:
                raise BenchError("the gateway exited: " + gw.stderr.read().decode()[-800:])
            try:
                st = json.loads(status.read_text())
            except (OSError, ValueError):
                st = None
            spec = st["sessions"][0].get("spec", {}) if st and st.get("sessions") else {}
            if spec.get("tokens_verified", 0) > 0 and t0_board is None:  # from the first verdict on
                t0_board, u0, v0 = _board_s(board), dict(board.uart_bytes), spec["tokens_verified"]
                c0 = spec["committed"]
            if spec.get("tokens_verified", 0) >= tokens:
                break
            if time.monotonic() - last > 30:
                _say("%d verified tokens so far" % spec.get("tokens_verified", 0))
                last = time.monotonic()
            time.sleep(0.5)
        t1_board = _board_s(board)
        u1 = dict(board.uart_bytes)
    finally:
        gw.terminate()
        gw.wait(30)
    sess = st["sessions"][0]
    spec = sess["spec"]
    store = LogStore(db, readonly=True)
    try:
        heaps = [int(r["text"].split("heap=")[1].split()[0]) for r in store.logs("node") if r["text"].startswith("NODE ")]
        lines = sum(1 for r in store.logs("node"))
    finally:
        store.close()
    link = (u1["to_board"] - u0["to_board"]) + (u1["from_board"] - u0["from_board"])
    committed = spec["committed"] - c0
    _say("replaying the trace through the target alone")
    replay = trace_replay.greedy_replay(trace, sess["name"], load_target(target), prof["kv"]["sink"],
                                        prof["kv"]["window"])
    return {"verified_tokens": spec["tokens_verified"], "committed": spec["committed"],
            "verified_tokens_per_board_s": round((spec["tokens_verified"] - v0) / max(t1_board - t0_board, 1e-9), 2),
            "board_s": round(t1_board - t0_board, 1), "acceptance_drafts": sess["drafts"], "verdicts": sess["verdicts"],
            "lockstep_bad": spec["lockstep_bad"], "desync": spec["desync"], "log_lines_stored": lines,
            "heap_in_use_max": max(heaps) if heaps else 0, "heap_in_use_reports": heaps[-8:],
            "link_bytes_per_committed_token": round(link / max(committed, 1), 1), "replay": replay,
            "verified_equal_target_greedy": replay["gaps"] == 0 and replay["equal"] == replay["verified"] > 0,
            "notes": LONG_NOTES if long_notes else {k: cfg.get(k) for k in LONG_NOTES}}


def load_target(target: str):
    """The gateway's target for --model `target`, loaded here for the replay: for smollm2 the one the gateway
    chose by default (host/target_delta.choose: the domain target where models/target exists)."""
    from host import gateway, target_delta

    if target == "smollm2":
        path, domain, _label = target_delta.choose(None)
        return gateway.load_target(str(path), domain)[0]
    return gateway.load_target(target)[0]


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench board", description=__doc__.split("\n\n")[0])
    from shared import mbf
    from tools.board import emuboard

    ap.add_argument("--board", default="rp2040_pico",
                    help="board profile with an emulator: rp2040_pico (MicroPython, default) or rp2040_pico_cp "
                         "(CircuitPython)")
    ap.add_argument("--model", default=str(ROOT / "models" / "draft" / "draft.mbf"),
                    help="the draft MBF (default the shipped draft); 'tiny' for the tiny seeded test draft")
    ap.add_argument("--target", default=None, help="the gateway's target (default: smollm2; tiny:3 for --model tiny)")
    ap.add_argument("--steps", type=int, default=8,
                    help="greedy steps of the model alone with the board's default kernels: viper, ulab (default 8)")
    ap.add_argument("--tokens", type=int, default=50,
                    help="verified tokens of the node run (default 50; 0: the model alone, no node run: a draft no "
                         "gateway target shares a vocabulary with, e.g. llama2.c's stories260K)")
    ap.add_argument("--long-notes", action="store_true",
                    help="the node writes 48-token notes from 12-token prompts (default: node.json's 16 from 48)")
    ap.add_argument("--image", default=None, help="firmware .uf2 (default the board's: build/firmware/BOARD/firmware.uf2, "
                                                   "from make firmware or make firmware-cp)")
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    args = ap.parse_args(argv)
    if args.steps < 2 or args.tokens < 0:
        ap.error("--steps must be >= 2 and --tokens >= 0")
    if args.board not in emuboard.BOARDS:
        ap.error("--board %s: no emulator for it (one of %s)" % (args.board, ", ".join(emuboard.BOARDS)))
    target = args.target
    image = Path(args.image).resolve() if args.image else None  # the emulator runs in another directory
    if image is not None and not image.is_file():
        ap.error("--image %s: no such file (make firmware, or make firmware-stock)" % args.image)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from host.gateway import TINY_SEQ_LEN
            from tools.demo import spec_models

            model = Path(tmp) / "tiny.mbf"
            model.write_bytes(spec_models.make_pair(3, seq_len=TINY_SEQ_LEN).mbf)
            target = target or "tiny:3"
        else:
            model = Path(args.model)
            if not model.is_file():
                ap.error("--model %s: no such file" % model)
            try:  # a file that is no model is the user's mistake, not a model that does not fit
                mbf.open(str(model)).close()
            except (OSError, ValueError) as e:
                ap.error("--model %s: not a draft model (%s)" % (model, e))
        try:
            res = run(args.board, model, target or "smollm2", args.steps, args.tokens,
                      image, args.long_notes)
        except (BenchError, emuboard.EmuBoardError) as e:
            print("edgetwin bench board: %s" % e, file=sys.stderr)
            return 2
    print(json.dumps(res, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
