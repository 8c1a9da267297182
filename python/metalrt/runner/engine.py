"""The generation loop: schedule, one forward pass for all scheduled requests,
sample, apply stop conditions."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import (BLOCK_SIZE, BlockAllocator, ModelCache, ScheduledChunk, StepBuffers,
                     build_step, decode_row_passes)
from ..models.logits import as_float32
from ..tensor import is_int
from .decode_plans import DecodePlans, DecodeRun
from .draft_model import DraftModelDrafter, check_draft_model
from .mtp_drafter import MtpDrafter
from .request import Request
from .sampling import SamplingParams
from .scheduler import Scheduler
from .speculative import SpeculativeConfig, accept, prompt_lookup
from .state_checkpoints import StateCheckpoints


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
    verify_steps: int = 0      # request-steps that verified drafted tokens (speculation)
    draft_tokens: int = 0      # tokens drafted for them
    accepted_tokens: int = 0   # drafted tokens the target kept
    state_reruns: int = 0      # request-steps re-run from a recurrent-state snapshot
    rerun_plan_records: int = 0  # re-runs (of all their requests) recorded into a plan
    rerun_plan_replays: int = 0  # re-runs replayed from a plan
    draft_plan_records: int = 0  # MTP proposal rounds recorded into a plan
    draft_plan_replays: int = 0  # MTP proposal rounds replayed from a plan
    long_rope_recomputes: int = 0   # requests recomputed on LongRoPE's long factors
    state_checkpoints: int = 0      # hybrid prefix caching: recurrent-state checkpoints kept
    state_checkpoint_bytes: int = 0   # and the host bytes they hold (StateCheckpoints.nbytes)


@dataclass(frozen=True)
class TokenOutput:
    """A token sampled for ``request`` in one step; ``finish_reason`` is "stop",
    "length" or None (the request goes on); ``generated``: the request's output tokens
    up to and including this one (a verify step gives a request several outputs, and
    ``request.output`` already holds them all)."""

    request: Request
    token: int
    logprobs: Optional[np.ndarray]
    finish_reason: Optional[str]
    generated: int


class Engine:
    """Runs requests on ``model`` over ``cache`` (which it holds until ``close``).

    Decodes, verify steps and prompt chunks of at most ``DECODE_CHUNK_TOKENS`` tokens run
    on decode rows (``ops.decode_rows``: each row computed as a one-row decode step
    computes it, whatever else the step holds); a step that also has a longer prompt
    chunk runs that chunk in a second forward pass. So a request's tokens do not depend
    on the requests beside it, and a verify step's rows are plain decoding's.

    Greedy requests without logprobs or repetition penalty take their token from
    ``ops.greedy_argmax`` on the device, so a step reads back only int32 ids; the
    logits come to the host only for rows that sample, penalise or report logprobs.
    ``prefix_caching``: requests reuse the cached K/V of a prompt prefix that earlier
    requests computed (see ``prefix_cache``); for a model with recurrent state (hybrid),
    up to the prefix's last block boundary whose state was checkpointed, at most
    ``state_checkpoints`` of them kept (``state_checkpoints``). A cache with
    per-request state gives every running request a state slot, zeroed before its
    first chunk.

    ``decode_plans``: a step of decodes only is replayed from a recorded plan
    (``decode_plans.DecodePlans``) instead of running the model op by op (for a model
    whose ``records_plans`` is True: a pipeline's steps run in other processes). The plans
    stay with the cache (``cache.decode_plans``), so the next engine over the same
    model and cache replays them instead of recording its own (a recording runs the
    step op by op, for each of a key's two phases: docs/generation.md). When every
    request of it is greedy (no logprobs, no penalty), no request is waiting and none
    reaches max_tokens with this token, the next step is committed on the device's ids
    before this step's ids are read; its tokens are returned by the next ``step()``,
    and the row of a request that finished meanwhile (eos, abort) is discarded, never
    emitted. Other sampling reads the logits each step, as without plans.

    ``speculative`` (a ``speculative.SpeculativeConfig``): the decode step of a request
    added with ``speculative=True`` (the default) and without logits processors (a
    grammar follows one token at a time) feeds the tokens a drafter proposes
    after its last token, and keeps those the target's logits confirm
    (``speculative.accept``) plus one of the target's own; rejected positions are
    rolled back: their KV rows lie past the sequence's length (overwritten, never read),
    and a layer's recurrent state is restored from a snapshot taken before the step and
    the kept tokens run again. A step in which every request verifies k drafts replays
    a verify plan (``DecodePlans.launch(fed=k + 1)``); another verify step runs op by
    op, beside plain decodes and prefills of other requests; a step in which nothing
    was drafted replays its decode plan.
    With "mtp" (``mtp_drafter.MtpDrafter``), every step of a speculating request hands
    the model's final-normed hidden states of the positions it kept to the drafter,
    whose next round drafts from them; its decode and verify steps replay plans that
    output those states too (``DecodePlans.launch(outputs="hidden")``).
    Raises ValueError for a num_draft_tokens a verify step cannot hold (above
    max_batched_tokens - 1 or the cache's tokens - 1), a draft model that cannot draft
    for ``model`` (``draft_model.check_draft_model``) and "mtp" for a model without a
    multi-token-prediction head, or a model of a first or middle pipeline stage
    (``CausalLM.check_last_stage``: it returns hidden states, not logits).
    """

    def __init__(self, model, cache: ModelCache, max_batched_tokens: int = 512,
                 prefix_caching: bool = False, decode_plans: bool = True,
                 speculative: Optional[SpeculativeConfig] = None, state_checkpoints: int = 64):
        if hasattr(model, "check_last_stage"):   # a PipelineModel is whole
            model.check_last_stage("an Engine")
        model.check_cache(cache)
        if cache.in_use:
            raise ValueError("[engine] the KV cache is already held by another engine")
        self.drafter = self._drafter(model, cache, max_batched_tokens, speculative)
        self.speculative = speculative
        slots = BlockAllocator(cache.num_state_slots, "state slot") if cache.num_state_slots else None
        # A hybrid model's prefixes are shared through checkpoints of its recurrent state.
        checkpoints = StateCheckpoints(state_checkpoints) \
            if prefix_caching and not cache.supports_prefix_caching and slots else None
        self.scheduler = Scheduler(BlockAllocator(cache.num_blocks), max_batched_tokens,
                                   prefix_caching and (cache.supports_prefix_caching
                                                       or checkpoints is not None),
                                   slots, checkpoints, cache.window,
                                   BlockAllocator(cache.num_window_blocks, "window block")
                                   if cache.window else None,
                                   model.rope_switch)
        # Taken once every argument is accepted: a refused engine leaves it free.
        self.model, self.cache = model, cache
        cache.in_use = True
        self.closed = False
        self.inputs = StepBuffers(model.device)
        self.stats = EngineStats()
        self._ids = count()
        self.plans = DecodePlans.of_cache(model, cache) \
            if decode_plans and model.records_plans else None
        # This engine's records and replays are the plans' counts since it started.
        self._plan_counts_at_start = (0, 0) if self.plans is None else \
            (self.plans.records, self.plans.replays)
        # The pipelined step in flight and its requests, in row order.
        self._inflight: Optional[Tuple[DecodeRun, List[Request]]] = None

    @staticmethod
    def check_speculative(model, speculative: SpeculativeConfig) -> None:
        """Raises unless ``model`` can run ``speculative``: TypeError for a config that is
        not a SpeculativeConfig, ValueError for "mtp" on a model without a
        multi-token-prediction head or a draft model that cannot draft for it."""
        if not isinstance(speculative, SpeculativeConfig):
            raise TypeError("[engine] speculative must be a SpeculativeConfig, got "
                            f"{type(speculative).__name__}")
        if speculative.method == "mtp" and getattr(model, "mtp", None) is None:
            raise ValueError(f"[speculative] 'mtp' needs a multi-token-prediction head; this "
                             f"{model.arch} model has none (no mtp.* tensors)")
        if speculative.method == "draft":
            check_draft_model(speculative.draft_model, model)

    @staticmethod
    def check_room(k: int, max_batched_tokens, cache_tokens: int) -> None:
        """ValueError unless a verify step of ``k`` drafted tokens (k + 1 fed) fits a
        step of ``max_batched_tokens`` and a cache of ``cache_tokens`` tokens."""
        if is_int(max_batched_tokens) and k + 1 > max_batched_tokens:
            raise ValueError(f"[speculative] num_draft_tokens {k} does not fit a step: a verify "
                             f"step feeds k + 1 tokens and max_batched_tokens is "
                             f"{max_batched_tokens}")
        if k + 1 > cache_tokens:
            raise ValueError(f"[speculative] num_draft_tokens {k} is above the KV cache's room: "
                             f"it holds {cache_tokens} tokens, a verify step writes k + 1")

    @classmethod
    def _drafter(cls, model, cache: ModelCache, max_batched_tokens, speculative):
        """The draft-model drafter of ``speculative`` (None for the other methods), once
        the config is one this engine can run."""
        if speculative is None:
            return None
        cls.check_speculative(model, speculative)
        cls.check_room(speculative.num_draft_tokens, max_batched_tokens,
                       cache.num_blocks * BLOCK_SIZE)
        if speculative.method == "mtp":
            return MtpDrafter(model, cache.num_blocks)
        if speculative.method != "draft":
            return None
        return DraftModelDrafter(speculative.draft_model, cache.num_blocks)

    def add_request(self, prompt: Iterable[int], params: SamplingParams, max_tokens: int,
                    eos_ids: Iterable[int] = (), speculative: bool = True) -> Request:
        """Queues a request of ``max_tokens`` tokens after ``prompt``; with the engine's
        ``speculative`` config and ``speculative`` True, its decode steps speculate."""
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
                          frozenset(int(t) for t in eos),
                          # Logits processors (grammars) follow one token at a time, so
                          # a request with any decodes without drafts.
                          speculative=bool(speculative) and self.speculative is not None
                          and not params.logits_processors)
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
        self._propose()
        scheduled = self.scheduler.schedule()
        self.stats.long_rope_recomputes = self.scheduler.long_rope_recomputes
        self._count_checkpoints()   # admissions may have evicted some with their blocks
        for request, chunk in scheduled:
            if chunk.start == request.num_cached_tokens:   # the request's first chunk
                self.stats.prompt_tokens_cached += request.num_cached_tokens
                if request.state_slot is not None:
                    if request.restore_state is not None:
                        self.cache.restore(request.state_slot, request.restore_state)
                        request.restore_state = None
                    else:
                        self.cache.reset(request.state_slot)
            self.stats.prompt_tokens_computed += max(
                0, min(len(request.prompt), chunk.start + len(chunk.token_ids)) - chunk.start)
        # An MTP drafter reads the final-normed hidden states of every step of a
        # speculating request: such a step's plan hands them out too (a key of its own).
        mtp = isinstance(self.drafter, MtpDrafter) and any(r.speculative for r, _ in scheduled)
        snapshots = {id(r): self.cache.snapshot(r.state_slot, on_device=True)
                     for r, _ in scheduled if r.draft and self.cache.num_state_slots}
        starts = [(r, c.start) for r, c in scheduled]
        fed = self._verify_plan_rows(scheduled) if self.plans is not None else 0
        if fed:
            # Every request verifies as many drafts: the step replays its verify plan.
            chunks = [c for _, c in scheduled]
            run = self.plans.launch([c.block_table for c in chunks], [c.start for c in chunks],
                                    [t for c in chunks for t in c.token_ids],
                                    state_slots=self._state_slots([r for r, _ in scheduled]),
                                    window_tables=self._window_tables(chunks), fed=fed,
                                    outputs="hidden" if mtp else "logits")
            self._count_step(len(scheduled))
            host_logits = self.plans.read_logits(run) \
                if any(r.params.needs_logits for r, _ in scheduled) else None
            ids = self.plans.read_ids(run) \
                if not all(r.params.needs_logits for r, _ in scheduled) else None
            outputs = self._verify([(r, b * fed) for b, (r, _) in enumerate(scheduled)],
                                   host_logits, ids, snapshots)
            self._note_hidden(run.hidden, starts, fed, run.key)
            return outputs
        if self.plans is not None and scheduled and all(
                len(c.token_ids) == 1 and c.logits == "last" for _, c in scheduled):
            # One token per request: a decode step (or 1-token prompts), from a plan.
            requests = [r for r, _ in scheduled]
            chunks = [c for _, c in scheduled]
            run = self.plans.launch([c.block_table for c in chunks], [c.start for c in chunks],
                                    [c.token_ids[0] for c in chunks],
                                    state_slots=self._state_slots(requests),
                                    window_tables=self._window_tables(chunks),
                                    outputs="hidden" if mtp else "logits")
            for request in requests:
                self.scheduler.advance(request, 1)
            self._count_step(len(requests))
            # A speculating request is never pipelined: no later step overwrote the hidden.
            outputs = self._decode_outputs(run, requests, requests)
            self._note_hidden(run.hidden, starts, 1, run.key)
            return outputs
        self.stats.steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, len(scheduled))
        # Decodes, verify steps and short prompt chunks on decode rows' arithmetic
        # (ops.decode_rows: a verify row gives the logits a plain decode step gives), then
        # longer prompt chunks on the prefill's GEMMs: a step with both runs two passes.
        outputs, groups, hiddens = [], [], []
        for indices, decode_rows in decode_row_passes([c for _, c in scheduled],
                                                      [bool(r.draft) for r, _ in scheduled]):
            group = [scheduled[i] for i in indices]
            tokens, hidden = self._forward(group, decode_rows, mtp, snapshots)
            outputs += tokens
            groups += group
            hiddens.append(hidden)
        self._note_hidden(self._joined(hiddens), [(r, c.start) for r, c in groups],
                          [len(c.token_ids) for _, c in groups])
        return outputs

    def _joined(self, hiddens):
        """The passes' final-normed hidden states as one [T, H] tensor in pass order (rows
        gathered on the device, exact); None when the step is not an MTP step."""
        if hiddens[0] is None or len(hiddens) == 1:
            return hiddens[0]
        rows = [h.shape[0] for h in hiddens]
        joined = metalrt.empty((sum(rows), hiddens[0].shape[1]), hiddens[0].dtype,
                               self.model.device)
        for first, h in zip(np.cumsum([0] + rows), hiddens):
            ids = metalrt.asarray(np.arange(h.shape[0], dtype=np.int32), device=self.model.device)
            ops.embedding(h, ids, out=joined[int(first):int(first) + h.shape[0]])
        return joined

    def _forward(self, group, decode_rows: bool, mtp: bool, snapshots):
        """One forward pass over ``group`` ((request, chunk) pairs): (its tokens, the
        final-normed hidden states of its rows for an MTP step, else None)."""
        # The model's dtype: greedy_argmax reads float16/bfloat16 logits directly, and
        # only a request that samples from the logits pays for the float32 cast.
        step = build_step([c for _, c in group], self.model.device, self.inputs, decode_rows)
        if mtp:
            logits, hidden = self.model.forward(step, self.cache, float32_logits=False,
                                                final_hidden=True)
        else:
            logits, hidden = self.model.forward(step, self.cache, float32_logits=False), None
        for request, chunk in group:
            if not request.draft:
                self.scheduler.advance(request, len(chunk.token_ids))
                self._checkpoint(request)
        sampling = [(r, c) for r, c in group if c.logits != "none"]
        return (self._sample_and_verify(sampling, logits, snapshots) if sampling else []), hidden

    def _note_hidden(self, hidden, starts, fed, plan_key=None) -> None:
        """Hands a step's final-normed ``hidden`` [T, H] (None: not an MTP step) to the MTP
        drafter: of each speculating, unfinished request of ``starts`` ((request, first
        position) in row order, ``fed`` rows each: an int for all or a list), the rows
        of the positions now in the cache for good; ``plan_key``: the decode plan whose
        output ``hidden`` is."""
        if hidden is None:
            return
        counts = [fed] * len(starts) if isinstance(fed, int) else fed
        rows = np.cumsum([0] + counts)
        self.drafter.note(hidden, [(r, int(row), start, r.num_computed - start)
                                   for (r, start), row in zip(starts, rows)
                                   if r.speculative and not r.finished], plan_key)

    def _sample_and_verify(self, sampling, logits, snapshots) -> List[TokenOutput]:
        """The tokens of the step's rows with logits (``sampling``: (request, chunk)
        pairs): sampled, or verified for a request whose chunk fed a draft."""
        on_host = any(r.params.needs_logits for r, _ in sampling)
        host_logits = as_float32(logits).numpy() if on_host else None
        device_ids = None
        if not all(r.params.needs_logits for r, _ in sampling):
            device_ids = ops.greedy_argmax(logits).numpy()
        rows, verified, row = [], [], 0
        for request, chunk in sampling:
            if request.draft:
                verified.append((request, row))
                row += len(chunk.token_ids)
            else:
                rows.append((row, request))
                row += 1
        outputs = self._sample(rows, host_logits, device_ids)
        return outputs + self._verify(verified, host_logits, device_ids, snapshots)

    @staticmethod
    def _verify_plan_rows(scheduled) -> int:
        """k + 1 when every scheduled request verifies k >= 1 drafts (a step a verify
        plan replays), else 0."""
        fed = {len(c.token_ids) if r.draft else 0 for r, c in scheduled}
        return fed.pop() if len(fed) == 1 and 0 not in fed else 0

    def _checkpoint(self, request: Request) -> None:
        """Keeps the request's recurrent state when its prompt chunk ended at a block
        boundary (hybrid prefix caching: ``state_checkpoints``)."""
        checkpoints = self.scheduler.checkpoints
        end = request.num_computed
        if checkpoints is None or end % BLOCK_SIZE or end >= len(request.prompt) or \
                len(request.block_keys) < end // BLOCK_SIZE:
            return
        key = request.block_keys[end // BLOCK_SIZE - 1]
        if key not in checkpoints:
            checkpoints.put(key, self.cache.snapshot(request.state_slot))
            self._count_checkpoints()

    def _count_checkpoints(self) -> None:
        checkpoints = self.scheduler.checkpoints
        if checkpoints is not None:
            self.stats.state_checkpoints = len(checkpoints)
            self.stats.state_checkpoint_bytes = checkpoints.nbytes

    def _propose(self) -> None:
        """Sets the draft of every speculating request in decode: up to
        num_draft_tokens, fewer where its max_tokens or the step's token budget ends."""
        if self.speculative is None:
            return
        running = self.scheduler.running
        decodes = [r for r in running if len(r.tokens) - r.num_computed == 1]
        budget = self.scheduler.max_batched_tokens - len(decodes)
        wanted = []
        for request in decodes:
            request.draft = []
            k = min(self.speculative.num_draft_tokens, request.max_tokens - len(request.output) - 1,
                    budget)
            room = self.scheduler.rope_room(request)   # a verify step never crosses it
            k = k if room is None else min(k, room)
            if request.speculative and k > 0:
                wanted.append((request, k))
                budget -= k
        cfg = self.speculative
        if isinstance(self.drafter, MtpDrafter):
            # Also when nothing is wanted: the catch-up of prompt chunks runs every step.
            drafts = self.drafter.propose(wanted)
            self.stats.draft_plan_records = self.drafter.records
            self.stats.draft_plan_replays = self.drafter.replays
        elif self.drafter is not None:
            self.drafter.release_others([r.request_id for r in running])
            drafts = self.drafter.propose(wanted) if wanted else []
        else:
            drafts = [prompt_lookup(r.tokens, k, cfg.ngram_min, cfg.ngram_max) for r, k in wanted]
        for (request, _), draft in zip(wanted, drafts):
            request.draft = draft

    def _verify(self, verified, host_logits, device_ids, snapshots) -> List[TokenOutput]:
        """The tokens of the requests whose step verified a draft (``verified``: (request,
        first logits row) pairs); rolls each back to its last kept token."""
        outputs, reruns, done = [], [], []
        for request, row in verified:
            draft, request.draft = request.draft, []
            rows = slice(row, row + len(draft) + 1)
            pairs = accept(request, draft, None if host_logits is None else host_logits[rows],
                           None if device_ids is None else device_ids[rows])
            kept = len(pairs) - 1
            self.stats.verify_steps += 1
            self.stats.draft_tokens += len(draft)
            self.stats.accepted_tokens += kept
            start = request.num_computed
            for token, logprobs in pairs:
                request.append(token)
                self.stats.generated_tokens += 1
                outputs.append(TokenOutput(request, token, logprobs, request.finish_reason,
                                           len(request.output)))
                if request.finished:
                    break
            if kept < len(draft) and id(request) in snapshots and not request.finished:
                # The state went on through the rejected drafts: back to before the step,
                # then the kept tokens again.
                self.cache.restore(request.state_slot, snapshots[id(request)])
                reruns.append(ScheduledChunk(request.tokens[start:start + kept + 1], start,
                                             request.blocks, "none", request.state_slot,
                                             self.scheduler.window_table(request, kept + 1),
                                             request.rope_offset))
            done.append((request, kept + 1))
        if reruns:
            self._rerun(reruns)
        for request, n in done:
            self.scheduler.advance(request, n)
            if request.finished:
                self.scheduler.finish(request)
        return outputs

    def _rerun(self, reruns: List[ScheduledChunk]) -> None:
        """Runs the kept tokens of rolled-back requests again over their restored state,
        without logits: from a plan (outputs "none") when they all re-run as many."""
        fed = {len(c.token_ids) for c in reruns}
        if self.plans is None or len(fed) != 1:
            self.model.forward(build_step(reruns, self.model.device, self.inputs, True), self.cache)
        else:
            records, replays = self.plans.records, self.plans.replays
            self.plans.launch([c.block_table for c in reruns], [c.start for c in reruns],
                              [t for c in reruns for t in c.token_ids],
                              state_slots=[c.state_slot for c in reruns],
                              window_tables=self._window_tables(reruns),
                              fed=fed.pop(), outputs="none")
            self.stats.rerun_plan_records += self.plans.records - records
            self.stats.rerun_plan_replays += self.plans.replays - replays
        self.stats.state_reruns += len(reruns)

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
            outputs.append(TokenOutput(request, token, logprobs, request.finish_reason,
                                       len(request.output)))
        return outputs

    def _count_step(self, rows: int) -> None:
        self.stats.steps += 1
        self.stats.max_batch_size = max(self.stats.max_batch_size, rows)
        records, replays = self._plan_counts_at_start
        self.stats.plan_records = self.plans.records - records - self.stats.rerun_plan_records
        self.stats.plan_replays = self.plans.replays - replays - self.stats.rerun_plan_replays

    def _window_tables(self, chunks: List[ScheduledChunk]) -> Optional[List[Sequence[int]]]:
        """The chunks' tables in the sliding-window pool, None for a cache without one."""
        return [c.window_table for c in chunks] if self.cache.window else None

    def _state_slots(self, requests: List[Request]) -> Optional[List[int]]:
        """The requests' recurrent-state slots, None for a cache without that state."""
        return [r.state_slot for r in requests] if self.cache.num_state_slots else None

    def _can_pipeline(self, requests: List[Request]) -> bool:
        """The next step is these requests' decodes whatever this step samples, short
        of an eos: all greedy, none waiting to join, none at max_tokens after it, none
        to be recomputed on LongRoPE's long factors before it."""
        return (not self.scheduler.waiting and self.scheduler.running == requests
                and all(not r.params.needs_logits and not r.speculative
                        and len(r.output) + 2 <= r.max_tokens
                        and not self.scheduler.short_rope_past_switch(r, len(r.tokens) + 1)
                        for r in requests))

    def _decode_outputs(self, run: DecodeRun, requests: List[Request],
                        live: List[Request]) -> List[TokenOutput]:
        """Tokens of a committed decode step for the ``live`` rows of ``requests``;
        commits the next step first when it can (``_can_pipeline``)."""
        blocks, positions = [r.blocks for r in requests], [r.num_computed for r in requests]
        # A next step of another key (its positions reach a new bucket) starts unpipelined.
        if live == requests and self._can_pipeline(requests) and \
                self.plans.can_follow(run, blocks, positions):
            windows = None if not self.cache.window else \
                [self.scheduler.window_table(r, 1) for r in requests]
            self._inflight = (self.plans.launch(blocks, positions, None, after=run,
                                                state_slots=self._state_slots(requests),
                                                window_tables=windows),
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
