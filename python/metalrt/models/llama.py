"""Llama (Touvron et al. 2023; Llama 3, SmolLM2): pre-RMSNorm decoder layers, NeoX
RoPE (optionally with Llama 3.1 frequency scaling), grouped-query attention, SwiGLU
MLP, optionally tied input/output embeddings. Weight names are Hugging Face's
``LlamaForCausalLM`` state dict; any matrix (projections, embedding, LM head) may be
quantized, the norms are float."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .base import (Attention, CausalLM, Embedding, Linear, PreNormLayer, RMSNorm, Rope,
                   Weights, dense_mlp, require)


class LlamaModel(CausalLM):
    arch = "llama"
    qkv_bias_default = False      # Qwen2 has Q/K/V biases
    out_bias_follows_qkv = True   # Llama's o_proj shares attention_bias; Qwen2's has none
    tied_default = False          # HF LlamaConfig default

    def __init__(self, config: Mapping, weights: Mapping[str, np.ndarray], device: str,
                 dtype: str = "float32"):
        arch = self.arch
        hidden = require(config, "hidden_size", arch)
        heads = require(config, "num_attention_heads", arch)
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads
        vocab = require(config, "vocab_size", arch)
        eps = float(config.get("rms_norm_eps", 1e-6))
        super().__init__(config, device, dtype, kv_heads, head_dim, vocab)

        w = Weights(weights, device, dtype, arch)
        self.embed_tokens = Embedding(w, "model.embed_tokens.weight", vocab, hidden)
        qkv_bias = config.get("attention_bias")
        qkv_bias = self.qkv_bias_default if qkv_bias is None else bool(qkv_bias)
        mlp_bias = bool(config.get("mlp_bias") or False)
        self.rope = Rope(config, head_dim, device, arch)
        self.layers = []
        for i in range(require(config, "num_hidden_layers", arch)):
            p = f"model.layers.{i}."
            qkv = Linear.load_split(
                w, [p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"],
                [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], hidden, qkv_bias)
            out = Linear.load(w, [p + "self_attn.o_proj"], [hidden], heads * head_dim,
                              qkv_bias and self.out_bias_follows_qkv)
            attention = Attention(qkv, out, heads, kv_heads, head_dim,
                                  self.positional(config, w, p, head_dim, eps))
            mlp = self.feed_forward(config, w, p, i, hidden, mlp_bias)
            self.layers.append(PreNormLayer(RMSNorm(w, p + "input_layernorm.weight", hidden, eps),
                                            attention,
                                            RMSNorm(w, p + "post_attention_layernorm.weight", hidden, eps),
                                            mlp))
        self.final_norm = RMSNorm(w, "model.norm.weight", hidden, eps)
        tied = config.get("tie_word_embeddings")
        tied = self.tied_default if tied is None else bool(tied)
        self.lm_head = (self.embed_tokens.table if tied
                        else w.matrix("lm_head.weight", (vocab, hidden)))

    def feed_forward(self, config, w: Weights, prefix: str, index: int, hidden: int,
                     bias: bool):
        """The MLP of layer ``index`` (Qwen3-MoE puts sparse MoE blocks here)."""
        return dense_mlp(w, prefix + "mlp.", hidden, require(config, "intermediate_size", self.arch),
                         bias)

    def positional(self, config, w: Weights, prefix: str, head_dim: int, eps: float):
        """Position encoding of one layer: shared RoPE (Qwen3 adds q/k norms)."""
        return self.rope
