"""Matrix products: activations times weights (math: cpp/include/metalrt/ops.h, "matrix
products"; Metal's GEMV or GEMM choice: cpp/gpu/matmul.cpp)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import out_tensor, tensors

_ERRORS = """

    a, b: float (f32/f16/bf16), same dtype; out: optional Tensor [M, N] in a's dtype.
    Arrays and lists go to the Tensors' device (else the CPU). Returns [M, N] in a's
    dtype.

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


matmul.__doc__ = "a [M, K] @ b [K, N] -> [M, N], accumulated in float32. Math: ops.h ``Matmul``." + _ERRORS
matmul_bt.__doc__ = ("a [M, K] @ b[N, K]^T -> [M, N], b a weight in nn.Linear layout (y = x W^T).\n"
                     "    Math: ops.h ``MatmulBT``." + _ERRORS)
