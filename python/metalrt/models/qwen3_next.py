"""Qwen3-Next (Qwen team 2025; transformers 5.24 ``qwen3_next``): the hybrid decoder
(``hybrid``) with sparse MoE blocks (shared expert included) where the sparse-layer rule
says (``mlp_only_layers``, ``decoder_sparse_step``) and dense SwiGLU MLPs elsewhere;
top-k weights renormalised iff ``norm_topk_prob`` (default True).

Its GDN input projections are fused and grouped per key head: ``in_proj_qkvz`` rows per
key head are [q (Dk), k (Dk), v (r·Dv), z (r·Dv)] and ``in_proj_ba`` rows [b (r), a (r)]
with r = Hv / Hk (``fix_query_key_value_ordering``). At load their rows are regrouped
into Qwen3.5's separate ``in_proj_qkv`` ([q_all | k_all | v_all], the conv's channel
order), ``in_proj_z``, ``in_proj_b`` and ``in_proj_a``, as llama.cpp's converter does;
value head j stays grouped with key head j // r."""
from __future__ import annotations

from collections import ChainMap

import numpy as np

from .gated_deltanet import GdnShape
from .hybrid import HybridModel
from .hybrid_config import LINEAR, sparse_layers
from .quantized import take_rows


def regrouped_projections(qkvz, ba, s: GdnShape) -> dict:
    """{suffix: rows} of Qwen3.5's four projections from Qwen3-Next's two."""
    r = s.v_heads // s.k_heads
    group = 2 * s.k_dim + 2 * r * s.v_dim
    heads = np.arange(s.k_heads)[:, None] * group

    def rows(start, size):
        return (heads + start + np.arange(size)[None, :]).reshape(-1)

    qkv = np.concatenate([rows(0, s.k_dim), rows(s.k_dim, s.k_dim), rows(2 * s.k_dim, r * s.v_dim)])
    z = rows(2 * s.k_dim + r * s.v_dim, r * s.v_dim)
    b = (np.arange(s.k_heads)[:, None] * 2 * r + np.arange(r)[None, :]).reshape(-1)
    return {"in_proj_qkv.weight": take_rows(qkvz, qkv), "in_proj_z.weight": take_rows(qkvz, z),
            "in_proj_b.weight": take_rows(ba, b), "in_proj_a.weight": take_rows(ba, b + r)}


class Qwen3NextModel(HybridModel):
    arch = "qwen3_next"

    def sparse_layers(self, config):
        return sparse_layers(config, self.arch)

    def renormalize(self, config):
        value = config.get("norm_topk_prob")
        return True if value is None else bool(value)

    def qwen3_5_layout(self, weights, prefix, types, shape):
        regrouped = {}
        for i, kind in enumerate(types):
            p = f"{prefix}layers.{i}.linear_attn."
            if kind != LINEAR or p + "in_proj_qkvz.weight" not in weights:
                continue
            for name in ("in_proj_qkvz.weight", "in_proj_ba.weight"):
                if p + name not in weights:
                    raise ValueError(f"[{self.arch}] missing tensor '{p + name}'")
            regrouped.update({p + k: v for k, v in regrouped_projections(
                weights[p + "in_proj_qkvz.weight"], weights[p + "in_proj_ba.weight"], shape).items()})
        return ChainMap(regrouped, weights)
