"""The full-attention layers of the hybrid families (transformers 5.24
``Qwen3NextAttention``, reused by Qwen3.5 and Qwen3.5-MoE): grouped-query attention over
the paged KV cache whose ``q_proj`` also yields a per-head output gate (per head, D query
values then D gate values), zero-centred q/k RMSNorm (``(1 + w)``, added at load),
partial NeoX RoPE over the first ``head_dim * partial_rotary_factor`` features, and
``attn * sigmoid(gate)`` before ``o_proj``."""
from __future__ import annotations

from metalrt import ops

from ..cache import PagedKVLayer, StepInputs
from .attention import Attention
from .layers import Linear
from .weights import Weights
from .norms import unit_offset_weight


class GatedAttention(Attention):
    """``Attention`` with the output gate and the (1 + w) q/k norms; ``rope`` is the
    model's partial ``base.Rope`` (plain NeoX, no scaling)."""

    def __init__(self, w: Weights, prefix: str, hidden: int, heads: int, kv_heads: int,
                 head_dim: int, eps: float, rope):
        p = prefix + "self_attn."
        qkv = Linear.load_split(w, [p + "q_proj", p + "k_proj", p + "v_proj"],
                                [2 * heads * head_dim, kv_heads * head_dim, kv_heads * head_dim],
                                hidden, False)
        out = Linear.load(w, [p + "o_proj"], [hidden], heads * head_dim, False)
        super().__init__(qkv, out, heads, kv_heads, head_dim, None)
        self.q_norm = unit_offset_weight(w, p + "q_norm.weight", head_dim)
        self.k_norm = unit_offset_weight(w, p + "k_norm.weight", head_dim)
        self.eps, self.rope = float(eps), rope

    def project_qkv(self, x):
        if len(self.qkv) == 3:
            return tuple(proj(x) for proj in self.qkv)
        kv_width = self.kv_heads * self.head_dim
        return ops.qkv_split(self.qkv[0](x), 2 * self.heads * self.head_dim, kv_width, kv_width)

    def attend(self, x, step: StepInputs, cache: PagedKVLayer):
        """The gated attention output [tokens, heads * head_dim] before ``o_proj``; the
        base class's ``__call__`` and ``add_to`` (the residual add fused into
        ``o_proj``, what ``PreNormLayer`` calls) both run it."""
        tokens = x.shape[0]
        q_gate, k, v = self.project_qkv(x)
        q, gate = ops.gated_query_split(q_gate, self.heads, self.head_dim)
        k = k.reshape(tokens, self.kv_heads, self.head_dim)
        v = v.reshape(tokens, self.kv_heads, self.head_dim)
        q, k = ops.qk_norm_rope(q, k, self.q_norm, self.k_norm, step.positions, self.eps,
                                self.rope.rotary_dim, self.rope.base)
        ops.reshape_and_cache(k, v, cache.keys, cache.values, step.slot_mapping)
        attn = ops.paged_attention(q, cache.keys, cache.values, step.block_tables, step.seq_lens,
                                   step.query_start_loc, self.scale)
        return ops.sigmoid_mul(attn.reshape(tokens, self.heads * self.head_dim), gate)
