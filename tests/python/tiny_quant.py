"""Quantized small model files written by tests: MLX affine layers (quantized here from
MLX's definition, independently of the loader) and MLX-format directories of a
``TinyLlama``.

MLX affine (``mlx/ops.cpp`` ``affine_quantize``, see reference/quantization.md §2): per
group of ``gs`` values, scale = max((max - min) / (2^bits - 1), 1e-7); the edge is min
(scale positive) when |min| > |max|, else max (scale negative); q0 = round(edge /
scale), and when q0 != 0 the scale becomes edge / q0 and bias = edge, else bias = 0;
q = clip(round((w - bias) / scale), 0, 2^bits - 1). Values are packed as one
little-endian bit stream per row, LSB first, into uint32 words.

MLX mxfp4 (``mx.quantize(mode="mxfp4")``'s layout, gpt-oss's ``*_blocks``/``*_scales``):
random E2M1 codes and E8M0 exponents, the float matrix each stands for given by the
loader's reference ``dequantize_weight`` (gated bit-exact against transformers and mlx
in test_mxfp4.py).
"""
from __future__ import annotations

import json
import os

import numpy as np
from safetensors.numpy import save_file

from metalrt.loaders.quants import dequantize_weight, mxfp4_from_blocks
from tiny_models import TinyLlama, write_hf_dir

# E8M0 exponents of random MXFP4 weights: scales 2^-9 .. 2^-3 (a tuple: conftest's
# test ordering compares module globals with `in`).
MODERATE = (118, 125)


