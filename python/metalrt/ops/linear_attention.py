"""Gated-DeltaNet linear attention (Yang, Kautz & Hatamizadeh 2024, "Gated Delta
Networks"), the recurrent layers of Qwen3-Next and Qwen3.5, computed as transformers
5.24 does (math and the varlen batching of query_start / state_slots:
cpp/include/metalrt/linear_attention_ops.h; docs/linear-attention.md).

query_start int32 [R + 1] and state_slots int32 [R] are read on the host when the op
is called, so they must be written by the host; lists of Python ints become int32
(range-checked), numpy arrays must already be int32."""
from __future__ import annotations

from .._metalrt import Tensor
from .._metalrt import ops as _native
from ._args import integer, out_tensor, real, tensors

_INDEX = {"query_start": "int32", "state_slots": "int32"}
_MODES = {"recurrent": 0, "chunked": 1, "auto": 2}


def causal_conv1d(x, weight, conv_state, query_start, state_slots, *, activation="silu",
                  out=None) -> Tensor:
    """Causal depthwise conv1d over each request's tokens with a carried state (the
    conv1d of a GDN layer over its [q | k | v] channels). Math: linear_attention_ops.h
    ``CausalConv1d``.

    x: [T, C] float (f32/f16/bf16); weight: [C, K] in x's dtype (nn.Conv1d's [C, 1, K]
    squeezed); conv_state: [S, C, K-1] in x's dtype, updated in place; query_start:
    int32 [R + 1]; state_slots: int32 [R]; activation: "silu" (default) or None,
    keyword-only; out: optional Tensor [T, C] in x's dtype, not overlapping the inputs.
    Arrays and lists go to the Tensors' device (else the CPU). Returns y [T, C] in x's
    dtype.

    Raises ValueError for shapes (a weight or state whose channels differ from x's),
    query_start not running from 0 to T, a slot outside the pool or used twice, tensors
    on different devices, an unknown activation; TypeError for dtypes or non-array
    arguments.
    """
    op = "causal_conv1d"
    if activation not in ("silu", None):
        raise ValueError(f"[{op}] activation must be 'silu' or None, got {activation!r}")
    args = tensors(op, index_dtypes=_INDEX, x=x, weight=weight, conv_state=conv_state,
                   query_start=query_start, state_slots=state_slots)
    return _native.causal_conv1d(*args, activation == "silu", out=out_tensor(op, out))


def gdn_gating(a, b, A_log, dt_bias) -> tuple[Tensor, Tensor]:
    """The per-token gates of a GDN layer, in float32 whatever the input dtypes: g =
    -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b). Math: linear_attention_ops.h
    ``GdnGating``.

    a, b: [T, Hv] float, one dtype; A_log, dt_bias: [Hv], one dtype, float32 or a's.
    Arrays and lists go to the Tensors' device (else the CPU). Returns (g, beta), both
    float32 [T, Hv].

    Raises ValueError for shapes; TypeError for dtypes or non-array arguments.
    """
    op = "gdn_gating"
    return _native.gdn_gating(*tensors(op, a=a, b=b, A_log=A_log, dt_bias=dt_bias))


def gated_delta_rule(mixed_qkv, g, beta, state, query_start, state_slots, *, num_k_heads,
                     head_k_dim, num_v_heads, head_v_dim, scale=None, mode="auto",
                     v_heads_tiled=False, out=None) -> Tensor:
    """The gated delta rule over a batch of requests, each continuing from its pooled
    state: per token S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T (scale q), q and
    k L2-normalised. Math: linear_attention_ops.h ``GatedDeltaRule``.

    mixed_qkv: [T, 2*Hk*Dk + Hv*Dv] float, the conv output (q, then k, then v, head
    major); g, beta: float32 [T, Hv] (gdn_gating); state: float32 [S, Hv, Dk, Dv],
    updated in place; query_start: int32 [R + 1]; state_slots: int32 [R]. Keyword-only:
    num_k_heads (Hk), head_k_dim (Dk), num_v_heads (Hv, a multiple of Hk), head_v_dim
    (Dv): ints; scale: real, default Dk ** -0.5; mode: "recurrent" (one step per token),
    "chunked" (chunks of 64 tokens) or "auto" (the default: recurrent for one-token
    requests, chunked otherwise), equal to f32 rounding; v_heads_tiled: bool, value
    head h uses key head h % Hk (llama.cpp's qwen35 GGUF order) instead of h // (Hv /
    Hk) (transformers'); out: optional Tensor
    [T, Hv, Dv] in mixed_qkv's dtype. Arrays and lists go to the Tensors' device (else
    the CPU). Returns o [T, Hv, Dv] in mixed_qkv's dtype.

    Raises ValueError for head counts that do not divide, a head_k_dim < 1, a channel
    count of mixed_qkv that does not match the heads, a state of the wrong shape,
    query_start not running from 0 to T, a slot outside the pool or used twice, an
    unknown mode, tensors on different devices; TypeError for dtypes (the state, g and
    beta must be float32), non-int head counts or non-array arguments.
    """
    op = "gated_delta_rule"
    if mode not in _MODES:
        raise ValueError(f"[{op}] mode must be 'recurrent', 'chunked' or 'auto', got {mode!r}")
    dims = [integer(op, name, value) for name, value in (
        ("num_k_heads", num_k_heads), ("head_k_dim", head_k_dim), ("num_v_heads", num_v_heads),
        ("head_v_dim", head_v_dim))]
    if dims[1] < 1:
        raise ValueError(f"[{op}] head_k_dim must be >= 1, got {dims[1]}")
    scale = dims[1] ** -0.5 if scale is None else real(op, "scale", scale)
    args = tensors(op, index_dtypes=_INDEX, mixed_qkv=mixed_qkv, g=g, beta=beta, state=state,
                   query_start=query_start, state_slots=state_slots)
    if not isinstance(v_heads_tiled, bool):
        raise TypeError(f"[{op}] v_heads_tiled must be a bool, got {type(v_heads_tiled).__name__}")
    return _native.gated_delta_rule(*args, *dims, scale, _MODES[mode], v_heads_tiled,
                                    out=out_tensor(op, out))
