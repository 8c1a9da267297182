"""Sliding-window layers' own blocks: how many a sequence holds and which it may drop.

A sliding-window attention layer (window W) at query position p reads only positions
p - W + 1 .. p, so its KV cache keeps, per sequence, only the blocks that the next
step can read. Those layers take their blocks from a pool of their own
(``ModelCache.num_window_blocks``), addressed through a second block table per
sequence (``StepInputs.window_tables``): entry i is the block of logical block i
(positions 16 i .. 16 i + 15), or -1 for a block that fell out of the window (freed)
or is not written yet. Attention never reads an entry before the window
(``ops.paged_attention``'s ``window``), so -1 entries are never dereferenced.

A block is dropped once every position in it is more than W positions behind the
sequence's next position: one position of slack beyond what the next query reads, so
that a pipelined decode step still in flight (``runner.decode_plans``) keeps what it
reads.
"""
from __future__ import annotations

from .blocks import BLOCK_SIZE, blocks_for

NO_BLOCK = -1   # a window-table entry with no block behind it


def droppable_blocks(num_computed: int, window: int) -> int:
    """Logical blocks 0 .. n - 1 of a sequence with ``num_computed`` tokens in the cache
    that no later step of a ``window``-position layer reads: n."""
    return max(0, num_computed - window) // BLOCK_SIZE


def first_window_block(num_tokens: int, window: int) -> int:
    """The first logical block that a step starting at position ``num_tokens`` reads
    (the blocks it needs from a cached prefix of ``num_tokens`` tokens)."""
    return droppable_blocks(num_tokens, window)


def window_blocks_per_sequence(window: int, max_tokens: int, max_step_tokens: int) -> int:
    """The most blocks a sequence of at most ``max_tokens`` cache rows holds in a
    ``window``-position layer's pool when one step feeds it at most ``max_step_tokens``
    tokens: the window (plus the one position of slack) and the step's tokens, at any
    alignment, never more than its whole life."""
    span = window + min(max_step_tokens, max_tokens)
    return min(blocks_for(max_tokens), -(-(span + BLOCK_SIZE - 1) // BLOCK_SIZE))
