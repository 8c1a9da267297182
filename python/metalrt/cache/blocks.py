"""Blocks of the paged KV cache and the free lists that hand them out.

A sequence owns a list of blocks (its block table); token ``p`` of the sequence lives
in block ``table[p // BLOCK_SIZE]``, row ``p % BLOCK_SIZE``. Blocks come from one free
list shared by all layers; the recurrent-state slots of hybrid models come from a free
list of the same kind.
"""
from __future__ import annotations

from typing import List

BLOCK_SIZE = 16  # tokens per KV-cache block (vLLM's default)


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