def affine_quantize(w: np.ndarray, bits: int, gs: int):
    """(packed uint32 [N, K·bits/32], scales [N, K/gs], biases [N, K/gs], q [N, K]) of a
    float32 matrix, scales and biases float32 (cast them as the file needs)."""
    n, k = w.shape
    groups = w.astype(np.float32).reshape(n, k // gs, gs)
    lo, hi = groups.min(axis=2), groups.max(axis=2)
    top = 2 ** bits - 1
    scale = np.maximum((hi - lo) / top, 1e-7).astype(np.float32)
    edge = np.where(np.abs(lo) > np.abs(hi), lo, hi).astype(np.float32)
    scale = np.where(np.abs(lo) > np.abs(hi), scale, -scale).astype(np.float32)
    q0 = np.rint(edge / scale)
    scale = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scale).astype(np.float32)
    bias = np.where(q0 != 0, edge, 0).astype(np.float32)
    q = np.clip(np.rint((groups - bias[..., None]) / scale[..., None]), 0, top).astype(np.uint32)
    return pack(q.reshape(n, k), bits), scale, bias, q.reshape(n, k)


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """uint32 words of each row's values as one LSB-first bit stream."""
    n, k = q.shape
    stream = ((q[..., None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    return np.packbits(stream.reshape(n, k * bits), axis=1, bitorder="little").view("<u4")


def dequantized(q: np.ndarray, scales: np.ndarray, biases: np.ndarray, gs: int) -> np.ndarray:
    """float32 scale·q + bias (scales and biases widened to float32 first)."""
    s = scales.astype(np.float32).repeat(gs, axis=1)
    b = biases.astype(np.float32).repeat(gs, axis=1)
    return s * q.astype(np.float32) + b


def quantized_layers(model: TinyLlama) -> list[str]:
    """The modules mlx-lm quantizes: every Linear and the embedding (tied or not)."""
    layers = ["model.embed_tokens"] + ([] if model.tied else ["lm_head"])
    for i in range(model.layers):
        p = f"model.layers.{i}."
        layers += [p + m for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                   "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                   "mlp.down_proj")]
    return layers


def quantize_hf_dir(directory, bits: int = 4, gs: int = 64) -> None:
    """Turns a single-file Hugging Face directory into MLX format in place: every 2-D
    weight of a Linear or embedding (``*_proj``, ``fc*``, ``embed_tokens``, ``lm_head``)
    whose width is a multiple of ``gs`` becomes weight/scales/biases (f16)."""
    from safetensors.numpy import load_file

    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    out = {}
    for name, value in tensors.items():
        layer = name[:-len(".weight")]
        if name.endswith(".weight") and value.ndim == 2 and value.shape[1] % gs == 0 \
                and "norm" not in name:
            words, scales, biases, _ = affine_quantize(value.astype(np.float32), bits, gs)
            out.update({name: words, layer + ".scales": scales.astype(np.float16),
                        layer + ".biases": biases.astype(np.float16)})
        else:
            out[name] = value
    save_file(out, path)
    config_path = os.path.join(directory, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["quantization"] = {"group_size": gs, "bits": bits, "mode": "affine"}
    with open(config_path, "w") as f:
        json.dump(config, f)


def write_mlx_dir(directory, model: TinyLlama, backend, *, bits: int = 4, gs: int = 64,
                  layer_bits: dict | None = None, overrides: dict | None = None,
                  scale_dtype=np.float16, quantization: dict | None = None,
                  config_key: str = "quantization") -> dict:
    """An MLX-format directory of ``model``: every layer of ``quantized_layers``
    quantized with ``bits`` (or ``layer_bits[layer]``, without telling the config),
    group ``gs`` (``overrides``: module path → {"bits", "group_size"} written into the
    config and used), scales and biases in ``scale_dtype``. ``quantization`` replaces
    the config entry as written (for bad-input tests). Returns {"layers": {layer:
    (bits, gs)}, "dequantized": {name: float32 matrix the loader must reproduce},
    "float": the other tensors}."""
    weights = write_hf_dir(directory, model, backend)
    overrides = overrides or {}
    out, plan, expected = {}, {}, {}
    for layer in quantized_layers(model):
        params = overrides.get(layer, {})
        b = params.get("bits", (layer_bits or {}).get(layer, bits))
        g = params.get("group_size", gs)
        words, scales, biases, q = affine_quantize(weights.pop(layer + ".weight"), b, g)
        scales, biases = scales.astype(scale_dtype), biases.astype(scale_dtype)
        out.update({layer + ".weight": words, layer + ".scales": scales,
                    layer + ".biases": biases})
        plan[layer] = (b, g)
        expected[layer + ".weight"] = dequantized(q, scales, biases, g)
    out.update(weights)
    save_file(out, os.path.join(directory, "model.safetensors"))
    config_path = os.path.join(directory, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    entry = quantization if quantization is not None else \
        {"group_size": gs, "bits": bits, "mode": "affine", **overrides}
    config[config_key] = entry
    with open(config_path, "w") as f:
        json.dump(config, f)
    return {"layers": plan, "dequantized": expected, "float": weights}


def split_tensors(lead, n, k, seed, exponents=MODERATE):
    """gpt-oss-shaped random tensors: blocks uint8 [*lead, n, k/32, 16], scales uint8
    [*lead, n, k/32] drawn from [exponents[0], exponents[1])."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (*lead, n, k // 32, 16), dtype=np.uint8)
    scales = rng.integers(*exponents, (*lead, n, k // 32), dtype=np.uint8)
    return blocks, scales


def write_mlx_mxfp4_dir(directory, backend, model: TinyLlama | None = None,
                        scale_shape_cut: bool = False) -> dict:
    """An MLX directory of ``model`` (default a one-layer TinyLlama) whose
    ``quantized_layers`` are mode mxfp4: weight uint32 [N, K/8], scales uint8 [N, K/32], no biases
    (mx.quantize(mode="mxfp4")'s layout); ``scale_shape_cut`` drops the last scale
    column of the third (for bad-input tests). Returns {weight name: the float32
    matrix it stands for}."""
    model = model or TinyLlama(layers=1, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
    weights = write_hf_dir(directory, model, backend)
    out, expected = {}, {}
    for i, name in enumerate(layer + ".weight" for layer in quantized_layers(model)):
        rows, cols = weights.pop(name).shape
        blocks, scales = split_tensors((), rows, cols, seed=i)
        layer = name[:-len(".weight")]
        out[name] = blocks.reshape(rows, -1).view(np.uint32)
        out[layer + ".scales"] = scales[:, :-1] if scale_shape_cut and i == 2 else scales
        expected[name] = dequantize_weight(mxfp4_from_blocks(blocks, scales))
    out.update(weights)
    save_file(out, os.path.join(directory, "model.safetensors"))
    config_path = os.path.join(directory, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["quantization"] = {"group_size": 32, "bits": 4, "mode": "mxfp4"}
    with open(config_path, "w") as f:
        json.dump(config, f)
    return expected
