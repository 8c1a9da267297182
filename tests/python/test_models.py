"""Model parity with Hugging Face transformers on the CPU: randomly initialised Llama
(GQA, tied; and Llama 3.1 RoPE scaling), Qwen3 (head_dim 128, q/k norm), Qwen2 (QKV
bias, untied), OPT and Phi-3 (merged qkv/gate_up; partial RoPE), saved as safetensors and loaded with metalrt.load."""
import numpy as np
import pytest

import metalrt
from metalrt.models import build_model

import tiny_hf
import torch  # test dependency (the "test" extra)

ARCHS = ["llama", "llama3", "qwen3", "qwen2", "opt", "phi3", "phi3_partial"]


@pytest.fixture(scope="module", params=ARCHS)
def pair(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    reference = tiny_hf.build(request.param, directory)
    model, tokenizer = metalrt.load(str(directory), device="cpu")
    return reference, model, tokenizer


def test_logits_match_transformers(pair):
    reference, model, _ = pair
    ids = tiny_hf.prompt(37, 0)
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0].double().numpy()
    got = model.logits(ids)
    assert got.dtype == np.float32 and got.shape == (37, tiny_hf.VOCAB)
    span = expected.max() - expected.min()
    assert span > 0.5   # random weights gave a non-trivial spread
    assert np.abs(got - expected).max() <= 1e-3 * span


def test_greedy_tokens_match_transformers(pair):
    reference, model, tokenizer = pair
    ids = tiny_hf.prompt(21, 1)
    with torch.no_grad():
        expected = reference.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                                      pad_token_id=0)[0, len(ids):].tolist()
    # Prefill in chunks of 8 tokens, then 15 paged decode steps.
    got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=16,
                                                    max_batched_tokens=8)]
    assert got == expected


def test_architecture_registry_errors():
    with pytest.raises(ValueError, match=r"unknown architecture 'mamba' \(supported: llama, opt, phi3, qwen2, qwen3, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_moe, qwen3_next\)"):
        build_model({"model_type": "mamba"}, {}, "cpu")
    config = tiny_hf.configs()["qwen2"].to_dict()
    with pytest.raises(ValueError, match=r"^\[qwen2\] missing tensor 'model.embed_tokens.weight'"):
        build_model(config, {}, "cpu")
    weights = {"model.embed_tokens.weight": np.zeros((tiny_hf.VOCAB, 32), np.float32)}
    with pytest.raises(ValueError, match=r"^\[qwen2\] tensor 'model.embed_tokens.weight' has shape \[300, 32\], expected \[300, 64\]"):
        build_model(config, weights, "cpu")
    with pytest.raises(ValueError, match=r"^\[llama\] config lacks 'hidden_size'"):
        build_model({"model_type": "llama"}, {}, "cpu")
