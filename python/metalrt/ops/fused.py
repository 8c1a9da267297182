"""Fused decode-layer ops: a projection GEMV with its following elementwise step, and
the QKV split with RoPE and the KV-cache write, each one kernel on Metal (fewer
dispatches per decoder layer). Each is defined as the composition
of the ops it fuses, which is its oracle and its CPU implementation."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import flag, integer, out_tensor, real, tensors
from .quantized import _weight


def quantized_matmul_bt_add(x, w, residual, out=None) -> Tensor:
    """residual + x @ dequantize(w)^T: x [M, K] float32/float16/bfloat16, w a
    QuantizedTensor [N, K], residual [M, N] in x's dtype -> [M, N] in x's dtype. The
    product is rounded to x's dtype before the add, exactly as
    ``add(quantized_matmul_bt(x, w), residual)`` (so the two agree byte for byte); out
    may be residual itself (the decoder layer's in-place residual stream). On Metal one
    GEMV for M <= 8 (metal/quantized.metal). TypeError for a non-float x or a w that is
    not a QuantizedTensor; ValueError for shapes, dtypes or devices that disagree or an
    out overlapping x or w."""
    op = "quantized_matmul_bt_add"
    w = _weight(op, w)
    x, residual = tensors(op, x=x, residual=residual)
    return _native.quantized_matmul_bt_add(x, w, residual, out=out_tensor(op, out))


def quantized_matmul_bt_swiglu(x, w, out=None) -> Tensor:
    """SwiGLU (Shazeer 2020) of a merged gate|up projection: x [M, K] float, w a
    QuantizedTensor [2 I, K] holding the gate rows then the up rows -> [M, I] in x's
    dtype, ``silu_and_mul(quantized_matmul_bt(x, w))`` byte for byte (silu(g) = g / (1 +
    exp(-g)), in float32 from the rounded projections). On Metal one GEMV for M <= 8
    whose SIMD-groups compute gate row i and up row I + i together. TypeError for a
    non-float x or a w that is not a QuantizedTensor; ValueError for an odd row count, a
    K that does not match, or a wrong out."""
    op = "quantized_matmul_bt_swiglu"
    w = _weight(op, w)
    (x,) = tensors(op, x=x)
    return _native.quantized_matmul_bt_swiglu(x, w, out=out_tensor(op, out))


def quantized_matmul_bt_concat(x, weights, out=None) -> Tensor:
    """x @ [w_0 | w_1 | ...]^T: x [M, K] float32/float16/bfloat16, weights a list of 2
    or 3 QuantizedTensors [N_j, K] of one format (GGUF type, or MLX affine bits, group
    size and scales dtype) -> [M, N_0 + N_1 + ...] in x's dtype, column slice j exactly
    ``quantized_matmul_bt(x, weights[j])`` (a GGUF's separate Q, K and V projected as
    one merged QKV without copying the weights). One GEMV where ``concat_is_one_gemv(x)``
    (on Metal each SIMD-group's rows taken from the weight that owns them); above it the
    composition on the host. TypeError for a non-float x or a weight
    that is not a QuantizedTensor; ValueError for a weight count outside 2..3, formats
    or K that differ, or a wrong out."""
    op = "quantized_matmul_bt_concat"
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f"[{op}] weights must be a list of metalrt.QuantizedTensor, got "
                        f"{type(weights).__name__}")
    weights = [_weight(op, w) for w in weights]
    (x,) = tensors(op, x=x)
    return _native.quantized_matmul_bt_concat(x, weights, out=out_tensor(op, out))


def concat_is_one_gemv(x) -> bool:
    """Whether ``quantized_matmul_bt_concat`` of x (a Tensor [M, K]) runs as one fused
    GEMV on x's device: M at most the rows that device's quantized GEMV serves, by its
    own threshold (ops.h ``QuantizedConcatIsOneGemv``). Above them the op joins separate
    products on the host, which a caller holding the separate projections does better
    without. TypeError for an x that is not a Tensor."""
    (x,) = tensors("concat_is_one_gemv", x=x)
    return _native.quantized_concat_is_one_gemv(x)


def qkv_rope_cache(qkv, positions, key_cache, value_cache, slot_mapping, heads, rotary_dim,
                   base, neox=True, out=None) -> Tensor:
    """The attention block's QKV split, rotary embedding (Su et al. 2021) of q and k,
    and paged KV-cache write (vLLM's reshape_and_cache) in one op.

    qkv [T, (heads + 2 kv_heads) * head_dim] float (q | k | v of a merged projection);
    positions int32 [T]; key_cache, value_cache [num_blocks, block_size, kv_heads,
    head_dim] in qkv's dtype (written in place); slot_mapping int64 [T] (slot < 0 is
    padding, skipped); rotary_dim even, <= head_dim; base the RoPE theta; neox: half-split
    pairs (else interleaved). Returns q [T, heads, head_dim] rotated; k is rotated into
    the cache. Byte for byte ``qkv_split``, ``rope_neox`` / ``rope_interleaved`` of q and
    k and ``reshape_and_cache``; on Metal one dispatch. ValueError for shapes, slots
    beyond the cache or devices that disagree; TypeError for dtypes."""
    op = "qkv_rope_cache"
    qkv, positions, key_cache, value_cache, slot_mapping = tensors(
        op, index_dtypes={"positions": "int32", "slot_mapping": "int64"}, qkv=qkv,
        positions=positions, key_cache=key_cache, value_cache=value_cache,
        slot_mapping=slot_mapping)
    return _native.qkv_rope_cache(qkv, positions, key_cache, value_cache, slot_mapping,
                                  integer(op, "heads", heads), integer(op, "rotary_dim", rotary_dim),
                                  real(op, "base", base), flag(op, "neox", neox),
                                  out=out_tensor(op, out))
