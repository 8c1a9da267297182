"""Gemma 3 text parity with transformers on the CPU and the (simulated) Metal device:
a randomly initialised ``Gemma3ForCausalLM`` at the released per-layer geometry (head_dim
256, 4 query heads : 1 KV head, 5 sliding : 1 global layers, linear x8 RoPE on the global
layers, tied embeddings), cut to 6 layers, hidden 128 and a 300-word vocabulary, with the
window (16) below the prompts; and the text model of a ``Gemma3ForConditionalGeneration``
directory. Bars: max |Δlogit| <= 1e-3 x the logit range on prompts of 40 and 150 tokens,
16 greedy tokens equal.

On both devices no op of a step runs on the reference tier (``REFERENCE_TIER`` pins the
empty lists: the Metal paged-attention kernels take the window). On the CPU every
attention of a step (the sliding layers' included) is served by a fast provider: the
steps run with the oracle (``cpu_paged_attention``) disabled, so a call it would have
served fails."""
import contextlib
import functools
import json
import shutil

import numpy as np
import pytest
import torch  # test dependency (the "test" extra)

import metalrt
from metalrt.loaders import load_model_files
from metalrt.models import build_model

import tiny_hf
from conftest import DEVICES

WINDOW = 16
# The ops a Gemma 3 step serves on the reference tier, per device.
REFERENCE_TIER = {"cpu": [], "metal": []}


def text_config(**overrides):
    import transformers as tf

    return tf.Gemma3TextConfig(**{**dict(
        vocab_size=tiny_hf.VOCAB, hidden_size=128, intermediate_size=192, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=WINDOW,
        max_position_embeddings=512, query_pre_attn_scalar=256, initializer_range=0.08,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        bos_token_id=None, eos_token_id=None, pad_token_id=None), **overrides})


def randomize_norms(model, seed):
    """Gemma's norms hold w of (1 + w), zeros at init: random ones make them bite."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.3 * torch.randn_like(p))


def save(model, directory):
    model.save_pretrained(directory, safe_serialization=True)
    tiny_hf.save_tokenizer(directory)
    return str(directory)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """twin() -> (transformers Gemma3ForCausalLM, its directory); twin(device) ->
    metalrt's (model, tokenizer) of that directory; made once per module."""
    @functools.lru_cache(maxsize=None)
    def get(device=None):
        if device is not None:
            return metalrt.load(get()[1], device=device)
        import transformers as tf

        torch.manual_seed(3)
        model = tf.Gemma3ForCausalLM(text_config()).eval()
        randomize_norms(model, 4)
        return model, save(model, tmp_path_factory.mktemp("gemma3"))
    return get


def files(directory):
    """(config, weights) of a model directory."""
    read = load_model_files(directory)
    return read.config, read.weights


def reference_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


@contextlib.contextmanager
def fast_attention_only(device):
    """On the CPU, paged_attention without its oracle: a call no fast provider takes raises."""
    if device == "cpu":
        metalrt.providers.set_enabled("cpu_paged_attention", False)
    try:
        yield
    finally:
        metalrt.providers.set_enabled("cpu_paged_attention", True)


def reference_tier_ops(device):
    return [op for op in metalrt.providers.ops()
            if metalrt.providers.stats(op, device)["reference_hits"]]


def assert_close(got, expected):
    span = expected.max() - expected.min()
    assert span > 0.5   # random weights gave a non-trivial spread
    assert np.abs(got - expected).max() <= 1e-3 * span


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 150])
def test_logits_match_transformers(twin, length, device):
    model, _ = twin(device)
    ids = tiny_hf.prompt(length, length)
    expected = reference_logits(twin()[0], ids)
    metalrt.providers.reset_stats()
    with fast_attention_only(device):
        got = model.logits(ids)
    assert reference_tier_ops(device) == REFERENCE_TIER[device]
    if device == "cpu":
        assert metalrt.providers.stats("paged_attention", "cpu")["calls"] == 6   # one per layer
    assert got.dtype == np.float32 and got.shape == (length, tiny_hf.VOCAB)
    assert_close(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_tokens_match_transformers(twin, device):
    model, tokenizer = twin(device)
    ids = tiny_hf.prompt(40, 1)
    with torch.no_grad():
        expected = twin()[0].generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                                      pad_token_id=0)[0, len(ids):].tolist()
    # Prefill in chunks of 8 tokens (chunks cross the window), then 15 paged decode steps.
    metalrt.providers.reset_stats()
    with fast_attention_only(device):
        got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=16,
                                                        max_batched_tokens=8)]
    assert reference_tier_ops(device) == REFERENCE_TIER[device]
    assert got == expected


def test_window_is_applied(twin, tmp_path):
    """The same weights with the window at the context length (no token falls out of
    it): transformers' logits move by far more than the bar, and metalrt follows."""
    import transformers as tf

    reference, directory = twin()
    ids = tiny_hf.prompt(150, 150)
    config, weights = files(directory)
    unwindowed = build_model({**config, "sliding_window": 512}, weights, "cpu").logits(ids)
    windowed = reference_logits(reference, ids)
    span = windowed.max() - windowed.min()
    assert np.abs(unwindowed - windowed).max() > 0.05 * span
    full = tf.Gemma3ForCausalLM(text_config(sliding_window=512)).eval()
    full.load_state_dict(reference.state_dict())
    assert_close(unwindowed, reference_logits(full, ids))


