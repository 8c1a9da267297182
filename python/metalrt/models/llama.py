"""Llama (Touvron et al. 2023; Llama 3, SmolLM2): pre-RMSNorm decoder layers, NeoX
RoPE (optionally with Llama 3.1 frequency scaling), grouped-query attention, SwiGLU
MLP, optionally tied input/output embeddings. Weight names are Hugging Face's
``LlamaForCausalLM`` state dict; any matrix (projections, embedding, LM head) may be
quantized, the norms are float."""
from __future__ import annotations

from typing import Mapping, Optional, Tuple

import numpy as np

from .attention import Attention, Rope
from .config_values import config_bool, config_float, config_int
from .decoder import CausalLM, PreNormLayer
from .layers import Embedding, Linear, RMSNorm, dense_mlp
from .rope import long_rope_switch, rope_frequencies
from .shape import DecoderShape
from .weights import Weights
from .registry import family


# llama.cpp's per-frequency RoPE factors (Llama 3.1 files), under the name the GGUF
# loader gives them.
ROPE_FREQS = "rope_freqs.weight"


@family
class LlamaModel(CausalLM):
    arch = "llama"
    qkv_bias_default = False      # Qwen2 has Q/K/V biases
    out_bias_follows_qkv = True   # Llama's o_proj shares attention_bias; Qwen2's has none
    tied_default = False          # HF LlamaConfig default
    layer_ranges = True

    def __init__(self, config: Mapping, weights: Mapping[str, np.ndarray], device: str,
                 dtype: str = "float32", layers: Optional[Tuple[int, int]] = None):
        """``layers``: (start, stop) of a pipeline stage (``CausalLM.stage_layers``); only
        the tensors of those layers are read (and the embedding, final norm and LM head
        where the stage needs them), so a stage maps only its share of the file."""
        arch = self.arch
        shape = DecoderShape.from_config(config, arch)
        hidden, heads, kv_heads, head_dim = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        vocab = shape.vocab
        eps = config_float(config, "rms_norm_eps", arch, 1e-6)
        if config.get("hidden_act", "silu") != "silu":   # the gated MLP is SwiGLU
            raise ValueError(f"[{arch}] unsupported hidden_act {config.get('hidden_act')!r} "
                             "(supported: silu)")
        super().__init__(config, device, dtype, shape)
        built = self.stage_layers(layers)

        w = Weights(weights, device, dtype, arch)
        tied = config_bool(config, "tie_word_embeddings", arch, self.tied_default)
        if self.first_stage or (tied and self.last_stage):
            self.embed_tokens = Embedding.load(w, "model.embed_tokens.weight", vocab, hidden)
        qkv_bias = config_bool(config, "attention_bias", arch, self.qkv_bias_default)
        mlp_bias = config_bool(config, "mlp_bias", arch, False)
        self.rope = self.make_rope(config, w, self.rotary_dim(config, head_dim))
        self.rope_switch = long_rope_switch([self.rope.freqs], arch)
        window = self.attention_window(config)
        self.layers = []
        for i in built:
            p = f"model.layers.{i}."
            qkv = self.qkv_projections(w, p, heads * head_dim, kv_heads * head_dim, hidden, qkv_bias)
            out = Linear.load(w, [p + "self_attn.o_proj"], [hidden], heads * head_dim,
                              qkv_bias and self.out_bias_follows_qkv)
            attention = Attention(qkv, out, heads, kv_heads, head_dim,
                                  self.positional(config, w, p, head_dim, eps),
                                  window=window)
            mlp = self.feed_forward(config, w, p, i, hidden, mlp_bias)
            self.layers.append(PreNormLayer(RMSNorm(w, p + "input_layernorm.weight", hidden, eps),
                                            attention,
                                            RMSNorm(w, p + "post_attention_layernorm.weight", hidden, eps),
                                            mlp))
        if self.last_stage:
            self.final_norm = RMSNorm(w, "model.norm.weight", hidden, eps)
            self.lm_head = (self.embed_tokens.table if tied
                            else w.matrix("lm_head.weight", (vocab, hidden)))

    def feed_forward(self, config, w: Weights, prefix: str, index: int, hidden: int,
                     bias: bool):
        """The MLP of layer ``index`` (Qwen3-MoE puts sparse MoE blocks here)."""
        return dense_mlp(w, prefix + "mlp.", hidden, config_int(config, "intermediate_size", self.arch),
                         bias)

    def make_rope(self, config, w: Weights, rotary_dim: int, layer_type=None) -> Rope:
        """The RoPE of the config (``rope.py``: every variant), with a GGUF's
        ``rope_freqs.weight`` factor table where the file has one; interleaved pairs
        where the config says ``rope_interleaved`` (Llama GGUF files)."""
        factors = (w.float_host(ROPE_FREQS, (rotary_dim // 2,)) if w.has(ROPE_FREQS) else None)
        freqs = rope_frequencies(config, rotary_dim, self.arch, layer_type, factors)
        return Rope(freqs, not config_bool(config, "rope_interleaved", self.arch, False),
                    self.device)

    def attention_window(self, config) -> int:
        """The sliding window of every layer's attention, in positions (0: full causal
        attention, Llama's; Mistral reads ``sliding_window``)."""
        return 0

    def rotary_dim(self, config, head_dim: int) -> int:
        """The leading features of a head that RoPE rotates: all of them (Phi-3 reads
        ``partial_rotary_factor``)."""
        return head_dim

    def qkv_projections(self, w: Weights, prefix: str, q_rows: int, kv_rows: int, hidden: int,
                        bias: bool):
        """One layer's Q, K and V projections for ``Attention`` (q_rows = heads x
        head_dim, kv_rows = kv_heads x head_dim): three stored tensors, or the one merged
        projection a family stores (Phi-3)."""
        return Linear.load_split(
            w, [prefix + "self_attn.q_proj", prefix + "self_attn.k_proj", prefix + "self_attn.v_proj"],
            [q_rows, kv_rows, kv_rows], hidden, bias)

    def positional(self, config, w: Weights, prefix: str, head_dim: int, eps: float):
        """Position encoding of one layer: shared RoPE (Qwen3 adds q/k norms)."""
        return self.rope
