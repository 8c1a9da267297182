"""Gemma 3 from GGUF files written by llama.cpp's ``convert_hf_to_gguf.py``
(``family_gguf_fixtures.GEMMA3``: test_gemma3.py's twin, 6 layers of 5 sliding : 1
global with the window 16 below the prompts, linear x8 RoPE on the global layer, with
SmolLM2's vocabulary the converter knows), on the CPU and the (simulated) Metal device.
Bars: the F32 file gives transformers' fp32 logits (max |Δlogit| <= 1e-3 x range) on
prompts of 40 and 150 tokens and its 16 greedy tokens; the Q8_0 file loads quantized and
stays within its 8-bit weights' error (3e-2 x range) and keeps the greedy tokens. The
metadata rules llama.cpp's gemma3 loader applies (pattern, window, local base, score
scale) are checked on metadata alone."""
import functools

import numpy as np
import pytest
import torch  # test dependency (the "test" extra)

import family_gguf_fixtures
import metalrt
import tiny_hybrid
from conftest import DEVICES
from metalrt.loaders.quants import QuantizedWeight
from test_gemma3 import REFERENCE_TIER, assert_close, reference_tier_ops

GREEDY_TOKENS = 16


@functools.lru_cache(maxsize=None)
def reference():
    import transformers as tf

    path = family_gguf_fixtures.fixture("gemma3")["hf"]
    return tf.AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()


@functools.lru_cache(maxsize=None)
def loaded(device, kind="f32"):
    return metalrt.load(str(family_gguf_fixtures.fixture("gemma3")[kind]), device=device)


def reference_logits(ids):
    with torch.no_grad():
        return reference()(torch.tensor([ids])).logits[0].double().numpy()


def greedy(model, tokenizer, ids):
    return [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=GREEDY_TOKENS,
                                                     max_batched_tokens=8)]


@functools.lru_cache(maxsize=None)
def reference_greedy():
    ids = tiny_hybrid.prompt(40, 3)
    with torch.no_grad():
        out = reference().generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS,
                                   do_sample=False, pad_token_id=0)
    return ids, out[0, len(ids):].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 150])
def test_f32_gguf_matches_transformers(length, device):
    model, _ = loaded(device)
    ids = tiny_hybrid.prompt(length, length)
    metalrt.providers.reset_stats()
    got = model.logits(ids)
    assert reference_tier_ops(device) == REFERENCE_TIER[device]
    assert got.shape == (length, 49152)
    assert_close(got, reference_logits(ids))


@pytest.mark.parametrize("device", DEVICES)
def test_f32_gguf_greedy_tokens(device):
    model, tokenizer = loaded(device)
    ids, expected = reference_greedy()
    # Chunks of 8 prompt tokens cross the window, then 15 paged decode steps.
    assert greedy(model, tokenizer, ids) == expected


def test_file_is_read_back_into_transformers_semantics():
    """The converter's names, + 1 on the norms and metadata give the checkpoint's."""
    files = metalrt.loaders.load_model_files(family_gguf_fixtures.fixture("gemma3")["f32"])
    config = files.config
    assert config["model_type"] == "gemma3_text"
    assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert (config["sliding_window"], config["query_pre_attn_scalar"]) == (16, 256)
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1e6, 1e4)
    assert config["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}
    assert config["tie_word_embeddings"] and "lm_head.weight" not in files.weights
    state = reference().state_dict()
    for name in ("model.layers.0.input_layernorm.weight",
                 "model.layers.0.post_attention_layernorm.weight",
                 "model.layers.0.pre_feedforward_layernorm.weight",
                 "model.layers.5.post_feedforward_layernorm.weight",
                 "model.layers.5.self_attn.q_norm.weight", "model.norm.weight"):
        stored = state[name].numpy()
        assert np.abs(stored).max() > 0.1   # randomised, not the zeros of the init
        np.testing.assert_allclose(files.weights[name], stored, rtol=0, atol=1e-7)


def test_q8_0_gguf_within_its_quantization_error():
    model, tokenizer = loaded("cpu", "q8_0")
    files = metalrt.loaders.load_model_files(family_gguf_fixtures.fixture("gemma3")["q8_0"])
    assert isinstance(files.weights["model.layers.0.self_attn.q_proj.weight"], QuantizedWeight)
    ids = tiny_hybrid.prompt(150, 150)
    expected = reference_logits(ids)
    got = model.logits(ids)
    assert np.abs(got - expected).max() <= 3e-2 * (expected.max() - expected.min())
    ids, tokens = reference_greedy()
    assert greedy(model, tokenizer, ids) == tokens


def metadata_config(layers=6, hidden=128, heads=4, head_dim=256, **meta):
    """The gemma3 config keys of a file with metadata ``meta`` (``__`` for ``.``)."""
    from metalrt.loaders.gguf_gemma3 import gemma3_config

    config = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                  head_dim=head_dim)
    return gemma3_config("gemma3", {f"gemma3.{k.replace('__', '.')}": v for k, v in meta.items()},
                         config, "x.gguf")


def test_metadata_rules_of_llama_cpp():
    # Released 27B (62 layers, hidden 5376, 32 heads of 128): query_pre_attn_scalar 168.
    big = metadata_config(62, 5376, 32, 128, attention__sliding_window=1024)
    assert big["query_pre_attn_scalar"] == 168
    assert big["layer_types"][:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert big["layer_types"][60:] == ["sliding_attention"] * 2
    # Files written before rope.freq_base_swa: the local base is 1e4.
    assert big["rope_local_base_freq"] == 1e4
    other = metadata_config(attention__sliding_window=512, attention__sliding_window_pattern=3,
                            rope__freq_base_swa=5e4)
    assert other["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"] * 2
    assert other["rope_local_base_freq"] == 5e4 and other["sliding_window"] == 512
    # No window: every layer global, as llama.cpp does.
    assert metadata_config()["layer_types"] == ["full_attention"] * 6


@pytest.mark.parametrize("key, value", [("attention.sliding_window", -1),
                                        ("attention.sliding_window_pattern", [True, False]),
                                        ("attention.sliding_window_pattern", 2.5)])
def test_bad_metadata(key, value):
    with pytest.raises(ValueError, match=rf"^\[gguf\] x.gguf: metadata key 'gemma3.{key}' must "
                                         r"be a non-negative integer"):
        metadata_config(**{key.replace(".", "__"): value})


def test_final_logit_softcapping_is_refused():
    """A file with gemma3.final_logit_softcapping (Gemma 2's; not computed) is refused."""
    files = metalrt.loaders.load_model_files(family_gguf_fixtures.fixture("gemma3")["f32"])
    config = {**files.config, **metadata_config(final_logit_softcapping=30.0)}
    with pytest.raises(ValueError, match=r"config 'final_logit_softcapping' \(30.0\) is not supported"):
        metalrt.models.build_model(config, files.weights, "cpu")
