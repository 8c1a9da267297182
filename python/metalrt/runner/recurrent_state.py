"""Per-request recurrent state of the Gated-DeltaNet layers, beside the paged KV cache
of the full-attention layers (vLLM's mamba state pools; reference in docs/models.md).

Each GDN layer has two pools indexed by a request's state slot: the conv state
``[num_slots, conv_dim, K - 1]`` (the last K - 1 pre-conv inputs, the model's dtype)
and the delta-rule state ``[num_slots, v_heads, k_dim, v_dim]`` (always float32). A
slot is taken when the scheduler admits a request, zeroed before its first chunk and
freed with the request (finish or abort). Their size does not grow with the sequence.

The state cannot be rolled back to an earlier position, so a prompt prefix cannot be
reused from another request's KV blocks: engines over a ``HybridCache`` run without
prefix caching.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

import metalrt

from .kv_cache import PagedKVCache

LINEAR, FULL = "linear_attention", "full_attention"


class RecurrentStatePool:
    """The conv and delta-rule state pools of ``num_layers`` GDN layers."""

    def __init__(self, num_layers: int, num_slots: int, conv_dim: int, conv_width: int,
                 v_heads: int, k_dim: int, v_dim: int, device: str, dtype: str = "float32"):
        if num_slots < 1:
            raise ValueError(f"[recurrent_state] num_slots must be >= 1, got {num_slots}")
        self.num_slots = num_slots
        conv_shape = (num_slots, conv_dim, conv_width - 1)
        state_shape = (num_slots, v_heads, k_dim, v_dim)
        self.conv = [metalrt.zeros(conv_shape, dtype, device) for _ in range(num_layers)]
        self.recurrent = [metalrt.zeros(state_shape, "float32", device) for _ in range(num_layers)]
        # copy_from takes float16 host arrays for float16 tensors, float32 otherwise.
        host_dtype = np.float16 if dtype == "float16" else np.float32
        self._zero_conv = np.zeros((1, *conv_shape[1:]), host_dtype)
        self._zero_state = np.zeros((1, *state_shape[1:]), np.float32)

    def reset(self, slot: int) -> None:
        """Zeroes slot ``slot`` of every pool (a new request starts from no history)."""
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"[recurrent_state] slot {slot} is outside [0, {self.num_slots})")
        for conv, recurrent in zip(self.conv, self.recurrent):
            conv[slot:slot + 1].copy_from(self._zero_conv)
            recurrent[slot:slot + 1].copy_from(self._zero_state)


class HybridCache:
    """What a hybrid model keeps per request: a ``PagedKVCache`` for its full-attention
    layers and a ``RecurrentStatePool`` for its GDN layers.

    ``keys[i]`` / ``values[i]`` are the two tensors layer i's mixer is called with: its
    K and V caches for a full-attention layer, its conv and delta-rule state pools for
    a GDN layer (so the model's forward pass walks every layer alike).
    """

    def __init__(self, layer_types: Sequence[str], num_blocks: int, num_slots: int,
                 kv_heads: int, head_dim: int, conv_dim: int, conv_width: int, v_heads: int,
                 k_dim: int, v_dim: int, device: str, dtype: str = "float32"):
        attention = [i for i, t in enumerate(layer_types) if t == FULL]
        linear = [i for i, t in enumerate(layer_types) if t == LINEAR]
        self.kv = PagedKVCache(len(attention), num_blocks, kv_heads, head_dim, device, dtype)
        self.state = RecurrentStatePool(len(linear), num_slots, conv_dim, conv_width, v_heads,
                                        k_dim, v_dim, device, dtype)
        self.decode_plans = None   # as PagedKVCache.decode_plans, over both parts
        self.keys: List = [None] * len(layer_types)
        self.values: List = [None] * len(layer_types)
        for j, i in enumerate(attention):
            self.keys[i], self.values[i] = self.kv.keys[j], self.kv.values[j]
        for j, i in enumerate(linear):
            self.keys[i], self.values[i] = self.state.conv[j], self.state.recurrent[j]

    @property
    def num_blocks(self) -> int:
        return self.kv.num_blocks

    @property
    def in_use(self) -> bool:
        return self.kv.in_use

    @in_use.setter
    def in_use(self, value: bool) -> None:
        self.kv.in_use = value
