"""Per-request recurrent state of a Gated-DeltaNet layer (vLLM's mamba state pools;
reference in docs/models.md).

A GDN layer owns two pools indexed by a request's state slot (the step's
``state_slots``): the conv state ``[num_slots, conv_dim, K - 1]`` (the last K - 1
pre-conv inputs, the model's dtype) and the delta-rule state ``[num_slots, v_heads,
k_dim, v_dim]`` (always float32). A slot is taken when the scheduler admits a request,
zeroed before its first chunk and freed with the request (finish or abort). Their size
does not grow with the sequence.
"""
from __future__ import annotations

import functools

import numpy as np

import metalrt
from metalrt import ops


class RecurrentLayer:
    """One GDN layer's cache: the ``conv`` and ``recurrent`` (delta-rule) state pools of
    ``num_slots`` requests. The state cannot be rebuilt from another request's KV
    blocks, so a prompt prefix is shared through host copies of a slot (``snapshot``,
    ``restore``: the runner's state checkpoints) rather than through the blocks."""

    shares_prefixes = False

    def __init__(self, num_slots: int, conv_dim: int, conv_width: int, v_heads: int,
                 k_dim: int, v_dim: int, device: str, dtype: str = "float32"):
        if num_slots < 1:
            raise ValueError(f"[recurrent_state] num_slots must be >= 1, got {num_slots}")
        self.num_slots = num_slots
        conv_shape = (num_slots, conv_dim, conv_width - 1)
        state_shape = (num_slots, v_heads, k_dim, v_dim)
        self.conv = metalrt.zeros(conv_shape, dtype, device)
        self.recurrent = metalrt.zeros(state_shape, "float32", device)
        # copy_from takes float16 host arrays for float16 tensors, float32 otherwise.
        host_dtype = "float16" if dtype == "float16" else "float32"
        self._zero_conv = _zero_rows((1, *conv_shape[1:]), host_dtype)
        self._zero_state = _zero_rows((1, *state_shape[1:]), "float32")
        # Row indices of the device snapshots' gathers, written once: a host write per
        # snapshot would wait for the device.
        self._slot_ids = metalrt.asarray(np.arange(num_slots, dtype=np.int32), device=device)

    def reset(self, slot: int) -> None:
        """Zeroes slot ``slot`` of both pools (a new request starts from no history)."""
        self.restore(slot, (self._zero_conv, self._zero_state))

    def snapshot(self, slot: int, on_device: bool = False):
        """(conv, recurrent): copies of slot ``slot`` of both pools, exact: host arrays
        [1, ...] each (the element type ``copy_from`` takes back: float32 holds a
        bfloat16 exactly), or with ``on_device`` device tensors [1, conv_dim * (K - 1)]
        and [1, v_heads * k_dim * v_dim] copied by a row gather (no wait for the device:
        a speculative step's rollback point)."""
        self._check(slot)
        if on_device:
            row = self._slot_ids[slot:slot + 1]
            return tuple(ops.embedding(pool.reshape(self.num_slots, -1), row)
                         for pool in (self.conv, self.recurrent))
        return self.conv[slot:slot + 1].numpy(), self.recurrent[slot:slot + 1].numpy()

    def restore(self, slot: int, state) -> None:
        """Writes (conv, recurrent) rows of a ``snapshot`` (host or device) into slot
        ``slot``."""
        self._check(slot)
        for pool, rows in zip((self.conv, self.recurrent), state):
            view = pool[slot:slot + 1]
            if isinstance(rows, metalrt.Tensor):
                ops.embedding(rows, self._slot_ids[:1], out=view.reshape(1, -1))
            else:
                view.copy_from(rows)

    def _check(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"[recurrent_state] slot {slot} is outside [0, {self.num_slots})")


@functools.lru_cache(maxsize=8)
def _zero_rows(shape, dtype: str) -> np.ndarray:
    """A read-only zero host array, one for all the layers of a shape (a large model's
    delta-rule slot is megabytes)."""
    zeros = np.zeros(shape, dtype)
    zeros.flags.writeable = False
    return zeros
