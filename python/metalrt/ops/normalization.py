"""Normalisation over the last dimension: LayerNorm, RMSNorm, softmax (math:
cpp/include/metalrt/ops.h, "normalisation"). Outputs have the input's dtype."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import out_tensor, real, tensors


def layer_norm(x, weight, bias=None, eps=1e-5, out=None) -> Tensor:
    """LayerNorm (Ba, Kiros & Hinton 2016) over the last dim, biased variance. Math:
    ops.h ``LayerNorm``.

    x: float [..., N] (f32/f16/bf16); weight, bias: [N] in x's dtype (bias None: no
    bias); eps: real >= 0 (default 1e-5); out: optional Tensor, x's shape and dtype, not
    overlapping the inputs. Arrays and lists go to the Tensors' device (else the CPU).
    Returns x's shape and dtype.

    Raises ValueError for shapes, a negative or non-finite eps, overlap or tensors on
    different devices; TypeError for dtypes or non-array arguments.
    """
    op = "layer_norm"
    x, weight, bias = tensors(op, optional=("bias",), x=x, weight=weight, bias=bias)
    return _native.layer_norm(x, weight, bias, real(op, "eps", eps), out=out_tensor(op, out))


def rms_norm(x, weight, eps=1e-6, out=None) -> Tensor:
    """RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization") over the
    last dim. Math: ops.h ``RmsNorm``.

    x: float [..., N] (f32/f16/bf16); weight: [N] in x's dtype (a (1 + w) norm passes
    1 + w, ``models/norms.py``); eps: real >= 0 (default 1e-6); out: optional Tensor, x's
    shape and dtype, not overlapping the inputs. Arrays and lists go to the Tensors'
    device (else the CPU). Returns x's shape and dtype.

    Raises ValueError for shapes (e.g. "[rms_norm] weight must have shape [576], got
    [512]"), a negative eps, overlap or tensors on different devices; TypeError for
    dtypes or non-array arguments.
    """
    op = "rms_norm"
    x, weight = tensors(op, x=x, weight=weight)
    return _native.rms_norm(x, weight, real(op, "eps", eps), out=out_tensor(op, out))


def softmax(x, out=None) -> Tensor:
    """Softmax over the last dim, max-subtracted. Math: ops.h ``Softmax``.

    x: float [..., N] (f32/f16/bf16; an array or list is copied to the CPU); out:
    optional Tensor, x's shape and dtype, not overlapping x. Returns x's shape and
    dtype.

    Raises ValueError for a scalar x, overlap or tensors on different devices; TypeError
    for non-float dtypes or non-array arguments.
    """
    op = "softmax"
    (x,) = tensors(op, x=x)
    return _native.softmax(x, out=out_tensor(op, out))
