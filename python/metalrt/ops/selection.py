"""Token selection from logits."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import out_tensor, tensors


def greedy_argmax(logits, out=None) -> Tensor:
    """Greedy decoding: the index of the largest logit of every row (ties to the lowest
    index, NaN never wins). Math: ops.h ``GreedyArgmax``.

    logits: [R, V] float (f32/f16/bf16), V > 0 (an array or list is copied to the CPU);
    out: optional Tensor int32 [R]. Returns int32 [R].

    Raises ValueError for a rank other than 2 or an empty vocabulary; TypeError for
    integer logits or a non-array argument.
    """
    (logits,) = tensors("greedy_argmax", logits=logits)
    return _native.greedy_argmax(logits, out=out_tensor("greedy_argmax", out))
