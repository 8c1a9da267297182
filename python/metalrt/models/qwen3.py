"""Qwen3 dense (Qwen team 2025): the Llama layout plus an RMSNorm over head_dim of
every query and key head before RoPE (``self_attn.q_norm`` / ``k_norm``), run as the
fused ``ops.qk_norm_rope``; explicit head_dim (128 in the released models)."""
from __future__ import annotations

from metalrt import ops

from .weights import Weights
from .llama import LlamaModel
from .registry import family


class QkNormRope:
    """RMSNorm of each q and k head (own weights per layer), then NeoX RoPE."""

    def __init__(self, w: Weights, prefix: str, head_dim: int, eps: float, rope):
        self.q_weight = w.load(prefix + "self_attn.q_norm.weight", (head_dim,))
        self.k_weight = w.load(prefix + "self_attn.k_norm.weight", (head_dim,))
        self.eps, self.rope = eps, rope

    def __call__(self, q, k, step):
        return ops.qk_norm_rope(q, k, self.q_weight, self.k_weight, step.positions, self.eps,
                                self.rope.rotary_dim, self.rope.base)


@family
class Qwen3Model(LlamaModel):
    arch = "qwen3"

    def positional(self, config, w, prefix, head_dim, eps):
        if self.rope.inv_freq is not None or not self.rope.neox:
            raise ValueError("[qwen3] RoPE scaling and interleaved RoPE are not supported with "
                             "q/k norm")
        return QkNormRope(w, prefix, head_dim, eps, self.rope)
