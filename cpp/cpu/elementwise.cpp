// CPU oracle of add, mul, relu and gelu: each element converted to f32, one f32
// operation, rounded once to the output dtype. For add and mul that is the correctly
// rounded result in every float dtype (f32 holds the exact sum/product of two f16 or
// bf16 values, or rounds it innocuously: 24 >= 2 * 11 + 2). Chunks of elements are
// spread over ParallelFor's threads (every element is computed alone, so the result
// is the same on any thread count).
#include <algorithm>
#include <cmath>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

constexpr int64_t kChunk = 1024;   // elements converted per step (stays in L1)
constexpr int64_t kMinChunks = 16;  // per thread: a decode step's rows stay on one thread

// out[i] = f(a[i], b[i mod b.numel()]): b is a's shape or a trailing suffix of it.
template <typename F>
bool Binary(const OpCall& call, F f) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const int64_t inner = b.numel();
  if (a.numel() == 0) return true;
  // Item (row, c): elements [c kChunk, (c + 1) kChunk) of a's row `row` of b's size.
  const int64_t per_row = (inner + kChunk - 1) / kChunk;
  ParallelFor(a.numel() / inner * per_row, kMinChunks, [&](int64_t begin, int64_t end) {
    float x[kChunk], y[kChunk];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / per_row, c = item % per_row * kChunk;
      const int64_t n = std::min(kChunk, inner - c);
      LoadRowF32(a.data(), a.dtype(), row * inner + c, n, x);
      LoadRowF32(b.data(), b.dtype(), c, n, y);
      for (int64_t i = 0; i < n; ++i) x[i] = f(x[i], y[i]);
      StoreRowF32(out.data(), out.dtype(), row * inner + c, n, x);
    }
  });
  return true;
}

template <typename F>
bool Unary(const OpCall& call, F f) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  ParallelFor((x.numel() + kChunk - 1) / kChunk, kMinChunks, [&](int64_t begin, int64_t end) {
    float v[kChunk];
    for (int64_t c = begin * kChunk; c < std::min(x.numel(), end * kChunk); c += kChunk) {
      const int64_t n = std::min(kChunk, x.numel() - c);
      LoadRowF32(x.data(), x.dtype(), c, n, v);
      for (int64_t i = 0; i < n; ++i) v[i] = f(v[i]);
      StoreRowF32(out.data(), out.dtype(), c, n, v);
    }
  });
  return true;
}

bool CpuAdd(const OpCall& call) { return Binary(call, [](float a, float b) { return a + b; }); }
bool CpuMul(const OpCall& call) { return Binary(call, [](float a, float b) { return a * b; }); }

// NaN propagates (NaN < 0 is false).
bool CpuRelu(const OpCall& call) { return Unary(call, [](float x) { return x < 0.0f ? 0.0f : x; }); }

// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. 2): 0.5 x (1 + tanh(u)),
// u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as the identical x * sigmoid(2u) =
// x / (1 + exp(-2u)), which keeps full relative accuracy where 1 + tanh(u) cancels.
bool CpuGelu(const OpCall& call) {
  return Unary(call, [](float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float e = std::exp(-2.0f * u);
    return std::isinf(e) ? -0.0f : x / (1.0f + e);   // the limit, also for x = -Inf
  });
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("add", DeviceType::kCPU, ProviderTier::kOracle, CpuAdd);
METALRT_REGISTER_OP_PROVIDER("mul", DeviceType::kCPU, ProviderTier::kOracle, CpuMul);
METALRT_REGISTER_OP_PROVIDER("relu", DeviceType::kCPU, ProviderTier::kOracle, CpuRelu);
METALRT_REGISTER_OP_PROVIDER("gelu", DeviceType::kCPU, ProviderTier::kOracle, CpuGelu);

}  // namespace metalrt::cpu
