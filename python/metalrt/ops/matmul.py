"""Matrix products: activations times weights (GEMM; GEMV for decode and small batches)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import out_tensor, tensors

_ERRORS = """
    Raises ValueError for ranks other than 2, disagreeing K, a wrong or overlapping out
    or tensors on different devices; TypeError for non-float or mismatched dtypes or
    non-array arguments.
    """


def matmul(a, b, out=None) -> Tensor:
    return _product("matmul", a, b, out)


def matmul_bt(a, b, out=None) -> Tensor:
    return _product("matmul_bt", a, b, out)


def _product(op: str, a, b, out) -> Tensor:
    a, b = tensors(op, a=a, b=b)
    return getattr(_native, op)(a, b, out=out_tensor(op, out))


matmul.__doc__ = """a [M, K] @ b [K, N] -> [M, N], accumulated in float32 (on Metal a GEMV for
    M = 1, the tiled GEMM above).

    a, b: float (f32/f16/bf16), same dtype; out: optional [M, N] in a's dtype.""" + _ERRORS
matmul_bt.__doc__ = """a [M, K] @ b[N, K]^T -> [M, N]: b is a weight in nn.Linear layout
    ([out_features, in_features]), so y = x W^T as in torch.nn.functional.linear.
    Accumulated in float32. On Metal a GEMV serves M <= 8 when K % 8 == 0 (its 4-wide
    loads; K split over SIMD-groups for long rows), the tiled GEMM every other shape
    (docs/architecture.md).

    a, b: float (f32/f16/bf16), same dtype; out: optional [M, N] in a's dtype.""" + _ERRORS
