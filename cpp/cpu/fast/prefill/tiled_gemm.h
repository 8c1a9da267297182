// The prefill GEMM driver shared by the BLAS and bf16 providers: out = A . W for a
// weight W that arrives as f32 panels of output columns (a float weight's own rows,
// converted f16/bf16 rows, or dequantized quantized rows), one f32 GEMM (the BLAS
// sgemm, prefill/blas/sgemm.h) or bf16 GEMM (gemm_bf16.h) per panel. Built with or
// without a BLAS: the bf16 GEMM is ours.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "cpu/fast/prefill/prefill_gemm.h"
#include "metalrt/tensor.h"

namespace metalrt::cpu::fast {

// Weight columns [n0, n0 + count) in f32: `transposed` = stored as count rows of K
// values (nn.Linear layout), else as K rows of count values; `ld` = the row stride.
struct Panel {
  const float* data;
  int64_t ld;
  bool transposed;
};
// Returns the panel of columns [n0, n0 + count), filling `scratch` (room for count * K
// floats) when the weight has no such f32 layout of its own.
using PanelFn = std::function<Panel(int64_t n0, int64_t count, float* scratch)>;
// For the bf16 GEMM, optionally: fills `rows` with weight rows [n0, n0 + count) as bf16
// (count rows of K) straight from the weight, skipping the f32 panel and its rounding.
using Bf16PanelFn = std::function<void(int64_t n0, int64_t count, uint16_t* rows)>;

// The f32 product of one panel, with Sgemm's arguments (prefill/blas/sgemm.h):
// C[m, n] (row stride ldc) = A[m, k] (row stride lda) . op(B), on the calling thread.
using F32Gemm = void (*)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                         int64_t ldb, bool b_transposed, float* c, int64_t ldc);

// True when a prefill GEMM should serve an [m, k] x [k, n] product: m above the GEMV's
// rows (cpp/cpu/fast/gemv/matmul_dispatch.h), no size 0, and not decode rows
// (DecodeRows, op_registry.h: the GEMV, or the oracle for float weights, serves those).
bool PrefillGemmServes(int64_t m, int64_t n, int64_t k);

// True when the bf16 GEMM should serve a product PrefillGemmServes: k is even (its
// pairs of k) and PrefillGemmIsBf16(coarse_weight).
bool Bf16GemmServes(int64_t k, bool coarse_weight);

// A's rows as f32: a's own memory when it is f32, else converted into `scratch`.
const float* RowsF32(const Tensor& a, std::vector<float>& scratch);

// a[m, k] rounded and packed for GemmBf16Avx512 (gemm_bf16.h) on ParallelFor's threads,
// into the calling thread's buffer, valid until its next call.
const uint32_t* PackedBf16(const float* a, int64_t m, int64_t k);

// out[m, n] (contiguous f32, f16 or bf16) = a[m, k] . W. Panels of up to 128 columns
// are split over ParallelFor's threads; each thread fills its panel and runs
// `f32_gemm` on it or, when that is null, the bf16 GEMM (a is rounded and packed once,
// each panel rounded to bf16 rows; the panels must be `transposed`), so the panel is
// reused by all m rows while in cache. Scratch is per thread and kept between calls.
// `bf16_panel`, when set, replaces `panel` for the bf16 GEMM.
void TiledGemm(const float* a, int64_t m, int64_t k, int64_t n, const PanelFn& panel, const Tensor& out,
               F32Gemm f32_gemm, const Bf16PanelFn& bf16_panel = nullptr);

}  // namespace metalrt::cpu::fast
