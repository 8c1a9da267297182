"""Dense families whose GGUF files carry their RoPE variant, from files written by
llama.cpp's converter (``family_gguf_fixtures``), on the CPU and the (simulated) Metal
device: Llama 3.1 (``rope_freqs.weight``, llama.cpp's per-frequency factor table, on
interleaved Q/K rows), Qwen3 with YaRN (``rope.scaling.*`` metadata) and Mistral
(``MistralForCausalLM`` without a window, converted as a ``llama`` file). Bars: the F32
file gives transformers' logits (max |Δlogit| <= 1e-3 x range) on prompts of 40 and
150 tokens and its 12 greedy tokens, with no op on the CPU reference tier on Metal; the
Q8_0 file loads quantized and keeps transformers' greedy tokens within its own error."""
import functools

import numpy as np
import pytest

import family_gguf_fixtures
import metalrt
import tiny_hybrid
import torch  # test dependency (the "test" extra)
from conftest import DEVICES
from test_models import reference_tier_ops

ARCHS = list(family_gguf_fixtures.CONFIGS)
GREEDY_TOKENS = 12


@functools.lru_cache(maxsize=None)
def reference(arch):
    import transformers as tf

    path = family_gguf_fixtures.fixture(arch)["hf"]
    return tf.AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()


@functools.lru_cache(maxsize=None)
def loaded(arch, device, kind="f32"):
    return metalrt.load(str(family_gguf_fixtures.fixture(arch)[kind]), device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 150])
@pytest.mark.parametrize("arch", ARCHS)
def test_f32_gguf_matches_transformers(arch, length, device):
    model, _ = loaded(arch, device)
    ids = tiny_hybrid.prompt(length, length)
    with torch.no_grad():
        expected = reference(arch)(torch.tensor([ids])).logits[0].double().numpy()
    metalrt.providers.reset_stats()
    got = model.logits(ids)
    assert reference_tier_ops(device) == []
    span = expected.max() - expected.min()
    assert span > 0.5
    assert np.abs(got - expected).max() <= 1e-3 * span


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ARCHS)
def test_f32_gguf_greedy_tokens(arch, device):
    model, tokenizer = loaded(arch, device)
    ids = tiny_hybrid.prompt(40, 3)
    with torch.no_grad():
        expected = reference(arch).generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS,
                                            do_sample=False, pad_token_id=0)[0, 40:].tolist()
    got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids,
                                                    max_tokens=GREEDY_TOKENS,
                                                    max_batched_tokens=16)]
    assert got == expected


def test_llama3_file_has_the_factor_table():
    # The converter wrote llama3 scaling as rope_freqs.weight, not as metadata.
    files = metalrt.loaders.load_model_files(family_gguf_fixtures.fixture("llama3")["f32"])
    assert "rope_scaling" not in files.config and "rope_parameters" not in files.config
    factors = np.asarray(files.weights["rope_freqs.weight"])
    assert factors.shape == (16,) and factors.max() == pytest.approx(8.0) and factors.min() == 1.0
    model, _ = loaded("llama3", "cpu")
    assert model.rope.scaled and not model.rope.neox


def test_mistral_file_is_a_llama_file():
    files = metalrt.loaders.load_model_files(family_gguf_fixtures.fixture("mistral")["f32"])
    assert files.config["model_type"] == "llama"
    model, _ = loaded("mistral", "cpu")
    assert model.arch == "llama" and model.head_dim == 32 and model.rope.base == 1e6
    assert all(layer.attention.window == 0 for layer in model.layers)


def test_q8_0_gguf_keeps_the_scaled_rope():
    # Quantized: logits within the 8-bit weights' error of the float model's.
    model, _ = loaded("qwen3_yarn", "cpu", "q8_0")
    ids = tiny_hybrid.prompt(150, 150)
    with torch.no_grad():
        expected = reference("qwen3_yarn")(torch.tensor([ids])).logits[0].double().numpy()
    got = model.logits(ids)
    assert model.rope.scaled and model.rope.freqs.attention_factor == pytest.approx(0.1 * np.log(4) + 1)
    assert np.abs(got - expected).max() <= 3e-2 * (expected.max() - expected.min())
