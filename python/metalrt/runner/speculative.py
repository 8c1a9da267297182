"""Speculative decoding: a drafter proposes the next k tokens of a request, the target
model scores them all in one forward step, and the longest prefix the target agrees
with is kept, plus one token of the target's own (Leviathan et al. 2023; Chen et al.
2023).

Drafters (``SpeculativeConfig.method``):

* ``"ngram"``: prompt lookup (Saxena 2023, vLLM's ``ngram``): the last n tokens of
  prompt + output (n from ``ngram_max`` down to ``ngram_min``) are looked up in the
  earlier tokens, and the tokens that followed their latest occurrence are proposed;
* ``"draft"``: a smaller model with the target's vocabulary proposes its greedy
  continuation (``draft_model.DraftModelDrafter``);
* ``"mtp"``: the checkpoint's multi-token-prediction head (refused for a model
  without one).

Every proposal is deterministic (the draft distribution is one-hot), so verification
is ``Sampler.verify``: the target's argmax for greedy requests (the output equals plain
decoding), rejection sampling that keeps the target's distribution otherwise.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

SPEC_METHODS = ("ngram", "draft", "mtp")


@dataclass(frozen=True)
class SpeculativeConfig:
    """How an engine speculates: ``method`` "ngram" | "draft" | "mtp";
    ``num_draft_tokens`` k >= 1 proposed per verify step (fewer near a request's
    max_tokens); ``draft_model`` the drafter of "draft" (a loaded model with the target's
    vocabulary); ``ngram_min`` / ``ngram_max`` the suffix lengths prompt lookup tries.
    TypeError for a setting of the wrong type, ValueError for one out of range."""

    method: str = "ngram"
    num_draft_tokens: int = 4
    draft_model: object = None
    ngram_min: int = 1
    ngram_max: int = 3

    def __post_init__(self):
        for name in ("num_draft_tokens", "ngram_min", "ngram_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"[speculative] {name} must be an int, got {type(value).__name__}")
        if self.method not in SPEC_METHODS:
            raise ValueError(f"[speculative] method must be one of {', '.join(SPEC_METHODS)}, "
                             f"got {self.method!r}")
        if self.num_draft_tokens < 1:
            raise ValueError(f"[speculative] num_draft_tokens must be >= 1, got "
                             f"{self.num_draft_tokens}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"[speculative] need 1 <= ngram_min <= ngram_max, got "
                             f"{self.ngram_min}, {self.ngram_max}")
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("[speculative] method 'draft' needs a draft model (draft_model=, "
                             "--draft-model)")
        if self.method != "draft" and self.draft_model is not None:
            raise ValueError(f"[speculative] a draft model is used by method 'draft' only, "
                             f"got method {self.method!r}")
        if self.draft_model is not None and not all(
                hasattr(self.draft_model, a) for a in ("vocab_size", "device", "new_cache")):
            # mlx-lm's convention: the Python API takes a loaded model, the CLI a path.
            raise TypeError(f"[speculative] draft_model must be a model from metalrt.load, got "
                            f"{type(self.draft_model).__name__} {self.draft_model!r:.60}")


def prompt_lookup(tokens: Sequence[int], k: int, ngram_min: int, ngram_max: int) -> List[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the longest
    suffix of ``tokens`` of ``ngram_max`` .. ``ngram_min`` tokens; [] when none recurs."""
    ids = np.asarray(tokens, dtype=np.int64)
    for n in range(min(ngram_max, len(ids) - 1), ngram_min - 1, -1):
        # Windows starting at 0 .. len - n - 1: every occurrence but the suffix itself.
        windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], n)
        hits = np.flatnonzero((windows == ids[-n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return ids[start:start + k].tolist()
    return []


def accept(request, draft: Sequence[int], logits: Optional[np.ndarray],
           ids: Optional[np.ndarray]):
    """The tokens a verify step gives ``request``, as (token, logprobs) pairs: the
    drafted tokens the target keeps and then the target's own token (at the first
    rejected position, or after the last draft). Row i of ``logits`` (float32
    [len(draft) + 1, V], for a request that needs logits) or ``ids`` (the target's
    argmax per row, for one that does not) is the target's prediction after draft i - 1
    (row 0: after the request's last token)."""
    out, context = [], list(request.tokens)
    for i in range(len(draft) + 1):
        if ids is not None and not request.params.needs_logits:
            token, logprobs = int(ids[i]), None
        elif i < len(draft):
            token, logprobs = request.sampler.verify(logits[i], context, draft[i])
        else:
            token, logprobs = request.sampler.sample(logits[i], context)
        out.append((token, logprobs))
        if i == len(draft) or token != draft[i]:
            break
        context.append(token)
    return out
