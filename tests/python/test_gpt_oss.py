"""gpt-oss parity with transformers 5.25 on the CPU and the (simulated) Metal device: a
randomly initialised ``GptOssForCausalLM`` at the released per-layer geometry (hidden
2880, 64 query heads : 8 KV heads of 64, intermediate 2880, top-4 experts, YaRN factor
32 / theta 150000 / original context 4096, biased projections, sinks), cut to 2 layers
(one sliding, one full), 6 experts and a 2048-word vocabulary, with the window (32)
below the prompts. On the simulated device, which runs each kernel's threads on the
CPU (~50 MMAC/s here), the twin keeps the released heads but has hidden and
intermediate 256: the released widths would take ~50 GMAC, most of an hour, per
150-token prompt. Weights are made to bite: sinks ~ N(0, 1), biases ~ N(0, 0.2), norms
1 + N(0, 0.2), and gate|up weights large enough that the SwiGLU clamps (limit 7) fire
(gate|up values of std ~5.4).
Bars: max |Δlogit| <= 1e-3 x the logit range on prompts of 40 and 150 tokens, 12 greedy
tokens equal, no op of a step on the reference tier (CPU and Metal).

The released MXFP4 experts (``*_blocks`` / ``*_scales``) run in their own bytes and match
transformers on the weights its ``convert_moe_packed_tensors`` dequantizes."""
import functools
import json
import os

import numpy as np
import pytest
import tokenizers
import torch  # test dependency (the "test" extra)

import metalrt
from metalrt.loaders import load_model_files
from metalrt.models import build_model

from conftest import DEVICES

VOCAB, WINDOW, EXPERTS, LAYERS = 2048, 32, 6, 2


# (hidden, intermediate) of each device's twin; the narrow one also serves the CPU
# gates of the window, the sinks and bad input.
WIDTHS = {"cpu": (2880, 2880), "metal": (256, 256)}
SMALL = "metal"


def config(device="cpu", **overrides):
    import transformers as tf

    hidden, intermediate = WIDTHS[device]
    cfg = tf.GptOssConfig(**{**dict(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=LAYERS,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=EXPERTS,
        num_experts_per_tok=4, sliding_window=WINDOW, bos_token_id=None, eos_token_id=None,
        pad_token_id=None), **overrides})
    cfg._attn_implementation = "eager"   # gpt-oss's own sink attention (no sdpa in 5.25)
    return cfg


def randomize(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif name.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            elif name.endswith("gate_up_proj"):   # [E, hidden, 2I]: values of std ~5.4
                p.copy_(5.4 / p.shape[1] ** 0.5 * torch.randn_like(p))


def save_tokenizer(directory):
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(directory, "tokenizer.json"))


def prompt(length, seed):
    return np.random.default_rng(seed).integers(0, VOCAB, length).tolist()


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """twin(device) -> (transformers GptOssForCausalLM of that device's widths, its
    directory); twin(device, load=True) -> metalrt's (model, tokenizer) of that
    directory on the device; made once per module."""
    @functools.lru_cache(maxsize=None)
    def get(device="cpu", load=False):
        if load:
            return metalrt.load(get(device)[1], device=device)
        import transformers as tf

        torch.manual_seed(3)
        model = tf.GptOssForCausalLM(config(device)).eval()
        randomize(model, 4)
        directory = str(tmp_path_factory.mktemp(f"gpt_oss_{device}"))
        model.save_pretrained(directory, safe_serialization=True)
        save_tokenizer(directory)
        return model, directory
    return get


def files(directory):
    read = load_model_files(directory)
    return read.config, read.weights


def reference_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def reference_tier_ops(device):
    return [op for op in metalrt.providers.ops()
            if metalrt.providers.stats(op, device)["reference_hits"]]


def assert_close(got, expected):
    span = expected.max() - expected.min()
    assert span > 0.5   # random weights gave a non-trivial spread
    assert np.abs(got - expected).max() <= 1e-3 * span


