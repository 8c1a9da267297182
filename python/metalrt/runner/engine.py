"""The generation loop: schedule, one forward pass for all scheduled requests,
sample, apply stop conditions."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import Iterable, List, Optional

import numpy as np

from metalrt import ops

from .batch import StepBuffers, build_step
from .kv_cache import BlockAllocator, PagedKVCache
from .request import Request
from .sampling import SamplingParams
from .scheduler import Scheduler


@dataclass
class EngineStats:
    """Counters since the engine was made: forward steps; the largest number of
    sequences in one step (above 1: requests shared steps); prompt tokens prefilled
    and prompt tokens taken from the prefix cache instead; tokens sampled."""

    steps: int = 0
    max_batch_size: int = 0
    prompt_tokens_computed: int = 0
    prompt_tokens_cached: int = 0
    generated_tokens: int = 0


@dataclass(frozen=True)
class TokenOutput:
    """A token sampled for ``request`` in one step; ``finish_reason`` is "stop",
    "length" or None (the request goes on)."""

    request: Request
    token: int
    logprobs: Optional[np.ndarray]
    finish_reason: Optional[str]


class Engine:
    """Runs requests on ``model`` over ``cache`` (which it holds until ``close``).

    Greedy requests without logprobs or repetition penalty take their token from
    ``ops.greedy_argmax`` on the device, so a step reads back only int32 ids; the
    logits come to the host only for rows that sample, penalise or report logprobs.
    ``prefix_caching``: requests reuse the cached K/V of a prompt prefix that earlier
    requests computed (see ``prefix_cache``); ignored for a cache with recurrent state
    (a ``recurrent_state.HybridCache``: that state cannot be rolled back to a prefix).
    Such a cache gives every running request a state slot, zeroed before its first
    chunk.
    """

    def __init__(self, model, cache: PagedKVCache, max_batched_tokens: int = 512,
                 prefix_caching: bool = False):
        if cache.in_use:
            raise ValueError("[engine] the KV cache is already held by another engine")
        self.model, self.cache = model, cache
        cache.in_use = True
        self.state = getattr(cache, "state", None)
        slots = None if self.state is None else BlockAllocator(self.state.num_slots, "state slot")
        self.scheduler = Scheduler(BlockAllocator(cache.num_blocks), max_batched_tokens,
                                   prefix_caching and self.state is None, slots)
        self.inputs = StepBuffers(model.device)
        self.stats = EngineStats()
        self._ids = count()

    def add_request(self, prompt: Iterable[int], params: SamplingParams, max_tokens: int,
                    eos_ids: Iterable[int] = ()) -> Request:
        ids = [int(t) for t in prompt]
        # Checked here, not in the step: an id outside the embedding would fail the
        # shared forward step, and with it every other request batched into it.
        vocab = self.model.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"[engine] prompt token id {bad} is outside the model's "
                             f"vocabulary [0, {vocab})")
        request = Request(next(self._ids), ids, params, max_tokens,
                          frozenset(int(t) for t in eos_ids))
        self.scheduler.add(request)
        return request

    def abort(self, request: Request, finish_reason: str = "stop") -> None:
        """Ends a request early (e.g. a stop string matched) and frees its blocks."""
        if not request.finished:
            request.finish_reason = finish_reason
        self.scheduler.finish(request)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self) -> List[TokenOutput]:
        """One forward pass over everything scheduled; returns the sampled tokens (none
        when the step only advanced prompt chunks)."""
        scheduled = self.scheduler.schedule()
        for request, chunk in scheduled:
            if chunk.start == request.num_cached_tokens:   # the request's first chunk
                self.stats.prompt_tokens_cached += request.num_cached_tokens
                if self.state is not None:
                    self.state.reset(request.state_slot)
            self.stats.prompt_tokens_computed += max(
                0, min(len(request.prompt), chunk.start + len(chunk.token_ids)) - chunk.start)
        logits = self.model.forward(
            build_step([c for _, c in scheduled], self.model.device, self.inputs), self.cache)
        self.stats.steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, len(scheduled))
        for request, chunk in scheduled:
            self.scheduler.advance(request, len(chunk.token_ids))
        sampling = [r for r, c in scheduled if c.logits == "last"]
        if not sampling:
            return []
        on_host = any(r.params.needs_logits for r in sampling)
        host_logits = logits.numpy() if on_host else None
        device_ids = None
        if not all(r.params.needs_logits for r in sampling):
            device_ids = ops.greedy_argmax(logits).numpy()
        outputs = []
        for row, request in enumerate(sampling):
            if request.params.needs_logits:
                token, logprobs = request.sampler.sample(host_logits[row], request.tokens)
            else:
                token, logprobs = int(device_ids[row]), None
            request.append(token)
            self.stats.generated_tokens += 1
            if request.finished:
                self.scheduler.finish(request)
            outputs.append(TokenOutput(request, token, logprobs, request.finish_reason))
        return outputs

    def close(self) -> None:
        """Aborts what is left and releases the cache."""
        for request in list(self.scheduler.running) + list(self.scheduler.waiting):
            self.abort(request)
        self.cache.in_use = False
