"""The gates of the hybrid Gated-DeltaNet / full-attention layers (Qwen3-Next, Qwen3.5):
the gated RMSNorm of the linear-attention output and the sigmoid output gate of the
full-attention layers, as transformers 5.24 computes them (math:
cpp/include/metalrt/moe_ops.h, "gates")."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import integer, out_pair, out_tensor, real, tensors


def gated_rms_norm(x, z, weight, eps=1e-6, out=None) -> Tensor:
    """Gated RMSNorm (HF RMSNormGated): rms_norm(x) * weight * silu(z), the weight used
    as is (not 1 + weight). Math: moe_ops.h ``GatedRmsNorm``.

    x, z: float [..., D] (the GDN output as [T * Hv, Dv]), one shape and dtype; weight:
    [D] in x's dtype; eps: real >= 0 (default 1e-6); out: optional Tensor, x's shape and
    dtype, not overlapping the inputs. Arrays and lists go to the Tensors' device (else
    the CPU). Returns [..., D] in x's dtype.

    Raises ValueError for mismatched shapes (naming z or weight), a negative eps or
    tensors on different devices; TypeError for dtypes or non-array arguments.
    """
    op = "gated_rms_norm"
    x, z, weight = tensors(op, x=x, z=z, weight=weight)
    return _native.gated_rms_norm(x, z, weight, real(op, "eps", eps), out=out_tensor(op, out))


def gated_query_split(q_gate, num_heads, head_dim, out=None) -> tuple:
    """Splits the q_proj output of a hybrid full-attention layer (per head: head_dim
    query values, then head_dim gate values) into q and gate. Math: moe_ops.h
    ``GatedQuerySplit``.

    q_gate: float [T, num_heads * 2 * head_dim] (an array or list is copied to the CPU);
    num_heads, head_dim: ints; out: optional (q, gate) tuple of Tensors (either may be
    None) of the result shapes and q_gate's dtype. Returns new contiguous Tensors (q
    [T, num_heads, head_dim], gate [T, num_heads * head_dim]) in q_gate's dtype.

    Raises ValueError when the width is not num_heads * 2 * head_dim, a count is < 1 or
    an out has the wrong shape; TypeError for non-int counts, a non-float q_gate or an
    out that is not such a tuple.
    """
    op = "gated_query_split"
    (q_gate,) = tensors(op, q_gate=q_gate)
    out_q, out_gate = out_pair(op, out, ("q", "gate"))
    return _native.gated_query_split(q_gate, integer(op, "num_heads", num_heads),
                                     integer(op, "head_dim", head_dim), out_q=out_q, out_gate=out_gate)


def sigmoid_mul(x, gate, out=None) -> Tensor:
    """x * sigmoid(gate) elementwise (the attention output gate). Math: moe_ops.h
    ``SigmoidMul``.

    x, gate: float, one shape and dtype; out: optional Tensor, x's shape and dtype; it
    may be x itself (in place) but may not otherwise overlap the inputs. Arrays and
    lists go to the Tensors' device (else the CPU). Returns x's shape and dtype.

    Raises ValueError for mismatched shapes or devices; TypeError for dtypes.
    """
    op = "sigmoid_mul"
    x, gate = tensors(op, x=x, gate=gate)
    return _native.sigmoid_mul(x, gate, out=out_tensor(op, out))
