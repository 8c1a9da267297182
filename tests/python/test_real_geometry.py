"""The headline hybrid MoE models at their released per-layer geometry (``real_geometry``:
Qwen3.5/3.6-35B-A3B's and Qwen3-Next-80B-A3B's layers, 4 of them, 32 experts, vocabulary
4096), from the three files people download, on the CPU and the (simulated) Metal device:

* the Hugging Face directory gives transformers' float32 logits and the MLX 4-bit
  directory (``mlx_lm.convert``) mlx-lm's: max |Δlogit| <= BAR x the logit range on prompts of 40 and 150 tokens,
  and the greedy ids of each reference (8 after the 40-token prompt). On the simulated
  device only the 40-token prompt runs (SIM_LENGTHS: the sim serves these layers at
  minutes a prompt on a shared machine).
* every op of a prefill and of the decode steps after it runs natively: on Metal no op is
  served by the CPU reference tier, a warmed-up decode step makes one host wait and
  allocates nothing, and the replayed decode plans run; on the CPU with every oracle
  provider that has a fast twin switched off, so a call that would fall back raises.
"""
import functools
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import metalrt
import real_geometry
from conftest import DEVICES
from metalrt.cache import blocks_for
from metalrt.runner import Engine, SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import counters, geometry  # noqa: E402

ARCHS = list(real_geometry.CONFIGS)
PARTS = list(real_geometry.REFERENCE)
# On the simulated device: the logits of the first SIM_PREFIX tokens of the 40-token
# prompt (the first rows of its reference: the models are causal), no greedy run, and
# a native-ops step of SIM_PREFIX prompt tokens: on this shared 2-core machine the sim
# ran a 40-token prefill of these layers in 1,399 s (load average ~20), the 8-token
# gate with its 2.2 GB load in 98 s.
SIM_PREFIX = 8
# The bar of each reference's logits, x their range.
BAR = {"hf": 1e-3, "mlx_4bit": 1e-3}
# The oracles a float checkpoint's decode step keeps on the CPU: no fast provider serves
# a float weight's m <= 16 product, dense or of an expert stack (the fast GEMVs and the
# fast moe_matmul_bt are for quantized weights, docs/cpu.md), whatever the geometry.
FLOAT_ORACLES = ("cpu_matmul_bt", "cpu_moe_matmul_bt")
DISPATCHES_PER_LAYER = 22   # of a decode step on Metal, GDN and full-attention layers alike
PREFILL = {"cpu": 512, "metal": SIM_PREFIX}   # tokens of the native-ops prefill


@functools.lru_cache(maxsize=1)   # one 2 GB model in memory at a time
def loaded(arch, part, device):
    path, reference = real_geometry.fixture(arch, part)
    return (*metalrt.load(str(path), device=device), reference)


def _assert_close(got, expected, bar, what):
    span = float(expected.max() - expected.min())
    assert span > 0.5 and got.shape == expected.shape
    err = float(np.abs(got - expected).max())
    assert err <= bar * span, f"{what}: max |dlogit| {err:.4g} of a {span:.3g} range"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_greedy_ids_match_the_reference(arch, part, device, monkeypatch, request):
    model, tokenizer, reference = loaded(arch, part, device)
    if part != "hf" and device == "cpu" and metalrt.doctor()["cpu_prefill_gemm"] == "auto":
        # The CPU's default prefill GEMM of quantized weights is the bf16 one where the CPU
        # has it, whose rounded activations move these logits by up to 6e-2 x range
        # (measured, qwen3_next); mlx-lm's products are f32, so the f32 GEMM is compared.
        monkeypatch.setenv("METALRT_CPU_GEMM", "f32")
        # Likewise the experts: the fast moe_matmul_bt's int8 activations (within 5e-5 of
        # the f32 products a call) flip near-tied router picks of the random twin (qwen3_next:
        # scores 2e-5 apart in layer 1), which moves these logits by 5e-2 x range
        # (measured); the oracle's products are f32 as mlx-lm's.
        metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", False)
        request.addfinalizer(lambda: metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", True))
    if device == "metal":
        first = real_geometry.prompt(real_geometry.PROMPT_LENGTHS[0])[:SIM_PREFIX]
        _assert_close(model.logits(first), reference["logits_40"][:SIM_PREFIX], BAR[part],
                      f"{SIM_PREFIX} tokens")
        return
    for length in real_geometry.PROMPT_LENGTHS:
        _assert_close(model.logits(real_geometry.prompt(length)), reference[f"logits_{length}"],
                      BAR[part], f"{length} tokens")
    ids = real_geometry.prompt(real_geometry.PROMPT_LENGTHS[0])
    tokens = [r.token for r in metalrt.stream_generate(
        model, tokenizer, ids, max_tokens=real_geometry.GREEDY_STEPS, max_batched_tokens=16)]
    assert tokens == reference["greedy"].tolist()


def _oracles_with_a_fast_twin():
    return [names[-1] for op in metalrt.providers.ops()
            if len(names := metalrt.providers.list(op, "cpu")) > 1 and names[-1] == f"cpu_{op}"]


@contextmanager
def _fast_tier_only(device, keep=()):
    """On the CPU, every op's oracle but those in ``keep`` off where a faster provider
    exists."""
    off = [n for n in _oracles_with_a_fast_twin() if n not in keep] if device == "cpu" else []
    for name in off:
        metalrt.providers.set_enabled(name, False)
    try:
        yield off
    finally:
        for name in off:
            metalrt.providers.set_enabled(name, True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_and_decode_run_natively(arch, device):
    model, _, _ = loaded(arch, "hf", device)
    ids = real_geometry.prompt(PREFILL[device])
    if device == "metal":
        report = counters.run(model, ids, decode_steps=2)
        for step in ("prefill", "decode"):
            assert [n for n, r in report[step]["ops"].items() if not r["native"]] == [], step
        decode = report["decode"]
        assert decode["waits"] == 1 and decode["allocated_bytes"] == 0, decode
        # Every layer, GDN or full attention, 22 dispatches; + embedding, final norm,
        # LM head and argmax.
        assert decode["dispatches_per_layer"] == DISPATCHES_PER_LAYER
        assert decode["dispatches"] == 4 * DISPATCHES_PER_LAYER + 4
        assert (DISPATCHES_PER_LAYER, 4) == (geometry.DISPATCHES_PER_LAYER,
                                             geometry.DISPATCHES_OUTSIDE_LAYERS)
        # The bench's element count of a decode token, float32: the bytes the step read.
        assert decode["weight_bytes"] == 4 * sum(geometry.decode_elements(model.config).values())
        replayed = report["replayed_decode"]
        assert replayed["plan_replays"] > 0 and all(replayed["goal"].values()), replayed
        return
    with _fast_tier_only(device, keep=FLOAT_ORACLES) as off:
        assert "cpu_paged_attention" in off and "cpu_rms_norm" in off
        metalrt.providers.reset_stats()
        engine = Engine(model, model.new_cache(blocks_for(len(ids) + 4)), max_batched_tokens=len(ids))
        request = engine.add_request(ids, SamplingParams(), 4)
        while engine.has_work:   # a call that needs a provider switched off raises
            engine.step()
        engine.close()
    assert len(request.output) == 4
    selected = {op: metalrt.providers.stats(op, "cpu") for op in metalrt.providers.ops()}
    assert selected["paged_attention"]["calls"] == 4   # one full-attention layer, 4 steps
    assert selected["gated_delta_rule"]["calls"] == 12
