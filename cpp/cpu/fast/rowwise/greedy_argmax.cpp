// The fast CPU provider of greedy_argmax, bit-exact with the oracle
// (cpu/greedy_argmax.cpp: the lowest index of the maximum over the non-NaN values,
// 0 when there is none) in two vectorisable passes instead of one branchy scan:
// 1. the maximum m in 16 independent lanes from -inf, each lane keeping x only when
//    x > lane (NaN compares false, so it never enters);
// 2. the first index holding a value == m, tested 16 at a time (NaN never equals m;
//    -0 == +0, so whichever zero the lanes kept finds the first of either, as the
//    oracle's strict `>` does). A row without a non-NaN value keeps m = -inf, and
//    either holds a -inf (the oracle's answer: its first index) or yields 0.
// The maximum is exact, so lanes and blocks change no result. f16/bf16 rows are
// converted a block at a time into a stack buffer; rows are split over the threads.
#include <algorithm>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kBlock = 2048;   // a multiple of kLanes; 8 KB of stack

// Elements [begin, begin + n) of the row as f32: the row itself, or `buffer` filled.
const float* Values(const Tensor& logits, int64_t begin, int64_t n, float* buffer) {
  if (logits.dtype() == DType::kF32) return logits.data_as<const float>() + begin;
  LoadRowF32(logits.data(), logits.dtype(), begin, n, buffer);
  return buffer;
}

// lane[l] = the largest of lane[l] and the x[i] with i mod kLanes == l. SSE2 (every
// x86-64 CPU) as intrinsics: compilers keep `x > m ? x : m` scalar, and maxps(x, m) is
// exactly it (m when x is NaN). Elsewhere the same rule in plain C++.
void Maximum(const float* x, int64_t n, float* lane) {
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 m[kLanes / 4];
  for (int v = 0; v < kLanes / 4; ++v) m[v] = _mm_loadu_ps(lane + 4 * v);
  for (; i + kLanes <= n; i += kLanes)
    for (int v = 0; v < kLanes / 4; ++v) m[v] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * v), m[v]);
  for (int v = 0; v < kLanes / 4; ++v) _mm_storeu_ps(lane + 4 * v, m[v]);
#endif
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  for (int l = 0; i + l < n; ++l) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
}

// The first i < n with x[i] == m, or n: blocks of kLanes are tested at once, the one
// holding it scanned.
int64_t FirstEqual(const float* x, int64_t n, float m) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 target = _mm_set1_ps(m);
  for (; i + kLanes <= n; i += kLanes) {
    __m128 hit = _mm_cmpeq_ps(_mm_loadu_ps(x + i), target);
    for (int v = 1; v < kLanes / 4; ++v) hit = _mm_or_ps(hit, _mm_cmpeq_ps(_mm_loadu_ps(x + i + 4 * v), target));
    if (_mm_movemask_ps(hit) != 0) break;
  }
#else
  for (; i + kLanes <= n; i += kLanes) {
    bool any = false;
    for (int l = 0; l < kLanes; ++l) any |= x[i + l] == m;
    if (any) break;
  }
#endif
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return n;
}

int32_t RowArgmax(const Tensor& logits, int64_t row) {
  const int64_t vocab = logits.dim(1), base = row * vocab;
  alignas(64) float buffer[kBlock];
  float lane[kLanes];
  for (float& v : lane) v = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < vocab; b += kBlock) {
    const int64_t n = std::min(kBlock, vocab - b);
    Maximum(Values(logits, base + b, n, buffer), n, lane);
  }
  float m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  for (int64_t b = 0; b < vocab; b += kBlock) {
    const int64_t n = std::min(kBlock, vocab - b);
    const int64_t i = FirstEqual(Values(logits, base + b, n, buffer), n, m);
    if (i < n) return static_cast<int32_t>(b + i);
  }
  return 0;
}

bool FastGreedyArgmax(const OpCall& call) {
  const Tensor& logits = call.inputs[0];
  int32_t* out = call.outputs[0].data_as<int32_t>();
  ParallelFor(logits.dim(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) out[r] = RowArgmax(logits, r);
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("greedy_argmax", DeviceType::kCPU, ProviderTier::kFast, FastGreedyArgmax);

}  // namespace metalrt::cpu::fast
