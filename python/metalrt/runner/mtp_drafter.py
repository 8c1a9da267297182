"""The MTP drafter of speculative decoding: the checkpoint's multi-token-prediction head
(``models/mtp.py``) proposes each speculating request's next tokens.

The head keeps one paged KV layer of its own, addressed by the requests' block tables
(its position p in the slot of the target's position p). Every target step of a
speculating request (prompt chunk, decode or verify) hands over the final-normed hidden
states of the positions it put in the cache for good (a verify step: its kept tokens;
``note``); the next proposal round first runs the head on them (position p with the token
at p + 1, so the token the step sampled is the input of its last position) — the
catch-up, whose last row's logits give the first draft — then on its own output with
the token it drafted, one step per further draft (vLLM's MTP proposer). All requests of
a round share each of these steps. The head's rows past a position's catch-up (drafted
positions) are overwritten by the next catch-up before anything reads them, so a
rejected draft needs no rollback here.

A round after a plan's step (``DecodePlans.launch(outputs="hidden")``: every request
fed the same number of rows, all of them drafting k tokens again) replays a plan of
its own (``metalrt.plan``): the catch-up runs over all the rows the step fed, past the
kept ones too (the tokens there are padding: those rows' outputs are not read, and
their K/V rows lie past the positions this round reads, rewritten by the drafted
steps or the next catch-up before anything reads them), then the k - 1 drafted steps
take the previous step's greedy ids on the device; the host reads the k x B drafts
once. Such a plan is keyed by the step's plan key, k, and the round's decode key
(rows, block-table width and position buckets); the ``capacity`` most recent are kept.

A prompt prefix taken from the prefix cache has the head's rows of whichever request
computed its blocks (none, for blocks computed without the head): they only change the
drafts, never the output, which the target verifies.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import BLOCK_SIZE, ScheduledChunk, StepBuffers, build_step
from ..plan import Plan, read_output, write_inputs
from .decode_plans import DecodeSlots, decode_key


@dataclass
class _RoundPlan:
    """A recorded proposal round of B requests: the catch-up's slots (fed rows a
    request) and logit rows int32 [B], each drafted step's slots, the drafts int32
    [k, B] (row j: the greedy ids of step j, the token ids of step j + 1) and the
    hidden-state tensor it reads."""

    plan: Plan
    catch_up: DecodeSlots
    logit_rows: "metalrt.Tensor"
    steps: List[DecodeSlots]
    drafts: "metalrt.Tensor"
    hidden: "metalrt.Tensor"


class MtpDrafter:
    """Proposes tokens from ``model.mtp`` over a KV layer of ``num_blocks`` blocks (the
    target cache's count: the requests' block tables address it). ``records`` and
    ``replays`` count the rounds recorded into and replayed from plans (for a model
    whose ``records_plans`` is True)."""

    def __init__(self, model, num_blocks: int, capacity: int = 4):
        self.head = model.mtp
        self.device = model.device
        self.cache = self.head.new_cache(num_blocks)
        self.inputs = StepBuffers(model.device)
        self._hidden = None     # the last target step's final-normed hidden states [T, H]
        self._pending: List[Tuple[object, int, int, int]] = []   # (request, row, start, n)
        self._source = None     # the plan key of the step that made _hidden
        self._plans: "OrderedDict[tuple, _RoundPlan]" = OrderedDict() \
            if model.records_plans else None
        self.capacity = capacity
        self.records = self.replays = 0

    def note(self, hidden, spans: Sequence[Tuple[object, int, int, int]],
             plan_key: Optional[tuple] = None) -> None:
        """Records a target step's ``hidden`` [T, H] and, per speculating request,
        (request, first row, first position, n): rows row .. row + n - 1 of ``hidden``
        are its positions start .. start + n - 1, now in the cache for good.
        ``plan_key``: the step was that decode plan's (``hidden`` is its output)."""
        self._hidden, self._pending, self._source = hidden, list(spans), plan_key

    def propose(self, wanted: Sequence[Tuple[object, int]]) -> List[List[int]]:
        """The drafts of (request, k) pairs: k tokens of the head after each request's
        tokens. Runs the catch-up of every request noted (finished ones dropped) first."""
        pending = [p for p in self._pending if not p[0].finished]
        self._pending, hidden, self._hidden = [], self._hidden, None
        source, self._source = self._source, None
        if source is not None and self._plans is not None and \
                self._plannable(pending, wanted, hidden):
            return self._replay(source, pending, wanted[0][1], hidden)
        want: Dict[int, int] = {id(r): k for r, k in wanted}
        drafts: Dict[int, List[int]] = {id(r): [] for r, _ in wanted}
        caught = [p for p in pending if id(p[0]) in want]
        if pending:
            rows = np.concatenate([np.arange(row, row + n) for _, row, _, n in pending])
            chunks = [ScheduledChunk(r.tokens[start + 1:start + n + 1], start, r.blocks,
                                     "last" if id(r) in want else "none")
                      for r, _, start, n in pending]
            out, ids = self._forward(chunks, ops.embedding(
                hidden, metalrt.asarray(rows.astype(np.int32), device=self.device)))
            # Drafting goes on from the catch-up's last position of each wanted request.
            live = [(r, start + n) for r, _, start, n in caught]
            for (request, _), token in zip(live, ids):
                drafts[id(request)].append(int(token))
            while True:
                keep = [j for j, (r, _) in enumerate(live) if len(drafts[id(r)]) < want[id(r)]]
                if not keep:
                    break
                live = [live[j] for j in keep]
                out = out if len(keep) == out.shape[0] else ops.embedding(out, keep)
                chunks = [ScheduledChunk([drafts[id(r)][-1]], pos, r.blocks, "last")
                          for r, pos in live]
                out, ids = self._forward(chunks, out)
                live = [(r, pos + 1) for r, pos in live]
                for (request, _), token in zip(live, ids):
                    drafts[id(request)].append(int(token))
        return [drafts[id(r)] for r, _ in wanted]

    @staticmethod
    def _plannable(pending, wanted, hidden) -> bool:
        """True when a round plan can run it: the noted step fed every request as many
        rows, and the same requests, in its row order, each want the same k."""
        if not pending or len(pending) != len(wanted) or \
                hidden.shape[0] % len(pending) or len({k for _, k in wanted}) != 1:
            return False
        fed = hidden.shape[0] // len(pending)
        return all(p[0] is r and p[1] == b * fed for b, (p, (r, _)) in
                   enumerate(zip(pending, wanted)))

    def _replay(self, source, pending, k: int, hidden) -> List[List[int]]:
        """The drafts of ``pending`` (k each) from a round plan, recorded on a miss."""
        rows = len(pending)
        fed = hidden.shape[0] // rows
        starts = np.array([start for _, _, start, _ in pending], dtype=np.int64)
        kept = np.array([n for _, _, _, n in pending], dtype=np.int64)
        # The catch-up's positions (start .. start + fed - 1), then each drafted step's.
        catch_pos = starts[:, None] + np.arange(fed)[None, :]
        step_pos = (starts + kept)[:, None] + np.arange(k - 1)[None, :]
        max_position = int(max(catch_pos.max(), step_pos.max(initial=0)))
        width = max(len(r.blocks) for r, _, _, _ in pending)
        key = (source, k) + decode_key(rows, width, max_position)
        entry = self._plans.get(key)
        if entry is not None and entry.hidden is not hidden:   # the step's plan was made anew
            self._plans.pop(key).plan.release()
            entry = None
        if entry is None:
            entry = self._new_round(key, rows, fed, k, hidden)
        self._plans.move_to_end(key)
        tables = np.zeros((rows, entry.catch_up.width), dtype=np.int32)
        for b, (request, _, _, _) in enumerate(pending):
            tables[b, :len(request.blocks)] = request.blocks
        tokens = np.empty((rows, fed), dtype=np.int32)
        for b, (request, _, start, n) in enumerate(pending):
            # The token after each kept position; padding (not read) past them.
            tokens[b, :n] = request.tokens[start + 1:start + n + 1]
            tokens[b, n:] = tokens[b, n - 1]

        def slot(positions):
            row = np.arange(rows)[:, None]
            return (tables[row, positions // BLOCK_SIZE].astype(np.int64) * BLOCK_SIZE
                    + positions % BLOCK_SIZE).reshape(-1)

        catch = entry.catch_up
        pairs = [(catch.token_ids, tokens.reshape(-1)),
                 (catch.positions, catch_pos.reshape(-1).astype(np.int32)),
                 (catch.slot_mapping, slot(catch_pos)), (catch.block_tables, tables),
                 (catch.seq_lens, (starts + fed).astype(np.int32)),
                 (entry.logit_rows, (np.arange(rows) * fed + kept - 1).astype(np.int32))]
        for j, step in enumerate(entry.steps):
            positions = step_pos[:, j:j + 1]
            pairs += [(step.positions, positions.reshape(-1).astype(np.int32)),
                      (step.slot_mapping, slot(positions)), (step.block_tables, tables),
                      (step.seq_lens, (positions.reshape(-1) + 1).astype(np.int32))]
        write_inputs(pairs)
        if entry.plan.state == "ready":
            entry.plan.replay()
            self.replays += 1
        else:
            self._record(entry, max_position)
            self.records += 1
        return read_output(entry.drafts).T.tolist()

    def _new_round(self, key, rows: int, fed: int, k: int, hidden) -> _RoundPlan:
        while len(self._plans) >= self.capacity:
            _, old = self._plans.popitem(last=False)
            old.plan.release()
        width = key[-2]    # decode_key's width bucket
        entry = self._plans[key] = _RoundPlan(
            Plan(self.device), DecodeSlots(self.device, rows, width, fed),
            metalrt.empty(rows, "int32", self.device),
            [DecodeSlots(self.device, rows, width) for _ in range(k - 1)],
            metalrt.empty((k, rows), "int32", self.device), hidden)
        return entry

    def _record(self, entry: _RoundPlan, max_position: int) -> None:
        rows = entry.logit_rows.shape[0]
        with entry.plan.record():
            step = replace(entry.catch_up.step_inputs(max_position),
                                       logit_rows=entry.logit_rows, num_logit_rows=rows)
            out, logits = self.head.forward(step, entry.hidden, self.cache)
            ops.greedy_argmax(logits, out=entry.drafts[0])
            for j, slots in enumerate(entry.steps):
                step = replace(slots.step_inputs(max_position),
                                           token_ids=entry.drafts[j])
                out, logits = self.head.forward(step, out, self.cache)
                ops.greedy_argmax(logits, out=entry.drafts[j + 1])

    def _forward(self, chunks, hidden):
        """The head's (out, greedy ids) of one step over ``chunks``."""
        out, logits = self.head.forward(build_step(chunks, self.device, self.inputs), hidden,
                                        self.cache)
        return out, ([] if logits is None else ops.greedy_argmax(logits).numpy())