def clamped_shares(model, ids):
    """The shares of layer 0's expert-0 gate values above the SwiGLU limit (7) and of its
    up values beyond ±7, in transformers ``model`` on ``ids``."""
    seen = []
    experts = model.model.layers[0].mlp.experts
    hook = experts.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        reference_logits(model, ids)
    finally:
        hook.remove()
    gate_up = seen[0] @ experts.gate_up_proj[0] + experts.gate_up_proj_bias[0]
    return (gate_up[:, ::2] > 7).float().mean(), (gate_up[:, 1::2].abs() > 7).float().mean()


@pytest.mark.parametrize("widths", sorted(WIDTHS))
def test_the_clamp_bites(twin, widths):
    """The twins' gate|up values pass the SwiGLU limit (7), so the clamps are tested."""
    gate, up = clamped_shares(twin(widths)[0], prompt(40, 40))
    assert gate > 0.05 and up > 0.05


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 150])
def test_logits_match_transformers(twin, length, device):
    model, _ = twin(device, load=True)
    reference, directory = twin(device)
    # The twin's RoPE is the released YaRN (GptOssConfig's default), as saved.
    assert json.load(open(os.path.join(directory, "config.json")))["rope_parameters"] == {
        "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0}
    ids = prompt(length, length)
    expected = reference_logits(reference, ids)
    metalrt.providers.reset_stats()
    got = model.logits(ids)
    assert reference_tier_ops(device) == []
    tier = "metal" if device == "metal" else "cpu_fast"
    for op in ("silu_and_mul", "moe_bias_add"):
        stats = metalrt.providers.stats(op, device)
        assert stats["last_selected"] == f"{tier}_{op}"
    assert metalrt.providers.stats("moe_bias_add", device)["calls"] == 2 * LAYERS
    assert got.dtype == np.float32 and got.shape == (length, VOCAB)
    assert_close(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_tokens_match_transformers(twin, device):
    model, tokenizer = twin(device, load=True)
    ids = prompt(40, 1)
    with torch.no_grad():
        expected = twin(device)[0].generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                      pad_token_id=0)[0, len(ids):].tolist()
    # Prefill in chunks of 16 tokens (chunks cross the window), then paged decode steps.
    metalrt.providers.reset_stats()
    got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=12,
                                                    max_batched_tokens=16)]
    assert reference_tier_ops(device) == []
    assert got == expected


@pytest.mark.parametrize("change", ["window", "sinks"])
def test_window_and_sinks_are_applied(twin, change):
    """Without the window (at the context length) or with the sinks at -inf (no sink),
    transformers' logits move by far more than the bar, and metalrt (on the CPU, the
    narrow twin) follows."""
    import transformers as tf

    reference, directory = twin(SMALL)
    cfg, weights = files(directory)
    ids = prompt(150, 150)
    state = reference.state_dict()
    if change == "window":
        cfg = {**cfg, "sliding_window": 4096}
        other = tf.GptOssForCausalLM(config(SMALL, sliding_window=4096)).eval()
    else:
        weights = {k: (np.full_like(v, -1e30) if k.endswith("sinks") else v) for k, v in weights.items()}
        state = {k: (torch.full_like(v, -1e30) if k.endswith("sinks") else v) for k, v in state.items()}
        other = tf.GptOssForCausalLM(config(SMALL)).eval()
    other.load_state_dict(state)
    expected = reference_logits(other, ids)
    base = reference_logits(reference, ids)
    assert np.abs(expected - base).max() > 0.05 * (base.max() - base.min())
    assert_close(build_model(cfg, weights, "cpu").logits(ids), expected)


@pytest.mark.parametrize("change, message", [
    (dict(sliding_window=200_000), r"^\[gpt_oss\] config 'sliding_window' \(200000\) is larger "
                                   r"than 'max_position_embeddings' \(131072\)"),
    (dict(layer_types=["sliding_attention"]),
     r"^\[gpt_oss\] config 'layer_types' has 1 entries, expected num_hidden_layers = 2"),
    (dict(num_experts_per_tok=7),
     r"^\[gpt_oss\] config 'num_experts_per_tok' \(7\) must be in \[1, num_local_experts = 6\]"),
    (dict(swiglu_limit=-1.0), r"^\[gpt_oss\] config 'swiglu_limit' must be a finite number > 0"),
])
def test_bad_config(twin, change, message):
    cfg, weights = files(twin(SMALL)[1])
    with pytest.raises(ValueError, match=message):
        build_model({**cfg, **change}, weights, "cpu")


