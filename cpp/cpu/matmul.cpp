// CPU oracle of matmul (A[M,K] . B[K,N]) and matmul_bt (A[M,K] . B[N,K]^T), also the
// CPU device's GEMM/GEMV for the model runner.
//
// Fixed accumulation order (independent of blocking and thread count): each output is
// an f32 dot product over K with 8 partial sums, lane j accumulating a[k] * b[k] for
// k = j (mod 8) in increasing k, combined as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
// (l3 + l7)); products are rounded before the add (the build disables FMA contraction).
// The 8 lanes are two 4-wide vector registers, so the order is the same scalar or SIMD.
//
// Blocking: B is converted to f32 a panel of kPanelRows output columns at a time (one
// conversion reused by every row of A); each pass of the dot kernel computes
// kRowsPerPass outputs sharing each load of A. Output columns are split across the
// hardware threads.
#include <algorithm>
#include <cstring>

#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

constexpr int kLanes = 8;
constexpr int kRowsPerPass = 4;
constexpr int64_t kPanelRows = 32;
constexpr int64_t kMinFlopsPerThread = 1 << 17;   // below this a thread costs more than it saves

inline float CombineLanes(const float* s) {
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

// Four f32 lanes in a vector register (SSE on x86-64, NEON on arm64; GCC and Clang).
typedef float F4 __attribute__((vector_size(16)));
inline F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// out[r] = dot(a, b + r * k) for r < R, each in the fixed lane order: lanes 0-3 live in
// lo[r], lanes 4-7 in hi[r]; the k mod 8 tail goes to lanes 0.. in order.
template <int R>
inline void DotRows(const float* a, const float* b, int64_t k, float* out) {
  F4 lo[R] = {}, hi[R] = {};
  const int64_t k8 = k / kLanes * kLanes;
  for (int64_t i = 0; i < k8; i += kLanes) {
    const F4 a_lo = Load4(a + i), a_hi = Load4(a + i + 4);
    for (int r = 0; r < R; ++r) {
      lo[r] += a_lo * Load4(b + r * k + i);
      hi[r] += a_hi * Load4(b + r * k + i + 4);
    }
  }
  for (int r = 0; r < R; ++r) {
    float lanes[kLanes];
    std::memcpy(lanes, &lo[r], sizeof lo[r]);
    std::memcpy(lanes + 4, &hi[r], sizeof hi[r]);
    for (int64_t i = k8; i < k; ++i) lanes[i - k8] += a[i] * b[r * k + i];
    out[r] = CombineLanes(lanes);
  }
}

// Fills panel[r * k + i] = B(column n0 + r, i) in f32 for r < count; returns the panel
// (or B itself when it already has that layout in f32).
using PackFn = const float* (*)(const Tensor& b, int64_t n0, int64_t count, float* panel);

const float* PackRowsBT(const Tensor& b, int64_t n0, int64_t count, float* panel) {
  const int64_t k = b.dim(1);
  if (b.dtype() == DType::kF32) return b.data_as<const float>() + n0 * k;
  LoadRowF32(b.data(), b.dtype(), n0 * k, count * k, panel);
  return panel;
}

const float* PackColumns(const Tensor& b, int64_t n0, int64_t count, float* panel) {
  const int64_t k = b.dim(0), n = b.dim(1);
  float row[kPanelRows];
  for (int64_t i = 0; i < k; ++i) {
    LoadRowF32(b.data(), b.dtype(), i * n + n0, count, row);
    for (int64_t r = 0; r < count; ++r) panel[r * k + i] = row[r];
  }
  return panel;
}

bool Gemm(const OpCall& call, PackFn pack) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const int64_t m = out.dim(0), n = out.dim(1), k = a.dim(1);
  std::vector<float> a_converted;
  const float* a32 = a.data_as<const float>();
  if (a.dtype() != DType::kF32) {
    a_converted = ToF32(a);
    a32 = a_converted.data();
  }
  const int64_t min_columns = std::max<int64_t>(1, kMinFlopsPerThread / std::max<int64_t>(1, m * k));
  ParallelFor(n, min_columns, [&](int64_t begin, int64_t end) {
    std::vector<float> panel(static_cast<size_t>(kPanelRows * k));
    float result[kPanelRows];
    for (int64_t n0 = begin; n0 < end; n0 += kPanelRows) {
      const int64_t count = std::min(kPanelRows, end - n0);
      const float* cols = pack(b, n0, count, panel.data());
      for (int64_t row = 0; row < m; ++row) {
        const float* a_row = a32 + row * k;
        int64_t r = 0;
        for (; r + kRowsPerPass <= count; r += kRowsPerPass)
          DotRows<kRowsPerPass>(a_row, cols + r * k, k, result + r);
        for (; r < count; ++r) DotRows<1>(a_row, cols + r * k, k, result + r);
        StoreRowF32(out.data(), out.dtype(), row * n + n0, count, result);
      }
    }
  });
  return true;
}

bool CpuMatmul(const OpCall& call) { return Gemm(call, PackColumns); }
bool CpuMatmulBT(const OpCall& call) { return Gemm(call, PackRowsBT); }

}  // namespace

METALRT_REGISTER_OP_PROVIDER("matmul", DeviceType::kCPU, ProviderTier::kOracle, CpuMatmul);
METALRT_REGISTER_OP_PROVIDER("matmul_bt", DeviceType::kCPU, ProviderTier::kOracle, CpuMatmulBT);

}  // namespace metalrt::cpu
