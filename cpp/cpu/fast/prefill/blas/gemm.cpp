// The CPU device's prefill GEMM for float weights: matmul (A[M,K] . B[K,N]) and
// matmul_bt (A[M,K] . B[N,K]^T) through the BLAS sgemm, for m above the GEMV's rows;
// smaller m, and sizes past the BLAS's int range, decline to the oracle
// (cpp/cpu/matmul.cpp). f16/bf16 operands are converted to f32 (A once, B a panel at a
// time) and the result rounded to the dtype once, as the oracle does; only the order
// of the f32 sums differs from the oracle's.
#include "cpu/fast/prefill/blas/tiled_gemm.h"
#include "cpu/float_rows.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

// Panels of matmul_bt's B[N, K]: its own rows when f32, else converted rows.
Panel RowsPanel(const Tensor& b, int64_t n0, int64_t count, float* scratch) {
  const int64_t k = b.dim(1);
  if (b.dtype() == DType::kF32) return {b.data_as<const float>() + n0 * k, k, true};
  LoadRowF32(b.data(), b.dtype(), n0 * k, count * k, scratch);
  return {scratch, k, true};
}

// Panels of matmul's B[K, N]: a column slice of it when f32, else its converted rows.
Panel ColumnsPanel(const Tensor& b, int64_t n0, int64_t count, float* scratch) {
  const int64_t k = b.dim(0), n = b.dim(1);
  if (b.dtype() == DType::kF32) return {b.data_as<const float>() + n0, n, false};
  for (int64_t i = 0; i < k; ++i) LoadRowF32(b.data(), b.dtype(), i * n + n0, count, scratch + i * count);
  return {scratch, count, false};
}

template <Panel (*kPanel)(const Tensor&, int64_t, int64_t, float*), bool kBf16>
bool BlasGemm(const OpCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const int64_t m = out.dim(0), n = out.dim(1), k = a.dim(1);
  if (!GemmServes(m, n, k) || (kBf16 && !Bf16GemmServes(k, ops::IsCoarseWeight(b)))) return false;
  std::vector<float> a_scratch;
  const float* a32 = RowsF32(a, a_scratch);
  TiledGemm(a32, m, k, n, [&](int64_t n0, int64_t count, float* scratch) { return kPanel(b, n0, count, scratch); },
            out, kBf16);
  return true;
}

}  // namespace

// Ahead of the oracle (priority 0); the bf16 GEMM (B's rows only) ahead of the sgemm,
// which serves what it declines (f32/f16 weights unless METALRT_CPU_GEMM=bf16, every
// weight under METALRT_CPU_GEMM=f32 or without AVX-512 BF16, odd k).
METALRT_REGISTER_PROVIDER("matmul", DeviceType::kCPU, "cpu_blas_matmul", 10,
                          (BlasGemm<ColumnsPanel, false>));
METALRT_REGISTER_PROVIDER("matmul_bt", DeviceType::kCPU, "cpu_blas_matmul_bt", 10,
                          (BlasGemm<RowsPanel, false>));
METALRT_REGISTER_PROVIDER("matmul_bt", DeviceType::kCPU, "cpu_bf16_matmul_bt", 11,
                          (BlasGemm<RowsPanel, true>));

}  // namespace metalrt::cpu::fast
