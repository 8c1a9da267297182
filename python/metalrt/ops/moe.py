"""Mixture-of-experts (MoE) ops: the router (softmax + top-k), the expert matmul that
reads only the selected experts' weights (float or quantized), and the weighted combine
with the optional gated shared expert. Math as transformers 5.24's
Qwen3MoeSparseMoeBlock / Qwen3NextSparseMoeBlock (softmax in float32, topk, optional
renormalisation); the model casts the routing weights to its hidden dtype."""
from __future__ import annotations

from .._metalrt import QuantizedTensor, Tensor
from .._metalrt import ops as _native
from ._args import flag, integer, out_pair, out_tensor, tensors


def moe_router(logits, top_k, *, renormalize, out=None) -> tuple:
    """Routes each token to its top_k experts: (weights, ids).

    logits: float [T, E] (the router `mlp.gate` output). Softmax over E in float32
    (max-subtracted); a NaN logit counts as -inf (garbage or padded rows still get valid
    ids, unlike vllm-project/vllm#39391, sgl-project/sglang#30079); +inf logits share
    the mass equally. ids: int32 [T, top_k], the experts of the top_k largest logits in
    descending order, ties to the lower index — distinct and in [0, E); a row without a
    logit above -inf gives ids 0 .. top_k-1 with weight 0. weights: float32 [T, top_k],
    the softmax probabilities of those experts, divided by their sum when renormalize
    (HF `norm_topk_prob`; Qwen3.5-MoE always renormalises). out: optional (weights, ids)
    Tensors to write.
    Raises ValueError when top_k is not in [1, E], logits is not 2-D or an out has the
    wrong shape; TypeError for a non-float logits or a non-bool renormalize.
    """
    op = "moe_router"
    (logits,) = tensors(op, logits=logits)
    out_weights, out_ids = out_pair(op, out, ("weights", "ids"))
    return _native.moe_router(logits, integer(op, "top_k", top_k), flag(op, "renormalize", renormalize),
                              out_weights=out_weights, out_ids=out_ids)


def moe_matmul_bt(x, w, expert_ids, *, num_experts, out=None) -> Tensor:
    """The experts' linear layers: y[t, j] = x_tj @ W_e^T with e = expert_ids[t, j].

    w: [E * N, K], expert e's weight rows e*N .. e*N + N - 1 (the layout of a GGUF
    `ffn_*_exps` tensor, so one such tensor is one QuantizedTensor without a copy): a
    float Tensor in x's dtype, or a QuantizedTensor of any format. x: float [T, K] (the
    same row for every slot) or [T, k, K] (one row per slot); expert_ids: int32 [T, k];
    num_experts: E. Returns [T, k, N] in x's dtype, accumulated in float32. Only the
    selected experts' rows are read; on Metal a batch (T > 1) groups the (token, slot)
    pairs by expert.
    Raises ValueError when num_experts does not divide w's rows, shapes do not match
    (naming x or expert_ids), or — on the CPU — an id is outside [0, E). On Metal the
    ids stay on the device (the host cannot read them without a wait): the kernels never
    read out of bounds and write a NaN row for such an id, so it is never silent.
    TypeError for expert_ids not int32, or dtypes that do not match.
    """
    op = "moe_matmul_bt"
    ids = {"expert_ids": "int32"}
    if isinstance(w, QuantizedTensor):
        x, expert_ids = tensors(op, index_dtypes=ids, x=x, expert_ids=expert_ids)
    else:
        x, w, expert_ids = tensors(op, index_dtypes=ids, x=x, w=w, expert_ids=expert_ids)
    return _native.moe_matmul_bt(x, w, expert_ids, integer(op, "num_experts", num_experts),
                                 out=out_tensor(op, out))


def moe_combine(y, weights, *, shared=None, shared_gate=None, out=None) -> Tensor:
    """out[t] = sum_j weights[t, j] * y[t, j] (+ sigmoid(shared_gate[t, 0]) * shared[t]),
    accumulated in float32 in slot order, rounded once to y's dtype. Without
    shared_gate, shared is added as is.

    y: float [T, k, N] (moe_matmul_bt's output after the down projection); weights:
    float32 [T, k] (moe_router's); shared: optional [T, N], y's dtype (the shared
    expert's output); shared_gate: optional [T, 1], y's dtype (shared_expert_gate's
    output, before the sigmoid). Returns [T, N].
    Raises ValueError for shapes or shared_gate without shared; TypeError for dtypes.
    """
    op = "moe_combine"
    y, weights, shared, shared_gate = tensors(op, optional=("shared", "shared_gate"), y=y, weights=weights,
                                              shared=shared, shared_gate=shared_gate)
    return _native.moe_combine(y, weights, shared, shared_gate, out=out_tensor(op, out))
