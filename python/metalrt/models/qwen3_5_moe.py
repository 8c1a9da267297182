"""Qwen3.5-MoE (Qwen team 2026; transformers 5.24 ``qwen3_5_moe``): the hybrid decoder
(``hybrid``) with a sparse MoE block and shared expert in every layer; the top-k
routing weights are always renormalised (the config has no ``norm_topk_prob``).
Checkpoint layouts as ``qwen3_5``; expert weights per expert or fused
(``experts``)."""
from __future__ import annotations

from .hybrid import HybridModel
from .registry import family


@family
class Qwen35MoeModel(HybridModel):
    arch = "qwen3_5_moe"
    aliases = ("qwen3_5_moe_text",)

    def sparse_layers(self, config):
        return [True] * len(self.layer_types)
