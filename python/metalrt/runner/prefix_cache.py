"""Prefix caching of the paged KV cache (vLLM's automatic prefix caching).

A full block is identified by the hash of every token up to its end: its key chains
the key of the block before it with its own 16 tokens, so two sequences share a key
only when they share the whole prefix (the K/V of a token depend on all tokens
before it). Blocks are reference-counted: a block in the tables of running requests
is never reused; when the last request holding a keyed block ends, the block stays
in the cache, evictable, and the least recently used evictable block is the first
one taken when the free list runs dry.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Dict, List, Sequence

import numpy as np

from ..cache import BLOCK_SIZE, BlockAllocator, OutOfBlocksError

ROOT_KEY = b""  # key of the (empty) prefix before a sequence's first block
# ... of a sequence on LongRoPE's long factors: its K/V differ from the short ones'.
LONG_ROPE_ROOT_KEY = b"long_rope"


def block_key(parent: bytes, tokens: Sequence[int]) -> bytes:
    """Key of the block holding ``tokens`` (BLOCK_SIZE ids) after the prefix keyed
    ``parent``: sha256 over the parent key and the int32 ids (a collision would make
    two prompts share K/V, so a cryptographic hash, as vLLM's sha256 option)."""
    return hashlib.sha256(parent + np.asarray(tokens, dtype=np.int32).tobytes()).digest()


def prefix_keys(tokens: Sequence[int], root: bytes = ROOT_KEY) -> List[bytes]:
    """Keys of the full blocks of ``tokens`` after the prefix keyed ``root``, in order."""
    keys, parent = [], root
    for start in range(0, len(tokens) - BLOCK_SIZE + 1, BLOCK_SIZE):
        parent = block_key(parent, tokens[start:start + BLOCK_SIZE])
        keys.append(parent)
    return keys


class BlockPool:
    """Blocks for the scheduler: the allocator's free list plus, when ``caching``,
    the keyed blocks of finished requests (evictable, least recently used first).

    ``num_free`` counts both: every block a new request can get. Without caching a
    released block goes straight back to the free list, as before prefix caching.
    """

    def __init__(self, allocator: BlockAllocator, caching: bool = False):
        self.allocator = allocator
        self.caching = caching
        self._refs: Dict[int, int] = {}          # block -> requests holding it
        self._by_key: Dict[bytes, int] = {}      # key -> cached block
        self._key_of: Dict[int, bytes] = {}      # cached block -> key
        self._evictable: "OrderedDict[int, None]" = OrderedDict()   # LRU first
        self.on_evict = None    # called with the key of an evicted block (state checkpoints)

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free(self) -> int:
        return self.allocator.num_free + len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Blocks holding a keyed prefix (held by requests or evictable)."""
        return len(self._by_key)

    def match(self, keys: Sequence[bytes]) -> List[int]:
        """The cached blocks of the longest prefix of ``keys`` (not yet acquired)."""
        blocks = []
        for key in keys if self.caching else ():
            block = self._by_key.get(key)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def available_for(self, cached: Sequence[int]) -> int:
        """Blocks a request could get besides ``cached`` (its matched blocks, which
        stop being evictable once it holds them)."""
        return self.num_free - sum(1 for b in cached if b in self._evictable)

    def acquire(self, cached: Sequence[int], count: int) -> List[int]:
        """Holds the ``cached`` blocks and takes ``count`` more (free ones first, then
        evicting the least recently used); returns the block table ``cached + new``.
        Raises OutOfBlocksError (holding nothing) when fewer are available."""
        if count > self.available_for(cached):
            raise OutOfBlocksError(f"[prefix_cache] out of blocks: {count} needed, "
                                   f"{self.available_for(cached)} of {self.num_blocks} free")
        for block in cached:
            self._evictable.pop(block, None)
            self._refs[block] = self._refs.get(block, 0) + 1
        from_free = min(count, self.allocator.num_free)
        new = self.allocator.allocate(from_free)
        for _ in range(count - from_free):
            block, _ = self._evictable.popitem(last=False)
            key = self._key_of.pop(block)
            del self._by_key[key]
            if self.on_evict is not None:
                self.on_evict(key)
            new.append(block)
        for block in new:
            self._refs[block] = 1
        return list(cached) + new

    def register(self, block: int, key: bytes) -> None:
        """Records that ``block`` (held, fully computed) holds the prefix ``key``. A key
        already cached in another block keeps that block (this one stays private)."""
        if self.caching and key not in self._by_key and block not in self._key_of:
            self._by_key[key] = block
            self._key_of[block] = key

    def release(self, blocks: Sequence[int]) -> None:
        """Drops one hold of each block: an unheld keyed block becomes evictable (most
        recently used), an unheld unkeyed block returns to the free list."""
        for block in blocks:
            if self._refs.get(block, 0) < 1:
                raise ValueError(f"[prefix_cache] block {block} is not held")
        to_free = []
        # Reversed: the last block of a sequence is evicted before its parents, which
        # are worth more (they start every longer prefix).
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block]:
                continue
            del self._refs[block]
            if block in self._key_of:
                self._evictable[block] = None
            else:
                to_free.append(block)
        self.allocator.free(to_free[::-1])
