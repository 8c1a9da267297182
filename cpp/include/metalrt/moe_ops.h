// Entry points of the mixture-of-experts (MoE) and gate ops of the hybrid Qwen3-Next /
// Qwen3.5 / Qwen3-MoE families (math: transformers 5.24, Qwen3NextRMSNormGated,
// Qwen3NextAttention's output gate, Qwen3MoeSparseMoeBlock / Qwen3NextSparseMoeBlock:
// softmax in f32, topk, optional renormalisation; the model casts the routing weights
// to its hidden dtype).
// Conventions as in ops.h: std::invalid_argument "[op] ..." for shapes and values,
// metalrt::TypeError for dtypes; "float" is f32, f16 or bf16, computed in f32.
#pragma once
#include <optional>
#include <tuple>

#include "metalrt/quantized.h"
#include "metalrt/tensor.h"

namespace metalrt::ops {

// ---- gates ------------------------------------------------------------------------
struct GatedRmsNormParams { float eps; };
// Gated RMSNorm (HF RMSNormGated, the GDN output norm): x, z [..., D] float, one dtype;
// weight [D] in x's dtype (plain w, not 1 + w). Per row: n = x * rsqrt(mean(x^2) + eps)
// rounded to x's dtype, p = weight * n rounded to x's dtype, y = p * silu(z) rounded
// to x's dtype (silu(z) = z / (1 + exp(-z)) in f32).
Tensor GatedRmsNorm(const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                    const std::optional<Tensor>& out = std::nullopt);
struct GatedQuerySplitParams { int64_t num_heads, head_dim; };
// q_gate [T, H * 2 * D] (per head: D query values, then D gate values) ->
// (q [T, H, D], gate [T, H * D]), bit-exact copies into new contiguous tensors or into
// out_q / out_gate when given.
std::tuple<Tensor, Tensor> GatedQuerySplit(const Tensor& q_gate, int64_t num_heads, int64_t head_dim,
                                           const std::optional<Tensor>& out_q = std::nullopt,
                                           const std::optional<Tensor>& out_gate = std::nullopt);
// x * sigmoid(gate) elementwise, x and gate of one shape and float dtype, in f32 with
// sigmoid(g) = 1 / (1 + exp(-g)), rounded once. out may be x.
Tensor SigmoidMul(const Tensor& x, const Tensor& gate, const std::optional<Tensor>& out = std::nullopt);

// ---- MoE --------------------------------------------------------------------------
struct MoeRouterParams { int64_t top_k; bool renormalize; };
// logits [T, E] float -> (weights float32 [T, k], ids int32 [T, k]). Softmax over E in
// f32 (max-subtracted; a NaN logit counts as -inf, so garbage or padded rows still get
// valid ids, unlike vllm-project/vllm#39391, sgl-project/sglang#30079; when +inf logits
// exist they share the mass equally); ids are the k largest logits in descending
// order, ties to the lower index, distinct and in [0, E); weights their probabilities,
// divided by their sum iff renormalize (HF `norm_topk_prob`; Qwen3.5-MoE always
// renormalises). A row with no logit above -inf gives ids 0 .. k-1 with weight 0.
// 1 <= top_k <= E. out_weights / out_ids: optional outputs of those shapes and dtypes.
std::tuple<Tensor, Tensor> MoeRouter(const Tensor& logits, int64_t top_k, bool renormalize,
                                     const std::optional<Tensor>& out_weights = std::nullopt,
                                     const std::optional<Tensor>& out_ids = std::nullopt);

// The experts' weight as the providers see it: a float tensor (quantized = false, w
// unused) or a QuantizedTensor; [E * N, K], expert e's rows e*N .. e*N + N - 1. gated:
// a second stack `up` of w's kind, format and shape (the SwiGLU up projection beside the
// gate projection w; float: inputs[3]), read in place as its own operand.
struct MoeMatmulParams {
  int64_t num_experts;
  bool quantized;
  QuantizedTensor w;
  bool gated = false;
  QuantizedTensor up;
};
// y[t, j] = x_tj . W_e^T with e = expert_ids[t, j] and W_e rows e*N .. e*N+N-1 of w
// [E*N, K] (the GGUF 3-D expert tensor layout, so one `ffn_*_exps` tensor is one
// QuantizedTensor without a copy): x [T, K] (x_tj = x[t] for every slot)
// or [T, k, K] (x_tj = x[t, j]), float; w float in x's dtype, or quantized (any
// QuantFormat); expert_ids int32 [T, k]. -> [T, k, N] in x's dtype, accumulated in f32.
// Only the selected experts' rows are read. An id outside [0, E) raises on the CPU; on
// Metal (ids usually written by the router on the device, so not read by the host) the
// kernels never read out of bounds and write a NaN row for such an id (never silent).
Tensor MoeMatmulBT(const Tensor& x, const Tensor& w, const Tensor& expert_ids, int64_t num_experts,
                   const std::optional<Tensor>& out = std::nullopt);
Tensor MoeMatmulBT(const Tensor& x, const QuantizedTensor& w, const Tensor& expert_ids,
                   int64_t num_experts, const std::optional<Tensor>& out = std::nullopt);
// The gate and up projections of SwiGLU experts from two stacks, each [E * N, K] as w
// above and of one kind, format and shape (GGUF `ffn_gate_exps` / `ffn_up_exps`, MLX
// `switch_mlp.{gate,up}_proj`, read in place): y[t, j] = [x_tj . G_e^T | x_tj . U_e^T]
// -> [T, k, 2N] (per pair the N gate values, then the N up values: silu_and_mul's
// input), each value the same dot product as MoeMatmulBT of that stack alone.
Tensor MoeMatmulBT(const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& expert_ids,
                   int64_t num_experts, const std::optional<Tensor>& out = std::nullopt);
Tensor MoeMatmulBT(const Tensor& x, const QuantizedTensor& gate, const QuantizedTensor& up,
                   const Tensor& expert_ids, int64_t num_experts,
                   const std::optional<Tensor>& out = std::nullopt);

// y [T, k, N] float, weights float32 [T, k] -> [T, N] in y's dtype:
// out[t] = sum_j weights[t, j] * y[t, j] (in slot order, f32), plus
// sigmoid(shared_gate[t, 0]) * shared[t] when shared [T, N] and shared_gate [T, 1] (y's
// dtype) are given, plus shared[t] when only shared is. Undefined tensors = absent.
Tensor MoeCombine(const Tensor& y, const Tensor& weights, const Tensor& shared = Tensor(),
                  const Tensor& shared_gate = Tensor(), const std::optional<Tensor>& out = std::nullopt);

}  // namespace metalrt::ops
