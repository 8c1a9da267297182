"""Elementwise ops, activations and dtype casts. Arithmetic inputs are float (float32,
float16, bfloat16), computed in float32, stored in the input's dtype (round to nearest
even)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ..tensor import dtype_name
from ._args import out_tensor, tensors

_BINARY_DOC = """
    a: float tensor of any shape; b: a's shape, or a trailing suffix of it (broadcast
    over the leading dims, e.g. a bias [N] with a of [T, N]), a's dtype; out:
    optional, a's shape and dtype; may be a itself (in place), must not otherwise
    overlap a or b. Returns a's shape and dtype on the inputs' device.

    Raises ValueError for shapes that do not broadcast, overlapping out or tensors on
    different devices; TypeError for non-float or mismatched dtypes or non-array
    arguments.
    """

_UNARY_DOC = """
    x: float tensor of any shape; out: optional, x's shape and dtype, not overlapping x.
    Returns x's shape and dtype. Raises ValueError for a wrong out or tensors on
    different devices; TypeError for non-float dtypes or non-array arguments.
    """


def _binary(op: str, a, b, out) -> Tensor:
    a, b = tensors(op, a=a, b=b)
    return getattr(_native, op)(a, b, out=out_tensor(op, out))


def _unary(op: str, x, out) -> Tensor:
    (x,) = tensors(op, x=x)
    return getattr(_native, op)(x, out=out_tensor(op, out))


def add(a, b, out=None) -> Tensor:
    return _binary("add", a, b, out)


def mul(a, b, out=None) -> Tensor:
    return _binary("mul", a, b, out)


def relu(x, out=None) -> Tensor:
    return _unary("relu", x, out)


def gelu(x, out=None) -> Tensor:
    return _unary("gelu", x, out)


add.__doc__ = "Elementwise a + b." + _BINARY_DOC
mul.__doc__ = "Elementwise a * b." + _BINARY_DOC
relu.__doc__ = "ReLU: max(x, 0) (Nair & Hinton 2010)." + _UNARY_DOC
gelu.__doc__ = ("GELU, tanh approximation (Hendrycks & Gimpel 2016, \"Gaussian Error Linear\n"
                "    Units\"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))." + _UNARY_DOC)


def silu_and_mul(x, out=None) -> Tensor:
    """SwiGLU on a merged gate|up projection (Shazeer 2020, "GLU Variants Improve
    Transformer"): x [..., 2n] -> silu(x[..., :n]) * x[..., n:], [..., n], where
    silu(g) = g / (1 + exp(-g)).

    x: float, last dim even; out: optional [..., n] in x's dtype, not overlapping x.
    Raises ValueError for an odd last dim, a wrong out or tensors on different devices;
    TypeError for non-float dtypes or non-array arguments.
    """
    return _unary("silu_and_mul", x, out)


def cast(x, dtype, out=None) -> Tensor:
    """Converts x to `dtype` (a name from metalrt.DTYPES or a numpy dtype): floats round
    to nearest even (IEEE 754 roundTiesToEven), float -> int truncates toward zero;
    values out of the target's range give an unspecified (but defined) result.

    x: any dtype and shape; out: optional, x's shape with dtype `dtype`, not overlapping
    x. Returns a new tensor on x's device.
    Raises TypeError for an unknown dtype or a non-array x; ValueError for a wrong out
    or tensors on different devices.
    """
    (x,) = tensors("cast", x=x)
    try:
        name = dtype_name(dtype)
    except TypeError as error:
        raise TypeError(f"[cast] {error}") from None
    return _native.cast(x, name, out=out_tensor("cast", out))
