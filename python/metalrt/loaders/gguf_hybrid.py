"""The Gated-DeltaNet hybrid part of GGUF files (llama.cpp's ``qwen3next``, ``qwen35``
and ``qwen35moe``; names in the ``gguf`` package's ``MODEL_TENSORS``, written by
``conversion/qwen.py`` ``Qwen3NextModel``, ``Qwen3_5TextModel``,
``Qwen3_5MoeTextModel``), read back into transformers' semantics so that one model
class serves both sources:

* the converter adds 1 to every RMSNorm weight but the GDN output norm
  (``attn_norm``, ``post_attention_norm``, ``output_norm``, ``attn_q_norm``,
  ``attn_k_norm``); 1 is subtracted here (the model adds it back at load);
* ``ssm_a`` holds -exp(A_log): A_log = log(-ssm_a);
* ``ssm_conv1d`` is squeezed to [C, K]: it is given back as [C, 1, K];
* the GDN input projection is already split into ``attn_qkv`` ([q_all | k_all | v_all],
  Qwen3.5's ``in_proj_qkv``) and ``attn_gate`` (z, ``in_proj_z``); ``ssm_ba`` stays
  grouped per key head as transformers' ``in_proj_ba`` (the model regroups it); Qwen3.5
  files hold ``ssm_beta`` and ``ssm_alpha`` (``in_proj_b``, ``in_proj_a``);
* in Qwen3.5 files the value heads are reordered from grouped (value head j uses key
  head j // r, r = Hv / Hk) to tiled (j % Hk; ``_reorder_v_heads``,
  ggml-org/llama.cpp#19468) in every tensor indexed by value head: the V rows of
  ``attn_qkv``, ``attn_gate``, ``ssm_beta``, ``ssm_alpha``, ``ssm_a``, ``ssm_dt``, the V
  channels of ``ssm_conv1d`` and the columns of ``ssm_out``. Putting them back would
  copy those tensors (and cannot be done for ``ssm_out``'s quantized columns), so they
  are kept as stored and the config says ``linear_v_heads_tiled``: the delta rule then
  pairs value head j with key head j % Hk, and every per-value-head tensor agrees;
* the multi-token-prediction (MTP) block of a file converted without ``--no-mtp``
  (``nextn_predict_layers`` blocks past the model's layers: a full decoder layer plus
  ``nextn.eh_proj``, ``enorm``, ``hnorm``, ``shared_head_norm``) is exposed under the
  checkpoint's ``mtp.*`` names (``NEXTN_TENSORS``), read by the MTP head of speculative
  decoding (``models/mtp.py``) when it is first asked for.

The layer pattern is ``attention.recurrent_layers`` when the file has it, else
``full_attention_interval``; llama.cpp's graph always renormalises the top-k weights.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

# Layer tensors (after "blk.N.") -> Hugging Face names (after "model.layers.N.").
LAYER_TENSORS = {
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_ba.weight": "linear_attn.in_proj_ba.weight",
    "ssm_a": "linear_attn.A_log",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
}

# The MTP block's own tensors (after "blk.N.", N = the model's layer count) -> the
# checkpoint's names (the inverse of the converter's remapping).
NEXTN_TENSORS = {
    "nextn.eh_proj.weight": "mtp.fc.weight",
    "nextn.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "nextn.hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "nextn.shared_head_norm.weight": "mtp.norm.weight",
    "nextn.embed_tokens.weight": "mtp.embed_tokens.weight",
    "nextn.shared_head_head.weight": "mtp.shared_head.head.weight",
}


def minus_one(x):
    """x - 1 in float32 (the converter's + 1 on a zero-centred norm taken off)."""
    return np.asarray(x, np.float32) - np.float32(1)


# GGUF tensor (after "blk.N.", or global) -> its value in transformers' semantics.
READ_FIXES: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(("attn_norm.weight", "post_attention_norm.weight", "output_norm.weight",
                     "attn_q_norm.weight", "attn_k_norm.weight", "nextn.enorm.weight",
                     "nextn.hnorm.weight", "nextn.shared_head_norm.weight"), minus_one),
    "ssm_a": lambda a: np.log(-np.asarray(a, np.float64)).astype(np.float32),
    "ssm_conv1d.weight": lambda w: np.asarray(w)[:, None, :],
    # [1, H]; llama.cpp's quantizer writes it as [H].
    "ffn_gate_inp_shexp.weight": lambda w: np.asarray(w).reshape(1, -1),
}


