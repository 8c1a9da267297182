"""Qwen3-MoE, Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (value heads tiled by llama.cpp's
converter) from GGUF files written by llama.cpp's converter and
quantizer (``moe_gguf_fixtures``), on the CPU and the (simulated) Metal device: the F32 file
gives transformers' logits (max |Δlogit| <= 1e-3 x range) and greedy tokens; the Q8_0
file keeps its stacked expert tensors quantized (one QuantizedTensor per projection,
the router float) and matches the same model built from its dequantized weights; on the CPU
its experts run on the fast tier (the quantized GEMV), with the oracle's greedy tokens."""
import functools

import numpy as np
import pytest

import metalrt
import moe_gguf_fixtures
import tiny_hybrid
import torch  # test dependency (the "test" extra)
from conftest import DEVICES, nmse
from metalrt.loaders import load_model_files
from metalrt.loaders.quants import QuantizedWeight, dequantize_weight
from metalrt.models import build_model

IDS = tiny_hybrid.prompt(40, 7)


ARCHS = list(moe_gguf_fixtures.CONFIGS)


@functools.lru_cache(maxsize=None)
def paths(arch):
    return moe_gguf_fixtures.fixture(arch)


@functools.lru_cache(maxsize=None)
def reference(arch):
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(paths(arch)["hf"], dtype="float32").eval()
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0].double().numpy()
        greedy = model.generate(torch.tensor([IDS]), max_new_tokens=12, do_sample=False,
                                pad_token_id=0)[0, len(IDS):].tolist()
    return logits, greedy


def dequantized(files):
    """The Q8_0 file's weights in float32, expert stacks back to [E, N, K]."""
    experts = files.config["num_experts"]
    out = {}
    for name, w in files.weights.items():
        if isinstance(w, QuantizedWeight):
            w = dequantize_weight(w)
            if ".mlp.experts." in name:
                w = w.reshape(experts, -1, w.shape[-1])
        out[name] = w
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ARCHS)
def test_f32_gguf_matches_transformers(arch, device):
    model, tokenizer = metalrt.load(str(paths(arch)["f32"]), device=device)
    expected, greedy = reference(arch)
    got = model.logits(IDS)
    span = expected.max() - expected.min()
    assert span > 0.5
    assert np.abs(got - expected).max() <= 1e-3 * span
    tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, IDS, max_tokens=12,
                                                       max_batched_tokens=16)]
    assert tokens == greedy


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "qwen3_5"])   # qwen3_5: no experts
def test_q8_0_gguf_keeps_experts_quantized(arch, device, monkeypatch):
    files = load_model_files(str(paths(arch)["q8_0"]))
    model = build_model(files.config, files.weights, device)
    moe = model.layers[0].mlp
    for stack in (moe.gate, moe.up):   # the file's two stacks, read in place
        assert isinstance(stack, metalrt.QuantizedTensor) and stack.format == "q8_0"
        assert stack.shape == (8 * 32, 64)
    assert isinstance(moe.down, metalrt.QuantizedTensor) and moe.down.shape == (8 * 64, 32)
    assert isinstance(moe.router.weight, metalrt.Tensor) and moe.router.weight.dtype == "float32"
    # Under the CPU's default prefill GEMM (auto) the Q8_0 weights take the bf16 GEMM and
    # the dequantized f32 ones the f32 sgemm, which mixes bf16's precision into the
    # comparison (measured: max |Δlogit| 0.025 of a 6.7 span on qwen3_moe; on qwen3_next
    # 0.02-0.08 at most positions and 0.44 at one, a jump like a flipped top-k choice of
    # the router). So both builds run each arithmetic the CPU has in turn, where they
    # agree bit for bit (f32: within 3e-6).
    # The quantized experts run on the CPU's oracle here, as the float ones do: the fast
    # provider's int8 activations (test_cpu_experts_run_on_the_fast_tier) would move the
    # bf16 roundings downstream (measured: max |Δlogit| 0.009-0.76 under bf16, 4e-4 under f32).
    gemms = ["f32", "bf16"] if device == "cpu" and metalrt.doctor()["cpu_prefill_gemm"] == "auto" else [None]
    reference = build_model(files.config, dequantized(files), "cpu")
    metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", False)
    try:
        for gemm in gemms:
            if gemm is not None:
                monkeypatch.setenv("METALRT_CPU_GEMM", gemm)
            got = model.logits(IDS)
            expected = reference.logits(IDS)
            span = expected.max() - expected.min()
            assert span > 0.5
            assert np.abs(got - expected).max() <= 1e-3 * span, gemm
    finally:
        metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", True)


@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "qwen3_5"])   # qwen3_5: no experts
def test_cpu_experts_run_on_the_fast_tier(arch, monkeypatch):
    """Every moe_matmul_bt call of a generation from the Q8_0 file (chunked prefill and
    decode steps) is served by the fast CPU provider, none declined or left to the oracle;
    with it off (the oracle) the greedy tokens are the same, and the logits of a 40-token
    prefill under the f32 GEMMs within NMSE 1e-7 and 2e-4 of their span (measured
    2.5e-10-4e-9 and 1.1e-5-5.5e-5: the int8 activations' error; under the bf16 GEMMs any
    such change moves their roundings, see test_q8_0_gguf_keeps_experts_quantized)."""
    model, tokenizer = metalrt.load(str(paths(arch)["q8_0"]), device="cpu")

    def run():
        tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, IDS, max_tokens=8,
                                                           max_batched_tokens=16)]
        monkeypatch.setenv("METALRT_CPU_GEMM", "f32")
        logits = model.logits(IDS)
        monkeypatch.delenv("METALRT_CPU_GEMM")
        return tokens, logits

    metalrt.providers.reset_stats()
    fast_tokens, fast_logits = run()
    stats = metalrt.providers.stats("moe_matmul_bt", "cpu")
    assert stats["last_selected"] == "cpu_fast_moe_matmul_bt"
    assert stats["calls"] > 0 and stats["declines"] == 0 and stats["reference_hits"] == 0
    metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", False)
    try:
        oracle_tokens, oracle_logits = run()
        assert metalrt.providers.stats("moe_matmul_bt", "cpu")["last_selected"] == "cpu_moe_matmul_bt"
    finally:
        metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", True)
    assert fast_tokens == oracle_tokens
    span = oracle_logits.max() - oracle_logits.min()
    assert nmse(fast_logits, oracle_logits) <= 1e-7
    assert np.abs(fast_logits - oracle_logits).max() <= 2e-4 * span
