"""Fused decode-layer ops: a projection GEMV with its following elementwise step, and
the QKV split with RoPE and the KV-cache write, each one kernel on Metal (fewer
dispatches per decoder layer). Each is defined as the composition of the ops it fuses,
which is its oracle and its CPU implementation (math: cpp/include/metalrt/ops.h, "fused
decode-layer GEMVs" and ``QkvRopeCache``; Metal: cpp/gpu/quantized.cpp)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import flag, integer, out_tensor, real, tensors
from .quantized import _weight


def quantized_matmul_bt_add(x, w, residual, out=None) -> Tensor:
    """residual + x @ dequantize(w)^T, exactly ``add(quantized_matmul_bt(x, w),
    residual)``. Math: ops.h ``QuantizedMatmulBTAdd``.

    x: [M, K] float (f32/f16/bf16); w: a QuantizedTensor [N, K]; residual: [M, N] in x's
    dtype; out: optional Tensor [M, N] in x's dtype, may be residual itself (in place).
    Arrays and lists go to the Tensors' device (else the CPU). Returns [M, N] in x's
    dtype.

    Raises TypeError for a non-float x or a w that is not a QuantizedTensor; ValueError
    for shapes, dtypes or devices that disagree or an out overlapping x or w.
    """
    op = "quantized_matmul_bt_add"
    w = _weight(op, w)
    x, residual = tensors(op, x=x, residual=residual)
    return _native.quantized_matmul_bt_add(x, w, residual, out=out_tensor(op, out))


def quantized_matmul_bt_swiglu(x, w, out=None) -> Tensor:
    """SwiGLU (Shazeer 2020) of a merged gate|up projection, exactly
    ``silu_and_mul(quantized_matmul_bt(x, w))``. Math: ops.h
    ``QuantizedMatmulBTSwiglu``.

    x: [M, K] float (f32/f16/bf16; an array or list is copied to the CPU); w: a
    QuantizedTensor [2 I, K], the gate rows then the up rows; out: optional Tensor
    [M, I] in x's dtype. Returns [M, I] in x's dtype.

    Raises TypeError for a non-float x or a w that is not a QuantizedTensor; ValueError
    for an odd row count, a K that does not match, or a wrong out.
    """
    op = "quantized_matmul_bt_swiglu"
    w = _weight(op, w)
    (x,) = tensors(op, x=x)
    return _native.quantized_matmul_bt_swiglu(x, w, out=out_tensor(op, out))


def quantized_matmul_bt_concat(x, weights, out=None) -> Tensor:
    """x @ [w_0 | w_1 | ...]^T, column slice j exactly ``quantized_matmul_bt(x,
    weights[j])`` (a GGUF's separate Q, K and V as one merged QKV). Math: ops.h
    ``QuantizedMatmulBTConcat``; one GEMV where ``concat_is_one_gemv(x)``.

    x: [M, K] float (f32/f16/bf16; an array or list is copied to the CPU); weights: a
    list or tuple of 2 or 3 QuantizedTensors [N_j, K] of one format; out: optional
    Tensor [M, N_0 + N_1 + ...] in x's dtype. Returns [M, N_0 + N_1 + ...] in x's dtype.

    Raises TypeError for a non-float x, a weights that is not a list or tuple, or a
    weight that is not a QuantizedTensor; ValueError for a weight count outside 2..3,
    formats or K that differ, or a wrong out.
    """
    op = "quantized_matmul_bt_concat"
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f"[{op}] weights must be a list of metalrt.QuantizedTensor, got "
                        f"{type(weights).__name__}")
    weights = [_weight(op, w) for w in weights]
    (x,) = tensors(op, x=x)
    return _native.quantized_matmul_bt_concat(x, weights, out=out_tensor(op, out))


def concat_is_one_gemv(x) -> bool:
    """Whether ``quantized_matmul_bt_concat`` of x runs as one fused GEMV on x's device,
    by that device's own threshold. Math: ops.h ``QuantizedConcatIsOneGemv``.

    x: [M, K] (a Tensor; an array or list is copied to the CPU). Returns a bool.

    Raises TypeError for a non-array x.
    """
    (x,) = tensors("concat_is_one_gemv", x=x)
    return _native.quantized_concat_is_one_gemv(x)


def qkv_rope_cache(qkv, positions, key_cache, value_cache, slot_mapping, heads, rotary_dim,
                   base, neox=True, out=None) -> Tensor:
    """The attention block's QKV split, rotary embedding (Su et al. 2021) of q and k,
    and paged KV-cache write (vLLM's reshape_and_cache) in one op, exactly
    ``qkv_split``, ``rope_neox`` / ``rope_interleaved`` and ``reshape_and_cache``. Math:
    ops.h ``QkvRopeCache``.

    qkv: [T, (heads + 2 kv_heads) * head_dim] float (q | k | v); positions: int32 [T] (a
    list of Python ints becomes int32, an array must be int32); key_cache, value_cache:
    caches of any KV type (``reshape_and_cache``'s: a float dtype, or q8_0 / q4_0 uint8
    rows), written in place;
    slot_mapping: int64 [T], slot < 0 skipped (a list becomes int64, an array must be
    int64); heads: int; rotary_dim: int, even, <= head_dim; base: real, the RoPE theta;
    neox: bool, True (default) for half-split pairs, False for interleaved; out:
    optional Tensor [T, heads, head_dim]. Arrays and lists go to the Tensors' device
    (else the CPU). Returns q [T, heads, head_dim] rotated, in qkv's dtype.

    Raises ValueError for shapes, slots beyond the cache or devices that disagree;
    TypeError for dtypes.
    """
    op = "qkv_rope_cache"
    qkv, positions, key_cache, value_cache, slot_mapping = tensors(
        op, index_dtypes={"positions": "int32", "slot_mapping": "int64"}, qkv=qkv,
        positions=positions, key_cache=key_cache, value_cache=value_cache,
        slot_mapping=slot_mapping)
    return _native.qkv_rope_cache(qkv, positions, key_cache, value_cache, slot_mapping,
                                  integer(op, "heads", heads), integer(op, "rotary_dim", rotary_dim),
                                  real(op, "base", base), flag(op, "neox", neox),
                                  out=out_tensor(op, out))
