"""Gathers and layout ops: token embedding lookup, QKV split, paged KV-cache write
(math: cpp/include/metalrt/ops.h, "gathers and layout"; bit-exact on every device)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import integer, out_tensor, tensors


def embedding(weight, ids, out=None) -> Tensor:
    """Row gather: out[t] = weight[ids[t]]. Math: ops.h ``Embedding``.

    weight: [V, D], any dtype; ids: int32 [T] (a list of Python ints becomes int32,
    range-checked; a numpy array must already be int32); out: optional Tensor [T, D] in
    weight's dtype. Arrays and lists go to the Tensors' device (else the CPU). Returns
    [T, D] in weight's dtype.

    Raises ValueError for ranks, shapes, ids outside [0, V) (or, as Python ints, outside
    int32) or tensors on different devices; TypeError when ids is not int32 or an
    argument is not array-like.
    """
    weight, ids = tensors("embedding", index_dtypes={"ids": "int32"}, weight=weight, ids=ids)
    return _native.embedding(weight, ids, out=out_tensor("embedding", out))


def qkv_split(qkv, q_width, k_width, v_width) -> tuple:
    """Splits a fused QKV projection output into q, k, v. Math: ops.h ``QkvSplit``.

    qkv: [T, q_width + k_width + v_width], any dtype (an array or list is copied to the
    CPU); q_width, k_width, v_width: ints, in elements (e.g. heads * head_dim; they may
    differ, as with GQA). Returns new contiguous Tensors (q [T, q_width], k
    [T, k_width], v [T, v_width]) in qkv's dtype.

    Raises ValueError when the widths are not positive or do not sum to qkv's last
    dimension, or qkv is not 2-D; TypeError for non-int widths or a non-array qkv.
    """
    op = "qkv_split"
    (qkv,) = tensors(op, qkv=qkv)
    return _native.qkv_split(qkv, integer(op, "q_width", q_width), integer(op, "k_width", k_width),
                             integer(op, "v_width", v_width))


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping) -> None:
    """Writes the K/V rows of new tokens into a paged KV cache, in place (vLLM's
    `reshape_and_cache`, Kwon et al. 2023, PagedAttention). Math: ops.h
    ``ReshapeAndCache``.

    key, value: [T, kv_heads, head_dim]; key_cache, value_cache:
    [num_blocks, block_size, kv_heads, head_dim] of any float dtype (rows rounded to it;
    key's dtype: copied bit-exactly, any dtype), or uint8 [num_blocks, block_size,
    kv_heads, row_bytes] q8_0 / q4_0 blocks (quantized as GGML does,
    ``metalrt.cache.kv_types``), each side of its own type; slot_mapping: int64 [T],
    slot < 0 skipped (vLLM's dtype: a list of Python ints becomes int64, range-checked;
    a numpy array must already be int64). Arrays and lists go to the Tensors' device
    (else the CPU). Returns None.

    Raises ValueError for shape mismatches, slots beyond the cache or tensors on
    different devices; TypeError for dtype mismatches (slot_mapping must be int64).
    """
    key, value, key_cache, value_cache, slot_mapping = tensors(
        "reshape_and_cache", index_dtypes={"slot_mapping": "int64"}, key=key, value=value,
        key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping)
    _native.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
