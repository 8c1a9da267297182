"""Decode steps replayed from recorded plans, with the sampled ids kept on the device.

A decode step (one new token for each of B requests) runs the same op calls every
step; only the values of its inputs change. ``DecodePlans`` records the step once per
key — what changes its shapes or host-built tables: B, the block-table width bucket
(the next power of two of the widest table) and the position bucket of Rope's
host-built cos|sin table (``Rope.position_bucket``) — and replays it after writing the
new inputs into the plan's fixed tensors with one call (``metalrt.plan``). The
requests' recurrent-state slots (hybrid models) are such an input too, like the block
tables: the conv and delta-rule kernels read them on the device. So are a LongRoPE
model's RoPE rows: the plan reads one table of both factor sets, and a token at a
position at or past the model's ``rope_switch`` takes a long-factor row (the scheduler
recomputes a sequence that grows past it, so every decode token there is on the long
factors and every one before it on the short).

Every decode key has two phases, each with its own input tensors and plan; phase p's greedy
argmax writes its ids straight into phase 1 - p's token-id tensor. So step n + 1 can
be committed, reading step n's ids on the device, before the host reads step n's ids:
the host writes step n + 1's positions into the other phase's tensors, which no
running step uses (mlx-lm's async evaluation, done with two sets of slots). A verify
step or one that outputs hidden states (MTP) is never followed on the device: its key
has one phase, so its outputs are the same tensors at every replay (a drafter's plan
reads them).
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import BLOCK_SIZE, StepInputs
from ..models.attention import Rope
from ..models.logits import as_float32
from ..plan import Plan, read_output, write_inputs


OUTPUTS = ("logits", "hidden", "none")


def decode_key(num_rows: int, width: int, max_position: int, fed: int = 1,
               outputs: str = "logits") -> Tuple:
    """(rows, block-table width bucket, position bucket) of a decode step; a verify step
    (``fed`` > 1 tokens a request) or a step of other ``outputs`` (``launch``) adds
    (fed, outputs)."""
    key = num_rows, 1 << max(0, (width - 1).bit_length()), Rope.position_bucket(max_position)
    return key if fed == 1 and outputs == "logits" else key + (fed, outputs)


class DecodeSlots:
    """The fixed device tensors one phase of a decode plan reads: token_ids int32 [B],
    positions int32 [B], slot_mapping int64 [B], block_tables int32 [B, W],
    seq_lens int32 [B], state_slots int32 [B] (the requests' recurrent-state slots;
    zeros for a model without recurrent state), window_tables int32 [B, W] and
    window_slots int64 [B] (the sliding-window layers' own pool, ``cache.window``;
    unused without one), rope_rows int32 [B] (a LongRoPE model's RoPE table rows,
    ``StepInputs.rope_rows``; unused for other models), query_start_loc int32 [B + 1]
    (0..B: one token per request, written once). A verify step's slots (``fed`` tokens a request: its last token and
    fed - 1 drafts) hold ``fed`` entries a request in token_ids, positions,
    slot_mapping, window_slots and rope_rows, and query_start_loc is 0, fed, .., B * fed."""

    def __init__(self, device: str, rows: int, width: int, fed: int = 1):
        self.rows, self.width, self.fed = rows, width, fed
        tokens = rows * fed
        self.token_ids = metalrt.empty(tokens, "int32", device)
        self.positions = metalrt.empty(tokens, "int32", device)
        self.slot_mapping = metalrt.empty(tokens, "int64", device)
        self.block_tables = metalrt.empty((rows, width), "int32", device)
        self.seq_lens = metalrt.empty(rows, "int32", device)
        self.state_slots = metalrt.zeros(rows, "int32", device)
        self.window_tables = metalrt.empty((rows, width), "int32", device)
        self.window_slots = metalrt.empty(tokens, "int64", device)
        self.rope_rows = metalrt.empty(tokens, "int32", device)
        self.query_start_loc = metalrt.asarray(np.arange(0, tokens + 1, fed, dtype=np.int32),
                                               device=device)

    def step_inputs(self, max_position: int, windowed: bool = False,
                    logits: bool = True, long_rope: bool = False) -> StepInputs:
        return StepInputs(self.token_ids, self.positions, self.slot_mapping, self.block_tables,
                          self.seq_lens, self.query_start_loc, logit_rows=None,
                          num_logit_rows=self.rows * self.fed if logits else 0,
                          max_position=max_position,
                          state_slots=self.state_slots,
                          window_tables=self.window_tables if windowed else None,
                          window_slots=self.window_slots if windowed else None,
                          rope_rows=self.rope_rows if long_rope else None,
                          decode_rows=True)


@dataclass
class _Phase:
    slots: DecodeSlots
    plan: Optional[Plan] = None
    logits: Optional["metalrt.Tensor"] = None   # float32 [B, vocab], the plan's output
    ids: Optional["metalrt.Tensor"] = None      # its greedy ids (a decode: the next phase's
                                                # token_ids)
    hidden: Optional["metalrt.Tensor"] = None   # final-normed hidden [B * fed, H] (a key
                                                # with "hidden")


@dataclass(frozen=True)
class DecodeRun:
    """A committed decode step: where its outputs land. ``ids``: int32 [B] greedy ids
    (the next phase's token-id tensor); ``logits``: [B, vocab] in the model's dtype
    (``read_logits`` gives float32); ``hidden``: the final-normed hidden states
    [B * fed, hidden_size] in the model's dtype for a step launched with outputs
    "hidden" (else None), valid until the key runs again; ids and logits are None for
    outputs "none"."""

    key: Tuple
    phase: int
    ids: "metalrt.Tensor"
    logits: "metalrt.Tensor"
    hidden: Optional["metalrt.Tensor"] = None


def _weak(obj):
    """A weak reference to obj, or a callable returning None for None."""
    return (lambda: None) if obj is None else weakref.ref(obj)


class DecodePlans:
    """Recorded decode steps of ``model`` over ``cache``, the ``capacity`` most recently
    used keys (an evicted key's plans are released): room for speculation's keys beside
    the decode's (a verify key, and on a hybrid model a re-run key per kept count).
    ``records`` and ``replays`` count what ``launch`` did."""

    def __init__(self, model, cache, capacity: int = 12):
        # The cache keeps its plans (cache.decode_plans, runner.engine) and a model its
        # last cache (model.kv_cache): weak references back, so that neither cycle keeps
        # a model's weights or a cache's memory alive past its last user.
        self._model, self._cache = _weak(model), _weak(cache)
        self.capacity = capacity
        # The providers the plans replay are those of this registry state.
        self._provider_version = metalrt.providers.version()
        self._keys: "OrderedDict[Tuple[int, int, int], List[_Phase]]" = OrderedDict()
        self._next_phase = 0
        self.records = 0
        self.replays = 0

    @classmethod
    def of_cache(cls, model, cache) -> "DecodePlans":
        """The plans kept with ``cache`` (``cache.decode_plans``) when they record
        ``model`` under the providers enabled now; else new ones, kept there in their
        place (the old ones released): another model's plans, or plans replaying
        providers that ``metalrt.providers.set_enabled`` has switched since, are
        recorded again."""
        plans = cache.decode_plans
        if plans is not None and plans.model is model and \
                plans._provider_version == metalrt.providers.version():
            return plans
        if plans is not None:
            plans.release()
        cache.decode_plans = cls(model, cache)
        return cache.decode_plans

    @property
    def model(self):
        """The model the plans record (None once it is gone)."""
        return self._model()

    @property
    def cache(self):
        """The cache the plans read and write (None once it is gone)."""
        return self._cache()

    def _phases(self, key) -> List[_Phase]:
        phases = self._keys.get(key)
        if phases is None:
            while len(self._keys) >= self.capacity:
                _, old = self._keys.popitem(last=False)
                for phase in old:
                    if phase.plan is not None:
                        phase.plan.release()
            device = self.model.device
            fed = key[3] if len(key) > 3 else 1   # decode_key's layout
            # A verify step or one of other outputs is never followed on the device (its
            # ids are read first): one phase; a decode alternates two.
            phases = self._keys[key] = [_Phase(DecodeSlots(device, key[0], key[1], fed))
                                        for _ in range(1 if len(key) > 3 else 2)]
        self._keys.move_to_end(key)
        return phases

    @staticmethod
    def can_follow(run: DecodeRun, blocks: Sequence[Sequence[int]],
                   positions: Sequence[int]) -> bool:
        """True when the step of these rows has ``run``'s key, so it can take ``run``'s
        ids on the device (``launch(..., token_ids=None, after=run)``)."""
        return decode_key(len(positions), max(len(b) for b in blocks), max(positions)) == run.key

    def launch(self, blocks: Sequence[Sequence[int]], positions: Sequence[int],
               token_ids: Optional[Sequence[int]], after: Optional[DecodeRun] = None,
               state_slots: Optional[Sequence[int]] = None,
               window_tables: Optional[Sequence[Sequence[int]]] = None,
               fed: int = 1, outputs: str = "logits") -> DecodeRun:
        """Commits the decode step of len(positions) requests: request b feeds
        ``token_ids[b]`` at ``positions[b]`` (its block table ``blocks[b]``, its
        recurrent state at ``state_slots[b]``: distinct slots of the cache's pools, for
        a model with recurrent state; its table in the sliding-window layers' own pool
        ``window_tables[b]``, for a cache with one), or, with ``token_ids`` None, the ids ``after`` (a
        run of the same key) produces on the device. Replays the key's plan, or records
        it (running the step through the model) on a miss. Returns without waiting for
        the device. The slots are checked when the step records, not when it replays
        (``metalrt.plan``): pass the scheduler's. ``fed`` > 1: a verify step, request b
        feeding ``token_ids[b * fed:(b + 1) * fed]`` at positions[b] ..
        positions[b] + fed - 1, logits and greedy ids at every row (the run's ``ids``:
        int32 [B * fed]); its ids stay in the run (no step follows on the device).
        ``outputs`` "hidden": the run also holds every row's final-normed hidden state
        (``CausalLM.forward(final_hidden=True)``), for an MTP drafter; "none": no logits
        and no ids (a re-run that only writes the cache and the recurrent state); each a
        key of its own. ValueError for another ``outputs``."""
        if outputs not in OUTPUTS:
            raise ValueError(f"[decode plans] outputs must be one of {', '.join(OUTPUTS)}, "
                             f"got {outputs!r}")
        first = np.asarray(positions, dtype=np.int64)
        pos = (first[:, None] + np.arange(fed)[None, :]).reshape(-1)
        width = max(len(b) for b in blocks)
        key = decode_key(len(first), width, int(pos.max()), fed, outputs)
        if token_ids is None and (after is None or after.key != key):
            raise ValueError("[decode plans] ids on the device need the previous run of the "
                             "same key")
        phases = self._phases(key)
        if len(phases) == 1:
            phase, following = 0, None
        else:
            phase = self._next_phase if token_ids is not None else 1 - after.phase
            self._next_phase = 1 - phase
            following = phases[1 - phase]
        current = phases[phase]
        slots = current.slots
        tables = np.zeros((len(first), slots.width), dtype=np.int32)
        for b, table in enumerate(blocks):
            tables[b, :len(table)] = table
        row = np.repeat(np.arange(len(first)), fed)      # the request of every token
        slot_ids = tables[row, pos // BLOCK_SIZE].astype(np.int64) * BLOCK_SIZE
        pairs = [(slots.positions, pos.astype(np.int32)),
                 (slots.slot_mapping, slot_ids + pos % BLOCK_SIZE),
                 (slots.block_tables, tables),
                 (slots.seq_lens, (first + fed).astype(np.int32))]
        if token_ids is not None:
            pairs.append((slots.token_ids, np.asarray(token_ids, dtype=np.int32)))
        if state_slots is not None:
            pairs.append((slots.state_slots, np.asarray(state_slots, dtype=np.int32)))
        if window_tables is not None:
            windows = np.full((len(first), slots.width), -1, dtype=np.int32)
            for b, table in enumerate(window_tables):
                windows[b, :len(table)] = table
            rows = windows[row, pos // BLOCK_SIZE].astype(np.int64)
            pairs += [(slots.window_tables, windows),
                      (slots.window_slots, rows * BLOCK_SIZE + pos % BLOCK_SIZE)]
        switch = self.model.rope_switch
        if switch is not None:
            pairs.append((slots.rope_rows, (pos + switch * (pos >= switch)).astype(np.int32)))
        write_inputs(pairs)
        if current.plan is None:
            plan = Plan(self.model.device)
            with plan.record():
                # In the model's dtype: the argmax needs no cast (read_logits casts).
                logits = self.model.forward(
                    slots.step_inputs(int(pos.max()), window_tables is not None,
                                      outputs != "none", switch is not None), self.cache,
                    float32_logits=False, final_hidden=outputs == "hidden")
                if outputs == "hidden":
                    logits, current.hidden = logits
                ids = None if logits is None else ops.greedy_argmax(
                    logits, out=None if following is None else following.slots.token_ids)
            current.plan, current.logits, current.ids = plan, logits, ids
            self.records += 1
        else:
            current.plan.replay()
            self.replays += 1
        return DecodeRun(key, phase, current.ids, current.logits, current.hidden)

    @staticmethod
    def read_ids(run: DecodeRun) -> np.ndarray:
        """The run's greedy ids (waits only for that run)."""
        return read_output(run.ids)

    @staticmethod
    def read_logits(run: DecodeRun) -> np.ndarray:
        return read_output(as_float32(run.logits))

    def release(self) -> None:
        """Releases every plan (and the tensors they hold)."""
        for phases in self._keys.values():
            for phase in phases:
                if phase.plan is not None:
                    phase.plan.release()
        self._keys.clear()
