// CPU oracles of the gate ops (math in metalrt/moe_ops.h):
// * gated_rms_norm: HF RMSNormGated (transformers qwen3_next Qwen3NextRMSNormGated):
//   sum of x^2 in index order, r = 1 / sqrt(ss / D + eps), n = x * r rounded to the
//   dtype, p = w * n rounded, y = p * silu(z) rounded once more;
// * gated_query_split: bit-exact copies of each head's query and gate halves;
// * sigmoid_mul: x * (1 / (1 + exp(-gate))) in f32, rounded once.
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

float Silu(float v) { return v / (1.0f + std::exp(-v)); }
float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// row[i] rounded to `dtype` (identity for f32), through a scratch of that dtype.
void RoundRow(float* row, int64_t n, DType dtype, std::vector<uint32_t>& scratch) {
  if (dtype == DType::kF32) return;
  scratch.resize(static_cast<size_t>(n));
  StoreRowF32(scratch.data(), dtype, 0, n, row);
  LoadRowF32(scratch.data(), dtype, 0, n, row);
}

bool CpuGatedRmsNorm(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& z = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const float eps = call.param<ops::GatedRmsNormParams>().eps;
  const std::vector<float> w = ToF32(call.inputs[2]);
  const int64_t d = x.dim(-1);
  if (x.numel() == 0) return true;
  ParallelFor(x.numel() / d, std::max<int64_t>(1, 8192 / d), [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(d)), gate(static_cast<size_t>(d));
    std::vector<uint32_t> scratch;
    for (int64_t r = begin; r < end; ++r) {
      LoadRowF32(x.data(), x.dtype(), r * d, d, row.data());
      LoadRowF32(z.data(), z.dtype(), r * d, d, gate.data());
      float ss = 0.0f;
      for (int64_t i = 0; i < d; ++i) ss += row[i] * row[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      for (int64_t i = 0; i < d; ++i) row[i] *= inv;
      RoundRow(row.data(), d, x.dtype(), scratch);
      for (int64_t i = 0; i < d; ++i) row[i] *= w[i];
      RoundRow(row.data(), d, x.dtype(), scratch);
      for (int64_t i = 0; i < d; ++i) row[i] *= Silu(gate[i]);
      StoreRowF32(out.data(), out.dtype(), r * d, d, row.data());
    }
  });
  return true;
}

bool CpuGatedQuerySplit(const OpCall& call) {
  const Tensor& q_gate = call.inputs[0];
  const auto& p = call.param<ops::GatedQuerySplitParams>();
  const size_t half = static_cast<size_t>(p.head_dim) * DTypeSize(q_gate.dtype());
  const char* src = static_cast<const char*>(q_gate.data());
  char* q = static_cast<char*>(call.outputs[0].data());
  char* gate = static_cast<char*>(call.outputs[1].data());
  const int64_t heads = q_gate.dim(0) * p.num_heads;   // (token, head) pairs, row-major
  for (int64_t h = 0; h < heads; ++h) {
    std::memcpy(q + h * half, src + 2 * h * half, half);
    std::memcpy(gate + h * half, src + (2 * h + 1) * half, half);
  }
  return true;
}

bool CpuSigmoidMul(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& gate = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const int64_t n = x.numel();
  ParallelFor(n, 16384, [&](int64_t begin, int64_t end) {
    std::vector<float> a(static_cast<size_t>(end - begin)), g(a.size());
    LoadRowF32(x.data(), x.dtype(), begin, end - begin, a.data());
    LoadRowF32(gate.data(), gate.dtype(), begin, end - begin, g.data());
    for (size_t i = 0; i < a.size(); ++i) a[i] *= Sigmoid(g[i]);
    StoreRowF32(out.data(), out.dtype(), begin, end - begin, a.data());
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("gated_rms_norm", DeviceType::kCPU, ProviderTier::kOracle, CpuGatedRmsNorm);
METALRT_REGISTER_OP_PROVIDER("gated_query_split", DeviceType::kCPU, ProviderTier::kOracle, CpuGatedQuerySplit);
METALRT_REGISTER_OP_PROVIDER("sigmoid_mul", DeviceType::kCPU, ProviderTier::kOracle, CpuSigmoidMul);

}  // namespace metalrt::cpu
