"""Paged KV cache (vLLM's PagedAttention layout, Kwon et al. 2023).

Every layer has a key and a value cache of shape ``[num_blocks, 16, kv_heads,
head_dim]``. A sequence owns a list of blocks (its block table); token ``p`` of the
sequence lives in block ``table[p // 16]``, row ``p % 16``. Blocks come from one free
list shared by all layers.
"""
from __future__ import annotations

from typing import List

import numpy as np

import metalrt
from metalrt import huge_pages

from .batch import BLOCK_SIZE

# The numpy element type that stores each cache dtype's bits (asarray(copy=False)).
_STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


class OutOfBlocksError(RuntimeError):
    """Raised when the KV cache has fewer free blocks than a request needs."""


class BlockAllocator:
    """A free list of block ids ``0 .. num_blocks - 1`` (also of recurrent-state slots:
    ``what`` names the kind in error messages)."""

    def __init__(self, num_blocks: int, what: str = "block"):
        if num_blocks < 1:
            raise ValueError(f"[kv_cache] num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks, self.what = num_blocks, what
        # Popped from the end: the lowest ids are handed out first.
        self._free: List[int] = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> List[int]:
        """Takes ``count`` blocks; raises OutOfBlocksError when fewer are free."""
        if count > len(self._free):
            raise OutOfBlocksError(f"[kv_cache] out of {self.what}s: {count} needed, "
                                   f"{len(self._free)} of {self.num_blocks} free")
        taken = self._free[len(self._free) - count:][::-1]
        del self._free[len(self._free) - count:]
        return taken

    def free(self, blocks: List[int]) -> None:
        """Returns blocks to the free list; raises ValueError for an id that is out of
        range or already free (a double free would hand one block to two sequences)."""
        free = set(self._free)
        for block in blocks:
            if not 0 <= block < self.num_blocks or block in free:
                raise ValueError(f"[kv_cache] {self.what} {block} is not an allocated {self.what}")
            free.add(block)
        self._free.extend(reversed(blocks))


def blocks_for(num_tokens: int) -> int:
    """Number of 16-token blocks that hold ``num_tokens`` tokens."""
    return -(-num_tokens // BLOCK_SIZE)


class PagedKVCache:
    """Key/value cache tensors of every layer on ``device``.

    Memory: ``2 * num_layers * num_blocks * 16 * kv_heads * head_dim`` elements of
    ``dtype``, one zero-filled allocation a side with a view a layer; on the CPU under
    Linux that allocation sits in 2 MB pages (``metalrt.huge_pages``): a decode step's
    attention reads each layer's context after the weights have streamed through the
    caches, and in 4 KB pages every page it touched was a TLB miss (the attention call
    of the default model 37.9 -> 31.8 us, docs/cpu.md). The price: a layer's memory is
    faulted in 2 MB at a time, so a large cache used sparsely (a short request in a
    server's 8,192-token cache) is resident 2 MB a layer and side sooner than in 4 KB
    pages (never more than the whole cache). The blocks are handed out by
    the BlockAllocator of the engine using the cache; ``in_use`` marks a cache an
    engine holds, so that a second generation running at the same time gets its own.
    """

    def __init__(self, num_layers: int, num_blocks: int, kv_heads: int, head_dim: int,
                 device: str, dtype: str = "float32"):
        self.num_blocks = num_blocks
        self.in_use = False
        # The decode plans recorded over this cache, kept for the next engine that
        # holds it (runner.engine): recording a plan runs the model op by op.
        self.decode_plans = None
        shape = (num_layers, num_blocks, BLOCK_SIZE, kv_heads, head_dim)
        # Zero-filled so that no uninitialised bytes (possibly NaN) ever sit in a cache.
        # (A cache of no elements, e.g. a hybrid model with no attention layer, has no
        # pages to place.)
        if device == "cpu" and dtype in _STORAGE and huge_pages.available() and all(shape):
            sides = [self._huge_page_side(shape, dtype) for _ in range(2)]
        else:
            sides = [metalrt.zeros(shape, dtype, device) for _ in range(2)]
        self.keys, self.values = ([side[layer] for layer in range(num_layers)] for side in sides)

    @staticmethod
    def _huge_page_side(shape, dtype: str) -> metalrt.Tensor:
        storage = np.dtype(_STORAGE[dtype])
        memory = huge_pages.allocate(int(np.prod(shape)) * storage.itemsize)   # zero-filled
        return metalrt.asarray(np.frombuffer(memory, storage).reshape(shape), "cpu", dtype,
                               copy=False)
