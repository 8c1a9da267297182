"""Rotary position embedding (RoPE: Su et al. 2021, "RoFormer: Enhanced Transformer
with Rotary Position Embedding"). Math, both pairings (NeoX / half-split and GPT-J /
interleaved) and the accuracy of the angles: cpp/include/metalrt/ops.h, "rotary
position embedding"."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import flag, integer, out_tensor, real, tensors

# Python ints given as positions become int32 (range-checked); numpy arrays must be int32.
_POSITIONS = {"positions": "int32"}


def _rope(op: str, x, positions, rotary_dim, base, out) -> Tensor:
    x, positions = tensors(op, index_dtypes=_POSITIONS, x=x, positions=positions)
    return getattr(_native, op)(x, positions, integer(op, "rotary_dim", rotary_dim),
                                real(op, "base", base), out=out_tensor(op, out))


_ROTATE_DOC = """
    x: [T, heads, head_dim] float (f32/f16/bf16); positions: int32 [T] (a list of
    Python ints becomes int32, range-checked; a numpy array must already be int32);
    rotary_dim: int, even, 0 < rotary_dim <= head_dim; base: real > 0, the RoPE theta
    (e.g. 10000 or 1e6); out: optional Tensor, x's shape and dtype, may be x itself (in
    place). Arrays and lists go to the Tensors' device (else the CPU). Returns x's shape
    and dtype.

    Raises ValueError for shapes, an odd or too large rotary_dim, a non-positive base or
    tensors on different devices; TypeError for non-float x, non-int32 positions or
    non-array arguments.
    """


def rope_neox(x, positions, rotary_dim, base, out=None) -> Tensor:
    return _rope("rope_neox", x, positions, rotary_dim, base, out)


def rope_interleaved(x, positions, rotary_dim, base, out=None) -> Tensor:
    return _rope("rope_interleaved", x, positions, rotary_dim, base, out)


rope_neox.__doc__ = ("RoPE with NeoX (half-split) pairs (i, i + rotary_dim/2). Math: ops.h\n"
                      "    ``RopeNeox``.\n" + _ROTATE_DOC)
rope_interleaved.__doc__ = ("RoPE with GPT-J (interleaved) pairs (2i, 2i + 1). Math: ops.h\n"
                            "    ``RopeInterleaved``.\n" + _ROTATE_DOC)


def rope_cos_sin_cache(positions, rotary_dim, base, out=None) -> Tensor:
    """The cos|sin table of the given positions: row t holds cos(angle_i) for i <
    rotary_dim/2, then sin(angle_i). Math: ops.h ``RopeCosSinCache``.

    positions: int32 [T] (a list of Python ints becomes int32; a numpy array must be
    int32; copied to the CPU unless a Tensor); rotary_dim: int, positive and even; base:
    real > 0; out: optional Tensor float32 [T, rotary_dim]. Returns float32
    [T, rotary_dim].

    Raises ValueError / TypeError as rope_neox.
    """
    op = "rope_cos_sin_cache"
    (positions,) = tensors(op, index_dtypes=_POSITIONS, positions=positions)
    return _native.rope_cos_sin_cache(positions, integer(op, "rotary_dim", rotary_dim),
                                      real(op, "base", base), out=out_tensor(op, out))


def rope_from_cache(x, cos_sin_cache, positions, neox=True, out=None) -> Tensor:
    """Applies RoPE from a precomputed cos|sin table (rope_cos_sin_cache): token t uses
    row positions[t]. Math: ops.h ``RopeFromCache``.

    x: [T, heads, head_dim] float; cos_sin_cache: float32 [P, rotary_dim] (rotary_dim
    even, <= head_dim); positions: int32 [T], row indices in [0, P) (a list of Python
    ints becomes int32; a numpy array must be int32); neox: bool, True (default) for
    half-split pairs, False for interleaved; out: optional Tensor, x's shape and dtype,
    may be x. Arrays and lists go to the Tensors' device (else the CPU). Returns x's
    shape and dtype.

    Raises ValueError for shapes, rows outside the cache or tensors on different
    devices; TypeError for wrong dtypes or non-array arguments.
    """
    op = "rope_from_cache"
    x, cos_sin_cache, positions = tensors(op, index_dtypes=_POSITIONS, x=x,
                                          cos_sin_cache=cos_sin_cache, positions=positions)
    return _native.rope_from_cache(x, cos_sin_cache, positions, flag(op, "neox", neox),
                                   out=out_tensor(op, out))


def qk_norm_rope(q, k, q_weight, k_weight, positions, eps, rotary_dim, base) -> tuple:
    """Qwen3's attention prologue: RMSNorm over head_dim of every q and k head (Zhang &
    Sennrich 2019), then NeoX RoPE. Math: ops.h ``QkNormRope``.

    q: [T, heads, head_dim] float; k: [T, kv_heads, head_dim], q's dtype; q_weight,
    k_weight: [head_dim], q's dtype; positions: int32 [T] (a list of Python ints becomes
    int32; a numpy array must be int32); eps: real >= 0; rotary_dim: int, even, <=
    head_dim; base: real > 0. Arrays and lists go to the Tensors' device (else the CPU).
    Returns new Tensors (q_out, k_out) of q's and k's shapes and dtype.

    Raises ValueError for shapes, eps, rotary_dim, base or tensors on different devices;
    TypeError for dtypes or non-array arguments.
    """
    op = "qk_norm_rope"
    q, k, q_weight, k_weight, positions = tensors(op, index_dtypes=_POSITIONS, q=q, k=k,
                                                  q_weight=q_weight, k_weight=k_weight,
                                                  positions=positions)
    return _native.qk_norm_rope(q, k, q_weight, k_weight, positions, real(op, "eps", eps),
                                integer(op, "rotary_dim", rotary_dim), real(op, "base", base))
