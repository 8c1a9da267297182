"""Every RoPE variant's frequencies and attention factor (``metalrt.models.rope``)
against transformers' own rope init functions (``ROPE_INIT_FUNCTIONS``, and each
model's default), from the config as transformers saves it; and the ValueErrors of a
malformed one."""
import numpy as np
import pytest

from metalrt.models.rope import rope_frequencies

HEAD_DIM = 64
LLAMA = dict(hidden_size=256, num_attention_heads=4, head_dim=HEAD_DIM, max_position_embeddings=8192)
SHORT = [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)]
LONG = [2.0 + 0.5 * i for i in range(HEAD_DIM // 2)]
LONG_PARTIAL = LONG[:24]

# (name, transformers config class, its arguments, rotary dim)
CASES = [
    ("default", "LlamaConfig", dict(LLAMA, rope_theta=5e5), HEAD_DIM),
    ("linear", "LlamaConfig", dict(LLAMA, rope_parameters={
        "rope_type": "linear", "rope_theta": 1e4, "factor": 8.0}), HEAD_DIM),
    ("llama3", "LlamaConfig", dict(LLAMA, rope_parameters={
        "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), HEAD_DIM),
    # Qwen3's long-context recipe (factor 4 over 32k) and gpt-oss's (no truncation).
    ("yarn", "Qwen3Config", dict(LLAMA, max_position_embeddings=131072, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
        "original_max_position_embeddings": 32768}), HEAD_DIM),
    ("yarn_gpt_oss", "LlamaConfig", dict(LLAMA, max_position_embeddings=131072, rope_parameters={
        "rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096}), HEAD_DIM),
    ("yarn_mscale", "LlamaConfig", dict(LLAMA, max_position_embeddings=16384, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "mscale": 1.0,
        "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}), HEAD_DIM),
    ("longrope", "Phi3Config", dict(LLAMA, max_position_embeddings=131072,
                                    original_max_position_embeddings=4096, rope_parameters={
        "rope_type": "longrope", "rope_theta": 1e4, "short_factor": SHORT, "long_factor": LONG}),
     HEAD_DIM),
    # Phi-4-mini: LongRoPE over the leading 3/4 of each head.
    ("longrope_partial", "Phi3Config", dict(LLAMA, max_position_embeddings=131072,
                                            original_max_position_embeddings=4096,
                                            rope_parameters={
        "rope_type": "longrope", "rope_theta": 1e4, "partial_rotary_factor": 0.75,
        "short_factor": SHORT[:24], "long_factor": LONG_PARTIAL}), 48),
    ("partial", "Phi3Config", dict(LLAMA, rope_parameters={
        "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75}), 48),
]


def reference(cls, kwargs, seq_len=None):
    import transformers as tf
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = getattr(tf, cls)(**kwargs)
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        module = {"LlamaConfig": tf.models.llama.modeling_llama.LlamaRotaryEmbedding,
                  "Phi3Config": tf.models.phi3.modeling_phi3.Phi3RotaryEmbedding}[cls]
        inv_freq, attention = module.compute_default_rope_parameters(config)
    else:
        inv_freq, attention = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return config, inv_freq.double().numpy(), attention


@pytest.mark.parametrize("name, cls, kwargs, rotary", CASES, ids=[c[0] for c in CASES])
def test_frequencies_match_transformers(name, cls, kwargs, rotary):
    config, expected, attention = reference(cls, kwargs)
    got = rope_frequencies(config.to_dict(), rotary, name)
    assert got.rotary_dim == rotary and got.inv_freq.shape == (rotary // 2,)
    # transformers computes in float32 (a few of its ulps).
    np.testing.assert_allclose(got.inv_freq, expected, rtol=4e-7, atol=0)
    assert got.attention_factor == pytest.approx(attention, rel=1e-12)
    assert got.plain == (name in ("default", "partial"))
    if name.startswith("longrope"):
        # transformers switches to the long factors past the original context.
        _, long, long_attention = reference(cls, kwargs, seq_len=4097)
        np.testing.assert_allclose(got.long_inv_freq, long, rtol=4e-7, atol=0)
        assert long_attention == pytest.approx(got.attention_factor)
        assert got.inv_freq_for(4095) is got.inv_freq
        assert got.inv_freq_for(4096) is got.long_inv_freq
    else:
        assert got.inv_freq_for(10 ** 6) is got.inv_freq


def test_scaled_variants_change_the_frequencies():
    # A check that the table would catch a variant read as plain RoPE.
    plain = rope_frequencies(reference(*CASES[0][1:3])[0].to_dict(), HEAD_DIM, "x").inv_freq
    for name, cls, kwargs, rotary in CASES[1:6]:
        got = rope_frequencies(reference(cls, kwargs)[0].to_dict(), rotary, name)
        base = rope_frequencies({"rope_theta": got.base}, rotary, name).inv_freq
        assert np.abs(got.inv_freq / base - 1).max() > 0.5, name
    assert plain.shape == (HEAD_DIM // 2,)


def test_gguf_factor_table_divides_the_frequencies():
    factors = np.linspace(1.0, 8.0, HEAD_DIM // 2, dtype=np.float32)
    got = rope_frequencies({"rope_theta": 5e5}, HEAD_DIM, "llama", freq_factors=factors)
    base = 5e5 ** -(np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    np.testing.assert_allclose(got.inv_freq, base / factors, rtol=1e-15)
    assert not got.plain


@pytest.mark.parametrize("config, factors, message", [
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, None,
     r"\[m\] unsupported RoPE scaling 'dynamic' \(supported: default, linear, llama3, yarn, longrope\)"),
    ({"rope_parameters": {"rope_type": "linear"}}, None, r"\[m rope_scaling\] config lacks 'factor'"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, None,
     r"\[m rope_scaling\] config lacks 'original_max_position_embeddings'"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 0.0, "original_max_position_embeddings": 64}},
     None, r"'factor' must be a finite number > 0, got 0.0"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG[:31],
                          "original_max_position_embeddings": 64}, "max_position_embeddings": 256},
     None, r"\[m rope_scaling\] config 'long_factor' has 31 values, expected 32 finite numbers > 0"),
    ({"rope_parameters": {"rope_type": "longrope", "long_factor": LONG,
                          "original_max_position_embeddings": 64}, "max_position_embeddings": 256},
     None, r"config 'short_factor' must be a list of 32 numbers, got NoneType"),
    ({}, np.ones(31, np.float32),
     r"\[m\] tensor 'rope_freqs.weight' has 31 values, expected 32 finite numbers > 0"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, np.ones(32, np.float32),
     r"tensor 'rope_freqs.weight' and rope_scaling 'linear' both scale"),
    ({"rope_parameters": {"sliding_attention": {"rope_theta": 1e4}}}, None,
     r"\[m\] config 'rope_parameters' has no entry for layer type None"),
])
def test_malformed_rope_is_a_value_error_naming_the_key(config, factors, message):
    with pytest.raises(ValueError, match=message):
        rope_frequencies(config, HEAD_DIM, "m", freq_factors=factors)


def test_per_layer_type_parameters():
    # transformers 5's Gemma 3 config: one set per layer type.
    config = {"rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}}}
    local = rope_frequencies(config, 256, "gemma3", "sliding_attention")
    full = rope_frequencies(config, 256, "gemma3", "full_attention")
    assert local.plain and local.base == 1e4
    np.testing.assert_allclose(full.inv_freq, 1e6 ** -(np.arange(0, 256, 2) / 256) / 8.0)
