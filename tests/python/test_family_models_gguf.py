"""Dense families whose GGUF files carry their RoPE variant, from files written by
llama.cpp's converter (``family_gguf_fixtures``), on the CPU and the (simulated) Metal
device: Llama 3.1 (``rope_freqs.weight``, llama.cpp's per-frequency factor table, on
interleaved Q/K rows), Qwen3 with YaRN (``rope.scaling.*`` metadata) and Mistral
(``MistralForCausalLM`` without a window, converted as a ``llama`` file) and Phi-4-mini
(``phi3``: fused qkv and gate|up, partial RoPE, LongRoPE factor tensors; the 40-token
prompt on the short factors, the 150-token one on the long). Bars: the F32
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

ARCHS = list(family_gguf_fixtures.CONFIGS) + ["phi4_mini"]
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


def test_phi3_file_carries_phi4_minis_long_rope():
    files = metalrt.loaders.load_model_files(family_gguf_fixtures.fixture("phi4_mini")["f32"])
    spec = family_gguf_fixtures.PHI4_MINI[1]
    rope = files.config["rope_parameters"]
    assert files.config["model_type"] == "phi3" and files.config["tie_word_embeddings"]
    np.testing.assert_allclose(rope["long_factor"], spec["rope_parameters"]["long_factor"], rtol=1e-7)
    np.testing.assert_allclose(rope["short_factor"], spec["rope_parameters"]["short_factor"], rtol=1e-7)
    assert rope["original_max_position_embeddings"] == 64
    model, _ = loaded("phi4_mini", "cpu")
    freqs = model.rope.freqs
    assert model.rope.rotary_dim == 24 and model.rope.neox and model.rope_switch == 64
    # The converter's attention factor: sqrt(1 + ln 32 / ln 64), in float32.
    assert freqs.attention_factor == pytest.approx(np.sqrt(1 + np.log(32) / np.log(64)), rel=1e-7)


def test_q8_0_gguf_keeps_the_scaled_rope():
    # Quantized: logits within the 8-bit weights' error of the float model's.
    model, _ = loaded("qwen3_yarn", "cpu", "q8_0")
    ids = tiny_hybrid.prompt(150, 150)
    with torch.no_grad():
        expected = reference("qwen3_yarn")(torch.tensor([ids])).logits[0].double().numpy()
    got = model.logits(ids)
    assert model.rope.scaled and model.rope.freqs.attention_factor == pytest.approx(0.1 * np.log(4) + 1)
    assert np.abs(got - expected).max() <= 3e-2 * (expected.max() - expected.min())


def test_q8_0_phi3_gguf_runs_its_fused_projections_quantized():
    model, _ = loaded("phi4_mini", "cpu", "q8_0")
    layer = model.layers[0]
    assert [p.weight.format for p in layer.attention.qkv] == ["q8_0"]
    ids = tiny_hybrid.prompt(150, 150)
    with torch.no_grad():
        expected = reference("phi4_mini")(torch.tensor([ids])).logits[0].double().numpy()
    got = model.logits(ids)
    assert np.abs(got - expected).max() <= 3e-2 * (expected.max() - expected.min())


def _phi3_file(metadata=None, factors=("rope_factors_long", "rope_factors_short"), pairs=12,
               ggml_type=None):
    """A stand-in GGUF file of a phi3 model (head_dim 32) for ``gguf_phi3.phi3_config``."""
    from types import SimpleNamespace

    from gguf import GGMLQuantizationType as T

    meta = {"phi3.rope.dimension_count": 24, "phi3.rope.scaling.original_context_length": 64,
            **(metadata or {})}
    tensors = {f"{name}.weight": SimpleNamespace(ggml_type=ggml_type or T.F32, shape=(pairs,))
               for name in factors}
    return SimpleNamespace(metadata=meta, path="tiny.gguf", tensors=tensors,
                           raw=lambda name: np.ones(pairs, np.float32).view(np.uint8))


@pytest.mark.parametrize("file, message", [
    (dict(metadata={"phi3.rope.dimension_count": 40}),
     r"tiny.gguf: metadata key 'phi3.rope.dimension_count' must be an even integer in \[2, head_dim = 32\], got 40"),
    (dict(metadata={"phi3.attention.sliding_window": -1}),
     r"'phi3.attention.sliding_window' must be a non-negative integer, got -1"),
    (dict(factors=("rope_factors_long",)),
     r"tensor 'rope_factors_long.weight' without 'rope_factors_short.weight'"),
    (dict(metadata={"phi3.rope.scaling.original_context_length": None}),
     r"need metadata key 'phi3.rope.scaling.original_context_length'"),
    (dict(pairs=11), r"tensor 'rope_factors_long.weight' must be F32 of shape \[12\] .* got F32 \[11\]"),
])
def test_a_bad_phi3_file_is_refused_naming_the_key_or_tensor(file, message):
    from metalrt.loaders.gguf_phi3 import phi3_config

    with pytest.raises(ValueError, match=message):
        phi3_config("phi3", _phi3_file(**file), {"head_dim": 32, "rope_theta": 1e4})
    assert phi3_config("phi3", _phi3_file(), {"head_dim": 32, "rope_theta": 1e4})[
        "rope_parameters"]["long_factor"] == [1.0] * 12
