"""gpt-oss (OpenAI 2025; gpt-oss-20b and -120b), as transformers 5.25 computes it
(``modeling_gpt_oss.py``, ``GptOssForCausalLM``).

Each layer: h += o_proj(attention(rmsnorm(h))); h += moe(rmsnorm(h)), plain ``w``
RMSNorms. Attention: biased q/k/v/o projections, grouped-query heads, NeoX RoPE with
YaRN (``rope_parameters``: factor 32, theta 150000, ``original_max_position_embeddings``
4096, ``truncate`` false, cos and sin times the attention factor), scores scaled by
head_dim ** -0.5, a learned sink logit per head in each softmax's denominator
(``self_attn.sinks``), and on ``sliding_attention`` layers (every other one,
``layer_types``) a window of ``sliding_window`` positions. MoE: a biased router
(``mlp.router``), the top-k logits' softmax as the weights (= the softmax over all
experts renormalised over the top k), experts with biases whose gate|up columns are
interleaved (gate at even, up at odd) and whose activation is the clamped SwiGLU
(up.clamp(±limit) + 1) * g * sigmoid(alpha g), g = gate.clamp(max=limit)
(``ops.silu_and_mul(activation="swiglu_oai")``). Untied LM head.

Expert files: transformers' float parameters ``mlp.experts.gate_up_proj`` [E, H, 2I]
and ``down_proj`` [E, I, H] (x @ W, read transposed into the [E * N, K] rows
``ops.moe_matmul_bt`` takes), or the released MXFP4 layout ``*_blocks`` uint8
[E, N, K / 32, 16] + ``*_scales`` E8M0 [E, N, K / 32], already rows [N, K] per expert;
or llama.cpp's GGUF (``loaders/gguf_gpt_oss``): gate and up as two stacks
``mlp.experts.{gate,up}_proj.weight`` [E * I, H] (MXFP4 blocks or float) with biases
``.bias`` [E, I], read in place as ``models/experts`` reads stacked experts; their
projection is gate | up halves (``moe_matmul_bt``'s ``up=``), the activation's
``interleaved=False`` form.
"""
from __future__ import annotations

from typing import List, Mapping

import numpy as np

import metalrt
from metalrt import ops

from ..loaders import host_weights
from ..loaders.quants import mxfp4_from_blocks
from .attention import Attention, Rope
from .config_values import config_bool, config_float, config_int
from .decoder import CausalLM, PreNormLayer
from .experts import load_experts
from .hybrid_config import listed_layer_types
from .layers import Embedding, Linear, RMSNorm
from .registry import family
from .rope import long_rope_switch, rope_frequencies
from .shape import DecoderShape
from .weights import Weights

SLIDING, FULL = "sliding_attention", "full_attention"

# GptOssConfig's defaults (transformers 5.25) for what a config may leave out.
DEFAULTS = {"rope_theta": 150_000.0, "sliding_window": 128, "swiglu_alpha": 1.702,
            "swiglu_limit": 7.0, "rms_norm_eps": 1e-5, "attention_bias": True,
            "num_experts_per_tok": 4}
DEFAULT_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": False, "original_max_position_embeddings": 4096}


def layer_types(config: Mapping, arch: str) -> List[str]:
    """``layer_types`` when given, else transformers' default: even layers (0, 2, ...)
    sliding, odd ones full. ValueError naming the key for a wrong length or entry."""
    types = listed_layer_types(config, arch, (SLIDING, FULL))
    if types is not None:
        return types
    return [SLIDING if (i + 1) % 2 else FULL
            for i in range(config_int(config, "num_hidden_layers", arch))]


class GptOssExperts:
    """The MoE block of one layer: router logits x R^T + r, the top k with their
    softmax, each token's k experts' gate|up projection plus its bias, swiglu_oai,
    the down projection plus its bias, and the routing-weighted sum. Only the selected
    experts' weights are read (``ops.moe_matmul_bt``), their biases gathered
    (``ops.moe_bias_add``). ``up`` is None for the interleaved gate|up of transformers'
    files, the up stack of a GGUF file (``gate_up`` then its gate stack)."""

    def __init__(self, config: Mapping, w: Weights, prefix: str, hidden: int):
        arch = w.arch
        self.experts = config_int(config, "num_local_experts", arch)
        self.top_k = config_int(config, "num_experts_per_tok", arch)
        if not self.top_k <= self.experts:
            raise ValueError(f"[{arch}] config 'num_experts_per_tok' ({self.top_k}) must be in "
                             f"[1, num_local_experts = {self.experts}]")
        inner = config_int(config, "intermediate_size", arch)
        self.alpha = config_float(config, "swiglu_alpha", arch)
        self.limit = config_float(config, "swiglu_limit", arch)
        self.router = Linear.load(w, [prefix + "router"], [self.experts], hidden, True)
        p = prefix + "experts."
        if w.has(p + "gate_proj.weight"):
            self.gate_up, self.up, self.down = load_experts(w, prefix, self.experts, hidden, inner)
            # gate | up halves of the biases, as moe_matmul_bt(up=) writes the projection.
            halves = [w.float_host(p + name + "_proj.bias", (self.experts, inner)) for name in ("gate", "up")]
            self.gate_up_bias = w.upload(np.concatenate(halves, axis=1))
            self.down_bias = w.load(p + "down_proj.bias", (self.experts, hidden))
            return
        self.up = None
        self.gate_up = expert_matrix(w, p + "gate_up_proj", self.experts, 2 * inner, hidden)
        self.down = expert_matrix(w, p + "down_proj", self.experts, hidden, inner)
        self.gate_up_bias = w.load(p + "gate_up_proj_bias", (self.experts, 2 * inner))
        self.down_bias = w.load(p + "down_proj_bias", (self.experts, hidden))

    def __call__(self, x):
        # Renormalised softmax over the top k = transformers' softmax over the top-k logits.
        weights, ids = ops.moe_router(self.router(x), self.top_k, renormalize=True)
        gate_up = ops.moe_matmul_bt(x, self.gate_up, ids, num_experts=self.experts, up=self.up)
        gate_up = ops.moe_bias_add(gate_up, self.gate_up_bias, ids, out=gate_up)
        act = ops.silu_and_mul(gate_up, activation="swiglu_oai", alpha=self.alpha,
                               limit=self.limit, interleaved=self.up is None)
        y = ops.moe_matmul_bt(act, self.down, ids, num_experts=self.experts)
        return ops.moe_combine(ops.moe_bias_add(y, self.down_bias, ids, out=y), weights)


