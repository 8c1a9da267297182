"""The draft model of speculative decoding: a smaller model with the target's
vocabulary that proposes its greedy continuation of each speculating request.

The drafter keeps its own paged KV cache (as many blocks as the target's) with one
sequence per request: the tokens whose K/V it holds. Each proposal round feeds what the
drafter has not seen yet of the request's tokens (the whole prompt the first time,
then the target's accepted tokens) as one chunk, then its own greedy tokens one step
at a time; all requests of a round share each forward step. Positions the target
rejected are rolled back by forgetting them: the next round feeds from the first
position where the drafter's tokens and the request's differ (attention never reads
past a sequence's length, so the stale rows are overwritten, never read).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from metalrt import ops

from ..cache import (BlockAllocator, ScheduledChunk, StepBuffers, blocks_for, build_step,
                     decode_row_passes)


@dataclass
class _Sequence:
    blocks: List[int]
    fed: List[int] = field(default_factory=list)   # tokens whose K/V the drafter holds


def check_draft_model(draft, target) -> None:
    """ValueError unless ``draft`` can draft for ``target``: the same vocabulary size
    (the ids are exchanged as they are), the same device, and no recurrent state (a
    drafter's rejected positions are rolled back by dropping their KV rows)."""
    where = "[speculative] the draft model"
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"{where} has a vocabulary of {draft.vocab_size} tokens, the target "
                         f"{target.vocab_size}: a draft model must share the tokenizer")
    if draft.device != target.device:
        raise ValueError(f"{where} is on {draft.device}, the target on {target.device}")
    if getattr(draft, "gdn", None) is not None:
        raise ValueError(f"{where} ({draft.arch}) keeps recurrent state; a draft model must be "
                         "all attention layers")


class DraftModelDrafter:
    """Proposes tokens for requests from ``model``'s greedy decoding over a cache of
    ``num_blocks`` blocks (the target's count: every request that fits the target fits
    here)."""

    def __init__(self, model, num_blocks: int):
        self.model = model
        # One table for all layers: its own sequences keep every position.
        self.cache = model.new_cache(num_blocks, window_blocks=None)
        self.allocator = BlockAllocator(num_blocks)
        self.inputs = StepBuffers(model.device)
        self._sequences: Dict[int, _Sequence] = {}   # request_id -> its draft sequence

    def release_others(self, request_ids: Sequence[int]) -> None:
        """Frees the sequences of requests not in ``request_ids`` (finished ones)."""
        keep = set(request_ids)
        for rid in [r for r in self._sequences if r not in keep]:
            self.allocator.free(self._sequences.pop(rid).blocks)

    def propose(self, wanted: Sequence[Tuple[object, int]]) -> List[List[int]]:
        """The drafts of (request, k) pairs: k greedy tokens of the draft model after
        each request's tokens, in one forward step per drafted position."""
        seqs = [self._sequence(request) for request, _ in wanted]
        chunks = []
        for seq, (request, _) in zip(seqs, wanted):
            tokens = request.tokens
            common = 0
            for mine, theirs in zip(seq.fed, tokens):
                if mine != theirs:
                    break
                common += 1
            start = min(common, len(tokens) - 1)      # the last token gives the logits
            chunks.append(ScheduledChunk(tokens[start:], start, seq.blocks))
            seq.fed = list(tokens)
        drafts: List[List[int]] = [[] for _ in wanted]
        live = list(range(len(wanted)))
        while live:
            ids = self._forward(chunks)
            for j, index in enumerate(live):
                drafts[index].append(int(ids[j]))
            live = [i for i in live if len(drafts[i]) < wanted[i][1]]
            chunks = []
            for index in live:
                seq, token = seqs[index], drafts[index][-1]
                chunks.append(ScheduledChunk([token], len(seq.fed), seq.blocks))
                seq.fed.append(token)
        return drafts

    def _sequence(self, request) -> _Sequence:
        seq = self._sequences.get(request.request_id)
        if seq is None:
            seq = self._sequences[request.request_id] = _Sequence(
                self.allocator.allocate(blocks_for(request.max_cached_tokens)))
        return seq

    def _forward(self, chunks) -> List[int]:
        """The draft model's greedy token after each chunk; decode rows apart from longer
        catch-ups (``decode_row_passes``), so a request's drafts do not depend on the
        others' chunks."""
        ids = [0] * len(chunks)
        for indices, decode_rows in decode_row_passes(chunks):
            step = build_step([chunks[i] for i in indices], self.model.device, self.inputs,
                              decode_rows)
            logits = self.model.forward(step, self.cache, float32_logits=False)
            for i, token in zip(indices, ops.greedy_argmax(logits).numpy()):
                ids[i] = int(token)
        return ids
