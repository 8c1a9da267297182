"""The Phi-3 / Phi-4 part of GGUF files (llama.cpp's ``phi3``, written by
``conversion/phi.py`` ``Phi3MiniModel``; names in the ``gguf`` package's
``MODEL_TENSORS[MODEL_ARCH.PHI3]``), read back into transformers' semantics so that
``models/phi3.py`` serves both sources:

* ``attn_qkv`` is ``self_attn.qkv_proj`` ([q | k | v] rows) and ``ffn_up`` is
  ``mlp.gate_up_proj`` ([gate | up] rows), both as stored (llama.cpp's phi3 graph splits
  them alike); Q/K rows are not permuted (NeoX RoPE);
* ``rope.dimension_count`` below head_dim is the partial RoPE (``partial_rotary_factor``
  = dimension_count / head_dim);
* LongRoPE (Phi-4-mini, the 128k variants): the global tensors ``rope_factors_long`` and
  ``rope_factors_short`` (float [rotary_dim / 2]) are the config's ``long_factor`` and
  ``short_factor``, ``rope.scaling.original_context_length`` its
  ``original_max_position_embeddings`` and ``rope.scaling.attn_factor`` its
  ``attention_factor`` (the converter's sqrt(1 + ln(factor) / ln(original)));
* ``attention.sliding_window`` 0 is no window (Phi-4), another value the config's
  ``sliding_window`` (Phi-3-mini's 2047).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as T

# GGUF layer tensor -> Hugging Face-style name (``.weight`` is appended); these override
# the shared table for phi3 files.
LAYER_NAMES = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
# The LongRoPE factor tensors (global), under the names the loader gives them.
FACTOR_TENSORS = {"rope_factors_long": "long_factor", "rope_factors_short": "short_factor"}


def phi3_config(arch: str, gf, config: dict[str, Any]) -> dict[str, Any]:
    """Hugging Face config keys of a phi3 file beyond the shared ones (``config``):
    ``partial_rotary_factor``, ``sliding_window``, and for a LongRoPE file
    ``rope_parameters``. ValueError naming the file and the key or tensor for a rotary
    dimension count that is odd or above head_dim, a window that is not a
    non-negative integer, only one of the two factor tensors, a factor tensor that is
    not F32 of rotary_dim / 2 values, or LongRoPE without its original context."""
    meta, where = gf.metadata, gf.path
    head_dim = config["head_dim"]
    rotary = meta.get(f"{arch}.rope.dimension_count", head_dim)
    if not isinstance(rotary, int) or isinstance(rotary, bool) or not 2 <= rotary <= head_dim \
            or rotary % 2:
        raise ValueError(f"[gguf] {where}: metadata key '{arch}.rope.dimension_count' must be an "
                         f"even integer in [2, head_dim = {head_dim}], got {rotary!r}")
    window = meta.get(f"{arch}.attention.sliding_window", 0)
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"[gguf] {where}: metadata key '{arch}.attention.sliding_window' must "
                         f"be a non-negative integer, got {window!r}")
    extra: dict[str, Any] = {"partial_rotary_factor": rotary / head_dim,
                             "sliding_window": window or None}
    present = [name for name in FACTOR_TENSORS if f"{name}.weight" in gf.tensors]
    if not present:
        return extra
    if len(present) == 1:
        missing = next(name for name in FACTOR_TENSORS if name not in present)
        raise ValueError(f"[gguf] {where}: tensor '{present[0]}.weight' without "
                         f"'{missing}.weight'; LongRoPE needs both")
    original_key = f"{arch}.rope.scaling.original_context_length"
    if not isinstance(meta.get(original_key), int) or meta[original_key] < 1:
        raise ValueError(f"[gguf] {where}: LongRoPE factor tensors need metadata key "
                         f"'{original_key}' (a positive integer), got {meta.get(original_key)!r}")
    rope = {"rope_type": "longrope", "rope_theta": config["rope_theta"],
            "partial_rotary_factor": rotary / head_dim,
            "original_max_position_embeddings": meta[original_key]}
    if f"{arch}.rope.scaling.attn_factor" in meta:
        rope["attention_factor"] = float(meta[f"{arch}.rope.scaling.attn_factor"])
    for name, key in FACTOR_TENSORS.items():
        info = gf.tensors[f"{name}.weight"]
        if info.ggml_type != T.F32 or tuple(info.shape) != (rotary // 2,):
            raise ValueError(f"[gguf] {where}: tensor '{name}.weight' must be F32 of shape "
                             f"[{rotary // 2}] (rope.dimension_count / 2), got "
                             f"{info.ggml_type.name} {list(info.shape)}")
        rope[key] = np.asarray(gf.raw(f"{name}.weight").view(np.float32), np.float64).tolist()
    extra["rope_parameters"] = rope
    return extra


def phi3_layer_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """GGUF layer tensor name -> numpy shape of a phi3 layer (fused Q/K/V and gate|up)."""
    h, f, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    return {"attn_norm.weight": (h,), "attn_qkv.weight": (q + 2 * kv, h),
            "attn_output.weight": (h, q), "ffn_norm.weight": (h,),
            "ffn_up.weight": (2 * f, h), "ffn_down.weight": (h, f)}
