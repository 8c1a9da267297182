// The CPU device's prefill GEMM for quantized weights: quantized_matmul_bt
// (x[M,K] . W[N,K]^T) for m above the GEMV's rows. Each panel of weight rows is
// dequantized into f32 scratch by the oracle's block decoders (DequantizeRow: every
// format, bit-exact with the references) and multiplied by the BLAS sgemm; for the bf16
// GEMM, Q4_0/Q4_1/Q8_0 rows decode straight to bf16 (the same values, rounded once:
// gemm_bf16.h) and the other formats are rounded from the f32 panel. The dequantization
// is paid once per call and reused by all m rows. The weight stays quantized in memory;
// only a panel (<= 128 rows) is ever decoded.
#include "cpu/fast/prefill/blas/tiled_gemm.h"
#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/quantized_blocks.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

template <bool kBf16>
bool BlasQuantizedGemm(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  const int64_t m = x.dim(0), n = w.rows, k = w.cols;
  if (!GemmServes(m, n, k) || (kBf16 && !Bf16GemmServes(k, ops::IsCoarseWeight(w)))) return false;
  std::vector<float> x_scratch;
  const float* x32 = RowsF32(x, x_scratch);
  // DequantizesToBf16 is AVX-512 code too: asked only once the bf16 GEMM serves.
  Bf16PanelFn bf16_panel;
  if (kBf16 && DequantizesToBf16(w))
    bf16_panel = [&](int64_t n0, int64_t count, uint16_t* rows) { DequantizeRowsBf16Avx512(w, n0, count, rows); };
  TiledGemm(x32, m, k, n,
            [&](int64_t n0, int64_t count, float* scratch) {
              for (int64_t r = 0; r < count; ++r) DequantizeRow(w, n0 + r, scratch + r * k);
              return Panel{scratch, k, true};
            },
            out, kBf16, bf16_panel);
  return true;
}

}  // namespace

// Ahead of the oracle (priority 0), after the GEMV (5), which owns m <= kGemvMaxRows:
// a decode step is served by the first provider tried. The bf16 GEMM (4) ahead of the
// sgemm (3), which serves what it declines (METALRT_CPU_GEMM=f32, no AVX-512 BF16, odd k).
METALRT_REGISTER_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, "cpu_bf16_quantized_matmul_bt", 4,
                          BlasQuantizedGemm<true>);
METALRT_REGISTER_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, "cpu_blas_quantized_matmul_bt", 3,
                          BlasQuantizedGemm<false>);

}  // namespace metalrt::cpu::fast
