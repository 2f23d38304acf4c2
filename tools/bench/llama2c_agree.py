"""Greedy agreement of a llama2.c model on the board runtime with float32 references, printed as JSON.

The llama2.c .bin is converted to MBF with INT4 (`--weights sym`) and INT8 (`--weights q8`) layer
matrices (tools/formats/convert.py, hidden_dim zero-padded to the INT4 group where needed). From BOS (or BOS
and --prompt),
greedy decoding on the board runtime (shared/llama.py, CPython, numpy kernels) is compared token by
token with a float32 forward pass written plainly like llama2.c's run.c forward() (Float32Llama2c
below: a reference, not the product) and, with --run-c, with run.c itself at temperature 0 (its text,
compared with the decoded text of our ids). `agree` is the number of tokens before the first difference.
With --micropython, the same INT4 and INT8 files also run on the MicroPython unix port with the viper
kernels: ids must equal CPython's, and tokens/s is that port's on this machine (x64), not a board's.
With --board NAME, each form is also decoded with that board profile's cache (sink + window: evicting,
unlike run.c) and the memory plan `edgetwin plan` picks for it: the ids and logits CRC the board must give.

    python -m tools.bench.llama2c_agree --model stories260K.bin --tokenizer tok512.bin --json
    python -m tools.bench.llama2c_agree --model stories260K.bin --tokenizer tok512.bin --steps 200 \\
        --run-c /tmp/run --micropython
    python -m tools.bench.llama2c_agree --model stories260K.bin --tokenizer tok512.bin --board rp2040_pico
"""

from __future__ import annotations

import binascii
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: make `shared` importable
    sys.path.insert(0, str(ROOT))

from host.usage import Parser  # noqa: E402
from shared import kernels, llama, mbf, ringkv  # noqa: E402
from tools.formats import llama2c  # noqa: E402

BOS = 1  # llama2.c's sentencepiece vocabularies: 0 <unk>, 1 <s>, 2 </s>
FORMS = ("sym", "q8")  # the converter's --weights for INT4 and INT8 layer matrices


