"""The generation loop: schedule, one forward pass for all scheduled requests,
sample, apply stop conditions."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import Iterable, List, Optional, Tuple

import numpy as np

from metalrt import ops

from ..cache import BlockAllocator, ModelCache, StepBuffers, build_step
from ..models.logits import as_float32
from ..tensor import is_int
from .decode_plans import DecodePlans, DecodeRun
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
    plan_records: int = 0      # decode steps recorded into a plan (a key missed)
    plan_replays: int = 0      # decode steps replayed from a plan
    pipelined_steps: int = 0   # decode steps committed before the previous one's ids were read
    discarded_tokens: int = 0  # ids of pipelined steps whose request had already finished


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
    requests computed (see ``prefix_cache``); ignored for a cache that does not support
    it (a layer's recurrent state cannot be rolled back to a prefix). A cache with
    per-request state gives every running request a state slot, zeroed before its
    first chunk.

    ``decode_plans``: a step of decodes only is replayed from a recorded plan
    (``decode_plans.DecodePlans``) instead of running the model op by op. The plans
    stay with the cache (``cache.decode_plans``), so the next engine over the same
    model and cache replays them instead of recording its own (a recording runs the
    step op by op, for each of a key's two phases: docs/generation.md). When every
    request of it is greedy (no logprobs, no penalty), no request is waiting and none
    reaches max_tokens with this token, the next step is committed on the device's ids
    before this step's ids are read; its tokens are returned by the next ``step()``,
    and the row of a request that finished meanwhile (eos, abort) is discarded, never
    emitted. Other sampling reads the logits each step, as without plans.
    """

    def __init__(self, model, cache: ModelCache, max_batched_tokens: int = 512,
                 prefix_caching: bool = False, decode_plans: bool = True):
        model.check_cache(cache)
        if cache.in_use:
            raise ValueError("[engine] the KV cache is already held by another engine")
        slots = BlockAllocator(cache.num_state_slots, "state slot") if cache.num_state_slots else None
        self.scheduler = Scheduler(BlockAllocator(cache.num_blocks), max_batched_tokens,
                                   prefix_caching and cache.supports_prefix_caching, slots)
        # Taken once every argument is accepted: a refused engine leaves it free.
        self.model, self.cache = model, cache
        cache.in_use = True
        self.closed = False
        self.inputs = StepBuffers(model.device)
        self.stats = EngineStats()
        self._ids = count()
        self.plans = DecodePlans.of_cache(model, cache) if decode_plans else None
        # This engine's records and replays are the plans' counts since it started.
        self._plan_counts_at_start = (0, 0) if self.plans is None else \
            (self.plans.records, self.plans.replays)
        # The pipelined step in flight and its requests, in row order.
        self._inflight: Optional[Tuple[DecodeRun, List[Request]]] = None

    def add_request(self, prompt: Iterable[int], params: SamplingParams, max_tokens: int,
                    eos_ids: Iterable[int] = ()) -> Request:
        self._check_open()
        ids, eos = list(prompt), list(eos_ids)
        if not all(is_int(t) for t in ids + eos):
            raise TypeError("[engine] prompt and eos_ids must be int token ids, got "
                            f"{next(t for t in ids + eos if not is_int(t))!r}")
        ids = [int(t) for t in ids]
        # Checked here, not in the step: an id outside the embedding would fail the
        # shared forward step, and with it every other request batched into it.
        vocab = self.model.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"[engine] prompt token id {bad} is outside the model's "
                             f"vocabulary [0, {vocab})")
        request = Request(next(self._ids), ids, params, max_tokens,
                          frozenset(int(t) for t in eos))
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
        self._check_open()
        if self._inflight is not None:
            run, requests = self._inflight
            self._inflight = None
            live = [r for r in requests if not r.finished]
            for request in live:
                self.scheduler.advance(request, 1)
            self._count_step(len(requests))
            return self._decode_outputs(run, requests, live)
        scheduled = self.scheduler.schedule()
        for request, chunk in scheduled:
            if chunk.start == request.num_cached_tokens:   # the request's first chunk
                self.stats.prompt_tokens_cached += request.num_cached_tokens
                if request.state_slot is not None:
                    self.cache.reset(request.state_slot)
            self.stats.prompt_tokens_computed += max(
                0, min(len(request.prompt), chunk.start + len(chunk.token_ids)) - chunk.start)
        if self.plans is not None and scheduled and all(
                len(c.token_ids) == 1 and c.logits == "last" for _, c in scheduled):
            # One token per request: a decode step (or 1-token prompts), from a plan.
            requests = [r for r, _ in scheduled]
            chunks = [c for _, c in scheduled]
            run = self.plans.launch([c.block_table for c in chunks], [c.start for c in chunks],
                                    [c.token_ids[0] for c in chunks],
                                    state_slots=self._state_slots(requests))
            for request in requests:
                self.scheduler.advance(request, 1)
            self._count_step(len(requests))
            return self._decode_outputs(run, requests, requests)
        # The model's dtype: greedy_argmax reads float16/bfloat16 logits directly, and
        # only a request that samples from the logits pays for the float32 cast.
        logits = self.model.forward(
            build_step([c for _, c in scheduled], self.model.device, self.inputs), self.cache,
            float32_logits=False)
        self.stats.steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, len(scheduled))
        for request, chunk in scheduled:
            self.scheduler.advance(request, len(chunk.token_ids))
        sampling = [r for r, c in scheduled if c.logits == "last"]
        if not sampling:
            return []
        on_host = any(r.params.needs_logits for r in sampling)
        host_logits = as_float32(logits).numpy() if on_host else None
        device_ids = None
        if not all(r.params.needs_logits for r in sampling):
            device_ids = ops.greedy_argmax(logits).numpy()
        return self._sample(list(enumerate(sampling)), host_logits, device_ids)

    def _sample(self, rows, host_logits, device_ids) -> List[TokenOutput]:
        """The tokens of (row, request) pairs: sampled from ``host_logits[row]`` for a
        request that needs logits, else the greedy ``device_ids[row]``; appended to
        their requests, whose stop conditions are applied."""
        outputs = []
        for row, request in rows:
            if request.params.needs_logits:
                token, logprobs = request.sampler.sample(host_logits[row], request.tokens,
                                                         request.output)
            else:
                token, logprobs = int(device_ids[row]), None
            request.append(token)
            self.stats.generated_tokens += 1
            if request.finished:
                self.scheduler.finish(request)
            outputs.append(TokenOutput(request, token, logprobs, request.finish_reason))
        return outputs

    def _count_step(self, rows: int) -> None:
        self.stats.steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, rows)
        records, replays = self._plan_counts_at_start
        self.stats.plan_records = self.plans.records - records
        self.stats.plan_replays = self.plans.replays - replays

    def _state_slots(self, requests: List[Request]) -> Optional[List[int]]:
        """The requests' recurrent-state slots, None for a cache without that state."""
        return [r.state_slot for r in requests] if self.cache.num_state_slots else None

    def _can_pipeline(self, requests: List[Request]) -> bool:
        """The next step is these requests' decodes whatever this step samples, short
        of an eos: all greedy, none waiting to join, none at max_tokens after it."""
        return (not self.scheduler.waiting and self.scheduler.running == requests
                and all(not r.params.needs_logits and len(r.output) + 2 <= r.max_tokens
                        for r in requests))

    def _decode_outputs(self, run: DecodeRun, requests: List[Request],
                        live: List[Request]) -> List[TokenOutput]:
        """Tokens of a committed decode step for the ``live`` rows of ``requests``;
        commits the next step first when it can (``_can_pipeline``)."""
        blocks, positions = [r.blocks for r in requests], [r.num_computed for r in requests]
        # A next step of another key (its positions reach a new bucket) starts unpipelined.
        if live == requests and self._can_pipeline(requests) and \
                self.plans.can_follow(run, blocks, positions):
            self._inflight = (self.plans.launch(blocks, positions, None, after=run,
                                                state_slots=self._state_slots(requests)),
                              requests)
            self.stats.pipelined_steps += 1
        rows = [(row, r) for row, r in enumerate(requests) if r in live]
        self.stats.discarded_tokens += len(requests) - len(rows)
        host_logits = ids = None
        if any(r.params.needs_logits for r in live):
            host_logits = self.plans.read_logits(run)
        if not all(r.params.needs_logits for r in live):
            ids = self.plans.read_ids(run)
        return self._sample(rows, host_logits, ids)

    def _check_open(self) -> None:
        # A closed engine's cache may be held by the next engine: using it would write
        # into that engine's blocks.
        if self.closed:
            raise RuntimeError("[engine] this engine is closed (its cache is released); "
                               "make a new Engine")

    def close(self) -> None:
        """Aborts what is left and releases the cache (its decode plans stay with it).
        A second call does nothing: the cache may be another engine's by then."""
        if self.closed:
            return
        for request in list(self.scheduler.running) + list(self.scheduler.waiting):
            self.abort(request)
        if self._inflight is not None:   # finish it: the next engine reuses its plan's tensors
            self.plans.read_ids(self._inflight[0])
            self._inflight = None
        self.cache.in_use = False
        self.closed = True
