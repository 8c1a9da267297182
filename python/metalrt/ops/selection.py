"""Token selection from logits."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import out_tensor, tensors


def greedy_argmax(logits, out=None) -> Tensor:
    """Greedy decoding: the index of the largest logit of every row.

    logits: [R, V] float (f32/f16/bf16), V > 0; out: optional int32 [R]. Returns int32
    [R]. Ties go to the lowest index (numpy.argmax's rule); NaN never wins, and a row
    of only NaN gives 0.

    Raises ValueError for a rank other than 2 or an empty vocabulary; TypeError for
    integer logits or a non-array argument.
    """
    (logits,) = tensors("greedy_argmax", logits=logits)
    return _native.greedy_argmax(logits, out=out_tensor("greedy_argmax", out))