class Float32Llama2c:
    """llama2.c's forward in float32 numpy, step by step like run.c (dense KV cache, GQA, RoPE on
    interleaved pairs with freq = 10000**(-i/head_size) for even i, RMSNorm eps 1e-5, SwiGLU)."""

    def __init__(self, path: str | os.PathLike[str]):
        cfg, _version, w = llama2c.open_model(path)
        self.cfg = cfg
        self.w = {k: np.asarray(v, dtype=np.float32) for k, v in w.items()}
        self.out = self.w["output"] if "output" in self.w else self.w["token_embd"]
        kvd = cfg.kv_dim
        self.kc = np.zeros((cfg.n_layers, cfg.seq_len, kvd), np.float32)
        self.vc = np.zeros((cfg.n_layers, cfg.seq_len, kvd), np.float32)
        hs = cfg.head_size
        i = np.arange(0, cfg.dim, 2)
        self.freq = (1.0 / np.power(np.float32(10000.0), (i % hs).astype(np.float32) / np.float32(hs))).astype(
            np.float32)

    @staticmethod
    def rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        ss = np.float32(np.dot(x, x) / np.float32(x.size) + np.float32(1e-5))
        return (g * (x * np.float32(1.0 / np.sqrt(ss)))).astype(np.float32)

    def forward(self, token: int, pos: int) -> np.ndarray:
        c, w = self.cfg, self.w
        hs, kvd, mul = c.head_size, c.kv_dim, c.n_heads // c.n_kv_heads
        x = w["token_embd"][token].copy()
        val = np.float32(pos) * self.freq
        fcr, fci = np.cos(val).astype(np.float32), np.sin(val).astype(np.float32)
        for li in range(c.n_layers):
            p = "blk.%d." % li
            xb = self.rmsnorm(x, w[p + "attn_norm"])
            q = w[p + "attn_q"] @ xb
            k = w[p + "attn_k"] @ xb
            v = w[p + "attn_v"] @ xb
            for vec, n in ((q, c.dim), (k, kvd)):
                v0, v1 = vec[0:n:2].copy(), vec[1:n:2].copy()
                vec[0:n:2] = v0 * fcr[:n // 2] - v1 * fci[:n // 2]
                vec[1:n:2] = v0 * fci[:n // 2] + v1 * fcr[:n // 2]
            self.kc[li, pos] = k
            self.vc[li, pos] = v
            att_out = np.zeros(c.dim, np.float32)
            for h in range(c.n_heads):
                kh = (h // mul) * hs
                keys = self.kc[li, :pos + 1, kh:kh + hs]
                s = (keys @ q[h * hs:(h + 1) * hs]) / np.float32(np.sqrt(hs))
                e = np.exp(s - s.max())
                a = (e / e.sum()).astype(np.float32)
                att_out[h * hs:(h + 1) * hs] = a @ self.vc[li, :pos + 1, kh:kh + hs]
            x = x + w[p + "attn_output"] @ att_out
            xb = self.rmsnorm(x, w[p + "ffn_norm"])
            h1 = w[p + "ffn_gate"] @ xb
            h3 = w[p + "ffn_up"] @ xb
            hb = (h1 * (np.float32(1.0) / (np.float32(1.0) + np.exp(-h1)))) * h3
            x = x + w[p + "ffn_down"] @ hb.astype(np.float32)
        x = self.rmsnorm(x, w["output_norm"])
        return self.out @ x

    def greedy(self, steps: int, prompt: tuple[int, ...] = (BOS,)) -> list[int]:
        """`steps` token ids after the prompt (BOS first), greedy (argmax, lowest index on ties)."""
        for pos, t in enumerate(prompt[:-1]):
            self.forward(t, pos)
        out, tok = [], prompt[-1]
        for pos in range(len(prompt) - 1, len(prompt) - 1 + steps):
            tok = int(np.argmax(self.forward(tok, pos)))
            out.append(tok)
        return out


def runtime_greedy(mbf_path: str | os.PathLike[str], steps: int, prompt: tuple[int, ...] = (BOS,),
                   cache: tuple[int, int] | None = None) -> tuple[list[int], int]:
    """(ids, CRC-32 of every generated step's integer logits) of greedy decoding after the prompt on
    shared/llama.py (this interpreter's kernels). cache: None for a dense one (no eviction: run.c's
    attention), or (sink, window) of a board profile's RingKV (tokens beyond it are evicted)."""
    r = mbf.open(str(mbf_path))
    c = r.config
    sink, window = cache if cache else (0, steps + len(prompt))
    kv = ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], sink, window, 1, "b", c["n_kv_heads"])
    m = llama.Model(r, kv)
    for t in prompt[:-1]:
        m.step(t)
        kv.commit(1)
    ids, crc, tok = [], 0, prompt[-1]
    for _ in range(steps):
        m.step(tok)
        kv.commit(1)
        crc = binascii.crc32(bytes(m.logits), crc)
        tok = m.token_of(llama.argmax(m.logits, m.n_out))
        ids.append(tok)
    r.close()
    return ids, crc


# Runs under MicroPython: the same greedy loop, timed with ticks_us (the first step is left out of the rate).
MP_SCRIPT = r"""
import binascii, gc, json, sys, time
from shared import kernels, llama, mbf, ringkv
path, steps = sys.argv[1], int(sys.argv[2])
prompt = [int(x) for x in sys.argv[3].split(",")]
mode = sys.argv[4]
sink, window = [int(x) for x in sys.argv[5].split(",")] if sys.argv[5] != "dense" else (0, steps + len(prompt))
from shared import memplan
r = mbf.open(path)
c = r.config
gc.collect()
h0 = gc.mem_alloc()
kv = ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], sink, window, 1, "b", c["n_kv_heads"])
gc.collect()
h1 = gc.mem_alloc()
plan = memplan.layout(c, sink, window, 1, mode, 64, memplan.native_word(), r)
gc.collect()
h2 = gc.mem_alloc()
m = llama.Model(r, kv, plan=plan)
gc.collect()
heap = (h1 - h0) + gc.mem_alloc() - h2  # the cache and the model (the plan object left out)
peak = plan.peak
plan = None
for t in prompt[:-1]:
    m.step(t)
    kv.commit(1)
gc.collect()
ids, crc, tok, t1 = [], 0, prompt[-1], 0
t0 = time.ticks_us()
for i in range(steps):
    m.step(tok)
    kv.commit(1)
    crc = binascii.crc32(bytes(m.logits), crc)
    tok = m.token_of(llama.argmax(m.logits, m.n_out))
    ids.append(tok)
    if i == 0:
        t1 = time.ticks_us()
t2 = time.ticks_us()
import micropython
locked = False  # bound before the lock: a new global under it would grow the globals (an allocation)
gc.collect()
micropython.heap_lock()  # one more decode step with the heap locked: it must allocate nothing
try:
    m.step(tok)
    locked = True
except MemoryError:
    pass
micropython.heap_unlock()
print(json.dumps({"ids": ids, "crc": crc, "backend": kernels.backend(), "mode": m.mode, "step_alloc_free": locked,
                  "heap_measured": heap, "heap_predicted": peak,
                  "tokens_per_s": (steps - 1) * 1e6 / time.ticks_diff(t2, t1) if steps > 1 else 0}))
"""


def micropython_greedy(mbf_path: str | os.PathLike[str], steps: int, prompt: tuple[int, ...] = (BOS,),
                       heap: int = 8 << 20, timeout: float = 600, mode: str = "resident",
                       cache: tuple[int, int] | None = None) -> dict:
    """MP_SCRIPT under the unix port (the venv's `micropython`, viper kernels): ids, crc, tokens_per_s;
    mode: resident, or a streamed memory plan mode (layer matrices read from the file during each step)."""
    from tools.board.vboard import micropython_exe

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "llama2c_greedy.py"
        script.write_text(MP_SCRIPT)
        env = dict(os.environ, MICROPYPATH=str(ROOT))
        proc = subprocess.run([micropython_exe(), "-X", "heapsize=%d" % heap, str(script), str(mbf_path), str(steps),
                               ",".join(str(t) for t in prompt), mode, "%d,%d" % cache if cache else "dense"],
                              capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
    if proc.returncode != 0:
        raise RuntimeError("micropython greedy run failed:\n%s\n%s" % (proc.stdout[-2000:], proc.stderr[-2000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def decode_text(tok: llama2c.Llama2cTokenizer, ids: list[int], prev: int = BOS) -> list[bytes]:
    """Each id's text as run.c's decode() gives it: no leading space after BOS, <0xNN> as the byte."""
    out = []
    for t in ids:
        piece = tok.tokens[t]
        if prev == BOS and piece[:1] == b" ":
            piece = piece[1:]
        if len(piece) == 6 and piece[:3] == b"<0x" and piece[5:] == b">":
            try:
                piece = bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        out.append(piece)
        prev = t
    return out


def runc_agree(run_c: str, model: str, tokenizer: str, steps: int, pieces: list[bytes], prompt: str = "",
               prompt_pieces: list[bytes] | None = None) -> tuple[int, str]:
    """(generated tokens whose text is a prefix of run.c's greedy output, that output): run.c -t 0 after
    the prompt. run.c prints each token's text (the prompt's too; unprintable single bytes skipped) and
    stops at BOS, so the texts are compared."""
    pp = prompt_pieces or []
    cmd = [run_c, model, "-z", tokenizer, "-t", "0", "-n", str(steps + len(pp))] + (["-i", prompt] if prompt else [])
    proc = subprocess.run(cmd, capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("run.c failed: %s" % proc.stderr.decode(errors="replace")[-500:])
    text = proc.stdout.rstrip(b"\n")
    head = b"".join(pp)
    if not text.startswith(head):
        return 0, text.decode("utf-8", errors="replace")
    n, pos = 0, len(head)
    for p in pieces:
        if len(p) == 1 and not (32 <= p[0] < 127 or p[0] in (9, 10, 13)):
            n += 1  # run.c's safe_printf skips it
            continue
        if text[pos:pos + len(p)] != p:
            break
        pos += len(p)
        n += 1
    return n, text.decode("utf-8", errors="replace")


def board_run(dst: Path, board: str, steps: int, prompt: tuple[int, ...], ref_ids: list[int],
              micropython: bool) -> dict:
    """Greedy decoding with a board profile's cache (sink + window: tokens past it are evicted, unlike
    run.c) and the layout `edgetwin plan` picks for that board: the ids and the CRC of the integer logits
    that board must reproduce (issue 15 point 4), their agreement with the dense fp32 reference, and with
    --micropython the unix port's tokens/s in that geometry and mode."""
    from shared import memfit, profile

    prof = profile.load(str(ROOT / "boards" / (board + ".json"))) if "/" not in board else profile.load(board)
    with mbf.open(str(dst)) as r:
        p = memfit.fit(r.config, prof, reader=r)
    cache = (prof["kv"]["sink"], prof["kv"]["window"])
    ids, crc = runtime_greedy(dst, steps, prompt, cache)
    out = {"name": prof["name"], "kv": prof["kv"], "mode": p.mode, "load_peak": p.load_peak, "budget": p.budget,
           "ids": ids, "logits_crc": "%08x" % crc, "agree_fp32": first_difference(ids, ref_ids)}
    if micropython:
        mp = micropython_greedy(dst, steps, prompt, heap=1 << 20, mode=p.mode, cache=cache)
        out["micropython"] = {"ids_match_cpython": mp["ids"] == ids, "logits_match_cpython": mp["crc"] == crc,
                              "tokens_per_s": round(mp["tokens_per_s"], 1), "step_alloc_free": mp["step_alloc_free"]}
    return out


def first_difference(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def run(model: str, tokenizer: str | None, steps: int, run_c: str | None = None, micropython: bool = False,
        workdir: str | None = None, prompt: str = "", board: str | None = None) -> dict:
    from shared import sptok
    from tools.formats.convert import convert

    kernels.use()
    tmp = tempfile.TemporaryDirectory() if workdir is None else None
    out_dir = Path(workdir or tmp.name)
    try:
        ref = Float32Llama2c(model)
        tok = llama2c.read_tokenizer(tokenizer, ref.cfg.vocab_size) if tokenizer else None
        ids0: tuple[int, ...] = (BOS,)
        if prompt:
            if tok is None:
                raise ValueError("--prompt needs --tokenizer")
            ids0 = tuple(sptok.SPTok(llama2c.tokenizer_blob(tok)).encode(prompt, bos=True))
        pp = decode_text(tok, list(ids0[1:])) if tok is not None else None
        t0 = time.perf_counter()
        ref_ids = ref.greedy(steps, ids0)
        res: dict = {"model": os.path.abspath(model), "tokenizer": os.path.abspath(tokenizer) if tokenizer else None,
                     "config": {k: getattr(ref.cfg, k) for k in ("dim", "hidden_dim", "n_layers", "n_heads",
                                                                  "n_kv_heads", "vocab_size", "seq_len")},
                     "steps": steps, "prompt": prompt, "prompt_ids": list(ids0), "fp32_ids": ref_ids,
                     "fp32_seconds": round(time.perf_counter() - t0, 2)}
        if tok is not None:
            res["fp32_text"] = b"".join(decode_text(tok, ref_ids, ids0[-1])).decode("utf-8", errors="replace")
        if run_c:
            res["run_c_agree_fp32"], res["run_c_text"] = runc_agree(
                run_c, model, tokenizer, steps, decode_text(tok, ref_ids, ids0[-1]), prompt, pp)
        for form in FORMS:
            name = "int4" if form == "sym" else "int8"
            dst = out_dir / ("%s-%s.mbf" % (Path(model).stem, name))
            summary = convert(model, dst, fmt="llama2c", weights=form,
                              tokenizer=tokenizer if tokenizer else "none")
            t0 = time.perf_counter()
            ids, crc = runtime_greedy(dst, steps, ids0)
            r = {"mbf_bytes": summary["bytes"], "mean_rel_rms": summary["mean_rel_rms_matrices"],
                 "ids": ids, "logits_crc": "%08x" % crc, "agree_fp32": first_difference(ids, ref_ids),
                 "cpython_seconds": round(time.perf_counter() - t0, 2)}
            if tok is not None:
                pieces = decode_text(tok, ids, ids0[-1])
                r["text"] = b"".join(pieces).decode("utf-8", errors="replace")
                if run_c:
                    r["agree_run_c"] = runc_agree(run_c, model, tokenizer, steps, pieces, prompt, pp)[0]
            if board:
                r["board"] = board_run(dst, board, steps, ids0, ref_ids, micropython)
            if micropython:
                mp = micropython_greedy(dst, steps, ids0)
                r["micropython"] = {"backend": mp["backend"], "mode": mp["mode"],
                                    "ids_match_cpython": mp["ids"] == ids, "logits_match_cpython": mp["crc"] == crc,
                                    "step_alloc_free": mp["step_alloc_free"],
                                    "heap_predicted": mp["heap_predicted"], "heap_measured": mp["heap_measured"],
                                    "tokens_per_s": round(mp["tokens_per_s"], 1)}
            res[name] = r
        return res
    finally:
        if tmp is not None:
            tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="edgetwin bench llama2c_agree", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="llama2.c .bin (v0 or v1), e.g. stories260K.bin (required)")
    ap.add_argument("--tokenizer", help="its tokenizer.bin (e.g. tok512.bin): embedded, and decodes the texts")
    ap.add_argument("--steps", type=int, default=64, help="greedy tokens after the prompt (default %(default)s)")
    ap.add_argument("--prompt", default="", help="text after BOS, encoded with the model's llama2.c tokenizer "
                                                 "(shared/sptok.py; default: none, greedy from BOS)")
    ap.add_argument("--run-c", metavar="EXE", help="a compiled llama2.c run.c: compare with its -t 0 output too")
    ap.add_argument("--micropython", action="store_true", help="also run on the MicroPython unix port (viper)")
    ap.add_argument("--board", help="also decode with this board profile's cache and memory plan (e.g. "
                                    "rp2040_pico): the ids and logits CRC that board must give")
    ap.add_argument("--workdir", help="keep the converted MBF files here (default: a temporary directory)")
    ap.add_argument("--json", action="store_true", help="print JSON (the default and only output)")
    args = ap.parse_args(argv)
    if not args.model:
        print("edgetwin bench llama2c_agree: error: --model PATH is required (a llama2.c .bin)", file=sys.stderr)
        return 2
    for what, p in (("--model", args.model), ("--tokenizer", args.tokenizer), ("--run-c", args.run_c)):
        if p and not os.path.isfile(p):
            print("edgetwin bench llama2c_agree: error: %s %s: no such file" % (what, p), file=sys.stderr)
            return 2
    if args.run_c and not args.tokenizer:
        print("edgetwin bench llama2c_agree: error: --run-c needs --tokenizer (run.c decodes with it)", file=sys.stderr)
        return 2
    if not 1 <= args.steps <= 4096:
        print("edgetwin bench llama2c_agree: error: --steps must be in 1..4096", file=sys.stderr)
        return 2
    try:
        res = run(args.model, args.tokenizer, args.steps, args.run_c, args.micropython, args.workdir, args.prompt,
                  args.board)
    except (llama2c.Llama2cError, ValueError) as e:
        print("edgetwin bench llama2c_agree: error: %s" % " ".join(str(e).split()), file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
