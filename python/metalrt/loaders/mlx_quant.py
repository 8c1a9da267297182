"""MLX-format quantized checkpoints (what ``mlx_lm.convert -q`` writes, e.g. the
mlx-community models): which layers are quantized, with which bits and group size.

Format (mlx-lm ``utils.py``, ``save_config`` and ``load_model``): ``config.json`` holds
``"quantization": {"group_size": 64, "bits": 4, "mode": "affine"}``, duplicated as
``"quantization_config"``; files older than the ``mode`` key are affine. Keys named
by a module path (``"model.layers.3.mlp.down_proj": {"group_size": 64, "bits": 6}``)
override the defaults for that layer. A layer is quantized exactly when its
``<layer>.scales`` tensor exists; its ``<layer>.weight`` is then uint32
``[N, K·bits/32]`` with ``scales`` and ``biases`` ``[N, K/group_size]`` (a MoE block's
stacked experts, ``mlp.switch_mlp.*``: ``[E, N, ...]``, taken as the matrix of E·N
rows, a view). Mixed exports
put some tensors at other bits than the config says without an override (e.g. an 8-bit
embedding under a 4-bit default), so bits are inferred from the shapes,
``bits = 32·weight.shape[-1] / (scales.shape[-1]·group_size)``, and checked against
the layer's own override when it has one (mlx-lm's 8-bit router, ``mlp.gate``).

``"mode": "mxfp4"`` (``mx.quantize(..., mode="mxfp4")``: group_size 32, bits 4) keeps
FP4 E2M1 codes in the uint32 ``weight`` ``[N, K/8]`` (value 0 in the low bits) and one
uint8 E8M0 exponent per 32 values in ``scales`` ``[N, K/32]``, with no ``biases``; it
loads as the "mxfp4" QuantizedWeight (``quants.mxfp4_from_blocks``'s layout, the
weight's words viewed as bytes).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .quants import (AFFINE_BITS, AFFINE_GROUP_SIZES, MXFP4_GROUP_SIZE, QuantizedWeight,
                     bf16_to_float32, mxfp4_from_blocks)

_SUFFIX = ".scales"
MODES = ("affine", "mxfp4")


def quantization_entry(config: Mapping[str, Any], config_path: str) -> dict | None:
    """The ``quantization`` (else ``quantization_config``) entry of ``config``, or None
    for a float model and for transformers' ``quant_method`` "mxfp4" (gpt-oss's released
    files: their experts are the ``*_blocks`` / ``*_scales`` tensors ``models/gpt_oss``
    reads). Raises ValueError for an entry that is not MLX affine (another ``mode`` than
    ``MODES``, or another tool's ``quant_method`` such as GPTQ)."""
    entry = config.get("quantization") or config.get("quantization_config")
    if entry is None or isinstance(entry, dict) and entry.get("quant_method") == "mxfp4":
        return None
    if not isinstance(entry, dict) or "quant_method" in entry and "bits" not in entry:
        raise ValueError(f"[mlx] {config_path}: quantization {entry!r} is not an MLX "
                         f"quantization entry (expected group_size, bits, mode)")
    mode = entry.get("mode", "affine")
    if mode not in MODES:
        raise ValueError(f"[mlx] {config_path}: quantization mode '{mode}' is not supported "
                         f"(supported: {', '.join(MODES)})")
    return entry


def _layer_params(entry: dict, layer: str, config_path: str) -> dict:
    override = entry.get(layer)
    if isinstance(override, dict):
        return {**entry, **override, "override_bits": override.get("bits")}
    if override is False:
        raise ValueError(f"[mlx] {config_path}: quantization says layer '{layer}' is not "
                         f"quantized, but its {layer}{_SUFFIX} exists")
    return entry


def _mxfp4(layer: str, params: dict, weight, scales, biases, where: str) -> QuantizedWeight:
    """One mxfp4 layer (stacked experts [E, N, ...] fold into rows), checked against
    ``params`` and its scales; the uint32 words viewed as bytes."""
    source = f"{where}: tensor '{layer}.weight'"
    if params.get("group_size", MXFP4_GROUP_SIZE) != MXFP4_GROUP_SIZE or params.get("bits", 4) != 4:
        raise ValueError(f"[mlx] {source}: mode mxfp4 has bits 4 and group_size 32, the config "
                         f"says bits {params.get('bits')!r}, group_size {params.get('group_size')!r}")
    if biases is not None:
        raise ValueError(f"[mlx] {where}: tensor '{layer}.biases' exists, but mode mxfp4 has no biases")
    if weight is None or weight.dtype != np.uint32 or weight.ndim < 2:
        got = "missing" if weight is None else f"{weight.dtype} {list(weight.shape)}"
        raise ValueError(f"[mlx] {source} must be uint32 packed E2M1 codes next to its scales, got {got}")
    if scales.dtype != np.uint8 or scales.shape[:-1] != weight.shape[:-1] \
            or weight.shape[-1] != 4 * scales.shape[-1]:
        raise ValueError(f"[mlx] {where}: tensor '{layer}.scales' is {scales.dtype} "
                         f"{list(scales.shape)}; for the packed weight {list(weight.shape)} mode "
                         f"mxfp4 needs uint8 E8M0 exponents {[*weight.shape[:-1], weight.shape[-1] // 4]}")
    blocks = weight.view(np.uint8).reshape(*scales.shape, MXFP4_GROUP_SIZE // 2)
    return mxfp4_from_blocks(blocks, scales, source)


def _affine(layer: str, params: dict, weight, scales, biases, where: str) -> QuantizedWeight:
    """One quantized layer, its shapes checked against each other and ``params``."""
    gs = params.get("group_size", 64)
    if gs not in AFFINE_GROUP_SIZES:
        raise ValueError(f"[mlx] {where}: tensor '{layer}.weight' has group_size {gs!r}; "
                         f"supported group sizes are {', '.join(map(str, AFFINE_GROUP_SIZES))}")
    if weight is not None and weight.ndim == 3 and scales.ndim == 3 and biases is not None \
            and biases.shape == scales.shape and scales.shape[:2] == weight.shape[:2]:
        # Stacked experts [E, N, ...]: the matrix of E * N rows (views of the file).
        weight, scales, biases = (a.reshape(-1, a.shape[-1]) for a in (weight, scales, biases))
    if weight is None or weight.dtype != np.uint32 or weight.ndim != 2:
        got = "missing" if weight is None else f"{weight.dtype} {list(weight.shape)}"
        raise ValueError(f"[mlx] {where}: tensor '{layer}.weight' must be a uint32 matrix of "
                         f"packed values next to its scales, got {got}")
    if biases is None:
        raise ValueError(f"[mlx] {where}: tensor '{layer}.biases' is missing (affine "
                         f"quantization has a bias per group)")
    n, words = weight.shape
    if scales.ndim != 2 or scales.shape[0] != n or biases.shape != scales.shape:
        raise ValueError(f"[mlx] {where}: tensor '{layer}.scales' has shape {list(scales.shape)} "
                         f"and '{layer}.biases' {list(biases.shape)}; for the packed weight "
                         f"{list(weight.shape)} both must be [{n}, K/{gs}]")
    bits, rest = divmod(32 * words, scales.shape[1] * gs)
    if rest or bits not in AFFINE_BITS:
        raise ValueError(
            f"[mlx] {where}: tensor '{layer}.weight' {list(weight.shape)} with scales "
            f"{list(scales.shape)} and group_size {gs} means {32 * words / (scales.shape[1] * gs):g} "
            f"bits; supported bits are {', '.join(map(str, AFFINE_BITS))}")
    if params.get("override_bits") not in (None, bits):
        raise ValueError(
            f"[mlx] {where}: tensor '{layer}.weight' {list(weight.shape)} with scales "
            f"{list(scales.shape)} and group_size {gs} holds {bits}-bit values, but the "
            f"config's quantization entry for '{layer}' says {params['override_bits']} bits")
    return QuantizedWeight("affine", (n, scales.shape[1] * gs), weight, scales, biases,
                           bits=bits, group_size=gs, source=f"{where}: tensor '{layer}.weight'")


def group_quantized(config: Mapping[str, Any],
                    tensors: Mapping[str, tuple[str, np.ndarray, str]],
                    config_path: str) -> dict[str, Any]:
    """The state dict of a Hugging Face directory: ``tensors`` (name → (file, array,
    safetensors dtype), BF16 arrays as uint16 bits) with each quantized layer's weight,
    scales and biases replaced by one ``QuantizedWeight`` under ``<layer>.weight``
    (bf16 scales and biases stay uint16 bit patterns, as ``metalrt.quantized_tensor``
    takes them); every other tensor as it is, BF16 widened to float32.

    Raises ValueError naming the file and the tensor for scales without a
    ``quantization`` entry, an unknown mode, mxfp4 scales that are not uint8
    ``[N, K/32]``, a missing weight or biases, shapes that do
    not fit together, a packed uint32 weight without its scales, bits outside
    2/3/4/5/6/8 or a group size outside 32/64/128.
    """
    arrays = {name: array for name, (_, array, _) in tensors.items()}
    layers = [name[:-len(_SUFFIX)] for name in arrays if name.endswith(_SUFFIX)]
    entry = quantization_entry(config, config_path)
    if layers and entry is None:
        raise ValueError(f"[mlx] {tensors[layers[0] + _SUFFIX][0]}: tensor "
                         f"'{layers[0]}{_SUFFIX}' exists but {config_path} has no "
                         f"quantization entry")
    for name, (path, _, dtype) in tensors.items():
        # A packed weight whose scales are gone would pass for an integer matrix.
        if entry is not None and dtype == "U32" and name.endswith(".weight") \
                and name[:-len(".weight")] + _SUFFIX not in arrays:
            raise ValueError(f"[mlx] {path}: tensor '{name}' is packed uint32 but its "
                             f"'{name[:-len('.weight')]}{_SUFFIX}' is missing")
    for layer in layers:
        where = tensors[layer + _SUFFIX][0]
        params = _layer_params(entry, layer, config_path)
        arrays[layer + ".weight"] = (_mxfp4 if params.get("mode", "affine") == "mxfp4" else _affine)(
            layer, params, arrays.get(layer + ".weight"),
            arrays.pop(layer + _SUFFIX), arrays.pop(layer + ".biases", None), where)
    # Left are the float tensors and the QuantizedWeights (whose stored dtype is U32).
    return {name: bf16_to_float32(a) if tensors[name][2] == "BF16" else a
            for name, a in arrays.items()}
