"""Logits handed to the host in one dtype, whatever the model computes in."""
from __future__ import annotations

from metalrt import ops


def as_float32(logits):
    """``logits`` (a float Tensor [R, vocab]) as float32: itself when it is float32, else
    one cast dispatch (float16/bfloat16 to float32 is exact). Only a step whose logits
    reach the host or a sampler needs it; greedy_argmax reads every float dtype."""
    return logits if logits.dtype == "float32" else ops.cast(logits, "float32")
