"""The engine loop: one thread owns the model and its KV cache and runs the runner's
continuous batching for every request the HTTP handlers submit.

Between two forward steps the loop takes in new requests and cancellations, so
requests join and leave the running batch at step boundaries (the scheduler prefills
new prompts in chunks while the others decode). Each step's tokens are turned into
text here (streaming detokenization, stop strings), and handed to the request's
asyncio queue with ``call_soon_threadsafe``: the event loop never waits on a step.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..cache import blocks_for
from ..generation import token_budget
from ..runner import Engine, Request, SamplingParams
from ..runner.stopping import TextStream


class QueueFullError(RuntimeError):
    """More requests are waiting for the engine than the server allows."""


@dataclass(frozen=True)
class Event:
    """What a request receives after a step: new ``text`` (may be empty while a
    character or a possible stop string is incomplete), the sampled ``token`` and its
    ``logprobs`` entry (None unless asked); ``finish_reason`` on the last event, with
    ``stop_sequence`` the stop string that ended it (None for eos, a stop token or the
    length); ``error`` instead when the step failed; token counts for the usage report."""

    text: str = ""
    token: Optional[int] = None
    logprobs: Optional[dict] = None
    finish_reason: Optional[str] = None
    stop_sequence: Optional[str] = None
    error: Optional[str] = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


class Generation:
    """A submitted request as the HTTP side sees it: ``events()`` yields its Events
    until the last one; leaving the iteration early (client gone) cancels it."""

    def __init__(self, loop: "EngineLoop", ids: List[int], params: SamplingParams,
                 max_tokens: int, stops: Sequence[str], top_logprobs: Optional[int]):
        self.ids, self.params, self.max_tokens = ids, params, max_tokens
        self.stops, self.top_logprobs = stops, top_logprobs
        self.stop_ids: Sequence[int] = ()   # token ids that end it, beside the model's eos
        self.request: Optional[Request] = None    # set by the engine thread
        self._engine_loop = loop
        self._asyncio_loop = asyncio.get_running_loop()
        self._queue: "asyncio.Queue[Event]" = asyncio.Queue()
        self._done = False
        self.submitted_at, self.last_token_at = time.monotonic(), None

    def push(self, event: Event) -> None:
        """Called by the engine thread."""
        if self._engine_loop.observer is not None:
            self._engine_loop.observer(self, event)
        self._asyncio_loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def events(self):
        try:
            while True:
                event = await self._queue.get()
                yield event
                if event.finish_reason or event.error:
                    self._done = True
                    return
        finally:
            if not self._done:
                self._engine_loop.cancel(self)


class EngineLoop:
    """Runs ``Engine(model, model.kv_cache(num_blocks), max_batched_tokens,
    prefix_caching)`` on a daemon thread. ``max_queued``: requests that may wait for
    admission (submitted, not yet running) before ``submit`` raises QueueFullError (with
    0, a request is refused while another one waits)."""

    def __init__(self, model, tokenizer, num_blocks: int, max_batched_tokens: int = 512,
                 max_queued: int = 64, prefix_caching: bool = True, speculative=None):
        self.model, self.tokenizer = model, tokenizer
        self.engine = Engine(model, model.kv_cache(num_blocks), max_batched_tokens,
                             prefix_caching, speculative=speculative)
        self.max_queued = max_queued
        self.observer = None   # f(generation, event) on the engine thread (metrics)
        self._wake = threading.Condition()
        self._inbox: List[Generation] = []
        self._cancelled: List[Generation] = []
        self._active: Dict[Request, Generation] = {}
        self._texts: Dict[Request, TextStream] = {}
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="metalrt-engine", daemon=True)
        self._thread.start()

    # -- called from the event loop -------------------------------------------------
    def submit(self, ids: List[int], params: SamplingParams, max_tokens: int,
               stops: Sequence[str] = (), top_logprobs: Optional[int] = None,
               stop_ids: Sequence[int] = ()) -> Generation:
        """Queues a request (``max_tokens`` is capped by the context length). Raises
        ValueError for a prompt that fills the context or a request bigger than the
        whole KV cache, QueueFullError when ``max_queued`` requests already wait."""
        max_tokens = token_budget(self.model, ids, max_tokens)
        needed, total = blocks_for(len(ids) + max_tokens - 1), self.engine.cache.num_blocks
        if needed > total:
            raise ValueError(f"[server] the prompt ({len(ids)} tokens) and max_tokens "
                             f"({max_tokens}) need {needed} KV-cache blocks of 16 tokens; "
                             f"the server's cache has {total}")
        generation = Generation(self, ids, params, max_tokens, stops, top_logprobs)
        generation.stop_ids = tuple(stop_ids)
        with self._wake:
            waiting = len(self._inbox) + len(self.engine.scheduler.waiting)
            if waiting and waiting >= self.max_queued:
                raise QueueFullError(f"[server] {waiting} requests are already waiting for "
                                     f"the engine (the limit is {self.max_queued})")
            self._inbox.append(generation)
            self._wake.notify()
        return generation

    def cancel(self, generation: Generation) -> None:
        """Ends a request early; its KV blocks are freed before the next step."""
        with self._wake:
            self._cancelled.append(generation)
            self._wake.notify()

    @property
    def busy(self) -> bool:
        """Requests are submitted and not finished (queued, waiting or running)."""
        with self._wake:
            return bool(self._inbox or self._active or self.engine.has_work)

    def stats(self) -> dict:
        """Engine counters and KV-cache occupancy (read without stopping the loop)."""
        scheduler = self.engine.scheduler
        return {**dataclasses.asdict(self.engine.stats),
                "running": len(scheduler.running),
                "waiting": len(scheduler.waiting) + len(self._inbox),
                "kv_blocks": scheduler.pool.num_blocks,
                "kv_blocks_free": scheduler.pool.num_free,
                "kv_blocks_cached": scheduler.pool.num_cached,
                "prefix_caching": scheduler.pool.caching}

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()
        self.engine.close()

    # -- the engine thread ----------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                while not (self._inbox or self._cancelled or self.engine.has_work
                           or self._closing):
                    self._wake.wait()
                if self._closing:
                    return
                new, self._inbox = self._inbox, []
                cancelled, self._cancelled = self._cancelled, []
            for generation in new:
                self._admit(generation)
            for generation in cancelled:
                self._finish(generation.request)
            if self.engine.has_work:
                self._step()

    def _admit(self, generation: Generation) -> None:
        try:
            request = self.engine.add_request(generation.ids, generation.params,
                                              generation.max_tokens,
                                              (*self.tokenizer.eos_token_ids, *generation.stop_ids))
        except (ValueError, RuntimeError) as e:   # submit checked what it could
            generation.push(Event(error=f"[server] the request was refused: {e}"))
            return
        generation.request = request
        self._active[request] = generation
        self._texts[request] = text = TextStream(self.tokenizer, generation.stops)
        text.eos.update(generation.stop_ids)   # a stop token's text is left out, as eos

    def _finish(self, request: Optional[Request], reason: str = "stop") -> None:
        if request is None or request not in self._active:
            return
        self.engine.abort(request, reason)
        del self._active[request], self._texts[request]

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:   # the step's state is unknown: end every request
            message = f"[server] the forward step failed: {type(e).__name__}: {e}"
            for request, generation in list(self._active.items()):
                generation.push(Event(error=message))
                self._finish(request)
            return
        for out in outputs:
            request = out.request
            # A verify step gives a request several tokens: a stop string in one ends it.
            generation = self._active.get(request)
            if generation is None:
                continue
            text, stopped = self._texts[request].add(out.token, out.finish_reason is not None)
            if stopped:
                self.engine.abort(request, "stop")
            reason = request.finish_reason if stopped else out.finish_reason
            generation.push(Event(
                text=text, token=out.token, finish_reason=reason,
                stop_sequence=self._texts[request].stops.matched if stopped else None,
                logprobs=self._logprobs(out.token, out.logprobs, generation.top_logprobs),
                prompt_tokens=len(request.prompt), cached_tokens=request.num_cached_tokens,
                completion_tokens=len(request.output)))
            if reason:
                self._finish(request, reason)

    def _logprobs(self, token: int, logprobs: Optional[np.ndarray], top: Optional[int]):
        """{"token", "logprob", "top": [(token text, logprob), ...]} for ``token``."""
        if logprobs is None:
            return None
        best = np.argsort(-logprobs, kind="stable")[:top or 0]
        return {"token": token, "text": self.tokenizer.decode([token]),
                "logprob": float(logprobs[token]),
                "top": [(self.tokenizer.decode([int(t)]), float(logprobs[t])) for t in best]}
