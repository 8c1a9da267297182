"""The gates of the hybrid Gated-DeltaNet / full-attention layers (Qwen3-Next, Qwen3.5):
the gated RMSNorm of the linear-attention output and the sigmoid output gate of the
full-attention layers. Math as transformers 5.24 (qwen3_next Qwen3NextRMSNormGated,
Qwen3NextAttention), computed in float32."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import integer, out_pair, out_tensor, real, tensors


def gated_rms_norm(x, z, weight, eps=1e-6, out=None) -> Tensor:
    """Gated RMSNorm (HF RMSNormGated): per row of the last dim,
    n = x * rsqrt(mean(x^2) + eps) rounded to x's dtype, p = weight * n rounded to x's
    dtype, y = p * silu(z) (silu(z) = z / (1 + exp(-z)) in float32) rounded to x's
    dtype. The weight is used as is (not 1 + weight).

    x, z: float [..., D] (the GDN output as [T * Hv, Dv]), one shape and dtype;
    weight: [D] in x's dtype; eps: >= 0; out: optional, x's shape and dtype, not
    overlapping the inputs. Returns [..., D] in x's dtype.
    Raises ValueError for mismatched shapes (naming z or weight), a negative eps or
    tensors on different devices; TypeError for dtypes or non-array arguments.
    """
    op = "gated_rms_norm"
    x, z, weight = tensors(op, x=x, z=z, weight=weight)
    return _native.gated_rms_norm(x, z, weight, real(op, "eps", eps), out=out_tensor(op, out))


def gated_query_split(q_gate, num_heads, head_dim, out=None) -> tuple:
    """Splits the q_proj output of a hybrid full-attention layer, laid out per head as
    head_dim query values then head_dim gate values (Qwen3NextAttention), into
    q [T, num_heads, head_dim] and gate [T, num_heads * head_dim], new contiguous
    tensors in q_gate's dtype (bit-exact copies).

    q_gate: float [T, num_heads * 2 * head_dim]; out: optional (q, gate) Tensors of
    those shapes and q_gate's dtype. Raises ValueError when the width is not
    num_heads * 2 * head_dim, a count is < 1 or an out has the wrong shape; TypeError
    for non-int counts or a non-float q_gate.
    """
    op = "gated_query_split"
    (q_gate,) = tensors(op, q_gate=q_gate)
    out_q, out_gate = out_pair(op, out, ("q", "gate"))
    return _native.gated_query_split(q_gate, integer(op, "num_heads", num_heads),
                                     integer(op, "head_dim", head_dim), out_q=out_q, out_gate=out_gate)


def sigmoid_mul(x, gate, out=None) -> Tensor:
    """x * sigmoid(gate) elementwise (the attention output gate), in float32 with
    sigmoid(g) = 1 / (1 + exp(-g)), rounded once to x's dtype.

    x, gate: float, one shape and dtype; out: optional, x's shape and dtype; it may be x
    itself (in place) but may not otherwise overlap the inputs.
    Raises ValueError for mismatched shapes or devices; TypeError for dtypes.
    """
    op = "sigmoid_mul"
    x, gate = tensors(op, x=x, gate=gate)
    return _native.sigmoid_mul(x, gate, out=out_tensor(op, out))
