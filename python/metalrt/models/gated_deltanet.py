"""The Gated-DeltaNet linear-attention mixer of Qwen3-Next and Qwen3.5 (Yang et al.
2024, "Gated Delta Networks"; transformers 5.24 ``Qwen3NextGatedDeltaNet``, reference
``docs/models.md``):

    [q | k | v], z, b, a = in_proj(x)              q, k: Hk heads of Dk; v, z: Hv of Dv
    [q | k | v] = silu(causal depthwise conv1d)    kernel K, per-request conv state
    g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)                (f32)
    o = gated delta rule(l2norm(q) * Dk^-0.5, l2norm(k), v, g, beta)  f32 state [Hv, Dk, Dv]
    out = out_proj(rmsnorm(o) * norm.weight * silu(z))        per value head, plain w

Weights are in Qwen3.5's layout (``linear_attn.in_proj_qkv`` / ``in_proj_z`` /
``in_proj_b`` / ``in_proj_a``); ``qwen3_next.py`` brings Qwen3-Next's grouped
``in_proj_qkvz`` / ``in_proj_ba`` into it at load. The per-request state lives in the
pools of its ``cache.RecurrentLayer`` and is indexed by the step's ``state_slots``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

import metalrt
from metalrt import ops

from ..cache import RecurrentLayer, StepInputs
from ..cache.layout import expect_kind, expect_rows
from .config_values import config_int
from .layers import Linear
from .weights import Weights


@dataclass(frozen=True)
class GdnShape:
    """Head counts and sizes of a GDN layer (config names in parentheses)."""

    k_heads: int        # linear_num_key_heads
    v_heads: int        # linear_num_value_heads, a multiple of k_heads
    k_dim: int          # linear_key_head_dim
    v_dim: int          # linear_value_head_dim
    conv_width: int     # linear_conv_kernel_dim
    # Value heads tiled (value head j uses key head j % k_heads: llama.cpp's qwen35
    # GGUF files, ``linear_v_heads_tiled`` in the loader's config) instead of grouped.
    v_heads_tiled: bool = False

    @classmethod
    def from_config(cls, config: Mapping, arch: str) -> "GdnShape":
        shape = cls(*(config_int(config, key, arch) for key in (
            "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim")), config_int(config, "linear_conv_kernel_dim", arch, 4, minimum=2),
            bool(config.get("linear_v_heads_tiled", False)))
        if shape.v_heads % shape.k_heads:
            raise ValueError(f"[{arch}] config 'linear_num_value_heads' ({shape.v_heads}) must be "
                             f"a multiple of 'linear_num_key_heads' ({shape.k_heads})")
        return shape

    @property
    def key_dim(self) -> int:
        return self.k_heads * self.k_dim

    @property
    def value_dim(self) -> int:
        return self.v_heads * self.v_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the conv (and of its state): [q_all | k_all | v_all]."""
        return 2 * self.key_dim + self.value_dim


class GatedDeltaNet:
    """One GDN mixer: ``(h_normed, step, layer_cache) -> [T, hidden]``, updating the
    layer's two state pools in place at the slots of the step's requests."""

    def __init__(self, w: Weights, prefix: str, shape: GdnShape, hidden: int, eps: float):
        self.shape, self.eps = shape, float(eps)
        p = prefix + "linear_attn."
        # q|k|v, z and b share one GEMM when they are stored alike; a is its own.
        self.in_proj = Linear.load_split(w, [p + "in_proj_qkv", p + "in_proj_z", p + "in_proj_b"],
                                         [shape.conv_dim, shape.value_dim, shape.v_heads],
                                         hidden, False)
        self.in_proj_a = Linear.load(w, [p + "in_proj_a"], [shape.v_heads], hidden, False)
        self.conv_weight = w.upload(w.float_host(p + "conv1d.weight",
                                                 (shape.conv_dim, 1, shape.conv_width))[:, 0, :])
        # The gates are computed in f32 whatever the model's dtype (mlx-lm#902).
        self.A_log = metalrt.asarray(np.asarray(w.float_host(p + "A_log", (shape.v_heads,)),
                                                np.float32), device=w.device)
        self.dt_bias = metalrt.asarray(np.asarray(w.float_host(p + "dt_bias", (shape.v_heads,)),
                                                  np.float32), device=w.device)
        self.norm_weight = w.load(p + "norm.weight", (shape.v_dim,))
        self.out_proj = Linear.load(w, [p + "out_proj"], [hidden], shape.value_dim, False)

    def check_cache(self, cache, dtype: str, device: str, where: str) -> None:
        """TypeError unless ``cache`` is a ``RecurrentLayer``; ValueError unless its conv
        state is rows [conv_dim, conv_width - 1] of ``dtype`` and its delta-rule state rows
        [v_heads, k_dim, v_dim] of float32, both on ``device``."""
        s = self.shape
        expect_kind(cache, RecurrentLayer, where)
        expect_rows(cache.conv, "conv", (s.conv_dim, s.conv_width - 1), dtype, device, where)
        expect_rows(cache.recurrent, "recurrent", (s.v_heads, s.k_dim, s.v_dim), "float32",
                    device, where)

    def project(self, x):
        s = self.shape
        if len(self.in_proj) == 1:
            return ops.qkv_split(self.in_proj[0](x), s.conv_dim, s.value_dim, s.v_heads)
        return tuple(proj(x) for proj in self.in_proj)

    def __call__(self, x, step: StepInputs, cache: RecurrentLayer):
        s, tokens = self.shape, x.shape[0]
        mixed_qkv, z, b = self.project(x)
        mixed_qkv = ops.causal_conv1d(mixed_qkv, self.conv_weight, cache.conv,
                                      step.query_start_loc, step.state_slots, activation="silu")
        g, beta = ops.gdn_gating(self.in_proj_a(x), b, self.A_log, self.dt_bias)
        o = ops.gated_delta_rule(mixed_qkv, g, beta, cache.recurrent, step.query_start_loc,
                                 step.state_slots, num_k_heads=s.k_heads, head_k_dim=s.k_dim,
                                 num_v_heads=s.v_heads, head_v_dim=s.v_dim,
                                 v_heads_tiled=s.v_heads_tiled)
        o = ops.gated_rms_norm(o.reshape(tokens * s.v_heads, s.v_dim),
                               z.reshape(tokens * s.v_heads, s.v_dim), self.norm_weight, self.eps)
        return self.out_proj(o.reshape(tokens, s.value_dim))
