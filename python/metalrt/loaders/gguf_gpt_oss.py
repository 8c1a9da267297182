"""The gpt-oss part of GGUF files (llama.cpp's ``gpt-oss``, ``LLM_ARCH_OPENAI_MOE``, written
by ``conversion/gpt_oss.py`` ``GptOssModel``), read back into transformers' names so
that ``models/gpt_oss.py`` serves both sources:

* ``post_attention_norm`` is the norm before the MoE block (transformers'
  ``post_attention_layernorm``), ``attn_sinks`` the sink logit per head
  (``self_attn.sinks``), ``ffn_gate_inp`` the biased router (``mlp.router``);
* the converter splits transformers' interleaved ``gate_up_proj`` (gate at even, up at
  odd columns) into two expert stacks, ``ffn_gate_exps`` and ``ffn_up_exps`` [E, I, H],
  and their biases ``ffn_{gate,up}_exps.bias`` [E, I]; ``ffn_down_exps`` is [E, H, I].
  From the released MXFP4 layout the three stacks are MXFP4 blocks (scale byte, 16 code
  bytes), read in place as ``mxfp4_gguf``; from float checkpoints they are float. They
  are given under metalrt's stacked names ``mlp.experts.{gate,up,down}_proj.weight``
  (``models/experts``) and ``.bias``;
* llama.cpp's ``openai-moe`` loader: ``attention.sliding_window`` (required), layer i
  sliding iff i % n < n - 1 with n = ``attention.sliding_window_pattern`` (default 2:
  even layers sliding, as transformers' default ``layer_types``) or per layer when the
  key is a list of booleans; one RoPE base for both kinds of layer
  (``rope.freq_base_swa`` must equal ``rope.freq_base`` here); the SwiGLU constants
  alpha 1.702 and limit 7 (not in the file; llama.cpp hard-codes them).

YaRN: the file's ``rope.scaling.*`` keys with ``truncate`` false, the released
checkpoints' setting; llama.cpp's ggml floors and ceils the correction range whatever
the model (``ggml_rope_yarn_corr_dims``), so its RoPE differs from transformers' here
and metalrt follows transformers'.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

# GGUF layer tensor (or tensor + suffix) -> Hugging Face-style name; these override the
# shared table for gpt-oss files. A "part.suffix" key names the whole tensor.
LAYER_NAMES = {
    "post_attention_norm": "post_attention_layernorm",
    "attn_sinks.weight": "self_attn.sinks",
    "ffn_gate_inp": "mlp.router",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
}
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0   # llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants
_PATTERN = 2


def gpt_oss_config(arch: str, count: Callable[..., int], meta: dict, config: dict,
                   where: str) -> dict[str, Any]:
    """Hugging Face config keys of a gpt-oss file beyond the shared ones (``config``;
    ``count(key, default)`` reads a positive integer metadata value): the experts,
    ``sliding_window``, ``layer_types``, ``rope_parameters``, the SwiGLU constants.
    ValueError naming ``where`` (the file) and the key for a missing window, a pattern
    that is neither a non-negative integer nor a list of one boolean per layer, or a
    separate RoPE base for the sliding layers."""
    layers = config["num_hidden_layers"]
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", _PATTERN)
    if isinstance(pattern, list) and len(pattern) == layers and all(isinstance(p, bool) for p in pattern):
        sliding = list(pattern)
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 0:
        sliding = [pattern == 0 or i % pattern < pattern - 1 for i in range(layers)]
    else:
        raise ValueError(f"[gguf] {where}: metadata key '{arch}.attention.sliding_window_pattern' "
                         f"must be a non-negative integer or {layers} booleans, got {pattern!r}")
    base = config["rope_theta"]
    swa_base = meta.get(f"{arch}.rope.freq_base_swa", base)
    if np.float32(swa_base) != np.float32(base):
        raise ValueError(f"[gguf] {where}: metadata key '{arch}.rope.freq_base_swa' ({swa_base}) "
                         f"differs from '{arch}.rope.freq_base' ({base}); gpt-oss rotates every "
                         f"layer with one base")
    rope = dict(config.pop("rope_scaling", None) or {"rope_type": "default"}, rope_theta=base)
    if rope["rope_type"] == "yarn":
        rope["truncate"] = False
    return {
        "num_local_experts": count(f"{arch}.expert_count"),
        "num_experts_per_tok": count(f"{arch}.expert_used_count"),
        "intermediate_size": count(f"{arch}.expert_feed_forward_length"),
        "sliding_window": count(f"{arch}.attention.sliding_window"),
        "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
        "rope_parameters": rope,
        "attention_bias": True,
        "swiglu_alpha": SWIGLU_ALPHA,
        "swiglu_limit": SWIGLU_LIMIT,
    }


def gpt_oss_layer_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """GGUF layer tensor name -> numpy shape of every tensor of a gpt-oss layer."""
    h, d, e = config["hidden_size"], config["head_dim"], config["num_local_experts"]
    heads, i = config["num_attention_heads"], config["intermediate_size"]
    q, kv = heads * d, config["num_key_value_heads"] * d
    return {
        "attn_norm.weight": (h,), "post_attention_norm.weight": (h,),
        "attn_q.weight": (q, h), "attn_q.bias": (q,), "attn_k.weight": (kv, h), "attn_k.bias": (kv,),
        "attn_v.weight": (kv, h), "attn_v.bias": (kv,), "attn_output.weight": (h, q),
        "attn_output.bias": (h,), "attn_sinks.weight": (heads,),
        "ffn_gate_inp.weight": (e, h), "ffn_gate_inp.bias": (e,),
        "ffn_gate_exps.weight": (e, i, h), "ffn_gate_exps.bias": (e, i),
        "ffn_up_exps.weight": (e, i, h), "ffn_up_exps.bias": (e, i),
        "ffn_down_exps.weight": (e, h, i), "ffn_down_exps.bias": (e, h),
    }
