"""Operator Q&A: log windows from the store, the top K by PRISM, an answer from the target model citing them.

    windows = candidates(store_path, question)                 # FTS5 retrieval (host/store.py)
    chosen, ranking = rerank(prism, question, windows, k)       # PRISM top K, best first
    answerer = Answerer.from_gguf(path)                          # SmolLM2 (or any llama GGUF with a GPT-2 BPE)
    text = answerer.answer(question, chosen, on_text=print)      # greedy, streamed piece by piece

The prompt numbers the windows [1]..[K] with their node and time span and asks the model to cite them;
cited_sources() maps the [n] in the answer back to the windows. The target's tokenizer is built on the host
from the GGUF's own strings with the `tokenizers` package, the way tests/host/test_bpe_reference.py builds
SmolLM2's reference tokenizer.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

SYSTEM = ("You are the assistant of a plant's control room. Answer the operator's question in two or three "
          "sentences using only the numbered log windows. Cite the windows you use as [1], [2].")
CONTROL = 3  # GGUF token type of control (special) tokens
_CITE = re.compile(r"\[(\d{1,3})\]")


class QAError(ValueError):
    """A question that cannot be answered (no candidates, bad k, unusable model); one line for the user."""


@dataclass
class Source:
    """One window given to the target: its number in the prompt, where and when it comes from."""

    n: int
    node: str
    t0_ms: int
    t1_ms: int
    text: str
    prob: float

    def span(self) -> str:
        return "%s %s to %s UTC" % (self.node, fmt_ms(self.t0_ms), fmt_ms(self.t1_ms, time_only=True))


def fmt_ms(ms: int, time_only: bool = False) -> str:
    t = time.gmtime(ms // 1000)
    return time.strftime("%H:%M:%S" if time_only else "%Y-%m-%d %H:%M:%S", t)


# ---------------------------------------------------------------------------------------------- retrieval + rerank


def candidates(store_path: str | Path, question: str, limit: int = 20, lines: int = 8) -> list:
    """FTS5 log windows for the question from the gateway's store (read-only), best bm25 first."""
    from host.store import LogStore, StoreError

    if not isinstance(question, str) or not question.strip():
        raise QAError("the question is empty")
    try:
        store = LogStore(store_path, readonly=True)
    except StoreError as e:
        raise QAError(str(e)) from None
    try:
        return store.windows(question, limit=limit, lines=lines)
    except StoreError as e:
        raise QAError(str(e)) from None
    finally:
        store.close()


def rerank(prism, question: str, windows: Sequence, k: int):
    """(the top k windows as Sources, best first, the PRISM Ranking)."""
    if not windows:
        raise QAError("no log windows match the question: nothing to rank (is the store empty, or are the words "
                      "absent from the logs?)")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise QAError("k must be a positive integer, got %r" % (k,))
    if k > len(windows):
        raise QAError("k=%d is larger than the %d candidate windows found for this question; use --k %d or less"
                      % (k, len(windows), len(windows)))
    ranking = prism.rank(question, [w.text for w in windows], k)
    chosen = [Source(i + 1, windows[j].node, int(windows[j].t0_ms), int(windows[j].t1_ms), windows[j].text,
                     float(ranking.probs[j])) for i, j in enumerate(ranking.top)]
    return chosen, ranking


# ---------------------------------------------------------------------------------------------- prompt


def prompt_text(question: str, sources: Sequence[Source]) -> str:
    """ChatML prompt (SmolLM2-Instruct's template) with the numbered windows."""
    blocks = ["[%d] %s:\n%s" % (s.n, s.span(), s.text.strip()) for s in sources]
    user = "Log windows:\n\n%s\n\nQuestion: %s" % ("\n\n".join(blocks), question.strip())
    return ("<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n"
            % (SYSTEM, user))


def cited_sources(answer: str, sources: Sequence[Source]) -> list[Source]:
    """The sources whose [n] appears in the answer, in order of first citation."""
    by_n = {s.n: s for s in sources}
    out: list[Source] = []
    for m in _CITE.finditer(answer):
        s = by_n.get(int(m.group(1)))
        if s is not None and s not in out:
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------------- target


def bpe_tokenizer(fields):
    """A `tokenizers.Tokenizer` from a GGUF's tokenizer fields (GPT-2 byte-level BPE; SmolLM2's "smollm"
    pre-tokenizer splits digits one by one first)."""
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - declared dependency
        raise QAError("the `tokenizers` package is not installed: pip install 'tokenizers>=0.19,<1'") from None
    if fields is None:
        raise QAError("the target GGUF carries no tokenizer")
    if fields.model != "gpt2":
        raise QAError("the target's tokenizer is %r; edgetwin ask supports GPT-2 style BPE (SmolLM2)" % fields.model)
    pre = [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]
    if fields.pre == "smollm":
        pre.insert(0, {"type": "Digits", "individual_digits": True})
    elif fields.pre not in ("gpt2", "default"):
        raise QAError("the target's pre-tokenizer %r is not supported (smollm, gpt2)" % fields.pre)
    names = fields.tokens
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": names[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(fields.token_types) if t == CONTROL],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {n: i for i, n in enumerate(names)}, "merges": [m.split(" ") for m in fields.merges]},
    }
    try:
        return tokenizers.Tokenizer.from_str(json.dumps(doc))
    except Exception as e:
        raise QAError("cannot build the target's tokenizer from the GGUF: %s" % e) from None


class Answerer:
    """The target model + its tokenizer; answer() streams a greedy answer."""

    def __init__(self, target, tokenizer, stop_ids: Sequence[int]):
        self.target, self.tokenizer = target, tokenizer
        self.stop_ids = set(int(i) for i in stop_ids)

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Answerer":
        from host.gguf_load import load_gguf
        from host.target import Target, TargetError

        try:
            m = load_gguf(path)
            target = Target(m.config, m.weights)
        except (TargetError, OSError, ValueError) as e:
            raise QAError("cannot load the target model %s: %s" % (path, e)) from None
        tok = bpe_tokenizer(m.tokenizer)
        stops = [i for i in (m.tokenizer.eos_id, tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>"))
                 if i is not None]
        return cls(target, tok, stops)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def answer(self, question: str, sources: Sequence[Source], max_tokens: int = 160,
               on_text: Optional[Callable[[str], None]] = None) -> str:
        """Greedy answer; on_text gets each new piece of text as soon as it decodes to whole characters."""
        ids = self.encode(prompt_text(question, sources))
        ctx = self.target.cfg.context_length
        if len(ids) + max_tokens + 64 > ctx:
            raise QAError("the prompt (%d tokens) and answer (%d) exceed the target's context of %d tokens; use a "
                          "smaller --k" % (len(ids), max_tokens, ctx))
        cache = self.target.new_dense_cache(len(ids) + max_tokens, staged=64)
        logits = self.target.feed(cache, ids, last_only=True)[-1]
        out: list[int] = []
        shown = ""
        for _ in range(max_tokens):
            tok = int(np.argmax(logits))
            if tok in self.stop_ids:
                break
            out.append(tok)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            if not text.endswith("\ufffd") and len(text) > len(shown) and text.startswith(shown):
                if on_text is not None:
                    on_text(text[len(shown):])
                shown = text
            if len(out) == max_tokens:
                break
            logits = self.target.forward(cache, [tok])[0]
            cache.commit(1)
        text = self.tokenizer.decode(out, skip_special_tokens=True)
        if on_text is not None and len(text) > len(shown) and text.startswith(shown):
            on_text(text[len(shown):])
        return text
