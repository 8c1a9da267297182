// QuantizeRowsQ8 on AVX-512 (compiled with -mavx512f -mavx512bw, fast.cmake; called
// only where SelectedGemvIsa() is avx512_vnni). A block's 32 values are two 16-lane
// vectors, one per half, so each half's code sum is one reduction. Every step is the
// scalar definition's IEEE operation in the same order (a division, not a reciprocal;
// the product and difference of the residual apart, the target builds with
// -ffp-contract=off), so the blocks are byte-identical to QuantizeRowsQ8's: the
// scalar loop did not vectorise and took ~150 ns a block, a few percent of a decode
// step spent on one thread while the pool's other threads waited.
#include "cpu/fast/gemv/q8_activation.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

namespace metalrt::cpu::fast {
namespace {

// round half away from zero of v clamped to [-127, 127], truncated to int32 (Code in
// q8_activation.cpp).
inline __m512i Codes(__m512 v) {
  const __m512 limit = _mm512_set1_ps(127.0f);
  v = _mm512_max_ps(_mm512_min_ps(v, limit), _mm512_sub_ps(_mm512_setzero_ps(), limit));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int32_t(0x80000000u)));
  const __m512 half = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(0.5f)), sign));
  return _mm512_cvttps_epi32(_mm512_add_ps(v, half));
}

}  // namespace

bool QuantizeRowsQ8Avx512(const float* x, int64_t rows, int64_t k, Q8Block* blocks) {
  const int64_t count = rows * (k / 32);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (int64_t b = 0; b < count; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const __m512i a0 = _mm512_and_si512(_mm512_castps_si512(v0), magnitude);
    const __m512i a1 = _mm512_and_si512(_mm512_castps_si512(v1), magnitude);
    const __m512i amax_bits = _mm512_max_epu32(a0, a1);
    if (_mm512_cmpge_epu32_mask(amax_bits, inf)) return false;   // a NaN or an infinity
    const uint32_t bits = static_cast<uint32_t>(_mm512_reduce_max_epu32(amax_bits));
    float amax;
    std::memcpy(&amax, &bits, 4);
    Q8Block& out = blocks[b];
    float step;
    if (!BlockStep(amax, &out, &step)) continue;
    const __m512 vstep = _mm512_set1_ps(step), vd = _mm512_set1_ps(out.d);
    const __m512i steps = _mm512_set1_epi32(kResidualSteps);
    int32_t sum[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 v = h == 0 ? v0 : v1;
      const __m512i q = Codes(_mm512_div_ps(v, vstep));
      const __m512 residual = _mm512_sub_ps(v, _mm512_mul_ps(vstep, _mm512_cvtepi32_ps(q)));
      const __m512i r = Codes(_mm512_div_ps(residual, vd));
      const __m512i c = _mm512_add_epi32(_mm512_mullo_epi32(q, steps), r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q + 16 * h), _mm512_cvtepi32_epi8(q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.r + 16 * h), _mm512_cvtepi32_epi8(r));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.c + 16 * h), _mm512_cvtepi32_epi16(c));
      sum[h] = _mm512_reduce_add_epi32(c);
    }
    out.sum[0] = sum[0];
    out.sum[1] = sum[1];
    out.dsum = out.d * float(sum[0] + sum[1]);
  }
  return true;
}

}  // namespace metalrt::cpu::fast
#endif