def test_bad_tensors(twin):
    cfg, weights = files(twin(SMALL)[1])
    sinks = "model.layers.1.self_attn.sinks"
    with pytest.raises(ValueError, match=rf"^\[gpt_oss\] tensor '{sinks}' has shape \[63\], "
                                         r"expected \[64\]"):
        build_model(cfg, {**weights, sinks: weights[sinks][:63]}, "cpu")
    bias = "model.layers.0.mlp.router.bias"
    with pytest.raises(ValueError, match=rf"^\[gpt_oss\] missing tensor '{bias}'"):
        build_model(cfg, {k: v for k, v in weights.items() if k != bias}, "cpu")
    gate_up = "model.layers.0.mlp.experts.gate_up_proj"
    with pytest.raises(ValueError, match=rf"^\[gpt_oss\] tensor '{gate_up}' has shape "
                                         r"\[6, 512, 256\], expected \[6, 256, 512\]"):
        build_model(cfg, {**weights, gate_up: np.swapaxes(weights[gate_up], 1, 2)}, "cpu")


def mxfp4_twin(twin, seed=9):
    """The narrow twin with every layer's experts in the released MXFP4 layout: random
    codes under E8M0 exponents 118..123 (values up to 6 x 2^-4), and the transformers model
    given the same weights dequantized by transformers' own ``convert_moe_packed_tensors``.
    -> (config, weights with ``*_blocks`` / ``*_scales``, transformers model)."""
    import copy

    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    model, directory = twin(SMALL)
    reference = copy.deepcopy(model)
    cfg, weights = files(directory)
    hidden, inner = WIDTHS[SMALL]
    rng = np.random.default_rng(seed)
    mx = dict(weights)
    for layer in range(LAYERS):
        p = f"model.layers.{layer}.mlp.experts."
        for name, rows, cols in (("gate_up_proj", 2 * inner, hidden), ("down_proj", hidden, inner)):
            blocks = rng.integers(0, 256, (EXPERTS, rows, cols // 32, 16), dtype=np.uint8)
            scales = rng.integers(118, 124, (EXPERTS, rows, cols // 32), dtype=np.uint8)
            del mx[p + name]
            mx[p + name + "_blocks"], mx[p + name + "_scales"] = blocks, scales
            with torch.no_grad():
                getattr(reference.model.layers[layer].mlp.experts, name).copy_(convert_moe_packed_tensors(
                    torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32))
    return cfg, mx, reference


@pytest.mark.parametrize("device", DEVICES)
def test_mxfp4_experts_match_transformers_on_the_dequantized_weights(twin, device):
    """The released MXFP4 experts run in their own bytes (quantized MoE kernels, no float
    copy) and give transformers' logits on the weights it dequantizes."""
    cfg, mx, reference = mxfp4_twin(twin)
    model = build_model(cfg, mx, device)
    experts = model.layers[0].mlp
    assert isinstance(experts.gate_up, metalrt.QuantizedTensor) and experts.gate_up.format == "mxfp4"
    ids = prompt(40, 7)
    metalrt.providers.reset_stats()
    got = model.logits(ids)
    assert reference_tier_ops(device) == []
    assert metalrt.providers.stats("moe_matmul_bt", device)["calls"] == 2 * LAYERS
    assert_close(got, reference_logits(reference, ids))


def test_mxfp4_experts_of_the_wrong_shape_are_refused_by_name(twin):
    cfg, mx, _ = mxfp4_twin(twin)
    p = "model.layers.0.mlp.experts."
    bad = {**mx, p + "gate_up_proj_scales": mx[p + "gate_up_proj_scales"][:, :-1]}
    with pytest.raises(ValueError, match=rf"^\[gpt_oss\] tensor '{p}gate_up_proj_scales' has shape "
                                         r"\[6, 511, 8\], expected \[6, 512, 8\]"):
        build_model(cfg, bad, "cpu")
    missing = {k: v for k, v in mx.items() if k != p + "down_proj_scales"}
    with pytest.raises(ValueError, match=rf"^\[gpt_oss\] missing tensor '{p}down_proj_scales'"):
        build_model(cfg, missing, "cpu")