def hybrid_config(arch: str, count: Callable[..., int], meta: dict, head_dim: int,
                  layers: int, moe: bool, tiled: bool, where: str) -> dict[str, Any]:
    """Hugging Face config keys of the GDN layers, the shared expert (``moe``) and the
    layer pattern; ``tiled``: the file's value heads are tiled (Qwen3.5 files). Raises
    ValueError naming ``where`` (the file) and the key for value heads that are not a
    multiple of the key heads or a value size they do not divide."""
    v_heads = count(f"{arch}.ssm.time_step_rank")
    k_heads = count(f"{arch}.ssm.group_count")
    inner = count(f"{arch}.ssm.inner_size")
    if v_heads % k_heads or inner % v_heads:
        raise ValueError(f"[gguf] {where}: {arch}.ssm.time_step_rank (value heads, {v_heads}) "
                         f"must be a multiple of {arch}.ssm.group_count (key heads, {k_heads}) "
                         f"and divide {arch}.ssm.inner_size ({inner})")
    recurrent = meta.get(f"{arch}.attention.recurrent_layers")
    config = {
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "linear_key_head_dim": count(f"{arch}.ssm.state_size"),
        "linear_value_head_dim": inner // v_heads,
        "linear_conv_kernel_dim": count(f"{arch}.ssm.conv_kernel"),
        "full_attention_interval": count(f"{arch}.full_attention_interval", 4),
        "partial_rotary_factor": count(f"{arch}.rope.dimension_count", head_dim) / head_dim,
        "linear_v_heads_tiled": tiled,
    }
    if moe:
        config["shared_expert_intermediate_size"] = count(f"{arch}.expert_shared_feed_forward_length")
    if recurrent is not None:
        config["layer_types"] = ["linear_attention" if r else "full_attention"
                                 for r in list(recurrent)[:layers]]
    return config


def hybrid_layer_shapes(config: dict[str, Any], linear: bool) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name (after "blk.N.") -> numpy shape of one hybrid layer besides its
    norms and MLP: the GDN tensors, or the gated attention's."""
    h = config["hidden_size"]
    if not linear:
        d, heads, kv = config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
        return {"attn_q.weight": (2 * heads * d, h), "attn_k.weight": (kv * d, h),
                "attn_v.weight": (kv * d, h), "attn_output.weight": (h, heads * d),
                "attn_q_norm.weight": (d,), "attn_k_norm.weight": (d,)}
    hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    conv = 2 * hk * dk + hv * dv
    # Qwen3.5 files (those with tiled value heads) split b and a.
    gates = ({"ssm_beta.weight": (hv, h), "ssm_alpha.weight": (hv, h)}
             if config["linear_v_heads_tiled"] else {"ssm_ba.weight": (2 * hv, h)})
    return {"attn_qkv.weight": (conv, h), "attn_gate.weight": (hv * dv, h), **gates,
            "ssm_a": (hv,), "ssm_dt.bias": (hv,),
            "ssm_conv1d.weight": (conv, config["linear_conv_kernel_dim"]),
            "ssm_norm.weight": (dv,), "ssm_out.weight": (h, hv * dv)}


def shared_expert_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, s = config["hidden_size"], config["shared_expert_intermediate_size"]
    return {"ffn_gate_inp_shexp.weight": (1, h), "ffn_gate_shexp.weight": (s, h),
            "ffn_up_shexp.weight": (s, h), "ffn_down_shexp.weight": (h, s)}
