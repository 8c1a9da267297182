// Ops of biased, clamped-SwiGLU experts (gpt-oss; transformers 5.25 GptOssExperts):
// the swiglu_oai variant of silu_and_mul and the per-expert bias add of the expert
// projections. Kept out of ops.h so that adding them rebuilds only their users.
// Conventions as in ops.h: std::invalid_argument "[op] ..." for shapes and values,
// metalrt::TypeError for dtypes; "float" is f32, f16 or bf16, computed in f32.
#pragma once
#include <cstdint>
#include <optional>

#include "metalrt/tensor.h"

namespace metalrt::ops {

// The activation of a gated linear unit on a [..., 2n] gate|up input (silu_and_mul's
// variants). kSilu: SiluAndMul (gate = x[..., :n], up = x[..., n:]). kSwigluOai: gate =
// x[..., 0::2], up = x[..., 1::2] (interleaved, as gpt-oss's gate_up_proj stores them),
// g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha g)
// (transformers GptOssExperts._apply_gate; vLLM's swigluoai_and_mul). A NaN stays NaN.
// kSwigluOaiHalves: the same on gate = x[..., :n], up = x[..., n:] (llama.cpp's gpt-oss
// GGUF files store gate and up as two expert stacks, which moe_matmul_bt's up= writes so).
enum class GluActivation : int32_t { kSilu = 0, kSwigluOai = 1, kSwigluOaiHalves = 2 };
struct GluParams {
  GluActivation activation;
  float alpha;
  float limit;
};
// silu_and_mul with the kSwigluOai activation: x [..., 2n] float -> [..., n] in x's
// dtype, computed in f32 (sigmoid(z) = 1 / (1 + exp(-z))) and rounded once. alpha and
// limit finite and > 0 (gpt-oss: 1.702 and 7). interleaved: the pairs of kSwigluOai, else
// the halves of kSwigluOaiHalves.
Tensor SwigluOaiAndMul(const Tensor& x, float alpha, float limit, bool interleaved = true,
                       const std::optional<Tensor>& out = std::nullopt);

// y [T, k, N] float, bias [E, N] in y's dtype, expert_ids int32 [T, k] -> [T, k, N] in
// y's dtype: y[t, j] + bias[expert_ids[t, j]] (the bias of the expert each pair ran, as
// transformers adds gate_up_proj_bias / down_proj_bias), in f32, rounded once. out may
// be y itself (in place). An id outside [0, E) raises on the CPU; on Metal (ids written
// by the router on the device) the kernel writes a NaN row for it, never reading out of
// bounds.
Tensor MoeBiasAdd(const Tensor& y, const Tensor& bias, const Tensor& expert_ids,
                  const std::optional<Tensor>& out = std::nullopt);

}  // namespace metalrt::ops
