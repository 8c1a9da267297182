"""Qwen3 dense (Qwen team 2025): the Llama layout plus an RMSNorm over head_dim of
every query and key head before RoPE (``self_attn.q_norm`` / ``k_norm``), run as the
fused ``ops.qk_norm_rope`` (with YaRN, the long-context recipe, norms then the scaled
RoPE); explicit head_dim (128 in the released models)."""
from __future__ import annotations

from metalrt import ops

from .weights import Weights
from .llama import LlamaModel
from .registry import family


class QkNormRope:
    """RMSNorm of each q and k head (own weights per layer: the stored ones, or those
    given — Gemma 3's 1 + w), then the model's RoPE: one fused ``ops.qk_norm_rope``
    for plain NeoX RoPE, else ``ops.rms_norm`` of q and k and the ``Rope`` (scaled
    frequencies: YaRN, linear, ...)."""

    def __init__(self, w: Weights, prefix: str, head_dim: int, eps: float, rope,
                 weights=None):
        self.q_weight, self.k_weight = weights or (
            w.load(prefix + "self_attn.q_norm.weight", (head_dim,)),
            w.load(prefix + "self_attn.k_norm.weight", (head_dim,)))
        self.eps, self.rope = eps, rope

    def __call__(self, q, k, step):
        if self.rope.scaled or not self.rope.neox:
            return self.rope(ops.rms_norm(q, self.q_weight, self.eps),
                             ops.rms_norm(k, self.k_weight, self.eps), step)
        return ops.qk_norm_rope(q, k, self.q_weight, self.k_weight, step.positions, self.eps,
                                self.rope.rotary_dim, self.rope.base)


@family
class Qwen3Model(LlamaModel):
    arch = "qwen3"

    def positional(self, config, w, prefix, head_dim, eps):
        return QkNormRope(w, prefix, head_dim, eps, self.rope)
