"""mlx-lm's saved layout (``loaders/mlx_layout``, ``loaders/mlx_quant``): stacked
``switch_mlp`` experts as one quantized matrix of E·N rows (views, no copy), the
``language_model.`` prefix, the hybrids' conv layout and +1 norms, and the bits a
per-layer override declares checked against the shapes."""
import numpy as np
import pytest

from metalrt.loaders.mlx_layout import to_transformers
from metalrt.loaders.mlx_quant import group_quantized

E, N, K, GS = 4, 8, 64, 32


def _stack(bits):
    words = K * bits // 32
    return {"weight": np.arange(E * N * words, dtype=np.uint32).reshape(E, N, words),
            "scales": np.ones((E, N, K // GS), np.float32),
            "biases": np.zeros((E, N, K // GS), np.float32)}


def _tensors(layers):
    return {f"{layer}.{field}": ("model.safetensors", a, "U32" if field == "weight" else "F32")
            for layer, fields in layers.items() for field, a in fields.items()}


def test_switch_mlp_stack_is_one_quantized_matrix_of_views():
    layer = "language_model.model.layers.0.mlp.switch_mlp.gate_proj"
    tensors = _tensors({layer: _stack(4)})
    config = {"quantization": {"group_size": GS, "bits": 4}}
    weights = to_transformers(group_quantized(config, tensors, "config.json"))
    w = weights["model.language_model.layers.0.mlp.experts.gate_proj.weight"]
    assert w.shape == (E * N, K) and w.bits == 4 and w.group_size == GS
    assert np.shares_memory(w.data, tensors[layer + ".weight"][1])
    np.testing.assert_array_equal(w.data[N], tensors[layer + ".weight"][1][1, 0])


def test_override_bits_that_the_shapes_contradict_are_refused():
    layer = "model.layers.0.mlp.gate"
    config = {"quantization": {"group_size": GS, "bits": 4, layer: {"group_size": GS, "bits": 8}}}
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'model.layers.0.mlp.gate.weight'"
                                         r".* holds 4-bit values, but .* says 8 bits"):
        group_quantized(config, _tensors({layer: {k: v[0] for k, v in _stack(4).items()}}),
                        "config.json")


def test_hybrid_conv_and_norms_back_to_transformers():
    conv = np.arange(12 * 4, dtype=np.float32).reshape(12, 4, 1)   # mlx-lm: [C, K, 1]
    weights = {"model.layers.0.linear_attn.conv1d.weight": conv,
               "model.layers.0.input_layernorm.weight": np.full(8, 1.25, np.float32),
               "model.layers.0.linear_attn.norm.weight": np.full(8, 1.25, np.float32),
               "model.norm.weight": np.full(8, 0.5, np.float32)}
    out = to_transformers(weights)
    np.testing.assert_array_equal(out["model.layers.0.linear_attn.conv1d.weight"],
                                  conv.transpose(0, 2, 1))
    np.testing.assert_array_equal(out["model.layers.0.input_layernorm.weight"], 0.25)
    np.testing.assert_array_equal(out["model.norm.weight"], -0.5)
    np.testing.assert_array_equal(out["model.layers.0.linear_attn.norm.weight"], 1.25)
    # A transformers checkpoint ([C, 1, K]) is left as it is.
    hf = {"model.layers.0.linear_attn.conv1d.weight": conv.reshape(12, 1, 4),
          "model.norm.weight": np.full(8, 0.5, np.float32)}
    assert to_transformers(hf)["model.norm.weight"][0] == 0.5
