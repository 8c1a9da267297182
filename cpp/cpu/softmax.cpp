// CPU oracle of softmax over the last dim, max-subtracted, in f32:
// m = max_i x_i (NaN ignored), e_i = exp(x_i - m), s = sum of e_i in index order,
// y_i = e_i / s. A row holding NaN or +Inf, or only -Inf, gives NaN.
#include <cmath>

#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool CpuSoftmax(const OpCall& call) {
  MapRowsF32(call.inputs[0], call.outputs[0], [](float* row, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = row[i] > m ? row[i] : m;
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      row[i] = std::exp(row[i] - m);
      s += row[i];
    }
    for (int64_t i = 0; i < n; ++i) row[i] = row[i] / s;
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("softmax", DeviceType::kCPU, ProviderTier::kOracle, CpuSoftmax);

}  // namespace metalrt::cpu
