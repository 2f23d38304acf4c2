"""WordPiece encoding of (question, passage) pairs for a BERT cross-encoder, via the `tokenizers` package.

Truncation strategy: longest_first to the model's max length (tokens are removed one at a time from the
longer of the two sequences). With a short question this only ever shortens the passage (the same result as
only_second), and unlike only_second it never fails when a question alone is too long. Padding is to the
longest pair in the batch, on the right, with the tokenizer's pad id; attention_mask marks real tokens.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

try:
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer
except ImportError:  # pragma: no cover - tokenizers is a declared dependency of the test extra
    Tokenizer = None  # type: ignore[assignment,misc]
    BertWordPieceTokenizer = None  # type: ignore[assignment,misc]


class TokenizerError(ValueError):
    """The model directory has no usable tokenizer (tokenizer.json or vocab.txt)."""


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise TokenizerError("cannot read %s: %s" % (path, exc)) from None
    if not isinstance(data, dict):
        raise TokenizerError("%s is not a JSON object" % path)
    return data


def load_tokenizer(model_dir: str, max_length: int) -> "Tokenizer":
    """Open tokenizer.json (preferred) or vocab.txt and set truncation/padding for pair encoding."""
    if Tokenizer is None:
        raise TokenizerError("the `tokenizers` package is not installed: pip install 'tokenizers>=0.19,<1'")
    if max_length < 4:
        raise TokenizerError("max_length must be at least 4, got %d" % max_length)
    tok_json = os.path.join(model_dir, "tokenizer.json")
    vocab_txt = os.path.join(model_dir, "vocab.txt")
    if os.path.isfile(tok_json):
        try:
            tok = Tokenizer.from_file(tok_json)
        except Exception as exc:  # tokenizers raises plain Exception subclasses from Rust
            raise TokenizerError("cannot parse %s: %s" % (tok_json, exc)) from None
    elif os.path.isfile(vocab_txt):
        cfg_path = os.path.join(model_dir, "tokenizer_config.json")
        lower = True
        if os.path.isfile(cfg_path):
            lower = bool(_read_json(cfg_path).get("do_lower_case", True))
        try:
            tok = BertWordPieceTokenizer(vocab_txt, lowercase=lower)
        except Exception as exc:
            raise TokenizerError("cannot read %s: %s" % (vocab_txt, exc)) from None
    else:
        raise TokenizerError("no tokenizer.json or vocab.txt in %s" % model_dir)
    for special in ("[CLS]", "[SEP]", "[PAD]"):
        if tok.token_to_id(special) is None:
            raise TokenizerError("tokenizer in %s lacks the %s token" % (model_dir, special))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    return tok


def encode_pairs(
    tok: "Tokenizer", question: str, passages: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode [CLS] question [SEP] passage [SEP] for each passage.

    Returns (input_ids, token_type_ids, attention_mask), each int64 [B, T], T = longest pair.
    """
    return encode_pairs_info(tok, question, passages)[:3]


def encode_pairs_info(
    tok: "Tokenizer", question: str, passages: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """encode_pairs plus a bool [B] array: True where the pair was truncated to the max length."""
    encs = tok.encode_batch([(question, p) for p in passages])
    truncated = np.array([len(e.overflowing) > 0 for e in encs], dtype=bool)
    pad_id = tok.token_to_id("[PAD]")
    width = max(len(e.ids) for e in encs)
    ids = np.full((len(encs), width), pad_id, dtype=np.int64)
    types = np.zeros((len(encs), width), dtype=np.int64)
    mask = np.zeros((len(encs), width), dtype=np.int64)
    for i, e in enumerate(encs):
        n = len(e.ids)
        ids[i, :n] = e.ids
        types[i, :n] = e.type_ids
        mask[i, :n] = 1
    return ids, types, mask, truncated
