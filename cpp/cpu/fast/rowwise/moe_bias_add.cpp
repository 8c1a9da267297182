// The fast CPU provider of moe_bias_add (cpu/moe_bias_add.cpp's math) for f32 tensors:
// each pair's row added to its expert's bias row in place of the oracle's row copies (a
// loop the compiler vectorises; one f32 add per element, so the same bits), pairs split
// over the threads. The oracle serves f16/bf16.
#include <algorithm>

#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

bool FastMoeBiasAdd(const OpCall& call) {
  const Tensor& y = call.inputs[0];
  const Tensor& out = call.outputs[0];
  if (y.dtype() != DType::kF32) return false;
  const float* in = y.data_as<const float>();
  const float* bias = call.inputs[1].data_as<const float>();
  const int32_t* ids = call.inputs[2].data_as<const int32_t>();
  float* dst = out.data_as<float>();
  const int64_t pairs = y.dim(0) * y.dim(1), n = y.dim(2);
  if (out.numel() == 0) return true;
  ParallelFor(pairs, std::max<int64_t>(1, 8192 / n), [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      const float* b = bias + int64_t{ids[pair]} * n;
      const float* row = in + pair * n;
      float* o = dst + pair * n;
      for (int64_t c = 0; c < n; ++c) o[c] = row[c] + b[c];
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("moe_bias_add", DeviceType::kCPU, ProviderTier::kFast, FastMoeBiasAdd);

}  // namespace metalrt::cpu::fast
