"""Rotary position embedding (RoPE: Su et al. 2021, "RoFormer: Enhanced Transformer
with Rotary Position Embedding").

Feature pairs are rotated by angle = position * base ** (-2i / rotary_dim), i < rotary_dim/2.
Two pairings exist: NeoX / half-split (GPT-NeoX, Llama in Hugging Face layout, Qwen)
pairs feature i with i + rotary_dim/2; GPT-J / interleaved (Llama GGUF/Meta layout)
pairs 2i with 2i + 1. Features at and beyond rotary_dim pass through unchanged.
"""
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
    x: [T, heads, head_dim] float (f32/f16/bf16); positions: int32 [T] (token positions;
    a list of Python ints is converted to int32, a numpy array must already be int32);
    rotary_dim: even, 0 < rotary_dim <= head_dim; base: the RoPE theta (> 0, e.g. 10000
    or 1e6); out: optional, x's shape and dtype, may be x itself (in place). Angles in
    radians, computed accurately (no fast-math cos/sin): the CPU in double; Metal reduces
    the angle modulo one turn in extended precision before precise cos/sin, within ~2e-7
    of float64 up to position 2**24. Returns x's shape and dtype.

    Raises ValueError for shapes, an odd or too large rotary_dim, a non-positive base or
    tensors on different devices; TypeError for non-float x, non-int32 positions or
    non-array arguments.
    """


def rope_neox(x, positions, rotary_dim, base, out=None) -> Tensor:
    return _rope("rope_neox", x, positions, rotary_dim, base, out)


def rope_interleaved(x, positions, rotary_dim, base, out=None) -> Tensor:
    return _rope("rope_interleaved", x, positions, rotary_dim, base, out)


rope_neox.__doc__ = "RoPE with NeoX (half-split) pairs (i, i + rotary_dim/2).\n" + _ROTATE_DOC
rope_interleaved.__doc__ = "RoPE with GPT-J (interleaved) pairs (2i, 2i + 1).\n" + _ROTATE_DOC


def rope_cos_sin_cache(positions, rotary_dim, base, out=None) -> Tensor:
    """The cos|sin table of the given positions: float32 [T, rotary_dim], row t holding
    cos(angle_i) for i < rotary_dim/2 then sin(angle_i), angle_i = positions[t] *
    base ** (-2i / rotary_dim) radians (accurate cos/sin, also at positions ~131072).

    positions: int32 [T]; rotary_dim: positive and even; base > 0; out: optional
    float32 [T, rotary_dim]. Raises ValueError / TypeError as rope_neox.
    """
    op = "rope_cos_sin_cache"
    (positions,) = tensors(op, index_dtypes=_POSITIONS, positions=positions)
    return _native.rope_cos_sin_cache(positions, integer(op, "rotary_dim", rotary_dim),
                                      real(op, "base", base), out=out_tensor(op, out))


def rope_from_cache(x, cos_sin_cache, positions, neox=True, out=None) -> Tensor:
    """Applies RoPE from a precomputed cos|sin table (see rope_cos_sin_cache): token t
    uses row positions[t] of cos_sin_cache.

    x: [T, heads, head_dim] float; cos_sin_cache: float32 [P, rotary_dim] (rotary_dim
    even, <= head_dim); positions: int32 [T], row indices into the cache in [0, P);
    neox: True for half-split pairs, False for interleaved; out: optional, may be x.
    Bit-exact across devices (no transcendental functions are evaluated).

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
    Sennrich 2019), then NeoX RoPE (see rope_neox). On the CPU it is exactly the
    composite of ops.rms_norm and ops.rope_neox (the intermediate is stored in the
    dtype); other devices may run one fused kernel gated against that composite.

    q: [T, heads, head_dim] float; k: [T, kv_heads, head_dim], q's dtype; q_weight,
    k_weight: [head_dim], q's dtype; positions: int32 [T]; eps >= 0; rotary_dim even,
    <= head_dim; base > 0. Returns new tensors (q_out, k_out) with q's and k's shapes.

    Raises ValueError for shapes, eps, rotary_dim, base or tensors on different devices;
    TypeError for dtypes or non-array arguments.
    """
    op = "qk_norm_rope"
    q, k, q_weight, k_weight, positions = tensors(op, index_dtypes=_POSITIONS, q=q, k=k,
                                                  q_weight=q_weight, k_weight=k_weight,
                                                  positions=positions)
    return _native.qk_norm_rope(q, k, q_weight, k_weight, positions, real(op, "eps", eps),
                                integer(op, "rotary_dim", rotary_dim), real(op, "base", base))
