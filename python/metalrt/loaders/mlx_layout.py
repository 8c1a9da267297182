"""The tensors of a directory written by mlx-lm (``mlx_lm.convert``, the mlx-community
models) under transformers' names and in transformers' semantics, so that one model
file serves both. mlx-lm saves its own modules' state after its ``sanitize``
(mlx_lm/models/qwen3_moe.py, qwen3_next.py, qwen3_5.py, qwen3_5_moe.py):

* a Qwen3.5 ``ForConditionalGeneration`` model's text weights as
  ``language_model.model.*`` and ``language_model.lm_head.*`` (transformers:
  ``model.language_model.*``, ``lm_head.*``);
* the experts of a MoE block stacked per projection as ``mlp.switch_mlp.{gate,up,
  down}_proj`` ([E, N, K], or quantized [E, N, K·bits/32] with scales and biases
  [E, N, K/group]): given here as metalrt's stacked ``mlp.experts.{gate,up,
  down}_proj.weight`` (``models/experts``), views of the file;
* in the hybrid families (Qwen3-Next, Qwen3.5) the depthwise conv weight as [C, K, 1]
  (transformers: [C, 1, K]) and every zero-centred RMSNorm weight with 1 added
  (``input_layernorm``, ``post_attention_layernorm``, the final ``norm``, ``q_norm``,
  ``k_norm``; not the GDN output norm ``linear_attn.norm``). mlx-lm's own test for
  an unconverted checkpoint is the conv layout, and so is this one's.

The multi-token-prediction head (``mtp.*``) is dropped by mlx-lm's sanitize, so such a
directory has none.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

_RENAMES = (("language_model.model.", "model.language_model."),
            ("language_model.lm_head.", "lm_head."))
_SWITCH = ".mlp.switch_mlp."
_SHIFTED_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight",
                  "model.norm.weight",   # also model.language_model.norm.weight
                  ".q_norm.weight", ".k_norm.weight")


def _hf_name(name: str) -> str:
    for mlx, hf in _RENAMES:
        if name.startswith(mlx):
            name = hf + name[len(mlx):]
    if _SWITCH in name:
        name = name.replace(_SWITCH, ".mlp.experts.")
    return name


def _is_mlx_conv(name: str, tensor: Any) -> bool:
    shape = getattr(tensor, "shape", ())
    return name.endswith("conv1d.weight") and len(shape) == 3 and shape[2] == 1 and shape[1] > 1


def to_transformers(weights: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` (a Hugging Face directory's state dict, quantized layers grouped by
    ``mlx_quant.group_quantized``) with mlx-lm's names and conventions turned into
    transformers' (see the module docstring); a transformers checkpoint is returned
    as it is. The conv weight becomes a transposed view, the norm weights float32
    arrays of w - 1."""
    renamed = {_hf_name(name): tensor for name, tensor in weights.items()}
    if not any(_is_mlx_conv(name, t) for name, t in renamed.items()):
        return renamed
    for name, tensor in renamed.items():
        if _is_mlx_conv(name, tensor):
            renamed[name] = np.asarray(tensor).transpose(0, 2, 1)
        elif name.endswith(_SHIFTED_NORMS) and np.ndim(tensor) == 1:
            renamed[name] = np.asarray(tensor, np.float32) - np.float32(1)
    return renamed
