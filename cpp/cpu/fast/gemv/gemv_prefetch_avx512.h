// The weight prefetch of the AVX-512 m = 1 GEMV kernels (gemv_avx512_vnni.cpp,
// gemv_kquant_avx512.cpp): each pass of R weight rows asks for its share of the rows
// kPassesAhead passes ahead. Internal linkage (see gemv_kernel.h); include only from
// translation units compiled for AVX-512.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/fast/gemv/gemv_args.h"

namespace metalrt::cpu::fast {
namespace {

// A pass's R rows are R interleaved streams, which the hardware prefetchers follow
// poorly from memory (Q8_0's lm_head ran 3x slower than one row at a time): each block
// prefetches its share of the rows kPassesAhead passes ahead, one sequential stream (an
// address past the weight's end is harmless: prefetches never fault; it is computed as
// an integer, no pointer is formed past the end). Into the L2 (prefetcht1), not the
// L1: with K = 1536 (down) two passes of eight rows are 15 KB, which with the pass being
// read and the activation overflowed the 32 KB L1, evicting lines before their use
// (down ran at ~9 GB/s a thread from memory against ~15 for the K = 576 weights); an
// L1 miss that hits the L2 costs little, and the L2 holds any distance.
constexpr int kPassesAhead = 3;
template <int R, int kBytes>
struct Prefetcher {
  static constexpr int kLines = (R * kBytes + 63) / 64;
  uintptr_t ahead;
  Prefetcher(const GemvArgs& a, int64_t row0)
      : ahead(reinterpret_cast<uintptr_t>(a.data) + uintptr_t((row0 + kPassesAhead * R) * a.row_bytes)) {}
  void Step() {
    for (int l = 0; l < kLines; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T1);
    ahead += 64 * kLines;
  }
};

// Rows [begin, end)'s first kPassesAhead passes of `rows_per_pass` rows, which
// no earlier pass prefetched: asked for into the L2 before a slice's first pass, so
// they arrive together instead of as the first passes' demand misses (a decode step
// starts ~250 slices, each on weights not in any cache: 3-7% off q|k|v and o_proj).
inline void PrefetchFirstPasses(const GemvArgs& a, int64_t begin, int64_t end, int rows_per_pass) {
  const int64_t rows = std::min<int64_t>(end - begin, int64_t{rows_per_pass} * kPassesAhead);
  const uintptr_t first = reinterpret_cast<uintptr_t>(a.data) + uintptr_t(begin * a.row_bytes);
  for (int64_t b = 0; b < rows * a.row_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(first + b), _MM_HINT_T1);
}

}  // namespace
}  // namespace metalrt::cpu::fast
