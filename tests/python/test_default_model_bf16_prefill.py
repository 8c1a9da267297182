"""The default model (SmolLM2-135M-Instruct, Q4_1 GGUF) on the CPU with the bf16 prefill
GEMM (cpu_bf16_quantized_matmul_bt, operands rounded to bf16) against the f32 sgemm
(METALRT_CPU_GEMM=f32), on a prompt long enough for the prefill GEMM (53 tokens; the
references of test_default_model_generation.py have at most 16, which the GEMV serves).

Bars (measured 2026-12-01: logits NMSE 8e-5 over all 53 positions, the same argmax at
every position, the same 24 greedy tokens): logits NMSE <= 5e-4 (llama.cpp's
test-backend-ops bar for a quantized matmul), the same argmax at every prompt position,
and the same greedy continuation.
"""
import numpy as np
import pytest

import metalrt

PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
          "combined movable metal type, oil-based ink and a wooden press adapted from those used for wine. "
          "Within fifty years, printing shops had spread to more than two hundred cities across Europe, and")


@pytest.fixture(scope="module")
def smollm2():
    return metalrt.load(device="cpu")


def run(model, tokenizer, ids, gemm, monkeypatch):
    """All positions' logits and 24 greedy tokens, with the prefill GEMM `gemm`; checks
    the provider stats show it served the prompt's matmuls."""
    monkeypatch.setenv("METALRT_CPU_GEMM", gemm)
    metalrt.providers.reset_stats()
    logits = np.asarray(model.logits(ids), dtype=np.float64)
    served = metalrt.providers.stats("quantized_matmul_bt", "cpu")["last_selected"]
    assert served == {"bf16": "cpu_bf16_quantized_matmul_bt", "f32": "cpu_blas_quantized_matmul_bt"}[gemm]
    tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=24)]
    return logits, tokens


def test_bf16_prefill_keeps_the_logits_and_the_greedy_continuation(smollm2, monkeypatch):
    monkeypatch.setenv("METALRT_CPU_GEMM", "bf16")
    try:
        metalrt.doctor()
    except ValueError:   # METALRT_CPU_GEMM=bf16 on a CPU without AVX-512 BF16
        pytest.skip("this CPU has no AVX-512 BF16: the prefill GEMM is f32")
    if "cpu_blas_quantized_matmul_bt" not in metalrt.providers.list("quantized_matmul_bt", "cpu"):
        pytest.skip("this build has no BLAS (METALRT_BLAS=off): the oracle serves prefill")
    model, tokenizer = smollm2
    ids = tokenizer.encode(PROMPT)
    assert len(ids) == 53
    ref_logits, ref_tokens = run(model, tokenizer, ids, "f32", monkeypatch)
    logits, tokens = run(model, tokenizer, ids, "bf16", monkeypatch)
    nmse = float(np.sum((logits - ref_logits) ** 2) / np.sum(ref_logits ** 2))
    assert nmse <= 5e-4
    assert (logits.argmax(-1) == ref_logits.argmax(-1)).all()
    assert tokens == ref_tokens
