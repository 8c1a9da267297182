// CPU oracle of layer_norm: LayerNorm (Ba, Kiros & Hinton 2016), per row of the last
// dim in f32, two passes in index order: mean = sum(x_i) / N, var = sum((x_i - mean)^2)
// / N (biased), y_i = ((x_i - mean) * r) * weight_i + bias_i with r = 1 / sqrt(var + eps),
// rounded once to the output dtype.
#include <cmath>

#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

bool CpuLayerNorm(const OpCall& call) {
  const auto& p = call.param<ops::NormParams>();
  const std::vector<float> w = ToF32(call.inputs[1]);
  const Tensor& bias = call.inputs[2];
  const std::vector<float> b = bias.defined() ? ToF32(bias) : std::vector<float>(w.size(), 0.0f);
  MapRowsF32(call.inputs[0], call.outputs[0], [&](float* row, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += row[i];
    const float mean = sum / static_cast<float>(n);
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += (row[i] - mean) * (row[i] - mean);
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + p.eps);
    for (int64_t i = 0; i < n; ++i) row[i] = (row[i] - mean) * r * w[i] + b[i];
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("layer_norm", DeviceType::kCPU, ProviderTier::kOracle, CpuLayerNorm);

}  // namespace metalrt::cpu
