// The fast CPU provider of silu_and_mul (cpu/silu_and_mul.cpp's math) for f32 tensors:
// each row of SwiGLU (out = silu(gate) * up) or of swiglu_oai (metalrt/expert_ops.h) in
// one AVX-512 pass (exp_avx512.h: a vectorised exp in place of libm's expf, and no row
// copies), rows split over the threads. Registered ahead of the oracle, which serves
// what this declines: f16/bf16 tensors, and CPUs (or METALRT_CPU_ISA settings) below
// AVX-512.
#include <algorithm>
#include <any>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/simd/exp_avx512.h"
#include "cpu/parallel.h"
#include "metalrt/expert_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

bool FastSiluAndMul(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  if (x.dtype() != DType::kF32 || out.dtype() != DType::kF32 || SelectedGemvIsa() != GemvIsa::kAvx512Vnni)
    return false;
  const auto* p = std::any_cast<ops::GluParams>(&call.params);
  const auto activation = p != nullptr ? p->activation : ops::GluActivation::kSilu;
  const int64_t n = out.dim(-1);
  if (out.numel() == 0) return true;
  const float* in = x.data_as<const float>();
  float* dst = out.data_as<float>();
  ParallelFor(out.numel() / n, std::max<int64_t>(1, 8192 / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (activation == ops::GluActivation::kSwigluOai)
        SwigluOaiRowAvx512(in + r * 2 * n, n, p->alpha, p->limit, dst + r * n);
      else if (activation == ops::GluActivation::kSwigluOaiHalves)
        SwigluOaiHalvesRowAvx512(in + r * 2 * n, in + r * 2 * n + n, n, p->alpha, p->limit, dst + r * n);
      else
        SiluAndMulRowAvx512(in + r * 2 * n, in + r * 2 * n + n, n, dst + r * n);
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("silu_and_mul", DeviceType::kCPU, ProviderTier::kFast, FastSiluAndMul);

}  // namespace metalrt::cpu::fast
