"""Gemma 3 text (Gemma Team 2025), as transformers 5.25 computes it
(``modeling_gemma3.py``): ``Gemma3ForCausalLM`` (``gemma3_text``) and the language
model of ``Gemma3ForConditionalGeneration`` (``gemma3``: the text config under
``text_config``, its weights ``language_model.model.*``, read as
``model.language_model.*``; the vision tower is not read).

Each layer: h += post_attention_norm(attention(input_norm(h))); h +=
post_feedforward_norm(mlp(pre_feedforward_norm(h))), every RMSNorm (and the q/k head
norms) computing rmsnorm(x) * (1 + w); embeddings times sqrt(hidden_size) rounded to
the model's dtype; GeGLU MLP down(gelu_tanh(gate(x)) * up(x)); scores scaled by
query_pre_attn_scalar ** -0.5; ``sliding_attention`` layers see the last
``sliding_window`` positions and rotate with their own RoPE (``rope_local_base_freq``,
unscaled), ``full_attention`` layers see everything (``rope_theta`` with
``rope_scaling``, linear x8 on 4B and up); tied embeddings.
"""
from __future__ import annotations

import math
from typing import List, Mapping

import numpy as np

from metalrt import ops

from .attention import Attention, Rope
from .config_values import config_bool, config_float, config_int
from .decoder import CausalLM
from .hybrid_config import listed_layer_types, text_config
from .layers import Embedding, Linear
from .norms import UnitOffsetRMSNorm, unit_offset_weight
from .qwen3 import QkNormRope
from .registry import family
from .rope import long_rope_switch, rope_frequencies
from .shape import DecoderShape
from .weights import Weights

SLIDING, FULL = "sliding_attention", "full_attention"

# Gemma3TextConfig's defaults (transformers 5.25): released Gemma3ForConditionalGeneration
# configs leave most of these out of ``text_config``.
TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
    "attention_bias": False, "query_pre_attn_scalar": 256, "sliding_window": 4096,
}
DEFAULT_THETA = {FULL: 1_000_000.0, SLIDING: 10_000.0}
# Older configs give the local layers' base here (transformers < 5).
LOCAL_BASE_KEY = "rope_local_base_freq"


def gemma3_config(config: Mapping):
    """(the text config with Gemma3TextConfig's defaults for the keys it lacks, its weight
    prefix)."""
    text, prefix = text_config(config)
    for key, value in TEXT_DEFAULTS.items():
        text.setdefault(key, value)
    return text, prefix


def layer_types(text: Mapping, arch: str) -> List[str]:
    """``layer_types`` when given, else (transformers' fallback) every
    ``sliding_window_pattern``-th layer global, the others sliding (default 6: 5 local
    : 1 global). ValueError naming the key for a wrong length, an entry that is neither
    sliding nor full, or a pattern < 1."""
    types = listed_layer_types(text, arch, (SLIDING, FULL))
    if types is not None:
        return types
    pattern = config_int(text, "sliding_window_pattern", arch,
                         config_int(text, "_sliding_window_pattern", arch, 6))
    return [SLIDING if (i + 1) % pattern else FULL
            for i in range(config_int(text, "num_hidden_layers", arch))]


def rope_config(text: Mapping, arch: str) -> dict:
    """``text`` with ``rope_parameters`` per layer type, as transformers' Gemma3TextConfig
    builds them: the given nested entries, the older ``rope_scaling`` applied to the
    global layers, and each type's base from its entry, else ``rope_theta`` (global) /
    ``rope_local_base_freq`` (local), else 1e6 / 1e4. ValueError for a flat
    ``rope_parameters`` (its layer type would be a guess)."""
    given = text.get("rope_parameters") or {}
    if given and not any(isinstance(given.get(kind), Mapping) for kind in (SLIDING, FULL)):
        raise ValueError(f"[{arch}] config 'rope_parameters' must hold one entry per layer "
                         f"type ('{SLIDING}', '{FULL}'), got keys {sorted(given)}")
    rope = {kind: dict(given.get(kind) or {"rope_type": "default"}) for kind in (SLIDING, FULL)}
    rope[FULL].update(text.get("rope_scaling") or {})
    for kind, key in ((FULL, "rope_theta"), (SLIDING, LOCAL_BASE_KEY)):
        if rope[kind].get("rope_theta") is None:
            rope[kind]["rope_theta"] = config_float(text, key, arch, DEFAULT_THETA[kind])
    return {**text, "rope_scaling": None, "rope_parameters": rope}


class SandwichLayer:
    """h += post_attn_norm(attention(attn_norm(h))); h += post_mlp_norm(mlp(mlp_norm(h))),
    the residual stream updated in place. ``attention`` is called as
    ``(x, step, layer_cache)``."""

    def __init__(self, attn_norm, attention, post_attn_norm, mlp_norm, mlp, post_mlp_norm):
        self.attn_norm, self.attention, self.post_attn_norm = attn_norm, attention, post_attn_norm
        self.mlp_norm, self.mlp, self.post_mlp_norm = mlp_norm, mlp, post_mlp_norm

    def __call__(self, h, step, layer_cache):
        attended = self.attention(self.attn_norm(h), step, layer_cache)
        h = ops.add(h, self.post_attn_norm(attended), out=h)
        return ops.add(h, self.post_mlp_norm(self.mlp(self.mlp_norm(h))), out=h)


