// CPU oracle of moe_bias_add (metalrt/expert_ops.h): out[t, j] = y[t, j] +
// bias[expert_ids[t, j]], in f32, rounded once (the entry point checked the ids).
#include <algorithm>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool CpuMoeBiasAdd(const OpCall& call) {
  const Tensor& y = call.inputs[0];
  const Tensor& bias = call.inputs[1];
  const int32_t* ids = call.inputs[2].data_as<const int32_t>();
  const Tensor& out = call.outputs[0];
  const int64_t pairs = y.dim(0) * y.dim(1), n = y.dim(2);
  if (out.numel() == 0) return true;
  ParallelFor(pairs, std::max<int64_t>(1, 8192 / n), [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (int64_t pair = begin; pair < end; ++pair) {
      LoadRowF32(y.data(), y.dtype(), pair * n, n, row.data());
      LoadRowF32(bias.data(), bias.dtype(), int64_t{ids[pair]} * n, n, b.data());
      for (int64_t c = 0; c < n; ++c) row[c] += b[c];
      StoreRowF32(out.data(), out.dtype(), pair * n, n, row.data());
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("moe_bias_add", DeviceType::kCPU, ProviderTier::kOracle, CpuMoeBiasAdd);

}  // namespace metalrt::cpu
