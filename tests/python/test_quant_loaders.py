"""Quantized weights stay quantized through the loaders: GGUF block types as views of the
one mapping of the file (bytes as written, the format named), MLX affine layers with
bits inferred per tensor and checked, and every bad input a ValueError naming the file
and the tensor. Files are written in the test (``gguf``'s writer, ``tiny_quant``)."""
import json
import re

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from metalrt import default_model
from metalrt.loaders import load_model_files
from metalrt.loaders.gguf import dequantize_tensor
from metalrt.loaders.gguf_file import GGUFFile
from metalrt.loaders.quants import QuantizedWeight, dequantize_affine
from metalrt.loaders.quantized_weights import stack
from metalrt.tokenizer import Tokenizer
from tiny_models import TinyLlama, tokenizer_metadata, write_llama_gguf
from tiny_quant import quantized_layers, write_mlx_dir

FORMATS = {T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_0: "q5_0", T.Q5_1: "q5_1", T.Q8_0: "q8_0",
           T.Q4_K: "q4_k", T.Q5_K: "q5_k", T.Q6_K: "q6_k", T.Q3_K: "q3_k", T.Q2_K: "q2_k"}


# Byte ranges of the f16 scale fields of the K-quant blocks (ggml-common.h).
K_SCALE_FIELDS = {T.Q4_K: slice(0, 4), T.Q5_K: slice(0, 4), T.Q6_K: slice(208, 210),
                  T.Q3_K: slice(108, 110), T.Q2_K: slice(80, 84)}


