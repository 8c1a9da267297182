// CPU oracle of rms_norm: RMSNorm (Zhang & Sennrich 2019), per row of the last dim
// in f32: ss = sum of x_i^2 accumulated in index order, r = 1 / sqrt(ss / N + eps),
// y_i = (x_i * r) * weight_i, rounded once to the output dtype.
#include <cmath>

#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

bool CpuRmsNorm(const OpCall& call) {
  const auto& p = call.param<ops::NormParams>();
  std::vector<float> w = ToF32(call.inputs[1]);
  MapRowsF32(call.inputs[0], call.outputs[0], [&](float* row, int64_t n) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += row[i] * row[i];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + p.eps);
    for (int64_t i = 0; i < n; ++i) row[i] = row[i] * r * w[i];
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("rms_norm", DeviceType::kCPU, ProviderTier::kOracle, CpuRmsNorm);

}  // namespace metalrt::cpu
