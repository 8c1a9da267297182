"""Token sampling on the host (numpy), following mlx-lm's ``sample_utils``.

Order, as mlx-lm applies it for one row of logits:

0. the request's logits processors, in order (``SamplingParams.logits_processors``:
   a grammar's token mask, OpenAI's penalties and logit_bias in the server);
1. repetition penalty (CTRL, Keskar et al. 2019) over the last
   ``repetition_context_size`` tokens of prompt + output: a positive logit is
   divided by the penalty, a negative one multiplied;
2. log-softmax -> logprobs (what ``logprobs`` reports);
3. if temp == 0: argmax (lowest index on ties);
4. otherwise the filters on the *untempered* logprobs, in this order: top-k (keep
   tokens whose logprob is >= the k-th largest, ties kept), top-p (nucleus, Holtzman
   et al. 2020: the most probable tokens whose mass before them is < top_p, so the
   token crossing top_p is kept), min-p (keep tokens with probability >= min_p x the
   maximum probability); removed tokens get -inf;
5. sample from softmax(logprobs / temp) with the request's numpy Generator.

vLLM differs in one place: it divides by the temperature *before* min-p, top-k and
top-p (and applies top-k before top-p, as here), so its filters see the tempered
distribution.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from ..tensor import is_int


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings; the defaults are greedy decoding.

    temp >= 0 (0 = greedy); top_p in (0, 1] (1 = off); top_k >= 0 (0 = off); min_p in
    [0, 1] (0 = off); repetition_penalty > 0 (1 = off) over the last
    repetition_context_size tokens; seed for the request's numpy Generator (None =
    fresh entropy); logprobs: also return the log-softmax of the (penalised) logits.
    logits_processors: callables ``f(output_ids, logits) -> logits`` (output_ids: the
    tokens sampled so far; logits: float32 [V], a copy the callable may change in place)
    applied first; a request with any reads its logits on the host every step.
    Raises TypeError for a setting of the wrong type (a bool is not a number here) and
    ValueError for one out of range (seed < 0, a non-finite repetition_penalty).
    """

    temp: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repetition_context_size: int = 20
    seed: Optional[int] = None
    logprobs: bool = False
    logits_processors: Tuple[Callable, ...] = ()

    def __post_init__(self):
        for name, kind, what in (("temp", numbers.Real, "a number"), ("top_p", numbers.Real, "a number"),
                                 ("top_k", numbers.Integral, "an int"), ("min_p", numbers.Real, "a number"),
                                 ("repetition_penalty", numbers.Real, "a number"),
                                 ("repetition_context_size", numbers.Integral, "an int")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise TypeError(f"[sampling] {name} must be {what}, got {type(value).__name__}")
        if not all(callable(f) for f in self.logits_processors):
            raise TypeError("[sampling] logits_processors must be callables f(output_ids, logits)")
        if self.seed is not None and not is_int(self.seed):
            raise TypeError(f"[sampling] seed must be an int or None, got {type(self.seed).__name__}")
        checks = [(self.temp >= 0, "temp must be >= 0"),
                  (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
                  (self.top_k >= 0, "top_k must be >= 0"),
                  (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
                  (0 < self.repetition_penalty < math.inf, "repetition_penalty must be > 0 and finite"),
                  (self.repetition_context_size >= 0, "repetition_context_size must be >= 0"),
                  (self.seed is None or self.seed >= 0, "seed must be >= 0")]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"[sampling] {message}")

    @property
    def greedy(self) -> bool:
        return self.temp == 0

    @property
    def needs_logits(self) -> bool:
        """False when the token is the plain argmax of the model's logits, which the
        device computes so that only the id is read back."""
        return (not self.greedy or self.repetition_penalty != 1.0 or self.logprobs
                or bool(self.logits_processors))


def apply_repetition_penalty(logits: np.ndarray, context: Sequence[int], penalty: float) -> np.ndarray:
    """A copy of ``logits`` [V] with every token in ``context`` penalised (once each)."""
    out = np.array(logits, dtype=np.float32)
    if penalty == 1.0 or len(context) == 0:
        return out
    ids = np.unique(np.asarray(context, dtype=np.int64))
    picked = out[ids]
    out[ids] = np.where(picked < 0, picked * penalty, picked / penalty)
    return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - np.max(logits)
    return (shifted - np.log(np.sum(np.exp(shifted)))).astype(np.float32)


def top_k_mask(logprobs: np.ndarray, k: int) -> np.ndarray:
    """True for the tokens top-k keeps (all of them when k is 0 or >= V)."""
    if k <= 0 or k >= logprobs.shape[-1]:
        return np.ones(logprobs.shape, dtype=bool)
    kth = np.partition(logprobs, -k)[-k]
    return logprobs >= kth


def top_p_mask(logprobs: np.ndarray, p: float) -> np.ndarray:
    """True for the nucleus: in descending probability, tokens whose preceding mass is
    < p (the most probable token is always kept)."""
    if p >= 1.0:
        return np.ones(logprobs.shape, dtype=bool)
    order = np.argsort(-logprobs, kind="stable")
    probs = np.exp(logprobs[order].astype(np.float64))
    mass_before = np.cumsum(probs) - probs
    mask = np.zeros(logprobs.shape, dtype=bool)
    mask[order] = mass_before < p
    return mask


def min_p_mask(logprobs: np.ndarray, min_p: float) -> np.ndarray:
    """True for tokens with probability >= min_p x the largest probability."""
    if min_p <= 0.0:
        return np.ones(logprobs.shape, dtype=bool)
    return logprobs >= np.max(logprobs) + np.log(min_p)


class Sampler:
    """Samples one request's tokens with its own seeded Generator."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def penalised(self, logits: np.ndarray, context: Sequence[int],
                  output: Sequence[int] = ()) -> np.ndarray:
        p = self.params
        if p.logits_processors:
            logits = np.array(logits, dtype=np.float32)
            for process in p.logits_processors:
                logits = process(output, logits)
        window = context[len(context) - p.repetition_context_size:] if p.repetition_context_size else []
        return apply_repetition_penalty(logits, window, p.repetition_penalty)

    def weights(self, logprobs: np.ndarray) -> np.ndarray:
        """float64 [V] unnormalised sampling weights of a non-greedy request: the filters
        (top-k, top-p, min-p) on ``logprobs``, then the temperature; 0 for a removed token."""
        p = self.params
        keep = top_k_mask(logprobs, p.top_k) & top_p_mask(logprobs, p.top_p) \
            & min_p_mask(logprobs, p.min_p)
        scaled = np.where(keep, logprobs.astype(np.float64) / p.temp, -np.inf)
        return np.exp(scaled - scaled.max())

    def _draw(self, weights: np.ndarray) -> int:
        cdf = np.cumsum(weights)
        token = int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))
        return min(token, len(cdf) - 1)

    def sample(self, logits: np.ndarray, context: Sequence[int], output: Sequence[int] = ()):
        """(token id, logprobs float32 [V] or None) for one row of logits [V];
        ``context`` is prompt + output so far (for the repetition penalty), ``output``
        the tokens sampled so far (for the logits processors)."""
        p = self.params
        logprobs = log_softmax(self.penalised(logits, context, output))
        token = int(np.argmax(logprobs)) if p.greedy else self._draw(self.weights(logprobs))
        return token, (logprobs if p.logprobs else None)

    def verify(self, logits: np.ndarray, context: Sequence[int], draft: int,
               output: Sequence[int] = ()):
        """(token id, logprobs or None) at a position where a drafter proposed ``draft``
        (a deterministic proposal: its draft distribution q is one-hot at ``draft``).
        Greedy: the argmax, as ``sample``. Otherwise speculative rejection sampling
        (Leviathan et al. 2023; Chen et al. 2023) with that q: ``draft`` is accepted
        with probability p(draft), else a token is drawn from p with ``draft`` removed
        (the normalised residual max(0, p - q)), so the token is distributed as p, the
        distribution ``sample`` draws from. The caller stops verifying at the first
        token that differs from its draft."""
        p = self.params
        if p.greedy:
            return self.sample(logits, context, output)
        logprobs = log_softmax(self.penalised(logits, context, output))
        weights = self.weights(logprobs)
        total = weights.sum()
        if self.rng.random() * total < weights[draft]:
            token = int(draft)
        else:
            weights[draft] = 0.0
            token = self._draw(weights)
        return token, (logprobs if p.logprobs else None)
