"""Phi-3 and Phi-4 (``Phi3ForCausalLM``: Phi-3-mini/medium, Phi-4, Phi-4-mini): the
Llama layer with Q/K/V stored as one ``self_attn.qkv_proj`` ([q | k | v] rows) and
gate/up as one ``mlp.gate_up_proj`` ([gate | up] rows), each used as stored (one GEMM,
any weight format); ``sliding_window`` is every layer's window. Phi-4-mini's partial
RoPE is Llama's ``partial_rotary_factor``; its (and the 128k variants') ``longrope``
scaling is in the RoPE table (``rope.py``): a sequence longer than
``original_max_position_embeddings`` rotates with the long factors, and the engine
recomputes one that grows past it, as transformers' Phi-3 generation does
(``runner/scheduler.py``)."""
from __future__ import annotations

from .rope import partial_rotary_dim
from .config_values import config_int
from .layers import GatedMLP, Linear
from .llama import LlamaModel
from .registry import family


@family
class Phi3Model(LlamaModel):
    arch = "phi3"

    def attention_window(self, config) -> int:
        """``sliding_window`` (Phi-3-mini's 2,047; null: 0, full attention), every layer's
        window as transformers' ``Phi3Model`` masks it; one of at least the context
        (Phi-4-mini's 262,144 over 131,072 positions) is full attention too."""
        window = config_int(config, "sliding_window", self.arch, 0)
        return 0 if self.context_length is not None and window >= self.context_length else window

    def rotary_dim(self, config, head_dim):
        return partial_rotary_dim(config, head_dim, self.arch, 1.0)

    def qkv_projections(self, w, prefix, q_rows, kv_rows, hidden, bias):
        return [Linear.load(w, [prefix + "self_attn.qkv_proj"], [q_rows + 2 * kv_rows], hidden, bias)]

    def feed_forward(self, config, w, prefix, index, hidden, bias):
        inner = config_int(config, "intermediate_size", self.arch)
        return GatedMLP(Linear.load(w, [prefix + "mlp.gate_up_proj"], [2 * inner], hidden, bias),
                        Linear.load(w, [prefix + "mlp.down_proj"], [hidden], inner, bias))
