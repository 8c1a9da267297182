"""The engine loop: one thread owns the model and its KV cache and runs the runner's
continuous batching for every request the HTTP handlers submit.

Between two forward steps the loop takes in new requests and cancellations, so
requests join and leave the running batch at step boundaries (the scheduler prefills
new prompts in chunks while the others decode). A request for ``n`` choices is ``n``
engine requests: the first is admitted at once, the others once its prompt is computed,
so that with prefix caching they find the prompt's full blocks cached and prefill only
its last partial block. Each step's tokens are turned into
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
from ..cache.window import window_blocks_per_sequence
from ..generation import token_budget
from ..runner import Engine, Request, SamplingParams
from ..runner.sampling import log_softmax
from ..runner.stopping import TextStream


class QueueFullError(RuntimeError):
    """More requests are waiting for the engine than the server allows."""


@dataclass(frozen=True)
class Event:
    """What a request receives after a step: new ``text`` (may be empty while a
    character or a possible stop string is incomplete), the sampled ``token`` and its
    ``logprobs`` entry (None unless asked); ``finish_reason`` on the last event, with
    ``stop_sequence`` the stop string that ended it (None for eos, a stop token or the
    length); ``error`` instead when the step failed; token counts for the usage report.
    ``index``: the choice it belongs to (0 to n - 1). ``prompt_logprobs``: only on the
    event that comes before every other of a request that asked for them: one entry per
    prompt token (the first one's logprob None: nothing predicts it)."""

    text: str = ""
    token: Optional[int] = None
    logprobs: Optional[dict] = None
    finish_reason: Optional[str] = None
    stop_sequence: Optional[str] = None
    error: Optional[str] = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    index: int = 0
    prompt_logprobs: Optional[List[dict]] = None


class Generation:
    """A submitted request as the HTTP side sees it: ``events()`` yields its Events
    until the last one; leaving the iteration early (client gone) cancels it. The
    generation of choice 0 (``index``) holds the other choices as ``followers``: they
    push into its queue, and its ``events()`` yields every choice's events, in the
    order they come, until each choice has finished (or one failed)."""

    def __init__(self, loop: "EngineLoop", ids: List[int], params: SamplingParams,
                 max_tokens: int, stops: Sequence[str], top_logprobs: Optional[int],
                 index: int = 0):
        self.ids, self.params, self.max_tokens = ids, params, max_tokens
        self.stops, self.top_logprobs, self.index = stops, top_logprobs, index
        self.stop_ids: Sequence[int] = ()   # token ids that end it, beside the model's eos
        self.prompt_logprobs: Optional[int] = None   # top-k of the prompt's logprobs
        self.followers: List["Generation"] = []
        self.cancelled = False
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
        running = 1 + len(self.followers)
        try:
            while True:
                event = await self._queue.get()
                yield event
                running -= bool(event.finish_reason)
                if event.error or not running:
                    self._done = not running
                    return
        finally:
            if not self._done:
                for generation in (self, *self.followers):
                    self._engine_loop.cancel(generation)


class EngineLoop:
    """Runs ``Engine(model, model.kv_cache(num_blocks), max_batched_tokens,
    prefix_caching)`` on a daemon thread. ``max_queued``: requests that may wait for
    admission (submitted, not yet running) before ``submit`` raises QueueFullError (with
    0, a request is refused while another one waits). ``prompt_cache``: a
    ``prompt_cache_dir.PromptCacheDir`` whose files are put into the prefix cache before
    the first request and which keeps the prefixes of finished requests (with
    ``prefix_caching``; without it every file is skipped with a warning)."""

    def __init__(self, model, tokenizer, num_blocks: int, max_batched_tokens: int = 512,
                 max_queued: int = 64, prefix_caching: bool = True, speculative=None,
                 prompt_cache=None):
        self.model, self.tokenizer = model, tokenizer
        # Prompt-cache files hold every block of a prefix: with them, sliding-window layers
        # keep every position (runner.prompt_cache.check_windows).
        cache = model.kv_cache(num_blocks, **({} if prompt_cache is None else
                                              {"window_blocks": None}))
        self.engine = Engine(model, cache, max_batched_tokens, prefix_caching,
                             speculative=speculative)
        self.prompt_cache = prompt_cache
        if prompt_cache is not None:
            prompt_cache.load_into(self.engine)
        self.max_queued = max_queued
        self.observer = None   # f(generation, event) on the engine thread (metrics)
        self._wake = threading.Condition()
        self._inbox: List[Generation] = []
        self._cancelled: List[Generation] = []
        self._active: Dict[Request, Generation] = {}
        self._texts: Dict[Request, TextStream] = {}
        self._leading: List[Generation] = []   # admitted, their followers not yet
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="metalrt-engine", daemon=True)
        self._thread.start()

    # -- called from the event loop -------------------------------------------------
    def submit(self, ids: List[int], params: SamplingParams, max_tokens: int,
               stops: Sequence[str] = (), top_logprobs: Optional[int] = None,
               stop_ids: Sequence[int] = (), choices: Sequence[SamplingParams] = (),
               prompt_logprobs: Optional[int] = None) -> Generation:
        """Queues a request (``max_tokens`` is capped by the context length) with
        ``params``, and one more choice of the same prompt for each of ``choices`` (the
        returned generation's ``followers``). ``prompt_logprobs``: the first event
        carries the prompt tokens' logprobs with that many top entries each (a scoring
        pass over the prompt: ``model.logits``). Raises ValueError for a prompt that
        fills the context or a request bigger than the whole KV cache, QueueFullError
        when ``max_queued`` requests already wait."""
        max_tokens = token_budget(self.model, ids, max_tokens)
        needed, total = blocks_for(len(ids) + max_tokens - 1), self.engine.cache.num_blocks
        if needed > total:
            raise ValueError(f"[server] the prompt ({len(ids)} tokens) and max_tokens "
                             f"({max_tokens}) need {needed} KV-cache blocks of 16 tokens; "
                             f"the server's cache has {total}")
        cache = self.engine.cache
        if cache.window:
            ring = window_blocks_per_sequence(cache.window, len(ids) + max_tokens - 1,
                                              self.engine.scheduler.max_batched_tokens)
            if ring > cache.num_window_blocks:
                raise ValueError(f"[server] the prompt ({len(ids)} tokens) and max_tokens "
                                 f"({max_tokens}) need {ring} sliding-window blocks; the "
                                 f"server's window pool has {cache.num_window_blocks}")
        generation = Generation(self, ids, params, max_tokens, stops, top_logprobs)
        generation.stop_ids = tuple(stop_ids)
        generation.prompt_logprobs = prompt_logprobs
        for i, more in enumerate(choices, 1):
            follower = Generation(self, ids, more, max_tokens, stops, top_logprobs, i)
            follower.stop_ids, follower._queue = generation.stop_ids, generation._queue
            generation.followers.append(follower)
        with self._wake:
            waiting = len(self._inbox) + len(self.engine.scheduler.waiting)
            if waiting and waiting >= self.max_queued:
                raise QueueFullError(f"[server] {waiting} requests are already waiting for "
                                     f"the engine (the limit is {self.max_queued})")
            self._inbox.append(generation)
            self._wake.notify()
        return generation

    def cancel(self, generation: Generation) -> None:
        """Ends a request early; its KV blocks are freed before the next step (one not
        admitted yet never is)."""
        generation.cancelled = True
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
                "prefix_caching": scheduler.pool.caching,
                **({} if self.prompt_cache is None else {
                    "prompt_cache_files_loaded": self.prompt_cache.loaded,
                    "prompt_cache_files_refused": self.prompt_cache.refused,
                    "prompt_cache_files_written": self.prompt_cache.written})}

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()
        if self.prompt_cache is not None:   # the prefixes of the last requests
            self.prompt_cache.close()
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
            self._admit_followers()

    def _admit_followers(self) -> None:
        """Admits the other choices of each request whose first choice has its prompt
        computed (or ended): its full blocks are in the prefix cache by then. Without
        prefix caching there is nothing to wait for."""
        waiting = []
        for leader in self._leading:
            request = leader.request
            if request is None:   # refused: the error ends the whole request
                continue
            if request.finished or request not in self._active or \
                    request.num_computed >= len(request.prompt) or \
                    not self.engine.scheduler.pool.caching:
                for follower in leader.followers:
                    if not follower.cancelled:
                        self._admit(follower)
            else:
                waiting.append(leader)
        self._leading = waiting

    def _admit(self, generation: Generation) -> None:
        if generation.prompt_logprobs is not None and not self._score(generation):
            return
        if generation.followers:
            self._leading.append(generation)
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

    def _score(self, generation: Generation) -> bool:
        """Pushes the prompt tokens' logprobs (``generation.prompt_logprobs`` top
        entries each); False, after an error event, when the pass failed."""
        ids, top = generation.ids, generation.prompt_logprobs
        try:
            rows = self.model.logits(ids)
        except Exception as e:   # the request only: the engine's cache is not touched
            generation.push(Event(error=f"[server] scoring the prompt failed: "
                                        f"{type(e).__name__}: {e}"))
            return False
        first = {"token": ids[0], "text": self.tokenizer.decode(ids[:1]), "logprob": None,
                 "top": []}
        entries = [first] + [self._logprobs(ids[i], log_softmax(rows[i - 1]), top)
                             for i in range(1, len(ids))]
        generation.push(Event(prompt_logprobs=entries, prompt_tokens=len(ids)))
        return True

    def _finish(self, request: Optional[Request], reason: str = "stop",
                last: Optional[Event] = None) -> None:
        """Ends ``request``; ``last``: its final event, pushed once the request is gone
        from the engine, so a client that sees its reply end finds the model idle (the
        registry evicts only idle models)."""
        if request is None or request not in self._active:
            return
        self.engine.abort(request, reason)
        generation = self._active.pop(request)
        del self._texts[request]
        if last is not None:
            generation.push(last)
        if self.prompt_cache is not None:   # its blocks are still cached, evictable
            self.prompt_cache.save_from(self.engine, request.prompt)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:   # the step's state is unknown: end every request
            message = f"[server] the forward step failed: {type(e).__name__}: {e}"
            for request in list(self._active):
                self._finish(request, last=Event(error=message))
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
            event = Event(
                text=text, token=out.token, finish_reason=reason, index=generation.index,
                stop_sequence=self._texts[request].stops.matched if stopped else None,
                logprobs=self._logprobs(out.token, out.logprobs, generation.top_logprobs),
                prompt_tokens=len(request.prompt), cached_tokens=request.num_cached_tokens,
                completion_tokens=out.generated)
            if reason:
                self._finish(request, reason, event)
            else:
                generation.push(event)

    def _logprobs(self, token: int, logprobs: Optional[np.ndarray], top: Optional[int]):
        """{"token", "logprob", "top": [(token text, logprob), ...]} for ``token``."""
        if logprobs is None:
            return None
        best = np.argsort(-logprobs, kind="stable")[:top or 0]
        return {"token": token, "text": self.tokenizer.decode([token]),
                "logprob": float(logprobs[token]),
                "top": [(self.tokenizer.decode([int(t)]), float(logprobs[t])) for t in best]}
