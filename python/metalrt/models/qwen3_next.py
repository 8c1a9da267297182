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

from ..loaders.host_weights import take_rows
import numpy as np

from .config_values import config_bool
from .gated_deltanet import GdnShape
from .hybrid import HybridModel
from .hybrid_config import LINEAR, sparse_layers
from .registry import family


def _per_key_head(s: GdnShape, group: int, start: int, size: int) -> np.ndarray:
    """Row indices of the part [start, start + size) of every key head's group."""
    heads = np.arange(s.k_heads)[:, None] * group
    return (heads + start + np.arange(size)[None, :]).reshape(-1)


def regrouped_qkvz(qkvz, s: GdnShape) -> dict:
    """Qwen3.5's in_proj_qkv ([q_all | k_all | v_all]) and in_proj_z from in_proj_qkvz."""
    r = s.v_heads // s.k_heads
    group = 2 * s.k_dim + 2 * r * s.v_dim
    qkv = np.concatenate([_per_key_head(s, group, 0, s.k_dim),
                          _per_key_head(s, group, s.k_dim, s.k_dim),
                          _per_key_head(s, group, 2 * s.k_dim, r * s.v_dim)])
    return {"in_proj_qkv.weight": take_rows(qkvz, qkv),
            "in_proj_z.weight": take_rows(qkvz, _per_key_head(s, group, 2 * s.k_dim + r * s.v_dim,
                                                              r * s.v_dim))}


def regrouped_ba(ba, s: GdnShape) -> dict:
    """Qwen3.5's in_proj_b and in_proj_a from in_proj_ba ([b (r), a (r)] per key head)."""
    r = s.v_heads // s.k_heads
    return {"in_proj_b.weight": take_rows(ba, _per_key_head(s, 2 * r, 0, r)),
            "in_proj_a.weight": take_rows(ba, _per_key_head(s, 2 * r, r, r))}


def _fused_rows(fused: str, s: GdnShape) -> int:
    """Rows of in_proj_qkvz (q, k, v, z of every key head) or in_proj_ba (b, a)."""
    return 2 * s.key_dim + 2 * s.value_dim if fused == "in_proj_qkvz" else 2 * s.v_heads


@family
class Qwen3NextModel(HybridModel):
    arch = "qwen3_next"

    def sparse_layers(self, config):
        return sparse_layers(config, self.arch)

    def renormalize(self, config):
        return config_bool(config, "norm_topk_prob", self.arch, True)

    def qwen3_5_layout(self, weights, prefix, types, shape):
        """Qwen3-Next's grouped projections as Qwen3.5's (GGUF files hold in_proj_qkv
        and in_proj_z already; their in_proj_ba is still grouped)."""
        regrouped = {}
        for i, kind in enumerate(types):
            p = f"{prefix}layers.{i}.linear_attn."
            if kind != LINEAR:
                continue
            for fused, split, regroup in (("in_proj_qkvz", "in_proj_qkv", regrouped_qkvz),
                                          ("in_proj_ba", "in_proj_b", regrouped_ba)):
                if f"{p}{split}.weight" in weights:
                    continue
                name = f"{p}{fused}.weight"
                if name not in weights:
                    raise ValueError(f"[{self.arch}] missing tensor '{name}'")
                # The regrouping picks rows by index: check the count first (the columns
                # are checked when the regrouped projections load).
                rows = _fused_rows(fused, shape)
                if len(weights[name].shape) != 2 or weights[name].shape[0] != rows:
                    raise ValueError(f"[{self.arch}] tensor '{name}' has shape "
                                     f"{list(weights[name].shape)}, expected [{rows}, hidden_size]")
                regrouped.update({p + k: v for k, v in regroup(weights[name], shape).items()})
        return ChainMap(regrouped, weights)
