"""The sparse mixture-of-experts feed-forward block of Qwen3-MoE, Qwen3-Next and
Qwen3.5-MoE (transformers 5.24 ``Qwen3MoeSparseMoeBlock`` / ``Qwen3NextSparseMoeBlock``):
a router (softmax over all experts in f32, the top k, renormalised iff
``norm_topk_prob``), SwiGLU experts of which each token runs only its k, their
routing-weighted sum, and for the hybrids a shared SwiGLU expert scaled by
sigmoid(shared_expert_gate(x)). Only the selected experts' weight rows are read
(``ops.moe_matmul_bt``)."""
from __future__ import annotations

from typing import Mapping, Optional

from metalrt import ops

from .config_values import config_int
from .experts import load_experts
from .hybrid_config import num_experts
from .layers import GatedMLP, Linear
from .weights import Weights


class SparseMoE:
    """MoE block of one layer. ``renormalize``: divide the top-k probabilities by their
    sum (``norm_topk_prob``; Qwen3.5-MoE always does). ``shared``: load the shared
    expert and its gate (Qwen3-Next, Qwen3.5-MoE)."""

    def __init__(self, config: Mapping, w: Weights, prefix: str, hidden: int,
                 renormalize: bool, shared: bool):
        arch = w.arch
        self.experts = num_experts(config, arch)
        self.top_k = config_int(config, "num_experts_per_tok", arch)
        if not 0 < self.top_k <= self.experts:
            raise ValueError(f"[{arch}] config 'num_experts_per_tok' ({self.top_k}) must be in "
                             f"[1, num_experts = {self.experts}]")
        intermediate = config_int(config, "moe_intermediate_size", arch)
        self.renormalize = renormalize
        # The router and the shared expert's gate are float in HF and GGUF files and
        # 8-bit in mlx-lm's (its quant_predicate): a linear layer of either kind.
        self.router = Linear.load(w, [prefix + "gate"], [self.experts], hidden, False)
        self.gate, self.up, self.down = load_experts(w, prefix, self.experts, hidden, intermediate)
        self.shared: Optional[GatedMLP] = None
        self.shared_gate = None
        if shared:
            n = config_int(config, "shared_expert_intermediate_size", arch)
            s = prefix + "shared_expert."
            self.shared = GatedMLP(Linear.load(w, [s + "gate_proj", s + "up_proj"], [n, n],
                                               hidden, False),
                                   Linear.load(w, [s + "down_proj"], [hidden], n, False))
            self.shared_gate = Linear.load(w, [prefix + "shared_expert_gate"], [1], hidden, False)

    def __call__(self, x):
        weights, ids = ops.moe_router(self.router(x), self.top_k,
                                      renormalize=self.renormalize)
        act = ops.silu_and_mul(ops.moe_matmul_bt(x, self.gate, ids, num_experts=self.experts,
                                                 up=self.up))
        y = ops.moe_matmul_bt(act, self.down, ids, num_experts=self.experts)
        if self.shared is None:
            return ops.moe_combine(y, weights)
        return ops.moe_combine(y, weights, shared=self.shared(x),
                               shared_gate=self.shared_gate(x))
