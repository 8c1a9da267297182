// CPU oracle of gdn_gating (metalrt/linear_attention_ops.h), per element in f32 as
// transformers' Qwen3NextGatedDeltaNet.forward computes it:
//   g = -exp(A_log) * softplus(a + dt_bias)   (F.softplus: x > 20 ? x : log1p(exp(x)))
//   beta = 1 / (1 + exp(-b))
#include <cmath>
#include <vector>

#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool CpuGdnGating(const OpCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const int64_t tokens = a.dim(0), heads = a.dim(1);
  const std::vector<float> a_log = ToF32(call.inputs[2]), dt_bias = ToF32(call.inputs[3]);
  float* g = call.outputs[0].data_as<float>();
  float* beta = call.outputs[1].data_as<float>();
  std::vector<float> a_row(static_cast<size_t>(heads)), b_row(a_row.size());
  for (int64_t t = 0; t < tokens; ++t) {
    LoadRowF32(a.data(), a.dtype(), t * heads, heads, a_row.data());
    LoadRowF32(b.data(), b.dtype(), t * heads, heads, b_row.data());
    for (int64_t h = 0; h < heads; ++h) {
      const float x = a_row[h] + dt_bias[h];
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
      g[t * heads + h] = -std::exp(a_log[h]) * softplus;
      beta[t * heads + h] = 1.0f / (1.0f + std::exp(-b_row[h]));
    }
  }
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("gdn_gating", DeviceType::kCPU, ProviderTier::kOracle, CpuGdnGating);

}  // namespace metalrt::cpu
