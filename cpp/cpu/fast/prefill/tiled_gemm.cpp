#include "cpu/fast/prefill/tiled_gemm.h"

#include <algorithm>

#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

// A panel of 128 columns x K = 1536 is 768 KiB of f32: it stays in L2 while the sgemm
// packs it, and a 576-column projection still splits evenly over two threads.
constexpr int64_t kMaxPanelColumns = 128;
constexpr int64_t kPanelAlign = 16;   // whole SIMD registers of columns

// Panel width: the fewest panels of at most kMaxPanelColumns that split evenly over
// the threads (on 2 threads: 576 columns as 6 panels of 96, 49,152 as 384 of 128).
int64_t PanelColumns(int64_t n, int64_t threads) {
  const int64_t per_thread = std::max<int64_t>(1, (n + threads * kMaxPanelColumns - 1) / (threads * kMaxPanelColumns));
  const int64_t width = (n + threads * per_thread - 1) / (threads * per_thread);
  return std::min(kMaxPanelColumns, (width + kPanelAlign - 1) / kPanelAlign * kPanelAlign);
}

}  // namespace

bool PrefillGemmServes(int64_t m, int64_t n, int64_t k) {
  return m > kGemvMaxRows && n >= 1 && k >= 1 && !DecodeRows();
}

bool Bf16GemmServes(int64_t k, bool coarse_weight) { return k % 2 == 0 && PrefillGemmIsBf16(coarse_weight); }

const float* RowsF32(const Tensor& a, std::vector<float>& scratch) {
  if (a.dtype() == DType::kF32) return a.data_as<const float>();
  scratch.resize(static_cast<size_t>(a.numel()));
  LoadRowF32(a.data(), a.dtype(), 0, a.numel(), scratch.data());
  return scratch.data();
}

const uint32_t* PackedBf16(const float* a, int64_t m, int64_t k) {
  // The calling thread's, reached by the pool threads through `packed` (a thread_local
  // named in the lambdas would be each pool thread's own).
  static thread_local std::vector<uint32_t> packed_a;
  packed_a.resize(static_cast<size_t>(Bf16PackedSize(m, k)));
  uint32_t* packed = packed_a.data();
  ParallelFor(Bf16RowBlocks(m), 1, [&](int64_t begin, int64_t end) {
    PackRowsBf16Avx512(a, m, k, begin, end, packed);
  });
  return packed;
}

void TiledGemm(const float* a, int64_t m, int64_t k, int64_t n, const PanelFn& panel, const Tensor& out,
               F32Gemm f32_gemm, const Bf16PanelFn& bf16_panel) {
  const bool bf16 = f32_gemm == nullptr;
  const int64_t width = PanelColumns(n, ParallelThreadCount());
  const int64_t panels = (n + width - 1) / width;
  const bool direct = out.dtype() == DType::kF32;   // the GEMM writes straight into out
  const uint32_t* packed = bf16 ? PackedBf16(a, m, k) : nullptr;
  const Bf16GemmFn gemm_bf16 = bf16 ? SelectedBf16Gemm(k) : nullptr;
  ParallelFor(panels, 1, [&](int64_t begin, int64_t end) {
    static thread_local std::vector<float> scratch, result;
    static thread_local std::vector<uint16_t> rows_bf16;
    if (!(bf16 && bf16_panel)) scratch.resize(static_cast<size_t>(width * k));
    if (!direct) result.resize(static_cast<size_t>(m * width));
    if (bf16) rows_bf16.resize(static_cast<size_t>(width * k));
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n0 = p * width, count = std::min(width, n - n0);
      float* c = direct ? out.data_as<float>() + n0 : result.data();
      const int64_t ldc = direct ? n : count;
      if (bf16 && bf16_panel) {
        bf16_panel(n0, count, rows_bf16.data());
        gemm_bf16(packed, m, k, rows_bf16.data(), count, c, ldc, false);
      } else if (bf16) {
        const Panel w = panel(n0, count, scratch.data());
        for (int64_t r = 0; r < count; ++r) RoundToBf16Avx512(w.data + r * w.ld, k, rows_bf16.data() + r * k);
        gemm_bf16(packed, m, k, rows_bf16.data(), count, c, ldc, false);
      } else {
        const Panel w = panel(n0, count, scratch.data());
        f32_gemm(m, count, k, a, k, w.data, w.ld, w.transposed, c, ldc);
      }
      if (direct) continue;
      for (int64_t row = 0; row < m; ++row)
        StoreRowF32(out.data(), out.dtype(), row * n + n0, count, result.data() + row * count);
    }
  });
}

}  // namespace metalrt::cpu::fast
