"""The zero-centred RMSNorm of the hybrid families (transformers 5.24
``Qwen3NextRMSNorm`` / ``Qwen3_5RMSNorm``: rmsnorm(x) * (1 + w), weights initialised
to zeros), run as a plain RMSNorm whose weight had 1 added at load, as mlx-lm and
llama.cpp do. Not the GDN output norm (``linear_attn.norm``), which is plain w."""
from __future__ import annotations

import numpy as np

from .layers import RMSNorm
from .weights import Weights


def unit_offset_weight(w: Weights, name: str, size: int):
    """1 + the stored weight, added in f32 on the host, on the model's device."""
    return w.upload(np.asarray(w.float_host(name, (size,)), np.float32) + np.float32(1))


class UnitOffsetRMSNorm(RMSNorm):
    def __init__(self, w: Weights, name: str, size: int, eps: float):
        self.weight, self.eps = unit_offset_weight(w, name, size), float(eps)
