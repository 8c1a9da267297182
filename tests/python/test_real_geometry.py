"""The headline hybrid MoE models at their released per-layer geometry (``real_geometry``:
Qwen3.5/3.6-35B-A3B's and Qwen3-Next-80B-A3B's layers, 4 of them, 32 experts, vocabulary
4096), from the three files people download, on the CPU and the (simulated) Metal device:

* the Hugging Face directory gives transformers' float32 logits, the MLX 4-bit directory
  (``mlx_lm.convert``) mlx-lm's and the Q4_K_M GGUF (llama.cpp's converter and quantizer)
  llama.cpp's own: max |Δlogit| <= BAR x the logit range on prompts of 40 and 150 tokens,
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
from bench import counters  # noqa: E402

ARCHS = list(real_geometry.CONFIGS)
PARTS = list(real_geometry.REFERENCE)
SIM_LENGTHS = (40,)
# Peers whose arithmetic differs from an exact dequantize-then-f32 product: the bar
# their logits are held to (1e-3 x range where the arithmetic is the same).
BAR = {"hf": 1e-3, "mlx_4bit": 1e-3, "q4_k_m": 1e-3}
PREFILL = {"cpu": 512, "metal": 70}   # tokens of the native-ops prefill (70: past a GDN chunk of 64)


@functools.lru_cache(maxsize=1)   # one 2 GB model in memory at a time
def loaded(arch, part, device):
    path, reference = real_geometry.fixture(arch, part)
    return (*metalrt.load(str(path), device=device), reference)


def _lengths(device):
    return real_geometry.PROMPT_LENGTHS if device == "cpu" else SIM_LENGTHS


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_greedy_ids_match_the_reference(arch, part, device):
    model, tokenizer, reference = loaded(arch, part, device)
    for length in _lengths(device):
        expected = reference[f"logits_{length}"]
        got = model.logits(real_geometry.prompt(length))
        span = float(expected.max() - expected.min())
        assert span > 0.5 and got.shape == expected.shape
        err = float(np.abs(got - expected).max())
        assert err <= BAR[part] * span, f"{length} tokens: max |dlogit| {err:.4g} of {span:.3g}"
    ids = real_geometry.prompt(real_geometry.PROMPT_LENGTHS[0])
    tokens = [r.token for r in metalrt.stream_generate(
        model, tokenizer, ids, max_tokens=real_geometry.GREEDY_STEPS, max_batched_tokens=16)]
    assert tokens == reference["greedy"].tolist()


def _oracles_with_a_fast_twin():
    return [names[-1] for op in metalrt.providers.ops()
            if len(names := metalrt.providers.list(op, "cpu")) > 1 and names[-1] == f"cpu_{op}"]


@contextmanager
def _fast_tier_only(device):
    """On the CPU, every op's oracle off where a faster provider exists."""
    off = _oracles_with_a_fast_twin() if device == "cpu" else []
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
        report = counters.run(model, ids, decode_steps=3)
        for step in ("prefill", "decode"):
            assert [n for n, r in report[step]["ops"].items() if not r["native"]] == [], step
        decode = report["decode"]
        assert decode["waits"] == 1 and decode["allocated_bytes"] == 0, decode
        replayed = report["replayed_decode"]
        assert replayed["plan_replays"] > 0 and all(replayed["goal"].values()), replayed
        return
    with _fast_tier_only(device) as off:
        assert "cpu_paged_attention" in off and "cpu_matmul_bt" in off
        metalrt.providers.reset_stats()
        engine = Engine(model, model.new_cache(blocks_for(len(ids) + 4)), max_batched_tokens=len(ids))
        request = engine.add_request(ids, SamplingParams(), 4)
        while engine.has_work:
            engine.step()
        engine.close()
    assert len(request.output) == 4
    selected = {op: metalrt.providers.stats(op, "cpu") for op in metalrt.providers.ops()}
    assert [op for op, s in selected.items() if s["calls"] and s["last_selected"] in off] == []
    assert selected["paged_attention"]["calls"] == 4   # one full-attention layer, 4 steps
    assert selected["gated_delta_rule"]["calls"] == 12
