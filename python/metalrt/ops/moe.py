"""Mixture-of-experts (MoE) ops: the router (softmax + top-k), the expert matmul that
reads only the selected experts' weights (float or quantized), the selected experts'
biases (gpt-oss; expert_ops.h), and the weighted combine with the optional gated
shared expert, as transformers 5.24's Qwen3MoeSparseMoeBlock /
Qwen3NextSparseMoeBlock compute them (math: cpp/include/metalrt/moe_ops.h, "MoE";
Metal: cpp/gpu/moe.cpp)."""
from __future__ import annotations

from .._metalrt import QuantizedTensor, Tensor
from .._metalrt import ops as _native
from ._args import flag, integer, out_pair, out_tensor, tensors


def moe_router(logits, top_k, *, renormalize, out=None) -> tuple:
    """Routes each token to its top_k experts: softmax over the experts in float32, then
    top-k (NaN logits count as -inf). Math: moe_ops.h ``MoeRouter``.

    logits: float [T, E] (the router `mlp.gate` output; an array or list is copied to
    the CPU); top_k: int in [1, E]; renormalize: bool, keyword-only (HF
    `norm_topk_prob`); out: optional (weights, ids) tuple of Tensors (either may be
    None) to write. Returns (weights float32 [T, top_k], ids int32 [T, top_k]), ids in
    descending logit order.

    Raises ValueError when top_k is not in [1, E], logits is not 2-D or an out has the
    wrong shape; TypeError for a non-float logits, a non-int top_k or a non-bool
    renormalize.
    """
    op = "moe_router"
    (logits,) = tensors(op, logits=logits)
    out_weights, out_ids = out_pair(op, out, ("weights", "ids"))
    return _native.moe_router(logits, integer(op, "top_k", top_k), flag(op, "renormalize", renormalize),
                              out_weights=out_weights, out_ids=out_ids)


def moe_matmul_bt(x, w, expert_ids, *, num_experts, up=None, out=None) -> Tensor:
    """The experts' linear layers: y[t, j] = x_tj @ W_e^T with e = expert_ids[t, j],
    reading only the selected experts' rows. Math: moe_ops.h ``MoeMatmulBT``.
    With ``up`` (SwiGLU experts' gate stack w and up stack, each read in place):
    y[t, j] = [x_tj @ G_e^T | x_tj @ U_e^T], [T, k, 2N], silu_and_mul's input.

    x: float [T, K] (the same row for every slot) or [T, k, K] (one row per slot); w:
    [E * N, K], expert e's rows e*N .. e*N + N - 1 (a GGUF `ffn_*_exps` tensor): a float
    Tensor or array in x's dtype, or a QuantizedTensor of any format; expert_ids: int32
    [T, k] (a list of Python ints becomes int32; a numpy array must be int32);
    num_experts: int E, keyword-only; up: optional second stack of w's kind, format,
    dtype and shape, keyword-only; out: optional Tensor [T, k, N] ([T, k, 2N] with up)
    in x's dtype. Arrays and lists go to the Tensors' device (else the CPU). Returns
    [T, k, N] ([T, k, 2N] with up) in x's dtype.

    Raises ValueError when num_experts does not divide w's rows, shapes do not match
    (naming x or expert_ids), up does not match w, or — on the CPU — an id is outside
    [0, E) (on Metal such an id gives a NaN row, never silent); TypeError for
    expert_ids not int32, dtypes that do not match, or up of another kind than w.
    """
    op = "moe_matmul_bt"
    ids = {"expert_ids": "int32"}
    experts = integer(op, "num_experts", num_experts)
    if isinstance(w, QuantizedTensor):
        if up is not None and not isinstance(up, QuantizedTensor):
            raise TypeError(f"[{op}] up must be a QuantizedTensor like w, got {type(up).__name__}")
        x, expert_ids = tensors(op, index_dtypes=ids, x=x, expert_ids=expert_ids)
    elif up is not None:
        x, w, up, expert_ids = tensors(op, index_dtypes=ids, x=x, w=w, up=up, expert_ids=expert_ids)
    else:
        x, w, expert_ids = tensors(op, index_dtypes=ids, x=x, w=w, expert_ids=expert_ids)
    if up is None:
        return _native.moe_matmul_bt(x, w, expert_ids, experts, out=out_tensor(op, out))
    return _native.moe_matmul_bt(x, w, up, expert_ids, experts, out=out_tensor(op, out))


def moe_combine(y, weights, *, shared=None, shared_gate=None, out=None) -> Tensor:
    """out[t] = sum_j weights[t, j] * y[t, j] (+ sigmoid(shared_gate[t, 0]) * shared[t];
    without shared_gate, + shared[t]). Math: moe_ops.h ``MoeCombine``.

    y: float [T, k, N] (moe_matmul_bt's output after the down projection); weights:
    float32 [T, k] (moe_router's); shared: optional [T, N], y's dtype (the shared
    expert's output); shared_gate: optional [T, 1], y's dtype (shared_expert_gate's
    output, before the sigmoid); both keyword-only, None for absent; out: optional
    Tensor [T, N] in y's dtype. Arrays and lists go to the Tensors' device (else the
    CPU). Returns [T, N] in y's dtype.

    Raises ValueError for shapes or shared_gate without shared; TypeError for dtypes.
    """
    op = "moe_combine"
    y, weights, shared, shared_gate = tensors(op, optional=("shared", "shared_gate"), y=y, weights=weights,
                                              shared=shared, shared_gate=shared_gate)
    return _native.moe_combine(y, weights, shared, shared_gate, out=out_tensor(op, out))


def moe_bias_add(y, bias, expert_ids, out=None) -> Tensor:
    """out[t, j] = y[t, j] + bias[expert_ids[t, j]]: the bias of the expert each (token,
    slot) pair ran (gpt-oss's gate_up_proj_bias / down_proj_bias, transformers 5.25
    ``GptOssExperts``). Math: expert_ops.h ``MoeBiasAdd``.

    y: float [T, k, N] (moe_matmul_bt's output); bias: [E, N] in y's dtype; expert_ids:
    int32 [T, k] (moe_router's; a list of Python ints becomes int32); out: optional
    Tensor [T, k, N] in y's dtype, may be y itself (in place). Arrays and lists go to the
    Tensors' device (else the CPU). Returns [T, k, N] in y's dtype.

    Raises ValueError for shapes (naming y, bias or expert_ids) or, on the CPU, an id
    outside [0, E) (on Metal such an id gives a NaN row); TypeError for dtypes.
    """
    op = "moe_bias_add"
    y, bias, expert_ids = tensors(op, index_dtypes={"expert_ids": "int32"}, y=y, bias=bias,
                                  expert_ids=expert_ids)
    return _native.moe_bias_add(y, bias, expert_ids, out=out_tensor(op, out))