def expert_matrix(w: Weights, name: str, experts: int, rows: int, cols: int):
    """Experts' weights ``name`` as [E * rows, cols] (expert e's rows e * rows ..):
    transformers' float parameter [E, cols, rows] transposed, or the MXFP4 pair
    ``name_blocks`` / ``name_scales`` of the released files. ValueError naming the
    tensor when neither is there or a shape is wrong."""
    if w.has(name + "_blocks"):
        return mxfp4_experts(w, name, experts, rows, cols)
    stored = w.float_host(name, (experts, cols, rows))
    return w.upload(np.ascontiguousarray(np.swapaxes(stored, 1, 2)).reshape(experts * rows, cols))


def mxfp4_experts(w: Weights, name: str, experts: int, rows: int, cols: int):
    """The released MXFP4 experts ``name_blocks`` (uint8 [E, rows, cols / 32, 16]) and
    ``name_scales`` (E8M0 [E, rows, cols / 32]) as one split-layout MXFP4 matrix
    [E * rows, cols] whose bytes stay the file's (``quants.mxfp4_from_blocks``).
    ValueError naming the tensor when one is missing or of another shape."""
    blocks, scales = name + "_blocks", name + "_scales"
    for tensor, shape in ((blocks, (experts, rows, cols // 32, 16)), (scales, (experts, rows, cols // 32))):
        if not w.has(tensor):
            raise ValueError(f"[{w.arch}] missing tensor '{tensor}'")
        if tuple(w.tensors[tensor].shape) != shape:
            raise ValueError(f"[{w.arch}] tensor '{tensor}' has shape {list(w.tensors[tensor].shape)}, "
                             f"expected {list(shape)}")
    weight = mxfp4_from_blocks(np.asarray(w.tensors[blocks]), np.asarray(w.tensors[scales]), blocks)
    return host_weights.to_device(weight, w.device, w.dtype)


@family
class GptOssModel(CausalLM):
    arch = "gpt_oss"

    def __init__(self, config: Mapping, weights: Mapping, device: str, dtype: str = "float32"):
        arch = self.arch
        config = dict(config)
        for key, value in DEFAULTS.items():
            if config.get(key) is None:
                config[key] = value
        if not config.get("rope_parameters") and not config.get("rope_scaling"):
            config["rope_parameters"] = dict(DEFAULT_ROPE, rope_theta=config["rope_theta"])
        shape = DecoderShape.from_config(config, arch)
        hidden, heads, kv_heads, head_dim = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        eps = config_float(config, "rms_norm_eps", arch)
        super().__init__(config, device, dtype, shape)
        self.layer_types = layer_types(config, arch)
        window = config_int(config, "sliding_window", arch) if SLIDING in self.layer_types else 0
        if window and self.context_length is not None and window > self.context_length:
            raise ValueError(f"[{arch}] config 'sliding_window' ({window}) is larger than "
                             f"'max_position_embeddings' ({self.context_length})")
        bias = config_bool(config, "attention_bias", arch, True)
        rope = Rope(rope_frequencies(config, head_dim, arch), True, device)
        self.rope_switch = long_rope_switch([rope.freqs], arch)

        w = Weights(weights, device, dtype, arch)
        self.embed_tokens = Embedding.load(w, "model.embed_tokens.weight", shape.vocab, hidden)
        self.layers = []
        for i, kind in enumerate(self.layer_types):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            qkv = Linear.load_split(w, [a + "q_proj", a + "k_proj", a + "v_proj"],
                                    [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim],
                                    hidden, bias)
            out = Linear.load(w, [a + "o_proj"], [hidden], heads * head_dim, bias)
            # The sinks join a float32 softmax whatever the model's dtype.
            sinks = metalrt.asarray(w.float_host(a + "sinks", (heads,)).astype(np.float32),
                                    device=device)
            attention = Attention(qkv, out, heads, kv_heads, head_dim, rope,
                                  window=window if kind == SLIDING else 0, sinks=sinks)
            self.layers.append(PreNormLayer(
                RMSNorm(w, p + "input_layernorm.weight", hidden, eps), attention,
                RMSNorm(w, p + "post_attention_layernorm.weight", hidden, eps),
                GptOssExperts(config, w, p + "mlp.", hidden)))
        self.final_norm = RMSNorm(w, "model.norm.weight", hidden, eps)
        tied = config_bool(config, "tie_word_embeddings", arch, False)
        self.lm_head = (self.embed_tokens.table if tied
                        else w.matrix("lm_head.weight", (shape.vocab, hidden)))
