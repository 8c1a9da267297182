"""Phi-3 and Phi-4 (``Phi3ForCausalLM``: Phi-3-mini/medium 4k, Phi-4, Phi-4-mini): the
Llama layer with Q/K/V stored as one ``self_attn.qkv_proj`` ([q | k | v] rows) and
gate/up as one ``mlp.gate_up_proj`` ([gate | up] rows), each used as stored (one GEMM,
any weight format). Phi-4-mini's partial RoPE is Llama's ``partial_rotary_factor``; its (and the 128k
variants') ``longrope`` scaling is in the RoPE table (``rope.py``): a step whose largest
position is at or past ``original_max_position_embeddings`` rotates with the long
factors, as transformers' ``Phi3RotaryEmbedding`` does."""
from __future__ import annotations

from .rope import partial_rotary_dim
from .config_values import config_int
from .layers import GatedMLP, Linear
from .llama import LlamaModel
from .registry import family


@family
class Phi3Model(LlamaModel):
    arch = "phi3"

    def __init__(self, config, weights, device, dtype="float32", layers=None):
        super().__init__(config, weights, device, dtype, layers)
        # Attention past a sliding window (Phi-3-mini's 2,047) is not implemented yet:
        # within it, full attention is the same, so the context stops there.
        window = config_int(config, "sliding_window", self.arch, None)
        if window is not None and (self.context_length is None or window < self.context_length):
            self.context_length = window

    def rotary_dim(self, config, head_dim):
        return partial_rotary_dim(config, head_dim, self.arch, 1.0)

    def qkv_projections(self, w, prefix, q_rows, kv_rows, hidden, bias):
        return [Linear.load(w, [prefix + "self_attn.qkv_proj"], [q_rows + 2 * kv_rows], hidden, bias)]

    def feed_forward(self, config, w, prefix, index, hidden, bias):
        inner = config_int(config, "intermediate_size", self.arch)
        return GatedMLP(Linear.load(w, [prefix + "mlp.gate_up_proj"], [2 * inner], hidden, bias),
                        Linear.load(w, [prefix + "mlp.down_proj"], [hidden], inner, bias))
