"""Attention over a paged KV cache."""
from __future__ import annotations

from .._metalrt import QuantizedTensor, Tensor
from .._metalrt import ops as _native
from ._args import flag, out_tensor, real, tensors


def paged_attention(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                    scale, out=None, *, coarse_projections=False) -> Tensor:
    """Variable-length causal attention over a paged KV cache with grouped-query heads
    (PagedAttention: Kwon et al. 2023, vLLM; GQA: Ainslie et al. 2023).

    query: [T, heads, head_dim] float (f32/f16/bf16), the query tokens of B requests
    packed back to back, request b owning rows query_start_loc[b]:query_start_loc[b+1];
    key_cache, value_cache: [num_blocks, block_size, kv_heads, head_dim], query's dtype;
    block_tables: int32 [B, max_blocks_per_seq] (block ids of each request's context);
    seq_lens: int32 [B], context length including the new queries; query_start_loc:
    int32 [B + 1] (lists of Python ints are converted to int32, numpy arrays must already
    be int32); scale: the softmax scale, usually head_dim ** -0.5.
    Query i of request b sits at position seq_lens[b] - q_len_b + i and attends to
    positions 0..that position; head h reads kv head h // (heads // kv_heads).
    Softmax(scale * q.k) in float32. Returns [T, heads, head_dim] in query's dtype.
    block_tables, seq_lens and query_start_loc are read on the host when called (on
    Metal in place, without a synchronize), so they must be written by the host. On
    Metal, one-query requests run the decode kernel and longer ones the prefill kernel
    (online softmax, FlashAttention-style tiling: Dao et al. 2022); head_dim > 128 runs
    on the CPU reference tier. coarse_projections (bool): q, k and v are projections by
    quantized or bfloat16 weights; the CPU then runs a prefill's q.k and weights.v
    products on its bf16 GEMM (q, k, the softmax weights and v rounded to bfloat16,
    float32 sums, as torch's bf16 SDPA) wherever it runs such weights' GEMMs on it
    (METALRT_CPU_GEMM=auto, the default, on a CPU with AVX-512 BF16; or bf16); False
    (the default), only under METALRT_CPU_GEMM=bf16. Other devices and decode batches
    ignore it.

    Raises ValueError for shape mismatches, heads not a multiple of kv_heads, a non-finite
    scale, inconsistent lengths or block ids out of range, or tensors on different
    devices; TypeError for wrong dtypes or non-array arguments.
    """
    op = "paged_attention"
    args = tensors(op, index_dtypes=dict.fromkeys(("block_tables", "seq_lens", "query_start_loc"),
                                                  "int32"),
                   query=query, key_cache=key_cache, value_cache=value_cache,
                   block_tables=block_tables, seq_lens=seq_lens, query_start_loc=query_start_loc)
    return _native.paged_attention(*args, real(op, "scale", scale), out=out_tensor(op, out),
                                   coarse_projections=flag(op, "coarse_projections", coarse_projections))


def is_coarse_weight(weight) -> bool:
    """Whether the CPU counts a projection weight (a Tensor or QuantizedTensor) as coarse
    for ``paged_attention(coarse_projections=)``: quantized, or bfloat16 (ops.h
    ``IsCoarseWeight``, the rule its prefill GEMM applies). TypeError for anything else."""
    if not isinstance(weight, (Tensor, QuantizedTensor)):
        raise TypeError(f"[is_coarse_weight] weight must be a metalrt.Tensor or QuantizedTensor, "
                        f"got {type(weight).__name__}")
    return _native.is_coarse_weight(weight)
