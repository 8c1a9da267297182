"""Attention over a paged KV cache (math: cpp/include/metalrt/ops.h, "attention")."""
from __future__ import annotations

from .._metalrt import QuantizedTensor, Tensor
from .._metalrt import ops as _native
from ._args import flag, integer, out_tensor, real, tensors


def paged_attention(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                    scale, out=None, *, coarse_projections=False, window=0, sinks=None) -> Tensor:
    """Variable-length causal attention over a paged KV cache with grouped-query heads
    (PagedAttention: Kwon et al. 2023, vLLM; GQA: Ainslie et al. 2023). Math: ops.h
    ``PagedAttention`` (Metal kernels: cpp/gpu/paged_attention.cpp).

    query: [T, heads, head_dim] float (f32/f16/bf16), B requests packed back to back;
    key_cache, value_cache: [num_blocks, block_size, kv_heads, head_dim] of any float dtype,
    or uint8 [num_blocks, block_size, kv_heads, row_bytes] q8_0 / q4_0 blocks read in
    place (``metalrt.cache.kv_types``), each side of its own type;
    block_tables: int32 [B, max_blocks_per_seq]; seq_lens: int32 [B]; query_start_loc:
    int32 [B + 1] (these three must be written by the host: lists of Python ints become
    int32, range-checked; numpy arrays must already be int32); scale: real, usually
    head_dim ** -0.5; coarse_projections: bool (default False), set from
    ``is_coarse_weight`` of the q/k/v weights; window: int (default 0, full causal
    attention), a sliding window of that many positions (the query at position p sees
    p - window + 1 .. p; earlier positions are never read); sinks: optional float32
    [heads], a learned logit per query head in the softmax's denominator (gpt-oss's
    attention sinks); out: optional Tensor of the result's shape and dtype. Arrays and
    lists go to the Tensors' device (else the CPU). Returns [T, heads, head_dim] in
    query's dtype.

    Raises ValueError for shape mismatches, heads not a multiple of kv_heads, a
    non-finite scale, a negative window, sinks not of shape [heads], inconsistent
    lengths or block ids out of range, or tensors on different devices; TypeError for
    wrong dtypes (sinks not float32) or non-array arguments.
    """
    op = "paged_attention"
    args = tensors(op, optional=("sinks",),
                   index_dtypes=dict.fromkeys(("block_tables", "seq_lens", "query_start_loc"), "int32"),
                   query=query, key_cache=key_cache, value_cache=value_cache,
                   block_tables=block_tables, seq_lens=seq_lens, query_start_loc=query_start_loc,
                   sinks=sinks)
    return _native.paged_attention(*args[:6], real(op, "scale", scale), out=out_tensor(op, out),
                                   coarse_projections=flag(op, "coarse_projections", coarse_projections),
                                   window=integer(op, "window", window), sinks=args[6])


def is_coarse_weight(weight) -> bool:
    """Whether the CPU counts a projection weight (a Tensor or QuantizedTensor) as
    coarse for ``paged_attention(coarse_projections=)``: quantized, or bfloat16 (ops.h
    ``IsCoarseWeight``, the rule its prefill GEMM applies). TypeError for anything else.
    """
    if not isinstance(weight, (Tensor, QuantizedTensor)):
        raise TypeError(f"[is_coarse_weight] weight must be a metalrt.Tensor or QuantizedTensor, "
                        f"got {type(weight).__name__}")
    return _native.is_coarse_weight(weight)
