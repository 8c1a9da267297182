"""Moving a prompt prefix between an engine's prefix cache and host memory (and so a
file, ``cache.prompt_file``): ``capture`` copies the cached blocks of a prompt's prefix
(and, for a hybrid model, the state checkpoint where it ends) out of an engine;
``fill`` puts such a prefix into an engine's prefix cache as if a request had just
computed it, so the next request with that prefix prefills only the tokens after it.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ..cache import BLOCK_SIZE
from ..cache.prompt_file import PrefixState, identity, mismatch
from .prefix_cache import prefix_keys


def _runs(blocks: Sequence[int]):
    """(first, end, offset) of each run of consecutive block ids: one tensor slice each."""
    start = 0
    for i in range(1, len(blocks) + 1):
        if i == len(blocks) or blocks[i] != blocks[i - 1] + 1:
            yield blocks[start], blocks[i - 1] + 1, start
            start = i


def _read(tensor, blocks: Sequence[int]) -> np.ndarray:
    return np.concatenate([tensor[a:b].numpy() for a, b, _ in _runs(blocks)])


def _write(tensor, blocks: Sequence[int], rows: np.ndarray) -> None:
    for a, b, at in _runs(blocks):
        tensor[a:b].copy_from(np.ascontiguousarray(rows[at:at + b - a]))


def _cached(engine, keys: List[bytes]):
    """(block ids, state checkpoint or None) of the longest cached prefix of ``keys``
    that ``capture`` can take: for a hybrid model it ends at a checkpointed block."""
    scheduler = engine.scheduler
    blocks = scheduler.pool.match(keys)
    if not engine.cache.num_state_slots:
        return blocks, None
    checkpoints = scheduler.checkpoints
    n = len(blocks) if checkpoints is not None else 0
    while n and keys[n - 1] not in checkpoints:
        n -= 1
    return blocks[:n], (checkpoints.get(keys[n - 1]) if n else None)


def cached_tokens(engine, tokens: Sequence[int]) -> int:
    """How many tokens of ``tokens`` ``capture`` would copy (0 when nothing is cached),
    without copying anything. Call it between steps."""
    return len(_cached(engine, prefix_keys(list(tokens)))[0]) * BLOCK_SIZE


def check_windows(engine) -> None:
    """ValueError when ``engine``'s sliding-window layers keep only their window's blocks
    (``cache.window``): a prefix's blocks before its window are gone from them, so the
    file could not hold what its format says (every block of every attention layer)."""
    if engine.cache.window:
        raise ValueError("[prompt_cache] this cache's sliding-window layers keep only their "
                         "window's blocks, so a prefix cannot be saved or restored with them; "
                         "make the cache with model.new_cache(..., window_blocks=None) to "
                         "keep every position (docs/generation.md)")


def capture(engine, tokens: Sequence[int]) -> Optional[PrefixState]:
    """The longest prefix of ``tokens`` (whole blocks) that ``engine``'s prefix cache
    holds, copied to the host; for a hybrid model, only up to the last block whose
    state is checkpointed (the state there comes with it). None when nothing of it is
    cached (or the engine runs without prefix caching). Call it between steps.
    ValueError for a cache whose sliding-window layers drop blocks (``check_windows``)."""
    check_windows(engine)
    blocks, state = _cached(engine, prefix_keys(list(tokens)))
    if not blocks:
        return None
    kv = {i: (_read(layer.keys, blocks), _read(layer.values, blocks))
          for i, layer in enumerate(engine.cache.layers) if not layer.num_slots}
    return PrefixState(list(tokens[:len(blocks) * BLOCK_SIZE]), kv, state,
                       identity(engine.model, engine.cache))


def check(engine, prefix: PrefixState, where: str) -> None:
    """ValueError naming ``where`` (the file) unless ``prefix`` was made by this engine's
    model over a cache of the same KV dtype, block size and geometry."""
    reason = mismatch(prefix.identity, identity(engine.model, engine.cache))
    if reason:
        raise ValueError(f"[prompt_cache] {where} is refused: {reason}")


def fill(engine, prefix: PrefixState, where: str = "the prompt cache") -> int:
    """Puts ``prefix`` into ``engine``'s prefix cache (its blocks evictable, as those of
    a finished request; a hybrid's state as the checkpoint of its last block). Returns
    the tokens added (0 when the cache already held them). ValueError as ``check``, and
    when the engine runs without prefix caching; OutOfBlocksError when fewer blocks are
    free than the prefix holds. Call it between steps."""
    check_windows(engine)
    check(engine, prefix, where)
    scheduler = engine.scheduler
    if not scheduler.pool.caching:
        raise ValueError("[prompt_cache] the engine runs without prefix caching "
                         "(Engine(prefix_caching=True), the server without --no-prefix-cache)")
    keys = prefix_keys(prefix.tokens)
    if len(scheduler.pool.match(keys)) == len(keys) and (
            scheduler.checkpoints is None or keys[-1] in scheduler.checkpoints):
        return 0
    blocks: List[int] = scheduler.pool.acquire([], len(keys))
    try:
        for i, (keys_rows, values_rows) in prefix.kv.items():
            layer = engine.cache.layers[i]
            _write(layer.keys, blocks, keys_rows)
            _write(layer.values, blocks, values_rows)
        for block, key in zip(blocks, keys):
            scheduler.pool.register(block, key)
        if scheduler.checkpoints is not None and prefix.state is not None:
            scheduler.checkpoints.put(keys[-1], prefix.state)
    finally:
        scheduler.pool.release(blocks)
    return len(prefix.tokens)