def random_blocks(rng, qtype, rows, cols):
    """Valid random blocks of ``qtype`` [rows, row_bytes]: ``gguf.quants.quantize`` of
    random floats, or for the K-quants (which it cannot quantize) random bytes with
    finite f16 scale fields."""
    if qtype not in K_SCALE_FIELDS:
        return gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), qtype)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    field = K_SCALE_FIELDS[qtype]
    n_halves = (field.stop - field.start) // 2
    halves = rng.uniform(-0.1, 0.1, (blocks.shape[0], n_halves)).astype(np.float16)
    blocks[:, field] = halves.view(np.uint8)
    return blocks.reshape(rows, cols // block * size)


def owner(a):
    """What owns an array's memory (np.frombuffer's memoryview looked through)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


@pytest.fixture
def backend():
    return Tokenizer.from_gguf_metadata(tokenizer_metadata()).backend


@pytest.mark.parametrize("qtype", list(FORMATS), ids=lambda t: t.name)
def test_gguf_block_types_stay_quantized_as_views_of_the_mapping(tmp_path, qtype):
    model = TinyLlama(layers=1, hidden=256, ffn=512, heads=4, kv_heads=2, head_dim=64)
    rng = np.random.default_rng(int(qtype))
    raw = {"blk.0.ffn_up.weight": random_blocks(rng, qtype, model.ffn, model.hidden),
           "blk.0.ffn_down.weight": random_blocks(rng, qtype, model.hidden, model.ffn)}
    write_llama_gguf(tmp_path / "q.gguf", model, raw={n: (v, qtype) for n, v in raw.items()})
    files = load_model_files(tmp_path / "q.gguf")
    gf = GGUFFile(tmp_path / "q.gguf")
    for gguf_name, hf in (("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"),
                          ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight")):
        w = files.weights[hf]
        assert isinstance(w, QuantizedWeight) and w.format == FORMATS[qtype]
        assert w.shape == gf.tensors[gguf_name].shape
        assert w.data.dtype == np.uint8 and not w.data.flags.writeable
        np.testing.assert_array_equal(w.data, raw[gguf_name])
        assert type(owner(w.data)).__name__ == "mmap"      # a view of the mapping, no copy
        assert f"q.gguf: tensor '{gguf_name}'" in w.source
        # The float reference of the same bytes is gguf's own dequantizer.
        np.testing.assert_array_equal(dequantize_tensor(gf, gguf_name),
                                      gguf.quants.dequantize(raw[gguf_name], qtype))


def test_gguf_float_tensors_are_views_in_their_dtype(tmp_path):
    model = TinyLlama(layers=1)
    f16 = np.random.default_rng(3).standard_normal((model.ffn, model.hidden)).astype(np.float16)
    write_llama_gguf(tmp_path / "f.gguf", model,
                     raw={"blk.0.ffn_up.weight": (f16.view(np.uint8), T.F16)})
    w = load_model_files(tmp_path / "f.gguf").weights
    up, norm = w["model.layers.0.mlp.up_proj.weight"], w["model.norm.weight"]
    assert up.dtype == np.float16 and norm.dtype == np.float32
    np.testing.assert_array_equal(up, f16)
    assert type(owner(up)).__name__ == "mmap" and type(owner(norm)).__name__ == "mmap"


def test_llama_q_k_rows_stay_in_the_file_order(tmp_path):
    """The rows are not un-permuted (that would copy them); the config asks for
    interleaved RoPE instead. Qwen files are not permuted and keep NeoX RoPE."""
    from tiny_models import llama_cpp_qk_rows
    model = TinyLlama(layers=1)
    written = write_llama_gguf(tmp_path / "m.gguf", model)
    files = load_model_files(tmp_path / "m.gguf")
    q = "model.layers.0.self_attn.q_proj.weight"
    np.testing.assert_array_equal(files.weights[q], llama_cpp_qk_rows(written[q], model.heads))
    assert files.config["rope_interleaved"] is True
    write_llama_gguf(tmp_path / "q.gguf", TinyLlama(arch="qwen2", layers=1))
    assert load_model_files(tmp_path / "q.gguf").config["rope_interleaved"] is False


def test_default_model_is_views_of_one_mapping():
    """The default file's weights: Q4_1 matrices (its embedding is Q8_0) and F32 norms,
    all views of one mapping, adding up to the file's tensor bytes; nothing read."""
    files = load_model_files(None)
    gf = GGUFFile(default_model.default_model_path())
    tensors = [files.weights[n] for n in files.weights]
    quantized = [t for t in tensors if isinstance(t, QuantizedWeight)]
    assert {t.format for t in quantized} == {"q4_1", "q8_0"} and len(quantized) == 1 + 30 * 7
    assert files.weights["model.embed_tokens.weight"].format == "q8_0"
    owners = {id(owner(t.data if isinstance(t, QuantizedWeight) else t)) for t in tensors}
    assert len(owners) == 1
    total = sum(t.nbytes for t in tensors)
    assert total == sum(info.nbytes for info in gf.tensors.values())


def test_gate_and_up_stack_in_place_when_adjacent_in_the_file():
    files = load_model_files(None)
    p = "model.layers.3.mlp."
    gate, up = files.weights[p + "gate_proj.weight"], files.weights[p + "up_proj.weight"]
    both = stack([gate, up], copy=False)
    assert both.shape == (3072, 576) and np.shares_memory(both.data, gate.data)
    assert type(owner(both.data)).__name__ == "mmap"    # a view of the mapping itself
    np.testing.assert_array_equal(both.data, np.concatenate([gate.data, up.data]))
    q, k = files.weights["model.layers.3.self_attn.q_proj.weight"], \
        files.weights["model.layers.3.self_attn.k_proj.weight"]
    assert stack([q, k], copy=False) is None            # not adjacent: no silent copy
    copied = stack([q, k], copy=True)
    np.testing.assert_array_equal(copied.data, np.concatenate([q.data, k.data]))


ACTIVATION_ONLY = " (an activation format of llama.cpp's CPU dot products, never a weight)"


@pytest.mark.parametrize("qtype,why", [(T.IQ4_NL, ""), (T.IQ4_XS, ""), (T.IQ2_XXS, ""),
                                       (T.Q8_1, ACTIVATION_ONLY), (T.Q8_K, ACTIVATION_ONLY)],
                         ids=lambda v: getattr(v, "name", ""))
def test_unsupported_gguf_types_name_file_tensor_and_type(tmp_path, qtype, why):
    model = TinyLlama(layers=1, hidden=256, ffn=256, heads=4, kv_heads=2, head_dim=64)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = np.zeros((model.ffn, model.hidden // block * size), np.uint8)
    write_llama_gguf(tmp_path / "u.gguf", model, raw={"blk.0.ffn_up.weight": (data, qtype)})
    with pytest.raises(ValueError, match=rf"\[gguf\] .*u\.gguf: tensor 'blk\.0\.ffn_up\.weight' "
                                         rf"has type {qtype.name}{re.escape(why)}; supported"):
        load_model_files(tmp_path / "u.gguf")


def test_truncated_quantized_tensor_names_file_and_tensor(tmp_path):
    model = TinyLlama(layers=1)
    rng = np.random.default_rng(0)
    write_llama_gguf(tmp_path / "t.gguf", model, drop=("output_norm.weight",), raw={
        "blk.0.ffn_down.weight": (random_blocks(rng, T.Q8_0, model.hidden, model.ffn), T.Q8_0)})
    gf = GGUFFile(tmp_path / "t.gguf")
    last = max(gf.tensors.values(), key=lambda t: t.offset)
    data = (tmp_path / "t.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:last.offset + last.nbytes - 1])
    with pytest.raises(ValueError, match=rf"cut\.gguf: tensor '{last.name}' data \[\d+, \d+\) "
                                         r"must be 32-byte aligned and inside the file"):
        load_model_files(tmp_path / "cut.gguf")


# --- MLX directories ---------------------------------------------------------------------


@pytest.mark.parametrize("bits,gs", [(2, 32), (3, 64), (4, 64), (5, 128), (6, 32), (8, 64),
                                     (4, 128)])
def test_mlx_layers_load_quantized_with_their_bits(tmp_path, backend, bits, gs):
    model = TinyLlama(layers=2, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    made = write_mlx_dir(tmp_path, model, backend, bits=bits, gs=gs)
    files = load_model_files(tmp_path)
    for layer in quantized_layers(model):
        w = files.weights[layer + ".weight"]
        assert isinstance(w, QuantizedWeight) and (w.format, w.bits, w.group_size) == \
            ("affine", bits, gs), layer
        assert layer + ".scales" not in files.weights and layer + ".biases" not in files.weights
        assert w.data.dtype == np.uint32 and w.scales.dtype == np.float16
        np.testing.assert_array_equal(dequantize_affine(w), made["dequantized"][layer + ".weight"])
    for name, value in made["float"].items():                     # norms stay float32
        np.testing.assert_array_equal(files.weights[name], value)


def test_mlx_bf16_scales_stay_bf16_bits(tmp_path, backend):
    """bf16 scales and biases (models exported in bf16) are not widened: they stay the
    file's uint16 bit patterns, which metalrt.quantized_tensor reads as bfloat16."""
    from safetensors.numpy import load_file
    from tiny_models import write_bf16_safetensors
    model = TinyLlama(layers=1, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    made = write_mlx_dir(tmp_path, model, backend, bits=4, gs=64, scale_dtype=np.float32)
    tensors = load_file(tmp_path / "model.safetensors")
    bf16 = {n: (v.view(np.uint32) & 0xFFFF0000).view(np.float32) for n, v in tensors.items()
            if n.endswith((".scales", ".biases")) or n == "model.norm.weight"}
    plain = {n: v for n, v in tensors.items() if n not in bf16}
    from safetensors.numpy import save_file
    save_file(plain, tmp_path / "model.safetensors")
    write_bf16_safetensors(tmp_path / "bf16.safetensors", bf16)
    w = load_model_files(tmp_path).weights
    up = w["model.layers.0.mlp.up_proj.weight"]
    assert up.scales.dtype == np.uint16 and up.biases.dtype == np.uint16
    np.testing.assert_array_equal(up.scales, (bf16["model.layers.0.mlp.up_proj.scales"]
                                              .view(np.uint32) >> 16).astype(np.uint16))
    assert np.isfinite(dequantize_affine(up)).all()
    assert w["model.norm.weight"].dtype == np.float32           # a float tensor: widened
    np.testing.assert_array_equal(w["model.norm.weight"], bf16["model.norm.weight"])
    assert made["layers"]["model.layers.0.mlp.up_proj"] == (4, 64)


def test_mlx_bits_inferred_per_tensor_and_overrides(tmp_path, backend):
    """An 8-bit embedding under a 4-bit config (no override: mixed exports do this) and a
    6-bit g32 down projection given by a per-layer override; no ``mode``: affine; only
    ``quantization_config`` present."""
    model = TinyLlama(layers=2, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    down = "model.layers.1.mlp.down_proj"
    made = write_mlx_dir(tmp_path, model, backend, bits=4, gs=64,
                         layer_bits={"model.embed_tokens": 8},
                         overrides={down: {"bits": 6, "group_size": 32}},
                         config_key="quantization_config")
    config = json.loads((tmp_path / "config.json").read_text())
    del config["quantization_config"]["mode"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    w = load_model_files(tmp_path).weights
    assert (w["model.embed_tokens.weight"].bits, w["model.embed_tokens.weight"].group_size) == (8, 64)
    assert (w[down + ".weight"].bits, w[down + ".weight"].group_size) == (6, 32)
    assert (w["model.layers.0.mlp.down_proj.weight"].bits) == 4
    for name in (down + ".weight", "model.embed_tokens.weight"):
        np.testing.assert_array_equal(dequantize_affine(w[name]), made["dequantized"][name])


def _mlx_error(tmp_path, backend, pattern, **kwargs):
    model = TinyLlama(layers=1, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    write_mlx_dir(tmp_path, model, backend, **kwargs)
    with pytest.raises(ValueError, match=pattern):
        load_model_files(tmp_path)


@pytest.mark.parametrize("mode", ["nvfp4", "fp4_e3m0"])   # an MLX mode not read yet, one MLX lacks
def test_mlx_unknown_mode(tmp_path, backend, mode):
    _mlx_error(tmp_path, backend, rf"\[mlx\] .*config\.json: quantization mode '{mode}' is not "
                                  r"supported \(supported: affine, mxfp4\)",
               quantization={"group_size": 32, "bits": 4, "mode": mode})


def test_mlx_bits_7(tmp_path, backend):
    _mlx_error(tmp_path, backend, r"\[mlx\] .*model\.safetensors: tensor 'model\.embed_tokens"
                                  r"\.weight' \[\d+, 28\] with scales \[\d+, 2\] and group_size 64 "
                                  r"means 7 bits; supported bits are 2, 3, 4, 5, 6, 8",
               bits=8, gs=64, layer_bits={"model.embed_tokens": 7})


def test_mlx_group_48(tmp_path, backend):
    _mlx_error(tmp_path, backend, r"model\.safetensors: tensor '.+\.weight' has group_size 48; "
                                  r"supported group sizes are 32, 64, 128",
               bits=4, gs=32, quantization={"group_size": 48, "bits": 4})


def test_mlx_scales_shape_that_does_not_match(tmp_path, backend):
    # Written with g32 but configured g64: the packed weight holds 4 bits per value
    # only for g32, so at g64 it would be 2-bit — silently wrong. Here the rows differ.
    model = TinyLlama(layers=1, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    write_mlx_dir(tmp_path, model, backend, bits=4, gs=64)
    from safetensors.numpy import load_file, save_file
    tensors = load_file(tmp_path / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.scales"
    tensors[name] = tensors[name][:-1]
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\."
                                         r"up_proj\.scales' has shape \[255, 2\] and "
                                         r"'model\.layers\.0\.mlp\.up_proj\.biases' \[256, 2\]"):
        load_model_files(tmp_path)


def test_mlx_scales_without_quantization_entry(tmp_path, backend):
    model = TinyLlama(layers=1, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    write_mlx_dir(tmp_path, model, backend)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["quantization"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"\[mlx\] .*model\.safetensors: tensor '.+\.scales' "
                                         r"exists but .*config\.json has no quantization entry"):
        load_model_files(tmp_path)


def test_truncated_safetensors_tensor_names_file_and_tensor(tmp_path, backend):
    model = TinyLlama(layers=1, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    write_mlx_dir(tmp_path, model, backend)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"\[safetensors\] .*model\.safetensors: tensor '.+' "
                                         r"needs bytes \[\d+, \d+\) but the file has \d+ bytes; "
                                         r"it is truncated"):
        load_model_files(tmp_path)
