"""OpenAI's ``frequency_penalty``, ``presence_penalty`` and ``logit_bias`` as a logits
processor (``SamplingParams.logits_processors``).

The formula of OpenAI's API reference: for a token j sampled c[j] times so far in this
reply, ``logit[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty``; then
``logit[j] += logit_bias[j]``. Reported logprobs are those of the changed logits.
"""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


class OpenAIPenalties:
    """``f(output_ids, logits [V] float32) -> logits`` applying the formula above;
    ``bias``: token id -> bias added to its logit."""

    def __init__(self, frequency: float, presence: float, bias: Dict[int, float]):
        self.frequency, self.presence = frequency, presence
        self.ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self.bias = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))

    def __call__(self, output: Sequence[int], logits: np.ndarray) -> np.ndarray:
        if len(output) and (self.frequency or self.presence):
            counts = np.bincount(np.asarray(output, dtype=np.int64),
                                 minlength=logits.shape[-1])[:logits.shape[-1]]
            logits -= (counts * self.frequency + (counts > 0) * self.presence).astype(np.float32)
        logits[self.ids] += self.bias
        return logits
