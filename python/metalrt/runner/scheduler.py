"""Chooses the work of each forward step (continuous batching, as vLLM does).

Every step first gives each running request in decode its one token (and the tokens
drafted for it, when it speculates: ``speculative``), then spends
the remaining token budget on prompts: a running prefill continues, then waiting
requests are admitted while the budget and free cache blocks allow. A prompt longer
than the budget is prefilled in chunks over several steps. A request is admitted
only when blocks for its whole life (prompt + max_tokens - 1 tokens) are free, so a
running request never runs out of cache and nothing is ever preempted.

With ``state_slots`` (models with recurrent state), an admitted request also takes a
state slot, freed with it; when none is free the waiting requests wait (back-pressure,
like blocks).

With ``prefix_caching``, an admitted request first takes the cached blocks of its
prompt's longest cached prefix (``prefix_cache``) and prefills only the rest; every
block it fills completely is then cached for later requests. For a model with
recurrent state (``checkpoints``, ``state_checkpoints``) the prefix is cut back to its
last block that has a state checkpoint, restored into the request's slot, and prompt
chunks end at block boundaries so that their state can be checkpointed there.

With ``window`` and ``window_allocator`` (a cache whose sliding-window layers have their
own pool, ``cache.window``), admission accounts the blocks of each layer type: a
request takes its whole life's blocks from ``allocator`` (the global layers) and
reserves, in the window pool, the most blocks it can hold at once
(``window_blocks_per_sequence``: the window and one step's tokens); it is admitted when
both fit. Its window blocks are taken as its steps reach them and dropped (freed, or
left to the prefix cache) once they fall out of the window, so a 32k-token context
costs the window pool only a window's blocks. A cached prefix is used only as far as
the window pool still holds the window before its end (cut back otherwise).

With ``rope_switch`` (a LongRoPE model's original context, ``CausalLM.rope_switch``),
a request longer than it runs on the long factors and a shorter one on the short, as
transformers' Phi-3 generation does: a prompt longer than the switch is prefilled on
the long factors (every chunk), and a request that grows past it is recomputed, as
transformers drops its cache there: it goes back to the front of the waiting queue
(its blocks released, their short-factor K/V left to the prefix cache) and is admitted
again like a prompt of all its tokens, on the long factors (``long_rope_recomputes``
counts them; its window blocks and state slot are released and taken again too).
Prefix keys of long requests start from their own root, so the two sets' K/V are
never shared.
"""
from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional, Tuple

from ..cache import BLOCK_SIZE, BlockAllocator, OutOfBlocksError, ScheduledChunk, blocks_for
from ..cache.window import NO_BLOCK, droppable_blocks, first_window_block, window_blocks_per_sequence
from ..tensor import is_int
from .prefix_cache import LONG_ROPE_ROOT_KEY, ROOT_KEY, BlockPool, block_key, prefix_keys
from .state_checkpoints import StateCheckpoints
from .request import Request