class GeGLU:
    """down(gelu_tanh(gate(x)) * up(x)) (Shazeer 2020's GeGLU, tanh-approximated GELU)."""

    def __init__(self, gate: Linear, up: Linear, down: Linear):
        self.gate, self.up, self.down = gate, up, down

    def __call__(self, x):
        # gelu's out must not overlap its input; mul may write over its first operand.
        act = ops.gelu(self.gate(x))
        return self.down(ops.mul(act, self.up(x), out=act))


@family
class Gemma3Model(CausalLM):
    arch = "gemma3"
    aliases = ("gemma3_text",)

    def __init__(self, config: Mapping, weights: Mapping, device: str, dtype: str = "float32"):
        arch = self.arch
        text, prefix = gemma3_config(config)
        self._refuse_unsupported(text)
        shape = DecoderShape.from_config(text, arch)
        hidden, heads, kv_heads, head_dim = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        eps = config_float(text, "rms_norm_eps", arch)
        super().__init__(text, device, dtype, shape)
        self.layer_types = layer_types(text, arch)
        window = (config_int(text, "sliding_window", arch) if SLIDING in self.layer_types else 0)
        if window and self.context_length is not None and window > self.context_length:
            raise ValueError(f"[{arch}] config 'sliding_window' ({window}) is larger than "
                             f"'max_position_embeddings' ({self.context_length})")
        scale = config_float(text, "query_pre_attn_scalar", arch) ** -0.5
        bias = config_bool(text, "attention_bias", arch, False)
        inner = config_int(text, "intermediate_size", arch)
        rope_text = rope_config(text, arch)
        ropes = {kind: Rope(rope_frequencies(rope_text, head_dim, arch, kind), True, device)
                 for kind in set(self.layer_types)}
        self.rope_switch = long_rope_switch([rope.freqs for rope in ropes.values()], arch)

        w = Weights(weights, device, dtype, arch)
        self.embed_tokens = Embedding.load(w, prefix + "embed_tokens.weight", shape.vocab, hidden)
        # transformers multiplies by sqrt(hidden) cast to the embedding's dtype.
        self.embed_scale = w.upload(np.full(hidden, math.sqrt(hidden), np.float32))
        self.layers = []
        for i, kind in enumerate(self.layer_types):
            p = f"{prefix}layers.{i}."
            a = p + "self_attn."
            qkv = Linear.load_split(w, [a + "q_proj", a + "k_proj", a + "v_proj"],
                                    [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim],
                                    hidden, bias)
            norms = QkNormRope(w, p, head_dim, eps, ropes[kind], weights=(
                unit_offset_weight(w, a + "q_norm.weight", head_dim),
                unit_offset_weight(w, a + "k_norm.weight", head_dim)))
            attention = Attention(qkv, Linear.load(w, [a + "o_proj"], [hidden], heads * head_dim, bias),
                                  heads, kv_heads, head_dim, norms, scale=scale,
                                  window=window if kind == SLIDING else 0)
            mlp = GeGLU(*(Linear.load(w, [f"{p}mlp.{name}_proj"], [rows], cols, False)
                          for name, rows, cols in (("gate", inner, hidden), ("up", inner, hidden),
                                                   ("down", hidden, inner))))
            self.layers.append(SandwichLayer(
                UnitOffsetRMSNorm(w, p + "input_layernorm.weight", hidden, eps), attention,
                UnitOffsetRMSNorm(w, p + "post_attention_layernorm.weight", hidden, eps),
                UnitOffsetRMSNorm(w, p + "pre_feedforward_layernorm.weight", hidden, eps), mlp,
                UnitOffsetRMSNorm(w, p + "post_feedforward_layernorm.weight", hidden, eps)))
        self.final_norm = UnitOffsetRMSNorm(w, prefix + "norm.weight", hidden, eps)
        tied = config_bool(text, "tie_word_embeddings", arch, True)
        self.lm_head = (self.embed_tokens.table if tied
                        else w.matrix("lm_head.weight", (shape.vocab, hidden)))

    def _refuse_unsupported(self, text: Mapping) -> None:
        """ValueError naming the key for what Gemma 3 text does not use and metalrt does
        not compute: another activation, logit soft-capping (Gemma 2's; Gemma 3 sets
        both to null), bidirectional attention (EmbeddingGemma)."""
        arch = self.arch
        if text.get("hidden_activation") != "gelu_pytorch_tanh":
            raise ValueError(f"[{arch}] unsupported hidden_activation "
                             f"{text.get('hidden_activation')!r} (supported: gelu_pytorch_tanh)")
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if text.get(key) is not None:
                raise ValueError(f"[{arch}] config '{key}' ({text[key]!r}) is not supported "
                                 "(logit soft-capping is not implemented; expected null)")
        if config_bool(text, "use_bidirectional_attention", arch, False):
            raise ValueError(f"[{arch}] config 'use_bidirectional_attention' true is not "
                             "supported (causal attention only)")

    def embed(self, step):
        h = self.embed_tokens(step.token_ids)
        return ops.mul(h, self.embed_scale, out=h)
