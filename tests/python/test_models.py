"""Model parity with Hugging Face transformers on the CPU and the (simulated) Metal
device: randomly initialised Llama (GQA, tied; Llama 3.1 and linear RoPE scaling),
Qwen3 (head_dim 128, q/k norm; and with YaRN), Qwen2 (QKV bias, untied; and with YaRN),
OPT, Phi-3 (merged qkv/gate_up; a window of 24 positions; partial RoPE; Phi-4-mini's LongRoPE, test_phi4_mini_longrope.py) and Mistral (head_dim != hidden / heads;
without a window, and with one of 24 positions on every layer), saved as safetensors and loaded with
metalrt.load. Bars: max |Δlogit| <= 1e-3 x the logit range on prompts of 40 and 150
tokens, 16 greedy tokens equal, no op on the CPU reference tier on Metal."""
import functools

import numpy as np
import pytest

import metalrt
from metalrt.models import build_model

import tiny_hf
import torch  # test dependency (the "test" extra)
from conftest import DEVICES

ARCHS = ["llama", "llama3", "llama_linear", "qwen3", "qwen3_yarn", "qwen2", "qwen2_yarn", "opt",
         "phi3", "phi3_swa", "phi3_partial", "phi4_mini", "mistral", "mistral_swa"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """models(arch) -> (transformers model, its directory); models(arch, device) ->
    metalrt's (model, tokenizer) of that directory; each made once per module."""
    @functools.lru_cache(maxsize=None)
    def get(arch, device=None):
        if device is not None:
            return metalrt.load(get(arch)[1], device=device)
        directory = tmp_path_factory.mktemp(arch)
        return tiny_hf.build(arch, directory), str(directory)
    return get


def reference_tier_ops(device):
    """The ops a Metal run served on the CPU reference tier since the last reset."""
    return [op for op in metalrt.providers.ops()
            if metalrt.providers.stats(op, device)["reference_hits"]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 150])
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_transformers(models, arch, length, device):
    model, _ = models(arch, device)
    ids = tiny_hf.prompt(length, length)
    with torch.no_grad():
        expected = models(arch)[0](torch.tensor([ids])).logits[0].double().numpy()
    metalrt.providers.reset_stats()
    got = model.logits(ids)
    assert reference_tier_ops(device) == []
    assert got.dtype == np.float32 and got.shape == (length, tiny_hf.VOCAB)
    span = expected.max() - expected.min()
    assert span > 0.5   # random weights gave a non-trivial spread
    assert np.abs(got - expected).max() <= 1e-3 * span


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_match_transformers(models, arch, device):
    model, tokenizer = models(arch, device)
    ids = tiny_hf.prompt(40, 1)
    with torch.no_grad():
        expected = models(arch)[0].generate(torch.tensor([ids]), max_new_tokens=16,
                                               do_sample=False, pad_token_id=0)[0, len(ids):].tolist()
    # Prefill in chunks of 8 tokens, then 15 paged decode steps.
    metalrt.providers.reset_stats()
    got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=16,
                                                    max_batched_tokens=8)]
    assert reference_tier_ops(device) == []
    assert got == expected


def test_architecture_registry_errors():
    with pytest.raises(ValueError, match=r"unknown architecture 'mamba' \(supported: gemma3, gemma3_text, gpt_oss, llama, mistral, opt, phi3, qwen2, qwen3, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_moe, qwen3_next\)"):
        build_model({"model_type": "mamba"}, {}, "cpu")
    config = tiny_hf.configs()["qwen2"].to_dict()
    with pytest.raises(ValueError, match=r"^\[qwen2\] missing tensor 'model.embed_tokens.weight'"):
        build_model(config, {}, "cpu")
    weights = {"model.embed_tokens.weight": np.zeros((tiny_hf.VOCAB, 32), np.float32)}
    with pytest.raises(ValueError, match=r"^\[qwen2\] tensor 'model.embed_tokens.weight' has shape \[300, 32\], expected \[300, 64\]"):
        build_model(config, weights, "cpu")
    with pytest.raises(ValueError, match=r"^\[llama\] config lacks 'hidden_size'"):
        build_model({"model_type": "llama"}, {}, "cpu")
