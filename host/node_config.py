"""The /node.json a drafting node gets, derived from its board profile and the model's memory plan.

    cfg, plan = node_config.derive(prof, Path("models/draft/draft.mbf"))

One function for `edgetwin build --node` / `deploy --node` and the demo, so what `edgetwin plan`
reports is what the node does: the plan is shared/memfit.py's for the profile (its heap, its KV
geometry, its word size), the same call `edgetwin plan` makes;

- stream: the plan's mode ("matrix", "phase", "layer": firmware/node.py then reads the layer
  matrices from flash at every step instead of holding them in RAM; false when it is resident) and
  out_rows, the streamed classifier's rows per block, so the node builds the layout that was planned;
- tokenizer: true when the model file carries its BPE tokenizer (the shipped draft does): prompts are
  the episode text encoded with it, not one token per byte;
- stop_ids: the model's output ids whose bytes hold a newline (they end a note, shared/episode.is_stop);
- k: the profile's draft_k.

Only keys firmware/node.py's DEFAULTS know are written.
"""

from __future__ import annotations

from pathlib import Path

from host.errors import UserError


def tokenizer_class(config: dict):
    """The class that reads an MBF's tokenizer region, by its kind (docs/MBF.md section 3): byte-level BPE
    (shared/bpe.py), or llama2.c's vocabulary (shared/sptok.py)."""
    from shared import bpe, mbf, sptok

    return sptok.SPTok if config.get("tokenizer_kind", mbf.TOK_BPE) == mbf.TOK_LLAMA2C else bpe.BPE


def stop_ids(mbf_path: Path) -> list[int]:
    """The draft's output ids whose bytes hold a newline: they end a note (shared/episode.is_stop)."""
    import numpy as np

    from shared import episode, mbf

    r = mbf.open(str(mbf_path))
    try:
        if not r.tok_length:
            return []
        vmap = (np.frombuffer(bytes(r.read("vocab_map")), "<u2").tolist() if "vocab_map" in r.names()
                else list(range(r.config["vocab_size"])))
        with open(mbf_path, "rb") as f:
            tok = tokenizer_class(r.config)(f, offset=r.tok_offset, length=r.tok_length)
            buf = bytearray(256)
            out = [t for t in vmap if tok.has_token(t) and episode.is_stop(buf[:tok.token_bytes(t, buf, 0)])]
    finally:
        r.close()
    return out


def plan_facts(p) -> dict:
    """What MANIFEST.json and deploy print about the plan the node.json follows."""
    return {"mode": p.mode, "out_rows": p.out_rows, "word": p.word, "load_peak": p.load_peak,
            "budget": p.budget, "heap": p.heap_bytes}


def derive(prof: dict, model: Path, word: int | None = None) -> tuple[dict, dict]:
    """(node.json dict, plan facts) for a node of `prof` drafting with the MBF at `model`.

    UserError (one line, naming the model file) when the file is not a readable model or no plan of
    it fits the profile's heap: the node would not load it."""
    from shared import mbf, memfit

    path = Path(model)
    try:
        with mbf.open(str(path)) as r:
            p = memfit.fit(r.config, prof, word, reader=r)
            tokenizer = bool(r.tok_length)
    except OSError as e:
        raise UserError("%s: cannot read the model (%s)" % (path, e.strerror or e)) from None
    except ValueError as e:  # MBFError, ModelError, ProfileError
        raise UserError("%s: %s (see edgetwin plan --board %s --model %s)"
                        % (path, " ".join(str(e).split()), prof["name"], path)) from None
    cfg = {"stream": p.mode if p.mode != "resident" else False, "out_rows": p.out_rows, "tokenizer": tokenizer,
           "k": prof["draft_k"]}
    if tokenizer:
        cfg["stop_ids"] = stop_ids(path)
    return cfg, plan_facts(p)