def test_older_config_keys(twin, tmp_path):
    """A transformers 4.5x config (``rope_theta``, ``rope_local_base_freq``,
    ``rope_scaling``, ``sliding_window_pattern``, no ``layer_types``) reads as the same
    model."""
    reference, directory = twin()
    config = json.load(open(f"{directory}/config.json"))
    rope = config.pop("rope_parameters")
    del config["layer_types"], config["_sliding_window_pattern"]
    config.update(rope_theta=rope["full_attention"]["rope_theta"],
                  rope_local_base_freq=rope["sliding_attention"]["rope_theta"],
                  rope_scaling={"rope_type": "linear", "factor": 8.0}, sliding_window_pattern=6)
    shutil.copytree(directory, tmp_path / "old")
    json.dump(config, open(tmp_path / "old" / "config.json", "w"))
    model, _ = metalrt.load(str(tmp_path / "old"), device="cpu")
    ids = tiny_hf.prompt(40, 40)
    assert_close(model.logits(ids), reference_logits(reference, ids))


def test_conditional_generation_directory(tmp_path):
    """``Gemma3ForConditionalGeneration`` (model_type gemma3, ``text_config``, weights
    saved as ``language_model.model.*`` beside a vision tower): its text model."""
    import transformers as tf

    vision = tf.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, image_size=28, patch_size=14)
    torch.manual_seed(5)
    reference = tf.Gemma3ForConditionalGeneration(tf.Gemma3Config(
        text_config=text_config().to_dict(), vision_config=vision.to_dict(),
        mm_tokens_per_image=4)).eval()
    randomize_norms(reference, 6)
    model, _ = metalrt.load(save(reference, tmp_path), device="cpu")
    ids = tiny_hf.prompt(40, 2)
    assert_close(model.logits(ids), reference_logits(reference, ids))


@pytest.mark.parametrize("change, message", [
    (dict(layer_types=["sliding_attention"] * 5 + ["chunked_attention"]),
     r"^\[gemma3\] config 'layer_types' holds \['chunked_attention'\]; expected "
     r"'sliding_attention' or 'full_attention'"),
    (dict(layer_types=["full_attention"] * 5),
     r"^\[gemma3\] config 'layer_types' has 5 entries, expected num_hidden_layers = 6"),
    (dict(sliding_window=0), r"^\[gemma3\] config 'sliding_window' must be >= 1, got 0"),
    (dict(sliding_window=1024), r"^\[gemma3\] config 'sliding_window' \(1024\) is larger than "
                                r"'max_position_embeddings' \(512\)"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
     r"^\[gemma3\] config 'rope_parameters' must hold one entry per layer type"),
    (dict(final_logit_softcapping=30.0),
     r"^\[gemma3\] config 'final_logit_softcapping' \(30.0\) is not supported"),
    (dict(attn_logit_softcapping=50.0),
     r"^\[gemma3\] config 'attn_logit_softcapping' \(50.0\) is not supported"),
    (dict(hidden_activation="gelu"), r"^\[gemma3\] unsupported hidden_activation 'gelu'"),
    (dict(use_bidirectional_attention=True),
     r"^\[gemma3\] config 'use_bidirectional_attention' true is not supported"),
])
def test_bad_config(twin, change, message):
    config, weights = files(twin()[1])
    with pytest.raises(ValueError, match=message):
        build_model({**config, **change}, weights, "cpu")
    build_model(config, weights, "cpu")   # the unchanged config still builds


def test_missing_q_norm(twin):
    config, weights = files(twin()[1])
    name = "model.layers.0.self_attn.q_norm.weight"
    with pytest.raises(ValueError, match=rf"^\[gemma3\] missing tensor '{name}'"):
        build_model(config, {k: v for k, v in weights.items() if k != name}, "cpu")


# Gemma's turn format (written for this test): bos, the system prompt folded into the
# first user turn, "assistant" spoken as "model", roles checked to alternate, and text
# parts of list contents joined.
GEMMA_STYLE_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate user/assistant/user/...') }}{% endif %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% if loop.first %}{{ prefix }}{% endif %}"
    "{% if m['content'] is string %}{{ m['content'] | trim }}"
    "{% else %}{% for part in m['content'] if part['type'] == 'text' %}"
    "{{ part['text'] | trim }}{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def test_chat_template_renders_as_transformers(twin, tmp_path):
    """The directory's own chat template (here in Gemma's turn format) renders as
    transformers' ``apply_chat_template`` does; a template that raises is a ValueError."""
    import transformers as tf

    directory = tmp_path / "chat"
    shutil.copytree(twin()[1], directory)
    json.dump({"bos_token": "t2", "eos_token": "t1", "chat_template": GEMMA_STYLE_TEMPLATE},
              open(directory / "tokenizer_config.json", "w"))
    _, tokenizer = metalrt.load(str(directory), device="cpu")
    reference = tf.AutoTokenizer.from_pretrained(str(directory))
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": " t5 t6 "},
                {"role": "assistant", "content": [{"type": "text", "text": "t7"}]},
                {"role": "user", "content": "t8"}]
    for generation in (True, False):
        got = tokenizer.apply_chat_template(messages, add_generation_prompt=generation)
        assert got == reference.apply_chat_template(messages, tokenize=False,
                                                    add_generation_prompt=generation)
    assert got.startswith("t2<start_of_turn>user\nBe brief.\n\nt5 t6<end_of_turn>\n")
    with pytest.raises(ValueError, match="roles must alternate"):
        tokenizer.apply_chat_template(messages[2:])
