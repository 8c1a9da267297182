#include "cpu/fast/prefill/weight_gemm.h"

#include <vector>

#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/float_rows.h"
#include "cpu/quantized_blocks.h"
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

template <Panel (*kPanel)(const Tensor&, int64_t, int64_t, float*)>
bool FloatGemm(const OpCall& call, F32Gemm f32_gemm) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const int64_t m = out.dim(0), n = out.dim(1), k = a.dim(1);
  if (!PrefillGemmServes(m, n, k) || (!f32_gemm && !Bf16GemmServes(k, ops::IsCoarseWeight(b)))) return false;
  std::vector<float> a_scratch;
  const float* a32 = RowsF32(a, a_scratch);
  TiledGemm(a32, m, k, n, [&](int64_t n0, int64_t count, float* scratch) { return kPanel(b, n0, count, scratch); },
            out, f32_gemm);
  return true;
}

}  // namespace

bool MatmulGemm(const OpCall& call, F32Gemm f32_gemm) { return FloatGemm<ColumnsPanel>(call, f32_gemm); }

bool MatmulBtGemm(const OpCall& call, F32Gemm f32_gemm) { return FloatGemm<RowsPanel>(call, f32_gemm); }

bool QuantizedMatmulBtGemm(const OpCall& call, F32Gemm f32_gemm) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  const int64_t m = x.dim(0), n = w.rows, k = w.cols;
  if (!PrefillGemmServes(m, n, k) || (!f32_gemm && !Bf16GemmServes(k, ops::IsCoarseWeight(w)))) return false;
  std::vector<float> x_scratch;
  const float* x32 = RowsF32(x, x_scratch);
  // DequantizesToBf16 is AVX-512 code too: asked only once the bf16 GEMM serves.
  Bf16PanelFn bf16_panel;
  if (!f32_gemm && DequantizesToBf16(w))
    bf16_panel = [&](int64_t n0, int64_t count, uint16_t* rows) { DequantizeRowsBf16Avx512(w, n0, count, rows); };
  TiledGemm(x32, m, k, n,
            [&](int64_t n0, int64_t count, float* scratch) {
              for (int64_t r = 0; r < count; ++r) DequantizeRow(w, n0 + r, scratch + r * k);
              return Panel{scratch, k, true};
            },
            out, f32_gemm, bf16_panel);
  return true;
}

}  // namespace metalrt::cpu::fast
