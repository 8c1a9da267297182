// The fast CPU provider of rms_norm: the oracle's formula (cpu/rms_norm.cpp) with the
// sum of squares in 16 independent lanes (element i into lane i mod 16, the lanes folded
// 8, 4, 2, 1), so the compiler vectorises it at the baseline ISA instead of waiting on
// one add per element; r, the scaling and the rounding are the oracle's, bit for bit.
// Decode runs one 576-wide row per call, 61 calls a step: what the oracle spent beside
// the arithmetic (a weight vector and a row vector allocated per call, a std::function
// per row) is gone too: f32 rows are read and written in place, the rest go through a
// per-thread scratch row. The order is fixed by the source (-ffp-contract=off), so every
// ISA and thread count gives the same bytes; the oracle's serial sum differs from it by
// rounding only.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

constexpr int kLanes = 16;

float SumOfSquares(const float* x, int64_t n) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += x[i + l] * x[i + l];
  for (int l = 0; i + l < n; ++l) lane[l] += x[i + l] * x[i + l];
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// y = (x * r) * w per element, r = 1 / sqrt(ss / n + eps); y may be x.
void NormRow(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float r = 1.0f / std::sqrt(SumOfSquares(x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * w[i];
}

bool FastRmsNorm(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  const auto& p = call.param<ops::NormParams>();
  const int64_t n = x.ndim() == 0 ? 1 : x.dim(-1);
  if (n == 0 || x.numel() == 0) return true;
  // The weight as f32, in a scratch the calling thread keeps: no allocation once it has
  // grown to the width.
  thread_local std::vector<float> weight;
  weight.resize(static_cast<size_t>(n));
  LoadRowF32(call.inputs[1].data(), call.inputs[1].dtype(), 0, n, weight.data());
  const float* w = weight.data();
  const bool f32 = x.dtype() == DType::kF32 && out.dtype() == DType::kF32;
  ParallelFor(x.numel() / n, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
    if (f32) {
      for (int64_t r = begin; r < end; ++r)
        NormRow(x.data_as<const float>() + r * n, w, n, p.eps, out.data_as<float>() + r * n);
      return;
    }
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      LoadRowF32(x.data(), x.dtype(), r * n, n, row.data());
      NormRow(row.data(), w, n, p.eps, row.data());
      StoreRowF32(out.data(), out.dtype(), r * n, n, row.data());
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("rms_norm", DeviceType::kCPU, ProviderTier::kFast, FastRmsNorm);

}  // namespace metalrt::cpu::fast
