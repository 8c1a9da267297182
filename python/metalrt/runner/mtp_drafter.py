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

A prompt prefix taken from the prefix cache has the head's rows of whichever request
computed its blocks (none, for blocks computed without the head): they only change the
drafts, never the output, which the target verifies.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import ScheduledChunk, StepBuffers, build_step


class MtpDrafter:
    """Proposes tokens from ``model.mtp`` over a KV layer of ``num_blocks`` blocks (the
    target cache's count: the requests' block tables address it)."""

    def __init__(self, model, num_blocks: int):
        self.head = model.mtp
        self.device = model.device
        self.cache = self.head.new_cache(num_blocks)
        self.inputs = StepBuffers(model.device)
        self._hidden = None     # the last target step's final-normed hidden states [T, H]
        self._pending: List[Tuple[object, int, int, int]] = []   # (request, row, start, n)

    def note(self, hidden, spans: Sequence[Tuple[object, int, int, int]]) -> None:
        """Records a target step's ``hidden`` [T, H] and, per speculating request,
        (request, first row, first position, n): rows row .. row + n - 1 of ``hidden``
        are its positions start .. start + n - 1, now in the cache for good."""
        self._hidden, self._pending = hidden, list(spans)

    def propose(self, wanted: Sequence[Tuple[object, int]]) -> List[List[int]]:
        """The drafts of (request, k) pairs: k tokens of the head after each request's
        tokens. Runs the catch-up of every request noted (finished ones dropped) first."""
        pending = [p for p in self._pending if not p[0].finished]
        self._pending, hidden, self._hidden = [], self._hidden, None
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

    def _forward(self, chunks, hidden):
        """The head's (out, greedy ids) of one step over ``chunks``."""
        out, logits = self.head.forward(build_step(chunks, self.device, self.inputs), hidden,
                                        self.cache)
        return out, ([] if logits is None else ops.greedy_argmax(logits).numpy())
