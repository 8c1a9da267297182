"""Bad hybrid and MoE checkpoints are ValueErrors naming the config key or tensor: a
``layer_types`` of the wrong length or with an unknown entry, value heads that are not
a multiple of key heads, attention heads not a multiple of KV heads, more experts per
token than experts, a fused expert tensor of another expert count, a missing expert
tensor."""
import json

import numpy as np
import pytest

import tiny_hybrid
from metalrt.loaders import load_model_files
from metalrt.models import build_model


@pytest.fixture(scope="module")
def files():
    return {arch: load_model_files(str(tiny_hybrid.path(arch)))
            for arch in ("qwen3_next", "qwen3_5_moe", "qwen3_moe")}


def build(files, arch, config_changes=(), drop=(), replace=()):
    config = {**files[arch].config, **dict(config_changes)}
    weights = {k: v for k, v in files[arch].weights.items() if k not in drop}
    weights.update(dict(replace))
    return build_model(config, weights, "cpu")


def test_layer_types_of_the_wrong_length(files):
    with pytest.raises(ValueError, match=r"^\[qwen3_next\] config 'layer_types' has 3 entries, "
                                         r"expected num_hidden_layers = 4"):
        build(files, "qwen3_next", {"layer_types": ["linear_attention"] * 3})
    with pytest.raises(ValueError, match=r"config 'layer_types' holds \['sliding_attention'\]"):
        build(files, "qwen3_next", {"layer_types": ["sliding_attention"] * 4})


def test_head_ratios_that_do_not_divide(files):
    with pytest.raises(ValueError, match=r"^\[qwen3_next\] config 'linear_num_value_heads' \(3\) "
                                         r"must be a multiple of 'linear_num_key_heads' \(2\)"):
        build(files, "qwen3_next", {"linear_num_value_heads": 3})
    with pytest.raises(ValueError, match=r"^\[qwen3_5_moe\] config 'num_attention_heads' \(4\) "
                                         r"must be a multiple of 'num_key_value_heads' \(3\)"):
        build(files, "qwen3_5_moe", {"num_key_value_heads": 3})


def test_expert_counts_that_do_not_fit(files):
    with pytest.raises(ValueError, match=r"^\[qwen3_moe\] config 'num_experts_per_tok' \(9\) must "
                                         r"be in \[1, num_experts = 8\]"):
        build(files, "qwen3_moe", {"num_experts_per_tok": 9})
    # Fused experts (released Qwen3.5-MoE layout) holding 6 experts where the config says 8.
    p = "model.layers.0.mlp.experts."
    per_expert = [k for k in files["qwen3_5_moe"].weights if k.startswith(p)]
    fused = {p + "gate_up_proj": np.zeros((6, 64, 64), np.float32),
             p + "down_proj": np.zeros((6, 64, 32), np.float32)}
    with pytest.raises(ValueError, match=r"^\[qwen3_5_moe\] tensor 'model.layers.0.mlp.experts."
                                         r"gate_up_proj' has shape \[6, 64, 64\], expected "
                                         r"\[8, 64, 64\]"):
        build(files, "qwen3_5_moe", drop=per_expert, replace=fused)


def test_missing_expert_tensor(files):
    name = "model.layers.0.mlp.experts.3.up_proj.weight"
    with pytest.raises(ValueError, match=rf"^\[qwen3_moe\] missing tensor '{name}'"):
        build(files, "qwen3_moe", drop=[name])
    name = "model.layers.1.linear_attn.in_proj_ba.weight"
    with pytest.raises(ValueError, match=rf"^\[qwen3_next\] missing tensor '{name}'"):
        build(files, "qwen3_next", drop=[name])


def test_gdn_head_counts_below_one(files):
    # Was a ZeroDivisionError (value heads % 0 key heads).
    for key in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                "linear_value_head_dim"):
        with pytest.raises(ValueError, match=rf"^\[qwen3_next\] config '{key}' must be >= 1, got 0"):
            build(files, "qwen3_next", {key: 0})
    with pytest.raises(ValueError, match=r"^\[qwen3_5_moe\] config 'num_attention_heads' must be "
                                         r">= 1, got 0"):
        build(files, "qwen3_5_moe", {"num_attention_heads": 0, "num_key_value_heads": 0})


def test_layer_types_that_are_not_a_list(files):
    # A string was read as a list of its characters ("has 14 entries").
    with pytest.raises(ValueError, match=r"^\[qwen3_next\] config 'layer_types' must be a list of "
                                         r"num_hidden_layers = 4 entries, got str"):
        build(files, "qwen3_next", {"layer_types": "full_attention"})


def test_rotary_dim_beyond_head_dim(files):
    # Was raised by qk_norm_rope at the first forward step instead of at load.
    rope = {**files["qwen3_next"].config["rope_parameters"], "partial_rotary_factor": 2.0}
    with pytest.raises(ValueError, match=r"^\[qwen3_next\] head_dim 32 x partial_rotary_factor 2.0 "
                                         r"gives rotary dim 64; expected a positive even number "
                                         r"<= head_dim"):
        build(files, "qwen3_next", {"rope_parameters": rope})


@pytest.mark.parametrize("fused, rows", [("in_proj_qkvz", 256), ("in_proj_ba", 8)])
@pytest.mark.parametrize("change", [-1, 1])
def test_grouped_projection_of_the_wrong_row_count(files, fused, rows, change):
    # One row short was an IndexError of the regrouping; one row more loaded silently.
    name = f"model.layers.1.linear_attn.{fused}.weight"
    weight = files["qwen3_next"].weights[name]
    assert weight.shape[0] == rows
    bad = np.zeros((rows + change, weight.shape[1]), np.float32)
    with pytest.raises(ValueError, match=rf"^\[qwen3_next\] tensor '{name}' has shape "
                                         rf"\[{rows + change}, 64\], expected \[{rows}, hidden_size\]"):
        build(files, "qwen3_next", replace={name: bad})
