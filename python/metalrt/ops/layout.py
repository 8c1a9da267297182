"""Gathers and layout ops: token embedding lookup, QKV split, paged KV-cache write.
All are exact copies of elements (bit-exact on every device)."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import integer, out_tensor, tensors


def embedding(weight, ids, out=None) -> Tensor:
    """Row gather: out[t] = weight[ids[t]].

    weight: [V, D], any dtype; ids: int32 [T] (a list of Python ints is converted to
    int32; a numpy array must already be int32); out: optional [T, D] with weight's
    dtype. Returns [T, D] in weight's dtype on the inputs' device.

    Raises ValueError for ranks, shapes, ids outside [0, V) (or, as Python ints, outside
    int32) or tensors on different devices; TypeError when ids is not int32 or an
    argument is not array-like.
    """
    weight, ids = tensors("embedding", index_dtypes={"ids": "int32"}, weight=weight, ids=ids)
    return _native.embedding(weight, ids, out=out_tensor("embedding", out))


def qkv_split(qkv, q_width, k_width, v_width) -> tuple:
    """Splits a fused QKV projection output [T, q_width + k_width + v_width] (any
    dtype) into new contiguous tensors q [T, q_width], k [T, k_width], v [T, v_width]
    (widths in elements, e.g. heads * head_dim; they may differ, as with GQA).

    Raises ValueError when the widths are not positive or do not sum to qkv's last
    dimension, or qkv is not 2-D; TypeError for non-int widths or a non-array qkv.
    """
    op = "qkv_split"
    (qkv,) = tensors(op, qkv=qkv)
    return _native.qkv_split(qkv, integer(op, "q_width", q_width), integer(op, "k_width", k_width),
                             integer(op, "v_width", v_width))


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping) -> None:
    """Writes the K/V rows of new tokens into a paged KV cache, in place (vLLM's
    `reshape_and_cache`, Kwon et al. 2023, "Efficient Memory Management for Large
    Language Model Serving with PagedAttention").

    key, value: [T, kv_heads, head_dim]; key_cache, value_cache: [num_blocks,
    block_size, kv_heads, head_dim], same dtype as key; slot_mapping: int64 [T] (vLLM's
    dtype; a list of Python ints is converted to int64, a numpy array must already be
    int64) — token t goes to block slot // block_size, row slot % block_size. A slot < 0
    is padding and is skipped. Returns None.

    Raises ValueError for shape mismatches, slots beyond the cache or tensors on
    different devices; TypeError for dtype mismatches (slot_mapping must be int64).
    """
    key, value, key_cache, value_cache, slot_mapping = tensors(
        "reshape_and_cache", index_dtypes={"slot_mapping": "int64"}, key=key, value=value,
        key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping)
    _native.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
