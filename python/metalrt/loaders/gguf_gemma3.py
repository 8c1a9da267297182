"""The Gemma 3 part of GGUF files (llama.cpp's ``gemma3``, written by
``conversion/gemma.py`` ``Gemma3Model``), read back into transformers' semantics so that
``models/gemma3.py`` serves both sources:

* the sandwich norms: ``ffn_norm`` is the pre-feedforward norm here (the post-attention
  norm of the other families), ``post_attention_norm`` and ``post_ffw_norm`` follow the
  attention and the MLP;
* the converter adds 1 to every tensor whose name ends in ``norm.weight`` (Gemma's
  rmsnorm(x) * (1 + w)); 1 is subtracted here and the model adds it back at load;
* the layer pattern, window, bases and score scale as llama.cpp's ``gemma3`` loader
  derives them (``src/llama-model.cpp``): every ``attention.sliding_window_pattern``-th
  layer (default 6: layer i is local iff i % 6 < 5) global, the others local with a
  window of ``attention.sliding_window``, and no local layer when the file has no window
  (or 0); local layers rotate with ``rope.freq_base_swa`` (default 1e4, which files
  written before that key have) unscaled, global ones with ``rope.freq_base`` and
  ``rope.scaling.*``; the file holds no ``query_pre_attn_scalar``: scores are scaled by
  head_dim ** -0.5, and by (hidden / heads) ** -0.5 for the 62-layer model (27B), whose
  released config has ``query_pre_attn_scalar`` = 168 = 5376 / 32 where head_dim is 128;
* ``final_logit_softcapping`` is passed on (the model refuses it).

The converter trims ``token_embd`` to the tokenizer's tokens (262,144 of the 262,208
rows of the released checkpoints): the vocabulary is the token list's length.
"""
from __future__ import annotations

from typing import Any, Callable

from .gguf_hybrid import minus_one

# GGUF layer tensor -> Hugging Face-style name (``.weight`` is appended); these override
# the shared table for gemma3 files.
LAYER_NAMES = {
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_NORMS = ("attn_norm.weight", "post_attention_norm.weight", "ffn_norm.weight",
          "post_ffw_norm.weight", "attn_q_norm.weight", "attn_k_norm.weight", "output_norm.weight")
# llama.cpp's gemma3 loader: the 27B model (62 layers) scales scores by hidden / heads.
_LAYERS_27B = 62
_LOCAL_BASE = 10_000.0
_PATTERN = 6


# GGUF tensor (after "blk.N.", or global) -> its value in transformers' semantics.
READ_FIXES: dict[str, Callable[[Any], Any]] = dict.fromkeys(_NORMS, minus_one)


def gemma3_config(arch: str, meta: dict, config: dict, where: str) -> dict[str, Any]:
    """Hugging Face config keys of a gemma3 file beyond the shared ones (``config``):
    ``layer_types``, ``sliding_window``, ``rope_local_base_freq``,
    ``query_pre_attn_scalar``, the activation, ``final_logit_softcapping``. ValueError
    naming ``where`` (the file) and the key for a window or pattern that is not a
    non-negative integer."""
    layers = config["num_hidden_layers"]
    window = meta.get(f"{arch}.attention.sliding_window", 0)
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", _PATTERN)
    for key, value in (("sliding_window", window), ("sliding_window_pattern", pattern)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"[gguf] {where}: metadata key '{arch}.attention.{key}' must be a "
                             f"non-negative integer, got {value!r}")
    # llama.cpp's set_swa_pattern(n): layer i is local iff n == 0 or i % n < n - 1.
    local = [bool(window) and (pattern == 0 or i % pattern < pattern - 1) for i in range(layers)]
    heads = config["num_attention_heads"]
    scalar = config["hidden_size"] // heads if layers == _LAYERS_27B else config["head_dim"]
    extra = {
        "layer_types": ["sliding_attention" if s else "full_attention" for s in local],
        "rope_local_base_freq": float(meta.get(f"{arch}.rope.freq_base_swa", _LOCAL_BASE)),
        "query_pre_attn_scalar": scalar,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": meta.get(f"{arch}.final_logit_softcapping"),
    }
    if window:
        extra["sliding_window"] = window
    return extra


def gemma3_layer_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """GGUF layer tensor name -> numpy shape of the norms a gemma3 layer adds."""
    h = config["hidden_size"]
    return {"post_attention_norm.weight": (h,), "post_ffw_norm.weight": (h,)}