class Scheduler:
    def __init__(self, allocator: BlockAllocator, max_batched_tokens: int = 512,
                 prefix_caching: bool = False, state_slots: Optional[BlockAllocator] = None,
                 checkpoints: Optional[StateCheckpoints] = None, window: int = 0,
                 window_allocator: Optional[BlockAllocator] = None,
                 rope_switch: Optional[int] = None):
        if not is_int(max_batched_tokens):
            raise TypeError(f"[scheduler] max_batched_tokens must be an int, got "
                            f"{type(max_batched_tokens).__name__} {max_batched_tokens!r}")
        if max_batched_tokens < 1:
            raise ValueError(f"[scheduler] max_batched_tokens must be >= 1, got {max_batched_tokens}")
        self.allocator = allocator
        self.pool = BlockPool(allocator, prefix_caching)
        self.max_batched_tokens = max_batched_tokens
        self.state_slots = state_slots
        # Hybrid models: a cached prefix is usable up to its last state checkpoint.
        self.checkpoints = checkpoints if prefix_caching else None
        if self.checkpoints is not None:
            self.pool.on_evict = self.checkpoints.drop
        self.window = window if window_allocator is not None else 0
        self.window_pool = BlockPool(window_allocator, prefix_caching) if self.window else None
        self.window_reserved = 0        # window blocks reserved by running requests
        self.rope_switch = rope_switch
        self.long_rope_recomputes = 0
        self.waiting: Deque[Request] = deque()
        self.running: List[Request] = []

    def add(self, request: Request) -> None:
        """Queues a request; raises OutOfBlocksError if it could never fit the cache."""
        needed = blocks_for(request.max_cached_tokens)
        if needed > self.allocator.num_blocks:
            raise OutOfBlocksError(f"[scheduler] request {request.request_id} needs {needed} "
                                   f"blocks, the cache has {self.allocator.num_blocks}")
        if self.window and self.window_reserve(request) > self.window_pool.num_blocks:
            raise OutOfBlocksError(f"[scheduler] request {request.request_id} needs "
                                   f"{self.window_reserve(request)} sliding-window blocks, the "
                                   f"cache's window pool has {self.window_pool.num_blocks}")
        self.waiting.append(request)

    def window_reserve(self, request: Request) -> int:
        """Window-pool blocks ``request`` can hold at once (0 without a window pool)."""
        if not self.window:
            return 0
        return window_blocks_per_sequence(self.window, request.max_cached_tokens,
                                          self.max_batched_tokens)

    def finish(self, request: Request) -> None:
        """Removes a finished (or aborted) request and frees its blocks."""
        if request in self.running:
            self._release(request)
        elif request in self.waiting:
            self.waiting.remove(request)

    def _release(self, request: Request) -> None:
        """Takes running ``request`` out of ``running`` and frees its blocks, window
        blocks and state slot."""
        self.running.remove(request)
        self.pool.release(request.blocks)
        request.blocks = []
        if self.window:
            self.window_pool.release([b for b in request.window_blocks if b != NO_BLOCK])
            self.window_reserved -= request.window_reserve
            request.window_blocks, request.window_reserve = None, 0
        if request.state_slot is not None:
            self.state_slots.free([request.state_slot])
            request.state_slot = None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def short_rope_past_switch(self, request: Request, length: int) -> bool:
        """Whether ``request``, on LongRoPE's short factors, would be ``length`` tokens
        long past the model's original context (it must be recomputed first)."""
        return self.rope_switch is not None and not request.rope_offset and \
            length > self.rope_switch

    def rope_room(self, request: Request) -> Optional[int]:
        """Tokens ``request`` can grow by before it passes the LongRoPE switch on the
        short factors (a draft longer than that would cross it); None for no limit."""
        if self.rope_switch is None or request.rope_offset:
            return None
        return max(0, self.rope_switch - len(request.tokens))

    def _recompute_on_long_rope(self, request: Request) -> None:
        """Puts running ``request`` back at the front of the queue, to be admitted again
        on the long factors with nothing computed (its blocks released)."""
        self._release(request)
        request.block_keys, request.num_computed, request.draft = [], 0, []
        request.rope_offset = self.rope_switch
        self.waiting.appendleft(request)
        self.long_rope_recomputes += 1

    def _root(self, request: Request) -> bytes:
        return LONG_ROPE_ROOT_KEY if request.rope_offset else ROOT_KEY

    def schedule(self) -> List[Tuple[Request, ScheduledChunk]]:
        budget = self.max_batched_tokens
        crossing = [r for r in self.running if self.short_rope_past_switch(r, len(r.tokens))]
        for request in reversed(crossing):   # they keep their order at the queue's front
            self._recompute_on_long_rope(request)
        decodes = [r for r in self.running if len(r.tokens) - r.num_computed == 1]
        prefills = [r for r in self.running if len(r.tokens) - r.num_computed > 1]
        scheduled = []
        for request in decodes:
            scheduled.append((request, self._chunk(request, 1)))
            budget -= 1 + len(request.draft)
        for request in prefills:
            if budget <= 0:
                break
            n = self._aligned(request, min(budget, len(request.tokens) - request.num_computed))
            scheduled.append((request, self._chunk(request, n)))
            budget -= n
        while self.waiting and budget > 0:
            request = self.waiting[0]
            if self.short_rope_past_switch(request, len(request.tokens)):
                request.rope_offset = self.rope_switch
            # The last token is always computed: its logits give the next token. (Its
            # tokens: the prompt, and the output too for a request recomputed.)
            keys = prefix_keys(request.tokens[:-1], self._root(request)) \
                if self.pool.caching else []
            cached = self.pool.match(keys)
            if self.checkpoints is not None:
                while cached and keys[len(cached) - 1] not in self.checkpoints:
                    cached = cached[:-1]
            cached, window_cached = self._window_prefix(keys, cached)
            needed = blocks_for(request.max_cached_tokens) - len(cached)
            reserve = self.window_reserve(request)
            if needed > self.pool.available_for(cached) or (
                    self.state_slots is not None and self.state_slots.num_free == 0) or (
                    self.window and self.window_reserved + reserve > self.window_pool.num_blocks):
                break  # first come, first served: later requests wait too
            self.waiting.popleft()
            if self.state_slots is not None:
                request.state_slot = self.state_slots.allocate(1)[0]
            request.blocks = self.pool.acquire(cached, needed)
            request.block_keys = keys[:len(cached)]
            request.num_computed = request.num_cached_tokens = len(cached) * BLOCK_SIZE
            if self.window:
                first = first_window_block(request.num_computed, self.window)
                table = [NO_BLOCK] * len(request.blocks)
                table[first:len(cached)] = self.window_pool.acquire(window_cached, 0)
                request.window_blocks, request.window_first = table, first
                request.window_reserve = reserve
                self.window_reserved += reserve
            if self.checkpoints is not None and cached:
                request.restore_state = self.checkpoints.get(keys[len(cached) - 1])
            self.running.append(request)
            n = self._aligned(request, min(budget, len(request.tokens) - request.num_computed))
            scheduled.append((request, self._chunk(request, n)))
            budget -= n
        return scheduled

    def advance(self, request: Request, n: int) -> None:
        """Records that a step put ``n`` more tokens of ``request`` in the cache, and
        caches the blocks that became full."""
        request.num_computed += n
        tokens = request.tokens
        while self.pool.caching and len(request.block_keys) < request.num_computed // BLOCK_SIZE:
            i = len(request.block_keys)
            parent = request.block_keys[-1] if i else self._root(request)
            key = block_key(parent, tokens[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
            request.block_keys.append(key)
            self.pool.register(request.blocks[i], key)
            if self.window and request.window_blocks[i] != NO_BLOCK:
                self.window_pool.register(request.window_blocks[i], key)
        if self.window:
            # Registered first: a dropped block stays in the prefix cache (evictable).
            table, end = request.window_blocks, droppable_blocks(request.num_computed, self.window)
            dropped = [table[i] for i in range(request.window_first, end) if table[i] != NO_BLOCK]
            table[request.window_first:end] = [NO_BLOCK] * max(0, end - request.window_first)
            request.window_first = max(request.window_first, end)
            self.window_pool.release(dropped)

    def window_table(self, request: Request, n: int) -> Optional[List[int]]:
        """The request's window table once it has blocks for its next ``n`` tokens (taken
        from the window pool: its reservation guarantees them); None without a window
        pool."""
        if not self.window:
            return None
        table, start = request.window_blocks, request.num_computed
        missing = [i for i in range(start // BLOCK_SIZE, (start + n - 1) // BLOCK_SIZE + 1)
                   if table[i] == NO_BLOCK]
        for i, block in zip(missing, self.window_pool.acquire([], len(missing))):
            table[i] = block
        return list(table)

    def _window_prefix(self, keys, cached):
        """(cached cut back to where the window pool holds the window before its end,
        those window blocks)."""
        if not self.window:
            return cached, []
        for m in range(len(cached), 0, -1):
            wanted = keys[first_window_block(m * BLOCK_SIZE, self.window):m]
            held = self.window_pool.match(wanted)
            if len(held) == len(wanted):
                return cached[:m], held
        return [], []

    def _aligned(self, request: Request, n: int) -> int:
        """With state checkpoints, a prompt chunk of ``n`` tokens shortened to end at a
        block boundary (where its state is checkpointed): at the prompt's last boundary
        before its last token, else at the chunk's last boundary when it has one."""
        if self.checkpoints is None:
            return n
        start, end = request.num_computed, request.num_computed + n
        last = (len(request.prompt) - 1) // BLOCK_SIZE * BLOCK_SIZE
        if start < last < end:
            return last - start
        if end < len(request.prompt) and end // BLOCK_SIZE * BLOCK_SIZE > start:
            return end // BLOCK_SIZE * BLOCK_SIZE - start
        return n

    def _chunk(self, request: Request, n: int) -> ScheduledChunk:
        """The request's next ``n`` tokens; a decode with a draft also feeds the drafted
        tokens, with logits at every row (the target's prediction after each)."""
        start = request.num_computed
        tokens = request.tokens
        last = start + n == len(tokens)
        if last and request.draft:
            fed = tokens[start:] + request.draft
            return ScheduledChunk(fed, start, request.blocks, "all", request.state_slot or 0,
                                  self.window_table(request, len(fed)), request.rope_offset)
        return ScheduledChunk(tokens[start:start + n], start, request.blocks,
                              "last" if last else "none", request.state_slot or 0,
                              self.window_table(request, n), request.rope_offset)
