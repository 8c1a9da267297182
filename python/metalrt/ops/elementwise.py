"""Elementwise ops, activations and dtype casts (math: cpp/include/metalrt/ops.h,
"elementwise"). Arithmetic inputs are float (float32, float16, bfloat16)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ..tensor import dtype_name
from ._args import out_tensor, real, tensors

_BINARY_DOC = """

    a: float Tensor or array of any shape; b: a's shape, or a trailing suffix of it
    (broadcast over the leading dims, e.g. a bias [N] with a of [T, N]), a's dtype; out:
    optional Tensor, a's shape and dtype; may be a itself (in place), must not otherwise
    overlap a or b. Arrays and lists go to the Tensors' device (else the CPU). Returns
    a's shape and dtype.

    Raises ValueError for shapes that do not broadcast, overlapping out or tensors on
    different devices; TypeError for non-float or mismatched dtypes or non-array
    arguments.
    """

_UNARY_DOC = """

    x: float Tensor or array of any shape; out: optional Tensor, x's shape and dtype, not
    overlapping x. A numpy array or list is copied to the CPU. Returns x's shape and dtype.

    Raises ValueError for a wrong out or tensors on different devices; TypeError for
    non-float dtypes or non-array arguments.
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


add.__doc__ = "Elementwise a + b. Math: ops.h ``Add``." + _BINARY_DOC
mul.__doc__ = "Elementwise a * b. Math: ops.h ``Mul``." + _BINARY_DOC
relu.__doc__ = "ReLU: max(x, 0) (Nair & Hinton 2010). Math: ops.h ``Relu``." + _UNARY_DOC
gelu.__doc__ = ("GELU, tanh approximation (Hendrycks & Gimpel 2016, \"Gaussian Error Linear\n"
                "    Units\"). Math: ops.h ``Gelu``." + _UNARY_DOC)


GLU_ACTIVATIONS = ("silu", "swiglu_oai")


def silu_and_mul(x, out=None, *, activation="silu", alpha=1.702, limit=7.0,
                 interleaved=True) -> Tensor:
    """A gated linear unit on a merged gate|up projection: x [..., 2n] -> [..., n].
    activation "silu": SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"),
    silu(x[..., :n]) * x[..., n:] (math: ops.h ``SiluAndMul``); "swiglu_oai": gpt-oss's
    clamped SwiGLU on interleaved pairs, gate = x[..., 0::2], up = x[..., 1::2],
    (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g) with g = min(gate, limit)
    (transformers ``GptOssExperts._apply_gate``; math: expert_ops.h ``SwigluOaiAndMul``);
    with ``interleaved=False`` the same on halves, gate = x[..., :n], up = x[..., n:]
    (llama.cpp's gpt-oss GGUF files: gate and up are two expert stacks).

    x: float Tensor or array (copied to the CPU), last dim even; out: optional Tensor
    [..., n] in x's dtype, not overlapping x; activation, alpha, limit, interleaved:
    keyword-only (alpha and limit, finite floats > 0, and interleaved, a bool, are read
    by "swiglu_oai" only). Returns
    [..., n] in x's dtype.

    Raises ValueError for an odd last dim, an unknown activation, alpha or limit not
    finite and > 0, a wrong out or tensors on different devices; TypeError for
    non-float dtypes or non-array arguments.
    """
    op = "silu_and_mul"
    if activation == "silu":
        return _unary(op, x, out)
    if activation != "swiglu_oai":
        raise ValueError(f"[{op}] activation must be one of {GLU_ACTIVATIONS}, got {activation!r}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"[{op}] interleaved must be a bool, got {type(interleaved).__name__}")
    (x,) = tensors(op, x=x)
    return _native.swiglu_oai_and_mul(x, real(op, "alpha", alpha), real(op, "limit", limit),
                                      interleaved, out=out_tensor(op, out))


def cast(x, dtype, out=None) -> Tensor:
    """Converts x to `dtype` (round to nearest even; float -> int truncates). Math:
    ops.h ``Cast``.

    x: Tensor or array of any dtype and shape; dtype: a name from metalrt.DTYPES or a
    numpy dtype; out: optional Tensor, x's shape with dtype `dtype`, not overlapping x.
    A numpy array or list is copied to the CPU first. Returns a new Tensor on x's
    device.

    Raises TypeError for an unknown dtype or a non-array x; ValueError for a wrong out
    or tensors on different devices.
    """
    (x,) = tensors("cast", x=x)
    try:
        name = dtype_name(dtype)
    except TypeError as error:
        raise TypeError(f"[cast] {error}") from None
    return _native.cast(x, name, out=out_tensor("cast", out))
