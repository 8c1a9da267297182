// CPU greedy argmax: a left-to-right scan with a strict `>`, so the first (lowest)
// index of the maximum wins ties; NaN compares false and is never selected; a row
// with no non-NaN value yields 0.
#include <cmath>
#include <vector>

#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool GreedyArgmax(const OpCall& call) {
  const Tensor& logits = call.inputs[0];
  int32_t* out = call.outputs[0].data_as<int32_t>();
  const int64_t vocab = logits.dim(1);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    LoadRowF32(logits.data(), logits.dtype(), r * vocab, vocab, row.data());
    int64_t best = -1;
    for (int64_t v = 0; v < vocab; ++v) {
      if (std::isnan(row[v])) continue;
      if (best < 0 || row[v] > row[best]) best = v;
    }
    out[r] = static_cast<int32_t>(best < 0 ? 0 : best);
  }
  return true;
}

METALRT_REGISTER_OP_PROVIDER("greedy_argmax", DeviceType::kCPU, ProviderTier::kOracle, GreedyArgmax);

}  // namespace
}  // namespace metalrt::cpu
