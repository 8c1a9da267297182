"""Recurrent-state checkpoints of the hybrid prefix cache.

A Gated-DeltaNet layer's state after a prefix cannot be rebuilt from KV blocks, so
prefix caching for hybrid models keeps, beside the blocks, the request-slot state
(conv + delta-rule, ``ModelCache.snapshot``) at block boundaries where a prompt chunk
ended, keyed by the prefix key of the block that ends there (``prefix_cache``). A
request sharing a prefix resumes from the last boundary that has a checkpoint and
prefills only the tokens after it. Memory-bounded: at most ``capacity`` checkpoints,
least recently used dropped first, and a checkpoint goes with its block when the
block pool evicts that block.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional


class StateCheckpoints:
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"[prefix_cache] state checkpoints must be >= 1, got {capacity}")
        self.capacity = capacity
        self._states: "OrderedDict[bytes, list]" = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        return key in self._states

    def __len__(self) -> int:
        return len(self._states)

    def put(self, key: bytes, snapshot: list) -> None:
        self._states[key] = snapshot
        self._states.move_to_end(key)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)

    def get(self, key: bytes) -> Optional[list]:
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def drop(self, key: bytes) -> None:
        self._states.pop(key, None)

    @property
    def nbytes(self) -> int:
        """Host bytes the checkpoints hold."""
        return sum(a.nbytes for state in self._states.values() for layer in state for a in layer)
